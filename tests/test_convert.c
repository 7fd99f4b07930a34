/* tests/test_convert.c - `kiln convert` against llama.cpp's own output and
 * against independent expectations:
 *
 *  - every fixture of ../shared/models at every outtype llama.cpp converted
 *    it to (../shared/golden/gguf): same tensors in the same order with the
 *    same shapes and types, byte-identical tensor data, the same metadata
 *    keys in the same order with the same values (provenance keys, which
 *    depend on the input's path, are compared by presence only), and in
 *    fact the same file byte for byte;
 *  - a synthetic model (kiln testmodel) of every architecture: the GGUF
 *    names and shapes an architecture must have, written out here from
 *    config.json; the llama q/k permutation, GPT-2's Conv1D transpose and
 *    Mixtral's expert stacking checked value by value against the source
 *    safetensors with index formulas written here;
 *  - FP8 block-scaled weights against hand-computed values;
 *  - every error path (unknown architecture, missing key, shape mismatch,
 *    index naming a missing shard, tensor missing from the index,
 *    unsupported dtype): one message naming the culprit, no output left;
 *  - the pieces: SentencePiece protobuf reader, pre-tokenizer detection,
 *    gguf-py's model naming and size label. */
#include "shared.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <ftw.h>
#include <jansson.h>
#include <unistd.h>

#include "../convert/convert.h"
#include "../convert/json.h"
#include "../convert/meta.h"
#include "../convert/spm.h"
#include "../testmodel/testmodel.h"
#include "../convert/vocab.h"
#include "../core/fp16.h"
#include "../core/gguf.h"
#include "../core/safetensors.h"
#include "../core/safetensors_write.h"
#include "../core/types.h"

/* Keys whose values come from the input's path or name. */
static const char *const PROVENANCE[] = {"general.name", "general.organization", "general.basename",
                                         "general.finetune", "general.version", NULL};

/* ------------------------------------------------------------------ */
/* helpers                                                             */

static void assert_no_output(const char *out) {
    char t[600];
    snprintf(t, sizeof t, "%s.tmp", out);
    if (kiln_test_exists(out) || kiln_test_exists(t)) fail_msg("%s (or its .tmp) was left behind", out);
}

/* Copies the regular files of src into a fresh dst. */
static void copy_dir(const char *src, const char *dst) {
    mkdir(dst, 0755);
    DIR *d = opendir(src);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/%s", src, e->d_name);
        snprintf(b, sizeof b, "%s/%s", dst, e->d_name);
        size_t n;
        uint8_t *buf = kiln_test_read_file(a, &n);
        assert_non_null(buf);
        kiln_test_write_file(b, buf, n);
        free(buf);
    }
    closedir(d);
}

static json_t *load_json(const char *dir, const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    json_t *j = json_load_file(p, 0, NULL);
    if (!j) fail_msg("cannot read %s", p);
    return j;
}

static void save_json(const char *dir, const char *name, json_t *j) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    assert_int_equal(json_dump_file(j, p, JSON_INDENT(2)), 0);
}

static int64_t cfg_int(json_t *cfg, const char *key) {
    json_t *v = json_object_get(cfg, key);
    if (!json_is_integer(v)) fail_msg("config.json: %s is not an integer", key);
    return json_integer_value(v);
}

static bool value_eq(const kiln_value *a, const kiln_value *b) {
    if (a->type != b->type) return false;
    if (a->type == KILN_GGUF_STRING) return a->str.len == b->str.len && !memcmp(a->str.ptr, b->str.ptr, a->str.len);
    if (a->type != KILN_GGUF_ARRAY) return !memcmp(&a->u64, &b->u64, kiln_gguf_vtype_size(a->type));
    if (a->arr.type != b->arr.type || a->arr.n != b->arr.n) return false;
    if (a->arr.type == KILN_GGUF_STRING) {
        for (uint64_t i = 0; i < a->arr.n; i++)
            if (a->arr.strs[i].len != b->arr.strs[i].len ||
                memcmp(a->arr.strs[i].ptr, b->arr.strs[i].ptr, a->arr.strs[i].len))
                return false;
        return true;
    }
    if (a->arr.type == KILN_GGUF_ARRAY) return false; /* nested arrays: not written by the converter */
    return !memcmp(a->arr.data, b->arr.data, a->arr.n * kiln_gguf_vtype_size(a->arr.type));
}

static bool is_provenance(kiln_str key) {
    for (int i = 0; PROVENANCE[i]; i++)
        if (kiln_str_eq(key, PROVENANCE[i])) return true;
    return false;
}

/* kiln's GGUF against llama.cpp's: tensors and metadata, as described at
 * the top of this file. */
static void compare_gguf(const char *mine_path, const char *gold_path) {
    kiln_err err = {{0}};
    kiln_gguf *m = kiln_gguf_open(mine_path, &err);
    if (!m) fail_msg("%s", err.msg);
    kiln_gguf *g = kiln_gguf_open(gold_path, &err);
    if (!g) fail_msg("%s", err.msg);
    assert_int_equal(m->n_tensors, g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kiln_tensor *a = &m->tensors[i], *b = &g->tensors[i];
        if (a->name.len != b->name.len || memcmp(a->name.ptr, b->name.ptr, a->name.len))
            fail_msg("tensor %llu: %.*s, llama.cpp has %.*s", (unsigned long long)i, (int)a->name.len, a->name.ptr,
                     (int)b->name.len, b->name.ptr);
        assert_int_equal(a->type, b->type);
        assert_int_equal(a->n_dims, b->n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(a->ne[d], b->ne[d]);
        assert_int_equal(a->nbytes, b->nbytes);
        if (memcmp(a->data, b->data, a->nbytes))
            fail_msg("tensor %.*s: data differs from llama.cpp's", (int)a->name.len, a->name.ptr);
    }
    assert_int_equal(m->n_kv, g->n_kv);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const kiln_kv *a = &m->kv[i], *b = &g->kv[i];
        if (a->key.len != b->key.len || memcmp(a->key.ptr, b->key.ptr, a->key.len))
            fail_msg("key %llu: %.*s, llama.cpp has %.*s", (unsigned long long)i, (int)a->key.len, a->key.ptr,
                     (int)b->key.len, b->key.ptr);
        if (!is_provenance(b->key) && !value_eq(&a->val, &b->val))
            fail_msg("key %.*s: value differs from llama.cpp's", (int)b->key.len, b->key.ptr);
    }
    kiln_gguf_close(m);
    kiln_gguf_close(g);
    size_t la, lb;
    uint8_t *x = kiln_test_read_file(mine_path, &la), *y = kiln_test_read_file(gold_path, &lb);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(la, lb);
    assert_memory_equal(x, y, la);
    free(x);
    free(y);
}

static void fixture_case(const char *fixture, const char *outtype) {
    SKIP_WITHOUT_SHARED();
    char model[300], gold[300], out[600];
    snprintf(model, sizeof model, "models/%s", fixture);
    snprintf(gold, sizeof gold, "golden/gguf/%s-%s.gguf", fixture, outtype);
    snprintf(out, sizeof out, "%s/%s-%s.gguf", kiln_test_tmpdir(), fixture, outtype);
    kiln_convert_opts o = {.outtype = (kiln_outtype)kiln_outtype_parse(outtype)};
    kiln_write_opts wo = {.force = true};
    kiln_err err = {{0}};
    if (kiln_convert(kiln_shared_path(model), out, &o, &wo, NULL, NULL, &err) < 0) fail_msg("%s", err.msg);
    compare_gguf(out, kiln_shared_path(gold));
    unlink(out);
}

