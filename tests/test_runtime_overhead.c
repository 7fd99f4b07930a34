/* tests/test_runtime_overhead.c - the runtime's per-call savings keep
 * every bit (runtime/par.h, runtime/ops.c):
 *
 *   - a quantized product takes its buffers from the thread's arena, so
 *     once the arena has grown it allocates nothing (before, it asked
 *     kiln_kernel_alloc on every call: a malloc per product of a token);
 *   - a float product below KILN_PAR_MIN_MACS runs on one thread and one
 *     above it on the team, with the same bits at 1, 2 and 3 threads;
 *   - the batched vector helpers attention and the norms use
 *     (kiln_vec_dot_f32_rows, kiln_vec_axpy_cyclic, kiln_rms_norm_rows)
 *     give, at every SIMD level, the bits of one call per row at the
 *     scalar level. */
#include "shared.h"
#include "simd_levels.h"

#include <omp.h>

#include "../codec/codec.h"
#include "../core/cpu.h"
#include "../core/types.h"
#include "../runtime/kernels.h"
#include "../runtime/matmul.h"
#include "../runtime/ops.h"
#include "../runtime/par.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float *gauss(int64_t n) {
    float *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = kiln_test_gaussf(&rng);
    return v;
}

static void assert_same_bits(const float *a, const float *b, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)))
            fail_msg("%s: element %lld is %.9g, the reference %.9g", what, (long long)i, a[i], b[i]);
}

/* Q4_K and Q8_0 products of one token (decode) and of 9: the second call
 * of a shape must not allocate (the test hook refuses the first request,
 * so a product that asked would return -1), and must give the first
 * call's bits. */
static void test_quant_product_no_alloc(void **state) {
    (void)state;
    const uint32_t types[] = {KILN_Q4_K, KILN_Q8_0};
    const int64_t n_in = 512, n_out = 96, T = 9;
    float *wf = gauss(n_in * n_out), *x = gauss(T * n_in);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti];
        const size_t bytes = kiln_type_row_bytes(type, (uint64_t)n_in) * (size_t)n_out;
        void *w = malloc(bytes);
        assert_non_null(w);
        kiln_err err = {{0}};
        assert_int_equal(kiln_quantize_rows(type, wf, w, n_out, n_in, NULL, &err), bytes);
        for (int64_t nt = 1; nt <= T; nt += T - 1) {
            float *y0 = malloc((size_t)(nt * n_out) * sizeof(float)), *y1 = malloc((size_t)(nt * n_out) * sizeof(float));
            assert_int_equal(kiln_matmul(type, w, n_in, n_out, x, nt, y0, KILN_NUM_GGML), 0);
            kiln_kernel_alloc_fail_after(0);
            const int rc = kiln_matmul(type, w, n_in, n_out, x, nt, y1, KILN_NUM_GGML);
            kiln_kernel_alloc_fail_after(-1);
            if (rc != 0) fail_msg("%s, %lld tokens: the second product allocated", kiln_type_name(type), (long long)nt);
            assert_same_bits(y1, y0, nt * n_out, kiln_type_name(type));
            free(y0);
            free(y1);
        }
        free(w);
    }
    free(wf);
    free(x);
}

/* Float products on both sides of KILN_PAR_MIN_MACS: the same bits at 1,
 * 2 and 3 threads, one token and several. */
