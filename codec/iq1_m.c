/* codec/iq1_m.c - the IQ1_M codec (1.75 bits per weight).
 *
 * Block layout: blocks_iq.h. Grid and neighbour lists: iq1_tables.h.
 *
 * The quantizer is ggml's quantize_row_iq1_m_impl step for step, so its
 * blocks are llama.cpp's byte for byte. As IQ1_S (iq1_s.c) but per 16
 * weights, with a shift sign per 8: the exhaustive split search scores
 * the four sign pairs of the two groups of 8 at once. Its sums are not
 * prefix sums (ggml adds each weight's term in sorted order, per split),
 * so the search keeps ggml's running order but shares the sums of the
 * first two segments between splits, which gives the same floats; the
 * AVX2 / AVX-512 scan adds the 8 sums of a split in one register. The
 * super-block scale is then refitted to the chosen points and 3-bit
 * scales (times ggml's 1.1125 fudge factor) and spread over the scale
 * words' top nibbles.
 *
 * Without an importance matrix the weights are x^2 (ggml accepts none;
 * llama-quantize still asks for one except for token_embd and output). */
#include "blocks.h"
#include "iq1_search.h"
#include "quants.h"
#include "search.h"

#include "../core/fp16.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#define GROUP 16
#define GROUP_MAX_EPS 1e-7f /* ggml's GROUP_MAX_EPS_IQ1_M: below it a group is zeros */

static const float XP[3] = {-1 + KILN_IQ1_DELTA, KILN_IQ1_DELTA, 1 + KILN_IQ1_DELTA};
static const float XM[3] = {-1 - KILN_IQ1_DELTA, -KILN_IQ1_DELTA, 1 - KILN_IQ1_DELTA};

/* The scale word w of a block (little-endian uint16). */
static uint16_t scale_word(const kiln_block_iq1_m *b, int w) {
    return (uint16_t)(b->scales[2 * w] | b->scales[2 * w + 1] << 8);
}

/* Grid index of group g (0..31) of a block. */
static int group_index(const kiln_block_iq1_m *b, int g) {
    return b->qs[g] | (b->qh[g / 2] >> 4 * (g % 2) & 7) << 8;
}

void kiln_dequantize_row_iq1_m(const void *src, float *dst, int64_t n) {
    const kiln_iq1_tables *t = kiln_iq1_tables_get();
    const kiln_block_iq1_m *x = src;
    for (int64_t b = 0; b < n / KILN_QK_K; b++) {
        uint16_t sc[4];
        for (int w = 0; w < 4; w++) sc[w] = scale_word(&x[b], w);
        const float d = kiln_fp16_to_fp32((kiln_half)((sc[0] >> 12) | (sc[1] >> 8 & 0x00f0) |
                                                      (sc[2] >> 4 & 0x0f00) | (sc[3] & 0xf000)));
        for (int g = 0; g < KILN_QK_K / 8; g++) {
            const int s = sc[g / 8] >> 3 * (g / 2 % 4) & 7;
            const float dl = d * (float)(2 * s + 1);
            const float delta = x[b].qh[g / 2] & (0x08 << 4 * (g % 2)) ? -KILN_IQ1_DELTA : KILN_IQ1_DELTA;
            const uint64_t grid = t->grid[group_index(&x[b], g)];
            for (int j = 0; j < 8; j++) dst[j] = dl * ((float)(int8_t)(grid >> 8 * j) + delta);
            dst += 8;
        }
    }
}

/* A split's sums for the four sign pairs (k = 0: +,+  1: +,-  2: -,+
 * 3: -,-, for the first group of 8 then the second): sumqx[k] in [k],
 * sumq2[k] in [4 + k]. */
typedef float sums8[8];

/* T[j][lv]: what weight order[j] at level lv adds to the sums, each term
 * formed with ggml's operands in ggml's order. */
static void make_terms(const float *xb, const float *weight, const int *order, sums8 T[GROUP][3]) {
    for (int j = 0; j < GROUP; j++) {
        const int i = order[j];
        const bool first = i < GROUP / 2;
        const float w = weight[i], x = xb[i];
        for (int lv = 0; lv < 3; lv++) {
            const float px = w * XP[lv] * x, mx = w * XM[lv] * x;
            const float p2 = w * XP[lv] * XP[lv], m2 = w * XM[lv] * XM[lv];
            float *t = T[j][lv];
            t[0] = px, t[1] = first ? px : mx, t[2] = first ? mx : px, t[3] = mx;
            t[4] = p2, t[5] = first ? p2 : m2, t[6] = first ? m2 : p2, t[7] = m2;
        }
    }
}

/* The running best of a split search. */
typedef struct split_best {
    float best, scale;
    int b1, b2, k;
} split_best;

