/* tests/test_kdirect.c - the direct kernels for a few tokens
 * (runtime/vecdot_kdirect.c) give the reference dot products bit for bit.
 *
 * Weights are random bytes (every level, scale and sign pattern a block
 * can hold, Q8_0's -128 included) with sane fp16 factors; activations are
 * heavy-tailed, so every Q8_K block holds a -128. For each covered type,
 * kiln_matmul (1..3 tokens) and kiln_matmul_expert (1..6 tokens) must
 * equal kiln_kdot_ref (vec_dot or, for repacked Q4_K / Q2_K, gemv order)
 * or qt->dot, memcmp-identical, at every SIMD level (one test case per
 * level, skipped where the CPU lacks it); and kiln_kdirect itself for more
 * tokens than one group. */
#include "shared.h"
#include "simd_levels.h"

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../codec/blocks.h"
#include "../runtime/matmul.h"
#include "../runtime/vecdot.h"

#include <stddef.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float gauss(void) { return kiln_test_gaussf(&rng); }

/* A random fp16 factor of either sign, magnitude 2^-12 .. 2^-6. */
static kiln_half factor(void) {
    const uint64_t r = kiln_test_xorshift64(&rng);
    const float f = ldexpf(1.0f + (float)(r & 1023) / 1024.0f, -6 - (int)((r >> 10) % 7));
    return kiln_fp32_to_fp16(r >> 20 & 1 ? -f : f);
}

static void set_half(uint8_t *block, size_t offset) {
    const kiln_half h = factor();
    memcpy(block + offset, &h, sizeof h);
}

/* Random bytes, then finite factors where the format keeps them. */
static void random_block(uint32_t type, uint8_t *b, int bytes) {
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)kiln_test_xorshift64(&rng);
    switch (type) {
    case KILN_Q2_K: set_half(b, offsetof(kiln_block_q2_k, d)), set_half(b, offsetof(kiln_block_q2_k, dmin)); break;
    case KILN_Q4_K: set_half(b, offsetof(kiln_block_q4_k, d)), set_half(b, offsetof(kiln_block_q4_k, dmin)); break;
    case KILN_Q5_K: set_half(b, offsetof(kiln_block_q5_k, d)), set_half(b, offsetof(kiln_block_q5_k, dmin)); break;
    case KILN_Q3_K: set_half(b, offsetof(kiln_block_q3_k, d)); break;
    case KILN_Q6_K: set_half(b, offsetof(kiln_block_q6_k, d)); break;
    case KILN_IQ2_XXS: set_half(b, offsetof(kiln_block_iq2_xxs, d)); break;
    case KILN_Q8_0: set_half(b, offsetof(kiln_block_q8_0, d)); break;
    case KILN_Q4_0: set_half(b, offsetof(kiln_block_q4_0, d)); break;
    case KILN_Q5_0: set_half(b, offsetof(kiln_block_q5_0, d)); break;
    case KILN_IQ4_NL: set_half(b, offsetof(kiln_block_iq4_nl, d)); break;
    default: fail_msg("no factors for type %u", type);
    }
}

/* The reference output of row r for token t. */
static float reference(const kiln_qtype *qt, int64_t n_in, const uint8_t *wrow, const uint8_t *a, kiln_korder order) {
    if (qt->act_type == KILN_Q8_K) return kiln_kdot_ref(n_in, wrow, qt, order, (const kiln_block_q8_k *)a);
    const kiln_vec_dot_fn dot = order == KILN_KORDER_GEMV ? qt->dot_gemv : order == KILN_KORDER_TINY ? qt->dot_tiny
                                                                                                     : qt->dot;
    return dot(n_in, wrow, a);
}

typedef struct problem {
    const kiln_qtype *qt;
    int64_t n_in, n_out, T, row_bytes, act_row;
    uint8_t *w, *act;
    float *x, *want, *y;
} problem;

static problem make(uint32_t type, int64_t n_in, int64_t n_out, int64_t T, kiln_korder order) {
    problem p = {.qt = kiln_qtype_get(type), .n_in = n_in, .n_out = n_out, .T = T};
    assert_non_null(p.qt);
    const int64_t nb = n_in / p.qt->block;
    p.row_bytes = nb * p.qt->block_bytes;
    p.act_row = nb * p.qt->act_bytes;
    p.w = malloc((size_t)(p.row_bytes * n_out));
    p.act = malloc((size_t)(p.act_row * T));
    p.x = malloc((size_t)(n_in * T) * sizeof(float));
    p.want = malloc((size_t)(n_out * T) * sizeof(float));
    p.y = malloc((size_t)(n_out * T) * sizeof(float));
    assert_true(p.w && p.act && p.x && p.want && p.y);
    for (int64_t i = 0; i < nb * n_out; i++) random_block(type, p.w + i * p.qt->block_bytes, p.qt->block_bytes);
    for (int64_t i = 0; i < n_in * T; i++) {
        const float g = gauss();
        p.x[i] = kiln_test_xorshift64(&rng) % 64 ? g : 20.0f * g;
    }
    for (int64_t t = 0; t < T; t++) {
        if (p.qt->act_type == KILN_Q8_K) kiln_act_q8_k(p.x + t * n_in, (kiln_block_q8_k *)(p.act + t * p.act_row), n_in);
        else kiln_act_q8_0(p.x + t * n_in, (kiln_block_q8_0 *)(p.act + t * p.act_row), n_in);
        for (int64_t r = 0; r < n_out; r++)
            p.want[t * n_out + r] = reference(p.qt, n_in, p.w + r * p.row_bytes, p.act + t * p.act_row, order);
    }
    return p;
}