static void test_llama_f32(void **s) { (void)s, fixture_case("llama", "f32"); }
static void test_llama_f16(void **s) { (void)s, fixture_case("llama", "f16"); }
static void test_llama_bf16(void **s) { (void)s, fixture_case("llama", "bf16"); }
static void test_llama_q8_0(void **s) { (void)s, fixture_case("llama", "q8_0"); }
static void test_mixtral_f32(void **s) { (void)s, fixture_case("mixtral", "f32"); }
static void test_qwen2_f32(void **s) { (void)s, fixture_case("qwen2", "f32"); }
static void test_qwen2_f16(void **s) { (void)s, fixture_case("qwen2", "f16"); }

/* ------------------------------------------------------------------ */
/* synthetic models of every architecture                              */

typedef struct want {
    char name[96];
    uint32_t n_dims;
    int64_t ne[3];
} want;

typedef struct wants {
    want w[512];
    int n;
} wants;

static void add(wants *ws, const char *name, uint32_t nd, int64_t a, int64_t b, int64_t c) {
    want *w = &ws->w[ws->n++];
    snprintf(w->name, sizeof w->name, "%s", name);
    w->n_dims = nd;
    w->ne[0] = a, w->ne[1] = b, w->ne[2] = c;
}

static void addl(wants *ws, int layer, const char *name, uint32_t nd, int64_t a, int64_t b, int64_t c) {
    char n[96];
    snprintf(n, sizeof n, "blk.%d.%s", layer, name);
    add(ws, n, nd, a, b, c);
}

/* What each architecture's GGUF must hold, in ggml order (ne[0] first),
 * from llama.cpp's tensor lists for llama, qwen2, qwen3, qwen2moe,
 * qwen3moe and gpt2. */
static void expected_tensors(kiln_tm_arch arch, json_t *cfg, wants *ws) {
    bool gpt2 = arch == KILN_TM_GPT2;
    int64_t h = cfg_int(cfg, gpt2 ? "n_embd" : "hidden_size"), v = cfg_int(cfg, "vocab_size");
    int64_t layers = cfg_int(cfg, gpt2 ? "n_layer" : "num_hidden_layers");
    ws->n = 0;
    if (gpt2) {
        int64_t ff = cfg_int(cfg, "n_inner"), pos = cfg_int(cfg, "n_positions");
        add(ws, "token_embd.weight", 2, h, v, 0);
        add(ws, "position_embd.weight", 2, h, pos, 0);
        add(ws, "output_norm.weight", 1, h, 0, 0);
        add(ws, "output_norm.bias", 1, h, 0, 0);
        for (int l = 0; l < layers; l++) {
            addl(ws, l, "attn_norm.weight", 1, h, 0, 0), addl(ws, l, "attn_norm.bias", 1, h, 0, 0);
            addl(ws, l, "attn_qkv.weight", 2, h, 3 * h, 0), addl(ws, l, "attn_qkv.bias", 1, 3 * h, 0, 0);
            addl(ws, l, "attn_output.weight", 2, h, h, 0), addl(ws, l, "attn_output.bias", 1, h, 0, 0);
            addl(ws, l, "ffn_norm.weight", 1, h, 0, 0), addl(ws, l, "ffn_norm.bias", 1, h, 0, 0);
            addl(ws, l, "ffn_up.weight", 2, h, ff, 0), addl(ws, l, "ffn_up.bias", 1, ff, 0, 0);
            addl(ws, l, "ffn_down.weight", 2, ff, h, 0), addl(ws, l, "ffn_down.bias", 1, h, 0, 0);
        }
        return;
    }
    int64_t heads = cfg_int(cfg, "num_attention_heads"), kvh = cfg_int(cfg, "num_key_value_heads");
    int64_t hd = json_is_integer(json_object_get(cfg, "head_dim")) ? cfg_int(cfg, "head_dim") : h / heads;
    int64_t q = heads * hd, kv = kvh * hd;
    bool moe = kiln_tm_arch_is_moe(arch), qwen = arch == KILN_TM_QWEN2 || arch == KILN_TM_QWEN2MOE;
    bool qk_norm = arch == KILN_TM_QWEN3 || arch == KILN_TM_QWEN3MOE;
    add(ws, "token_embd.weight", 2, h, v, 0);
    if (!json_is_true(json_object_get(cfg, "tie_word_embeddings"))) add(ws, "output.weight", 2, h, v, 0);
    add(ws, "output_norm.weight", 1, h, 0, 0);
    for (int l = 0; l < layers; l++) {
        addl(ws, l, "attn_norm.weight", 1, h, 0, 0);
        addl(ws, l, "attn_q.weight", 2, h, q, 0);
        addl(ws, l, "attn_k.weight", 2, h, kv, 0);
        addl(ws, l, "attn_v.weight", 2, h, kv, 0);
        addl(ws, l, "attn_output.weight", 2, q, h, 0);
        addl(ws, l, "ffn_norm.weight", 1, h, 0, 0);
        if (qwen) {
            addl(ws, l, "attn_q.bias", 1, q, 0, 0), addl(ws, l, "attn_k.bias", 1, kv, 0, 0);
            addl(ws, l, "attn_v.bias", 1, kv, 0, 0);
        }
        if (qk_norm) addl(ws, l, "attn_q_norm.weight", 1, hd, 0, 0), addl(ws, l, "attn_k_norm.weight", 1, hd, 0, 0);
        if (!moe) {
            int64_t ff = cfg_int(cfg, "intermediate_size");
            addl(ws, l, "ffn_gate.weight", 2, h, ff, 0), addl(ws, l, "ffn_up.weight", 2, h, ff, 0);
            addl(ws, l, "ffn_down.weight", 2, ff, h, 0);
            continue;
        }
        bool mixtral = arch == KILN_TM_MIXTRAL;
        int64_t ne = cfg_int(cfg, mixtral ? "num_local_experts" : "num_experts");
        int64_t ff = cfg_int(cfg, mixtral ? "intermediate_size" : "moe_intermediate_size");
        addl(ws, l, "ffn_gate_inp.weight", 2, h, ne, 0);
        addl(ws, l, "ffn_gate_exps.weight", 3, h, ff, ne), addl(ws, l, "ffn_up_exps.weight", 3, h, ff, ne);
        addl(ws, l, "ffn_down_exps.weight", 3, ff, h, ne);
        if (arch == KILN_TM_QWEN2MOE) {
            int64_t fs = cfg_int(cfg, "shared_expert_intermediate_size");
            addl(ws, l, "ffn_gate_shexp.weight", 2, h, fs, 0), addl(ws, l, "ffn_up_shexp.weight", 2, h, fs, 0);
            addl(ws, l, "ffn_down_shexp.weight", 2, fs, h, 0), addl(ws, l, "ffn_gate_inp_shexp.weight", 2, h, 1, 0);
        }
    }
}

