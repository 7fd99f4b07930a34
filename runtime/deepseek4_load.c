/* runtime/deepseek4_load.c - opening a deepseek4 GGUF for evaluation: the
 * keys and tensors llama.cpp's llama_model_deepseek4 loader reads
 * (src/models/deepseek4.cpp, load_arch_hparams / load_arch_tensors), with
 * the same shapes, so a malformed file fails here naming the tensor.
 *
 * Refused rather than approximated: a gating function other than
 * sqrtsoftplus, compression ratios other than 0 / 4 / 128, hc_mult other
 * than 4 (llama.cpp asserts it). The MTP block (nextn) is not read: kiln
 * evaluates the trunk. */
#include "deepseek4.h"

#include "model.h"

#include "../core/types.h"
#include "../codec/codec.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "deepseek4." + suffix */
static const kiln_kv *key(const kiln_find *L, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "deepseek4.%s", suffix);
    return kiln_gguf_find_kv(L->g, buf);
}

/* Reads an integer key; required keys fail when absent. 1 read, 0 absent, -1 error. */
static int get_i64(kiln_find *L, const char *suffix, bool required, int64_t *out) {
    char k[128];
    if (!key(L, suffix, k, sizeof k)) {
        if (!required) return 0;
        return kiln_fail(L->err, L->path, k, -1, "missing key");
    }
    if (!kiln_gguf_get_i64(L->g, k, out)) return kiln_fail(L->err, L->path, k, -1, "expected an integer");
    return 1;
}

static int get_f32(kiln_find *L, const char *suffix, bool required, float *out) {
    char k[128];
    if (!key(L, suffix, k, sizeof k)) {
        if (!required) return 0;
        return kiln_fail(L->err, L->path, k, -1, "missing key");
    }
    double v;
    if (!kiln_gguf_get_f64(L->g, k, &v)) return kiln_fail(L->err, L->path, k, -1, "expected a number");
    *out = (float)v;
    return 1;
}

/* Element il of a per-layer key that may also be a scalar (llama.cpp's
 * get_key_or_arr); the array must cover every layer. */
static int get_layer_f64(kiln_find *L, const char *suffix, int64_t il, int64_t n_layer, double *out) {
    char k[128];
    const kiln_kv *kv = key(L, suffix, k, sizeof k);
    if (!kv) return kiln_fail(L->err, L->path, k, -1, "missing key");
    if (kv->val.type != KILN_GGUF_ARRAY) {
        if (!kiln_gguf_get_f64(L->g, k, out)) return kiln_fail(L->err, L->path, k, -1, "expected a number");
        return 0;
    }
    const kiln_array *a = &kv->val.arr;
    if ((int64_t)a->n < n_layer || a->type == KILN_GGUF_STRING || a->type == KILN_GGUF_ARRAY)
        return kiln_fail(L->err, L->path, k, -1, "expected %lld numbers", (long long)n_layer);
    *out = a->type == KILN_GGUF_FLOAT32 || a->type == KILN_GGUF_FLOAT64 ? kiln_array_f64(a, (uint64_t)il)
                                                                        : (double)kiln_array_i64(a, (uint64_t)il);
    return 0;
}

