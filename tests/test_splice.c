/* tests/test_splice.c - kiln splice on llama.cpp's Mixtral fixture
 * (../shared/golden/gguf/mixtral-*.gguf, 4 layers of 4 experts).
 *
 * Every expected value comes from the inputs: a spliced tensor must equal
 * the donor's bytes, every other tensor the base's, a kept expert the
 * base's slab; the requantized experts are held to the error llama.cpp's
 * own IQ2_XXS quantization of the same f32 weights reached with the same
 * imatrix. Donors that no fixture provides (a different block count, a
 * missing tensor, a reshaped tensor, other bytes in one expert tensor, a
 * split file) are written here from fixture bytes with the core writer. */
#include "shared.h"

#include "../core/gguf.h"
#include "../core/types.h"
#include "../codec/codec.h"
#include "../core/xxh64.h"
#include "../splice/splice.h"

#include <math.h>
#include <unistd.h>

static const char *fixture(const char *preset) {
    static char bufs[4][8192];
    static int slot;
    char *b = bufs[slot++ & 3];
    snprintf(b, 8192, "%s/golden/gguf/mixtral-%s.gguf", kiln_shared() ? kiln_shared() : "../shared", preset);
    return b;
}

static uint64_t file_size(const char *path) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_size;
}

static kiln_gguf *open_ok(const char *path) {
    kiln_err err = {{0}};
    kiln_gguf *g = kiln_gguf_open(path, &err);
    if (!g) fail_msg("%s", err.msg);
    return g;
}

/* Plans and writes; fails the test with the library's message. */
static void splice_ok(const kiln_splice_opts *o, kiln_splice_plan *plan) {
    kiln_err err = {{0}};
    if (kiln_splice_plan_make(o, plan, &err) < 0 || kiln_splice_write(plan, &err) < 0) fail_msg("%s", err.msg);
}

/* A refused splice: the message names the problem and nothing is left
 * at the output path, nor its .tmp. */
static void splice_refused(const kiln_splice_opts *o, const char *want) {
    kiln_err err = {{0}};
    kiln_splice_plan plan;
    bool out_existed = o->output && kiln_test_exists(o->output);
    int rc = kiln_splice_plan_make(o, &plan, &err);
    if (rc == 0) rc = kiln_splice_write(&plan, &err);
    kiln_splice_plan_free(&plan);
    if (rc == 0) fail_msg("splice succeeded, expected a refusal containing '%s'", want);
    if (!strstr(err.msg, want)) fail_msg("message '%s' lacks '%s'", err.msg, want);
    if (strchr(err.msg, '\n')) fail_msg("message is not one line");
    if (o->output) {
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%s.tmp", o->output);
        assert_false(kiln_test_exists(tmp));
        if (!out_existed) assert_false(kiln_test_exists(o->output));
    }
}

static bool bytes_equal(const kiln_tensor *a, const kiln_tensor *b) {
    return a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
}

static const kiln_tensor *find(const kiln_gguf *g, const kiln_tensor *like) {
    char *name = kiln_str_dup(like->name);
    const kiln_tensor *t = kiln_gguf_find_tensor(g, name);
    free(name);
    return t;
}

static bool same_value(const kiln_value *a, const kiln_value *b) {
    if (a->type != b->type) return false;
    if (a->type == KILN_GGUF_STRING) return a->str.len == b->str.len && !memcmp(a->str.ptr, b->str.ptr, a->str.len);
    if (a->type == KILN_GGUF_BOOL) return a->b == b->b;
    if (a->type != KILN_GGUF_ARRAY) return !memcmp(&a->u64, &b->u64, kiln_gguf_vtype_size(a->type));
    if (a->arr.type != b->arr.type || a->arr.n != b->arr.n) return false;
    for (uint64_t i = 0; a->arr.type == KILN_GGUF_STRING && i < a->arr.n; i++)
        if (a->arr.strs[i].len != b->arr.strs[i].len || memcmp(a->arr.strs[i].ptr, b->arr.strs[i].ptr, a->arr.strs[i].len))
            return false;
    if (a->arr.type == KILN_GGUF_STRING) return true;
    return !memcmp(a->arr.data, b->arr.data, a->arr.n * kiln_gguf_vtype_size(a->arr.type));
}

/* The output's metadata is the base's, in order, with the same values,
 * followed by the provenance keys (and nothing else). `changed` lists keys
 * whose value may differ (NULL-terminated). */
