/* convert/arch_gpt2.c - GPT2LMHeadModel (general.architecture = gpt2).
 *
 * GPT-2 stores its linear layers as Conv1D, [in, out], so their weights
 * are transposed; q, k and v are one fused c_attn; positions are a learned
 * wpe table (kept F32). Names come with or without the "transformer."
 * prefix depending on the checkpoint's age. llama.cpp writes its own small
 * set of keys for gpt2; it writes 4 * n_embd as feed_forward_length even
 * when n_inner says otherwise, which gives GGUFs llama.cpp cannot load, so
 * kiln writes n_inner when it is set. */
#include "arch.h"
#include "hparams.h"
#include "json.h"

static const cv_tmap GPT2_TENSORS[] = {
    {"wte", "token_embd", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"wpe", "position_embd", {CV_D_POS, CV_D_EMBD}, CV_T_F32},
    {"ln_f", "output_norm", {CV_D_EMBD}, 0},
    {"lm_head", "output", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"h.{bid}.ln_1", "blk.{bid}.attn_norm", {CV_D_EMBD}, 0},
    {"h.{bid}.attn.c_attn", "blk.{bid}.attn_qkv", {CV_D_EMBD, CV_D_QKV}, CV_T_CONV1D},
    {"h.{bid}.attn.c_proj", "blk.{bid}.attn_output", {CV_D_EMBD, CV_D_EMBD}, CV_T_CONV1D},
    {"h.{bid}.ln_2", "blk.{bid}.ffn_norm", {CV_D_EMBD}, 0},
    {"h.{bid}.mlp.c_fc", "blk.{bid}.ffn_up", {CV_D_EMBD, CV_D_FF}, CV_T_CONV1D},
    {"h.{bid}.mlp.c_proj", "blk.{bid}.ffn_down", {CV_D_FF, CV_D_EMBD}, CV_T_CONV1D},
    {NULL, NULL, {0}, 0},
};

/* the attention masks GPT-2 checkpoints carry as buffers */
static const char *const GPT2_SKIP[] = {".attn.bias", ".attn.masked_bias", ".attention.masked_bias",
                                        ".attention.bias", ".rotary_emb.inv_freq", NULL};

static int need_int(json_t *config, const char *key, int64_t *out, cv_kv *k) {
    json_t *v = cv_json_get(config, key);
    if (!v || json_is_null(v)) return kiln_fail(k->err, "config.json", key, -1, "missing (needed by gpt2)");
    if (!cv_json_int(v, out) || *out <= 0) return kiln_fail(k->err, "config.json", key, -1, "must be a positive integer");
    return 0;
}

/* GPT2Model.set_gguf_parameters, with n_inner honoured. */
static int gpt2_params(const cv_hp *hp, json_t *config, cv_kv *k) {
    int64_t n_layer, n_ctx, n_embd, n_head;
    double eps;
    if (need_int(config, "n_layer", &n_layer, k) < 0 || need_int(config, "n_ctx", &n_ctx, k) < 0 ||
        need_int(config, "n_embd", &n_embd, k) < 0 || need_int(config, "n_head", &n_head, k) < 0)
        return -1;
    json_t *e = cv_json_get(config, "layer_norm_epsilon");
    if (!cv_json_num(e, &eps))
        return kiln_fail(k->err, "config.json", "layer_norm_epsilon", -1, "missing or not a number (needed by gpt2)");
    if (cv_kv_arch_u32(k, "block_count", (uint32_t)n_layer) < 0 || cv_kv_arch_u32(k, "context_length", (uint32_t)n_ctx) < 0 ||
        cv_kv_arch_u32(k, "embedding_length", (uint32_t)n_embd) < 0 ||
        cv_kv_arch_u32(k, "feed_forward_length", (uint32_t)hp->dim[CV_D_FF]) < 0 ||
        cv_kv_arch_u32(k, "attention.head_count", (uint32_t)n_head) < 0)
        return -1;
    return cv_kv_arch_f32(k, "attention.layer_norm_epsilon", (float)eps);
}

const cv_arch cv_arch_gpt2 = {
    .hf_name = "GPT2LMHeadModel",
    .gguf_arch = "gpt2",
    .tensors = GPT2_TENSORS,
    .strip_prefix = "transformer.",
    .skip_suffixes = GPT2_SKIP,
    .flags = CV_A_FF_4X | CV_A_OWN_PARAMS,
    .params = gpt2_params,
};
