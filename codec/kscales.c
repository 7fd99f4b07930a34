/* codec/kscales.c - the scale/min machinery Q4_K and Q5_K share (see
 * kscales.h): 6-bit packing, the per-super-block level search, and the
 * dequantizer with its AVX2 / AVX-512 variants. Every path reproduces
 * ggml's float operations in ggml's order, because llama.cpp's blocks and
 * dequantized values are the ground truth kiln is tested against. */
#include "kscales.h"

#include <math.h>

#include "../core/fp16.h"
#include "quants.h"
#include "search.h"

void kiln_kscales_pack(uint8_t out[12], const uint8_t ls[8], const uint8_t lm[8]) {
    for (int j = 0; j < 4; j++) {
        out[j] = ls[j];
        out[j + 4] = lm[j];
    }
    for (int j = 4; j < 8; j++) {
        out[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
        out[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
        out[j] |= (uint8_t)((lm[j] >> 4) << 6);
    }
}

/* Sub-block factors as ggml computes them: d * sc and dmin * m in float. */
static void sub_factors(kiln_half d, kiln_half dmin, const uint8_t scales[12], float ds[8],
                        float dm[8]) {
    float D = kiln_fp16_to_fp32(d), M = kiln_fp16_to_fp32(dmin);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        kiln_kscale_get(j, scales, &sc, &m);
        ds[j] = D * sc;
        dm[j] = M * m;
    }
}

/* ggml stores the 6-bit levels as uint8_t(nearest_int(v)) capped at 63;
 * the cast matters only for a negative v, which ggml wraps the same way. */
static uint8_t level63(float v) {
    uint8_t l = (uint8_t)kiln_nearest_int(v);
    return l < 63 ? l : 63;
}

/* Reference path: each sub-block weighted by |x| plus the sub-block's rms,
 * scales and mins quantized against their maxima. */
static void search_ref(const float *x, int nmax, kiln_kscale_ref ref, float *dscale, float *dmin,
                       uint8_t ls[8], uint8_t lm[8], uint8_t L[KILN_QK_K]) {
    float scales[8], mins[8], weights[32];
    uint8_t Laux[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(xs[l]);
        scales[j] = kiln_make_qkx2_quants(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux,
                                          ref.rmin, 0.1f, ref.nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; j++) {
        ls[j] = level63(inv_scale * scales[j]);
        lm[j] = level63(inv_min * mins[j]);
    }
    *dscale = max_scale / 63.f;
    *dmin = max_min / 63.f;
}

/* Importance path: weights from the imatrix times sqrt(sigma^2 + x^2), the
 * 8 scales and 8 mins each fitted as a set by make_qp_quants, weighted by
 * how much importance each sub-block carries. */
static void search_imatrix(const float *x, const float *qw, int nmax, float *dscale, float *dmin,
                           uint8_t ls[8], uint8_t lm[8], uint8_t L[KILN_QK_K]) {
    float scales[8], mins[8], sw[8], weights[32];
    uint8_t Laux[32];
    float sum_x2 = 0;
    for (int l = 0; l < KILN_QK_K; l++) sum_x2 += x[l] * x[l];
    float sigma2 = 2 * sum_x2 / KILN_QK_K;
    for (int j = 0; j < 8; j++) {
        sw[j] = kiln_importance_weights(32, x + 32 * j, qw + 32 * j, sigma2, weights);
        scales[j] = kiln_make_qkx3_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                          -0.9f, 0.05f, 36, false);
    }
    *dscale = kiln_make_qp_quants(8, 63, scales, ls, sw);
    *dmin = kiln_make_qp_quants(8, 63, mins, lm, sw);
    /* make_qp_quants caps at 63 already; a negative fitted scale (never
     * seen in practice) would wrap, and the cap keeps the packing sane. */
    for (int j = 0; j < 8; j++) {
        if (ls[j] > 63) ls[j] = 63;
        if (lm[j] > 63) lm[j] = 63;
    }
}

void kiln_kscale_block(const float *x, const float *qw, int nmax, kiln_kscale_ref ref,
                       kiln_half *d, kiln_half *dmin, uint8_t scales[12], uint8_t L[KILN_QK_K]) {
    float fd, fm;
    uint8_t ls[8], lm[8];
    if (qw)
        search_imatrix(x, qw, nmax, &fd, &fm, ls, lm, L);
    else
        search_ref(x, nmax, ref, &fd, &fm, ls, lm, L);
    kiln_kscales_pack(scales, ls, lm);
    *d = kiln_fp32_to_fp16(fd);
    *dmin = kiln_fp32_to_fp16(fm);

    /* Requantize against the factors as stored. A sub-block whose scale
     * rounded to zero keeps the search's levels, as in ggml. */
    float ds[8], dm[8];
    sub_factors(*d, *dmin, scales, ds, dm);
    kiln_levels_for_scales(8, 32, x, ds, dm, 0, nmax, L);
}

/* ---- dequantization ---------------------------------------------------- */

static void dequant_scalar(const float ds[8], const float dm[8], const uint8_t *qs,
                           const uint8_t *qh, float *y) {
    for (int j = 0; j < 8; j++) {
        int shift = 4 * (j & 1);
        const uint8_t *q = qs + 32 * (j >> 1);
        for (int l = 0; l < 32; l++) {
            int v = (q[l] >> shift) & 0xF;
            if (qh) v += ((qh[l] >> j) & 1) << 4;
            y[32 * j + l] = ds[j] * v - dm[j];
        }
    }
}

#ifdef KILN_X86
KILN_AVX2 static void
dequant_avx2(const float ds[8], const float dm[8], const uint8_t *qs, const uint8_t *qh, float *y) {
    const __m256i low4 = _mm256_set1_epi32(0xF), one = _mm256_set1_epi32(1);
    for (int j = 0; j < 8; j++) {
        const __m128i shift = _mm_cvtsi32_si128(4 * (j & 1)), hshift = _mm_cvtsi32_si128(j);
        const uint8_t *q = qs + 32 * (j >> 1);
        const __m256 vd = _mm256_set1_ps(ds[j]), vm = _mm256_set1_ps(dm[j]);
        for (int l = 0; l < 32; l += 8) {
            __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + l)));
            v = _mm256_and_si256(_mm256_srl_epi32(v, shift), low4);
            if (qh) {
                __m256i h = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qh + l)));
                h = _mm256_and_si256(_mm256_srl_epi32(h, hshift), one);
                v = _mm256_or_si256(v, _mm256_slli_epi32(h, 4));
            }
            /* mul then sub, never fused: ggml rounds the product first */
            __m256 f = _mm256_mul_ps(vd, _mm256_cvtepi32_ps(v));
            _mm256_storeu_ps(y + 32 * j + l, _mm256_sub_ps(f, vm));
        }
    }
}

