/* runtime/vecdot_qgemm.c - the panel kernels: 16 weight rows (one per SIMD
 * lane, layouts in vecdot.h) against a run of tokens, in KILN_NUM_GGML
 * mode.
 *
 * For each block the integer sums of all 16 rows come out of a few
 * vpdpbusd / vpmaddubsw + vpdpwssd (AVX512-VNNI) or vpmaddubsw + vpmaddwd
 * (AVX2) instructions, and are exact. The float steps that follow are
 * ggml's (see vecdot_legacy.c and, for the Q8_K types, vecdot_korder.c),
 * done per lane in the same order - so every output equals the reference
 * dot product bit for bit. The 32-weight types keep the eight 4-weight
 * group sums of a block apart (ggml's vec_dot / tinyBLAS order, eight
 * float accumulators per row) or take its whole sum (repacked); the
 * Q8_K types keep ggml's eight int32 lanes apart (vec_dot order) or sum
 * them per group of chunks (the repacked gemm / gemv orders). Tokens are
 * taken 4 (legacy) or 2 (k-quants) at a time so that each weight vector
 * loaded serves several tokens.
 *
 * Not here: the packing (vecdot_panel.c), the choice of rows per thread
 * (matmul.c) and of the kernel (the table in kernels.c, where a CPU
 * with AVX-512 but no VNNI gets the AVX2 code). */
/* The float steps must round after every operation, as ggml's scalar code
 * does; -std=c11 already keeps gcc from fusing them, this makes sure. */
#ifdef __clang__
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels.h"

#include "../core/cpu.h"
#include "../core/types.h"

#include <string.h>

#ifdef __x86_64__
#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define AVX2 __attribute__((target("avx2,fma,f16c")))

static inline int32_t load32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Token t's pointers into the packed activations. */
typedef struct tok {
    const uint8_t *u;
    const float *d;
    const int16_t *bs;
} tok;

static inline tok token(const kiln_pact *A, int64_t t) {
    tok k = {A->u + t * A->n_in, A->d + t * A->nb, A->bsums ? A->bsums + t * (A->n_in / 16) : NULL};
    return k;
}

static inline bool has_min(kiln_combine c) {
    return c == KILN_COMB_K_Q2 || c == KILN_COMB_K_Q4 || c == KILN_COMB_K_Q5 || c == KILN_COMB_K_Q6;
}

/* ---- AVX512-VNNI ------------------------------------------------------ */

/* The 32-weight types in the order of ggml's repacked Q4_0 / IQ4_NL
 * kernels (KILN_COMB_FMA): each block's whole sum, one fma by dx * dy. */
VNNI INLINE void leg512(const kiln_pblk32 *P, int64_t nb, const tok *tk, int T, kiln_combine comb,
                        float *const *out, __mmask16 mask) {
    (void)comb;
    __m512 sumf[4];
#pragma GCC unroll 8
    for (int k = 0; k < T; k++) sumf[k] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const kiln_pblk32 *B = P + b;
        __m512i acc[4];
        const __m512i bias = _mm512_load_si512(B->bias);
#pragma GCC unroll 8
        for (int k = 0; k < T; k++) acc[k] = bias;
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m512i w = _mm512_load_si512(B->w[g]);
#pragma GCC unroll 8
            for (int k = 0; k < T; k++)
                acc[k] = _mm512_dpbusd_epi32(acc[k], _mm512_set1_epi32(load32(tk[k].u + 32 * b + 4 * g)), w);
        }
        const __m512 dx = _mm512_load_ps(B->d);
#pragma GCC unroll 8
        for (int k = 0; k < T; k++) {
            const __m512 dy = _mm512_set1_ps(tk[k].d[b]);
            const __m512 s = _mm512_cvtepi32_ps(acc[k]);
            sumf[k] = _mm512_fmadd_ps(s, _mm512_mul_ps(dx, dy), sumf[k]);
        }
    }
#pragma GCC unroll 8
    for (int k = 0; k < T; k++) _mm512_mask_storeu_ps(out[k], mask, sumf[k]);
}

