/* runtime/vecdot_float.c - f32 matrix products with one fixed rounding
 * order: every output is acc = fmaf(w[k], x[k], acc) for k = 0, 1, ...,
 * n_in - 1, starting from 0, whatever the SIMD level, the thread count or
 * the number of tokens in the call.
 *
 * Used for every type in KILN_NUM_EXACT mode (after dequantization).
 * The end of the file holds the other family: F32 / F16 / BF16 weights in
 * KILN_NUM_GGML mode, summed in ggml's orders (kiln_fggml_*, named by the
 * table in kernels.c and run by matmul.c's kiln_fgemm_ggml). A serial chain
 * per output is the order that a register-blocked GEMM computes naturally
 * when one SIMD lane holds one output row: weights are repacked into
 * panels P[k][16 rows], activations into X[k][24 tokens], and the
 * microkernel does one vector FMA per (k, token) with the activation
 * broadcast - 16 x 24 outputs in flight, each its own chain. Blocking over
 * k (KC at a time) keeps the panel next to the core; the partial sums wait
 * in y between blocks, which does not change a single bit. One token
 * (decode) runs four panels side by side instead of 24 tokens; for F32 /
 * F16 / BF16 weights matmul.c sends it to vecdot_fdecode.c, which skips
 * the repacking altogether.
 *
 * The ggml orders have AVX-512 kernels (16-lane accumulators, as ggml's;
 * ggml_vec_dot's rows themselves in vecdot_frows.c) and AVX2 ones that
 * hold each 16-lane accumulator in two ymm and run every lane's chain
 * unchanged, so all levels give the scalar reference's bits.
 *
 * Buffers: kiln_fgemm makes one allocation (kiln_kernel_alloc) before
 * its OpenMP region and returns -1 if it is refused; the kiln_fggml_*
 * kernels run inside the caller's region (matmul.c's float_ggml) on the
 * per-thread scratch it hands them from its arena, and share rows out on
 * a dynamic schedule with no barrier of their own: under load a thread
 * the OS holds back leaves its blocks to the others, and the region's
 * end is the product's one barrier.
 *
 * Not here: where the f32 rows come from (the caller's callback does the
 * dequantization) and activation rounding (matmul.c). */
#include "kernels.h"

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "vecdot_simd.h"

#include <math.h>
#include <omp.h>
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
#define KC 512 /* k per block: a multiple of every block size */

/* The defining order: acc = fmaf(w[k], x[k], acc) for k = 0..n-1 from
 * acc = 0. Every SIMD path computes exactly this for every output. */
static float fdot_chain(const float *w, const float *x, int64_t n) {
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
/* P[k][r] = tmp[r][k], 16 x 16 at a time in registers. */
AVX512 static void transpose_avx512(const float *tmp, int64_t nk, float *P) {
    int64_t k = 0;
    for (; k + 16 <= nk; k += 16) {
        __m512 r[16], c[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(tmp + i * KC + k);
        kiln_transpose16(r, c);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) _mm512_store_ps(P + (k + j) * W, c[j]);
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
#pragma GCC unroll 24
    for (int t = 0; t < T; t++)
        acc[t] = first || t >= n_store ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, y + t * ldy);
    for (int64_t k = 0; k < nk; k++) {
        const __m512 w = _mm512_load_ps(P + k * W);
#pragma GCC unroll 24
        for (int t = 0; t < T; t++) acc[t] = _mm512_fmadd_ps(w, _mm512_set1_ps(X[k * TB + t]), acc[t]);
    }
#pragma GCC unroll 24
    for (int t = 0; t < T; t++)
        if (t < n_store) _mm512_mask_storeu_ps(y + t * ldy, mask, acc[t]);
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

/* One token against g <= 4 consecutive panels (P + j * W * KC), n_rows
 * rows in all: four independent chains hide the FMA latency. */
AVX512 static void decode_avx512(const float *P, const float *X, int64_t nk, int g, float *y,
                                 int n_rows, bool first) {
    __mmask16 m[4];
    __m512 acc[4];
    for (int j = 0; j < 4; j++) {
        int n = n_rows - j * W;
        m[j] = (__mmask16)(n >= W ? 0xFFFF : n > 0 ? (1u << n) - 1 : 0);
        acc[j] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m[j], y + j * W);
    }
    if (g < 4) {
        /* fewer panels: the same loop, the extra chains multiply zeros */
        for (int64_t k = 0; k < nk; k++) {
            const __m512 xb = _mm512_set1_ps(X[k * TB]);
            for (int j = 0; j < g; j++) acc[j] = _mm512_fmadd_ps(_mm512_load_ps(P + j * W * KC + k * W), xb, acc[j]);
        }
    } else {
        for (int64_t k = 0; k < nk; k++) {
            const __m512 xb = _mm512_set1_ps(X[k * TB]);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) acc[j] = _mm512_fmadd_ps(_mm512_load_ps(P + j * W * KC + k * W), xb, acc[j]);
        }
    }
    for (int j = 0; j < g; j++) _mm512_mask_storeu_ps(y + j * W, m[j], acc[j]);
}

/* AVX2: the 16 rows in two ymm, 6 tokens per pass over the panel. */
AVX2 INLINE void kernel_avx2(const float *P, const float *X, int64_t nk, int T, float *y,
                             int64_t ldy, int n_store, __m256i m0, __m256i m1, bool first) {
    __m256 a0[6], a1[6];
#pragma GCC unroll 6
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
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) {
            const __m256 xb = _mm256_broadcast_ss(X + k * TB + t);
            a0[t] = _mm256_fmadd_ps(w0, xb, a0[t]);
            a1[t] = _mm256_fmadd_ps(w1, xb, a1[t]);
        }
    }
