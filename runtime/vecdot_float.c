/* runtime/vecdot_float.c - f32 matrix products with one fixed rounding
 * order: every output is acc = fmaf(w[k], x[k], acc) for k = 0, 1, ...,
 * n_in - 1, starting from 0, whatever the SIMD level, the thread count or
 * the number of tokens in the call.
 *
 * Used for F32, F16 and BF16 weights (whose products with f16 / bf16
 * rounded activations are exact, so only the accumulation rounds) and for
 * every type in KILN_NUM_EXACT mode after dequantization. A serial chain
 * per output is the order that a register-blocked GEMM computes naturally
 * when one SIMD lane holds one output row: weights are repacked into
 * panels P[k][16 rows], activations into X[k][24 tokens], and the
 * microkernel does one vector FMA per (k, token) with the activation
 * broadcast - 16 x 24 outputs in flight, each its own chain. Blocking over
 * k (KC at a time) keeps the panel in L1; the partial sums wait in y
 * between blocks, which does not change a single bit.
 *
 * Not here: where the f32 rows come from (the caller's callback does the
 * dequantization) and activation rounding (matmul.c). */
#include "vecdot.h"

#include "../core/cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef __x86_64__
#include <immintrin.h>
#define INLINE static inline __attribute__((always_inline))
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#endif

#define W 16   /* rows per panel: one zmm, two ymm */
#define TB 24  /* tokens per packed activation block */
#define KC 256 /* k per block: a multiple of every block size */

float kiln_fdot_chain(const float *w, const float *x, int64_t n) {
    float acc = 0;
    for (int64_t k = 0; k < n; k++) acc = fmaf(w[k], x[k], acc);
    return acc;
}

/* X[tb][k][i] = x[(TB * tb + i) * n_in + k], zeros past the last token. */
static void pack_tokens(const float *x, int64_t n_in, int64_t n_tokens, int64_t tb, float *X) {
    for (int64_t k = 0; k < n_in; k++)
        for (int i = 0; i < TB; i++) {
            int64_t t = TB * tb + i;
            X[k * TB + i] = t < n_tokens ? x[t * n_in + k] : 0.0f;
        }
}

/* P[k][r] = tmp[r][k] for k < nk (tmp rows have stride KC). */
static void transpose_scalar(const float *tmp, int64_t nk, float *P) {
    for (int64_t k = 0; k < nk; k++)
        for (int r = 0; r < W; r++) P[k * W + r] = tmp[r * KC + k];
}

#ifdef __x86_64__
/* 16 x 16 transpose: four rounds of interleaving in registers. */
AVX512 static void transpose_avx512(const float *tmp, int64_t nk, float *P) {
    int64_t k = 0;
    for (; k + 16 <= nk; k += 16) {
        __m512 r[16], t[16];
        for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(tmp + i * KC + k);
        for (int i = 0; i < 16; i += 2) {
            t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
        }
        for (int i = 0; i < 16; i += 4)
            for (int j = 0; j < 2; j++) {
                r[i + j] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + j]), _mm512_castps_pd(t[i + j + 2])));
                r[i + j + 2] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + j]), _mm512_castps_pd(t[i + j + 2])));
            }
        for (int i = 0; i < 16; i += 8)
            for (int j = 0; j < 4; j++) {
                t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
                t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
            }
        for (int j = 0; j < 8; j++) {
            r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
            r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
        }
        /* r[j] now holds column col[j] (the second round swaps the middle
         * two columns of every four). */
        static const int col[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
        for (int j = 0; j < 16; j++) _mm512_storeu_ps(P + (k + col[j]) * W, r[j]);
    }
    for (; k < nk; k++)
        for (int i = 0; i < W; i++) P[k * W + i] = tmp[i * KC + k];
}

/* The microkernel: T tokens (T <= 24, a compile-time constant in each
 * instance) against one panel for nk values of k. first: start the chains
 * at 0 instead of the sums already in y. */
AVX512 INLINE void kernel_avx512(const float *P, const float *X, int64_t nk, int T, float *y,
                                 int64_t ldy, int n_store, __mmask16 mask, bool first) {
    __m512 acc[TB];
    for (int t = 0; t < T; t++)
        acc[t] = first || t >= n_store ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, y + t * ldy);
    for (int64_t k = 0; k < nk; k++) {
        const __m512 w = _mm512_load_ps(P + k * W);
        for (int t = 0; t < T; t++) acc[t] = _mm512_fmadd_ps(w, _mm512_set1_ps(X[k * TB + t]), acc[t]);
    }
    for (int t = 0; t < n_store; t++) _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);
}

AVX512 static void block_avx512(const float *P, const float *X, int64_t nk, int n_tok, float *y,
                                int64_t ldy, int n_rows, bool first) {
    const __mmask16 mask = (__mmask16)((1u << n_rows) - 1);
    if (n_tok > 16) kernel_avx512(P, X, nk, 24, y, ldy, n_tok, mask, first);
    else if (n_tok > 8) kernel_avx512(P, X, nk, 16, y, ldy, n_tok, mask, first);
    else if (n_tok > 4) kernel_avx512(P, X, nk, 8, y, ldy, n_tok, mask, first);
    else if (n_tok > 2) kernel_avx512(P, X, nk, 4, y, ldy, n_tok, mask, first);
    else if (n_tok > 1) kernel_avx512(P, X, nk, 2, y, ldy, n_tok, mask, first);
    else kernel_avx512(P, X, nk, 1, y, ldy, n_tok, mask, first);
}