/* KILN_COMB_LANES8 (Q8_0, Q4_0, Q5_0, IQ4_NL): eight float accumulators
 * per row, one per 4-weight group g, so the group sums stay apart. The
 * panel's bias covers the whole block; the bias of one group is taken
 * from the weights themselves (128 * sum of the group's levels). */
VNNI INLINE void lanes512(const kiln_pblk32 *P, int64_t nb, const tok *tk, int T, kiln_combine comb,
                          float *const *out, __mmask16 mask) {
    (void)comb;
    __m512 acc[2][8];
    const __m512i k128 = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 8
    for (int k = 0; k < T; k++)
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) acc[k][g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const kiln_pblk32 *B = P + b;
        const __m512 dx = _mm512_load_ps(B->d);
        __m512 d[2];
#pragma GCC unroll 8
        for (int k = 0; k < T; k++) d[k] = _mm512_mul_ps(dx, _mm512_set1_ps(tk[k].d[b]));
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m512i w = _mm512_load_si512(B->w[g]);
            const __m512i bias = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, w);
#pragma GCC unroll 8
            for (int k = 0; k < T; k++) {
                const __m512i s = _mm512_sub_epi32(
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi32(load32(tk[k].u + 32 * b + 4 * g)), w),
                    bias);
                acc[k][g] = _mm512_fmadd_ps(d[k], _mm512_cvtepi32_ps(s), acc[k][g]);
            }
        }
    }
#pragma GCC unroll 8
    for (int k = 0; k < T; k++) {
        const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[k][0], acc[k][4]), _mm512_add_ps(acc[k][2], acc[k][6])),
                                       _mm512_add_ps(_mm512_add_ps(acc[k][1], acc[k][5]), _mm512_add_ps(acc[k][3], acc[k][7])));
        _mm512_mask_storeu_ps(out[k], mask, s);
    }
}

/* Integer lanes of super-block b, chunks [c0, c1), added to acc[k][l]
 * for T tokens: lane l of chunk c is one dword of every row, with the
 * scale of its 16-weight half. */
VNNI INLINE void klanes512(const kiln_pblk256 *B, int64_t b, const tok *tk, int T, int c0, int c1,
                           __m512i acc[][8]) {
#pragma GCC unroll 8
    for (int c = c0; c < c1; c++) {
        const __m512i sc[2] = {_mm512_load_si512(B->sc[c][0]), _mm512_load_si512(B->sc[c][1])};
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) {
            const __m512i w = _mm512_load_si512(B->w[c][l]);
#pragma GCC unroll 8
            for (int k = 0; k < T; k++) {
                const __m512i a = _mm512_set1_epi32(load32(tk[k].u + 256 * b + 32 * c + 4 * l));
                acc[k][l] = _mm512_dpwssd_epi32(acc[k][l], _mm512_maddubs_epi16(a, w), sc[l / 4]);
            }
        }
    }
}

/* mn[2j] * bsums[2j] + mn[2j+1] * bsums[2j+1] of super-block b, token k. */
VNNI INLINE __m512i kmins512(const kiln_pblk256 *B, int64_t b, const tok *t, int j, __m512i acc) {
    return _mm512_dpwssd_epi32(acc, _mm512_set1_epi32(load32(t->bs + 16 * b + 2 * j)), _mm512_load_si512(B->mn[j]));
}

/* ggml's hsum_float_8 tree over eight lane accumulators. */
VNNI INLINE __m512 khsum512(const __m512 a[8]) {
    return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                         _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])));
}

