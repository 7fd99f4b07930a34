/* tests/test_vecdot_frows.c - one token against F32 / F16 / BF16 weights
 * in KILN_NUM_GGML mode (decode: runtime/vecdot_frows.c, behind
 * kiln_fggml_vec_avx512; kiln_fggml_vec_avx2 at the AVX2 level) must give
 * the bits of the scalar reference kiln_fggml_vec_ref, row for row:
 *   - every n_in from 1 to 300 (ggml's 64-value blocks, BF16's 32-value
 *     ones, every tail length, F32's unfused 8s and fused rest) at row
 *     counts that leave each remainder of a 4-row pass and of a 16-row
 *     block;
 *   - every n_out from 1 to 70 at a few n_in;
 *   - matrices large enough to be streamed from memory row by row, the
 *     activation held in 16 bits, and one past that copy's length;
 *   - a few tokens more than one (the vec order's batches: experts,
 *     k % 16 != 0), which share the passes;
 * at 1, 2 and 3 threads (the blocks go out on a dynamic schedule). The
 * products go through the kernel table (kiln_fgemm_ggml, as kiln_matmul
 * calls it once the activations are rounded) at each SIMD level; a level
 * the CPU lacks is a TAP skip. */
#include "shared.h"
#include "simd_levels.h"

#include <omp.h>

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../runtime/kernels.h"
#include "../runtime/matmul.h"

static const uint32_t FTYPES[] = {KILN_F32, KILN_F16, KILN_BF16};

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* The value as a weight of `type` stores it, written into w[i]. */
static void put(uint32_t type, uint8_t *w, int64_t i, float v) {
    if (type == KILN_F32) ((float *)w)[i] = v;
    else if (type == KILN_F16) ((uint16_t *)w)[i] = kiln_fp32_to_fp16(v);
    else ((uint16_t *)w)[i] = kiln_fp32_to_bf16(v);
}

/* The activation as the product sees it: rounded to the weight's precision. */
static float act_round(uint32_t type, float v) {
    return type == KILN_F16 ? kiln_fp16_to_fp32(kiln_fp32_to_fp16(v))
           : type == KILN_BF16 ? kiln_bf16_to_fp32(kiln_fp32_to_bf16(v))
                               : v;
}

/* Weights of mixed magnitudes (a few large ones, so that the tails and
 * the reduction tree's order show in the low bits). */
static float weight(void) {
    const float g = kiln_test_gaussf(&rng);
    return (rng >> 60) == 0 ? 40.0f * g : 0.05f * g;
}

/* n_tokens tokens against a random n_in x n_out matrix: kiln_fgemm_ggml at
 * the current level, 1-3 threads, against kiln_fggml_vec_ref on the
 * rounded activations; fails on the first differing bit. */
static void check_shape(uint32_t type, int64_t n_in, int64_t n_out, int64_t n_tokens, kiln_simd_level lvl) {
    const int64_t row_bytes = (int64_t)kiln_type_row_bytes(type, (uint64_t)n_in);
    uint8_t *w = malloc((size_t)(row_bytes * n_out));
    float *xr = malloc((size_t)(n_in * n_tokens) * sizeof(float));
    float *ref = malloc((size_t)(n_out * n_tokens) * sizeof(float));
    float *y = malloc((size_t)(n_out * n_tokens) * sizeof(float));
    float *scratch = malloc((size_t)n_in * sizeof(float));
    assert_true(w && xr && ref && y && scratch);
    for (int64_t i = 0; i < n_in * n_out; i++) put(type, w, i, weight());
    for (int64_t i = 0; i < n_in * n_tokens; i++)
        xr[i] = act_round(type, kiln_test_gaussf(&rng));
    kiln_fggml_vec_ref(type, w, row_bytes, xr, n_in, n_out, n_tokens, ref, scratch);
    const int threads_before = omp_get_max_threads();
    for (int th = 1; th <= 3; th++) {
        omp_set_num_threads(th);
        for (int64_t i = 0; i < n_out * n_tokens; i++) y[i] = NAN;
        /* vec_only: the vec order whatever the token count, as experts */
        assert_int_equal(kiln_fgemm_ggml(type, w, n_in, n_out, xr, n_tokens, y, true), 0);
        for (int64_t i = 0; i < n_out * n_tokens; i++)
            if (memcmp(&y[i], &ref[i], sizeof(float)))
                fail_msg("%s %lld x %lld, %lld tokens, %d threads at %s: token %lld row %lld is %.9g, "
                         "reference %.9g",
                         kiln_type_name(type), (long long)n_in, (long long)n_out, (long long)n_tokens, th,
                         kiln_simd_name(lvl), (long long)(i / n_out), (long long)(i % n_out), y[i], ref[i]);
    }
    omp_set_num_threads(threads_before);
    free(w), free(xr), free(ref), free(y), free(scratch);
}

/* Every n_in 1..300 at row counts 1, 3, 5, 18 and 39 (a lone row, a
 * pass's remainders, a block and a bit, 2 blocks and 7 rows). */
static void test_every_n_in(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    static const int64_t rows[] = {1, 3, 5, 18, 39};
    for (size_t t = 0; t < sizeof FTYPES / sizeof FTYPES[0]; t++)
        for (int64_t n = 1; n <= 300; n++) check_shape(FTYPES[t], n, rows[n % 5], 1, lvl);
}

/* Every n_out 1..70 at n_in 64 (blocks only), 100, 257 and 2048 + 40. */
static void test_every_n_out(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    static const int64_t ns[] = {64, 100, 257, 2088};
    for (size_t t = 0; t < sizeof FTYPES / sizeof FTYPES[0]; t++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (int64_t r = 1; r <= 70; r++) check_shape(FTYPES[t], ns[i], r, 1, lvl);
}

/* Matrices past 1 MiB, which one token streams row by row with the
 * activation held in 16 bits (vecdot_float.c's DEC_CACHED_BYTES): k with
 * a tail of 44 and of 40, and k past the 16-bit copy's 16384 values. */
static void test_streamed(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    for (size_t t = 0; t < sizeof FTYPES / sizeof FTYPES[0]; t++) {
        check_shape(FTYPES[t], 300, 4003, 1, lvl);
        check_shape(FTYPES[t], 2088, 530, 1, lvl);
        check_shape(FTYPES[t], 16400, 70, 1, lvl);
    }
}

/* Several tokens through the vec order (each token a pass of its own). */
static void test_tokens(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    for (size_t t = 0; t < sizeof FTYPES / sizeof FTYPES[0]; t++)
        for (int64_t nt = 2; nt <= 5; nt++) {
            check_shape(FTYPES[t], 601, 37, nt, lvl);
            check_shape(FTYPES[t], 128, 22, nt, lvl);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_every_n_in),
        SIMD_LEVEL_TESTS(test_every_n_out),
        SIMD_LEVEL_TESTS(test_streamed),
        SIMD_LEVEL_TESTS(test_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
