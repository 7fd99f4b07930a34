/* tests/test_tiny16.c - prompt batches against F16 / BF16 weights in
 * KILN_NUM_GGML mode take tinyBLAS's order with the activations kept in
 * 16 bits from AVX-512 up (kiln_fggml_tiny16_avx512, the table's run16;
 * matmul.c rounds them straight into their F16 / BF16 values). The bits
 * must be those of the scalar reference kiln_fggml_tiny_ref on the rounded
 * float activations:
 *   - the kernel itself, at 1-3 threads, over row counts of one and more
 *     4-row tiles, token counts covering every tile width (6 tokens a tile,
 *     1..5 left over) and k of one vector, of several, and past the
 *     2048-value chunk after which a tile parks its partial sums (with a
 *     partial last chunk);
 *   - kiln_matmul, which chooses the 16-bit path, against the same;
 *   - a group (kiln_matmul_group) where the input feeds both a 16-bit
 *     product and one tinyBLAS declines (rows not a multiple of 4: floats,
 *     ggml_vec_dot's order), so the group must not share one conversion.
 * On a CPU without AVX-512 the cases skip. */
#include "shared.h"
#include "simd_levels.h"

#include <omp.h>

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../runtime/kernels.h"
#include "../runtime/matmul.h"
#include "../runtime/vecdot.h"

static uint64_t rng = 0x243f6a8885a308d3ull;

typedef struct problem {
    uint32_t type;
    int64_t n, n_out, n_tokens, row_bytes;
    uint8_t *w;
    float *x;       /* the activations as given */
    float *xr;      /* rounded to the weight's type, as floats */
    uint16_t *x16;  /* the same, in 16 bits */
    float *ref;     /* kiln_fggml_tiny_ref on xr */
} problem;

static problem make_problem(uint32_t type, int64_t n, int64_t n_out, int64_t n_tokens) {
    problem p = {.type = type, .n = n, .n_out = n_out, .n_tokens = n_tokens,
                 .row_bytes = (int64_t)kiln_type_row_bytes(type, (uint64_t)n)};
    p.w = malloc((size_t)(p.row_bytes * n_out));
    p.x = malloc((size_t)(n * n_tokens) * sizeof(float));
    p.xr = malloc((size_t)(n * n_tokens) * sizeof(float));
    p.x16 = malloc((size_t)(n * n_tokens) * sizeof(uint16_t));
    p.ref = malloc((size_t)(n_out * n_tokens) * sizeof(float));
    float *scratch = malloc((size_t)kiln_fggml_ref_scratch(type, n) * sizeof(float));
    assert_true(p.w && p.x && p.xr && p.x16 && p.ref && scratch);
    uint16_t *w16 = (uint16_t *)p.w;
    for (int64_t i = 0; i < n * n_out; i++) {
        /* a few large weights, so that the order shows in the low bits */
        const float g = kiln_test_gaussf(&rng), v = (rng >> 60) == 0 ? 30.0f * g : 0.05f * g;
        w16[i] = type == KILN_F16 ? kiln_fp32_to_fp16(v) : kiln_fp32_to_bf16(v);
    }
    for (int64_t i = 0; i < n * n_tokens; i++) p.x[i] = kiln_test_gaussf(&rng);
    for (int64_t t = 0; t < n_tokens; t++) {
        kiln_act_bits16(type, p.x + t * n, p.x16 + t * n, n);
        for (int64_t k = 0; k < n; k++) {
            const uint16_t h = p.x16[t * n + k];
            p.xr[t * n + k] = type == KILN_F16 ? kiln_fp16_to_fp32(h) : kiln_bf16_to_fp32(h);
        }
    }
    kiln_fggml_tiny_ref(type, p.w, p.row_bytes, p.xr, n, n_out, n_tokens, p.ref, scratch);
    free(scratch);
    return p;
}

static void free_problem(problem *p) {
    free(p->w), free(p->x), free(p->xr), free(p->x16), free(p->ref);
}

static void expect_ref(const problem *p, const float *y, const char *what, int threads) {
    for (int64_t i = 0; i < p->n_out * p->n_tokens; i++)
        if (memcmp(&y[i], &p->ref[i], sizeof(float)))
            fail_msg("%s %s, n %lld, %lld rows, %lld tokens, %d threads: token %lld row %lld is %.9g, "
                     "reference %.9g",
                     what, kiln_type_name(p->type), (long long)p->n, (long long)p->n_out, (long long)p->n_tokens,
                     threads, (long long)(i / p->n_out), (long long)(i % p->n_out), y[i], p->ref[i]);
}

static const uint32_t TYPES16[] = {KILN_F16, KILN_BF16};
static const int64_t NS[] = {16, 48, 2048, 2064, 4112};
static const int64_t ROWS[] = {4, 12, 44};

