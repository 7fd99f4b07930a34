/* runtime/vecdot_kvnni.c - Q4_K, Q5_K, Q6_K, Q2_K, Q3_K and IQ2_XXS
 * weights against Q8_K activations for a few tokens (decode, MoE
 * experts), straight from the GGUF blocks with AVX-512 VNNI: the decode
 * kernels of these types at the VNNI level of the table in kernels.c (the
 * AVX2 ones are in vecdot_kdirect.c).
 *
 * Why a file of their own: a one-token product is bound by decoding the
 * blocks. The AVX2 kernels decode a super-block into eight 256-bit
 * registers, then per 32 weights widen the scales with two shuffles, and
 * IQ2_XXS goes through its unpacker and a kiln_qblock on the stack. Here a
 * super-block is four 512-bit registers of levels, each 64 consecutive
 * weights, with one scale register each (vpermw of the super-block's
 * scales, once per block whatever the token count); per token and 64
 * weights the integer work is one vpmaddubsw (levels by activations, pairs
 * in int16) and one vpdpwssd (pairs by scales, accumulated in int32).
 *
 * The sums and their order. A 64-weight register holds two 32-weight
 * chunks, so its int32 lane i sums weights 4i..4i+3 of the first chunk
 * (i < 8) or of the second; lanes i and i + 8 added give ggml's eight
 * 256-bit lanes (lane l: weights p with (p / 4) % 8 == l), the sums that
 * the vec_dot order turns into floats; the gemv order (Q4_K and Q2_K
 * matrices llama.cpp repacks) takes their total. The mins are one vpmaddwd
 * of the per-16-weight mins by the bsums, as in the AVX2 kernels. Integer
 * sums are exact however they are taken (a pair sum is at most 2 * 63 *
 * 127 for Q6_K's levels, 2 * 43 * 127 for IQ2_XXS's grid, 2 * 7 * 127 for
 * Q3_K's lifted levels before 2 * 4 * 127 is taken back; no int32 sum
 * comes near its limit), and the float steps are vecdot_kstep.h's, the
 * reference's own operations, so the outputs equal kiln_kdot_ref bit for
 * bit (tests/test_kdirect.c, tests/test_kvnni.c).
 *
 * Signs: vpmaddubsw takes unsigned levels. IQ2_XXS's grid coordinates are
 * positive with a sign bit each; the activation is negated where the sign
 * is set (a mask, as ggml's _mm256_sign_epi8 does). Q8_K activations lie
 * in -127..127 (the quantizer's scale is -127 / max), so the negation is
 * exact.
 *
 * Called per row by kiln_direct_rows (vecdot_kdirect.c) for up to 4
 * tokens; a row function per token count keeps each token's accumulators
 * in registers. Each super-block's loop prefetches KILN_STREAM_AHEAD
 * bytes further on (the next rows follow in memory): a one-token product
 * streams the whole model from DRAM, and the hardware prefetcher alone
 * left the loop waiting on loads. Only AVX-512 F, BW, VL, DQ, VNNI and BMI2's pdep are
 * used (Cascade Lake has them), except in kiln_kvnni_iq2_xxs_vbmi, which
 * the IQ2_XXS entry runs where the CPU also has VBMI and BITALG.
 *
 * Measured (one thread, 2048 x 8192 matrix, one token, ns per super-block,
 * this 2-core AVX-512 VNNI EPYC): Q4_K gemv 17.7 -> 8.1, Q6_K 16.4 -> 6.9,
 * Q2_K gemv 13.0 -> 6.8, IQ2_XXS 112-175 -> 22 against the AVX2 kernels;
 * 2048 x 16384, under load: Q3_K 18.8 -> 12.3, Q5_K 18.1 -> 11.9, IQ2_XXS
 * 22.4 -> 13.0 (the VBMI decode). */
#ifdef __clang__
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels.h"
#include "vecdot_kbits.h"
#include "vecdot_kstep.h"

#include "../codec/iq2_tables.h"
#include "../core/cpu.h"

#include <string.h>

#ifdef __x86_64__
#include <immintrin.h>

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi2")))
/* VNNI plus VBMI and BITALG (Ice Lake, Zen 4): the IQ2_XXS decode without
 * scalar look-ups; the table's IQ2_XXS entry picks it where the CPU has them. */
