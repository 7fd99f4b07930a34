/* tests/test_perplexity.c - kiln's perplexity against llama-perplexity's,
 * and the KL-divergence base files.
 *
 * Ground truth (../shared/golden, README section 5): ppl/PPL.tsv and the
 * full logs ppl/STEM.txt of `llama-perplexity -m gguf/STEM.gguf -f
 * text/ppl.txt -c 128 -b 128`. kiln's final PPL must equal llama.cpp's to
 * 4 significant digits (its +/- to 0.1%), with the same chunk count, for
 * every file of PPL.tsv (22 runs of 146 or 135 chunks of 128 tokens: about
 * 20 s on 2 idle cores). KILN_PPL_QUICK=1 runs only QUICK_STEMS, one file
 * per fixture and a few quantization types. */
#include "shared.h"

#include <math.h>

#include "../golden/golden_file.h"
#include "../golden/logits_file.h"
#include "../golden/perplexity.h"

/* F32; Q4_K_M (Q4_K + Q6_K); Q8_0 with experts; Q2_K (+ Q3_K, Q4_K); IQ2_XXS */
static const char *QUICK_STEMS[] = {"llama-f32", "llama-Q4_K_M", "mixtral-Q8_0", "qwen2-Q2_K", "qwen2-IQ2_XXS"};

static char *ppl_text;
static size_t ppl_len;

static int load_text(void **state) {
    if (!kiln_shared()) return 0;
    kiln_err err = {{0}};
    ppl_text = kiln_read_text(kiln_shared_path("golden/text/ppl.txt"), &ppl_len, &err);
    return ppl_text ? 0 : -1;
}

static int free_text(void **state) {
    free(ppl_text);
    return 0;
}

static kiln_model *load(const char *stem) {
    char rel[256];
    snprintf(rel, sizeof rel, "golden/gguf/%s.gguf", stem);
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(kiln_shared_path(rel), &err);
    if (!m) fail_msg("%s", err.msg);
    return m;
}

/* Whether a and b agree to 4 significant digits: they differ by less than
 * half a unit in the 4th digit of b. */
static bool four_digits(double a, double b) {
    double unit = pow(10, floor(log10(fabs(b))) - 3);
    return fabs(a - b) < 0.5 * unit;
}

typedef struct running {
    double v[4096];
    int n;
} running;

static void collect(void *user, const kiln_ppl_progress *p) {
    running *r = user;
    if (r->n < 4096) r->v[r->n++] = p->ppl;
}

/* The "[i]X," running estimates of a llama-perplexity log. */
static int log_running(const char *stem, double *v, int cap) {
    char rel[256];
    snprintf(rel, sizeof rel, "golden/ppl/%s.txt", stem);
    size_t len;
    kiln_err err = {{0}};
    char *log = kiln_read_text(kiln_shared_path(rel), &len, &err);
    if (!log) fail_msg("%s", err.msg);
    int n = 0;
    for (char *p = strstr(log, "[1]"); p && n < cap; p = strchr(p + 1, '[')) {
        int idx;
        double x;
        if (sscanf(p, "[%d]%lf,", &idx, &x) != 2 || idx != n + 1) break;
        v[n++] = x;
    }
    free(log);
    return n;
}

/* Runs one file; returns false (having said why) when kiln's figures
 * differ. *n_differ: running estimates that do not print as llama.cpp's. */
