/* codec/q6_k.c - the Q6_K codec (block layout in blocks_k.h): 6-bit
 * symmetric levels with a signed 8-bit scale per 16 weights.
 *
 * Quantization follows ggml's quantize_row_q6_K_ref / _impl: a symmetric
 * scale search per sub-block (make_qx_quants, weighted by x^2 or by the
 * imatrix), the 16 scales quantized to int8 against the largest, and the
 * weights requantized against the stored scales. The dequantizer has AVX2
 * and AVX-512 variants giving the scalar path's exact floats. */
#include "quants.h"

#include <string.h>

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "blocks.h"
#include "search.h"

/* Weight 128h + 32s + l keeps its low nibble in ql[64h + 32(s&1) + l]
 * (shifted by 4 for s >= 2) and its top two bits in qh[32h + l] at 2s. */
static void pack(const int8_t L[KILN_QK_K], kiln_block_q6_k *y) {
    for (int h = 0; h < 2; h++) {
        const int8_t *Lh = L + 128 * h;
        uint8_t *ql = y->ql + 64 * h, *qh = y->qh + 32 * h;
        for (int l = 0; l < 32; l++) {
            ql[l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
            ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
            qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                              ((Lh[l + 96] >> 4) << 6));
        }
    }
}

/* One super-block; qw is its 256 imatrix weights or NULL (then each
 * sub-block search weights values by x^2, ggml's rmse_type 1). */
static void quantize_block(const float *x, const float *qw, void *dst, const void *ctx) {
    kiln_block_q6_k *y = dst;
    int8_t L[KILN_QK_K];
    float scales[16];
    for (int ib = 0; ib < 16; ib++)
        scales[ib] = kiln_make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1, qw ? qw + 16 * ib : NULL);
    float max_abs_scale, max_scale = kiln_max_magnitude(scales, 16, &max_abs_scale);
    if (max_abs_scale < KILN_GROUP_MAX_EPS) {
        memset(y, 0, sizeof *y);
        return;
    }
    /* The largest scale maps to -128, so its sign decides the direction. */
    float iscale = -128.f / max_scale;
    y->d = kiln_fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < 16; ib++) {
        int s = kiln_nearest_int(iscale * scales[ib]);
        y->scales[ib] = (int8_t)(s < 127 ? s : 127);
    }
    /* Requantize against the stored scales; a sub-block whose scale rounded
     * to zero keeps the search's levels, as in ggml. */
    float D = kiln_fp16_to_fp32(y->d), d[16];
    for (int j = 0; j < 16; j++) d[j] = D * y->scales[j];
    kiln_levels_for_scales(16, 16, x, d, NULL, -32, 31, (uint8_t *)L);
    pack(L, y);
}

/* ---- dequantization ---------------------------------------------------- */

static void dequant_scalar(const kiln_block_q6_k *b, float *y) {
    float D = kiln_fp16_to_fp32(b->d);
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++) {
            const uint8_t *ql = b->ql + 64 * h + 32 * (s & 1), *qh = b->qh + 32 * h;
            int lshift = 4 * (s >> 1);
            float *yo = y + 128 * h + 32 * s;
            for (int l = 0; l < 32; l++) {
                int q = (((ql[l] >> lshift) & 0xF) | (((qh[l] >> (2 * s)) & 3) << 4)) - 32;
                /* ggml's order: (d * scale) * q */
                yo[l] = D * b->scales[8 * h + 2 * s + l / 16] * q;
            }
        }
}

#ifdef KILN_X86
KILN_AVX2 static void dequant_avx2(const kiln_block_q6_k *b, float *y) {
    float D = kiln_fp16_to_fp32(b->d);
    const __m256i low4 = _mm256_set1_epi32(0xF), two = _mm256_set1_epi32(3),
                  off = _mm256_set1_epi32(32);
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++) {
            const uint8_t *ql = b->ql + 64 * h + 32 * (s & 1), *qh = b->qh + 32 * h;
            const __m128i lshift = _mm_cvtsi32_si128(4 * (s >> 1)), hshift = _mm_cvtsi32_si128(2 * s);
            float *yo = y + 128 * h + 32 * s;
            for (int l = 0; l < 32; l += 8) {
                __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(ql + l)));
                __m256i hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qh + l)));
                lo = _mm256_and_si256(_mm256_srl_epi32(lo, lshift), low4);
                hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(hi, hshift), two), 4);
                __m256i q = _mm256_sub_epi32(_mm256_or_si256(lo, hi), off);
                __m256 ds = _mm256_set1_ps(D * b->scales[8 * h + 2 * s + l / 16]);
                _mm256_storeu_ps(yo + l, _mm256_mul_ps(ds, _mm256_cvtepi32_ps(q)));
            }
        }
}

KILN_AVX512 static void dequant_avx512(const kiln_block_q6_k *b, float *y) {
    float D = kiln_fp16_to_fp32(b->d);
    const __m512i low4 = _mm512_set1_epi32(0xF), two = _mm512_set1_epi32(3),
                  off = _mm512_set1_epi32(32);
    for (int h = 0; h < 2; h++)
        for (int s = 0; s < 4; s++) {
            const uint8_t *ql = b->ql + 64 * h + 32 * (s & 1), *qh = b->qh + 32 * h;
            const __m128i lshift = _mm_cvtsi32_si128(4 * (s >> 1)), hshift = _mm_cvtsi32_si128(2 * s);
            float *yo = y + 128 * h + 32 * s;
            for (int l = 0; l < 32; l += 16) {
                __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(ql + l)));
                __m512i hi = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qh + l)));
                lo = _mm512_and_si512(_mm512_srl_epi32(lo, lshift), low4);
                hi = _mm512_slli_epi32(_mm512_and_si512(_mm512_srl_epi32(hi, hshift), two), 4);
                __m512i q = _mm512_sub_epi32(_mm512_or_si512(lo, hi), off);
                __m512 ds = _mm512_set1_ps(D * b->scales[8 * h + 2 * s + l / 16]);
                _mm512_storeu_ps(yo + l, _mm512_mul_ps(ds, _mm512_cvtepi32_ps(q)));
            }
        }
}
#endif

void kiln_dequantize_row_q6_k(const void *src, float *dst, int64_t n) {
    const kiln_block_q6_k *b = src;
    void (*dequant)(const kiln_block_q6_k *, float *) = KILN_SIMD_PICK(dequant);
    for (int64_t i = 0; i < n / KILN_QK_K; i++) dequant(&b[i], dst + i * KILN_QK_K);
}

void kiln_quantize_row_q6_k_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_blocks(src, dst, 1, n, NULL, KILN_QK_K, sizeof(kiln_block_q6_k), quantize_block,
                         NULL);
}

size_t kiln_quantize_q6_k(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix) {
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK_K,
                                sizeof(kiln_block_q6_k), quantize_block, NULL);
}
