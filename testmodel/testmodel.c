/* testmodel/testmodel.c - the synthetic model generator declared in
 * testmodel.h: the architecture table, the tensor plan each architecture
 * defines, config.json and generation_config.json, and the directory
 * writer that ties weights (testmodel_weights.c) and tokenizer
 * (testmodel_tok.c) together. */
#include "testmodel_impl.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/fileio.h"

/* ------------------------------------------------------------------ */
/* architectures                                                       */

enum { MOE_NONE, MOE_MIXTRAL, MOE_QWEN2, MOE_QWEN3 };

typedef struct arch_info {
    const char *name, *cls, *model_type;
    const char *hf_version;
    uint8_t moe, tok;
    bool qkv_bias, qk_norm;
    bool llama3_rope; /* Llama 3.1/3.2 rope_scaling, tied embeddings */
    bool fused;       /* Phi-3: qkv_proj and gate_up_proj */
    bool gemma;       /* Gemma 3: four norms per block, GELU gate, windows */
    double norm_eps, rope_theta;
} arch_info;

/* hf_version is a transformers release that has the class: the fixtures'
 * 4.46.3, or 4.51.0 for Qwen3, which came later. */
static const arch_info ARCH[KILN_TM_ARCH_COUNT] = {
    [KILN_TM_LLAMA] = {"llama", "LlamaForCausalLM", "llama", "4.46.3", MOE_NONE, KILN_TM_TOK_SPM,
                       .norm_eps = 1e-5, .rope_theta = 1e4},
    [KILN_TM_MISTRAL] = {"mistral", "MistralForCausalLM", "mistral", "4.46.3", MOE_NONE, KILN_TM_TOK_SPM,
                         .norm_eps = 1e-5, .rope_theta = 1e6},
    [KILN_TM_QWEN2] = {"qwen2", "Qwen2ForCausalLM", "qwen2", "4.46.3", MOE_NONE, KILN_TM_TOK_QWEN,
                       .qkv_bias = true, .norm_eps = 1e-6, .rope_theta = 1e6},
    [KILN_TM_QWEN3] = {"qwen3", "Qwen3ForCausalLM", "qwen3", "4.51.0", MOE_NONE, KILN_TM_TOK_QWEN,
                       .qk_norm = true, .norm_eps = 1e-6, .rope_theta = 1e6},
    [KILN_TM_MIXTRAL] = {"mixtral", "MixtralForCausalLM", "mixtral", "4.46.3", MOE_MIXTRAL, KILN_TM_TOK_SPM,
                         .norm_eps = 1e-5, .rope_theta = 1e6},
    [KILN_TM_QWEN2MOE] = {"qwen2moe", "Qwen2MoeForCausalLM", "qwen2_moe", "4.46.3", MOE_QWEN2, KILN_TM_TOK_QWEN,
                          .qkv_bias = true, .norm_eps = 1e-6, .rope_theta = 1e6},
    [KILN_TM_QWEN3MOE] = {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe", "4.51.0", MOE_QWEN3, KILN_TM_TOK_QWEN,
                          .qk_norm = true, .norm_eps = 1e-6, .rope_theta = 1e6},
    [KILN_TM_GPT2] = {"gpt2", "GPT2LMHeadModel", "gpt2", "4.46.3", MOE_NONE, KILN_TM_TOK_GPT2, .norm_eps = 1e-5},
    /* a byte-level BPE vocabulary, as Llama 3's (with the qwen2 split rule) */
    [KILN_TM_LLAMA3] = {"llama3", "LlamaForCausalLM", "llama", "4.46.3", MOE_NONE, KILN_TM_TOK_QWEN,
                        .llama3_rope = true, .norm_eps = 1e-5, .rope_theta = 5e5},
    /* Phi-3-mini-4k: fused projections, SentencePiece vocab */
    [KILN_TM_PHI3] = {"phi3", "Phi3ForCausalLM", "phi3", "4.46.3", MOE_NONE, KILN_TM_TOK_SPM, .fused = true,
                      .norm_eps = 1e-5, .rope_theta = 1e4},
    /* Gemma 3 text: q/k norms, 5 sliding layers (window 64, base 1e4) to 1 global */
    [KILN_TM_GEMMA3] = {"gemma3", "Gemma3ForCausalLM", "gemma3_text", "4.50.0", MOE_NONE, KILN_TM_TOK_SPM,
                        .qk_norm = true, .gemma = true, .norm_eps = 1e-6, .rope_theta = 1e6},
};

