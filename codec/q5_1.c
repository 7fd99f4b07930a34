/* codec/q5_1.c - Q5_1: 32 weights as 5-bit levels times one fp16 scale
 * plus one fp16 minimum (block layout in blocks_legacy.h).
 *
 * The quantizer is Q4_1's with nmax = 31 (kiln_legacy1_quantize in
 * q4_1.c, ggml's quantize_row_q5_1_ref / q5_1_impl); this file only
 * splits each level into a low nibble and a fifth bit, as Q5_0 does, and
 * back. */
#include "blocks.h"
#include "quants.h"

#include "../core/fp16.h"

/* A kiln_legacy1_pack_fn: d, m, bit 4 of level j in bit j of qh (stored
 * little-endian byte by byte), low nibbles as in Q4_0. */
static void q5_1_pack(float d, float m, const uint8_t *L, void *dst) {
    kiln_block_q5_1 *y = dst;
    uint32_t qh = 0;
    y->d = kiln_fp32_to_fp16(d);
    y->m = kiln_fp32_to_fp16(m);
    kiln_pack_nibbles(L, y->qs);
    for (int j = 0; j < KILN_QK; j++) qh |= (uint32_t)((L[j] >> 4) & 1) << j;
    for (int k = 0; k < 4; k++) y->qh[k] = (uint8_t)(qh >> (8 * k));
}

void kiln_dequantize_row_q5_1(const void *src, float *dst, int64_t n) {
    const kiln_block_q5_1 *x = src;
    for (int64_t i = 0; i < n / KILN_QK; i++, dst += KILN_QK) {
        const float d = kiln_fp16_to_fp32(x[i].d), m = kiln_fp16_to_fp32(x[i].m);
        const uint32_t qh = x[i].qh[0] | (uint32_t)x[i].qh[1] << 8 | (uint32_t)x[i].qh[2] << 16 |
                            (uint32_t)x[i].qh[3] << 24;
        for (int j = 0; j < KILN_QK / 2; j++) {
            const int q0 = (x[i].qs[j] & 15) | ((qh >> j) & 1) << 4;
            const int q1 = (x[i].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
            dst[j] = q0 * d + m;
            dst[j + 16] = q1 * d + m;
        }
    }
}

void kiln_quantize_row_q5_1_ref(const float *src, void *dst, int64_t n) {
    kiln_legacy1_quantize(src, dst, 1, n, NULL, 31, q5_1_pack, sizeof(kiln_block_q5_1));
}

size_t kiln_quantize_q5_1(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix) {
    return kiln_legacy1_quantize(src, dst, nrows, n_per_row, imatrix, 31, q5_1_pack,
                                 sizeof(kiln_block_q5_1));
}
