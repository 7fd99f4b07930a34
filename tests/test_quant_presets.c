/* tests/test_quant_presets.c - every llama-quantize preset chooses
 * llama-quantize's per-tensor types, on every fixture architecture.
 *
 * Ground truth is tests/fixtures/quant_presets/ (make_types.sh there):
 * presets.tsv is llama-quantize's own preset list (names, ftype numbers,
 * aliases) and types.tsv.zst the type it gave every tensor of every model
 * in models.tsv, for every preset, with and without an importance matrix,
 * or why it refused. This suite plans the same models with
 * kiln_quantize_plan() - the planner `kiln quantize` runs, without any
 * codec, so presets whose codecs kiln lacks are checked too - and compares
 * tensor by tensor. The models: the f32 GGUFs in ../shared (skipped
 * without it, failed under CI), the Llama-3 fixture archive converted to
 * f32, and
 * `kiln testmodel` models written here from models.tsv's options. */
#include <ftw.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "shared.h"

#include "../codec/codec.h"
#include "../convert/convert.h"
#include "../core/types.h"
#include "../quantize/policy.h"
#include "../quantize/quantize_model.h"
#include "../testmodel/testmodel.h"

#include <zstd.h>

#define FIX "tests/fixtures/quant_presets/"

/* ---- the golden table ------------------------------------------------------ */

typedef struct golden_row {
    const char *model, *preset, *imatrix, *tensor, *type; /* type: "Q4_K" or "FAIL: why" */
} golden_row;

typedef struct golden {
    char *text;
    golden_row *rows;
    size_t n;
} golden;

/* Splits a line of n tab-separated fields in place; false when it has fewer. */
static bool split_tabs(char *line, char **f, int n) {
    for (int i = 0; i < n; i++) {
        f[i] = line;
        char *tab = strchr(line, '\t');
        if (i == n - 1) return true;
        if (!tab) return false;
        *tab = 0;
        line = tab + 1;
    }
    return true;
}

static void golden_load(golden *g) {
    size_t zn;
    void *z = kiln_test_read_file(FIX "types.tsv.zst", &zn);
    if (!z) fail_msg("cannot read " FIX "types.tsv.zst");
    unsigned long long n = ZSTD_getFrameContentSize(z, zn);
    assert_true(n != ZSTD_CONTENTSIZE_ERROR && n != ZSTD_CONTENTSIZE_UNKNOWN);
    g->text = malloc(n + 1);
    assert_non_null(g->text);
    size_t got = ZSTD_decompress(g->text, n, z, zn);
    assert_false(ZSTD_isError(got));
    assert_int_equal(got, n);
    g->text[n] = 0;
    free(z);
    size_t cap = 1;
    for (size_t i = 0; i < n; i++) cap += g->text[i] == '\n';
    g->rows = calloc(cap, sizeof *g->rows);
    assert_non_null(g->rows);
    g->n = 0;
    for (char *line = g->text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        char *f[5];
        if (!split_tabs(line, f, 5)) fail_msg("types.tsv: bad line '%s'", line);
        g->rows[g->n++] = (golden_row){f[0], f[1], f[2], f[3], f[4]};
    }
}

/* The rows of one model/preset/imatrix run, which make_types.sh writes
 * together; *n = 0 when there are none. */
static const golden_row *golden_find(const golden *g, const char *model, const char *preset, bool imatrix,
                                     size_t *n) {
    const char *imx = imatrix ? "yes" : "no";
    *n = 0;
    for (size_t i = 0; i < g->n; i++) {
        const golden_row *r = &g->rows[i];
        if (strcmp(r->model, model) || strcmp(r->preset, preset) || strcmp(r->imatrix, imx)) continue;
        while (i + *n < g->n && !strcmp(g->rows[i + *n].model, model) && !strcmp(g->rows[i + *n].preset, preset) &&
               !strcmp(g->rows[i + *n].imatrix, imx))
            (*n)++;
        return r;
    }
    return NULL;
}

/* ---- the models -------------------------------------------------------------- */

/* Writes the `kiln testmodel` model that OPTIONS describe (the subset of
 * the command's options models.tsv uses) into dir. */