static void check_metadata(const kiln_gguf *base, const kiln_gguf *out, const char *const *changed) {
    uint64_t j = 0;
    for (uint64_t i = 0; i < base->n_kv; i++, j++) {
        const kiln_kv *a = &base->kv[i], *b = &out->kv[j];
        assert_true(a->key.len == b->key.len && !memcmp(a->key.ptr, b->key.ptr, a->key.len));
        bool may_change = false;
        for (const char *const *c = changed; c && *c; c++) may_change |= kiln_str_eq(a->key, *c);
        if (!may_change && !same_value(&a->val, &b->val)) fail_msg("metadata key %.*s changed", (int)a->key.len, a->key.ptr);
    }
    for (; j < out->n_kv; j++)
        if (out->kv[j].key.len < 12 || memcmp(out->kv[j].key.ptr, "kiln.splice.", 12))
            fail_msg("unexpected key %.*s", (int)out->kv[j].key.len, out->kv[j].key.ptr);
}

static void check_str_kv(const kiln_gguf *g, const char *key, const char *want_prefix) {
    kiln_str s;
    assert_true(kiln_gguf_get_str(g, key, &s));
    char *v = kiln_str_dup(s);
    if (strncmp(v, want_prefix, strlen(want_prefix))) fail_msg("%s = '%s', want '%s...'", key, v, want_prefix);
    free(v);
}

