/* codec/iq2_xxs_fit.c - kiln's full-grid IQ2_XXS block search (see
 * iq2_xxs_fit.h for what it does differently from ggml's).
 *
 * For a group of 8 magnitudes a[] with weights w[], the error of grid point
 * g at scale S is
 *
 *   sum_i w_i (S G_gi - a_i)^2 = const - S * (2 QX_g - S Q2_g)
 *   Q2_g = sum_i w_i G_gi^2,   QX_g = sum_i w_i G_gi a_i
 *
 * and when the group holds an odd count of negatives one coordinate must
 * take the wrong sign, which costs least at the i minimising w_i G_gi a_i:
 * QX_g then loses twice that. Q2 and QX do not depend on S, so each group
 * of 8 gets one 256-entry score table and every candidate scale afterwards
 * costs one pass of "max over g of 2QX_g - S Q2_g". Those two loops - the
 * table build and the argmax - are the hot code; their AVX2 / AVX-512
 * versions put one grid entry in each lane and keep the scalar order of
 * operations, so every level returns the same entry.
 *
 * Scale choice: a group of 32 first finds its own best real scale (ten
 * starting points, each refitted once); the block scale d is then tried at
 * six values around (largest group scale) * 8/31, rounded to fp16 as it is
 * stored, and under each d every group picks the best of the three 4-bit
 * codes nearest its own scale. The d whose total error is least wins. */
#include "iq2_xxs_fit.h"

#include "iq2_tables.h"
#include "quants.h"
#include "search.h"

#include "../core/cpu.h"
#include "../core/fp16.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NG KILN_IQ2XXS_GRID

/* Starting scales of a group, as fractions of max|x| / 43 (1.3 * 0.8^k):
 * from "the largest magnitude sits on the top level" down to clipping it
 * hard, which pays when one outlier sits among columns that matter more. */
static const float SEEDS[] = {
    1.3f, 1.04f, 0.832f, 0.6656f, 0.53248f, 0.425984f, 0.3407872f, 0.27262976f, 0.218103808f,
    0.1744830464f,
};
/* Block scales tried, as steps of 2% around (largest group scale) * 8/31. */
#define D_LO (-3)
#define D_HI 2

typedef void (*build_fn)(const float (*dec)[NG], const float *a, const float *w, int odd,
                         float *q2, float *qx2);
typedef void (*best4_fn)(const float (*q2)[NG], const float (*qx2)[NG], float S, float v[4],
                         int g[4]);

struct kiln_iq2xxs_fit {
    float q2[32][NG];  /* per group of 8: sum w G^2 */
    float qx2[32][NG]; /* per group of 8: 2 sum w G a, less the sign-flip cost */
    /* Decoded coordinate i of every grid entry g, as floats, coordinate-
     * major: the kernels score 8 or 16 entries per instruction from it. */
    float dec[8][NG];
    build_fn build;
    best4_fn best4;
};

/* ---- kernels ------------------------------------------------------------ */

static void build_scalar(const float (*dec)[NG], const float *a, const float *w, int odd,
                         float *q2o, float *qx2o) {
    for (int g = 0; g < NG; g++) {
        float q2 = 0, qx = 0, mn = FLT_MAX;
        for (int i = 0; i < 8; i++) {
            float G = dec[i][g];
            float t = w[i] * G;
            q2 += t * G;
            float p = t * a[i];
            qx += p;
            mn = p < mn ? p : mn;
        }
        q2o[g] = q2;
        qx2o[g] = odd ? 2.0f * qx - 4.0f * mn : 2.0f * qx;
    }
}

/* For each of 4 consecutive tables k: max over g of qx2[k][g] - S*q2[k][g]
 * into v[k], the first such g into g[k]. */
static void best4_scalar(const float (*q2)[NG], const float (*qx2)[NG], float S, float v[4],
                         int g[4]) {
    for (int k = 0; k < 4; k++) {
        float best = -FLT_MAX;
        int bg = 0;
        for (int j = 0; j < NG; j++) {
            float t = qx2[k][j] - S * q2[k][j];
            if (t > best) {
                best = t;
                bg = j;
            }
        }
        v[k] = best;
        g[k] = bg;
    }
}

#ifdef KILN_X86
/* The SIMD kernels put one grid entry in each of W lanes (vector type V,
 * integer vector VI, intrinsics prefix P) and otherwise repeat the scalar
 * kernels' operations in the scalar order. The AVX2 and AVX-512 versions
 * share these bodies and differ only in how a lane is kept and how the
 * lanes are merged at the end. */

