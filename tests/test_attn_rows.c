/* tests/test_attn_rows.c - the products of the f32 attention over many
 * cache rows (runtime/ops.c, used by runtime/attention.c) give the bits of
 * their plain definitions at every SIMD level:
 *
 *   kiln_vec_dot_f32_rows (scores: AVX-512 takes sixteen rows at a time and
 *     reduces them together) and its tile form kiln_vec_dot_f32_rows_multi
 *     (several queries over the same rows, each with its own row count;
 *     AVX-512 pairs 64-wide queries on each row it loads) against
 *     kiln_vec_dot_f32 row by row at the scalar level;
 *   kiln_vec_wsum16_multi (the V sums: zeroed rows, kiln_vec_axpy_cyclic
 *     and kiln_reduce16_rows) against itself at the scalar level, and
 *     kiln_vec_wsum16_tr (the same sums from transposed rows, AVX-512
 *     only: one vector of 16 rows' weights a multiply-add) against it.
 *
 * Row counts below, at and past multiples of 16 (the groups' leftovers),
 * row lengths with and without the pieces the fast paths leave to the old
 * ones (n % 64 for scores), tiles of 1 to 16 queries in rising and falling
 * row counts, and strides wider than a row (a KV head inside a cache row).
 * Each level is its own case, skipped where the CPU lacks it.
 * test_orders_matter shows the data tell orders apart, so that the cases
 * above can fail. */
#include "shared.h"
#include "simd_levels.h"

#include "../runtime/ops.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

/* Values of mixed magnitudes: sums of them round differently in
 * different orders. */
static float *mixed(int64_t n) {
    float *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = kiln_test_gaussf(&rng) * (i % 7 == 0 ? 300.0f : i % 3 ? 1.0f : 0.01f);
    return v;
}

static const int64_t ROWS[] = {1, 7, 15, 16, 17, 31, 32, 33, 48, 100, 512};

static void test_scores(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    const int64_t lens[] = {32, 64, 80, 128, 136, 200};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t ri = 0; ri < sizeof ROWS / sizeof ROWS[0]; ri++) {
            const int64_t n = lens[li], rows = ROWS[ri], stride = 2 * n + 16;
            float *k = mixed(rows * stride), *q = mixed(n);
            float *want = malloc((size_t)rows * sizeof *want), *got = malloc((size_t)rows * sizeof *got);
            assert_non_null(want);
            assert_non_null(got);
            kiln_simd_set(KILN_SIMD_SCALAR);
            for (int64_t j = 0; j < rows; j++) want[j] = kiln_vec_dot_f32(q, k + j * stride + n / 2, n);
            kiln_simd_set(lvl);
            kiln_vec_dot_f32_rows(q, k + n / 2, stride, rows, n, got);
            if (memcmp(got, want, (size_t)rows * sizeof *got))
                fail_msg("kiln_vec_dot_f32_rows, %lld rows of %lld: bits differ from the scalar dot", (long long)rows,
                         (long long)n);
            free(k), free(q), free(want), free(got);
        }
}

/* A tile of m queries as kiln_attend makes them (consecutive tokens:
 * rows r0, r0 + 1, ...), or with row counts in any order (desc). */
static void tile_rows(int64_t *rows, int m, int64_t r0, bool desc) {
    for (int i = 0; i < m; i++) rows[i] = desc ? r0 + 5 * (m - i) : r0 + i;
}

static const int TILES[] = {1, 2, 3, 8, 16};

static void test_scores_multi(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    const int64_t lens[] = {32, 64, 80, 128};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t ti = 0; ti < sizeof TILES / sizeof TILES[0]; ti++)
            for (size_t ri = 0; ri < sizeof ROWS / sizeof ROWS[0]; ri++)
                for (int desc = 0; desc < 2; desc++) {
                    const int m = TILES[ti];
                    const int64_t n = lens[li], stride = 2 * n, lda = 3 * n, most = ROWS[ri] + 5 * m + 1;
                    int64_t rows[16];
                    tile_rows(rows, m, ROWS[ri], desc);
                    float *k = mixed(most * stride), *q = mixed(m * lda);
                    float *want = calloc((size_t)(m * most), sizeof *want), *got = calloc((size_t)(m * most), sizeof *got);
                    assert_non_null(want);
                    assert_non_null(got);
                    kiln_simd_set(KILN_SIMD_SCALAR);
                    for (int i = 0; i < m; i++)
                        for (int64_t j = 0; j < rows[i]; j++) want[i * most + j] = kiln_vec_dot_f32(q + i * lda, k + j * stride, n);
                    kiln_simd_set(lvl);
                    kiln_vec_dot_f32_rows_multi(q, lda, m, k, stride, rows, n, got, most);
                    if (memcmp(got, want, (size_t)(m * most) * sizeof *got))
                        fail_msg("kiln_vec_dot_f32_rows_multi, %d queries from %lld rows of %lld: bits differ", m,
                                 (long long)ROWS[ri], (long long)n);
                    free(k), free(q), free(want), free(got);
                }
}

/* The V sums of one query by their definition, at the current level. */
static void wsum_reference(const float *x, int64_t stride, const float *p, int64_t rows, int64_t n, float *o) {
    float *acc = calloc((size_t)(16 * n), sizeof *acc);
    assert_non_null(acc);
    kiln_vec_axpy_cyclic(acc, 16, n, x, stride, p, rows, n);
    kiln_reduce16_rows(acc, n, o, n);
    free(acc);
}

/* The transposed form: xt holds v's columns, padded with NaN (which the
 * kernel must not let in) to a whole 16 past the longest rows; there is
 * a kernel at AVX-512 for n % 4 == 0 and none elsewhere. */
