/* runtime/attention_flash.c - KILN_ATTN_LLAMACPP: the attention of
 * llama.cpp's default CPU context, an F16 KV cache read by ggml's flash-
 * attention kernel, reproduced in ggml's order so that perplexity and
 * imatrix runs give llama-perplexity's and llama-imatrix's numbers.
 * attention.c calls kiln_attend_flash() in place of its softmax path.
 *
 * ggml's CPU flash attention (ggml_compute_forward_flash_attn_ext_f16,
 * read at unslothai/llama.cpp 02142bbc) has two kernels that matter here:
 *   - the tiled one, for batches of at least GGML_FA_TILE_Q = 64 queries
 *     with an f32 Q and head_dim a multiple of 16: Q stays f32, the f16
 *     cache is widened to f32, scores and the V product are small GEMMs
 *     (simd-gemm.h: every output one fused multiply-add chain in k
 *     order) over tiles of 64 cells, with an online softmax per tile;
 *   - the "one_chunk" one for smaller batches: Q rounded to f16, one
 *     cell at a time, an f16 V accumulator.
 * (A third, the split-KV decode path for one query over 512+ cells, sums
 * per thread of llama.cpp and is not reproduced: kiln uses one_chunk.)
 * kiln_attend_flash says which kernel runs when.
 * Which queries share a tile or a thread changes no bit in either: every
 * query row's numbers depend only on its own scores. */
#include "forward_impl.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "vecdot_simd.h"

/* GGML_FA_TILE_Q and GGML_FA_TILE_KV (ggml-cpu/common.h) */
#define FA_TILE 64

static inline float round_h(float x) { return kiln_fp16_to_fp32(kiln_fp32_to_fp16(x)); }

/* acc = f16(acc * a), element by element (ggml_vec_scale_f16). acc holds
 * f16 values as floats. */
__attribute__((target("avx512f"))) static void h_scale_avx512(float *acc, float a, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 y = _mm512_mul_ps(_mm512_loadu_ps(acc + i), va);
        _mm512_storeu_ps(acc + i, _mm512_cvtph_ps(_mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT)));
    }
    for (; i < n; i++) acc[i] = round_h(acc[i] * a);
}

__attribute__((target("avx2,f16c"))) static void h_scale_avx2(float *acc, float a, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 y = _mm256_mul_ps(_mm256_loadu_ps(acc + i), va);
        _mm256_storeu_ps(acc + i, _mm256_cvtph_ps(_mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT)));
    }
    for (; i < n; i++) acc[i] = round_h(acc[i] * a);
}

static void h_scale(float *acc, float a, int64_t n) {
    const kiln_simd_level lvl = kiln_simd();
    if (lvl >= KILN_SIMD_AVX512) h_scale_avx512(acc, a, n);
    else if (lvl >= KILN_SIMD_AVX2) h_scale_avx2(acc, a, n);
    else
        for (int64_t i = 0; i < n; i++) acc[i] = round_h(acc[i] * a);
}

/* acc = f16(fma(v, a, acc)), element by element (ggml_vec_mad_f16: one
 * fused multiply-add in f32, then rounded to f16). */
__attribute__((target("avx512f"))) static void h_mad_avx512(float *acc, const float *v, float a, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 y = _mm512_fmadd_ps(_mm512_loadu_ps(v + i), va, _mm512_loadu_ps(acc + i));
        _mm512_storeu_ps(acc + i, _mm512_cvtph_ps(_mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT)));
    }
    for (; i < n; i++) acc[i] = round_h(fmaf(v[i], a, acc[i]));
}

__attribute__((target("avx2,fma,f16c"))) static void h_mad_avx2(float *acc, const float *v, float a, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 y = _mm256_fmadd_ps(_mm256_loadu_ps(v + i), va, _mm256_loadu_ps(acc + i));
        _mm256_storeu_ps(acc + i, _mm256_cvtph_ps(_mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT)));
    }
    for (; i < n; i++) acc[i] = round_h(fmaf(v[i], a, acc[i]));
}

static void h_mad(float *acc, const float *v, float a, int64_t n) {
    const kiln_simd_level lvl = kiln_simd();
    if (lvl >= KILN_SIMD_AVX512) h_mad_avx512(acc, v, a, n);
    else if (lvl >= KILN_SIMD_AVX2) h_mad_avx2(acc, v, a, n);
    else
        for (int64_t i = 0; i < n; i++) acc[i] = round_h(fmaf(v[i], a, acc[i]));
}

