/* tests/test_quant_edge.c - every codec kiln can quantize, on synthetic
 * rows: round-trip error bounds, edge cases (zeros, constants, a huge
 * outlier, subnormals, one-block rows), refusal of NaN/Inf, and the SIMD
 * paths giving exactly the scalar path's bytes. Needs no ../shared. */
#include "shared.h"
#include "simd_levels.h"

#include <math.h>

#include "../core/cpu.h"
#include "../core/types.h"
#include "../codec/codec.h"

/* Relative rmse bound per type (rmse / rms of the row) on heavy-tailed
 * rows: about 2^-(bits-1) of the type's effective bits, with headroom. */
typedef struct bound { uint32_t type; double rel_rmse; } bound;
static const bound BOUNDS[] = {
    {KILN_F32, 0}, {KILN_F16, 1e-3}, {KILN_BF16, 8e-3}, {KILN_Q8_0, 0.01},
    {KILN_Q6_K, 0.03}, {KILN_Q5_0, 0.07}, {KILN_Q5_K, 0.06}, {KILN_Q4_0, 0.14},
    {KILN_Q4_K, 0.12}, {KILN_IQ4_NL, 0.12}, {KILN_Q3_K, 0.25}, {KILN_Q2_K, 0.45},
    {KILN_IQ2_XXS, 0.6},
};
#define N_BOUNDS (sizeof BOUNDS / sizeof BOUNDS[0])

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) { return kiln_test_uniform(&rng); }
static float heavy(void) { return kiln_test_heavy(&rng); }

static void fill(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = heavy();
}

static float *imatrix_for(int64_t cols) {
    float *w = malloc((size_t)cols * 4);
    for (int64_t i = 0; i < cols; i++) w[i] = (float)(0.1 + uniform() * (i % 17 == 0 ? 50 : 1));
    return w;
}