/* The kernel from the table, called as matmul.c calls it: inside a
 * region, each thread with its own scratch. */
static void test_kernel(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    const kiln_fkernel *fk = &kiln_kernels_get(KILN_F16)->isa[kiln_isa_now()].tiny;
    assert_non_null(fk->run16);
    assert_ptr_equal(kiln_kernels_get(KILN_BF16)->isa[kiln_isa_now()].tiny.run16, fk->run16);
    const int threads_before = omp_get_max_threads();
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t ni = 0; ni < sizeof NS / sizeof NS[0]; ni++)
            for (size_t ri = 0; ri < sizeof ROWS / sizeof ROWS[0]; ri++)
                for (int64_t nt = 2; nt <= 13; nt += (NS[ni] > 2048 ? 5 : 1)) {
                    problem p = make_problem(TYPES16[ti], NS[ni], ROWS[ri], nt);
                    float *y = malloc((size_t)(p.n_out * nt) * sizeof(float));
                    /* whole 64-byte lines a thread, as matmul.c lays them out */
                    const int64_t scratch_floats = (fk->scratch(p.type, p.n) + 15) / 16 * 16;
                    for (int th = 1; th <= 3; th++) {
                        float *scratch = aligned_alloc(64, (size_t)(th * scratch_floats) * sizeof(float));
                        assert_true(y && scratch);
                        for (int64_t i = 0; i < p.n_out * nt; i++) y[i] = NAN;
#pragma omp parallel num_threads(th)
                        fk->run16(p.type, p.w, p.row_bytes, p.x16, p.n, p.n_out, nt, y,
                                  scratch + omp_get_thread_num() * scratch_floats);
                        expect_ref(&p, y, "run16", th);
                        free(scratch);
                    }
                    free(y);
                    free_problem(&p);
                }
    omp_set_num_threads(threads_before);
    (void)lvl;
}

/* kiln_matmul, which rounds the activations into 16 bits itself. */
static void test_matmul(void **state) {
    (void)simd_level_enter(state);
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t ni = 0; ni < sizeof NS / sizeof NS[0]; ni++) {
            problem p = make_problem(TYPES16[ti], NS[ni], 44, 9);
            float *y = malloc((size_t)(p.n_out * p.n_tokens) * sizeof(float));
            assert_non_null(y);
            assert_int_equal(kiln_matmul(p.type, p.w, p.n, p.n_out, p.x, p.n_tokens, y, KILN_NUM_GGML), 0);
            expect_ref(&p, y, "kiln_matmul", omp_get_max_threads());
            free(y);
            free_problem(&p);
        }
}

/* One input, two F16 products: 8 rows (tinyBLAS, 16-bit activations) and
 * 6 rows (tinyBLAS declines: floats, vec_dot's order), both grouped and
 * alone, in either order within the group. */
static void test_group_mixed(void **state) {
    (void)simd_level_enter(state);
    const int64_t n = 2064, T = 7;
    problem a = make_problem(KILN_F16, n, 8, T);
    float *x = a.x;
    uint8_t *w6 = malloc((size_t)(a.row_bytes * 6));
    float *y6 = malloc((size_t)(6 * T) * sizeof(float)), *alone6 = malloc((size_t)(6 * T) * sizeof(float));
    float *y8 = malloc((size_t)(8 * T) * sizeof(float));
    assert_true(w6 && y6 && alone6 && y8);
    memcpy(w6, a.w, (size_t)(a.row_bytes * 6));
    assert_int_equal(kiln_matmul(KILN_F16, w6, n, 6, x, T, alone6, KILN_NUM_GGML), 0);
    for (int order = 0; order < 2; order++) {
        const kiln_mm m8 = {KILN_F16, a.w, 8, y8}, m6 = {KILN_F16, w6, 6, y6};
        const kiln_mm mm[2] = {order ? m6 : m8, order ? m8 : m6};
        int bad = -1;
        for (int64_t i = 0; i < 8 * T; i++) y8[i] = NAN;
        for (int64_t i = 0; i < 6 * T; i++) y6[i] = NAN;
        assert_int_equal(kiln_matmul_group(mm, 2, n, x, T, KILN_NUM_GGML, &bad), 0);
        expect_ref(&a, y8, order ? "group (6, 8)" : "group (8, 6)", omp_get_max_threads());
        assert_memory_equal(y6, alone6, (size_t)(6 * T) * sizeof(float));
    }
    free(w6), free(y6), free(alone6), free(y8);
    free_problem(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TEST(test_kernel, 2, "avx512"),
        SIMD_LEVEL_TEST(test_matmul, 2, "avx512"),
        SIMD_LEVEL_TESTS(test_group_mixed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
