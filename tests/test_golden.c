/* tests/test_golden.c - the golden-file formats and the comparison math,
 * checked against llama.cpp's own logits and figures.
 *
 * Ground truth (../shared/golden, README section 4):
 *   - logits/STEM.logits: KLGT files written by llama.cpp's dump_logits;
 *   - logits/vs_f32.tsv, vs_f64ref.tsv: max |diff|, mean KLD and top-1
 *     agreement computed by an independent float64 script over those
 *     files; kiln's comparison of the same files must reproduce them;
 *   - tokens/llama.tsv: the prompts' ids, which the KLGT records must hold.
 * Without ../shared the format round trips, the corruption cases and the
 * statistics on synthetic data still run. Model evaluation (golden record
 * and check end to end) is in tests/e2e/golden.sh. */
#include "shared.h"

#include <math.h>

#include "../golden/check.h"
#include "../golden/fingerprint.h"
#include "../golden/golden_file.h"
#include "../golden/kld.h"
#include "../golden/klgt.h"
#include "../golden/logits_file.h"

/* ---- helpers --------------------------------------------------------- */

/* A deterministic synthetic logit set: n_seqs prompts of 5 + 3i tokens. */
static void synthetic_set(kiln_logit_set *s, uint32_t n_vocab, uint32_t n_seqs) {
    memset(s, 0, sizeof *s);
    s->n_vocab = n_vocab;
    uint64_t x = 88172645463325252ull;
    for (uint32_t i = 0; i < n_seqs; i++) {
        uint32_t n = 5 + 3 * i;
        int32_t *ids = malloc(n * sizeof *ids);
        float *lg = malloc((size_t)n * n_vocab * sizeof *lg);
        assert_non_null(ids);
        assert_non_null(lg);
        for (uint32_t t = 0; t < n; t++) ids[t] = (int32_t)((t * 7 + i) % n_vocab);
        for (uint64_t k = 0; k < (uint64_t)n * n_vocab; k++) {
            lg[k] = (float)((double)(kiln_test_xorshift64(&x) >> 11) / 9007199254740992.0 * 20 - 10);
        }
        assert_int_equal(kiln_logit_set_add(s, n, ids, lg, NULL), 0);
    }
}

static void assert_sets_equal(const kiln_logit_set *a, const kiln_logit_set *b, double tol) {
    assert_int_equal(a->n_vocab, b->n_vocab);
    assert_int_equal(a->n_seqs, b->n_seqs);
    for (uint32_t i = 0; i < a->n_seqs; i++) {
        assert_int_equal(a->seqs[i].n_tokens, b->seqs[i].n_tokens);
        assert_memory_equal(a->seqs[i].ids, b->seqs[i].ids, a->seqs[i].n_tokens * 4);
        for (uint64_t k = 0; k < (uint64_t)a->seqs[i].n_tokens * a->n_vocab; k++) {
            double x = a->seqs[i].logits[k], y = b->seqs[i].logits[k];
            if (fabs(x - y) > tol * (1 + fabs(x))) fail_msg("seq %u value %llu: %g vs %g", i, (unsigned long long)k, x, y);
        }
    }
}

/* Writes `s` as a kiln logits file of the given kind, one record per
 * sequence holding every row. */
static void write_lgf(const char *path, const kiln_logit_set *s, const char *kind, bool f16) {
    kiln_err err = {{0}};
    kiln_lgf_header h = {.n_vocab = s->n_vocab, .n_records = s->n_seqs, .f16 = f16,
                         .meta = json_pack("{s:s, s:s}", "kind", kind, "note", "written by test_golden")};
    kiln_lgf_writer *w = kiln_lgf_create(path, &h, true, &err);
    if (!w) fail_msg("%s", err.msg);
    for (uint32_t i = 0; i < s->n_seqs; i++)
        if (kiln_lgf_put(w, s->seqs[i].ids, s->seqs[i].n_tokens, 0, s->seqs[i].n_tokens, s->seqs[i].logits, &err))
            fail_msg("%s", err.msg);
    if (kiln_lgf_finish(w, &err)) fail_msg("%s", err.msg);
    json_decref(h.meta);
}

