/* testmodel/deepseek.c - full-shape DeepSeek-V3 and DeepSeek-V4-Flash
 * checkpoints (testmodel.h, "full-shape DeepSeek checkpoints"), for the
 * convert benchmark (bench/bench_deepseek_convert.sh) and the scale tests
 * (tests/e2e/deepseek_scale.sh).
 *
 * One generator; what differs between the two models is data: a table per
 * architecture of its tensors (name template, how it is stored, its shape
 * in named dimensions, which layers have it), the dimension values, and
 * config.json. Tensors are written in the checkpoint's order, block by
 * block, in 8 MiB chunks of fixed-seed noise (or, sparse, as holes).
 *
 * Left out on purpose: the multi-token-prediction layers
 * (num_nextn_predict_layers 0; kiln's and llama.cpp's converters drop
 * them), and values anything could run on: codes are valid (no FP8 or
 * E8M0 NaN, expert ids in range), nothing more. The other files of
 * testmodel/ are the small runnable models; this one sits above
 * testmodel.c (its directory rules) in testmodel_impl.h's order. */
#include "testmodel_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../core/safetensors_write.h"

/* Dimensions by name. D_RATIO and D_CMP (V4's compress ratio and
 * compressor width) change from layer to layer; the others are fixed per
 * architecture, D_EXPERTS, D_USED and D_VOCAB by the config. */
enum ds_dim {
    D_NONE, D_ONE, D_THREE, D_HIDDEN, D_VOCAB, D_EXPERTS, D_USED, D_Q_LORA, D_Q, D_FFN_EXP, D_FFN_SH,
    D_KV_A, D_KV_LORA, D_KV_B, D_O_IN, D_FFN,                               /* V3 */
    D_HEADS, D_HEAD, D_O_A, D_O_A_IN, D_HC, D_HC_MIX, D_HC_DIM,             /* V4 */
    D_IDX_Q, D_IDX_HEADS, D_IDX_HEAD, D_IDX_CMP, D_RATIO, D_CMP,            /* V4 */
    D_COUNT
};

/* How a tensor is stored. */
enum ds_kind {
    K_FP8,  /* F8_E4M3 NAME.weight and one scale per 128x128 block (V3: F32
             * NAME.weight_scale_inv, V4: F8_E8M0 NAME.scale) */
    K_FP4,  /* V4's routed experts: I8 NAME.weight [rows, cols / 2], two E2M1
             * codes a byte, and F8_E8M0 NAME.scale [rows, cols / 32] */
    K_BF16, /* a BF16 matrix: embeddings, lm_head, router, compressors */
    K_NORM, /* BF16 near 1 */
    K_F32,  /* F32: router bias, hyper-connection mixers, sinks, ape */
    K_TID,  /* V4's hash router: I64 expert ids [vocab, experts used] */
};

/* Which blocks have a tensor. Consecutive W_EXPERT items are written once
 * per routed expert, as a group (expert 0's gate, up, down, then expert 1's). */
enum ds_when {
    W_ALL, W_DENSE, W_MOE, W_EXPERT,
    W_COMPRESS, /* compress ratio not 0 */
    W_INDEXER,  /* compress ratio 4: the sparse-attention indexer */
    W_HASH,     /* the first hash_layers MoE blocks: tid2eid */
    W_ROUTED,   /* MoE blocks routed by score: the router's bias */
};

/* How the bytes are made (kiln_tm_ds_tensor.fill). */
enum ds_fill { F_FP8, F_SCALE_F32, F_E8M0, F_FP4, F_BF16, F_NORM, F_F32, F_TID };

typedef struct ds_item {
    const char *name; /* "{L}" is the block, "{E}" the expert */
    uint8_t kind, when, d0, d1; /* d1 D_NONE: one dimension */
} ds_item;

typedef struct ds_arch {
    const char *name, *cls, *model_type;
    const char *alias;
    uint32_t layers, dense_layers, hash_layers, experts_used;
    bool compress; /* V4's compress_ratios pattern */
    kiln_st_dtype fp8_scale;
    const char *fp8_scale_suffix;
    const char *block; /* the prefix of a block's names */
    const ds_item *head, *layer, *tail;
    int64_t dim[D_COUNT];
} ds_arch;