/* The vec_dot order (vecdot_korder.c). */
VNNI INLINE void kvec512(const kiln_pblk256 *P, int64_t nb, const tok *tk, int T, kiln_combine comb,
                         float *const *out, __mmask16 mask) {
    __m512 acc[2][8], accm[2][4], summs[2];
#pragma GCC unroll 8
    for (int k = 0; k < T; k++) {
        summs[k] = _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) acc[k][l] = _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int l = 0; l < 4; l++) accm[k][l] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const kiln_pblk256 *B = P + b;
        __m512i L[2][8];
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) {
            const __m512i bl = _mm512_load_si512(B->bias[l]);
#pragma GCC unroll 8
            for (int k = 0; k < T; k++) L[k][l] = bl;
        }
        klanes512(B, b, tk, T, 0, 8, L);
        const __m512 dx = _mm512_load_ps(B->d), dmx = _mm512_load_ps(B->dmin);
#pragma GCC unroll 8
        for (int k = 0; k < T; k++) {
            const __m512 dy = _mm512_set1_ps(tk[k].d[b]);
            if (has_min(comb)) {
                const __m512 dm = _mm512_mul_ps(_mm512_set1_ps(-tk[k].d[b]), dmx);
                __m512i m[8];
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) m[j] = kmins512(B, b, &tk[k], j, _mm512_setzero_si512());
                if (comb == KILN_COMB_K_Q6)
#pragma GCC unroll 8
                    for (int l = 0; l < 8; l++) L[k][l] = _mm512_sub_epi32(L[k][l], m[l]);
                if (comb == KILN_COMB_K_Q2)
#pragma GCC unroll 8
                    for (int l = 0; l < 8; l++) acc[k][l] = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(m[l]), acc[k][l]);
                if (comb == KILN_COMB_K_Q4)
#pragma GCC unroll 8
                    for (int l = 0; l < 4; l++)
                        accm[k][l] = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(_mm512_add_epi32(m[2 * l], m[2 * l + 1])), accm[k][l]);
                if (comb == KILN_COMB_K_Q5) {
                    __m512i t = m[0];
#pragma GCC unroll 8
                    for (int j = 1; j < 8; j++) t = _mm512_add_epi32(t, m[j]);
                    summs[k] = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(t), summs[k]);
                }
            }
            const __m512 d = _mm512_mul_ps(dy, dx);
#pragma GCC unroll 8
            for (int l = 0; l < 8; l++) acc[k][l] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(L[k][l]), acc[k][l]);
        }
    }
#pragma GCC unroll 8
    for (int k = 0; k < T; k++) {
        __m512 s = khsum512(acc[k]);
        if (comb == KILN_COMB_K_Q4)
            s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(accm[k][0], accm[k][2]), _mm512_add_ps(accm[k][1], accm[k][3])));
        if (comb == KILN_COMB_K_Q5) s = _mm512_add_ps(s, summs[k]);
        if (comb == KILN_COMB_IQ2) s = _mm512_mul_ps(_mm512_set1_ps(0.125f), s);
        _mm512_mask_storeu_ps(out[k], mask, s);
    }
}

/* The repacked gemm (G chunks per fma) and gemv (G = 8) orders. */
VNNI INLINE void krep512(const kiln_pblk256 *P, int64_t nb, const tok *tk, int T, int G, float *const *out,
                         __mmask16 mask) {
    __m512 A[2], M[2];
#pragma GCC unroll 8
    for (int k = 0; k < T; k++) A[k] = M[k] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const kiln_pblk256 *B = P + b;
        const __m512 dx = _mm512_load_ps(B->d), dmx = _mm512_load_ps(B->dmin);
#pragma GCC unroll 8
        for (int c0 = 0; c0 < 8; c0 += G) {
            __m512i L[2][8], bias = _mm512_load_si512(B->cbias[c0]);
#pragma GCC unroll 8
            for (int c = c0 + 1; c < c0 + G; c++) bias = _mm512_add_epi32(bias, _mm512_load_si512(B->cbias[c]));
#pragma GCC unroll 8
            for (int k = 0; k < T; k++) {
                L[k][0] = bias;
#pragma GCC unroll 8
                for (int l = 1; l < 8; l++) L[k][l] = _mm512_setzero_si512();
            }
            klanes512(B, b, tk, T, c0, c0 + G, L);
#pragma GCC unroll 8
            for (int k = 0; k < T; k++) {
                const __m512i i = _mm512_add_epi32(
                    _mm512_add_epi32(_mm512_add_epi32(L[k][0], L[k][1]), _mm512_add_epi32(L[k][2], L[k][3])),
                    _mm512_add_epi32(_mm512_add_epi32(L[k][4], L[k][5]), _mm512_add_epi32(L[k][6], L[k][7])));
                __m512i m = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int j = c0; j < c0 + G; j++) m = kmins512(B, b, &tk[k], j, m);
                const __m512 dy = _mm512_set1_ps(tk[k].d[b]);
                A[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_mul_ps(dx, dy), A[k]);
                M[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(dmx, dy), M[k]);
            }
        }
    }
