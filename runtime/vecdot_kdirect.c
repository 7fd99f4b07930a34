/* runtime/vecdot_kdirect.c - quantized products for a few tokens (decode,
 * MoE experts) straight from the weights' GGUF blocks, in KILN_NUM_GGML
 * mode.
 *
 * Why: the panel kernels (vecdot_qgemm.c) need the weights repacked
 * (vecdot_panel.c), which pays off over hundreds of tokens but costs
 * several times the dot products themselves when one token is multiplied.
 * Here each weight block is decoded once, for up to GROUP tokens: the
 * k-quants into registers straight from their bits (vecdot_kbits.h),
 * IQ2_XXS and IQ4_XS through the type's unpacker into a
 * kiln_qblock on the stack. Its exact integer sums with each token are
 * taken with AVX2, and those become floats in the reference order:
 *
 *   Q8_K types, vec_dot order: the eight int32 lanes of a super-block are
 *     the lanes of one 256-bit register, since bytes 4l..4l+3 of a
 *     32-weight chunk are weights with (p / 4) % 8 == l; the mins come
 *     out of one vpmaddwd of mn by bsums; then the steps of
 *     vecdot_korder.c's vecdot_order, the eight lanes as one vector;
 *   Q8_K types, gemv order (repacked Q4_K / Q2_K): the same integers
 *     summed whole, one fma for the sums and one for the mins per
 *     super-block (repacked_order with one group of 8 chunks);
 *   the 32-weight types are not here: Q8_0 reads its blocks with no
 *     unpacking at all in vecdot_q8direct.c, Q4_0 / Q5_0 / IQ4_NL in
 *     ggml's x86 orders in vecdot_q0direct.c.
 *
 * Integer sums are exact whatever instructions take them, and every float
 * operation is the reference's own (vfmadd = fmaf, cvtdq2ps = (float)), so
 * the outputs equal kiln_kdot_ref / qt->dot bit for bit (tests/
 * test_kdirect.c). matmul.c sends here the products whose tokens all take
 * the vec_dot or gemv order and are few (direct_tokens in the table of
 * kernels.c, which names the kernels at the end of this file); the gemm
 * order and long runs of tokens stay with the panels. CPUs with AVX-512
 * but no VNNI run this AVX2 code; with VNNI, Q4_K, Q5_K, Q2_K, Q3_K, Q6_K
 * and IQ2_XXS decode into 512-bit registers instead (vecdot_kvnni.c,
 * 1.5-5x faster per super-block; one token's short rows of Q4_K, Q2_K and
 * Q6_K, and Q3_K's of any length, four at a time, vecdot_krows.c, through
 * kiln_direct_rows4), and
 * Q8_0, which needs no decoding, reads its blocks in vecdot_q8direct.c.
 * The float steps both share are vecdot_kstep.h's. */
#ifdef __clang__
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels.h"

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "vecdot_kbits.h"
#include "vecdot_kstep.h"

#include <string.h>

/* Tokens sharing one decoded weight block (more would spill the
 * accumulators and levels out of the 16 ymm registers). */
#define GROUP 4

#ifdef __x86_64__
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

/* ---- Q8_K types ------------------------------------------------------- */

/* sc[2c] in the low 128 bits, sc[2c + 1] in the high ones: the scales of
 * chunk c's two 16-weight halves, as int16 for vpmaddwd. */
AVX2 INLINE __m256i chunk_scales(__m256i sc, int c) {
    const __m256i pair = _mm256_permutevar8x32_epi32(sc, _mm256_set1_epi32(c));
    return _mm256_shuffle_epi8(pair, _mm256_set_epi8(3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 1, 0, 1, 0, 1,
                                                     0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0));
}

/* One super-block decoded: levels by 32-weight chunk, the 16 scales and
 * mins as int16, the factors. */
typedef struct kdec {
    __m256i q[8], sc, mn;
    float d, dmin;
} kdec;

/* Eight bytes (one per 32-weight sub-block) as 16 int16, each twice. */
AVX2 INLINE __m256i twice16(uint32_t lo, uint32_t hi) {
    const __m128i v = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)hi, (int)lo));
    return _mm256_set_m128i(_mm_unpackhi_epi16(v, v), _mm_unpacklo_epi16(v, v));
}

/* The k-quants decoded in registers from their own bits (vecdot_kbits.h),
 * one function per layout; IQ2_XXS, a table look-up per 8 weights,
 * through its unpacker. */
AVX2 INLINE void kdecode_q4q5(const uint8_t *qs, const uint8_t *qh, const uint8_t *scales, kiln_half d,
                              kiln_half dmin, kdec *k) {
    uint32_t sc[2], mn[2];
    kiln_kbits_q4q5_k(qs, qh, k->q);
    kiln_kscale_words(scales, sc, mn);
    k->sc = twice16(sc[0], sc[1]);
    k->mn = twice16(mn[0], mn[1]);
    k->d = kiln_fp16_to_fp32(d);
    k->dmin = kiln_fp16_to_fp32(dmin);
}

