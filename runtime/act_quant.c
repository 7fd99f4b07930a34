/* runtime/act_quant.c - activations converted to a weight type's
 * vec_dot_type, the way ggml's x86 CPU backend does it before a product.
 *
 * Q8_0 is NOT the reference quantizer of quantize/q8_0.c: the backend's
 * from_float (ggml-cpu/arch/x86/quants.c, quantize_row_q8_0) computes the
 * inverse scale as 127 / amax instead of 1 / (amax / 127) and rounds with
 * _mm256_round_ps to nearest even, not roundf; Q8_1 (for Q4_1 and Q5_1
 * weights) is the same plus s = d * sum. Q8_K on x86 is the
 * reference (quantize_row_q8_K calls quantize_row_q8_K_ref), so the codec
 * is reused; the repacked products' ggml_quantize_mat_q8_K_4x8 differs
 * from it only in the sign it gives a tie of largest magnitudes. F16 uses F16C rounding and BF16 ggml's scalar
 * GGML_FP32_TO_BF16, both in core/fp16.h. */
#include "vecdot.h"

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../codec/quants.h"
#include "../codec/search.h"

#include <math.h>
#include <string.h>

#ifdef __x86_64__
#include <immintrin.h>
#endif

/* A product outside int32 (only when 127 / amax overflowed: x * inf or
 * 0 * inf) becomes INT32_MIN in cvtps2dq and then -128 after the
 * saturating packs; ordinary values are within +-127 after rounding. */
static inline int8_t q8_0_level(float v) {
    if (!(fabsf(v) < 2147483648.f)) return -128;
    /* 1.5 * 2^23 pushes the fraction out: round to nearest even, exact
     * for |v| < 2^22 (every finite v here is below 128.1). */
    float r = (v + 12582912.f) - 12582912.f;
    int i = (int)r;
    return (int8_t)(i > 127 ? 127 : i < -128 ? -128 : i);
}

/* The block's largest |x|, as _mm256_max_ps folds it (see q8_0_avx2). */
static inline float block_amax(const float *x) {
    float amax = 0;
    for (int j = 0; j < KILN_QK; j++) {
        float a = fabsf(x[j]);
        amax = amax >= a ? amax : a;
    }
    return amax;
}

static void q8_0_scalar(const float *x, kiln_block_q8_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += KILN_QK) {
        const float amax = block_amax(x);
        y[i].d = kiln_fp32_to_fp16(amax / 127.f);
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        for (int j = 0; j < KILN_QK; j++) y[i].qs[j] = q8_0_level(x[j] * id);
    }
}

#ifdef __x86_64__
/* The same operations on 8 lanes; _mm256_max_ps(a, b) returns b unless
 * a > b, i.e. the scalar's `amax >= a ? amax : a` with operands swapped
 * only where they are equal. */
__attribute__((target("avx2,fma,f16c"))) static void q8_0_avx2(const float *x, kiln_block_q8_0 *y,
                                                                int64_t nb) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < nb; i++, x += KILN_QK) {
        __m256 v[4];
        for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 8 * k);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float amax = _mm_cvtss_f32(h);
        y[i].d = kiln_fp32_to_fp16(amax / 127.f);
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
        __m256i q[4];
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], id),
                                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)y[i].qs, _mm256_permutevar8x32_epi32(b, order));
    }
}
#endif

void kiln_act_q8_0(const float *x, kiln_block_q8_0 *y, int64_t n) {
#ifdef __x86_64__
    /* The maximum of |x| does not depend on the order, so SIMD and scalar
     * agree except on NaN inputs, where no two tools agree anyway. */
    if (kiln_simd() >= KILN_SIMD_AVX2) {
        q8_0_avx2(x, y, n / KILN_QK);
        return;
    }
#endif
    q8_0_scalar(x, y, n / KILN_QK);
}

/* Q8_1 as ggml's x86 quantize_row_q8_1 (AVX2) makes it: Q8_0's bytes
 * and scale, and s = fp16(d * sum) where d is the unrounded amax / 127
 * and the sum is of the int32 values _mm256_cvtps_epi32 gave, before the
 * saturating packs (they differ only when 127 / amax overflowed: then
 * every value is INT32_MIN, and the int32 sum wraps as ggml's does).
 * Scalar: the conversion is a small part of a Q4_1 / Q5_1 product. */
void kiln_act_q8_1(const float *x, kiln_block_q8_1 *y, int64_t n) {
    for (int64_t i = 0; i < n / KILN_QK; i++, x += KILN_QK) {
        const float amax = block_amax(x), d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        uint32_t sum = 0; /* int32 arithmetic modulo 2^32 */
        for (int j = 0; j < KILN_QK; j++) {
            const float v = x[j] * id;
            y[i].qs[j] = q8_0_level(v);
            sum += fabsf(v) < 2147483648.f ? (uint32_t)(int32_t)((v + 12582912.f) - 12582912.f) : 0x80000000u;
        }
        y[i].d = kiln_fp32_to_fp16(d);
        y[i].s = kiln_fp32_to_fp16(d * (float)(int32_t)sum);
    }
}

#ifdef __x86_64__
/* One Q8_K block on AVX-512, as the scalar code below makes it: the same
 * products iscale * x, rounded by the same 1.5 * 2^23 trick (so NaN and
 * infinity give the scalar's levels too), the same clamp, and d = 1 /
 * iscale; bsums are exact integer sums, in any order. x4: the sign rule
 * of ggml_quantize_mat_q8_K_4x8 (+amax whenever it occurs), else the
 * reference's (the first value of largest magnitude). The largest |x|
 * does not depend on the order; _mm512_max_ps(a, m) keeps m where a is
 * NaN, as the scalar search skips NaN. Batches of tokens are quantized a
 * block at a time before every k-quant product, where the scalar loops
 * cost a third as much as the products themselves on small models. */