static uint64_t pad(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

/* ---- helpers on names and lists ----------------------------------------- */

static void test_xxh64(void **state) {
    (void)state;
    kiln_xxh64 h;
    kiln_xxh64_init(&h);
    assert_true(kiln_xxh64_digest(&h) == 0xEF46DB3751D8E999ull); /* the specification's empty input */
    kiln_xxh64_update(&h, "abc", 3);
    assert_true(kiln_xxh64_digest(&h) == 0x44BC2CF5AD770999ull);
    /* Any split of the input gives the same digest. */
    unsigned char buf[1000];
    for (int i = 0; i < 1000; i++) buf[i] = (unsigned char)(i * 131 + 7);
    kiln_xxh64_init(&h);
    kiln_xxh64_update(&h, buf, sizeof buf);
    uint64_t whole = kiln_xxh64_digest(&h);
    kiln_xxh64_init(&h);
    for (int i = 0; i < 1000; i += 7) kiln_xxh64_update(&h, buf + i, i + 7 <= 1000 ? 7 : 1000 - (uint64_t)i);
    assert_true(kiln_xxh64_digest(&h) == whole);
}

static void test_parse_set(void **state) {
    (void)state;
    bool sel[10] = {0};
    kiln_err err = {{0}};
    assert_int_equal(kiln_splice_parse_set("0,3,5-7", 10, "--x", sel, &err), 5);
    bool want[10] = {1, 0, 0, 1, 0, 1, 1, 1, 0, 0};
    assert_memory_equal(sel, want, sizeof want);
    static const char *const bad[] = {"", "a", "1,", "3-1", "1-", "10", "0-10", "1;2", "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        bool s[10] = {0};
        if (kiln_splice_parse_set(bad[i], 10, "--x", s, &err) >= 0) fail_msg("'%s' was accepted", bad[i]);
    }
    bool s[10] = {0};
    assert_true(kiln_splice_parse_set("2,10", 10, "--x", s, &err) < 0);
    assert_string_equal(err.msg, "--x: 10 is out of range: the model has 10 (0-9)");
}

static void test_names(void **state) {
    (void)state;
    assert_int_equal(kiln_tensor_layer("blk.12.attn_q.weight"), 12);
    assert_int_equal(kiln_tensor_layer("token_embd.weight"), -1);
    assert_int_equal(kiln_tensor_layer("blk.x.attn_q.weight"), -1);
    assert_true(kiln_splice_is_expert_tensor("blk.0.ffn_up_exps.weight"));
    assert_true(kiln_splice_is_expert_tensor("blk.7.ffn_gate_up_exps.bias"));
    assert_false(kiln_splice_is_expert_tensor("blk.0.ffn_down_shexp.weight"));
    assert_false(kiln_splice_is_expert_tensor("blk.0.ffn_gate_inp.weight"));
    assert_false(kiln_splice_is_expert_tensor("blk.0.ffn_up.weight"));
    assert_true(kiln_splice_is_expert_indexed("blk.0.ffn_gate_inp.weight"));
    assert_true(kiln_splice_is_expert_indexed("blk.0.exp_probs_b.bias"));
    assert_true(kiln_splice_is_expert_indexed("blk.0.ffn_down_exps.weight"));
    assert_false(kiln_splice_is_expert_indexed("blk.0.ffn_gate_inp_shexp.weight"));
}

/* ---- per-layer boosted quant -------------------------------------------- */

/* "0,N-1": the first and last layer of the fixture, however many it has. */
static const char *first_and_last(const kiln_gguf *g) {
    static char buf[64];
    uint64_t n = 0;
    assert_true(kiln_gguf_get_u64(g, "llama.block_count", &n));
    assert_true(n >= 2);
    snprintf(buf, sizeof buf, "0,%llu", (unsigned long long)(n - 1));
    return buf;
}

static bool in_layers(const char *name, const kiln_gguf *g) {
    uint64_t n = 0;
    kiln_gguf_get_u64(g, "llama.block_count", &n);
    int64_t l = kiln_tensor_layer(name);
    return l == 0 || l == (int64_t)n - 1;
}

static void test_boosted_layers(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    kiln_gguf *base = open_ok(fixture("IQ2_XXS")), *donor = open_ok(fixture("Q4_K_M"));
    const char *layers = first_and_last(base);
    const char *out = kiln_test_tmp_path("boosted.gguf");
    kiln_splice_opts o = {.base = fixture("IQ2_XXS"), .donor = fixture("Q4_K_M"), .output = out,
                          .layers = layers, .experts = true};
    kiln_splice_plan plan;
    splice_ok(&o, &plan);
    kiln_gguf *g = open_ok(out);
    assert_int_equal(g->n_tensors, base->n_tensors);
    uint64_t spliced = 0;
    int64_t delta = 0;
    for (uint64_t i = 0; i < base->n_tensors; i++) {
        const kiln_tensor *b = &base->tensors[i], *t = &g->tensors[i];
        assert_true(b->name.len == t->name.len && !memcmp(b->name.ptr, t->name.ptr, b->name.len));
        char *name = kiln_str_dup(b->name);
        if (kiln_splice_is_expert_tensor(name) && in_layers(name, base)) {
            const kiln_tensor *d = find(donor, b);
            assert_int_equal(t->type, d->type);
            if (!bytes_equal(t, d)) fail_msg("%s differs from the donor's", name);
            delta += (int64_t)pad(d->nbytes, base->alignment) - (int64_t)pad(b->nbytes, base->alignment);
            spliced++;
        } else {
            assert_int_equal(t->type, b->type);
            if (!bytes_equal(t, b)) fail_msg("%s differs from the base's", name);
        }
        assert_memory_equal(t->ne, b->ne, sizeof t->ne);
        free(name);
    }
    assert_int_equal(spliced, 6); /* 3 expert tensors in each of 2 layers */
    assert_int_equal(plan.n_changed, spliced);
    /* The data section grows by exactly the donor tensors' extra bytes;
     * the header by the provenance keys only. */
    uint64_t out_size = file_size(out), base_size = file_size(fixture("IQ2_XXS"));
    assert_int_equal(out_size - g->shards[0].data_offset, base_size - base->shards[0].data_offset + (uint64_t)delta);
    assert_int_equal((int64_t)(plan.bytes_after - plan.bytes_before), delta);
    assert_true(g->shards[0].data_offset >= base->shards[0].data_offset);
    assert_true(g->shards[0].data_offset - base->shards[0].data_offset < 256 + base->alignment);
    assert_int_equal(g->alignment, base->alignment);
    check_metadata(base, g, NULL);
    check_str_kv(g, "kiln.splice.donor", "mixtral-Q4_K_M.gguf xxh64:");
    uint64_t n;
    assert_true(kiln_gguf_get_u64(g, "kiln.splice.tensors", &n));
    assert_int_equal(n, 6);
    char sel[128];
    snprintf(sel, sizeof sel, "--layers %s --experts", layers);
    check_str_kv(g, "kiln.splice.selection", sel);
    /* Splicing again gives the same bytes (and the same fingerprint). */
    const char *again = kiln_test_tmp_path("boosted2.gguf");
    o.output = again;
    kiln_splice_plan plan2;
    splice_ok(&o, &plan2);
    assert_string_equal(plan.donor_id, plan2.donor_id);
    kiln_gguf *g2 = open_ok(again);
    assert_int_equal(g2->total_size, g->total_size);
    assert_memory_equal(g2->shards[0].map, g->shards[0].map, g->total_size);
    kiln_gguf_close(g2);
    kiln_splice_plan_free(&plan2);
    kiln_splice_plan_free(&plan);
    kiln_gguf_close(g);
    kiln_gguf_close(donor);
    kiln_gguf_close(base);
}

/* --tensors alternatives intersect with --layers. */
static void test_regex_and_layers(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    const char *re[] = {"attn_q", "ffn_down"};
    kiln_splice_opts o = {.base = fixture("IQ2_XXS"), .donor = fixture("Q8_0"), .tensor_regex = re,
                          .n_tensor_regex = 2, .layers = "1-2"};
    kiln_splice_plan plan;
    kiln_err err = {{0}};
    if (kiln_splice_plan_make(&o, &plan, &err) < 0) fail_msg("%s", err.msg);
    assert_int_equal(plan.n_changed, 4);
    for (uint64_t i = 0; i < plan.n_items; i++) {
        const kiln_splice_item *it = &plan.items[i];
        bool want = (strstr(it->name, "attn_q") || strstr(it->name, "ffn_down")) &&
                    (kiln_tensor_layer(it->name) == 1 || kiln_tensor_layer(it->name) == 2);
        assert_int_equal(it->action == KILN_SPLICE_TENSOR, want);
    }
    kiln_splice_plan_free(&plan);
}

/* ---- donors written from fixture bytes ---------------------------------- */

typedef struct variant {
    const char *drop;          /* leave this tensor out */
    const char *reshape;       /* declare this F32 2-D tensor as [ne0/2, ne1*2] */
    const char *to, *from;     /* tensor `to` gets the bytes of `from` */
    int64_t block_count;       /* > 0: override llama.block_count */
    uint64_t split_max_tensors;
} variant;

static void write_variant(const char *src, const char *dst, const variant *v) {
    kiln_gguf *g = open_ok(src);
    kiln_err err = {{0}};
    kiln_write_opts wo = {.split_max_tensors = v->split_max_tensors, .force = true};
    kiln_gguf_writer *w = kiln_writer_new(dst, &wo, &err);
    assert_non_null(w);
    assert_int_equal(kiln_writer_copy_kv(w, g, &err), 0);
    if (v->block_count > 0) assert_int_equal(kiln_writer_set_u32(w, "llama.block_count", (uint32_t)v->block_count, &err), 0);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kiln_tensor *t = &g->tensors[i];
        char *name = kiln_str_dup(t->name);
        int64_t ne[4];
        memcpy(ne, t->ne, sizeof ne);
        if (v->reshape && !strcmp(name, v->reshape)) {
            ne[0] /= 2;
            ne[1] *= 2;
        }
        if (!v->drop || strcmp(name, v->drop)) assert_int_equal(kiln_writer_add_tensor(w, name, t->type, t->n_dims, ne, &err), 0);
        free(name);
    }
    if (kiln_writer_begin(w, &err) < 0) fail_msg("%s", err.msg);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kiln_tensor *t = &g->tensors[i];
        char *name = kiln_str_dup(t->name);
        const kiln_tensor *src_t = v->to && !strcmp(name, v->to) ? kiln_gguf_find_tensor(g, v->from) : t;
        assert_int_equal(src_t->nbytes, t->nbytes);
        if ((!v->drop || strcmp(name, v->drop)) && kiln_writer_write(w, src_t->data, t->nbytes, &err) < 0)
            fail_msg("%s", err.msg);
        free(name);
    }
    if (kiln_writer_finish(w, &err) < 0) fail_msg("%s", err.msg);
    kiln_gguf_close(g);
}