#pragma GCC unroll 6
    for (int t = 0; t < T; t++) {
        if (t >= n_store) break;
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

/* The scalar level is the definition itself, row by row; rowbuf holds
 * n_in floats for each of omp_get_max_threads() threads. */
static void fgemm_scalar(kiln_rows_f32_fn rows, const void *ctx, int64_t n_in, int64_t n_out,
                         const float *x, int64_t n_tokens, float *y, float *rowbuf) {
#pragma omp parallel
    {
        float *row = rowbuf + (int64_t)omp_get_thread_num() * n_in;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n_out; r++) {
            rows(ctx, r, 1, 0, n_in, row, n_in);
            for (int64_t t = 0; t < n_tokens; t++) y[t * n_out + r] = fdot_chain(row, x + t * n_in, n_in);
        }
    }
}

/* n floats rounded up to whole 64-byte lines, so that buffers carved
 * one after another out of one allocation stay aligned. */
static int64_t lines16(int64_t n) {
    return (n + 15) / 16 * 16;
}

/* What one thread needs for the SIMD path. */
typedef struct fjob {
    kiln_rows_f32_fn rows;
    const void *ctx;
    int64_t n_in, n_out, n_tokens, ntb;
    const float *X;
    float *y;
    kiln_simd_level lv;
    int G;          /* panels per step */
    float *tmp, *P; /* W x KC rows, G panels */
} fjob;

/* Panels [p, p + G) (clipped to p1) for k in [k0, k0 + KC): repack, then
 * every token block. */
static void fstep(const fjob *j, int64_t p, int64_t p1, int64_t k0) {
    const int64_t nk = j->n_in - k0 < KC ? j->n_in - k0 : KC, r0 = p * W;
    const int g = p1 - p < j->G ? (int)(p1 - p) : j->G;
    const int nr = j->n_out - r0 < g * W ? (int)(j->n_out - r0) : g * W;
    for (int i = 0; i < g; i++) {
        const int nri = nr - i * W < W ? nr - i * W : W;
        if (nri < W) memset(j->tmp, 0, W * KC * sizeof(float));
        j->rows(j->ctx, r0 + i * W, nri, k0, nk, j->tmp, KC);
#ifdef __x86_64__
        if (j->lv >= KILN_SIMD_AVX512) transpose_avx512(j->tmp, nk, j->P + i * W * KC);
        else
#endif
            transpose_scalar(j->tmp, nk, j->P + i * W * KC);
    }
#ifdef __x86_64__
    if (j->G > 1) {
        decode_avx512(j->P, j->X + k0 * TB, nk, g, j->y + r0, nr, k0 == 0);
        return;
    }
    for (int64_t tb = 0; tb < j->ntb; tb++) {
        const int n_tok = j->n_tokens - TB * tb < TB ? (int)(j->n_tokens - TB * tb) : TB;
        const float *Xb = j->X + tb * j->n_in * TB + k0 * TB;
        float *yb = j->y + TB * tb * j->n_out + r0;
        /* the next block's partial sums are far away in y (one line per
         * token): ask for them early */
        if (tb + 1 < j->ntb)
            for (int t = 0; t < TB && TB * (tb + 1) + t < j->n_tokens; t++)
                __builtin_prefetch(yb + (TB + t) * j->n_out, 1);
        if (j->lv >= KILN_SIMD_AVX512) block_avx512(j->P, Xb, nk, n_tok, yb, j->n_out, nr, k0 == 0);
        else block_avx2(j->P, Xb, nk, n_tok, yb, j->n_out, nr, k0 == 0);
    }
#endif
}

int kiln_fgemm(kiln_rows_f32_fn rows, const void *ctx, int64_t n_in, int64_t n_out,
               const float *x, int64_t n_tokens, float *y) {
    const kiln_simd_level lv = kiln_simd();
    const int64_t nth = omp_get_max_threads();
    if (lv == KILN_SIMD_SCALAR) {
        float *rowbuf = kiln_kernel_alloc((size_t)(nth * n_in) * sizeof(float));
        if (!rowbuf) return -1;
        fgemm_scalar(rows, ctx, n_in, n_out, x, n_tokens, y, rowbuf);
        free(rowbuf);
        return 0;
    }
    /* One token cannot fill the registers and each chain is serial, so
     * four panels run side by side instead. */
    const int G = n_tokens == 1 && lv >= KILN_SIMD_AVX512 ? 4 : 1;
    /* the packed tokens, then each thread's W x KC rows and G panels */
    const int64_t ntb = (n_tokens + TB - 1) / TB, x_floats = lines16(ntb * n_in * TB);
    const int64_t thread_floats = (int64_t)W * KC * (1 + G);
    float *X = kiln_kernel_alloc((size_t)(x_floats + nth * thread_floats) * sizeof(float));
    if (!X) return -1;
    /* Many tokens: k blocks outermost, so that the activations of one
     * block (n_tokens x KC floats) stay in L2 while every panel of the
     * thread passes over them. Few tokens: each panel's rows are read
     * start to end, which is what the memory prefetchers want. */
    const bool k_outer = ntb * TB * KC * sizeof(float) > 64 * 1024;
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t tb = 0; tb < ntb; tb++) pack_tokens(x, n_in, n_tokens, tb, X + tb * n_in * TB);

        const int64_t np = (n_out + W - 1) / W;
        const int team = omp_get_num_threads(), me = omp_get_thread_num();
        const int64_t p0 = np * me / team, p1 = np * (me + 1) / team;
        float *mine = X + x_floats + me * thread_floats;
        fjob j = {rows, ctx, n_in, n_out, n_tokens, ntb, X, y, lv, G, mine, mine + W * KC};
        if (k_outer) {
            for (int64_t k0 = 0; k0 < n_in; k0 += KC)
                for (int64_t p = p0; p < p1; p += j.G) fstep(&j, p, p1, k0);
        } else {
            for (int64_t p = p0; p < p1; p += j.G)
                for (int64_t k0 = 0; k0 < n_in; k0 += KC) fstep(&j, p, p1, k0);
        }
    }
    free(X);
    return 0;
}

