/* runtime/vecdot_q12.c - Q1_0 and Q2_0 (codec/blocks_tq.h) against Q8_0
 * activations: the reference dot products (kiln_qtype dot) and the direct
 * kernels the table in kernels.c names, AVX2 and AVX-512, which take every
 * product (llama.cpp repacks neither type and llamafile's sgemm declines
 * both, so ggml multiplies them with vec_dot alone, decode and prefill).
 *
 * A weight block spans several Q8_0 blocks (Q1_0: 128 weights = 4, Q2_0:
 * 64 = 2), so qt->act_bytes is those Q8_0 blocks together. The orders,
 * from llama.cpp's x86 AVX-512 build (ggml-cpu/arch/x86/quants.c):
 *
 *   Q1_0 (ggml_vec_dot_q1_0_q8_0, __AVX2__ branch): per weight block,
 *     eight int32 lanes per Q8_0 block K, lane l the exact sum of the
 *     activations 4l..4l+3 negated where the weight bit is 0; then in
 *     floats ab[l] = dy0 * s0[l], ab[l] = fmaf(dyK, sK[l], ab[l]) for
 *     K = 1..3, acc[l] = fmaf(d, ab[l], acc[l]); kiln_hsum8(acc) at the end.
 *   Q2_0 (x86 has no branch of its own: arch-fallback.h maps it to
 *     ggml_vec_dot_q2_0_q8_0_generic, compiled without fused multiply-adds):
 *     per weight block sumi = 0, then sumi += dy_k * (float)sum_k for its
 *     two Q8_0 blocks, sumf += d * sumi.
 *
 * The integer sums are exact whatever instructions take them, and the SIMD
 * kernels repeat the reference's float operations one for one (vfmadd =
 * fmaf, vcvtdq2ps = (float)), so every level gives the reference's bits
 * (tests/test_vecdot_q12.c), for every activation kiln_act_q8_0 or
 * ggml's quantize_row_q8_0 makes. Those never hold -128 (amax maps to
 * 127), the one byte where the arithmetics part: ggml's x86 Q1_0 negates
 * it to -128 in a byte (so does the reference here), its generic Q2_0
 * multiplies it by -1 to +128 in an int (so does the reference here),
 * the Q2_0 kernels below would keep -128.
 *
 * The kernels take a row against up to 4 tokens, decoding each weight
 * block once for all of them: Q1_0's sign masks (AVX2: ggml's shuffle and
 * compare; AVX-512: the bits themselves as mask registers, two weight
 * blocks side by side in one register, their ab made together and added
 * into acc one after the other), Q2_0's levels (shuffle and two bit tests,
 * AVX-512 a whole block per register), then per token the byte products
 * and the reference's float steps. */
#ifdef __clang__
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels.h"

#include "../core/fp16.h"

#include <math.h>
#include <string.h>

enum { Q1_SUB = 4, Q2_SUB = 2 }; /* Q8_0 blocks per weight block */

/* ---- reference dot products ------------------------------------------- */

/* Lane l (activations 4l..4l+3) of one Q1_0 weight block's Q8_0 block K:
 * each activation with the sign of its weight bit. */
static void q1_lanes(const kiln_block_q1_0 *x, int K, const int8_t *a, int32_t lane[8]) {
    for (int l = 0; l < 8; l++) {
        lane[l] = 0;
        for (int j = 4 * l; j < 4 * l + 4; j++) {
            const int p = 32 * K + j;
            lane[l] += x->qs[p / 8] >> (p % 8) & 1 ? a[j] : (int8_t)-a[j];
        }
    }
}

float kiln_vec_dot_q1_0(int64_t n, const void *w, const void *act) {
    const kiln_block_q1_0 *x = w;
    const kiln_block_q8_0 *y = act;
    float acc[8] = {0};
    for (int64_t i = 0; i < n / 128; i++) {
        float ab[8];
        int32_t lane[8];
        for (int K = 0; K < Q1_SUB; K++) {
            const kiln_block_q8_0 *yb = &y[Q1_SUB * i + K];
            const float dy = kiln_fp16_to_fp32(yb->d);
            q1_lanes(&x[i], K, yb->qs, lane);
            for (int l = 0; l < 8; l++) ab[l] = K == 0 ? dy * (float)lane[l] : fmaf(dy, (float)lane[l], ab[l]);
        }
        const float d = kiln_fp16_to_fp32(x[i].d);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, ab[l], acc[l]);
    }
    return kiln_hsum8(acc);
}

/* Weight j of a Q2_0 block: its 2-bit code minus 1. */
static inline int q2_level(const kiln_block_q2_0 *x, int j) {
    return (x->qs[j / 4] >> 2 * (j % 4) & 3) - 1;
}

