/* tests/test_vecdot_q8direct.c - the Q8_0 decode kernels that read the
 * weight blocks in place (runtime/vecdot_q8direct.c) give the reference
 * dot product kiln_vec_dot_q8_0 (ggml's x86 order) bit for bit.
 *
 * Weights are random bytes (every level, -128 included) with finite fp16
 * factors of either sign; activations are kiln_act_q8_0 of heavy-tailed
 * floats, plus one row of extreme blocks (all weights -128 against all
 * activations +-127: the largest int16 pair sums the sign trick makes).
 * Each kernel (AVX2, VNNI) is called directly, through kiln_direct_rows,
 * for odd row counts, block counts that are not a whole number of pairs,
 * and 1..8 tokens, one test case per kernel, skipped when the CPU (or
 * KILN_SIMD) lacks its ISA. Then kiln_matmul itself at every SIMD level for 1..8
 * tokens, and the table must name these kernels for Q8_0 decode. */
#include "shared.h"
#include "simd_levels.h"

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../codec/blocks.h"
#include "../runtime/kernels.h"
#include "../runtime/matmul.h"
#include "../runtime/vecdot.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

/* A finite fp16 factor of either sign, magnitude 2^-12 .. 2^-6. */
static kiln_half factor(void) {
    const uint64_t r = kiln_test_xorshift64(&rng);
    const float f = ldexpf(1.0f + (float)(r & 1023) / 1024.0f, -6 - (int)((r >> 10) % 7));
    return kiln_fp32_to_fp16(r >> 20 & 1 ? -f : f);
}

typedef struct problem {
    int64_t n_in, n_out, T, nb;
    kiln_block_q8_0 *w, *act;
    float *x, *want, *y;
} problem;

/* Random weights and activations for n_out rows of n_in and T tokens;
 * with `extreme`, row 0 and token 0 hold the saturating blocks. */
static problem make(int64_t n_in, int64_t n_out, int64_t T, bool extreme) {
    problem p = {.n_in = n_in, .n_out = n_out, .T = T, .nb = n_in / KILN_QK};
    p.w = malloc((size_t)(p.nb * n_out) * sizeof *p.w);
    p.act = malloc((size_t)(p.nb * T) * sizeof *p.act);
    p.x = malloc((size_t)(n_in * T) * sizeof *p.x);
    p.want = malloc((size_t)(n_out * T) * sizeof *p.want);
    p.y = malloc((size_t)(n_out * T) * sizeof *p.y);
    assert_true(p.w && p.act && p.x && p.want && p.y);
    for (int64_t i = 0; i < p.nb * n_out; i++) {
        for (int j = 0; j < KILN_QK; j++) p.w[i].qs[j] = (int8_t)kiln_test_xorshift64(&rng);
        p.w[i].d = factor();
    }
    for (int64_t i = 0; i < n_in * T; i++) {
        const float g = kiln_test_gaussf(&rng);
        p.x[i] = kiln_test_xorshift64(&rng) % 64 ? g : 20.0f * g;
    }
    if (extreme)
        for (int64_t j = 0; j < n_in; j++) {
            p.w[j / KILN_QK].qs[j % KILN_QK] = -128;
            p.x[j] = j % 5 == 3 ? -1.0f : 1.0f; /* every level +-127 */
        }
    for (int64_t t = 0; t < T; t++) {
        kiln_act_q8_0(p.x + t * n_in, p.act + t * p.nb, n_in);
        for (int64_t r = 0; r < n_out; r++)
            p.want[t * n_out + r] = kiln_vec_dot_q8_0(n_in, p.w + r * p.nb, p.act + t * p.nb);
    }
    memset(p.y, 0xFF, (size_t)(n_out * T) * sizeof *p.y);
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
            fail_msg("%s n_in %lld n_out %lld tokens %lld: token %lld row %lld is %.9g, reference %.9g", what,
                     (long long)p->n_in, (long long)p->n_out, (long long)p->T, (long long)(i / p->n_out),
                     (long long)(i % p->n_out), p->y[i], p->want[i]);
}