static const ds_item V3_HEAD[] = {{"model.embed_tokens.weight", K_BF16, W_ALL, D_VOCAB, D_HIDDEN}, {0}};
static const ds_item V3_LAYER[] = {
    {"input_layernorm.weight", K_NORM, W_ALL, D_HIDDEN, 0},
    {"self_attn.q_a_proj", K_FP8, W_ALL, D_Q_LORA, D_HIDDEN},
    {"self_attn.q_a_layernorm.weight", K_NORM, W_ALL, D_Q_LORA, 0},
    {"self_attn.q_b_proj", K_FP8, W_ALL, D_Q, D_Q_LORA},
    {"self_attn.kv_a_proj_with_mqa", K_FP8, W_ALL, D_KV_A, D_HIDDEN},
    {"self_attn.kv_a_layernorm.weight", K_NORM, W_ALL, D_KV_LORA, 0},
    {"self_attn.kv_b_proj", K_FP8, W_ALL, D_KV_B, D_KV_LORA},
    {"self_attn.o_proj", K_FP8, W_ALL, D_HIDDEN, D_O_IN},
    {"post_attention_layernorm.weight", K_NORM, W_ALL, D_HIDDEN, 0},
    {"mlp.gate_proj", K_FP8, W_DENSE, D_FFN, D_HIDDEN},
    {"mlp.up_proj", K_FP8, W_DENSE, D_FFN, D_HIDDEN},
    {"mlp.down_proj", K_FP8, W_DENSE, D_HIDDEN, D_FFN},
    {"mlp.gate.weight", K_BF16, W_MOE, D_EXPERTS, D_HIDDEN},
    {"mlp.gate.e_score_correction_bias", K_F32, W_ROUTED, D_EXPERTS, 0},
    {"mlp.experts.{E}.gate_proj", K_FP8, W_EXPERT, D_FFN_EXP, D_HIDDEN},
    {"mlp.experts.{E}.up_proj", K_FP8, W_EXPERT, D_FFN_EXP, D_HIDDEN},
    {"mlp.experts.{E}.down_proj", K_FP8, W_EXPERT, D_HIDDEN, D_FFN_EXP},
    {"mlp.shared_experts.gate_proj", K_FP8, W_MOE, D_FFN_SH, D_HIDDEN},
    {"mlp.shared_experts.up_proj", K_FP8, W_MOE, D_FFN_SH, D_HIDDEN},
    {"mlp.shared_experts.down_proj", K_FP8, W_MOE, D_HIDDEN, D_FFN_SH},
    {0},
};
static const ds_item V3_TAIL[] = {
    {"model.norm.weight", K_NORM, W_ALL, D_HIDDEN, 0},
    {"lm_head.weight", K_BF16, W_ALL, D_VOCAB, D_HIDDEN},
    {0},
};

/* V4-Flash as tests/fixtures/deepseek4/make_model.py lays it out, at the
 * real sizes (convert/arch_deepseek4.c reads it). */
static const ds_item V4_HEAD[] = {{"embed.weight", K_BF16, W_ALL, D_VOCAB, D_HIDDEN}, {0}};
static const ds_item V4_LAYER[] = {
    {"attn_norm.weight", K_NORM, W_ALL, D_HIDDEN, 0},
    {"ffn_norm.weight", K_NORM, W_ALL, D_HIDDEN, 0},
    {"hc_attn_fn", K_F32, W_ALL, D_HC_MIX, D_HC_DIM},
    {"hc_attn_base", K_F32, W_ALL, D_HC_MIX, 0},
    {"hc_attn_scale", K_F32, W_ALL, D_THREE, 0},
    {"hc_ffn_fn", K_F32, W_ALL, D_HC_MIX, D_HC_DIM},
    {"hc_ffn_base", K_F32, W_ALL, D_HC_MIX, 0},
    {"hc_ffn_scale", K_F32, W_ALL, D_THREE, 0},
    {"attn.attn_sink", K_F32, W_ALL, D_HEADS, 0},
    {"attn.wq_a", K_FP8, W_ALL, D_Q_LORA, D_HIDDEN},
    {"attn.q_norm.weight", K_NORM, W_ALL, D_Q_LORA, 0},
    {"attn.wq_b", K_FP8, W_ALL, D_Q, D_Q_LORA},
    {"attn.wkv", K_FP8, W_ALL, D_HEAD, D_HIDDEN},
    {"attn.kv_norm.weight", K_NORM, W_ALL, D_HEAD, 0},
    {"attn.wo_a", K_FP8, W_ALL, D_O_A, D_O_A_IN},
    {"attn.wo_b", K_FP8, W_ALL, D_HIDDEN, D_O_A},
    {"attn.compressor.ape", K_F32, W_COMPRESS, D_RATIO, D_CMP},
    {"attn.compressor.wkv.weight", K_BF16, W_COMPRESS, D_CMP, D_HIDDEN},
    {"attn.compressor.wgate.weight", K_BF16, W_COMPRESS, D_CMP, D_HIDDEN},
    {"attn.compressor.norm.weight", K_NORM, W_COMPRESS, D_HEAD, 0},
    {"attn.indexer.wq_b", K_FP8, W_INDEXER, D_IDX_Q, D_Q_LORA},
    {"attn.indexer.weights_proj.weight", K_BF16, W_INDEXER, D_IDX_HEADS, D_HIDDEN},
    {"attn.indexer.compressor.ape", K_F32, W_INDEXER, D_RATIO, D_IDX_CMP},
    {"attn.indexer.compressor.wkv.weight", K_BF16, W_INDEXER, D_IDX_CMP, D_HIDDEN},
    {"attn.indexer.compressor.wgate.weight", K_BF16, W_INDEXER, D_IDX_CMP, D_HIDDEN},
    {"attn.indexer.compressor.norm.weight", K_NORM, W_INDEXER, D_IDX_HEAD, 0},
    {"ffn.gate.weight", K_BF16, W_MOE, D_EXPERTS, D_HIDDEN},
    {"ffn.gate.tid2eid", K_TID, W_HASH, D_VOCAB, D_USED},
    {"ffn.gate.bias", K_F32, W_ROUTED, D_EXPERTS, 0},
    {"ffn.experts.{E}.w1", K_FP4, W_EXPERT, D_FFN_EXP, D_HIDDEN},
    {"ffn.experts.{E}.w2", K_FP4, W_EXPERT, D_HIDDEN, D_FFN_EXP},
    {"ffn.experts.{E}.w3", K_FP4, W_EXPERT, D_FFN_EXP, D_HIDDEN},
    {"ffn.shared_experts.w1", K_FP8, W_MOE, D_FFN_SH, D_HIDDEN},
    {"ffn.shared_experts.w2", K_FP8, W_MOE, D_HIDDEN, D_FFN_SH},
    {"ffn.shared_experts.w3", K_FP8, W_MOE, D_FFN_SH, D_HIDDEN},
    {0},
};
static const ds_item V4_TAIL[] = {
    {"norm.weight", K_NORM, W_ALL, D_HIDDEN, 0},
    {"head.weight", K_BF16, W_ALL, D_VOCAB, D_HIDDEN},
    {"hc_head_fn", K_F32, W_ALL, D_HC, D_HC_DIM},
    {"hc_head_base", K_F32, W_ALL, D_HC, 0},
    {"hc_head_scale", K_F32, W_ALL, D_ONE, 0},
    {0},
};