float kiln_vec_dot_q2_0(int64_t n, const void *w, const void *act) {
    const kiln_block_q2_0 *x = w;
    const kiln_block_q8_0 *y = act;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / 64; i++) {
        float sumi = 0.0f;
        for (int k = 0; k < Q2_SUB; k++) {
            const kiln_block_q8_0 *yb = &y[Q2_SUB * i + k];
            int32_t s = 0;
            for (int j = 0; j < KILN_QK; j++) s += q2_level(&x[i], 32 * k + j) * yb->qs[j];
            sumi += kiln_fp16_to_fp32(yb->d) * (float)s;
        }
        sumf += kiln_fp16_to_fp32(x[i].d) * sumi;
    }
    return sumf;
}

/* ---- direct kernels ---------------------------------------------------- */

#ifdef __x86_64__
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))
#define GROUP 4 /* kiln_direct_rows hands out at most this many tokens */

/* One Q8_0 block's activations as eight int32 lanes of 4-sums, each byte
 * negated where `neg` is 0xFF (ggml's xor-and-subtract). */
AVX2 INLINE __m256i q1_sums256(const int8_t *a, __m256i neg) {
    const __m256i qy = _mm256_loadu_si256((const __m256i *)a);
    const __m256i sy = _mm256_sub_epi8(_mm256_xor_si256(qy, neg), neg);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), sy), _mm256_set1_epi16(1));
}

/* 0xFF in byte p where bit p of `bits` is 0 (ggml's shuffle and mask). */
AVX2 INLINE __m256i q1_negate_mask(uint32_t bits) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                               _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                                 0x0101010101010101, 0x0000000000000000));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), _mm256_setzero_si256());
}

/* One Q1_0 block against one token's four Q8_0 blocks: ab (see the
 * header), eight lanes. */
AVX2 INLINE __m256 q1_block256(const __m256i neg[Q1_SUB], const kiln_block_q8_0 *a) {
    __m256 ab = _mm256_mul_ps(_mm256_set1_ps(kiln_fp16_to_fp32(a[0].d)),
                              _mm256_cvtepi32_ps(q1_sums256(a[0].qs, neg[0])));
    for (int K = 1; K < Q1_SUB; K++)
        ab = _mm256_fmadd_ps(_mm256_set1_ps(kiln_fp16_to_fp32(a[K].d)),
                             _mm256_cvtepi32_ps(q1_sums256(a[K].qs, neg[K])), ab);
    return ab;
}

AVX2 INLINE void q1_block_masks(const kiln_block_q1_0 *x, __m256i neg[Q1_SUB]) {
    for (int K = 0; K < Q1_SUB; K++) {
        uint32_t bits;
        memcpy(&bits, x->qs + 4 * K, 4);
        neg[K] = q1_negate_mask(bits);
    }
}

AVX2 INLINE void store_hsum(const __m256 acc[GROUP], int64_t t0, int nt, float *y, int64_t ldy) {
    for (int k = 0; k < nt; k++) {
        float lanes[8];
        _mm256_storeu_ps(lanes, acc[k]);
        y[(t0 + k) * ldy] = kiln_hsum8(lanes);
    }
}

/* One block ib of the 256-bit code, for every token: acc[k] += d * ab. */
AVX2 INLINE void q1_step256(const kiln_block_q1_0 *x, const kiln_block_q8_0 *a, int64_t nb, int64_t ib, int64_t t0,
                            int nt, __m256 acc[GROUP]) {
    __m256i neg[Q1_SUB];
    q1_block_masks(&x[ib], neg);
    const __m256 d = _mm256_set1_ps(kiln_fp16_to_fp32(x[ib].d));
    for (int k = 0; k < nt; k++)
        acc[k] = _mm256_fmadd_ps(d, q1_block256(neg, a + ((t0 + k) * nb + ib) * Q1_SUB), acc[k]);
}

AVX2 void kiln_kdirect_q1_0_avx2(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act, int64_t t0,
                                 int nt, float *y, int64_t ldy) {
    (void)qt;
    const kiln_block_q1_0 *x = (const kiln_block_q1_0 *)w;
    const kiln_block_q8_0 *a = act;
    __m256 acc[GROUP];
    for (int k = 0; k < GROUP; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) q1_step256(x, a, nb, ib, t0, nt, acc);
    store_hsum(acc, t0, nt, y, ldy);
}

/* AVX-512: blocks in pairs, block ib in the low eight lanes of a 512-bit
 * register and ib + 1 in the high ones. Their ab values are independent,
 * so they are made side by side, with the lane operations of the 256-bit
 * code; the accumulation into acc stays in block order, low half then
 * high half. The negations come from mask registers. */