#pragma GCC unroll 8
    for (int k = 0; k < T; k++) _mm512_mask_storeu_ps(out[k], mask, _mm512_sub_ps(A[k], M[k]));
}

/* Tokens [t0, t0 + n) in groups of G, the rest one by one; LAST tells
 * the kernel which rows exist. */
#define TOKEN_LOOP(KERNEL, BLK, G, COMB, LAST)                                          \
    do {                                                                                 \
        int64_t t = t0;                                                                  \
        for (; t + G <= t0 + n; t += G) {                                                \
            tok tk[G];                                                                   \
            float *out[G];                                                               \
            for (int k = 0; k < G; k++) tk[k] = token(A, t + k), out[k] = y + (t + k) * ldy; \
            KERNEL((const BLK *)panel, A->nb, tk, G, COMB, out, LAST);                   \
        }                                                                                \
        for (; t < t0 + n; t++) {                                                        \
            tok tk[1] = {token(A, t)};                                                   \
            float *out[1] = {y + t * ldy};                                               \
            KERNEL((const BLK *)panel, A->nb, tk, 1, COMB, out, LAST);                   \
        }                                                                                \
    } while (0)

/* ---- AVX2: eight rows per register, the panel in two halves ----------- */

/* Lanes of half h that hold rows below n_rows. */
AVX2 static inline __m256i rows_mask(int n_rows, int h) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n_rows - 8 * h), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Without VNNI the +128 trick would overflow vpmaddubsw's 16-bit pairs
 * for 8-bit levels, so the legacy kernel uses ggml's sign trick instead:
 * |w| times (a with w's sign), no bias. */
AVX2 INLINE void leg256(const kiln_pblk32 *P, int64_t nb, const tok *tk, int T, kiln_combine comb,
                        float *const *out, int n_rows) {
    (void)comb;
    const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
    for (int h = 0; h < 2 && 8 * h < n_rows; h++) {
        __m256 sumf[4];
#pragma GCC unroll 8
        for (int k = 0; k < T; k++) sumf[k] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const kiln_pblk32 *B = P + b;
            __m256i acc[4];
#pragma GCC unroll 8
            for (int k = 0; k < T; k++) acc[k] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                const __m256i w = _mm256_load_si256((const __m256i *)B->w[g][8 * h]);
                const __m256i aw = _mm256_sign_epi8(w, w);
#pragma GCC unroll 8
                for (int k = 0; k < T; k++) {
                    __m256i a = _mm256_xor_si256(_mm256_set1_epi32(load32(tk[k].u + 32 * b + 4 * g)), flip);
                    __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(a, w));
                    acc[k] = _mm256_add_epi32(acc[k], _mm256_madd_epi16(p, ones));
                }
            }
            const __m256 dx = _mm256_load_ps(B->d + 8 * h);
#pragma GCC unroll 8
            for (int k = 0; k < T; k++) {
                const __m256 dy = _mm256_set1_ps(tk[k].d[b]);
                const __m256 s = _mm256_cvtepi32_ps(acc[k]);
                sumf[k] = _mm256_fmadd_ps(s, _mm256_mul_ps(dx, dy), sumf[k]);
            }
        }
#pragma GCC unroll 8
        for (int k = 0; k < T; k++) _mm256_maskstore_ps(out[k] + 8 * h, rows_mask(n_rows, h), sumf[k]);
    }
}

