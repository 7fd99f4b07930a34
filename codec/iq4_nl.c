/* codec/iq4_nl.c - IQ4_NL: 32 weights as 4-bit indices into a fixed
 * non-linear table, times one fp16 scale (block layout in blocks_legacy.h).
 *
 * The quantizer is ggml's quantize_row_iq4_nl_impl for one 32-weight
 * block: weights x^2 (or imatrix * sqrt(sigma2 + x^2)), a first scale that
 * maps the largest |x| onto the table's end, then 15 more candidate scales
 * (-(127 + k) / max for k = -7..7); the one with the best weighted fit wins
 * and the indices are recomputed for it. ggml_quantize_chunk always runs
 * this search, with or without an imatrix; the row reference (ggml's
 * quantize_row_iq4_nl_ref) keeps only the first guess.
 *
 * Picking a table entry is the cost. ggml binary-searches with branches;
 * kiln's SIMD paths instead compare against the exact float thresholds at
 * which ggml's choice changes (checked once per call against the scalar
 * rule, so "nearest, ties up" is reproduced bit for bit) and evaluate all
 * 16 candidate scales at once, one per lane, each lane summing over the
 * block in ggml's order. The winner is then chosen by the scalar rule.
 * IQ4_XS (iq4_xs.c) runs the same search per 32-weight sub-block, through
 * kiln_iq4_search_init / kiln_iq4_block_scale (iq4_search.h). */
#include "blocks.h"
#include "quants.h"
#include "iq4_search.h"
#include "search.h"

#include "../core/cpu.h"
#include "../core/fp16.h"

#include <math.h>
#include <string.h>

const int8_t kiln_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

#define NTRY 7   /* candidate scales either side of the first */
#define NCAND 16 /* the first guess and the 2 * NTRY + 1 tries */

/* ggml's best_index_int8 over the table: nearest entry, ties to the upper
 * one, decided by comparing the two float differences. */
