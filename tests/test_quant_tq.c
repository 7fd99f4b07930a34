/* tests/test_quant_tq.c - TQ1_0, TQ2_0 and MXFP4 and their products (and
 * the Q1_0 and Q2_0 codecs, whose products tests/test_vecdot_q12.c checks)
 * against ggml's own output in tests/fixtures/quant_tq/vectors/
 * (gen_vectors.c there, linked to llama.cpp's ggml, wrote it; REGEN.md
 * has the commands):
 *
 *  - kiln's quantization of llama.cpp's three source tensors
 *    (../shared/golden/quant/SRC.f32) and of the fixture's edge rows (an
 *    all-zero block, exact rounding ties, an MXFP4 extreme just below a
 *    power of two where log2f rounds up, tiny, huge and subnormal blocks,
 *    an outlier) is ggml_quantize_chunk's bytes, byte for byte, with and
 *    without the imatrix (which ggml ignores for these types), at every
 *    SIMD level, and so is the row reference;
 *  - kiln's dequantization of ggml's blocks is ggml's, bit for bit;
 *  - the Q8_K and Q8_0 activations are ggml-cpu's from_float bytes;
 *  - the dot products are ggml-cpu's vec_dot bits: the reference ones on
 *    ggml's activation bytes, kiln_matmul at every SIMD level (TQ: one
 *    token and 8; MXFP4: a 60-row matrix, which llama.cpp does not
 *    repack), the direct kernels, and MXFP4's odd last block;
 *  - MXFP4's repacked (gemv) order is the same at every level; its bits
 *    against llama.cpp are checked by tests/e2e/quant_tq.sh's logits. */
#include "shared.h"
#include "quant_fixture.h"
#include "simd_levels.h"

#include "../codec/blocks.h"
#include "../codec/codec.h"
#include "../codec/fp4.h"
#include "../codec/quants.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../runtime/matmul.h"
#include "../runtime/vecdot.h"

#include <math.h>

#define VEC "tests/fixtures/quant_tq/vectors/"

static const qf_src SRCS[] = {{"blk.0.attn_q.weight", 128, 256, true},
                           {"blk.1.ffn_down.weight", 64, 512, true},
                           {"blk.2.ffn_up.weight", 128, 256, true},
                           {"edge", 4, 512, false}};

typedef struct qtype {
    uint32_t type;
    const char *name;
    void (*ref)(const float *, void *, int64_t);
} qtype;

static const qtype TYPES[] = {{KILN_TQ1_0, "TQ1_0", kiln_quantize_row_tq1_0_ref},
                              {KILN_TQ2_0, "TQ2_0", kiln_quantize_row_tq2_0_ref},
                              {KILN_MXFP4, "MXFP4", kiln_quantize_row_mxfp4_ref},
                              {KILN_Q1_0, "Q1_0", kiln_quantize_row_q1_0_ref},
                              {KILN_Q2_0, "Q2_0", kiln_quantize_row_q2_0_ref}};

/* Quantization bytes and dequantization bits at this case's SIMD level:
 * ggml's bytes do not depend on the imatrix, so kiln's with and without
 * one and the row reference's must all be them. */
static void test_codec_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    SKIP_WITHOUT_SHARED();
    qf_codec_type codec[sizeof TYPES / sizeof *TYPES];
    for (size_t ti = 0; ti < sizeof TYPES / sizeof *TYPES; ti++)
        codec[ti] = (qf_codec_type){TYPES[ti].type, QF_IMX_IGNORED, TYPES[ti].ref};
    assert_int_equal(qf_codec_suite(kiln_simd_name(lvl), VEC, SRCS, sizeof SRCS / sizeof *SRCS, codec, sizeof TYPES / sizeof *TYPES, true),
                     20);
}

/* The edge rows' corner cases are really there, so that a codec that
 * missed one fails the byte comparison above instead of passing by luck:
 * TQ's all-zero block stores d = 0; MXFP4's zero block e = 0, the block
 * whose extreme is just below 16 e = 129 (log2f rounded up: exact
 * arithmetic gives 128), the subnormal block e = 254 (-2 wrapped around),
 * and the tie row holds codes of both signs. */