/* Every tensor-data byte of `out` equals `base`'s except [skip, skip+n),
 * which equals `want`. Both files have the same tensor layout. */
static void check_data_except(const kiln_gguf *base, const kiln_gguf *out, uint64_t skip, uint64_t n,
                              const uint8_t *want) {
    const uint8_t *a = base->shards[0].map + base->shards[0].data_offset;
    const uint8_t *b = out->shards[0].map + out->shards[0].data_offset;
    uint64_t len = base->shards[0].size - base->shards[0].data_offset;
    assert_int_equal(out->shards[0].size - out->shards[0].data_offset, len);
    assert_memory_equal(a, b, skip);
    assert_memory_equal(b + skip, want, n);
    assert_memory_equal(a + skip + n, b + skip + n, len - skip - n);
}

/* One expert of one tensor, same type on both sides: a pure slab copy. */
static void test_expert_slab_copy(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    const char *donor_path = kiln_test_tmp_path("donor-slab.gguf");
    variant v = {.to = "blk.0.ffn_up_exps.weight", .from = "blk.1.ffn_up_exps.weight"};
    write_variant(fixture("Q4_K_M"), donor_path, &v);
    const char *re[] = {"ffn_up"};
    const char *out = kiln_test_tmp_path("slab.gguf");
    kiln_splice_opts o = {.base = fixture("Q4_K_M"), .donor = donor_path, .output = out, .tensor_regex = re,
                          .n_tensor_regex = 1, .layers = "0", .expert_ids = "2"};
    kiln_splice_plan plan;
    splice_ok(&o, &plan);
    assert_int_equal(plan.n_changed, 1);
    kiln_gguf *base = open_ok(fixture("Q4_K_M")), *g = open_ok(out);
    const kiln_tensor *bt = kiln_gguf_find_tensor(base, "blk.0.ffn_up_exps.weight");
    const kiln_tensor *src = kiln_gguf_find_tensor(base, "blk.1.ffn_up_exps.weight");
    uint64_t slab = bt->nbytes / (uint64_t)bt->ne[2];
    assert_memory_not_equal(bt->data + 2 * slab, src->data + 2 * slab, slab); /* the test is not vacuous */
    check_data_except(base, g, bt->offset + 2 * slab, slab, src->data + 2 * slab);
    check_metadata(base, g, NULL);
    check_str_kv(g, "kiln.splice.selection", "--tensors ffn_up --layers 0 --expert-ids 2");
    kiln_gguf_close(g);
    kiln_gguf_close(base);
    kiln_splice_plan_free(&plan);
}

