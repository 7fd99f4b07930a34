/* tests/test_kvnni.c - the AVX-512 VNNI decode kernels (runtime/
 * vecdot_kvnni.c: Q4_K, Q2_K in the vec_dot and gemv orders, Q6_K, Q3_K,
 * Q5_K, IQ2_XXS - both its decodes, the VBMI one skipped on CPUs without
 * VBMI and BITALG) give the reference dot products (kiln_kdot_ref) bit for
 * bit.
 *
 * Odd shapes: 1..9 tokens (several passes of 4 and a remainder), row
 * counts that are not multiples of 16 (nor, for the vec_dot order of the
 * repacked types, of 8), one to nine super-blocks per row. Weights are
 * random bytes (every level, scale, sign and grid index a block can hold)
 * with finite fp16 factors; activations heavy-tailed, and one case at
 * full scale (every activation +-127, the largest pair sums). Each kernel
 * is called straight (the table's entry for the VNNI level, checked to be
 * the one named here) and through kiln_matmul / kiln_matmul_expert.
 * Skipped where the CPU (or KILN_SIMD) gives no VNNI. */
#include "shared.h"

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../codec/blocks.h"
#include "../runtime/kernels.h"
#include "../runtime/matmul.h"
#include "../runtime/vecdot.h"

#include <stddef.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;

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
    case KILN_Q5_K: put_half(b, offsetof(kiln_block_q5_k, d)), put_half(b, offsetof(kiln_block_q5_k, dmin)); break;
    case KILN_IQ2_XXS: put_half(b, offsetof(kiln_block_iq2_xxs, d)); break;
    default: fail_msg("no factors for type %u", type);
    }
}

/* The kernels under test and the table entry each must be (variant: a
 * decode the table's entry picks between, not itself an entry; vbmi: it
 * needs AVX-512 VBMI and BITALG). */
typedef struct kcase {
    uint32_t type;
    kiln_korder order;
    kiln_qrow_fn fn;
    bool variant, vbmi;
} kcase;