/* ---- KLGT ------------------------------------------------------------ */

/* llama.cpp's file for llama-f32: 3 prompts, 173 positions, vocab 1024, and
 * the first prompt's ids are llama_tokenize's for prompts.txt line 1. */
static void test_klgt_reads_llama_cpp_file(void **state) {
    SKIP_WITHOUT_SHARED();
    kiln_logit_set s;
    kiln_err err = {{0}};
    if (kiln_klgt_read(kiln_shared_path("golden/logits/llama-f32.logits"), &s, &err)) fail_msg("%s", err.msg);
    assert_int_equal(s.n_vocab, 1024);
    assert_int_equal(s.n_seqs, 3);
    assert_int_equal(kiln_logit_set_positions(&s), 173);
    FILE *f = fopen(kiln_shared_path("golden/tokens/llama.tsv"), "r");
    assert_non_null(f);
    char line[65536];
    bool found = false;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "41\t1\t0\t", 7)) {
            found = true;
            char *p = line + 7;
            for (uint32_t t = 0; t < s.seqs[0].n_tokens; t++) {
                char *end;
                long id = strtol(p, &end, 10);
                assert_true(end != p);
                assert_int_equal(id, s.seqs[0].ids[t]);
                p = end;
            }
            assert_true(*p == '\t');
        }
    fclose(f);
    assert_true(found);
    kiln_logit_set_free(&s);
}

/* Reading and writing again gives llama.cpp's bytes back. */
static void test_klgt_round_trip_is_byte_exact(void **state) {
    SKIP_WITHOUT_SHARED();
    const char *src = kiln_shared_path("golden/logits/qwen2-Q4_K_M.logits");
    kiln_logit_set s;
    kiln_err err = {{0}};
    if (kiln_klgt_read(src, &s, &err)) fail_msg("%s", err.msg);
    const char *out = kiln_test_tmp_path("rt.logits");
    if (kiln_klgt_write(out, &s, true, &err)) fail_msg("%s", err.msg);
    size_t na, nb;
    unsigned char *a = kiln_test_read_file(src, &na), *b = kiln_test_read_file(out, &nb);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    /* an existing file is kept without force */
    assert_int_equal(kiln_klgt_write(out, &s, false, &err), -1);
    assert_non_null(strstr(err.msg, "exists"));
    free(a);
    free(b);
    kiln_logit_set_free(&s);
}

static void expect_klgt_error(const char *path, const char *pattern) {
    kiln_logit_set s;
    kiln_err err = {{0}};
    assert_int_equal(kiln_klgt_read(path, &s, &err), -1);
    if (!strstr(err.msg, pattern)) fail_msg("error \"%s\" lacks \"%s\"", err.msg, pattern);
    assert_non_null(strstr(err.msg, path));
    assert_int_equal(s.n_seqs, 0);
}

