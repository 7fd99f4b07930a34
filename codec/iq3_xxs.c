/* codec/iq3_xxs.c - the IQ3_XXS codec (3.0625 bits per weight).
 *
 * Block layout: blocks_iq.h. Grid: iq3_tables.h. The group search, shared
 * with IQ3_S: iq3_search.c; the sign split (IQ2_XXS's parity rule):
 * grid_search.c. The quantizer is ggml's
 * quantize_row_iq3_xxs_impl step for step, so its blocks are llama.cpp's
 * byte for byte, with or without an imatrix (ggml accepts both; without
 * one each weight counts x^2). Dequantizing is a table look-up whose
 * products are exact in fp32. */
#include "blocks.h"
#include "iq2_tables.h"
#include "iq3_search.h"
#include "iq3_tables.h"
#include "quants.h"
#include "search.h"

#include "../core/fp16.h"

#include <string.h>

/* ggml's GROUP_MAX_EPS_IQ3_XXS: a group below it is stored as zeros. */
#define GROUP_EPS 1e-8f

void kiln_dequantize_row_iq3_xxs(const void *src, float *y, int64_t n) {
    const kiln_block_iq3_xxs *x = src;
    for (int64_t b = 0; b < n / KILN_QK_K; b++) {
        const float d = kiln_fp16_to_fp32(x[b].d);
        for (int g = 0; g < KILN_QK_K / 32; g++) {
            uint32_t word;
            memcpy(&word, x[b].qs + KILN_QK_K / 4 + 4 * g, 4);
            const float db = d * (0.5f + (float)(word >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++) {
                const uint8_t signs = kiln_iq2_signs[(word >> 7 * l) & 127];
                for (int h = 0; h < 2; h++) {
                    const uint32_t grid = kiln_iq3xxs_grid[x[b].qs[8 * g + 2 * l + h]];
                    for (int j = 0; j < 4; j++)
                        y[4 * h + j] = db * (float)(uint8_t)(grid >> 8 * j) * (signs >> (4 * h + j) & 1 ? -1.f : 1.f);
                }
                y += 8;
            }
        }
    }
}

/* One block (a kiln_block_quantizer; ctx is the kiln_iq3_ctx). */
static void quantize_block(const float *xbl, const float *qw, void *dst, const void *ctx) {
    const kiln_iq3_ctx *c = ctx;
    kiln_block_iq3_xxs *y = dst;
    uint8_t grid[KILN_QK_K / 4];
    uint32_t words[KILN_QK_K / 32];
    float scales[KILN_QK_K / 32], weight[32], waux[32], xval[32];
    memset(grid, 0, sizeof grid);
    memset(words, 0, sizeof words);
    const float sigma2 = kiln_iq3_sigma2(xbl);
    float max_scale = 0;
    for (int ib = 0; ib < KILN_QK_K / 32; ib++) {
        const float *xb = xbl + 32 * ib;
        uint8_t signs[4];
        kiln_iq3_weights(xb, qw ? qw + 32 * ib : NULL, sigma2, weight, waux);
        kiln_grid_split_signs(4, xb, weight, xval, signs);
        float max = xval[0];
        for (int i = 1; i < 32; i++) max = max > xval[i] ? max : xval[i];
        if (max < GROUP_EPS) { /* ggml leaves the group's indices and signs zero */
            scales[ib] = 0;
            continue;
        }
        uint16_t gidx[8];
        float scale = kiln_iq3_search_group(c, xval, max, weight, waux, gidx);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4; k++) signs[k] = (uint8_t)(~signs[k] & 127);
        }
        for (int k = 0; k < 8; k++) grid[8 * ib + k] = (uint8_t)gidx[k];
        words[ib] = (uint32_t)signs[0] | (uint32_t)signs[1] << 7 | (uint32_t)signs[2] << 14 | (uint32_t)signs[3] << 21;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) {
        memset(y, 0, sizeof *y);
        return;
    }
    const float d = max_scale / 31;
    y->d = kiln_fp32_to_fp16(d * 1.0125f); /* ggml's fudge factor */
    const float id = 1 / d;
    for (int ib = 0; ib < KILN_QK_K / 32; ib++) {
        int l = kiln_nearest_int(0.5f * (id * scales[ib] - 1));
        l = l < 0 ? 0 : l > 15 ? 15 : l;
        words[ib] |= (uint32_t)l << 28;
    }
    memcpy(y->qs, grid, sizeof grid);
    memcpy(y->qs + sizeof grid, words, sizeof words);
}

/* llama.cpp's blocks (arguments: quants.h). Returns the bytes written, or
 * 0 with dst zeroed if the neighbour map could not be built (out of
 * memory). imatrix NULL: ggml's unweighted search. */
size_t kiln_quantize_iq3_xxs(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                             const float *imatrix) {
    kiln_iq3_ctx c;
    if (!kiln_iq3_ctx_init(&c, &kiln_iq3_xxs_variant))
        return kiln_quantize_nothing(dst, nrows, n_per_row, KILN_QK_K, sizeof(kiln_block_iq3_xxs));
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK_K, sizeof(kiln_block_iq3_xxs),
                                quantize_block, &c);
}

void kiln_quantize_row_iq3_xxs_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_iq3_xxs(src, dst, 1, n, NULL);
}