enum { REAL_VOCAB = KILN_TM_DS_REAL_VOCAB, FP8_BLOCK = 128, FP4_BLOCK = 32, MAX_EXPERTS = 256 };

static const ds_arch ARCHS[KILN_TM_DS_ARCH_COUNT] = {
    /* DeepSeek-V3 / R1: hidden 7168, q_lora 1536, kv_lora 512, 128 heads of
     * nope 128 / rope 64 / v 128, dense FFN 18432, expert FFN 2048, one
     * shared expert, top-8 of 256 */
    [KILN_TM_DS_V3] = {"deepseek2", "DeepseekV3ForCausalLM", "deepseek_v3", "deepseek3", 61, 3, 0, 8, false,
                       KILN_ST_F32, ".weight_scale_inv", "model.layers.{L}.", V3_HEAD, V3_LAYER, V3_TAIL,
                       .dim = {[D_ONE] = 1, [D_THREE] = 3, [D_HIDDEN] = 7168, [D_Q_LORA] = 1536,
                               [D_Q] = 128 * (128 + 64), [D_KV_A] = 512 + 64, [D_KV_LORA] = 512,
                               [D_KV_B] = 128 * (128 + 128), [D_O_IN] = 128 * 128, [D_FFN] = 18432,
                               [D_FFN_EXP] = 2048, [D_FFN_SH] = 2048}},
    /* DeepSeek-V4-Flash: hidden 4096, 64 heads of one shared 512-wide KV
     * head, q_lora 1024, 8 output groups of rank 1024, hyper-connections x4,
     * expert FFN 2048, one shared expert, top-6 of 256, the first 3 blocks
     * hash-routed, indexer of 64 heads of 128 */
    [KILN_TM_DS_V4] = {"deepseek4", "DeepseekV4ForCausalLM", "deepseek_v4", NULL, 43, 0, 3, 6, true,
                       KILN_ST_F8_E8M0, ".scale", "layers.{L}.", V4_HEAD, V4_LAYER, V4_TAIL,
                       .dim = {[D_ONE] = 1, [D_THREE] = 3, [D_HIDDEN] = 4096, [D_Q_LORA] = 1024,
                               [D_Q] = 64 * 512, [D_HEADS] = 64, [D_HEAD] = 512, [D_O_A] = 8 * 1024,
                               [D_O_A_IN] = 64 * 512 / 8, [D_HC] = 4, [D_HC_MIX] = (2 + 4) * 4,
                               [D_HC_DIM] = 4 * 4096, [D_IDX_Q] = 64 * 128, [D_IDX_HEADS] = 64,
                               [D_IDX_HEAD] = 128, [D_IDX_CMP] = 2 * 128, [D_FFN_EXP] = 2048,
                               [D_FFN_SH] = 2048}},
};

