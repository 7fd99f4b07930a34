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

static void q1_block(const float *x, const float *qw, void *dst, const void *ctx) {
    (void)qw, (void)ctx;
    kiln_block_q1_0 *y = dst;
    float sum_abs = 0;
    for (int j = 0; j < QK1; j++) sum_abs += fabsf(x[j]);
    y->d = kiln_fp32_to_fp16(sum_abs / QK1);
    memset(y->qs, 0, sizeof y->qs);
    for (int j = 0; j < QK1; j++)
        if (x[j] >= 0.0f) y->qs[j / 8] |= (uint8_t)(1 << j % 8); /* -0 counts as positive, as in ggml */
}

static void q2_block(const float *x, const float *qw, void *dst, const void *ctx) {
    (void)qw, (void)ctx;
    kiln_block_q2_0 *y = dst;
    float amax = 0;
    for (int j = 0; j < QK2; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
    const float id = amax > 0.0f ? 1.0f / amax : 0.0f;
    y->d = kiln_fp32_to_fp16(amax);
    memset(y->qs, 0, sizeof y->qs);
    for (int j = 0; j < QK2; j++) {
        int q = (int)roundf(x[j] * id) + 1;
        q = q < 0 ? 0 : q > 3 ? 3 : q;
        y->qs[j / 4] |= (uint8_t)(q << 2 * (j % 4));
    }
}

void kiln_dequantize_row_q1_0(const void *src, float *dst, int64_t n) {
    const kiln_block_q1_0 *x = src;
    for (int64_t i = 0; i < n / QK1; i++, dst += QK1) {
        const float d = kiln_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK1; j++) dst[j] = x[i].qs[j / 8] >> j % 8 & 1 ? d : -d;
    }
}

void kiln_dequantize_row_q2_0(const void *src, float *dst, int64_t n) {
    const kiln_block_q2_0 *x = src;
    for (int64_t i = 0; i < n / QK2; i++, dst += QK2) {
        const float d = kiln_fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK2; j++) dst[j] = (float)(((x[i].qs[j / 4] >> 2 * (j % 4)) & 3) - 1) * d;
    }
}

size_t kiln_quantize_q1_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row, const float *imatrix) {
    (void)imatrix;
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, NULL, QK1, sizeof(kiln_block_q1_0), q1_block, NULL);
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