static void drop(problem *p) {
    free(p->w);
    free(p->act);
    free(p->x);
    free(p->want);
    free(p->y);
}

static void same(const problem *p, const char *what) {
    for (int64_t i = 0; i < p->n_out * p->T; i++)
        if (memcmp(&p->y[i], &p->want[i], sizeof(float)))
            fail_msg("%s %s n_in %lld n_out %lld tokens %lld at %s: token %lld row %lld is %.9g, reference %.9g",
                     kiln_type_name(p->qt->type), what, (long long)p->n_in, (long long)p->n_out, (long long)p->T,
                     kiln_simd_name(kiln_simd()), (long long)(i / p->n_out), (long long)(i % p->n_out), p->y[i],
                     p->want[i]);
}

/* kiln_matmul / kiln_matmul_expert against the reference at the current
 * level. */
static void check(uint32_t type, int64_t n_in, int64_t n_out, int64_t T, bool expert) {
    const kiln_qtype *qt = kiln_qtype_get(type);
    /* ggml's orders: repacked matrices (k-quants, Q4_0, IQ4_NL) gemv;
     * otherwise IQ4_NL's tinyBLAS for 2+ tokens of a dense product */
    const kiln_korder order = kiln_qtype_repacked(qt, n_out)         ? KILN_KORDER_GEMV
                              : !expert && T >= 2 && qt->dot_tiny ? KILN_KORDER_TINY
                                                                    : KILN_KORDER_VECDOT;
    problem p = make(type, n_in, n_out, T, order);
    memset(p.y, 0xFF, (size_t)(n_out * T) * sizeof(float));
    assert_int_equal((expert ? kiln_matmul_expert : kiln_matmul)(type, p.w, n_in, n_out, p.x, T, p.y, KILN_NUM_GGML), 0);
    same(&p, expert ? "expert" : "matmul");
    drop(&p);
}

static const uint32_t KTYPES[] = {KILN_Q2_K, KILN_Q3_K, KILN_Q4_K, KILN_Q5_K, KILN_Q6_K, KILN_IQ2_XXS};
static const uint32_t LTYPES[] = {KILN_Q8_0, KILN_Q4_0, KILN_Q5_0, KILN_IQ4_NL};

static void test_kquants(void **state) {
    simd_level_enter(state);
    const int64_t n_ins[] = {256, 768, 2048};
    const int64_t n_outs[] = {16, 21, 40}; /* 16, 40: Q4_K / Q2_K take the gemv order */
    for (size_t i = 0; i < sizeof KTYPES / sizeof KTYPES[0]; i++)
        for (size_t a = 0; a < 3; a++)
            for (size_t b = 0; b < 3; b++) {
                for (int64_t T = 1; T <= 3; T++) check(KTYPES[i], n_ins[a], n_outs[b], T, false);
                check(KTYPES[i], n_ins[a], n_outs[b], 1, true);
                check(KTYPES[i], n_ins[a], n_outs[b], 6, true);
            }
}

static void test_legacy(void **state) {
    simd_level_enter(state);
    const int64_t n_ins[] = {32, 96, 256, 288, 2048}; /* not only whole groups of 8 blocks */
    const int64_t n_outs[] = {16, 21};
    for (size_t i = 0; i < sizeof LTYPES / sizeof LTYPES[0]; i++)
        for (size_t a = 0; a < 5; a++)
            for (size_t b = 0; b < 2; b++) {
                for (int64_t T = 1; T <= 3; T++) check(LTYPES[i], n_ins[a], n_outs[b], T, false);
                check(LTYPES[i], n_ins[a], n_outs[b], 5, true);
            }
}

/* More tokens than one pass over a row takes (4), straight through
 * kiln_kdirect (which has no scalar path), in both Q8_K orders. */
static void test_groups(void **state) {
    simd_level_enter(state);
    const uint32_t types[] = {KILN_Q4_K, KILN_Q2_K, KILN_Q6_K, KILN_Q8_0};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (int o = 0; o < 2; o++) {
            const kiln_korder order = o ? KILN_KORDER_GEMV : KILN_KORDER_VECDOT;
            if (order == KILN_KORDER_GEMV && !kiln_qtype_get(types[i])->gemm_chunks) continue;
            problem p = make(types[i], 512, 19, 7, order);
            assert_true(kiln_kdirect(p.qt, order, p.w, p.n_in, p.n_out, p.act, p.T, p.y));
            same(&p, o ? "kdirect gemv" : "kdirect vec_dot");
            drop(&p);
        }
}

/* The gemm order is the panels', and only repacked types have a gemv
 * order: both refused (run at AVX2). */
static void test_refused_orders(void **state) {
    simd_level_enter(state);
    assert_false(kiln_kdirect(kiln_qtype_get(KILN_Q4_K), KILN_KORDER_GEMM, NULL, 256, 8, NULL, 1, NULL));
    assert_false(kiln_kdirect(kiln_qtype_get(KILN_Q6_K), KILN_KORDER_GEMV, NULL, 256, 8, NULL, 1, NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_kquants),
        SIMD_LEVEL_TESTS(test_legacy),
        SIMD_VECTOR_TESTS(test_groups),
        SIMD_LEVEL_TEST(test_refused_orders, 1, "avx2"),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
