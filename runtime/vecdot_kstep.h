/* runtime/vecdot_kstep.h - the float steps of the Q8_K types' direct
 * kernels: how one super-block's exact integer sums (eight lanes and
 * eight mins) enter a token's accumulators, and the last step of a row,
 * in the reference's operations (vecdot_korder.c's vecdot_order and
 * repacked_order with one group of 8 chunks). Shared by the AVX2 kernels
 * (vecdot_kdirect.c) and the AVX-512 VNNI ones (vecdot_kvnni.c), which
 * differ only in how they take the integer sums. Internal to the runtime;
 * include after vecdot.h, in files compiled with fp-contract off. */
#ifndef KILN_VECDOT_KSTEP_H
#define KILN_VECDOT_KSTEP_H

#ifdef __x86_64__
#include <immintrin.h>

#include "vecdot.h"

#define KILN_KSTEP static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* One token's float state for one output, in the reference's variables. */
typedef struct kiln_kacc {
    __m256 acc;  /* vec_dot: the eight lane accumulators */
    __m128 accm; /* Q4_K's four min accumulators */
    float summs; /* Q5_K's min sum; legacy types' sumf */
    float a, m;  /* gemv: sums and mins */
} kiln_kacc;

KILN_KSTEP int32_t kiln_kstep_hsum(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* fmaf(a, b, c) with one rounding, as the reference's fmaf. */
KILN_KSTEP float kiln_kstep_fma(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

/* One super-block's step of the vec_dot order: lane and min are its eight
 * lane sums and eight mins (m[j] = mn[2j] * bsums[2j] + mn[2j + 1] *
 * bsums[2j + 1]), xd / xdmin the block's factors, yd the token's. */
KILN_KSTEP void kiln_kstep_vecdot(kiln_combine comb, kiln_kacc *s, __m256i lane, __m256i min, float xd, float xdmin,
                                  float yd) {
    const float d = yd * xd, dmin = -yd * xdmin;
    if (comb == KILN_COMB_K_Q6) lane = _mm256_sub_epi32(lane, min);
    if (comb == KILN_COMB_K_Q2) s->acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(min), s->acc);
    if (comb == KILN_COMB_K_Q4) {
        /* m[2k] + m[2k + 1] for k = 0..3 in the low 128 bits */
        const __m256i pairs = _mm256_permute4x64_epi64(_mm256_hadd_epi32(min, min), 0x08);
        s->accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(_mm256_castsi256_si128(pairs)), s->accm);
    }
    if (comb == KILN_COMB_K_Q5) s->summs = kiln_kstep_fma(dmin, (float)kiln_kstep_hsum(min), s->summs);
    s->acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lane), s->acc);
}

/* One super-block's step of the gemv order, from its whole integer sum
 * and whole min sum. */
KILN_KSTEP void kiln_kstep_gemv(kiln_kacc *s, int32_t sum, int32_t min, float xd, float xdmin, float yd) {
    s->a = kiln_kstep_fma((float)sum, xd * yd, s->a);
    s->m = kiln_kstep_fma((float)min, xdmin * yd, s->m);
}

/* The row's output from a token's accumulators. */
KILN_KSTEP float kiln_kstep_finish(kiln_combine comb, kiln_korder order, const kiln_kacc *s) {
    if (order == KILN_KORDER_GEMV) return s->a - s->m;
    float acc[8], m[4];
    _mm256_storeu_ps(acc, s->acc);
    _mm_storeu_ps(m, s->accm);
    float r = kiln_hsum8(acc);
    if (comb == KILN_COMB_K_Q4) r = r + ((m[0] + m[2]) + (m[1] + m[3]));
    if (comb == KILN_COMB_K_Q5) r = r + s->summs;
    if (comb == KILN_COMB_IQ2) r = 0.125f * r;
    if (comb == KILN_COMB_IQ3) r = 0.25f * r;
    return r;
}
#endif

#endif
