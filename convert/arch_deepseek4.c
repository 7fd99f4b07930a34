/* convert/arch_deepseek4.c - DeepseekV4ForCausalLM (DeepSeek-V4-Flash),
 * llama.cpp arch `deepseek4`, as llama.cpp's DeepseekV4Model converts it.
 *
 * The checkpoint's own names (no "model." prefix): `embed`, `head`,
 * `norm`, `layers.N.attn.*`, `layers.N.ffn.*`, hyper-connection mixers
 * (`hc_attn_*`, `hc_ffn_*`, `hc_head_*`: fn, base, scale, stored without a
 * .weight suffix, as are `attn_sink` and the compressors' `ape`). Attention
 * is one shared KV head (wkv, kv_norm) with a low-rank q (wq_a, q_norm,
 * wq_b), a grouped low-rank output (wo_a, o_groups x o_lora_rank, then
 * wo_b), per-head sinks, and on layers whose compress_ratios entry is not 0
 * a KV compressor (ape, wkv, wgate, norm; twice as wide at ratio 4), plus at
 * ratio 4 a sparse-attention indexer with its own compressor. The MoE has a
 * router (gate, with a `bias` that becomes exp_probs_b.bias, or on the
 * first num_hash_layers layers a token-to-expert table `tid2eid`), routed
 * experts w1/w2/w3 and shared experts.
 *
 * As stored: projections F8_E4M3 with one F8_E8M0 `.scale` per 128x128
 * block (dequantized inline by plan.c/emit.c and written Q8_0, whatever
 * the outtype), routed experts FP4 (I8, two E2M1 codes a byte) with one
 * E8M0 `.scale` per 32 values (repacked byte for byte into MXFP4 by
 * mxfp4_hf.c, stacked per block), everything else BF16 (written BF16) or
 * F32 (written F32). So --outtype changes nothing but an F16 source's
 * matrices, and general.file_type is MOSTLY_MXFP4_MOE (38) at every
 * outtype. The hash tables (I64) and the experts come first, hash tables
 * then gate/down/up per block, as llama.cpp's generate_extra_tensors
 * writes them (plan_first below); then the rest in source order. The
 * multi-token-prediction layers (`mtp.*`) are dropped, as llama.cpp's
 * converter drops them.
 *
 * Metadata: the common keys, then V4's (params below). llama.cpp's
 * converter sets tokenizer.chat_template right after
 * general.architecture: to its own template (models/templates/
 * deepseek-ai-DeepSeek-V4.jinja), replaced by the checkpoint's if it has
 * one. kiln reserves that slot and fills it with the checkpoint's
 * template; it does not ship llama.cpp's, so for a checkpoint without one
 * the slot is dropped (convert.c) and the file has no template where
 * llama.cpp's has its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/types.h"
#include "arch.h"
#include "hparams.h"
#include "json.h"
#include "stlist.h"

#define L "layers.{bid}."
#define B "blk.{bid}."

static const cv_tmap DS4_TENSORS[] = {
    {"embed", "token_embd", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"head", "output", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"norm", "output_norm", {CV_D_EMBD}, 0},
    {"hc_head_fn", "output_hc_fn", {CV_D_HC, CV_D_HC_DIM}, 0},
    {"hc_head_base", "output_hc_base", {CV_D_HC}, 0},
    {"hc_head_scale", "output_hc_scale", {CV_D_ONE}, 0},
    {L "attn_norm", B "attn_norm", {CV_D_EMBD}, 0},
    {L "ffn_norm", B "ffn_norm", {CV_D_EMBD}, 0},
    {L "hc_attn_fn", B "hc_attn_fn", {CV_D_HC_MIX, CV_D_HC_DIM}, 0},
    {L "hc_attn_base", B "hc_attn_base", {CV_D_HC_MIX}, 0},
    {L "hc_attn_scale", B "hc_attn_scale", {CV_D_ANY}, 0}, /* 3: plan_first */
    {L "hc_ffn_fn", B "hc_ffn_fn", {CV_D_HC_MIX, CV_D_HC_DIM}, 0},
    {L "hc_ffn_base", B "hc_ffn_base", {CV_D_HC_MIX}, 0},
    {L "hc_ffn_scale", B "hc_ffn_scale", {CV_D_ANY}, 0},
    {L "attn.attn_sink", B "attn_sinks", {CV_D_HEADS}, 0},
    {L "attn.wq_a", B "attn_q_a", {CV_D_Q_LORA, CV_D_EMBD}, 0},
    {L "attn.q_norm", B "attn_q_a_norm", {CV_D_Q_LORA}, 0},
    {L "attn.wq_b", B "attn_q_b", {CV_D_Q, CV_D_Q_LORA}, 0},
    {L "attn.wkv", B "attn_kv", {CV_D_HEAD, CV_D_EMBD}, 0},
    {L "attn.kv_norm", B "attn_kv_a_norm", {CV_D_HEAD}, 0},
    {L "attn.wo_a", B "attn_output_a", {CV_D_O_A, CV_D_O_A_IN}, 0},
    {L "attn.wo_b", B "attn_output_b", {CV_D_EMBD, CV_D_O_A}, 0},
    /* the compressors' widths follow the layer's ratio: plan_first checks them */
    {L "attn.compressor.ape", B "attn_compressor_ape", {CV_D_ANY, CV_D_ANY}, 0},
    {L "attn.compressor.wkv", B "attn_compressor_kv", {CV_D_ANY, CV_D_EMBD}, 0},
    {L "attn.compressor.wgate", B "attn_compressor_gate", {CV_D_ANY, CV_D_EMBD}, 0},
    {L "attn.compressor.norm", B "attn_compressor_norm", {CV_D_HEAD}, 0},
    {L "attn.indexer.wq_b", B "indexer.attn_q_b", {CV_D_IDX_Q, CV_D_Q_LORA}, 0},
    {L "attn.indexer.weights_proj", B "indexer.proj", {CV_D_IDX_HEADS, CV_D_EMBD}, CV_T_F32},
    {L "attn.indexer.compressor.ape", B "indexer_compressor_ape", {CV_D_ANY, CV_D_ANY}, 0},
    {L "attn.indexer.compressor.wkv", B "indexer_compressor_kv", {CV_D_ANY, CV_D_EMBD}, 0},
    {L "attn.indexer.compressor.wgate", B "indexer_compressor_gate", {CV_D_ANY, CV_D_EMBD}, 0},
    {L "attn.indexer.compressor.norm", B "indexer_compressor_norm", {CV_D_IDX_HEAD}, 0},
    {L "ffn.gate", B "ffn_gate_inp", {CV_D_NEXP, CV_D_EMBD}, CV_T_F32},
    {L "ffn.gate_bias", B "exp_probs_b", {CV_D_NEXP}, 0}, /* `ffn.gate.bias`, renamed */
    {L "ffn.shared_experts.w1", B "ffn_gate_shexp", {CV_D_FF_SHEXP, CV_D_EMBD}, 0},
    {L "ffn.shared_experts.w2", B "ffn_down_shexp", {CV_D_EMBD, CV_D_FF_SHEXP}, 0},
    {L "ffn.shared_experts.w3", B "ffn_up_shexp", {CV_D_FF_SHEXP, CV_D_EMBD}, 0},
    {NULL, NULL, {0}, 0},
};

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* The names llama.cpp's map gives a suffix of their own: the router bias
 * (not ffn_gate_inp's) and the tensors stored without .weight. */
static const char *ds4_rename(const char *name, char *buf, size_t cap) {
    static const char *const BARE[] = {"_fn", "_base", "_scale", ".attn_sink", ".ape", NULL};
    if (ends_with(name, ".ffn.gate.bias")) {
        snprintf(buf, cap, "%.*s_bias.bias", (int)(strlen(name) - strlen(".bias")), name);
        return buf;
    }
    for (const char *const *s = BARE; *s; s++)
        if (ends_with(name, *s) && !ends_with(name, ".scale")) {
            snprintf(buf, cap, "%s.weight", name);
            return buf;
        }
    return name;
}

/* A non-negative integer config key: 1 found, 0 absent (error if
 * `required`), -1 error. */
static int get_int(json_t *config, const char *key, bool required, int64_t *out, kiln_err *err) {
    json_t *v = cv_json_get(config, key);
    if (!v || json_is_null(v))
        return required ? kiln_fail(err, "config.json", key, -1, "missing (needed for deepseek4)") : 0;
    if (!cv_json_int(v, out) || *out < 0 || *out > UINT32_MAX)
        return kiln_fail(err, "config.json", key, -1, "must be a non-negative integer");
    return 1;
}

static void set_dim(cv_hp *hp, int d, int64_t v, const char *key) {
    hp->dim[d] = v;
    snprintf(hp->dim_key[d], sizeof hp->dim_key[d], "%s", key);
}

/* V4's own dimensions, from the keys its converter reads. */
static int ds4_hparams(json_t *config, cv_hp *hp, kiln_err *err) {
    int64_t qr, hc, og, olr, inh, ihd, nsh;
    if (get_int(config, "q_lora_rank", true, &qr, err) < 0 || get_int(config, "hc_mult", true, &hc, err) < 0 ||
        get_int(config, "o_groups", true, &og, err) < 0 || get_int(config, "o_lora_rank", true, &olr, err) < 0 ||
        get_int(config, "index_n_heads", true, &inh, err) < 0 ||
        get_int(config, "index_head_dim", true, &ihd, err) < 0 ||
        get_int(config, "n_shared_experts", true, &nsh, err) < 0)
        return -1;
    if (!og) return kiln_fail(err, "config.json", "o_groups", -1, "must be positive");
    set_dim(hp, CV_D_Q_LORA, qr, "q_lora_rank");
    set_dim(hp, CV_D_HC, hc, "hc_mult");
    set_dim(hp, CV_D_HC_DIM, hc * hp->dim[CV_D_EMBD], "hc_mult * hidden_size");
    set_dim(hp, CV_D_HC_MIX, (2 + hc) * hc, "(2 + hc_mult) * hc_mult");
    set_dim(hp, CV_D_O_A, og * olr, "o_groups * o_lora_rank");
    set_dim(hp, CV_D_O_A_IN, hp->n_head * hp->head_dim / og, "num_attention_heads * head_dim / o_groups");
    set_dim(hp, CV_D_IDX_Q, inh * ihd, "index_n_heads * index_head_dim");
    set_dim(hp, CV_D_IDX_HEADS, inh, "index_n_heads");
    set_dim(hp, CV_D_IDX_HEAD, ihd, "index_head_dim");
    if (hp->dim[CV_D_FF_EXP])
        set_dim(hp, CV_D_FF_SHEXP, nsh * hp->dim[CV_D_FF_EXP], "n_shared_experts * moe_intermediate_size");
    /* llama.cpp's dequant_model takes every F8 weight with a `.scale` as
     * 128x128 blocks, whatever quantization_config says (the real one has
     * no weight_block_size) or without one: the config is edited to say
     * so, in place (the config goes through here once) */
    json_t *qc = cv_json_get(config, "quantization_config");
    const char *method = json_is_object(qc) ? cv_json_str(cv_json_get(qc, "quant_method")) : NULL;
    if (!json_is_object(qc) || !method) {
        qc = json_object();
        if (!qc || json_object_set_new(config, "quantization_config", qc) < 0 ||
            json_object_set_new(qc, "quant_method", json_string("fp8")) < 0)
            return kiln_fail(err, "config.json", NULL, -1, "out of memory");
        method = "fp8";
    }
    if (!strcmp(method, "fp8") && json_object_set_new(qc, "weight_block_size", json_pack("[ii]", 128, 128)) < 0)
        return kiln_fail(err, "config.json", NULL, -1, "out of memory");
    return 0;
}

/* tensor_force_quant: FP8 matrices Q8_0, F32 sources F32, BF16 matrices BF16. */
static int ds4_tensor_type(const kiln_st_tensor *src, bool fp8_scaled) {
    if (fp8_scaled && src->n_dims >= 2) return KILN_Q8_0;
    if (src->dtype == KILN_ST_F32) return KILN_F32;
    if (src->dtype == KILN_ST_BF16 && src->n_dims >= 2) return KILN_BF16;
    return -1;
}

/* compress_ratios[bid], checked to cover every block. */
static int ratio_of(json_t *config, int64_t bid, int64_t *ratio, kiln_err *err) {
    json_t *a = cv_json_get(config, "compress_ratios");
    if (!json_is_array(a) || (int64_t)json_array_size(a) <= bid || !cv_json_int(json_array_get(a, (size_t)bid), ratio) ||
        *ratio < 0)
        return kiln_fail(err, "config.json", "compress_ratios", -1,
                         "must be a list of non-negative integers, one per layer (layer %lld)", (long long)bid);
    return 0;
}

/* Tensor `name` of the checkpoint, if present, must have shape [d0, d1]
 * (d1 < 0: one dimension). */
static int want_shape(const cv_stlist *st, const char *name, int64_t d0, int64_t d1, const char *why, kiln_err *err) {
    int64_t i = cv_stlist_find(st, name);
    if (i < 0) return 0;
    const kiln_st_tensor *t = &st->t[i];
    bool ok = d1 < 0 ? t->n_dims == 1 && t->shape[0] == d0 : t->n_dims == 2 && t->shape[0] == d0 && t->shape[1] == d1;
    if (ok) return 0;
    if (d1 < 0) return kiln_fail(err, "config.json", why, -1, "implies shape [%lld] for tensor %s", (long long)d0, name);
    return kiln_fail(err, "config.json", why, -1, "implies shape [%lld, %lld] for tensor %s", (long long)d0,
                     (long long)d1, name);
}

/* The per-layer shapes the table leaves open (CV_D_ANY). */
static int check_layer(json_t *config, const cv_hp *hp, const cv_stlist *st, int64_t bid, kiln_err *err) {
    int64_t ratio, hd = hp->head_dim, ihd = hp->dim[CV_D_IDX_HEAD], embd = hp->dim[CV_D_EMBD];
    if (ratio_of(config, bid, &ratio, err) < 0) return -1;
    int64_t wide = (ratio == 4 ? 2 : 1) * hd;
    char n[160];
    static const char *const SCALES[] = {"hc_attn_scale", "hc_ffn_scale"};
    for (int i = 0; i < 2; i++) {
        snprintf(n, sizeof n, "layers.%lld.%s", (long long)bid, SCALES[i]);
        if (want_shape(st, n, 3, -1, "hc_mult", err) < 0) return -1;
    }
    static const char *const COMP[] = {"attn.compressor.", "attn.indexer.compressor."};
    for (int c = 0; c < 2; c++) {
        int64_t w = c ? 2 * ihd : wide;
        const char *why = c ? "index_head_dim" : "compress_ratios";
        snprintf(n, sizeof n, "layers.%lld.%sape", (long long)bid, COMP[c]);
        if (want_shape(st, n, ratio, w, "compress_ratios", err) < 0) return -1;
        snprintf(n, sizeof n, "layers.%lld.%swkv.weight", (long long)bid, COMP[c]);
        if (want_shape(st, n, w, embd, why, err) < 0) return -1;
        snprintf(n, sizeof n, "layers.%lld.%swgate.weight", (long long)bid, COMP[c]);
        if (want_shape(st, n, w, embd, why, err) < 0) return -1;
    }
    return 0;
}

/* Appends an output to *out (grown by doubling). */
static int push(cv_first_out **out, uint64_t *n, uint64_t *cap, const cv_first_out *o, kiln_err *err) {
    if (*n == *cap) {
        uint64_t c = *cap ? *cap * 2 : 16;
        cv_first_out *t = realloc(*out, c * sizeof *t);
        if (!t) return kiln_fail(err, NULL, NULL, -1, "out of memory");
        *out = t;
        *cap = c;
    }
    (*out)[(*n)++] = *o;
    return 0;
}

/* One block's routed experts of one projection, stacked: every expert's
 * FP4 codes [rows, cols / 2] and E8M0 scales [rows, cols / 32]. */
static int plan_experts(const cv_hp *hp, const cv_stlist *st, bool *drop, int64_t bid, int proj, cv_first_out *o,
                        kiln_err *err) {
    static const char *const GGUF[] = {"ffn_gate_exps", "ffn_down_exps", "ffn_up_exps"};
    int64_t n_exp = hp->dim[CV_D_NEXP], ff = hp->dim[CV_D_FF_EXP], embd = hp->dim[CV_D_EMBD];
    int64_t rows = proj == 1 ? embd : ff, cols = proj == 1 ? ff : embd;
    memset(o, 0, sizeof *o);
    if (!n_exp || !ff) return kiln_fail(err, "config.json", n_exp ? "moe_intermediate_size" : "n_routed_experts", -1,
                                        "missing (needed for the routed experts)");
    if (cols % 32) return kiln_fail(err, "config.json", proj == 1 ? "moe_intermediate_size" : "hidden_size", -1,
                                    "must be a multiple of 32 for FP4 experts");
    o->st = malloc((size_t)n_exp * sizeof *o->st);
    o->scale = malloc((size_t)n_exp * sizeof *o->scale);
    char name[96];
    snprintf(name, sizeof name, "blk.%lld.%s.weight", (long long)bid, GGUF[proj]);
    o->name = strdup(name);
    if (!o->st || !o->scale || !o->name) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    for (int64_t x = 0; x < n_exp; x++) {
        char w[128], s[128];
        snprintf(w, sizeof w, "layers.%lld.ffn.experts.%lld.w%d.weight", (long long)bid, (long long)x, proj + 1);
        snprintf(s, sizeof s, "layers.%lld.ffn.experts.%lld.w%d.scale", (long long)bid, (long long)x, proj + 1);
        int64_t wi = cv_stlist_find(st, w), si = cv_stlist_find(st, s);
        if (wi < 0 || si < 0)
            return kiln_fail(err, wi < 0 ? w : s, NULL, -1, "missing: block %lld needs all %lld routed experts",
                             (long long)bid, (long long)n_exp);
        const kiln_st_tensor *wt = &st->t[wi], *sc = &st->t[si];
        if ((wt->dtype != KILN_ST_I8 && wt->dtype != KILN_ST_U8) ||
            (sc->dtype != KILN_ST_F8_E8M0 && sc->dtype != KILN_ST_U8))
            return kiln_fail(err, w, "dtype", -1,
                             "routed experts must be FP4 (I8 or U8) with F8_E8M0 scales, not %s with %s (kiln "
                             "reads them as llama.cpp's converter does, as stored)",
                             kiln_st_dtype_name(wt->dtype), kiln_st_dtype_name(sc->dtype));
        if (wt->n_dims != 2 || wt->shape[0] != rows || wt->shape[1] != cols / 2 || sc->n_dims != 2 ||
            sc->shape[0] != rows || sc->shape[1] != cols / 32)
            return kiln_fail(err, w, "shape", -1,
                             "expected FP4 codes [%lld, %lld] and scales [%lld, %lld] (config.json's sizes)",
                             (long long)rows, (long long)(cols / 2), (long long)rows, (long long)(cols / 32));
        o->st[x] = wi;
        o->scale[x] = si;
        drop[wi] = drop[si] = true;
    }
    o->n_parts = (uint32_t)n_exp;
    o->n_dims = 3;
    o->hf[0] = n_exp, o->hf[1] = rows, o->hf[2] = cols;
    o->type = KILN_MXFP4;
    return 0;
}

/* The hash-routing table of a block, narrowed to I32. */
static int plan_hash(const cv_stlist *st, bool *drop, int64_t bid, cv_first_out *o, kiln_err *err) {
    char n[96], g[96];
    memset(o, 0, sizeof *o);
    snprintf(n, sizeof n, "layers.%lld.ffn.gate.tid2eid", (long long)bid);
    int64_t i = cv_stlist_find(st, n);
    if (i < 0) return kiln_fail(err, "config.json", "num_hash_layers", -1, "says layer %lld is hash-routed, but %s is missing",
                                (long long)bid, n);
    const kiln_st_tensor *t = &st->t[i];
    if ((t->dtype != KILN_ST_I64 && t->dtype != KILN_ST_I32) || t->n_dims != 2)
        return kiln_fail(err, n, "dtype", -1, "expected a 2-D I64 or I32 table, not %s with %u dimensions",
                         kiln_st_dtype_name(t->dtype), t->n_dims);
    snprintf(g, sizeof g, "blk.%lld.ffn_gate_tid2eid.weight", (long long)bid);
    o->name = strdup(g);
    o->st = malloc(sizeof *o->st);
    if (!o->name || !o->st) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    o->st[0] = i;
    o->n_parts = 1;
    o->n_dims = 2;
    o->hf[0] = t->shape[0], o->hf[1] = t->shape[1];
    o->type = KILN_I32;
    drop[i] = true;
    return 0;
}

static void free_first(cv_first_out *f, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        free(f[i].name);
        free(f[i].st);
        free(f[i].scale);
    }
    free(f);
}

