/* tests/test_ops_par.c - the element-wise steps of the forward pass that
 * share a prompt batch's rows with the team (runtime/ops.c: RMS norms,
 * SwiGLU, the residual add; par.h's KILN_PAR_MIN_FLOATS) give the bits of
 * the same step on one thread, at every SIMD level: below the threshold
 * (a decode row) and above it (a batch of 512 rows, as pp512 has), with
 * leftover rows past the norm's groups of four, in place and not. Each
 * SIMD level is its own case, skipped where the CPU lacks it. */
#include "shared.h"
#include "simd_levels.h"

#include <omp.h>

#include "../runtime/ops.h"
#include "../runtime/par.h"

static uint64_t rng = 0x853c49e6748fea9bull;

static float *gauss(int64_t n) {
    return kiln_test_gauss_vec(&rng, n, 2.0f);
}

static float *copy(const float *x, int64_t n) {
    float *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    memcpy(v, x, (size_t)n * sizeof *v);
    return v;
}

static void assert_same_bits(const float *a, const float *b, int64_t n, const char *what, int64_t rows) {
    if (memcmp(a, b, (size_t)n * sizeof *a))
        fail_msg("%s of %lld rows: the team's bits differ from one thread's", what, (long long)rows);
}

/* Runs each step with the team (2 threads) and on one thread, for row
 * counts on both sides of the threshold. */
static void test_team_bits(void **state) {
    simd_level_enter(state);
    const int threads_before = omp_get_max_threads();
    const int64_t n = 256, counts[] = {1, 7, 509, 512};
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        const int64_t rows = counts[ci], len = rows * n;
        float *x = gauss(len), *w = gauss(n), *g = gauss(len), *u = gauss(len);
        float *y1 = malloc((size_t)len * sizeof(float)), *y2 = malloc((size_t)len * sizeof(float));
        assert_non_null(y1);
        assert_non_null(y2);
        /* RMS norm, out of place and in place */
        omp_set_num_threads(1);
        kiln_rms_norm_rows(x, w, y1, rows, n, 1e-5f);
        float *in1 = copy(x, len), *in2 = copy(x, len);
        kiln_rms_norm_rows(in1, NULL, in1, rows, n, 1e-5f);
        omp_set_num_threads(2);
        kiln_rms_norm_rows(x, w, y2, rows, n, 1e-5f);
        kiln_rms_norm_rows(in2, NULL, in2, rows, n, 1e-5f);
        assert_same_bits(y2, y1, len, "kiln_rms_norm_rows", rows);
        assert_same_bits(in2, in1, len, "kiln_rms_norm_rows in place", rows);
        /* and the team's norm is the row-by-row one */
        for (int64_t r = 0; r < rows; r++) kiln_rms_norm(x + r * n, w, y1 + r * n, n, 1e-5f);
        assert_same_bits(y2, y1, len, "kiln_rms_norm_rows against kiln_rms_norm", rows);
        /* SwiGLU into its gate, as ffn.c calls it */
        float *g1 = copy(g, len), *g2 = copy(g, len);
        omp_set_num_threads(1);
        kiln_swiglu(g1, u, g1, rows, n, KILN_NUM_GGML);
        omp_set_num_threads(2);
        kiln_swiglu(g2, u, g2, rows, n, KILN_NUM_GGML);
        assert_same_bits(g2, g1, len, "kiln_swiglu", rows);
        /* the residual add, with a length that is no multiple of a chunk */
        float *a1 = copy(x, len - 3), *a2 = copy(x, len - 3);
        omp_set_num_threads(1);
        kiln_vec_add(a1, u, len - 3);
        omp_set_num_threads(2);
        kiln_vec_add(a2, u, len - 3);
        assert_same_bits(a2, a1, len - 3, "kiln_vec_add", rows);
        for (int64_t i = 0; i < len - 3; i++)
            if (a2[i] != x[i] + u[i]) fail_msg("kiln_vec_add: element %lld is not x + u", (long long)i);
        free(x), free(w), free(g), free(u), free(y1), free(y2), free(in1), free(in2), free(g1), free(g2), free(a1),
            free(a2);
    }
    omp_set_num_threads(threads_before);
}

/* The threshold itself: a decode row stays on one thread, pp512's rows
 * of a 256-wide model take the team. */
static void test_threshold(void **state) {
    (void)state;
    assert_false(kiln_par_worth_floats(256.0));
    assert_false(kiln_par_worth_floats(KILN_PAR_MIN_FLOATS - 1.0));
    assert_true(kiln_par_worth_floats(512.0 * 256.0));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_team_bits),
        cmocka_unit_test(test_threshold),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
