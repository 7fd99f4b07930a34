/* tests/test_attn_flash_step.c - the running-sum update of ggml's flash
 * attention kernels as kiln reproduces it (runtime/attention_flash.c).
 * ggml writes it `S = S*ms + vs`, in C++ that GCC contracts where it can
 * (-march=native, -ffp-contract=fast by default); kiln builds with
 * contraction off and must say where ggml's code fuses: one_chunk's
 * per-cell update and the tiled kernel's sink step are one fused
 * multiply-add, one_chunk's sink step on a new maximum is not (the
 * rescaled accumulator sits between the product and the sum). Only a new
 * maximum (ms != 1) tells the two apart.
 *
 * The numbers are those of the trace in
 * tests/fixtures/deepseek4_runtime/REGEN.md: block 0, head 0, token 9 of
 * llama-imatrix's chunk 26 on the deepseek4 fixture, whose running
 * maximum moves from 1.59282982 onto a compressed cell scoring
 * 2.06256914 with the sum at 2.95539904; llama.cpp's kernel printed
 * the new sum 2.84761262, a rounded product then a sum gives 2.84761286
 * (one ulp apart), which was enough to move llama-imatrix's running
 * perplexity in the fourth decimal from chunk 26 on. */
#include "shared.h"

#include "../core/fp16.h"
#include "../runtime/forward_impl.h"

#define HD 32

static const float M_OLD = 1.59282982f, S_OLD = 2.95539904f, S_NEW_MAX = 2.06256914f;
static const float S_LLAMA = 2.84761262f;   /* what ggml's kernel computed: fused */
static const float S_UNFUSED = 2.84761286f; /* S * ms rounded, then + 1 */

/* The case discriminates: the unfused update gives another float. */
static void test_case_discriminates(void **state) {
    (void)state;
    volatile float ms = expf(M_OLD - S_NEW_MAX), prod = S_OLD * ms;
    const float unfused = prod + 1.0f;
    assert_true(fmaf(S_OLD, ms, 1.0f) == S_LLAMA);
    assert_true(unfused == S_UNFUSED && unfused != S_LLAMA);
}

/* A cell that is a new maximum: M moves, the f16 accumulator is scaled
 * by ms and takes the cell's row at weight 1, the sum is fma(S, ms, 1). */
static void test_one_chunk_new_max(void **state) {
    (void)state;
    float acc[HD], v[HD], want[HD];
    const float ms = expf(M_OLD - S_NEW_MAX);
    for (int d = 0; d < HD; d++) {
        acc[d] = kiln_fp16_to_fp32(kiln_fp32_to_fp16(0.25f * (float)(d - 11)));
        v[d] = kiln_fp16_to_fp32(kiln_fp32_to_fp16(0.125f * (float)(7 - d)));
        const float scaled = kiln_fp16_to_fp32(kiln_fp32_to_fp16(acc[d] * ms));
        want[d] = kiln_fp16_to_fp32(kiln_fp32_to_fp16(fmaf(v[d], 1.0f, scaled)));
    }
    float M = M_OLD, S = S_OLD;
    kiln_attn_one_chunk_step(S_NEW_MAX, v, &M, &S, acc, HD);
    assert_true(M == S_NEW_MAX);
    assert_true(S == S_LLAMA);
    assert_memory_equal(acc, want, sizeof acc);
}

/* A cell below the maximum: ms is 1, so fused or not the sum is S + vs. */
static void test_one_chunk_below_max(void **state) {
    (void)state;
    float acc[HD] = {0}, v[HD];
    for (int d = 0; d < HD; d++) v[d] = 1.0f;
    float M = S_NEW_MAX, S = S_OLD;
    kiln_attn_one_chunk_step(M_OLD, v, &M, &S, acc, HD);
    const float vs = expf(M_OLD - S_NEW_MAX);
    assert_true(M == S_NEW_MAX);
    assert_true(S == S_OLD + vs);
}

/* The sink logit as a new maximum: the accumulator (f32) scaled by ms in
 * both kernels; the sum fused after a tiled row, rounded product then
 * sum after a one_chunk row. */
static void test_sink_new_max(void **state) {
    (void)state;
    const float ms = expf(M_OLD - S_NEW_MAX);
    for (int tiled = 0; tiled < 2; tiled++) {
        float acc[HD];
        for (int d = 0; d < HD; d++) acc[d] = 0.5f * (float)(d - 3);
        float M = M_OLD, S = S_OLD;
        if (tiled) kiln_attn_sink_step_tiled(S_NEW_MAX, &M, &S, acc, HD);
        else kiln_attn_sink_step(S_NEW_MAX, &M, &S, acc, HD);
        assert_true(S == (tiled ? S_LLAMA : S_UNFUSED));
        for (int d = 0; d < HD; d++) assert_true(acc[d] == 0.5f * (float)(d - 3) * ms);
    }
}

/* A sink below the maximum: ms is 1, the sum S + expf(s - M) either way. */
static void test_sink_below_max(void **state) {
    (void)state;
    for (int tiled = 0; tiled < 2; tiled++) {
        float acc[HD] = {0}, M = S_NEW_MAX, S = S_OLD;
        if (tiled) kiln_attn_sink_step_tiled(M_OLD, &M, &S, acc, HD);
        else kiln_attn_sink_step(M_OLD, &M, &S, acc, HD);
        assert_true(M == S_NEW_MAX && S == S_OLD + expf(M_OLD - S_NEW_MAX));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_case_discriminates),
        cmocka_unit_test(test_one_chunk_new_max),
        cmocka_unit_test(test_one_chunk_below_max),
        cmocka_unit_test(test_sink_new_max),
        cmocka_unit_test(test_sink_below_max),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
