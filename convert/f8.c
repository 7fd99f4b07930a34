/* convert/f8.c - FP8 E4M3 block-scaled weights (see f8.h). */
#include "f8.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../codec/quants.h"
#include "json.h"
#include "q8_rows.h"
#include "row_split.h"

int cv_f8_config(json_t *config, bool *fp8, int64_t block[2], kiln_err *err) {
    *fp8 = false;
    block[0] = block[1] = 0;
    json_t *qc = cv_json_get(config, "quantization_config");
    if (!json_is_object(qc)) return 0;
    const char *method = cv_json_str(cv_json_get(qc, "quant_method"));
    /* MXFP4 experts are read as stored, never dequantized (mxfp4_hf.c) */
    if (!method || !strcmp(method, "mxfp4")) return 0;
    if (strcmp(method, "fp8"))
        return kiln_fail(err, "config.json", "quantization_config.quant_method", -1,
                         "'%s' checkpoints are not supported (only float, fp8 and mxfp4)", method);
    *fp8 = true;
    json_t *bs = cv_json_get(qc, "weight_block_size");
    if (!bs || json_is_null(bs)) return 0;
    if (!json_is_array(bs) || json_array_size(bs) != 2 || !cv_json_int(json_array_get(bs, 0), &block[0]) ||
        !cv_json_int(json_array_get(bs, 1), &block[1]) || block[0] <= 0 || block[1] <= 0)
        return kiln_fail(err, "config.json", "quantization_config.weight_block_size", -1,
                         "must be two positive integers");
    return 0;
}

float cv_f8_e4m3_to_f32(uint8_t b) {
    uint32_t sign = b >> 7, exp = (b >> 3) & 15, mant = b & 7;
    float v;
    if (exp == 15 && mant == 7) v = NAN;
    else if (exp == 0) v = ldexpf((float)mant, -9); /* subnormal: mant/8 * 2^-6 */
    else v = ldexpf((float)(8 + mant), (int)exp - 10);
    return sign ? -v : v;
}

static float LUT[256];
static int lut_ready;

static void init_lut(void) {
    if (lut_ready) return;
    for (int i = 0; i < 256; i++) LUT[i] = cv_f8_e4m3_to_f32((uint8_t)i);
    __atomic_store_n(&lut_ready, 1, __ATOMIC_RELEASE);
}

/* ---- n bytes times one scale ------------------------------------------
 * The SIMD variants decode E4M3 by bit arithmetic, giving the LUT's exact
 * floats: a normal byte's exponent is rebiased (7 -> 127) and its 3
 * mantissa bits moved to the top of f32's 23; a subnormal is mant * 2^-9,
 * exact in f32; 0x7f and 0xff are the quiet NaNs NAN and -NAN. Then one
 * multiplication by the scale, the same IEEE operation as the LUT path. */

static void span_scalar(const uint8_t *s, float *d, int64_t n, float sc) {
    for (int64_t c = 0; c < n; c++) d[c] = LUT[s[c]] * sc;
}

#ifdef KILN_X86
KILN_AVX2 static void span_avx2(const uint8_t *s, float *d, int64_t n, float sc) {
    const __m256i low7 = _mm256_set1_epi32(0x7f), eight = _mm256_set1_epi32(8);
    const __m256i rebias = _mm256_set1_epi32(120 << 23), qnan = _mm256_set1_epi32(0x7fc00000);
    const __m256 sub_unit = _mm256_set1_ps(0x1p-9f), scv = _mm256_set1_ps(sc);
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
        __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(s + c)));
        __m256i sign = _mm256_slli_epi32(_mm256_andnot_si256(low7, x), 24);
        __m256i em = _mm256_and_si256(x, low7);
        __m256i normal = _mm256_add_epi32(_mm256_slli_epi32(em, 20), rebias);
        __m256i sub = _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(em), sub_unit));
        __m256i v = _mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi32(eight, em));
        v = _mm256_blendv_epi8(v, qnan, _mm256_cmpeq_epi32(em, low7));
        _mm256_storeu_ps(d + c, _mm256_mul_ps(_mm256_castsi256_ps(_mm256_or_si256(v, sign)), scv));
    }
    span_scalar(s + c, d + c, n - c, sc);
}

