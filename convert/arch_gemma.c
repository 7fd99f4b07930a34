/* convert/arch_gemma.c - Gemma2ForCausalLM and Gemma3ForCausalLM (text),
 * which llama.cpp converts (conversion/gemma.py) to general.architecture
 * gemma2 and gemma3.
 *
 * What is particular to them: every RMS norm weight is stored by HF as w
 * for a norm that scales by (1 + w), and the converter adds the 1 (in the
 * source dtype, as torch does); each block has four norms (before and
 * after attention, before and after the FFN), gemma3 also per-head q/k
 * norms; the vocabulary is SentencePiece without a space prefix; and the
 * soft-capping and sliding-window settings become keys of their own.
 * Gemma 2 writes its keys itself, gemma 3 after llama.cpp's common ones.
 *
 * Not done: Gemma3ForConditionalGeneration (the vision tower), Gemma 1,
 * and gemma3's cut of token_embd to the tokenizer's size when the
 * tokenizer is a tokenizer.json (with tokenizer.model the cut is a no-op). */
#include "arch.h"
#include "hparams.h"

#include "json.h"

#define GEMMA_BLOCK_TENSORS                                                                                    \
    {"model.embed_tokens", "token_embd", {CV_D_VOCAB, CV_D_EMBD}, 0},                                         \
    {"model.norm", "output_norm", {CV_D_EMBD}, CV_T_NORM_SHIFT},                                              \
    {"model.layers.{bid}.input_layernorm", "blk.{bid}.attn_norm", {CV_D_EMBD}, CV_T_NORM_SHIFT},              \
    {"model.layers.{bid}.self_attn.q_proj", "blk.{bid}.attn_q", {CV_D_Q, CV_D_EMBD}, 0},                      \
    {"model.layers.{bid}.self_attn.k_proj", "blk.{bid}.attn_k", {CV_D_KV, CV_D_EMBD}, 0},                     \
    {"model.layers.{bid}.self_attn.v_proj", "blk.{bid}.attn_v", {CV_D_KV, CV_D_EMBD}, 0},                     \
    {"model.layers.{bid}.self_attn.o_proj", "blk.{bid}.attn_output", {CV_D_EMBD, CV_D_Q}, 0},                 \
    {"model.layers.{bid}.post_attention_layernorm", "blk.{bid}.post_attention_norm", {CV_D_EMBD},             \
     CV_T_NORM_SHIFT},                                                                                        \
    {"model.layers.{bid}.pre_feedforward_layernorm", "blk.{bid}.ffn_norm", {CV_D_EMBD}, CV_T_NORM_SHIFT},     \
    {"model.layers.{bid}.post_feedforward_layernorm", "blk.{bid}.post_ffw_norm", {CV_D_EMBD},                 \
     CV_T_NORM_SHIFT},                                                                                        \
    {"model.layers.{bid}.mlp.gate_proj", "blk.{bid}.ffn_gate", {CV_D_FF, CV_D_EMBD}, 0},                      \
    {"model.layers.{bid}.mlp.up_proj", "blk.{bid}.ffn_up", {CV_D_FF, CV_D_EMBD}, 0},                          \
    {"model.layers.{bid}.mlp.down_proj", "blk.{bid}.ffn_down", {CV_D_EMBD, CV_D_FF}, 0}

static const cv_tmap GEMMA2_TENSORS[] = {
    GEMMA_BLOCK_TENSORS,
    {NULL, NULL, {0}, 0},
};

static const cv_tmap GEMMA3_TENSORS[] = {
    GEMMA_BLOCK_TENSORS,
    {"lm_head", "output", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"model.layers.{bid}.self_attn.q_norm", "blk.{bid}.attn_q_norm", {CV_D_HEAD}, CV_T_NORM_SHIFT},
    {"model.layers.{bid}.self_attn.k_norm", "blk.{bid}.attn_k_norm", {CV_D_HEAD}, CV_T_NORM_SHIFT},
    {NULL, NULL, {0}, 0},
};

/* Gemma 2's converter drops lm_head (tied in every release). */
static const char *const GEMMA2_SKIP[] = {".rotary_emb.inv_freq", "lm_head.weight", NULL};
static const char *const GEMMA3_SKIP[] = {".rotary_emb.inv_freq", NULL};

/* A number of config.json written as an f32 key; absent or null is an
 * error when `required`, else skipped; so is 0 when `skip_zero` (gemma3
 * writes the final soft-cap only when it is set). */
static int f32_key(json_t *config, const char *key, const char *suffix, bool required, bool skip_zero, cv_kv *k) {
    json_t *v = cv_json_get(config, key);
    double d;
    if (!v || json_is_null(v)) {
        if (required) return kiln_fail(k->err, "config.json", key, -1, "missing (needed for %s.%s)", k->arch, suffix);
        return 0;
    }
    if (!cv_json_num(v, &d)) return kiln_fail(k->err, "config.json", key, -1, "must be a number");
    if (skip_zero && d == 0.0) return 0;
    return cv_kv_arch_f32(k, suffix, (float)d);
}

