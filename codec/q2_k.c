/* codec/q2_k.c - the Q2_K codec: 2-bit levels with a 4-bit scale and
 * a 4-bit minimum per 16 weights (layout in blocks_k.h).
 *
 * Without an imatrix the sub-block fits are ggml's quantize_row_q2_K_ref
 * (|x|-weighted, mean-absolute-error search); with one, ggml's
 * quantize_row_q2_K_impl (imatrix * sqrt(sigma^2 + x^2) weights, squared
 * error, and searched rather than rounded sub-block scales). Both end with
 * the same requantization against the stored, rounded scales. */
/* ggml rounds every product before adding it. -std=c11 already forbids
 * fusing them into FMAs, but a build in GNU mode would fuse them inside
 * the AVX-512 functions and change the bytes. */
#ifdef __clang__
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "blocks.h"
#include "quants.h"
#include "search.h"

#include "../core/cpu.h"
#include "../core/fp16.h"

#include <math.h>
#include <string.h>

/* ---------------------------------------------------------------- dequant */

static void dequant_scalar(const kiln_block_q2_k *b, float *y) {
    const float d = kiln_fp16_to_fp32(b->d), min = kiln_fp16_to_fp32(b->dmin);
    for (int g = 0; g < 16; ++g) { /* output group g: 16 weights, scale g */
        const uint8_t *q = b->qs + 32 * (g / 8) + 16 * (g & 1);
        int shift = 2 * ((g % 8) / 2);
        float dl = d * (b->scales[g] & 0xF), ml = min * (b->scales[g] >> 4);
        for (int l = 0; l < 16; ++l) y[16 * g + l] = dl * ((q[l] >> shift) & 3) - ml;
    }
}

#ifdef KILN_X86
KILN_AVX2 static void dequant_avx2(const kiln_block_q2_k *b, float *y) {
    const float d = kiln_fp16_to_fp32(b->d), min = kiln_fp16_to_fp32(b->dmin);
    const __m256i three = _mm256_set1_epi32(3);
    for (int g = 0; g < 16; ++g) {
        const uint8_t *q = b->qs + 32 * (g / 8) + 16 * (g & 1);
        __m128i sh = _mm_cvtsi32_si128(2 * ((g % 8) / 2));
        __m256 dl = _mm256_set1_ps(d * (b->scales[g] & 0xF));
        __m256 ml = _mm256_set1_ps(min * (b->scales[g] >> 4));
        for (int h = 0; h < 16; h += 8) {
            __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + h)));
            v = _mm256_and_si256(_mm256_srl_epi32(v, sh), three);
            _mm256_storeu_ps(y + 16 * g + h,
                             _mm256_sub_ps(_mm256_mul_ps(dl, _mm256_cvtepi32_ps(v)), ml));
        }
    }
}

KILN_AVX512 static void dequant_avx512(const kiln_block_q2_k *b, float *y) {
    const float d = kiln_fp16_to_fp32(b->d), min = kiln_fp16_to_fp32(b->dmin);
    const __m512i three = _mm512_set1_epi32(3);
    for (int g = 0; g < 16; ++g) {
        const uint8_t *q = b->qs + 32 * (g / 8) + 16 * (g & 1);
        __m128i sh = _mm_cvtsi32_si128(2 * ((g % 8) / 2));
        __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
        v = _mm512_and_si512(_mm512_srl_epi32(v, sh), three);
        __m512 dl = _mm512_set1_ps(d * (b->scales[g] & 0xF));
        __m512 ml = _mm512_set1_ps(min * (b->scales[g] >> 4));
        _mm512_storeu_ps(y + 16 * g, _mm512_sub_ps(_mm512_mul_ps(dl, _mm512_cvtepi32_ps(v)), ml));
    }
}
#endif

void kiln_dequantize_row_q2_k(const void *src, float *dst, int64_t n) {
    const kiln_block_q2_k *b = src;
    void (*dequant)(const kiln_block_q2_k *, float *) = KILN_SIMD_PICK(dequant);
    for (int64_t i = 0; i < n / KILN_QK_K; ++i) dequant(&b[i], dst + i * KILN_QK_K);
}

/* ------------------------------------------------------------------ quant */

/* Final levels against the stored (fp16-rounded) scales, then packing.
 * Sub-blocks whose scale rounds to zero keep the search's levels, as in
 * ggml. */
