/* codec/q8_0.c - Q8_0: 32 weights as signed bytes times one fp16 scale
 * (block layout in blocks_legacy.h).
 *
 * The quantizer is ggml's quantize_row_q8_0_ref: d = max|x| / 127 and
 * q = roundf(x / d). There is no search, so ggml ignores the imatrix and
 * so does kiln. The AVX2 / AVX-512 paths compute the same d, the same
 * products x * (1/d) and the same round-half-away-from-zero, so their bytes
 * equal the scalar ones. */
#include "blocks.h"
#include "quants.h"

#include "../core/cpu.h"
#include "../core/fp16.h"

#include <math.h>
#include <string.h>

/* Scale and inverse scale of a block whose largest |x| is amax. When d is
 * so small that 1/d overflows, every x/d is +-inf or NaN, which ggml's
 * float -> int8 conversion (cvttss2si, 0x80000000) turns into level 0; the
 * caller writes zeros for that case instead of converting infinities. */
static inline float q8_0_scale(float amax, float *id) {
    float d = amax / 127;
    *id = d ? 1.0f / d : 0.0f;
    return d;
}

static void q8_0_row_scalar(const float *x, kiln_block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += KILN_QK) {
        float amax = 0, id;
        for (int j = 0; j < KILN_QK; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
        y[i].d = kiln_fp32_to_fp16(q8_0_scale(amax, &id));
        if (isinf(id)) {
            memset(y[i].qs, 0, sizeof y[i].qs);
            continue;
        }
        for (int j = 0; j < KILN_QK; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void q8_0_dequant_scalar(const kiln_block_q8_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        float d = kiln_fp16_to_fp32(x[i].d);
        for (int j = 0; j < KILN_QK; j++) y[i * KILN_QK + j] = x[i].qs[j] * d;
    }
}

#ifdef KILN_X86
/* roundf on 8 lanes: truncate, then step away from zero when the dropped
 * fraction (exact, as |v| < 2^23) is at least one half. Adding 0.5 before
 * truncating would be wrong for 0.49999997, whose sum rounds up to 1. */
KILN_AVX2 static inline __m256i round_away8(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    __m256 step = _mm256_or_ps(_mm256_and_ps(sign, v), _mm256_set1_ps(1.0f));
    __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm256_cvtps_epi32(_mm256_add_ps(t, _mm256_and_ps(up, step)));
}

KILN_AVX2 static void q8_0_row_avx2(const float *x, kiln_block_q8_0 *y, int64_t nb) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < nb; i++, x += KILN_QK) {
        __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
        __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float id;
        float d = q8_0_scale(_mm_cvtss_f32(h), &id);
        y[i].d = (kiln_half)_cvtss_sh(d, 0);
        if (isinf(id)) {
            memset(y[i].qs, 0, sizeof y[i].qs);
            continue;
        }
        __m256 idv = _mm256_set1_ps(id);
        __m256i q0 = round_away8(_mm256_mul_ps(v0, idv)), q1 = round_away8(_mm256_mul_ps(v1, idv));
        __m256i q2 = round_away8(_mm256_mul_ps(v2, idv)), q3 = round_away8(_mm256_mul_ps(v3, idv));
        /* |q| <= 127, so the saturating packs are exact; they interleave
         * the 128-bit lanes, which the final permute undoes. */
        __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
        _mm256_storeu_si256((__m256i *)y[i].qs, _mm256_permutevar8x32_epi32(b, order));
    }
}

KILN_AVX2 static void q8_0_dequant_avx2(const kiln_block_q8_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += KILN_QK) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(x[i].d));
        for (int j = 0; j < KILN_QK; j += 8) {
            __m128i q = _mm_loadl_epi64((const __m128i *)(x[i].qs + j));
            _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
        }
    }
}

KILN_AVX512 static inline __m512i round_away16(__m512 v) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m512 frac = _mm512_andnot_ps(sign, _mm512_sub_ps(v, t));
    __m512 step = _mm512_or_ps(_mm512_and_ps(sign, v), _mm512_set1_ps(1.0f));
    __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm512_cvtps_epi32(_mm512_mask_add_ps(t, up, t, step));
}

KILN_AVX512 static void q8_0_row_avx512(const float *x, kiln_block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += KILN_QK) {
        __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        float id;
        float d = q8_0_scale(_mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1))), &id);
        y[i].d = (kiln_half)_cvtss_sh(d, 0);
        if (isinf(id)) {
            memset(y[i].qs, 0, sizeof y[i].qs);
            continue;
        }
        __m512 idv = _mm512_set1_ps(id);
        _mm_storeu_si128((__m128i *)y[i].qs, _mm512_cvtepi32_epi8(round_away16(_mm512_mul_ps(v0, idv))));
        _mm_storeu_si128((__m128i *)(y[i].qs + 16), _mm512_cvtepi32_epi8(round_away16(_mm512_mul_ps(v1, idv))));
    }
}

KILN_AVX512 static void q8_0_dequant_avx512(const kiln_block_q8_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += KILN_QK) {
        __m512 d = _mm512_set1_ps(_cvtsh_ss(x[i].d));
        for (int j = 0; j < KILN_QK; j += 16) {
            __m128i q = _mm_loadu_si128((const __m128i *)(x[i].qs + j));
            _mm512_storeu_ps(y + j, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d));
        }
    }
}
#endif

void kiln_dequantize_row_q8_0(const void *src, float *dst, int64_t n) {
    KILN_SIMD_PICK(q8_0_dequant)(src, dst, n / KILN_QK);
}

void kiln_quantize_row_q8_0_ref(const float *src, void *dst, int64_t n) {
    KILN_SIMD_PICK(q8_0_row)(src, dst, n / KILN_QK);
}

/* Rows are contiguous and blocks never straddle them, so the whole input
 * is one long row. */
size_t kiln_quantize_q8_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix) {
    (void)imatrix;
    kiln_quantize_row_q8_0_ref(src, dst, nrows * n_per_row);
    return (size_t)(nrows * n_per_row / KILN_QK) * sizeof(kiln_block_q8_0);
}