static const char *ARCH_GGUF[KILN_TM_ARCH_COUNT] = {
    [KILN_TM_LLAMA] = "llama", [KILN_TM_MISTRAL] = "llama", [KILN_TM_QWEN2] = "qwen2",
    [KILN_TM_QWEN3] = "qwen3", [KILN_TM_MIXTRAL] = "llama", [KILN_TM_QWEN2MOE] = "qwen2moe",
    [KILN_TM_QWEN3MOE] = "qwen3moe", [KILN_TM_GPT2] = "gpt2",
};

/* Writes a synthetic model of `arch` to DIR/NAME; returns the directory. */
static const char *make_model(kiln_tm_arch arch, kiln_st_dtype dtype, const char *name) {
    kiln_tm_config c;
    kiln_err err = {{0}};
    if (kiln_tm_defaults(&c, arch, NULL, &err) < 0) fail_msg("%s", err.msg);
    c.dtype = dtype;
    const char *dir = kiln_test_tmp_path(name);
    kiln_tm_opts o = {.force = true};
    if (kiln_tm_write(&c, dir, &o, NULL, &err) < 0) fail_msg("%s", err.msg);
    return dir;
}

static void check_arch(kiln_tm_arch arch) {
    char name[64], out[600];
    snprintf(name, sizeof name, "tm-%s", kiln_tm_arch_name(arch));
    const char *dir = make_model(arch, KILN_ST_BF16, name);
    snprintf(out, sizeof out, "%s.gguf", dir);
    kiln_convert_opts o = {.outtype = KILN_OUT_AUTO};
    kiln_write_opts wo = {.force = true};
    kiln_err err = {{0}};
    if (kiln_convert(dir, out, &o, &wo, NULL, NULL, &err) < 0) fail_msg("%s: %s", name, err.msg);
    json_t *cfg = load_json(dir, "config.json");
    wants *ws = calloc(1, sizeof *ws);
    expected_tensors(arch, cfg, ws);
    kiln_gguf *g = kiln_gguf_open(out, &err);
    if (!g) fail_msg("%s", err.msg);
    if ((int)g->n_tensors != ws->n) fail_msg("%s: %llu tensors, expected %d", name, (unsigned long long)g->n_tensors, ws->n);
    for (int i = 0; i < ws->n; i++) {
        const kiln_tensor *t = kiln_gguf_find_tensor(g, ws->w[i].name);
        if (!t) fail_msg("%s: no tensor %s", name, ws->w[i].name);
        if (t->n_dims != ws->w[i].n_dims) fail_msg("%s: %s has %u dims", name, ws->w[i].name, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (t->ne[d] != ws->w[i].ne[d])
                fail_msg("%s: %s ne[%u] = %lld, expected %lld", name, ws->w[i].name, d, (long long)t->ne[d],
                         (long long)ws->w[i].ne[d]);
        /* auto keeps BF16 for matrices; llama.cpp keeps 1-D tensors, norms,
         * routers and positions in F32 */
        bool f32 = t->n_dims == 1 || strstr(ws->w[i].name, "gate_inp") || strstr(ws->w[i].name, "position_embd");
        if (t->type != (f32 ? KILN_F32 : KILN_BF16))
            fail_msg("%s: %s is %s", name, ws->w[i].name, kiln_type_name(t->type));
    }
    kiln_str arch_s;
    assert_true(kiln_gguf_get_str(g, "general.architecture", &arch_s));
    assert_true(kiln_str_eq(arch_s, ARCH_GGUF[arch]));
    char key[96];
    uint64_t blocks = 0;
    snprintf(key, sizeof key, "%s.block_count", ARCH_GGUF[arch]);
    assert_true(kiln_gguf_get_u64(g, key, &blocks));
    assert_int_equal(blocks, cfg_int(cfg, arch == KILN_TM_GPT2 ? "n_layer" : "num_hidden_layers"));
    snprintf(key, sizeof key, "%s.feed_forward_length", ARCH_GGUF[arch]);
    uint64_t ff = 0;
    assert_true(kiln_gguf_get_u64(g, key, &ff));
    assert_int_equal(ff, cfg_int(cfg, arch == KILN_TM_GPT2 ? "n_inner" : "intermediate_size"));
    kiln_gguf_close(g);
    json_decref(cfg);
    free(ws);
    unlink(out);
}

static void test_arch_llama(void **s) { (void)s, check_arch(KILN_TM_LLAMA); }
static void test_arch_mistral(void **s) { (void)s, check_arch(KILN_TM_MISTRAL); }
static void test_arch_qwen2(void **s) { (void)s, check_arch(KILN_TM_QWEN2); }
static void test_arch_qwen3(void **s) { (void)s, check_arch(KILN_TM_QWEN3); }
static void test_arch_mixtral(void **s) { (void)s, check_arch(KILN_TM_MIXTRAL); }
static void test_arch_qwen2moe(void **s) { (void)s, check_arch(KILN_TM_QWEN2MOE); }
static void test_arch_qwen3moe(void **s) { (void)s, check_arch(KILN_TM_QWEN3MOE); }
static void test_arch_gpt2(void **s) { (void)s, check_arch(KILN_TM_GPT2); }

/* ------------------------------------------------------------------ */
/* transforms, value by value                                          */

typedef struct pair {
    kiln_st *st;
    kiln_gguf *g;
    char out[600];
} pair;

/* Converts a BF16 synthetic model to F32 (exact) and opens both sides. */
static void open_pair(kiln_tm_arch arch, const char *name, pair *p) {
    const char *dir = make_model(arch, KILN_ST_BF16, name);
    snprintf(p->out, sizeof p->out, "%s.gguf", dir);
    kiln_convert_opts o = {.outtype = KILN_OUT_F32};
    kiln_write_opts wo = {.force = true};
    kiln_err err = {{0}};
    if (kiln_convert(dir, p->out, &o, &wo, NULL, NULL, &err) < 0) fail_msg("%s", err.msg);
    if (!(p->st = kiln_st_open(dir, &err))) fail_msg("%s", err.msg);
    if (!(p->g = kiln_gguf_open(p->out, &err))) fail_msg("%s", err.msg);
}

static void close_pair(pair *p) {
    kiln_st_close(p->st);
    kiln_gguf_close(p->g);
    unlink(p->out);
}

static float src_at(const kiln_st_tensor *t, int64_t i) {
    uint16_t h;
    memcpy(&h, t->data + 2 * i, 2);
    return kiln_bf16_to_fp32(h);
}

static float out_at(const kiln_tensor *t, int64_t i) {
    float f;
    memcpy(&f, t->data + 4 * i, 4);
    return f;
}

/* HF's q/k layout [n_head, 2, half, cols] becomes [n_head, half, 2, cols]
 * in GGUF: output row (h, i, j) holds source row (h, j, i). */
static void check_permuted(pair *p, const char *hf, const char *gguf, int64_t n_head) {
    const kiln_st_tensor *s = kiln_st_find(p->st, hf);
    const kiln_tensor *t = kiln_gguf_find_tensor(p->g, gguf);
    assert_non_null(s);
    assert_non_null(t);
    assert_int_equal(t->type, KILN_F32);
    int64_t rows = s->shape[0], cols = s->shape[1], half = rows / n_head / 2;
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t i = 0; i < half; i++)
            for (int64_t j = 0; j < 2; j++) {
                int64_t out_row = (h * half + i) * 2 + j, src_row = (h * 2 + j) * half + i;
                for (int64_t c = 0; c < cols; c++)
                    if (out_at(t, out_row * cols + c) != src_at(s, src_row * cols + c))
                        fail_msg("%s row %lld col %lld is not source row %lld", gguf, (long long)out_row,
                                 (long long)c, (long long)src_row);
            }
}