#define VBMI \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx512bitalg,avx2,fma,f16c,bmi2")))
#define INLINE static inline __attribute__((always_inline))

/* The tokens one call takes at most (kiln_direct_rows' group). */
#define MAX_TOKENS 4

/* One super-block in registers: q[k] holds weights 64k .. 64k + 63 as
 * unsigned bytes (IQ2_XXS: the coordinates' magnitudes, neg[k] the
 * negative ones), sc[k] the scale of each of its int16 pair sums, mn the
 * mins per 16-weight sub-block (int16), d / dmin the block's factors. */
typedef struct zblock {
    __m512i q[4], sc[4];
    __mmask64 neg[4];
    __m256i mn;
    float d, dmin;
} zblock;

/* The scale register of weights 64k .. 64k + 63 from a register of int16
 * scales s, one scale per `span` weights (16 or 32): pair lane i (weights
 * 2i, 2i + 1) takes s[64k / span + 2i / span]. */
VNNI INLINE __m512i spread_scales(__m512i s, int k, int span) {
    const int per = span / 2; /* pair lanes per scale */
    const __m512i lane = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14,
                                          13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i idx = _mm512_add_epi16(_mm512_srli_epi16(lane, per == 8 ? 3 : 4),
                                         _mm512_set1_epi16((short)(64 * k / span)));
    return _mm512_permutexvar_epi16(idx, s);
}

/* Eight unsigned bytes as int16, each twice (the mins of 32-weight
 * sub-blocks, per 16 weights). */
VNNI INLINE __m256i twice16(uint32_t lo, uint32_t hi) {
    const __m256i v = _mm256_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)hi, (int)lo));
    return _mm256_permutexvar_epi16(_mm256_set_epi16(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0), v);
}

/* The two fp16 factors at p (d, then dmin) as floats. F16C converts every
 * finite value and infinity as kiln_fp16_to_fp32 does; a NaN comes out
 * quiet, which the reference's first float operation does to it anyway. */
VNNI INLINE void halves(const void *p, float *d, float *dmin) {
    uint32_t u;
    memcpy(&u, p, 4);
    const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)u));
    *d = _mm_cvtss_f32(f);
    *dmin = _mm_cvtss_f32(_mm_movehdup_ps(f));
}

/* Weights 128j .. 128j + 127 from registers lo and hi holding, per
 * 128-bit quarter, chunks (a, b) of lo and (a', b') of hi as laid out by
 * Q4_K's nibbles and Q2_K's bit pairs: quarters 0-1 of lo then of hi are
 * the first 64 weights, quarters 2-3 the next 64. */
VNNI INLINE void interleave(__m512i lo, __m512i hi, __m512i *first, __m512i *second) {
    *first = _mm512_shuffle_i64x2(lo, hi, 0x44);
    *second = _mm512_shuffle_i64x2(lo, hi, 0xEE);
}

/* Q4_K: weight 64c + l is the low nibble of qs[32c + l], 64c + 32 + l the
 * high one; 6-bit scales and mins per 32 weights (kiln_kscale_words). */
/* Q4_K / Q5_K: the scale registers from the 6-bit scales of the eight
 * 32-weight sub-blocks (kiln_kscale_words' two words). */
VNNI INLINE void kscales32(uint32_t sc0, uint32_t sc1, zblock *z) {
    const __m512i s = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sc1, (int)sc0)));
    for (int k = 0; k < 4; k++) z->sc[k] = spread_scales(s, k, 32);
}

VNNI INLINE void zdecode_q4_k(const uint8_t *blk, zblock *z) {
    const kiln_block_q4_k *b = (const kiln_block_q4_k *)blk;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int j = 0; j < 2; j++) {
        const __m512i v = _mm512_loadu_si512((const void *)(b->qs + 64 * j));
        interleave(_mm512_and_si512(v, m4), _mm512_and_si512(_mm512_srli_epi16(v, 4), m4), &z->q[2 * j],
                   &z->q[2 * j + 1]);
    }
    uint32_t sc[2], mn[2];
    kiln_kscale_words(b->scales, sc, mn);
    kscales32(sc[0], sc[1], z);
    z->mn = twice16(mn[0], mn[1]);
    halves(&b->d, &z->d, &z->dmin);
}