AVX2 INLINE void kdecode_q6(const kiln_block_q6_k *b, kdec *k) {
    kiln_kbits_q6_k(b, k->q);
    k->sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    k->mn = _mm256_slli_epi16(k->sc, 5); /* the levels' offset of 32 as a min */
    k->d = k->dmin = kiln_fp16_to_fp32(b->d);
}

AVX2 INLINE void kdecode_q2(const kiln_block_q2_k *b, kdec *k) {
    kiln_kbits_q2_k(b, k->q);
    const __m256i s = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    k->sc = _mm256_and_si256(s, _mm256_set1_epi16(0xF));
    k->mn = _mm256_srli_epi16(s, 4);
    k->d = kiln_fp16_to_fp32(b->d);
    k->dmin = kiln_fp16_to_fp32(b->dmin);
}

AVX2 INLINE void kdecode_q3(const kiln_block_q3_k *b, kdec *k) {
    uint32_t w[4];
    kiln_kbits_q3_k(b, k->q);
    kiln_q3k_scale_words(b->scales, w);
    k->sc = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_set_epi32((int)w[3], (int)w[2], (int)w[1], (int)w[0])),
                             _mm256_set1_epi16(32));
    k->mn = _mm256_setzero_si256();
    k->d = kiln_fp16_to_fp32(b->d);
    k->dmin = 0;
}

AVX2 INLINE void kdecode_unpacked(const kiln_qtype *qt, const uint8_t *blk, kdec *k) {
    kiln_qblock b;
    qt->unpack(blk, 1, &b);
    for (int c = 0; c < 8; c++) k->q[c] = _mm256_loadu_si256((const __m256i *)(b.q + 32 * c));
    k->sc = _mm256_loadu_si256((const __m256i *)b.sc);
    k->mn = _mm256_loadu_si256((const __m256i *)b.mn);
    k->d = b.d[0];
    k->dmin = b.dmin;
}

AVX2 INLINE void kdecode(const kiln_qtype *qt, kiln_combine comb, const uint8_t *blk, kdec *k) {
    switch (comb) {
    case KILN_COMB_K_Q4: {
        const kiln_block_q4_k *b = (const kiln_block_q4_k *)blk;
        kdecode_q4q5(b->qs, NULL, b->scales, b->d, b->dmin, k);
        break;
    }
    case KILN_COMB_K_Q5: {
        const kiln_block_q5_k *b = (const kiln_block_q5_k *)blk;
        kdecode_q4q5(b->qs, b->qh, b->scales, b->d, b->dmin, k);
        break;
    }
    case KILN_COMB_K_Q6: kdecode_q6((const kiln_block_q6_k *)blk, k); break;
    case KILN_COMB_K_Q2: kdecode_q2((const kiln_block_q2_k *)blk, k); break;
    case KILN_COMB_K: kdecode_q3((const kiln_block_q3_k *)blk, k); break;
    default: kdecode_unpacked(qt, blk, k); break;
    }
}

/* The eight int32 lanes (lane l: sc * q * a over the weights with
 * (p / 4) % 8 == l) and the eight mins of one super-block against one
 * token. vpmaddubsw multiplies unsigned by signed bytes, and Q8_K
 * activations reach -128, so signed levels (Q3_K, IQ2_XXS: |q| <= 43) are
 * lifted by 64 and 64 * a taken back out of each 16-bit pair sum; no pair
 * sum leaves int16 (at most 107 * 128 * 2). IQ4_XS's levels (up to +-127)
 * take ggml's own mul_add_epi8 instead, |q| times a with q's sign, which
 * is what ggml_vec_dot_iq4_xs_q8_K sums (pair sums <= 2 * 127 * 128). */
AVX2 INLINE void ksums(const kdec *k, const kiln_block_q8_k *y, bool signed_levels, bool table, bool mins,
                       __m256i *lane, __m256i *min) {
    const __m256i lift = _mm256_set1_epi8(64);
    __m256i acc = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(y->qs + 32 * c));
        __m256i p;
        if (table) {
            p = _mm256_maddubs_epi16(_mm256_sign_epi8(k->q[c], k->q[c]), _mm256_sign_epi8(a, k->q[c]));
        } else {
            p = _mm256_maddubs_epi16(signed_levels ? _mm256_add_epi8(k->q[c], lift) : k->q[c], a);
            if (signed_levels) p = _mm256_sub_epi16(p, _mm256_maddubs_epi16(lift, a));
        }
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, chunk_scales(k->sc, c)));
    }
    *lane = acc;
    *min = mins ? _mm256_madd_epi16(k->mn, _mm256_loadu_si256((const __m256i *)y->bsums)) : _mm256_setzero_si256();
}

/* Row r against tokens [t0, t0 + nt), nt <= GROUP. Inlined per type (comb
 * and order constant) by krow's switch, so the branches fold away. */