static void requantize(const float *x, kiln_block_q2_k *y, uint8_t *L) {
    const float d = kiln_fp16_to_fp32(y->d), dmin = kiln_fp16_to_fp32(y->dmin);
    float dl[16], ml[16];
    for (int j = 0; j < 16; ++j) {
        dl[j] = d * (y->scales[j] & 0xF);
        ml[j] = dmin * (y->scales[j] >> 4);
    }
    kiln_levels_for_scales(16, 16, x, dl, ml, 0, 3, L);
    kiln_pack_2bit_k(L, y->qs);
}

/* ggml's quantize_row_q2_K_ref for one super-block. */
static void quantize_block_ref(const float *x, kiln_block_q2_k *y) {
    uint8_t L[KILN_QK_K];
    float weights[16], mins[16], scales[16];
    float max_scale = 0, max_min = 0; /* scales are >= 0 once the min is taken out */
    for (int j = 0; j < 16; ++j) {
        for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
        scales[j] = kiln_make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], NULL,
                                          -0.5f, 0.1f, 15, true);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    memset(y->scales, 0, sizeof y->scales);
    y->d = kiln_fp32_to_fp16(0.f);
    y->dmin = kiln_fp32_to_fp16(0.f);
    if (max_scale > 0) {
        float iscale = 15.f / max_scale;
        for (int j = 0; j < 16; ++j) y->scales[j] = (uint8_t)kiln_nearest_int(iscale * scales[j]);
        y->d = kiln_fp32_to_fp16(max_scale / 15.f);
    }
    if (max_min > 0) {
        float iscale = 15.f / max_min;
        for (int j = 0; j < 16; ++j) y->scales[j] |= (uint8_t)((unsigned)kiln_nearest_int(iscale * mins[j]) << 4);
        y->dmin = kiln_fp32_to_fp16(max_min / 15.f);
    }
    requantize(x, y, L);
}

/* ggml's quantize_row_q2_K_impl for one super-block; qw = its imatrix. */
static void quantize_block_imx(const float *x, kiln_block_q2_k *y, const float *qw) {
    uint8_t L[KILN_QK_K], Ls[16], Lm[16];
    float weight[16], sw[16], mins[16], scales[16];
    float sumx2 = 0;
    for (int j = 0; j < KILN_QK_K; ++j) sumx2 += x[j] * x[j];
    float sigma2 = sumx2 / KILN_QK_K;
    for (int j = 0; j < 16; ++j) {
        sw[j] = kiln_importance_weights(16, x + 16 * j, qw + 16 * j, sigma2, weight);
        scales[j] = kiln_make_qkx3_quants(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], NULL,
                                          -0.9f, 0.05f, 36, false);
    }
    float dm = kiln_make_qp_quants(16, 15, scales, Ls, sw);
    float mm = kiln_make_qp_quants(16, 15, mins, Lm, sw);
    y->d = kiln_fp32_to_fp16(dm);
    y->dmin = kiln_fp32_to_fp16(mm);
    for (int j = 0; j < 16; ++j) y->scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
    requantize(x, y, L);
}

/* One super-block: ggml's reference search, or its imatrix one. */
static void quantize_block(const float *x, const float *qw, void *y, const void *ctx) {
    if (qw) quantize_block_imx(x, y, qw);
    else quantize_block_ref(x, y);
}

void kiln_quantize_row_q2_k_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_blocks(src, dst, 1, n, NULL, KILN_QK_K, sizeof(kiln_block_q2_k), quantize_block,
                         NULL);
}

size_t kiln_quantize_q2_k(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix) {
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK_K,
                                sizeof(kiln_block_q2_k), quantize_block, NULL);
}

/* ------------------------------------------------------------------------
 * kiln_quantize_q2_k_refined: kiln's own imatrix search, NOT ggml's (its
 * bytes differ from llama.cpp's; the codec table keeps ggml's search).
 *
 * ggml fits each sub-block's scale and minimum on its own, rounds them to
 * 4 bits against d / dmin afterwards, and weights its search by
 * imatrix * sqrt(sigma^2 + x^2). This starts from ggml's block and, on the
 * imatrix weights alone (the error an imatrix says matters), alternates:
 *  - for fixed d and dmin, every sub-block's best 4-bit (scale, minimum)
 *    pair, all 256 tried, each with its best levels: exact for that d, dmin;
 *  - for those integers, d and dmin by weighted least squares (the values
 *    are linear in them), rounded to fp16.
 * A block is replaced only when its weighted error drops, so the result is
 * never worse than ggml's by that measure. The plain (unweighted) error may
 * grow where the imatrix gives columns almost no weight. Slow: about
 * 5 MB/s of f32 per thread, some 20x below ggml's imatrix search. */