static void test_klgt_errors(void **state) {
    kiln_logit_set s;
    synthetic_set(&s, 64, 2);
    const char *good = kiln_test_tmp_path("good.logits");
    kiln_err err = {{0}};
    if (kiln_klgt_write(good, &s, true, &err)) fail_msg("%s", err.msg);
    size_t n;
    unsigned char *b = kiln_test_read_file(good, &n);
    assert_non_null(b);
    const char *bad = kiln_test_tmp_path("bad.logits");

    /* cut inside the header, inside prompt 0's ids, inside prompt 1's logits */
    size_t cuts[] = {2, 10, 16 + 4 + 8, n - 1};
    const char *fields[] = {"magic", "n_vocab", "prompt[0].n_tokens", "prompt[1].n_tokens"};
    for (int i = 0; i < 4; i++) {
        kiln_test_write_file(bad, b, cuts[i]);
        expect_klgt_error(bad, "truncated");
        kiln_logit_set none;
        kiln_klgt_read(bad, &none, &err);
        if (!strstr(err.msg, fields[i])) fail_msg("cut at %zu: \"%s\" lacks %s", cuts[i], err.msg, fields[i]);
    }
    unsigned char *c = malloc(n + 3);
    memcpy(c, b, n);
    memcpy(c + n, "xyz", 3);
    kiln_test_write_file(bad, c, n + 3);
    expect_klgt_error(bad, "unexpected bytes");
    memcpy(c, b, n);
    c[0] = 'X';
    kiln_test_write_file(bad, c, n);
    expect_klgt_error(bad, "not a KLGT");
    memcpy(c, b, n);
    c[4] = 9;
    kiln_test_write_file(bad, c, n);
    expect_klgt_error(bad, "version");
    memcpy(c, b, n);
    c[20] = 0xff; /* prompt 0's first id becomes huge */
    kiln_test_write_file(bad, c, n);
    expect_klgt_error(bad, "outside the vocabulary");
    memcpy(c, b, n);
    c[16] = 0xff, c[17] = 0xff, c[18] = 0xff, c[19] = 0x7f; /* absurd n_tokens */
    kiln_test_write_file(bad, c, n);
    expect_klgt_error(bad, "prompt[0].n_tokens");
    expect_klgt_error(kiln_test_tmp_path("missing.logits"), "cannot open");
    free(c);
    free(b);
    kiln_logit_set_free(&s);
}

/* ---- the comparison math vs llama.cpp's README figures --------------- */

/* Compares every ref/test pair listed in a README tsv the way kiln golden
 * check does, and requires the same max |diff|, mean KLD and top-1 figures
 * (to the digits the tsv prints). */
static void check_tsv(const char *tsv) {
    FILE *f = fopen(kiln_shared_path(tsv), "r");
    assert_non_null(f);
    char line[1024], ref[256], test[256];
    int rows = 0;
    assert_non_null(fgets(line, sizeof line, f)); /* header */
    while (fgets(line, sizeof line, f)) {
        unsigned npos;
        double max_abs, kld, top1;
        assert_int_equal(sscanf(line, "%255s %255s %u %lf %lf %lf", ref, test, &npos, &max_abs, &kld, &top1), 6);
        char pr[300], pt[300];
        snprintf(pr, sizeof pr, "golden/%s", ref);
        snprintf(pt, sizeof pt, "golden/%s", test);
        kiln_logit_set a, b;
        kiln_err err = {{0}};
        if (kiln_klgt_read(kiln_shared_path(pr), &a, &err) || kiln_klgt_read(kiln_shared_path(pt), &b, &err))
            fail_msg("%s", err.msg);
        kiln_cmp_acc acc = {0};
        for (uint32_t i = 0; i < a.n_seqs; i++) {
            uint32_t n = a.seqs[i].n_tokens;
            kiln_pos_cmp *c = malloc(n * sizeof *c);
            kiln_compare_rows(a.seqs[i].logits, b.seqs[i].logits, n, a.n_vocab, NULL, c);
            for (uint32_t t = 0; t < n; t++) assert_int_equal(kiln_cmp_add(&acc, &c[t], a.n_vocab, &err), 0);
            free(c);
        }
        kiln_cmp_summary s;
        kiln_cmp_summarize(&acc, &s);
        assert_int_equal(s.count, npos);
        /* the tsv prints 6 significant digits; tiny KLDs are float64 noise */
        if (fabs(s.kld.val - kld) > 2e-5 * kld + 1e-12) fail_msg("%s: mean KLD %.6g, README %.6g", test, s.kld.val, kld);
        if (fabs(s.max_abs - max_abs) > 1e-5 * max_abs + 1e-9)
            fail_msg("%s: max abs %.6g, README %.6g", test, s.max_abs, max_abs);
        if (fabs(s.same_top.val - top1) > 0.00005 + 1e-12) fail_msg("%s: top-1 %.4f, README %.4f", test, s.same_top.val, top1);
        kiln_cmp_free(&acc);
        kiln_logit_set_free(&a);
        kiln_logit_set_free(&b);
        rows++;
    }
    fclose(f);
    assert_true(rows >= 9);
}

