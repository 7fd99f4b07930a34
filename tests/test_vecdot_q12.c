/* tests/test_vecdot_q12.c - Q1_0 and Q2_0 products (runtime/vecdot_q12.c)
 * at every SIMD level:
 *
 *  - against ggml itself: the reference dot products (kiln_qtype dot) on
 *    ggml's Q8_0 activation bytes, kiln_matmul on the float activations
 *    (1 token, 3 and 8 at once) and kiln_kdirect on ggml's activations
 *    give ggml-cpu's vec_dot bits (tests/fixtures/quant_q12/vectors,
 *    written by gen_dots.c there from the quant_tq fixture's ggml blocks),
 *    over 512 weights and over 384 (Q1_0: an odd block count, the AVX-512
 *    kernel's block-pair tail);
 *  - on random blocks (every bit pattern, factors of both signs, heavy-
 *    tailed activations): kiln_matmul and kiln_matmul_expert equal the
 *    reference memcmp-exactly for odd and even row counts (1, 7, 16, 33),
 *    block counts 1..5 and 16, and 1..9 tokens (more than one pass of the
 *    direct kernels' 4).
 *
 * Each level is its own case (simd_levels.h); a level the CPU lacks is a
 * TAP skip. At the scalar level kiln_matmul runs the reference rows, so
 * there the random cases check the table's wiring (block and activation
 * geometry) and the ggml cases the reference itself. */
#include "shared.h"
#include "quant_fixture.h"
#include "simd_levels.h"

#include "../codec/blocks.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../runtime/matmul.h"
#include "../runtime/vecdot.h"

#define VEC_TQ "tests/fixtures/quant_tq/vectors/"
#define VEC "tests/fixtures/quant_q12/vectors/"

static const uint32_t TYPES[] = {KILN_Q1_0, KILN_Q2_0};

enum { NT = 8, NIN = 512, NOUT = 64, NSHORT = 384 };

/* The first n weights of each of rows rows of `n_in` (weights or Q8_0
 * activations of `type`), contiguous. */
static uint8_t *first_columns(uint32_t type, const uint8_t *src, int64_t rows, int64_t n_in, int64_t n) {
    const size_t from = kiln_type_row_bytes(type, (uint64_t)n_in), to = kiln_type_row_bytes(type, (uint64_t)n);
    uint8_t *dst = malloc(to * (size_t)rows);
    assert_non_null(dst);
    for (int64_t r = 0; r < rows; r++) memcpy(dst + r * to, src + r * from, to);
    return dst;
}

static int64_t count_differing(const float *a, const float *b, int64_t n) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

/* ggml's vec_dot over the first n weights: reference, kiln_matmul (float
 * activations; 1, 3 and 8 tokens per call), kiln_kdirect (ggml's Q8_0). */
