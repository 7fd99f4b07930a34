/* codec/search.c - the scale searches of search.h.
 *
 * Each search follows ggml's arithmetic operation for operation (same
 * order of float additions, same candidate grid, same tie rules), because a
 * different rounding anywhere changes a level and so the block bytes.
 *
 * The candidate-grid searches (qx, qkx2/qkx3) dominate quantization time.
 * Their AVX2 / AVX-512 variants evaluate several candidate scales at once,
 * one per vector lane, each lane doing exactly the scalar loop's
 * operations in the scalar loop's order; the winner is then picked by the
 * same sequential comparison as the scalar code, so results are identical.
 * The searches whose steps depend on each other (make_q3_quants and the
 * coordinate-descent refinements) and the small make_qp_quants (over the
 * 8 or 16 sub-block scales) stay scalar. (The descents of make_q3_quants
 * and make_qp_quants look alike but are not the same: ggml tests sl2 > 0
 * at different points and clamps differently, and both orders are kept.)
 *
 * At the end, the two steps every k-quant takes around its searches: the
 * importance weights of an imatrix, and the final levels against the
 * scales as stored. */
/* ggml rounds every product before adding it. -std=c11 already forbids
 * fusing them into FMAs, but a build in GNU mode would fuse them inside
 * the AVX-512 functions and change the bytes. */
#ifdef __clang__
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

#include "search.h"

#include "quants.h"

#include <math.h>
#include <string.h>

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* ---------------------------------------------------------------------
 * make_qx_quants: symmetric levels, scale chosen among nmax + 0.1*is. */

/* The per-value weight: the caller's, or by rmse_type when it gives none. */
static inline float qx_weight(const float *x, const float *qw, int i, int rmse_type) {
    if (qw) return qw[i];
    switch (rmse_type) {
    case 1: return x[i] * x[i];
    case 2: return 1;
    case 3: return fabsf(x[i]);
    default: return sqrtf(fabsf(x[i]));
    }
}

static inline int qx_level(float iscale, float x, int nmax) {
    return imax(-nmax, imin(nmax - 1, kiln_nearest_int(iscale * x)));
}

/* L[i] = level + nmax, the form every caller stores. */
static void qx_levels(int n, int nmax, const float *x, float iscale, int8_t *L) {
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(nmax + qx_level(iscale, x[i], nmax));
}

/* Weighted sums of one candidate inverse scale, in ggml's order. */
static void qx_sums(int n, int nmax, const float *x, const float *qw, int rmse_type, float iscale,
                    float *sumlx, float *suml2) {
    float slx = 0, sl2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = qx_level(iscale, x[i], nmax);
        float w = qx_weight(x, qw, i, rmse_type);
        slx += w * x[i] * l;
        sl2 += w * l * l;
    }
    *sumlx = slx;
    *suml2 = sl2;
}

/* Candidate k of the grid: k = 0 is the plain -nmax/max start, k = 1..18
 * are is = -9..-1, 1..9. */
#define QX_NCAND 19
#define QX_MAX_N 64 /* longest group whose weights are computed up front */
static inline float qx_cand_iscale(int k, int nmax, float max) {
    if (k == 0) return -nmax / max;
    int is = k <= 9 ? k - 10 : k - 9;
    return -(nmax + 0.1f * is) / max;
}

static void qx_cands_scalar(int n, int nmax, const float *x, const float *qw, int rmse_type,
                            float max, float *slx, float *sl2) {
    for (int k = 0; k < QX_NCAND; ++k)
        qx_sums(n, nmax, x, qw, rmse_type, qx_cand_iscale(k, nmax, max), &slx[k], &sl2[k]);
}

#ifdef KILN_X86
/* nearest_int on 8 / 16 lanes: the same magic-number trick, bit for bit. */
KILN_AVX2 static inline __m256i nearest8(__m256 v) {
    __m256i i = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12582912.f)));
    return _mm256_sub_epi32(_mm256_and_si256(i, _mm256_set1_epi32(0x007fffff)),
                            _mm256_set1_epi32(0x00400000));
}

KILN_AVX512 static inline __m512i nearest16(__m512 v) {
    __m512i i = _mm512_castps_si512(_mm512_add_ps(v, _mm512_set1_ps(12582912.f)));
    return _mm512_sub_epi32(_mm512_and_si512(i, _mm512_set1_epi32(0x007fffff)),
                            _mm512_set1_epi32(0x00400000));
}

