/* runtime/ops.c - norms, RoPE, softmax, activations and vector kernels of
 * the forward pass, performing ggml's float operations (see ops.h for why
 * and for which build of ggml). Where a comment says "as ggml", the
 * precision or the order of operations is the point and must not be
 * "simplified"; the Makefile's -ffp-contract=off keeps the compiler from
 * fusing anything not written as fmaf here. */
#include "ops.h"
#include "par.h"
#include "vecdot.h"

#include "../core/cpu.h"
#include "../core/fp16.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

/* ---- norms ------------------------------------------------------------- */

/* y[i] = (x[i] * scale) * w[i] (w set) or x[i] * scale for the whole 16s
 * of n; returns how many it did. */
__attribute__((target("avx512f"))) static int64_t rms_scale_avx512(const float *x, const float *w, float *y,
                                                                    int64_t n, float scale) {
    const __m512 vs = _mm512_set1_ps(scale);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vs);
        _mm512_storeu_ps(y + i, w ? _mm512_mul_ps(v, _mm512_loadu_ps(w + i)) : v);
    }
    return i;
}

/* y = x scaled by the RMS of its n values whose squares sum to `sum`,
 * times w (when set). */
static void rms_apply(const float *x, const float *w, float *y, int64_t n, double sum, float eps) {
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    /* two rounded products per value at every level: the same bits */
    int64_t i = kiln_simd() >= KILN_SIMD_AVX512 ? rms_scale_avx512(x, w, y, n, scale) : 0;
    if (w)
        for (; i < n; i++) y[i] = (x[i] * scale) * w[i];
    else
        for (; i < n; i++) y[i] = x[i] * scale;
}

void kiln_rms_norm(const float *x, const float *w, float *y, int64_t n, float eps) {
    /* as ggml: squares in float, summed in double, mean rounded to float */
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    rms_apply(x, w, y, n, sum, eps);
}

/* Rows [r, r + 4) of kiln_rms_norm_rows: four rows side by side; each
 * row's sum is still one chain in ggml's order, but four chains keep the
 * adder busy where one waits on its own latency. */
static void rms_norm4(const float *x, const float *w, float *y, int64_t r, int64_t n, float eps) {
    const float *x0 = x + r * n, *x1 = x0 + n, *x2 = x1 + n, *x3 = x2 + n;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    for (int64_t i = 0; i < n; i++) {
        s0 += (double)(x0[i] * x0[i]);
        s1 += (double)(x1[i] * x1[i]);
        s2 += (double)(x2[i] * x2[i]);
        s3 += (double)(x3[i] * x3[i]);
    }
    rms_apply(x0, w, y + r * n, n, s0, eps);
    rms_apply(x1, w, y + (r + 1) * n, n, s1, eps);
    rms_apply(x2, w, y + (r + 2) * n, n, s2, eps);
    rms_apply(x3, w, y + (r + 3) * n, n, s3, eps);
}