__attribute__((target("avx512f,avx512bw"))) static void q8_k_block_avx512(const float *x, kiln_block_q8_k *y,
                                                                          bool x4) {
    __m512 v[16], m = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        v[i] = _mm512_loadu_ps(x + 16 * i);
        m = _mm512_max_ps(_mm512_abs_ps(v[i]), m);
    }
    const float amax = _mm512_reduce_max_ps(m);
    if (!amax) {
        memset(y, 0, sizeof *y);
        return;
    }
    const __m512 va = _mm512_set1_ps(amax);
    float max = -amax;
    if (x4) {
        for (int i = 0; i < 16; i++)
            if (_mm512_cmp_ps_mask(v[i], va, _CMP_EQ_OQ)) max = amax;
    } else {
        for (int i = 0; i < 16; i++) {
            const __mmask16 at = _mm512_cmp_ps_mask(_mm512_abs_ps(v[i]), va, _CMP_EQ_OQ);
            if (at) {
                max = x[16 * i + __builtin_ctz(at)];
                break;
            }
        }
    }
    const float iscale = -127.f / max;
    const __m512 vs = _mm512_set1_ps(iscale), magic = _mm512_set1_ps(12582912.f);
    const __m512i low = _mm512_set1_epi32(0x007fffff), bias = _mm512_set1_epi32(0x00400000);
    const __m512i top = _mm512_set1_epi32(127);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        const __m512i bits = _mm512_castps_si512(_mm512_add_ps(_mm512_mul_ps(vs, v[i]), magic));
        const __m512i q = _mm512_min_epi32(_mm512_sub_epi32(_mm512_and_si512(bits, low), bias), top);
        _mm_storeu_si128((__m128i *)(y->qs + 16 * i), _mm512_cvtepi32_epi8(q));
        y->bsums[i] = (int16_t)_mm512_reduce_add_epi32(q);
    }
    y->d = 1 / iscale;
}
#endif

void kiln_act_q8_k(const float *x, kiln_block_q8_k *y, int64_t n) {
#ifdef __x86_64__
    if (kiln_simd() >= KILN_SIMD_AVX512) {
        for (int64_t b = 0; b < n / KILN_QK_K; b++) q8_k_block_avx512(x + b * KILN_QK_K, &y[b], false);
        return;
    }
#endif
    kiln_quantize_row_q8_k_ref(x, y, n);
}

/* The reference maps the first value of largest magnitude to -127 (its
 * iscale is -127 / max); the 4x8 quantizer maps +amax to -127 whenever
 * +amax occurs. They differ only when the first such value is -amax and
 * +amax occurs too: then the block is redone with iscale = -127 / amax
 * (same rounding and clamp as the reference). */
void kiln_act_q8_k_x4(const float *x, kiln_block_q8_k *y, int64_t n) {
#ifdef __x86_64__
    if (kiln_simd() >= KILN_SIMD_AVX512) {
        for (int64_t b = 0; b < n / KILN_QK_K; b++) q8_k_block_avx512(x + b * KILN_QK_K, &y[b], true);
        return;
    }
#endif
    kiln_quantize_row_q8_k_ref(x, y, n);
    for (int64_t b = 0; b < n / KILN_QK_K; b++) {
        const float *xb = x + b * KILN_QK_K;
        float amax;
        const float max = kiln_max_magnitude(xb, KILN_QK_K, &amax);
        if (!(max < 0)) continue;
        bool pos = false;
        for (int j = 0; j < KILN_QK_K; j++) pos |= xb[j] == amax;
        if (!pos) continue;
        const float iscale = -127.f / amax;
        kiln_block_q8_k *yb = &y[b];
        for (int j = 0; j < KILN_QK_K; j++) {
            const int v = kiln_nearest_int(iscale * xb[j]);
            yb->qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < KILN_QK_K / 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += yb->qs[16 * j + i];
            yb->bsums[j] = (int16_t)sum;
        }
        yb->d = 1 / iscale;
    }
}

void kiln_act_round_f16(const float *x, float *y, int64_t n) {
    uint16_t tmp[256];
    for (int64_t i = 0; i < n; i += 256) {
        int64_t m = n - i < 256 ? n - i : 256;
        kiln_fp32_to_fp16_row(x + i, tmp, m);
        kiln_fp16_to_fp32_row(tmp, y + i, m);
    }
}

void kiln_act_round_bf16(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = kiln_bf16_to_fp32(kiln_fp32_to_bf16(x[i]));
}

void kiln_act_round(uint32_t type, const float *x, float *y, int64_t n) {
    if (type == KILN_F16) kiln_act_round_f16(x, y, n);
    else if (type == KILN_BF16) kiln_act_round_bf16(x, y, n);
    else memcpy(y, x, (size_t)n * sizeof *y);
}

void kiln_act_bits16(uint32_t type, const float *x, uint16_t *y, int64_t n) {
    if (type == KILN_F16) kiln_fp32_to_fp16_row(x, y, n);
    else kiln_fp32_to_bf16_row(x, y, n);
}

void kiln_act_row(const kiln_qtype *qt, const float *x, void *dst, int64_t n) {
    if (qt->act_type == KILN_Q8_K) kiln_act_q8_k(x, dst, n);
    else if (qt->act_type == KILN_Q8_1) kiln_act_q8_1(x, dst, n);
    else kiln_act_q8_0(x, dst, n);
}
