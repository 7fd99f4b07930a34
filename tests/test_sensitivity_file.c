/* tests/test_sensitivity_file.c - quantize/sensitivity_file.c: a written
 * file reads back equal (dkld to 10 significant digits), each kind of
 * malformed file fails with one line naming the file, the field and the
 * line, and a file is matched only against the model it was scanned from. */
#include "shared.h"

#include "../core/gguf.h"
#include "../golden/fingerprint.h"
#include "../quantize/sensitivity_file.h"

static kiln_sens_row ROWS[] = {
    {"blk.0.attn_q.weight", KILN_Q2_K, 86016, 1.234567891e-04},
    {"blk.0.attn_q.weight", KILN_Q4_K, 147456, 3.0e-06},
    {"blk.0.ffn_down_exps.weight", KILN_IQ2_XXS, 1081344, 0.1},
    {"output.weight", KILN_Q6_K, 1, 0.0},
};

static kiln_sensitivity sample(void) {
    kiln_sensitivity s = {
        .arch = "llama", .layout_xxh64 = "0123456789abcdef", .n_tensors = 75,
        .text = "calib.txt", .n_tokens = 512, .imatrix = "-",
        .n_rows = sizeof ROWS / sizeof *ROWS, .rows = ROWS,
    };
    return s;
}

static void round_trip(void **state) {
    (void)state;
    kiln_sensitivity s = sample(), r;
    kiln_err err = {{0}};
    const char *path = kiln_test_tmp_path("rt.sens");
    assert_int_equal(kiln_sensitivity_write(path, &s, &err), 0);
    struct stat st;
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_not_equal(stat(tmp, &st), 0); /* renamed, nothing left behind */
    if (kiln_sensitivity_read(path, &r, &err)) fail_msg("%s", err.msg);
    assert_string_equal(r.arch, "llama");
    assert_string_equal(r.layout_xxh64, "0123456789abcdef");
    assert_int_equal(r.n_tensors, 75);
    assert_string_equal(r.text, "calib.txt");
    assert_int_equal(r.n_tokens, 512);
    assert_string_equal(r.imatrix, "-");
    assert_int_equal(r.n_rows, s.n_rows);
    for (size_t i = 0; i < s.n_rows; i++) {
        assert_string_equal(r.rows[i].tensor, ROWS[i].tensor);
        assert_int_equal(r.rows[i].type, ROWS[i].type);
        assert_int_equal(r.rows[i].bytes, ROWS[i].bytes);
        assert_true(fabs(r.rows[i].dkld - ROWS[i].dkld) <= 1e-9 * fabs(ROWS[i].dkld));
    }
    /* writing what was read gives the same bytes */
    const char *again = kiln_test_tmp_path("rt2.sens");
    assert_int_equal(kiln_sensitivity_write(again, &r, &err), 0);
    size_t la, lb;
    char *a = kiln_read_text(path, &la, &err), *b = kiln_read_text(again, &lb, &err);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    assert_non_null(strstr(a, "blk.0.attn_q.weight\tQ2_K\t86016\t1.234567891e-04\n"));
    free(a);
    free(b);
    kiln_sensitivity_free(&r);
    assert_int_equal(r.n_rows, 0);
    assert_null(r.rows);
}

static void write_refuses_tabs(void **state) {
    (void)state;
    kiln_sensitivity s = sample();
    kiln_err err = {{0}};
    snprintf(s.text, sizeof s.text, "a\tb.txt");
    const char *path = kiln_test_tmp_path("tab.sens");
    assert_int_equal(kiln_sensitivity_write(path, &s, &err), -1);
    assert_non_null(strstr(err.msg, "text"));
    struct stat st;
    assert_int_not_equal(stat(path, &st), 0);
}

#define HEAD "# kiln-sensitivity/1\n"                                              \
             "# arch\tllama\tlayout_xxh64\t0123456789abcdef\tn_tensors\t75\n"      \
             "# text\tcalib.txt\tn_tokens\t512\timatrix\t-\n"
#define COLS "tensor\ttype\tbytes\tdkld\n"
#define ROW5 "blk.0.attn_q.weight\tQ2_K\t86016\t1.0e-04\n"

