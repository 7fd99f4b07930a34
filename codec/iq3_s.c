/* codec/iq3_s.c - the IQ3_S codec (3.4375 bits per weight).
 *
 * Block layout: blocks_iq.h. Grid: iq3_tables.h. The group search, shared
 * with IQ3_XXS: iq3_search.c. The quantizer is ggml's
 * quantize_row_iq3_s_impl step for step, so its blocks are llama.cpp's
 * byte for byte, with or without an imatrix - including ggml's handling of
 * an all-zero group of 32: it is skipped without advancing the write
 * positions of the grid indices and signs, so the groups after it land
 * one slot early (their high index bits in qh stay in place). Files
 * llama.cpp wrote that way decode as they do in llama.cpp. */
#include "blocks.h"
#include "iq3_search.h"
#include "iq3_tables.h"
#include "quants.h"
#include "search.h"

#include "../core/fp16.h"

#include <string.h>

void kiln_dequantize_row_iq3_s(const void *src, float *y, int64_t n) {
    const kiln_block_iq3_s *x = src;
    for (int64_t b = 0; b < n / KILN_QK_K; b++) {
        const float d = kiln_fp16_to_fp32(x[b].d);
        for (int g = 0; g < KILN_QK_K / 32; g++) {
            const int ls = (x[b].scales[g / 2] >> 4 * (g % 2)) & 0xF;
            const float db = d * (float)(1 + 2 * ls);
            for (int k = 0; k < 8; k++) {
                const uint32_t grid = kiln_iq3s_grid[x[b].qs[8 * g + k] | ((x[b].qh[g] >> k & 1) << 8)];
                const uint8_t signs = x[b].signs[4 * g + k / 2];
                for (int j = 0; j < 4; j++)
                    y[j] = db * (float)(uint8_t)(grid >> 8 * j) * (signs >> (4 * (k % 2) + j) & 1 ? -1.f : 1.f);
                y += 4;
            }
        }
    }
}

/* One block (a kiln_block_quantizer; ctx is the kiln_iq3_ctx). */
static void quantize_block(const float *xbl, const float *qw, void *dst, const void *ctx) {
    const kiln_iq3_ctx *c = ctx;
    kiln_block_iq3_s *y = dst;
    float scales[KILN_QK_K / 32], weight[32], waux[32], xval[32];
    memset(y, 0, sizeof *y);
    uint8_t *qs = y->qs, *signs = y->signs; /* advanced per group written (see the header) */
    const float sigma2 = kiln_iq3_sigma2(xbl);
    float max_scale = 0;
    for (int ib = 0; ib < KILN_QK_K / 32; ib++) {
        const float *xb = xbl + 32 * ib;
        uint8_t bsigns[4];
        kiln_iq3_weights(xb, qw ? qw + 32 * ib : NULL, sigma2, weight, waux);
        for (int k = 0; k < 4; k++) {
            uint8_t s = 0;
            for (int i = 0; i < 8; i++) {
                float v = xb[8 * k + i];
                if (v >= 0) {
                    xval[8 * k + i] = v;
                } else {
                    xval[8 * k + i] = -v;
                    s |= (uint8_t)(1 << i);
                }
            }
            bsigns[k] = s;
        }
        float max = xval[0];
        for (int i = 1; i < 32; i++) max = max > xval[i] ? max : xval[i];
        if (!max) {
            scales[ib] = 0;
            continue;
        }
        uint16_t gidx[8];
        float scale = kiln_iq3_search_group(c, xval, max, weight, waux, gidx);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4; k++) bsigns[k] = (uint8_t)~bsigns[k];
        }
        for (int k = 0; k < 8; k++) {
            qs[k] = (uint8_t)(gidx[k] & 255);
            y->qh[ib] |= (uint8_t)((gidx[k] >> 8) << k);
        }
        qs += 8;
        memcpy(signs, bsigns, 4);
        signs += 4;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = kiln_fp32_to_fp16(d * 1.033f); /* ggml's fudge factor */
    const float id = 1 / d;
    for (int ib = 0; ib < KILN_QK_K / 32; ib += 2) {
        int l1 = kiln_nearest_int(0.5f * (id * scales[ib] - 1));
        l1 = l1 < 0 ? 0 : l1 > 15 ? 15 : l1;
        int l2 = kiln_nearest_int(0.5f * (id * scales[ib + 1] - 1));
        l2 = l2 < 0 ? 0 : l2 > 15 ? 15 : l2;
        y->scales[ib / 2] = (uint8_t)(l1 | l2 << 4);
    }
}

/* llama.cpp's blocks (arguments: quants.h). Returns the bytes written, or
 * 0 with dst zeroed if the neighbour map could not be built (out of
 * memory). imatrix NULL: ggml's unweighted search. */
size_t kiln_quantize_iq3_s(const float *src, void *dst, int64_t nrows, int64_t n_per_row, const float *imatrix) {
    kiln_iq3_ctx c;
    if (!kiln_iq3_ctx_init(&c, &kiln_iq3_s_variant))
        return kiln_quantize_nothing(dst, nrows, n_per_row, KILN_QK_K, sizeof(kiln_block_iq3_s));
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK_K, sizeof(kiln_block_iq3_s),
                                quantize_block, &c);
}

void kiln_quantize_row_iq3_s_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_iq3_s(src, dst, 1, n, NULL);
}
