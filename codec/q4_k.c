/* codec/q4_k.c - the Q4_K codec (block layout in blocks_k.h): 4-bit
 * levels with a 6-bit scale and min per 32 weights.
 *
 * The scale search, 6-bit packing and dequantization are shared with Q5_K
 * in kscales.c; this file only places the 4-bit levels. Without an imatrix
 * the reference search is ggml's quantize_row_q4_K_ref, with one it is
 * ggml's quantize_row_q4_K_impl, so blocks match llama.cpp's. */
#include "quants.h"

#include "blocks.h"
#include "kscales.h"

/* ggml's step grid for the reference search of 4-bit levels */
static const kiln_kscale_ref Q4K_REF = {-1.f, 20};

static void quantize_block(const float *x, const float *qw, void *dst, const void *ctx) {
    kiln_block_q4_k *y = dst;
    uint8_t L[KILN_QK_K];
    kiln_kscale_block(x, qw, 15, Q4K_REF, &y->d, &y->dmin, y->scales, L);
    /* weights 64c + l and 64c + 32 + l share byte 32c + l */
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            y->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
}

void kiln_dequantize_row_q4_k(const void *src, float *dst, int64_t n) {
    const kiln_block_q4_k *b = src;
    for (int64_t i = 0; i < n / KILN_QK_K; i++)
        kiln_kscale_dequant(b[i].d, b[i].dmin, b[i].scales, b[i].qs, NULL, dst + i * KILN_QK_K);
}

void kiln_quantize_row_q4_k_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_blocks(src, dst, 1, n, NULL, KILN_QK_K, sizeof(kiln_block_q4_k), quantize_block,
                         NULL);
}

size_t kiln_quantize_q4_k(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix) {
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK_K,
                                sizeof(kiln_block_q4_k), quantize_block, NULL);
}