/* Q5_K: Q4_K's nibbles and scales, with bit 4 of weight 64c + l (64c + 32
 * + l) in bit 2c (2c + 1) of qh[l]. [qh, qh >> 2] puts the bits of both
 * halves of load j (c = 2j, 2j + 1) at the same shift. */
VNNI INLINE void zdecode_q5_k(const uint8_t *blk, zblock *z) {
    const kiln_block_q5_k *b = (const kiln_block_q5_k *)blk;
    const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)b->qh);
    const __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
    for (int j = 0; j < 2; j++) {
        const __m512i v = _mm512_loadu_si512((const void *)(b->qs + 64 * j));
        const __m512i hlo = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 4 * j), one), 4);
        const __m512i hhi = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 4 * j + 1), one), 4);
        interleave(_mm512_or_si512(_mm512_and_si512(v, m4), hlo),
                   _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), hhi), &z->q[2 * j],
                   &z->q[2 * j + 1]);
    }
    uint32_t sc[2], mn[2];
    kiln_kscale_words(b->scales, sc, mn);
    kscales32(sc[0], sc[1], z);
    z->mn = twice16(mn[0], mn[1]);
    halves(&b->d, &z->d, &z->dmin);
}

/* Q3_K: Q2_K's bit pairs, plus 4 where bit 4h + s of hmask[l] is set: the
 * levels lifted by 4 to 0..7 (zlanes takes 4 * a back out, pair by pair);
 * signed 6-bit scales (stored + 32) per 16 weights. [hmask, hmask >> 4]
 * puts the bits of chunks s and 4 + s at the same shift. */
VNNI INLINE void zdecode_q3_k(const uint8_t *blk, zblock *z) {
    const kiln_block_q3_k *b = (const kiln_block_q3_k *)blk;
    const __m512i v = _mm512_loadu_si512((const void *)b->qs), m2 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4);
    const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
    /* shifted up by 2: bit s lands on bit 2 + s of its own byte (s <= 3) */
    const __m512i h = _mm512_slli_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(hm), _mm256_srli_epi16(hm, 4), 1), 2);
    __m512i f[4]; /* f[s]: chunk s (low 256 bits) and chunk 4 + s */
    for (int s = 0; s < 4; s++)
        f[s] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 2 * s), m2),
                               _mm512_and_si512(_mm512_srli_epi16(h, s), four));
    interleave(f[0], f[1], &z->q[0], &z->q[2]);
    interleave(f[2], f[3], &z->q[1], &z->q[3]);
    uint32_t w[4];
    kiln_q3k_scale_words(b->scales, w);
    const __m256i sc = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_set_epi32((int)w[3], (int)w[2], (int)w[1], (int)w[0])),
                                        _mm256_set1_epi16(32));
    for (int k = 0; k < 4; k++) z->sc[k] = spread_scales(_mm512_castsi256_si512(sc), k, 16);
    z->mn = _mm256_setzero_si256();
    z->d = _cvtsh_ss(b->d);
    z->dmin = 0;
}

/* Q2_K: weight 128h + 32s + l is bits 2s of qs[32h + l]; scale (low
 * nibble) and min (high) per 16 weights. */
VNNI INLINE void zdecode_q2_k(const uint8_t *blk, zblock *z) {
    const kiln_block_q2_k *b = (const kiln_block_q2_k *)blk;
    const __m512i v = _mm512_loadu_si512((const void *)b->qs), m2 = _mm512_set1_epi8(3);
    __m512i f[4]; /* f[s]: chunk s (low 256 bits) and chunk 4 + s */
    for (int s = 0; s < 4; s++) f[s] = _mm512_and_si512(_mm512_srli_epi16(v, 2 * s), m2);
    interleave(f[0], f[1], &z->q[0], &z->q[2]);
    interleave(f[2], f[3], &z->q[1], &z->q[3]);
    const __m256i s = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    const __m512i sc = _mm512_castsi256_si512(_mm256_and_si256(s, _mm256_set1_epi16(0xF)));
    for (int k = 0; k < 4; k++) z->sc[k] = spread_scales(sc, k, 16);
    z->mn = _mm256_srli_epi16(s, 4);
    halves(&b->d, &z->d, &z->dmin);
}