KILN_AVX512 static void
dequant_avx512(const float ds[8], const float dm[8], const uint8_t *qs, const uint8_t *qh,
               float *y) {
    const __m512i low4 = _mm512_set1_epi32(0xF), one = _mm512_set1_epi32(1);
    for (int j = 0; j < 8; j++) {
        const __m128i shift = _mm_cvtsi32_si128(4 * (j & 1)), hshift = _mm_cvtsi32_si128(j);
        const uint8_t *q = qs + 32 * (j >> 1);
        const __m512 vd = _mm512_set1_ps(ds[j]), vm = _mm512_set1_ps(dm[j]);
        for (int l = 0; l < 32; l += 16) {
            __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + l)));
            v = _mm512_and_si512(_mm512_srl_epi32(v, shift), low4);
            if (qh) {
                __m512i h = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qh + l)));
                h = _mm512_and_si512(_mm512_srl_epi32(h, hshift), one);
                v = _mm512_or_si512(v, _mm512_slli_epi32(h, 4));
            }
            __m512 f = _mm512_mul_ps(vd, _mm512_cvtepi32_ps(v));
            _mm512_storeu_ps(y + 32 * j + l, _mm512_sub_ps(f, vm));
        }
    }
}
#endif

void kiln_kscale_dequant(kiln_half d, kiln_half dmin, const uint8_t scales[12], const uint8_t *qs,
                         const uint8_t *qh, float *y) {
    float ds[8], dm[8];
    sub_factors(d, dmin, scales, ds, dm);
    KILN_SIMD_PICK(dequant)(ds, dm, qs, qh, y);
}