static inline int nearest_index(float x) {
    const int8_t *v = kiln_iq4nl_values;
    if (x <= v[0]) return 0;
    if (x >= v[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (x < v[mid]) hi = mid;
        else lo = mid;
    }
    return x - v[lo] < v[hi] - x ? lo : hi;
}
/* kiln_iq4_tables (iq4_search.h): thr[i] (i >= 1) is the least float whose
 * nearest_index is i or more, so nearest_index(x) = #{i >= 1 : x >= thr[i]}. */

/* Floats in increasing order as increasing integers. */
static inline int32_t float_key(float f) {
    uint32_t u = kiln_f32_bits(f);
    return u & 0x80000000u ? -(int32_t)(u & 0x7fffffff) : (int32_t)u;
}

static inline float key_float(int32_t k) {
    return k < 0 ? kiln_bits_f32((uint32_t)(-k) | 0x80000000u) : kiln_bits_f32((uint32_t)k);
}

/* nearest_index is monotone in x (float subtraction is), and is i - 1 at
 * val[i - 1] and i at val[i], so bisection finds each switch point. The
 * midpoint is tried first: near it the subtractions are exact, so it is
 * the switch point, and the bisection is only a safety net. */
static void iq4nl_tables_init(kiln_iq4_tables *t) {
    t->thr[0] = -INFINITY;
    t->val[0] = kiln_iq4nl_values[0];
    for (int i = 1; i < 16; i++) {
        float m = 0.5f * (kiln_iq4nl_values[i - 1] + kiln_iq4nl_values[i]);
        t->val[i] = kiln_iq4nl_values[i];
        t->thr[i] = m;
        if (nearest_index(m) >= i && nearest_index(nextafterf(m, -INFINITY)) < i) continue;
        int64_t lo = float_key(kiln_iq4nl_values[i - 1]), hi = float_key(kiln_iq4nl_values[i]);
        while (hi - lo > 1) {
            int64_t mid = lo + (hi - lo) / 2;
            if (nearest_index(key_float((int32_t)mid)) >= i) hi = mid;
            else lo = mid;
        }
        t->thr[i] = key_float((int32_t)hi);
    }
}

/* ---------------------------------------------------------------------
 * The two kernels: weighted sums of candidate scales, and the indices of a
 * block for one scale. */

/* For candidate c, with q = table[nearest_index(ids[c] * x[j])]:
 * sqx[c] = sum_j w[j] * q * x[j] and sq2[c] = sum_j w[j] * q * q, for the
 * first nc candidates; the rest of the NCAND outputs are filled with
 * something finite or zero. */
static void cand_sums_scalar(const float *x, const float *w, const float *ids, int nc,
                             const kiln_iq4_tables *t, float *sqx, float *sq2) {
    (void)t;
    for (int c = 0; c < nc; c++) {
        float a = 0, b = 0;
        for (int j = 0; j < KILN_QK; j++) {
            float q = kiln_iq4nl_values[nearest_index(ids[c] * x[j])];
            a += w[j] * q * x[j];
            b += w[j] * q * q;
        }
        sqx[c] = a;
        sq2[c] = b;
    }
    for (int c = nc; c < NCAND; c++) sqx[c] = sq2[c] = 0;
}

static void indices_scalar(float id, const float *x, const kiln_iq4_tables *t, uint8_t *L) {
    (void)t;
    for (int j = 0; j < KILN_QK; j++) L[j] = (uint8_t)nearest_index(id * x[j]);
}

#ifdef KILN_X86
/* Branch-free binary search over the thresholds: the largest i with
 * thr[i] <= al (0 if none). The first step's threshold is thr[8] in every
 * lane; the others are looked up (AVX2: in the lane's half of the table). */
KILN_AVX2 static inline __m256i index8(__m256 al, __m256 tlo, __m256 thi, __m256 t8) {
    __m256 ge8 = _mm256_cmp_ps(al, t8, _CMP_GE_OQ);
    __m256i idx = _mm256_and_si256(_mm256_castps_si256(ge8), _mm256_set1_epi32(8));
    for (int s = 4; s; s >>= 1) {
        __m256i cand = _mm256_add_epi32(idx, _mm256_set1_epi32(s));
        __m256 tv = _mm256_blendv_ps(_mm256_permutevar8x32_ps(tlo, cand),
                                     _mm256_permutevar8x32_ps(thi, cand), ge8);
        __m256 ge = _mm256_cmp_ps(al, tv, _CMP_GE_OQ);
        idx = _mm256_castps_si256(
            _mm256_blendv_ps(_mm256_castsi256_ps(idx), _mm256_castsi256_ps(cand), ge));
    }
    return idx;
}

KILN_AVX2 static void
cand_sums_avx2(const float *x, const float *w, const float *ids, int nc, const kiln_iq4_tables *t,
               float *sqx, float *sq2) {
    const __m256 tlo = _mm256_loadu_ps(t->thr), thi = _mm256_loadu_ps(t->thr + 8);
    const __m256 vlo = _mm256_loadu_ps(t->val), vhi = _mm256_loadu_ps(t->val + 8);
    const __m256 t8 = _mm256_set1_ps(t->thr[8]);
    const __m256i eight = _mm256_set1_epi32(8);
    float a[NCAND] = {0}, b[NCAND] = {0};
    for (int g = 0; g < nc; g += 8) {
        __m256 id = _mm256_loadu_ps(ids + g), sa = _mm256_setzero_ps(), sb = _mm256_setzero_ps();
        for (int j = 0; j < KILN_QK; j++) {
            __m256 xv = _mm256_set1_ps(x[j]);
            __m256i idx = index8(_mm256_mul_ps(id, xv), tlo, thi, t8);
            __m256 hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(eight, idx));
            __m256 q = _mm256_blendv_ps(_mm256_permutevar8x32_ps(vhi, idx),
                                        _mm256_permutevar8x32_ps(vlo, idx), hi);
            __m256 wq = _mm256_mul_ps(_mm256_set1_ps(w[j]), q);
            sa = _mm256_add_ps(sa, _mm256_mul_ps(wq, xv));
            sb = _mm256_add_ps(sb, _mm256_mul_ps(wq, q));
        }
        _mm256_storeu_ps(a + g, sa);
        _mm256_storeu_ps(b + g, sb);
    }
    memcpy(sqx, a, sizeof a);
    memcpy(sq2, b, sizeof b);
}