static float *dequant_slab(const kiln_tensor *t, int64_t e) {
    int64_t per = t->nelements / t->ne[2];
    float *f = malloc((size_t)per * sizeof *f);
    kiln_err err = {{0}};
    if (kiln_dequantize(t->type, t->data + (uint64_t)e * (t->nbytes / (uint64_t)t->ne[2]), f, per, &err) < 0)
        fail_msg("%s", err.msg);
    return f;
}

/* An f32 donor's expert `e` requantized into `preset` (the fixture's own
 * llama.cpp quantization of those f32 weights): every other byte stays the
 * base's, and the new slab is as close to the f32 weights as llama.cpp's
 * slab of the same expert, weighted by the imatrix when one is used. */
static void check_requantize(const char *preset, int64_t e, const char *imx) {
    char ids[16];
    snprintf(ids, sizeof ids, "%lld", (long long)e);
    const char *out = kiln_test_tmp_path("requant.gguf");
    kiln_splice_opts o = {.base = fixture(preset), .donor = fixture("f32"), .output = out, .expert_ids = ids,
                          .requantize = true, .imatrix = imx, .force = true};
    kiln_splice_plan plan;
    splice_ok(&o, &plan);
    assert_int_equal(plan.n_changed, 12);
    kiln_gguf *base = open_ok(fixture(preset)), *f32 = open_ok(fixture("f32")), *g = open_ok(out);
    kiln_gguf *im = imx ? open_ok(imx) : NULL;
    for (uint64_t i = 0; i < base->n_tensors; i++) {
        const kiln_tensor *b = &base->tensors[i], *t = &g->tensors[i];
        char *name = kiln_str_dup(b->name);
        assert_int_equal(t->type, b->type);
        if (!kiln_splice_is_expert_tensor(name)) {
            assert_true(bytes_equal(b, t));
            free(name);
            continue;
        }
        uint64_t slab = b->nbytes / (uint64_t)b->ne[2];
        for (int64_t x = 0; x < b->ne[2]; x++)
            if (x != e) assert_memory_equal(b->data + x * slab, t->data + x * slab, slab);
        int64_t n = b->ne[0], rows = b->ne[1];
        float *w = malloc((size_t)n * sizeof *w), c;
        for (int64_t j = 0; j < n; j++) w[j] = 1.0f;
        if (im) { /* in_sum2[e] / counts[e], straight from the file */
            char key[256];
            snprintf(key, sizeof key, "%s.in_sum2", name);
            const kiln_tensor *s2 = kiln_gguf_find_tensor(im, key);
            snprintf(key, sizeof key, "%s.counts", name);
            const kiln_tensor *cnt = kiln_gguf_find_tensor(im, key);
            assert_non_null(s2);
            assert_non_null(cnt);
            memcpy(&c, cnt->data + 4 * e, 4);
            memcpy(w, s2->data + 4 * n * e, (size_t)n * 4);
            for (int64_t j = 0; j < n; j++) w[j] = c > 0 ? w[j] / c : 1.0f;
        }
        const kiln_tensor *x = find(f32, b);
        float *ref = dequant_slab(x, e), *ours = dequant_slab(t, e), *llama = dequant_slab(b, e);
        double e_ours = kiln_test_wrmse(ref, ours, w, rows, n), e_llama = kiln_test_wrmse(ref, llama, w, rows, n);
        print_message("# %s %s expert %lld: %srmse kiln %.6g, llama.cpp %.6g (%.3fx)\n", preset, name, (long long)e,
                      im ? "weighted " : "", e_ours, e_llama, e_ours / e_llama);
        if (!(e_ours <= 1.05 * e_llama)) fail_msg("%s: requantized expert is worse than llama.cpp's", name);
        free(ref);
        free(ours);
        free(llama);
        free(w);
        free(name);
    }
    kiln_gguf_close(im);
    kiln_gguf_close(g);
    kiln_gguf_close(f32);
    kiln_gguf_close(base);
    kiln_splice_plan_free(&plan);
}

