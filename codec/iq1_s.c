/* codec/iq1_s.c - the IQ1_S codec (1.5625 bits per weight).
 *
 * Block layout: blocks_iq.h. Grid and neighbour lists: iq1_tables.h.
 *
 * The quantizer is ggml's quantize_row_iq1_s_impl step for step, so its
 * blocks are llama.cpp's byte for byte. Per 32 weights, with importance
 * w_i = imatrix_i * sqrt(2 mean(x^2) + x_i^2): the weights sorted by
 * value are split at every pair of boundaries into levels -1, 0, 1 (plus
 * a shift of +1/8 or -1/8), scored from prefix sums (8 splits at once
 * with AVX2 / AVX-512, the same floats), the best split kept;
 * each group of 8 that lands off the grid moves to its best neighbour and
 * the scale is refitted. The 3-bit scales then quantize the 8 groups'
 * scales under one fp16 d (with ggml's fudge factor of 1.125 on d).
 *
 * ggml requires the importance matrix (ggml_quantize_requires_imatrix);
 * so does the codec table. Called without one, this weights every column
 * by 1 (kiln's choice for the reference quantizer; llama.cpp aborts). */
#include "blocks.h"
#include "iq1_search.h"
#include "quants.h"
#include "search.h"

#include "../core/fp16.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#define GROUP 32
#define GROUP_MAX_EPS 1e-12f /* ggml's GROUP_MAX_EPS_IQ1_S: below it a group is zeros */

void kiln_dequantize_row_iq1_s(const void *src, float *dst, int64_t n) {
    const kiln_iq1_tables *t = kiln_iq1_tables_get();
    const kiln_block_iq1_s *x = src;
    for (int64_t b = 0; b < n / KILN_QK_K; b++) {
        const float d = kiln_fp16_to_fp32(x[b].d);
        for (int ib = 0; ib < KILN_QK_K / GROUP; ib++) {
            const uint16_t h = x[b].qh[ib];
            const float dl = d * (float)(2 * ((h >> 12) & 7) + 1);
            const float delta = h & 0x8000 ? -KILN_IQ1_DELTA : KILN_IQ1_DELTA;
            for (int l = 0; l < 4; l++) {
                const uint64_t g = t->grid[x[b].qs[4 * ib + l] | ((h >> 3 * l) & 7) << 8];
                for (int j = 0; j < 8; j++) dst[j] = dl * ((float)(int8_t)(g >> 8 * j) + delta);
                dst += 8;
            }
        }
    }
}

static const float XP[3] = {-1 + KILN_IQ1_DELTA, KILN_IQ1_DELTA, 1 + KILN_IQ1_DELTA};
static const float XM[3] = {-1 - KILN_IQ1_DELTA, -KILN_IQ1_DELTA, 1 - KILN_IQ1_DELTA};

/* The running best of a split search. */
typedef struct split_best {
    float best, scale;
    int b1, b2, shift;
} split_best;

/* ggml's test of one split and shift sign. */
static inline void consider(split_best *b, float sumqx, float sumq2, int i1, int i2, int shift) {
    if (sumq2 > 0 && sumqx * sumqx > b->best * sumq2) {
        b->scale = sumqx / sumq2;
        b->best = b->scale * sumqx;
        b->b1 = i1;
        b->b2 = i2;
        b->shift = shift;
    }
}

/* Every split (i1 <= i2) of the sorted weights into levels -1, 0, 1 with
 * shift + then -, scored from the prefix sums sumx (of w * x) and sumw
 * (of w), each GROUP + 1 long and padded with 15 more readable floats.
 * The SIMD version scores 8 values of i2 at once with ggml's expressions
 * lane by lane, and leaves the scalar test out when no lane passes it
 * against the current best, where it would change nothing. */
typedef void (*split_fn)(const float *sumx, const float *sumw, split_best *b);