static bool check_stem(const char *stem, int *n_differ) {
    FILE *f = fopen(kiln_shared_path("golden/ppl/PPL.tsv"), "r");
    assert_non_null(f);
    char line[512], file[128];
    int n_ctx = 0, n_chunks = 0;
    double ppl = 0, err_ref = 0, tps;
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        char want[160];
        snprintf(want, sizeof want, "%s.gguf\t", stem);
        if (strncmp(line, want, strlen(want))) continue;
        assert_int_equal(sscanf(line, "%127s %d %d %lf %lf %lf", file, &n_ctx, &n_chunks, &ppl, &err_ref, &tps), 6);
        found = true;
    }
    fclose(f);
    if (!found) fail_msg("%s is not in PPL.tsv", stem);

    kiln_model *m = load(stem);
    running run = {.n = 0};
    kiln_ppl_params p = {.n_ctx = n_ctx, .n_batch = 128, .on_chunk = collect, .user = &run};
    kiln_ppl_result r;
    kiln_err err = {{0}};
    if (kiln_perplexity(m, ppl_text, ppl_len, &p, &r, &err)) fail_msg("%s: %s", stem, err.msg);
    static double ref[4096];
    int n_ref = log_running(stem, ref, 4096);
    double worst = 0;
    int worst_at = 0;
    *n_differ = 0;
    for (int i = 0; i < n_ref && i < run.n; i++) {
        if (fabs(run.v[i] / ref[i] - 1) > worst) worst = fabs(run.v[i] / ref[i] - 1), worst_at = i + 1;
        char a[32], b[32]; /* llama-perplexity prints "[i]%.4f," */
        snprintf(a, sizeof a, "%.4f", run.v[i]);
        snprintf(b, sizeof b, "%.4f", ref[i]);
        *n_differ += strcmp(a, b) != 0;
    }
    print_message("# %-16s kiln PPL = %.4f +/- %.5f, llama.cpp %.4f +/- %.5f (%d chunks, %.0f tok/s;"
                  " running estimates: worst rel. diff %.1e at chunk %d, %d of %d printed differently)\n",
                  stem, r.ppl, r.ppl_err, ppl, err_ref, (int)r.n_chunks, r.tokens_per_second, worst, worst_at,
                  *n_differ, n_ref);
    assert_int_equal(r.n_chunks, n_chunks);
    assert_int_equal(n_ref, n_chunks);
    assert_int_equal(r.count, (uint64_t)n_chunks * (n_ctx - 1 - n_ctx / 2));
    /* the requirement is the PPL; its +/- (a standard error) only has to
     * agree to 0.1%, since every NLL's rounding enters it squared */
    bool ok = four_digits(r.ppl, ppl) && fabs(r.ppl_err - err_ref) <= 1e-3 * err_ref;
    if (!ok)
        print_message("# %s: PPL %.4f +/- %.5f differs from llama.cpp's %.4f +/- %.5f\n", stem,
                      r.ppl, r.ppl_err, ppl, err_ref);
    kiln_ppl_result_free(&r);
    kiln_model_free(m);
    return ok;
}

static void test_ppl_equals_llama_cpp(void **state) {
    SKIP_WITHOUT_SHARED();
    const char *quick = getenv("KILN_PPL_QUICK");
    int bad = 0, differ = 0, n_differ;
    if (!quick || strcmp(quick, "1")) {
        FILE *f = fopen(kiln_shared_path("golden/ppl/PPL.tsv"), "r");
        assert_non_null(f);
        char line[512];
        assert_non_null(fgets(line, sizeof line, f));
        while (fgets(line, sizeof line, f)) {
            char *dot = strstr(line, ".gguf");
            assert_non_null(dot);
            *dot = 0;
            bad += !check_stem(line, &n_differ);
            differ += n_differ;
        }
        fclose(f);
    } else {
        for (size_t i = 0; i < sizeof QUICK_STEMS / sizeof QUICK_STEMS[0]; i++) {
            bad += !check_stem(QUICK_STEMS[i], &n_differ);
            differ += n_differ;
        }
    }
    /* The requirement is the final PPL to 4 significant digits; kiln
     * reproduces llama.cpp's summation orders (tinyBLAS / vec_dot for
     * floats, the repacked k-quant kernels, the tiled flash attention), so
     * every running estimate it prints is llama-perplexity's too. */
    assert_int_equal(bad, 0);
    assert_int_equal(differ, 0);
}

static void test_short_text_is_an_error(void **state) {
    SKIP_WITHOUT_SHARED();
    kiln_model *m = load("qwen2-f32");
    kiln_ppl_params p = {.n_ctx = 128, .n_batch = 128};
    kiln_ppl_result r;
    kiln_err err = {{0}};
    const char *text = "Too short for two contexts.";
    assert_int_equal(kiln_perplexity(m, text, strlen(text), &p, &r, &err), -1);
    assert_non_null(strstr(err.msg, "needs at least 256"));
    p.n_ctx = 2;
    assert_int_equal(kiln_perplexity(m, ppl_text, ppl_len, &p, &r, &err), -1);
    kiln_model_free(m);
}