static void test_kld_matches_readme_vs_f32(void **state) {
    SKIP_WITHOUT_SHARED();
    check_tsv("golden/logits/vs_f32.tsv");
}

static void test_kld_matches_readme_vs_f64ref(void **state) {
    SKIP_WITHOUT_SHARED();
    check_tsv("golden/logits/vs_f64ref.tsv");
}

/* ---- statistics on data with known answers -------------------------- */

static void test_nll_and_row_math(void **state) {
    float uni[100];
    for (int i = 0; i < 100; i++) uni[i] = 3.5f;
    assert_float_equal(kiln_nll(uni, 100, 17), log(100.0), 1e-6);
    float row[5] = {1, 2, 3, 4, 5}, other[5] = {1, 2, 3, 5, 4};
    double lse = log(exp(1) + exp(2) + exp(3) + exp(4) + exp(5));
    assert_float_equal(kiln_nll(row, 5, 2), lse - 3, 1e-6);
    kiln_pos_cmp c;
    kiln_compare_row(row, row, 5, 1, &c);
    assert_float_equal(c.kld, 0, 1e-15);
    assert_true(c.same_top);
    assert_float_equal(c.cosine, 1, 1e-12);
    assert_float_equal(c.p_diff, 0, 1e-15);
    kiln_compare_row(row, other, 5, 4, &c);
    assert_false(c.same_top);
    assert_float_equal(c.max_abs, 1, 0);
    assert_float_equal(c.sum_sq, 2, 0);
    /* KL(p||q) by hand: p, q differ only in the last two probabilities */
    double p3 = exp(4 - lse), p4 = exp(5 - lse);
    assert_float_equal(c.kld, p3 * (4 - 5) + p4 * (5 - 4), 1e-12);
    assert_float_equal(c.p_diff, p3 - p4, 1e-6);
    assert_true(c.scored);
}

static void test_percentiles_and_uncertainty(void **state) {
    float v[5] = {1, 2, 3, 4, 10};
    assert_float_equal(kiln_percentile(v, 5, 0.5), 3, 0);
    assert_float_equal(kiln_percentile(v, 5, 0.9), 4 + 0.6 * 6, 1e-6);
    assert_float_equal(kiln_percentile(v, 5, 0), 1, 0);
    assert_float_equal(kiln_percentile(v, 5, 1), 10, 0);
    /* fewer than 11 values: llama-perplexity reports no uncertainty */
    kiln_value_unc m = kiln_mean_unc(20, 120, 5);
    assert_float_equal(m.val, 4, 0);
    assert_float_equal(m.unc, 0, 0);
    /* 0,1 alternating x20: mean 0.5, var 0.25, unc sqrt(0.25/19) */
    m = kiln_mean_unc(10, 10, 20);
    assert_float_equal(m.unc, sqrt(0.25 / 19), 1e-12);

    /* summary over 100 positions with KLD i/100 and every third top-1 off */
    kiln_cmp_acc a = {0};
    for (int i = 0; i < 100; i++) {
        kiln_pos_cmp c = {.kld = i / 100.0, .same_top = i % 3 != 0, .cosine = 1 - i / 1000.0, .scored = true,
                          .nll_ref = 2, .nll_test = 2 + (i % 2) * 0.2, .p_diff = (i % 2 ? -0.1 : 0.1), .max_abs = i};
        assert_int_equal(kiln_cmp_add(&a, &c, 10, NULL), 0);
    }
    kiln_cmp_summary s;
    kiln_cmp_summarize(&a, &s);
    assert_float_equal(s.kld.val, 0.495, 1e-12);
    assert_float_equal(s.kld_max, 0.99, 1e-6);
    assert_float_equal(s.kld_median, 0.495, 1e-6);
    assert_float_equal(s.kld_p90, 0.891, 1e-6);
    assert_float_equal(s.same_top.val, 0.66, 1e-12);
    assert_float_equal(s.cosine_min, 0.901, 1e-12);
    assert_float_equal(s.max_abs, 99, 0);
    assert_float_equal(s.ppl_ref.val, exp(2), 1e-9);
    assert_float_equal(s.ppl.val, exp(2.1), 1e-9);
    assert_float_equal(s.ppl_ratio.val, exp(0.1), 1e-9);
    assert_float_equal(s.p_diff_rms.val, 0.1, 1e-7);
    kiln_cmp_free(&a);
}