static const kcase CASES[] = {
    {KILN_Q4_K, KILN_KORDER_VECDOT, kiln_kvnni_q4_k, false, false},
    {KILN_Q4_K, KILN_KORDER_GEMV, kiln_kvnni_q4_k_gemv, false, false},
    {KILN_Q2_K, KILN_KORDER_VECDOT, kiln_kvnni_q2_k, false, false},
    {KILN_Q2_K, KILN_KORDER_GEMV, kiln_kvnni_q2_k_gemv, false, false},
    {KILN_Q6_K, KILN_KORDER_VECDOT, kiln_kvnni_q6_k, false, false},
    {KILN_Q3_K, KILN_KORDER_VECDOT, kiln_kvnni_q3_k, false, false},
    {KILN_Q5_K, KILN_KORDER_VECDOT, kiln_kvnni_q5_k, false, false},
    {KILN_IQ2_XXS, KILN_KORDER_VECDOT, kiln_kvnni_iq2_xxs, false, false},
    {KILN_IQ2_XXS, KILN_KORDER_VECDOT, kiln_kvnni_iq2_xxs_bw, true, false},
    {KILN_IQ2_XXS, KILN_KORDER_VECDOT, kiln_kvnni_iq2_xxs_vbmi, true, true},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

/* Sets the VNNI level or skips the test. */
static void enter_vnni(void) {
    kiln_simd_set(KILN_SIMD_AVX512);
    if (kiln_isa_now() != KILN_ISA_VNNI) skip();
}

static void test_table_names_them(void **state) {
    (void)state;
    for (size_t i = 0; i < N_CASES; i++) {
        if (CASES[i].variant) continue;
        const kiln_kernels *k = kiln_kernels_get(CASES[i].type);
        assert_non_null(k);
        assert_ptr_equal(k->isa[KILN_ISA_VNNI].direct[CASES[i].order], CASES[i].fn);
    }
}

/* One shape: kernel fn over every row and token against kiln_kdot_ref;
 * full: activations all +-127. */
static void check(const kcase *c, int64_t n_in, int64_t n_out, int64_t T, bool full) {
    if (c->vbmi && !kiln_cpu_has_vbmi()) skip();
    const kiln_qtype *qt = kiln_qtype_get(c->type);
    assert_non_null(qt);
    const int64_t nb = n_in / KILN_QK_K, row_bytes = nb * qt->block_bytes, act_row = nb * qt->act_bytes;
    uint8_t *w = malloc((size_t)(row_bytes * n_out)), *act = malloc((size_t)(act_row * T));
    float *x = malloc((size_t)(n_in * T) * sizeof(float)), *y = malloc((size_t)(n_out * T) * sizeof(float));
    float *want = malloc((size_t)(n_out * T) * sizeof(float));
    assert_true(w && act && x && y && want);
    for (int64_t i = 0; i < nb * n_out; i++) random_block(c->type, w + i * qt->block_bytes, qt->block_bytes);
    for (int64_t i = 0; i < n_in * T; i++) {
        const float g = kiln_test_gaussf(&rng);
        x[i] = full ? (g < 0 ? -1.0f : 1.0f) : kiln_test_xorshift64(&rng) % 64 ? g : 20.0f * g;
    }
    for (int64_t t = 0; t < T; t++) {
        kiln_act_q8_k(x + t * n_in, (kiln_block_q8_k *)(act + t * act_row), n_in);
        for (int64_t r = 0; r < n_out; r++)
            want[t * n_out + r] =
                kiln_kdot_ref(n_in, w + r * row_bytes, qt, c->order, (const kiln_block_q8_k *)(act + t * act_row));
    }
    /* the kernel itself, rows one by one, tokens in its passes */
    memset(y, 0xFF, (size_t)(n_out * T) * sizeof(float));
    for (int64_t r = 0; r < n_out; r++) c->fn(qt, w + r * row_bytes, nb, act, 0, (int)T, y + r, n_out);
    for (int64_t i = 0; i < n_out * T; i++)
        if (memcmp(&y[i], &want[i], sizeof(float)))
            fail_msg("%s %s n_in %lld n_out %lld tokens %lld%s: token %lld row %lld is %.9g, reference %.9g",
                     kiln_type_name(c->type), c->order == KILN_KORDER_GEMV ? "gemv" : "vec_dot", (long long)n_in,
                     (long long)n_out, (long long)T, full ? " (full-scale activations)" : "",
                     (long long)(i / n_out), (long long)(i % n_out), y[i], want[i]);
    /* and through kiln_matmul where its order is this one: llama.cpp
     * repacks Q4_K / Q2_K matrices of n_out % 8 == 0, whose experts then
     * take the gemv order; every other product of up to 8 tokens here takes
     * the vec_dot order and the direct kernel */
    const bool repacked = kiln_qtype_repacked(qt, n_out);
    const bool expert = c->order == KILN_KORDER_GEMV;
    if (expert == repacked && T <= 8) {
        memset(y, 0xFF, (size_t)(n_out * T) * sizeof(float));
        assert_int_equal((expert ? kiln_matmul_expert : kiln_matmul)(c->type, w, n_in, n_out, x, T, y, KILN_NUM_GGML),
                         0);
        assert_memory_equal(y, want, (size_t)(n_out * T) * sizeof(float));
    }
    free(w), free(act), free(x), free(y), free(want);
}

static void test_odd_shapes(void **state) {
    (void)state;
    enter_vnni();
    const int64_t n_ins[] = {256, 768, 2304};
    const int64_t n_outs[] = {1, 13, 37}; /* none a multiple of 8 */
    for (size_t i = 0; i < N_CASES; i++)
        for (size_t a = 0; a < 3; a++)
            for (size_t b = 0; b < 3; b++)
                for (int64_t T = 1; T <= 9; T++) check(&CASES[i], n_ins[a], n_outs[b], T, false);
}

static void test_full_scale(void **state) {
    (void)state;
    enter_vnni();
    for (size_t i = 0; i < N_CASES; i++)
        for (int64_t T = 1; T <= 5; T++) check(&CASES[i], 1024, 24, T, true);
}

static int leave(void **state) {
    (void)state;
    kiln_simd_set(KILN_SIMD_AVX512);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_names_them),
        cmocka_unit_test_teardown(test_odd_shapes, leave),
        cmocka_unit_test_teardown(test_full_scale, leave),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
