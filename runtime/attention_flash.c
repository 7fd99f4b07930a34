/* runtime/attention_flash.c - KILN_ATTN_LLAMACPP: the attention of
 * llama.cpp's default CPU context, an F16 KV cache read by ggml's flash-
 * attention kernel, reproduced in ggml's order so that perplexity and
 * imatrix runs give llama-perplexity's and llama-imatrix's numbers.
 * attention.c calls kiln_attend_flash() in place of its softmax path. */
#include "forward_impl.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "../core/cpu.h"
#include "../core/fp16.h"

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

/* Per head and query, as ggml_compute_forward_flash_attn_ext_f16 does with
 * F16 K and V (the cache rows already hold f16 values, kiln_f16_round):
 * the query is rounded to f16; for each visible cell j in order,
 * s = dot(q, k_j) summed as ggml_vec_dot_f16 on AVX-512 sums it (the
 * products of halves are exact in f32, so kiln_vec_dot's order is that
 * order), times 1/sqrt(head_dim); a new maximum M rescales the f16
 * accumulator by expf(M_old - M), otherwise the cell's weight is
 * expf(s - M); the accumulator takes v_j * weight in f16 and the running
 * sum S = S * ms + vs; finally the output is the accumulator / S in f32.
 * Masked cells (beyond the query's position) are skipped, as ggml skips
 * -INFINITY mask entries, so batching does not change any bit. */
void kiln_attend_flash(kiln_ctx *c, int64_t il, int64_t n) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t hd = hp->head_dim, nh = hp->n_head, n_q = hd * nh;
    const int64_t group = nh / hp->n_head_kv, n_past = c->n_past;
    const float scale = 1.0f / sqrtf((float)hd);
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
        for (int64_t j = 0; j < n_att; j++) {
            float s = kiln_vec_dot(q16, kiln_kv_k(kv, il, j) + off, hd);
            s = s * scale;
            float ms = 1.0f, vs = 1.0f;
            if (s > M) {
                const float m_old = M;
                M = s;
                ms = expf(m_old - M);
                h_scale(acc, ms, hd);
            } else {
                vs = expf(s - M);
            }
            h_mad(acc, kiln_kv_v(kv, il, j) + off, vs, hd);
            S = S * ms + vs;
        }
        const float inv = S == 0.0f ? 0.0f : 1.0f / S;
        for (int64_t d = 0; d < hd; d++) o[d] = acc[d] * inv;
    }
}