int kiln_tm_arch_parse(const char *name, kiln_tm_arch *out) {
    for (int a = 0; a < KILN_TM_ARCH_COUNT; a++)
        if (!strcasecmp(name, ARCH[a].name) || !strcmp(name, ARCH[a].cls) || !strcmp(name, ARCH[a].model_type)) {
            *out = (kiln_tm_arch)a;
            return 0;
        }
    return -1;
}

const char *kiln_tm_arch_name(kiln_tm_arch a) { return a < KILN_TM_ARCH_COUNT ? ARCH[a].name : "?"; }
const char *kiln_tm_arch_class(kiln_tm_arch a) { return a < KILN_TM_ARCH_COUNT ? ARCH[a].cls : "?"; }
static enum kiln_tm_tok tok_kind(kiln_tm_arch a) { return a < KILN_TM_ARCH_COUNT ? ARCH[a].tok : KILN_TM_TOK_SPM; }
bool kiln_tm_arch_is_moe(kiln_tm_arch a) { return a < KILN_TM_ARCH_COUNT && ARCH[a].moe != MOE_NONE; }

int kiln_tm_defaults(kiln_tm_config *c, kiln_tm_arch arch, const char *size, kiln_err *err) {
    if ((unsigned)arch >= KILN_TM_ARCH_COUNT) return kiln_fail(err, NULL, "arch", -1, "unknown architecture");
    bool moe = ARCH[arch].moe != MOE_NONE, gpt2 = arch == KILN_TM_GPT2;
    memset(c, 0, sizeof *c);
    c->arch = arch;
    c->dtype = KILN_ST_BF16;
    c->tie_embeddings = gpt2 || ARCH[arch].llama3_rope || ARCH[arch].gemma;
    c->experts = moe ? 4 : 0;
    c->experts_used = moe ? 2 : 0;
    if (!size || !*size) {
        /* every row a whole number of 256-wide k-quant blocks, as in the fixtures */
        c->layers = ARCH[arch].gemma ? 6 : 2; /* gemma3: one whole window period */
        c->hidden = 256;
        c->heads = 4;
        c->kv_heads = gpt2 ? 4 : 2;
        c->ffn = gpt2 ? 1024 : moe ? 256 : 512;
        c->vocab = 512;
        c->ctx = gpt2 ? 1024 : 2048;
        return 0;
    }
    if (!strcasecmp(size, "1b")) {
        /* llama.cpp's llama-bench figures in ../shared were taken on this shape */
        c->layers = 16;
        c->hidden = 2048;
        c->heads = 32;
        c->kv_heads = gpt2 ? 32 : 8;
        c->ffn = moe ? 8192 / c->experts_used : 8192; /* MoE: same active width */
        c->vocab = 32000;
        c->ctx = 2048;
        return 0;
    }
    return kiln_fail(err, NULL, "size", -1, "unknown size '%s' (known: 1b)", size);
}

/* the smallest vocabulary each tokenizer can be built with */
static uint32_t min_vocab(const kiln_tm_config *c) {
    switch (ARCH[c->arch].tok) {
    case KILN_TM_TOK_SPM: return 3 + 256 + 8;
    case KILN_TM_TOK_QWEN: return 256 + 3 + 8;
    default: return 256 + 1 + 8;
    }
}

