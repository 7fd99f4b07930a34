/* tests/test_quant_iq2.c - what is particular to IQ2_XXS beyond the generic
 * codec suites: its codebooks, the neighbour map, the two searches (ggml's,
 * byte for byte with llama.cpp; kiln's default, never worse than ggml's row
 * by row and clearly better on heavy-tailed rows), degenerate imatrices,
 * and SIMD == scalar for both searches and the dequantizer. */
#include "shared.h"
#include "quant_golden.h"
#include "simd_levels.h"

#include <math.h>

#include "../core/cpu.h"
#include "../core/types.h"
#include "../codec/blocks.h"
#include "../codec/codec.h"
#include "../codec/iq2_tables.h"
#include "../codec/quants.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double uniform(void) { return kiln_test_uniform(&rng); }
static double gauss(void) { return kiln_test_gauss(&rng); }
/* 0.02 * Student-t(3): heavy tails like real weights. Unlike
 * kiln_test_heavy() it draws the denominator first; kept so that the data
 * the bounds below were set on stay the same. */
static float heavy(void) {
    double c = 0;
    for (int i = 0; i < 3; i++) {
        double g = gauss();
        c += g * g;
    }
    return (float)(0.02 * gauss() / sqrt(c / 3));
}

static size_t row_bytes(int64_t cols) {
    return kiln_type_row_bytes(KILN_IQ2_XXS, (uint64_t)cols);
}

/* Sum of err^2 and of w * err^2 for one row. */
static void row_err(const float *x, const float *y, const float *w, int64_t n, double *r,
                    double *rw) {
    *r = *rw = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)x[i] - y[i];
        *r += d * d;
        *rw += (w ? w[i] : 1.0) * d * d;
    }
}

static void test_codebooks(void **state) {
    (void)state;
    for (int k = 0; k < KILN_IQ2XXS_GRID; k++) {
        for (int j = 0; j < 8; j++) {
            unsigned v = (unsigned)(kiln_iq2xxs_grid[k] >> 8 * j) & 0xff;
            unsigned o = (unsigned)(kiln_iq2xxs_grid_odd[k] >> 8 * j) & 0xff;
            assert_true(v == 8 || v == 25 || v == 43);
            assert_int_equal(o, v == 8 ? 1 : v == 25 ? 3 : 5);
        }
        for (int m = 0; m < k; m++) assert_true(kiln_iq2xxs_grid[m] != kiln_iq2xxs_grid[k]);
    }
    /* Known entries of ggml's iq2xxs_grid, first and last. */
    assert_true(kiln_iq2xxs_grid[0] == 0x0808080808080808ull);
    assert_true(kiln_iq2xxs_grid[1] == 0x080808080808082bull);
    assert_true(kiln_iq2xxs_grid[255] == 0x2b2b2b1908081908ull);
    for (int s = 0; s < 128; s++) {
        assert_int_equal(kiln_iq2_signs[s] & 127, s);
        assert_int_equal(__builtin_popcount(kiln_iq2_signs[s]) % 2, 0);
    }
}

static void test_neighbour_map(void **state) {
    (void)state;
    const kiln_iq2xxs_search *s = kiln_iq2xxs_search_tables();
    assert_non_null(s);
    int on = 0, off = 0;
    for (uint32_t key = 0; key < KILN_IQ2_KEYS; key++) {
        int valid = 1;
        for (int j = 0; j < 8; j++) valid &= ((key >> 2 * j) & 3) != 3;
        if (!valid) continue;
        int32_t m = s->map[key];
        if (m >= 0) {
            on++;
            for (int j = 0; j < 8; j++)
                assert_int_equal((kiln_iq2xxs_grid_odd[m] >> 8 * j & 0xff), 2 * ((key >> 2 * j) & 3) + 1);
            continue;
        }
        off++;
        const kiln_iq2_list *li = &s->lists[-m - 1];
        assert_true(li->n > 0 && li->n <= li->npad && li->npad % 16 == 0);
        /* Entries come by non-decreasing distance, at most two distances. */
        int last = -1, shells = 0;
        for (int j = 0; j < li->n; j++) {
            uint64_t g = kiln_iq2xxs_grid_odd[s->idx[li->start + j]];
            int d2 = 0;
            for (int i = 0; i < 8; i++) {
                int diff = (int)(g >> 8 * i & 0xff) - (int)(2 * ((key >> 2 * i) & 3) + 1);
                d2 += diff * diff;
                assert_int_equal(s->q[8 * (size_t)li->start + (size_t)i * li->npad + j], g >> 8 * i & 0xff);
            }
            assert_true(d2 >= last);
            shells += d2 > last;
            last = d2;
        }
        assert_true(shells <= 2);
    }
    assert_int_equal(on, 256);
    assert_int_equal(off, 6561 - 256);
    assert_int_equal(s->nlists, off);
}

