/* runtime/vecdot_q0direct.c - the direct kernels (a few tokens, weights
 * read in place) of the 32-weight types Q4_0, Q5_0 and IQ4_NL against
 * Q8_0 activations, one per x86 order of vecdot_legacy.c:
 *
 *   kiln_kdirect_q0_lanes8  eight float lanes of 4-weight sums (vec_dot of
 *                           Q4_0 / Q5_0, tinyBLAS of all three);
 *   kiln_kdirect_iq4_nl_pairs  IQ4_NL's vec_dot, blocks in pairs;
 *   kiln_kdirect_q0_fma     one fmaf per block (repacked Q4_0 / IQ4_NL).
 *
 * Up to 8 blocks of a row are unpacked to levels at a time (qt->unpack)
 * and serve up to GROUP tokens; each block's integer sums with a token come
 * out of vpmaddubsw + vpmaddwd (ggml's sign trick: levels and activations
 * within +-127, pair sums below 2^15, exact), then the reference's float
 * steps, vfmadd being its fmaf: the outputs equal qt->dot / dot_tiny /
 * dot_gemv bit for bit (tests/test_vecdot_q0.c). Q8_0 itself reads its
 * blocks without unpacking (vecdot_q8direct.c). AVX2; the table in
 * kernels.c gives these to every level from AVX2 up. */
#ifdef __clang__
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels.h"

#include "../core/fp16.h"

#include <math.h>

/* Tokens sharing one unpacked run of blocks. */
#define GROUP 4

#ifdef __x86_64__
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

/* Lane l = the sum over weights 4l..4l+3 of one block. */
AVX2 INLINE __m256i lane_sums(const int8_t *q, const int8_t *a) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)q), x = _mm256_loadu_si256((const __m256i *)a);
    const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

AVX2 INLINE float hsum8(__m256 v) {
    float l[8];
    _mm256_storeu_ps(l, v);
    return kiln_hsum8(l);
}

AVX2 INLINE int hsum_i32(__m256i v) {
    int32_t l[8];
    _mm256_storeu_si256((__m256i *)l, v);
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

typedef enum q0order { Q0_LANES8, Q0_PAIRS, Q0_FMA } q0order;

/* Row w (nb blocks) against tokens t0..t0+nt-1 in `order`. */
AVX2 INLINE void q0_row(const kiln_qtype *qt, q0order order, const uint8_t *w, int64_t nb,
                        const kiln_block_q8_0 *act, int64_t t0, int nt, float *y, int64_t ldy) {
    __m256 acc[GROUP][2];
    float facc[GROUP];
    for (int k = 0; k < GROUP; k++) {
        acc[k][0] = acc[k][1] = _mm256_setzero_ps();
        facc[k] = 0;
    }
    /* pairs: the blocks before an odd last one go to the lanes */
    const int64_t n_lanes = order == Q0_PAIRS ? nb - nb % 2 : nb;
    for (int64_t i0 = 0; i0 < nb; i0 += 8) {
        const int n = nb - i0 < 8 ? (int)(nb - i0) : 8;
        kiln_qblock b;
        qt->unpack(w + i0 * qt->block_bytes, n, &b);
        for (int k = 0; k < nt; k++) {
            const kiln_block_q8_0 *a = act + (t0 + k) * nb;
            for (int j = 0; j < n; j++) {
                const int64_t i = i0 + j;
                const __m256i s = lane_sums(b.q + 32 * j, a[i].qs);
                const float dy = kiln_fp16_to_fp32(a[i].d);
                if (order == Q0_FMA) {
                    facc[k] = fmaf((float)hsum_i32(s), b.d[j] * dy, facc[k]);
                } else if (i < n_lanes) {
                    /* ggml's IQ4_NL vec_dot takes dy * dx: the same float */
                    const int set = order == Q0_PAIRS ? (int)(i & 1) : 0;
                    acc[k][set] = _mm256_fmadd_ps(_mm256_set1_ps(b.d[j] * dy), _mm256_cvtepi32_ps(s), acc[k][set]);
                } else {
                    facc[k] = (dy * b.d[j]) * (float)hsum_i32(s);
                }
            }
        }
    }
    for (int k = 0; k < nt; k++) {
        float r = facc[k];
        if (order == Q0_LANES8) r = hsum8(acc[k][0]);
        else if (order == Q0_PAIRS) {
            r = hsum8(_mm256_add_ps(acc[k][0], acc[k][1]));
            if (n_lanes < nb) r += facc[k];
        }
        y[(t0 + k) * ldy] = r;
    }
}

#define Q0ROW(NAME, ORDER)                                                                                  \
    AVX2 void NAME(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act, int64_t t0, int nt, \
                   float *y, int64_t ldy) {                                                                 \
        q0_row(qt, ORDER, w, nb, act, t0, nt, y, ldy);                                                      \
    }
Q0ROW(kiln_kdirect_q0_lanes8, Q0_LANES8)
Q0ROW(kiln_kdirect_iq4_nl_pairs, Q0_PAIRS)
Q0ROW(kiln_kdirect_q0_fma, Q0_FMA)
#undef Q0ROW
#endif
