/* tests/test_ops_levels.c - the element-wise steps of runtime/ops.c with
 * an AVX-512 path of their own give the scalar level's bits: kiln_softmax
 * (scaling and maximum 16 at a time) and kiln_rms_norm_rows (the scaled
 * products 16 at a time), on rows of every length around the vector width.
 * Each SIMD level is its own case, skipped where the CPU lacks it. */
#include "shared.h"
#include "simd_levels.h"

#include "../runtime/ops.h"

static uint64_t rng = 0x6a09e667f3bcc909ull;

static float *gauss(int64_t n) {
    return kiln_test_gauss_vec(&rng, n, 3.0f);
}

static const int64_t LENS[] = {1, 5, 15, 16, 17, 33, 100, 256, 512};

/* kiln_softmax's scaling and maximum (16 at a time at AVX-512) against
 * the scalar level: rows of every length around the vector width, with
 * masked (-INFINITY) cells, a zero maximum of either sign first, and a
 * row with nothing visible. */
static void test_softmax(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    for (size_t li = 0; li < sizeof LENS / sizeof LENS[0]; li++)
        for (int kind = 0; kind < 4; kind++) {
            const int64_t n = LENS[li];
            float *x = gauss(n), *want = malloc((size_t)n * sizeof *want);
            assert_non_null(want);
            for (int64_t i = 0; i < n; i++) {
                if (kind == 1 && i % 3 == 2) x[i] = -INFINITY;
                if (kind == 2) x[i] = i == 0 ? -0.0f : i == n / 2 ? 0.0f : -fabsf(x[i]);
                if (kind == 3) x[i] = -INFINITY;
            }
            memcpy(want, x, (size_t)n * sizeof *want);
            kiln_simd_set(KILN_SIMD_SCALAR);
            kiln_softmax(want, n, 0.125f, KILN_NUM_GGML);
            kiln_simd_set(lvl);
            kiln_softmax(x, n, 0.125f, KILN_NUM_GGML);
            if (memcmp(x, want, (size_t)n * sizeof *x))
                fail_msg("kiln_softmax, row of %lld (kind %d): bits differ from the scalar's", (long long)n, kind);
            free(x), free(want);
        }
}

/* Rows of the RMS norm with and without a weight, in place and not. */
static void test_rms_norm(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    for (size_t li = 0; li < sizeof LENS / sizeof LENS[0]; li++)
        for (int weighted = 0; weighted < 2; weighted++) {
            const int64_t n = LENS[li], rows = 6, len = rows * n;
            float *x = gauss(len), *w = gauss(n), *want = malloc((size_t)len * sizeof *want);
            float *got = malloc((size_t)len * sizeof *got);
            assert_non_null(want);
            assert_non_null(got);
            kiln_simd_set(KILN_SIMD_SCALAR);
            kiln_rms_norm_rows(x, weighted ? w : NULL, want, rows, n, 1e-6f);
            kiln_simd_set(lvl);
            kiln_rms_norm_rows(x, weighted ? w : NULL, got, rows, n, 1e-6f);
            if (memcmp(got, want, (size_t)len * sizeof *got))
                fail_msg("kiln_rms_norm_rows, rows of %lld: bits differ from the scalar's", (long long)n);
            kiln_rms_norm_rows(x, weighted ? w : NULL, x, rows, n, 1e-6f); /* in place */
            if (memcmp(x, want, (size_t)len * sizeof *x))
                fail_msg("kiln_rms_norm_rows in place, rows of %lld: bits differ", (long long)n);
            free(x), free(w), free(want), free(got);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_softmax),
        SIMD_LEVEL_TESTS(test_rms_norm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