/* ggml's search reproduces llama.cpp's blocks exactly. */
static void test_ggml_search_matches_llama(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    for (int t = 0; t < N_GOLDEN_SRCS; t++) {
        const golden_src *g = &GOLDEN_SRCS[t];
        size_t qlen;
        float *x = golden_load(NULL, "%s.f32", g->name);
        float *w = golden_load(NULL, "%s.imatrix.f32", g->name);
        uint8_t *ref = golden_load(&qlen, "%s.%s.imx.q", g->name, "IQ2_XXS");
        uint8_t *q = malloc(qlen);
        assert_int_equal(kiln_quantize_iq2_xxs_ggml(x, q, g->rows, g->cols, w), qlen);
        size_t same = 0, nb = qlen / sizeof(kiln_block_iq2_xxs);
        for (size_t b = 0; b < nb; b++) same += !memcmp(q + 66 * b, ref + 66 * b, 66);
        printf("# %-22s ggml search: %zu/%zu blocks identical to llama.cpp\n", g->name, same, nb);
        assert_int_equal(same, nb);
        free(x);
        free(w);
        free(ref);
        free(q);
    }
}

/* kiln's default is never worse than ggml's on any row, in either error,
 * and on heavy-tailed rows clearly better in both. */
static void check_never_worse(const float *x, const float *w, int64_t rows, int64_t cols,
                              double *ratio_r, double *ratio_w) {
    size_t bytes = row_bytes(cols) * (size_t)rows;
    uint8_t *qa = malloc(bytes), *qb = malloc(bytes);
    float *ya = malloc((size_t)(rows * cols) * 4), *yb = malloc((size_t)(rows * cols) * 4);
    assert_int_equal(kiln_quantize_iq2_xxs_ggml(x, qa, rows, cols, w), bytes);
    assert_int_equal(kiln_quantize_iq2_xxs(x, qb, rows, cols, w), bytes);
    kiln_dequantize_row_iq2_xxs(qa, ya, rows * cols);
    kiln_dequantize_row_iq2_xxs(qb, yb, rows * cols);
    double ta = 0, twa = 0, tb = 0, twb = 0;
    for (int64_t r = 0; r < rows; r++) {
        double ra, rwa, rb, rwb;
        row_err(x + r * cols, ya + r * cols, w, cols, &ra, &rwa);
        row_err(x + r * cols, yb + r * cols, w, cols, &rb, &rwb);
        if (rb > ra * (1 + 1e-12) || rwb > rwa * (1 + 1e-12))
            fail_msg("row %lld: kiln (%g, %g) worse than ggml (%g, %g)", (long long)r, rb, rwb, ra, rwa);
        ta += ra, twa += rwa, tb += rb, twb += rwb;
    }
    *ratio_r = sqrt(tb / ta);
    *ratio_w = sqrt(twb / twa);
    free(qa);
    free(qb);
    free(ya);
    free(yb);
}

static void test_default_never_worse(void **state) {
    (void)state;
    int64_t rows = 24, cols = 2048;
    float *x = malloc((size_t)(rows * cols) * 4), *w = calloc((size_t)cols, 4);
    for (int64_t i = 0; i < rows * cols; i++) x[i] = heavy();
    for (int64_t i = 0; i < rows * cols; i++) w[i % cols] += x[i] * x[i] / (float)rows;
    double rr, rw;
    check_never_worse(x, w, rows, cols, &rr, &rw);
    printf("# synthetic t(3), imatrix = mean x^2: rmse %.4fx, wrmse %.4fx of ggml's\n", rr, rw);
    assert_true(rr < 0.92 && rw < 0.92);

    /* A skewed imatrix: a few columns matter 1000x more. */
    for (int64_t c = 0; c < cols; c++) w[c] = (float)(uniform() < 0.02 ? 1000 : 0.01 + uniform());
    check_never_worse(x, w, rows, cols, &rr, &rw);
    printf("# synthetic, skewed imatrix: rmse %.4fx, wrmse %.4fx of ggml's\n", rr, rw);
    assert_true(rw < 1.0);

    if (kiln_shared()) {
        for (int t = 0; t < N_GOLDEN_SRCS; t++) {
            const golden_src *g = &GOLDEN_SRCS[t];
            float *gx = golden_load(NULL, "%s.f32", g->name);
            float *gw = golden_load(NULL, "%s.imatrix.f32", g->name);
            check_never_worse(gx, gw, g->rows, g->cols, &rr, &rw);
            printf("# %-22s default: rmse %.4fx, wrmse %.4fx of llama.cpp's\n", g->name, rr, rw);
            free(gx);
            free(gw);
        }
    }
    free(x);
    free(w);
}

