/* tests/test_llama3.c - Llama 3.x "llama3" rope scaling in the converter:
 * the rope_freqs.weight factors of convert/rope.c against the ones llama.cpp's
 * converter computes with torch (tests/fixtures/llama3/rope_freqs.tsv, made
 * by rope_freqs_cases.py there), and where config.json may hold the rope
 * parameters. The end-to-end checks against llama.cpp (convert, quantize,
 * logits, perplexity of a trained Llama-3.2-style model) are in
 * tests/e2e/llama3.sh. */
#include "shared.h"

#include <jansson.h>

#include "../convert/hparams.h"
#include "../convert/rope.h"

#define TABLE "tests/fixtures/llama3/rope_freqs.tsv"

/* The factors cv_rope_freqs gives for `config_text` and head_dim `dim`
 * (NULL when it gives none); *n gets their count. */
static float *factors_of(const char *config_text, int64_t dim, int64_t *n) {
    json_error_t je;
    json_t *config = json_loads(config_text, 0, &je);
    if (!config) fail_msg("bad test JSON: %s", je.text);
    cv_hp hp;
    memset(&hp, 0, sizeof hp);
    hp.head_dim = dim;
    kiln_err err = {{0}};
    float *f = NULL;
    if (cv_rope_freqs(config, &hp, &f, n, &err) < 0) fail_msg("cv_rope_freqs: %s", err.msg);
    json_decref(config);
    return f;
}

static uint32_t bits_of(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

/* Every configuration of the table: bit for bit where torch's powers were
 * correctly rounded (pow_exact 1); otherwise torch's SLEEF pow may be 1 ulp
 * off, which moves a factor of the smooth band by a few ulp at most. */
static void test_torch_table(void **state) {
    size_t len;
    char *text = kiln_test_read_file(TABLE, &len);
    assert_non_null(text);
    int cases = 0, exact_cases = 0, near_cases = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        double base, factor, low, high;
        int dim, old, pow_exact, used = 0;
        if (sscanf(line, "%lf\t%d\t%lf\t%lf\t%lf\t%d\t%d\t%n", &base, &dim, &factor, &low, &high, &old, &pow_exact,
                   &used) != 7)
            fail_msg("bad line in %s: %.60s", TABLE, line);
        char config[512];
        snprintf(config, sizeof config,
                 "{\"rope_theta\": %.17g, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": %.17g, "
                 "\"low_freq_factor\": %.17g, \"high_freq_factor\": %.17g, "
                 "\"original_max_position_embeddings\": %d}}",
                 base, factor, low, high, old);
        int64_t n;
        float *f = factors_of(config, dim, &n);
        assert_non_null(f);
        assert_int_equal(n, dim / 2);
        const char *hex = line + used;
        int differ = 0;
        for (int64_t i = 0; i < n; i++) {
            char *end;
            uint32_t want = (uint32_t)strtoul(hex, &end, 16);
            if (end == hex) fail_msg("%s: too few values for theta %g dim %d", TABLE, base, dim);
            hex = *end == ',' ? end + 1 : end;
            if (bits_of(f[i]) == want) continue;
            differ++;
            float w;
            memcpy(&w, &want, sizeof w);
            if (pow_exact)
                fail_msg("theta %g dim %d factor %g low %g high %g old %d: factor %lld is %.9g, torch %.9g", base, dim,
                         factor, low, high, old, (long long)i, f[i], w);
            if (fabsf(f[i] - w) > 1e-6f * w)
                fail_msg("theta %g dim %d: factor %lld is %.9g, torch %.9g (beyond torch's pow error)", base, dim,
                         (long long)i, f[i], w);
        }
        cases++;
        if (pow_exact) exact_cases++;
        else if (differ) near_cases++;
        free(f);
    }
    free(text);
    assert_int_equal(cases, 48);
    assert_true(exact_cases >= 36); /* the table's pow_exact rows, checked bit for bit */
    print_message("# %d configurations, %d bit-exact by construction, %d within torch's pow error\n", cases,
                  exact_cases, near_cases);
}

/* original_max_position_embeddings counts from rope_scaling first, then
 * from the top level (convert_hf_to_gguf mirrors it in when absent): the
 * same factors as the table's old-context-2048 row either way. */
static void test_original_context_placement(void **state) {
    const char *inside = "{\"rope_theta\": 500000.0, \"original_max_position_embeddings\": 8192, "
                         "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                         "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 2048}}";
    const char *top = "{\"rope_theta\": 500000.0, \"original_max_position_embeddings\": 2048, "
                      "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                      "\"high_freq_factor\": 4.0}}";
    const char *neither = "{\"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, "
                          "\"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0}}";
    int64_t n1, n2, n3;
    float *a = factors_of(inside, 64, &n1), *b = factors_of(top, 64, &n2), *c = factors_of(neither, 64, &n3);
    assert_int_equal(n1, 32);
    assert_int_equal(n2, 32);
    assert_int_equal(n3, 32);
    assert_memory_equal(a, b, 32 * sizeof *a);
    /* with context 2048 the band starts 2 pairs earlier than with 8192 */
    assert_true(a[12] != 1.0f);
    assert_true(c[12] == 1.0f);
    assert_true(memcmp(a, c, 32 * sizeof *a) != 0);
    free(a);
    free(b);
    free(c);
}

/* Other rope types give no tensor; "Llama3" is matched without case, and
 * transformers 5's "rope_parameters" is read like "rope_scaling". */
static void test_which_configs(void **state) {
    int64_t n;
    assert_null(factors_of("{\"rope_theta\": 10000.0, \"rope_scaling\": null}", 64, &n));
    assert_int_equal(n, 0);
    assert_null(factors_of("{\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0}}", 64, &n));
    assert_null(factors_of("{\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 2.0, "
                           "\"original_max_position_embeddings\": 4096}}", 64, &n));
    float *a = factors_of("{\"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": \"Llama3\"}}", 64, &n);
    assert_non_null(a);
    assert_int_equal(n, 32);
    float *b = factors_of("{\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, "
                          "\"factor\": 8.0}}", 64, &n);
    assert_non_null(b);
    /* defaults: factor 8, low 1, high 4, context 8192 */
    assert_memory_equal(a, b, 32 * sizeof *a);
    assert_true(a[0] == 1.0f && a[31] == 8.0f);
    free(a);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torch_table),
        cmocka_unit_test(test_original_context_placement),
        cmocka_unit_test(test_which_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