static void test_expert_requantize(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    if (!kiln_can_quantize(KILN_IQ2_XXS) || !kiln_can_quantize(KILN_Q4_K) || !kiln_can_quantize(KILN_Q6_K)) skip();
    const char *imx = kiln_shared_path("golden/imatrix/mixtral.imatrix.gguf");
    check_requantize("IQ2_XXS", 1, imx); /* llama-quantize used this imatrix */
    /* Q4_K_M was made without one; its expert tensors mix Q4_K and Q6_K,
     * so the conversion buffers change size between tensors. */
    check_requantize("Q4_K_M", 3, NULL);
    kiln_gguf *g = open_ok(kiln_test_tmp_path("requant.gguf"));
    kiln_str sel;
    assert_true(kiln_gguf_get_str(g, "kiln.splice.selection", &sel));
    assert_true(kiln_str_eq(sel, "--expert-ids 3 --requantize"));
    kiln_gguf_close(g);
}

/* ---- expert surgery ------------------------------------------------------ */

static void check_keep(const char *ids_spec, const int64_t *ids, int n_ids, uint64_t used_after) {
    const char *out = kiln_test_tmp_path("keep.gguf");
    kiln_splice_opts o = {.base = fixture("Q4_K_M"), .output = out, .keep_experts = ids_spec, .force = true};
    kiln_splice_plan plan;
    splice_ok(&o, &plan);
    kiln_gguf *base = open_ok(fixture("Q4_K_M")), *g = open_ok(out);
    uint64_t n_expert = 0, used = 0, cut = 0;
    kiln_gguf_get_u64(base, "llama.expert_count", &n_expert);
    assert_int_equal(g->n_tensors, base->n_tensors);
    for (uint64_t i = 0; i < base->n_tensors; i++) {
        const kiln_tensor *b = &base->tensors[i], *t = &g->tensors[i];
        char *name = kiln_str_dup(b->name);
        assert_int_equal(t->type, b->type);
        assert_int_equal(t->n_dims, b->n_dims);
        bool sliced = kiln_splice_is_expert_tensor(name) || strstr(name, "ffn_gate_inp");
        if (!sliced) {
            assert_true(bytes_equal(b, t));
            free(name);
            continue;
        }
        cut++;
        uint32_t outer = b->n_dims - 1;
        assert_int_equal(b->ne[outer], (int64_t)n_expert);
        assert_int_equal(t->ne[outer], n_ids);
        uint64_t slab = b->nbytes / n_expert;
        assert_int_equal(t->nbytes, slab * (uint64_t)n_ids);
        for (int k = 0; k < n_ids; k++)
            if (memcmp(t->data + (uint64_t)k * slab, b->data + (uint64_t)ids[k] * slab, slab))
                fail_msg("%s: slab %d is not base expert %lld", name, k, (long long)ids[k]);
        free(name);
    }
    assert_int_equal(cut, 16); /* 3 expert tensors and the router, in 4 layers */
    assert_true(kiln_gguf_get_u64(g, "llama.expert_count", &n_expert));
    assert_int_equal(n_expert, n_ids);
    assert_true(kiln_gguf_get_u64(g, "llama.expert_used_count", &used));
    assert_int_equal(used, used_after);
    static const char *const changed[] = {"llama.expert_count", "llama.expert_used_count", NULL};
    check_metadata(base, g, changed);
    assert_int_equal(plan.n_warnings, used_after < 2 ? 1 : 0);
    kiln_gguf_close(g);
    kiln_gguf_close(base);
    kiln_splice_plan_free(&plan);
}

static void test_keep_experts(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    check_keep("0,2", (const int64_t[]){0, 2}, 2, 2);
    check_keep("3", (const int64_t[]){3}, 1, 1); /* top-2 cannot survive one expert */
    check_keep("2,1-1", (const int64_t[]){1, 2}, 2, 2); /* kept in expert order */
}

/* ---- split files --------------------------------------------------------- */

