/* codec/q1_q2.c - Q1_0 and Q2_0 (layouts in blocks_tq.h), the small
 * blocks of one and two bits, as ggml's quantize_row_q1_0_ref and
 * quantize_row_q2_0_ref make them: Q1_0 keeps each weight's sign under
 * d = mean |x| (summed in order); Q2_0 rounds x / d (roundf, ties away
 * from zero) to -1..2 under d = the largest |x|. No search: ggml's
 * quantize_q1_0 / _q2_0 take an imatrix only to quantize row by row with
 * the same reference, so the bytes never depend on one, nor here. */
#include "blocks.h"
#include "quants.h"

#include "../core/fp16.h"

#include <math.h>
#include <string.h>

enum { QK1 = 128, QK2 = 64 };

/* Each weight's sign as one bit, eight weights to a byte, lowest bit first
 * (-0 counts as positive, as in ggml). */
static void q1_signs(const float *x, kiln_block_q1_0 *y) {
    for (int b = 0; b < QK1 / 8; b++) {
        unsigned v = 0;
        for (int k = 0; k < 8; k++) v |= (unsigned)(x[8 * b + k] >= 0.0f) << k;
        y->qs[b] = (uint8_t)v;
    }
}

/* Q1_0 blocks, Q1_GROUP at a time. ggml sums each block's |x| in order, a
 * chain of 128 dependent additions; summing Q1_GROUP blocks side by side
 * keeps every block's chain (and so its bits) as it is while the additions
 * of different blocks overlap. */
enum { Q1_GROUP = 8 };

static void q1_blocks(const float *x, kiln_block_q1_0 *y, int64_t n_blocks) {
    int64_t i = 0;
    for (; i + Q1_GROUP <= n_blocks; i += Q1_GROUP) {
        float sum_abs[Q1_GROUP] = {0};
        for (int j = 0; j < QK1; j++)
            for (int g = 0; g < Q1_GROUP; g++) sum_abs[g] += fabsf(x[(i + g) * QK1 + j]);
        for (int g = 0; g < Q1_GROUP; g++) {
            y[i + g].d = kiln_fp32_to_fp16(sum_abs[g] / QK1);
            q1_signs(x + (i + g) * QK1, &y[i + g]);
        }
    }
    for (; i < n_blocks; i++) {
        float sum_abs = 0;
        for (int j = 0; j < QK1; j++) sum_abs += fabsf(x[i * QK1 + j]);
        y[i].d = kiln_fp32_to_fp16(sum_abs / QK1);
        q1_signs(x + i * QK1, &y[i]);
    }
}

/* ggml's clamp((int)roundf(v) + 1, 0, 3) by comparisons, without a libm
 * call per weight: roundf rounds halves away from zero, so -1.5 and 1.5 are
 * the thresholds of the outer levels and -0.5 and 0.5 of the middle ones
 * (inputs are finite: kiln quantize refuses NaN and infinities first). */
static inline int q2_level(float v) {
    return (v > -0.5f) + (v >= 0.5f) + (v >= 1.5f); /* a sum, not branches: the signs are random */
}

static void q2_block(const float *x, const float *qw, void *dst, const void *ctx) {
    (void)qw, (void)ctx;
    kiln_block_q2_0 *y = dst;
    /* the largest |x| in eight interleaved parts: a maximum of finite
     * values does not depend on the order it is taken in */
    float part[8] = {0};
    for (int j = 0; j < QK2; j += 8)
        for (int k = 0; k < 8; k++) part[k] = fabsf(x[j + k]) > part[k] ? fabsf(x[j + k]) : part[k];
    float amax = 0;
    for (int k = 0; k < 8; k++) amax = part[k] > amax ? part[k] : amax;
    const float id = amax > 0.0f ? 1.0f / amax : 0.0f;
    y->d = kiln_fp32_to_fp16(amax);
    for (int b = 0; b < QK2 / 4; b++) {
        unsigned v = 0;
        for (int k = 0; k < 4; k++) {
            v |= (unsigned)q2_level(x[4 * b + k] * id) << 2 * k;
        }
        y->qs[b] = (uint8_t)v;
    }
}

void kiln_dequantize_row_q1_0(const void *src, float *dst, int64_t n) {
    const kiln_block_q1_0 *x = src;
    for (int64_t i = 0; i < n / QK1; i++, dst += QK1) {
        /* d or -d by flipping d's sign bit where the weight's bit is 0:
         * no branch on the (random) bits */
        const float d = kiln_fp16_to_fp32(x[i].d);
        uint32_t d_bits;
        memcpy(&d_bits, &d, sizeof d_bits);
        for (int b = 0; b < QK1 / 8; b++)
            for (int k = 0; k < 8; k++) {
                uint32_t v = d_bits ^ (uint32_t)(~x[i].qs[b] >> k & 1) << 31;
                memcpy(&dst[8 * b + k], &v, sizeof v);
            }
    }
}

void kiln_dequantize_row_q2_0(const void *src, float *dst, int64_t n) {
    const kiln_block_q2_0 *x = src;
    for (int64_t i = 0; i < n / QK2; i++, dst += QK2) {
        const float d = kiln_fp16_to_fp32(x[i].d);
        for (int b = 0; b < QK2 / 4; b++)
            for (int k = 0; k < 4; k++) dst[4 * b + k] = (float)(((x[i].qs[b] >> 2 * k) & 3) - 1) * d;
    }
}

size_t kiln_quantize_q1_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row, const float *imatrix) {
    (void)imatrix;
    /* a row is whole blocks, so the rows' blocks follow one another */
    int64_t n_blocks = nrows * (n_per_row / QK1);
    q1_blocks(src, dst, n_blocks);
    return (size_t)n_blocks * sizeof(kiln_block_q1_0);
}

size_t kiln_quantize_q2_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row, const float *imatrix) {
    (void)imatrix;
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, NULL, QK2, sizeof(kiln_block_q2_0), q2_block, NULL);
}

void kiln_quantize_row_q1_0_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_q1_0(src, dst, 1, n, NULL);
}

void kiln_quantize_row_q2_0_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_q2_0(src, dst, 1, n, NULL);
}