static void splits_scalar(const float *sumx, const float *sumw, split_best *b) {
    for (int i1 = 0; i1 <= GROUP; i1++)
        for (int i2 = i1; i2 <= GROUP; i2++)
            for (int s = 0; s < 2; s++) {
                const float *v = s ? XM : XP;
                float sumqx = (sumx[i1] - sumx[0]) * v[0] + (sumx[i2] - sumx[i1]) * v[1] +
                              (sumx[GROUP] - sumx[i2]) * v[2];
                float sumq2 = (sumw[i1] - sumw[0]) * v[0] * v[0] + (sumw[i2] - sumw[i1]) * v[1] * v[1] +
                              (sumw[GROUP] - sumw[i2]) * v[2] * v[2];
                consider(b, sumqx, sumq2, i1, i2, s ? -1 : 1);
            }
}

#ifdef KILN_X86
KILN_AVX2 static void splits_avx2(const float *sumx, const float *sumw, split_best *b) {
    const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    for (int i1 = 0; i1 <= GROUP; i1++)
        for (int c = i1; c <= GROUP; c += 8) {
            const __m256 valid = _mm256_cmp_ps(lane, _mm256_set1_ps((float)(GROUP - c)), _CMP_LE_OQ);
            const __m256 x2 = _mm256_loadu_ps(sumx + c), w2 = _mm256_loadu_ps(sumw + c);
            __m256 qx[2], q2[2], pass = _mm256_setzero_ps();
            for (int s = 0; s < 2; s++) {
                const float *v = s ? XM : XP;
                const __m256 v1 = _mm256_set1_ps(v[1]), v2 = _mm256_set1_ps(v[2]);
                qx[s] = _mm256_add_ps(_mm256_add_ps(_mm256_set1_ps((sumx[i1] - sumx[0]) * v[0]),
                                                    _mm256_mul_ps(_mm256_sub_ps(x2, _mm256_set1_ps(sumx[i1])), v1)),
                                      _mm256_mul_ps(_mm256_sub_ps(_mm256_set1_ps(sumx[GROUP]), x2), v2));
                q2[s] = _mm256_add_ps(
                    _mm256_add_ps(_mm256_set1_ps((sumw[i1] - sumw[0]) * v[0] * v[0]),
                                  _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(w2, _mm256_set1_ps(sumw[i1])), v1), v1)),
                    _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_set1_ps(sumw[GROUP]), w2), v2), v2));
                const __m256 ok = _mm256_and_ps(
                    _mm256_cmp_ps(q2[s], _mm256_setzero_ps(), _CMP_GT_OQ),
                    _mm256_cmp_ps(_mm256_mul_ps(qx[s], qx[s]), _mm256_mul_ps(_mm256_set1_ps(b->best), q2[s]),
                                  _CMP_GT_OQ));
                pass = _mm256_or_ps(pass, ok);
            }
            if (!_mm256_movemask_ps(_mm256_and_ps(pass, valid))) continue;
            float x[2][8], w[2][8];
            for (int s = 0; s < 2; s++) {
                _mm256_storeu_ps(x[s], qx[s]);
                _mm256_storeu_ps(w[s], q2[s]);
            }
            for (int l = 0; l < 8 && c + l <= GROUP; l++)
                for (int s = 0; s < 2; s++) consider(b, x[s][l], w[s][l], i1, c + l, s ? -1 : 1);
        }
}

/* The AVX2 scan; 16 lanes would mostly score splits past GROUP. */
KILN_AVX512 static void splits_avx512(const float *sumx, const float *sumw, split_best *b) {
    splits_avx2(sumx, sumw, b);
}
#endif

/* The best split of one group of 32 (both shift signs): levels to L, the
 * shift sign to *shift (+1 / -1), the scale (>= 0) to *scale. False when
 * nothing fits (the group is then stored as zeros with a + shift). */
static bool best_split(split_fn splits, const float *xb, const float *weight, int8_t *L, int *shift,
                       float *scale_out) {
    int order[GROUP];
    float sumx[GROUP + 16], sumw[GROUP + 16];
    kiln_iq1_sort(xb, GROUP, order);
    sumx[0] = sumw[0] = 0;
    for (int j = 0; j < GROUP; j++) {
        sumx[j + 1] = sumx[j] + weight[order[j]] * xb[order[j]];
        sumw[j + 1] = sumw[j] + weight[order[j]];
    }
    for (int j = GROUP + 1; j < GROUP + 16; j++) sumx[j] = sumw[j] = 0; /* lanes past the end */
    split_best b = {-FLT_MAX, 0, -1, -1, 0};
    splits(sumx, sumw, &b);
    if (b.b1 < 0) return false;
    for (int j = 0; j < GROUP; j++) L[order[j]] = (int8_t)(j < b.b1 ? 0 : j < b.b2 ? 1 : 2);
    if (b.scale < 0) {
        for (int j = 0; j < GROUP; j++) L[j] = (int8_t)(2 - L[j]);
        b.scale = -b.scale;
        b.shift = -b.shift;
    }
    *shift = b.shift;
    *scale_out = b.scale;
    return true;
}