AVX512 INLINE __m512i q1_sums512(const int8_t *lo, const int8_t *hi, __mmask64 neg) {
    const __m512i qy = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)lo)),
                                          _mm256_loadu_si256((const __m256i *)hi), 1);
    const __m512i sy = _mm512_mask_sub_epi8(qy, neg, _mm512_setzero_si512(), qy);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(_mm512_set1_epi8(1), sy), _mm512_set1_epi16(1));
}

AVX512 INLINE __m512 pair_ps(float lo, float hi) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(lo)), _mm256_set1_ps(hi), 1);
}

AVX512 void kiln_kdirect_q1_0_avx512(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act,
                                     int64_t t0, int nt, float *y, int64_t ldy) {
    (void)qt;
    const kiln_block_q1_0 *x = (const kiln_block_q1_0 *)w;
    const kiln_block_q8_0 *a = act;
    __m256 acc[GROUP];
    for (int k = 0; k < GROUP; k++) acc[k] = _mm256_setzero_ps();
    int64_t ib = 0;
    for (; ib + 1 < nb; ib += 2) {
        __mmask64 neg[Q1_SUB];
        for (int K = 0; K < Q1_SUB; K++) {
            uint32_t lo, hi;
            memcpy(&lo, x[ib].qs + 4 * K, 4);
            memcpy(&hi, x[ib + 1].qs + 4 * K, 4);
            neg[K] = ~((__mmask64)lo | (__mmask64)hi << 32);
        }
        const __m256 d0 = _mm256_set1_ps(kiln_fp16_to_fp32(x[ib].d));
        const __m256 d1 = _mm256_set1_ps(kiln_fp16_to_fp32(x[ib + 1].d));
        for (int k = 0; k < nt; k++) {
            const kiln_block_q8_0 *p = a + ((t0 + k) * nb + ib) * Q1_SUB, *q = p + Q1_SUB;
            __m512 ab = _mm512_mul_ps(pair_ps(kiln_fp16_to_fp32(p[0].d), kiln_fp16_to_fp32(q[0].d)),
                                      _mm512_cvtepi32_ps(q1_sums512(p[0].qs, q[0].qs, neg[0])));
            for (int K = 1; K < Q1_SUB; K++)
                ab = _mm512_fmadd_ps(pair_ps(kiln_fp16_to_fp32(p[K].d), kiln_fp16_to_fp32(q[K].d)),
                                     _mm512_cvtepi32_ps(q1_sums512(p[K].qs, q[K].qs, neg[K])), ab);
            acc[k] = _mm256_fmadd_ps(d0, _mm512_castps512_ps256(ab), acc[k]);
            acc[k] = _mm256_fmadd_ps(d1, _mm512_extractf32x8_ps(ab, 1), acc[k]);
        }
    }
    if (ib < nb) q1_step256(x, a, nb, ib, t0, nt, acc); /* an odd last block */
    store_hsum(acc, t0, nt, y, ldy);
}

/* Q2_0 levels in registers. Byte j of the result takes qs[j / 4]
 * (a shuffle), then its 2-bit field j % 4 is read as two bit tests
 * against masks repeating (1, 4, 16, 64) and (2, 8, 32, 128):
 * level = bit0 + 2 * bit1 - 1. */
#define Q2_BIT0 ((int)0x40100401)
#define Q2_BIT1 ((int)0x80200802u) /* Q2_BIT0 << 1 */

/* The 32 levels of 8 bytes of qs (one Q8_0 block's weights). */
AVX2 INLINE __m256i q2_levels256(const uint8_t *qs) {
    uint64_t bytes;
    memcpy(&bytes, qs, 8);
    const __m256i r = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)bytes),
                                          _mm256_set_epi64x(0x0707070706060606, 0x0505050504040404,
                                                            0x0303030302020202, 0x0101010100000000));
    const __m256i b0 = _mm256_set1_epi32(Q2_BIT0), b1 = _mm256_set1_epi32(Q2_BIT1);
    const __m256i lo = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(r, b0), b0), _mm256_set1_epi8(1));
    const __m256i hi = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(r, b1), b1), _mm256_set1_epi8(2));
    return _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(1));
}

/* sum of q * a over 32 weights, ggml's sign trick: |q| times a with q's
 * sign (|q| <= 2, pair sums far inside int16), as eight int32 lanes. */
AVX2 INLINE __m256i q2_sums256(__m256i q, const int8_t *a) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)a);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q)),
                             _mm256_set1_epi16(1));
}