static void dots_vs_ggml(kiln_simd_level lvl, uint32_t type, int64_t n) {
    const char *name = kiln_type_name(type);
    size_t alen, qlen, wlen, dlen;
    float *act = qf_load(&alen, VEC_TQ "act.f32");
    uint8_t *aq_full = qf_load(&qlen, VEC_TQ "act.q8_0");
    uint8_t *w_full = qf_load(&wlen, VEC_TQ "blk.1.ffn_down.weight.%s.q", name);
    float *ref = qf_load(&dlen, VEC "dot.%s%s.f32", name, n == NIN ? "" : ".n384");
    assert_int_equal(alen, sizeof(float) * NT * NIN);
    assert_int_equal(dlen, sizeof(float) * NT * NOUT);
    uint8_t *w = first_columns(type, w_full, NOUT, NIN, n), *aq = first_columns(KILN_Q8_0, aq_full, NT, NIN, n);
    float *x = malloc(sizeof(float) * NT * (size_t)n), *y = malloc(sizeof(float) * NT * NOUT), *yt = malloc(sizeof y[0] * NT * NOUT);
    assert_true(x && y && yt);
    for (int t = 0; t < NT; t++) memcpy(x + t * n, act + t * NIN, sizeof(float) * (size_t)n);

    const kiln_qtype *qt = kiln_qtype_get(type);
    assert_non_null(qt);
    const size_t wrow = kiln_type_row_bytes(type, (uint64_t)n), arow = kiln_type_row_bytes(KILN_Q8_0, (uint64_t)n);
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < NOUT; r++) y[t * NOUT + r] = qt->dot(n, w + r * wrow, aq + t * arow);
    const int64_t bad_ref = count_differing(y, ref, NT * NOUT);

    int64_t bad_mm = 0;
    const int per_call[] = {1, 3, NT};
    for (int c = 0; c < 3; c++)
        for (int t0 = 0; t0 < NT; t0 += per_call[c]) {
            const int nt = NT - t0 < per_call[c] ? NT - t0 : per_call[c];
            assert_int_equal(kiln_matmul(type, w, n, NOUT, x + t0 * n, nt, yt, KILN_NUM_GGML), 0);
            bad_mm += count_differing(yt, ref + t0 * NOUT, (int64_t)nt * NOUT);
        }

    int64_t bad_direct = 0;
    if (kiln_kdirect(qt, KILN_KORDER_VECDOT, w, n, NOUT, aq, NT, yt)) bad_direct = count_differing(yt, ref, NT * NOUT);
    else assert_int_equal(lvl, KILN_SIMD_SCALAR); /* the direct kernels start at AVX2 */

    printf("# %s %s over %lld weights, dot products differing from ggml's vec_dot: reference %lld, matmul %lld, "
           "direct %lld (of %d each)\n",
           kiln_simd_name(lvl), name, (long long)n, (long long)bad_ref, (long long)bad_mm, (long long)bad_direct,
           NT * NOUT);
    assert_int_equal(bad_ref + bad_mm + bad_direct, 0);
    free(yt);
    free(y);
    free(x);
    free(aq);
    free(w);
    free(ref);
    free(w_full);
    free(aq_full);
    free(act);
}

static void test_dot_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    for (size_t i = 0; i < sizeof TYPES / sizeof *TYPES; i++) {
        dots_vs_ggml(lvl, TYPES[i], NIN);
        dots_vs_ggml(lvl, TYPES[i], NSHORT);
    }
}

/* ---- random blocks ------------------------------------------------------ */

static uint64_t rng = 0x243f6a8885a308d3ull;

/* A random fp16 factor of either sign, magnitude 2^-12 .. 2^-6. */
static kiln_half factor(void) {
    const uint64_t r = kiln_test_xorshift64(&rng);
    const float f = ldexpf(1.0f + (float)(r & 1023) / 1024.0f, -6 - (int)((r >> 10) % 7));
    return kiln_fp32_to_fp16(r >> 20 & 1 ? -f : f);
}

/* Both blocks lead with their fp16 d (codec/blocks_tq.h); the rest are
 * random bits, every pattern valid. */
static void random_blocks(uint8_t *b, int64_t n_blocks, int block_bytes) {
    for (int64_t i = 0; i < n_blocks; i++, b += block_bytes) {
        for (int j = 0; j < block_bytes; j++) b[j] = (uint8_t)kiln_test_xorshift64(&rng);
        const kiln_half d = factor();
        memcpy(b, &d, sizeof d);
    }
}

/* kiln_matmul (or _expert) of n_out random rows of n_in weights against
 * T tokens equals qt->dot on kiln_act_q8_0's activations, bit for bit. */