static void test_thresholds_name_what_fails(void **state) {
    kiln_golden_report rep = {0};
    rep.all.kld.val = 0.0477;
    rep.all.same_top.val = 0.82;
    rep.all.max_abs = 2.5;
    rep.all.ppl_ratio.val = 1.04;
    kiln_golden_thresholds t = kiln_golden_no_thresholds();
    kiln_golden_apply_thresholds(&rep, &t);
    assert_true(rep.passed);
    t.max_kld = 0.1;
    t.min_top1 = 0.8;
    t.max_abs = 3;
    t.max_ppl_ratio = 1.05;
    kiln_golden_apply_thresholds(&rep, &t);
    assert_true(rep.passed);
    t.max_kld = 1e-4;
    kiln_golden_apply_thresholds(&rep, &t);
    assert_false(rep.passed);
    assert_int_equal(rep.n_failed, 1);
    assert_non_null(strstr(rep.failed[0], "kld_mean"));
    assert_non_null(strstr(rep.failed[0], "--max-kld"));
    t.min_top1 = 0.9;
    t.max_ppl_ratio = 1.01;
    kiln_golden_apply_thresholds(&rep, &t);
    assert_int_equal(rep.n_failed, 3);
    assert_non_null(strstr(rep.failed[1], "top1_agreement"));
    assert_non_null(strstr(rep.failed[2], "ppl_ratio"));
    /* a NaN figure never passes */
    t = kiln_golden_no_thresholds();
    t.max_abs = 10;
    rep.all.max_abs = NAN;
    kiln_golden_apply_thresholds(&rep, &t);
    assert_false(rep.passed);
}

/* ---- kiln's compressed container ------------------------------------ */

static void test_lgf_round_trip(void **state) {
    kiln_logit_set s;
    synthetic_set(&s, 300, 3);
    const char *p32 = kiln_test_tmp_path("rt32.golden"), *p16 = kiln_test_tmp_path("rt16.golden");
    write_lgf(p32, &s, KILN_GOLDEN_KIND, false);
    write_lgf(p16, &s, KILN_GOLDEN_KIND, true);
    kiln_golden g;
    kiln_err err = {{0}};
    if (kiln_golden_load(p32, &g, &err)) fail_msg("%s", err.msg);
    assert_string_equal(g.format, "kiln");
    assert_string_equal(json_string_value(json_object_get(g.meta, "note")), "written by test_golden");
    assert_sets_equal(&s, &g.set, 0);
    kiln_golden_free(&g);
    if (kiln_golden_load(p16, &g, &err)) fail_msg("%s", err.msg);
    assert_sets_equal(&s, &g.set, 1.0 / 1024); /* f16: 11 significant bits */
    kiln_golden_free(&g);

    /* partial rows (a KLD base's second halves) come back as written */
    kiln_lgf_header h = {.n_vocab = 300, .n_records = 1, .meta = json_pack("{s:s}", "kind", "kld-base")};
    kiln_lgf_writer *w = kiln_lgf_create(p32, &h, true, &err);
    assert_non_null(w);
    assert_int_equal(kiln_lgf_put(w, s.seqs[2].ids, 11, 5, 6, s.seqs[2].logits, &err), 0);
    assert_int_equal(kiln_lgf_put(w, s.seqs[2].ids, 11, 5, 6, s.seqs[2].logits, &err), -1); /* one too many */
    assert_int_equal(kiln_lgf_finish(w, &err), 0);
    json_decref(h.meta);
    kiln_lgf_reader *r = kiln_lgf_open(p32, &h, &err);
    assert_non_null(r);
    assert_string_equal(kiln_lgf_kind(&h), "kld-base");
    kiln_lgf_record rec;
    assert_int_equal(kiln_lgf_next(r, &rec, &err), 1);
    assert_int_equal(rec.n_ids, 11);
    assert_int_equal(rec.row0, 5);
    assert_int_equal(rec.n_rows, 6);
    assert_memory_equal(rec.rows, s.seqs[2].logits, 6 * 300 * 4);
    assert_int_equal(kiln_lgf_next(r, &rec, &err), 0);
    kiln_lgf_close(r);
    kiln_lgf_header_free(&h);
    /* ... and a golden load refuses them */
    assert_int_equal(kiln_golden_load(p32, &g, &err), -1);
    assert_non_null(strstr(err.msg, "not a golden file"));
    kiln_logit_set_free(&s);
}

