/* convert/arch_olmo2.c - Olmo2ForCausalLM (AllenAI OLMo 2), which llama.cpp
 * converts (conversion/olmo.py, Olmo2Model) to general.architecture olmo2
 * with nothing of its own beyond TextModel's defaults: the common keys,
 * tensors as named (no q/k permutation: the RoPE is NEOX), and the GPT-2
 * style BPE vocabulary of tokenizer.json.
 *
 * What is particular to OLMo 2 is only the block's tensors: no norm in
 * front of attention or the FFN, but one after each
 * (post_attention_layernorm -> post_attention_norm,
 * post_feedforward_layernorm -> post_ffw_norm), and q_norm / k_norm RMS
 * norms that span the whole q and k projections (n_head * head_dim and
 * n_head_kv * head_dim wide), not one head as Qwen 3's do.
 *
 * Refused: a config with sliding_window (OLMo 3's layout, which llama.cpp
 * converts through the same class into sliding-window keys kiln does not
 * write yet). */
#include "arch.h"
#include "hparams.h"
#include "json.h"

static const cv_tmap OLMO2_TENSORS[] = {
    {"model.embed_tokens", "token_embd", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"lm_head", "output", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"model.norm", "output_norm", {CV_D_EMBD}, 0},
    {"model.layers.{bid}.self_attn.q_proj", "blk.{bid}.attn_q", {CV_D_Q, CV_D_EMBD}, 0},
    {"model.layers.{bid}.self_attn.k_proj", "blk.{bid}.attn_k", {CV_D_KV, CV_D_EMBD}, 0},
    {"model.layers.{bid}.self_attn.v_proj", "blk.{bid}.attn_v", {CV_D_KV, CV_D_EMBD}, 0},
    {"model.layers.{bid}.self_attn.o_proj", "blk.{bid}.attn_output", {CV_D_EMBD, CV_D_Q}, 0},
    {"model.layers.{bid}.self_attn.q_norm", "blk.{bid}.attn_q_norm", {CV_D_Q}, 0},
    {"model.layers.{bid}.self_attn.k_norm", "blk.{bid}.attn_k_norm", {CV_D_KV}, 0},
    {"model.layers.{bid}.post_attention_layernorm", "blk.{bid}.post_attention_norm", {CV_D_EMBD}, 0},
    {"model.layers.{bid}.post_feedforward_layernorm", "blk.{bid}.post_ffw_norm", {CV_D_EMBD}, 0},
    {"model.layers.{bid}.mlp.gate_proj", "blk.{bid}.ffn_gate", {CV_D_FF, CV_D_EMBD}, 0},
    {"model.layers.{bid}.mlp.up_proj", "blk.{bid}.ffn_up", {CV_D_FF, CV_D_EMBD}, 0},
    {"model.layers.{bid}.mlp.down_proj", "blk.{bid}.ffn_down", {CV_D_EMBD, CV_D_FF}, 0},
    {NULL, NULL, {0}, 0},
};

static const char *const OLMO2_SKIP[] = {".rotary_emb.inv_freq", NULL};

/* No keys of its own; refuses OLMo 3's sliding window rather than drop it. */
static int olmo2_params(const cv_hp *hp, json_t *config, cv_kv *k) {
    (void)hp;
    if (cv_json_get(config, "sliding_window"))
        return kiln_fail(k->err, "config.json", "sliding_window", -1,
                         "sliding-window attention (OLMo 3) is not supported for Olmo2ForCausalLM");
    return 0;
}

const cv_arch cv_arch_olmo2 = {
    .hf_name = "Olmo2ForCausalLM",
    .gguf_arch = "olmo2",
    .tensors = OLMO2_TENSORS,
    .skip_suffixes = OLMO2_SKIP,
    .params = olmo2_params,
};
