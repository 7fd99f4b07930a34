/* codec/iq2_xxs.c - the IQ2_XXS codec (2.0625 bits per weight).
 *
 * Block layout: blocks_iq.h. Codebooks: iq2_tables.h.
 *
 * Dequantizing is a table lookup; every product is exact in fp32, so the
 * AVX2 / AVX-512 paths equal the scalar one (and llama.cpp) trivially.
 *
 * Two searches:
 *
 * kiln_quantize_iq2_xxs_ggml follows ggml's quantize_row_iq2_xxs_impl step
 * for step, so its blocks are llama.cpp's byte for byte: per group of 32,
 * signs are split off (keeping an even count of negatives), 13 candidate
 * scales each round every 8 magnitudes to the nearest point of the
 * 3-level lattice and, when that point is not one of the 256 grid entries,
 * scan its precomputed neighbours for the best weighted fit; the best
 * scale is then refitted once. The steps it shares with IQ2_XS and IQ2_S
 * are in iq2_search.c, the neighbour scan (the hot loop, with SIMD
 * versions) in iq2_scan.c; the sign split, shared with IQ3 too, in
 * grid_search.c.
 *
 * kiln_quantize_iq2_xxs (the codec's default) runs that search and kiln's
 * full-grid search (iq2_xxs_fit.c) on every row and keeps, block by block,
 * whichever gives the row the lower imatrix-weighted error without raising
 * its plain error above ggml's. So it is never worse than llama.cpp on
 * either measure, row by row, and usually 5-15% better. */
#include "blocks.h"
#include "iq2_search.h"
#include "iq2_tables.h"
#include "iq2_xxs_fit.h"
#include "quants.h"
#include "search.h"

#include "../core/cpu.h"
#include "../core/fp16.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- dequantization ---------------------------------------------------- */

static void dequant_scalar(const kiln_block_iq2_xxs *x, float *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const float d = kiln_fp16_to_fp32(x[b].d);
        for (int g = 0; g < KILN_QK_K / 32; g++) {
            uint32_t w[2];
            memcpy(w, x[b].qs + 4 * g, 8);
            const float db = d * (0.5f + (float)(w[1] >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++) {
                const uint64_t grid = kiln_iq2xxs_grid[(w[0] >> 8 * l) & 255];
                const uint8_t signs = kiln_iq2_signs[(w[1] >> 7 * l) & 127];
                for (int j = 0; j < 8; j++)
                    y[j] = db * (float)(uint8_t)(grid >> 8 * j) * (signs >> j & 1 ? -1.f : 1.f);
                y += 8;
            }
        }
    }
}

#ifdef KILN_X86
KILN_AVX2 static void dequant_avx2(const kiln_block_iq2_xxs *x, float *y, int64_t nb) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (int64_t b = 0; b < nb; b++) {
        const float d = kiln_fp16_to_fp32(x[b].d);
        for (int g = 0; g < KILN_QK_K / 32; g++) {
            uint32_t w[2];
            memcpy(w, x[b].qs + 4 * g, 8);
            const __m256 db = _mm256_set1_ps(d * (0.5f + (float)(w[1] >> 28)) * 0.25f);
            for (int l = 0; l < 4; l++) {
                __m128i g8 = _mm_cvtsi64_si128((long long)kiln_iq2xxs_grid[(w[0] >> 8 * l) & 255]);
                __m256 v = _mm256_mul_ps(db, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(g8)));
                __m256i s = _mm256_set1_epi32(kiln_iq2_signs[(w[1] >> 7 * l) & 127]);
                __m256i neg = _mm256_cmpeq_epi32(_mm256_and_si256(s, bit), bit);
                /* x * -1.f is exactly a flip of the sign bit */
                v = _mm256_xor_ps(v, _mm256_castsi256_ps(_mm256_slli_epi32(neg, 31)));
                _mm256_storeu_ps(y, v);
                y += 8;
            }
        }
    }
}