/* Zero, partly zero and tiny imatrices, zero and constant groups, and huge
 * values: no crash, finite output, zeros stay zero. */
static void test_degenerate(void **state) {
    (void)state;
    const int64_t cols = 512;
    float x[512], y[512], w[512];
    uint8_t q[2 * 66];
    for (int variant = 0; variant < 6; variant++) {
        for (int i = 0; i < cols; i++) {
            x[i] = heavy();
            w[i] = 1;
        }
        switch (variant) {
        case 0: memset(w, 0, sizeof w); break;                          /* no importance at all */
        case 1: for (int i = 0; i < cols; i += 2) w[i] = 0; break;      /* half the columns */
        case 2: for (int i = 0; i < 64; i++) w[i] = 0; break;           /* two whole groups */
        case 3: for (int i = 0; i < 32; i++) x[40 + i] = 0; break;      /* a zero group */
        case 4: for (int i = 0; i < cols; i++) w[i] = 1e-30f; break;    /* tiny weights */
        default: x[3] = 3e6f; x[300] = -2e6f; break;                    /* huge outliers */
        }
        for (int path = 0; path < 2; path++) {
            size_t got = path ? kiln_quantize_iq2_xxs(x, q, 1, cols, w)
                              : kiln_quantize_iq2_xxs_ggml(x, q, 1, cols, w);
            assert_int_equal(got, 2 * 66);
            kiln_dequantize_row_iq2_xxs(q, y, cols);
            for (int i = 0; i < cols; i++) assert_true(isfinite(y[i]));
        }
    }
    memset(x, 0, sizeof x);
    kiln_quantize_iq2_xxs(x, q, 1, cols, w);
    kiln_dequantize_row_iq2_xxs(q, y, cols);
    for (int i = 0; i < cols; i++) assert_true(y[i] == 0.0f);
}

/* The reference quantizer is ggml's search with unit weights. */
static void test_ref(void **state) {
    (void)state;
    float x[768];
    uint8_t a[3 * 66], b[3 * 66];
    for (int i = 0; i < 768; i++) x[i] = heavy();
    kiln_quantize_row_iq2_xxs_ref(x, a, 768);
    kiln_quantize_iq2_xxs_ggml(x, b, 1, 768, NULL);
    assert_memory_equal(a, b, sizeof a);
}

/* This case's SIMD level gives the scalar bytes for both searches, and
 * the scalar floats when dequantizing. */
static void test_simd_matches_scalar(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    int64_t rows = 6, cols = 1024;
    size_t bytes = row_bytes(cols) * (size_t)rows;
    float *x = malloc((size_t)(rows * cols) * 4), *w = malloc((size_t)cols * 4);
    float *y0 = malloc((size_t)(rows * cols) * 4), *y1 = malloc((size_t)(rows * cols) * 4);
    uint8_t *q0 = malloc(bytes), *q1 = malloc(bytes);
    for (int64_t i = 0; i < rows * cols; i++) x[i] = heavy();
    x[5] = 3.0f;
    for (int64_t i = 0; i < 32; i++) x[100 + i] = 0;
    for (int64_t c = 0; c < cols; c++) w[c] = c % 97 == 0 ? 0 : (float)(0.1 + uniform() * (c % 17 ? 1 : 50));
    size_t (*paths[2])(const float *, void *, int64_t, int64_t, const float *) = {
        kiln_quantize_iq2_xxs_ggml, kiln_quantize_iq2_xxs};
    for (int p = 0; p < 2; p++) {
        kiln_simd_set(KILN_SIMD_SCALAR);
        paths[p](x, q0, rows, cols, w);
        kiln_dequantize_row_iq2_xxs(q0, y0, rows * cols);
        kiln_simd_set(lvl);
        paths[p](x, q1, rows, cols, w);
        if (memcmp(q0, q1, bytes))
            fail_msg("%s search: %s bytes differ from scalar", p ? "kiln" : "ggml", kiln_simd_name(lvl));
        kiln_dequantize_row_iq2_xxs(q1, y1, rows * cols);
        if (memcmp(y0, y1, (size_t)(rows * cols) * 4))
            fail_msg("dequantize: %s differs from scalar", kiln_simd_name(lvl));
    }
    free(x);
    free(w);
    free(y0);
    free(y1);
    free(q0);
    free(q1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codebooks),
        cmocka_unit_test(test_neighbour_map),
        cmocka_unit_test(test_ggml_search_matches_llama),
        cmocka_unit_test(test_default_never_worse),
        cmocka_unit_test(test_degenerate),
        cmocka_unit_test(test_ref),
        SIMD_VECTOR_TESTS(test_simd_matches_scalar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
