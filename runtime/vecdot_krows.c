/* runtime/vecdot_krows.c - one token against four weight rows at once
 * (decode) for Q4_K and Q2_K in the gemv order of the matrices llama.cpp
 * repacks, and Q6_K and Q3_K in their vec_dot order, with AVX-512 VNNI:
 * the table's `rows` kernels at the VNNI level (kernels.c).
 * kiln_direct_rows4 (vecdot_kdirect.c) runs them over each group of four
 * rows of a one-token product whose rows are short (four rows within the
 * type's rows_span: 8 KiB, any length for Q3_K) and the one-row kernels
 * of vecdot_kvnni.c over the rest.
 *
 * Why four rows: one token's product streams every weight once from DRAM,
 * and the one-row kernels spent about as long turning each super-block's
 * integer sums into floats (a horizontal sum, a conversion, an fma, one
 * dependent chain per row) as decoding it. Here each super-block's
 * activations are loaded (and, for Q4_K, Q2_K and Q3_K, laid out in the
 * weights' order, which spares the weights' shuffles) once for four rows;
 * the rows' integer sums are reduced together, each row in one 128-bit
 * quarter of a register (Q6_K, Q3_K: one 256-bit half), and the float
 * steps run on the rows side by side, lane by lane. The next group of
 * four rows is prefetched as this one is read, one group ahead.
 *
 * Measured (one thread, CPU time, ns per super-block, n_in 2048, 32768
 * rows, out of cache, this AVX-512 VNNI EPYC, against the one-row kernels):
 * Q4_K gemv 8.6 -> 6.4, Q2_K gemv 7.1 -> 5.4 (5.3 in cache with the
 * four rows' mins taken together, q2_mins4), Q6_K 9.4 -> 8.3; Q3_K (128
 * MiB of rows, the machine loaded) 12.6 -> 6.8 at n_in 2048, 12.2 -> 9.2
 * at n_in 8192. Rows of n_in 8192 read four at a time were slower than
 * one at a time for the types whose one-row kernel streams faster than
 * four streams do (Q6_K 8.5 -> 12.6, Q4_K even), also when read a row at
 * a time through a buffer of partial sums, or prefetched into L2 only
 * (Q6_K 17.7 -> 12.5 against 8.8 one at a time; L2 made short rows
 * slower); Q3_K's one-row kernel reads 9 GB/s, under that; hence
 * kiln_direct_rows4's span per type.
 *
 * The sums and their order. Integer sums are exact however they are
 * taken, so the weights of a super-block may meet the activations in any
 * order that keeps each weight with its own activation and its own scale:
 *   gemv (Q4_K, Q2_K): one integer total I and one min total P per
 *     super-block, then A = fmaf(I, d * yd, A), M = fmaf(P, dmin * yd, M),
 *     the row's output A - M (vecdot_kstep.h's kiln_kstep_gemv). The
 *     weights are taken in their storage order - a 64-byte load of Q4_K's
 *     nibbles, or the four bit pairs of Q2_K's 64 bytes - and the
 *     activations are gathered to match, 32 at a time;
 *   vec_dot (Q6_K, Q3_K): the eight int32 lanes of ggml's 256-bit
 *     registers, lane l the weights p with (p / 4) % 8 == l; in Q6_K's
 *     natural order and in Q3_K's storage order (chunks s and 4 + s in
 *     one register) alike, lane i + 8 of a 512-bit sum is lane i's second
 *     chunk, as in vecdot_kvnni.c; kiln_kstep_vecdot's operations on two
 *     rows at a time, one per 256-bit half.
 * Each float operation is the reference's own, lane by lane (vcvtdq2ps =
 * (float), vmulps = *, vfmadd = fmaf, the final sums kiln_hsum8's), so
 * the outputs equal kiln_kdot_ref bit for bit (tests/test_vecdot_rows.c).
 *
 * Only AVX-512 F, BW, VL, DQ and VNNI are used. */
#ifdef __clang__
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels.h"
#include "vecdot_kbits.h"

