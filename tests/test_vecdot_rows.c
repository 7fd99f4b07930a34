/* tests/test_vecdot_rows.c - the four-row decode kernels (runtime/
 * vecdot_krows.c: Q4_K and Q2_K in the gemv order, Q6_K and Q3_K in the
 * vec_dot order, AVX-512 VNNI) give the reference dot products (kiln_kdot_ref)
 * bit for bit, and so does every way a one-token product reaches them.
 *
 * For each kernel: called straight on each group of four rows; through
 * kiln_kdirect (one token: the rows kernel for whole groups of four in
 * each 16-row block, the one-row kernel for the rest); through kiln_matmul
 * or kiln_matmul_expert where the product takes that order; and the same
 * product at the AVX2 level (KILN_SIMD=avx2: one-row AVX2 kernels, no rows
 * kernel) and at the scalar level, which must give the same bits. Shapes:
 * one to nine super-blocks per row, row counts that are and are not
 * multiples of 4, 8 and 16. Weights are random bytes (every level, scale
 * and min a block can hold) with finite fp16 factors; activations
 * heavy-tailed, and a case at full scale (every activation +-127, the
 * largest sums). Skipped where the CPU (or KILN_SIMD) gives no VNNI. */
#include "shared.h"

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../codec/blocks.h"
#include "../runtime/kernels.h"
#include "../runtime/matmul.h"
#include "../runtime/vecdot.h"

#include <stddef.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static kiln_half factor(void) {
    const uint64_t r = kiln_test_xorshift64(&rng);
    const float f = ldexpf(1.0f + (float)(r & 1023) / 1024.0f, -6 - (int)((r >> 10) % 7));
    return kiln_fp32_to_fp16(r >> 20 & 1 ? -f : f);
}

static void put_half(uint8_t *b, size_t offset) {
    const kiln_half h = factor();
    memcpy(b + offset, &h, sizeof h);
}

static void random_block(uint32_t type, uint8_t *b, int bytes) {
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)kiln_test_xorshift64(&rng);
    switch (type) {
    case KILN_Q2_K: put_half(b, offsetof(kiln_block_q2_k, d)), put_half(b, offsetof(kiln_block_q2_k, dmin)); break;
    case KILN_Q4_K: put_half(b, offsetof(kiln_block_q4_k, d)), put_half(b, offsetof(kiln_block_q4_k, dmin)); break;
    case KILN_Q6_K: put_half(b, offsetof(kiln_block_q6_k, d)); break;
    case KILN_Q3_K: put_half(b, offsetof(kiln_block_q3_k, d)); break;
    default: fail_msg("no factors for type %u", type);
    }
}

typedef struct rcase {
    uint32_t type;
    kiln_korder order;
    kiln_qrows_fn fn;
} rcase;

