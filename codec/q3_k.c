/* codec/q3_k.c - the Q3_K codec: symmetric 3-bit levels with a 6-bit
 * signed scale per 16 weights (layout in blocks_k.h).
 *
 * Without an imatrix this is ggml's quantize_row_q3_K_ref (x^2-weighted
 * coordinate descent per sub-block, scales rounded against the largest);
 * with one, ggml's quantize_row_q3_K_impl (imatrix * sqrt(sigma^2 + x^2)
 * weights and a searched scale-of-scales). Both end with the same
 * requantization against the stored scales. */
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

#include <string.h>

/* The 16 6-bit scales (still biased by 32) out of their 12 bytes. */
static void unpack_scales(const uint8_t *s, int *sc) {
    for (int j = 0; j < 16; ++j) {
        int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
        sc[j] = lo | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
    }
}

static void pack_scales(const int8_t *Ls, uint8_t *s) {
    memset(s, 0, 12);
    for (int j = 0; j < 16; ++j) {
        int l = Ls[j];
        if (j < 8) s[j] = (uint8_t)(l & 0xF);
        else s[j - 8] |= (uint8_t)((l & 0xF) << 4);
        s[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
    }
}

/* ---------------------------------------------------------------- dequant */

/* Output group g (16 weights, scale g) reads qs[32*(g/8) + 16*(g&1) + l]
 * at bit 2*((g%8)/2) and its high bit from hmask bit g/2. */
static void dequant_scalar(const kiln_block_q3_k *b, float *y) {
    const float d_all = kiln_fp16_to_fp32(b->d);
    int sc[16];
    unpack_scales(b->scales, sc);
    for (int g = 0; g < 16; ++g) {
        const uint8_t *q = b->qs + 32 * (g / 8) + 16 * (g & 1);
        const uint8_t *hm = b->hmask + 16 * (g & 1);
        int shift = 2 * ((g % 8) / 2), m = 1 << (g / 2);
        float dl = d_all * (sc[g] - 32);
        for (int l = 0; l < 16; ++l)
            y[16 * g + l] = dl * (((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
    }
}

#ifdef KILN_X86
KILN_AVX2 static void dequant_avx2(const kiln_block_q3_k *b, float *y) {
    const float d_all = kiln_fp16_to_fp32(b->d);
    int sc[16];
    unpack_scales(b->scales, sc);
    const __m256i three = _mm256_set1_epi32(3), four = _mm256_set1_epi32(4);
    for (int g = 0; g < 16; ++g) {
        const uint8_t *q = b->qs + 32 * (g / 8) + 16 * (g & 1);
        const uint8_t *hm = b->hmask + 16 * (g & 1);
        __m128i sh = _mm_cvtsi32_si128(2 * ((g % 8) / 2));
        __m256i m = _mm256_set1_epi32(1 << (g / 2));
        __m256 dl = _mm256_set1_ps(d_all * (sc[g] - 32));
        for (int h = 0; h < 16; h += 8) {
            __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + h)));
            __m256i hv = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(hm + h)));
            v = _mm256_and_si256(_mm256_srl_epi32(v, sh), three);
            /* subtract 4 where the high bit is clear */
            __m256i clear = _mm256_cmpeq_epi32(_mm256_and_si256(hv, m), _mm256_setzero_si256());
            v = _mm256_sub_epi32(v, _mm256_and_si256(clear, four));
            _mm256_storeu_ps(y + 16 * g + h, _mm256_mul_ps(dl, _mm256_cvtepi32_ps(v)));
        }
    }
}

KILN_AVX512 static void dequant_avx512(const kiln_block_q3_k *b, float *y) {
    const float d_all = kiln_fp16_to_fp32(b->d);
    int sc[16];
    unpack_scales(b->scales, sc);
    const __m512i three = _mm512_set1_epi32(3), four = _mm512_set1_epi32(4);
    for (int g = 0; g < 16; ++g) {
        const uint8_t *q = b->qs + 32 * (g / 8) + 16 * (g & 1);
        const uint8_t *hm = b->hmask + 16 * (g & 1);
        __m128i sh = _mm_cvtsi32_si128(2 * ((g % 8) / 2));
        __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
        __m512i hv = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)hm));
        v = _mm512_and_si512(_mm512_srl_epi32(v, sh), three);
        __mmask16 clear = _mm512_testn_epi32_mask(hv, _mm512_set1_epi32(1 << (g / 2)));
        v = _mm512_mask_sub_epi32(v, clear, v, four);
        __m512 dl = _mm512_set1_ps(d_all * (sc[g] - 32));
        _mm512_storeu_ps(y + 16 * g, _mm512_mul_ps(dl, _mm512_cvtepi32_ps(v)));
    }
}
#endif