#include <stddef.h>
#include <string.h>

#ifdef __x86_64__
#include <immintrin.h>

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

/* Prefetches this super-block's share of the next group of rows: the
 * group is one run of 4 nb blocks, so block i of each row fetches bytes
 * [4 i bb, 4 (i + 1) bb) of the next group, one group ahead. (Each row's
 * own block a few blocks ahead instead was slower: Q2_K, n_in 2048, 5.5
 * -> 9.5 ns per super-block; the hardware follows one run better than
 * four.) */
VNNI INLINE void prefetch_next(const uint8_t *w, int64_t row_bytes, int64_t i, int bb) {
    const char *p = (const char *)w + 4 * row_bytes + 4 * i * bb;
    for (int l = 0; l < 4 * bb; l += 64) _mm_prefetch(p + l, _MM_HINT_T0);
}

/* Two 32-byte halves of the activations as one register: bytes lo..lo+31
 * then hi..hi+31. */
VNNI INLINE __m512i act_pair(const int8_t *qs, int lo, int hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(qs + lo))),
                              _mm256_loadu_si256((const __m256i *)(qs + hi)), 1);
}

/* A register of int16 pair scales from the scales s: pair lanes 8q ..
 * 8q + 7 (16 weights) take s[iq], so 0..15 (the low 256 bits) take
 * s[i0], s[i1] and 16..31 s[i2], s[i3] (i0 == i1 for 32-weight scales). */
VNNI INLINE __m512i scale_pairs(__m512i s, int i0, int i1, int i2, int i3) {
    const __m512i idx = _mm512_set_epi16((short)i3, (short)i3, (short)i3, (short)i3, (short)i3, (short)i3,
                                         (short)i3, (short)i3, (short)i2, (short)i2, (short)i2, (short)i2,
                                         (short)i2, (short)i2, (short)i2, (short)i2, (short)i1, (short)i1,
                                         (short)i1, (short)i1, (short)i1, (short)i1, (short)i1, (short)i1,
                                         (short)i0, (short)i0, (short)i0, (short)i0, (short)i0, (short)i0,
                                         (short)i0, (short)i0);
    return _mm512_permutexvar_epi16(idx, s);
}

/* Four rows' integer totals (sums[r]: 16 int32 lanes; quarter r of m:
 * row r's mins in 4 lanes) as one register whose 128-bit quarter r holds
 * [I, I, P, P] of row r. */
VNNI INLINE __m512i totals4(const __m512i sums[4], __m512i m) {
    /* fold each row's 16 lanes to 8, two rows per register */
    const __m512i f01 = _mm512_add_epi32(_mm512_shuffle_i64x2(sums[0], sums[1], 0x44),
                                         _mm512_shuffle_i64x2(sums[0], sums[1], 0xEE));
    const __m512i f23 = _mm512_add_epi32(_mm512_shuffle_i64x2(sums[2], sums[3], 0x44),
                                         _mm512_shuffle_i64x2(sums[2], sums[3], 0xEE));
    /* quarters of f01: [r0 a, r0 b, r1 a, r1 b]; to 4 lanes, a row per quarter */
    const __m512i g = _mm512_add_epi32(_mm512_shuffle_i64x2(f01, f23, 0x88), _mm512_shuffle_i64x2(f01, f23, 0xDD));
    /* per quarter [g0 + g2, g1 + g3, m0 + m2, m1 + m3], then pairs */
    const __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi64(g, m), _mm512_unpackhi_epi64(g, m));
    return _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_CDAB));
}

/* The gemv step of four rows: quarter r of acc holds [A, A, M, M] of row
 * r; dd[r] is the row's block's (d, dmin) as two fp16 in a word. */
VNNI INLINE __m512 gemv_step4(__m512 acc, __m512i tot, const uint32_t dd[4], float yd) {
    const __m256 f = _mm256_cvtph_ps(_mm_setr_epi32((int)dd[0], (int)dd[1], (int)dd[2], (int)dd[3]));
    /* [d0 dmin0 d1 dmin1 ...] to quarter r = [d_r, d_r, dmin_r, dmin_r] */
    const __m512 spread = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
                                                _mm512_castps256_ps512(f));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(spread, _mm512_set1_ps(yd)), acc);
}

