/* tests/test_imatrix_file.c - core/imatrix_file.c against llama.cpp's own
 * files: both golden formats of every fixture hold the same numbers, kiln
 * writes both formats byte for byte as llama-imatrix did, .dat -> GGUF ->
 * .dat loses nothing, merging adds sums and counts, and bad files fail
 * with one-line errors. */
#include "shared.h"

#include "../core/gguf.h"
#include "../core/imatrix_file.h"

#include <math.h>

static const char *FIXTURES[] = {"llama", "mixtral", "qwen2"};

static kiln_imatrix *must_read(const char *path) {
    kiln_err err = {{0}};
    kiln_imatrix *im = kiln_imatrix_read(path, &err);
    if (!im) fail_msg("%s", err.msg);
    return im;
}

static void golden_formats_agree(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    for (size_t f = 0; f < sizeof FIXTURES / sizeof *FIXTURES; f++) {
        char p[256];
        snprintf(p, sizeof p, "golden/imatrix/%s.imatrix.gguf", FIXTURES[f]);
        kiln_imatrix *g = must_read(kiln_shared_path(p));
        snprintf(p, sizeof p, "golden/imatrix/%s.imatrix.dat", FIXTURES[f]);
        kiln_imatrix *d = must_read(kiln_shared_path(p));
        assert_int_equal(g->format, KILN_IMATRIX_GGUF);
        assert_int_equal(d->format, KILN_IMATRIX_DAT);
        assert_int_equal(g->n_entries, d->n_entries);
        assert_int_equal(g->chunk_count, 64);
        assert_int_equal(d->chunk_count, 64);
        assert_int_equal(g->chunk_size, 128);
        assert_int_equal(d->chunk_size, 0);
        assert_int_equal(g->n_datasets, 1);
        assert_int_equal(d->n_datasets, 1);
        assert_string_equal(g->datasets[0], "text/calib.groups_merged.txt");
        assert_string_equal(d->datasets[0], g->datasets[0]);
        double worst = 0;
        for (uint64_t i = 0; i < g->n_entries; i++) {
            const kiln_imatrix_entry *eg = &g->entries[i], *ed = &d->entries[i];
            assert_string_equal(eg->name, ed->name);
            int64_t nv = eg->n * eg->n_mat, zg, zd;
            assert_int_equal(ed->n * ed->n_mat, nv);
            float *wg = malloc((size_t)nv * 4), *wd = malloc((size_t)nv * 4);
            kiln_err err;
            assert_int_equal(kiln_imatrix_weights(eg, eg->n, eg->n_mat, wg, &zg, &err), 0);
            assert_int_equal(kiln_imatrix_weights(ed, eg->n, eg->n_mat, wd, &zd, &err), 0);
            assert_int_equal(zg, zd);
            for (int64_t k = 0; k < nv; k++) {
                double rel = fabs((double)wg[k] - wd[k]) / fmax(fabs((double)wg[k]), 1e-30);
                if (rel > worst) worst = rel;
            }
            free(wg);
            free(wd);
        }
        /* .dat stores float(sum / count * ncall): a few ulp of rounding */
        print_message("# %s: %llu entries, worst relative difference of the weights %.2e\n", FIXTURES[f],
                      (unsigned long long)g->n_entries, worst);
        assert_true(worst < 1e-6);
        kiln_imatrix_free(g);
        kiln_imatrix_free(d);
    }
}

static void writes_llama_bytes(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    for (size_t f = 0; f < sizeof FIXTURES / sizeof *FIXTURES; f++) {
        char gp[256], dp[256];
        snprintf(gp, sizeof gp, "golden/imatrix/%s.imatrix.gguf", FIXTURES[f]);
        snprintf(dp, sizeof dp, "golden/imatrix/%s.imatrix.dat", FIXTURES[f]);
        kiln_imatrix *g = must_read(kiln_shared_path(gp));
        kiln_err err = {{0}};
        const char *og = kiln_test_tmp_path("w.gguf"), *od = kiln_test_tmp_path("w.dat");
        if (kiln_imatrix_write_gguf(g, og, true, &err) < 0) fail_msg("%s", err.msg);
        if (kiln_imatrix_write_dat(g, od, true, &err) < 0) fail_msg("%s", err.msg);
        assert_true(kiln_test_same_file(og, kiln_shared_path(gp)));
        assert_true(kiln_test_same_file(od, kiln_shared_path(dp)));
        /* never over an existing file without force */
        assert_int_equal(kiln_imatrix_write_dat(g, od, false, &err), -1);
        assert_non_null(strstr(err.msg, "exists"));
        kiln_imatrix_free(g);
    }
}

static void dat_round_trip(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    for (size_t f = 0; f < sizeof FIXTURES / sizeof *FIXTURES; f++) {
        char dp[256];
        snprintf(dp, sizeof dp, "golden/imatrix/%s.imatrix.dat", FIXTURES[f]);
        kiln_imatrix *d = must_read(kiln_shared_path(dp));
        kiln_err err = {{0}};
        if (kiln_imatrix_write_gguf(d, kiln_test_tmp_path("rt.gguf"), true, &err) < 0) fail_msg("%s", err.msg);
        kiln_imatrix *g = must_read(kiln_test_tmp_path("rt.gguf"));
        if (kiln_imatrix_write_dat(g, kiln_test_tmp_path("rt.dat"), true, &err) < 0) fail_msg("%s", err.msg);
        assert_true(kiln_test_same_file(kiln_test_tmp_path("rt.dat"), kiln_shared_path(dp)));
        kiln_imatrix_free(g);
        kiln_imatrix_free(d);
    }
}

