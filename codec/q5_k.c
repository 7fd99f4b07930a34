/* codec/q5_k.c - the Q5_K codec (block layout in blocks_k.h): 5-bit
 * levels with a 6-bit scale and min per 32 weights.
 *
 * Q4_K's layout plus a fifth bit per weight in qh; the scale search, 6-bit
 * packing and dequantization are shared with Q4_K in kscales.c. Without an
 * imatrix the search is ggml's quantize_row_q5_K_ref, with one it is
 * ggml's quantize_row_q5_K_impl, so blocks match llama.cpp's. */
#include "quants.h"

#include "blocks.h"
#include "kscales.h"

#include <string.h>

/* ggml's step grid for the reference search of 5-bit levels */
static const kiln_kscale_ref Q5K_REF = {-0.5f, 15};

static void quantize_block(const float *x, const float *qw, void *dst, const void *ctx) {
    kiln_block_q5_k *y = dst;
    uint8_t L[KILN_QK_K];
    kiln_kscale_block(x, qw, 31, Q5K_REF, &y->d, &y->dmin, y->scales, L);
    /* low nibbles as in Q4_K; the fifth bit of weight 32b + l is bit b of qh[l] */
    memset(y->qh, 0, sizeof y->qh);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
            y->qs[32 * c + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
            y->qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
        }
}

void kiln_dequantize_row_q5_k(const void *src, float *dst, int64_t n) {
    const kiln_block_q5_k *b = src;
    for (int64_t i = 0; i < n / KILN_QK_K; i++)
        kiln_kscale_dequant(b[i].d, b[i].dmin, b[i].scales, b[i].qs, b[i].qh, dst + i * KILN_QK_K);
}

void kiln_quantize_row_q5_k_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_blocks(src, dst, 1, n, NULL, KILN_QK_K, sizeof(kiln_block_q5_k), quantize_block,
                         NULL);
}

size_t kiln_quantize_q5_k(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix) {
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK_K,
                                sizeof(kiln_block_q5_k), quantize_block, NULL);
}