typedef struct search_ctx {
    const kiln_iq1_tables *t;
    split_fn splits;
} search_ctx;

/* One super-block (a kiln_block_quantizer; ctx is a search_ctx). */
static void quantize_block(const float *xbl, const float *qw, void *dst, const void *ctx) {
    const search_ctx *c = ctx;
    const kiln_iq1_tables *t = c->t;
    kiln_block_iq1_s *y = dst;
    memset(y, 0, sizeof *y);
    float scales[KILN_QK_K / GROUP], weight[GROUP], max_scale = 0;
    int shifts[KILN_QK_K / GROUP];
    float sumx2 = 0;
    for (int i = 0; i < KILN_QK_K; i++) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = 2 * sumx2 / KILN_QK_K;

    for (int ib = 0; ib < KILN_QK_K / GROUP; ib++) {
        const float *xb = xbl + GROUP * ib;
        for (int i = 0; i < GROUP; i++) weight[i] = (qw ? qw[GROUP * ib + i] : 1.f) * sqrtf(sigma2 + xb[i] * xb[i]);
        float max = fabsf(xb[0]);
        for (int i = 1; i < GROUP; i++) max = fmaxf(max, fabsf(xb[i]));
        scales[ib] = 0;
        shifts[ib] = 1;
        int8_t L[GROUP];
        int shift;
        float scale;
        if (max < GROUP_MAX_EPS || !best_split(c->splits, xb, weight, L, &shift, &scale)) continue;
        const float *v = shift == 1 ? XP : XM;
        uint16_t index[4];
        bool moved = false;
        for (int k = 0; k < 4; k++)
            index[k] = (uint16_t)kiln_iq1_to_grid(t, L + 8 * k, xb + 8 * k, weight + 8 * k, scale, v, &moved);
        if (moved) {
            float sumqx = 0, sumq2 = 0;
            for (int k = 0; k < 4; k++)
                for (int j = 0; j < 8; j++) {
                    float w = weight[8 * k + j], q = v[t->level[index[k]][j]];
                    sumqx += w * q * xb[8 * k + j];
                    sumq2 += w * q * q;
                }
            if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
        }
        uint16_t h = 0;
        for (int k = 0; k < 4; k++) {
            y->qs[4 * ib + k] = (uint8_t)(index[k] & 255);
            h |= (uint16_t)((index[k] >> 8) << 3 * k);
        }
        y->qh[ib] = h;
        scales[ib] = scale;
        shifts[ib] = shift;
        max_scale = fmaxf(max_scale, scale);
    }
    if (!max_scale) return;
    const float d = max_scale / 15;
    y->d = kiln_fp32_to_fp16(d * 1.125f);
    const float id = 1 / d;
    for (int ib = 0; ib < KILN_QK_K / GROUP; ib++) {
        int l = kiln_nearest_int(0.5f * (id * scales[ib] - 1));
        l = l < 0 ? 0 : l > 7 ? 7 : l;
        if (shifts[ib] == -1) l |= 8;
        y->qh[ib] |= (uint16_t)(l << 12);
    }
}

size_t kiln_quantize_iq1_s(const float *src, void *dst, int64_t nrows, int64_t n_per_row, const float *imatrix) {
    const search_ctx c = {kiln_iq1_search_tables(), KILN_SIMD_PICK(splits)};
    if (!c.t) return 0;
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK_K, sizeof(kiln_block_iq1_s),
                                quantize_block, &c);
}

void kiln_quantize_row_iq1_s_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_iq1_s(src, dst, 1, n, NULL);
}