static void merge_adds(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    kiln_imatrix *a = must_read(kiln_shared_path("golden/imatrix/mixtral.imatrix.gguf"));
    kiln_imatrix *b = must_read(kiln_shared_path("golden/imatrix/mixtral.imatrix.gguf"));
    kiln_imatrix *m = kiln_imatrix_new();
    kiln_err err;
    assert_int_equal(kiln_imatrix_merge(m, a, &err), 0);
    assert_int_equal(kiln_imatrix_merge(m, b, &err), 0);
    assert_int_equal(m->n_entries, a->n_entries);
    assert_int_equal(m->chunk_count, 128);
    assert_int_equal(m->chunk_size, 128);
    assert_int_equal(m->n_datasets, 2);
    for (uint64_t i = 0; i < a->n_entries; i++) {
        const kiln_imatrix_entry *x = &a->entries[i], *y = &m->entries[i];
        for (int64_t k = 0; k < x->n * x->n_mat; k++) assert_true(y->in_sum2[k] == 2 * x->in_sum2[k]);
        for (int64_t j = 0; j < x->n_mat; j++) assert_true(y->counts[j] == 2 * x->counts[j]);
    }
    /* a .dat (counts in chunks) merged into a GGUF (counts in tokens) is
     * scaled by the chunk size first, so the means are unchanged */
    kiln_imatrix *d = must_read(kiln_shared_path("golden/imatrix/llama.imatrix.dat"));
    kiln_imatrix *g = must_read(kiln_shared_path("golden/imatrix/llama.imatrix.gguf"));
    assert_int_equal(kiln_imatrix_merge(g, d, &err), 0);
    const kiln_imatrix_entry *e = kiln_imatrix_find(g, "blk.0.attn_q.weight");
    assert_non_null(e);
    assert_true(e->counts[0] == 2 * 8192);
    /* shapes must agree */
    kiln_imatrix *bad = kiln_imatrix_new();
    assert_non_null(kiln_imatrix_add(bad, "blk.0.attn_q.weight", 128, 1, false, &err));
    assert_int_equal(kiln_imatrix_merge(g, bad, &err), -1);
    assert_non_null(strstr(err.msg, "cannot merge"));
    kiln_imatrix_free(bad);
    kiln_imatrix_free(d);
    kiln_imatrix_free(g);
    kiln_imatrix_free(a);
    kiln_imatrix_free(b);
    kiln_imatrix_free(m);
}

static void weights_per_expert(void **state) {
    (void)state;
    kiln_imatrix *im = kiln_imatrix_new();
    kiln_err err;
    kiln_imatrix_entry *e = kiln_imatrix_add(im, "blk.0.ffn_up_exps.weight", 4, 3, false, &err);
    assert_non_null(e);
    for (int k = 0; k < 12; k++) e->in_sum2[k] = (float)(k + 1);
    e->counts[0] = 2;
    e->counts[1] = 0; /* an expert no token reached */
    e->counts[2] = 4;
    float w[12];
    int64_t zero;
    assert_int_equal(kiln_imatrix_weights(e, 4, 3, w, &zero, &err), 0);
    assert_int_equal(zero, 1);
    assert_true(w[0] == 0.5f && w[3] == 2.0f);
    for (int k = 4; k < 8; k++) assert_true(w[k] == 1.0f);
    assert_true(w[8] == 9.0f / 4 && w[11] == 3.0f);
    assert_int_equal(kiln_imatrix_weights(e, 4, 2, w, &zero, &err), -1);
    assert_non_null(strstr(err.msg, "imatrix holds 12 values"));
    /* find, and no duplicates */
    assert_ptr_equal(kiln_imatrix_find(im, "blk.0.ffn_up_exps.weight"), e);
    assert_null(kiln_imatrix_find(im, "blk.0.ffn_up"));
    assert_null(kiln_imatrix_add(im, "blk.0.ffn_up_exps.weight", 4, 3, false, &err));
    kiln_imatrix_free(im);
}

static void bad_files(void **state) {
    (void)state;
    kiln_err err = {{0}};
    /* truncated .dat: one entry promised, name runs past the end */
    FILE *f = fopen(kiln_test_tmp_path("trunc.dat"), "wb");
    int32_t hdr[2] = {1, 40};
    fwrite(hdr, 4, 2, f);
    fwrite("blk.0.attn_q.weight.", 1, 20, f);
    fclose(f);
    assert_null(kiln_imatrix_read(kiln_test_tmp_path("trunc.dat"), &err));
    assert_non_null(strstr(err.msg, "trunc.dat: entry 0 at offset 8"));
    /* a NaN in the values */
    f = fopen(kiln_test_tmp_path("nan.dat"), "wb");
    int32_t a[3] = {1, 1, 0};
    fwrite(a, 4, 2, f);
    fwrite("w", 1, 1, f);
    int32_t nc[2] = {10, 2};
    fwrite(nc, 4, 2, f);
    float v[2] = {1.0f, NAN};
    fwrite(v, 4, 2, f);
    fclose(f);
    assert_null(kiln_imatrix_read(kiln_test_tmp_path("nan.dat"), &err));
    assert_non_null(strstr(err.msg, "not finite"));
    assert_null(kiln_imatrix_read(kiln_test_tmp_path("missing.dat"), &err));
    assert_non_null(strstr(err.msg, "cannot open"));
    if (kiln_shared()) {
        assert_null(kiln_imatrix_read(kiln_shared_path("golden/gguf/llama-f32.gguf"), &err));
        assert_non_null(strstr(err.msg, "not an importance matrix"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(golden_formats_agree), cmocka_unit_test(writes_llama_bytes),
        cmocka_unit_test(dat_round_trip),       cmocka_unit_test(merge_adds),
        cmocka_unit_test(weights_per_expert),   cmocka_unit_test(bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