void kiln_rms_norm_rows(const float *x, const float *w, float *y, int64_t rows, int64_t n, float eps) {
    const int64_t groups = rows / 4;
    if (kiln_par_worth_floats((double)rows * (double)n)) {
        /* a batch: the groups shared by the team (par.h) */
#pragma omp parallel for schedule(static)
        for (int64_t g = 0; g < groups; g++) rms_norm4(x, w, y, 4 * g, n, eps);
    } else {
        for (int64_t g = 0; g < groups; g++) rms_norm4(x, w, y, 4 * g, n, eps);
    }
    for (int64_t r = 4 * groups; r < rows; r++) kiln_rms_norm(x + r * n, w, y + r * n, n, eps);
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

/* ---- RoPE -------------------------------------------------------------- */

void kiln_rope_angles(const kiln_rope *r, int64_t pos, float *cs) {
    if (r->mode == KILN_NUM_EXACT) {
        for (int64_t i = 0; i < r->n_rot; i += 2) {
            const double ff = r->freq_factors ? r->freq_factors[i / 2] : 1.0;
            const double e = (double)pos * pow(r->freq_base, -(double)i / (double)r->n_rot) / ff;
            double t = r->freq_scale * e, ms = r->attn_factor;
            if (r->ext_factor != 0.0f) t = kiln_yarn_angle_exact(r, e, i, &ms);
            cs[i] = (float)(cos(t) * ms);
            cs[i + 1] = (float)(sin(t) * ms);
        }
        return;
    }
    /* as ggml: one powf for the ratio, then each angle is the previous one
     * times the ratio, in float (not pos * base^(-i/d) computed afresh) */
    const float theta_scale = powf(r->freq_base, -2.0f / (float)r->n_rot);
    float theta = (float)pos;
    for (int64_t i = 0; i < r->n_rot; i += 2) {
        const float ff = r->freq_factors ? r->freq_factors[i / 2] : 1.0f;
        float t = r->freq_scale * (theta / ff), ms = r->attn_factor;
        if (r->ext_factor != 0.0f) t = kiln_yarn_angle(r, theta / ff, t, i, &ms);
        cs[i] = cosf(t) * ms; /* ggml: cosf(theta) * mscale */
        cs[i + 1] = sinf(t) * ms;
        theta *= theta_scale;
    }
}

/* GGML mode: gcc -O3 -march=native contracts ggml's x0*c - x1*s and
 * x0*s + x1*c into these two fused multiply-adds (checked against gcc 12,
 * the compiler of the golden build). */
static inline __attribute__((always_inline)) void rope_fused(const kiln_rope *r, const float *cs, float *x) {
    const int64_t half = r->n_rot / 2;
    for (int64_t i = 0; i < r->n_rot; i += 2) {
        const int64_t a = r->neox ? i / 2 : i, b = r->neox ? i / 2 + half : i + 1;
        const float c = cs[i], s = cs[i + 1], x0 = x[a], x1 = x[b];
        x[a] = fmaf(x0, c, -(x1 * s));
        x[b] = fmaf(x0, s, x1 * c);
    }
}
__attribute__((target("avx2,fma"))) static void rope_fma(const kiln_rope *r, const float *cs, float *x) {
    rope_fused(r, cs, x);
}
static void rope_generic(const kiln_rope *r, const float *cs, float *x) {
    rope_fused(r, cs, x);
}

void kiln_rope_head(const kiln_rope *r, const float *cs, float *x) {
    if (r->mode != KILN_NUM_EXACT) {
        if (kiln_simd() >= KILN_SIMD_AVX2) rope_fma(r, cs, x);
        else rope_generic(r, cs, x);
        return;
    }
    const int64_t half = r->n_rot / 2;
    for (int64_t i = 0; i < r->n_rot; i += 2) {
        const int64_t a = r->neox ? i / 2 : i, b = r->neox ? i / 2 + half : i + 1;
        const double c = cs[i], s = cs[i + 1], x0 = x[a], x1 = x[b];
        x[a] = (float)(x0 * c - x1 * s);
        x[b] = (float)(x0 * s + x1 * c);
    }
}

/* ---- exponentials ---------------------------------------------------------- */

/* ggml_v_expf of the AVX-512 build, one lane: exp(x) = 2^n * p(b) with
 * n = round(x / ln 2), b = x - n ln 2 in two steps, p a degree-5
 * polynomial; |n| > 192 gives 0 or infinity. Same bits as the vector code. */
static inline __attribute__((always_inline)) float vexp_lane(float x) {
    const float shift = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, shift);
    const float n = z - shift;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                         u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (n != n) return n; /* NaN in, NaN out */
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    /* j * 2^n rounded once, as vscalefps: scale in two exact-then-rounding
     * steps where 2^n itself is not a normal float */
    const int e = (int)n;
    if (e < -126) return (j * kiln_bits_f32((uint32_t)(e + 100 + 127) << 23)) * 0x1p-100f;
    if (e > 127) return (j * 0x1p127f) * kiln_bits_f32((uint32_t)(e - 127 + 127) << 23);
    return j * kiln_bits_f32((uint32_t)(e + 127) << 23);
}

/* The order of _mm512_reduce_add_ps (gcc 12): halves, quarters, then
 * (v0 + v2) + (v1 + v3). */