/* Q6_K: levels 0..63, the low four bits from ql, the top two from qh
 * (vecdot_kbits.h's kiln_kbits_q6_k, two chunks at a time); signed 8-bit
 * scales per 16 weights; the offset of 32 taken out as a min of 32 * sc
 * (the way ggml's dot product splits it, and kiln_kdot_ref). */
VNNI INLINE void zdecode_q6_k(const uint8_t *blk, zblock *z) {
    const kiln_block_q6_k *b = (const kiln_block_q6_k *)blk;
    const __m512i m4 = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        const __m512i l = _mm512_loadu_si512((const void *)(b->ql + 64 * h));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        /* bits 0-1 of qh for the first chunk, 2-3 for the second, at 4-5 */
        const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        /* (l & 0x0F) | hi, as one ternary: 0xEC = (A & C) | B */
        z->q[2 * h] = _mm512_ternarylogic_epi32(l, _mm512_and_si512(_mm512_slli_epi16(hh, 4), top), m4, 0xEC);
        z->q[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), _mm512_and_si512(hh, top), m4, 0xEC);
    }
    const __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    for (int k = 0; k < 4; k++) z->sc[k] = spread_scales(_mm512_castsi256_si512(s), k, 16);
    z->mn = _mm256_slli_epi16(s, 5);
    z->d = z->dmin = _cvtsh_ss(b->d);
}

/* IQ2_XXS: per 32 weights (ib32 g) two little-endian words, four grid
 * indices in the first, in the second four 7-bit sign fields (the eighth
 * sign makes the count of negatives even) and the scale nibble at the top;
 * level = grid coordinate, sign, scale 2 * nibble + 1. */
VNNI INLINE uint64_t iq2_signs(uint32_t a, uint32_t b) {
    /* the eight 7-bit fields as bytes, then each byte's parity as bit 7 */
    const uint64_t fields = (uint64_t)(a & 0x0FFFFFFF) | (uint64_t)(b & 0x0FFFFFFF) << 28;
    const uint64_t s = _pdep_u64(fields, 0x7F7F7F7F7F7F7F7Full);
    uint64_t p = s ^ s >> 4;
    p ^= p >> 2;
    p ^= p >> 1;
    return s | (p & 0x0101010101010101ull) << 7;
}

/* IQ2_XXS's scales: the nibbles sit at the top of the odd words; shifted
 * down, int16 lane 4g + 2 of the block's words holds ib32 g's, which
 * spread_scales wants at lane g, so they are gathered first. */
VNNI INLINE void iq2_xxs_scales(__m512i words, zblock *z) {
    const __m512i ls = _mm512_srli_epi32(words, 28);
    const __m512i s = _mm512_permutexvar_epi16(
        _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 30, 26, 22, 18, 14,
                         10, 6, 2),
        _mm512_add_epi16(_mm512_add_epi16(ls, ls), _mm512_set1_epi16(1)));
    for (int k = 0; k < 4; k++) z->sc[k] = spread_scales(s, k, 32);
    z->mn = _mm256_setzero_si256();
    z->dmin = 0;
}

VNNI INLINE void zdecode_iq2_xxs(const uint8_t *blk, zblock *z) {
    const kiln_block_iq2_xxs *b = (const kiln_block_iq2_xxs *)blk;
    uint32_t w[16];
    memcpy(w, b->qs, sizeof w);
    for (int k = 0; k < 4; k++) {
        const uint32_t g0 = w[4 * k], g1 = w[4 * k + 2];
        z->q[k] = _mm512_set_epi64(
            (long long)kiln_iq2xxs_grid[g1 >> 24], (long long)kiln_iq2xxs_grid[g1 >> 16 & 255],
            (long long)kiln_iq2xxs_grid[g1 >> 8 & 255], (long long)kiln_iq2xxs_grid[g1 & 255],
            (long long)kiln_iq2xxs_grid[g0 >> 24], (long long)kiln_iq2xxs_grid[g0 >> 16 & 255],
            (long long)kiln_iq2xxs_grid[g0 >> 8 & 255], (long long)kiln_iq2xxs_grid[g0 & 255]);
        z->neg[k] = _cvtu64_mask64(iq2_signs(w[4 * k + 1], w[4 * k + 3]));
    }
    iq2_xxs_scales(_mm512_loadu_si512((const void *)w), z);
    z->d = _cvtsh_ss(b->d);
}