/* build_scalar, W grid entries at a time. */
#define BUILD_BODY(V, W, P)                                                                   \
    for (int g = 0; g < NG; g += W) {                                                         \
        V q2 = P##_setzero_ps(), qx = P##_setzero_ps(), mn = P##_set1_ps(FLT_MAX);            \
        for (int i = 0; i < 8; i++) {                                                         \
            V G = P##_loadu_ps(&dec[i][g]);                                                   \
            V t = P##_mul_ps(P##_set1_ps(w[i]), G);                                           \
            q2 = P##_add_ps(q2, P##_mul_ps(t, G));                                            \
            V p = P##_mul_ps(t, P##_set1_ps(a[i]));                                           \
            qx = P##_add_ps(qx, p);                                                           \
            mn = P##_min_ps(p, mn); /* p < mn ? p : mn */                                     \
        }                                                                                     \
        V x2 = P##_mul_ps(P##_set1_ps(2.0f), qx);                                             \
        if (odd) x2 = P##_sub_ps(x2, P##_mul_ps(P##_set1_ps(4.0f), mn));                      \
        P##_storeu_ps(q2o + g, q2);                                                           \
        P##_storeu_ps(qx2o + g, x2);                                                          \
    }

/* best4's scan: the 4 tables run as 4 independent chains, in named
 * registers (arrays end up in memory). KEEP(b, i, t) keeps t, and the lane
 * index in i, in the lanes where t > b, so every lane ends with its first
 * maximum. Leaves the chains in bs[4] and their indices in is[4]. */
#define BEST4_T(P, k) P##_sub_ps(P##_loadu_ps(qx2[k] + j), P##_mul_ps(s, P##_loadu_ps(q2[k] + j)))
#define BEST4_SCAN(V, VI, W, P, LANES, KEEP)                                                  \
    const V s = P##_set1_ps(S), lo = P##_set1_ps(-FLT_MAX);                                   \
    VI lane = LANES, i0 = P##_set1_epi32(0), i1 = i0, i2 = i0, i3 = i0;                       \
    V b0 = lo, b1 = lo, b2 = lo, b3 = lo;                                                     \
    for (int j = 0; j < NG; j += W) {                                                         \
        KEEP(b0, i0, BEST4_T(P, 0));                                                          \
        KEEP(b1, i1, BEST4_T(P, 1));                                                          \
        KEEP(b2, i2, BEST4_T(P, 2));                                                          \
        KEEP(b3, i3, BEST4_T(P, 3));                                                          \
        lane = P##_add_epi32(lane, P##_set1_epi32(W));                                        \
    }                                                                                         \
    const V bs[4] = {b0, b1, b2, b3};                                                         \
    const VI is[4] = {i0, i1, i2, i3};

#define KEEP8(b, i, t)                                                                        \
    do {                                                                                      \
        __m256 t_ = (t), gt_ = _mm256_cmp_ps(t_, b, _CMP_GT_OQ);                              \
        b = _mm256_blendv_ps(b, t_, gt_);                                                     \
        i = _mm256_blendv_epi8(i, lane, _mm256_castps_si256(gt_));                            \
    } while (0)

#define KEEP16(b, i, t)                                                                       \
    do {                                                                                      \
        __m512 t_ = (t);                                                                      \
        __mmask16 gt_ = _mm512_cmp_ps_mask(t_, b, _CMP_GT_OQ);                                \
        b = _mm512_mask_mov_ps(b, gt_, t_);                                                   \
        i = _mm512_mask_mov_epi32(i, gt_, lane);                                              \
    } while (0)

KILN_AVX2 static void
build_avx2(const float (*dec)[NG], const float *a, const float *w, int odd, float *q2o,
           float *qx2o) {
    BUILD_BODY(__m256, 8, _mm256)
}

KILN_AVX2 static void
best4_avx2(const float (*q2)[NG], const float (*qx2)[NG], float S, float v[4], int g[4]) {
    BEST4_SCAN(__m256, __m256i, 8, _mm256, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), KEEP8)
    /* lanes merged by (value, then lowest g) */
    for (int k = 0; k < 4; k++) {
        float bv[8];
        int32_t bi[8];
        _mm256_storeu_ps(bv, bs[k]);
        _mm256_storeu_si256((__m256i *)bi, is[k]);
        float m = bv[0];
        int bg = bi[0];
        for (int l = 1; l < 8; l++)
            if (bv[l] > m || (bv[l] == m && bi[l] < bg)) {
                m = bv[l];
                bg = bi[l];
            }
        v[k] = m;
        g[k] = bg;
    }
}