static void test_llama_permutation(void **state) {
    (void)state;
    pair p;
    open_pair(KILN_TM_LLAMA, "perm-llama", &p);
    check_permuted(&p, "model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight", 4);
    check_permuted(&p, "model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight", 2);
    /* v is not permuted */
    const kiln_st_tensor *s = kiln_st_find(p.st, "model.layers.0.self_attn.v_proj.weight");
    const kiln_tensor *t = kiln_gguf_find_tensor(p.g, "blk.0.attn_v.weight");
    for (int64_t i = 0; i < s->nelements; i++) assert_true(out_at(t, i) == src_at(s, i));
    close_pair(&p);
}

static void test_gpt2_transpose(void **state) {
    (void)state;
    pair p;
    open_pair(KILN_TM_GPT2, "tr-gpt2", &p);
    const char *names[][2] = {{"transformer.h.0.attn.c_attn.weight", "blk.0.attn_qkv.weight"},
                              {"transformer.h.1.mlp.c_proj.weight", "blk.1.ffn_down.weight"}};
    for (int k = 0; k < 2; k++) {
        const kiln_st_tensor *s = kiln_st_find(p.st, names[k][0]);
        const kiln_tensor *t = kiln_gguf_find_tensor(p.g, names[k][1]);
        assert_non_null(s);
        assert_non_null(t);
        int64_t in = s->shape[0], out = s->shape[1];
        assert_int_equal(t->ne[0], in);
        assert_int_equal(t->ne[1], out);
        for (int64_t o = 0; o < out; o++)
            for (int64_t i = 0; i < in; i++)
                if (out_at(t, o * in + i) != src_at(s, i * out + o)) fail_msg("%s: (%lld, %lld) not transposed",
                                                                              names[k][1], (long long)o, (long long)i);
    }
    close_pair(&p);
}

static void test_mixtral_stacking(void **state) {
    (void)state;
    pair p;
    open_pair(KILN_TM_MIXTRAL, "stack-mixtral", &p);
    const char *kinds[][2] = {{"w1", "ffn_gate_exps"}, {"w2", "ffn_down_exps"}, {"w3", "ffn_up_exps"}};
    for (int k = 0; k < 3; k++) {
        char gname[64];
        snprintf(gname, sizeof gname, "blk.1.%s.weight", kinds[k][1]);
        const kiln_tensor *t = kiln_gguf_find_tensor(p.g, gname);
        assert_non_null(t);
        for (int64_t e = 0; e < t->ne[2]; e++) {
            char hf[128];
            snprintf(hf, sizeof hf, "model.layers.1.block_sparse_moe.experts.%lld.%s.weight", (long long)e, kinds[k][0]);
            const kiln_st_tensor *s = kiln_st_find(p.st, hf);
            assert_non_null(s);
            assert_int_equal(s->nelements, t->ne[0] * t->ne[1]);
            for (int64_t i = 0; i < s->nelements; i++)
                if (out_at(t, e * s->nelements + i) != src_at(s, i)) fail_msg("%s expert %lld differs", gname, (long long)e);
        }
    }
    close_pair(&p);
}

/* Packs the regular files of `dir` into a .tar.gz under the folder
 * name `top`. */
static void make_targz(const char *dir, const char *top, const char *path) {
    struct archive *a = archive_write_new();
    assert_non_null(a);
    archive_write_add_filter_gzip(a);
    archive_write_set_format_pax_restricted(a);
    assert_int_equal(archive_write_open_filename(a, path), ARCHIVE_OK);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char src[1024], name[1024];
        snprintf(src, sizeof src, "%s/%s", dir, e->d_name);
        snprintf(name, sizeof name, "%s/%s", top, e->d_name);
        size_t n;
        uint8_t *buf = kiln_test_read_file(src, &n);
        assert_non_null(buf);
        struct archive_entry *ae = archive_entry_new();
        archive_entry_set_pathname(ae, name);
        archive_entry_set_size(ae, (la_int64_t)n);
        archive_entry_set_filetype(ae, AE_IFREG);
        archive_entry_set_perm(ae, 0644);
        assert_int_equal(archive_write_header(a, ae), ARCHIVE_OK);
        assert_int_equal(archive_write_data(a, buf, n), (la_ssize_t)n);
        archive_entry_free(ae);
        free(buf);
    }
    closedir(d);
    assert_int_equal(archive_write_close(a), ARCHIVE_OK);
    archive_write_free(a);
}

/* ------------------------------------------------------------------ */
/* FP8                                                                 */

/* Writes a safetensors file of the given tensors (data in order). */
typedef struct st_t {
    const char *name;
    kiln_st_dtype dtype;
    uint32_t nd;
    int64_t shape[2];
    const void *data;
    uint64_t bytes;
} st_t;

static void write_st(const char *path, const st_t *ts, int n) {
    kiln_err err = {{0}};
    kiln_stw *w = kiln_stw_create(path, NULL, &err);
    if (!w) fail_msg("%s", err.msg);
    for (int i = 0; i < n; i++)
        if (kiln_stw_declare(w, ts[i].name, ts[i].dtype, ts[i].nd, ts[i].shape, &err) < 0) fail_msg("%s", err.msg);
    if (kiln_stw_begin(w, &err) < 0) fail_msg("%s", err.msg);
    int64_t idx;
    int r;
    while ((r = kiln_stw_next(w, &idx, &err)) == 1)
        if (kiln_stw_write(w, ts[idx].data, ts[idx].bytes, &err) < 0) fail_msg("%s", err.msg);
    if (r < 0 || kiln_stw_finish(w, &err) < 0) fail_msg("%s", err.msg);
}

/* config.json without its closing brace: tiny_model appends extra keys and
 * closes it. */
static const char *TINY_CONFIG =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 32, \"num_hidden_layers\": 1,"
    " \"num_attention_heads\": 1, \"vocab_size\": 4, \"max_position_embeddings\": 16, \"rms_norm_eps\": 1e-5";

static const char *tiny_model(const char *name, const char *extra, const st_t *ts, int n) {
    const char *dir = kiln_test_tmp_path(name);
    mkdir(dir, 0755);
    char cfg[1024], p[600];
    snprintf(cfg, sizeof cfg, "%s%s}", TINY_CONFIG, extra);
    snprintf(p, sizeof p, "%s/config.json", dir);
    kiln_test_write_file(p, cfg, strlen(cfg));
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    write_st(p, ts, n);
    return dir;
}

