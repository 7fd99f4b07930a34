/* runtime/vecdot_simd.h - AVX-512 register helpers shared by the f32
 * kernels (vecdot_float.c, vecdot_fdecode.c, vecdot_frows.c). Include
 * only from x86 code; every function carries its own target attribute. */
#ifndef KILN_VECDOT_SIMD_H
#define KILN_VECDOT_SIMD_H

#ifdef __x86_64__
#include <immintrin.h>
#include <stdint.h>

#include "../core/types.h"

#define KILN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

/* 16 weights of an F32 / F16 / BF16 row at w (element index k), widened
 * exactly to f32 (type: a core/types.h id; constant where it is inlined). */
KILN_AVX512 static inline __attribute__((always_inline)) __m512 kiln_fwiden16(uint32_t type, const void *w,
                                                                              int64_t k) {
    if (type == KILN_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k)));
    if (type == KILN_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k))), 16));
    return _mm512_loadu_ps((const float *)w + k);
}

/* In-register transpose of 16 x 16 floats: in[i] holds row i, out[j]
 * receives column j. Four rounds of interleaving (64 shuffles). */
KILN_AVX512 static inline __attribute__((always_inline)) void kiln_transpose16(const __m512 in[16],
                                                                               __m512 out[16]) {
    __m512 r[16], t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(in[i], in[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(in[i], in[i + 1]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 4)
        for (int j = 0; j < 2; j++) {
            r[i + j] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + j]), _mm512_castps_pd(t[i + j + 2])));
            r[i + j + 2] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + j]), _mm512_castps_pd(t[i + j + 2])));
        }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 4; j++) {
            t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
            t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
        }
    /* t[j] and t[j + 8] now hold column col[j] and col[j] + 8; the second
     * round swapped the middle two columns of every four */
    static const int col[8] = {0, 2, 1, 3, 4, 6, 5, 7};
#pragma GCC unroll 16
    for (int j = 0; j < 8; j++) {
        out[col[j]] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        out[col[j] + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
    }
}
#endif

#endif