static void write_testmodel(const char *options, const char *dir) {
    char buf[512], *save = NULL;
    snprintf(buf, sizeof buf, "%s", options);
    kiln_tm_config c;
    kiln_err err = {{0}};
    char *arch = strstr(buf, "--arch ");
    assert_non_null(arch);
    char name[32];
    assert_int_equal(sscanf(arch, "--arch %31s", name), 1);
    kiln_tm_arch a;
    assert_int_equal(kiln_tm_arch_parse(name, &a), 0);
    if (kiln_tm_defaults(&c, a, NULL, &err) < 0) fail_msg("%s", err.msg);
    for (char *opt = strtok_r(buf, " ", &save); opt; opt = strtok_r(NULL, " ", &save)) {
        char *val = strtok_r(NULL, " ", &save);
        if (!val) fail_msg("models.tsv: %s has no value", opt);
        uint32_t v = (uint32_t)strtoul(val, NULL, 10);
        if (!strcmp(opt, "--arch")) continue;
        else if (!strcmp(opt, "--layers")) c.layers = v;
        else if (!strcmp(opt, "--heads")) c.heads = v;
        else if (!strcmp(opt, "--kv-heads")) c.kv_heads = v;
        else if (!strcmp(opt, "--ffn")) c.ffn = v;
        else if (!strcmp(opt, "--hidden")) c.hidden = v;
        else if (!strcmp(opt, "--experts")) c.experts = v;
        else if (!strcmp(opt, "--dtype") && !strcmp(val, "f32")) c.dtype = KILN_ST_F32;
        else fail_msg("models.tsv: option %s %s is not known to this test", opt, val);
    }
    kiln_tm_opts o = {.force = true};
    if (kiln_tm_check(&c, &err) < 0 || kiln_tm_write(&c, dir, &o, NULL, &err) < 0) fail_msg("%s", err.msg);
}

/* The input to plan for a models.tsv line, or NULL when it needs ../shared
 * and that is absent (under CI: a failure). */
static const char *model_input(const char *name, const char *source, const char *what, char *path, size_t cap) {
    if (!strcmp(source, "shared")) {
        if (!kiln_shared()) {
            const char *ci = getenv("CI");
            if (ci && !strcmp(ci, "true")) fail_msg("../shared is missing (set KILN_SHARED); required in CI");
            return NULL;
        }
        snprintf(path, cap, "%s", kiln_shared_path("golden/gguf/"));
        strncat(path, what, cap - strlen(path) - 1);
    } else if (!strcmp(source, "fixture")) {
        /* converted to f32 as make_types.sh does (COPY keeps the input's types) */
        char src[4096];
        snprintf(src, sizeof src, "tests/fixtures/%s", what);
        snprintf(path, cap, "%s.gguf", kiln_test_tmp_path(name));
        kiln_convert_opts co = {.outtype = KILN_OUT_F32};
        kiln_write_opts wo = {.force = true};
        kiln_err err = {{0}};
        if (kiln_convert(src, path, &co, &wo, NULL, NULL, &err) < 0) fail_msg("%s", err.msg);
    } else if (!strcmp(source, "testmodel")) {
        snprintf(path, cap, "%s", kiln_test_tmp_path(name));
        write_testmodel(what, path);
    } else {
        fail_msg("models.tsv: unknown source '%s'", source);
    }
    return path;
}

/* ---- comparison ---------------------------------------------------------------- */

static bool plan_needs_imatrix(const kiln_quant_report *r) {
    for (uint64_t i = 0; i < r->n_tensors; i++)
        if (r->tensors[i].plan.needs_imatrix) return true;
    return false;
}

static bool plan_unfit(const kiln_quant_report *r) {
    for (uint64_t i = 0; i < r->n_tensors; i++)
        if (r->tensors[i].plan.unfit) return true;
    return false;
}

/* Compares kiln's plan of `in` as `preset` with llama-quantize's rows;
 * prints each difference and returns how many there were. */