/* AVX2: the 16 rows in two ymm, 6 tokens per pass over the panel. */
AVX2 INLINE void kernel_avx2(const float *P, const float *X, int64_t nk, int T, float *y,
                             int64_t ldy, int n_store, __m256i m0, __m256i m1, bool first) {
    __m256 a0[6], a1[6];
    for (int t = 0; t < T; t++) {
        if (first || t >= n_store) {
            a0[t] = a1[t] = _mm256_setzero_ps();
        } else {
            a0[t] = _mm256_maskload_ps(y + t * ldy, m0);
            a1[t] = _mm256_maskload_ps(y + t * ldy + 8, m1);
        }
    }
    for (int64_t k = 0; k < nk; k++) {
        const __m256 w0 = _mm256_load_ps(P + k * W), w1 = _mm256_load_ps(P + k * W + 8);
        for (int t = 0; t < T; t++) {
            const __m256 xb = _mm256_broadcast_ss(X + k * TB + t);
            a0[t] = _mm256_fmadd_ps(w0, xb, a0[t]);
            a1[t] = _mm256_fmadd_ps(w1, xb, a1[t]);
        }
    }
    for (int t = 0; t < n_store; t++) {
        _mm256_maskstore_ps(y + t * ldy, m0, a0[t]);
        _mm256_maskstore_ps(y + t * ldy + 8, m1, a1[t]);
    }
}

AVX2 static void block_avx2(const float *P, const float *X, int64_t nk, int n_tok, float *y,
                            int64_t ldy, int n_rows, bool first) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i m0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(n_rows), idx);
    const __m256i m1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(n_rows - 8), idx);
    for (int t = 0; t < n_tok; t += 6) {
        int n = n_tok - t < 6 ? n_tok - t : 6;
        if (n > 3) kernel_avx2(P, X + t, nk, 6, y + t * ldy, ldy, n, m0, m1, first);
        else if (n > 1) kernel_avx2(P, X + t, nk, 3, y + t * ldy, ldy, n, m0, m1, first);
        else kernel_avx2(P, X + t, nk, 1, y + t * ldy, ldy, n, m0, m1, first);
    }
}
#endif

/* The scalar level is the definition itself, row by row. */
static void fgemm_scalar(kiln_rows_f32_fn rows, const void *ctx, int64_t n_in, int64_t n_out,
                         const float *x, int64_t n_tokens, float *y) {
#pragma omp parallel
    {
        float *row = malloc((size_t)n_in * sizeof(float));
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n_out; r++) {
            if (!row) continue;
            rows(ctx, r, 1, 0, n_in, row, n_in);
            for (int64_t t = 0; t < n_tokens; t++) y[t * n_out + r] = kiln_fdot_chain(row, x + t * n_in, n_in);
        }
        free(row);
    }
}

void kiln_fgemm(kiln_rows_f32_fn rows, const void *ctx, int64_t n_in, int64_t n_out,
                const float *x, int64_t n_tokens, float *y) {
    kiln_simd_level lv = kiln_simd();
    const int64_t ntb = (n_tokens + TB - 1) / TB;
    float *X = lv > KILN_SIMD_SCALAR ? aligned_alloc(64, (size_t)(ntb * n_in * TB) * sizeof(float) + 64) : NULL;
    if (!X) {
        fgemm_scalar(rows, ctx, n_in, n_out, x, n_tokens, y);
        return;
    }
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t tb = 0; tb < ntb; tb++) pack_tokens(x, n_in, n_tokens, tb, X + tb * n_in * TB);

        float *tmp = aligned_alloc(64, W * KC * sizeof(float));
        float *P = aligned_alloc(64, W * KC * sizeof(float));
#pragma omp for schedule(static)
        for (int64_t r0 = 0; r0 < n_out; r0 += W) {
            if (!tmp || !P) continue;
            const int nr = n_out - r0 < W ? (int)(n_out - r0) : W;
            if (nr < W) memset(tmp, 0, W * KC * sizeof(float));
            for (int64_t k0 = 0; k0 < n_in; k0 += KC) {
                const int64_t nk = n_in - k0 < KC ? n_in - k0 : KC;
                rows(ctx, r0, nr, k0, nk, tmp, KC);
#ifdef __x86_64__
                if (lv >= KILN_SIMD_AVX512) transpose_avx512(tmp, nk, P);
                else transpose_scalar(tmp, nk, P);
                for (int64_t tb = 0; tb < ntb; tb++) {
                    const int n_tok = n_tokens - TB * tb < TB ? (int)(n_tokens - TB * tb) : TB;
                    const float *Xb = X + tb * n_in * TB + k0 * TB;
                    float *yb = y + TB * tb * n_out + r0;
                    if (lv >= KILN_SIMD_AVX512) block_avx512(P, Xb, nk, n_tok, yb, n_out, nr, k0 == 0);
                    else block_avx2(P, Xb, nk, n_tok, yb, n_out, nr, k0 == 0);
                }
#endif
            }
        }
        free(tmp);
        free(P);
    }
    free(X);
}