/* Logits compress: byte planes plus zstd beat the raw f32 size. */
static void test_lgf_is_compact(void **state) {
    SKIP_WITHOUT_SHARED();
    kiln_logit_set s;
    kiln_err err = {{0}};
    const char *src = kiln_shared_path("golden/logits/llama-f32.logits");
    if (kiln_klgt_read(src, &s, &err)) fail_msg("%s", err.msg);
    const char *p32 = kiln_test_tmp_path("c32.golden"), *p16 = kiln_test_tmp_path("c16.golden");
    write_lgf(p32, &s, KILN_GOLDEN_KIND, false);
    write_lgf(p16, &s, KILN_GOLDEN_KIND, true);
    size_t n0, n32, n16;
    free(kiln_test_read_file(src, &n0));
    free(kiln_test_read_file(p32, &n32));
    free(kiln_test_read_file(p16, &n16));
    print_message("# llama-f32 logits: KLGT %zu bytes, kiln f32 %zu, kiln f16 %zu\n", n0, n32, n16);
    assert_true(n32 < n0 * 9 / 10);
    assert_true(n16 < n0 / 2);
    kiln_logit_set_free(&s);
}

static void expect_load_error(const char *path, const char *pattern) {
    kiln_golden g;
    kiln_err err = {{0}};
    if (kiln_golden_load(path, &g, &err) == 0) fail_msg("%s loaded without error", path);
    if (!strstr(err.msg, pattern)) fail_msg("error \"%s\" lacks \"%s\"", err.msg, pattern);
}

/* Every flipped byte, every cut and any appended byte is an error. */
static void test_lgf_corruption_is_detected(void **state) {
    kiln_logit_set s;
    synthetic_set(&s, 128, 3);
    const char *good = kiln_test_tmp_path("good.golden"), *bad = kiln_test_tmp_path("bad.golden");
    write_lgf(good, &s, KILN_GOLDEN_KIND, false);
    size_t n;
    unsigned char *b = kiln_test_read_file(good, &n);
    assert_non_null(b);
    unsigned char *c = malloc(n + 1);
    int flips = 0;
    for (size_t at = 0; at < n; at += at < 128 ? 1 : 97) {
        memcpy(c, b, n);
        c[at] ^= 0x10;
        kiln_test_write_file(bad, c, n);
        kiln_golden g;
        kiln_err err = {{0}};
        if (kiln_golden_load(bad, &g, &err) == 0) fail_msg("flipping byte %zu of %zu went unnoticed", at, n);
        assert_non_null(strstr(err.msg, bad));
        flips++;
    }
    for (size_t cut = 0; cut < n; cut += cut < 64 ? 7 : 211) {
        kiln_test_write_file(bad, b, cut);
        kiln_golden g;
        kiln_err err = {{0}};
        if (kiln_golden_load(bad, &g, &err) == 0) fail_msg("cut at %zu of %zu went unnoticed", cut, n);
    }
    kiln_test_write_file(bad, b, n - 1);
    expect_load_error(bad, "truncated");
    kiln_test_write_file(bad, b, 40);
    expect_load_error(bad, "meta");
    memcpy(c, b, n);
    c[n] = 0;
    kiln_test_write_file(bad, c, n + 1);
    expect_load_error(bad, "unexpected bytes");
    memcpy(c, b, n);
    c[30] ^= 1;
    kiln_test_write_file(bad, c, n);
    expect_load_error(bad, "header checksum");
    memcpy(c, b, n);
    c[n - 6] ^= 0x55;
    kiln_test_write_file(bad, c, n);
    expect_load_error(bad, "corrupt");
    kiln_test_write_file(bad, "GGUF\3\0\0\0", 8);
    expect_load_error(bad, "neither a kiln golden file nor a KLGT");
    print_message("# %d single-byte corruptions of a %zu-byte file all detected\n", flips, n);
    free(b);
    free(c);
    kiln_logit_set_free(&s);
}