static void test_split_in_and_out(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    /* Split copies of base and donor (10 tensors per shard). */
    variant v = {.split_max_tensors = 10};
    write_variant(fixture("IQ2_XXS"), kiln_test_tmp_path("sbase.gguf"), &v);
    write_variant(fixture("Q4_K_M"), kiln_test_tmp_path("sdonor.gguf"), &v);
    kiln_splice_opts o = {.base = kiln_test_tmp_path("sbase-00002-of-00005.gguf"), .donor = kiln_test_tmp_path("sdonor-00001-of-00005.gguf"),
                          .output = kiln_test_tmp_path("split-out.gguf"), .layers = "0,3", .experts = true,
                          .split_max_tensors = 16};
    kiln_splice_plan plan;
    splice_ok(&o, &plan);
    kiln_splice_plan_free(&plan);
    /* The same splice of the unsplit files, for comparison. */
    kiln_splice_opts u = {.base = fixture("IQ2_XXS"), .donor = fixture("Q4_K_M"), .output = kiln_test_tmp_path("unsplit.gguf"),
                          .layers = "0,3", .experts = true, .force = true};
    splice_ok(&u, &plan);
    kiln_splice_plan_free(&plan);
    assert_true(kiln_test_exists(kiln_test_tmp_path("split-out-00003-of-00003.gguf")));
    assert_false(kiln_test_exists(kiln_test_tmp_path("split-out.gguf")));
    kiln_gguf *s = open_ok(kiln_test_tmp_path("split-out-00001-of-00003.gguf")), *w = open_ok(kiln_test_tmp_path("unsplit.gguf"));
    assert_int_equal(s->n_shards, 3);
    assert_int_equal(s->n_tensors, w->n_tensors);
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        assert_int_equal(s->tensors[i].type, w->tensors[i].type);
        assert_true(bytes_equal(&s->tensors[i], &w->tensors[i]));
        assert_int_equal(s->tensors[i].shard, i / 16);
    }
    kiln_gguf_close(s);
    kiln_gguf_close(w);
}

/* ---- refusals ------------------------------------------------------------ */

static void test_refusals(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    const char *out = kiln_test_tmp_path("refused.gguf");
    const char *base = fixture("IQ2_XXS"), *q4 = fixture("Q4_K_M");
    kiln_splice_opts o = {.base = base, .donor = q4, .output = out, .experts = true};

    o.donor = kiln_shared_path("golden/gguf/qwen2-Q4_K_M.gguf");
    splice_refused(&o, "donor architecture 'qwen2' differs from the base's 'llama'");
    o.donor = kiln_shared_path("golden/gguf/llama-Q4_K_M.gguf"); /* also "llama", but dense */
    splice_refused(&o, "llama.expert_count: donor has none");

    const char *blocks = kiln_test_tmp_path("blocks5.gguf");
    write_variant(q4, blocks, &(variant){.block_count = 5});
    o.donor = blocks;
    splice_refused(&o, "llama.block_count: donor has 5, base has 4");

    const char *shape = kiln_test_tmp_path("reshaped.gguf");
    write_variant(q4, shape, &(variant){.reshape = "blk.2.ffn_gate_inp.weight"});
    const char *re_inp[] = {"ffn_gate_inp"};
    kiln_splice_opts r = {.base = base, .donor = shape, .output = out, .tensor_regex = re_inp, .n_tensor_regex = 1};
    splice_refused(&r, "blk.2.ffn_gate_inp.weight: shape 128 x 8 differs from the base's 256 x 4");

    const char *dropped = kiln_test_tmp_path("dropped.gguf");
    write_variant(q4, dropped, &(variant){.drop = "blk.1.attn_q.weight"});
    const char *re_q[] = {"attn_q"};
    r = (kiln_splice_opts){.base = base, .donor = dropped, .output = out, .tensor_regex = re_q, .n_tensor_regex = 1};
    splice_refused(&r, "blk.1.attn_q.weight: donor has no such tensor");

    const char *re_none[] = {"no_such_tensor"};
    r = (kiln_splice_opts){.base = base, .donor = q4, .output = out, .tensor_regex = re_none, .n_tensor_regex = 1};
    splice_refused(&r, "matches no tensor");
    r = (kiln_splice_opts){.base = base, .donor = q4, .output = out, .layers = "1", .tensor_regex = re_q,
                           .n_tensor_regex = 1, .experts = true}; /* attn_q is no expert: empty intersection */
    splice_refused(&r, "matches no tensor");
    r = (kiln_splice_opts){.base = base, .donor = q4, .output = out};
    splice_refused(&r, "no selection");

    o.donor = q4;
    o.output = base;
    splice_refused(&o, "output is the input");
    o.output = q4;
    splice_refused(&o, "output is the input");
    char spelled[4200]; /* another spelling of the same file */
    snprintf(spelled, sizeof spelled, "%s/../gguf/mixtral-Q4_K_M.gguf", kiln_shared_path("golden/gguf"));
    o.output = spelled;
    splice_refused(&o, "refusing to overwrite");

    o.output = out;
    o.expert_ids = "1";
    splice_refused(&o, "donor stores it as Q4_K, base as IQ2_XXS");
    o.expert_ids = "4";
    splice_refused(&o, "--expert-ids: 4 is out of range");
    o.expert_ids = NULL;
    o.layers = "4";
    splice_refused(&o, "--layers: 4 is out of range");
    o.layers = NULL;
    o.donor = fixture("f32");
    o.expert_ids = "0";
    o.requantize = true;
    splice_refused(&o, "needs an importance matrix");

    kiln_splice_opts k = {.base = kiln_shared_path("golden/gguf/llama-Q4_K_M.gguf"), .output = out, .keep_experts = "0"};
    splice_refused(&k, "not a mixture of experts");
    k.base = base;
    k.keep_experts = "0,9";
    splice_refused(&k, "out of range");

    /* An existing output needs --force; then it is replaced. */
    kiln_test_write_file(out, "old", 3);
    kiln_splice_opts e = {.base = base, .donor = q4, .output = out, .layers = "0", .experts = true};
    splice_refused(&e, "output exists; use --force");
    assert_int_equal(file_size(out), 3);
    e.force = true;
    kiln_splice_plan plan;
    splice_ok(&e, &plan);
    kiln_splice_plan_free(&plan);
    assert_true(file_size(out) > 3);
    unlink(out);

    /* A directory that does not exist: the writer fails, nothing is left. */
    e.output = kiln_test_tmp_path("no/such/dir.gguf");
    splice_refused(&e, "cannot create");
}