KILN_AVX512 static void
build_avx512(const float (*dec)[NG], const float *a, const float *w, int odd, float *q2o,
             float *qx2o) {
    BUILD_BODY(__m512, 16, _mm512)
}

KILN_AVX512 static void
best4_avx512(const float (*q2)[NG], const float (*qx2)[NG], float S, float v[4], int g[4]) {
    BEST4_SCAN(__m512, __m512i, 16, _mm512,
               _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), KEEP16)
    for (int k = 0; k < 4; k++) {
        float m = _mm512_reduce_max_ps(bs[k]);
        __mmask16 at = _mm512_cmp_ps_mask(bs[k], _mm512_set1_ps(m), _CMP_EQ_OQ);
        v[k] = m;
        g[k] = _mm512_mask_reduce_min_epi32(at, is[k]);
    }
}
#endif

/* ---- scratch ------------------------------------------------------------ */

kiln_iq2xxs_fit *kiln_iq2xxs_fit_new(void) {
    kiln_iq2xxs_fit *f = malloc(sizeof *f);
    if (!f) return NULL;
    for (int g = 0; g < NG; g++)
        for (int i = 0; i < 8; i++) f->dec[i][g] = (float)(uint8_t)(kiln_iq2xxs_grid[g] >> 8 * i);
    f->build = KILN_SIMD_PICK(build);
    f->best4 = KILN_SIMD_PICK(best4);
    return f;
}

void kiln_iq2xxs_fit_free(kiln_iq2xxs_fit *f) {
    free(f);
}

/* ---- the search --------------------------------------------------------- */

/* How much better than nothing group `ib` (4 tables) fits at scale S:
 * the weighted error is const - value. Writes the chosen points to g. */
static float group_value(const kiln_iq2xxs_fit *f, int ib, float S, int g[4]) {
    float v[4];
    f->best4((const float(*)[NG])f->q2[4 * ib], (const float(*)[NG])f->qx2[4 * ib], S, v, g);
    return S * (((v[0] + v[1]) + v[2]) + v[3]);
}

/* The group's best real scale: from each seed, take the points it picks,
 * refit the scale to them, and keep the refit that scores best. 0 if none
 * fits (e.g. all weights zero). */
static float group_scale(const kiln_iq2xxs_fit *f, int ib, float amax) {
    float best_v = 0, best_s = 0, refits[sizeof SEEDS / sizeof SEEDS[0]];
    int nrefits = 0;
    for (size_t c = 0; c < sizeof SEEDS / sizeof SEEDS[0]; c++) {
        int g[4], again = 0;
        group_value(f, ib, amax / 43 * SEEDS[c], g);
        float sx = 0, s2 = 0;
        for (int k = 0; k < 4; k++) {
            sx += f->qx2[4 * ib + k][g[k]];
            s2 += f->q2[4 * ib + k][g[k]];
        }
        if (!(s2 > 0)) continue;
        float s = 0.5f * sx / s2;
        if (!(s > 0)) continue;
        /* Seeds that pick the same points refit to the same s, whose value
         * was already weighed: it cannot beat best_v now. */
        for (int r = 0; r < nrefits; r++) again |= refits[r] == s;
        if (again) continue;
        refits[nrefits++] = s;
        float v = group_value(f, ib, s, g);
        if (v > best_v) {
            best_v = v;
            best_s = s;
        }
    }
    return best_s;
}

/* Best 4-bit scale for group ib under block scale d, starting from the
 * group's own scale s: tries the nearest code and its two neighbours.
 * Writes its value to *value and its points to g. */
static int group_code(const kiln_iq2xxs_fit *f, int ib, float d, float s, float *value, int g[4]) {
    int l0 = kiln_nearest_int(0.5f * (8 * s / d - 1));
    float bv = -FLT_MAX;
    int bl = -1;
    for (int l = l0 - 1; l <= l0 + 1; l++) {
        if (l < 0 || l > 15) continue;
        int gl[4];
        float v = group_value(f, ib, d * (float)(2 * l + 1) / 8, gl);
        if (v > bv) {
            bv = v;
            bl = l;
            memcpy(g, gl, sizeof gl);
        }
    }
    if (bl < 0) { /* s far outside what d can express */
        bl = l0 < 0 ? 0 : 15;
        bv = group_value(f, ib, d * (float)(2 * bl + 1) / 8, g);
    }
    *value = bv;
    return bl;
}