static inline float reduce16(const float *v) {
    float h8[8], h4[4];
    for (int i = 0; i < 8; i++) h8[i] = v[8 + i] + v[i];
    for (int i = 0; i < 4; i++) h4[i] = h8[4 + i] + h8[i];
    return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

__attribute__((target("avx512f"))) static inline __m512 vexp_avx512(__m512 x) {
    const __m512 shift = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shift);
    const __m512 n = _mm512_sub_ps(z, shift);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 hi = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)),
                                      u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f)));
    const __m512 j = _mm512_fmadd_ps(hi, u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    const __m512 res = _mm512_scalef_ps(j, n);
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
    if (!big) return res;
    const __mmask16 neg = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    const __m512 edge = _mm512_mask_blend_ps(neg, _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
    return _mm512_mask_blend_ps(big, res, edge);
}

/* x[0..16) = exp(x - max); returns their sum in reduce16's order. */
__attribute__((target("avx512f"))) static float exp16_avx512(float *x, float max) {
    const __m512 v = vexp_avx512(_mm512_sub_ps(_mm512_loadu_ps(x), _mm512_set1_ps(max)));
    _mm512_storeu_ps(x, v);
    return _mm512_reduce_add_ps(v);
}

/* The same with the scalar lane, instantiated with hardware FMA (AVX2
 * CPUs) and without (fmaf from libm): identical bits, different speed. */
static inline __attribute__((always_inline)) float exp16_lanes(float *x, float max) {
    for (int l = 0; l < 16; l++) x[l] = vexp_lane(x[l] - max);
    return reduce16(x);
}
__attribute__((target("avx2,fma"))) static float exp16_fma(float *x, float max) {
    return exp16_lanes(x, max);
}
static float exp16_generic(float *x, float max) {
    return exp16_lanes(x, max);
}

double kiln_exp_sum(float *x, int64_t n, float max) {
    /* as ggml_vec_soft_max_f32: blocks of 16 by the polynomial, each
     * block's sum added to a double; glibc's expf for the rest */
    const kiln_simd_level lvl = kiln_simd();
    float (*block)(float *, float) = lvl >= KILN_SIMD_AVX512 ? exp16_avx512
                                     : lvl >= KILN_SIMD_AVX2 ? exp16_fma
                                                             : exp16_generic;
    double sum = 0.0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) sum += (double)block(x + i, max);
    for (; i < n; i++) {
        const float v = expf(x[i] - max);
        x[i] = v;
        sum += (double)v;
    }
    return sum;
}

/* x[0..n) *= scale; returns the largest (NaN skipped, -INFINITY for
 * none). A maximum does not depend on the order: only the sign of a
 * zero maximum can, and exp(x - max) does not see it. */
static float scale_max_scalar(float *x, int64_t n, float scale) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        x[i] *= scale;
        if (x[i] > max) max = x[i];
    }
    return max;
}

/* _mm512_max_ps(v, m) keeps m where v is NaN, as the scalar skips it. */
__attribute__((target("avx512f"))) static float scale_max_avx512(float *x, int64_t n, float scale) {
    const __m512 vs = _mm512_set1_ps(scale);
    __m512 m = _mm512_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vs);
        _mm512_storeu_ps(x + i, v);
        m = _mm512_max_ps(v, m);
    }
    const float head = _mm512_reduce_max_ps(m), rest = scale_max_scalar(x + i, n - i, scale);
    return rest > head ? rest : head;
}

/* x[0..n) *= s, each one rounded product. */
__attribute__((target("avx512f"))) static void scale_avx512(float *x, int64_t n, float s) {
    const __m512 vs = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), vs));
    for (; i < n; i++) x[i] *= s;
}

void kiln_softmax(float *x, int64_t n, float scale, kiln_numeric_mode mode) {
    const bool avx512 = kiln_simd() >= KILN_SIMD_AVX512;
    const float max = avx512 ? scale_max_avx512(x, n, scale) : scale_max_scalar(x, n, scale);
    if (max == -INFINITY) {
        /* nothing to attend to: exp(-inf - -inf) would be NaN */
        memset(x, 0, (size_t)n * sizeof *x);
        return;
    }
    if (mode == KILN_NUM_EXACT) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++) sum += exp((double)x[i] - max);
        for (int64_t i = 0; i < n; i++) x[i] = (float)(exp((double)x[i] - max) / sum);
        return;
    }
    const float inv = (float)(1.0 / kiln_exp_sum(x, n, max));
    if (avx512) {
        scale_avx512(x, n, inv);
        return;
    }
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

/* ---- activations ----------------------------------------------------------- */

__attribute__((target("avx512f"))) static void silu16_avx512(const float *g, const float *u, float *y) {
    const __m512 x = _mm512_loadu_ps(g);
    const __m512 e = vexp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), _mm512_loadu_ps(u)));
}
static inline __attribute__((always_inline)) void silu16_lanes(const float *g, const float *u, float *y) {
    for (int l = 0; l < 16; l++) y[l] = (g[l] / (1.0f + vexp_lane(0.0f - g[l]))) * u[l];
}
__attribute__((target("avx2,fma"))) static void silu16_fma(const float *g, const float *u, float *y) {
    silu16_lanes(g, u, y);
}
static void silu16_generic(const float *g, const float *u, float *y) {
    silu16_lanes(g, u, y);
}

