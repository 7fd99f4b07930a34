/* codec/q4_0.c - Q4_0: 32 weights as 4-bit levels times one fp16 scale
 * (block layout in blocks_legacy.h), and the pieces Q5_0 and IQ4_NL reuse:
 * the quantizer Q4_0 and Q5_0 share (kiln_legacy_quantize: the same level
 * search with a different nmax), and the packer and dequantizer of "d + 16
 * nibble pairs" blocks, the layout of Q4_0 and IQ4_NL.
 *
 * Without an imatrix the levels are ggml's quantize_row_q4_0_ref: d is the
 * value of largest magnitude divided by -8, so that value lands exactly on
 * level 0 and the other 15 levels spread over the rest. With one, ggml's
 * quantize_row_q4_0_impl: kiln_make_qx_quants weighted by
 * imatrix * sqrt(sigma2 + x^2). SIMD paths repeat the scalar arithmetic
 * (no fused multiply-add) and so give the same bytes. */
#include "blocks.h"
#include "quants.h"
#include "search.h"

#include "../core/cpu.h"
#include "../core/fp16.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* d and 1/d from the block's value of largest magnitude. A zero block
 * keeps ggml's +0 max, hence d = -0. */
static inline float legacy_scale(float max, int nmax, float *id) {
    float d = max / -nmax;
    *id = d ? 1.0f / d : 0.0f;
    return d;
}

/* When 1/d overflows (d subnormal), every x/d is +-inf or NaN, which ggml's
 * float -> int8 cast (cvttss2si: 0x80000000) makes level 0. The SIMD paths
 * would saturate instead, so all paths take this branch. */
static inline bool legacy_degenerate(float id, uint8_t *L) {
    if (!isinf(id)) return false;
    memset(L, 0, KILN_QK);
    return true;
}

static float levels_ref_scalar(const float *x, int nmax, uint8_t *L) {
    float amax, max = kiln_max_magnitude(x, KILN_QK, &amax);
    float id, d = legacy_scale(max, nmax, &id);
    if (legacy_degenerate(id, L)) return d;
    /* ggml truncates x/d + nmax + 0.5 (all >= 0 here) and clips the top. */
    const float bias = (float)nmax + 0.5f;
    for (int j = 0; j < KILN_QK; j++) {
        int q = (int)(x[j] * id + bias);
        L[j] = (uint8_t)(q < 2 * nmax - 1 ? q : 2 * nmax - 1);
    }
    return d;
}

#ifdef KILN_X86
KILN_AVX2 static float levels_ref_avx2(const float *x, int nmax, uint8_t *L) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], a[4];
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        a[k] = _mm256_andnot_ps(sign, v[k]);
    }
    __m256 m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float amax = _mm_cvtss_f32(h), max = 0;
    if (amax > 0) {
        /* the scalar loop keeps the first value reaching amax */
        __m256 am = _mm256_set1_ps(amax);
        uint32_t hit = 0;
        for (int k = 0; k < 4; k++)
            hit |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(a[k], am, _CMP_EQ_OQ)) << (8 * k);
        max = x[__builtin_ctz(hit)];
    }
    float id, d = legacy_scale(max, nmax, &id);
    if (legacy_degenerate(id, L)) return d;
    const __m256 idv = _mm256_set1_ps(id), bias = _mm256_set1_ps((float)nmax + 0.5f);
    const __m256i top = _mm256_set1_epi32(2 * nmax - 1);
    __m256i q[4];
    for (int k = 0; k < 4; k++)
        q[k] = _mm256_min_epi32(top, _mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(v[k], idv), bias)));
    /* the packs interleave 128-bit lanes; the permute restores order */
    __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)L, b);
    return d;
}

KILN_AVX512 static float levels_ref_avx512(const float *x, int nmax, uint8_t *L) {
    __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)), max = 0;
    if (amax > 0) {
        __m512 am = _mm512_set1_ps(amax);
        uint32_t hit = _mm512_cmp_ps_mask(a0, am, _CMP_EQ_OQ) |
                       (uint32_t)_mm512_cmp_ps_mask(a1, am, _CMP_EQ_OQ) << 16;
        max = x[__builtin_ctz(hit)];
    }
    float id, d = legacy_scale(max, nmax, &id);
    if (legacy_degenerate(id, L)) return d;
    const __m512 idv = _mm512_set1_ps(id), bias = _mm512_set1_ps((float)nmax + 0.5f);
    const __m512i top = _mm512_set1_epi32(2 * nmax - 1);
    __m512i q0 = _mm512_min_epi32(top, _mm512_cvttps_epi32(_mm512_add_ps(_mm512_mul_ps(v0, idv), bias)));
    __m512i q1 = _mm512_min_epi32(top, _mm512_cvttps_epi32(_mm512_add_ps(_mm512_mul_ps(v1, idv), bias)));
    _mm_storeu_si128((__m128i *)L, _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(L + 16), _mm512_cvtepi32_epi8(q1));
    return d;
}
#endif

/* Levels of one block with importance weights (ggml's
 * quantize_row_q4_0_impl / q5_0_impl): weight qw[j] * sqrt(sigma2 +
 * x[j]^2), scale by kiln_make_qx_quants. Returns d. */