/* Quantizes then dequantizes rows x cols; returns rmse/rms, or -1 on error. */
static double round_trip(uint32_t type, const float *x, int64_t rows, int64_t cols, float *out,
                         const float *w) {
    size_t bytes = kiln_type_row_bytes(type, (uint64_t)cols) * (size_t)rows;
    uint8_t *q = malloc(bytes);
    kiln_err err = {{0}};
    size_t got = kiln_quantize_rows(type, x, q, rows, cols, w, &err);
    if (got != bytes) { free(q); return -1; }
    kiln_codec_get(type)->dequantize_row(q, out, rows * cols);
    free(q);
    double num = 0, den = 0;
    for (int64_t i = 0; i < rows * cols; i++) {
        num += ((double)x[i] - out[i]) * ((double)x[i] - out[i]);
        den += (double)x[i] * x[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void test_round_trip_bounds(void **state) {
    int64_t rows = 8, cols = 512;
    float *x = malloc(rows * cols * 4), *y = malloc(rows * cols * 4);
    float *w = imatrix_for(cols);
    fill(x, rows * cols);
    for (size_t b = 0; b < N_BOUNDS; b++) {
        if (!kiln_can_quantize(BOUNDS[b].type)) fail_msg("kiln cannot quantize %s", kiln_type_name(BOUNDS[b].type));
        double r = round_trip(BOUNDS[b].type, x, rows, cols, y, w);
        printf("# %-8s relative rmse %.5f (bound %.5f)\n", kiln_type_name(BOUNDS[b].type), r, BOUNDS[b].rel_rmse);
        assert_true(r >= 0);
        assert_true(r <= BOUNDS[b].rel_rmse + 1e-12);
    }
    free(x); free(y); free(w);
}

/* Zeros, constants, one huge outlier, subnormals and one-block rows all
 * come back finite; zeros come back exactly zero. */
static void test_edge_rows(void **state) {
    for (size_t b = 0; b < N_BOUNDS; b++) {
        uint32_t type = BOUNDS[b].type;
        int64_t cols = kiln_type_get(type)->block_size == 1 ? 256 : 256; /* one super-block */
        float x[256], y[256];
        float *w = imatrix_for(cols);
        const kiln_codec *c = kiln_codec_get(type);
        for (int variant = 0; variant < 4; variant++) {
            for (int i = 0; i < cols; i++) {
                switch (variant) {
                case 0: x[i] = 0; break;
                case 1: x[i] = 0.37f; break;
                case 2: x[i] = heavy() + (i == 77 ? 1e4f : 0); break;
                default: x[i] = (i & 1 ? -1 : 1) * 1e-40f * (float)(i % 5); break;
                }
            }
            for (int use_w = 0; use_w < 2; use_w++) {
                if (!use_w && c->needs_imatrix) continue;
                double r = round_trip(type, x, 1, cols, y, use_w ? w : NULL);
                assert_true(r >= 0);
                for (int i = 0; i < cols; i++) assert_true(isfinite(y[i]));
                if (variant == 0)
                    for (int i = 0; i < cols; i++) assert_true(y[i] == 0.0f);
                if (variant == 1 && type != KILN_IQ2_XXS) /* constant row: every value close */
                    for (int i = 0; i < cols; i++) assert_true(fabsf(y[i] - 0.37f) < 0.37f * 0.1f);
            }
        }
        free(w);
    }
}

static void test_refuses_non_finite(void **state) {
    float x[256];
    uint8_t q[1024];
    float bad[] = {NAN, INFINITY, -INFINITY};
    for (size_t b = 0; b < N_BOUNDS; b++) {
        for (int k = 0; k < 3; k++) {
            for (int i = 0; i < 256; i++) x[i] = 0.01f * (float)i;
            x[100] = bad[k];
            kiln_err err = {{0}};
            float w[256];
            for (int i = 0; i < 256; i++) w[i] = 1;
            size_t got = kiln_quantize_rows(BOUNDS[b].type, x, q, 1, 256, w, &err);
            assert_int_equal(got, 0);
            assert_non_null(strstr(err.msg, "column 100"));
        }
    }
}

static void test_imatrix_required(void **state) {
    for (uint32_t t = 0; t < KILN_TYPE_COUNT; t++) {
        const kiln_codec *c = kiln_codec_get(t);
        if (!c || !c->quantize || !c->needs_imatrix) continue;
        float x[256] = {0};
        uint8_t q[1024];
        kiln_err err = {{0}};
        assert_int_equal(kiln_quantize_rows(t, x, q, 1, 256, NULL, &err), 0);
        assert_non_null(strstr(err.msg, "imatrix"));
    }
}

/* This case's SIMD level produces the scalar path's exact bytes and floats. */
static void test_simd_matches_scalar(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    int64_t rows = 6, cols = 1024;
    float *x = malloc(rows * cols * 4), *w = imatrix_for(cols);
    float *d0 = malloc(rows * cols * 4), *d1 = malloc(rows * cols * 4);
    fill(x, rows * cols);
    x[5] = 3.0f; /* an outlier */
    for (uint32_t t = 0; t < KILN_TYPE_COUNT; t++) {
        const kiln_codec *c = kiln_codec_get(t);
        if (!c || !c->quantize) continue;
        size_t bytes = kiln_type_row_bytes(t, (uint64_t)cols) * (size_t)rows;
        uint8_t *q0 = malloc(bytes), *q1 = malloc(bytes);
        for (int use_w = 0; use_w < 2; use_w++) {
            if (!use_w && c->needs_imatrix) continue;
            kiln_err err;
            kiln_simd_set(KILN_SIMD_SCALAR);
            assert_int_equal(kiln_quantize_rows(t, x, q0, rows, cols, use_w ? w : NULL, &err), bytes);
            c->dequantize_row(q0, d0, rows * cols);
            kiln_simd_set(lvl);
            assert_int_equal(kiln_quantize_rows(t, x, q1, rows, cols, use_w ? w : NULL, &err), bytes);
            if (memcmp(q0, q1, bytes)) fail_msg("%s quantize: %s differs from scalar", kiln_type_name(t), kiln_simd_name(lvl));
            c->dequantize_row(q1, d1, rows * cols);
            if (memcmp(d0, d1, rows * cols * 4)) fail_msg("%s dequantize: %s differs from scalar", kiln_type_name(t), kiln_simd_name(lvl));
        }
        free(q0); free(q1);
    }
    free(x); free(w); free(d0); free(d1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_bounds),
        cmocka_unit_test(test_edge_rows),
        cmocka_unit_test(test_refuses_non_finite),
        cmocka_unit_test(test_imatrix_required),
        SIMD_VECTOR_TESTS(test_simd_matches_scalar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