int kiln_tm_ds_arch_parse(const char *name, kiln_tm_ds_arch *out) {
    for (int a = 0; a < KILN_TM_DS_ARCH_COUNT; a++) {
        const ds_arch *d = &ARCHS[a];
        if (!strcasecmp(name, d->name) || !strcmp(name, d->cls) || !strcmp(name, d->model_type) ||
            (d->alias && !strcasecmp(name, d->alias))) {
            *out = (kiln_tm_ds_arch)a;
            return 0;
        }
    }
    return -1;
}

const char *kiln_tm_ds_arch_class(kiln_tm_ds_arch a) { return a < KILN_TM_DS_ARCH_COUNT ? ARCHS[a].cls : "?"; }

void kiln_tm_ds_defaults(kiln_tm_ds_config *c, kiln_tm_ds_arch arch) {
    memset(c, 0, sizeof *c);
    c->arch = arch;
    c->layers = arch < KILN_TM_DS_ARCH_COUNT ? ARCHS[arch].layers : 1;
    c->experts = MAX_EXPERTS;
    c->vocab = REAL_VOCAB;
    c->shard_size = 5000000000ull;
}

/* The byte-level BPE tokenizer written for a vocabulary other than the
 * real one, described as testmodel_tok.c wants it: qwen2's. */
static int small_tokenizer_config(const kiln_tm_ds_config *c, kiln_tm_config *tc, kiln_err *err) {
    if (kiln_tm_defaults(tc, KILN_TM_QWEN2, NULL, err)) return -1;
    tc->vocab = c->vocab;
    tc->ctx = 4096;
    return kiln_tm_check(tc, err);
}