/* One row of kiln_swiglu in GGML mode: blocks of 16 by `block`, the
 * rest with glibc's expf. */
static void swiglu_row(void (*block)(const float *, const float *, float *), const float *g, const float *u,
                       float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) block(g + i, u + i, y + i);
    for (; i < n; i++) y[i] = (g[i] / (1.0f + expf(-g[i]))) * u[i];
}

void kiln_swiglu(const float *g, const float *u, float *y, int64_t rows, int64_t n, kiln_numeric_mode mode) {
    if (mode == KILN_NUM_EXACT) {
        for (int64_t i = 0; i < rows * n; i++) y[i] = (float)((double)g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
        return;
    }
    /* as ggml_vec_swiglu_f32, row by row: blocks of 16 by ggml_v_silu,
     * the rest with glibc's expf */
    const kiln_simd_level lvl = kiln_simd();
    void (*block)(const float *, const float *, float *) = lvl >= KILN_SIMD_AVX512 ? silu16_avx512
                                                           : lvl >= KILN_SIMD_AVX2 ? silu16_fma
                                                                                   : silu16_generic;
    if (kiln_par_worth_floats((double)rows * (double)n)) {
        /* a batch: the rows shared by the team (par.h) */
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; r++) swiglu_row(block, g + r * n, u + r * n, y + r * n, n);
    } else {
        for (int64_t r = 0; r < rows; r++) swiglu_row(block, g + r * n, u + r * n, y + r * n, n);
    }
}

/* ggml_gelu_f32 as gcc -O3 -march=native compiles it: 1 + a*x*x is fused. */
static float gelu_f32(float x) {
    const float k = 0.79788456080286535587989211986876f; /* sqrt(2/pi) */
    return (0.5f * x) * (1.0f + tanhf((k * x) * fmaf(0.044715f * x, x, 1.0f)));
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
    if (mode == KILN_NUM_EXACT || pthread_once(&g_gelu_once, gelu_table_init) != 0) {
        for (int64_t i = 0; i < n; i++) {
            const double v = x[i];
            y[i] = (float)(0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
        }
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
    return (x / (1.0f + expf(-x))) / x;
}

/* ---- vector kernels -------------------------------------------------------- */

__attribute__((target("avx512f"))) static void add_avx512(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_loadu_ps(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

__attribute__((target("avx2"))) static void add_avx2(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] += x[i];
}

static void add_scalar(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void kiln_vec_add(float *y, const float *x, int64_t n) {
    const kiln_simd_level lvl = kiln_simd();
    void (*add)(float *, const float *, int64_t) = lvl >= KILN_SIMD_AVX512 ? add_avx512
                                                  : lvl >= KILN_SIMD_AVX2  ? add_avx2
                                                                           : add_scalar;
    if (!kiln_par_worth_floats((double)n)) {
        add(y, x, n);
        return;
    }
    /* a batch's residual stream: chunks for the team (par.h); each sum is
     * one add, so the split changes no bit */
    const int64_t chunk = 4096;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i += chunk) add(y + i, x + i, n - i < chunk ? n - i : chunk);
}

/* The n % 64 products ggml_vec_dot_f32 leaves to a scalar loop in double. */
static float dot_tail(float head, const float *a, const float *b, int64_t i, int64_t n) {
    double s = head;
    for (; i < n; i++) s += (double)(a[i] * b[i]);
    return (float)s;
}

__attribute__((target("avx512f"))) static float dot_avx512(const float *a, const float *b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    const int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
    }
    const float head = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3)));
    return dot_tail(head, a, b, np, n);
}