/* ---- fingerprints ---------------------------------------------------- */

static json_t *fp_of(const char *rel) {
    kiln_err err = {{0}};
    kiln_gguf *g = kiln_gguf_open(kiln_shared_path(rel), &err);
    if (!g) fail_msg("%s", err.msg);
    json_t *fp = kiln_fingerprint(g, &err);
    if (!fp) fail_msg("%s", err.msg);
    kiln_gguf_close(g);
    return fp;
}

static void test_fingerprints_relate_models(void **state) {
    SKIP_WITHOUT_SHARED();
    json_t *f32 = fp_of("golden/gguf/llama-f32.gguf"), *again = fp_of("golden/gguf/llama-f32.gguf");
    json_t *q4 = fp_of("golden/gguf/llama-Q4_K_M.gguf"), *qwen = fp_of("golden/gguf/qwen2-f32.gguf");
    assert_string_equal(json_string_value(json_object_get(f32, "arch")), "llama");
    assert_int_equal(json_integer_value(json_object_get(f32, "n_vocab")), 1024);
    assert_int_equal(kiln_fingerprint_relation(f32, again), KILN_FP_SAME_WEIGHTS);
    assert_int_equal(kiln_fingerprint_relation(f32, q4), KILN_FP_REQUANTIZED);
    assert_int_equal(kiln_fingerprint_relation(f32, qwen), KILN_FP_DIFFERENT);
    assert_int_equal(kiln_fingerprint_relation(f32, NULL), KILN_FP_UNKNOWN);
    assert_true(json_integer_value(json_object_get(json_object_get(q4, "types"), "Q4_K")) > 0);
    json_decref(f32);
    json_decref(again);
    json_decref(q4);
    json_decref(qwen);
}

static void test_prompts_file(void **state) {
    const char *p = kiln_test_tmp_path("prompts.txt");
    kiln_test_write_file(p, "first line\n\n  second\r\nthird", 27);
    char **lines;
    size_t n;
    kiln_err err = {{0}};
    assert_int_equal(kiln_golden_read_prompts(p, 0, &lines, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(lines[0], "first line");
    assert_string_equal(lines[1], "  second");
    assert_string_equal(lines[2], "third");
    kiln_golden_free_prompts(lines, n);
    assert_int_equal(kiln_golden_read_prompts(p, 2, &lines, &n, &err), 0);
    assert_int_equal(n, 2);
    kiln_golden_free_prompts(lines, n);
    kiln_test_write_file(p, "\n\n", 2);
    assert_int_equal(kiln_golden_read_prompts(p, 0, &lines, &n, &err), -1);
    assert_non_null(strstr(err.msg, "no prompt"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_klgt_reads_llama_cpp_file),
        cmocka_unit_test(test_klgt_round_trip_is_byte_exact),
        cmocka_unit_test(test_klgt_errors),
        cmocka_unit_test(test_kld_matches_readme_vs_f32),
        cmocka_unit_test(test_kld_matches_readme_vs_f64ref),
        cmocka_unit_test(test_nll_and_row_math),
        cmocka_unit_test(test_percentiles_and_uncertainty),
        cmocka_unit_test(test_thresholds_name_what_fails),
        cmocka_unit_test(test_lgf_round_trip),
        cmocka_unit_test(test_lgf_is_compact),
        cmocka_unit_test(test_lgf_corruption_is_detected),
        cmocka_unit_test(test_fingerprints_relate_models),
        cmocka_unit_test(test_prompts_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