int kiln_tm_ds_check(const kiln_tm_ds_config *c, kiln_err *err) {
    if ((unsigned)c->arch >= KILN_TM_DS_ARCH_COUNT) return kiln_fail(err, NULL, "arch", -1, "unknown architecture");
    const ds_arch *a = &ARCHS[c->arch];
    if (c->layers < 1 || c->layers > a->layers)
        return kiln_fail(err, NULL, "layers", -1, "%u: must be 1..%u for %s", c->layers, a->layers, a->name);
    if (c->experts < 1 || c->experts > MAX_EXPERTS)
        return kiln_fail(err, NULL, "experts", -1, "%u: must be 1..%d", c->experts, MAX_EXPERTS);
    if (c->vocab != REAL_VOCAB) {
        kiln_tm_config tc;
        if (small_tokenizer_config(c, &tc, err)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* the plan                                                            */

typedef struct plan {
    kiln_tm_ds_tensor *t;
    size_t n, cap;
} plan;

/* V4's compress ratio of block `layer`: none for the first two, then 4 and
 * 128 in turn (the indexer on the ratio-4 blocks). */
static int64_t compress_ratio(const ds_arch *a, uint32_t layer) {
    if (!a->compress || layer < 2) return 0;
    return (layer - 2) % 2 == 0 ? 4 : 128;
}

/* V3's first blocks are dense, but at least one block stays MoE. */
static uint32_t dense_layers(const ds_arch *a, const kiln_tm_ds_config *c) {
    return a->dense_layers < c->layers ? a->dense_layers : c->layers - 1;
}

static uint32_t experts_used(const ds_arch *a, const kiln_tm_ds_config *c) {
    return a->experts_used < c->experts ? a->experts_used : c->experts;
}

/* Writes `tmpl` with "{L}" and "{E}" replaced into dst; false when too long. */
static bool expand(char *dst, size_t cap, const char *tmpl, uint32_t layer, uint32_t expert) {
    size_t o = 0;
    for (const char *p = tmpl; *p; p++) {
        char num[16];
        const char *put = NULL;
        if (!strncmp(p, "{L}", 3) || !strncmp(p, "{E}", 3)) {
            snprintf(num, sizeof num, "%u", p[1] == 'L' ? layer : expert);
            put = num;
            p += 2;
        }
        size_t k = put ? strlen(put) : 1;
        if (o + k >= cap) return false;
        memcpy(dst + o, put ? put : p, k);
        o += k;
    }
    dst[o] = 0;
    return true;
}

static int push(plan *p, const char *name, const char *suffix, kiln_st_dtype dtype, enum ds_fill fill, int64_t d0,
                int64_t d1, uint64_t n_params, kiln_err *err) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 1024;
        kiln_tm_ds_tensor *g = realloc(p->t, cap * sizeof *g);
        if (!g) return kiln_fail(err, NULL, NULL, -1, "out of memory");
        p->t = g, p->cap = cap;
    }
    kiln_tm_ds_tensor *t = &p->t[p->n];
    if ((size_t)snprintf(t->name, sizeof t->name, "%s%s", name, suffix) >= sizeof t->name)
        return kiln_fail(err, NULL, name, -1, "tensor name too long");
    t->dtype = (uint8_t)dtype, t->fill = (uint8_t)fill;
    t->n_dims = d1 ? 2 : 1, t->shape[0] = d0, t->shape[1] = d1;
    t->n_params = n_params;
    p->n++;
    return 0;
}

/* One item's tensors (two for FP8 and FP4: codes and scales), named
 * `prefix` + its name with the block and expert put in. */
static int add_item(plan *p, const ds_arch *a, const char *prefix, const ds_item *it, const int64_t *dim,
                    uint32_t layer, uint32_t expert, kiln_err *err) {
    char tmpl[128], name[80];
    snprintf(tmpl, sizeof tmpl, "%s%s", prefix, it->name);
    if (!expand(name, sizeof name, tmpl, layer, expert)) return kiln_fail(err, NULL, it->name, -1, "name too long");
    int64_t r = dim[it->d0], c = it->d1 ? dim[it->d1] : 0;
    uint64_t n = (uint64_t)r * (uint64_t)(c ? c : 1);
    switch ((enum ds_kind)it->kind) {
    case K_FP8:
        if (push(p, name, ".weight", KILN_ST_F8_E4M3, F_FP8, r, c, n, err)) return -1;
        return push(p, name, a->fp8_scale_suffix, a->fp8_scale,
                    a->fp8_scale == KILN_ST_F32 ? F_SCALE_F32 : F_E8M0, (r + FP8_BLOCK - 1) / FP8_BLOCK,
                    (c + FP8_BLOCK - 1) / FP8_BLOCK, 0, err);
    case K_FP4:
        if (push(p, name, ".weight", KILN_ST_I8, F_FP4, r, c / 2, n, err)) return -1;
        return push(p, name, ".scale", KILN_ST_F8_E8M0, F_E8M0, r, c / FP4_BLOCK, 0, err);
    case K_BF16: return push(p, name, "", KILN_ST_BF16, F_BF16, r, c, n, err);
    case K_NORM: return push(p, name, "", KILN_ST_BF16, F_NORM, r, c, n, err);
    case K_F32: return push(p, name, "", KILN_ST_F32, F_F32, r, c, n, err);
    case K_TID: return push(p, name, "", KILN_ST_I64, F_TID, r, c, n, err);
    }
    return kiln_fail(err, NULL, it->name, -1, "unknown storage kind");
}

static int add_items(plan *p, const ds_arch *a, const ds_item *items, const int64_t *dim, kiln_err *err) {
    for (const ds_item *it = items; it->name; it++)
        if (add_item(p, a, "", it, dim, 0, 0, err)) return -1;
    return 0;
}

static bool block_has(enum ds_when w, bool dense, bool hash, int64_t ratio) {
    switch (w) {
    case W_ALL: return true;
    case W_DENSE: return dense;
    case W_MOE: case W_EXPERT: return !dense;
    case W_COMPRESS: return ratio != 0;
    case W_INDEXER: return ratio == 4;
    case W_HASH: return !dense && hash;
    case W_ROUTED: return !dense && !hash;
    }
    return false;
}

int kiln_tm_ds_plan(const kiln_tm_ds_config *c, kiln_tm_ds_tensor **out, size_t *n, kiln_err *err) {
    *out = NULL, *n = 0;
    if (kiln_tm_ds_check(c, err)) return -1;
    const ds_arch *a = &ARCHS[c->arch];
    int64_t dim[D_COUNT];
    memcpy(dim, a->dim, sizeof dim);
    dim[D_VOCAB] = c->vocab, dim[D_EXPERTS] = c->experts, dim[D_USED] = experts_used(a, c);
    uint32_t dense = dense_layers(a, c);
    plan p = {0};
    if (add_items(&p, a, a->head, dim, err)) goto fail;
    for (uint32_t l = 0; l < c->layers; l++) {
        dim[D_RATIO] = compress_ratio(a, l);
        dim[D_CMP] = (dim[D_RATIO] == 4 ? 2 : 1) * a->dim[D_HEAD];
        bool is_dense = l < dense, hash = l < a->hash_layers;
        for (const ds_item *it = a->layer; it->name; it++) {
            if (!block_has((enum ds_when)it->when, is_dense, hash, dim[D_RATIO])) continue;
            const ds_item *end = it + 1;
            if (it->when == W_EXPERT)
                while (end->name && end->when == W_EXPERT) end++;
            uint32_t reps = it->when == W_EXPERT ? c->experts : 1;
            for (uint32_t e = 0; e < reps; e++)
                for (const ds_item *g = it; g < end; g++)
                    if (add_item(&p, a, a->block, g, dim, l, e, err)) goto fail;
            it = end - 1;
        }
    }
    if (add_items(&p, a, a->tail, dim, err)) goto fail;
    *out = p.t, *n = p.n;
    return 0;
fail:
    free(p.t);
    return -1;
}

void kiln_tm_ds_totals(const kiln_tm_ds_tensor *t, size_t n, kiln_tm_summary *sum) {
    sum->n_params = sum->tensor_bytes = sum->largest_tensor_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t nb = kiln_st_dtype_size((kiln_st_dtype)t[i].dtype) * (uint64_t)t[i].shape[0] *
                      (t[i].n_dims == 2 ? (uint64_t)t[i].shape[1] : 1);
        sum->n_params += t[i].n_params;
        sum->tensor_bytes += nb;
        if (nb > sum->largest_tensor_bytes) sum->largest_tensor_bytes = nb;
    }
    sum->n_tensors = n;
}