/* y[r] = A - M of quarter r. */
VNNI INLINE void gemv_finish4(__m512 acc, float *y) {
    float v[16];
    _mm512_storeu_ps(v, acc);
    for (int r = 0; r < 4; r++) y[r] = v[4 * r] - v[4 * r + 2];
}

/* ---- Q4_K, gemv order ------------------------------------------------- */

/* The four rows' scales and mins, decoded side by side (kiln_kscale_words'
 * steps on each 128-bit quarter): quarter r holds row r's words [sc0, sc1,
 * mn0, mn1], bytes 0..7 its eight 6-bit scales and 8..15 its mins. The
 * 16 bytes loaded per row are the 12 scale bytes and the first 4 of qs. */
VNNI INLINE __m512i q4_scales4(const uint8_t *blk, int64_t row_bytes) {
    const size_t at = offsetof(kiln_block_q4_k, scales);
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(blk + at)));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(blk + row_bytes + at)), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(blk + 2 * row_bytes + at)), 2);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(blk + 3 * row_bytes + at)), 3);
    /* per quarter: words [u0, u1, u0, u1] and [u2, u2, u2, u2 >> 4] */
    const __m512i u01 = _mm512_shuffle_epi32(z, _MM_PERM_BABA);
    __m512i u22 = _mm512_shuffle_epi32(z, _MM_PERM_CCCC);
    u22 = _mm512_mask_srli_epi32(u22, 0x8888, u22, 4);
    /* [sc0, mn0, ., .]: the low six bits; [., ., sc1, mn1]: u2's nibble
     * under the top two bits of u0 / u1 */
    const __m512i low = _mm512_and_si512(u01, _mm512_set1_epi32(0x3F3F3F3F));
    const __m512i top = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u01, 6), _mm512_set1_epi32(0x03030303)), 4);
    const __m512i high = _mm512_or_si512(_mm512_and_si512(u22, _mm512_set1_epi32(0x0F0F0F0F)), top);
    /* [sc0, mn0, sc1, mn1] to [sc0, sc1, mn0, mn1] */
    return _mm512_shuffle_epi32(_mm512_mask_blend_epi32(0xCCCC, low, high), _MM_PERM_DBCA);
}

/* vpshufb control for int16 pair scales from a row's scale bytes in every
 * quarter (bytes 0..7): pair lanes of the low 256 bits take byte i, of the
 * high 256 bits byte j, each with a zero high byte (index bit 7). */
#define Q4_SCALE_CTL(i, j)                                                                      \
    _mm512_set_epi64((long long)(0x8000800080008000ull | (j) * 0x0001000100010001ull),          \
                     (long long)(0x8000800080008000ull | (j) * 0x0001000100010001ull),          \
                     (long long)(0x8000800080008000ull | (j) * 0x0001000100010001ull),          \
                     (long long)(0x8000800080008000ull | (j) * 0x0001000100010001ull),          \
                     (long long)(0x8000800080008000ull | (i) * 0x0001000100010001ull),          \
                     (long long)(0x8000800080008000ull | (i) * 0x0001000100010001ull),          \
                     (long long)(0x8000800080008000ull | (i) * 0x0001000100010001ull),          \
                     (long long)(0x8000800080008000ull | (i) * 0x0001000100010001ull))

/* Load j (qs[64j .. 64j + 63]) holds chunks 2j and 2j + 1 (32 bytes each);
 * its low nibbles are weights 128j + l and 128j + 64 + l (l < 32),
 * sub-blocks 4j and 4j + 2, its high nibbles 128j + 32 + l and
 * 128j + 96 + l, sub-blocks 4j + 1 and 4j + 3. The scales reach their
 * pair lanes by an in-lane byte shuffle of the row's broadcast scale bytes
 * (a word permute per register was slower), and the four rows' min sums
 * are one multiply-add. One thread, n_in 2048, CPU time per super-block:
 * 5.83 -> 5.45 ns in cache, 6.08 -> 5.68 ns from memory; the 1B Q4_K_M
 * model's tg32 43.6 -> 46.2 t/s in turns. */
