/* convert/arch_gptoss.c - GptOssForCausalLM (OpenAI gpt-oss),
 * general.architecture = gpt-oss, as llama.cpp's GptOssModel converts it.
 *
 * Attention has biases and one learned sink logit per head (`sinks`,
 * written as attn_sinks.weight); no q/k permutation (NeoX rope). The MoE
 * block has a router with a bias and experts stored the way the real
 * checkpoint stores them: MXFP4 `_blocks` + `_scales` (quantization_config
 * {quant_method: mxfp4}), written as ggml MXFP4 whatever the outtype and
 * before every other tensor (llama.cpp repacks them in
 * generate_extra_tensors; plan.c, mxfp4_hf.c), with `gate_up_proj`'s
 * interleaved rows split into gate (even) and up (odd), its bias alike.
 * Keys: the common ones (YaRN rope scaling through rope.c), then
 * attention.sliding_window and expert_feed_forward_length after
 * general.file_type. The vocab is GPT-2 style BPE from tokenizer.json
 * (o200k's pre-tokenizer is llama.cpp's `gpt-4o`).
 *
 * Not handled: checkpoints whose experts are dequantized (plain
 * `gate_up_proj` [n_exp, embd, 2 * ff], which llama.cpp transposes). */
#include <stdio.h>
#include <string.h>

#include "arch.h"
#include "hparams.h"
#include "json.h"

#define L "model.layers.{bid}."
#define B "blk.{bid}."

static const cv_tmap GPTOSS_TENSORS[] = {
    {"model.embed_tokens", "token_embd", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"lm_head", "output", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"model.norm", "output_norm", {CV_D_EMBD}, 0},
    {L "input_layernorm", B "attn_norm", {CV_D_EMBD}, 0},
    {L "post_attention_layernorm", B "post_attention_norm", {CV_D_EMBD}, 0},
    {L "self_attn.q_proj", B "attn_q", {CV_D_Q, CV_D_EMBD}, 0},
    {L "self_attn.k_proj", B "attn_k", {CV_D_KV, CV_D_EMBD}, 0},
    {L "self_attn.v_proj", B "attn_v", {CV_D_KV, CV_D_EMBD}, 0},
    {L "self_attn.o_proj", B "attn_output", {CV_D_EMBD, CV_D_Q}, 0},
    {L "self_attn.sinks", B "attn_sinks", {CV_D_HEADS}, 0},
    {L "mlp.router", B "ffn_gate_inp", {CV_D_NEXP, CV_D_EMBD}, CV_T_F32},
    /* HF shape per tensor: [n_exp, rows, cols]; a bias is [n_exp, rows] */
    {L "mlp.experts.down_proj", B "ffn_down_exps", {CV_D_NEXP, CV_D_EMBD, CV_D_FF}, CV_T_MXFP4},
    {L "mlp.experts.gate_up_proj", B "ffn_gate_exps", {CV_D_NEXP, CV_D_FF2, CV_D_EMBD}, CV_T_MXFP4 | CV_T_EVEN},
    {L "mlp.experts.gate_up_proj", B "ffn_up_exps", {CV_D_NEXP, CV_D_FF2, CV_D_EMBD}, CV_T_MXFP4 | CV_T_ODD},
    {NULL, NULL, {0}, 0},
};

static const char *const GPTOSS_SKIP[] = {".rotary_emb.inv_freq", NULL};

/* GptOssModel.filter_tensors / modify_tensors: `sinks` gains ".weight",
 * the experts' `X_bias` becomes `X.bias`. */
static const char *gptoss_rename(const char *name, char *buf, size_t cap) {
    size_t n = strlen(name);
    static const char SINKS[] = ".sinks", BIAS[] = "_proj_bias";
    if (n >= sizeof SINKS - 1 && !strcmp(name + n - (sizeof SINKS - 1), SINKS)) {
        snprintf(buf, cap, "%s.weight", name);
        return buf;
    }
    if (n >= sizeof BIAS - 1 && !strcmp(name + n - (sizeof BIAS - 1), BIAS) && n < cap) {
        snprintf(buf, cap, "%.*s.bias", (int)(n - strlen("_bias")), name);
        return buf;
    }
    return name;
}

/* GptOssModel.set_gguf_parameters, after the common keys and file type. */
static int gptoss_params_tail(const cv_hp *hp, json_t *config, cv_kv *k) {
    static const struct {
        const char *key, *suffix;
    } KEYS[] = {{"sliding_window", "attention.sliding_window"}, {"intermediate_size", "expert_feed_forward_length"}};
    (void)hp;
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++) {
        int64_t v;
        if (!cv_json_int(cv_json_get(config, KEYS[i].key), &v) || v < 0 || v > UINT32_MAX)
            return kiln_fail(k->err, "config.json", KEYS[i].key, -1, "missing or not a non-negative integer");
        if (cv_kv_arch_u32(k, KEYS[i].suffix, (uint32_t)v) < 0) return -1;
    }
    return 0;
}

const cv_arch cv_arch_gptoss = {
    .hf_name = "GptOssForCausalLM",
    .gguf_arch = "gpt-oss",
    .tensors = GPTOSS_TENSORS,
    .skip_suffixes = GPTOSS_SKIP,
    .params_tail = gptoss_params_tail,
    .rename = gptoss_rename,
};
