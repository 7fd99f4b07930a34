/* codec/iq2_s.c - the IQ2_S codec (2.5625 bits per weight).
 *
 * Block layout: blocks_iq.h. Codebooks: iq2_tables.h.
 *
 * Quantizing follows ggml's quantize_row_iq2_s_impl step for step, so the
 * blocks are llama.cpp's byte for byte. It is IQ2_XS's search (the shared
 * group-of-16 search of iq2_search.c) with four differences of ggml's:
 * all 8 signs are stored (no parity rule), sigma2 is twice the block's
 * mean square, the importance without an imatrix is sigma2 / 4 + x^2
 * (ggml accepts none), and the stored d is max group scale / 31 * 0.9875
 * while the group codes are rounded against the unshrunk d. Groups whose
 * largest magnitude is below 1e-8 are left zero. */
#include "blocks.h"
#include "iq2_search.h"
#include "iq2_tables.h"
#include "quants.h"
#include "search.h"

#include "../core/fp16.h"

#include <math.h>
#include <string.h>

/* ggml's GROUP_MAX_EPS_IQ2_S */
#define GROUP_MAX_EPS_IQ2_S 1e-8f

void kiln_dequantize_row_iq2_s(const void *src, float *dst, int64_t n) {
    const kiln_block_iq2_s *x = src;
    for (int64_t b = 0; b < n / KILN_QK_K; b++) {
        const float d = kiln_fp16_to_fp32(x[b].d);
        const uint8_t *qs = x[b].qs, *signs = x[b].qs + KILN_QK_K / 8;
        for (int ib = 0; ib < KILN_QK_K / 32; ib++) {
            const float db[2] = {d * (0.5f + (float)(x[b].scales[ib] & 0xf)) * 0.25f,
                                 d * (0.5f + (float)(x[b].scales[ib] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++) {
                const int k = 4 * ib + l;
                const uint64_t grid = kiln_iq2s_grid[qs[k] | ((x[b].qh[ib] >> 2 * l) & 3) << 8];
                for (int j = 0; j < 8; j++)
                    dst[j] = db[l / 2] * (float)(uint8_t)(grid >> 8 * j) * (signs[k] >> j & 1 ? -1.f : 1.f);
                dst += 8;
            }
        }
    }
}

/* One block (a kiln_block_quantizer; ctx is the kiln_iq2_ctx). */
static void quantize_block(const float *xbl, const float *qw, void *dst, const void *ctx) {
    const kiln_iq2_ctx *c = ctx;
    kiln_block_iq2_s *y = dst;
    float scales[KILN_QK_K / 16], weight[16], waux[16], xval[16];
    memset(y, 0, sizeof *y);

    float sumx2 = 0;
    for (int i = 0; i < KILN_QK_K; i++) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = 2 * sumx2 / KILN_QK_K;
    float max_scale = 0;
    for (int ib = 0; ib < KILN_QK_K / 16; ib++) {
        const float *xb = xbl + 16 * ib;
        if (qw) kiln_importance_weights(16, xb, qw + 16 * ib, sigma2, weight);
        else
            for (int i = 0; i < 16; i++) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
        for (int i = 0; i < 16; i++) waux[i] = sqrtf(weight[i]);
        uint8_t signs[2] = {0, 0};
        for (int i = 0; i < 16; i++) {
            xval[i] = fabsf(xb[i]);
            if (xb[i] < 0) signs[i / 8] |= (uint8_t)(1 << i % 8);
        }
        float max = xval[0];
        for (int i = 1; i < 16; i++) max = max > xval[i] ? max : xval[i];
        if (max < GROUP_MAX_EPS_IQ2_S) {
            scales[ib] = 0;
            continue;
        }
        uint16_t gidx[2];
        float scale = kiln_iq2_search16(c, xval, weight, waux, gidx);
        if (scale < 0) {
            scale = -scale;
            signs[0] = (uint8_t)~signs[0];
            signs[1] = (uint8_t)~signs[1];
        }
        for (int k = 0; k < 2; k++) {
            const int g8 = 2 * ib + k;
            y->qs[g8] = (uint8_t)(gidx[k] & 255);
            y->qh[g8 / 4] |= (uint8_t)((gidx[k] >> 8) << 2 * (g8 % 4));
            y->qs[KILN_QK_K / 8 + g8] = signs[k];
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = kiln_fp32_to_fp16(d * 0.9875f);
    const float id = 1 / d;
    for (int ib = 0; ib < KILN_QK_K / 16; ib++) {
        int l = kiln_nearest_int(0.5f * (id * scales[ib] - 1));
        l = l < 0 ? 0 : l > 15 ? 15 : l;
        y->scales[ib / 2] |= (uint8_t)(l << 4 * (ib % 2));
    }
}

/* llama.cpp's blocks (see quants.h for the arguments). Returns the bytes
 * written, or 0 with dst zeroed if the neighbour map could not be built
 * (out of memory). imatrix NULL gives ggml's unweighted blocks. */
size_t kiln_quantize_iq2_s(const float *src, void *dst, int64_t nrows, int64_t n_per_row, const float *imatrix) {
    kiln_iq2_ctx c;
    if (kiln_iq2_ctx_init(&c, KILN_IQ2_GRID_S))
        return kiln_quantize_nothing(dst, nrows, n_per_row, KILN_QK_K, sizeof(kiln_block_iq2_s));
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK_K, sizeof(kiln_block_iq2_s),
                                quantize_block, &c);
}

/* ggml's quantize_row_iq2_s_ref: the search without an imatrix. */
void kiln_quantize_row_iq2_s_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_iq2_s(src, dst, 1, n, NULL);
}