/* generate_extra_tensors: the hash tables, then each block's experts. */
static int ds4_plan_first(json_t *config, const cv_hp *hp, const cv_stlist *st, bool *drop, cv_first_out **out,
                          uint64_t *n_out, kiln_err *err) {
    int64_t n_hash;
    cv_first_out *f = NULL, o;
    uint64_t n = 0, cap = 0;
    if (get_int(config, "num_hash_layers", true, &n_hash, err) < 0) return -1;
    for (uint64_t i = 0; i < st->n; i++) /* MTP layers and stray hash tables: dropped, as llama.cpp does */
        if (!strncmp(st->t[i].name, "mtp.", 4) || ends_with(st->t[i].name, ".ffn.gate.tid2eid")) drop[i] = true;
    int rc = 0;
    for (int64_t bid = 0; rc == 0 && bid < n_hash && bid < hp->n_layer; bid++) {
        rc = plan_hash(st, drop, bid, &o, err);
        if (rc == 0) rc = push(&f, &n, &cap, &o, err);
        else free(o.name), free(o.st);
    }
    for (int64_t bid = 0; rc == 0 && bid < hp->n_layer; bid++) {
        rc = check_layer(config, hp, st, bid, err);
        for (int proj = 0; rc == 0 && proj < 3; proj++) {
            rc = plan_experts(hp, st, drop, bid, proj, &o, err);
            if (rc == 0) rc = push(&f, &n, &cap, &o, err);
            else free(o.name), free(o.st), free(o.scale);
        }
    }
    if (rc < 0) {
        free_first(f, n);
        return -1;
    }
    *out = f;
    *n_out = n;
    return 0;
}

