/* tests/test_imatrix_columns.c - the imatrix hook's sums at every SIMD
 * level (imatrix/collect.c: add_columns, AVX-512 and threaded by column
 * blocks) against the definition: per column, s2 += (double)x * x and
 * s += x in token order, in double. The sums must match bit for bit (a
 * resumed or merged run relies on it, and so do the equality tests with
 * llama-imatrix's files), whatever the width, the thread split or the
 * column count's remainder. A level the CPU (or KILN_SIMD) lacks is a
 * skip. */
#include "shared.h"

#include "../core/cpu.h"
#include "../imatrix/collect.h"

#include <omp.h>

/* Heavy-tailed activations with exact zeros, tiny and huge values, so
 * that a reordered or fused sum would round differently somewhere. */
static void fill(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        double g = kiln_test_gauss(&s), u = kiln_test_uniform(&s);
        x[i] = u < 0.05 ? 0.0f : (float)(g * exp(6.0 * kiln_test_uniform(&s) - 3.0));
    }
}

/* The definition, written out independently of collect.c. */
static void reference(const float *x, int64_t nt, int64_t n, int calls, double *s2, double *s1) {
    for (int c = 0; c < calls; c++)
        for (int64_t t = 0; t < nt; t++)
            for (int64_t j = 0; j < n; j++) {
                const double v = x[(c * nt + t) * n + j];
                s2[j] = s2[j] + v * v;
                s1[j] = s1[j] + v;
            }
}

/* Feeds `calls` hook calls of nt tokens each at `level` and compares the
 * collector's sums with the reference's bits. */
static void check_level(kiln_simd_level level, int64_t nt, int64_t n, int calls) {
    float *x = malloc((size_t)(calls * nt * n) * sizeof *x);
    double *s2 = calloc((size_t)n, sizeof *s2), *s1 = calloc((size_t)n, sizeof *s1);
    assert_non_null(x);
    assert_non_null(s2);
    assert_non_null(s1);
    fill(x, calls * nt * n, 0x5eed + (uint64_t)(n * 31 + nt));
    reference(x, nt, n, calls, s2, s1);
    kiln_simd_set(level);
    kiln_imx_collector c;
    kiln_imx_collector_init(&c, NULL, false, true);
    for (int k = 0; k < calls; k++) kiln_imx_hook(&c, "blk.0.ffn_down.weight", -1, x + k * nt * n, nt, n);
    assert_false(c.failed);
    const kiln_imx_acc *a = kiln_imx_collector_find(&c, "blk.0.ffn_down.weight");
    assert_non_null(a);
    assert_int_equal(a->counts[0], calls * nt);
    for (int64_t j = 0; j < n; j++) {
        if (memcmp(&a->sum2[j], &s2[j], sizeof(double)) || memcmp(&a->sum[j], &s1[j], sizeof(double)))
            fail_msg("level %s, %lld tokens x %lld columns: column %lld: sum2 %.17g (want %.17g), sum %.17g (want %.17g)",
                     kiln_simd_name(level), (long long)nt, (long long)n, (long long)j, a->sum2[j], s2[j], a->sum[j],
                     s1[j]);
    }
    kiln_imx_collector_free(&c);
    kiln_simd_set(KILN_SIMD_AVX512);
    free(x);
    free(s2);
    free(s1);
}

/* Shapes: one token, a few, and enough for the column split over the
 * team; widths below one register block, with remainders, the 1B
 * model's 2048 and 5632. */
static void sums_at(kiln_simd_level level) {
    kiln_simd_set(level);
    if (kiln_simd() < level) {
        kiln_simd_set(KILN_SIMD_AVX512);
        skip();
    }
    static const int64_t shapes[][2] = {{1, 7},   {3, 31},   {5, 33},    {64, 2048}, {40, 5632},
                                        {2, 300}, {97, 2059}, {128, 513}, {1, 4096}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check_level(level, shapes[i][0], shapes[i][1], 3);
}

static void sums_scalar(void **state) {
    (void)state;
    sums_at(KILN_SIMD_SCALAR);
}

static void sums_avx2(void **state) {
    (void)state;
    sums_at(KILN_SIMD_AVX2);
}

static void sums_avx512(void **state) {
    (void)state;
    sums_at(KILN_SIMD_AVX512);
}

/* One thread and two give the same bits (the split is by columns). */
static void sums_threads(void **state) {
    (void)state;
    const int had = omp_get_max_threads();
    omp_set_num_threads(1);
    check_level(kiln_simd(), 64, 2048, 2);
    omp_set_num_threads(had > 1 ? had : 2);
    check_level(kiln_simd(), 64, 2048, 2);
    omp_set_num_threads(had);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sums_scalar),
        cmocka_unit_test(sums_avx2),
        cmocka_unit_test(sums_avx512),
        cmocka_unit_test(sums_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