/* 16 lanes as two 8-lane halves, reduced in reduce16's order. */
__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b, int64_t n) {
    __m256 lo[4], hi[4];
    for (int j = 0; j < 4; j++) lo[j] = hi[j] = _mm256_setzero_ps();
    const int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++) {
            lo[j] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16 * j), _mm256_loadu_ps(b + i + 16 * j), lo[j]);
            hi[j] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16 * j + 8), _mm256_loadu_ps(b + i + 16 * j + 8), hi[j]);
        }
    const __m256 l = _mm256_add_ps(_mm256_add_ps(lo[0], lo[2]), _mm256_add_ps(lo[1], lo[3]));
    const __m256 h = _mm256_add_ps(_mm256_add_ps(hi[0], hi[2]), _mm256_add_ps(hi[1], hi[3]));
    const __m256 h8 = _mm256_add_ps(h, l);
    const __m128 h4 = _mm_add_ps(_mm256_extractf128_ps(h8, 1), _mm256_castps256_ps128(h8));
    const __m128 t = _mm_add_ps(h4, _mm_shuffle_ps(h4, h4, _MM_SHUFFLE(1, 0, 3, 2)));
    const float head = _mm_cvtss_f32(t) + _mm_cvtss_f32(_mm_shuffle_ps(t, t, 1));
    return dot_tail(head, a, b, np, n);
}

float kiln_vec_dot(const float *a, const float *b, int64_t n) {
    const kiln_simd_level lvl = kiln_simd();
    if (lvl >= KILN_SIMD_AVX512) return dot_avx512(a, b, n);
    if (lvl >= KILN_SIMD_AVX2) return dot_avx2(a, b, n);
    float s[4][16] = {{0}}, r[16];
    const int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) s[j][l] = fmaf(a[i + 16 * j + l], b[i + 16 * j + l], s[j][l]);
    for (int l = 0; l < 16; l++) r[l] = (s[0][l] + s[2][l]) + (s[1][l] + s[3][l]);
    return dot_tail(reduce16(r), a, b, np, n);
}

float kiln_vec_dot_f32(const float *a, const float *b, int64_t n) {
    const int64_t np = n & ~(int64_t)63;
    return kiln_vec_dot_f32_tail(kiln_vec_dot(a, b, np), a, b, np, n);
}

/* Sixteen rows' _mm512_reduce_add_ps at once: out lane j = the reduction
 * of r[j], every add the one reduce16 makes (halves, quarters, then
 * (v0 + v2) + (v1 + v3)), with the rows transposed by shuffles as they
 * halve. Row by row, the reduction's chain of dependent shuffles and adds
 * cost more than the row's products (attention scores over 64-wide
 * heads). */
__attribute__((target("avx512f"))) static inline __m512 reduce16_x16(const __m512 r[16]) {
    __m512 h8[8], h4[4], h2[2];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) /* [r_j | r_j+8] halves: 8 sums each */
        h8[j] = _mm512_add_ps(_mm512_shuffle_f32x4(r[j], r[j + 8], 0xEE), _mm512_shuffle_f32x4(r[j], r[j + 8], 0x44));
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) /* quarters: lanes of rows j, j+8, j+4, j+12 */
        h4[j] = _mm512_add_ps(_mm512_shuffle_f32x4(h8[j], h8[j + 4], 0xDD), _mm512_shuffle_f32x4(h8[j], h8[j + 4], 0x88));
#pragma GCC unroll 2
    for (int j = 0; j < 2; j++) /* v0 + v2 and v1 + v3 of two rows a lane */
        h2[j] = _mm512_add_ps(_mm512_shuffle_ps(h4[j], h4[j + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_ps(h4[j], h4[j + 2], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(h2[0], h2[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                      _mm512_shuffle_ps(h2[0], h2[1], _MM_SHUFFLE(3, 1, 3, 1)));
    /* sums holds rows 0 2 1 3 8 10 9 11 4 6 5 7 12 14 13 15 */
    const __m512i order = _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15);
    return _mm512_permutexvar_ps(order, sums);
}

/* The row loops of kiln_vec_dot_f32_rows, one per level, so that the
 * level's dot inlines into them. AVX-512: sixteen rows at a time, each
 * row's four accumulators as dot_avx512 keeps them, reduced together. */
__attribute__((target("avx512f"))) static void dot_rows_avx512(const float *a, const float *b, int64_t stride,
                                                               int64_t j, int64_t rows, int64_t n, float *out) {
    const int64_t np = n & ~(int64_t)63;
    for (; np > 0 && j + 16 <= rows; j += 16) {
        __m512 r[16];
#pragma GCC unroll 16
        for (int l = 0; l < 16; l++) {
            const float *bl = b + (j + l) * stride;
            __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
            for (int64_t i = 0; i < np; i += 64) {
                s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(bl + i), s0);
                s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(bl + i + 16), s1);
                s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(bl + i + 32), s2);
                s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(bl + i + 48), s3);
            }
            r[l] = _mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3));
        }
        _mm512_storeu_ps(out + j, reduce16_x16(r));
        if (n > np)
            for (int l = 0; l < 16; l++) out[j + l] = kiln_vec_dot_f32_tail(out[j + l], a, b + (j + l) * stride, np, n);
    }
    for (; j < rows; j++)
        out[j] = kiln_vec_dot_f32_tail(dot_avx512(a, b + j * stride, np), a, b + j * stride, np, n);
}