/* ---- F32 / F16 / BF16 weights in KILN_NUM_GGML mode: ggml's orders ---- */

/* The tree of gcc's _mm512_reduce_add_ps: 256-bit halves (l + l+8), then
 * 128-bit halves, then lanes 0+2 and 1+3, then those two. */
static float reduce16(const float v[16]) {
    float h[8], q[4];
    for (int i = 0; i < 8; i++) h[i] = v[i] + v[i + 8];
    for (int i = 0; i < 4; i++) q[i] = h[i] + h[i + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
}

/* ggml_vec_dot_f32 / _f16's main loop: four 16-lane chains over blocks of
 * 64, combined (a0+a2) + (a1+a3), reduced; covers n & ~63. */
static float vec4x16(const float *w, const float *x, int64_t np) {
    float acc[4][16] = {{0}}, v[16];
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) acc[j][l] = fmaf(w[i + 16 * j + l], x[i + 16 * j + l], acc[j][l]);
    for (int l = 0; l < 16; l++) v[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    return reduce16(v);
}

/* ggml_vec_dot_f32 (AVX-512): four 16-lane accumulators over 64 values a
 * step, combined (a0+a2) + (a1+a3), reduce16's tree, then the n % 64
 * leftovers in the order gcc compiled ggml's s += w * x to
 * (kiln_vec_dot_f32_tail: rounded products, the last n % 8 fused). */
static float vec_f32_ref(const float *w, const float *x, int64_t n) {
    const int64_t np = n & ~(int64_t)63;
    return kiln_vec_dot_f32_tail(vec4x16(w, x, np), w, x, np, n);
}

/* ggml_vec_dot_f16 (values already widened): the same blocks, the sum
 * kept in double and the leftover products added to it. */
static float vec_f16_ref(const float *w, const float *x, int64_t n) {
    const int64_t np = n & ~(int64_t)63;
    double s = vec4x16(w, x, np);
    for (int64_t i = np; i < n; i++) s += (double)(w[i] * x[i]);
    return (float)s;
}

/* ggml_vec_dot_bf16 on AVX-512F without AVX512_BF16 (widened values): two
 * 16-lane accumulators over blocks of 32 (exact products, so ggml's
 * mul + add equals a fused one), each reduced and added to a double, then
 * the leftovers in double. */
static float vec_bf16_ref(const float *w, const float *x, int64_t n) {
    float c[2][16] = {{0}};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 2; j++)
            for (int l = 0; l < 16; l++) c[j][l] = fmaf(w[i + 16 * j + l], x[i + 16 * j + l], c[j][l]);
    double s = 0.0;
    s += (double)reduce16(c[0]);
    s += (double)reduce16(c[1]);
    for (; i < n; i++) s += (double)(w[i] * x[i]);
    return (float)s;
}

/* llamafile's tinyBLAS (ggml's choice for two tokens or more when
 * n % 16 == 0): 16 lanes, acc[l] = fmaf(w[k], x[k], acc[l]) for
 * k = l mod 16, then reduce16. */
static float tiny_ref(const float *w, const float *x, int64_t n) {
    float acc[16] = {0};
    for (int64_t k = 0; k < n; k += 16)
        for (int l = 0; l < 16; l++) acc[l] = fmaf(w[k + l], x[k + l], acc[l]);
    return reduce16(acc);
}

static float vec_ref(uint32_t type, const float *w, const float *x, int64_t n) {
    return type == KILN_F16 ? vec_f16_ref(w, x, n) : type == KILN_BF16 ? vec_bf16_ref(w, x, n)
                                                                       : vec_f32_ref(w, x, n);
}

/* One row of weights against one token in a ggml_vec_dot order. */
typedef float (*rowdot_fn)(const void *w, const float *x, int64_t n);

#define VB_ROWS 16 /* rows per block of the vec kernels */
#define VB_TOK 16  /* tokens per pass over a block */

/* The vec kernels' loops, inside the caller's region: blocks of VB_ROWS
 * rows on a dynamic schedule (one token streams the weights, and a
 * thread the OS holds back leaves its blocks to the others), each block
 * against VB_TOK tokens at a time, so that the block's rows and the
 * tokens' activations stay in L2 when many tokens take this path (row
 * counts tinyBLAS declines, such as qwen2's 1027-row output). Inlined
 * with a constant `dot`, so that the row dot inlines too: an indirect
 * call per (row, token) cost a fifth of small models' time. */