/* gpt-oss's sink logit s of the head, after every cell, as ggml's kernels
 * add it: a new maximum rescales the (f32) accumulator and the sum by
 * expf(M - s), otherwise the sum takes expf(s - M). Both kernels write
 * the sum's update as `S = S*ms + vs`, C++ built with -march=native
 * that GCC contracts where it can (-ffp-contract=fast, its default
 * outside ISO mode) and kiln, built with contraction off, has to say
 * where: in the tiled kernel both branches meet at one fused
 * multiply-add; in one_chunk the new-maximum branch rescales the
 * accumulator between the product and the sum, so S*ms is rounded and 1
 * added (read in libggml-cpu.so's code at d32676d7). Only ms != 1 can
 * tell them apart. */
static void sink_step(float s, float *M, float *S, float *acc, int64_t hd, bool fused) {
    float ms = 1.0f, vs = 1.0f;
    if (s > *M) {
        ms = expf(*M - s);
        *M = s;
        for (int64_t d = 0; d < hd; d++) acc[d] *= ms;
    } else {
        vs = expf(s - *M);
    }
    *S = fused ? fmaf(*S, ms, vs) : *S * ms + vs;
}

void kiln_attn_sink_step(float s, float *M, float *S, float *acc, int64_t hd) { sink_step(s, M, S, acc, hd, false); }

void kiln_attn_sink_step_tiled(float s, float *M, float *S, float *acc, int64_t hd) {
    sink_step(s, M, S, acc, hd, true);
}

void kiln_attn_one_chunk_step(float s, const float *v, float *M, float *S, float *acc, int64_t hd) {
    float ms = 1.0f, vs = 1.0f;
    if (s > *M) {
        const float m_old = *M;
        *M = s;
        ms = expf(m_old - *M);
        h_scale(acc, ms, hd);
    } else {
        vs = expf(s - *M);
    }
    h_mad(acc, v, vs, hd);
    *S = fmaf(*S, ms, vs); /* both branches meet at ggml's one fused S*ms + vs (sink_step) */
}

static const float *layer_sinks(const kiln_ctx *c, int64_t il) {
    const kiln_tensor *t = c->m->layers[il].attn_sinks;
    return t ? (const float *)t->data : NULL;
}

/* ggml_compute_forward_flash_attn_ext_f16_one_chunk with F16 K and V (the
 * cache rows already hold f16 values, kiln_f16_round), per head and query:
 * the query is rounded to f16; for each visible cell j in order,
 * s = dot(q, k_j) summed as ggml_vec_dot_f16 on AVX-512 sums it (the
 * products of halves are exact in f32, so kiln_vec_dot's order is that
 * order), times 1/sqrt(head_dim); a new maximum M rescales the f16
 * accumulator by expf(M_old - M), otherwise the cell's weight is
 * expf(s - M); the accumulator takes v_j * weight in f16 and the running
 * sum S = fma(S, ms, vs); finally the output is the accumulator / S in f32.
 * Masked cells (beyond the query's position, or before a sliding
 * layer's window) are skipped, as ggml skips -INFINITY mask entries, so
 * batching does not change any bit. A soft-cap (gemma2) makes the score
 * cap * tanhf(dot * (scale / cap)), ggml's logit_softcap. */
static void attend_one_chunk(kiln_ctx *c, int64_t il, int64_t n) {
    const kiln_hparams *hp = &c->m->hp;
    const float *sinks = layer_sinks(c, il);
    const int64_t hd = hp->head_dim, nh = hp->n_head, n_q = hd * nh;
    const int64_t group = nh / hp->n_head_kv, n_past = c->n_past;
    const float cap = hp->attn_softcap, scale = kiln_attn_scale(hp) / (cap != 0.0f ? cap : 1.0f);
    const bool swa = kiln_layer_slides(hp, il);
    const kiln_kv_cache *kv = &c->kv;
    const double work = (double)n * (double)nh * (double)(n_past + n) * (double)hd;
#pragma omp parallel for schedule(dynamic, 1) num_threads(c->n_threads) if (work > 1e6)
    for (int64_t job = 0; job < n * nh; job++) {
        const int64_t t = job / nh, h = job % nh, off = (h / group) * hd;
        const int64_t n_att = n_past + t + 1;
        float *q16 = c->work + (int64_t)omp_get_thread_num() * c->work_stride, *acc = q16 + hd;
        float *o = c->att + t * n_q + h * hd;
        kiln_f16_round(c->q + t * n_q + h * hd, q16, hd);
        memset(acc, 0, (size_t)hd * sizeof *acc);
        float S = 0.0f, M = -INFINITY;
        for (int64_t j = swa ? kiln_window_start(hp, n_past + t) : 0; j < n_att; j++) {
            float s = kiln_vec_dot(q16, kiln_kv_k(kv, il, j) + off, hd);
            s = s * scale;
            if (cap != 0.0f) s = cap * tanhf(s);
            kiln_attn_one_chunk_step(s, kiln_kv_v(kv, il, j) + off, &M, &S, acc, hd);
        }
        if (sinks) kiln_attn_sink_step(sinks[h], &M, &S, acc, hd);
        const float inv = S == 0.0f ? 0.0f : 1.0f / S;
        for (int64_t d = 0; d < hd; d++) o[d] = acc[d] * inv;
    }
}


