/* codec/codec.c - maps ggml type ids to kiln's codecs, and the
 * multi-threaded row quantizer every tool uses. */
#include "codec.h"

#include "../core/types.h"
#include "quants.h"

#include "../core/cpu.h"

#include <math.h>
#include <omp.h>

static const kiln_codec CODECS[KILN_TYPE_COUNT] = {
    [KILN_F32] = {KILN_F32, kiln_dequantize_row_f32, kiln_quantize_f32, false},
    [KILN_F16] = {KILN_F16, kiln_dequantize_row_f16, kiln_quantize_f16, false},
    [KILN_BF16] = {KILN_BF16, kiln_dequantize_row_bf16, kiln_quantize_bf16, false},
    /* @codecs-legacy: Q8_0 Q4_0 Q5_0 Q4_1 Q5_1 IQ4_NL */
    [KILN_Q8_0] = {KILN_Q8_0, kiln_dequantize_row_q8_0, kiln_quantize_q8_0, false},
    [KILN_Q4_0] = {KILN_Q4_0, kiln_dequantize_row_q4_0, kiln_quantize_q4_0, false},
    [KILN_Q5_0] = {KILN_Q5_0, kiln_dequantize_row_q5_0, kiln_quantize_q5_0, false},
    [KILN_Q4_1] = {KILN_Q4_1, kiln_dequantize_row_q4_1, kiln_quantize_q4_1, false},
    [KILN_Q5_1] = {KILN_Q5_1, kiln_dequantize_row_q5_1, kiln_quantize_q5_1, false},
    [KILN_IQ4_NL] = {KILN_IQ4_NL, kiln_dequantize_row_iq4_nl, kiln_quantize_iq4_nl, false},
    /* @codecs-kquants: Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K */
    [KILN_Q2_K] = {KILN_Q2_K, kiln_dequantize_row_q2_k, kiln_quantize_q2_k, false},
    [KILN_Q3_K] = {KILN_Q3_K, kiln_dequantize_row_q3_k, kiln_quantize_q3_k, false},
    [KILN_Q8_K] = {KILN_Q8_K, kiln_dequantize_row_q8_k, kiln_quantize_q8_k, false},
    [KILN_Q4_K] = {KILN_Q4_K, kiln_dequantize_row_q4_k, kiln_quantize_q4_k, false},
    [KILN_Q5_K] = {KILN_Q5_K, kiln_dequantize_row_q5_k, kiln_quantize_q5_k, false},
    [KILN_Q6_K] = {KILN_Q6_K, kiln_dequantize_row_q6_k, kiln_quantize_q6_k, false},
    /* @codecs-iq2: IQ2_XXS IQ2_XS IQ2_S (ggml refuses IQ2_XS without an imatrix, not IQ2_S;
     * llama-quantize asks for it for both, outside token_embd and output: quantize/policy.c) */
    [KILN_IQ2_XXS] = {KILN_IQ2_XXS, kiln_dequantize_row_iq2_xxs, kiln_quantize_iq2_xxs, true},
    [KILN_IQ2_XS] = {KILN_IQ2_XS, kiln_dequantize_row_iq2_xs, kiln_quantize_iq2_xs, true},
    [KILN_IQ2_S] = {KILN_IQ2_S, kiln_dequantize_row_iq2_s, kiln_quantize_iq2_s, false},
    /* @codecs-iq4: IQ4_XS */
    [KILN_IQ4_XS] = {KILN_IQ4_XS, kiln_dequantize_row_iq4_xs, kiln_quantize_iq4_xs, false},
    /* @codecs-iq3: IQ3_XXS IQ3_S (ggml accepts both without an imatrix) */
    [KILN_IQ3_XXS] = {KILN_IQ3_XXS, kiln_dequantize_row_iq3_xxs, kiln_quantize_iq3_xxs, false},
    [KILN_IQ3_S] = {KILN_IQ3_S, kiln_dequantize_row_iq3_s, kiln_quantize_iq3_s, false},
    /* @codecs-iq1: IQ1_S IQ1_M (ggml requires the imatrix for IQ1_S only;
     * llama-quantize asks for it for both, outside token_embd and output:
     * quantize/policy.c) */
    [KILN_IQ1_S] = {KILN_IQ1_S, kiln_dequantize_row_iq1_s, kiln_quantize_iq1_s, true},
    [KILN_IQ1_M] = {KILN_IQ1_M, kiln_dequantize_row_iq1_m, kiln_quantize_iq1_m, false},
    /* @codecs-tq: TQ1_0 TQ2_0 MXFP4 Q1_0 Q2_0 (no search: ggml ignores an imatrix) */
    [KILN_TQ1_0] = {KILN_TQ1_0, kiln_dequantize_row_tq1_0, kiln_quantize_tq1_0, false},
    [KILN_TQ2_0] = {KILN_TQ2_0, kiln_dequantize_row_tq2_0, kiln_quantize_tq2_0, false},
    [KILN_MXFP4] = {KILN_MXFP4, kiln_dequantize_row_mxfp4, kiln_quantize_mxfp4, false},
    [KILN_Q1_0] = {KILN_Q1_0, kiln_dequantize_row_q1_0, kiln_quantize_q1_0, false},
    [KILN_Q2_0] = {KILN_Q2_0, kiln_dequantize_row_q2_0, kiln_quantize_q2_0, false},
};