/* Chunk limit, batch size smaller than the chunk, and what is counted. */
static void test_chunking(void **state) {
    SKIP_WITHOUT_SHARED();
    kiln_model *m = load("qwen2-f32");
    kiln_ppl_params p = {.n_ctx = 64, .n_batch = 64, .n_chunks = 5};
    kiln_ppl_result a, b;
    kiln_err err = {{0}};
    if (kiln_perplexity(m, ppl_text, ppl_len, &p, &a, &err)) fail_msg("%s", err.msg);
    assert_int_equal(a.n_chunks, 5);
    assert_int_equal(a.n_tokens, 5 * 64);
    assert_int_equal(a.count, 5 * 31);
    assert_false(a.add_bos); /* qwen2 adds no BOS */
    p.n_batch = 16; /* four calls per chunk: the same numbers */
    if (kiln_perplexity(m, ppl_text, ppl_len, &p, &b, &err)) fail_msg("%s", err.msg);
    assert_float_equal(a.ppl, b.ppl, 1e-3 * a.ppl);
    kiln_ppl_result_free(&a);
    kiln_ppl_result_free(&b);
    kiln_model_free(m);
}

/* Saves a base, then compares models against it. */
static void test_kld_base(void **state) {
    SKIP_WITHOUT_SHARED();
    const char *dir = kiln_test_tmpdir();
    char base[512], base16[512], cut[512];
    snprintf(base, sizeof base, "%s/base.kld", dir);
    snprintf(base16, sizeof base16, "%s/base16.kld", dir);
    snprintf(cut, sizeof cut, "%s/cut.kld", dir);
    kiln_model *q8 = load("llama-Q8_0"), *q2 = load("llama-Q2_K");
    kiln_err err = {{0}};
    kiln_ppl_result r, s;
    kiln_ppl_params p = {.n_ctx = 128, .n_batch = 128, .n_chunks = 6, .save_path = base, .force = true};
    if (kiln_perplexity(q8, ppl_text, ppl_len, &p, &r, &err)) fail_msg("%s", err.msg);
    p.save_path = base16;
    p.save_f16 = true;
    if (kiln_perplexity(q8, ppl_text, ppl_len, &p, &s, &err)) fail_msg("%s", err.msg);
    kiln_ppl_result_free(&s);

    /* the same model against its own base: no divergence at all */
    kiln_ppl_params k = {.n_batch = 128, .base_path = base};
    if (kiln_perplexity(q8, NULL, 0, &k, &s, &err)) fail_msg("%s", err.msg);
    assert_true(s.has_kld);
    assert_int_equal(s.n_chunks, 6);
    assert_int_equal(s.n_ctx, 128);
    assert_true(s.kld.kld_max < 1e-9);
    assert_float_equal(s.kld.same_top.val, 1, 0);
    assert_float_equal(s.ppl, r.ppl, 1e-9 * r.ppl);
    assert_float_equal(s.kld.ppl_ratio.val, 1, 1e-9);
    kiln_ppl_result_free(&s);
    k.base_path = base16; /* f16 base: small rounding only */
    if (kiln_perplexity(q8, ppl_text, ppl_len, &k, &s, &err)) fail_msg("%s", err.msg);
    assert_true(s.kld.kld.val < 1e-5);
    kiln_ppl_result_free(&s);

    /* Q2_K against the Q8_0 base: a real divergence, and its PPL is the
     * one text mode gives over the same chunks */
    k.base_path = base;
    if (kiln_perplexity(q2, NULL, 0, &k, &s, &err)) fail_msg("%s", err.msg);
    kiln_ppl_params t = {.n_ctx = 128, .n_batch = 128, .n_chunks = 6};
    kiln_ppl_result u;
    if (kiln_perplexity(q2, ppl_text, ppl_len, &t, &u, &err)) fail_msg("%s", err.msg);
    print_message("# Q2_K vs Q8_0 base, 6 chunks: KLD %.5f (p99 %.4f, max %.4f), same top %.3f, PPL ratio %.4f,"
                  " RMS dp %.4f\n",
                  s.kld.kld.val, s.kld.kld_p99, s.kld.kld_max, s.kld.same_top.val, s.kld.ppl_ratio.val,
                  s.kld.p_diff_rms.val);
    assert_true(s.kld.kld.val > 1e-3 && s.kld.kld.val < 1);
    assert_true(s.kld.kld_median <= s.kld.kld_p90 && s.kld.kld_p90 <= s.kld.kld_p99 &&
                s.kld.kld_p99 <= s.kld.kld_max);
    assert_float_equal(s.ppl, u.ppl, 1e-9 * u.ppl);
    assert_float_equal(s.kld.ppl_ref.val, r.ppl, 1e-4 * r.ppl);
    kiln_ppl_result_free(&s);
    kiln_ppl_result_free(&u);

    /* errors: another text, another context, a cut file, a save in KLD mode */
    const char *other = "Some other text. ";
    assert_int_equal(kiln_perplexity(q2, other, strlen(other), &k, &s, &err), -1);
    assert_non_null(strstr(err.msg, "another text"));
    k.n_ctx = 64;
    assert_int_equal(kiln_perplexity(q2, NULL, 0, &k, &s, &err), -1);
    assert_non_null(strstr(err.msg, "context of 128"));
    k.n_ctx = 0;
    FILE *in = fopen(base, "rb"), *out = fopen(cut, "wb");
    assert_non_null(in);
    assert_non_null(out);
    fseek(in, 0, SEEK_END);
    long n = ftell(in);
    fseek(in, 0, SEEK_SET);
    char *buf = malloc((size_t)n);
    assert_int_equal(fread(buf, 1, (size_t)n, in), (size_t)n);
    assert_int_equal(fwrite(buf, 1, (size_t)n / 2, out), (size_t)n / 2);
    fclose(in);
    fclose(out);
    k.base_path = cut;
    assert_int_equal(kiln_perplexity(q2, NULL, 0, &k, &s, &err), -1);
    assert_non_null(strstr(err.msg, "truncated"));
    buf[n / 2] ^= 0x20;
    out = fopen(cut, "wb");
    assert_int_equal(fwrite(buf, 1, (size_t)n, out), (size_t)n);
    fclose(out);
    assert_int_equal(kiln_perplexity(q2, NULL, 0, &k, &s, &err), -1);
    print_message("# corrupt base: %s\n", err.msg);
    free(buf);
    k.save_path = base;
    assert_int_equal(kiln_perplexity(q2, NULL, 0, &k, &s, &err), -1);
    /* a golden file is not a base */
    kiln_ppl_params g = {.n_batch = 128, .base_path = "golden/fixtures/llama-f32.golden"};
    assert_int_equal(kiln_perplexity(q2, NULL, 0, &g, &s, &err), -1);
    assert_non_null(strstr(err.msg, "not a KL-divergence base"));
    kiln_ppl_result_free(&r);
    kiln_model_free(q8);
    kiln_model_free(q2);
}

