/* golden/probe.h - layer probes: how far model B's hidden states drift from
 * model A's on a text, per layer and per tensor output, and the KL
 * divergence of the final logits (`kiln diff --activations A B -f TEXT`,
 * also spelled `kiln golden --layers`).
 *
 * A and B must be the same network (architecture, tensor names and shapes,
 * vocabulary: fingerprint.h's layout) stored differently, typically F16 and
 * a quantization of it. Both are evaluated on the SAME tokens in lockstep:
 * one batch through A with the runtime's observers capturing every matrix
 * product's output and every block's residual stream, then the same batch
 * through B, each of B's outputs compared with A's capture as it arrives.
 * Only one batch's captures are held, never the whole text's.
 *
 * The text is cut as llama-perplexity cuts it (perplexity.h): tokenized
 * once with BOS, chunks of n_ctx tokens, each from an empty cache with its
 * first token replaced by BOS, F16 KV cache and flash attention. Every
 * position is probed; the KL divergence is over the positions perplexity
 * scores (the second half of each chunk), so it equals `kiln perplexity
 * --kl-divergence` with a base saved from A on the same text and context.
 *
 * What not: no per-token or per-channel breakdown (the sums are per
 * (layer, tensor)), and nothing is written to disk. */
#ifndef KILN_PROBE_H
#define KILN_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "../runtime/runtime.h"
#include "fingerprint.h"
#include "kld.h"

/* The sums of one (layer, tensor) over every value compared, in double,
 * added in a fixed order (so results do not depend on the thread count). */
typedef struct kiln_probe_sums {
    double ab, aa, bb, dd; /* sum a*b, a*a, b*b, (a-b)^2 */
    uint64_t n;            /* values */
} kiln_probe_sums;

/* Adds n pairs (a[i], b[i]) in index order. */
void kiln_probe_sums_add(kiln_probe_sums *s, const float *a, const float *b, int64_t n);
/* s += t. */
void kiln_probe_sums_merge(kiln_probe_sums *s, const kiln_probe_sums *t);
/* Cosine similarity ab / sqrt(aa bb): exactly 1 when B equals A; 1 when
 * both are all zeros, 0 when only one is. */
double kiln_probe_cosine(const kiln_probe_sums *s);
/* Relative RMS ||b - a|| / ||a|| = sqrt(dd / aa): exactly 0 when B equals
 * A; infinity when A is all zeros and B is not. */
double kiln_probe_rel_rms(const kiln_probe_sums *s);

/* One row of the report. */
typedef struct kiln_probe_stat {
    int64_t layer;         /* block index; n_layer for the output projection */
    char tensor[48];       /* "attn_q", "ffn_down_exps" (all experts), "residual"
                            * (the stream after the block), "output" */
    kiln_probe_sums sums;
    uint64_t n_rows;       /* token rows compared */
    uint64_t n_unmatched;  /* expert tensors: (token, expert) rows that only
                            * one model routed, left out of the sums */
} kiln_probe_stat;

typedef struct kiln_probe_params {
    const char *path_a, *path_b; /* for messages */
    int64_t n_ctx;         /* tokens per chunk; 0: 512, or the text's length when shorter */
    int64_t n_batch;       /* tokens per step (0: n_ctx); at most n_ctx and 512 */
    int64_t n_chunks;      /* <= 0: every chunk */
    kiln_numeric_mode mode;
    void (*on_chunk)(void *user, int64_t chunk, int64_t n_chunks); /* chunk is 1-based */
    void *user;
} kiln_probe_params;

typedef struct kiln_probe_result {
    kiln_probe_stat *stats;  /* layer by layer, each layer's products in the
                              * order the forward pass runs them, then its
                              * residual; the output last */
    size_t n_stats;
    int64_t n_layer, n_ctx, n_batch, n_chunks;
    int64_t n_text_tokens, n_tokens; /* the text's, and evaluated (n_chunks * n_ctx) */
    kiln_cmp_summary kld;    /* final logits, B against A, scored positions */
    json_t *model_a, *model_b; /* fingerprints */
    kiln_fp_relation relation; /* same weights or requantized */
    uint64_t capture_bytes;  /* the most bytes one batch's captures took */
    double seconds;
} kiln_probe_result;

/* Checks that a and b are the same network: returns 0 and sets the
 * fingerprints in *r, or -1 with a one-line error naming both files. No
 * model is evaluated. kiln_probe_run calls it first. */
int kiln_probe_check_pair(const kiln_model *a, const kiln_model *b, const kiln_probe_params *p,
                          kiln_probe_result *r, kiln_err *err);

/* Probes `text` (len bytes) through a and b. Fills *r (free with
 * kiln_probe_result_free, also after a failure). Returns 0 or -1 with err
 * set (different networks, an empty text, a context too large, out of
 * memory). */
int kiln_probe_run(const kiln_model *a, const kiln_model *b, const char *text, size_t len,
                   const kiln_probe_params *p, kiln_probe_result *r, kiln_err *err);

void kiln_probe_result_free(kiln_probe_result *r);

/* Indices of the stats with the largest rel_rms (excluding residuals), and
 * of the residual whose rel_rms rose most over the previous layer's (the
 * first layer's over 0); -1 when there is none. */
int64_t kiln_probe_worst_output(const kiln_probe_result *r);
int64_t kiln_probe_largest_jump(const kiln_probe_result *r, double *jump);

/* The report as JSON, schema "kiln.activations/1" (see README), or NULL
 * when out of memory. The caller decrefs. */
json_t *kiln_probe_json(const kiln_probe_result *r);

#endif