/* Reserves tokenizer.chat_template's place right after
 * general.architecture, where llama.cpp's converter sets it; the
 * vocabulary's special tokens fill it. Not counted in the metadata size:
 * the real value is. */
static int ds4_params_head(const cv_hp *hp, json_t *config, cv_kv *k) {
    (void)hp, (void)config;
    return kiln_writer_set_str(k->w, "tokenizer.chat_template", "", k->err);
}

/* A float config key that must be there. */
static int need_num(json_t *config, const char *key, double *out, kiln_err *err) {
    if (!cv_json_num(cv_json_get(config, key), out))
        return kiln_fail(err, "config.json", key, -1, "missing or not a number (needed for deepseek4)");
    return 0;
}

/* DeepseekV4Model.set_gguf_parameters after the common keys. */
static int ds4_params(const cv_hp *hp, json_t *config, cv_kv *k) {
    kiln_err *err = k->err;
    static const struct {
        const char *key, *suffix;
    } U32[] = {
        {"qk_rope_head_dim", "rope.dimension_count"},
        {"q_lora_rank", "attention.q_lora_rank"},
        {"sliding_window", "attention.sliding_window"},
        {"moe_intermediate_size", "expert_feed_forward_length"},
        {"n_shared_experts", "expert_shared_count"},
    }, U32_B[] = {
        {"index_n_heads", "attention.indexer.head_count"},
        {"index_head_dim", "attention.indexer.key_length"},
        {"index_topk", "attention.indexer.top_k"},
        {"o_groups", "attention.output_group_count"},
        {"o_lora_rank", "attention.output_lora_rank"},
    };
    int64_t v, hc, iters, n_hash;
    double scale, limit, rope, eps;
    for (size_t i = 0; i < sizeof U32 / sizeof U32[0]; i++)
        if (get_int(config, U32[i].key, true, &v, err) < 0 || cv_kv_arch_u32(k, U32[i].suffix, (uint32_t)v) < 0)
            return -1;
    json_t *norm = cv_json_get(config, "norm_topk_prob");
    if (!json_is_boolean(norm)) return kiln_fail(err, "config.json", "norm_topk_prob", -1, "missing or not a boolean");
    if (need_num(config, "routed_scaling_factor", &scale, err) < 0 || need_num(config, "swiglu_limit", &limit, err) < 0 ||
        cv_kv_arch_f32(k, "expert_weights_scale", (float)scale) < 0 ||
        cv_kv_arch_bool(k, "expert_weights_norm", json_is_true(norm)) < 0)
        return -1;
    float *clamp = malloc((size_t)hp->n_layer * sizeof *clamp);
    if (!clamp) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    for (int64_t i = 0; i < hp->n_layer; i++) clamp[i] = (float)limit;
    char key[96];
    int rc = 0;
    static const char *const CLAMP[] = {"swiglu_clamp_exp", "swiglu_clamp_shexp"};
    for (int i = 0; rc == 0 && i < 2; i++) {
        snprintf(key, sizeof key, "%s.%s", k->arch, CLAMP[i]);
        rc = cv_kv_arr(k, key, KILN_GGUF_FLOAT32, clamp, (uint64_t)hp->n_layer);
    }
    free(clamp);
    if (rc < 0) return -1;
    for (size_t i = 0; i < sizeof U32_B / sizeof U32_B[0]; i++)
        if (get_int(config, U32_B[i].key, true, &v, err) < 0 || cv_kv_arch_u32(k, U32_B[i].suffix, (uint32_t)v) < 0)
            return -1;
    /* compress_ratios as given (gguf-py writes Python ints as INT32) */
    json_t *ratios = cv_json_get(config, "compress_ratios");
    size_t nr = json_array_size(ratios);
    if (!json_is_array(ratios) || !nr)
        return kiln_fail(err, "config.json", "compress_ratios", -1, "missing or not a list of integers");
    int32_t *r = malloc(nr * sizeof *r);
    if (!r) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    for (size_t i = 0; rc == 0 && i < nr; i++) {
        if (!cv_json_int(json_array_get(ratios, i), &v) || v < INT32_MIN || v > INT32_MAX)
            rc = kiln_fail(err, "config.json", "compress_ratios", -1, "entry %zu is not a 32-bit integer", i);
        else r[i] = (int32_t)v;
    }
    snprintf(key, sizeof key, "%s.attention.compress_ratios", k->arch);
    if (rc == 0) rc = cv_kv_arr(k, key, KILN_GGUF_INT32, r, nr);
    free(r);
    if (rc < 0 || need_num(config, "compress_rope_theta", &rope, err) < 0 ||
        cv_kv_arch_f32(k, "attention.compress_rope_freq_base", (float)rope) < 0 ||
        get_int(config, "hc_mult", true, &hc, err) < 0 || cv_kv_arch_u32(k, "hyper_connection.count", (uint32_t)hc) < 0 ||
        get_int(config, "hc_sinkhorn_iters", true, &iters, err) < 0 ||
        cv_kv_arch_u32(k, "hyper_connection.sinkhorn_iterations", (uint32_t)iters) < 0 ||
        need_num(config, "hc_eps", &eps, err) < 0 || cv_kv_arch_f32(k, "hyper_connection.epsilon", (float)eps) < 0 ||
        get_int(config, "num_hash_layers", true, &n_hash, err) < 0 ||
        cv_kv_arch_u32(k, "hash_layer_count", (uint32_t)n_hash) < 0)
        return -1;
    return cv_kv_arch_u32(k, "embedding_length_out", (uint32_t)(hp->dim[CV_D_EMBD] * hc));
}

const cv_arch cv_arch_deepseek4 = {
    .hf_name = "DeepseekV4ForCausalLM",
    .gguf_arch = "deepseek4",
    .tensors = DS4_TENSORS,
    .flags = CV_A_FTYPE_MXFP4_MOE,
    .params = ds4_params,
    .params_head = ds4_params_head,
    .rename = ds4_rename,
    .hparams = ds4_hparams,
    .tensor_type = ds4_tensor_type,
    .plan_first = ds4_plan_first,
};