KILN_AVX512 static void span_avx512(const uint8_t *s, float *d, int64_t n, float sc) {
    const __m512i low7 = _mm512_set1_epi32(0x7f), eight = _mm512_set1_epi32(8);
    const __m512i rebias = _mm512_set1_epi32(120 << 23), qnan = _mm512_set1_epi32(0x7fc00000);
    const __m512 sub_unit = _mm512_set1_ps(0x1p-9f), scv = _mm512_set1_ps(sc);
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) {
        __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + c)));
        __m512i sign = _mm512_slli_epi32(_mm512_andnot_si512(low7, x), 24);
        __m512i em = _mm512_and_si512(x, low7);
        __m512i v = _mm512_add_epi32(_mm512_slli_epi32(em, 20), rebias);
        v = _mm512_mask_mov_epi32(v, _mm512_cmplt_epi32_mask(em, eight),
                                  _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(em), sub_unit)));
        v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(em, low7), qnan);
        _mm512_storeu_ps(d + c, _mm512_mul_ps(_mm512_castsi512_ps(_mm512_or_si512(v, sign)), scv));
    }
    span_avx2(s + c, d + c, n - c, sc);
}
#endif

void cv_f8_span(const uint8_t *src, float *dst, int64_t n, float scale) {
    init_lut();
    KILN_SIMD_PICK(span)(src, dst, n, scale);
}

/* Columns [c0, c1) of row r, whose bytes start at `row`, into dst. */
static void dequant_row_part(const uint8_t *row, float *dst, int64_t r, int64_t c0, int64_t c1, const float *scale,
                             int64_t scale_cols, const int64_t block[2], bool per_row) {
    if (!scale || block[0] <= 0) {
        float sc = !scale ? 1.0f : per_row ? scale[r] : scale[0];
        cv_f8_span(row + c0, dst, c1 - c0, sc);
        return;
    }
    /* block by block: a division per weight cost more than the rest */
    const float *srow = scale + (r / block[0]) * scale_cols;
    for (int64_t c = c0; c < c1;) {
        int64_t b = c / block[1], end = (b + 1) * block[1] < c1 ? (b + 1) * block[1] : c1;
        cv_f8_span(row + c, dst + (c - c0), end - c, srow[b]);
        c = end;
    }
}

/* The arguments of f8_decode and f8_dequant_slice: FP8 rows with their
 * scales (dst only for the latter). */
typedef struct f8_rows {
    const uint8_t *src;
    float *dst;
    int64_t r0, cols, scale_cols;
    const float *scale;
    const int64_t *block;
    bool per_row;
} f8_rows;

static void f8_dequant_slice(void *ctx, int slice, int64_t a, int64_t b) {
    const f8_rows *f = ctx;
    (void)slice;
    for (int64_t i = a; i < b; i++)
        dequant_row_part(f->src + i * f->cols, f->dst + i * f->cols, f->r0 + i, 0, f->cols, f->scale, f->scale_cols,
                         f->block, f->per_row);
}

void cv_f8_dequant_rows(const uint8_t *src, float *dst, int64_t r0, int64_t nrows, int64_t cols, const float *scale,
                        int64_t scale_cols, const int64_t block[2], bool per_row) {
    init_lut();
    f8_rows f = {.src = src, .dst = dst, .r0 = r0, .cols = cols, .scale_cols = scale_cols, .scale = scale,
                 .block = block, .per_row = per_row};
    cv_split_rows(f8_dequant_slice, &f, nrows, nrows * cols <= (1 << 20));
}

static void f8_decode(const void *ctx, int64_t row, int64_t c0, int64_t c1, float *dst) {
    const f8_rows *f = ctx;
    dequant_row_part(f->src + row * f->cols, dst, f->r0 + row, c0, c1, f->scale, f->scale_cols, f->block, f->per_row);
}

int64_t cv_f8_q8_0_rows(const uint8_t *src, void *dst, int64_t r0, int64_t nrows, int64_t cols, const float *scale,
                        int64_t scale_cols, const int64_t block[2], bool per_row) {
    init_lut();
    const f8_rows f = {.src = src, .r0 = r0, .cols = cols, .scale_cols = scale_cols, .scale = scale, .block = block,
                       .per_row = per_row};
    return cv_q8_0_rows(f8_decode, &f, dst, nrows, cols);
}