/* ------------------------------------------------------------------ */
/* config.json                                                         */

#define SET(o, k, v) json_object_set_new((o), (k), (v))

static json_t *fp8_quantization_config(bool ue8m0) {
    json_t *q = json_pack("{s:s, s:s, s:s, s:[i,i]}", "activation_scheme", "dynamic", "fmt", "e4m3", "quant_method",
                          "fp8", "weight_block_size", FP8_BLOCK, FP8_BLOCK);
    if (q && ue8m0) SET(q, "scale_fmt", json_string("ue8m0"));
    return q;
}

/* DeepSeek-V3's config.json but for the layer and expert counts (expert
 * groups: the real 8 of which 4 are used when the count divides into
 * them, else one). */
static json_t *config_v3(const kiln_tm_ds_config *c, const ds_arch *a, int bos, int eos) {
    const int64_t *d = a->dim;
    bool groups = c->experts % 8 == 0 && c->experts >= 64;
    json_t *o = json_pack("{s:[s], s:s, s:b, s:i, s:i, s:i, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b}",
                          "architectures", a->cls, "model_type", a->model_type, "attention_bias", 0, "bos_token_id",
                          bos, "eos_token_id", eos, "first_k_dense_replace", (int)dense_layers(a, c), "hidden_act",
                          "silu", "hidden_size", (int)d[D_HIDDEN], "intermediate_size", (int)d[D_FFN],
                          "kv_lora_rank", (int)d[D_KV_LORA], "max_position_embeddings", 163840,
                          "moe_intermediate_size", (int)d[D_FFN_EXP], "moe_layer_freq", 1, "n_group", groups ? 8 : 1,
                          "n_routed_experts", (int)c->experts, "norm_topk_prob", 1);
    if (!o) return NULL;
    SET(o, "n_shared_experts", json_integer(1));
    SET(o, "num_attention_heads", json_integer(128));
    SET(o, "num_experts_per_tok", json_integer(experts_used(a, c)));
    SET(o, "num_hidden_layers", json_integer(c->layers));
    SET(o, "num_key_value_heads", json_integer(128));
    SET(o, "num_nextn_predict_layers", json_integer(0));
    SET(o, "q_lora_rank", json_integer(d[D_Q_LORA]));
    SET(o, "qk_nope_head_dim", json_integer(128));
    SET(o, "qk_rope_head_dim", json_integer(64));
    SET(o, "quantization_config", fp8_quantization_config(false));
    SET(o, "rms_norm_eps", json_real(1e-6));
    SET(o, "rope_scaling", json_pack("{s:i, s:i, s:i, s:f, s:f, s:i, s:s}", "beta_fast", 32, "beta_slow", 1, "factor",
                                     40, "mscale", 1.0, "mscale_all_dim", 1.0, "original_max_position_embeddings",
                                     4096, "type", "yarn"));
    SET(o, "rope_theta", json_integer(10000));
    SET(o, "routed_scaling_factor", json_real(2.5));
    SET(o, "scoring_func", json_string("sigmoid"));
    SET(o, "topk_group", json_integer(groups ? 4 : 1));
    SET(o, "topk_method", json_string("noaux_tc"));
    SET(o, "v_head_dim", json_integer(128));
    return o;
}

/* DeepSeek-V4-Flash's config.json, as make_model.py writes it at the real
 * sizes; compress_ratios has one entry more than blocks, as the real one
 * (its last is the MTP layer's). */