/* Index of the first NaN or infinity in x[0..n), or -1. An element is
 * non-finite exactly when its exponent bits are all ones. */
static int64_t first_non_finite_scalar(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

#ifdef KILN_X86
/* Whole vectors first; the scalar loop places the first bad element of
 * the vector that has one, and takes the tail. */
KILN_AVX512 static int64_t first_non_finite_avx512(const float *x, int64_t n) {
    const __m512i exp = _mm512_set1_epi32(0x7f800000);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i v = _mm512_and_si512(_mm512_loadu_si512((const void *)(x + i)), exp);
        if (_mm512_cmpeq_epi32_mask(v, exp)) break;
    }
    int64_t j = first_non_finite_scalar(x + i, n - i);
    return j < 0 ? -1 : i + j;
}
#endif

static int64_t first_non_finite(const float *x, int64_t n) {
#ifdef KILN_X86
    if (kiln_simd() >= KILN_SIMD_AVX512) return first_non_finite_avx512(x, n);
#endif
    return first_non_finite_scalar(x, n);
}

const kiln_codec *kiln_codec_get(uint32_t type) {
    if (type >= KILN_TYPE_COUNT || !CODECS[type].dequantize_row) return NULL;
    return &CODECS[type];
}

bool kiln_can_dequantize(uint32_t type) {
    return kiln_codec_get(type) != NULL;
}

bool kiln_can_quantize(uint32_t type) {
    const kiln_codec *c = kiln_codec_get(type);
    return c && c->quantize;
}

int kiln_dequantize(uint32_t type, const void *src, float *dst, int64_t n, kiln_err *err) {
    const kiln_codec *c = kiln_codec_get(type);
    if (!c) return kiln_fail(err, NULL, NULL, -1, "kiln cannot dequantize type %s", kiln_type_name(type));
    c->dequantize_row(src, dst, n);
    return 0;
}

size_t kiln_quantize_rows(uint32_t type, const float *src, void *dst, int64_t nrows,
                          int64_t n_per_row, const float *imatrix, kiln_err *err) {
    const kiln_codec *c = kiln_codec_get(type);
    if (!c || !c->quantize) {
        kiln_fail(err, NULL, NULL, -1, "kiln cannot quantize to type %s", kiln_type_name(type));
        return 0;
    }
    const kiln_type_info *ti = kiln_type_get(type);
    if (n_per_row % ti->block_size) {
        kiln_fail(err, NULL, NULL, -1, "row length %lld is not a multiple of %s's block size %u",
                  (long long)n_per_row, ti->name, ti->block_size);
        return 0;
    }
    if (c->needs_imatrix && !imatrix) {
        kiln_fail(err, NULL, NULL, -1,
                  "%s needs an importance matrix (--imatrix): at 2 bits per weight an "
                  "unweighted search spends its few levels on unimportant columns", ti->name);
        return 0;
    }
    size_t row_bytes = kiln_type_row_bytes(type, (uint64_t)n_per_row);
    /* Rows are independent, so any split gives the same bytes. Chunks of a
     * few rows keep threads busy without splitting tiny tensors. */
    int64_t chunk = 16;
    int64_t nchunks = (nrows + chunk - 1) / chunk;
    /* Non-finite input is refused: each chunk is scanned by the thread that
     * quantizes it (while it is in cache), and the first bad element in
     * row order is reported. */
    int64_t first_bad = INT64_MAX;
    bool short_write = false; /* a codec that wrote less than asked: out of memory for its tables */
    #pragma omp parallel for schedule(dynamic, 1) if (nchunks > 1)
    for (int64_t ci = 0; ci < nchunks; ci++) {
        int64_t r0 = ci * chunk;
        int64_t nr = nrows - r0 < chunk ? nrows - r0 : chunk;
        const float *x = src + r0 * n_per_row;
        int64_t bad = first_non_finite(x, nr * n_per_row);
        if (bad >= 0) {
            #pragma omp critical(kiln_quantize_bad)
            if (r0 * n_per_row + bad < first_bad) first_bad = r0 * n_per_row + bad;
            continue;
        }
        if (c->quantize(x, (uint8_t *)dst + (size_t)r0 * row_bytes, nr, n_per_row, imatrix) != row_bytes * (size_t)nr) {
            #pragma omp atomic write
            short_write = true;
        }
    }
    if (short_write) {
        kiln_fail(err, NULL, NULL, -1, "%s quantization failed: out of memory for its search tables", ti->name);
        return 0;
    }
    if (first_bad != INT64_MAX) {
        kiln_fail(err, NULL, NULL, -1, "row %lld column %lld is %s; refusing to quantize",
                  (long long)(first_bad / n_per_row), (long long)(first_bad % n_per_row),
                  isnan(src[first_bad]) ? "NaN" : "infinite");
        return 0;
    }
    return row_bytes * (size_t)nrows;
}
