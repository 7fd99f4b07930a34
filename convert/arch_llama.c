/* convert/arch_llama.c - LlamaForCausalLM, MistralForCausalLM and
 * MixtralForCausalLM, which llama.cpp converts alike (its LlamaModel) to
 * general.architecture = llama.
 *
 * What is particular to them: q_proj and k_proj rows are permuted (HF
 * stores rotary halves split, ggml interleaves them), Mixtral's experts
 * w1/w2/w3 are stacked into ffn_gate/down/up_exps, the vocab comes from
 * tokenizer.model when there is one, and llama3-style rope scaling becomes
 * a rope_freqs tensor. */
#include "arch.h"
#include "hparams.h"
#include "json.h"

const cv_tmap cv_llama_tensors[] = {
    {"model.embed_tokens", "token_embd", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"lm_head", "output", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"model.norm", "output_norm", {CV_D_EMBD}, 0},
    {"model.layers.{bid}.input_layernorm", "blk.{bid}.attn_norm", {CV_D_EMBD}, 0},
    {"model.layers.{bid}.self_attn.q_proj", "blk.{bid}.attn_q", {CV_D_Q, CV_D_EMBD}, CV_T_PERMUTE_Q},
    {"model.layers.{bid}.self_attn.k_proj", "blk.{bid}.attn_k", {CV_D_KV, CV_D_EMBD}, CV_T_PERMUTE_K},
    {"model.layers.{bid}.self_attn.v_proj", "blk.{bid}.attn_v", {CV_D_KV, CV_D_EMBD}, 0},
    {"model.layers.{bid}.self_attn.o_proj", "blk.{bid}.attn_output", {CV_D_EMBD, CV_D_Q}, 0},
    {"model.layers.{bid}.post_attention_layernorm", "blk.{bid}.ffn_norm", {CV_D_EMBD}, 0},
    {"model.layers.{bid}.mlp.gate_proj", "blk.{bid}.ffn_gate", {CV_D_FF, CV_D_EMBD}, 0},
    {"model.layers.{bid}.mlp.up_proj", "blk.{bid}.ffn_up", {CV_D_FF, CV_D_EMBD}, 0},
    {"model.layers.{bid}.mlp.down_proj", "blk.{bid}.ffn_down", {CV_D_EMBD, CV_D_FF}, 0},
    {"model.layers.{bid}.block_sparse_moe.gate", "blk.{bid}.ffn_gate_inp", {CV_D_NEXP, CV_D_EMBD}, CV_T_F32},
    /* stacked in this order when a block's last expert has been seen */
    {"model.layers.{bid}.block_sparse_moe.experts.{xid}.w1", "blk.{bid}.ffn_gate_exps", {CV_D_FF, CV_D_EMBD},
     CV_T_EXPERT},
    {"model.layers.{bid}.block_sparse_moe.experts.{xid}.w2", "blk.{bid}.ffn_down_exps", {CV_D_EMBD, CV_D_FF},
     CV_T_EXPERT},
    {"model.layers.{bid}.block_sparse_moe.experts.{xid}.w3", "blk.{bid}.ffn_up_exps", {CV_D_FF, CV_D_EMBD},
     CV_T_EXPERT},
    {NULL, NULL, {0}, 0},
};

const char *const cv_llama_skip[] = {".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq", NULL};

/* LlamaModel.set_gguf_parameters: after the common keys, the vocab size
 * and the rotary dimension count. */
int cv_llama_params(const cv_hp *hp, json_t *config, cv_kv *k) {
    json_t *vs = cv_json_get(config, "vocab_size");
    int64_t v;
    if (!vs || !json_is_integer(vs) || (v = json_integer_value(vs)) <= 0)
        return kiln_fail(k->err, "config.json", "vocab_size", -1, "missing or not a positive integer");
    if (cv_kv_arch_u32(k, "vocab_size", (uint32_t)v) < 0) return -1;
    if (!hp->head_dim)
        return kiln_fail(k->err, "config.json", "num_attention_heads", -1,
                         "missing: needed for rope.dimension_count (hidden_size / num_attention_heads)");
    return cv_kv_arch_u32(k, "rope.dimension_count", (uint32_t)hp->head_dim);
}

#define LLAMA_LIKE(hf)                                                                                       \
    {                                                                                                       \
        .hf_name = hf, .gguf_arch = "llama", .tensors = cv_llama_tensors, .skip_suffixes = cv_llama_skip,   \
        .flags = CV_A_VOCAB_SPM | CV_A_VOCAB_LLAMA_HF | CV_A_ADD_PREFIX_SPACE | CV_A_ROPE_FREQS,            \
        .params = cv_llama_params,                                                                          \
    }

const cv_arch cv_arch_llama = LLAMA_LIKE("LlamaForCausalLM");
const cv_arch cv_arch_mistral = LLAMA_LIKE("MistralForCausalLM");
const cv_arch cv_arch_mixtral = LLAMA_LIKE("MixtralForCausalLM");