static void test_wsum16_tr(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    const int64_t lens[] = {4, 18, 20, 64, 128};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t ti = 0; ti < sizeof TILES / sizeof TILES[0]; ti++)
            for (size_t ri = 0; ri < sizeof ROWS / sizeof ROWS[0]; ri++)
                for (int desc = 0; desc < 2; desc++) {
                    const int m = TILES[ti];
                    const int64_t n = lens[li], most = ROWS[ri] + 5 * m + 1, ldx = (most + 15) / 16 * 16 + 16;
                    const int64_t ldo = 2 * n;
                    int64_t rows[16];
                    tile_rows(rows, m, ROWS[ri], desc);
                    float *v = mixed(most * n), *p = mixed(m * most + 16), *xt = malloc((size_t)(n * ldx) * sizeof *xt);
                    float *want = calloc((size_t)(m * ldo), sizeof *want), *got = calloc((size_t)(m * ldo), sizeof *got);
                    float *acc = malloc((size_t)(16 * n) * sizeof *acc);
                    assert_non_null(xt);
                    assert_non_null(want);
                    assert_non_null(got);
                    assert_non_null(acc);
                    for (int64_t d = 0; d < n; d++)
                        for (int64_t j = 0; j < ldx; j++) xt[d * ldx + j] = j < most ? v[j * n + d] : NAN;
                    for (int i = 0; i < m; i++) /* weights past a query's rows (read, masked): must not count */
                        for (int64_t j = rows[i]; j < most; j++) p[i * most + j] = NAN;
                    kiln_simd_set(KILN_SIMD_SCALAR);
                    kiln_vec_wsum16_multi(v, n, p, most, rows, m, n, acc, want, ldo);
                    kiln_simd_set(lvl);
                    const bool has = lvl >= KILN_SIMD_AVX512 && n % 4 == 0;
                    assert_int_equal(kiln_vec_wsum16_tr(NULL, 0, NULL, 0, NULL, 0, n, NULL, 0), has);
                    if (has) {
                        assert_true(kiln_vec_wsum16_tr(xt, ldx, p, most, rows, m, n, got, ldo));
                        if (memcmp(got, want, (size_t)(m * ldo) * sizeof *got))
                            fail_msg("kiln_vec_wsum16_tr, %d queries from %lld rows of %lld: bits differ", m,
                                     (long long)ROWS[ri], (long long)n);
                    }
                    free(v), free(p), free(xt), free(want), free(got), free(acc);
                }
}

static void test_wsum16_multi(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    const int64_t lens[] = {20, 64, 128};
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t ti = 0; ti < sizeof TILES / sizeof TILES[0]; ti++)
            for (size_t ri = 0; ri < sizeof ROWS / sizeof ROWS[0]; ri++)
                for (int desc = 0; desc < 2; desc++) {
                    const int m = TILES[ti];
                    const int64_t n = lens[li], stride = 2 * n, ldo = 3 * n, most = ROWS[ri] + 5 * m + 1;
                    int64_t rows[16];
                    tile_rows(rows, m, ROWS[ri], desc);
                    float *v = mixed(most * stride), *p = mixed(m * most);
                    float *want = calloc((size_t)(m * ldo), sizeof *want), *got = calloc((size_t)(m * ldo), sizeof *got);
                    float *acc = malloc((size_t)(16 * n) * sizeof *acc);
                    assert_non_null(want);
                    assert_non_null(got);
                    assert_non_null(acc);
                    kiln_simd_set(KILN_SIMD_SCALAR);
                    for (int i = 0; i < m; i++) wsum_reference(v, stride, p + i * most, rows[i], n, want + i * ldo);
                    kiln_simd_set(lvl);
                    kiln_vec_wsum16_multi(v, stride, p, most, rows, m, n, acc, got, ldo);
                    if (memcmp(got, want, (size_t)(m * ldo) * sizeof *got))
                        fail_msg("kiln_vec_wsum16_multi, %d queries from %lld rows of %lld: bits differ", m,
                                 (long long)ROWS[ri], (long long)n);
                    free(v), free(p), free(want), free(got), free(acc);
                }
}

/* The data are order-sensitive: a plain running sum misses the 16-chain
 * sums, and a plain pairwise reduction of the score's four accumulators
 * misses the dot's, on some of these rows. */
static void test_orders_matter(void **state) {
    (void)state;
    const int64_t n = 64, rows = 512;
    float *v = mixed(rows * n), *p = mixed(rows), *o = malloc((size_t)n * sizeof *o);
    assert_non_null(o);
    wsum_reference(v, n, p, rows, n, o);
    int sum_differs = 0;
    for (int64_t d = 0; d < n; d++) {
        float s = 0.0f;
        for (int64_t j = 0; j < rows; j++) s = fmaf(v[j * n + d], p[j], s);
        sum_differs += memcmp(&s, &o[d], sizeof s) != 0;
    }
    assert_true(sum_differs > 0);
    int dot_differs = 0;
    for (int64_t j = 0; j < rows; j++) {
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++) s = fmaf(v[j * n + i], v[i], s);
        const float want = kiln_vec_dot_f32(v, v + j * n, n);
        dot_differs += memcmp(&s, &want, sizeof s) != 0;
    }
    assert_true(dot_differs > 0);
    free(v), free(p), free(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_scores),
        SIMD_LEVEL_TESTS(test_wsum16_tr),
        SIMD_LEVEL_TESTS(test_scores_multi),
        SIMD_LEVEL_TESTS(test_wsum16_multi),
        cmocka_unit_test(test_orders_matter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
