/* tests/test_quant_legacy1.c - Q4_1 and Q5_1 (the legacy types with a
 * minimum) and their Q8_1 activations, against ggml's own output in
 * tests/fixtures/quant_legacy/vectors/ (gen_vectors.c there, linked to
 * llama.cpp's ggml, wrote it; REGEN.md has the commands):
 *
 *  - kiln's quantization of llama.cpp's three source tensors
 *    (../shared/golden/quant/SRC.f32), with and without the imatrix, is
 *    ggml_quantize_chunk's bytes, byte for byte, at every SIMD level;
 *  - kiln's dequantization of ggml's blocks is ggml's, bit for bit
 *    (an FNV-1a hash of the floats);
 *  - Q8_1 activations are ggml-cpu's x86 from_float bytes (d and s too);
 *  - the dot products, alone and through kiln_matmul's table at every
 *    SIMD level, are ggml-cpu's vec_dot bits;
 *  - the legacy presets' rules that the 4-layer fixtures cannot reach:
 *    ffn_down Q4_1 / Q5_1 in the first eighth with an imatrix, Q5_K
 *    falling back to Q5_1. The fixtures' whole-model types, bytes and
 *    logits are checked by tests/e2e/quant_legacy.sh. */
#include "shared.h"
#include "quant_fixture.h"
#include "simd_levels.h"

#include "../codec/blocks.h"
#include "../codec/codec.h"
#include "../codec/quants.h"
#include "../core/types.h"
#include "../quantize/policy.h"
#include "../runtime/matmul.h"
#include "../runtime/vecdot.h"

#define VEC "tests/fixtures/quant_legacy/vectors/"

static const qf_src SRCS[] = {
    {"blk.0.attn_q.weight", 128, 256, true},
    {"blk.1.ffn_down.weight", 64, 512, true},
    {"blk.2.ffn_up.weight", 128, 256, true}};
static const char *const TYPES[] = {"Q4_1", "Q5_1"};



/* Quantization bytes and dequantization bits at this case's SIMD level. */
static void test_codec_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    SKIP_WITHOUT_SHARED();
    /* the row reference quantizer is the same code */
    static const qf_codec_type CODEC[] = {{KILN_Q4_1, 0, kiln_quantize_row_q4_1_ref},
                                          {KILN_Q5_1, 0, kiln_quantize_row_q5_1_ref}};
    assert_int_equal(qf_codec_suite(kiln_simd_name(lvl), VEC, SRCS, sizeof SRCS / sizeof *SRCS, CODEC, 2, true), 12);
}

enum { NT = 8, NIN = 512, NOUT = 64 };

static void test_act_q8_1_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    size_t alen, qlen;
    float *act = qf_load(&alen, VEC "act.f32");
    uint8_t *ref = qf_load(&qlen, VEC "act.q8_1");
    assert_int_equal(alen, sizeof(float) * NT * NIN);
    assert_int_equal(qlen, sizeof(kiln_block_q8_1) * NT * NIN / KILN_QK);
    kiln_block_q8_1 *mine = malloc(qlen);
    for (int t = 0; t < NT; t++) kiln_act_q8_1(act + t * NIN, mine + t * NIN / KILN_QK, NIN);
    size_t diff = qf_bytes_differ(mine, ref, qlen);
    printf("# %s Q8_1 activations: %zu of %zu bytes differ from ggml's\n", kiln_simd_name(lvl), diff, qlen);
    assert_int_equal(diff, 0);
    /* the test can fail: s is not d * sum of the bytes for a wrong order */
    assert_true(mine[NIN / KILN_QK * 7].d == 0 && mine[NIN / KILN_QK * 7].s == 0); /* the zero block */
    free(mine);
    free(ref);
    free(act);
}

/* ggml's vec_dot bits: the reference dot on ggml's activation bytes, and
 * kiln_matmul (the kernel table, activations converted by kiln) at this
 * case's SIMD level, one token at a time and all 8 at once. */