static json_t *config_v4(const kiln_tm_ds_config *c, const ds_arch *a, int bos, int eos) {
    const int64_t *d = a->dim;
    json_t *ratios = json_array();
    for (uint32_t l = 0; ratios && l <= c->layers; l++)
        json_array_append_new(ratios, json_integer(l < c->layers ? compress_ratio(a, l) : 0));
    json_t *o = json_pack("{s:[s], s:s, s:b, s:f, s:i, s:i, s:o, s:i, s:s, s:f, s:i, s:i, s:i, s:s, s:i, s:i}",
                          "architectures", a->cls, "model_type", a->model_type, "attention_bias", 0,
                          "attention_dropout", 0.0, "bos_token_id", bos, "eos_token_id", eos, "compress_ratios",
                          ratios, "compress_rope_theta", 160000, "expert_dtype", "fp4", "hc_eps", 1e-6, "hc_mult",
                          (int)d[D_HC], "hc_sinkhorn_iters", 20, "head_dim", (int)d[D_HEAD], "hidden_act", "silu",
                          "hidden_size", (int)d[D_HIDDEN], "index_head_dim", (int)d[D_IDX_HEAD]);
    if (!o) return NULL;
    SET(o, "index_n_heads", json_integer(d[D_IDX_HEADS]));
    SET(o, "index_topk", json_integer(512));
    SET(o, "max_position_embeddings", json_integer(1048576));
    SET(o, "moe_intermediate_size", json_integer(d[D_FFN_EXP]));
    SET(o, "n_routed_experts", json_integer(c->experts));
    SET(o, "n_shared_experts", json_integer(1));
    SET(o, "norm_topk_prob", json_true());
    SET(o, "num_attention_heads", json_integer(d[D_HEADS]));
    SET(o, "num_experts_per_tok", json_integer(experts_used(a, c)));
    SET(o, "num_hash_layers", json_integer(a->hash_layers < c->layers ? a->hash_layers : c->layers));
    SET(o, "num_hidden_layers", json_integer(c->layers));
    SET(o, "num_key_value_heads", json_integer(1));
    SET(o, "num_nextn_predict_layers", json_integer(0));
    SET(o, "o_groups", json_integer(8));
    SET(o, "o_lora_rank", json_integer(1024));
    SET(o, "q_lora_rank", json_integer(d[D_Q_LORA]));
    SET(o, "qk_rope_head_dim", json_integer(64));
    SET(o, "quantization_config", fp8_quantization_config(true));
    SET(o, "rms_norm_eps", json_real(1e-6));
    SET(o, "rope_scaling", json_pack("{s:i, s:i, s:i, s:i, s:s}", "beta_fast", 32, "beta_slow", 1, "factor", 16,
                                     "original_max_position_embeddings", 65536, "type", "yarn"));
    SET(o, "rope_theta", json_integer(10000));
    SET(o, "routed_scaling_factor", json_real(1.5));
    SET(o, "scoring_func", json_string("sqrtsoftplus"));
    SET(o, "sliding_window", json_integer(128));
    SET(o, "swiglu_limit", json_real(10.0));
    SET(o, "topk_method", json_string("noaux_tc"));
    return o;
}

static int write_configs(const kiln_tm_ds_config *c, const char *dir, int bos, int eos, kiln_err *err) {
    const ds_arch *a = &ARCHS[c->arch];
    json_t *o = c->arch == KILN_TM_DS_V3 ? config_v3(c, a, bos, eos) : config_v4(c, a, bos, eos);
    if (!o) return kiln_fail(err, dir, "config.json", -1, "out of memory");
    SET(o, "tie_word_embeddings", json_false());
    SET(o, "torch_dtype", json_string("bfloat16"));
    SET(o, "transformers_version", json_string(c->arch == KILN_TM_DS_V3 ? "4.46.3" : "4.57.1"));
    SET(o, "use_cache", json_true());
    SET(o, "vocab_size", json_integer(c->vocab));
    json_t *gen = json_pack("{s:i, s:i, s:b, s:f, s:f}", "bos_token_id", bos, "eos_token_id", eos, "do_sample", 1,
                            "temperature", 0.6, "top_p", 0.95);
    int flags = JSON_INDENT(2) | JSON_SORT_KEYS;
    if (kiln_tm_write_json(dir, "generation_config.json", gen, flags, err)) return json_decref(o), -1;
    return kiln_tm_write_json(dir, "config.json", o, flags, err);
}

/* ------------------------------------------------------------------ */
/* the bytes                                                           */

static uint64_t next_rand(uint64_t *s) { /* xorshift64*: cheap, fixed-seed noise */
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* Fills bytes [off, off + n) of a tensor (off and n multiples of its
 * element size; off a multiple of 8). `used` and `experts` are for F_TID. */
static void fill_bytes(enum ds_fill f, uint8_t *dst, uint64_t off, size_t n, uint64_t *s, uint32_t used,
                       uint32_t experts) {
    if (f == F_TID) { /* row r's ids r, r + k, r + 2k... (mod experts): distinct, k = experts / used */
        uint32_t step = experts / used;
        for (size_t i = 0; i < n; i += 8) {
            uint64_t el = (off + i) / 8, row = el / used, j = el % used;
            int64_t id = (int64_t)((row + j * step) % experts);
            memcpy(dst + i, &id, 8);
        }
        return;
    }
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = next_rand(s);
        size_t k = n - i < 8 ? n - i : 8;
        switch (f) {
        case F_FP8: /* any E4M3 code but the NaNs 0x7f / 0xff */
            for (size_t j = 0; j < k; j++, r >>= 8) {
                uint8_t b = (uint8_t)r;
                dst[i + j] = (b & 0x7f) == 0x7f ? b ^ 1 : b;
            }
            break;
        case F_FP4: /* E2M1 has no NaN: any byte */
            memcpy(dst + i, &r, k);
            break;
        case F_E8M0: /* 2^-10 .. 2^-3 */
            for (size_t j = 0; j < k; j++, r >>= 8) dst[i + j] = (uint8_t)(117 + (r & 7));
            break;
        case F_SCALE_F32: case F_F32: /* positive, 2^-10.. (scales) or 2^-5.. */
            for (size_t j = 0; j + 4 <= k; j += 4, r >>= 32) {
                uint32_t v = (f == F_SCALE_F32 ? 0x3a800000u : 0x3d000000u) | ((uint32_t)r & 0x007fffffu);
                memcpy(dst + i + j, &v, 4);
            }
            break;
        default: /* bf16: weights +-[2^-7, 2^-5), norms 1 + a little */
            for (size_t j = 0; j + 2 <= k; j += 2, r >>= 16) {
                uint16_t v = f == F_NORM ? (uint16_t)(0x3f80u | (r & 0x0fu))
                                         : (uint16_t)((r & 0x807fu) | (0x3c00u + ((r >> 7 & 1u) << 7)));
                memcpy(dst + i + j, &v, 2);
            }
        }
    }
}

