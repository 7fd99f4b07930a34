/* tests/test_kquant_order.c - the k-quant and IQ2_XXS products in
 * KILN_NUM_GGML mode follow llama.cpp's x86 AVX-512 float orders
 * (runtime/vecdot_korder.c): ggml's AVX2 vec_dot functions, and for the
 * weights ggml repacks (Q4_K, Q2_K with a row count divisible by 8) its
 * gemm kernel for 4-token groups and its gemv kernel for the rest and for
 * MoE experts.
 *
 * 1. The orders are written out once more here, independently of the
 *    kernels (from the unpacked integer levels), and kiln_matmul must give
 *    their bits at every SIMD level.
 * 2. The 4x8 Q8_K quantizer's sign rule for ties of |max|.
 * End to end, test_forward's golden_ggml requires llama.cpp's logits bit
 * for bit on every golden GGUF, these types included. */
#include "shared.h"

#include <math.h>

#include "simd_levels.h"
#include "../core/cpu.h"
#include "../core/types.h"
#include "../golden/klgt.h"
#include "../codec/blocks.h"
#include "../codec/codec.h"
#include "../runtime/matmul.h"
#include "../runtime/runtime.h"
#include "../runtime/vecdot.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float gauss(void) { return kiln_test_gaussf(&rng); }

/* ---- 1. the orders, written out ----------------------------------------- */

static float hsum8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* One output in ggml's order for `order`, from unpacked levels. */
static float expected(uint32_t type, kiln_korder order, const uint8_t *w, const kiln_block_q8_k *y, int64_t nb) {
    const kiln_qtype *qt = kiln_qtype_get(type);
    float acc[8] = {0}, accm[4] = {0}, summs = 0, A = 0, M = 0;
    for (int64_t i = 0; i < nb; i++) {
        kiln_qblock b;
        qt->unpack(w + i * qt->block_bytes, 1, &b);
        int32_t lane[8] = {0}, chunk[8] = {0}, m[8];
        for (int p = 0; p < 256; p++) {
            lane[(p >> 2) & 7] += b.sc[p / 16] * b.q[p] * y[i].qs[p];
            chunk[p >> 5] += b.sc[p / 16] * b.q[p] * y[i].qs[p];
        }
        for (int j = 0; j < 8; j++) m[j] = b.mn[2 * j] * y[i].bsums[2 * j] + b.mn[2 * j + 1] * y[i].bsums[2 * j + 1];
        if (order != KILN_KORDER_VECDOT) {
            const int g = order == KILN_KORDER_GEMM ? (type == KILN_Q4_K ? 2 : 4) : 8;
            for (int c0 = 0; c0 < 8; c0 += g) {
                int32_t is = 0, ms = 0;
                for (int c = c0; c < c0 + g; c++) is += chunk[c], ms += m[c];
                A = fmaf((float)is, b.d[0] * y[i].d, A);
                M = fmaf((float)ms, b.dmin * y[i].d, M);
            }
            continue;
        }
        const float d = y[i].d * b.d[0], dmin = -y[i].d * b.dmin;
        int32_t msum = 0;
        for (int j = 0; j < 8; j++) msum += m[j];
        if (type == KILN_Q6_K)
            for (int l = 0; l < 8; l++) lane[l] -= m[l];
        if (type == KILN_Q2_K)
            for (int l = 0; l < 8; l++) acc[l] = fmaf(dmin, (float)m[l], acc[l]);
        if (type == KILN_Q4_K)
            for (int k = 0; k < 4; k++) accm[k] = fmaf(dmin, (float)(m[2 * k] + m[2 * k + 1]), accm[k]);
        if (type == KILN_Q5_K) summs = fmaf(dmin, (float)msum, summs);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
    }
    if (order != KILN_KORDER_VECDOT) return A - M;
    float r = hsum8(acc);
    if (type == KILN_Q4_K) r = r + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
    if (type == KILN_Q5_K) r = r + summs;
    if (type == KILN_IQ2_XXS) r = 0.125f * r;
    return r;
}

/* kiln_matmul (or its expert variant) against the written-out order, at
 * the current SIMD level, on values of one sign (large integer sums, so that any
 * other grouping shows). */