/* The totals of two sets of eight int32 lanes: [0] of a, [1] of b. */
AVX2 INLINE __m128i hsum2_i32(__m256i a, __m256i b) {
    const __m256i p = _mm256_hadd_epi32(a, b); /* per 128 bits: a01 a23 b01 b23 */
    const __m256i q = _mm256_hadd_epi32(p, p); /* per 128 bits: a0123 b0123 . . */
    return _mm_add_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
}

/* The reference's float steps for one block of one token. */
AVX2 INLINE float q2_step(float sumf, float d, const kiln_block_q8_0 *a, __m128i sums) {
    float sumi = 0.0f;
    sumi += kiln_fp16_to_fp32(a[0].d) * (float)_mm_cvtsi128_si32(sums);
    sumi += kiln_fp16_to_fp32(a[1].d) * (float)_mm_extract_epi32(sums, 1);
    return sumf + d * sumi;
}

AVX2 void kiln_kdirect_q2_0_avx2(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act, int64_t t0,
                                 int nt, float *y, int64_t ldy) {
    (void)qt;
    const kiln_block_q2_0 *x = (const kiln_block_q2_0 *)w;
    const kiln_block_q8_0 *a = act;
    float sumf[GROUP] = {0};
    for (int64_t ib = 0; ib < nb; ib++) {
        const __m256i q0 = q2_levels256(x[ib].qs), q1 = q2_levels256(x[ib].qs + 8);
        const float d = kiln_fp16_to_fp32(x[ib].d);
        for (int k = 0; k < nt; k++) {
            const kiln_block_q8_0 *p = a + ((t0 + k) * nb + ib) * Q2_SUB;
            sumf[k] = q2_step(sumf[k], d, p, hsum2_i32(q2_sums256(q0, p[0].qs), q2_sums256(q1, p[1].qs)));
        }
    }
    for (int k = 0; k < nt; k++) y[(t0 + k) * ldy] = sumf[k];
}

/* AVX-512: a whole block (both Q8_0 blocks) in one register: the levels
 * from all 16 bytes of qs, the sign of each level as a mask register;
 * the two totals from the halves. */
AVX512 void kiln_kdirect_q2_0_avx512(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act,
                                     int64_t t0, int nt, float *y, int64_t ldy) {
    (void)qt;
    const kiln_block_q2_0 *x = (const kiln_block_q2_0 *)w;
    const kiln_block_q8_0 *a = act;
    /* lane L (weights 16L .. 16L + 15) reads qs[4L .. 4L + 3] */
    const __m512i spread = _mm512_set_epi64(0x0f0f0f0f0e0e0e0e, 0x0d0d0d0d0c0c0c0c, 0x0b0b0b0b0a0a0a0a,
                                            0x0909090908080808, 0x0707070706060606, 0x0505050504040404,
                                            0x0303030302020202, 0x0101010100000000);
    float sumf[GROUP] = {0};
    for (int64_t ib = 0; ib < nb; ib++) {
        const __m512i r = _mm512_shuffle_epi8(
            _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)x[ib].qs)), spread);
        const __mmask64 bit0 = _mm512_test_epi8_mask(r, _mm512_set1_epi32(Q2_BIT0));
        const __mmask64 bit1 = _mm512_test_epi8_mask(r, _mm512_set1_epi32(Q2_BIT1));
        /* |level| for codes 0..3 is 1, 0, 1, 2: 1 where bit 0 is clear, 2
         * where both are set; level < 0 for code 0 alone */
        const __m512i wabs = _mm512_or_si512(_mm512_maskz_set1_epi8(~bit0, 1), _mm512_maskz_set1_epi8(bit0 & bit1, 2));
        const __mmask64 wneg = ~(bit0 | bit1);
        const float d = kiln_fp16_to_fp32(x[ib].d);
        for (int k = 0; k < nt; k++) {
            const kiln_block_q8_0 *p = a + ((t0 + k) * nb + ib) * Q2_SUB;
            const __m512i qy = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p[0].qs)),
                                                  _mm256_loadu_si256((const __m256i *)p[1].qs), 1);
            /* a with q's sign; where q = 0, |q| = 0 zeroes the product */
            const __m512i sy = _mm512_mask_sub_epi8(qy, wneg, _mm512_setzero_si512(), qy);
            const __m512i s = _mm512_madd_epi16(_mm512_maddubs_epi16(wabs, sy), _mm512_set1_epi16(1));
            sumf[k] = q2_step(sumf[k], d, p, hsum2_i32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1)));
        }
    }
    for (int k = 0; k < nt; k++) y[(t0 + k) * ldy] = sumf[k];
}
#endif