static void random_case(uint32_t type, int64_t n_in, int64_t n_out, int64_t T, bool expert) {
    const kiln_qtype *qt = kiln_qtype_get(type);
    assert_non_null(qt);
    const int64_t nb = n_in / qt->block, row = nb * qt->block_bytes, act_row = nb * qt->act_bytes;
    assert_int_equal(act_row, (int64_t)kiln_type_row_bytes(KILN_Q8_0, (uint64_t)n_in));
    uint8_t *w = malloc((size_t)(row * n_out)), *act = malloc((size_t)(act_row * T));
    float *x = malloc(sizeof(float) * (size_t)(n_in * T)), *want = malloc(sizeof(float) * (size_t)(n_out * T)),
          *y = malloc(sizeof(float) * (size_t)(n_out * T));
    assert_true(w && act && x && want && y);
    random_blocks(w, nb * n_out, qt->block_bytes);
    for (int64_t i = 0; i < n_in * T; i++) {
        const float g = kiln_test_gaussf(&rng);
        x[i] = kiln_test_xorshift64(&rng) % 64 ? g : 20.0f * g;
    }
    for (int64_t t = 0; t < T; t++) {
        kiln_act_q8_0(x + t * n_in, (kiln_block_q8_0 *)(act + t * act_row), n_in);
        for (int64_t r = 0; r < n_out; r++) want[t * n_out + r] = qt->dot(n_in, w + r * row, act + t * act_row);
    }
    memset(y, 0xFF, sizeof(float) * (size_t)(n_out * T));
    assert_int_equal((expert ? kiln_matmul_expert : kiln_matmul)(type, w, n_in, n_out, x, T, y, KILN_NUM_GGML), 0);
    for (int64_t i = 0; i < n_out * T; i++)
        if (memcmp(&y[i], &want[i], sizeof(float)))
            fail_msg("%s %s n_in %lld n_out %lld tokens %lld at %s: token %lld row %lld is %.9g, reference %.9g",
                     kiln_type_name(type), expert ? "expert" : "matmul", (long long)n_in, (long long)n_out,
                     (long long)T, kiln_simd_name(kiln_simd()), (long long)(i / n_out), (long long)(i % n_out),
                     y[i], want[i]);
    free(y);
    free(want);
    free(x);
    free(act);
    free(w);
}

static void test_random_blocks(void **state) {
    simd_level_enter(state);
    const int64_t blocks[] = {1, 2, 3, 5, 16};
    const int64_t n_outs[] = {1, 7, 16, 33};
    const int64_t tokens[] = {1, 2, 4, 5, 9};
    for (size_t i = 0; i < sizeof TYPES / sizeof *TYPES; i++) {
        const int block = kiln_qtype_get(TYPES[i])->block;
        for (size_t b = 0; b < sizeof blocks / sizeof *blocks; b++)
            for (size_t o = 0; o < sizeof n_outs / sizeof *n_outs; o++)
                for (size_t t = 0; t < sizeof tokens / sizeof *tokens; t++) {
                    random_case(TYPES[i], blocks[b] * block, n_outs[o], tokens[t], false);
                    if (t % 2 == 0) random_case(TYPES[i], blocks[b] * block, n_outs[o], tokens[t], true);
                }
    }
}

/* The table's geometry for the two types: a weight block spans 4 (Q1_0)
 * and 2 (Q2_0) Q8_0 blocks, vec_dot order only (llama.cpp repacks
 * neither), and the direct kernels take every product from AVX2 up. */
static void test_table_rows(void **state) {
    (void)state;
    const kiln_qtype *q1 = kiln_qtype_get(KILN_Q1_0), *q2 = kiln_qtype_get(KILN_Q2_0);
    assert_non_null(q1);
    assert_non_null(q2);
    assert_int_equal(q1->block, 128);
    assert_int_equal(q1->act_bytes, 4 * sizeof(kiln_block_q8_0));
    assert_int_equal(q2->block, 64);
    assert_int_equal(q2->act_bytes, 2 * sizeof(kiln_block_q8_0));
    assert_false(kiln_qtype_repacked(q1, 64));
    assert_false(kiln_qtype_repacked(q2, 64));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_rows),
        SIMD_LEVEL_TESTS(test_dot_vs_ggml),
        SIMD_LEVEL_TESTS(test_random_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