KILN_AVX512 static void dequant_avx512(const kiln_block_iq2_xxs *x, float *y, int64_t nb) {
    const __m512 minus0 = _mm512_set1_ps(-0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const float d = kiln_fp16_to_fp32(x[b].d);
        for (int g = 0; g < KILN_QK_K / 32; g++) {
            uint32_t w[2];
            memcpy(w, x[b].qs + 4 * g, 8);
            const __m512 db = _mm512_set1_ps(d * (0.5f + (float)(w[1] >> 28)) * 0.25f);
            for (int l = 0; l < 4; l += 2) {
                __m128i g16 = _mm_set_epi64x((long long)kiln_iq2xxs_grid[(w[0] >> 8 * (l + 1)) & 255],
                                             (long long)kiln_iq2xxs_grid[(w[0] >> 8 * l) & 255]);
                __m512 v = _mm512_mul_ps(db, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(g16)));
                __mmask16 neg = (__mmask16)(kiln_iq2_signs[(w[1] >> 7 * l) & 127] |
                                            kiln_iq2_signs[(w[1] >> 7 * (l + 1)) & 127] << 8);
                v = _mm512_mask_xor_ps(v, neg, v, minus0);
                _mm512_storeu_ps(y, v);
                y += 16;
            }
        }
    }
}
#endif

void kiln_dequantize_row_iq2_xxs(const void *src, float *dst, int64_t n) {
    KILN_SIMD_PICK(dequant)(src, dst, n / KILN_QK_K);
}

/* ---- the ggml-compatible search ----------------------------------------- */

/* One group of 32: chooses grid points (written to gidx[4]) and returns the
 * group's scale (>= 0), flipping `signs` if the fit came out negative and
 * clearing them when the group is stored as zero. */
static float search_group(const kiln_iq2_ctx *c, const float *xval, const float *weight,
                          const float *waux, uint8_t gidx[4], uint8_t signs[4]) {
    int8_t L[32], Laux[32];
    uint8_t Lqp[32];
    float max = xval[0];
    for (int i = 1; i < 32; i++) max = max > xval[i] ? max : xval[i];
    if (max < KILN_GROUP_MAX_EPS) { /* ggml leaves such a group all zero bits */
        memset(gidx, 0, 4);
        memset(signs, 0, 4);
        return 0;
    }
    float scale = kiln_make_qp_quants(32, 4, xval, Lqp, weight);
    float eff_max = scale * 3;
    float best = 0;
    int have = 0; /* L holds grid points */
    int8_t Lprev[32];
    for (int is = -6; is <= 6; ++is) {
        float id = (5 + is * 0.1f) / eff_max;
        float this_scale = 1 / id;
        for (int k = 0; k < 4; k++)
            kiln_iq2_to_grid(c, xval + 8 * k, waux + 8 * k, id, this_scale, Laux + 8 * k, NULL);
        /* The same points as the scale before give the same sums, and the
         * test below then leaves (or puts) exactly what it did: skip it. */
        if (is > -6 && !memcmp(Laux, Lprev, 32)) continue;
        memcpy(Lprev, Laux, 32);
        float sumqx, sumq2;
        kiln_grid_lattice_sums(32, xval, weight, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, 32);
            have = 1;
        }
    }
    if (scale > 0) {
        float id = 1 / scale;
        for (int k = 0; k < 4; k++)
            gidx[k] = (uint8_t)kiln_iq2_to_grid(c, xval + 8 * k, waux + 8 * k, id, scale, L + 8 * k, NULL);
        float sumqx, sumq2;
        kiln_grid_lattice_sums(32, xval, weight, L, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
        have = 1;
    } else if (have) {
        for (int k = 0; k < 4; k++) {
            uint32_t key = 0;
            for (int i = 0; i < 8; i++) key |= (uint32_t)L[8 * k + i] << 2 * i;
            gidx[k] = (uint8_t)c->s->map[key];
        }
    }
    if (!have || isnan(scale)) {
        /* ggml aborts here (all weights zero): an empty group is kinder. */
        memset(gidx, 0, 4);
        memset(signs, 0, 4);
        return 0;
    }
    if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < 4; k++) signs[k] = (uint8_t)(~signs[k] & 127);
    }
    return scale;
}