INLINE void vec_rows(rowdot_fn dot, const uint8_t *w, int64_t row_bytes, const float *x, int64_t n, int64_t n_out,
                     int64_t n_tokens, float *y) {
    const int64_t nrb = (n_out + VB_ROWS - 1) / VB_ROWS;
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t b = 0; b < nrb; b++) {
        const int64_t r0 = b * VB_ROWS, r1 = n_out - r0 < VB_ROWS ? n_out : r0 + VB_ROWS;
        for (int64_t t0 = 0; t0 < n_tokens; t0 += VB_TOK) {
            const int64_t t1 = n_tokens - t0 < VB_TOK ? n_tokens : t0 + VB_TOK;
            for (int64_t r = r0; r < r1; r++)
                for (int64_t t = t0; t < t1; t++) y[t * n_out + r] = dot(w + r * row_bytes, x + t * n, n);
        }
    }
}

#ifdef __x86_64__
/* reduce16 on (lanes 0-7, lanes 8-15): lo + hi is the tree's first level,
 * then 128-bit halves, then (0+2) + (1+3). The AVX-512 kernels hand it
 * their zmm's halves; the AVX2 ones hold each 16-lane chain as the pair. */
AVX2 static inline float reduce16_avx2(__m256 lo, __m256 hi) {
    const __m256 h = _mm256_add_ps(lo, hi);
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 p = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

AVX512 static inline float reduce16_avx512(__m512 v) {
    return reduce16_avx2(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
}

/* tinyBLAS's order on AVX-512, cache-blocked. Each output is one zmm
 * chain over k in steps of 16, reduced by reduce16's tree; which tile
 * holds it and when the tile runs change no bit, nor does stopping the
 * chain at the end of a k chunk and picking it up again from memory.
 * So, as llamafile's 4 x 6 tiles (32 registers), a tile here is 4 rows x
 * up to 6 tokens, and the work is blocked for the caches:
 *   - a thread takes a block of T5_ROWS(n) rows at a time (dynamic
 *     schedule: a thread the OS holds back does not hold the product
 *     back), widens it once to f32 into its scratch at a stride that
 *     keeps the rows apart in L1's sets (tiny_ldw), and keeps it in L2
 *     while every token of the batch passes;
 *   - the tokens pass 6 at a time, k in chunks of T5_KB: the chunk of
 *     the 6 activation rows (48 KiB at most) stays near the core (L1 and
 *     L2) while every 4-row tile of the block runs over it; the tiles'
 *     16-lane partial sums wait in the thread's scratch between chunks.
 *     A chunk covers a whole 2048-value row: the 1B model's products
 *     then never park their sums, whose stores and reloads cost 5% at
 *     512 (the inner loop itself runs at the FMA ports' peak).
 * The activations of F16 / BF16 weights come in their 16-bit values
 * (kiln_fggml_tiny16_avx512; ggml rounds them to the weight's type
 * anyway) and are widened as a tile loads them, which is exact: half the
 * bytes to bring from L3 for every block of rows. The 1B model's
 * 8192-wide ffn_down (8-row blocks, so 16 MB of activations per 8 rows)
 * went from 81 to 103-106 GFLOP/s on one thread that way, the other
 * products stayed at 106-108 (the widening runs beside the FMAs). */
#define T5_TOK 6   /* tokens per tile */
#define T5_KB 2048 /* k per chunk */

/* Row stride of widened rows: n rounded so that it is 1 KiB past a
 * multiple of 4 KiB. A 256-float chunk of a row is 16 cache lines, so
 * four rows fill L1's 64 sets side by side; with a stride of 4 KiB
 * multiples (n = 2048, 8192) they would pile up in the same 16 sets and
 * evict each other. Shared with the AVX2 kernel below. */
static int64_t tiny_ldw(int64_t n) {
    return n + (256 - n % 1024 + 1024) % 1024;
}

/* Rows of a block: at most 384 KiB of widened rows, whole 4-row tiles,
 * 4 to 64. */
static int64_t t5_rows(int64_t n) {
    int64_t r = 384 * 1024 / (tiny_ldw(n) * (int64_t)sizeof(float)) / 4 * 4;
    return r < 4 ? 4 : r > 64 ? 64 : r;
}

int64_t kiln_fggml_tiny_avx512_scratch(uint32_t type, int64_t n) {
    return t5_rows(n) * tiny_ldw(n) + t5_rows(n) * T5_TOK * 16;
}

/* One tile for k in [k0, k0 + nk): rows wf + i * ldw (i < 4) against
 * tokens j < TN, whose values are x[j * n + k] of type xtype (F32, or
 * the 16-bit F16 / BF16 values, widened here), chains continued from
 * part[(i * T5_TOK + j) * 16] (first: from zero) and left there, or
 * (last) reduced into y[j * n_out + i]. */
AVX512 INLINE void t5_tile(const float *wf, int64_t ldw, uint32_t xtype, const void *x, int64_t n, int64_t k0,
                           int64_t nk, int TN, float *part, bool first, bool last, float *y, int64_t n_out) {
    __m512 acc[4][T5_TOK];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 6
        for (int j = 0; j < TN; j++)
            acc[i][j] = first ? _mm512_setzero_ps() : _mm512_load_ps(part + (i * T5_TOK + j) * 16);
    for (int64_t k = k0; k < k0 + nk; k += 16) {
        __m512 a[4];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) a[i] = _mm512_load_ps(wf + i * ldw + k);
#pragma GCC unroll 6
        for (int j = 0; j < TN; j++) {
            const __m512 b = kiln_fwiden16(xtype, x, j * n + k);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) acc[i][j] = _mm512_fmadd_ps(a[i], b, acc[i][j]);
        }
    }
    if (last) {
#pragma GCC unroll 6
        for (int j = 0; j < TN; j++)
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) y[j * n_out + i] = reduce16_avx512(acc[i][j]);
        return;
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
#pragma GCC unroll 6
        for (int j = 0; j < TN; j++) _mm512_store_ps(part + (i * T5_TOK + j) * 16, acc[i][j]);
}