/* Rows [j, j + 8) of two 64-wide queries a and b: each row's four
 * products as dot_avx512 accumulates them (onto zeros), the eight rows of
 * a then the eight of b reduced together. The queries stay in registers
 * and each row is loaded once for both: loads, not arithmetic, bound
 * these dots (one query at a time loads two vectors per multiply-add). */
__attribute__((target("avx512f"))) static inline void dot_rows8x2_avx512(const __m512 qa[4], const __m512 qb[4],
                                                                        const float *k, int64_t stride, int64_t j,
                                                                        float *out_a, float *out_b) {
    const __m512 z = _mm512_setzero_ps();
    __m512 r[16];
#pragma GCC unroll 8
    for (int l = 0; l < 8; l++) {
        const float *kl = k + (j + l) * stride;
        const __m512 k0 = _mm512_loadu_ps(kl), k1 = _mm512_loadu_ps(kl + 16);
        const __m512 k2 = _mm512_loadu_ps(kl + 32), k3 = _mm512_loadu_ps(kl + 48);
        r[l] = _mm512_add_ps(_mm512_add_ps(_mm512_fmadd_ps(qa[0], k0, z), _mm512_fmadd_ps(qa[2], k2, z)),
                             _mm512_add_ps(_mm512_fmadd_ps(qa[1], k1, z), _mm512_fmadd_ps(qa[3], k3, z)));
        r[8 + l] = _mm512_add_ps(_mm512_add_ps(_mm512_fmadd_ps(qb[0], k0, z), _mm512_fmadd_ps(qb[2], k2, z)),
                                 _mm512_add_ps(_mm512_fmadd_ps(qb[1], k1, z), _mm512_fmadd_ps(qb[3], k3, z)));
    }
    const __m512 sums = reduce16_x16(r);
    _mm256_storeu_ps(out_a + j, _mm512_castps512_ps256(sums));
    _mm256_storeu_ps(out_b + j, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sums), 1)));
}

/* kiln_vec_dot_f32_rows_multi on AVX-512: 64-wide queries in pairs over
 * their common rows, eight rows at a time (dot_rows8x2_avx512); the rows
 * only one of a pair has, a last unpaired query and other widths as
 * kiln_vec_dot_f32_rows. */
__attribute__((target("avx512f"))) static void dot_rows_multi_avx512(const float *a, int64_t lda, int m,
                                                                     const float *b, int64_t stride,
                                                                     const int64_t *rows, int64_t n, float *out,
                                                                     int64_t ldo) {
    int i = 0;
    for (; n == 64 && i + 2 <= m; i += 2) {
        const float *qa = a + i * lda, *qb = qa + lda;
        float *oa = out + i * ldo, *ob = oa + ldo;
        const __m512 va[4] = {_mm512_loadu_ps(qa), _mm512_loadu_ps(qa + 16), _mm512_loadu_ps(qa + 32),
                              _mm512_loadu_ps(qa + 48)};
        const __m512 vb[4] = {_mm512_loadu_ps(qb), _mm512_loadu_ps(qb + 16), _mm512_loadu_ps(qb + 32),
                              _mm512_loadu_ps(qb + 48)};
        const int64_t both = rows[i] < rows[i + 1] ? rows[i] : rows[i + 1];
        int64_t j = 0;
        for (; j + 8 <= both; j += 8) dot_rows8x2_avx512(va, vb, b, stride, j, oa, ob);
        dot_rows_avx512(qa, b, stride, j, rows[i], n, oa);
        dot_rows_avx512(qb, b, stride, j, rows[i + 1], n, ob);
    }
    for (; i < m; i++) dot_rows_avx512(a + i * lda, b, stride, 0, rows[i], n, out + i * ldo);
}