static void test_f8_dequant(void **state) {
    (void)state;
    /* E4M3 bytes and their values, worked out by hand: 0x38 = 1 (exp 7),
     * 0x40 = 2, 0x3c = 1.5 (mantissa 4/8), 0xb8 = -1, 0x01 = 2^-9 (the
     * smallest subnormal), 0x7e = 448 (the largest), 0x30 = 0.5 */
    static const uint8_t codes[7] = {0x38, 0x40, 0x3c, 0xb8, 0x01, 0x7e, 0x30};
    static const float vals[7] = {1.0f, 2.0f, 1.5f, -1.0f, 0.001953125f, 448.0f, 0.5f};
    uint8_t w[4 * 32];
    for (int i = 0; i < 4 * 32; i++) w[i] = codes[i % 7];
    /* block [2, 16]: scale[r / 2][c / 16] */
    float scale[4] = {0.5f, 2.0f, 4.0f, 0.25f}, norm[32];
    for (int i = 0; i < 32; i++) norm[i] = 1.0f;
    /* a q_proj too: permuted (1 head: output row i * 2 + j is source row
     * j * 16 + i) with each row keeping its source row's scales */
    uint8_t q[32 * 32];
    float qscale[16 * 2];
    for (int i = 0; i < 32 * 32; i++) q[i] = codes[(i * 5 + i / 32) % 7];
    for (int i = 0; i < 32; i++) qscale[i] = (float)(1 << (i % 5)) / 4.0f;
    st_t ts[] = {{"model.embed_tokens.weight", KILN_ST_F8_E4M3, 2, {4, 32}, w, sizeof w},
                 {"model.embed_tokens.weight_scale_inv", KILN_ST_F32, 2, {2, 2}, scale, sizeof scale},
                 {"model.layers.0.input_layernorm.weight", KILN_ST_F32, 1, {32, 0}, norm, sizeof norm},
                 {"model.layers.0.self_attn.q_proj.weight", KILN_ST_F8_E4M3, 2, {32, 32}, q, sizeof q},
                 {"model.layers.0.self_attn.q_proj.weight_scale_inv", KILN_ST_F32, 2, {16, 2}, qscale, sizeof qscale}};
    const char *dir = tiny_model("f8", ", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [2, 16]}",
                                 ts, 5);
    kiln_err err = {{0}};
    kiln_convert_opts o = {.outtype = KILN_OUT_AUTO};
    kiln_hf_model *m = kiln_hf_open(dir, &o, &err);
    if (!m) fail_msg("%s", err.msg);
    assert_int_equal(kiln_hf_outtype(m), KILN_OUT_BF16); /* auto: FP8 becomes BF16 */
    assert_int_equal(kiln_hf_n_tensors(m), 3);           /* the scales are consumed */
    kiln_hf_tensor info;
    kiln_hf_tensor_info(m, 0, &info);
    assert_string_equal(info.name, "token_embd.weight");
    assert_int_equal(info.type, KILN_BF16);
    float got[4 * 32];
    assert_int_equal(kiln_hf_read_f32(m, 0, 0, 4, got, &err), 0);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 32; c++) {
            float ref = vals[(r * 32 + c) % 7] * scale[(r / 2) * 2 + c / 16];
            if (got[r * 32 + c] != ref) fail_msg("(%d, %d) = %g, expected %g", r, c, got[r * 32 + c], ref);
        }
    /* rows read out of order agree */
    float row3[32];
    assert_int_equal(kiln_hf_read_f32(m, 0, 3, 1, row3, &err), 0);
    assert_memory_equal(row3, got + 96, sizeof row3);
    kiln_hf_tensor_info(m, 2, &info);
    assert_string_equal(info.name, "blk.0.attn_q.weight");
    float qo[32 * 32];
    assert_int_equal(kiln_hf_read_f32(m, 2, 0, 32, qo, &err), 0);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 2; j++)
            for (int c = 0; c < 32; c++) {
                int src = j * 16 + i, idx = src * 32 + c;
                float ref = vals[(idx * 5 + idx / 32) % 7] * qscale[(src / 2) * 2 + c / 16];
                if (qo[(i * 2 + j) * 32 + c] != ref) fail_msg("q row %d col %d", i * 2 + j, c);
            }
    kiln_hf_close(m);
    /* the same from a .tar.gz, where the scale is read after the stream
     * passed its weight (the spool) */
    const char *tgz = kiln_test_tmp_path("f8.tar.gz");
    make_targz(dir, "f8-model", tgz);
    if (!(m = kiln_hf_open(tgz, &o, &err))) fail_msg("%s", err.msg);
    float again[4 * 32];
    assert_int_equal(kiln_hf_read_f32(m, 0, 0, 4, again, &err), 0);
    assert_memory_equal(again, got, sizeof got);
    kiln_hf_close(m);
}

/* ------------------------------------------------------------------ */
/* error paths                                                         */

static void expect_error(const char *dir, const char *const *needles) {
    const char *out = kiln_test_tmp_path("err-out.gguf");
    unlink(out);
    kiln_convert_opts o = {.outtype = KILN_OUT_F16};
    kiln_err err = {{0}};
    if (kiln_convert(dir, out, &o, NULL, NULL, NULL, &err) == 0) fail_msg("%s converted, expected an error", dir);
    for (int i = 0; needles[i]; i++)
        if (!strstr(err.msg, needles[i])) fail_msg("error '%s' does not mention '%s'", err.msg, needles[i]);
    if (strchr(err.msg, '\n')) fail_msg("error is not one line: %s", err.msg);
    assert_no_output(out);
}

static const char *fixture_copy(const char *name) {
    const char *dir = kiln_test_tmp_path(name);
    copy_dir(kiln_shared_path("models/llama"), dir);
    return dir;
}

static void test_err_unknown_arch(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    const char *dir = fixture_copy("err-arch");
    json_t *cfg = load_json(dir, "config.json");
    json_object_set_new(cfg, "architectures", json_pack("[s]", "FooForCausalLM"));
    save_json(dir, "config.json", cfg);
    json_decref(cfg);
    expect_error(dir, (const char *const[]){"FooForCausalLM", "LlamaForCausalLM", "Qwen3MoeForCausalLM",
                                            "GPT2LMHeadModel", NULL});
}

static void test_err_missing_key(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    const char *dir = fixture_copy("err-key");
    json_t *cfg = load_json(dir, "config.json");
    json_object_del(cfg, "hidden_size");
    save_json(dir, "config.json", cfg);
    json_decref(cfg);
    expect_error(dir, (const char *const[]){"hidden_size", "missing", "model.embed_tokens.weight", NULL});
}

static void test_err_shape(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    const char *dir = fixture_copy("err-shape");
    json_t *cfg = load_json(dir, "config.json");
    json_object_set_new(cfg, "intermediate_size", json_integer(500));
    save_json(dir, "config.json", cfg);
    json_decref(cfg);
    expect_error(dir, (const char *const[]){"intermediate_size", "500", "model.layers.0.mlp.down_proj.weight", NULL});
}

static void test_err_missing_shard(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    const char *dir = fixture_copy("err-shard");
    char p[600];
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    assert_int_equal(unlink(p), 0);
    expect_error(dir, (const char *const[]){"model-00002-of-00002.safetensors", "missing", NULL});
}

static void test_err_not_in_index(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    const char *dir = fixture_copy("err-index");
    json_t *idx = load_json(dir, "model.safetensors.index.json");
    json_object_del(json_object_get(idx, "weight_map"), "lm_head.weight");
    save_json(dir, "model.safetensors.index.json", idx);
    json_decref(idx);
    expect_error(dir, (const char *const[]){"lm_head.weight", "missing from model.safetensors.index.json", NULL});
}