KILN_AVX2 static void indices_avx2(float id, const float *x, const kiln_iq4_tables *t, uint8_t *L) {
    const __m256 tlo = _mm256_loadu_ps(t->thr), thi = _mm256_loadu_ps(t->thr + 8);
    const __m256 t8 = _mm256_set1_ps(t->thr[8]), idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++) q[k] = index8(_mm256_mul_ps(idv, _mm256_loadu_ps(x + 8 * k)), tlo, thi, t8);
    /* the packs interleave 128-bit lanes; the permute restores order */
    __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)L, b);
}

KILN_AVX512 static inline __m512i index16(__m512 al, __m512 thr, __m512 t8) {
    __m512i idx = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(al, t8, _CMP_GE_OQ), _mm512_set1_epi32(8));
    for (int s = 4; s; s >>= 1) {
        __m512i cand = _mm512_add_epi32(idx, _mm512_set1_epi32(s));
        __mmask16 ge = _mm512_cmp_ps_mask(al, _mm512_permutexvar_ps(cand, thr), _CMP_GE_OQ);
        idx = _mm512_mask_mov_epi32(idx, ge, cand);
    }
    return idx;
}

KILN_AVX512 static void
cand_sums_avx512(const float *x, const float *w, const float *ids, int nc, const kiln_iq4_tables *t,
                 float *sqx, float *sq2) {
    const __m512 thr = _mm512_loadu_ps(t->thr), val = _mm512_loadu_ps(t->val);
    const __m512 t8 = _mm512_set1_ps(t->thr[8]);
    __m512 id = _mm512_loadu_ps(ids), sa = _mm512_setzero_ps(), sb = _mm512_setzero_ps();
    for (int j = 0; j < KILN_QK; j++) {
        __m512 xv = _mm512_set1_ps(x[j]);
        __m512 q = _mm512_permutexvar_ps(index16(_mm512_mul_ps(id, xv), thr, t8), val);
        __m512 wq = _mm512_mul_ps(_mm512_set1_ps(w[j]), q);
        sa = _mm512_add_ps(sa, _mm512_mul_ps(wq, xv));
        sb = _mm512_add_ps(sb, _mm512_mul_ps(wq, q));
    }
    (void)nc;
    _mm512_storeu_ps(sqx, sa);
    _mm512_storeu_ps(sq2, sb);
}

KILN_AVX512 static void
indices_avx512(float id, const float *x, const kiln_iq4_tables *t, uint8_t *L) {
    const __m512 thr = _mm512_loadu_ps(t->thr), t8 = _mm512_set1_ps(t->thr[8]);
    const __m512 idv = _mm512_set1_ps(id);
    for (int k = 0; k < 2; k++) {
        __m512i q = index16(_mm512_mul_ps(idv, _mm512_loadu_ps(x + 16 * k)), thr, t8);
        _mm_storeu_si128((__m128i *)(L + 16 * k), _mm512_cvtepi32_epi8(q));
    }
}
#endif

void kiln_iq4_search_init(kiln_iq4_search *s, int ntry) {
    iq4nl_tables_init(&s->t);
    s->cand_sums = KILN_SIMD_PICK(cand_sums);
    s->indices = KILN_SIMD_PICK(indices);
    s->ntry = ntry;
}

/* ---------------------------------------------------------------------
 * The search for one block, and IQ4_NL's blocks. */