/* IQ2_XXS with AVX-512 VBMI and BITALG (Ice Lake, Zen 4): the same
 * registers without a scalar look-up. Point j of the block (ib32 j / 4,
 * index byte j % 4 of its first word) is a key of 16 bits, level of
 * coordinate c in bits 2c..2c+1 (kiln_iq2xxs_keys); the 256 keys are
 * eight registers, and vpermt2w of the 32 indices into four pairs of them,
 * blended by index bits 6 and 7, gives all the block's keys at once. For
 * the 64 weights of register k, each 64-bit lane q takes the key of point
 * 8k + q (vpermw), vpmultishiftqb puts coordinate c's two bits at the
 * bottom of byte c, and vpermb maps the level to its value 8, 25, 43. The
 * signs: vpmultishiftqb cuts each point's 7-bit field out of the second
 * word, vpopcntb gives the parity that is its eighth bit, and vpshufbitqmb
 * turns the sign bytes into the register's 64-bit mask. */
VBMI INLINE void zdecode_iq2_xxs_vbmi(const uint8_t *blk, zblock *z) {
    const kiln_block_iq2_xxs *b = (const kiln_block_iq2_xxs *)blk;
    const __m512i raw = _mm512_loadu_si512((const void *)b->qs);
    /* word j: index byte of point j (byte 8 (j / 4) + j % 4) */
    const __m512i idx = _mm512_maskz_permutexvar_epi8(
        0x5555555555555555ull,
        _mm512_set_epi8(0, 59, 0, 58, 0, 57, 0, 56, 0, 51, 0, 50, 0, 49, 0, 48, 0, 43, 0, 42, 0, 41, 0, 40, 0, 35, 0,
                        34, 0, 33, 0, 32, 0, 27, 0, 26, 0, 25, 0, 24, 0, 19, 0, 18, 0, 17, 0, 16, 0, 11, 0, 10, 0, 9, 0,
                        8, 0, 3, 0, 2, 0, 1, 0, 0),
        raw);
    const __m512i *t = (const __m512i *)kiln_iq2xxs_keys;
    const __m512i k01 = _mm512_permutex2var_epi16(_mm512_loadu_si512(t), idx, _mm512_loadu_si512(t + 1));
    const __m512i k23 = _mm512_permutex2var_epi16(_mm512_loadu_si512(t + 2), idx, _mm512_loadu_si512(t + 3));
    const __m512i k45 = _mm512_permutex2var_epi16(_mm512_loadu_si512(t + 4), idx, _mm512_loadu_si512(t + 5));
    const __m512i k67 = _mm512_permutex2var_epi16(_mm512_loadu_si512(t + 6), idx, _mm512_loadu_si512(t + 7));
    const __mmask32 b6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x40));
    const __mmask32 b7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(0x80));
    const __m512i keys =
        _mm512_mask_blend_epi16(b7, _mm512_mask_blend_epi16(b6, k01, k23), _mm512_mask_blend_epi16(b6, k45, k67));
    /* byte c of each 64-bit lane: bits 2c.. of the lane (its key's level c at the bottom) */
    const __m512i cut = _mm512_set1_epi64(0x0E0C0A0806040200ll);
    /* level -> value, for any bits above the level's two (vpermb reads six) */
    const __m512i value = _mm512_broadcast_i32x4(_mm_setr_epi8(8, 25, 43, 0, 8, 25, 43, 0, 8, 25, 43, 0, 8, 25, 43, 0));
    /* sign fields: bits 32 + 7l of lane g for point 4g + l, in byte l */
    const __m512i f = _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x00000000352E2720ll), raw),
                                       _mm512_set1_epi8(0x7F));
    const __m512i parity = _mm512_slli_epi16(_mm512_popcnt_epi8(f), 7);
    const __m512i sgn = _mm512_ternarylogic_epi32(f, parity, _mm512_set1_epi8((char)0x80), 0xF8); /* f | (p & 0x80) */
    /* vpshufbitqmb: bit c of byte q of sign lane q / 4 (the lane of point 8k + q) */
    const __m512i bitsel = _mm512_set_epi64(0x1f1e1d1c1b1a1918ll, 0x1716151413121110ll, 0x0f0e0d0c0b0a0908ll,
                                            0x0706050403020100ll, 0x1f1e1d1c1b1a1918ll, 0x1716151413121110ll,
                                            0x0f0e0d0c0b0a0908ll, 0x0706050403020100ll);
    const __m512i lane_of = _mm512_set_epi64(1, 1, 1, 1, 0, 0, 0, 0);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        /* lane q: the key of point 8k + q in its low 16 bits */
        const __m512i kq = _mm512_permutexvar_epi16(
            _mm512_add_epi16(_mm512_set_epi16(0, 0, 0, 7, 0, 0, 0, 6, 0, 0, 0, 5, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 2,
                                              0, 0, 0, 1, 0, 0, 0, 0),
                             _mm512_set1_epi16((short)(8 * k))),
            keys);
        z->q[k] = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(cut, kq), value);
        const __m512i s8 = _mm512_permutexvar_epi64(_mm512_add_epi64(lane_of, _mm512_set1_epi64(2 * k)), sgn);
        z->neg[k] = _mm512_bitshuffle_epi64_mask(s8, bitsel);
    }
    iq2_xxs_scales(raw, z);
    z->d = _cvtsh_ss(b->d);
}

