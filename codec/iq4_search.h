/* codec/iq4_search.h - the scale search IQ4_NL and IQ4_XS share, defined
 * in iq4_nl.c: ggml's quantize_row_iq4_nl_impl for one 32-weight block
 * (IQ4_NL's whole block, one of IQ4_XS's eight sub-blocks), and the table
 * indices of a block for a given inverse scale. IQ4_XS (iq4_xs.c) adds
 * only what ggml does around the search: the 6-bit sub-block scales under
 * one fp16 super-block scale. */
#ifndef KILN_IQ4_SEARCH_H
#define KILN_IQ4_SEARCH_H

#include <stdbool.h>
#include <stdint.h>

/* What the SIMD paths look up: thr[i] (i >= 1) is the least float whose
 * table index is i or more; val[i] is the table as floats. */
typedef struct kiln_iq4_tables {
    float thr[16];
    float val[16];
} kiln_iq4_tables;

typedef void (*kiln_iq4_cand_sums_fn)(const float *, const float *, const float *, int,
                                      const kiln_iq4_tables *, float *, float *);
typedef void (*kiln_iq4_indices_fn)(float, const float *, const kiln_iq4_tables *, uint8_t *);

/* The kernels of one quantizer call (picked for kiln_simd()), and ntry:
 * 7 for ggml's search (ggml_quantize_chunk), -1 for IQ4_NL's row
 * reference (the first guess only). */
typedef struct kiln_iq4_search {
    kiln_iq4_tables t;
    kiln_iq4_cand_sums_fn cand_sums;
    kiln_iq4_indices_fn indices;
    int ntry;
} kiln_iq4_search;

void kiln_iq4_search_init(kiln_iq4_search *s, int ntry);

/* ggml's scale of one 32-weight block x with weights w (x^2, or the
 * imatrix form): 0 when max |x| < KILN_GROUP_MAX_EPS or when no weight is
 * positive (ggml's sumq2 > 0 ? sumqx / sumq2 : 0, *weighted false then).
 * *id is the inverse scale IQ4_NL takes its indices from: the first
 * guess's for ntry < 0, else 1 / d (0 for d = 0). */
float kiln_iq4_block_scale(const kiln_iq4_search *s, const float *x, const float *w, float *id, bool *weighted);

/* The 32 table indices of x at inverse scale id (ggml's best_index_int8,
 * nearest entry, ties to the upper one). */
static inline void kiln_iq4_indices(const kiln_iq4_search *s, float id, const float *x, uint8_t *L) {
    s->indices(id, x, &s->t, L);
}

#endif