static void test_edge_cases_present(void **state) {
    (void)state;
    size_t len;
    kiln_block_tq2_0 *t2 = qf_load(&len, VEC "edge.TQ2_0.q");
    assert_int_equal(len, 8 * sizeof *t2);
    assert_int_equal(t2[0].d, 0);
    assert_int_not_equal(t2[1].d, 0);
    free(t2);
    kiln_block_tq1_0 *t1 = qf_load(&len, VEC "edge.TQ1_0.q");
    assert_int_equal(t1[0].d, 0);
    assert_int_equal(t1[3].d, kiln_fp32_to_fp16(2.0f)); /* row 1, block 1: the tie block */
    free(t1);
    kiln_block_mxfp4 *m = qf_load(&len, VEC "edge.MXFP4.q");
    assert_int_equal(len, 64 * sizeof *m);
    assert_int_equal(m[0].e, 0);
    assert_int_equal(m[2 * 16 + 1].e, 129);
    assert_int_equal(kiln_e8m0_of_amax(nextafterf(16.0f, 0.0f)), 129);
    assert_int_equal(m[2 * 16 + 4].e, 254);
    free(m);
}

/* E8M0 and E2M1 helpers on their own, against values worked out by hand. */
static void test_fp4_helpers(void **state) {
    (void)state;
    assert_true(kiln_e8m0_to_fp32(127) == 1.0f);
    assert_true(kiln_e8m0_to_fp32(0) == ldexpf(1.0f, -127));
    assert_true(kiln_e8m0_to_fp32_half(128) == 1.0f);
    assert_true(kiln_e8m0_to_fp32_half(1) == ldexpf(1.0f, -127));
    assert_true(kiln_e8m0_to_fp32_half(0) == ldexpf(1.0f, -128));
    assert_int_equal(kiln_e8m0_of_amax(6.0f), 127);  /* 2^2 <= 6 < 2^3: e = 2 - 2 + 127 */
    assert_int_equal(kiln_e8m0_of_amax(0.0f), 0);
    /* nearest doubled E2M1 value at d = 1: 5 lies between 4 and 6, the first wins */
    assert_int_equal(kiln_e2m1_nearest(5.0f, 1.0f), 4);
    assert_int_equal(kiln_e2m1_nearest(-7.0f, 1.0f), 13);
    assert_int_equal(kiln_e2m1_nearest(-0.2f, 1.0f), 0); /* +0, not -0 */
    assert_int_equal(kiln_e2m1_nearest(100.0f, 1.0f), 7);
}

enum { NT = 8, NIN = 512, NOUT = 64 };

static void test_act_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    size_t alen, klen, zlen;
    float *act = qf_load(&alen, VEC "act.f32");
    uint8_t *refk = qf_load(&klen, VEC "act.q8_k"), *ref0 = qf_load(&zlen, VEC "act.q8_0");
    assert_int_equal(alen, sizeof(float) * NT * NIN);
    assert_int_equal(klen, sizeof(kiln_block_q8_k) * NT * NIN / KILN_QK_K);
    assert_int_equal(zlen, sizeof(kiln_block_q8_0) * NT * NIN / KILN_QK);
    kiln_block_q8_k *mk = malloc(klen);
    kiln_block_q8_0 *m0 = malloc(zlen);
    for (int t = 0; t < NT; t++) {
        kiln_act_q8_k(act + t * NIN, mk + t * NIN / KILN_QK_K, NIN);
        kiln_act_q8_0(act + t * NIN, m0 + t * NIN / KILN_QK, NIN);
    }
    const size_t dk = qf_bytes_differ(mk, refk, klen), d0 = qf_bytes_differ(m0, ref0, zlen);
    printf("# %s activations differing from ggml's: Q8_K %zu of %zu bytes, Q8_0 %zu of %zu\n", kiln_simd_name(lvl),
           dk, klen, d0, zlen);
    assert_int_equal(dk + d0, 0);
    free(m0);
    free(mk);
    free(ref0);
    free(refk);
    free(act);
}

/* TQ1_0 / TQ2_0: ggml's vec_dot bits from the reference dot on ggml's
 * activation bytes and from kiln_matmul (the kernel table) at this
 * case's level, one token at a time and all 8 at once. */
static void test_tq_dot_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    size_t alen, qlen;
    float *act = qf_load(&alen, VEC "act.f32");
    uint8_t *aq = qf_load(&qlen, VEC "act.q8_k");
    for (int ti = 0; ti < 2; ti++) {
        char wname[128], dname[64];
        snprintf(wname, sizeof wname, "blk.1.ffn_down.weight.%s.q", TYPES[ti].name);
        snprintf(dname, sizeof dname, "dot.%s.f32", TYPES[ti].name);
        assert_int_equal(qf_dot_case(kiln_simd_name(lvl), VEC, TYPES[ti].type, KILN_Q8_K, wname, dname, act, aq, NT,
                                     NIN, NOUT),
                         0);
    }
    free(aq);
    free(act);
}