/* Rows [r0, r0 + nr) (whole tiles), widened at wf (stride ldw), against
 * every token (x of xtype, as t5_tile). */
AVX512 INLINE void t5_block(const float *wf, int64_t ldw, uint32_t xtype, const void *x, int64_t n, int64_t n_tokens,
                            int64_t r0, int64_t nr, float *part, float *y, int64_t n_out) {
    const int64_t x_bytes = xtype == KILN_F32 ? 4 : 2;
    for (int64_t t0 = 0; t0 < n_tokens; t0 += T5_TOK) {
        const int TN = n_tokens - t0 < T5_TOK ? (int)(n_tokens - t0) : T5_TOK;
        const void *xt = (const uint8_t *)x + t0 * n * x_bytes;
        float *yt = y + t0 * n_out + r0;
        for (int64_t k0 = 0; k0 < n; k0 += T5_KB) {
            const int64_t nk = n - k0 < T5_KB ? n - k0 : T5_KB;
            const bool first = k0 == 0, last = k0 + nk == n;
            for (int64_t i = 0; i < nr; i += 4) {
                const float *wi = wf + i * ldw;
                float *pi = part + i * T5_TOK * 16;
                /* one instance per token count, so that the tile unrolls */
                switch (TN) {
                case 6: t5_tile(wi, ldw, xtype, xt, n, k0, nk, 6, pi, first, last, yt + i, n_out); break;
                case 5: t5_tile(wi, ldw, xtype, xt, n, k0, nk, 5, pi, first, last, yt + i, n_out); break;
                case 4: t5_tile(wi, ldw, xtype, xt, n, k0, nk, 4, pi, first, last, yt + i, n_out); break;
                case 3: t5_tile(wi, ldw, xtype, xt, n, k0, nk, 3, pi, first, last, yt + i, n_out); break;
                case 2: t5_tile(wi, ldw, xtype, xt, n, k0, nk, 2, pi, first, last, yt + i, n_out); break;
                default: t5_tile(wi, ldw, xtype, xt, n, k0, nk, 1, pi, first, last, yt + i, n_out); break;
                }
            }
        }
    }
}

/* One instance of t5_block per activation type, so that its loads fold. */
AVX512 static void t5_block_f32(const float *wf, int64_t ldw, const void *x, int64_t n, int64_t n_tokens, int64_t r0,
                                int64_t nr, float *part, float *y, int64_t n_out) {
    t5_block(wf, ldw, KILN_F32, x, n, n_tokens, r0, nr, part, y, n_out);
}
AVX512 static void t5_block_f16(const float *wf, int64_t ldw, const void *x, int64_t n, int64_t n_tokens, int64_t r0,
                                int64_t nr, float *part, float *y, int64_t n_out) {
    t5_block(wf, ldw, KILN_F16, x, n, n_tokens, r0, nr, part, y, n_out);
}
AVX512 static void t5_block_bf16(const float *wf, int64_t ldw, const void *x, int64_t n, int64_t n_tokens, int64_t r0,
                                 int64_t nr, float *part, float *y, int64_t n_out) {
    t5_block(wf, ldw, KILN_BF16, x, n, n_tokens, r0, nr, part, y, n_out);
}

/* tinyBLAS's order for n_out % 4 == 0, n % 16 == 0 (see above), the
 * activations x of xtype. */
AVX512 static void tiny_avx512(uint32_t type, const uint8_t *w, int64_t row_bytes, uint32_t xtype, const void *x,
                               int64_t n, int64_t n_out, int64_t n_tokens, float *y, float *scratch) {
    const int64_t ldw = tiny_ldw(n);
    /* at least 4 blocks a thread where the rows allow, for the dynamic
     * schedule to even out */
    const int64_t fair = n_out / (4 * omp_get_num_threads()) / 4 * 4;
    int64_t rb = t5_rows(n);
    if (rb > fair) rb = fair < 4 ? 4 : fair;
    const int64_t nrb = (n_out + rb - 1) / rb;
    float *wide = scratch, *part = scratch + t5_rows(n) * ldw;
    void (*block)(const float *, int64_t, const void *, int64_t, int64_t, int64_t, int64_t, float *, float *,
                  int64_t) = xtype == KILN_F16 ? t5_block_f16 : xtype == KILN_BF16 ? t5_block_bf16 : t5_block_f32;
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t b = 0; b < nrb; b++) {
        const int64_t r0 = b * rb, nr = n_out - r0 < rb ? n_out - r0 : rb;
        for (int64_t i = 0; i < nr; i++) {
            const uint8_t *wr = w + (r0 + i) * row_bytes;
            float *dst = wide + i * ldw;
            if (type == KILN_F16)
                for (int64_t k = 0; k < n; k += 16) _mm512_store_ps(dst + k, kiln_fwiden16(KILN_F16, wr, k));
            else if (type == KILN_BF16)
                for (int64_t k = 0; k < n; k += 16) _mm512_store_ps(dst + k, kiln_fwiden16(KILN_BF16, wr, k));
            else
                memcpy(dst, wr, (size_t)n * sizeof(float));
        }
        block(wide, ldw, x, n, n_tokens, r0, nr, part, y, n_out);
    }
}