/* ---- the tiled kernel ---------------------------------------------------- */

/* C[i][j] += sum over k < K of A[i][k] * B[k][j] for i < M, j < N (N a
 * multiple of 16), each output one fused multiply-add chain in k order
 * starting from its value in C: the order of ggml's simd_gemm. */
KILN_AVX512 static inline __attribute__((always_inline)) void gemm_block_avx512(
    float *C, int64_t ldc, const float *A, int64_t lda, const float *B, int64_t ldb, int RM, int RN, int K) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < RM; i++)
#pragma GCC unroll 4
        for (int r = 0; r < RN; r++) acc[i][r] = _mm512_loadu_ps(C + i * ldc + 16 * r);
    for (int k = 0; k < K; k++) {
        __m512 b[4];
#pragma GCC unroll 4
        for (int r = 0; r < RN; r++) b[r] = _mm512_loadu_ps(B + k * ldb + 16 * r);
#pragma GCC unroll 4
        for (int i = 0; i < RM; i++) {
            const __m512 a = _mm512_set1_ps(A[i * lda + k]);
#pragma GCC unroll 4
            for (int r = 0; r < RN; r++) acc[i][r] = _mm512_fmadd_ps(b[r], a, acc[i][r]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < RM; i++)
#pragma GCC unroll 4
        for (int r = 0; r < RN; r++) _mm512_storeu_ps(C + i * ldc + 16 * r, acc[i][r]);
}

/* Four rows (RM constant in each instance) against all of N. */
KILN_AVX512 static inline __attribute__((always_inline)) void gemm_rows_avx512(
    float *C, int64_t ldc, const float *A, int64_t lda, const float *B, int64_t ldb, int RM, int K, int N) {
    int j = 0;
    for (; j + 64 <= N; j += 64) gemm_block_avx512(C + j, ldc, A, lda, B + j, ldb, RM, 4, K);
    for (; j < N; j += 16) gemm_block_avx512(C + j, ldc, A, lda, B + j, ldb, RM, 1, K);
}

KILN_AVX512 static void gemm_avx512(float *C, int64_t ldc, const float *A, int64_t lda, const float *B,
                                    int64_t ldb, int M, int K, int N) {
    int i = 0;
    for (; i + 4 <= M; i += 4) gemm_rows_avx512(C + i * ldc, ldc, A + i * lda, lda, B, ldb, 4, K, N);
    for (; i < M; i++) gemm_rows_avx512(C + i * ldc, ldc, A + i * lda, lda, B, ldb, 1, K, N);
}

/* The same chains, k outermost so that the compiler can vectorize over j
 * (AVX2 and the scalar level; identical bits). */
static inline __attribute__((always_inline)) void gemm_lanes(float *restrict C, int64_t ldc,
                                                             const float *restrict A, int64_t lda,
                                                             const float *restrict B, int64_t ldb, int M,
                                                             int K, int N) {
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            const float a = A[i * lda + k];
            for (int j = 0; j < N; j++) C[i * ldc + j] = fmaf(B[k * ldb + j], a, C[i * ldc + j]);
        }
}
__attribute__((target("avx2,fma"))) static void gemm_fma(float *C, int64_t ldc, const float *A, int64_t lda,
                                                       const float *B, int64_t ldb, int M, int K, int N) {
    gemm_lanes(C, ldc, A, lda, B, ldb, M, K, N);
}
static void gemm_generic(float *C, int64_t ldc, const float *A, int64_t lda, const float *B, int64_t ldb,
                         int M, int K, int N) {
    gemm_lanes(C, ldc, A, lda, B, ldb, M, K, N);
}