static const rcase CASES[] = {
    {KILN_Q4_K, KILN_KORDER_GEMV, kiln_krows_q4_k_gemv},
    {KILN_Q2_K, KILN_KORDER_GEMV, kiln_krows_q2_k_gemv},
    {KILN_Q6_K, KILN_KORDER_VECDOT, kiln_krows_q6_k},
    {KILN_Q3_K, KILN_KORDER_VECDOT, kiln_krows_q3_k},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

static void enter_vnni(void) {
    kiln_simd_set(KILN_SIMD_AVX512);
    if (kiln_isa_now() != KILN_ISA_VNNI) skip();
}

static void test_table_names_them(void **state) {
    (void)state;
    for (size_t i = 0; i < N_CASES; i++) {
        const kiln_kernels *k = kiln_kernels_get(CASES[i].type);
        assert_non_null(k);
        assert_ptr_equal(k->isa[KILN_ISA_VNNI].rows[CASES[i].order], CASES[i].fn);
        /* the levels without VNNI have none: they run the one-row kernels */
        assert_null(k->isa[KILN_ISA_AVX2].rows[CASES[i].order]);
        assert_null(k->isa[KILN_ISA_AVX512].rows[CASES[i].order]);
    }
}

/* Fails with the first output of y that differs from want. */
static void same(const rcase *c, const char *path, int64_t n_in, int64_t n_out, const float *y, const float *want) {
    for (int64_t r = 0; r < n_out; r++)
        if (memcmp(&y[r], &want[r], sizeof(float)))
            fail_msg("%s %s, %s: n_in %lld n_out %lld row %lld is %.9g, reference %.9g", kiln_type_name(c->type),
                     c->order == KILN_KORDER_GEMV ? "gemv" : "vec_dot", path, (long long)n_in, (long long)n_out,
                     (long long)r, y[r], want[r]);
}

/* One shape, one token; full: activations all +-127. */
static void check(const rcase *c, int64_t n_in, int64_t n_out, bool full) {
    const kiln_qtype *qt = kiln_qtype_get(c->type);
    assert_non_null(qt);
    const int64_t nb = n_in / KILN_QK_K, row_bytes = nb * qt->block_bytes;
    uint8_t *w = malloc((size_t)(row_bytes * n_out));
    kiln_block_q8_k *act = malloc((size_t)nb * sizeof *act);
    float *x = malloc((size_t)n_in * sizeof(float)), *y = malloc((size_t)n_out * sizeof(float));
    float *want = malloc((size_t)n_out * sizeof(float));
    assert_true(w && act && x && y && want);
    for (int64_t i = 0; i < nb * n_out; i++) random_block(c->type, w + i * qt->block_bytes, qt->block_bytes);
    for (int64_t i = 0; i < n_in; i++) {
        const float g = kiln_test_gaussf(&rng);
        x[i] = full ? (g < 0 ? -1.0f : 1.0f) : kiln_test_xorshift64(&rng) % 64 ? g : 20.0f * g;
    }
    kiln_act_q8_k(x, act, n_in);
    for (int64_t r = 0; r < n_out; r++) want[r] = kiln_kdot_ref(n_in, w + r * row_bytes, qt, c->order, act);

    /* the kernel itself, every whole group of four rows */
    const int64_t whole = n_out - n_out % KILN_QROWS;
    memset(y, 0xFF, (size_t)n_out * sizeof(float));
    for (int64_t r = 0; r < whole; r += KILN_QROWS) c->fn(qt, w + r * row_bytes, row_bytes, nb, act, y + r);
    same(c, "rows kernel", n_in, whole, y, want);

    /* kiln_kdirect: groups of four and one-row tails */
    memset(y, 0xFF, (size_t)n_out * sizeof(float));
    assert_true(kiln_kdirect(qt, c->order, w, n_in, n_out, act, 1, y));
    same(c, "kiln_kdirect", n_in, n_out, y, want);

    /* kiln_matmul where the product takes this order: the gemv order is
     * that of the matrices llama.cpp repacks (n_out % 8 == 0), dense or
     * experts; the vec_dot order a dense matrix's of a type it does not
     * repack. Then the same at the AVX2 and scalar levels. */
    const bool gemv = c->order == KILN_KORDER_GEMV;
    const kiln_simd_level levels[] = {KILN_SIMD_AVX512, KILN_SIMD_AVX2, KILN_SIMD_SCALAR};
    const char *names[] = {"kiln_matmul", "kiln_matmul at AVX2", "kiln_matmul, scalar"};
    for (size_t l = 0; l < sizeof levels / sizeof levels[0] && (!gemv || n_out % 8 == 0); l++) {
        kiln_simd_set(levels[l]);
        memset(y, 0xFF, (size_t)n_out * sizeof(float));
        assert_int_equal(kiln_matmul(c->type, w, n_in, n_out, x, 1, y, KILN_NUM_GGML), 0);
        same(c, names[l], n_in, n_out, y, want);
        if (gemv) {
            memset(y, 0xFF, (size_t)n_out * sizeof(float));
            assert_int_equal(kiln_matmul_expert(c->type, w, n_in, n_out, x, 1, y, KILN_NUM_GGML), 0);
            same(c, names[l], n_in, n_out, y, want);
        }
    }
    kiln_simd_set(KILN_SIMD_AVX512);
    free(w), free(act), free(x), free(y), free(want);
}

static void test_shapes(void **state) {
    (void)state;
    enter_vnni();
    /* 4096: rows too long for the rows kernels in kiln_direct_rows4 */
    const int64_t n_ins[] = {256, 768, 2304, 4096};
    const int64_t n_outs[] = {4, 8, 13, 20, 37, 64, 68};
    for (size_t i = 0; i < N_CASES; i++)
        for (size_t a = 0; a < sizeof n_ins / sizeof n_ins[0]; a++)
            for (size_t b = 0; b < sizeof n_outs / sizeof n_outs[0]; b++) check(&CASES[i], n_ins[a], n_outs[b], false);
}

/* Q3_K's rows kernel takes rows of any length (its table row's
 * rows_span): rows of 8192 weights, 14 KiB for four, reach it through
 * kiln_kdirect and kiln_matmul, where the other types' long rows keep the
 * one-row kernels. */
static void test_long_rows(void **state) {
    (void)state;
    enter_vnni();
    const kiln_kernels *k = kiln_kernels_get(KILN_Q3_K);
    assert_non_null(k);
    assert_true(k->rows_span >= KILN_QROWS * (8192 / KILN_QK_K) * (int64_t)sizeof(kiln_block_q3_k));
    for (size_t i = 0; i < N_CASES; i++)
        if (CASES[i].type == KILN_Q3_K) {
            check(&CASES[i], 8192, 20, false);
            check(&CASES[i], 5120, 36, false);
        }
}

static void test_full_scale(void **state) {
    (void)state;
    enter_vnni();
    for (size_t i = 0; i < N_CASES; i++) check(&CASES[i], 1024, 24, true);
}

static int leave(void **state) {
    (void)state;
    kiln_simd_set(KILN_SIMD_AVX512);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_names_them),
        cmocka_unit_test_teardown(test_shapes, leave),
        cmocka_unit_test_teardown(test_full_scale, leave),
        cmocka_unit_test_teardown(test_long_rows, leave),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