__attribute__((target("avx2,fma"))) static void dot_rows_avx2(const float *a, const float *b, int64_t stride,
                                                              int64_t rows, int64_t n, float *out) {
    const int64_t np = n & ~(int64_t)63;
    for (int64_t j = 0; j < rows; j++)
        out[j] = kiln_vec_dot_f32_tail(dot_avx2(a, b + j * stride, np), a, b + j * stride, np, n);
}

void kiln_vec_dot_f32_rows(const float *a, const float *b, int64_t stride, int64_t rows, int64_t n, float *out) {
    const kiln_simd_level lvl = kiln_simd();
    if (lvl >= KILN_SIMD_AVX512) dot_rows_avx512(a, b, stride, 0, rows, n, out);
    else if (lvl >= KILN_SIMD_AVX2) dot_rows_avx2(a, b, stride, rows, n, out);
    else
        for (int64_t j = 0; j < rows; j++) out[j] = kiln_vec_dot_f32(a, b + j * stride, n);
}

void kiln_vec_dot_f32_rows_multi(const float *a, int64_t lda, int m, const float *b, int64_t stride,
                                 const int64_t *rows, int64_t n, float *out, int64_t ldo) {
    if (kiln_simd() >= KILN_SIMD_AVX512) {
        dot_rows_multi_avx512(a, lda, m, b, stride, rows, n, out, ldo);
        return;
    }
    for (int i = 0; i < m; i++) kiln_vec_dot_f32_rows(a + i * lda, b, stride, rows[i], n, out + i * ldo);
}

__attribute__((target("avx512f"))) static void axpy_avx512(float *y, const float *x, float a, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(_mm512_loadu_ps(x + i), va, _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(x[i], a, y[i]);
}

__attribute__((target("avx2,fma"))) static void axpy_avx2(float *y, const float *x, float a, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), va, _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(x[i], a, y[i]);
}

void kiln_vec_axpy(float *y, const float *x, float a, int64_t n) {
    const kiln_simd_level lvl = kiln_simd();
    if (lvl >= KILN_SIMD_AVX512) axpy_avx512(y, x, a, n);
    else if (lvl >= KILN_SIMD_AVX2) axpy_avx2(y, x, a, n);
    else
        for (int64_t i = 0; i < n; i++) y[i] = fmaf(x[i], a, y[i]);
}

__attribute__((target("avx512f"))) static void axpy_cyclic_avx512(float *acc, int64_t m, int64_t ld, const float *x,
                                                                  int64_t stride, const float *p, int64_t rows,
                                                                  int64_t n) {
    for (int64_t j = 0; j < rows; j++) axpy_avx512(acc + (j % m) * ld, x + j * stride, p[j], n);
}

__attribute__((target("avx2,fma"))) static void axpy_cyclic_avx2(float *acc, int64_t m, int64_t ld, const float *x,
                                                                 int64_t stride, const float *p, int64_t rows,
                                                                 int64_t n) {
    for (int64_t j = 0; j < rows; j++) axpy_avx2(acc + (j % m) * ld, x + j * stride, p[j], n);
}

void kiln_vec_axpy_cyclic(float *acc, int64_t m, int64_t ld, const float *x, int64_t stride, const float *p,
                          int64_t rows, int64_t n) {
    const kiln_simd_level lvl = kiln_simd();
    if (lvl >= KILN_SIMD_AVX512) axpy_cyclic_avx512(acc, m, ld, x, stride, p, rows, n);
    else if (lvl >= KILN_SIMD_AVX2) axpy_cyclic_avx2(acc, m, ld, x, stride, p, rows, n);
    else
        for (int64_t j = 0; j < rows; j++) kiln_vec_axpy(acc + (j % m) * ld, x + j * stride, p[j], n);
}

void kiln_reduce16_rows(float *rows, int64_t stride, float *out, int64_t n) {
    for (int i = 0; i < 8; i++) kiln_vec_add(rows + i * stride, rows + (8 + i) * stride, n);
    for (int i = 0; i < 4; i++) kiln_vec_add(rows + i * stride, rows + (4 + i) * stride, n);
    kiln_vec_add(rows, rows + 2 * stride, n);
    kiln_vec_add(rows + stride, rows + 3 * stride, n);
    for (int64_t j = 0; j < n; j++) out[j] = rows[j] + rows[stride + j];
}