int kiln_tm_check(const kiln_tm_config *c, kiln_err *err) {
    if ((unsigned)c->arch >= KILN_TM_ARCH_COUNT) return kiln_fail(err, NULL, "arch", -1, "unknown architecture");
    const arch_info *a = &ARCH[c->arch];
    const uint32_t big = 1u << 20;
    if (c->layers < 1 || c->layers > 4096) return kiln_fail(err, NULL, "layers", -1, "%u: must be 1..4096", c->layers);
    if (c->hidden < 1 || c->hidden > big)
        return kiln_fail(err, NULL, "hidden", -1, "%u: must be 1..%u", c->hidden, big);
    if (c->ffn < 1 || c->ffn > big) return kiln_fail(err, NULL, "ffn", -1, "%u: must be 1..%u", c->ffn, big);
    if (c->ctx < 1 || c->ctx > big) return kiln_fail(err, NULL, "ctx", -1, "%u: must be 1..%u", c->ctx, big);
    if (c->heads < 1 || c->hidden % c->heads)
        return kiln_fail(err, NULL, "heads", -1, "%u heads do not divide hidden size %u", c->heads, c->hidden);
    if (c->kv_heads < 1 || c->heads % c->kv_heads)
        return kiln_fail(err, NULL, "kv-heads", -1, "%u KV heads do not divide %u heads", c->kv_heads, c->heads);
    if (c->arch == KILN_TM_GPT2 && c->kv_heads != c->heads)
        return kiln_fail(err, NULL, "kv-heads", -1, "gpt2 has no grouped-query attention (KV heads must equal heads)");
    if (c->arch != KILN_TM_GPT2 && (c->hidden / c->heads) % 2)
        return kiln_fail(err, NULL, "heads", -1, "head size %u is odd; RoPE needs it even", c->hidden / c->heads);
    if (a->moe == MOE_NONE && (c->experts || c->experts_used))
        return kiln_fail(err, NULL, "experts", -1, "%s is not a mixture-of-experts architecture", a->name);
    if (a->moe != MOE_NONE) {
        if (c->experts < 1 || c->experts > 4096)
            return kiln_fail(err, NULL, "experts", -1, "%u: must be 1..4096", c->experts);
        if (c->experts_used < 1 || c->experts_used > c->experts)
            return kiln_fail(err, NULL, "experts-used", -1, "%u: must be 1..%u (the expert count)", c->experts_used,
                             c->experts);
        if ((uint64_t)c->ffn * c->experts_used > big)
            return kiln_fail(err, NULL, "ffn", -1, "ffn x experts-used is too large");
    }
    if (c->vocab < min_vocab(c) || c->vocab > 4 * big)
        return kiln_fail(err, NULL, "vocab", -1, "%u: must be %u..%u for the %s tokenizer", c->vocab, min_vocab(c),
                         4 * big, a->tok == KILN_TM_TOK_SPM ? "SentencePiece" : "byte-level BPE");
    if (c->dtype != KILN_ST_BF16 && c->dtype != KILN_ST_F16 && c->dtype != KILN_ST_F32)
        return kiln_fail(err, NULL, "dtype", -1, "must be bf16, f16 or f32");
    if (c->arch == KILN_TM_GPT2 && !c->tie_embeddings)
        return kiln_fail(err, NULL, "tie-embeddings", -1, "gpt2 always ties its embeddings");
    return 0;
}

/* ------------------------------------------------------------------ */
/* tensor plan                                                         */

typedef struct plan {
    kiln_tm_tensor *t;
    size_t n, cap;
} plan;