static float levels_imatrix(const float *x, const float *qw, float sigma2, int nmax, uint8_t *L) {
    float weight[KILN_QK];
    kiln_importance_weights(KILN_QK, x, qw, sigma2, weight);
    return kiln_make_qx_quants(KILN_QK, nmax, x, (int8_t *)L, 1, weight);
}

/* What every block of one kiln_legacy_quantize call shares. */
typedef struct legacy_ctx {
    int nmax;
    kiln_legacy_pack_fn pack;
    /* ggml's reference levels: d = max / -nmax where max is the value of
     * largest magnitude, levels q = x / d + nmax in 0..2*nmax-1; returns d.
     * Picked once per call, not per block. */
    float (*levels_ref)(const float *x, int nmax, uint8_t *L);
    float sigma2; /* the row's mean x^2, for the imatrix weights */
} legacy_ctx;

static void legacy_block(const float *x, const float *qw, void *y, const void *ctx) {
    const legacy_ctx *c = ctx;
    uint8_t L[KILN_QK];
    float d = qw ? levels_imatrix(x, qw, c->sigma2, c->nmax, L) : c->levels_ref(x, c->nmax, L);
    c->pack(d, L, y);
}

size_t kiln_legacy_quantize(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                            const float *imatrix, int nmax, kiln_legacy_pack_fn pack,
                            size_t block_bytes) {
    legacy_ctx c = {nmax, pack, KILN_SIMD_PICK(levels_ref), 0};
    if (!imatrix)
        return kiln_quantize_blocks(src, dst, nrows, n_per_row, NULL, KILN_QK, block_bytes,
                                    legacy_block, &c);
    return kiln_quantize_rows_sigma2(src, dst, nrows, n_per_row, imatrix, KILN_QK, block_bytes, legacy_block, &c,
                                     &c.sigma2);
}

/* ---------------------------------------------------------------------
 * Nibble blocks, "fp16 d, then 16 bytes holding weight j in the low
 * nibble and weight j + 16 in the high one": Q4_0 (table q - 8) and
 * IQ4_NL (its non-linear table). The kernels read both as Q4_0 structs. */

typedef kiln_block_q4_0 nibble_block;

void kiln_pack_nibble_block(float d, const uint8_t *L, void *block) {
    nibble_block *y = block;
    y->d = kiln_fp32_to_fp16(d);
    kiln_pack_nibbles(L, y->qs);
}

static void nibbles_scalar(const nibble_block *x, const int8_t *table, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += KILN_QK) {
        float d = kiln_fp16_to_fp32(x[i].d);
        for (int j = 0; j < KILN_QK / 2; j++) {
            y[j] = table[x[i].qs[j] & 15] * d;
            y[j + 16] = table[x[i].qs[j] >> 4] * d;
        }
    }
}

#ifdef KILN_X86
KILN_AVX2 static void
nibbles_avx2(const nibble_block *x, const int8_t *table, float *y, int64_t nb) {
    const __m128i tab = _mm_loadu_si128((const __m128i *)table), low = _mm_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, y += KILN_QK) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(x[i].d));
        __m128i q = _mm_loadu_si128((const __m128i *)x[i].qs);
        __m128i v[2] = {_mm_shuffle_epi8(tab, _mm_and_si128(q, low)),
                        _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(q, 4), low))};
        for (int h = 0; h < 2; h++) {
            __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v[h]));
            __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v[h], 8)));
            _mm256_storeu_ps(y + 16 * h, _mm256_mul_ps(f0, d));
            _mm256_storeu_ps(y + 16 * h + 8, _mm256_mul_ps(f1, d));
        }
    }
}

KILN_AVX512 static void
nibbles_avx512(const nibble_block *x, const int8_t *table, float *y, int64_t nb) {
    const __m128i tab = _mm_loadu_si128((const __m128i *)table), low = _mm_set1_epi8(15);
    for (int64_t i = 0; i < nb; i++, y += KILN_QK) {
        __m512 d = _mm512_set1_ps(_cvtsh_ss(x[i].d));
        __m128i q = _mm_loadu_si128((const __m128i *)x[i].qs);
        __m128i lo = _mm_shuffle_epi8(tab, _mm_and_si128(q, low));
        __m128i hi = _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(q, 4), low));
        _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), d));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), d));
    }
}
#endif

void kiln_dequantize_nibble_blocks(const void *src, const int8_t *table, float *dst, int64_t n) {
    KILN_SIMD_PICK(nibbles)(src, table, dst, n / KILN_QK);
}

/* ---------------------------------------------------------------------
 * Q4_0 itself. */

static const int8_t Q4_0_LEVELS[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

void kiln_dequantize_row_q4_0(const void *src, float *dst, int64_t n) {
    kiln_dequantize_nibble_blocks(src, Q4_0_LEVELS, dst, n);
}

void kiln_quantize_row_q4_0_ref(const float *src, void *dst, int64_t n) {
    kiln_legacy_quantize(src, dst, 1, n, NULL, 8, kiln_pack_nibble_block, sizeof(kiln_block_q4_0));
}

size_t kiln_quantize_q4_0(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix) {
    return kiln_legacy_quantize(src, dst, nrows, n_per_row, imatrix, 8, kiln_pack_nibble_block,
                                sizeof(kiln_block_q4_0));
}