static void fa_gemm(float *C, int64_t ldc, const float *A, int64_t lda, const float *B, int64_t ldb, int M,
                    int K, int N) {
    const kiln_simd_level lvl = kiln_simd();
    if (lvl >= KILN_SIMD_AVX512) gemm_avx512(C, ldc, A, lda, B, ldb, M, K, N);
    else if (lvl >= KILN_SIMD_AVX2) gemm_fma(C, ldc, A, lda, B, ldb, M, K, N);
    else gemm_generic(C, ldc, A, lda, B, ldb, M, K, N);
}

/* kt[d][j] = k_j[d] for the nc <= FA_TILE cells from k (rows ldk apart),
 * zeros for j >= nc: a KV tile's keys, cells along the SIMD dimension. */
KILN_AVX512 static void transpose_keys_avx512(const float *k, int64_t ldk, int nc, int64_t hd, float *kt) {
    for (int64_t d0 = 0; d0 < hd; d0 += 16)
        for (int j0 = 0; j0 < FA_TILE; j0 += 16) {
            __m512 in[16], out[16];
            for (int j = 0; j < 16; j++)
                in[j] = j0 + j < nc ? _mm512_loadu_ps(k + (j0 + j) * ldk + d0) : _mm512_setzero_ps();
            kiln_transpose16(in, out);
#pragma GCC unroll 16
            for (int d = 0; d < 16; d++) _mm512_storeu_ps(kt + (d0 + d) * FA_TILE + j0, out[d]);
        }
}

static void transpose_keys(const float *k, int64_t ldk, int nc, int64_t hd, float *kt) {
    if (kiln_simd() >= KILN_SIMD_AVX512 && hd % 16 == 0) {
        transpose_keys_avx512(k, ldk, nc, hd, kt);
        return;
    }
    for (int64_t d = 0; d < hd; d++)
        for (int j = 0; j < FA_TILE; j++) kt[d * FA_TILE + j] = j < nc ? k[j * ldk + d] : 0.0f;
}

/* Per-thread scratch of the tiled kernel, carved from c->work. */
typedef struct fa_scratch {
    float *kt;  /* head_dim x FA_TILE: a key tile, transposed */
    float *kq;  /* FA_TILE x FA_TILE: scores, then softmax numerators */
    float *vkq; /* FA_TILE x head_dim: the output accumulators */
    float *m, *s; /* FA_TILE: running maximum and sum of each query */
} fa_scratch;

int64_t kiln_attend_flash_scratch(int64_t head_dim) {
    return 2 * FA_TILE * head_dim + FA_TILE * FA_TILE + 2 * FA_TILE;
}

/* Queries t0 .. t0 + nq - 1 (nq <= FA_TILE) of head h, as ggml's tiled
 * kernel computes one Q tile: for each tile of 64 cells, the scores
 * s = chain(q . k) * scale, -INFINITY where masked (causal) or past the
 * view; per query the tile maximum m, the running maximum M' = max(M, m)
 * and, when it grew, the accumulator and the sum S scaled by
 * expf(M - M'); the numerators exp(s - M') and their sum as
 * ggml_vec_soft_max_f32 (kiln_exp_sum), S = f32(S + sum); then
 * acc += numerators x V as one GEMM (a chain over the tile's cells).
 * Output acc / S. A tile every query of the Q tile masks entirely is
 * skipped, as ggml skips it; a query that masks a whole tile another
 * query sees leaves its numbers untouched (ggml adds zeros). */
