/* codec/iq2_xs.c - the IQ2_XS codec (2.3125 bits per weight).
 *
 * Block layout: blocks_iq.h. Codebooks: iq2_tables.h.
 *
 * Quantizing follows ggml's quantize_row_iq2_xs_impl step for step, so the
 * blocks are llama.cpp's byte for byte: per group of 16, weights
 * imatrix * sqrt(sigma2 + x^2), the signs split off with IQ2_XXS's parity
 * rule, then the shared group-of-16 search (iq2_search.c, whose neighbour
 * scan has the SIMD versions); the block scale d = max group scale / 31,
 * each group's 4-bit code rounded against it. ggml requires an importance
 * matrix for IQ2_XS, and so does the codec table; the entry points take
 * NULL as unit importances (the reference quantizer's stand-in, as for
 * IQ2_XXS). */
#include "blocks.h"
#include "iq2_search.h"
#include "iq2_tables.h"
#include "quants.h"
#include "search.h"

#include "../core/fp16.h"

#include <math.h>
#include <string.h>

void kiln_dequantize_row_iq2_xs(const void *src, float *dst, int64_t n) {
    const kiln_block_iq2_xs *x = src;
    for (int64_t b = 0; b < n / KILN_QK_K; b++) {
        const float d = kiln_fp16_to_fp32(x[b].d);
        for (int ib = 0; ib < KILN_QK_K / 32; ib++) {
            const float db[2] = {d * (0.5f + (float)(x[b].scales[ib] & 0xf)) * 0.25f,
                                 d * (0.5f + (float)(x[b].scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++) {
                const uint16_t q = x[b].qs[4 * ib + l];
                const uint64_t grid = kiln_iq2xs_grid[q & 511];
                const uint8_t signs = kiln_iq2_signs[q >> 9];
                for (int j = 0; j < 8; j++)
                    dst[j] = db[l / 2] * (float)(uint8_t)(grid >> 8 * j) * (signs >> j & 1 ? -1.f : 1.f);
                dst += 8;
            }
        }
    }
}

/* One block (a kiln_block_quantizer; ctx is the kiln_iq2_ctx). */
static void quantize_block(const float *xbl, const float *qw, void *dst, const void *ctx) {
    const kiln_iq2_ctx *c = ctx;
    kiln_block_iq2_xs *y = dst;
    float scales[KILN_QK_K / 16], weight[16], waux[16], xval[16];
    uint16_t q2[KILN_QK_K / 8];
    memset(q2, 0, sizeof q2);

    float sumx2 = 0;
    for (int i = 0; i < KILN_QK_K; i++) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = sumx2 / KILN_QK_K;
    float max_scale = 0;
    for (int ib = 0; ib < KILN_QK_K / 16; ib++) {
        const float *xb = xbl + 16 * ib;
        kiln_importance_weights(16, xb, qw ? qw + 16 * ib : NULL, sigma2, weight);
        for (int i = 0; i < 16; i++) waux[i] = sqrtf(weight[i]);
        uint8_t signs[2];
        uint16_t gidx[2];
        kiln_grid_split_signs(2, xb, weight, xval, signs);
        float max = xval[0];
        for (int i = 1; i < 16; i++) max = max > xval[i] ? max : xval[i];
        if (max < KILN_GROUP_MAX_EPS) { /* ggml leaves the group all zero bits */
            scales[ib] = 0;
            continue;
        }
        float scale = kiln_iq2_search16(c, xval, weight, waux, gidx);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 2; k++) signs[k] = (uint8_t)(~signs[k] & 127);
        }
        for (int k = 0; k < 2; k++) q2[2 * ib + k] = (uint16_t)(gidx[k] | signs[k] << 9);
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    memset(y, 0, sizeof *y);
    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = kiln_fp32_to_fp16(d);
    const float id = 1 / d;
    for (int ib = 0; ib < KILN_QK_K / 16; ib++) {
        int l = kiln_nearest_int(0.5f * (id * scales[ib] - 1));
        l = l < 0 ? 0 : l > 15 ? 15 : l;
        y->scales[ib / 2] |= (uint8_t)(l << 4 * (ib % 2));
    }
    memcpy(y->qs, q2, sizeof q2);
}

/* llama.cpp's blocks (see quants.h for the arguments). Returns the bytes
 * written, or 0 with dst zeroed if the neighbour map could not be built
 * (out of memory). imatrix NULL means unit weights. */
size_t kiln_quantize_iq2_xs(const float *src, void *dst, int64_t nrows, int64_t n_per_row, const float *imatrix) {
    kiln_iq2_ctx c;
    if (kiln_iq2_ctx_init(&c, KILN_IQ2_GRID_XS))
        return kiln_quantize_nothing(dst, nrows, n_per_row, KILN_QK_K, sizeof(kiln_block_iq2_xs));
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK_K, sizeof(kiln_block_iq2_xs),
                                quantize_block, &c);
}

/* ggml has no reference quantizer for IQ2_XS (it requires weights); the
 * search with unit weights is the natural stand-in. */
void kiln_quantize_row_iq2_xs_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_iq2_xs(src, dst, 1, n, NULL);
}
