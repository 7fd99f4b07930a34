/* tests/test_f8_q8.c - convert's FP8 (E4M3) kernels (convert/f8.c): the
 * SIMD decoders give the table's exact floats on every byte, and the fused
 * FP8 -> Q8_0 step gives byte for byte what dequantizing to f32 and then
 * quantizing with the codec gives, at every SIMD level, on block-scaled,
 * per-row and unscaled weights, with ragged 128-blocks, zero, subnormal
 * and NaN blocks. */
#include "shared.h"
#include "simd_levels.h"

#include "../codec/codec.h"
#include "../core/types.h"
#include "../convert/f8.h"

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Every byte, in a shuffled order and a ragged length, at a few scales:
 * the level's floats equal the scalar table's, bit for bit. */
static void test_span_equals_table(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    enum { N = 4099 };
    uint8_t src[N];
    float want[N], got[N];
    uint64_t seed = 7;
    for (int i = 0; i < N; i++) src[i] = (uint8_t)(i < 256 ? (uint64_t)i : kiln_test_xorshift64(&seed));
    const float scales[] = {1.0f, 0.0f, -3.5f, 1.1754944e-38f /* results go subnormal */, 2.5e-3f, 65504.0f};
    for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++) {
        for (int n = N; n >= N - 17; n -= 17) { /* ragged tails for each vector width */
            kiln_simd_set(KILN_SIMD_SCALAR);
            cv_f8_span(src, want, n, scales[k]);
            kiln_simd_set(lvl);
            cv_f8_span(src, got, n, scales[k]);
            for (int i = 0; i < n; i++) {
                float ref = cv_f8_e4m3_to_f32(src[i]) * scales[k];
                if (f32_bits(want[i]) != f32_bits(ref) || f32_bits(got[i]) != f32_bits(ref))
                    fail_msg("byte %02x scale %g: table %08x, scalar %08x, level %d %08x", src[i], scales[k],
                             f32_bits(ref), f32_bits(want[i]), lvl, f32_bits(got[i]));
            }
        }
    }
}

/* Random FP8 bytes, except for whole 32-blocks set to zero, subnormal
 * bytes only, or the largest bytes (no NaN: see the next test). */
static void fill_weights(uint8_t *w, int64_t n, uint64_t *seed) {
    for (int64_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)kiln_test_xorshift64(seed);
        if ((b & 0x7f) == 0x7f) b ^= 1; /* 0x7e: the largest finite */
        w[i] = b;
    }
    for (int64_t b0 = 0; b0 + 32 <= n; b0 += 32 * 7) {
        int kind = (int)(kiln_test_xorshift64(seed) % 4);
        for (int j = 0; j < 32; j++) {
            uint8_t r = (uint8_t)kiln_test_xorshift64(seed);
            if (kind == 0) w[b0 + j] = (uint8_t)(r & 0x80);       /* +-0 */
            else if (kind == 1) w[b0 + j] = (uint8_t)(r & 0x87); /* subnormal */
            else if (kind == 2) w[b0 + j] = (uint8_t)(0x7e | (r & 0x80));
        }
    }
}

typedef struct layout {
    int64_t rows, cols, block[2];
    int scale; /* 0 none, 1 per tensor, 2 per row, 3 block-scaled */
} layout;

/* Scales of layout l (NULL when it has none) with zero and tiny ones. */
static float *make_scales(const layout *l, int64_t *scale_cols, uint64_t *seed) {
    *scale_cols = 0;
    if (l->scale == 0) return NULL;
    int64_t n = l->scale == 1 ? 1 : l->scale == 2 ? l->rows : 0;
    if (l->scale == 3) {
        *scale_cols = (l->cols + l->block[1] - 1) / l->block[1];
        n = (l->rows + l->block[0] - 1) / l->block[0] * *scale_cols;
    }
    float *s = malloc((size_t)n * 4);
    assert_non_null(s);
    for (int64_t i = 0; i < n; i++) {
        int kind = (int)(kiln_test_xorshift64(seed) % 8);
        s[i] = kind == 0 ? 0.0f : kind == 1 ? 1e-40f : (float)(kiln_test_uniform(seed) * 4e-3);
    }
    if (l->scale == 1) s[0] = 3e-3f;
    return s;
}