/* The eight lane sums of one super-block against one token's Q8_K block
 * (signs: negate the activations of IQ2_XXS's negative coordinates). */
VNNI INLINE __m256i zlanes(const zblock *z, const kiln_block_q8_k *y, bool signs, bool lifted) {
    __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()}; /* two chains of vpdpwssd */
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        __m512i a = _mm512_loadu_si512((const void *)(y->qs + 64 * k));
        if (signs) a = _mm512_mask_sub_epi8(a, z->neg[k], _mm512_setzero_si512(), a);
        __m512i p = _mm512_maddubs_epi16(z->q[k], a);
        if (lifted) p = _mm512_sub_epi16(p, _mm512_maddubs_epi16(_mm512_set1_epi8(4), a));
        acc[k & 1] = _mm512_dpwssd_epi32(acc[k & 1], p, z->sc[k]);
    }
    const __m512i sum = _mm512_add_epi32(acc[0], acc[1]);
    return _mm256_add_epi32(_mm512_castsi512_si256(sum), _mm512_extracti64x4_epi64(sum, 1));
}

/* A super-block's decoder; each kernel passes its own to zrow, which is
 * inlined with it into the kernel (so that the VBMI decoder is compiled
 * only into a kernel whose target has VBMI). */
typedef void (*zdecode_fn)(const uint8_t *blk, zblock *z);

/* One super-block's step of the gemv order on [A, M] (kiln_kstep_gemv's
 * two fmaf in one instruction): the lanes' and the mins' totals side by
 * side, times [d * yd, dmin * yd]. */
VNNI INLINE __m128 gemv_step(__m128 am, __m256i lane, __m256i min, float d, float dmin, float yd) {
    const __m256i h = _mm256_hadd_epi32(lane, min); /* per 128 bits: lane pairs, min pairs */
    __m128i v = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    v = _mm_hadd_epi32(v, v); /* [sum, min, sum, min] */
    const __m128 f = _mm_mul_ps(_mm_setr_ps(d, dmin, 0, 0), _mm_set1_ps(yd));
    return _mm_fmadd_ps(_mm_cvtepi32_ps(v), f, am);
}