static void add(plan *p, uint8_t kind, uint8_t in_axis, bool outl, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* d1 < 0 makes a 1-D tensor; capacity is reserved by the caller */
static void add(plan *p, uint8_t kind, uint8_t in_axis, bool outl, int64_t d0, int64_t d1, const char *fmt, ...) {
    kiln_tm_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->n_dims = d1 < 0 ? 1 : 2;
    t->shape[0] = d0;
    t->shape[1] = d1 < 0 ? 0 : d1;
    t->kind = kind;
    t->in_axis = in_axis;
    t->outliers = outl;
}

/* SwiGLU feed-forward as gate/up/down (or Mixtral's w1/w3/w2) under `pre` */
static void add_swiglu(plan *p, const char *pre, int64_t h, int64_t f, bool mixtral) {
    if (mixtral) {
        add(p, KILN_TM_MATRIX, 1, true, f, h, "%s.w1.weight", pre);
        add(p, KILN_TM_MATRIX, 1, false, h, f, "%s.w2.weight", pre);
        add(p, KILN_TM_MATRIX, 1, true, f, h, "%s.w3.weight", pre);
        return;
    }
    add(p, KILN_TM_MATRIX, 1, true, f, h, "%s.gate_proj.weight", pre);
    add(p, KILN_TM_MATRIX, 1, true, f, h, "%s.up_proj.weight", pre);
    add(p, KILN_TM_MATRIX, 1, false, h, f, "%s.down_proj.weight", pre);
}

static void plan_gpt2(const kiln_tm_config *c, plan *p) {
    int64_t h = c->hidden, f = c->ffn;
    add(p, KILN_TM_EMBED, 1, false, c->vocab, h, "transformer.wte.weight");
    add(p, KILN_TM_POS, 1, false, c->ctx, h, "transformer.wpe.weight");
    for (uint32_t l = 0; l < c->layers; l++) {
        /* Conv1D stores [in, out]: the input channel is axis 0 */
        add(p, KILN_TM_NORM, 0, false, h, -1, "transformer.h.%u.ln_1.weight", l);
        add(p, KILN_TM_BIAS, 0, false, h, -1, "transformer.h.%u.ln_1.bias", l);
        add(p, KILN_TM_MATRIX, 0, true, h, 3 * h, "transformer.h.%u.attn.c_attn.weight", l);
        add(p, KILN_TM_BIAS, 0, false, 3 * h, -1, "transformer.h.%u.attn.c_attn.bias", l);
        add(p, KILN_TM_MATRIX, 0, false, h, h, "transformer.h.%u.attn.c_proj.weight", l);
        add(p, KILN_TM_BIAS, 0, false, h, -1, "transformer.h.%u.attn.c_proj.bias", l);
        add(p, KILN_TM_NORM, 0, false, h, -1, "transformer.h.%u.ln_2.weight", l);
        add(p, KILN_TM_BIAS, 0, false, h, -1, "transformer.h.%u.ln_2.bias", l);
        add(p, KILN_TM_MATRIX, 0, true, h, f, "transformer.h.%u.mlp.c_fc.weight", l);
        add(p, KILN_TM_BIAS, 0, false, f, -1, "transformer.h.%u.mlp.c_fc.bias", l);
        add(p, KILN_TM_MATRIX, 0, false, f, h, "transformer.h.%u.mlp.c_proj.weight", l);
        add(p, KILN_TM_BIAS, 0, false, h, -1, "transformer.h.%u.mlp.c_proj.bias", l);
    }
    add(p, KILN_TM_NORM, 0, false, h, -1, "transformer.ln_f.weight");
    add(p, KILN_TM_BIAS, 0, false, h, -1, "transformer.ln_f.bias");
}

static void plan_decoder(const kiln_tm_config *c, plan *p) {
    const arch_info *a = &ARCH[c->arch];
    int64_t h = c->hidden, hd = h / c->heads, q = hd * c->heads, kv = hd * c->kv_heads, f = c->ffn;
    const char *proj[3] = {"q", "k", "v"};
    int64_t rows[3] = {q, kv, kv};
    char pre[96];
    add(p, KILN_TM_EMBED, 1, false, c->vocab, h, "model.embed_tokens.weight");
    for (uint32_t l = 0; l < c->layers; l++) {
        if (a->fused) { /* rows [q | k | v] and [gate | up] */
            add(p, KILN_TM_MATRIX, 1, true, q + 2 * kv, h, "model.layers.%u.self_attn.qkv_proj.weight", l);
            add(p, KILN_TM_MATRIX, 1, false, h, q, "model.layers.%u.self_attn.o_proj.weight", l);
            add(p, KILN_TM_MATRIX, 1, true, 2 * f, h, "model.layers.%u.mlp.gate_up_proj.weight", l);
            add(p, KILN_TM_MATRIX, 1, false, h, f, "model.layers.%u.mlp.down_proj.weight", l);
            add(p, KILN_TM_NORM, 0, false, h, -1, "model.layers.%u.input_layernorm.weight", l);
            add(p, KILN_TM_NORM, 0, false, h, -1, "model.layers.%u.post_attention_layernorm.weight", l);
            continue;
        }
        for (int i = 0; i < 3; i++) {
            add(p, KILN_TM_MATRIX, 1, true, rows[i], h, "model.layers.%u.self_attn.%s_proj.weight", l, proj[i]);
            if (a->qkv_bias)
                add(p, KILN_TM_BIAS, 0, false, rows[i], -1, "model.layers.%u.self_attn.%s_proj.bias", l, proj[i]);
        }
        add(p, KILN_TM_MATRIX, 1, false, h, q, "model.layers.%u.self_attn.o_proj.weight", l);
        if (a->qk_norm) {
            add(p, KILN_TM_NORM, 0, false, hd, -1, "model.layers.%u.self_attn.q_norm.weight", l);
            add(p, KILN_TM_NORM, 0, false, hd, -1, "model.layers.%u.self_attn.k_norm.weight", l);
        }
        switch (a->moe) {
        case MOE_NONE:
            snprintf(pre, sizeof pre, "model.layers.%u.mlp", l);
            add_swiglu(p, pre, h, f, false);
            break;
        case MOE_MIXTRAL:
            add(p, KILN_TM_MATRIX, 1, true, c->experts, h, "model.layers.%u.block_sparse_moe.gate.weight", l);
            for (uint32_t e = 0; e < c->experts; e++) {
                snprintf(pre, sizeof pre, "model.layers.%u.block_sparse_moe.experts.%u", l, e);
                add_swiglu(p, pre, h, f, true);
            }
            break;
        default: /* Qwen MoE */
            add(p, KILN_TM_MATRIX, 1, true, c->experts, h, "model.layers.%u.mlp.gate.weight", l);
            for (uint32_t e = 0; e < c->experts; e++) {
                snprintf(pre, sizeof pre, "model.layers.%u.mlp.experts.%u", l, e);
                add_swiglu(p, pre, h, f, false);
            }
            if (a->moe == MOE_QWEN2) {
                snprintf(pre, sizeof pre, "model.layers.%u.mlp.shared_expert", l);
                add_swiglu(p, pre, h, (int64_t)f * c->experts_used, false);
                add(p, KILN_TM_MATRIX, 1, true, 1, h, "model.layers.%u.mlp.shared_expert_gate.weight", l);
            }
        }
        add(p, KILN_TM_NORM, 0, false, h, -1, "model.layers.%u.input_layernorm.weight", l);
        add(p, KILN_TM_NORM, 0, false, h, -1, "model.layers.%u.post_attention_layernorm.weight", l);
        if (a->gemma) {
            add(p, KILN_TM_NORM, 0, false, h, -1, "model.layers.%u.pre_feedforward_layernorm.weight", l);
            add(p, KILN_TM_NORM, 0, false, h, -1, "model.layers.%u.post_feedforward_layernorm.weight", l);
        }
    }
    add(p, KILN_TM_NORM, 0, false, h, -1, "model.norm.weight");
    if (!c->tie_embeddings) add(p, KILN_TM_EMBED, 1, false, c->vocab, h, "lm_head.weight");
}

int kiln_tm_plan(const kiln_tm_config *c, kiln_tm_tensor **out, size_t *n, kiln_err *err) {
    if (kiln_tm_check(c, err)) return -1;
    /* an upper bound: 16 per layer plus 3 per expert, and the ends */
    size_t cap = (size_t)c->layers * (16 + 3 * (size_t)c->experts) + 8;
    plan p = {calloc(cap, sizeof(kiln_tm_tensor)), 0, cap};
    if (!p.t) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    if (c->arch == KILN_TM_GPT2) plan_gpt2(c, &p);
    else plan_decoder(c, &p);
    *out = p.t;
    *n = p.n;
    return 0;
}

/* ------------------------------------------------------------------ */
/* config.json and generation_config.json                             */

static const char *torch_dtype(kiln_st_dtype d) {
    return d == KILN_ST_BF16 ? "bfloat16" : d == KILN_ST_F16 ? "float16" : "float32";
}

#define SET(o, k, v) json_object_set_new(o, k, v)

static json_t *config_gpt2(const kiln_tm_config *c, int bos, int eos) {
    json_t *o = json_object();
    SET(o, "activation_function", json_string("gelu_new"));
    SET(o, "architectures", json_pack("[s]", ARCH[c->arch].cls));
    SET(o, "attn_pdrop", json_real(0.1));
    SET(o, "bos_token_id", json_integer(bos));
    SET(o, "embd_pdrop", json_real(0.1));
    SET(o, "eos_token_id", json_integer(eos));
    SET(o, "initializer_range", json_real(0.02));
    SET(o, "layer_norm_epsilon", json_real(ARCH[c->arch].norm_eps));
    SET(o, "model_type", json_string("gpt2"));
    SET(o, "n_ctx", json_integer(c->ctx));
    SET(o, "n_embd", json_integer(c->hidden));
    SET(o, "n_head", json_integer(c->heads));
    SET(o, "n_inner", json_integer(c->ffn));
    SET(o, "n_layer", json_integer(c->layers));
    SET(o, "n_positions", json_integer(c->ctx));
    SET(o, "reorder_and_upcast_attn", json_false());
    SET(o, "resid_pdrop", json_real(0.1));
    SET(o, "scale_attn_by_inverse_layer_idx", json_false());
    SET(o, "scale_attn_weights", json_true());
    SET(o, "summary_activation", json_null());
    SET(o, "summary_first_dropout", json_real(0.1));
    SET(o, "summary_proj_to_labels", json_true());
    SET(o, "summary_type", json_string("cls_index"));
    SET(o, "summary_use_proj", json_true());
    return o;
}

static json_t *config_decoder(const kiln_tm_config *c, int bos, int eos) {
    const arch_info *a = &ARCH[c->arch];
    bool qwen = a->tok == KILN_TM_TOK_QWEN && !a->llama3_rope, qwen3 = a->qk_norm;
    json_t *o = json_object();
    SET(o, "architectures", json_pack("[s]", a->cls));
    SET(o, "attention_dropout", json_real(0.0));
    SET(o, "bos_token_id", json_integer(bos));
    SET(o, "eos_token_id", json_integer(eos));
    SET(o, "hidden_act", json_string("silu"));
    SET(o, "hidden_size", json_integer(c->hidden));
    SET(o, "initializer_range", json_real(0.02));
    SET(o, "intermediate_size", json_integer(a->moe == MOE_QWEN2 || a->moe == MOE_QWEN3
                                                 ? (json_int_t)c->ffn * c->experts_used : c->ffn));
    SET(o, "max_position_embeddings", json_integer(c->ctx));
    SET(o, "model_type", json_string(a->model_type));
    SET(o, "num_attention_heads", json_integer(c->heads));
    SET(o, "num_hidden_layers", json_integer(c->layers));
    SET(o, "num_key_value_heads", json_integer(c->kv_heads));
    SET(o, "rms_norm_eps", json_real(a->norm_eps));
    SET(o, "rope_theta", json_real(a->rope_theta));
    if (a->llama3_rope)
        SET(o, "rope_scaling", json_pack("{s:f, s:f, s:f, s:i, s:s}", "factor", 8.0, "high_freq_factor", 4.0,
                                         "low_freq_factor", 1.0, "original_max_position_embeddings", 8192,
                                         "rope_type", "llama3"));
    else if (c->arch == KILN_TM_LLAMA || qwen) SET(o, "rope_scaling", json_null());
    if ((!qwen || qwen3 || a->llama3_rope) && !a->fused) SET(o, "head_dim", json_integer(c->hidden / c->heads));
    if (a->fused) { /* Phi-3-mini-4k's keys: no scaling, a window one short of the context */
        SET(o, "attention_bias", json_false());
        SET(o, "original_max_position_embeddings", json_integer(c->ctx));
        SET(o, "rope_scaling", json_null());
        SET(o, "sliding_window", json_integer((json_int_t)c->ctx - 1));
        SET(o, "embd_pdrop", json_real(0.0));
        SET(o, "resid_pdrop", json_real(0.0));
    }
    if (c->arch == KILN_TM_LLAMA || a->llama3_rope) {
        SET(o, "attention_bias", json_false());
        SET(o, "mlp_bias", json_false());
        SET(o, "pretraining_tp", json_integer(1));
    }
    if (c->arch == KILN_TM_MISTRAL || c->arch == KILN_TM_MIXTRAL) SET(o, "sliding_window", json_null());
    if (qwen) {
        SET(o, "max_window_layers", json_integer(c->layers));
        SET(o, "sliding_window", qwen3 ? json_null() : json_integer(c->ctx));
        SET(o, "use_sliding_window", json_false());
    }
    if (qwen3) SET(o, "attention_bias", json_false());
    if (a->gemma) { /* Gemma3TextConfig's keys (hidden_act is read as hidden_activation) */
        SET(o, "attention_bias", json_false());
        SET(o, "attn_logit_softcapping", json_null());
        SET(o, "final_logit_softcapping", json_null());
        SET(o, "hidden_activation", json_string("gelu_pytorch_tanh"));
        SET(o, "hidden_act", json_string("gelu_pytorch_tanh"));
        SET(o, "query_pre_attn_scalar", json_integer(c->hidden / c->heads));
        SET(o, "rope_local_base_freq", json_real(1e4));
        SET(o, "rope_scaling", json_null());
        SET(o, "sliding_window", json_integer(64));
        SET(o, "sliding_window_pattern", json_integer(6));
    }
    if (a->moe == MOE_MIXTRAL) {
        SET(o, "num_local_experts", json_integer(c->experts));
        SET(o, "num_experts_per_tok", json_integer(c->experts_used));
        SET(o, "output_router_logits", json_false());
        SET(o, "router_aux_loss_coef", json_real(0.02));
        SET(o, "router_jitter_noise", json_real(0.0));
    }
    if (a->moe == MOE_QWEN2 || a->moe == MOE_QWEN3) {
        SET(o, "decoder_sparse_step", json_integer(1));
        SET(o, "mlp_only_layers", json_array());
        SET(o, "moe_intermediate_size", json_integer(c->ffn));
        SET(o, "norm_topk_prob", json_boolean(a->moe == MOE_QWEN3));
        SET(o, "num_experts", json_integer(c->experts));
        SET(o, "num_experts_per_tok", json_integer(c->experts_used));
        SET(o, "output_router_logits", json_false());
        SET(o, "router_aux_loss_coef", json_real(0.001));
        if (a->moe == MOE_QWEN2)
            SET(o, "shared_expert_intermediate_size", json_integer((json_int_t)c->ffn * c->experts_used));
    }
    return o;
}

static int write_configs(const kiln_tm_config *c, const char *dir, kiln_err *err) {
    int bos, eos;
    kiln_tm_bos_eos(c, tok_kind(c->arch), &bos, &eos);
    json_t *o = c->arch == KILN_TM_GPT2 ? config_gpt2(c, bos, eos) : config_decoder(c, bos, eos);
    if (!o) return kiln_fail(err, dir, "config.json", -1, "out of memory");
    SET(o, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    SET(o, "torch_dtype", json_string(torch_dtype(c->dtype)));
    SET(o, "transformers_version", json_string(ARCH[c->arch].hf_version));
    SET(o, "use_cache", json_true());
    SET(o, "vocab_size", json_integer(c->vocab));
    json_t *gen = json_pack("{s:b, s:i, s:i, s:s}", "_from_model_config", 1, "bos_token_id", bos, "eos_token_id", eos,
                            "transformers_version", ARCH[c->arch].hf_version);
    int flags = JSON_INDENT(2) | JSON_SORT_KEYS;
    if (kiln_tm_write_json(dir, "generation_config.json", gen, flags, err)) return json_decref(o), -1;
    return kiln_tm_write_json(dir, "config.json", o, flags, err);
}

/* ------------------------------------------------------------------ */
/* the directory                                                       */

/* Files a model directory written here may hold; anything else is left alone. */
static bool is_model_file(const char *n) {
    static const char *const known[] = {
        "config.json", "generation_config.json", "tokenizer.model", "tokenizer.json", "tokenizer_config.json",
        "special_tokens_map.json", "vocab.json", "merges.txt", "model.safetensors.index.json",
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(n, known[i])) return true;
    size_t len = strlen(n);
    return len > 12 && !strcmp(n + len - 12, ".safetensors");
}

/* Finds the first model file in dir (into `found`); 1 if any, 0 if none, -1 on error. */
static int find_model_file(const char *dir, char *found, size_t cap, kiln_err *err) {
    DIR *d = opendir(dir);
    if (!d) return kiln_fail(err, dir, NULL, -1, "cannot list: %s", strerror(errno));
    struct dirent *e;
    int r = 0;
    while ((e = readdir(d)))
        if (is_model_file(e->d_name)) {
            snprintf(found, cap, "%s", e->d_name);
            r = 1;
            break;
        }
    closedir(d);
    return r;
}

/* "model-00002-of-00005.safetensors": sets *i and *k */
static bool is_shard_name(const char *n, unsigned *i, unsigned *k) {
    if (strlen(n) != 32 || strncmp(n, "model-", 6) || strncmp(n + 11, "-of-", 4) || strcmp(n + 20, ".safetensors"))
        return false;
    for (int p = 6; p < 20; p++)
        if ((p < 11 || p >= 15) && (n[p] < '0' || n[p] > '9')) return false;
    *i = (unsigned)atoi(n + 6);
    *k = (unsigned)atoi(n + 15);
    return true;
}

int kiln_tm_remove_stale(const char *dir, uint32_t n_files, int tok, kiln_err *err) {
    DIR *d = opendir(dir);
    if (!d) return kiln_fail(err, dir, NULL, -1, "cannot list: %s", strerror(errno));
    bool spm = tok == KILN_TM_TOK_SPM;
    char path[4096];
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        const char *n = e->d_name;
        unsigned i, k;
        bool stale = false;
        if (!strcmp(n, "model.safetensors")) stale = n_files > 1;
        else if (!strcmp(n, "model.safetensors.index.json")) stale = n_files == 1;
        else if (is_shard_name(n, &i, &k)) stale = k != n_files || i < 1 || i > n_files;
        else if (tok < 0) stale = false;
        else if (!strcmp(n, "tokenizer.model")) stale = !spm;
        else if (!strcmp(n, "tokenizer.json") || !strcmp(n, "vocab.json") || !strcmp(n, "merges.txt")) stale = spm;
        snprintf(path, sizeof path, "%s/%s", dir, n);
        if (stale && unlink(path) != 0)
            rc = kiln_fail(err, path, NULL, -1, "cannot remove stale file: %s", strerror(errno));
    }
    closedir(d);
    return rc;
}

int kiln_tm_prepare_dir(const char *dir, bool force, kiln_err *err) {
    if (strlen(dir) > 3000) return kiln_fail(err, dir, NULL, -1, "path too long");
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT || mkdir(dir, 0755) != 0)
            return kiln_fail(err, dir, NULL, -1, "cannot create directory: %s", strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
        return kiln_fail(err, dir, NULL, -1, "exists and is not a directory");
    } else {
        char found[256];
        int r = find_model_file(dir, found, sizeof found, err);
        if (r < 0) return -1;
        if (r > 0 && !force)
            return kiln_fail(err, dir, NULL, -1, "already holds a model (%s); use --force to overwrite it", found);
        /* until the new config.json lands, the directory must not look complete */
        char cfg[4096];
        snprintf(cfg, sizeof cfg, "%s/config.json", dir);
        if (r > 0 && unlink(cfg) != 0 && errno != ENOENT)
            return kiln_fail(err, cfg, NULL, -1, "cannot remove: %s", strerror(errno));
    }
    return 0;
}

int kiln_tm_write(const kiln_tm_config *c, const char *dir, const kiln_tm_opts *opts, kiln_tm_summary *sum,
                  kiln_err *err) {
    kiln_tm_summary local;
    if (!sum) sum = &local;
    memset(sum, 0, sizeof *sum);
    if (kiln_tm_check(c, err) || kiln_tm_prepare_dir(dir, opts && opts->force, err)) return -1;
    kiln_tm_tensor *t;
    size_t n;
    if (kiln_tm_plan(c, &t, &n, err)) return -1;
    int rc = kiln_tm_write_weights(c, dir, t, n, opts, sum, err);
    free(t);
    if (rc) return -1;
    if (kiln_tm_remove_stale(dir, sum->n_files, (int)tok_kind(c->arch), err)) return -1;
    if (kiln_tm_write_tokenizer(c, tok_kind(c->arch), dir, err)) return -1;
    return write_configs(c, dir, err);
}