/* ggml's test of the four pairs of one split, in k order. */
static void consider(split_best *b, const float *S, int i1, int i2) {
    for (int k = 0; k < 4; k++)
        if (S[4 + k] > 0 && S[k] * S[k] > b->best * S[4 + k]) {
            b->scale = S[k] / S[4 + k];
            b->best = b->scale * S[k];
            b->b1 = i1;
            b->b2 = i2;
            b->k = k;
        }
}

/* Every split (i1 <= i2): levels 0 for order[0..i1), 1 for [i1, i2), 2
 * for the rest. ggml sums each split's terms from zero in sorted order;
 * the sums of the first two segments are shared between splits (the same
 * additions in the same order), the third is added per split. The SIMD
 * versions add all 8 sums in one register (lane-wise, the same floats)
 * and skip the scalar test when no pair passes it against the current
 * best, where it would change nothing. */
typedef void (*split_fn)(const sums8 T[GROUP][3], split_best *b);

static void splits_scalar(const sums8 T[GROUP][3], split_best *b) {
    float A[8] = {0};
    for (int i1 = 0; i1 <= GROUP; i1++) {
        float B[8];
        memcpy(B, A, sizeof B);
        for (int i2 = i1; i2 <= GROUP; i2++) {
            float S[8];
            memcpy(S, B, sizeof S);
            for (int j = i2; j < GROUP; j++)
                for (int l = 0; l < 8; l++) S[l] += T[j][2][l];
            consider(b, S, i1, i2);
            if (i2 < GROUP)
                for (int l = 0; l < 8; l++) B[l] += T[i2][1][l];
        }
        if (i1 < GROUP)
            for (int l = 0; l < 8; l++) A[l] += T[i1][0][l];
    }
}

#ifdef KILN_X86
KILN_AVX2 static void splits_avx2(const sums8 T[GROUP][3], split_best *b) {
    __m256 A = _mm256_setzero_ps();
    for (int i1 = 0; i1 <= GROUP; i1++) {
        __m256 B = A;
        for (int i2 = i1; i2 <= GROUP; i2++) {
            __m256 S = B;
            for (int j = i2; j < GROUP; j++) S = _mm256_add_ps(S, _mm256_loadu_ps(T[j][2]));
            const __m128 qx = _mm256_castps256_ps128(S), q2 = _mm256_extractf128_ps(S, 1);
            const __m128 pass = _mm_and_ps(_mm_cmpgt_ps(q2, _mm_setzero_ps()),
                                           _mm_cmpgt_ps(_mm_mul_ps(qx, qx), _mm_mul_ps(_mm_set1_ps(b->best), q2)));
            if (_mm_movemask_ps(pass)) {
                float s[8];
                _mm256_storeu_ps(s, S);
                consider(b, s, i1, i2);
            }
            if (i2 < GROUP) B = _mm256_add_ps(B, _mm256_loadu_ps(T[i2][1]));
        }
        if (i1 < GROUP) A = _mm256_add_ps(A, _mm256_loadu_ps(T[i1][0]));
    }
}

/* Eight sums fill one AVX2 register: AVX-512 has nothing to add. */
KILN_AVX512 static void splits_avx512(const sums8 T[GROUP][3], split_best *b) {
    splits_avx2(T, b);
}
#endif

/* The best split of one group of 16 and its sign pair: levels to L, the
 * pair to *pair, the scale (>= 0) to *scale. False when nothing fits. */
static bool best_split(split_fn splits, const float *xb, const float *weight, int8_t *L, int *pair,
                       float *scale_out) {
    int order[GROUP];
    sums8 T[GROUP][3];
    kiln_iq1_sort(xb, GROUP, order);
    make_terms(xb, weight, order, T);
    split_best b = {-FLT_MAX, 0, -1, -1, -1};
    splits((const sums8(*)[3])T, &b);
    if (b.b1 < 0) return false;
    for (int j = 0; j < GROUP; j++) L[order[j]] = (int8_t)(j < b.b1 ? 0 : j < b.b2 ? 1 : 2);
    if (b.scale < 0) {
        for (int j = 0; j < GROUP; j++) L[j] = (int8_t)(2 - L[j]);
        b.scale = -b.scale;
        b.k = 3 - b.k;
    }
    *pair = b.k;
    *scale_out = b.scale;
    return true;
}

/* The shift values of group k (0, 1) of a 16-weight sub-block with sign pair `pair`. */
static const float *pair_shift(int pair, int k) {
    return (k == 0 ? pair < 2 : pair % 2 == 0) ? XP : XM;
}

static void importance(const float *xb, const float *qw, float sigma2, float *weight) {
    for (int i = 0; i < GROUP; i++) weight[i] = qw ? qw[i] * sqrtf(sigma2 + xb[i] * xb[i]) : xb[i] * xb[i];
}

typedef struct search_ctx {
    const kiln_iq1_tables *t;
    split_fn splits;
} search_ctx;

