/* tests/test_gptoss.c - gpt-oss's own pieces against their definitions:
 * the HF MXFP4 layout (convert/mxfp4_hf.c) against what the blocks mean
 * (E2M1 code times 2^(e - 127), element 2i in the low nibble of byte i),
 * the gate_up split, the config's quant_method, and the runtime's sink
 * softmax, swiglu_oai clamp and YaRN setup (runtime/gptoss.c, yarn.c)
 * against their formulas in double. The checks against llama.cpp's own
 * files (convert, logits, perplexity, imatrix, quantize) are in
 * tests/e2e/gptoss.sh. */
#include "shared.h"

#include <jansson.h>

#include "../codec/codec.h"
#include "../core/types.h"
#include "../convert/f8.h"
#include "../convert/mxfp4_hf.h"
#include "../runtime/forward_impl.h"

/* E2M1: the magnitudes of codes 0..7; bit 3 is the sign. */
static const double E2M1[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

static double hf_value(const uint8_t hf[16], uint8_t e, int k) {
    int code = (hf[k / 2] >> (4 * (k % 2))) & 15;
    double v = E2M1[code & 7] * ldexp(1.0, (int)e - 127);
    return code & 8 ? -v : v;
}

/* Each code lands where ggml's block keeps it: byte j holds elements j
 * (low nibble) and j + 16 (high), the exponent byte first. */
static void test_repack_layout(void **state) {
    (void)state;
    uint8_t hf[16], out[17];
    for (int i = 0; i < 16; i++) hf[i] = (uint8_t)((2 * i % 16) | ((2 * i + 1) % 16) << 4); /* element k has code k % 16 */
    cv_mxfp4_repack_block(hf, 121, out);
    assert_int_equal(out[0], 121);
    for (int j = 0; j < 16; j++) {
        assert_int_equal(out[1 + j] & 15, j % 16);
        assert_int_equal(out[1 + j] >> 4, (j + 16) % 16);
    }
}

/* Random blocks: ggml's dequantization of the repacked block gives exactly
 * the values the HF block means. */
static void test_repack_values(void **state) {
    (void)state;
    uint64_t s = 13;
    for (int rep = 0; rep < 200; rep++) {
        uint8_t hf[16], out[17];
        for (int i = 0; i < 16; i++) hf[i] = (uint8_t)kiln_test_xorshift64(&s);
        uint8_t e = (uint8_t)(100 + kiln_test_xorshift64(&s) % 50);
        cv_mxfp4_repack_block(hf, e, out);
        float got[32];
        kiln_err err = {{0}};
        assert_int_equal(kiln_dequantize(KILN_MXFP4, out, got, 32, &err), 0);
        for (int k = 0; k < 32; k++) assert_true((double)got[k] == hf_value(hf, e, k));
    }
}

/* Rows of a fused gate_up [2 rows x 1 block] x 3: stride 2 takes the even
 * (gate) or odd (up) rows; the bias split takes every other value. */
static void test_gate_up_split(void **state) {
    (void)state;
    uint8_t blocks[6 * 16], scales[6], out[3 * 17];
    for (int r = 0; r < 6; r++) {
        memset(blocks + r * 16, r, 16);
        scales[r] = (uint8_t)(120 + r);
    }
    for (int parity = 0; parity < 2; parity++) {
        cv_mxfp4_repack_rows(blocks, scales, 1, 0, 3, 2, parity, out);
        for (int q = 0; q < 3; q++) assert_int_equal(out[q * 17], 120 + 2 * q + parity);
    }
    cv_mxfp4_repack_rows(blocks, scales, 1, 1, 2, 1, 0, out); /* rows 1, 2 as they are */
    assert_int_equal(out[0], 121);
    assert_int_equal(out[17], 122);
    const float bias[6] = {0, 10, 1, 11, 2, 12};
    float half[3];
    cv_deinterleave((const uint8_t *)bias, (uint8_t *)half, 3, sizeof(float), 1);
    for (int i = 0; i < 3; i++) assert_true(half[i] == 10.0f + (float)i);
}

/* quant_method mxfp4 is an MXFP4 checkpoint, not an error (kiln refused
 * it as "only float and fp8" before gpt-oss). */
static void test_quant_method(void **state) {
    (void)state;
    json_t *c = json_loads("{\"quantization_config\": {\"quant_method\": \"mxfp4\"}}", 0, NULL);
    bool fp8 = true;
    int64_t block[2];
    kiln_err err = {{0}};
    assert_int_equal(cv_f8_config(c, &fp8, block, &err), 0);
    assert_false(fp8);
    assert_true(cv_mxfp4_checkpoint(c));
    json_decref(c);
    c = json_loads("{\"quantization_config\": {\"quant_method\": \"awq\"}}", 0, NULL);
    assert_int_equal(cv_f8_config(c, &fp8, block, &err), -1);
    assert_false(cv_mxfp4_checkpoint(c));
    json_decref(c);
}

/* The sink takes its share of the softmax and nothing else; a sink of
 * -INFINITY is the plain softmax. */
static void test_softmax_sink(void **state) {
    (void)state;
    const float raw[5] = {0.5f, -1.0f, 2.0f, 0.0f, -INFINITY}, scale = 0.7f, sink = 1.3f;
    float x[5], plain[5];
    for (kiln_numeric_mode mode = KILN_NUM_GGML; mode <= KILN_NUM_EXACT; mode++) {
        memcpy(x, raw, sizeof x);
        kiln_softmax_sink(x, 5, scale, sink, mode);
        double denom = exp(sink);
        for (int i = 0; i < 4; i++) denom += exp((double)raw[i] * scale);
        for (int i = 0; i < 4; i++) assert_true(fabs(x[i] - exp((double)raw[i] * scale) / denom) < 1e-6);
        assert_true(x[4] == 0.0f);
        memcpy(x, raw, sizeof x);
        memcpy(plain, raw, sizeof plain);
        kiln_softmax_sink(x, 5, scale, -INFINITY, mode);
        kiln_softmax(plain, 5, scale, mode);
        assert_memory_equal(x, plain, sizeof x);
    }
}

/* swiglu_oai: min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1). */
static void test_swiglu_oai(void **state) {
    (void)state;
    const float g[5] = {-3.0f, 0.0f, 1.5f, 6.9f, 40.0f}, u[5] = {-20.0f, 0.5f, -0.25f, 9.0f, 3.0f};
    float y[5];
    for (kiln_numeric_mode mode = KILN_NUM_GGML; mode <= KILN_NUM_EXACT; mode++) {
        kiln_swiglu_oai(g, u, y, 5, mode);
        for (int i = 0; i < 5; i++) {
            double x = fmin(g[i], 7.0), v = fmin(fmax(u[i], -7.0), 7.0);
            double want = x / (1.0 + exp(-1.702 * x)) * (v + 1.0);
            assert_true(fabs(y[i] - want) <= 1e-5 * fmax(1.0, fabs(want)));
        }
    }
}

/* YaRN as llama.cpp sets it up for gpt-oss (factor 32, 4096 original
 * positions, base 150000, 64 rotated dims, beta 32 and 1): correction
 * dims floor(8.09) = 8 and ceil(17.4) = 18, the attention factor 1 up to
 * rounding, and the angles of dims below 8 extrapolated (unscaled), above
 * 18 interpolated (divided by 32), all times 1 + 0.1 ln 32. */
static void test_yarn(void **state) {
    (void)state;
    kiln_hparams hp = {.rope_yarn = true, .yarn_beta_fast = 32.0f, .yarn_beta_slow = 1.0f, .n_ctx_orig = 4096,
                       .rope_attn_factor = 1.0f};
    kiln_rope r = {.n_rot = 64, .neox = true, .freq_base = 150000.0f, .freq_scale = 1.0f / 32.0f,
                   .attn_factor = 1.0f, .mode = KILN_NUM_GGML};
    kiln_yarn_setup(&hp, &r);
    assert_true(r.ext_factor == 1.0f);
    assert_true(r.corr_dims[0] == 8.0f && r.corr_dims[1] == 18.0f);
    assert_true(fabsf(r.attn_factor - 1.0f) < 1e-6f);
    const double mscale = r.attn_factor * (1.0 + 0.1 * log(32.0));
    for (kiln_numeric_mode mode = KILN_NUM_GGML; mode <= KILN_NUM_EXACT; mode++) {
        r.mode = mode;
        float cs[64];
        kiln_rope_angles(&r, 100, cs);
        for (int i = 0; i < 64; i += 2) {
            double theta = 100.0 * pow(150000.0, -(double)i / 64.0);
            if (i / 2 >= 18) theta /= 32.0;
            if (i / 2 >= 8 && i / 2 < 18) continue; /* the ramp */
            assert_true(fabs(cs[i] - cos(theta) * mscale) < 1e-4);
            assert_true(fabs(cs[i + 1] - sin(theta) * mscale) < 1e-4);
        }
    }
    kiln_hparams none = {0};
    kiln_rope plain = {.n_rot = 64, .freq_base = 10000.0f, .freq_scale = 1.0f, .attn_factor = 1.0f};
    kiln_yarn_setup(&none, &plain);
    assert_true(plain.ext_factor == 0.0f && plain.attn_factor == 1.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repack_layout), cmocka_unit_test(test_repack_values),
        cmocka_unit_test(test_gate_up_split), cmocka_unit_test(test_quant_method),
        cmocka_unit_test(test_softmax_sink),  cmocka_unit_test(test_swiglu_oai),
        cmocka_unit_test(test_yarn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