/* One block (a kiln_block_quantizer; ctx is the kiln_iq2_ctx). */
static void quantize_block(const float *xbl, const float *qw, void *dst, const void *ctx) {
    const kiln_iq2_ctx *c = ctx;
    kiln_block_iq2_xxs *y = dst;
    float scales[KILN_QK_K / 32];
    uint32_t q2[KILN_QK_K / 16];
    float weight[32], waux[32], xval[32];
    memset(q2, 0, sizeof q2);

    float sumx2 = 0;
    for (int i = 0; i < KILN_QK_K; i++) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = sumx2 / KILN_QK_K;
    float max_scale = 0;
    for (int ib = 0; ib < KILN_QK_K / 32; ib++) {
        const float *xb = xbl + 32 * ib;
        kiln_importance_weights(32, xb, qw ? qw + 32 * ib : NULL, sigma2, weight);
        for (int i = 0; i < 32; i++) waux[i] = sqrtf(weight[i]);
        uint8_t signs[4], gidx[4];
        kiln_grid_split_signs(4, xb, weight, xval, signs);
        float scale = search_group(c, xval, weight, waux, gidx, signs);
        for (int k = 0; k < 4; k++) {
            q2[2 * ib] |= (uint32_t)gidx[k] << 8 * k;
            q2[2 * ib + 1] |= (uint32_t)signs[k] << 7 * k;
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) {
        memset(y, 0, sizeof *y);
        return;
    }
    float d = max_scale / 31;
    y->d = kiln_fp32_to_fp16(d);
    float id = 1 / d;
    for (int ib = 0; ib < KILN_QK_K / 32; ib++) {
        int l = kiln_nearest_int(0.5f * (id * scales[ib] - 1));
        l = l < 0 ? 0 : l > 15 ? 15 : l;
        q2[2 * ib + 1] |= (uint32_t)l << 28;
    }
    memcpy(y->qs, q2, sizeof q2);
}

/* ---- entry points ------------------------------------------------------- */

/* llama.cpp's blocks (see quants.h for the arguments). Returns the bytes
 * written, or 0 with dst zeroed if the neighbour map could not be built
 * (out of memory). imatrix NULL means unit weights. */
size_t kiln_quantize_iq2_xxs_ggml(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                                  const float *imatrix) {
    kiln_iq2_ctx c;
    if (kiln_iq2_ctx_init(&c, KILN_IQ2_GRID_XXS)) /* out of memory building the map */
        return kiln_quantize_nothing(dst, nrows, n_per_row, KILN_QK_K, sizeof(kiln_block_iq2_xxs));
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK_K,
                                sizeof(kiln_block_iq2_xxs), quantize_block, &c);
}

/* ggml has no reference quantizer for IQ2_XXS (it requires weights); the
 * ggml-compatible search with unit weights is the natural stand-in. */
void kiln_quantize_row_iq2_xxs_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_iq2_xxs_ggml(src, dst, 1, n, NULL);
}

/* kiln's search minimizes sum (imatrix/mean(imatrix) + FIT_ALPHA) * err^2:
 * mostly the imatrix-weighted error, plus enough of the plain error that
 * columns the calibration text barely touched are not given up entirely. */
#define FIT_ALPHA 0.1f

typedef struct row_errs {
    double r, w; /* sum err^2, sum imatrix * err^2 */
} row_errs;

static row_errs block_errs(const kiln_block_iq2_xxs *b, const float *x, const float *qw) {
    float y[KILN_QK_K];
    kiln_dequantize_row_iq2_xxs(b, y, KILN_QK_K);
    row_errs e = {0, 0};
    for (int i = 0; i < KILN_QK_K; i++) {
        double d = (double)x[i] - y[i];
        e.r += d * d;
        e.w += (qw ? qw[i] : 1.0) * d * d;
    }
    /* ggml's fp16 d overflows once |x| nears 1e7; such a block loses. */
    if (!isfinite(e.r) || !isfinite(e.w)) e.r = e.w = INFINITY;
    return e;
}