static double q2_block_err(const float *x, const float *w, const kiln_block_q2_k *y) {
    float deq[KILN_QK_K];
    dequant_scalar(y, deq);
    double e = 0;
    for (int i = 0; i < KILN_QK_K; ++i) e += w[i] * ((double)deq[i] - x[i]) * ((double)deq[i] - x[i]);
    return e;
}

/* Best (scale, minimum) multipliers of one sub-block for fixed d, dmin,
 * tried exhaustively, each with its own best levels. The 16 minimums of
 * one scale are evaluated side by side (a loop the compiler vectorizes).
 * Returns the weighted error. */
static float q2_best_sub(const float *x, const float *w, float d, float dmin, uint8_t *sc,
                         uint8_t *m, uint8_t *L) {
    float best = INFINITY;
    float b[16];
    for (int k = 0; k < 16; ++k) b[k] = dmin * k;
    for (int s = 0; s < 16; ++s) {
        float a = d * s, ia = a > 0 ? 1 / a : 0;
        float e[16] = {0};
        for (int i = 0; i < 16; ++i)
            for (int k = 0; k < 16; ++k) {
                float l = ((x[i] + b[k]) * ia + 12582912.f) - 12582912.f; /* round */
                l = l < 0 ? 0 : l > 3 ? 3 : l;
                float r = a * l - b[k] - x[i];
                e[k] += w[i] * r * r;
            }
        for (int k = 0; k < 16; ++k)
            if (e[k] < best) {
                best = e[k];
                *sc = (uint8_t)s;
                *m = (uint8_t)k;
            }
    }
    float a = d * *sc, ia = a > 0 ? 1 / a : 0, bb = dmin * *m;
    for (int i = 0; i < 16; ++i) {
        float l = ((x[i] + bb) * ia + 12582912.f) - 12582912.f;
        L[i] = (uint8_t)(l < 0 ? 0 : l > 3 ? 3 : l);
    }
    return best;
}

/* Alternates exact sub-block choices and a least-squares (d, dmin) from
 * the start (d, dmin); keeps any block better than *y in y. */
static void q2_descend(const float *x, const float *w, float d, float dmin, kiln_block_q2_k *y,
                       double *best_err) {
    kiln_block_q2_k cur;
    uint8_t L[KILN_QK_K], sc[16], m[16];
    double last = INFINITY;
    for (int iter = 0; iter < 6; ++iter) {
        for (int j = 0; j < 16; ++j)
            q2_best_sub(x + 16 * j, w + 16 * j, d, dmin, &sc[j], &m[j], L + 16 * j);
        cur.d = kiln_fp32_to_fp16(d);
        cur.dmin = kiln_fp32_to_fp16(dmin);
        for (int j = 0; j < 16; ++j) cur.scales[j] = (uint8_t)(sc[j] | (m[j] << 4));
        kiln_pack_2bit_k(L, cur.qs);
        double e = q2_block_err(x, w, &cur);
        if (e < *best_err) {
            *best_err = e;
            *y = cur;
        }
        if (!(e < last)) break;
        last = e;
        /* d, dmin by least squares for these integers: x ~ d*(sc*L) - dmin*m */
        double s11 = 0, s12 = 0, s22 = 0, t1 = 0, t2 = 0;
        for (int i = 0; i < KILN_QK_K; ++i) {
            double u = (double)sc[i / 16] * L[i], v = -(double)m[i / 16];
            s11 += w[i] * u * u;
            s12 += w[i] * u * v;
            s22 += w[i] * v * v;
            t1 += w[i] * u * x[i];
            t2 += w[i] * v * x[i];
        }
        double det = s11 * s22 - s12 * s12;
        if (!(det > 0)) break;
        d = kiln_fp16_to_fp32(kiln_fp32_to_fp16((float)((t1 * s22 - t2 * s12) / det)));
        dmin = kiln_fp16_to_fp32(kiln_fp32_to_fp16((float)((s11 * t2 - s12 * t1) / det)));
    }
}

/* Refines the ggml block *y in place (a kiln_block_quantizer). */
static void refine_block_imx(const float *x, const float *w, void *y, const void *ctx) {
    kiln_block_q2_k *b = y;
    double best_err = q2_block_err(x, w, b);
    q2_descend(x, w, kiln_fp16_to_fp32(b->d), kiln_fp16_to_fp32(b->dmin), b, &best_err);
}

size_t kiln_quantize_q2_k_refined(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                                  const float *imatrix) {
    size_t bytes = kiln_quantize_q2_k(src, dst, nrows, n_per_row, imatrix);
    if (!imatrix) return bytes;
    kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK_K, sizeof(kiln_block_q2_k),
                         refine_block_imx, NULL);
    return bytes;
}
