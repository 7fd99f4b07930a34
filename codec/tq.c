/* codec/tq.c - TQ1_0 and TQ2_0, the ternary formats (layouts in
 * blocks_tq.h): every weight becomes -d, 0 or +d, d the largest |x| of
 * its 256, rounded as ggml's quantize_row_tq1_0_ref / _tq2_0_ref do
 * (lroundf of x / d, ties away from zero). There is no search, so no
 * importance matrix either: ggml's quantize_tq1_0 / _tq2_0 ignore one,
 * and so do these (the row reference is the same call). The two formats
 * share the trits and differ in the packing. */
#include "blocks.h"
#include "quants.h"

#include "../core/fp16.h"

#include <math.h>

/* The block's scale d (its largest |x|, stored as fp16) and the trits
 * t[p] = round(x[p] / d) + 1 in 0..2 that both formats pack. */
static kiln_half ternary_trits(const float *x, uint8_t t[KILN_QK_K]) {
    float amax = 0;
    for (int j = 0; j < KILN_QK_K; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    /* the reciprocal, then a product, as ggml: not x / d */
    const float id = amax ? 1.0f / amax : 0.0f;
    /* lroundf of x * id, which lies in [-1 - eps, 1 + eps]: halves round
     * away from zero, so the comparisons give its very result without a
     * libm call per weight (a third of TQ quantization's time) */
    for (int j = 0; j < KILN_QK_K; j++) {
        const float v = x[j] * id;
        t[j] = (uint8_t)(v >= 0.5f ? 2 : v <= -0.5f ? 0 : 1);
    }
    return kiln_fp32_to_fp16(amax);
}

/* n trits (t[0] the most significant) as one byte: their base-3 value
 * v < 3^5 scaled to ceil(256 * v / 243), so that the decoder reads trit
 * k back with a multiply by 3^k and the top bits of a multiply by 3. */
static uint8_t pack_trits(const uint8_t *t, int stride, int n) {
    unsigned v = 0;
    for (int k = 0; k < n; k++) v = v * 3 + t[k * stride];
    for (int k = n; k < 5; k++) v *= 3; /* qh: the first trit to the top */
    return (uint8_t)((v * 256 + 242) / 243);
}

/* Trit k of a packed byte (k = 0 the most significant). */
static inline int unpack_trit(uint8_t q, int k) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t r = (uint8_t)(q * pow3[k]);
    return (r * 3) >> 8;
}

static void tq1_block(const float *x, const float *qw, void *dst, const void *ctx) {
    (void)qw, (void)ctx;
    kiln_block_tq1_0 *y = dst;
    uint8_t t[KILN_QK_K];
    y->d = ternary_trits(x, t);
    for (int m = 0; m < 32; m++) y->qs[m] = pack_trits(t + m, 32, 5);
    for (int m = 0; m < 16; m++) y->qs[32 + m] = pack_trits(t + 160 + m, 16, 5);
    for (int j = 0; j < 4; j++) y->qh[j] = pack_trits(t + 240 + j, 4, 4);
}

static void tq2_block(const float *x, const float *qw, void *dst, const void *ctx) {
    (void)qw, (void)ctx;
    kiln_block_tq2_0 *y = dst;
    uint8_t t[KILN_QK_K];
    y->d = ternary_trits(x, t);
    for (int c = 0; c < 2; c++)
        for (int m = 0; m < 32; m++) {
            const uint8_t *tc = t + 128 * c + m;
            y->qs[32 * c + m] = (uint8_t)(tc[0] | tc[32] << 2 | tc[64] << 4 | tc[96] << 6);
        }
}

void kiln_dequantize_row_tq1_0(const void *src, float *dst, int64_t n) {
    const kiln_block_tq1_0 *x = src;
    for (int64_t i = 0; i < n / KILN_QK_K; i++, dst += KILN_QK_K) {
        const float d = kiln_fp16_to_fp32(x[i].d);
        for (int k = 0; k < 5; k++)
            for (int m = 0; m < 32; m++) dst[32 * k + m] = (float)(unpack_trit(x[i].qs[m], k) - 1) * d;
        for (int k = 0; k < 5; k++)
            for (int m = 0; m < 16; m++) dst[160 + 16 * k + m] = (float)(unpack_trit(x[i].qs[32 + m], k) - 1) * d;
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 4; j++) dst[240 + 4 * k + j] = (float)(unpack_trit(x[i].qh[j], k) - 1) * d;
    }
}

void kiln_dequantize_row_tq2_0(const void *src, float *dst, int64_t n) {
    const kiln_block_tq2_0 *x = src;
    for (int64_t i = 0; i < n / KILN_QK_K; i++, dst += KILN_QK_K) {
        const float d = kiln_fp16_to_fp32(x[i].d);
        for (int p = 0; p < KILN_QK_K; p++) {
            const int t = (x[i].qs[32 * (p / 128) + p % 32] >> 2 * (p / 32 % 4)) & 3;
            dst[p] = (float)(t - 1) * d;
        }
    }
}

size_t kiln_quantize_tq1_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row, const float *imatrix) {
    (void)imatrix; /* ggml's quantize_tq1_0 has no use for one */
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, NULL, KILN_QK_K, sizeof(kiln_block_tq1_0), tq1_block,
                                NULL);
}

size_t kiln_quantize_tq2_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row, const float *imatrix) {
    (void)imatrix;
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, NULL, KILN_QK_K, sizeof(kiln_block_tq2_0), tq2_block,
                                NULL);
}

void kiln_quantize_row_tq1_0_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_tq1_0(src, dst, 1, n, NULL);
}

void kiln_quantize_row_tq2_0_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_tq2_0(src, dst, 1, n, NULL);
}