static void test_err_dtype(void **state) {
    (void)state;
    int32_t ids[4 * 32] = {0};
    float norm[32] = {0};
    st_t ts[] = {{"model.embed_tokens.weight", KILN_ST_I32, 2, {4, 32}, ids, sizeof ids},
                 {"model.layers.0.input_layernorm.weight", KILN_ST_F32, 1, {32, 0}, norm, sizeof norm}};
    expect_error(tiny_model("err-dtype", "", ts, 2),
                 (const char *const[]){"model.embed_tokens.weight", "unsupported dtype I32", NULL});
}

static void test_err_pre_tokenizer(void **state) {
    (void)state;
    const char *dir = make_model(KILN_TM_QWEN2, KILN_ST_BF16, "err-pre");
    json_t *tok = load_json(dir, "tokenizer.json");
    json_object_set_new(tok, "pre_tokenizer", json_pack("{s:s, s:s}", "type", "Metaspace", "replacement", "_"));
    save_json(dir, "tokenizer.json", tok);
    json_decref(tok);
    expect_error(dir, (const char *const[]){"pre_tokenizer", "Metaspace", "qwen2", "--pre-tokenizer", NULL});
    /* the override makes it convert */
    const char *out = kiln_test_tmp_path("pre-override.gguf");
    kiln_convert_opts o = {.outtype = KILN_OUT_F16, .pre_tokenizer = "qwen2"};
    kiln_write_opts wo = {.force = true};
    kiln_err err = {{0}};
    if (kiln_convert(dir, out, &o, &wo, NULL, NULL, &err) < 0) fail_msg("%s", err.msg);
    unlink(out);
}

/* A token id no real vocabulary reaches is refused before anything its
 * size is allocated (the fuzzer found an id of 2e9 asking for 16 GB), with
 * the field named. (A huge config vocab_size is caught by the tensor shapes
 * first, and by cv_tokens_init's limit in any case.) */
static void test_err_huge_vocab(void **state) {
    (void)state;
    const char *dir = make_model(KILN_TM_QWEN2, KILN_ST_BF16, "err-huge-id");
    json_t *tok = load_json(dir, "tokenizer.json");
    json_object_set_new(json_object_get(json_object_get(tok, "model"), "vocab"), "huge", json_integer(2000000000));
    save_json(dir, "tokenizer.json", tok);
    json_decref(tok);
    expect_error(dir, (const char *const[]){"tokenizer.json", "model.vocab", "bad id for 'huge'", NULL});
}

/* An SPM-style tokenizer.json (BPE with byte fallback) is exported as a
 * "llama" vocab the way gguf-py's LlamaHfVocab does: base tokens in id
 * order, all scored -1000, <0xXX> BYTE, the special tokens CONTROL, then
 * added tokens past the base vocab (USER_DEFINED unless special). */
static void llama_hf_vocab_case(const char *TC, const int want_type[9]) {
    float embd[4 * 32] = {0}, norm[32] = {0};
    st_t ts[] = {{"model.embed_tokens.weight", KILN_ST_F32, 2, {4, 32}, embd, sizeof embd},
                 {"model.layers.0.input_layernorm.weight", KILN_ST_F32, 1, {32, 0}, norm, sizeof norm}};
    const char *dir = tiny_model("hfvocab", "", ts, 2);
    static const char *TOK =
        "{\"version\": \"1.0\", \"added_tokens\": ["
        "{\"id\": 0, \"content\": \"<unk>\", \"special\": true, \"normalized\": false},"
        "{\"id\": 1, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
        "{\"id\": 2, \"content\": \"</s>\", \"special\": true, \"normalized\": false},"
        "{\"id\": 8, \"content\": \"<extra>\", \"special\": false, \"normalized\": false}],"
        " \"pre_tokenizer\": null, \"decoder\": {\"type\": \"Sequence\", \"decoders\": []},"
        " \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"<unk>\": 0, \"<s>\": 1,"
        " \"</s>\": 2, \"<0x00>\": 3, \"<0x01>\": 4, \"\u2581a\": 5, \"b\": 6, \"\u2581ab\": 7},"
        " \"merges\": [\"\u2581a b\"]}}";
    char p[600];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    kiln_test_write_file(p, TOK, strlen(TOK));
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    kiln_test_write_file(p, TC, strlen(TC));
    const char *out = kiln_test_tmp_path("hfvocab.gguf");
    kiln_convert_opts o = {.outtype = KILN_OUT_F32};
    kiln_write_opts wo = {.force = true};
    kiln_err err = {{0}};
    if (kiln_convert(dir, out, &o, &wo, NULL, NULL, &err) < 0) fail_msg("%s", err.msg);
    kiln_gguf *g = kiln_gguf_open(out, &err);
    assert_non_null(g);
    kiln_str sv;
    assert_true(kiln_gguf_get_str(g, "tokenizer.ggml.model", &sv) && kiln_str_eq(sv, "llama"));
    assert_true(kiln_gguf_get_str(g, "tokenizer.ggml.pre", &sv) && kiln_str_eq(sv, "default"));
    const kiln_array *toks = kiln_gguf_get_arr(g, "tokenizer.ggml.tokens", KILN_GGUF_STRING);
    const kiln_array *scores = kiln_gguf_get_arr(g, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32);
    const kiln_array *types = kiln_gguf_get_arr(g, "tokenizer.ggml.token_type", KILN_GGUF_INT32);
    static const char *const want_tok[] = {"<unk>", "<s>", "</s>", "<0x00>", "<0x01>", "\xe2\x96\x81" "a", "b",
                                           "\xe2\x96\x81" "ab", "<extra>"};
    assert_non_null(toks);
    assert_int_equal(toks->n, 9);
    for (int i = 0; i < 9; i++) {
        assert_true(kiln_str_eq(toks->strs[i], want_tok[i]));
        assert_true(kiln_array_f64(scores, (uint64_t)i) == -1000.0);
        assert_int_equal(kiln_array_i64(types, (uint64_t)i), want_type[i]);
    }
    uint64_t id;
    bool b;
    assert_true(kiln_gguf_get_u64(g, "tokenizer.ggml.bos_token_id", &id) && id == 1);
    assert_true(kiln_gguf_get_u64(g, "tokenizer.ggml.eos_token_id", &id) && id == 2);
    assert_true(kiln_gguf_get_u64(g, "tokenizer.ggml.unknown_token_id", &id) && id == 0);
    assert_true(kiln_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) && b);
    assert_null(kiln_gguf_find_kv(g, "tokenizer.ggml.merges")); /* SPM-style: no merges */
    kiln_gguf_close(g);
    unlink(out);
}

static void test_llama_hf_vocab(void **state) {
    (void)state;
    static const int want_type[] = {3, 3, 3, 6, 6, 1, 1, 1, 4};
    llama_hf_vocab_case("{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"unk_token\": \"<unk>\","
                        " \"add_bos_token\": true, \"add_eos_token\": false}",
                        want_type);
}

/* Gemma 3's tokenizer_config.json names more special tokens in
 * extra_special_tokens ({"boi_token": "<start_of_image>", ...}); transformers
 * counts them in all_special_tokens, so llama.cpp marks them CONTROL, in the
 * base vocab ("b" here) and past it ("<extra>"). The same file carries
 * "model_max_length": 1000000000000000019884624838656 as real Llama-2/3
 * configs do, an integer no int64 holds, which must not stop the
 * conversion. */