/* Chooses per block between ggml's encoding (a) and kiln's (b) so that the
 * row's imatrix-weighted error is least while its plain error stays within
 * ggml's; writes 1 to pick[] for kiln's. Both sums are then no worse than
 * llama.cpp's, row by row, hence for the whole tensor. Lagrangian sweep:
 * a block takes b when w_b + lambda r_b < w_a + lambda r_a. */
static void choose_blocks(const row_errs *ea, const row_errs *eb, int64_t nb, uint8_t *pick,
                          uint8_t *scratch) {
    double ra = 0, wa = 0;
    for (int64_t b = 0; b < nb; b++) {
        ra += ea[b].r;
        wa += ea[b].w;
        pick[b] = 0;
    }
    double best_w = wa, unit = ra > 0 ? wa / ra : 1;
    for (int li = -1; li < 48; li++) {
        double lambda = li < 0 ? 0 : unit * pow(2.0, (li - 24) * 0.5);
        double sr = 0, sw = 0;
        for (int64_t b = 0; b < nb; b++) {
            scratch[b] = eb[b].w + lambda * eb[b].r < ea[b].w + lambda * ea[b].r;
            sr += scratch[b] ? eb[b].r : ea[b].r;
            sw += scratch[b] ? eb[b].w : ea[b].w;
        }
        if (sr <= ra && sw < best_w) {
            best_w = sw;
            memcpy(pick, scratch, (size_t)nb);
        }
    }
}

size_t kiln_quantize_iq2_xxs(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                             const float *imatrix) {
    int64_t nb = n_per_row / KILN_QK_K;
    kiln_block_iq2_xxs *y = dst;
    kiln_iq2xxs_fit *fit = kiln_iq2xxs_fit_new();
    kiln_block_iq2_xxs *alt = malloc((size_t)nb * sizeof *alt);
    row_errs *errs = malloc((size_t)nb * 2 * sizeof *errs);
    uint8_t *pick = malloc((size_t)nb * 2);
    float *w = malloc((size_t)n_per_row * sizeof *w);
    /* Without memory for kiln's search, ggml's alone is still correct. */
    size_t bytes = kiln_quantize_iq2_xxs_ggml(src, dst, nrows, n_per_row, imatrix);
    if (fit && alt && errs && pick && w && bytes) {
        double mean = 0;
        for (int64_t i = 0; i < n_per_row; i++) mean += imatrix ? imatrix[i] : 1.0;
        mean /= (double)n_per_row;
        float inv = mean > 0 && isfinite(mean) ? (float)(1 / mean) : 1.0f;
        for (int64_t i = 0; i < n_per_row; i++) w[i] = (imatrix ? imatrix[i] : 1.0f) * inv + FIT_ALPHA;
        for (int64_t r = 0; r < nrows; r++) {
            const float *x = src + r * n_per_row;
            kiln_block_iq2_xxs *yr = y + r * nb;
            for (int64_t b = 0; b < nb; b++) {
                const float *xb = x + b * KILN_QK_K, *qb = imatrix ? imatrix + b * KILN_QK_K : NULL;
                kiln_iq2xxs_fit_block(fit, xb, w + b * KILN_QK_K, &alt[b]);
                errs[b] = block_errs(&yr[b], xb, qb);
                errs[nb + b] = block_errs(&alt[b], xb, qb);
            }
            choose_blocks(errs, errs + nb, nb, pick, pick + nb);
            for (int64_t b = 0; b < nb; b++)
                if (pick[b]) yr[b] = alt[b];
        }
    }
    kiln_iq2xxs_fit_free(fit);
    free(alt);
    free(errs);
    free(pick);
    free(w);
    return bytes;
}