static int u32_key(json_t *config, const char *key, const char *suffix, cv_kv *k) {
    json_t *v = cv_json_get(config, key);
    int64_t n;
    if (!v || !cv_json_int(v, &n) || n < 0 || n > UINT32_MAX)
        return kiln_fail(k->err, "config.json", key, -1, "missing or not a non-negative integer (needed for %s.%s)",
                         k->arch, suffix);
    return cv_kv_arch_u32(k, suffix, (uint32_t)n);
}

/* Gemma2Model.set_gguf_parameters up to the file type: its own fixed list
 * (head_count_kv defaults to head_count). */
static int gemma2_params(const cv_hp *hp, json_t *config, cv_kv *k) {
    const char *kv_heads = cv_json_get(config, "num_key_value_heads") ? "num_key_value_heads" : "num_attention_heads";
    if (u32_key(config, "max_position_embeddings", "context_length", k) < 0 ||
        u32_key(config, "hidden_size", "embedding_length", k) < 0 ||
        cv_kv_arch_u32(k, "block_count", (uint32_t)hp->n_layer) < 0 ||
        u32_key(config, "intermediate_size", "feed_forward_length", k) < 0 ||
        u32_key(config, "num_attention_heads", "attention.head_count", k) < 0 ||
        u32_key(config, kv_heads, "attention.head_count_kv", k) < 0 ||
        f32_key(config, "rms_norm_eps", "attention.layer_norm_rms_epsilon", true, false, k) < 0 ||
        u32_key(config, "head_dim", "attention.key_length", k) < 0 ||
        u32_key(config, "head_dim", "attention.value_length", k) < 0)
        return -1;
    return 0;
}

/* ... and after the file type: the soft-caps and the window. */
static int gemma2_params_tail(const cv_hp *hp, json_t *config, cv_kv *k) {
    (void)hp;
    if (f32_key(config, "attn_logit_softcapping", "attn_logit_softcapping", true, false, k) < 0 ||
        f32_key(config, "final_logit_softcapping", "final_logit_softcapping", true, false, k) < 0)
        return -1;
    return u32_key(config, "sliding_window", "attention.sliding_window", k);
}

/* Gemma3Model.set_gguf_parameters after the common keys (which already
 * hold context length, heads, eps, head size and both rope bases from the
 * config's own values): the final soft-cap when set, and the window
 * unless sliding_window_pattern is 1. llama.cpp asserts that gemma3 has
 * no attention soft-cap; so does kiln. */
static int gemma3_params(const cv_hp *hp, json_t *config, cv_kv *k) {
    (void)hp;
    json_t *attn_cap = cv_json_get(config, "attn_logit_softcapping");
    if (attn_cap && !json_is_null(attn_cap))
        return kiln_fail(k->err, "config.json", "attn_logit_softcapping", -1, "gemma3 has no attention soft-cap");
    static const char *const DEFAULTS_NEEDED[] = {"max_position_embeddings", "num_attention_heads", "rms_norm_eps",
                                                  "head_dim", "num_key_value_heads", "rope_theta"};
    for (size_t i = 0; i < sizeof DEFAULTS_NEEDED / sizeof DEFAULTS_NEEDED[0]; i++)
        if (!cv_json_get(config, DEFAULTS_NEEDED[i]))
            return kiln_fail(k->err, "config.json", DEFAULTS_NEEDED[i], -1,
                             "missing (llama.cpp would write a Gemma 3 default; kiln wants it stated)");
    if (f32_key(config, "final_logit_softcapping", "final_logit_softcapping", false, true, k) < 0) return -1;
    json_t *pattern = cv_json_get(config, "sliding_window_pattern");
    int64_t p;
    if (pattern && cv_json_int(pattern, &p) && p == 1) return 0;
    return u32_key(config, "sliding_window", "attention.sliding_window", k);
}

const cv_arch cv_arch_gemma2 = {
    .hf_name = "Gemma2ForCausalLM", .gguf_arch = "gemma2", .tensors = GEMMA2_TENSORS,
    .skip_suffixes = GEMMA2_SKIP, .flags = CV_A_VOCAB_SPM | CV_A_NO_SPACE_PREFIX | CV_A_OWN_PARAMS,
    .params = gemma2_params, .params_tail = gemma2_params_tail,
};

const cv_arch cv_arch_gemma3 = {
    .hf_name = "Gemma3ForCausalLM", .gguf_arch = "gemma3", .tensors = GEMMA3_TENSORS,
    .skip_suffixes = GEMMA3_SKIP, .flags = CV_A_VOCAB_SPM | CV_A_NO_SPACE_PREFIX, .params = gemma3_params,
};