/* KILN_COMB_LANES8 (see lanes512), with the sign trick. */
AVX2 INLINE void lanes256(const kiln_pblk32 *P, int64_t nb, const tok *tk, int T, kiln_combine comb,
                          float *const *out, int n_rows) {
    (void)T;
    (void)comb;
    const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
    for (int h = 0; h < 2 && 8 * h < n_rows; h++) {
        __m256 acc[8];
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) acc[g] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const kiln_pblk32 *B = P + b;
            const __m256 d = _mm256_mul_ps(_mm256_load_ps(B->d + 8 * h), _mm256_set1_ps(tk[0].d[b]));
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                const __m256i w = _mm256_load_si256((const __m256i *)B->w[g][8 * h]);
                const __m256i a = _mm256_xor_si256(_mm256_set1_epi32(load32(tk[0].u + 32 * b + 4 * g)), flip);
                const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
                acc[g] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)), acc[g]);
            }
        }
        const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6])),
                                       _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7])));
        _mm256_maskstore_ps(out[0] + 8 * h, rows_mask(n_rows, h), s);
    }
}

/* k-quant levels stay within +-64, so vpmaddubsw of (a + 128) and the
 * level cannot saturate and the panel's bias applies as with VNNI. Half
 * h of the panel (rows 8h..8h+7), one token; the same steps as kvec512 /
 * krep512. */
AVX2 INLINE void klanes256(const kiln_pblk256 *B, int64_t b, const tok *t, int h, int c0, int c1, __m256i acc[8]) {
#pragma GCC unroll 8
    for (int c = c0; c < c1; c++) {
        const __m256i sc[2] = {_mm256_load_si256((const __m256i *)B->sc[c][0][8 * h]),
                               _mm256_load_si256((const __m256i *)B->sc[c][1][8 * h])};
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) {
            const __m256i w = _mm256_load_si256((const __m256i *)B->w[c][l][8 * h]);
            const __m256i a = _mm256_set1_epi32(load32(t->u + 256 * b + 32 * c + 4 * l));
            acc[l] = _mm256_add_epi32(acc[l], _mm256_madd_epi16(_mm256_maddubs_epi16(a, w), sc[l / 4]));
        }
    }
}

AVX2 INLINE __m256i kmins256(const kiln_pblk256 *B, int64_t b, const tok *t, int h, int j) {
    return _mm256_madd_epi16(_mm256_set1_epi32(load32(t->bs + 16 * b + 2 * j)),
                             _mm256_load_si256((const __m256i *)B->mn[j][8 * h]));
}

AVX2 INLINE void kvec256(const kiln_pblk256 *P, int64_t nb, const tok *tk, int T, kiln_combine comb,
                         float *const *out, int n_rows) {
    (void)T;
    for (int h = 0; h < 2 && 8 * h < n_rows; h++) {
        __m256 acc[8], accm[4], summs = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) acc[l] = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int l = 0; l < 4; l++) accm[l] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const kiln_pblk256 *B = P + b;
            __m256i L[8];
#pragma GCC unroll 8
            for (int l = 0; l < 8; l++) L[l] = _mm256_load_si256((const __m256i *)(B->bias[l] + 8 * h));
            klanes256(B, b, &tk[0], h, 0, 8, L);
            const __m256 dx = _mm256_load_ps(B->d + 8 * h), dmx = _mm256_load_ps(B->dmin + 8 * h);
            const __m256 dy = _mm256_set1_ps(tk[0].d[b]);
            if (has_min(comb)) {
                const __m256 dm = _mm256_mul_ps(_mm256_set1_ps(-tk[0].d[b]), dmx);
                __m256i m[8];
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++) m[j] = kmins256(B, b, &tk[0], h, j);
                if (comb == KILN_COMB_K_Q6)
#pragma GCC unroll 8
                    for (int l = 0; l < 8; l++) L[l] = _mm256_sub_epi32(L[l], m[l]);
                if (comb == KILN_COMB_K_Q2)
