/* runtime/ops.c - norms, RoPE, softmax, activations and vector kernels of
 * the forward pass, written to perform ggml's float operations (see
 * ops.h for why). Where a comment says "as ggml", the precision or the
 * order of operations is the point and must not be "simplified". */
#include "ops.h"

#include "../core/cpu.h"
#include "../core/fp16.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>

void kiln_rms_norm(const float *x, const float *w, float *y, int64_t n, float eps) {
    /* as ggml: squares in float, summed in double, mean rounded to float */
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
}

void kiln_layer_norm(const float *x, const float *w, const float *b, float *y, int64_t n, float eps) {
    /* as ggml: the sum is rounded to float before the division */
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i];
    const float mean = (float)s / (float)n;
    double s2 = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const float d = x[i] - mean;
        y[i] = d;
        s2 += (double)(d * d);
    }
    const float var = (float)(s2 / (double)n);
    const float scale = 1.0f / sqrtf(var + eps);
    for (int64_t i = 0; i < n; i++) {
        float v = y[i] * scale;
        if (w) v = v * w[i];
        if (b) v = v + b[i];
        y[i] = v;
    }
}

void kiln_rope_angles(const kiln_rope *r, int64_t pos, float *cs) {
    /* as ggml: one powf for the ratio, then each angle is the previous one
     * times the ratio, in float (not pos * base^(-i/d) computed afresh) */
    const float theta_scale = powf(r->freq_base, -2.0f / (float)r->n_rot);
    float theta = (float)pos;
    for (int64_t i = 0; i < r->n_rot; i += 2) {
        const float ff = r->freq_factors ? r->freq_factors[i / 2] : 1.0f;
        const float t = r->freq_scale * (theta / ff);
        cs[i] = cosf(t);
        cs[i + 1] = sinf(t);
        theta *= theta_scale;
    }
}

void kiln_rope_head(const kiln_rope *r, const float *cs, float *x) {
    const int64_t half = r->n_rot / 2;
    for (int64_t i = 0; i < r->n_rot; i += 2) {
        const int64_t a = r->neox ? i / 2 : i, b = r->neox ? i / 2 + half : i + 1;
        const float c = cs[i], s = cs[i + 1], x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

void kiln_softmax(float *x, int64_t n, float scale) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        x[i] *= scale;
        if (x[i] > max) max = x[i];
    }
    if (max == -INFINITY) {
        /* nothing to attend to: exp(-inf - -inf) would be NaN */
        for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
        return;
    }
    /* as ggml: exponentials in float, their sum in double, one reciprocal */
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const float v = expf(x[i] - max);
        x[i] = v;
        sum += (double)v;
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

static inline float silu(float x) {
    return x / (1.0f + expf(-x));
}

void kiln_swiglu(const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = silu(g[i]) * u[i];
}

static float gelu_f32(float x) {
    const float k = 0.79788456080286535587989211986876f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * x * (1.0f + 0.044715f * x * x)));
}

/* ggml evaluates GELU by rounding the input to fp16 and reading a table of
 * fp16 results, built here once for all 65536 half values. */
static uint16_t g_gelu_table[1 << 16];
static pthread_once_t g_gelu_once = PTHREAD_ONCE_INIT;

static void gelu_table_init(void) {
    for (uint32_t h = 0; h < (1u << 16); h++)
        g_gelu_table[h] = kiln_fp32_to_fp16(gelu_f32(kiln_fp16_to_fp32((uint16_t)h)));
}

void kiln_gelu(const float *x, float *y, int64_t n, kiln_numeric_mode mode) {
    if (mode == KILN_NUM_EXACT) {
        for (int64_t i = 0; i < n; i++) {
            const double v = x[i];
            y[i] = (float)(0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
        }
        return;
    }
    if (pthread_once(&g_gelu_once, gelu_table_init) != 0) {
        /* cannot happen with a valid once-control; fall back to the formula */
        for (int64_t i = 0; i < n; i++) y[i] = gelu_f32(x[i]);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i];
        if (v <= -10.0f) y[i] = 0.0f;
        else if (v >= 10.0f) y[i] = v;
        else y[i] = kiln_fp16_to_fp32(g_gelu_table[kiln_fp32_to_fp16(v)]);
    }
}

float kiln_sigmoid(float x, kiln_numeric_mode mode) {
    if (mode == KILN_NUM_EXACT) return (float)(1.0 / (1.0 + exp(-(double)x)));
    if (x == 0.0f) return 0.5f; /* ggml's silu(0)/0 would be NaN */
    return silu(x) / x;
}

void kiln_vec_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

/* Four accumulators, as ggml's f32 dot product keeps, so long rows do not
 * lose precision to one running sum. */
__attribute__((target("avx512f"))) static float dot_avx512(const float *a, const float *b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    float r = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3)));
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float r = _mm_cvtss_f32(h);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

float kiln_vec_dot(const float *a, const float *b, int64_t n) {
    const kiln_simd_level lvl = kiln_simd();
    if (lvl >= KILN_SIMD_AVX512) return dot_avx512(a, b, n);
    if (lvl >= KILN_SIMD_AVX2) return dot_avx2(a, b, n);
    float s[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) s[j] += a[i + j] * b[i + j];
    float r = (s[0] + s[2]) + (s[1] + s[3]);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

__attribute__((target("avx512f"))) static void axpy_avx512(float *y, const float *x, float a, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

__attribute__((target("avx2,fma"))) static void axpy_avx2(float *y, const float *x, float a, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

void kiln_vec_axpy(float *y, const float *x, float a, int64_t n) {
    const kiln_simd_level lvl = kiln_simd();
    if (lvl >= KILN_SIMD_AVX512) axpy_avx512(y, x, a, n);
    else if (lvl >= KILN_SIMD_AVX2) axpy_avx2(y, x, a, n);
    else
        for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}