VNNI void kiln_krows_q4_k_gemv(const kiln_qtype *qt, const uint8_t *w, int64_t row_bytes, int64_t nb,
                               const void *act, float *y) {
    const kiln_block_q8_k *a = act;
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i ctl0 = Q4_SCALE_CTL(0, 2), ctl1 = Q4_SCALE_CTL(1, 3);
    const __m512i ctl2 = Q4_SCALE_CTL(4, 6), ctl3 = Q4_SCALE_CTL(5, 7);
    /* quarter r's mn words (64-bit lane 2r + 1) to the low 256 bits */
    const __m512i mins_at = _mm512_setr_epi64(1, 3, 5, 7, 1, 3, 5, 7);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        prefetch_next(w, row_bytes, i, qt->block_bytes);
        const int8_t *q8 = a[i].qs;
        const __m512i alo0 = act_pair(q8, 0, 64), ahi0 = act_pair(q8, 32, 96);
        const __m512i alo1 = act_pair(q8, 128, 192), ahi1 = act_pair(q8, 160, 224);
        /* bsums in pairs: the activations of each 32-weight sub-block */
        const __m128i bs = _mm256_castsi256_si128(_mm256_permute4x64_epi64(
            _mm256_hadd_epi16(_mm256_loadu_si256((const __m256i *)a[i].bsums), _mm256_setzero_si256()), 0x08));
        const uint8_t *blk = w + i * qt->block_bytes;
        const __m512i sm = q4_scales4(blk, row_bytes);
        __m512i sums[4];
        uint32_t dd[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const kiln_block_q4_k *b = (const kiln_block_q4_k *)(blk + r * row_bytes);
            const __m512i s = _mm512_permutexvar_epi64(_mm512_set1_epi64(2 * r), sm);
            const __m512i v0 = _mm512_loadu_si512((const void *)b->qs);
            const __m512i v1 = _mm512_loadu_si512((const void *)(b->qs + 64));
            const __m512i lo0 = _mm512_and_si512(v0, m4), hi0 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4);
            const __m512i lo1 = _mm512_and_si512(v1, m4), hi1 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4);
            const __m512i zero = _mm512_setzero_si512();
            __m512i s0 = _mm512_dpwssd_epi32(zero, _mm512_maddubs_epi16(lo0, alo0), _mm512_shuffle_epi8(s, ctl0));
            __m512i s1 = _mm512_dpwssd_epi32(zero, _mm512_maddubs_epi16(hi0, ahi0), _mm512_shuffle_epi8(s, ctl1));
            s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(lo1, alo1), _mm512_shuffle_epi8(s, ctl2));
            s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(hi1, ahi1), _mm512_shuffle_epi8(s, ctl3));
            sums[r] = _mm512_add_epi32(s0, s1);
            memcpy(&dd[r], &b->d, sizeof dd[r]);
        }
        /* quarter r: row r's eight mins times the eight bsum pairs, in 4 lanes */
        const __m256i mins = _mm512_castsi512_si256(_mm512_permutexvar_epi64(mins_at, sm));
        const __m512i m = _mm512_madd_epi16(_mm512_cvtepu8_epi16(mins), _mm512_broadcast_i32x4(bs));
        acc = gemv_step4(acc, totals4(sums, m), dd, a[i].d);
    }
    gemv_finish4(acc, y);
}

/* ---- Q2_K, gemv order ------------------------------------------------- */

/* The four rows' min sums (sum over k of min k times bsums[k]), row r in
 * quarter r of the result in 4 partial lanes, for all four at once:
 * the rows' 16 min nibbles are the high nibbles of their scale bytes, one
 * quarter each, and vpdpbusd multiplies those unsigned bytes by signed
 * bytes, four to a lane; the bsums (|b| <= 16 * 127) go in as two signed
 * bytes, b = 16 * (b >> 4) + (b & 15). */
