/* codec/quants.h - prototypes of every codec's entry points, and the
 * plumbing every codec file would otherwise write again: the loop over
 * rows and blocks, the instruction sets of the SIMD variants, and the pick
 * of the variant to run.
 *
 * One block of three prototypes per format, in ggml's naming scheme (see
 * codec.h). The block structs and their byte diagrams live in blocks.h; the
 * scale searches the codecs share live in search.h. */
#ifndef KILN_QUANTS_H
#define KILN_QUANTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../core/cpu.h"

#define KILN_QUANT_FNS(x)                                                           \
    void kiln_dequantize_row_##x(const void *src, float *dst, int64_t n);           \
    void kiln_quantize_row_##x##_ref(const float *src, void *dst, int64_t n);       \
    size_t kiln_quantize_##x(const float *src, void *dst, int64_t nrows,           \
                             int64_t n_per_row, const float *imatrix);

void kiln_dequantize_row_f32(const void *src, float *dst, int64_t n);
void kiln_dequantize_row_f16(const void *src, float *dst, int64_t n);
void kiln_dequantize_row_bf16(const void *src, float *dst, int64_t n);
size_t kiln_quantize_f32(const float *, void *, int64_t, int64_t, const float *);
size_t kiln_quantize_f16(const float *, void *, int64_t, int64_t, const float *);
size_t kiln_quantize_bf16(const float *, void *, int64_t, int64_t, const float *);

KILN_QUANT_FNS(q8_0)
KILN_QUANT_FNS(q4_0)
KILN_QUANT_FNS(q5_0)
KILN_QUANT_FNS(q4_1)
KILN_QUANT_FNS(q5_1)
KILN_QUANT_FNS(iq4_nl)
KILN_QUANT_FNS(iq4_xs)
KILN_QUANT_FNS(iq3_xxs)
KILN_QUANT_FNS(iq3_s)
KILN_QUANT_FNS(q2_k)
KILN_QUANT_FNS(q3_k)
KILN_QUANT_FNS(q4_k)
KILN_QUANT_FNS(q5_k)
KILN_QUANT_FNS(q6_k)
KILN_QUANT_FNS(q8_k)
KILN_QUANT_FNS(iq2_xxs)
KILN_QUANT_FNS(iq2_xs) /* kiln_quantize_iq2_xs needs the imatrix, as ggml's */
KILN_QUANT_FNS(iq2_s)
KILN_QUANT_FNS(iq1_s) /* kiln_quantize_iq1_s needs the imatrix, as ggml's */
KILN_QUANT_FNS(iq1_m)
KILN_QUANT_FNS(tq1_0)
KILN_QUANT_FNS(tq2_0)
KILN_QUANT_FNS(mxfp4)
KILN_QUANT_FNS(q1_0)
KILN_QUANT_FNS(q2_0)
size_t kiln_quantize_iq2_xxs_ggml(const float *, void *, int64_t, int64_t, const float *); /* llama.cpp's bytes */

/* kiln's own Q2_K imatrix search (q2_k.c): ggml's blocks, each replaced
 * when a finer search lowers its imatrix-weighted error. Not in the codec
 * table (its bytes are not llama.cpp's); without an imatrix it is
 * kiln_quantize_q2_k. Returns the bytes written. */
size_t kiln_quantize_q2_k_refined(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                                  const float *imatrix);

/* Quantizes one block: x its weights, qw its slice of the imatrix (NULL
 * without one), y the block to write, ctx whatever the codec passed to
 * kiln_quantize_blocks. */
typedef void (*kiln_block_quantizer)(const float *x, const float *qw, void *y, const void *ctx);

/* Quantizes nrows rows of n_per_row weights (a multiple of block_weights)
 * block by block, in order, into consecutive blocks of block_bytes each;
 * block i of a row gets imatrix + i * block_weights, or NULL when imatrix is
 * NULL. Returns the bytes written. A row reference quantizer is the call
 * with nrows = 1 and no imatrix. Inline, so that each codec's call compiles
 * to its own loop with a direct call of its block function, which the
 * compiler may then inline. */
static inline size_t kiln_quantize_blocks(const float *src, void *dst, int64_t nrows,
                                          int64_t n_per_row, const float *imatrix,
                                          int block_weights, size_t block_bytes,
                                          kiln_block_quantizer quantize_block, const void *ctx) {
    int64_t nb = n_per_row / block_weights;
    uint8_t *y = (uint8_t *)dst;
    for (int64_t r = 0; r < nrows; r++)
        for (int64_t i = 0; i < nb; i++, src += block_weights, y += block_bytes)
            quantize_block(src, imatrix ? imatrix + i * block_weights : NULL, y, ctx);
    return (size_t)(nrows * nb) * block_bytes;
}

/* What a grid codec returns when its search tables could not be built
 * (out of memory): nothing sensible to write, so dst (nrows rows of
 * n_per_row / block_weights blocks) is zeroed and 0 bytes are reported. */
static inline size_t kiln_quantize_nothing(void *dst, int64_t nrows, int64_t n_per_row, int block_weights,
                                           size_t block_bytes) {
    memset(dst, 0, (size_t)(nrows * (n_per_row / block_weights)) * block_bytes);
    return 0;
}

/* ggml's imatrix quantizers of the legacy types (Q4_0, Q4_1, Q5_0, Q5_1)
 * weight every block by the mean x^2 of its whole row: this quantizes row
 * by row, first storing that mean (summed in ggml's order) in *sigma2,
 * where the codec's block function finds it through ctx. Returns the bytes
 * written. */
static inline size_t kiln_quantize_rows_sigma2(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                                               const float *imatrix, int block_weights, size_t block_bytes,
                                               kiln_block_quantizer quantize_block, const void *ctx,
                                               float *sigma2) {
    uint8_t *y = (uint8_t *)dst;
    size_t row_bytes = (size_t)(n_per_row / block_weights) * block_bytes;
    for (int64_t r = 0; r < nrows; r++, src += n_per_row, y += row_bytes) {
        float sum_x2 = 0;
        for (int64_t j = 0; j < n_per_row; j++) sum_x2 += src[j] * src[j];
        *sigma2 = sum_x2 / n_per_row;
        kiln_quantize_blocks(src, y, 1, n_per_row, imatrix, block_weights, block_bytes, quantize_block, ctx);
    }
    return (size_t)nrows * row_bytes;
}

/* The instruction sets the AVX2 and AVX-512 variants of a kernel are
 * compiled for: what kiln_simd() checks before it reports each level. The
 * AVX-512 set includes the AVX2 one so that AVX2 helpers inline into it. */
#if defined(__x86_64__)
#include <immintrin.h>
#define KILN_X86 1
#define KILN_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KILN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#endif

/* The variant of kernel `name` for the SIMD level kiln_simd() allows:
 * name_avx512, name_avx2 or name_scalar (all with the same signature).
 * Off x86 only name_scalar has to exist. */
#ifdef KILN_X86
#define KILN_SIMD_PICK(name)                                                                   \
    (kiln_simd() >= KILN_SIMD_AVX512 ? name##_avx512                                          \
     : kiln_simd() >= KILN_SIMD_AVX2 ? name##_avx2                                            \
                                     : name##_scalar)
#else
#define KILN_SIMD_PICK(name) (name##_scalar)
#endif

#endif