static void test_par_threshold_bits(void **state) {
    (void)state;
    const struct {
        int64_t n_in, n_out;
    } shapes[] = {{256, 4}, {64, 200}, {256, 256}}; /* 1k and 12.8k MACs a token: one thread; 65k: the team */
    assert_false(kiln_par_worth(64.0 * 200.0));
    assert_true(kiln_par_worth(256.0 * 256.0));
    const int threads_before = omp_get_max_threads();
    const uint32_t types[] = {KILN_F32, KILN_F16};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t ti = 0; ti < 2; ti++) {
            const int64_t n_in = shapes[s].n_in, n_out = shapes[s].n_out, T = 3;
            float *wf = gauss(n_in * n_out), *x = gauss(T * n_in);
            void *w = malloc(kiln_type_row_bytes(types[ti], (uint64_t)n_in) * (size_t)n_out);
            assert_non_null(w);
            kiln_err err = {{0}};
            assert_true(kiln_quantize_rows(types[ti], wf, w, n_out, n_in, NULL, &err) > 0);
            for (int64_t nt = 1; nt <= T; nt += T - 1) {
                float *ref = malloc((size_t)(nt * n_out) * sizeof(float)), *y = malloc((size_t)(nt * n_out) * sizeof(float));
                omp_set_num_threads(1);
                assert_int_equal(kiln_matmul(types[ti], w, n_in, n_out, x, nt, ref, KILN_NUM_GGML), 0);
                for (int th = 2; th <= 3; th++) {
                    omp_set_num_threads(th);
                    assert_int_equal(kiln_matmul(types[ti], w, n_in, n_out, x, nt, y, KILN_NUM_GGML), 0);
                    assert_same_bits(y, ref, nt * n_out, kiln_type_name(types[ti]));
                }
                free(ref);
                free(y);
            }
            omp_set_num_threads(threads_before);
            free(wf);
            free(x);
            free(w);
        }
}

/* The batched helpers against one scalar call per row: head widths of 64
 * (whole blocks), 80 (deepseek2: a tail of 16) and 40 (tail only), rows
 * spread as a KV cache spreads them (a stride wider than the row). */
static void test_rows_helpers(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    const int64_t widths[] = {64, 80, 40}, rows = 37, stride = 3 * 80 + 5;
    float *k = gauss(rows * stride), *q = gauss(80), *p = gauss(rows);
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
        const int64_t n = widths[wi];
        float got[37], want[37];
        kiln_vec_dot_f32_rows(q, k + 7, stride, rows, n, got);
        kiln_simd_set(KILN_SIMD_SCALAR);
        for (int64_t j = 0; j < rows; j++) want[j] = kiln_vec_dot_f32(q, k + 7 + j * stride, n);
        kiln_simd_set(lvl);
        assert_same_bits(got, want, rows, "kiln_vec_dot_f32_rows");

        for (int64_t m = 16; m <= 64; m += 48) {
            float *acc = calloc((size_t)(m * n), sizeof(float)), *ref = calloc((size_t)(m * n), sizeof(float));
            assert_non_null(acc);
            assert_non_null(ref);
            kiln_vec_axpy_cyclic(acc, m, n, k + 3, stride, p, rows, n);
            kiln_simd_set(KILN_SIMD_SCALAR);
            for (int64_t j = 0; j < rows; j++) kiln_vec_axpy(ref + (j % m) * n, k + 3 + j * stride, p[j], n);
            kiln_simd_set(lvl);
            assert_same_bits(acc, ref, m * n, "kiln_vec_axpy_cyclic");
            free(acc);
            free(ref);
        }
    }
    /* 4k + 3 rows: the four-row loop and the leftovers; in place and not */
    const int64_t n = 256, nr = 11;
    float *x = gauss(nr * n), *w = gauss(n), *y = malloc((size_t)(nr * n) * sizeof(float)),
          *ref = malloc((size_t)(nr * n) * sizeof(float));
    for (int64_t r = 0; r < nr; r++) kiln_rms_norm(x + r * n, w, ref + r * n, n, 1e-6f);
    kiln_rms_norm_rows(x, w, y, nr, n, 1e-6f);
    assert_same_bits(y, ref, nr * n, "kiln_rms_norm_rows");
    for (int64_t r = 0; r < nr; r++) kiln_rms_norm(x + r * n, NULL, ref + r * n, n, 1e-6f);
    kiln_rms_norm_rows(x, NULL, x, nr, n, 1e-6f);
    assert_same_bits(x, ref, nr * n, "kiln_rms_norm_rows in place");
    free(x);
    free(w);
    free(y);
    free(ref);
    free(k);
    free(q);
    free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_product_no_alloc),
        cmocka_unit_test(test_par_threshold_bits),
        SIMD_VECTOR_TESTS(test_rows_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