VNNI INLINE __m512i q2_mins4(const uint8_t *blk, int64_t row_bytes, const int16_t *bsums) {
    const size_t at = offsetof(kiln_block_q2_k, scales);
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(blk + at)));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(blk + row_bytes + at)), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(blk + 2 * row_bytes + at)), 2);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(blk + 3 * row_bytes + at)), 3);
    const __m512i mn = _mm512_and_si512(_mm512_srli_epi16(z, 4), _mm512_set1_epi8(0x0F));
    const __m256i b = _mm256_loadu_si256((const __m256i *)bsums);
    const __m512i hi = _mm512_broadcast_i32x4(_mm256_cvtepi16_epi8(_mm256_srai_epi16(b, 4)));
    const __m512i lo = _mm512_broadcast_i32x4(_mm256_cvtepi16_epi8(_mm256_and_si256(b, _mm256_set1_epi16(15))));
    const __m512i h = _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), mn, hi), 4);
    return _mm512_dpbusd_epi32(h, mn, lo);
}

/* Bit pair s of qs[l] (l < 32) is weight 32s + l, of qs[32 + l] weight
 * 128 + 32s + l: sub-blocks (16 weights) 2s, 2s + 1 and 8 + 2s, 9 + 2s;
 * scale in the low nibble of scales[k], min in the high one. */
VNNI void kiln_krows_q2_k_gemv(const kiln_qtype *qt, const uint8_t *w, int64_t row_bytes, int64_t nb,
                               const void *act, float *y) {
    const kiln_block_q8_k *a = act;
    const __m512i m2 = _mm512_set1_epi8(3);
    const __m256i m4 = _mm256_set1_epi16(0xF);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        prefetch_next(w, row_bytes, i, qt->block_bytes);
        const int8_t *q8 = a[i].qs;
        __m512i ap[4];
        for (int s = 0; s < 4; s++) ap[s] = act_pair(q8, 32 * s, 128 + 32 * s);
        const uint8_t *blk = w + i * qt->block_bytes;
        __m512i sums[4];
        uint32_t dd[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const kiln_block_q2_k *b = (const kiln_block_q2_k *)(blk + r * row_bytes);
            const __m512i sc = _mm512_castsi256_si512(
                _mm256_and_si256(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)b->scales)), m4));
            const __m512i v = _mm512_loadu_si512((const void *)b->qs);
            /* bit pair k of every byte: register k's levels */
            __m512i f[4];
            for (int k = 0; k < 4; k++) f[k] = _mm512_and_si512(_mm512_srli_epi16(v, 2 * k), m2);
            const __m512i zero = _mm512_setzero_si512();
            __m512i s0 = _mm512_dpwssd_epi32(zero, _mm512_maddubs_epi16(f[0], ap[0]), scale_pairs(sc, 0, 1, 8, 9));
            __m512i s1 = _mm512_dpwssd_epi32(zero, _mm512_maddubs_epi16(f[1], ap[1]), scale_pairs(sc, 2, 3, 10, 11));
            s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(f[2], ap[2]), scale_pairs(sc, 4, 5, 12, 13));
            s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(f[3], ap[3]), scale_pairs(sc, 6, 7, 14, 15));
            sums[r] = _mm512_add_epi32(s0, s1);
            memcpy(&dd[r], &b->d, sizeof dd[r]);
        }
        acc = gemv_step4(acc, totals4(sums, q2_mins4(blk, row_bytes, a[i].bsums)), dd, a[i].d);
    }
    gemv_finish4(acc, y);
}

/* ---- the vec_dot order: Q6_K, Q3_K --------------------------------------- */

/* Two rows' 16-lane sums as [row a's eight lanes | row b's]: lane i of a
 * row is its lanes i and i + 8 (the two chunks of each 64 weights). */
VNNI INLINE __m512i lanes2(__m512i sa, __m512i sb) {
    return _mm512_add_epi32(_mm512_shuffle_i64x2(sa, sb, 0x44), _mm512_shuffle_i64x2(sa, sb, 0xEE));
}