static const layout LAYOUTS[] = {
    {200, 160, {128, 128}, 3},  /* ragged 128-blocks: rows 200, cols 128 + 32 */
    {64, 96, {16, 48}, 3},      /* scale blocks that cut Q8_0 blocks */
    {1100, 1024, {128, 128}, 3}, /* over a million weights: the parallel path */
    {33, 2080, {128, 128}, 3},   /* a row longer than the fused step's piece */
    {40, 64, {0, 0}, 2},
    {40, 64, {0, 0}, 1},
    {40, 64, {0, 0}, 0},
};

/* Q8_0 of the f32 rows, as convert did before the fused step. */
static void two_pass(const uint8_t *w, const layout *l, const float *scale, int64_t scale_cols, void *dst,
                     int64_t r0, int64_t nrows) {
    float *f = malloc((size_t)(nrows * l->cols) * 4);
    assert_non_null(f);
    kiln_err err = {0};
    cv_f8_dequant_rows(w, f, r0, nrows, l->cols, scale, scale_cols, l->block, l->scale == 2);
    assert_int_not_equal(kiln_quantize_rows(KILN_Q8_0, f, dst, nrows, l->cols, NULL, &err), 0);
    free(f);
}

static void test_fused_equals_two_pass(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    uint64_t seed = 99;
    for (size_t k = 0; k < sizeof LAYOUTS / sizeof LAYOUTS[0]; k++) {
        const layout *l = &LAYOUTS[k];
        int64_t n = l->rows * l->cols, scale_cols;
        uint64_t row_bytes = kiln_type_row_bytes(KILN_Q8_0, (uint64_t)l->cols);
        uint8_t *w = malloc((size_t)n), *want = malloc(row_bytes * l->rows), *got = malloc(row_bytes * l->rows);
        assert_true(w && want && got);
        fill_weights(w, n, &seed);
        float *scale = make_scales(l, &scale_cols, &seed);
        /* the reference at the scalar level; the fused step at this one,
         * whole and from a middle row on (its scale rows must follow r0) */
        kiln_simd_set(KILN_SIMD_SCALAR);
        two_pass(w, l, scale, scale_cols, want, 0, l->rows);
        kiln_simd_set(lvl);
        assert_int_equal(cv_f8_q8_0_rows(w, got, 0, l->rows, l->cols, scale, scale_cols, l->block, l->scale == 2), -1);
        assert_memory_equal(want, got, row_bytes * l->rows);
        int64_t r0 = l->rows / 3;
        memset(got, 0x55, row_bytes * l->rows);
        assert_int_equal(cv_f8_q8_0_rows(w + r0 * l->cols, got, r0, l->rows - r0, l->cols, scale, scale_cols, l->block,
                                         l->scale == 2),
                         -1);
        assert_memory_equal(want + r0 * row_bytes, got, row_bytes * (l->rows - r0));
        free(w), free(want), free(got), free(scale);
    }
}

/* A NaN weight is refused as the codec refuses it: the first one in row
 * order is reported, whichever thread meets it first. */
static void test_fused_reports_first_nan(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    const layout l = {1100, 1024, {128, 128}, 3};
    uint64_t seed = 5;
    int64_t n = l.rows * l.cols, scale_cols;
    uint8_t *w = malloc((size_t)n), *out = malloc(kiln_type_row_bytes(KILN_Q8_0, (uint64_t)n));
    assert_true(w && out);
    fill_weights(w, n, &seed);
    float *scale = make_scales(&l, &scale_cols, &seed);
    for (int64_t i = 0; i < scale_cols * 9; i++) scale[i] = 1e-3f; /* no zero scale hides the NaNs */
    w[1000 * l.cols + 5] = 0xff;
    w[700 * l.cols + 999] = 0x7f;
    w[700 * l.cols + 1000] = 0xff;
    kiln_simd_set(lvl);
    assert_int_equal(cv_f8_q8_0_rows(w, out, 0, l.rows, l.cols, scale, scale_cols, l.block, false),
                     700 * l.cols + 999);
    /* the codec on the f32 rows names the same element */
    float *f = malloc((size_t)n * 4);
    assert_non_null(f);
    kiln_err err = {0};
    cv_f8_dequant_rows(w, f, 0, l.rows, l.cols, scale, scale_cols, l.block, false);
    assert_int_equal(kiln_quantize_rows(KILN_Q8_0, f, out, l.rows, l.cols, NULL, &err), 0);
    assert_non_null(strstr(err.msg, "row 700 column 999"));
    free(w), free(out), free(scale), free(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_VECTOR_TESTS(test_span_equals_table),
        SIMD_LEVEL_TESTS(test_fused_equals_two_pass),
        SIMD_LEVEL_TESTS(test_fused_reports_first_nan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