static const int64_t N_INS[] = {32, 64, 96, 288, 2080}; /* 1, 2, 3, 9, 65 blocks */
static const int64_t N_OUTS[] = {1, 3, 17, 21};

/* One kernel through kiln_direct_rows (groups of 4 tokens) for every
 * shape and 1..8 tokens. */
static void check_kernel(kiln_qrow_fn fn, const char *name) {
    const kiln_qtype *qt = kiln_qtype_get(KILN_Q8_0);
    assert_non_null(qt);
    for (size_t a = 0; a < sizeof N_INS / sizeof N_INS[0]; a++)
        for (size_t b = 0; b < sizeof N_OUTS / sizeof N_OUTS[0]; b++)
            for (int64_t T = 1; T <= 8; T++) {
                problem p = make(N_INS[a], N_OUTS[b], T, a == 2 && b == 1);
                kiln_direct_rows(fn, qt, p.w, p.n_in, p.n_out, p.act, p.T, p.y);
                same(&p, name);
                drop(&p);
            }
}

/* The kernel's ISA: a case per kernel, skipped when it cannot run. */
typedef struct kernel_case {
    kiln_qrow_fn fn;
    kiln_simd_level level;
    bool vnni;
    const char *name;
} kernel_case;

static void test_kernel(void **state) {
    const kernel_case *kc = *state;
    if (!kc->fn) skip(); /* not an x86 build */
    kiln_simd_set(KILN_SIMD_AVX512);
    if (kiln_simd() < kc->level || (kc->vnni && !kiln_cpu_has_vnni())) skip();
    check_kernel(kc->fn, kc->name);
}

/* kiln_matmul at this SIMD level (the scalar one: the reference rows). */
static void test_matmul(void **state) {
    simd_level_enter(state);
    for (size_t a = 0; a < sizeof N_INS / sizeof N_INS[0]; a++)
        for (int64_t T = 1; T <= 8; T++) {
            problem p = make(N_INS[a], 21, T, a == 2);
            assert_int_equal(kiln_matmul(KILN_Q8_0, p.w, p.n_in, p.n_out, p.x, p.T, p.y, KILN_NUM_GGML), 0);
            same(&p, "kiln_matmul");
            drop(&p);
        }
}

/* Decode of Q8_0 goes through these kernels, not the unpacking one. */
static void test_table(void **state) {
    (void)state;
#ifdef __x86_64__
    const kiln_kernels *k = kiln_kernels_get(KILN_Q8_0);
    assert_non_null(k);
    assert_true(k->direct_tokens >= 1);
    assert_ptr_equal(k->isa[KILN_ISA_AVX2].direct[KILN_KORDER_VECDOT], kiln_q8direct_avx2);
    assert_ptr_equal(k->isa[KILN_ISA_AVX512].direct[KILN_KORDER_VECDOT], kiln_q8direct_avx2);
    assert_ptr_equal(k->isa[KILN_ISA_VNNI].direct[KILN_KORDER_VECDOT], kiln_q8direct_vnni);
#else
    skip();
#endif
}

#ifdef __x86_64__
#define KERNEL(f) f
#else
#define KERNEL(f) NULL
#endif
static const kernel_case CASES[] = {
    {KERNEL(kiln_q8direct_avx2), KILN_SIMD_AVX2, false, "avx2"},
    {KERNEL(kiln_q8direct_vnni), KILN_SIMD_AVX512, true, "vnni"},
};

int main(void) {
    const struct CMUnitTest tests[] = {
        {"test_kernel/avx2", test_kernel, NULL, simd_level_leave, (void *)&CASES[0]},
        {"test_kernel/vnni", test_kernel, NULL, simd_level_leave, (void *)&CASES[1]},
        SIMD_LEVEL_TESTS(test_matmul),
        cmocka_unit_test(test_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