/* The vec_dot step of four rows (kiln_kstep_vecdot): acc[0] holds rows 0
 * and 1, acc[1] rows 2 and 3, eight lane accumulators per 256-bit half;
 * lane = sums - mins (mins NULL: none, Q3_K), then acc = fmaf(yd * xd,
 * lane, acc), xd the fp16 dh[r]. */
VNNI INLINE void vecdot_step4(__m512 acc[2], const __m512i sums[4], const __m256i *mins, const uint16_t dh[4],
                              float yd) {
    const __m512i lo8 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i hi8 = _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m128 d = _mm_mul_ps(_mm_set1_ps(yd), _mm_cvtph_ps(_mm_setr_epi16((short)dh[0], (short)dh[1],
                                                                             (short)dh[2], (short)dh[3], 0, 0, 0, 0)));
    const __m512 d512 = _mm512_castps128_ps512(d);
    __m512i l01 = lanes2(sums[0], sums[1]), l23 = lanes2(sums[2], sums[3]);
    if (mins) {
        l01 = _mm512_sub_epi32(l01, _mm512_inserti64x4(_mm512_castsi256_si512(mins[0]), mins[1], 1));
        l23 = _mm512_sub_epi32(l23, _mm512_inserti64x4(_mm512_castsi256_si512(mins[2]), mins[3], 1));
    }
    acc[0] = _mm512_fmadd_ps(_mm512_permutexvar_ps(lo8, d512), _mm512_cvtepi32_ps(l01), acc[0]);
    acc[1] = _mm512_fmadd_ps(_mm512_permutexvar_ps(hi8, d512), _mm512_cvtepi32_ps(l23), acc[1]);
}

/* y[r] = kiln_hsum8 of row r's eight lanes. */
VNNI INLINE void vecdot_finish4(const __m512 acc[2], float *y) {
    float v[32];
    _mm512_storeu_ps(v, acc[0]);
    _mm512_storeu_ps(v + 16, acc[1]);
    for (int r = 0; r < 4; r++) y[r] = kiln_hsum8(v + 8 * r);
}

/* Q6_K's levels 0..63 of weights 64k .. 64k + 63 in register k (the
 * natural order: low nibbles of ql[64h ..], then its high nibbles, each
 * with two bits of qh), as vecdot_kvnni.c decodes them. */
VNNI INLINE void q6_levels(const kiln_block_q6_k *b, __m512i q[4]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        const __m512i l = _mm512_loadu_si512((const void *)(b->ql + 64 * h));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        const __m512i hh = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        /* (l & 0x0F) | hi, as one ternary: 0xEC = (A & C) | B */
        q[2 * h] = _mm512_ternarylogic_epi32(l, _mm512_and_si512(_mm512_slli_epi16(hh, 4), top), m4, 0xEC);
        q[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), _mm512_and_si512(hh, top), m4, 0xEC);
    }
}

/* Signed 8-bit scales per 16 weights; the offset of 32 taken out as a min
 * of 32 * sc (vecdot_kvnni.c, kiln_kdot_ref). */
