/* core/fp16.c - row conversions between f32, f16 and bf16 (see fp16.h).
 *
 * f16 uses the F16C instructions (8 or 16 lanes), whose rounding and NaN
 * handling the scalar code in fp16.h mirrors. bf16 has no instruction with
 * ggml's exact rounding (VCVTNEPS2BF16 flushes subnormals), so its vector
 * path does the same integer arithmetic as the scalar one. */
#include "fp16.h"

#include "cpu.h"

#include <immintrin.h>

__attribute__((target("avx2,f16c"))) static void fp16_to_fp32_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = kiln_fp16_to_fp32(src[i]);
}

__attribute__((target("avx2,f16c"))) static void fp32_to_fp16_avx2(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), 0));
    for (; i < n; i++) dst[i] = kiln_fp32_to_fp16(src[i]);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void fp16_to_fp32_avx512(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++) dst[i] = kiln_fp16_to_fp32(src[i]);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static void fp32_to_fp16_avx512(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), 0));
    for (; i < n; i++) dst[i] = kiln_fp32_to_fp16(src[i]);
}

__attribute__((target("avx2"))) static void bf16_to_fp32_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(h, 16));
    }
    for (; i < n; i++) dst[i] = kiln_bf16_to_fp32(src[i]);
}

__attribute__((target("avx2"))) static void fp32_to_bf16_avx2(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i inf = _mm256_set1_epi32(0x7f800000);
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i quiet = _mm256_set1_epi32(64);
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
        __m256i hi = _mm256_srli_epi32(u, 16);
        __m256i rounded = _mm256_srli_epi32(
            _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(hi, one))), 16);
        __m256i nanv = _mm256_or_si256(hi, quiet);
        __m256i r = _mm256_blendv_epi8(rounded, nanv, isnan);
        /* pack 8 x u32 (each < 65536) into 8 x u16 */
        __m128i lo = _mm256_castsi256_si128(r), up = _mm256_extracti128_si256(r, 1);
        _mm_storeu_si128((__m128i *)(dst + i), _mm_packus_epi32(lo, up));
    }
    for (; i < n; i++) dst[i] = kiln_fp32_to_bf16(src[i]);
}

void kiln_fp16_to_fp32_row(const uint16_t *src, float *dst, int64_t n) {
    kiln_simd_level l = kiln_simd();
    if (l >= KILN_SIMD_AVX512) return fp16_to_fp32_avx512(src, dst, n);
    if (l >= KILN_SIMD_AVX2) return fp16_to_fp32_avx2(src, dst, n);
    for (int64_t i = 0; i < n; i++) dst[i] = kiln_fp16_to_fp32(src[i]);
}

void kiln_fp32_to_fp16_row(const float *src, uint16_t *dst, int64_t n) {
    kiln_simd_level l = kiln_simd();
    if (l >= KILN_SIMD_AVX512) return fp32_to_fp16_avx512(src, dst, n);
    if (l >= KILN_SIMD_AVX2) return fp32_to_fp16_avx2(src, dst, n);
    for (int64_t i = 0; i < n; i++) dst[i] = kiln_fp32_to_fp16(src[i]);
}

void kiln_bf16_to_fp32_row(const uint16_t *src, float *dst, int64_t n) {
    if (kiln_simd() >= KILN_SIMD_AVX2) return bf16_to_fp32_avx2(src, dst, n);
    for (int64_t i = 0; i < n; i++) dst[i] = kiln_bf16_to_fp32(src[i]);
}

void kiln_fp32_to_bf16_row(const float *src, uint16_t *dst, int64_t n) {
    if (kiln_simd() >= KILN_SIMD_AVX2) return fp32_to_bf16_avx2(src, dst, n);
    for (int64_t i = 0; i < n; i++) dst[i] = kiln_fp32_to_bf16(src[i]);
}