void kiln_dequantize_row_q3_k(const void *src, float *dst, int64_t n) {
    const kiln_block_q3_k *b = src;
    void (*dequant)(const kiln_block_q3_k *, float *) = KILN_SIMD_PICK(dequant);
    for (int64_t i = 0; i < n / KILN_QK_K; ++i) dequant(&b[i], dst + i * KILN_QK_K);
}

/* ------------------------------------------------------------------ quant */

/* Stores the biased scales Ls (0..63) and d, requantizes against them and
 * packs. L holds the search's levels 0..7, kept (as in ggml) for
 * sub-blocks whose scale comes out zero. */
static void finish_block(const float *x, kiln_block_q3_k *y, const int8_t *Ls, float d,
                         int8_t *L) {
    pack_scales(Ls, y->scales);
    y->d = kiln_fp32_to_fp16(d);
    const float dq = kiln_fp16_to_fp32(y->d);
    int sc[16];
    float dl[16];
    unpack_scales(y->scales, sc);
    for (int j = 0; j < 16; ++j) dl[j] = dq * (float)(int8_t)(sc[j] - 32);
    kiln_levels_for_scales(16, 16, x, dl, NULL, -4, 3, (uint8_t *)L);
    memset(y->hmask, 0, sizeof y->hmask);
    uint8_t low[KILN_QK_K];
    for (int j = 0; j < KILN_QK_K; ++j) {
        uint8_t l = (uint8_t)L[j];
        if (l > 3) {
            y->hmask[j % 32] |= (uint8_t)(1 << (j / 32));
            l -= 4;
        }
        low[j] = l;
    }
    kiln_pack_2bit_k(low, y->qs);
}

/* ggml's quantize_row_q3_K_ref for one super-block. */
static void quantize_block_ref(const float *x, kiln_block_q3_k *y) {
    int8_t L[KILN_QK_K], Ls[16];
    float scales[16];
    for (int j = 0; j < 16; ++j)
        scales[j] = kiln_make_q3_quants(16, 4, x + 16 * j, L + 16 * j, true);
    float amax, max_scale = kiln_max_magnitude(scales, 16, &amax);
    if (!max_scale) { /* zero scales: ggml stores zero bytes and d = 0 */
        memset(Ls, 0, sizeof Ls);
        finish_block(x, y, Ls, 0.f, L);
        return;
    }
    float iscale = -32.f / max_scale;
    for (int j = 0; j < 16; ++j) {
        int8_t l = (int8_t)kiln_nearest_int(iscale * scales[j]);
        Ls[j] = (int8_t)((l < -32 ? -32 : l > 31 ? 31 : l) + 32);
    }
    finish_block(x, y, Ls, 1 / iscale, L);
}

/* ggml's quantize_row_q3_K_impl for one super-block; qw = its imatrix. */
static void quantize_block_imx(const float *x, kiln_block_q3_k *y, const float *qw) {
    int8_t L[KILN_QK_K], Ls[16];
    float scales[16], weight[16], sw[16];
    float sumx2 = 0;
    for (int j = 0; j < KILN_QK_K; ++j) sumx2 += x[j] * x[j];
    float sigma2 = 2 * sumx2 / KILN_QK_K;
    for (int j = 0; j < 16; ++j) {
        sw[j] = kiln_importance_weights(16, x + 16 * j, qw + 16 * j, sigma2, weight);
        scales[j] = kiln_make_qx_quants(16, 4, x + 16 * j, L + 16 * j, 1, weight);
    }
    float d_block = kiln_make_qx_quants(16, 32, scales, Ls, 1, sw);
    finish_block(x, y, Ls, d_block, L);
}

/* One super-block: ggml's reference search, or its imatrix one. */
static void quantize_block(const float *x, const float *qw, void *y, const void *ctx) {
    if (qw) quantize_block_imx(x, y, qw);
    else quantize_block_ref(x, y);
}

void kiln_quantize_row_q3_k_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_blocks(src, dst, 1, n, NULL, KILN_QK_K, sizeof(kiln_block_q3_k), quantize_block,
                         NULL);
}

size_t kiln_quantize_q3_k(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix) {
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK_K,
                                sizeof(kiln_block_q3_k), quantize_block, NULL);
}
