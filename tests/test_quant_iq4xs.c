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

typedef struct src {
    const char *name;
    int64_t rows, cols;
    bool shared; /* in ../shared/golden/quant (else in VEC) */
} src;

static const src SRCS[] = {{"blk.0.attn_q.weight", 128, 256, true},
                           {"blk.1.ffn_down.weight", 64, 512, true},
                           {"blk.2.ffn_up.weight", 128, 256, true},
                           {"edge", 4, 512, false}};



/* ggml's hash of its dequantization of (src, imx), from deq.tsv. */
static uint64_t deq_hash(const char *name, int imx) {
    FILE *f = fopen(VEC "deq.tsv", "r");
    assert_non_null(f);
    char line[512], s[256];
    int im;
    unsigned long long h;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%255s %d %llx", s, &im, &h) == 3 && !strcmp(s, name) && im == imx) {
            fclose(f);
            return h;
        }
    fclose(f);
    fail_msg("deq.tsv has no %s %d", name, imx);
    return 0;
}

/* Quantization bytes and dequantization bits at this case's SIMD level. */
static void test_codec_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    SKIP_WITHOUT_SHARED();
    int64_t bad_bytes = 0, bad_deq = 0;
    for (size_t s = 0; s < sizeof SRCS / sizeof *SRCS; s++) {
        const src *sr = &SRCS[s];
        const int64_t n = sr->rows * sr->cols;
        size_t xlen, wlen;
        float *x, *w;
        if (sr->shared) {
            x = qf_load(&xlen, "%s/golden/quant/%s.f32", kiln_shared(), sr->name);
            w = qf_load(&wlen, "%s/golden/quant/%s.imatrix.f32", kiln_shared(), sr->name);
        } else {
            x = qf_load(&xlen, VEC "%s.f32", sr->name);
            w = qf_load(&wlen, VEC "%s.imatrix.f32", sr->name);
        }
        assert_int_equal(xlen, (size_t)n * 4);
        assert_int_equal(wlen, (size_t)sr->cols * 4);
        for (int imx = 0; imx < 2; imx++) {
            size_t qlen;
            uint8_t *ref = qf_load(&qlen, VEC "%s.IQ4_XS%s.q", sr->name, imx ? ".imx" : "");
            assert_int_equal(qlen, kiln_type_row_bytes(KILN_IQ4_XS, (uint64_t)sr->cols) * (size_t)sr->rows);
            uint8_t *mine = malloc(qlen);
            float *deq = malloc((size_t)n * 4);
            kiln_err err = {{0}};
            assert_int_equal(kiln_quantize_rows(KILN_IQ4_XS, x, mine, sr->rows, sr->cols, imx ? w : NULL, &err),
                             qlen);
            size_t diff = 0;
            for (size_t i = 0; i < qlen; i++) diff += mine[i] != ref[i];
            if (!imx) { /* ggml's row reference is the same search */
                memset(mine, 0, qlen);
                kiln_quantize_row_iq4_xs_ref(x, mine, n);
                for (size_t i = 0; i < qlen; i++) diff += mine[i] != ref[i];
            }
            assert_int_equal(kiln_dequantize(KILN_IQ4_XS, ref, deq, n, &err), 0);
            const bool deq_ok = qf_fnv1a(deq, (size_t)n * 4) == deq_hash(sr->name, imx);
            printf("# %s %-22s IQ4_XS%-4s bytes differing from ggml: %zu of %zu; dequantization %s\n",
                   kiln_simd_name(lvl), sr->name, imx ? ".imx" : "", diff, qlen, deq_ok ? "identical" : "DIFFERS");
            bad_bytes += diff != 0;
            bad_deq += !deq_ok;
            free(deq);
            free(mine);
            free(ref);
        }
        free(w);
        free(x);
    }
    assert_int_equal(bad_bytes, 0);
    assert_int_equal(bad_deq, 0);
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
    size_t alen, qlen, wlen, dlen;
    float *act = qf_load(&alen, VEC "act.f32");
    uint8_t *aq = qf_load(&qlen, VEC "act.q8_k");
    uint8_t *w = qf_load(&wlen, VEC "blk.1.ffn_down.weight.IQ4_XS.q");
    float *ref = qf_load(&dlen, VEC "dot.IQ4_XS.f32");
    assert_int_equal(dlen, sizeof(float) * NT * NOUT);
    assert_int_equal(kiln_qtype_get(KILN_IQ4_XS)->act_type, KILN_Q8_K);
    int64_t bad[3];
    qf_dot_mismatches(KILN_IQ4_XS, w, act, aq, ref, NT, NIN, NOUT, bad);
    printf("# %s IQ4_XS dot products differing from ggml's: reference %lld, matmul 1 token %lld, 8 tokens %lld "
           "(of %d)\n",
           kiln_simd_name(lvl), (long long)bad[0], (long long)bad[1], (long long)bad[2], NT * NOUT);
    assert_int_equal(bad[0] + bad[1] + bad[2], 0);
    free(ref);
    free(w);
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