static int compare_run(const golden *g, const char *model, const char *in, const kiln_preset *preset, bool imatrix,
                       kiln_imatrix *dummy) {
    size_t n;
    const golden_row *rows = golden_find(g, model, preset->name, imatrix, &n);
    if (!rows) {
        print_message("# %s %s imatrix=%d: no llama-quantize row\n", model, preset->name, imatrix);
        return 1;
    }
    kiln_quant_opts o = {.output_type = -1, .token_embd_type = -1, .imatrix = imatrix ? dummy : NULL};
    kiln_err err = {{0}};
    if (kiln_quant_target_parse(preset->name, &o.target, &err) < 0) fail_msg("%s", err.msg);
    kiln_quant_report r;
    if (kiln_quantize_plan(in, &o, &r, &err) < 0) fail_msg("%s %s: %s", model, preset->name, err.msg);
    int bad = 0;
    if (!strncmp(rows[0].type, "FAIL: ", 6)) {
        /* llama-quantize refused: kiln must refuse for the same reason */
        const char *why = rows[0].type + 6;
        bool same = strstr(why, "requires an imatrix") ? !imatrix && plan_needs_imatrix(&r)
                    : strstr(why, "no tensor type fallback") ? plan_unfit(&r)
                                                               : false;
        if (!same) {
            print_message("# %s %s imatrix=%d: llama-quantize refused (%s), kiln would not\n", model, preset->name,
                          imatrix, why);
            bad++;
        }
    } else {
        if (r.n_tensors != n) {
            print_message("# %s %s imatrix=%d: %llu tensors, llama-quantize %zu\n", model, preset->name, imatrix,
                          (unsigned long long)r.n_tensors, n);
            bad++;
        }
        if (!imatrix && plan_needs_imatrix(&r)) {
            print_message("# %s %s: kiln would refuse without an imatrix, llama-quantize did not\n", model,
                          preset->name);
            bad++;
        }
        for (size_t k = 0; k < n; k++) {
            const kiln_quant_tensor *q = NULL;
            for (uint64_t i = 0; i < r.n_tensors && !q; i++)
                if (!strcmp(r.tensors[i].name, rows[k].tensor)) q = &r.tensors[i];
            if (!q) {
                print_message("# %s %s imatrix=%d: kiln has no %s\n", model, preset->name, imatrix, rows[k].tensor);
                bad++;
            } else if (q->plan.unfit || strcasecmp(kiln_type_name(q->plan.to), rows[k].type)) {
                print_message("# %s %s imatrix=%d: %s: kiln %s%s, llama-quantize %s\n", model, preset->name, imatrix,
                              rows[k].tensor, kiln_type_name(q->plan.to), q->plan.unfit ? " (unfit)" : "",
                              rows[k].type);
                bad++;
            }
        }
    }
    kiln_quant_report_free(&r);
    return bad;
}

/* ---- tests ------------------------------------------------------------------------ */

/* kiln's presets are llama-quantize's list: names, order, ftype numbers
 * (also as a number target, which picks the first option with it, as
 * llama-quantize does) and aliases. */
static void test_preset_list(void **state) {
    (void)state;
    size_t len;
    char *text = kiln_test_read_file(FIX "presets.tsv", &len);
    assert_non_null(text);
    const kiln_preset *const *next = kiln_presets;
    int n = 0;
    for (char *line = text, *nl; line && *line; line = nl) {
        nl = strchr(line, '\n');
        if (nl) *nl++ = 0;
        char *f[3];
        assert_true(split_tabs(line, f, 3));
        kiln_quant_target t;
        kiln_err err = {{0}};
        if (kiln_quant_target_parse(f[1], &t, &err) < 0) fail_msg("%s", err.msg);
        assert_non_null(t.preset);
        if (strcmp(f[2], "-")) {
            assert_string_equal(t.preset->name, f[2]); /* an alias */
        } else {
            assert_non_null(*next);
            assert_string_equal((*next)->name, f[1]);
            assert_ptr_equal(t.preset, *next);
            next++;
            n++;
        }
        if (strcmp(f[0], "-")) {
            assert_int_equal(t.ftype, strtoul(f[0], NULL, 10));
            kiln_quant_target byn;
            assert_int_equal(kiln_quant_target_parse(f[0], &byn, &err), 0);
            assert_int_equal(byn.ftype, t.ftype);
        }
    }
    assert_null(*next);
    assert_true(n >= 36);
    free(text);
    kiln_quant_target t;
    kiln_err err = {{0}};
    assert_int_equal(kiln_quant_target_parse("0", &t, &err), 0);
    assert_string_equal(t.name, "F32"); /* not COPY */
    assert_int_equal(kiln_quant_target_parse("mxfp4", &t, &err), 0);
    assert_null(t.preset); /* a plain type */
    assert_int_equal(kiln_quant_target_parse("Q4_K_Z", &t, &err), -1);
    assert_non_null(strstr(err.msg, "IQ3_XXS"));
}