static void test_dot_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    SKIP_WITHOUT_SHARED(); /* not needed for the data, but the source of the weights */
    size_t alen, qlen;
    float *act = qf_load(&alen, VEC "act.f32");
    uint8_t *aq = qf_load(&qlen, VEC "act.q8_1");
    for (int t = 0; t < 2; t++) {
        char wname[128], dname[64];
        snprintf(wname, sizeof wname, "blk.1.ffn_down.weight.%s.q", TYPES[t]);
        snprintf(dname, sizeof dname, "dot.%s.f32", TYPES[t]);
        assert_int_equal(qf_dot_case(kiln_simd_name(lvl), VEC, (uint32_t)kiln_type_from_name(TYPES[t]), KILN_Q8_1,
                                     wname, dname, act, aq, NT, NIN, NOUT),
                         0);
    }
    free(aq);
    free(act);
}

/* The legacy presets' rules the 4-layer fixtures cannot reach. */
static void test_legacy_presets(void **state) {
    (void)state;
    kiln_quant_target tg;
    kiln_err err;
    const struct {
        const char *name;
        uint32_t type, ftype;
    } P[] = {{"Q4_0", KILN_Q4_0, 2}, {"Q4_1", KILN_Q4_1, 3}, {"Q5_0", KILN_Q5_0, 8}, {"q5_1", KILN_Q5_1, 9}};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(kiln_quant_target_parse(P[i].name, &tg, &err), 0);
        assert_non_null(tg.preset);
        assert_int_equal(tg.type, P[i].type);
        assert_int_equal(tg.ftype, P[i].ftype);
        /* llama-quantize: output Q6_K, token_embd and the rest the base */
        assert_int_equal(qf_plan_type(P[i].name, false, 16, 8, 0, "output.weight", 4096), KILN_Q6_K);
        assert_int_equal(qf_plan_type(P[i].name, false, 16, 8, 0, "token_embd.weight", 4096), P[i].type);
        assert_int_equal(qf_plan_type(P[i].name, true, 16, 8, 0, "blk.5.attn_v.weight", 4096), P[i].type);
    }
    /* with an imatrix, Q4_0 / Q5_0 give ffn_down of the first n/8 layers the _1 type */
    assert_int_equal(qf_plan_type("Q4_0", true, 16, 8, 0, "blk.1.ffn_down.weight", 4096), KILN_Q4_1);
    assert_int_equal(qf_plan_type("Q4_0", true, 16, 8, 0, "blk.2.ffn_down.weight", 4096), KILN_Q4_0);
    assert_int_equal(qf_plan_type("Q4_0", false, 16, 8, 0, "blk.1.ffn_down.weight", 4096), KILN_Q4_0);
    assert_int_equal(qf_plan_type("Q5_0", true, 16, 8, 0, "blk.0.ffn_down.weight", 4096), KILN_Q5_1);
    assert_int_equal(qf_plan_type("Q5_0", false, 16, 8, 0, "blk.0.ffn_down.weight", 4096), KILN_Q5_0);
    assert_int_equal(qf_plan_type("Q4_1", true, 16, 8, 0, "blk.0.ffn_down.weight", 4096), KILN_Q4_1);
    /* row lengths: Q5_K falls back to Q5_1 (llama.cpp), output to Q8_0 when
     * its rows do not fit 256 */
    assert_int_equal(kiln_policy_fallback(KILN_Q5_K, 96), KILN_Q5_1);
    assert_int_equal(qf_plan_type("Q5_K_M", false, 16, 8, 0, "blk.3.ffn_down.weight", 1376), KILN_Q5_1);
    assert_int_equal(kiln_policy_fallback(KILN_Q5_1, 100), KILN_NO_FALLBACK); /* llama.cpp refuses */
    assert_int_equal(kiln_policy_fallback(KILN_Q4_1, 96), KILN_Q4_1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_codec_vs_ggml),
        SIMD_LEVEL_TESTS(test_act_q8_1_vs_ggml),
        SIMD_LEVEL_TESTS(test_dot_vs_ggml),
        cmocka_unit_test(test_legacy_presets),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