#pragma GCC unroll 8
                    for (int l = 0; l < 8; l++) acc[l] = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(m[l]), acc[l]);
                if (comb == KILN_COMB_K_Q4)
#pragma GCC unroll 8
                    for (int l = 0; l < 4; l++)
                        accm[l] = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(_mm256_add_epi32(m[2 * l], m[2 * l + 1])), accm[l]);
                if (comb == KILN_COMB_K_Q5) {
                    __m256i t = m[0];
#pragma GCC unroll 8
                    for (int j = 1; j < 8; j++) t = _mm256_add_epi32(t, m[j]);
                    summs = _mm256_fmadd_ps(dm, _mm256_cvtepi32_ps(t), summs);
                }
            }
            const __m256 d = _mm256_mul_ps(dy, dx);
#pragma GCC unroll 8
            for (int l = 0; l < 8; l++) acc[l] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(L[l]), acc[l]);
        }
        __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6])),
                                 _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7])));
        if (comb == KILN_COMB_K_Q4)
            s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(accm[0], accm[2]), _mm256_add_ps(accm[1], accm[3])));
        if (comb == KILN_COMB_K_Q5) s = _mm256_add_ps(s, summs);
        if (comb == KILN_COMB_IQ2) s = _mm256_mul_ps(_mm256_set1_ps(0.125f), s);
        _mm256_maskstore_ps(out[0] + 8 * h, rows_mask(n_rows, h), s);
    }
}

AVX2 INLINE void krep256(const kiln_pblk256 *P, int64_t nb, const tok *tk, int T, int G, float *const *out,
                         int n_rows) {
    (void)T;
    for (int h = 0; h < 2 && 8 * h < n_rows; h++) {
        __m256 A = _mm256_setzero_ps(), M = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            const kiln_pblk256 *B = P + b;
            const __m256 dx = _mm256_load_ps(B->d + 8 * h), dmx = _mm256_load_ps(B->dmin + 8 * h);
            const __m256 dy = _mm256_set1_ps(tk[0].d[b]);
#pragma GCC unroll 8
            for (int c0 = 0; c0 < 8; c0 += G) {
                __m256i L[8];
                L[0] = _mm256_load_si256((const __m256i *)(B->cbias[c0] + 8 * h));
#pragma GCC unroll 8
                for (int c = c0 + 1; c < c0 + G; c++)
                    L[0] = _mm256_add_epi32(L[0], _mm256_load_si256((const __m256i *)(B->cbias[c] + 8 * h)));
#pragma GCC unroll 8
                for (int l = 1; l < 8; l++) L[l] = _mm256_setzero_si256();
                klanes256(B, b, &tk[0], h, c0, c0 + G, L);
                const __m256i i = _mm256_add_epi32(
                    _mm256_add_epi32(_mm256_add_epi32(L[0], L[1]), _mm256_add_epi32(L[2], L[3])),
                    _mm256_add_epi32(_mm256_add_epi32(L[4], L[5]), _mm256_add_epi32(L[6], L[7])));
                __m256i m = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int j = c0; j < c0 + G; j++) m = _mm256_add_epi32(m, kmins256(B, b, &tk[0], h, j));
                A = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(dx, dy), A);
                M = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_mul_ps(dmx, dy), M);
            }
        }
        _mm256_maskstore_ps(out[0] + 8 * h, rows_mask(n_rows, h), _mm256_sub_ps(A, M));
    }
}

/* The kernels kernels.c names: one instance per combination (and, for
 * the repacked orders, chunks per fma), so that every branch on the
 * combination folds away; _tN: tokens per pass. */
#define PANEL_KERNEL(TARGET, NAME, KERNEL, BLK, G, COMB, LAST)                                           \
    TARGET void NAME(const void *panel, const kiln_pact *A, int64_t t0, int64_t n, float *y, int64_t ldy, \
                     int n_rows) {                                                                       \
        TOKEN_LOOP(KERNEL, BLK, G, COMB, LAST);                                                          \
    }