AVX512 void kiln_fggml_tiny_avx512(uint32_t type, const uint8_t *w, int64_t row_bytes, const float *x, int64_t n,
                                  int64_t n_out, int64_t n_tokens, float *y, float *scratch) {
    tiny_avx512(type, w, row_bytes, KILN_F32, x, n, n_out, n_tokens, y, scratch);
}

AVX512 void kiln_fggml_tiny16_avx512(uint32_t type, const uint8_t *w, int64_t row_bytes, const uint16_t *x, int64_t n,
                                    int64_t n_out, int64_t n_tokens, float *y, float *scratch) {
    tiny_avx512(type, w, row_bytes, type, x, n, n_out, n_tokens, y, scratch);
}

/* One token (decode): row blocks per thread (each at least VB_ROWS rows):
 * few and long, so that each thread reads long runs of consecutive rows
 * and pays for few scheduling steps, but more than one, so that the
 * dynamic schedule can still even out a thread the OS holds back.
 * Measured tg32 (t/s, in turns): the 1B F16 model, streamed, with blocks
 * of 16 rows 13.6, of 64 15.1, of 256 16.1; 1, 2, 8 blocks a thread
 * 16.4, 16.3, 16.6; llama-f32 (cached, 256 rows) 8261, 7902, 7243;
 * mixtral-f32 6754, 6821, 6059. */
#define DEC_BLOCKS 2
/* One token: matrices of more bytes than this (one core's L2) are taken
 * to come from memory rather than cache, and vecdot_frows.c streams them
 * row by row. The fixtures' models (3-18 MB in all, in L3) have none;
 * the 1B model's smallest, attn_k and attn_v, have 2 MiB. */
#define DEC_CACHED_BYTES ((int64_t)1 << 20)

/* ggml_vec_dot_<type> for every (row, token): one token (decode), experts,
 * shapes tinyBLAS declines. Blocks of rows on a dynamic schedule, each
 * run token by token through vecdot_frows.c, which sums several rows at
 * once when they are cached and streams them one by one when not. Many
 * tokens keep VB_ROWS-row blocks, whose rows stay in L2 while the tokens
 * pass. */
void kiln_fggml_vec_avx512(uint32_t type, const uint8_t *w, int64_t row_bytes, const float *x, int64_t n,
                           int64_t n_out, int64_t n_tokens, float *y, float *scratch) {
    int64_t vb = VB_ROWS;
    bool streamed = false;
    if (n_tokens == 1) {
        vb = n_out / (DEC_BLOCKS * omp_get_num_threads()) / VB_ROWS * VB_ROWS;
        if (vb < VB_ROWS) vb = VB_ROWS;
        streamed = n_out * row_bytes > DEC_CACHED_BYTES;
    }
    const int64_t nrb = (n_out + vb - 1) / vb;
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t b = 0; b < nrb; b++) {
        const int64_t r0 = b * vb, nr = n_out - r0 < vb ? n_out - r0 : vb;
        for (int64_t t = 0; t < n_tokens; t++)
            kiln_frows_avx512(type, w + r0 * row_bytes, row_bytes, x + t * n, n, nr, streamed, y + t * n_out + r0);
    }
}

/* AVX2 (no AVX-512): the same orders. Each 16-lane accumulator of the
 * AVX-512 kernels above is a pair of ymm, lanes 0-7 and 8-15; every lane
 * runs the same fmaf chain over the same values, and the pair goes
 * through reduce16's tree, so the bits are those of the scalar level. */

/* 8 weights of a row of `type` at w (element index k), widened exactly. */
AVX2 INLINE __m256 wload8(uint32_t type, const void *w, int64_t k) {
    if (type == KILN_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + k)));
    if (type == KILN_BF16)
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + k))), 16));
    return _mm256_loadu_ps((const float *)w + k);
}

/* The leftovers of ggml_vec_dot_* past its blocks, elements [i, n), onto
 * the blocks' sum s: F16 / BF16 products added in double, F32 onto the
 * float sum as kiln_vec_dot_f32_tail says (s is then a float, so the
 * round trip is exact). */
static inline float vec_tail(uint32_t type, const void *w, const float *x, int64_t i, int64_t n, double s) {
    if (type == KILN_F32) return kiln_vec_dot_f32_tail((float)s, (const float *)w, x, i, n);
    const uint16_t *h = w;
    for (; i < n; i++) s += (double)((type == KILN_F16 ? kiln_fp16_to_fp32(h[i]) : kiln_bf16_to_fp32(h[i])) * x[i]);
    return (float)s;
}

/* ggml_vec_dot_f32 / _f16 / _bf16's orders (vec_ref) with ymm pairs:
 * a[2 * j] and a[2 * j + 1] are the halves of 16-lane accumulator j. */
