/* tests/test_hf_normalize.c - the tokenizer.json normalizer steps of
 * `kiln tokenize --hf-normalize` (tokenizer/hf_normalize.c), one by one
 * and in sequence, on texts whose results the Unicode standard fixes;
 * and the refusals. tests/e2e/hf_normalize.sh checks the whole path
 * against Hugging Face's ids on a real tokenizer. */
#include "shared.h"

#include <stdlib.h>
#include <string.h>

#include "../tokenizer/hf_normalize.h"

/* Normalizes text with a tokenizer.json whose normalizer is `normalizer`. */
static char *run(const char *normalizer, const char *text, size_t len) {
    const char *path = kiln_test_tmp_path("tokenizer.json");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"normalizer\": %s}", normalizer);
    fclose(f);
    kiln_err err = {{0}};
    kiln_hf_normalizer *n = kiln_hf_normalizer_load(path, &err);
    if (!n) fail_msg("%s", err.msg);
    size_t out_len = 0;
    char *out = kiln_hf_normalize(n, text, len, &out_len, &err);
    kiln_hf_normalizer_free(n);
    if (!out) fail_msg("%s", err.msg);
    assert_int_equal(strlen(out), out_len);
    return out;
}

static void expect(const char *normalizer, const char *text, const char *want) {
    char *got = run(normalizer, text, strlen(text));
    if (strcmp(got, want)) fail_msg("%s on '%s': got '%s', want '%s'", normalizer, text, got, want);
    free(got);
}

static void test_unicode_forms(void **state) {
    (void)state;
    /* e + COMBINING ACUTE <-> é; the ﬁ ligature and ² only under K forms */
    expect("{\"type\":\"NFC\"}", "cafe\xcc\x81 \xef\xac\x81", "caf\xc3\xa9 \xef\xac\x81");
    expect("{\"type\":\"NFD\"}", "caf\xc3\xa9", "cafe\xcc\x81");
    expect("{\"type\":\"NFKC\"}", "\xef\xac\x81 x\xc2\xb2", "fi x2");
    expect("{\"type\":\"NFKD\"}", "\xc3\xa9\xc2\xb2", "e\xcc\x81" "2");
}

static void test_lowercase_strip_accents_strip(void **state) {
    (void)state;
    /* full lowercasing: final sigma becomes ς */
    expect("{\"type\":\"Lowercase\"}", "\xce\x9f\xce\x94\xce\x9f\xce\xa3 AB", "\xce\xbf\xce\xb4\xce\xbf\xcf\x82 ab");
    /* marks go, base letters stay: the BERT uncased recipe */
    expect("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFD\"},{\"type\":\"StripAccents\"},"
           "{\"type\":\"Lowercase\"}]}",
           "Cr\xc3\xa8me BR\xc3\x9bL\xc3\x89" "E", "creme brulee");
    expect("{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":false}", " \t x \xe3\x80\x80", "x \xe3\x80\x80");
    expect("{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true}", " \t x \xe3\x80\x80", "x");
    expect("{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true}", "   ", "");
}

static void test_spm_space_steps_are_the_tokenizers(void **state) {
    (void)state;
    /* Llama-2's normalizer: kiln's SPM tokenizer does both steps itself */
    const char *llama2 = "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\xe2\x96\x81\"},"
                         "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}]}";
    expect(llama2, "a b", "a b");
    expect("null", "cafe\xcc\x81", "cafe\xcc\x81");
    char *empty = run("{\"type\":\"NFC\"}", "", 0);
    assert_string_equal(empty, "");
    free(empty);
}

static void refused(const char *json, const char *want) {
    const char *path = kiln_test_tmp_path("bad.json");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(json, f);
    fclose(f);
    kiln_err err = {{0}};
    kiln_hf_normalizer *n = kiln_hf_normalizer_load(path, &err);
    if (n) fail_msg("%s was accepted", json);
    if (!strstr(err.msg, want)) fail_msg("error '%s' lacks '%s'", err.msg, want);
}

static void test_refusals(void **state) {
    (void)state;
    refused("{\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"\\\\s+\"},\"content\":\" \"}}",
            "normalizer: unsupported normalizer step 'Replace'");
    refused("{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},{\"type\":\"Precompiled\"}]}}",
            "normalizer.normalizers[1]: unsupported normalizer step 'Precompiled'");
    refused("{\"normalizer\":{\"type\":\"Sequence\"}}", "Sequence has no \"normalizers\" array");
    refused("{\"normalizer\":{}}", "no \"type\" string");
    refused("{\"model\":{}}", "no \"normalizer\" key");
    refused("{\"normalizer\":", "bad.json");

    kiln_err err = {{0}};
    const char *path = kiln_test_tmp_path("tokenizer.json");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"normalizer\":{\"type\":\"NFC\"}}", f);
    fclose(f);
    kiln_hf_normalizer *n = kiln_hf_normalizer_load(path, &err);
    assert_non_null(n);
    size_t len;
    assert_null(kiln_hf_normalize(n, "ab\xc3(", 4, &len, &err));
    assert_non_null(strstr(err.msg, "offset 2: not valid UTF-8"));
    kiln_hf_normalizer_free(n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unicode_forms),
        cmocka_unit_test(test_lowercase_strip_accents_strip),
        cmocka_unit_test(test_spm_space_steps_are_the_tokenizers),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
