/* codec/iq2_scan.c - the 2-bit grids' neighbour scan by table look-up (see
 * iq2_scan.h).
 *
 * term(i, l) = w[i] * (scale * (2l + 1) - x[i]) * (scale * (2l + 1) - x[i])
 * with ggml's rounding: the product scale * q, the difference, then
 * (w * diff) * diff. The SIMD versions compute the 24 terms with those same
 * operations, one term per lane, and sum a candidate's 8 looked-up terms
 * in coordinate order starting from 0, so each distance is the scalar
 * one's float, and the lanes merge by (distance, then position). */
#include "iq2_scan.h"
#include "scan_min.h"

#include "quants.h"

#include "../core/cpu.h"

#include <float.h>

int kiln_iq2_scan_scalar(const uint16_t *keys, int n, int npad, const float *x, const float *w, float scale) {
    (void)npad;
    float best = FLT_MAX;
    int bj = 0;
    for (int j = 0; j < n; j++) {
        float d2 = 0;
        for (int i = 0; i < 8; i++) {
            float diff = scale * (float)(2 * ((keys[j] >> 2 * i) & 3) + 1) - x[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best) {
            best = d2;
            bj = j;
        }
    }
    return bj;
}

#ifdef KILN_X86
/* The 24 terms as term[i][l] (l = 3 unused), scalar order of operations. */
static inline void terms(const float *x, const float *w, float scale, float term[8][4]) {
    for (int i = 0; i < 8; i++)
        for (int l = 0; l < 3; l++) {
            float diff = scale * (float)(2 * l + 1) - x[i];
            term[i][l] = w[i] * diff * diff;
        }
}

KILN_AVX2 static int scan_avx2(const uint16_t *keys, int n, int npad, const float *x, const float *w,
                               float scale) {
    float term[8][4] = {{0}};
    terms(x, w, scale, term);
    __m256 t[8];
    for (int i = 0; i < 8; i++) t[i] = _mm256_broadcast_ps((const __m128 *)term[i]);
    const __m256i three = _mm256_set1_epi32(3);
    kiln_min8 m = kiln_min8_start(n);
    for (int j = 0; j < n; j += 8) {
        __m256i k = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(keys + j)));
        __m256 d2 = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            d2 = _mm256_add_ps(d2, _mm256_permutevar8x32_ps(t[i], _mm256_and_si256(_mm256_srli_epi32(k, 2 * i), three)));
        kiln_min8_take(&m, d2);
    }
    (void)npad;
    return kiln_min8_end(&m);
}

/* The terms sit in two 16-lane tables, term(i, l) at lane 4i + l of the
 * pair, so one two-table permute looks up a coordinate for 16 candidates:
 * the distances of keys[0..16), summed in coordinate order. */
KILN_AVX512 static inline __m512 dist16(const uint16_t *keys, __m512 lo, __m512 hi) {
    const __m512i k = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)keys));
    __m512 d2 = _mm512_setzero_ps();
#pragma GCC unroll 8 /* immediate shift counts */
    for (int i = 0; i < 8; i++) {
        /* ((k >> 2i) & 3) | 4i in one ternary-logic step (A & B | C) */
        __m512i at = _mm512_ternarylogic_epi32(_mm512_srli_epi32(k, 2 * i), _mm512_set1_epi32(3),
                                               _mm512_set1_epi32(4 * i), 0xEA);
        d2 = _mm512_add_ps(d2, _mm512_permutex2var_ps(lo, at, hi));
    }
    return d2;
}

KILN_AVX512 static int scan_avx512(const uint16_t *keys, int n, int npad, const float *x, const float *w,
                                   float scale) {
    const __m512i rep = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i rep4 = _mm512_add_epi32(rep, _mm512_set1_epi32(4));
    const __m512 q = _mm512_setr_ps(1, 3, 5, 7, 1, 3, 5, 7, 1, 3, 5, 7, 1, 3, 5, 7);
    const __m512 xv = _mm512_castps256_ps512(_mm256_loadu_ps(x));
    const __m512 wv = _mm512_castps256_ps512(_mm256_loadu_ps(w));
    const __m512 sq = _mm512_mul_ps(_mm512_set1_ps(scale), q);
    __m512 diff = _mm512_sub_ps(sq, _mm512_permutexvar_ps(rep, xv));
    const __m512 lo = _mm512_mul_ps(_mm512_mul_ps(_mm512_permutexvar_ps(rep, wv), diff), diff);
    diff = _mm512_sub_ps(sq, _mm512_permutexvar_ps(rep4, xv));
    const __m512 hi = _mm512_mul_ps(_mm512_mul_ps(_mm512_permutexvar_ps(rep4, wv), diff), diff);

    const __m512i nv = _mm512_set1_epi32(n);
    const __m512 fmax = _mm512_set1_ps(FLT_MAX);
    __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    if (n <= 16) { /* most lists: one step, and the first minimum is the lowest lane */
        __m512 d2 = dist16(keys, lo, hi);
        __mmask16 ok = _mm512_cmp_ps_mask(d2, fmax, _CMP_LT_OQ) & _mm512_cmpgt_epi32_mask(nv, lane);
        if (!ok) return 0;
        float m = _mm512_mask_reduce_min_ps(ok, d2);
        return __builtin_ctz(_mm512_mask_cmp_ps_mask(ok, d2, _mm512_set1_ps(m), _CMP_EQ_OQ));
    }
    __m512 best = fmax;
    __m512i bidx = _mm512_setzero_si512();
    for (int j = 0; j < n; j += 16) {
        __m512 d2 = dist16(keys + j, lo, hi);
        __mmask16 lt = _mm512_cmp_ps_mask(d2, best, _CMP_LT_OQ) & _mm512_cmpgt_epi32_mask(nv, lane);
        best = _mm512_mask_mov_ps(best, lt, d2);
        bidx = _mm512_mask_mov_epi32(bidx, lt, lane);
        lane = _mm512_add_epi32(lane, _mm512_set1_epi32(16));
    }
    (void)npad;
    float m = _mm512_reduce_min_ps(best);
    __mmask16 at = _mm512_cmp_ps_mask(best, _mm512_set1_ps(m), _CMP_EQ_OQ);
    return at ? _mm512_mask_reduce_min_epi32(at, bidx) : 0;
}
#endif

kiln_iq2_scan_fn kiln_iq2_scan_pick(void) {
#ifdef KILN_X86
    if (kiln_simd() >= KILN_SIMD_AVX512) return scan_avx512;
    if (kiln_simd() >= KILN_SIMD_AVX2) return scan_avx2;
#endif
    return kiln_iq2_scan_scalar;
}