/* Each malformed file and the text its error must hold. */
static const struct {
    const char *name, *text, *expect;
} BAD[] = {
    {"magic", "# kiln-sensitivity/2\n", "magic at line 1"},
    {"empty", "", "magic at line 1"},
    {"no_model_line", "# kiln-sensitivity/1\n", "header at line 2"},
    {"model_line", "# kiln-sensitivity/1\n# arch\tllama\n", "header at line 2"},
    {"layout", "# kiln-sensitivity/1\n# arch\tllama\tlayout_xxh64\t0123\tn_tensors\t75\n",
     "layout_xxh64 at line 2"},
    {"layout_upper", "# kiln-sensitivity/1\n# arch\tllama\tlayout_xxh64\t0123456789ABCDEF\tn_tensors\t75\n",
     "layout_xxh64 at line 2"},
    {"n_tensors", "# kiln-sensitivity/1\n# arch\tllama\tlayout_xxh64\t0123456789abcdef\tn_tensors\tx\n",
     "n_tensors at line 2"},
    {"empty_arch", "# kiln-sensitivity/1\n# arch\t\tlayout_xxh64\t0123456789abcdef\tn_tensors\t7\n",
     "arch at line 2"},
    {"calib_line", "# kiln-sensitivity/1\n# arch\tllama\tlayout_xxh64\t0123456789abcdef\tn_tensors\t75\n"
                   "# text\tc.txt\n", "header at line 3"},
    {"n_tokens", "# kiln-sensitivity/1\n# arch\tllama\tlayout_xxh64\t0123456789abcdef\tn_tensors\t75\n"
                 "# text\tc.txt\tn_tokens\t-5\timatrix\t-\n", "n_tokens at line 3"},
    {"no_columns", HEAD, "columns at line 4"},
    {"columns", HEAD "tensor\ttype\tbytes\n", "columns at line 4"},
    {"no_rows", HEAD COLS, "row at line 5: no rows"},
    {"fields", HEAD COLS ROW5 "blk.1.attn_q.weight\tQ2_K\t86016\n", "row at line 6"},
    {"extra_field", HEAD COLS "blk.1.attn_q.weight\tQ2_K\t86016\t1\tx\n", "row at line 5"},
    {"tensor", HEAD COLS "\tQ2_K\t86016\t1\n", "tensor at line 5"},
    {"type", HEAD COLS ROW5 "blk.1.attn_q.weight\tQ9_K\t86016\t1\n", "type at line 6"},
    {"bytes", HEAD COLS "blk.1.attn_q.weight\tQ2_K\t12x\t1\n", "bytes at line 5"},
    {"bytes_neg", HEAD COLS "blk.1.attn_q.weight\tQ2_K\t-1\t1\n", "bytes at line 5"},
    {"bytes_zero", HEAD COLS "blk.1.attn_q.weight\tQ2_K\t0\t1\n", "bytes at line 5"},
    {"dkld", HEAD COLS "blk.1.attn_q.weight\tQ2_K\t1\tnan\n", "dkld at line 5"},
    {"dkld_text", HEAD COLS "blk.1.attn_q.weight\tQ2_K\t1\t1e-3x\n", "dkld at line 5"},
    {"dkld_empty", HEAD COLS "blk.1.attn_q.weight\tQ2_K\t1\t\n", "dkld at line 5"},
    {"blank_row", HEAD COLS ROW5 "\n" ROW5, "row at line 6"},
    {"duplicate", HEAD COLS ROW5 "blk.0.attn_q.weight\tQ4_K\t1\t1\n" ROW5,
     "row at line 7: blk.0.attn_q.weight Q2_K already given at line 5"},
};

static void malformed(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        char name[64];
        snprintf(name, sizeof name, "bad_%s.sens", BAD[i].name);
        const char *path = kiln_test_tmp_path(name);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        fputs(BAD[i].text, f);
        fclose(f);
        kiln_sensitivity s;
        kiln_err err = {{0}};
        if (kiln_sensitivity_read(path, &s, &err) != -1) fail_msg("%s: read succeeded", BAD[i].name);
        if (!strstr(err.msg, name) || !strstr(err.msg, BAD[i].expect))
            fail_msg("%s: error '%s' lacks '%s'", BAD[i].name, err.msg, BAD[i].expect);
        assert_null(strchr(err.msg, '\n'));
        kiln_sensitivity_free(&s);
    }
    kiln_sensitivity s;
    kiln_err err = {{0}};
    assert_int_equal(kiln_sensitivity_read(kiln_test_tmp_path("missing.sens"), &s, &err), -1);
    assert_non_null(strstr(err.msg, "missing.sens"));
    kiln_sensitivity_free(&s);
}

/* CRLF line ends (a file edited on Windows) read the same. */
static void crlf(void **state) {
    (void)state;
    const char *path = kiln_test_tmp_path("crlf.sens");
    FILE *f = fopen(path, "wb");
    fputs("# kiln-sensitivity/1\r\n# arch\tllama\tlayout_xxh64\t0123456789abcdef\tn_tensors\t75\r\n"
          "# text\tcalib.txt\tn_tokens\t512\timatrix\t-\r\ntensor\ttype\tbytes\tdkld\r\n"
          "a\tQ4_K\t10\t2.5e-01\r\n", f);
    fclose(f);
    kiln_sensitivity s;
    kiln_err err = {{0}};
    if (kiln_sensitivity_read(path, &s, &err)) fail_msg("%s", err.msg);
    assert_int_equal(s.n_rows, 1);
    assert_true(s.rows[0].dkld == 0.25);
    kiln_sensitivity_free(&s);
}

static void matches_model(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    kiln_err err = {{0}};
    kiln_gguf *g = kiln_gguf_open(kiln_shared_path("golden/gguf/llama-f32.gguf"), &err);
    if (!g) fail_msg("%s", err.msg);
    kiln_gguf *q = kiln_gguf_open(kiln_shared_path("golden/gguf/qwen2-f32.gguf"), &err);
    if (!q) fail_msg("%s", err.msg);
    json_t *fp = kiln_fingerprint(g, &err);
    assert_non_null(fp);
    kiln_sensitivity s = sample();
    snprintf(s.arch, sizeof s.arch, "%s", json_string_value(json_object_get(fp, "arch")));
    snprintf(s.layout_xxh64, sizeof s.layout_xxh64, "%s",
             json_string_value(json_object_get(fp, "layout_xxh64")));
    s.n_tensors = (int64_t)g->n_tensors;
    json_decref(fp);
    assert_int_equal(kiln_sensitivity_matches(&s, "x.sens", g, &err), 0);
    assert_int_equal(kiln_sensitivity_matches(&s, "x.sens", q, &err), -1);
    assert_non_null(strstr(err.msg, "x.sens: sensitivity file is for another model"));
    s.layout_xxh64[0] = s.layout_xxh64[0] == '0' ? '1' : '0';
    assert_int_equal(kiln_sensitivity_matches(&s, "x.sens", g, &err), -1);
    assert_non_null(strstr(err.msg, "another model"));
    kiln_gguf_close(g);
    kiln_gguf_close(q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip), cmocka_unit_test(write_refuses_tabs),
        cmocka_unit_test(malformed),  cmocka_unit_test(crlf),
        cmocka_unit_test(matches_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
