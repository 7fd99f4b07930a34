/* tests/test_phi3.c - Phi-3's converter table (convert/arch_phi.c): which
 * configs give LongRoPE factor tensors, in which order and with which
 * values, the rotary dimension count behind their length (a partial
 * rotary factor), and the configs llama.cpp's converter rejects. The
 * end-to-end checks against llama.cpp (convert, quantize, logits,
 * perplexity, imatrix of a trained tiny Phi-3, plain and LongRoPE) are in
 * tests/e2e/phi3.sh. */
#include "shared.h"

#include <jansson.h>

#include "../convert/arch.h"
#include "../convert/hparams.h"

/* hidden 256, 4 heads: 64 rotary dims, or 48 with partial_rotary_factor 0.75 */
#define BASE "\"architectures\": [\"Phi3ForCausalLM\"], \"hidden_size\": 256, \"num_attention_heads\": 4, " \
             "\"num_key_value_heads\": 2, \"num_hidden_layers\": 2, \"intermediate_size\": 256, "          \
             "\"rope_theta\": 10000.0, \"max_position_embeddings\": 4096"

/* Runs the table's extra_tensors on `config_text`; returns their count
 * (or -1, message in err) and fills g. */
static int generated(const char *config_text, cv_gen_tensor *g, kiln_err *err) {
    const cv_arch *a = cv_arch_find("Phi3ForCausalLM");
    assert_non_null(a);
    assert_non_null(a->extra_tensors);
    json_error_t je;
    json_t *config = json_loads(config_text, 0, &je);
    if (!config) fail_msg("bad test JSON: %s", je.text);
    cv_hp hp;
    if (cv_hp_load(a, config, &hp, err) < 0) fail_msg("cv_hp_load: %s", err->msg);
    int n = a->extra_tensors(config, &hp, g, err);
    json_decref(config);
    return n;
}

/* A list "[1.0, 1.5, ...]" of n factors start + i * step. */
static void factor_list(char *buf, size_t cap, int n, double start, double step) {
    size_t off = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n; i++) off += (size_t)snprintf(buf + off, cap - off, "%s%.9g", i ? ", " : "", start + i * step);
    snprintf(buf + off, cap - off, "]");
}

static void longrope_config(char *buf, size_t cap, const char *type, int n_long, int n_short, const char *extra) {
    char lf[1024], sf[1024];
    factor_list(lf, sizeof lf, n_long, 1.0, 0.125);
    factor_list(sf, sizeof sf, n_short, 1.0, 0.01);
    snprintf(buf, cap,
             "{" BASE ", \"original_max_position_embeddings\": 128, %s"
             "\"rope_scaling\": {\"type\": \"%s\", \"long_factor\": %s, \"short_factor\": %s}}",
             extra, type, lf, sf);
}

/* LongRoPE: long then short, n_rot / 2 float32 values each, as llama.cpp's
 * generate_extra_tensors yields them; "su" is the older name. */
static void test_longrope_factors(void **state) {
    (void)state;
    static char config[4096];
    const char *types[] = {"longrope", "su"};
    for (size_t t = 0; t < 2; t++) {
        longrope_config(config, sizeof config, types[t], 24, 24, "\"partial_rotary_factor\": 0.75, ");
        cv_gen_tensor g[CV_MAX_GEN] = {{0}};
        kiln_err err = {{0}};
        int n = generated(config, g, &err);
        if (n != 2) fail_msg("%s: %d tensors (%s)", types[t], n, err.msg);
        assert_string_equal(g[0].name, "rope_factors_long.weight");
        assert_string_equal(g[1].name, "rope_factors_short.weight");
        assert_int_equal(g[0].n, 24);
        assert_int_equal(g[1].n, 24);
        for (int i = 0; i < 24; i++) {
            assert_true(g[0].data[i] == (float)(1.0 + i * 0.125));
            assert_true(g[1].data[i] == (float)(1.0 + i * 0.01));
        }
        free(g[0].data);
        free(g[1].data);
    }
}

/* Without long factors (Phi-3-mini-4k: rope_scaling null) nothing is
 * generated. */
static void test_no_longrope(void **state) {
    (void)state;
    cv_gen_tensor g[CV_MAX_GEN] = {{0}};
    kiln_err err = {{0}};
    assert_int_equal(generated("{" BASE ", \"original_max_position_embeddings\": 4096, \"rope_scaling\": null}", g, &err),
                     0);
    assert_null(g[0].data);
}

/* What llama.cpp's converter refuses is refused, with the reason. */
static void test_rejected(void **state) {
    (void)state;
    static char config[4096];
    struct {
        const char *type;
        int n_long, n_short;
        const char *extra, *why;
    } cases[] = {
        /* 64 rotary dims without the partial factor: 32 factors needed */
        {"longrope", 24, 24, "", "must both have 32 entries"},
        {"longrope", 24, 23, "\"partial_rotary_factor\": 0.75, ", "must both have 24 entries"},
        {"dynamic", 24, 24, "\"partial_rotary_factor\": 0.75, ", "'dynamic' is not supported by phi3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        longrope_config(config, sizeof config, cases[i].type, cases[i].n_long, cases[i].n_short, cases[i].extra);
        cv_gen_tensor g[CV_MAX_GEN] = {{0}};
        kiln_err err = {{0}};
        assert_int_equal(generated(config, g, &err), -1);
        if (!strstr(err.msg, cases[i].why)) fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, cases[i].why);
        assert_null(g[0].data);
    }
    cv_gen_tensor g[CV_MAX_GEN] = {{0}};
    kiln_err err = {{0}};
    assert_int_equal(generated("{" BASE "}", g, &err), -1);
    assert_non_null(strstr(err.msg, "original_max_position_embeddings"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_longrope_factors),
        cmocka_unit_test(test_no_longrope),
        cmocka_unit_test(test_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