VNNI void kiln_krows_q6_k(const kiln_qtype *qt, const uint8_t *w, int64_t row_bytes, int64_t nb, const void *act,
                          float *y) {
    const kiln_block_q8_k *a = act;
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t i = 0; i < nb; i++) {
        prefetch_next(w, row_bytes, i, qt->block_bytes);
        const int8_t *q8 = a[i].qs;
        __m512i av[4];
        for (int k = 0; k < 4; k++) av[k] = _mm512_loadu_si512((const void *)(q8 + 64 * k));
        const __m256i bs = _mm256_loadu_si256((const __m256i *)a[i].bsums);
        __m512i sums[4];
        __m256i mins[4];
        uint16_t dh[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const kiln_block_q6_k *b = (const kiln_block_q6_k *)(w + r * row_bytes + i * qt->block_bytes);
            __m512i q[4];
            q6_levels(b, q);
            const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
            const __m512i sc = _mm512_castsi256_si512(s16);
            __m512i s0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(q[0], av[0]),
                                             scale_pairs(sc, 0, 1, 2, 3));
            __m512i s1 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(q[1], av[1]),
                                             scale_pairs(sc, 4, 5, 6, 7));
            s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(q[2], av[2]), scale_pairs(sc, 8, 9, 10, 11));
            s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(q[3], av[3]), scale_pairs(sc, 12, 13, 14, 15));
            sums[r] = _mm512_add_epi32(s0, s1);
            mins[r] = _mm256_madd_epi16(_mm256_slli_epi16(s16, 5), bs);
            memcpy(&dh[r], &b->d, sizeof dh[r]);
        }
        vecdot_step4(acc, sums, mins, dh, a[i].d);
    }
    vecdot_finish4(acc, y);
}

/* Q3_K's 6-bit scales less 32 of four rows' blocks as bytes, quarter r
 * holding row r's 16 in order (kiln_q3k_scale_words' layout: word h is
 * the low nibbles of u[h % 2] >> 4 (h / 2) with bits 2h of u[2] on top),
 * widened to int16: s01 rows 0 and 1, s23 rows 2 and 3. */
VNNI INLINE void q3_scales4(const uint8_t *w, int64_t row_bytes, __m512i *s01, __m512i *s23) {
    /* from 4 bytes before the scales, so that the 16 bytes stay in the
     * block: dwords [-, u0, u1, u2] per quarter */
    const size_t at = offsetof(kiln_block_q3_k, scales) - 4;
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(w + at)));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(w + row_bytes + at)), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(w + 2 * row_bytes + at)), 2);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(w + 3 * row_bytes + at)), 3);
    const __m512i lo = _mm512_srlv_epi32(_mm512_shuffle_epi32(z, (_MM_PERM_ENUM)0x99), /* u0 u1 u0 u1 */
                                         _mm512_set4_epi32(4, 4, 0, 0));
    /* bits 2h, 2h + 1 of each byte of u2 to bits 4, 5: rotations 4, 2, 0, -2 */
    const __m512i hi = _mm512_and_si512(_mm512_rolv_epi32(_mm512_shuffle_epi32(z, _MM_PERM_DDDD),
                                                          _mm512_set4_epi32(30, 0, 2, 4)),
                                        _mm512_set1_epi8(0x30));
    const __m512i sc = _mm512_sub_epi8(_mm512_ternarylogic_epi32(lo, hi, _mm512_set1_epi8(0x0F), 0xEC),
                                       _mm512_set1_epi8(32));
    *s01 = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(sc));
    *s23 = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(sc, 1));
}

/* The int16 pair scales of registers s and s + 1 (s even) for row `odd`
 * of a two-row register of scales: in quarter q of each int32 lane, the
 * scale of register s's sub-block there, then register s + 1's. Register
 * s's quarters are sub-blocks 2s, 2s + 1, 8 + 2s, 9 + 2s. */
VNNI INLINE __m512i q3_pair_scales(__m512i s2, int s, int odd) {
    const short o = (short)(16 * odd), a = (short)(2 * s), b = (short)(2 * s + 2);
    const __m512i idx = _mm512_set_epi16(
        (short)(o + b + 9), (short)(o + a + 9), (short)(o + b + 9), (short)(o + a + 9), (short)(o + b + 9),
        (short)(o + a + 9), (short)(o + b + 9), (short)(o + a + 9), (short)(o + b + 8), (short)(o + a + 8),
        (short)(o + b + 8), (short)(o + a + 8), (short)(o + b + 8), (short)(o + a + 8), (short)(o + b + 8),
        (short)(o + a + 8), (short)(o + b + 1), (short)(o + a + 1), (short)(o + b + 1), (short)(o + a + 1),
        (short)(o + b + 1), (short)(o + a + 1), (short)(o + b + 1), (short)(o + a + 1), (short)(o + b),
        (short)(o + a), (short)(o + b), (short)(o + a), (short)(o + b), (short)(o + a), (short)(o + b),
        (short)(o + a));
    return _mm512_permutexvar_epi16(idx, s2);
}

