/* tests/test_quant_iq4xs.c - IQ4_XS and its Q8_K products against ggml's
 * own output in tests/fixtures/quant_iq4xs/vectors/ (gen_vectors.c there,
 * linked to llama.cpp's ggml, wrote it; REGEN.md has the commands):
 *
 *  - kiln's quantization of llama.cpp's three source tensors
 *    (../shared/golden/quant/SRC.f32) and of the fixture's edge rows (an
 *    all-zero super-block, a zero sub-block, tiny values, an outlier that
 *    clamps the other scales, imatrix zeros over a sub-block), with and
 *    without the imatrix, is ggml_quantize_chunk's bytes, byte for byte,
 *    at every SIMD level;
 *  - kiln's dequantization of ggml's blocks is ggml's, bit for bit;
 *  - the Q8_K activations are ggml-cpu's from_float bytes;
 *  - the dot products, alone and through kiln_matmul's table at every
 *    SIMD level, are ggml-cpu's vec_dot bits;
 *  - the IQ4_XS preset's rules that the 4-layer fixtures cannot reach.
 *    The fixtures' whole-model types, bytes and logits are checked by
 *    tests/e2e/quant_iq4xs.sh. */
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

#define VEC "tests/fixtures/quant_iq4xs/vectors/"

static const qf_src SRCS[] = {{"blk.0.attn_q.weight", 128, 256, true},
                           {"blk.1.ffn_down.weight", 64, 512, true},
                           {"blk.2.ffn_up.weight", 128, 256, true},
                           {"edge", 4, 512, false}};



/* Quantization bytes and dequantization bits at this case's SIMD level
 * (deq.tsv, of one type, has no type column). */
static void test_codec_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    SKIP_WITHOUT_SHARED();
    /* deq.tsv, of one type, has no type column */
    static const qf_codec_type CODEC[] = {{KILN_IQ4_XS, 0, kiln_quantize_row_iq4_xs_ref}};
    assert_int_equal(qf_codec_suite(kiln_simd_name(lvl), VEC, SRCS, sizeof SRCS / sizeof *SRCS, CODEC, 1, false), 8);
}

/* The edge rows' corner cases are really there: an all-zero super-block
 * stores d = -0 (0x8000), and the sub-block without imatrix weight gets
 * scale 0 (stored as 32) - so a quantizer that missed either would fail
 * the byte comparison above, not pass it by luck. */
static void test_edge_cases_present(void **state) {
    (void)state;
    size_t qlen;
    kiln_block_iq4_xs *b = qf_load(&qlen, VEC "edge.IQ4_XS.imx.q");
    assert_int_equal(qlen, 8 * sizeof *b);
    assert_int_equal(b[0].d, 0x8000);
    assert_int_equal(b[0].scales_h, 0xaaaa); /* every l = 0, stored as 32 */
    /* row 1 (blocks 2, 3): sub-block 1 has no imatrix weight, l = 0 */
    assert_int_equal(b[2].scales_l[0] >> 4, 0);
    assert_int_equal((b[2].scales_h >> 2) & 3, 2);
    assert_int_not_equal(b[2].scales_l[0] & 15, 0); /* while sub-block 0 is fitted */
    free(b);
}

enum { NT = 8, NIN = 512, NOUT = 64 };

static void test_act_q8_k_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    size_t alen, qlen;
    float *act = qf_load(&alen, VEC "act.f32");
    uint8_t *ref = qf_load(&qlen, VEC "act.q8_k");
    assert_int_equal(alen, sizeof(float) * NT * NIN);
    assert_int_equal(qlen, sizeof(kiln_block_q8_k) * NT * NIN / KILN_QK_K);
    kiln_block_q8_k *mine = malloc(qlen);
    for (int t = 0; t < NT; t++) kiln_act_q8_k(act + t * NIN, mine + t * NIN / KILN_QK_K, NIN);
    size_t diff = qf_bytes_differ(mine, ref, qlen);
    printf("# %s Q8_K activations: %zu of %zu bytes differ from ggml's\n", kiln_simd_name(lvl), diff, qlen);
    assert_int_equal(diff, 0);
    free(mine);
    free(ref);
    free(act);
}