static void check_type(uint32_t type, int64_t n_out, int64_t T, bool expert) {
    const int64_t n_in = 1024, nb = n_in / 256;
    const int64_t row_bytes = (int64_t)kiln_type_row_bytes(type, (uint64_t)n_in);
    float *src = malloc((size_t)(n_in * n_out) * sizeof(float)), *imat = malloc((size_t)n_in * sizeof(float));
    float *x = malloc((size_t)(n_in * T) * sizeof(float)), *y = malloc((size_t)(n_out * T) * sizeof(float));
    float *want = malloc((size_t)(n_out * T) * sizeof(float));
    uint8_t *w = malloc((size_t)(row_bytes * n_out));
    kiln_block_q8_k *a = malloc((size_t)(nb * T) * sizeof *a);
    assert_true(src && imat && x && y && want && w && a);
    for (int64_t i = 0; i < n_in * n_out; i++) src[i] = 0.02f * (1.0f + 0.05f * gauss());
    for (int64_t i = 0; i < n_in; i++) imat[i] = 1.0f;
    for (int64_t i = 0; i < n_in * T; i++) x[i] = 1.0f + 0.05f * gauss();
    kiln_err err;
    assert_int_equal(kiln_quantize_rows(type, src, w, n_out, n_in, imat, &err), (size_t)(row_bytes * n_out));

    const bool repacked = (type == KILN_Q4_K || type == KILN_Q2_K) && n_out % 8 == 0;
    const int64_t n_gemm = repacked && !expert ? T - T % 4 : 0;
    for (int64_t t = 0; t < T; t++) {
        if (t < n_gemm) kiln_act_q8_k_x4(x + t * n_in, a + t * nb, n_in);
        else kiln_act_q8_k(x + t * n_in, a + t * nb, n_in);
        const kiln_korder o = t < n_gemm ? KILN_KORDER_GEMM : repacked ? KILN_KORDER_GEMV : KILN_KORDER_VECDOT;
        for (int64_t r = 0; r < n_out; r++) want[t * n_out + r] = expected(type, o, w + r * row_bytes, a + t * nb, nb);
    }
    const int rc = (expert ? kiln_matmul_expert : kiln_matmul)(type, w, n_in, n_out, x, T, y, KILN_NUM_GGML);
    assert_int_equal(rc, 0);
    for (int64_t i = 0; i < n_out * T; i++)
        if (memcmp(&y[i], &want[i], 4))
            fail_msg("%s rows %lld%s at %s: token %lld row %lld is %.9g, ggml's order %.9g", kiln_type_name(type),
                     (long long)n_out, expert ? " (expert)" : "", kiln_simd_name(kiln_simd()), (long long)(i / n_out),
                     (long long)(i % n_out), y[i], want[i]);
    free(src);
    free(imat);
    free(x);
    free(y);
    free(want);
    free(w);
    free(a);
}

static void test_vecdot_orders(void **state) {
    simd_level_enter(state);
    const uint32_t types[] = {KILN_Q2_K, KILN_Q3_K, KILN_Q4_K, KILN_Q5_K, KILN_Q6_K, KILN_IQ2_XXS};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        check_type(types[i], 21, 7, false); /* 21 rows: nothing is repacked */
        check_type(types[i], 40, 7, false); /* Q4_K, Q2_K repacked: 4 gemm + 3 gemv tokens */
    }
}

static void test_repacked_orders(void **state) {
    simd_level_enter(state);
    check_type(KILN_Q4_K, 24, 9, false);
    check_type(KILN_Q2_K, 24, 9, false);
    check_type(KILN_Q4_K, 24, 9, true); /* MUL_MAT_ID: gemv for every token */
    check_type(KILN_Q2_K, 24, 9, true);
    check_type(KILN_Q4_K, 24, 2, false); /* fewer than 4 tokens: gemv */
}

/* ---- 2. the 4x8 quantizer's ties ----------------------------------------- */

static void test_act_q8_k_x4_ties(void **state) {
    (void)state;
    float x[256];
    for (int j = 0; j < 256; j++) x[j] = 0.01f * gauss();
    x[10] = -3.0f;
    x[200] = 3.0f;
    kiln_block_q8_k ref, x4;
    kiln_act_q8_k(x, &ref, 256);
    kiln_act_q8_k_x4(x, &x4, 256);
    /* the extreme chosen maps to -127: the reference takes the first (-3,
     * so d > 0), the 4x8 quantizer +3 (d < 0) */
    assert_true(ref.d > 0 && x4.d < 0);
    assert_int_equal(ref.qs[10], -127);
    assert_int_equal(ref.qs[200], 127);
    assert_int_equal(x4.qs[10], 127);
    assert_int_equal(x4.qs[200], -127);
    int sum = 0;
    for (int j = 0; j < 16; j++) sum += x4.qs[192 + j];
    assert_int_equal(x4.bsums[12], sum);
    /* without a tie they agree byte for byte */
    x[200] = 2.0f;
    kiln_act_q8_k(x, &ref, 256);
    kiln_act_q8_k_x4(x, &x4, 256);
    assert_memory_equal(&ref, &x4, sizeof ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_vecdot_orders),
        SIMD_LEVEL_TESTS(test_repacked_orders),
        cmocka_unit_test(test_act_q8_k_x4_ties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