/* MXFP4: ggml's vec_dot bits from the reference (qt->dot) on ggml's
 * activations, over 16 blocks and over 15 (the odd block after the
 * pairs); from kiln_matmul at this level on a 60-row matrix (not
 * repacked, so vec_dot order) for 1 and 8 tokens; and from the direct
 * kernel in the vec_dot order. On the full 64 rows kiln_matmul takes the
 * repacked gemv order: equal at every level to qt->dot_gemv. */
static void test_mxfp4_dot_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    size_t alen, qlen, wlen, dlen, olen;
    float *act = qf_load(&alen, VEC "act.f32");
    uint8_t *aq = qf_load(&qlen, VEC "act.q8_0");
    uint8_t *w = qf_load(&wlen, VEC "blk.1.ffn_down.weight.MXFP4.q");
    float *ref = qf_load(&dlen, VEC "dot.MXFP4.f32"), *odd = qf_load(&olen, VEC "dot.MXFP4.n480.f32");
    assert_int_equal(dlen, sizeof(float) * NT * NOUT);
    assert_int_equal(olen, dlen);
    const kiln_qtype *qt = kiln_qtype_get(KILN_MXFP4);
    assert_non_null(qt);
    assert_int_equal(qt->act_type, KILN_Q8_0);
    assert_true(kiln_qtype_repacked(qt, 64) && !kiln_qtype_repacked(qt, 60));
    const size_t wrow = kiln_type_row_bytes(KILN_MXFP4, NIN), arow = kiln_type_row_bytes(KILN_Q8_0, NIN);
    int64_t bad_ref = 0, bad_odd = 0, bad_mm = 0, bad_direct = 0, bad_gemv = 0;
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < NOUT; r++) {
            const float v = qt->dot(NIN, w + r * wrow, aq + t * arow);
            const float o = qt->dot(480, w + r * wrow, aq + t * arow);
            bad_ref += memcmp(&v, &ref[t * NOUT + r], 4) != 0;
            bad_odd += memcmp(&o, &odd[t * NOUT + r], 4) != 0;
        }
    enum { R60 = 60 };
    float *y = malloc(sizeof(float) * NT * NOUT);
    for (int nt = 1; nt <= NT; nt += NT - 1)
        for (int t0 = 0; t0 < NT; t0 += nt) {
            assert_int_equal(kiln_matmul(KILN_MXFP4, w, NIN, R60, act + t0 * NIN, nt, y, KILN_NUM_GGML), 0);
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < R60; r++) bad_mm += memcmp(&y[t * R60 + r], &ref[(t0 + t) * NOUT + r], 4) != 0;
        }
    if (kiln_kdirect(qt, KILN_KORDER_VECDOT, w, NIN, NOUT, aq, NT, y))
        for (int i = 0; i < NT * NOUT; i++) bad_direct += memcmp(&y[i], &ref[i], 4) != 0;
    else
        assert_int_equal(lvl, KILN_SIMD_SCALAR); /* only the reference below AVX2 */
    assert_int_equal(kiln_matmul(KILN_MXFP4, w, NIN, NOUT, act, NT, y, KILN_NUM_GGML), 0);
    kiln_block_q8_0 *mine = malloc(arow * NT);
    for (int t = 0; t < NT; t++) kiln_act_q8_0(act + t * NIN, mine + t * NIN / KILN_QK, NIN);
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < NOUT; r++) {
            const float g = qt->dot_gemv(NIN, w + r * wrow, (const uint8_t *)mine + t * arow);
            bad_gemv += memcmp(&g, &y[t * NOUT + r], 4) != 0;
        }
    printf("# %s MXFP4 dot products differing from ggml's vec_dot: reference %lld, 15 blocks %lld, matmul (60 rows) "
           "%lld, direct %lld (of %d each); repacked matmul vs gemv reference %lld\n",
           kiln_simd_name(lvl), (long long)bad_ref, (long long)bad_odd, (long long)bad_mm, (long long)bad_direct,
           NT * NOUT, (long long)bad_gemv);
    assert_int_equal(bad_ref + bad_odd + bad_mm + bad_direct + bad_gemv, 0);
    free(mine);
    free(y);
    free(odd);
    free(ref);
    free(w);
    free(aq);
    free(act);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_codec_vs_ggml),
        cmocka_unit_test(test_edge_cases_present),
        cmocka_unit_test(test_fp4_helpers),
        SIMD_LEVEL_TESTS(test_act_vs_ggml),
        SIMD_LEVEL_TESTS(test_tq_dot_vs_ggml),
        SIMD_LEVEL_TESTS(test_mxfp4_dot_vs_ggml),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