/* ---- the plan ------------------------------------------------------------ */

static void test_plan_json(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    kiln_splice_opts o = {.base = fixture("IQ2_XXS"), .donor = fixture("Q4_K_M"), .layers = "0,3", .experts = true};
    kiln_splice_plan plan;
    kiln_err err = {{0}};
    if (kiln_splice_plan_make(&o, &plan, &err) < 0) fail_msg("%s", err.msg);
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    kiln_splice_print_plan_json(mem, &plan);
    fclose(mem);
    assert_non_null(strstr(buf, "\"schema\": \"kiln.splice/1\""));
    assert_non_null(strstr(buf, "\"tensors_changed\": 6"));
    /* Totals straight from the two files. */
    kiln_gguf *b = open_ok(fixture("IQ2_XXS")), *d = open_ok(fixture("Q4_K_M"));
    uint64_t before = 0, after = 0;
    for (uint64_t i = 0; i < b->n_tensors; i++) {
        char *name = kiln_str_dup(b->tensors[i].name);
        int64_t l = kiln_tensor_layer(name);
        bool take = kiln_splice_is_expert_tensor(name) && (l == 0 || l == 3);
        before += b->tensors[i].nbytes;
        after += take ? kiln_gguf_find_tensor(d, name)->nbytes : b->tensors[i].nbytes;
        free(name);
    }
    char want[128];
    snprintf(want, sizeof want, "\"bytes_before\": %llu", (unsigned long long)before);
    assert_non_null(strstr(buf, want));
    snprintf(want, sizeof want, "\"delta_bytes\": %lld", (long long)(after - before));
    assert_non_null(strstr(buf, want));
    free(buf);
    buf = NULL;
    mem = open_memstream(&buf, &len);
    kiln_splice_print_plan(mem, &plan);
    fclose(mem);
    assert_non_null(strstr(buf, "blk.3.ffn_down_exps.weight"));
    assert_non_null(strstr(buf, "bits per weight:"));
    free(buf);
    kiln_gguf_close(b);
    kiln_gguf_close(d);
    kiln_splice_plan_free(&plan);
}

static int cleanup(void **state) {
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", kiln_test_tmpdir());
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xxh64),
        cmocka_unit_test(test_parse_set),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_boosted_layers),
        cmocka_unit_test(test_regex_and_layers),
        cmocka_unit_test(test_expert_slab_copy),
        cmocka_unit_test(test_expert_requantize),
        cmocka_unit_test(test_keep_experts),
        cmocka_unit_test(test_split_in_and_out),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_plan_json),
    };
    return cmocka_run_group_tests(tests, NULL, cleanup);
}