/* ggml's vec_dot bits: the reference dot on ggml's activation bytes, and
 * kiln_matmul (the kernel table, activations converted by kiln) at this
 * case's SIMD level, one token at a time and all 8 at once. */
static void test_dot_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    size_t alen, qlen;
    float *act = qf_load(&alen, VEC "act.f32");
    uint8_t *aq = qf_load(&qlen, VEC "act.q8_k");
    assert_int_equal(qf_dot_case(kiln_simd_name(lvl), VEC, KILN_IQ4_XS, KILN_Q8_K, "blk.1.ffn_down.weight.IQ4_XS.q",
                                 "dot.IQ4_XS.f32", act, aq, NT, NIN, NOUT),
                     0);
    free(aq);
    free(act);
}

/* The preset's rules the 4-layer fixtures cannot reach (llama.cpp's
 * llama_tensor_get_type for LLAMA_FTYPE_MOSTLY_IQ4_XS). */
static void test_iq4xs_preset(void **state) {
    (void)state;
    kiln_quant_target tg;
    kiln_err err;
    assert_int_equal(kiln_quant_target_parse("IQ4_XS", &tg, &err), 0);
    assert_non_null(tg.preset);
    assert_int_equal(tg.type, KILN_IQ4_XS);
    assert_int_equal(tg.ftype, 30);
    /* output Q6_K; attn_v Q5_K with GQA >= 4 (32 / 8), else the base */
    assert_int_equal(qf_plan_type("IQ4_XS", false, 16, 8, 0, "output.weight", 4096), KILN_Q6_K);
    assert_int_equal(qf_plan_type("IQ4_XS", false, 16, 8, 0, "token_embd.weight", 4096), KILN_IQ4_XS);
    assert_int_equal(qf_plan_type("IQ4_XS", false, 16, 8, 0, "blk.5.attn_v.weight", 4096), KILN_Q5_K);
    assert_int_equal(qf_plan_type("IQ4_XS", false, 16, 16, 0, "blk.5.attn_v.weight", 4096), KILN_IQ4_XS);
    /* ffn_down: Q5_K in the first n/8 layers, only without an imatrix */
    assert_int_equal(qf_plan_type("IQ4_XS", false, 16, 8, 0, "blk.1.ffn_down.weight", 4096), KILN_Q5_K);
    assert_int_equal(qf_plan_type("IQ4_XS", false, 16, 8, 0, "blk.2.ffn_down.weight", 4096), KILN_IQ4_XS);
    assert_int_equal(qf_plan_type("IQ4_XS", true, 16, 8, 0, "blk.1.ffn_down.weight", 4096), KILN_IQ4_XS);
    /* 8 experts: attn_v Q8_0, attn_output Q5_K */
    assert_int_equal(qf_plan_type("IQ4_XS", true, 16, 8, 8, "blk.3.attn_v.weight", 4096), KILN_Q8_0);
    assert_int_equal(qf_plan_type("IQ4_XS", true, 16, 8, 8, "blk.3.attn_output.weight", 4096), KILN_Q5_K);
    assert_int_equal(qf_plan_type("IQ4_XS", true, 16, 8, 0, "blk.3.attn_output.weight", 4096), KILN_IQ4_XS);
    /* rows that are not a multiple of 256 fall back to IQ4_NL (llama.cpp) */
    assert_int_equal(kiln_policy_fallback(KILN_IQ4_XS, 96), KILN_IQ4_NL);
    assert_int_equal(qf_plan_type("IQ4_XS", true, 16, 8, 0, "blk.3.ffn_down.weight", 1376), KILN_IQ4_NL);
    assert_int_equal(kiln_policy_fallback(KILN_IQ4_XS, 100), KILN_F16);
    /* IQ4_XS is a plain type too (--pure) */
    assert_int_equal(kiln_quant_target_parse("iq4_xs", &tg, &err), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_codec_vs_ggml),
        cmocka_unit_test(test_edge_cases_present),
        SIMD_LEVEL_TESTS(test_act_q8_k_vs_ggml),
        SIMD_LEVEL_TESTS(test_dot_vs_ggml),
        cmocka_unit_test(test_iq4xs_preset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