/* Q3_K in the vec_dot order, its weights taken in Q2_K's storage order
 * (register s: chunks s and 4 + s, sub-blocks 2s, 2s + 1, 8 + 2s, 9 + 2s),
 * whose int32 lane i of each 256-bit half is ggml's lane i either way
 * (weights 32s + 4i .. and 128 + 32s + 4i ..). Levels lifted by 4 to
 * 0..7; vpdpbusd takes each lane's four products of level and activation
 * straight into int32, starting from the lane's -4 * a, which depends on
 * the activations alone (one vpdpbusd per register for the four rows).
 * Those lane sums of level - 4 fit in int16 (|sum| <= 4 * 4 * 127), so
 * registers s and s + 1 go into one of int16 pairs (s's sum low, s + 1's
 * high), and one vpdpwssd by the pairs' scales adds both into the lane:
 * the scales are the same across the four lanes of a 128-bit quarter, one
 * 16-weight sub-block of each register. */
VNNI void kiln_krows_q3_k(const kiln_qtype *qt, const uint8_t *w, int64_t row_bytes, int64_t nb, const void *act,
                          float *y) {
    const kiln_block_q8_k *a = act;
    const __m512i m2 = _mm512_set1_epi8(3), four = _mm512_set1_epi8(4), low16 = _mm512_set1_epi32(0xFFFF);
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t i = 0; i < nb; i++) {
        prefetch_next(w, row_bytes, i, qt->block_bytes);
        const uint8_t *blk = w + i * qt->block_bytes;
        const int8_t *q8 = a[i].qs;
        __m512i ap[4], lift[4];
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) {
            ap[s] = act_pair(q8, 32 * s, 128 + 32 * s);
            lift[s] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                       _mm512_dpbusd_epi32(_mm512_setzero_si512(), four, ap[s]));
        }
        __m512i sc2[2];
        q3_scales4(blk, row_bytes, &sc2[0], &sc2[1]);
        __m512i sums[4];
        uint16_t dh[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const kiln_block_q3_k *b = (const kiln_block_q3_k *)(blk + r * row_bytes);
            const __m512i v = _mm512_loadu_si512((const void *)b->qs);
            const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
            /* bit 4h + s of hmask[l] at bit s of byte l of half h */
            const __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(hm), _mm256_srli_epi16(hm, 4), 1);
            __m512i t[4]; /* register s's lane sums of (level - 4) * a */
#pragma GCC unroll 4
            for (int s = 0; s < 4; s++) {
                /* the high bit at bit 2 */
                const __m512i hb = s < 2 ? _mm512_slli_epi16(h, 2 - s) : s == 2 ? h : _mm512_srli_epi16(h, 1);
                /* (bit pair s) | (high bit), as one ternary: 0xEC = (A & C) | B */
                const __m512i f = _mm512_ternarylogic_epi32(s ? _mm512_srli_epi16(v, 2 * s) : v,
                                                            _mm512_and_si512(hb, four), m2, 0xEC);
                t[s] = _mm512_dpbusd_epi32(lift[s], f, ap[s]);
            }
            const __m512i t01 = _mm512_ternarylogic_epi32(t[0], _mm512_slli_epi32(t[1], 16), low16, 0xEC);
            const __m512i t23 = _mm512_ternarylogic_epi32(t[2], _mm512_slli_epi32(t[3], 16), low16, 0xEC);
            const __m512i s0 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), t01, q3_pair_scales(sc2[r / 2], 0, r % 2));
            sums[r] = _mm512_dpwssd_epi32(s0, t23, q3_pair_scales(sc2[r / 2], 2, r % 2));
            memcpy(&dh[r], &b->d, sizeof dh[r]);
        }
        vecdot_step4(acc, sums, NULL, dh, a[i].d);
    }
    vecdot_finish4(acc, y);
}
#endif