/* Adds value (xv, wv)'s terms of qx_sums to the sums a, b of 8 / 16
 * candidates, one per lane (inverse scale isv), clamping to -nmax..nmax-1. */
KILN_AVX2 static inline void
qx_add8(__m256 isv, __m256 xv, __m256 wv, int nmax, __m256 *a, __m256 *b) {
    __m256i li = _mm256_max_epi32(_mm256_set1_epi32(-nmax),
                                  _mm256_min_epi32(_mm256_set1_epi32(nmax - 1),
                                                   nearest8(_mm256_mul_ps(isv, xv))));
    __m256 l = _mm256_cvtepi32_ps(li);
    *a = _mm256_add_ps(*a, _mm256_mul_ps(_mm256_mul_ps(wv, xv), l));
    *b = _mm256_add_ps(*b, _mm256_mul_ps(_mm256_mul_ps(wv, l), l));
}

KILN_AVX512 static inline void
qx_add16(__m512 isv, __m512 xv, __m512 wv, int nmax, __m512 *a, __m512 *b) {
    __m512i li = _mm512_max_epi32(_mm512_set1_epi32(-nmax),
                                  _mm512_min_epi32(_mm512_set1_epi32(nmax - 1),
                                                   nearest16(_mm512_mul_ps(isv, xv))));
    __m512 l = _mm512_cvtepi32_ps(li);
    *a = _mm512_add_ps(*a, _mm512_mul_ps(_mm512_mul_ps(wv, xv), l));
    *b = _mm512_add_ps(*b, _mm512_mul_ps(_mm512_mul_ps(wv, l), l));
}

/* Both fill is[] past QX_NCAND with the start's scale, to be dropped. */
KILN_AVX2 static void
qx_cands_avx2(int n, int nmax, const float *x, const float *w, float max, float *slx, float *sl2) {
    float is[24], ta[24], tb[24];
    for (int k = 0; k < 24; ++k) is[k] = qx_cand_iscale(k < QX_NCAND ? k : 0, nmax, max);
    for (int g = 0; g < 24; g += 8) {
        __m256 isv = _mm256_loadu_ps(is + g), a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
        for (int i = 0; i < n; ++i)
            qx_add8(isv, _mm256_set1_ps(x[i]), _mm256_set1_ps(w[i]), nmax, &a, &b);
        _mm256_storeu_ps(ta + g, a);
        _mm256_storeu_ps(tb + g, b);
    }
    memcpy(slx, ta, QX_NCAND * sizeof(float));
    memcpy(sl2, tb, QX_NCAND * sizeof(float));
}

/* 19 candidates: one full vector, and 3 more done at AVX2 width. */
KILN_AVX512 static void
qx_cands_avx512(int n, int nmax, const float *x, const float *w, float max, float *slx,
                float *sl2) {
    float is[24], ta[24], tb[24];
    for (int k = 0; k < 24; ++k) is[k] = qx_cand_iscale(k < QX_NCAND ? k : 0, nmax, max);
    __m512 isv = _mm512_loadu_ps(is), a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    __m256 isv2 = _mm256_loadu_ps(is + 16), a2 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps();
    for (int i = 0; i < n; ++i) {
        __m512 xv = _mm512_set1_ps(x[i]), wv = _mm512_set1_ps(w[i]);
        qx_add16(isv, xv, wv, nmax, &a, &b);
        qx_add8(isv2, _mm512_castps512_ps256(xv), _mm512_castps512_ps256(wv), nmax, &a2, &b2);
    }
    _mm512_storeu_ps(ta, a);
    _mm512_storeu_ps(tb, b);
    _mm256_storeu_ps(ta + 16, a2);
    _mm256_storeu_ps(tb + 16, b2);
    memcpy(slx, ta, QX_NCAND * sizeof(float));
    memcpy(sl2, tb, QX_NCAND * sizeof(float));
}
#endif

/* The sums of all QX_NCAND candidates. The weights are the same for every
 * candidate, so they are computed once, and the SIMD paths take them from
 * there; a group longer than any format's computes them as it goes. */