/* A codec that cannot work without an imatrix (ggml's IQ2_XXS, IQ1_S...)
 * is one the policy refuses up front, so the refusal comes before any
 * work, as a one-line error, and never from inside a codec. (The policy
 * asks for more: llama-quantize also refuses IQ3_XXS and IQ1_M without
 * one, which ggml could quantize.) */
static void test_needs_imatrix_covers_codecs(void **state) {
    (void)state;
    int checked = 0;
    for (uint32_t t = 0; t < KILN_TYPE_COUNT; t++) {
        const kiln_codec *c = kiln_codec_get(t);
        if (!c || !c->quantize) continue;
        if (c->needs_imatrix && !kiln_policy_type_needs_imatrix(t, NULL))
            fail_msg("%s: the codec needs an imatrix, the policy does not ask for one", kiln_type_name(t));
        checked++;
    }
    assert_true(checked >= 10);
    assert_true(kiln_policy_type_needs_imatrix(KILN_IQ3_XXS, NULL));
    assert_true(kiln_policy_type_needs_imatrix(KILN_IQ1_M, NULL));
    assert_false(kiln_policy_type_needs_imatrix(KILN_IQ3_S, NULL));
    /* Q2_K only in the Q2_K_S mix */
    kiln_quant_target q2ks, q2k;
    kiln_err err = {{0}};
    assert_int_equal(kiln_quant_target_parse("Q2_K_S", &q2ks, &err), 0);
    assert_int_equal(kiln_quant_target_parse("Q2_K", &q2k, &err), 0);
    assert_true(kiln_policy_type_needs_imatrix(KILN_Q2_K, q2ks.preset));
    assert_false(kiln_policy_type_needs_imatrix(KILN_Q2_K, q2k.preset));
    assert_true(kiln_preset_needs_imatrix(q2ks.preset));
    assert_false(kiln_preset_needs_imatrix(q2k.preset));
}

/* Every preset on every model, with and without an imatrix. */
static void test_types_match_llama_quantize(void **state) {
    (void)state;
    golden g;
    golden_load(&g);
    size_t len;
    char *models = kiln_test_read_file(FIX "models.tsv", &len);
    assert_non_null(models);
    kiln_imatrix *dummy = kiln_imatrix_new(); /* only its presence matters to the plan */
    assert_non_null(dummy);
    int bad = 0, runs = 0, skipped = 0;
    for (char *line = models, *nl; line && *line; line = nl) {
        nl = strchr(line, '\n');
        if (nl) *nl++ = 0;
        if (line[0] == '#') continue;
        char *f[3], path[4096];
        assert_true(split_tabs(line, f, 3));
        const char *in = model_input(f[0], f[1], f[2], path, sizeof path);
        if (!in) {
            print_message("# %s: skipped, ../shared is absent\n", f[0]);
            skipped++;
            continue;
        }
        int model_bad = 0, model_runs = 0;
        for (const kiln_preset *const *p = kiln_presets; *p; p++)
            for (int imx = 1; imx >= 0; imx--) {
                model_bad += compare_run(&g, f[0], in, *p, imx, dummy);
                model_runs++;
            }
        print_message("# %-9s %d preset runs, %d differences from llama-quantize\n", f[0], model_runs, model_bad);
        bad += model_bad;
        runs += model_runs;
    }
    kiln_imatrix_free(dummy);
    free(models);
    free(g.rows);
    free(g.text);
    assert_int_equal(bad, 0);
    assert_true(runs >= 6 * 72);
    if (skipped) skip();
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preset_list),
        cmocka_unit_test(test_needs_imatrix_covers_codecs),
        cmocka_unit_test(test_types_match_llama_quantize),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    /* the synthetic models take ~150 MB: leave nothing behind */
    if (kiln_test_tmpdir()[0]) nftw(kiln_test_tmpdir(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