#define VNNI_LAST ((__mmask16)((1u << n_rows) - 1))
PANEL_KERNEL(VNNI, kiln_qgemm_vnni_lanes8_t2, lanes512, kiln_pblk32, 2, KILN_COMB_LANES8, VNNI_LAST)
PANEL_KERNEL(VNNI, kiln_qgemm_vnni_fma_t4, leg512, kiln_pblk32, 4, KILN_COMB_FMA, VNNI_LAST)
PANEL_KERNEL(VNNI, kiln_qgemm_vnni_k_t2, kvec512, kiln_pblk256, 2, KILN_COMB_K, VNNI_LAST)
PANEL_KERNEL(VNNI, kiln_qgemm_vnni_q6_k_t2, kvec512, kiln_pblk256, 2, KILN_COMB_K_Q6, VNNI_LAST)
PANEL_KERNEL(VNNI, kiln_qgemm_vnni_q2_k_t2, kvec512, kiln_pblk256, 2, KILN_COMB_K_Q2, VNNI_LAST)
PANEL_KERNEL(VNNI, kiln_qgemm_vnni_q4_k_t2, kvec512, kiln_pblk256, 2, KILN_COMB_K_Q4, VNNI_LAST)
PANEL_KERNEL(VNNI, kiln_qgemm_vnni_q5_k_t2, kvec512, kiln_pblk256, 2, KILN_COMB_K_Q5, VNNI_LAST)
PANEL_KERNEL(VNNI, kiln_qgemm_vnni_iq2_t2, kvec512, kiln_pblk256, 2, KILN_COMB_IQ2, VNNI_LAST)
PANEL_KERNEL(VNNI, kiln_qgemm_vnni_rep_c2_t2, krep512, kiln_pblk256, 2, 2, VNNI_LAST)
PANEL_KERNEL(VNNI, kiln_qgemm_vnni_rep_c4_t2, krep512, kiln_pblk256, 2, 4, VNNI_LAST)
PANEL_KERNEL(VNNI, kiln_qgemm_vnni_rep_c8_t2, krep512, kiln_pblk256, 2, 8, VNNI_LAST)

PANEL_KERNEL(AVX2, kiln_qgemm_avx2_lanes8_t1, lanes256, kiln_pblk32, 1, KILN_COMB_LANES8, n_rows)
PANEL_KERNEL(AVX2, kiln_qgemm_avx2_fma_t4, leg256, kiln_pblk32, 4, KILN_COMB_FMA, n_rows)
PANEL_KERNEL(AVX2, kiln_qgemm_avx2_k_t1, kvec256, kiln_pblk256, 1, KILN_COMB_K, n_rows)
PANEL_KERNEL(AVX2, kiln_qgemm_avx2_q6_k_t1, kvec256, kiln_pblk256, 1, KILN_COMB_K_Q6, n_rows)
PANEL_KERNEL(AVX2, kiln_qgemm_avx2_q2_k_t1, kvec256, kiln_pblk256, 1, KILN_COMB_K_Q2, n_rows)
PANEL_KERNEL(AVX2, kiln_qgemm_avx2_q4_k_t1, kvec256, kiln_pblk256, 1, KILN_COMB_K_Q4, n_rows)
PANEL_KERNEL(AVX2, kiln_qgemm_avx2_q5_k_t1, kvec256, kiln_pblk256, 1, KILN_COMB_K_Q5, n_rows)
PANEL_KERNEL(AVX2, kiln_qgemm_avx2_iq2_t1, kvec256, kiln_pblk256, 1, KILN_COMB_IQ2, n_rows)
PANEL_KERNEL(AVX2, kiln_qgemm_avx2_rep_c2_t1, krep256, kiln_pblk256, 1, 2, n_rows)
PANEL_KERNEL(AVX2, kiln_qgemm_avx2_rep_c4_t1, krep256, kiln_pblk256, 1, 4, n_rows)
PANEL_KERNEL(AVX2, kiln_qgemm_avx2_rep_c8_t1, krep256, kiln_pblk256, 1, 8, n_rows)
#endif