static void qx_cands(int n, int nmax, const float *x, const float *qw, int rmse_type, float max,
                     float *slx, float *sl2) {
    if (n > QX_MAX_N) {
        qx_cands_scalar(n, nmax, x, qw, rmse_type, max, slx, sl2);
        return;
    }
    float w[QX_MAX_N];
    for (int i = 0; i < n; ++i) w[i] = qx_weight(x, qw, i, rmse_type);
#ifdef KILN_X86
    kiln_simd_level lv = kiln_simd();
    if (lv >= KILN_SIMD_AVX512) {
        qx_cands_avx512(n, nmax, x, w, max, slx, sl2);
        return;
    }
    if (lv >= KILN_SIMD_AVX2) {
        qx_cands_avx2(n, nmax, x, w, max, slx, sl2);
        return;
    }
#endif
    qx_cands_scalar(n, nmax, x, w, rmse_type, max, slx, sl2);
}

float kiln_make_qx_quants(int n, int nmax, const float *x, int8_t *L, int rmse_type,
                          const float *qw) {
    float amax, max = kiln_max_magnitude(x, n, &amax);
    if (amax < KILN_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    if (rmse_type == 0) {
        qx_levels(n, nmax, x, iscale, L);
        return 1 / iscale;
    }
    float slx[QX_NCAND], sl2[QX_NCAND];
    if (rmse_type < 0) { /* ggml's "return early": the start's fit, no search */
        qx_sums(n, nmax, x, qw, -rmse_type, iscale, &slx[0], &sl2[0]);
        qx_levels(n, nmax, x, iscale, L);
        float scale = sl2[0] ? slx[0] / sl2[0] : 0.0f;
        return sl2[0] > 0 ? 0.5f * (scale + 1 / iscale) : 1 / iscale;
    }
    qx_cands(n, nmax, x, qw, rmse_type, max, slx, sl2);
    float scale = sl2[0] ? slx[0] / sl2[0] : 0.0f;
    float best = scale * slx[0];
    int pick = 0;
    for (int k = 1; k < QX_NCAND; ++k) {
        if (sl2[k] > 0 && slx[k] * slx[k] > best * sl2[k]) {
            scale = slx[k] / sl2[k];
            best = scale * slx[k];
            pick = k;
        }
    }
    qx_levels(n, nmax, x, qx_cand_iscale(pick, nmax, max), L);
    return scale;
}

/* ---------------------------------------------------------------------
 * make_q3_quants: x^2-weighted coordinate descent from the -nmax/max
 * start. Each step depends on the last, so there is no SIMD variant. */

float kiln_make_q3_quants(int n, int nmax, const float *x, int8_t *L, bool do_rmse) {
    float amax, max = kiln_max_magnitude(x, n, &amax);
    if (amax < KILN_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    if (!do_rmse) {
        qx_levels(n, nmax, x, iscale, L);
        return 1 / iscale;
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = qx_level(iscale, x[i], nmax);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = imax(-nmax, imin(nmax - 1, kiln_nearest_int(x[i] * sl2 / slx)));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ---------------------------------------------------------------------
 * make_qkx2_quants / make_qkx3_quants: levels 0..nmax with a minimum.
 * The start is the min/max fit; then nstep+1 candidate inverse scales
 * (rmin + rdelta*is + nmax)/(max - min), each with its least-squares
 * scale and minimum, compete on weighted error. The two ggml functions
 * differ only in their default weights (qkx3: x^2 when none are given).
 *
 * In ggml a winning candidate also replaces `min`, which every later
 * candidate then uses. The SIMD paths therefore evaluate a batch of
 * candidates with the current minimum and, when a winner changes it,
 * evaluate again from the next candidate on: the same numbers as the
 * one-at-a-time scalar loop. */

#define QKX_MAX_N 64 /* largest group (sub-block) any format searches */

typedef struct qkx_cand {
    float scale, min, err;
    bool valid; /* D > 0 */
} qkx_cand;

/* What every candidate of one search shares. */
typedef struct qkx_ctx {
    int n, nmax;
    const float *x, *w;
    float max, sum_w, sum_x, rmin, rdelta;
    bool use_mad;
} qkx_ctx;

static inline int qkx_level(float iscale, float x, float min, int nmax) {
    return imax(0, imin(nmax, kiln_nearest_int(iscale * (x - min))));
}

static inline float qkx_iscale(const qkx_ctx *q, int is, float min) {
    return (q->rmin + q->rdelta * is + q->nmax) / (q->max - min);
}

/* Candidate `is` with the current minimum `min`, in ggml's order. */
static void qkx_eval1(const qkx_ctx *q, int is, float min, qkx_cand *c) {
    const float *x = q->x, *w = q->w;
    float iscale = qkx_iscale(q, is, min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    uint8_t Laux[QKX_MAX_N];
    for (int i = 0; i < q->n; ++i) {
        int l = qkx_level(iscale, x[i], min, q->nmax);
        Laux[i] = (uint8_t)l;
        sum_l += w[i] * l;
        sum_l2 += w[i] * l * l;
        sum_xl += w[i] * l * x[i];
    }
    float D = q->sum_w * sum_l2 - sum_l * sum_l;
    c->valid = D > 0;
    if (!c->valid) return;
    float this_scale = (q->sum_w * sum_xl - q->sum_x * sum_l) / D;
    float this_min = (sum_l2 * q->sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
    }
    float err = 0;
    for (int i = 0; i < q->n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = q->use_mad ? fabsf(diff) : diff * diff;
        err += w[i] * diff;
    }
    c->scale = this_scale;
    c->min = this_min;
    c->err = err;
}

#ifdef KILN_X86
/* Candidates from, from+1, ... (one per lane; lanes past the last
 * candidate repeat it and are dropped). The body is qkx_eval1's. */
#define QKX_SIMD_BODY(V, W, PFX, NEAREST, CLAMP, CMPGT, BLEND, ABS)                        \
    const float *x = q->x, *w = q->w;                                                      \
    float isf[W];                                                                          \
    for (int k = 0; k < W; ++k) isf[k] = qkx_iscale(q, from + k < last ? from + k : last - 1, min); \
    V isv = PFX##_loadu_ps(isf), minv = PFX##_set1_ps(min);                                \
    V sl = PFX##_setzero_ps(), sl2 = PFX##_setzero_ps(), sxl = PFX##_setzero_ps();         \
    V lv[QKX_MAX_N];                                                                       \
    for (int i = 0; i < q->n; ++i) {                                                       \
        V xv = PFX##_set1_ps(x[i]), wv = PFX##_set1_ps(w[i]);                              \
        V l = PFX##_cvtepi32_ps(CLAMP(NEAREST(PFX##_mul_ps(isv, PFX##_sub_ps(xv, minv))))); \
        lv[i] = l;                                                                         \
        V wl = PFX##_mul_ps(wv, l);                                                        \
        sl = PFX##_add_ps(sl, wl);                                                         \
        sl2 = PFX##_add_ps(sl2, PFX##_mul_ps(wl, l));                                      \
        sxl = PFX##_add_ps(sxl, PFX##_mul_ps(wl, xv));                                     \
    }                                                                                      \
    V swv = PFX##_set1_ps(q->sum_w), sxv = PFX##_set1_ps(q->sum_x), zero = PFX##_setzero_ps(); \
    V D = PFX##_sub_ps(PFX##_mul_ps(swv, sl2), PFX##_mul_ps(sl, sl));                      \
    V sc = PFX##_div_ps(PFX##_sub_ps(PFX##_mul_ps(swv, sxl), PFX##_mul_ps(sxv, sl)), D);   \
    V mn = PFX##_div_ps(PFX##_sub_ps(PFX##_mul_ps(sl2, sxv), PFX##_mul_ps(sl, sxl)), D);   \
    sc = BLEND(sc, PFX##_div_ps(sxl, sl2), CMPGT(mn, zero));                               \
    mn = BLEND(mn, zero, CMPGT(mn, zero));                                                 \
    V err = zero;                                                                          \
    for (int i = 0; i < q->n; ++i) {                                                       \
        V diff = PFX##_sub_ps(PFX##_add_ps(PFX##_mul_ps(sc, lv[i]), mn), PFX##_set1_ps(x[i])); \
        diff = q->use_mad ? ABS(diff) : PFX##_mul_ps(diff, diff);                          \
        err = PFX##_add_ps(err, PFX##_mul_ps(PFX##_set1_ps(w[i]), diff));                  \
    }                                                                                      \
    float tD[W], tsc[W], tmn[W], terr[W];                                                  \
    PFX##_storeu_ps(tD, D);                                                                \
    PFX##_storeu_ps(tsc, sc);                                                              \
    PFX##_storeu_ps(tmn, mn);                                                              \
    PFX##_storeu_ps(terr, err);                                                            \
    for (int k = 0; k < W && from + k < last; ++k) {                                       \
        c[k].valid = tD[k] > 0;                                                            \
        c[k].scale = tsc[k];                                                               \
        c[k].min = tmn[k];                                                                 \
        c[k].err = terr[k];                                                                \
    }

#define A2_CLAMP(v) _mm256_max_epi32(_mm256_setzero_si256(), _mm256_min_epi32(_mm256_set1_epi32(q->nmax), v))
#define A2_GT(a, b) _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define A2_BLEND(a, b, m) _mm256_blendv_ps(a, b, m)
#define A2_ABS(v) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v)
KILN_AVX2 static void qkx_eval8(const qkx_ctx *q, int from, int last, float min, qkx_cand *c) {
    QKX_SIMD_BODY(__m256, 8, _mm256, nearest8, A2_CLAMP, A2_GT, A2_BLEND, A2_ABS)
}

#define A5_CLAMP(v) _mm512_max_epi32(_mm512_setzero_si512(), _mm512_min_epi32(_mm512_set1_epi32(q->nmax), v))
#define A5_GT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ)
#define A5_BLEND(a, b, m) _mm512_mask_blend_ps(m, a, b)
#define A5_ABS(v) _mm512_abs_ps(v)
KILN_AVX512 static void qkx_eval16(const qkx_ctx *q, int from, int last, float min, qkx_cand *c) {
    QKX_SIMD_BODY(__m512, 16, _mm512, nearest16, A5_CLAMP, A5_GT, A5_BLEND, A5_ABS)
}
#endif

/* Evaluates candidates from.. (as many as the SIMD width takes, at least
 * one, never past last) with minimum `min`; returns how many. */
static int qkx_eval_batch(const qkx_ctx *q, int from, int last, float min, qkx_cand *c) {
#ifdef KILN_X86
    kiln_simd_level lv = kiln_simd();
    if (lv >= KILN_SIMD_AVX512 && last - from > 8) {
        qkx_eval16(q, from, last, min, c);
        return imin(16, last - from);
    }
    if (lv >= KILN_SIMD_AVX2 && last - from > 1) {
        qkx_eval8(q, from, last, min, c);
        return imin(8, last - from);
    }
#endif
    qkx_eval1(q, from, min, c);
    return 1;
}

static float make_qkx(int n, int nmax, const float *x, const float *weights, bool x2_default,
                      uint8_t *L, float *the_min, float rmin, float rdelta, int nstep,
                      bool use_mad) {
    if (n < 1 || n > QKX_MAX_N) { /* no format has such groups */
        if (n > 0) memset(L, 0, (size_t)n);
        *the_min = 0;
        return 0.f;
    }
    float w[QKX_MAX_N];
    for (int i = 0; i < n; ++i)
        w[i] = weights ? weights[i] : x2_default ? x[i] * x[i] : 1.0f;
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        L[i] = (uint8_t)qkx_level(iscale, x[i], min, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += w[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    const qkx_ctx q = {n, nmax, x, w, max, sum_w, sum_x, rmin, rdelta, use_mad};
    int pick = -1;
    float pick_min = min; /* the minimum the winner's levels were made with */
    int ncand = nstep + 1;
    for (int from = 0; from < ncand;) {
        qkx_cand c[16];
        int got = qkx_eval_batch(&q, from, ncand, min, c);
        int next = from + got;
        for (int k = 0; k < got; ++k) {
            if (!c[k].valid || !(c[k].err < best_error)) continue;
            best_error = c[k].err;
            scale = c[k].scale;
            pick = from + k;
            pick_min = min;
            if (c[k].min != min) {
                min = c[k].min; /* later candidates depend on it: redo them */
                next = from + k + 1;
                break;
            }
        }
        from = next;
    }
    if (pick >= 0) {
        float is = qkx_iscale(&q, pick, pick_min);
        for (int i = 0; i < n; ++i) L[i] = (uint8_t)qkx_level(is, x[i], pick_min, nmax);
    }
    *the_min = -min;
    return scale;
}

float kiln_make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                            float *the_min, uint8_t *Laux, float rmin, float rdelta,
                            int nstep, bool use_mad) {
    (void)Laux; /* scratch lives on the stack, sized by QKX_MAX_N */
    return make_qkx(n, nmax, x, weights, false, L, the_min, rmin, rdelta, nstep, use_mad);
}

float kiln_make_qkx3_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                            float *the_min, uint8_t *Laux, float rmin, float rdelta,
                            int nstep, bool use_mad) {
    (void)Laux;
    return make_qkx(n, nmax, x, weights, true, L, the_min, rmin, rdelta, nstep, use_mad);
}

/* ---------------------------------------------------------------------
 * make_qp_quants: levels 0..nmax for the (non-negative) sub-block scales,
 * 8 candidate scales around nmax/max, then coordinate descent. */

static float qp_mse(int n, int nmax, const float *x, const float *qw, float iscale) {
    float scale = 1 / iscale, mse = 0;
    for (int i = 0; i < n; ++i) {
        int l = imin(nmax, kiln_nearest_int(iscale * x[i]));
        float diff = x[i] - scale * l;
        mse += qw[i] * diff * diff;
    }
    return mse;
}

float kiln_make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *quant_weights) {
    const float *qw = quant_weights;
    float max = 0;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
    if (max < KILN_GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = nmax / max;
    /* The start is not clamped to nmax (ggml's), so it gets its own loop. */
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        int l = kiln_nearest_int(iscale * x[i]);
        float diff = x[i] - scale * (uint8_t)l; /* ggml reads it back from uint8 L: IQ2_XXS's x < 0 wraps */
        best_mse += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        float iscale_is = (0.1f * is + nmax) / max;
        float mse = qp_mse(n, nmax, x, qw, iscale_is);
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = imin(nmax, kiln_nearest_int(iscale * x[i]));
        L[i] = (uint8_t)l;
        sumlx += qw[i] * x[i] * l;
        suml2 += qw[i] * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = qw[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = imin(nmax, kiln_nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ---------------------------------------------------------------------
 * The steps around the searches. */

float kiln_importance_weights(int n, const float *x, const float *qw, float sigma2, float *w) {
    float sum = 0;
    for (int i = 0; i < n; ++i) {
        float s = sqrtf(sigma2 + x[i] * x[i]);
        w[i] = qw ? qw[i] * s : s;
        sum += w[i];
    }
    return sum;
}

static void fixed_levels_scalar(int n, const float *x, float d, float m, int lo, int hi,
                                uint8_t *L) {
    for (int i = 0; i < n; ++i)
        L[i] = (uint8_t)(imax(lo, imin(hi, kiln_nearest_int((x[i] + m) / d))) - lo);
}

#ifdef KILN_X86
/* The same division and magic-number rounding, 8 / 16 lanes at a time. */
KILN_AVX2 static void
fixed_levels_avx2(int n, const float *x, float d, float m, int lo, int hi, uint8_t *L) {
    const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
    const __m256i lov = _mm256_set1_epi32(lo), hiv = _mm256_set1_epi32(hi);
    for (int i = 0; i < n; i += 16) {
        __m256i l[2];
        for (int h = 0; h < 2; ++h) {
            __m256 v = _mm256_div_ps(_mm256_add_ps(_mm256_loadu_ps(x + i + 8 * h), mv), dv);
            l[h] = _mm256_sub_epi32(_mm256_max_epi32(lov, _mm256_min_epi32(hiv, nearest8(v))), lov);
        }
        /* 0..hi-lo fits the packs; the permute undoes their lane interleave */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(l[0], l[1]), 0xD8);
        __m128i b = _mm_packus_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        _mm_storeu_si128((__m128i *)(L + i), b);
    }
}

KILN_AVX512 static void
fixed_levels_avx512(int n, const float *x, float d, float m, int lo, int hi, uint8_t *L) {
    const __m512 dv = _mm512_set1_ps(d), mv = _mm512_set1_ps(m);
    const __m512i lov = _mm512_set1_epi32(lo), hiv = _mm512_set1_epi32(hi);
    for (int i = 0; i < n; i += 16) {
        __m512 v = _mm512_div_ps(_mm512_add_ps(_mm512_loadu_ps(x + i), mv), dv);
        __m512i l = _mm512_max_epi32(lov, _mm512_min_epi32(hiv, nearest16(v)));
        l = _mm512_sub_epi32(l, lov);
        _mm_storeu_si128((__m128i *)(L + i), _mm512_cvtepi32_epi8(l));
    }
}
#endif

void kiln_levels_for_scales(int nsub, int n, const float *x, const float *d, const float *m,
                            int lo, int hi, uint8_t *L) {
    void (*levels)(int, const float *, float, float, int, int, uint8_t *) =
        KILN_SIMD_PICK(fixed_levels);
    /* x + 0 is x (or a zero of the other sign, which rounds to level 0
     * all the same), so "no offset" needs no path of its own */
    for (int j = 0; j < nsub; ++j)
        if (d[j]) levels(n, x + n * j, d[j], m ? m[j] : 0.f, lo, hi, L + n * j);
}