static void tile_job(kiln_ctx *c, const fa_scratch *w, int64_t il, int64_t h, int64_t t0, int nq, int64_t n) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t hd = hp->head_dim, n_q = hd * hp->n_head, off = (h / (hp->n_head / hp->n_head_kv)) * hd;
    const int64_t n_past = c->n_past, n_kv = n_past + n;
    const float cap = hp->attn_softcap, scale = kiln_attn_scale(hp) / (cap != 0.0f ? cap : 1.0f);
    const bool swa = kiln_layer_slides(hp, il);
    const kiln_kv_cache *kv = &c->kv;
    const float *q = c->q + t0 * n_q + h * hd;
    memset(w->vkq, 0, (size_t)(nq * hd) * sizeof(float));
    for (int i = 0; i < nq; i++) {
        w->m[i] = -INFINITY;
        w->s[i] = 0.0f;
    }
    /* cells the tile's last query sees: [0, n_past + t0 + nq) */
    const int64_t seen = n_past + t0 + nq < n_kv ? n_past + t0 + nq : n_kv;
    for (int64_t c0 = 0; c0 < seen; c0 += FA_TILE) {
        const int nc = (int)(n_kv - c0 < FA_TILE ? n_kv - c0 : FA_TILE);
        transpose_keys(kiln_kv_k(kv, il, c0) + off, kv->row, nc, hd, w->kt);
        memset(w->kq, 0, (size_t)(nq * FA_TILE) * sizeof(float));
        fa_gemm(w->kq, FA_TILE, q, n_q, w->kt, FA_TILE, nq, (int)hd, FA_TILE);
        int n_used = 0; /* cells any query of the tile sees */
        for (int i = 0; i < nq; i++) {
            float *row = w->kq + i * FA_TILE;
            int64_t vis = n_past + t0 + i + 1 - c0; /* causal: cells up to its own */
            if (vis > nc) vis = nc;
            /* sliding: cells before the window are masked too */
            const int64_t lo = swa ? kiln_window_start(hp, n_past + t0 + i) - c0 : 0;
            if (vis <= 0 || lo >= vis) { /* all -INFINITY: ggml skips the query for this tile */
                memset(row, 0, FA_TILE * sizeof(float));
                continue;
            }
            if (vis > n_used) n_used = (int)vis;
            float tile_max = -INFINITY;
            for (int j = 0; j < FA_TILE; j++) {
                float s = row[j] * scale;
                if (cap != 0.0f) s = tanhf(s) * cap; /* ggml_vec_tanh_f32, ggml_vec_scale_f32 */
                row[j] = j < vis && j >= lo ? s : -INFINITY;
                if (row[j] > tile_max) tile_max = row[j];
            }
            const float m_new = fmaxf(w->m[i], tile_max);
            if (m_new > w->m[i]) {
                const float ms = expf(w->m[i] - m_new);
                float *acc = w->vkq + i * hd;
                for (int64_t d = 0; d < hd; d++) acc[d] *= ms;
                w->s[i] *= ms;
            }
            w->m[i] = m_new;
            w->s[i] = (float)((double)w->s[i] + kiln_exp_sum(row, FA_TILE, m_new));
        }
        /* numerators past n_used are zeros in every row: fused adds of
         * 0 * v leave the chains unchanged, so they are left out */
        fa_gemm(w->vkq, hd, w->kq, FA_TILE, kiln_kv_v(kv, il, c0) + off, kv->row, nq, n_used, (int)hd);
    }
    const float *sinks = layer_sinks(c, il);
    for (int i = 0; i < nq && sinks; i++) kiln_attn_sink_step_tiled(sinks[h], &w->m[i], &w->s[i], w->vkq + i * hd, hd);
    for (int i = 0; i < nq; i++) {
        const float inv = w->s[i] == 0.0f ? 0.0f : 1.0f / w->s[i];
        float *o = c->att + (t0 + i) * n_q + h * hd;
        const float *acc = w->vkq + i * hd;
        for (int64_t d = 0; d < hd; d++) o[d] = acc[d] * inv;
    }
}

static void attend_tiled(kiln_ctx *c, int64_t il, int64_t n) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t hd = hp->head_dim, nh = hp->n_head, n_tiles = (n + FA_TILE - 1) / FA_TILE;
#pragma omp parallel for schedule(dynamic, 1) num_threads(c->n_threads)
    for (int64_t job = 0; job < nh * n_tiles; job++) {
        const int64_t h = job / n_tiles, t0 = job % n_tiles * FA_TILE;
        float *base = c->work + (int64_t)omp_get_thread_num() * c->work_stride;
        const fa_scratch w = {base, base + FA_TILE * hd, base + FA_TILE * hd + FA_TILE * FA_TILE,
                              base + 2 * FA_TILE * hd + FA_TILE * FA_TILE,
                              base + 2 * FA_TILE * hd + FA_TILE * FA_TILE + FA_TILE};
        tile_job(c, &w, il, h, t0, (int)(n - t0 < FA_TILE ? n - t0 : FA_TILE), n);
    }
}

void kiln_attend_flash(kiln_ctx *c, int64_t il, int64_t n) {
    /* ggml's choice (q is f32, K and V both F16): tiled for 64+ queries
     * when head_dim is whole vectors of its AVX-512 build. The queries
     * that count are one sequence's in one ubatch: llama-imatrix's
     * parallel sequences each give a 512-token ubatch 512 / n_seq of
     * them (32 at -c 128, so one_chunk), which is why kiln imatrix asks
     * for KILN_ATTN_LLAMACPP_ONE_CHUNK below 64 (imatrix/run.c). */
    if (n >= FA_TILE && c->m->hp.head_dim % 16 == 0 && c->p.attention == KILN_ATTN_LLAMACPP)
        attend_tiled(c, il, n);
    else attend_one_chunk(c, il, n);
}