/* One super-block (a kiln_block_quantizer; ctx is a search_ctx). */
static void quantize_block(const float *xbl, const float *qw, void *dst, const void *ctx) {
    static const uint8_t PAIR_BITS[4] = {0x00, 0x80, 0x08, 0x88};
    const search_ctx *c = ctx;
    const kiln_iq1_tables *t = c->t;
    kiln_block_iq1_m *y = dst;
    memset(y, 0, sizeof *y);
    float scales[KILN_QK_K / GROUP], weight[GROUP], max_scale = 0;
    int pairs[KILN_QK_K / GROUP];
    float sumx2 = 0;
    for (int i = 0; i < KILN_QK_K; i++) sumx2 += xbl[i] * xbl[i];
    const float sigma2 = 2 * sumx2 / KILN_QK_K;

    for (int ib = 0; ib < KILN_QK_K / GROUP; ib++) {
        const float *xb = xbl + GROUP * ib;
        importance(xb, qw ? qw + GROUP * ib : NULL, sigma2, weight);
        float max = fabsf(xb[0]);
        for (int i = 1; i < GROUP; i++) max = fmaxf(max, fabsf(xb[i]));
        scales[ib] = 0;
        pairs[ib] = 0;
        int8_t L[GROUP];
        int pair;
        float scale;
        if (max < GROUP_MAX_EPS || !best_split(c->splits, xb, weight, L, &pair, &scale)) continue;
        uint16_t index[2];
        bool moved = false;
        for (int k = 0; k < 2; k++)
            index[k] = (uint16_t)kiln_iq1_to_grid(t, L + 8 * k, xb + 8 * k, weight + 8 * k, scale,
                                                  pair_shift(pair, k), &moved);
        if (moved) {
            float sumqx = 0, sumq2 = 0;
            for (int k = 0; k < 2; k++) {
                const float *v = pair_shift(pair, k);
                for (int j = 0; j < 8; j++) {
                    float w = weight[8 * k + j], q = v[t->level[index[k]][j]];
                    sumqx += w * q * xb[8 * k + j];
                    sumq2 += w * q * q;
                }
            }
            if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
        }
        y->qs[2 * ib] = (uint8_t)(index[0] & 255);
        y->qs[2 * ib + 1] = (uint8_t)(index[1] & 255);
        y->qh[ib] = (uint8_t)((index[0] >> 8) | (index[1] >> 8) << 4);
        scales[ib] = scale;
        pairs[ib] = pair;
        max_scale = fmaxf(max_scale, scale);
    }
    if (!max_scale) return;

    uint16_t sc[4] = {0};
    float d = max_scale / 15;
    const float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int ib = 0; ib < KILN_QK_K / GROUP; ib++) {
        int l = kiln_nearest_int(0.5f * (id * scales[ib] - 1));
        l = l < 0 ? 0 : l > 7 ? 7 : l;
        sc[ib / 4] |= (uint16_t)(l << 3 * (ib % 4));
        y->qh[ib] |= PAIR_BITS[pairs[ib]];
        const float *xb = xbl + GROUP * ib;
        importance(xb, qw ? qw + GROUP * ib : NULL, sigma2, weight);
        for (int k = 0; k < 2; k++) {
            const float *v = pair_shift(pairs[ib], k);
            const uint8_t *lv = t->level[group_index(y, 2 * ib + k)];
            for (int j = 0; j < 8; j++) {
                float w = weight[8 * k + j], q = v[lv[j]] * (float)(2 * l + 1);
                sumqx += w * q * xb[8 * k + j];
                sumq2 += w * q * q;
            }
        }
    }
    if (sumq2 > 0) d = sumqx / sumq2;
    const uint16_t dh = kiln_fp32_to_fp16(d * 1.1125f);
    sc[0] |= (uint16_t)((dh & 0x000f) << 12);
    sc[1] |= (uint16_t)((dh & 0x00f0) << 8);
    sc[2] |= (uint16_t)((dh & 0x0f00) << 4);
    sc[3] |= (uint16_t)(dh & 0xf000);
    for (int w = 0; w < 4; w++) {
        y->scales[2 * w] = (uint8_t)sc[w];
        y->scales[2 * w + 1] = (uint8_t)(sc[w] >> 8);
    }
}

size_t kiln_quantize_iq1_m(const float *src, void *dst, int64_t nrows, int64_t n_per_row, const float *imatrix) {
    const search_ctx c = {kiln_iq1_search_tables(), KILN_SIMD_PICK(splits)};
    if (!c.t) return 0;
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK_K, sizeof(kiln_block_iq1_m),
                                quantize_block, &c);
}

void kiln_quantize_row_iq1_m_ref(const float *src, void *dst, int64_t n) {
    kiln_quantize_iq1_m(src, dst, 1, n, NULL);
}