enum { CHUNK = 8 << 20 };

static int write_tensors(const kiln_tm_ds_config *c, const char *dir, const kiln_tm_ds_tensor *t, size_t n,
                         const kiln_tm_opts *o, kiln_tm_summary *sum, kiln_err *err) {
    const ds_arch *a = &ARCHS[c->arch];
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    kiln_stw_opts wo = {.shard_size = c->shard_size, .keep_order = true};
    kiln_stw *w = kiln_stw_create(path, &wo, err);
    if (!w) return -1;
    uint8_t *buf = c->sparse ? NULL : malloc(CHUNK);
    if (!c->sparse && !buf) {
        kiln_fail(err, path, NULL, -1, "out of memory");
        goto fail;
    }
    if (kiln_stw_metadata(w, "format", "pt", err)) goto fail;
    for (size_t i = 0; i < n; i++)
        if (kiln_stw_declare(w, t[i].name, (kiln_st_dtype)t[i].dtype, t[i].n_dims, t[i].shape, err) < 0) goto fail;
    kiln_tm_ds_totals(t, n, sum);
    if (kiln_stw_begin(w, err)) goto fail;
    sum->n_files = kiln_stw_n_files(w);
    uint64_t done = 0;
    uint32_t used = experts_used(a, c);
    int64_t idx;
    int r;
    while ((r = kiln_stw_next(w, &idx, err)) == 1) {
        uint64_t nb = kiln_stw_nbytes(w, idx);
        uint64_t seed = (c->seed + 1) * 0x9e3779b97f4a7c15ull ^ kiln_tm_fnv1a(t[idx].name);
        if (c->sparse) {
            if (kiln_stw_skip(w, nb, err)) goto fail;
            done += nb;
            continue;
        }
        for (uint64_t off = 0; off < nb; off += CHUNK) {
            size_t k = nb - off < CHUNK ? (size_t)(nb - off) : CHUNK;
            fill_bytes((enum ds_fill)t[idx].fill, buf, off, k, &seed, used, c->experts);
            if (kiln_stw_write(w, buf, k, err)) goto fail;
            done += k;
            if (o && o->progress) o->progress(o->progress_ud, done, sum->tensor_bytes);
        }
    }
    if (r < 0) goto fail;
    free(buf);
    return kiln_stw_finish(w, err);
fail:
    free(buf);
    kiln_stw_abort(w);
    return -1;
}

int kiln_tm_ds_write(const kiln_tm_ds_config *c, const char *dir, const kiln_tm_opts *opts, kiln_tm_summary *sum,
                     kiln_err *err) {
    kiln_tm_summary local;
    if (!sum) sum = &local;
    memset(sum, 0, sizeof *sum);
    if (kiln_tm_ds_check(c, err) || kiln_tm_prepare_dir(dir, opts && opts->force, err)) return -1;
    kiln_tm_ds_tensor *t;
    size_t n;
    if (kiln_tm_ds_plan(c, &t, &n, err)) return -1;
    int rc = write_tensors(c, dir, t, n, opts, sum, err);
    free(t);
    if (rc) return -1;
    /* the real vocabulary: DeepSeek's tokenizer is the caller's to copy in;
     * else kiln's own, whose special ids config.json then names */
    int bos = 0, eos = 1, tok = -1;
    if (c->vocab != REAL_VOCAB) {
        kiln_tm_config tc;
        tok = KILN_TM_TOK_QWEN;
        if (small_tokenizer_config(c, &tc, err)) return -1;
        kiln_tm_bos_eos(&tc, KILN_TM_TOK_QWEN, &bos, &eos);
        if (kiln_tm_write_tokenizer(&tc, KILN_TM_TOK_QWEN, dir, err)) return -1;
    }
    if (kiln_tm_remove_stale(dir, sum->n_files, tok, err)) return -1;
    return write_configs(c, dir, bos, eos, err);
}