/* Row against tokens [t0, t0 + nt), nt a constant of each instance. */
VNNI INLINE void zrow(int nt, kiln_combine comb, zdecode_fn zdecode, kiln_korder order, int block_bytes,
                      const uint8_t *w, int64_t nb, const kiln_block_q8_k *act, int64_t t0, float *y, int64_t ldy) {
    const bool signs = comb == KILN_COMB_IQ2, lifted = comb == KILN_COMB_K;
    const bool mins = comb != KILN_COMB_IQ2 && comb != KILN_COMB_K;
    kiln_kacc s[MAX_TOKENS];
    __m128 am[MAX_TOKENS]; /* gemv: [A, M] */
    memset(s, 0, sizeof s);
    for (int k = 0; k < nt; k++) am[k] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        zblock z;
        const char *ahead = (const char *)(w + i * block_bytes) + KILN_STREAM_AHEAD;
        for (int l = 0; l < block_bytes; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T1);
        zdecode(w + i * block_bytes, &z);
        for (int k = 0; k < nt; k++) {
            const kiln_block_q8_k *a = act + (t0 + k) * nb + i;
            const __m256i lane = zlanes(&z, a, signs, lifted);
            const __m256i min =
                mins ? _mm256_madd_epi16(z.mn, _mm256_loadu_si256((const __m256i *)a->bsums)) : _mm256_setzero_si256();
            if (order == KILN_KORDER_GEMV) am[k] = gemv_step(am[k], lane, min, z.d, z.dmin, a->d);
            else kiln_kstep_vecdot(comb, &s[k], lane, min, z.d, z.dmin, a->d);
        }
    }
    for (int k = 0; k < nt; k++)
        y[(t0 + k) * ldy] = order == KILN_KORDER_GEMV ? _mm_cvtss_f32(am[k]) - _mm_cvtss_f32(_mm_movehdup_ps(am[k]))
                                                      : kiln_kstep_finish(comb, order, &s[k]);
}

/* The kernels kernels.c names: one per type and order, each calling zrow
 * with constant token counts and its decoder. */
#define ZROW(TARGET, NAME, COMB, DECODE, ORDER)                                                                \
    TARGET void NAME(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act, int64_t t0, int nt,  \
                     float *y, int64_t ldy) {                                                                  \
        const kiln_block_q8_k *a = act;                                                                        \
        for (int k0 = 0; k0 < nt; k0 += MAX_TOKENS) {                                                          \
            switch (nt - k0 < MAX_TOKENS ? nt - k0 : MAX_TOKENS) {                                             \
            case 1: zrow(1, COMB, DECODE, ORDER, qt->block_bytes, w, nb, a, t0 + k0, y, ldy); break;           \
            case 2: zrow(2, COMB, DECODE, ORDER, qt->block_bytes, w, nb, a, t0 + k0, y, ldy); break;           \
            case 3: zrow(3, COMB, DECODE, ORDER, qt->block_bytes, w, nb, a, t0 + k0, y, ldy); break;           \
            default: zrow(MAX_TOKENS, COMB, DECODE, ORDER, qt->block_bytes, w, nb, a, t0 + k0, y, ldy); break; \
            }                                                                                                  \
        }                                                                                                      \
    }
ZROW(VNNI, kiln_kvnni_q4_k, KILN_COMB_K_Q4, zdecode_q4_k, KILN_KORDER_VECDOT)
ZROW(VNNI, kiln_kvnni_q4_k_gemv, KILN_COMB_K_Q4, zdecode_q4_k, KILN_KORDER_GEMV)
ZROW(VNNI, kiln_kvnni_q2_k, KILN_COMB_K_Q2, zdecode_q2_k, KILN_KORDER_VECDOT)
ZROW(VNNI, kiln_kvnni_q2_k_gemv, KILN_COMB_K_Q2, zdecode_q2_k, KILN_KORDER_GEMV)
ZROW(VNNI, kiln_kvnni_q6_k, KILN_COMB_K_Q6, zdecode_q6_k, KILN_KORDER_VECDOT)
ZROW(VNNI, kiln_kvnni_q3_k, KILN_COMB_K, zdecode_q3_k, KILN_KORDER_VECDOT)
ZROW(VNNI, kiln_kvnni_q5_k, KILN_COMB_K_Q5, zdecode_q5_k, KILN_KORDER_VECDOT)
ZROW(VNNI, kiln_kvnni_iq2_xxs_bw, KILN_COMB_IQ2, zdecode_iq2_xxs, KILN_KORDER_VECDOT)
ZROW(VBMI, kiln_kvnni_iq2_xxs_vbmi, KILN_COMB_IQ2, zdecode_iq2_xxs_vbmi, KILN_KORDER_VECDOT)
#undef ZROW

/* The table's IQ2_XXS entry: the VBMI decode where the CPU has it. */
void kiln_kvnni_iq2_xxs(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act, int64_t t0, int nt,
                        float *y, int64_t ldy) {
    if (kiln_cpu_has_vbmi()) kiln_kvnni_iq2_xxs_vbmi(qt, w, nb, act, t0, nt, y, ldy);
    else kiln_kvnni_iq2_xxs_bw(qt, w, nb, act, t0, nt, y, ldy);
}
#endif