AVX2 INLINE float vec_avx2(uint32_t type, const void *w, const float *x, int64_t n) {
    if (type == KILN_BF16) {
        __m256 c[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) c[j] = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 32 <= n; i += 32)
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                c[j] = _mm256_fmadd_ps(wload8(type, w, i + 8 * j), _mm256_loadu_ps(x + i + 8 * j), c[j]);
        double s = 0.0;
        s += (double)reduce16_avx2(c[0], c[1]);
        s += (double)reduce16_avx2(c[2], c[3]);
        return vec_tail(type, w, x, i, n, s);
    }
    __m256 a[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) a[j] = _mm256_setzero_ps();
    const int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64)
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            a[j] = _mm256_fmadd_ps(wload8(type, w, i + 8 * j), _mm256_loadu_ps(x + i + 8 * j), a[j]);
    /* (a0 + a2) + (a1 + a3), half by half */
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6]));
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7]));
    return vec_tail(type, w, x, np, n, reduce16_avx2(lo, hi));
}

/* One token (decode) or shapes tinyBLAS declines: vec_rows' blocks, as
 * kiln_fggml_vec_avx512. */
AVX2 static float vec256_f16(const void *w, const float *x, int64_t n) {
    return vec_avx2(KILN_F16, w, x, n);
}
AVX2 static float vec256_bf16(const void *w, const float *x, int64_t n) {
    return vec_avx2(KILN_BF16, w, x, n);
}
AVX2 static float vec256_f32(const void *w, const float *x, int64_t n) {
    return vec_avx2(KILN_F32, w, x, n);
}

AVX2 void kiln_fggml_vec_avx2(uint32_t type, const uint8_t *w, int64_t row_bytes, const float *x, int64_t n,
                              int64_t n_out, int64_t n_tokens, float *y, float *scratch) {
    if (type == KILN_F16) vec_rows(vec256_f16, w, row_bytes, x, n, n_out, n_tokens, y);
    else if (type == KILN_BF16) vec_rows(vec256_bf16, w, row_bytes, x, n, n_out, n_tokens, y);
    else vec_rows(vec256_f32, w, row_bytes, x, n, n_out, n_tokens, y);
}

/* tinyBLAS's order, AVX2 blocking. The 16 lanes of an output are 16
 * independent chains, so lanes 0-7 and 8-15 can run one after the other:
 * a tile of 4 rows x 3 tokens then needs 12 accumulators, not 24, and
 * with three activation vectors and one weight vector fits the 16 ymm
 * (7 loads for 12 FMAs). Both halves read the same cache lines, and a
 * tile reuses a weight for 3 tokens only, so k is cut into TQ_KB chunks:
 * the chunk of a block of TQ_ROWS rows (16 KiB) stays in L1 while a block
 * of TQ_TOK tokens passes, and the partial sums wait in a per-thread
 * buffer (TQ_TOK x TQ_ROWS x 16 floats), which changes no bit: each
 * lane's chain just continues. */
#define TQ_KB 256
#define TQ_ROWS 16
#define TQ_TOK 48

/* Rows wf + i * ldw (i < 4) x tokens x + j * n (j < TN <= 3), k in
 * [k0, k0 + nk): part[i * 3 + j][16] in, partial sums out. */
AVX2 INLINE void tiny_tile_avx2(const float *wf, int64_t ldw, const float *x, int64_t n, int64_t k0, int64_t nk,
                                int TN, float *part) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256 acc[4][3];
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
#pragma GCC unroll 3
            for (int j = 0; j < TN; j++) acc[i][j] = _mm256_load_ps(part + (i * 3 + j) * 16 + 8 * h);
        for (int64_t k = k0 + 8 * h; k < k0 + nk; k += 16) {
            __m256 xv[3];
#pragma GCC unroll 3
            for (int j = 0; j < TN; j++) xv[j] = _mm256_loadu_ps(x + j * n + k);
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                const __m256 wv = _mm256_loadu_ps(wf + i * ldw + k);
#pragma GCC unroll 3
                for (int j = 0; j < TN; j++) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++)
#pragma GCC unroll 3
            for (int j = 0; j < TN; j++) _mm256_store_ps(part + (i * 3 + j) * 16 + 8 * h, acc[i][j]);
    }
}

/* tiny_avx2's widened rows take tiny_ldw's stride (above): a TQ_KB
 * chunk of a row is 16 cache lines, and the 16 rows of a block take 4
 * ways of each L1 set. */

/* Rows widened at a time by tiny_avx2: up to 512 KiB of them, so that
 * they and a token block fit L2 together; whole TQ_ROWS sub-blocks. */
static int64_t tiny_big_rows(int64_t n) {
    int64_t r = 128 * 1024 / tiny_ldw(n) / TQ_ROWS * TQ_ROWS;
    return r < TQ_ROWS ? TQ_ROWS : r > 64 ? 64 : r;
}

/* Floats of kiln_fggml_tiny_avx2's scratch per thread: the widened rows,
 * then the partial sums of one sub-block. */
int64_t kiln_fggml_tiny_avx2_scratch(uint32_t type, int64_t n) {
    return tiny_big_rows(n) * tiny_ldw(n) + TQ_TOK * TQ_ROWS * 16;
}

/* tinyBLAS's order for n_out % 4 == 0, n % 16 == 0. Unlike the AVX-512
 * version, which converts F16 / BF16 inside its tiles, each thread widens
 * (F32: copies) a block of tiny_big_rows rows once, at the stride
 * tiny_ldw, into its scratch, and runs every token against it: a block of
 * tokens at a time (their activations stay in L2 while every TQ_ROWS
 * sub-block of the rows passes over them), for a sub-block k chunk by k
 * chunk. */