int kiln_ds4_read_hparams(const kiln_gguf *g, const char *path, kiln_hparams *hp, kiln_err *err) {
    kiln_find L = {.g = g, .path = path, .err = err};
    int64_t v_len = 0, gating = 0;
    hp->rope_freq_base = 10000.0f;
    hp->rope_freq_scale = 1.0f;
    hp->rope_attn_factor = 1.0f;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    float factor = 0.0f;
    if (get_i64(&L, "context_length", true, &hp->n_ctx_train) < 0 ||
        get_i64(&L, "embedding_length", true, &hp->n_embd) < 0 || get_i64(&L, "block_count", true, &hp->n_layer) < 0 ||
        get_i64(&L, "attention.head_count", true, &hp->n_head) < 0 ||
        get_i64(&L, "attention.head_count_kv", true, &hp->n_head_kv) < 0 ||
        get_i64(&L, "attention.key_length", true, &hp->head_dim) < 0 ||
        get_i64(&L, "attention.value_length", true, &v_len) < 0 ||
        get_i64(&L, "rope.dimension_count", true, &hp->n_rot) < 0 ||
        get_f32(&L, "attention.layer_norm_rms_epsilon", true, &hp->norm_eps) < 0 ||
        get_f32(&L, "rope.freq_base", false, &hp->rope_freq_base) < 0 ||
        get_f32(&L, "rope.scaling.factor", false, &factor) < 0 ||
        get_f32(&L, "rope.scaling.yarn_beta_fast", false, &hp->yarn_beta_fast) < 0 ||
        get_f32(&L, "rope.scaling.yarn_beta_slow", false, &hp->yarn_beta_slow) < 0 ||
        get_i64(&L, "attention.q_lora_rank", true, &hp->n_lora_q) < 0 ||
        get_i64(&L, "attention.sliding_window", true, &hp->n_swa) < 0 ||
        get_i64(&L, "expert_count", true, &hp->n_expert) < 0 ||
        get_i64(&L, "expert_used_count", true, &hp->n_expert_used) < 0 ||
        get_i64(&L, "expert_feed_forward_length", true, &hp->n_ff_exp) < 0 ||
        get_f32(&L, "expert_weights_scale", true, &hp->expert_weights_scale) < 0 ||
        get_i64(&L, "expert_gating_func", true, &gating) < 0)
        return -1;
    hp->n_ctx_orig = hp->n_ctx_train;
    if (get_i64(&L, "rope.scaling.original_context_length", false, &hp->n_ctx_orig) < 0) return -1;
    char k[128];
    kiln_str type = {"none", 4};
    if (key(&L, "rope.scaling.type", k, sizeof k) && !kiln_gguf_get_str(g, k, &type))
        return kiln_fail(err, path, k, -1, "expected a string");
    hp->rope_yarn = kiln_str_eq(type, "yarn");
    if (!hp->rope_yarn && !kiln_str_eq(type, "none"))
        return kiln_fail(err, path, k, -1, "RoPE scaling '%.*s' is not supported for deepseek4 (yarn, none)",
                         (int)type.len, type.ptr);
    hp->rope_freq_scale = factor > 0.0f && hp->rope_yarn ? 1.0f / factor : 1.0f;
    bool norm_w = false;
    if (key(&L, "expert_weights_norm", k, sizeof k) && !kiln_gguf_get_bool(g, k, &norm_w))
        return kiln_fail(err, path, k, -1, "expected a bool");
    hp->expert_weights_norm = norm_w;
    int64_t n_shared = 0;
    if (get_i64(&L, "expert_shared_count", true, &n_shared) < 0) return -1;
    hp->n_ff_shexp = hp->n_ff_exp * n_shared;
    if (gating != 4) /* LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS */
        return kiln_fail(err, path, "deepseek4.expert_gating_func", -1,
                         "gating function %lld: deepseek4 runs with sqrtsoftplus (4) only", (long long)gating);
    if (hp->n_head_kv != 1 || v_len != hp->head_dim || hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return kiln_fail(err, path, "deepseek4.attention.key_length", -1,
                         "expected one KV head with equal key and value sizes and rope dims within them");
    if (hp->n_expert <= 0 || hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert || hp->n_ff_exp <= 0)
        return kiln_fail(err, path, "deepseek4.expert_used_count", -1, "%lld of %lld experts is invalid",
                         (long long)hp->n_expert_used, (long long)hp->n_expert);
    hp->rope_neox = false; /* LLAMA_ROPE_TYPE_NORM */
    hp->swa_period = 0;    /* every layer's raw cache slides */
    return 0;
}

enum { OPT = KILN_FIND_OPT, REQ = KILN_FIND_REQ, VEC = KILN_FIND_VEC, RAW = KILN_FIND_I32 };

static void find_layer(kiln_find *L, const kiln_hparams *hp, const kiln_ds4 *D, int64_t i, kiln_ds4_layer *y) {
    const int64_t d = hp->n_embd, hd = hp->head_dim, nh = hp->n_head, ql = hp->n_lora_q;
    const int64_t hc_dim = D->hc * d, mix = (2 + D->hc) * D->hc, ne = hp->n_expert, f = hp->n_ff_exp;
    const long long li = (long long)i;
    y->attn_norm = kiln_find_tensor(L, VEC | REQ, d, 1, 1, "blk.%lld.attn_norm.weight", li);
    y->attn_sinks = kiln_find_tensor(L, VEC | REQ, nh, 1, 1, "blk.%lld.attn_sinks.weight", li);
    y->wq_a = kiln_find_tensor(L, REQ, d, ql, 1, "blk.%lld.attn_q_a.weight", li);
    y->q_a_norm = kiln_find_tensor(L, VEC | REQ, ql, 1, 1, "blk.%lld.attn_q_a_norm.weight", li);
    y->wq_b = kiln_find_tensor(L, REQ, ql, nh * hd, 1, "blk.%lld.attn_q_b.weight", li);
    y->wkv = kiln_find_tensor(L, REQ, d, hd, 1, "blk.%lld.attn_kv.weight", li);
    y->kv_norm = kiln_find_tensor(L, VEC | REQ, hd, 1, 1, "blk.%lld.attn_kv_a_norm.weight", li);
    /* stored 2-D: (n_head * hd / o_groups, o_rank * o_groups), group g's
     * rows g * o_rank.. (llama.cpp reshapes it to 3-D) */
    y->wo_a = kiln_find_tensor(L, REQ, nh * hd / D->o_groups, D->o_rank * D->o_groups, 1, "blk.%lld.attn_output_a.weight", li);
    y->wo_b = kiln_find_tensor(L, REQ, D->o_groups * D->o_rank, d, 1, "blk.%lld.attn_output_b.weight", li);
    y->hc_attn_fn = kiln_find_tensor(L, REQ, hc_dim, mix, 1, "blk.%lld.hc_attn_fn.weight", li);
    y->hc_attn_base = kiln_find_tensor(L, VEC | REQ, mix, 1, 1, "blk.%lld.hc_attn_base.weight", li);
    y->hc_attn_scale = kiln_find_tensor(L, VEC | REQ, 3, 1, 1, "blk.%lld.hc_attn_scale.weight", li);
    y->hc_ffn_fn = kiln_find_tensor(L, REQ, hc_dim, mix, 1, "blk.%lld.hc_ffn_fn.weight", li);
    y->hc_ffn_base = kiln_find_tensor(L, VEC | REQ, mix, 1, 1, "blk.%lld.hc_ffn_base.weight", li);
    y->hc_ffn_scale = kiln_find_tensor(L, VEC | REQ, 3, 1, 1, "blk.%lld.hc_ffn_scale.weight", li);
    if (y->ratio != 0) {
        const int64_t coff = y->ratio == 4 ? 2 : 1;
        y->comp.wkv = kiln_find_tensor(L, REQ, d, coff * hd, 1, "blk.%lld.attn_compressor_kv.weight", li);
        y->comp.wgate = kiln_find_tensor(L, REQ, d, coff * hd, 1, "blk.%lld.attn_compressor_gate.weight", li);
        y->comp.ape = kiln_find_tensor(L, REQ, coff * hd, y->ratio, 1, "blk.%lld.attn_compressor_ape.weight", li);
        y->comp.norm = kiln_find_tensor(L, VEC | REQ, hd, 1, 1, "blk.%lld.attn_compressor_norm.weight", li);
    }
    if (y->ratio == 4) {
        const int64_t ih = D->idx_hd, inh = D->idx_heads;
        y->idx_proj = kiln_find_tensor(L, REQ, d, inh, 1, "blk.%lld.indexer.proj.weight", li);
        y->idx_q_b = kiln_find_tensor(L, REQ, ql, inh * ih, 1, "blk.%lld.indexer.attn_q_b.weight", li);
        y->idx_comp.wkv = kiln_find_tensor(L, REQ, d, 2 * ih, 1, "blk.%lld.indexer_compressor_kv.weight", li);
        y->idx_comp.wgate = kiln_find_tensor(L, REQ, d, 2 * ih, 1, "blk.%lld.indexer_compressor_gate.weight", li);
        y->idx_comp.ape = kiln_find_tensor(L, REQ, 2 * ih, 4, 1, "blk.%lld.indexer_compressor_ape.weight", li);
        y->idx_comp.norm = kiln_find_tensor(L, VEC | REQ, ih, 1, 1, "blk.%lld.indexer_compressor_norm.weight", li);
    }
    y->ffn_norm = kiln_find_tensor(L, VEC | REQ, d, 1, 1, "blk.%lld.ffn_norm.weight", li);
    y->ffn_gate_inp = kiln_find_tensor(L, REQ, d, ne, 1, "blk.%lld.ffn_gate_inp.weight", li);
    if (i < D->n_hash_layers)
        y->tid2eid = kiln_find_tensor(L, RAW | REQ, hp->n_expert_used, hp->n_vocab, 1, "blk.%lld.ffn_gate_tid2eid.weight", li);
    else
        y->exp_probs_b = kiln_find_tensor(L, VEC | REQ, ne, 1, 1, "blk.%lld.exp_probs_b.bias", li);
    y->gate_exps = kiln_find_tensor(L, REQ, d, f, ne, "blk.%lld.ffn_gate_exps.weight", li);
    y->up_exps = kiln_find_tensor(L, REQ, d, f, ne, "blk.%lld.ffn_up_exps.weight", li);
    y->down_exps = kiln_find_tensor(L, REQ, f, d, ne, "blk.%lld.ffn_down_exps.weight", li);
    y->gate_shexp = kiln_find_tensor(L, REQ, d, hp->n_ff_shexp, 1, "blk.%lld.ffn_gate_shexp.weight", li);
    y->up_shexp = kiln_find_tensor(L, REQ, d, hp->n_ff_shexp, 1, "blk.%lld.ffn_up_shexp.weight", li);
    y->down_shexp = kiln_find_tensor(L, REQ, hp->n_ff_shexp, d, 1, "blk.%lld.ffn_down_shexp.weight", li);
}

/* The per-layer keys: compression ratios and the SwiGLU clamps. */
static int read_layer_keys(kiln_find *L, const kiln_hparams *hp, kiln_ds4 *D) {
    for (int64_t i = 0; i < hp->n_layer; i++) {
        kiln_ds4_layer *y = &D->layers[i];
        double ratio = 0, ce = 0, cs;
        if (get_layer_f64(L, "attention.compress_ratios", i, hp->n_layer, &ratio) < 0 ||
            get_layer_f64(L, "swiglu_clamp_exp", i, hp->n_layer, &ce) < 0)
            return -1;
        char k[128];
        cs = ce; /* llama.cpp: the shared expert's clamp defaults to the routed one's */
        if (key(L, "swiglu_clamp_shexp", k, sizeof k) && get_layer_f64(L, "swiglu_clamp_shexp", i, hp->n_layer, &cs) < 0)
            return -1;
        y->ratio = (int64_t)ratio;
        y->swiglu_clamp_exp = (float)ce;
        y->swiglu_clamp_shexp = (float)cs;
        if (y->ratio != 0 && y->ratio != 4 && y->ratio != 128)
            return kiln_fail(L->err, L->path, "deepseek4.attention.compress_ratios", i,
                             "ratio %lld (llama.cpp supports 0, 4 and 128)", (long long)y->ratio);
    }
    return 0;
}

int kiln_ds4_load(const kiln_gguf *g, const char *path, kiln_model *m, kiln_err *err) {
    kiln_find L = {.g = g, .path = path, .err = err};
    const kiln_hparams *hp = &m->hp;
    kiln_ds4 *D = calloc(1, sizeof *D);
    if (!D || !(D->layers = calloc((size_t)hp->n_layer, sizeof *D->layers))) {
        free(D);
        return kiln_fail(err, path, NULL, -1, "out of memory");
    }
    m->ds4 = D;
    if (get_i64(&L, "hyper_connection.count", true, &D->hc) < 0 ||
        get_i64(&L, "hyper_connection.sinkhorn_iterations", true, &D->sinkhorn_iters) < 0 ||
        get_f32(&L, "hyper_connection.epsilon", true, &D->hc_eps) < 0 ||
        get_i64(&L, "hash_layer_count", true, &D->n_hash_layers) < 0 ||
        get_i64(&L, "attention.output_group_count", true, &D->o_groups) < 0 ||
        get_i64(&L, "attention.output_lora_rank", true, &D->o_rank) < 0 ||
        get_i64(&L, "attention.indexer.top_k", true, &D->indexer_top_k) < 0 ||
        get_i64(&L, "attention.indexer.head_count", true, &D->idx_heads) < 0 ||
        get_i64(&L, "attention.indexer.key_length", true, &D->idx_hd) < 0 ||
        get_f32(&L, "attention.compress_rope_freq_base", true, &D->compress_rope_base) < 0 ||
        read_layer_keys(&L, hp, D) < 0)
        return -1;
    if (D->hc != 4) /* llama.cpp's build_hc_pre asserts it */
        return kiln_fail(err, path, "deepseek4.hyper_connection.count", -1, "%lld (llama.cpp runs 4)", (long long)D->hc);
    if (D->idx_hd <= hp->n_rot || (D->idx_hd & (D->idx_hd - 1)) || (hp->head_dim & (hp->head_dim - 1)) ||
        D->idx_heads <= 0 || D->indexer_top_k <= 0)
        return kiln_fail(err, path, "deepseek4.attention.indexer.key_length", -1,
                         "indexer heads %lld of %lld, head size %lld: kiln needs power-of-2 heads past the rope dims",
                         (long long)D->idx_heads, (long long)D->idx_hd, (long long)hp->head_dim);
    if (D->o_groups <= 0 || D->o_rank <= 0 || hp->n_head % D->o_groups)
        return kiln_fail(err, path, "deepseek4.attention.output_group_count", -1, "%lld groups of %lld heads",
                         (long long)D->o_groups, (long long)hp->n_head);
    const int64_t d = hp->n_embd;
    m->tok_embd = kiln_find_tensor(&L, REQ, d, hp->n_vocab, 1, "token_embd.weight");
    m->output_norm = kiln_find_tensor(&L, VEC | REQ, d, 1, 1, "output_norm.weight");
    m->output = kiln_find_tensor(&L, REQ, d, hp->n_vocab, 1, "output.weight");
    D->hc_head_fn = kiln_find_tensor(&L, REQ, D->hc * d, D->hc, 1, "output_hc_fn.weight");
    D->hc_head_base = kiln_find_tensor(&L, VEC | REQ, D->hc, 1, 1, "output_hc_base.weight");
    D->hc_head_scale = kiln_find_tensor(&L, VEC | REQ, 1, 1, 1, "output_hc_scale.weight");
    /* kiln_layer entries exist for the generic code (sinks only) */
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return kiln_fail(err, path, NULL, -1, "out of memory");
    for (int64_t i = 0; i < hp->n_layer && !L.failed; i++) {
        find_layer(&L, hp, D, i, &D->layers[i]);
        m->layers[i].attn_sinks = D->layers[i].attn_sinks;
    }
    if (L.failed) return -1;
    for (int64_t i = 0; i < D->n_hash_layers && i < hp->n_layer; i++) { /* expert ids in range */
        const int32_t *ids = (const int32_t *)D->layers[i].tid2eid->data;
        for (int64_t j = 0; j < hp->n_expert_used * hp->n_vocab; j++)
            if (ids[j] < 0 || ids[j] >= hp->n_expert)
                return kiln_fail(err, path, "ffn_gate_tid2eid.weight", j, "expert id %d of %lld experts",
                                 (int)ids[j], (long long)hp->n_expert);
    }
    return 0;
}

void kiln_ds4_free(kiln_ds4 *d) {
    if (!d) return;
    free(d->layers);
    free(d);
}