AVX2 INLINE void krow_group(const kiln_qtype *qt, kiln_combine comb, kiln_korder order, const uint8_t *w,
                            int64_t nb, const kiln_block_q8_k *act, int64_t t0, int nt, float *y, int64_t ldy) {
    const bool iq3 = comb == KILN_COMB_IQ3 || comb == KILN_COMB_IQ3S; /* |q| <= 62: lifted, 2..126 */
    const bool signed_levels = comb == KILN_COMB_K || comb == KILN_COMB_IQ2 || iq3;
    const bool table = comb == KILN_COMB_IQ4;
    const bool mins = comb != KILN_COMB_K && comb != KILN_COMB_IQ2 && !iq3 && !table;
    kiln_kacc s[GROUP];
    memset(s, 0, sizeof s);
    for (int64_t i = 0; i < nb; i++) {
        kdec dec;
        kdecode(qt, comb, w + i * qt->block_bytes, &dec);
        for (int k = 0; k < nt; k++) {
            const kiln_block_q8_k *a = act + (t0 + k) * nb + i;
            __m256i lane, min;
            ksums(&dec, a, signed_levels, table, mins, &lane, &min);
            if (order == KILN_KORDER_GEMV)
                kiln_kstep_gemv(&s[k], kiln_kstep_hsum(lane), kiln_kstep_hsum(min), dec.d, dec.dmin, a->d);
            else kiln_kstep_vecdot(comb, &s[k], lane, min, dec.d, dec.dmin, a->d);
        }
    }
    for (int k = 0; k < nt; k++) y[(t0 + k) * ldy] = kiln_kstep_finish(comb, order, &s[k]);
}

/* The kernels kernels.c names: one instance per type and order, so
 * that each krow_group is compiled with its comb and order constant. */
#define KROW(NAME, COMB, ORDER)                                                                             \
    AVX2 void NAME(const kiln_qtype *qt, const uint8_t *w, int64_t nb, const void *act, int64_t t0, int nt, \
                   float *y, int64_t ldy) {                                                                 \
        krow_group(qt, COMB, ORDER, w, nb, act, t0, nt, y, ldy);                                            \
    }
KROW(kiln_kdirect_q3_k, KILN_COMB_K, KILN_KORDER_VECDOT)
KROW(kiln_kdirect_q6_k, KILN_COMB_K_Q6, KILN_KORDER_VECDOT)
KROW(kiln_kdirect_q2_k, KILN_COMB_K_Q2, KILN_KORDER_VECDOT)
KROW(kiln_kdirect_q4_k, KILN_COMB_K_Q4, KILN_KORDER_VECDOT)
KROW(kiln_kdirect_q5_k, KILN_COMB_K_Q5, KILN_KORDER_VECDOT)
KROW(kiln_kdirect_iq2, KILN_COMB_IQ2, KILN_KORDER_VECDOT)
KROW(kiln_kdirect_iq4_xs, KILN_COMB_IQ4, KILN_KORDER_VECDOT)
KROW(kiln_kdirect_iq3_xxs, KILN_COMB_IQ3, KILN_KORDER_VECDOT)
KROW(kiln_kdirect_iq3_s, KILN_COMB_IQ3S, KILN_KORDER_VECDOT)
KROW(kiln_kdirect_q2_k_gemv, KILN_COMB_K_Q2, KILN_KORDER_GEMV)
KROW(kiln_kdirect_q4_k_gemv, KILN_COMB_K_Q4, KILN_KORDER_GEMV)
#undef KROW

#endif

void kiln_direct_rows4(kiln_qrows_fn rows, kiln_qrow_fn fn, const kiln_qtype *qt, const void *w, int64_t n_in,
                       int64_t n_out, const void *act, int64_t n_tokens, float *y) {
    const int64_t nb = n_in / qt->block, row_bytes = nb * qt->block_bytes;
    if (n_tokens != 1) rows = NULL; /* the callers chose `rows` by row length (kiln_rows_kernel) */
    /* rows in blocks of 16, as the panels split them, so that threads do
     * not write neighbouring outputs; nowait: moe_exec.c runs one expert's
     * rows after another's in one region, and meets once after all */
#pragma omp for schedule(static) nowait
    for (int64_t r0 = 0; r0 < n_out; r0 += KILN_PANEL) {
        const int64_t end = r0 + KILN_PANEL < n_out ? r0 + KILN_PANEL : n_out;
        int64_t r = r0;
        if (rows)
            for (; r + KILN_QROWS <= end; r += KILN_QROWS)
                rows(qt, (const uint8_t *)w + r * row_bytes, row_bytes, nb, act, y + r);
        for (; r < end; r++)
            for (int64_t t0 = 0; t0 < n_tokens; t0 += GROUP) {
                const int nt = n_tokens - t0 < GROUP ? (int)(n_tokens - t0) : GROUP;
                fn(qt, (const uint8_t *)w + r * row_bytes, nb, act, t0, nt, y + r, n_out);
            }
    }
}

void kiln_direct_rows(kiln_qrow_fn fn, const kiln_qtype *qt, const void *w, int64_t n_in, int64_t n_out,
                      const void *act, int64_t n_tokens, float *y) {
    kiln_direct_rows4(NULL, fn, qt, w, n_in, n_out, act, n_tokens, y);
}