AVX2 void kiln_fggml_tiny_avx2(uint32_t type, const uint8_t *w, int64_t row_bytes, const float *x, int64_t n,
                               int64_t n_out, int64_t n_tokens, float *y, float *scratch) {
    const int64_t big = tiny_big_rows(n), nrb = (n_out + big - 1) / big, ldw = tiny_ldw(n);
    /* tokens per block: their activations take <= 192 KiB of L2 */
    int64_t tok = 48 * 1024 / n / 3 * 3;
    tok = tok < 3 ? 3 : tok > TQ_TOK ? TQ_TOK : tok;
    float *wide = scratch, *part = wide + big * ldw;
#pragma omp for schedule(dynamic, 1) nowait
    for (int64_t b = 0; b < nrb; b++) {
        /* n_out % 4 == 0: every block is whole tiles */
        const int64_t r0 = b * big, nr = n_out - r0 < big ? n_out - r0 : big;
        for (int64_t i = 0; i < nr; i++) {
            const uint8_t *wr = w + (r0 + i) * row_bytes;
            float *dst = wide + i * ldw;
            if (type == KILN_F16)
                for (int64_t k = 0; k < n; k += 8) _mm256_store_ps(dst + k, wload8(KILN_F16, wr, k));
            else if (type == KILN_BF16)
                for (int64_t k = 0; k < n; k += 8) _mm256_store_ps(dst + k, wload8(KILN_BF16, wr, k));
            else
                memcpy(dst, wr, (size_t)n * sizeof(float));
        }
        for (int64_t tb = 0; tb < n_tokens; tb += tok) {
            const int64_t nt = n_tokens - tb < tok ? n_tokens - tb : tok;
            for (int64_t s0 = 0; s0 < nr; s0 += TQ_ROWS) {
                const int64_t ns = nr - s0 < TQ_ROWS ? nr - s0 : TQ_ROWS;
                const float *ws = wide + s0 * ldw;
                memset(part, 0, (size_t)((nt + 2) / 3 * 3 * TQ_ROWS * 16) * sizeof(float));
                for (int64_t k0 = 0; k0 < n; k0 += TQ_KB) {
                    const int64_t nk = n - k0 < TQ_KB ? n - k0 : TQ_KB;
                    for (int64_t t = 0; t < nt; t += 3) {
                        const int TN = nt - t < 3 ? (int)(nt - t) : 3;
                        const float *xt = x + (tb + t) * n;
                        float *pt = part + t * TQ_ROWS * 16; /* tiles of 4 rows: 4 * 3 * 16 floats */
                        for (int64_t i = 0; i < ns; i += 4) {
                            float *p = pt + i * 48;
                            if (TN == 3) tiny_tile_avx2(ws + i * ldw, ldw, xt, n, k0, nk, 3, p);
                            else if (TN == 2) tiny_tile_avx2(ws + i * ldw, ldw, xt, n, k0, nk, 2, p);
                            else tiny_tile_avx2(ws + i * ldw, ldw, xt, n, k0, nk, 1, p);
                        }
                    }
                }
                for (int64_t t = 0; t < nt; t++)
                    for (int64_t i = 0; i < ns; i++) {
                        const float *p = part + (t / 3 * 3 * TQ_ROWS + i / 4 * 12 + i % 4 * 3 + t % 3) * 16;
                        y[(tb + t) * n_out + r0 + s0 + i] = reduce16_avx2(_mm256_load_ps(p), _mm256_load_ps(p + 8));
                    }
            }
        }
    }
}

#endif

/* The scalar level: the reference functions, F16 / BF16 rows widened to
 * f32 first into this thread's scratch (n floats). */
static void ggml_rows_ref(uint32_t type, const uint8_t *w, int64_t row_bytes, const float *x, int64_t n,
                          int64_t n_out, int64_t n_tokens, float *y, bool tiny, float *row) {
#pragma omp for schedule(dynamic, 16) nowait
    for (int64_t r = 0; r < n_out; r++) {
        const float *wr = (const float *)(w + r * row_bytes);
        if (type != KILN_F32) {
            const uint16_t *h = (const uint16_t *)(w + r * row_bytes);
            for (int64_t k = 0; k < n; k++) row[k] = type == KILN_F16 ? kiln_fp16_to_fp32(h[k]) : kiln_bf16_to_fp32(h[k]);
            wr = row;
        }
        for (int64_t t = 0; t < n_tokens; t++)
            y[t * n_out + r] = tiny ? tiny_ref(wr, x + t * n, n) : vec_ref(type, wr, x + t * n, n);
    }
}

int64_t kiln_fggml_ref_scratch(uint32_t type, int64_t n) {
    return type == KILN_F32 ? 0 : n;
}

void kiln_fggml_vec_ref(uint32_t type, const uint8_t *w, int64_t row_bytes, const float *x, int64_t n, int64_t n_out,
                        int64_t n_tokens, float *y, float *scratch) {
    ggml_rows_ref(type, w, row_bytes, x, n, n_out, n_tokens, y, false, scratch);
}

void kiln_fggml_tiny_ref(uint32_t type, const uint8_t *w, int64_t row_bytes, const float *x, int64_t n,
                         int64_t n_out, int64_t n_tokens, float *y, float *scratch) {
    ggml_rows_ref(type, w, row_bytes, x, n, n_out, n_tokens, y, true, scratch);
}