static void test_llama_hf_vocab_extra_specials(void **state) {
    (void)state;
    static const int want_type[] = {3, 3, 3, 6, 6, 1, 3, 1, 3};
    llama_hf_vocab_case("{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"unk_token\": \"<unk>\","
                        " \"add_bos_token\": true, \"add_eos_token\": false,"
                        " \"model_max_length\": 1000000000000000019884624838656,"
                        " \"extra_special_tokens\": {\"boi_token\": \"b\", \"image_token\": \"<extra>\"}}",
                        want_type);
}

/* ------------------------------------------------------------------ */
/* pieces                                                              */

static void test_spm_reader(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    size_t len;
    uint8_t *buf = kiln_test_read_file(kiln_shared_path("models/llama/tokenizer.model"), &len);
    assert_non_null(buf);
    cv_spm s;
    kiln_err err = {{0}};
    assert_int_equal(cv_spm_parse(buf, len, "tokenizer.model", &s, &err), 0);
    assert_int_equal(s.n, 1024);
    assert_int_equal(s.pieces[0].type, CV_SPM_UNKNOWN);
    assert_int_equal(s.pieces[1].type, CV_SPM_CONTROL);
    assert_int_equal(s.pieces[3].type, CV_SPM_BYTE);
    assert_int_equal(s.pieces[3].len, 6);
    assert_memory_equal(s.pieces[3].text, "<0x00>", 6);
    /* the golden GGUF's tokens past the 3 added ones are the pieces */
    kiln_gguf *g = kiln_gguf_open(kiln_shared_path("golden/gguf/llama-f32.gguf"), &err);
    assert_non_null(g);
    const kiln_array *toks = kiln_gguf_get_arr(g, "tokenizer.ggml.tokens", KILN_GGUF_STRING);
    const kiln_array *scores = kiln_gguf_get_arr(g, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32);
    for (uint32_t i = 3; i < s.n; i++) {
        assert_int_equal(toks->strs[i].len, s.pieces[i].len);
        assert_memory_equal(toks->strs[i].ptr, s.pieces[i].text, s.pieces[i].len);
        assert_true(kiln_array_f64(scores, i) == s.pieces[i].score);
    }
    kiln_gguf_close(g);
    cv_spm_free(&s);
    /* every truncation is an error, never a crash */
    for (size_t cut = 1; cut < 64; cut++) {
        cv_spm t;
        int rc = cv_spm_parse(buf, cut, "tokenizer.model", &t, &err);
        if (rc == 0) cv_spm_free(&t);
        else assert_non_null(strstr(err.msg, "tokenizer.model"));
    }
    /* a length running past the end, a group wire type, no pieces */
    static const uint8_t bad_len[] = {0x0a, 0x7f, 0x0a, 0x01, 'a'};
    static const uint8_t group[] = {0x0b};
    static const uint8_t empty[] = {0x10, 0x01};
    cv_spm t;
    assert_int_equal(cv_spm_parse(bad_len, sizeof bad_len, "x", &t, &err), -1);
    assert_non_null(strstr(err.msg, "past the end"));
    assert_int_equal(cv_spm_parse(group, sizeof group, "x", &t, &err), -1);
    assert_int_equal(cv_spm_parse(empty, sizeof empty, "x", &t, &err), -1);
    assert_non_null(strstr(err.msg, "no pieces"));
    free(buf);
}

static void test_pretok_detection(void **state) {
    (void)state;
    char desc[512];
    json_t *gpt2 = json_pack("{s:{s:s, s:b, s:b, s:b}}", "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0,
                             "trim_offsets", 1, "use_regex", 1);
    assert_string_equal(cv_pretok_detect(gpt2, desc, sizeof desc), "gpt-2");
    json_decref(gpt2);
    /* Llama 3's split, as its tokenizer.json writes it */
    const char *l3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                     "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    json_t *llama3 = json_pack("{s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}}", "pre_tokenizer", "type",
                               "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", l3, "behavior",
                               "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1,
                               "use_regex", 0);
    /* without a BOS template (the first published Llama-3 tokenizer.json)
     * llama.cpp's hash names it smaug-bpe; with one, llama-bpe */
    assert_string_equal(cv_pretok_detect(llama3, desc, sizeof desc), "smaug-bpe");
    /* cl100k_base (GPT-4's, Phi-4's) has that split and 100,000 merges:
     * dbrx, as llama.cpp's hash names it; one merge more is Llama 3's kind */
    json_t *merges = json_array();
    for (int i = 0; i < 100000; i++) json_array_append_new(merges, json_string("a b"));
    json_object_set_new(llama3, "model", json_pack("{s:o}", "merges", merges));
    assert_string_equal(cv_pretok_detect(llama3, desc, sizeof desc), "dbrx");
    json_array_append_new(merges, json_string("a b"));
    assert_string_equal(cv_pretok_detect(llama3, desc, sizeof desc), "smaug-bpe");
    json_object_set_new(llama3, "post_processor",
                        json_pack("{s:s, s:[{s:s}, {s:s, s:[{s:{s:s}}, {s:{s:s}}]}]}", "type", "Sequence", "processors",
                                  "type", "ByteLevel", "type", "TemplateProcessing", "single", "SpecialToken", "id",
                                  "<|begin_of_text|>", "Sequence", "id", "A"));
    assert_string_equal(cv_pretok_detect(llama3, desc, sizeof desc), "llama-bpe");
    json_decref(llama3);
    /* SentencePiece-style BPE (Gemma 3's tokenizer.json): spaces to U+2581
     * by the normalizer, a split after each space, byte fallback: llama.cpp's
     * hash names it granite-embed-multi-311m; without byte fallback it is
     * not that tokenizer */
    json_t *spm = json_pack("{s:{s:s, s:{s:s}, s:s}, s:{s:s, s:{s:s}, s:s, s:b}, s:{s:s, s:b}}", "normalizer", "type",
                            "Replace", "pattern", "String", " ", "content", "\xe2\x96\x81", "pre_tokenizer", "type",
                            "Split", "pattern", "String", " ", "behavior", "MergedWithPrevious", "invert", 0, "model",
                            "type", "BPE", "byte_fallback", 1);
    assert_string_equal(cv_pretok_detect(spm, desc, sizeof desc), "granite-embed-multi-311m");
    json_object_set_new(json_object_get(spm, "model"), "byte_fallback", json_false());
    assert_null(cv_pretok_detect(spm, desc, sizeof desc));
    json_decref(spm);
    json_t *meta = json_pack("{s:{s:s}}", "pre_tokenizer", "type", "Metaspace");
    assert_null(cv_pretok_detect(meta, desc, sizeof desc));
    assert_non_null(strstr(desc, "Metaspace"));
    json_decref(meta);
    assert_true(cv_pretok_known("qwen2"));
    assert_false(cv_pretok_known("no-such-pre"));
    if (!kiln_shared()) return;
    json_t *q = json_load_file(kiln_shared_path("models/qwen2/tokenizer.json"), 0, NULL);
    assert_non_null(q);
    assert_string_equal(cv_pretok_detect(q, desc, sizeof desc), "qwen2"); /* what llama.cpp pinned */
    json_decref(q);
}

/* A Split step (Isolated) and a ByteLevel step, for pre_tokenizer Sequences. */
static json_t *pretok_split(const char *re) {
    return json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex", re, "behavior", "Isolated",
                     "invert", 0);
}
static json_t *pretok_bytelevel(bool use_regex) {
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1,
                     "use_regex", use_regex);
}
static json_t *pretok_seq(json_t *steps) {
    return json_pack("{s:{s:s, s:o}}", "pre_tokenizer", "type", "Sequence", "pretokenizers", steps);
}

