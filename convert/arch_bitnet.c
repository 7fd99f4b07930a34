/* convert/arch_bitnet.c - BitnetForCausalLM (BitNet b1.58, 1bitLLM's
 * checkpoints), general.architecture = bitnet, as llama.cpp's BitnetModel
 * converts it:
 *
 *   - Llama's tensor names, but q/k are not permuted (llama.cpp runs bitnet
 *     with NEOX RoPE, HF's rotate-half layout as stored), and there is no
 *     output tensor (the logits use token_embd; an lm_head is an error, as
 *     it is for llama.cpp);
 *   - two sub-norms: self_attn.inner_attn_ln (n_embd, over the attention
 *     output before o_proj) -> attn_sub_norm and mlp.ffn_layernorm (n_ff,
 *     over silu(gate) * up before down_proj) -> ffn_sub_norm;
 *   - the seven linear weights are ternarized at convert time
 *     (CV_T_TERNARY, ternary.c), whatever the outtype; with --outtype
 *     tq1_0 / tq2_0 they are stored in those types (plan.c);
 *   - TextModel's keys, then rope.scaling.type "linear" with factor 1;
 *     a SentencePiece tokenizer.model only.
 *
 * llama.cpp's loader also accepts per-matrix "*.scale" tensors, which its
 * converter never writes; kiln's runtime refuses them (runtime/bitnet.c). */
#include "arch.h"
#include "hparams.h"

#define TERNARY CV_T_TERNARY

static const cv_tmap BITNET_TENSORS[] = {
    {"model.embed_tokens", "token_embd", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"model.norm", "output_norm", {CV_D_EMBD}, 0},
    {"model.layers.{bid}.input_layernorm", "blk.{bid}.attn_norm", {CV_D_EMBD}, 0},
    {"model.layers.{bid}.self_attn.q_proj", "blk.{bid}.attn_q", {CV_D_Q, CV_D_EMBD}, TERNARY},
    {"model.layers.{bid}.self_attn.k_proj", "blk.{bid}.attn_k", {CV_D_KV, CV_D_EMBD}, TERNARY},
    {"model.layers.{bid}.self_attn.v_proj", "blk.{bid}.attn_v", {CV_D_KV, CV_D_EMBD}, TERNARY},
    {"model.layers.{bid}.self_attn.o_proj", "blk.{bid}.attn_output", {CV_D_EMBD, CV_D_Q}, TERNARY},
    {"model.layers.{bid}.self_attn.inner_attn_ln", "blk.{bid}.attn_sub_norm", {CV_D_Q}, 0},
    {"model.layers.{bid}.post_attention_layernorm", "blk.{bid}.ffn_norm", {CV_D_EMBD}, 0},
    {"model.layers.{bid}.mlp.gate_proj", "blk.{bid}.ffn_gate", {CV_D_FF, CV_D_EMBD}, TERNARY},
    {"model.layers.{bid}.mlp.up_proj", "blk.{bid}.ffn_up", {CV_D_FF, CV_D_EMBD}, TERNARY},
    {"model.layers.{bid}.mlp.down_proj", "blk.{bid}.ffn_down", {CV_D_EMBD, CV_D_FF}, TERNARY},
    {"model.layers.{bid}.mlp.ffn_layernorm", "blk.{bid}.ffn_sub_norm", {CV_D_FF}, 0},
    {NULL, NULL, {0}, 0},
};

/* BitnetModel.set_gguf_parameters: after TextModel's keys (and the file
 * type), linear RoPE scaling with factor 1. */
static int bitnet_params(const cv_hp *hp, json_t *config, cv_kv *k) {
    (void)hp;
    (void)config;
    if (cv_kv_arch_str(k, "rope.scaling.type", "linear") < 0) return -1;
    return cv_kv_arch_f32(k, "rope.scaling.factor", 1.0f);
}

/* llama.cpp registers both spellings of the class name */
#define BITNET_LIKE(hf)                                                                                      \
    {                                                                                                       \
        .hf_name = hf, .gguf_arch = "bitnet", .tensors = BITNET_TENSORS, .skip_suffixes = cv_llama_skip,   \
        .flags = CV_A_VOCAB_SPM, .params = bitnet_params,                                                   \
    }

const cv_arch cv_arch_bitnet = BITNET_LIKE("BitnetForCausalLM");
const cv_arch cv_arch_bitnet2 = BITNET_LIKE("BitNetForCausalLM");
