/* codec/q4_1.c - Q4_1: 32 weights as 4-bit levels times one fp16 scale
 * plus one fp16 minimum (block layout in blocks_legacy.h), and the
 * quantizer Q5_1 shares with it (kiln_legacy1_quantize: the same level
 * search with a different nmax).
 *
 * Without an imatrix the levels are ggml's quantize_row_q4_1_ref: the
 * block's range [min, max] split into nmax steps, d = (max - min) / nmax,
 * m = min, each level (x - min) / d + 0.5 truncated. With one, ggml's
 * quantize_row_q4_1_impl: kiln_make_qkx3_quants weighted by
 * imatrix * sqrt(sigma2 + x^2). Scalar only: a block is a handful of
 * operations and the imatrix search dominates when it runs. */
#include "blocks.h"
#include "quants.h"
#include "search.h"

#include "../core/fp16.h"

#include <float.h>
#include <math.h>

/* ggml casts x + 0.5f straight to a byte type: on x86 a truncating
 * float -> int32 conversion (cvttss2si, which gives INT32_MIN for NaN
 * and out-of-range values) of which the low byte is kept. */
static inline int32_t trunc_i32(float f) {
    return f > -2147483648.f && f < 2147483648.f ? (int32_t)f : INT32_MIN;
}

static void levels_ref(const float *x, int nmax, uint8_t *L, float *d_out, float *m_out) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < KILN_QK; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / nmax;
    const float id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < KILN_QK; j++) {
        int q = (int8_t)trunc_i32((x[j] - min) * id + 0.5f);
        /* ggml clips Q4_1's levels at 15 (as a signed byte) and leaves
         * Q5_1's alone; rounding never goes past nmax for finite input */
        if (nmax == 15 && q > 15) q = 15;
        L[j] = (uint8_t)q;
    }
    *d_out = d;
    *m_out = min;
}

typedef struct legacy1_ctx {
    int nmax;
    kiln_legacy1_pack_fn pack;
    float sigma2; /* the row's mean x^2, for the imatrix weights */
} legacy1_ctx;

static void legacy1_block(const float *x, const float *qw, void *y, const void *ctx) {
    const legacy1_ctx *c = ctx;
    uint8_t L[KILN_QK];
    float d, m;
    if (qw) {
        float weight[KILN_QK], neg_min;
        kiln_importance_weights(KILN_QK, x, qw, c->sigma2, weight);
        d = kiln_make_qkx3_quants(KILN_QK, c->nmax, x, weight, L, &neg_min, NULL, -0.9f, 0.05f, 36, false);
        m = -neg_min;
    } else {
        levels_ref(x, c->nmax, L, &d, &m);
    }
    c->pack(d, m, L, y);
}

size_t kiln_legacy1_quantize(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                             const float *imatrix, int nmax, kiln_legacy1_pack_fn pack,
                             size_t block_bytes) {
    legacy1_ctx c = {nmax, pack, 0};
    if (!imatrix)
        return kiln_quantize_blocks(src, dst, nrows, n_per_row, NULL, KILN_QK, block_bytes,
                                    legacy1_block, &c);
    return kiln_quantize_rows_sigma2(src, dst, nrows, n_per_row, imatrix, KILN_QK, block_bytes, legacy1_block, &c,
                                     &c.sigma2);
}

/* A kiln_legacy1_pack_fn: d, m, then the nibbles as in Q4_0. */
static void q4_1_pack(float d, float m, const uint8_t *L, void *dst) {
    kiln_block_q4_1 *y = dst;
    y->d = kiln_fp32_to_fp16(d);
    y->m = kiln_fp32_to_fp16(m);
    kiln_pack_nibbles(L, y->qs);
}

void kiln_dequantize_row_q4_1(const void *src, float *dst, int64_t n) {
    const kiln_block_q4_1 *x = src;
    for (int64_t i = 0; i < n / KILN_QK; i++, dst += KILN_QK) {
        const float d = kiln_fp16_to_fp32(x[i].d), m = kiln_fp16_to_fp32(x[i].m);
        for (int j = 0; j < KILN_QK / 2; j++) {
            /* ggml's x * d + m, unfused (the build has -ffp-contract=off) */
            dst[j] = (x[i].qs[j] & 15) * d + m;
            dst[j + 16] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

void kiln_quantize_row_q4_1_ref(const float *src, void *dst, int64_t n) {
    kiln_legacy1_quantize(src, dst, 1, n, NULL, 15, q4_1_pack, sizeof(kiln_block_q4_1));
}

size_t kiln_quantize_q4_1(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix) {
    return kiln_legacy1_quantize(src, dst, nrows, n_per_row, imatrix, 15, q4_1_pack,
                                 sizeof(kiln_block_q4_1));
}