void kiln_vec_wsum16_multi(const float *x, int64_t stride, const float *p, int64_t ldp, const int64_t *rows, int m,
                           int64_t n, float *acc, float *o, int64_t ldo) {
    for (int i = 0; i < m; i++) {
        memset(acc, 0, (size_t)(16 * n) * sizeof *acc);
        kiln_vec_axpy_cyclic(acc, 16, n, x, stride, p + i * ldp, rows[i], n);
        kiln_reduce16_rows(acc, n, o + i * ldo, n);
    }
}

/* kiln_vec_wsum16_tr on AVX-512 for four queries (repeats allowed) and
 * columns [d, d + 4): lane l of a column's vector is chain l, so a block
 * of 16 rows is one multiply-add per query and column with the block's 16
 * weights as one vector (masked past the query's rows), each column's
 * vector loaded once for the four queries; then the sixteen (query,
 * column) vectors are reduced together (reduce16_x16: the order of
 * kiln_reduce16_rows, column by column). */
__attribute__((target("avx512f"))) static void wsum16_tr_quad(const float *xt, int64_t ldx, const float *const p[4],
                                                              const int64_t r[4], int64_t d, float *const o[4]) {
    __m512 c[16];
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++) c[k] = _mm512_setzero_ps();
    int64_t most = 0;
    for (int q = 0; q < 4; q++) most = r[q] > most ? r[q] : most;
    for (int64_t j = 0; j < most; j += 16) {
        __mmask16 mq[4];
        __m512 wq[4];
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            mq[q] = j + 16 <= r[q] ? 0xFFFF : j < r[q] ? (__mmask16)((1u << (r[q] - j)) - 1) : 0;
            wq[q] = _mm512_maskz_loadu_ps(mq[q], p[q] + j);
        }
#pragma GCC unroll 4
        for (int l = 0; l < 4; l++) {
            const __m512 x = _mm512_loadu_ps(xt + (d + l) * ldx + j);
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) c[4 * q + l] = _mm512_mask3_fmadd_ps(x, wq[q], c[4 * q + l], mq[q]);
        }
    }
    const __m512 sums = reduce16_x16(c);
    _mm_storeu_ps(o[0] + d, _mm512_extractf32x4_ps(sums, 0));
    _mm_storeu_ps(o[1] + d, _mm512_extractf32x4_ps(sums, 1));
    _mm_storeu_ps(o[2] + d, _mm512_extractf32x4_ps(sums, 2));
    _mm_storeu_ps(o[3] + d, _mm512_extractf32x4_ps(sums, 3));
}

__attribute__((target("avx512f"))) static void wsum16_tr_avx512(const float *xt, int64_t ldx, const float *p,
                                                                int64_t ldp, const int64_t *rows, int m, int64_t n,
                                                                float *o, int64_t ldo) {
    for (int i = 0; i < m; i += 4) {
        const float *pq[4];
        int64_t rq[4];
        float *oq[4];
        for (int q = 0; q < 4; q++) { /* a short last group repeats its last query */
            const int k = i + q < m ? i + q : m - 1;
            pq[q] = p + k * ldp, rq[q] = rows[k], oq[q] = o + k * ldo;
        }
        for (int64_t d = 0; d < n; d += 4) wsum16_tr_quad(xt, ldx, pq, rq, d, oq);
    }
}

bool kiln_vec_wsum16_tr(const float *xt, int64_t ldx, const float *p, int64_t ldp, const int64_t *rows, int m,
                        int64_t n, float *o, int64_t ldo) {
    if (kiln_simd() < KILN_SIMD_AVX512 || n % 4) return false;
    wsum16_tr_avx512(xt, ldx, p, ldp, rows, m, n, o, ldo);
    return true;
}

/* ---- Gemma's soft-cap and gated GELU ---------------------------------------- */

void kiln_softcap(float *x, int64_t n, float cap) {
    /* ggml_scale(1/cap), ggml_tanh, ggml_scale(cap): three roundings */
    const float inv = 1.0f / cap;
    for (int64_t i = 0; i < n; i++) x[i] = tanhf(x[i] * inv) * cap;
}

void kiln_geglu(const float *g, const float *u, float *y, int64_t n, kiln_numeric_mode mode) {
    float a[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        const int64_t m = n - i0 < 256 ? n - i0 : 256;
        kiln_gelu(g + i0, a, m, mode);
        for (int64_t i = 0; i < m; i++) {
            const int64_t k = i0 + i;
            /* ggml writes a plain 0 below -10, not 0 * u */
            y[k] = mode == KILN_NUM_GGML && g[k] <= -10.0f ? 0.0f : a[i] * u[k];
        }
    }
}