/* Signatures longer than the detector holds (more steps, a longer regex)
 * are unknown, said so, and never compared cut short. The same steps or
 * regex without the excess are recognised (the controls). */
static void test_pretok_limits(void **state) {
    (void)state;
    char desc[512];
    json_t *digits = json_pack("{s:s, s:b}", "type", "Digits", "individual_digits", 1);
    /* starcoder: Digits(individual) + ByteLevel(use_regex) */
    json_t *tok = pretok_seq(json_pack("[O, o]", digits, pretok_bytelevel(true)));
    assert_string_equal(cv_pretok_detect(tok, desc, sizeof desc), "starcoder");
    json_decref(tok);
    json_t *steps = json_pack("[O, o]", digits, pretok_bytelevel(true));
    for (int i = 0; i < 8; i++) json_array_append(steps, digits);
    tok = pretok_seq(steps);
    assert_null(cv_pretok_detect(tok, desc, sizeof desc));
    assert_non_null(strstr(desc, "more steps than any known"));
    json_decref(tok);
    json_decref(digits);

    const char *qwen2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
                        "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    tok = pretok_seq(json_pack("[o, o]", pretok_split(qwen2), pretok_bytelevel(false)));
    assert_string_equal(cv_pretok_detect(tok, desc, sizeof desc), "qwen2");
    json_decref(tok);
    char *long_re = malloc(3001);
    assert_non_null(long_re);
    size_t n = strlen(qwen2);
    memcpy(long_re, qwen2, n);
    for (; n < 3000; n++) long_re[n] = n % 2 ? 'x' : '|';
    long_re[n] = 0;
    tok = pretok_seq(json_pack("[o, o]", pretok_split(long_re), pretok_bytelevel(false)));
    assert_null(cv_pretok_detect(tok, desc, sizeof desc));
    json_decref(tok);
    free(long_re);
}

/* Integers no int64 holds are read as reals, wherever they are (nested,
 * negative, in arrays); digits inside strings stay as they are; a value that
 * fits stays an integer, and broken JSON is still an error. */
static void test_json_big_integers(void) {
    static const char *TEXT = "{\"a\": 1000000000000000019884624838656, \"b\": [-99999999999999999999, 7],"
                              " \"c\": \"123456789012345678901234\", \"d\": 9223372036854775807,"
                              " \"e\": {\"f\": 9223372036854775808}, \"g\": \"q\\\"1e400\"}";
    kiln_err err = {{0}};
    json_t *j = cv_json_parse(TEXT, strlen(TEXT), "cfg.json", &err);
    if (!j) fail_msg("%s", err.msg);
    assert_true(json_is_real(json_object_get(j, "a")));
    assert_true(json_real_value(json_object_get(j, "a")) == 1e30);
    assert_true(json_real_value(json_array_get(json_object_get(j, "b"), 0)) == -1e20);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "b"), 1)), 7);
    assert_string_equal(json_string_value(json_object_get(j, "c")), "123456789012345678901234");
    assert_true(json_is_integer(json_object_get(j, "d")));
    assert_true(json_is_real(json_object_get(json_object_get(j, "e"), "f")));
    assert_string_equal(json_string_value(json_object_get(j, "g")), "q\"1e400");
    json_decref(j);
    assert_null(cv_json_parse("{\"a\": 1000000000000000019884624838656,", 38, "cfg.json", &err));
    assert_non_null(strstr(err.msg, "cfg.json"));
}
static void test_json_big_integers_case(void **state) { (void)state, test_json_big_integers(); }

static void test_naming(void **state) {
    (void)state;
    cv_name_parts p;
    /* gguf-py's heuristics, worked through by hand */
    assert_int_equal(cv_model_id_parts("mistralai/Mistral-7B-Instruct-v0.2", 7000000000LL, &p), 0);
    assert_string_equal(p.name, "Mistral-7B-Instruct-v0.2");
    assert_string_equal(p.org, "mistralai");
    assert_string_equal(p.basename, "Mistral");
    assert_string_equal(p.size_label, "7B");
    assert_string_equal(p.finetune, "Instruct");
    assert_string_equal(p.version, "v0.2");
    cv_name_parts_free(&p);
    assert_int_equal(cv_model_id_parts("llama", 2885888, &p), 0);
    assert_string_equal(p.name, "llama");
    assert_null(p.basename); /* too ambiguous */
    assert_null(p.size_label);
    cv_name_parts_free(&p);
    char *t = cv_id_to_title("tiny-llama3b v2");
    assert_string_equal(t, "Tiny Llama3B v2");
    free(t);
    char label[32];
    cv_params pc = {.total = 2885888, .shared = 2885888};
    cv_size_label(&pc, label, sizeof label);
    assert_string_equal(label, "2.9M");
    pc = (cv_params){.total = 4463616, .shared = 1317120, .expert = 786432, .expert_count = 4}; /* mixtral */
    cv_size_label(&pc, label, sizeof label);
    assert_string_equal(label, "4x2.1M");
    pc = (cv_params){.total = 400000};
    cv_size_label(&pc, label, sizeof label);
    assert_string_equal(label, "400K");
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_f32),
        cmocka_unit_test(test_llama_f16),
        cmocka_unit_test(test_llama_bf16),
        cmocka_unit_test(test_llama_q8_0),
        cmocka_unit_test(test_mixtral_f32),
        cmocka_unit_test(test_qwen2_f32),
        cmocka_unit_test(test_qwen2_f16),
        cmocka_unit_test(test_arch_llama),
        cmocka_unit_test(test_arch_mistral),
        cmocka_unit_test(test_arch_qwen2),
        cmocka_unit_test(test_arch_qwen3),
        cmocka_unit_test(test_arch_mixtral),
        cmocka_unit_test(test_arch_qwen2moe),
        cmocka_unit_test(test_arch_qwen3moe),
        cmocka_unit_test(test_arch_gpt2),
        cmocka_unit_test(test_llama_permutation),
        cmocka_unit_test(test_gpt2_transpose),
        cmocka_unit_test(test_mixtral_stacking),
        cmocka_unit_test(test_f8_dequant),
        cmocka_unit_test(test_err_unknown_arch),
        cmocka_unit_test(test_err_missing_key),
        cmocka_unit_test(test_err_shape),
        cmocka_unit_test(test_err_missing_shard),
        cmocka_unit_test(test_err_not_in_index),
        cmocka_unit_test(test_err_dtype),
        cmocka_unit_test(test_err_pre_tokenizer),
        cmocka_unit_test(test_err_huge_vocab),
        cmocka_unit_test(test_llama_hf_vocab),
        cmocka_unit_test(test_llama_hf_vocab_extra_specials),
        cmocka_unit_test(test_spm_reader),
        cmocka_unit_test(test_pretok_detection),
        cmocka_unit_test(test_pretok_limits),
        cmocka_unit_test(test_naming),
        cmocka_unit_test(test_json_big_integers_case),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    /* the synthetic models and outputs take ~70 MB: leave nothing behind */
    if (kiln_test_tmpdir()[0]) nftw(kiln_test_tmpdir(), rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