void kiln_iq2xxs_fit_block(kiln_iq2xxs_fit *f, const float *x, const float *w,
                           kiln_block_iq2_xxs *y) {
    float a[KILN_QK_K];
    float amax = 0;
    for (int i = 0; i < KILN_QK_K; i++) {
        a[i] = fabsf(x[i]);
        amax = amax > a[i] ? amax : a[i];
    }
    if (amax < KILN_GROUP_MAX_EPS) {
        memset(y, 0, sizeof *y);
        return;
    }
    for (int k = 0; k < 32; k++) {
        int neg = 0;
        for (int i = 0; i < 8; i++) neg += x[8 * k + i] < 0;
        f->build((const float(*)[NG])f->dec, a + 8 * k, w + 8 * k, neg & 1, f->q2[k], f->qx2[k]);
    }

    float gs[8], gmax[8], smax = 0;
    for (int ib = 0; ib < 8; ib++) {
        gmax[ib] = 0;
        for (int i = 0; i < 32; i++) gmax[ib] = gmax[ib] > a[32 * ib + i] ? gmax[ib] : a[32 * ib + i];
        gs[ib] = group_scale(f, ib, gmax[ib]);
        smax = smax > gs[ib] ? smax : gs[ib];
    }
    if (!(smax > 0)) { /* no weight anywhere: scale by magnitude alone */
        for (int ib = 0; ib < 8; ib++) gs[ib] = gmax[ib] / 43;
        smax = amax / 43;
    }

    /* d = smax * 8/31 gives the largest group code 15; fp16 tops out at 65504. */
    float d0 = fminf(8 * smax / 31, 65504.0f);
    float best_tot = -FLT_MAX;
    uint16_t best_dh = 0, last_dh = 0xffff;
    int best_ls[8] = {0}, best_g[8][4] = {{0}};
    for (int kd = D_LO; kd <= D_HI; kd++) {
        uint16_t dh = kiln_fp32_to_fp16(d0 * (1 + 0.02f * (float)kd));
        float d = kiln_fp16_to_fp32(dh);
        if (dh == last_dh || !(d > 0) || !isfinite(d)) continue;
        last_dh = dh;
        float tot = 0;
        int ls[8], gl[8][4];
        for (int ib = 0; ib < 8; ib++) {
            float v;
            ls[ib] = group_code(f, ib, d, gs[ib], &v, gl[ib]);
            tot += v;
        }
        if (tot > best_tot) {
            best_tot = tot;
            best_dh = dh;
            memcpy(best_ls, ls, sizeof ls);
            memcpy(best_g, gl, sizeof gl);
        }
    }
    if (!best_dh) { /* d underflows fp16: the block is noise around zero */
        memset(y, 0, sizeof *y);
        return;
    }

    uint32_t q2[KILN_QK_K / 16] = {0};
    for (int ib = 0; ib < 8; ib++) {
        const int *g = best_g[ib]; /* the points group_code chose at this d */
        for (int k = 0; k < 4; k++) {
            const int o = 32 * ib + 8 * k;
            uint8_t signs = 0;
            int neg = 0;
            for (int i = 0; i < 8; i++)
                if (x[o + i] < 0) {
                    signs |= (uint8_t)(1 << i);
                    neg++;
                }
            if (neg & 1) { /* flip where it costs least, as the table assumed */
                float mn = FLT_MAX;
                int im = 0;
                for (int i = 0; i < 8; i++) {
                    float p = w[o + i] * f->dec[i][g[k]] * a[o + i];
                    if (p < mn) {
                        mn = p;
                        im = i;
                    }
                }
                signs ^= (uint8_t)(1 << im);
            }
            q2[2 * ib] |= (uint32_t)g[k] << 8 * k;
            q2[2 * ib + 1] |= (uint32_t)(signs & 127) << 7 * k;
        }
        q2[2 * ib + 1] |= (uint32_t)best_ls[ib] << 28;
    }
    y->d = best_dh;
    memcpy(y->qs, q2, sizeof q2);
}