/* A base made with one vocabulary cannot score a model of another. */
static void test_kld_base_other_vocab(void **state) {
    SKIP_WITHOUT_SHARED();
    char base[512];
    snprintf(base, sizeof base, "%s/qwen.kld", kiln_test_tmpdir());
    kiln_model *qwen = load("qwen2-f32"), *llama = load("llama-f32");
    kiln_ppl_params p = {.n_ctx = 64, .n_batch = 64, .n_chunks = 2, .save_path = base, .force = true};
    kiln_ppl_result r;
    kiln_err err = {{0}};
    if (kiln_perplexity(qwen, ppl_text, ppl_len, &p, &r, &err)) fail_msg("%s", err.msg);
    kiln_ppl_result_free(&r);
    kiln_ppl_params k = {.n_batch = 64, .base_path = base};
    assert_int_equal(kiln_perplexity(llama, NULL, 0, &k, &r, &err), -1);
    assert_true(strstr(err.msg, "vocabulary") || strstr(err.msg, "n_vocab"));
    kiln_model_free(qwen);
    kiln_model_free(llama);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_short_text_is_an_error),
        cmocka_unit_test(test_chunking),
        cmocka_unit_test(test_kld_base),
        cmocka_unit_test(test_kld_base_other_vocab),
        cmocka_unit_test(test_ppl_equals_llama_cpp),
    };
    return cmocka_run_group_tests(tests, load_text, free_text);
}