float kiln_iq4_block_scale(const kiln_iq4_search *s, const float *x, const float *w, float *id,
                           bool *weighted) {
    const int ntry = s->ntry;
    const float v0 = kiln_iq4nl_values[0];
    float amax, max = kiln_max_magnitude(x, KILN_QK, &amax);
    *id = 0;
    *weighted = true;
    if (amax < KILN_GROUP_MAX_EPS) return 0;
    /* Candidate c >= 1 is try c - 1 - ntry; unused lanes repeat a try so
     * that the division loops stay branch-free. */
    float ids[NCAND], sqx[NCAND], sq2[NCAND], dq[NCAND];
    for (int c = 0; c < NCAND; c++) ids[c] = ((c <= 2 * ntry + 1 ? c : 1) - 1 - ntry + v0) / max;
    ids[0] = 1 / (ntry > 0 ? -max / v0 : max / v0);
    int nc = ntry > 0 ? 2 * ntry + 2 : 1;
    s->cand_sums(x, w, ids, nc, &s->t, sqx, sq2);
    /* each candidate's least-squares scale; read only where sq2 > 0 */
    for (int c = 0; c < NCAND; c++) dq[c] = sqx[c] / sq2[c];
    *weighted = sq2[0] > 0;
    float d = *weighted ? dq[0] : 0;
    float best = d * sqx[0];
    for (int c = 1; c < nc; c++) {
        if (sq2[c] > 0 && sqx[c] * sqx[c] > best * sq2[c]) {
            d = dq[c];
            best = d * sqx[c];
        }
    }
    *id = ntry > 0 ? (d ? 1 / d : 0) : ids[0];
    return d;
}

/* A kiln_block_quantizer; qw is the block's imatrix slice or NULL. For an
 * all-zero block (d = 0) ggml's reference leaves whatever indices its
 * buffer held; kiln writes the index of 0 instead. */
static void iq4nl_block(const float *x, const float *qw, void *dst, const void *ctx) {
    const kiln_iq4_search *s = ctx;
    float w[KILN_QK];
    if (qw) {
        float sigma2 = 0;
        for (int j = 0; j < KILN_QK; j++) sigma2 += x[j] * x[j];
        sigma2 *= 2.f / KILN_QK;
        kiln_importance_weights(KILN_QK, x, qw, sigma2, w);
    } else {
        for (int j = 0; j < KILN_QK; j++) w[j] = x[j] * x[j];
    }
    float id;
    bool weighted;
    float d = kiln_iq4_block_scale(s, x, w, &id, &weighted);
    /* A block whose imatrix weights are all zero leaves nothing to fit:
     * ggml stores d = 0 there (indices of 0); kiln's IQ4_NL keeps the
     * first guess instead, finite and close (test_quant_legacy.c). */
    if (!weighted && d == 0) {
        float amax, max = kiln_max_magnitude(x, KILN_QK, &amax);
        float first = 1 / (s->ntry > 0 ? -max / kiln_iq4nl_values[0] : max / kiln_iq4nl_values[0]);
        d = 1 / first;
        id = s->ntry > 0 ? 1 / d : first;
    }
    uint8_t L[KILN_QK];
    kiln_iq4_indices(s, id, x, L);
    kiln_pack_nibble_block(d, L, dst);
}

void kiln_dequantize_row_iq4_nl(const void *src, float *dst, int64_t n) {
    kiln_dequantize_nibble_blocks(src, kiln_iq4nl_values, dst, n);
}

void kiln_quantize_row_iq4_nl_ref(const float *src, void *dst, int64_t n) {
    kiln_iq4_search s;
    kiln_iq4_search_init(&s, -1);
    kiln_quantize_blocks(src, dst, 1, n, NULL, KILN_QK, sizeof(kiln_block_iq4_nl), iq4nl_block, &s);
}

size_t kiln_quantize_iq4_nl(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                            const float *imatrix) {
    kiln_iq4_search s;
    kiln_iq4_search_init(&s, NTRY);
    return kiln_quantize_blocks(src, dst, nrows, n_per_row, imatrix, KILN_QK,
                                sizeof(kiln_block_iq4_nl), iq4nl_block, &s);
}
