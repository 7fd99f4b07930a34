/* codec/mxfp4.c - MXFP4 (layout in blocks_fp4.h, values in fp4.h): 32
 * weights as E2M1 codes under one E8M0 power-of-two scale, as ggml's
 * quantize_row_mxfp4_ref makes them: e from the block's largest |x|
 * (kiln_e8m0_of_amax), then each weight the code nearest x at that scale.
 * ggml's quantize_mxfp4 ignores an importance matrix, and so does this
 * (the row reference is the same call). */
#include "blocks.h"
#include "fp4.h"
#include "quants.h"

#include <math.h>

static void mxfp4_block(const float *x, const float *qw, void *dst, const void *ctx) {
    (void)qw, (void)ctx;
    kiln_block_mxfp4 *y = dst;
    float amax = 0;
    for (int j = 0; j < KILN_QK; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]);
    y->e = kiln_e8m0_of_amax(amax);
    const float d = kiln_e8m0_to_fp32_half(y->e);
    for (int j = 0; j < KILN_QK / 2; j++)
        y->qs[j] = (uint8_t)(kiln_e2m1_nearest(x[j], d) | kiln_e2m1_nearest(x[j + KILN_QK / 2], d) << 4);
}

void kiln_dequantize_row_mxfp4(const void *src, float *dst, int64_t n) {
    const kiln_block_mxfp4 *x = src;
    for (int64_t i = 0; i < n / KILN_QK; i++, dst += KILN_QK) {
        const float d = kiln_e8m0_to_fp32_half(x[i].e);
        for (int j = 0; j < KILN_QK / 2; j++) {
            dst[j] = kiln_e2m1_doubled[x[i].qs[j] & 15] * d;
            dst[j + KILN_QK / 2] = kiln_e2m1_doubled[x[i].qs[j] >> 4] * d;
        }
    }
}

size_t kiln_quantize_mxfp4(const float *src, void *dst, int64_t nrows, int64_t n_per_row, const float *imatrix) {
    (void)imatrix; /* ggml's quantize_mxfp4 has no use for one */
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, NULL, KILN_QK, sizeof(kiln_block_mxfp4), mxfp4_block,
                                NULL);
}

void kiln_quantize_row_mxfp4_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_mxfp4(src, dst, 1, n, NULL);
}
