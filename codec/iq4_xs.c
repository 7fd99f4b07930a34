/* codec/iq4_xs.c - IQ4_XS: 256 weights as IQ4_NL's 4-bit table indices,
 * eight 32-weight sub-blocks each with a 6-bit signed scale under one fp16
 * scale (block layout in blocks_iq.h).
 *
 * The quantizer is ggml's quantize_iq4_xs, i.e. quantize_row_iq4_nl_impl
 * with a 256-weight super-block: sigma2 is the super-block's mean x^2
 * (times 2), each sub-block's scale is IQ4_NL's search (iq4_search.h,
 * ntry 7, with or without an imatrix), then the super-block scale is
 * d = -max_scale / 32 (max_scale the sub-block scale of largest
 * magnitude), each sub-block stores l = nearest(scale / d) clamped to
 * -32..31 (as l + 32), and its indices are recomputed for d * l - with
 * the float d, not its fp16 rounding. ggml's row reference is the same
 * call without an imatrix. */
#include "blocks.h"
#include "iq4_search.h"
#include "quants.h"
#include "search.h"

#include "../core/fp16.h"

#include <string.h>

#define NSUB (KILN_QK_K / KILN_QK) /* 32-weight sub-blocks per block */

/* A kiln_block_quantizer for one super-block; qw its imatrix slice or
 * NULL, ctx the call's kiln_iq4_search. */
static void iq4xs_block(const float *x, const float *qw, void *dst, const void *ctx) {
    const kiln_iq4_search *s = ctx;
    kiln_block_iq4_xs *y = dst;
    float sigma2 = 0;
    for (int j = 0; j < KILN_QK_K; j++) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / KILN_QK_K;

    float scales[NSUB], max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < NSUB; ib++) {
        const float *xb = x + KILN_QK * ib;
        float w[KILN_QK], id;
        bool weighted;
        if (qw) kiln_importance_weights(KILN_QK, xb, qw + KILN_QK * ib, sigma2, w);
        else
            for (int j = 0; j < KILN_QK; j++) w[j] = xb[j] * xb[j];
        scales[ib] = kiln_iq4_block_scale(s, xb, w, &id, &weighted);
        float a = fabsf(scales[ib]);
        if (a > amax_scale) {
            amax_scale = a;
            max_scale = scales[ib];
        }
    }

    /* d may be -0.0 (every sub-block zero): stored as such, as in ggml */
    const float d = -max_scale / 32;
    const float id = d ? 1 / d : 0.f;
    y->d = kiln_fp32_to_fp16(d);
    y->scales_h = 0;
    memset(y->scales_l, 0, sizeof y->scales_l);
    for (int ib = 0; ib < NSUB; ib++) {
        int l = kiln_nearest_int(id * scales[ib]);
        l = l < -32 ? -32 : l > 31 ? 31 : l;
        const float dl = d * l;
        uint8_t L[KILN_QK];
        kiln_iq4_indices(s, dl ? 1 / dl : 0.f, x + KILN_QK * ib, L);
        kiln_pack_nibbles(L, y->qs + KILN_QK / 2 * ib);
        l += 32;
        y->scales_l[ib / 2] |= (uint8_t)((l & 15) << 4 * (ib % 2));
        y->scales_h |= (uint16_t)((l >> 4) << 2 * ib);
    }
}

void kiln_dequantize_row_iq4_xs(const void *src, float *dst, int64_t n) {
    const kiln_block_iq4_xs *x = src;
    for (int64_t i = 0; i < n / KILN_QK_K; i++) {
        const float d = kiln_fp16_to_fp32(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int ib = 0; ib < NSUB; ib++, qs += KILN_QK / 2, dst += KILN_QK) {
            const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 15) | ((x[i].scales_h >> 2 * ib) & 3) << 4;
            const float dl = d * (ls - 32);
            for (int j = 0; j < KILN_QK / 2; j++) {
                dst[j] = dl * kiln_iq4nl_values[qs[j] & 15];
                dst[j + 16] = dl * kiln_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}

void kiln_quantize_row_iq4_xs_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_iq4_xs(src, dst, 1, n, NULL);
}

size_t kiln_quantize_iq4_xs(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                            const float *imatrix) {
    kiln_iq4_search s;
    kiln_iq4_search_init(&s, 7);
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK_K, sizeof(kiln_block_iq4_xs),
                                iq4xs_block, &s);
}
