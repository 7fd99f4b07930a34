/* convert/arch_qwen.c - Qwen2ForCausalLM, Qwen3ForCausalLM,
 * Qwen2MoeForCausalLM and Qwen3MoeForCausalLM.
 *
 * Qwen keeps HF's rotary layout (no q/k permutation), has q/k/v biases
 * (Qwen2) or q/k RMS norms (Qwen3). The MoE variants stack experts in the
 * order down, gate, up as llama.cpp does; Qwen2-MoE adds a shared expert
 * with its own sigmoid gate (ffn_gate_inp_shexp, kept F32). The dense
 * models try tokenizer.model before tokenizer.json, the MoE ones read
 * tokenizer.json only. */
#include "arch.h"
#include "hparams.h"
#include "json.h"

#define QWEN_COMMON                                                                                              \
    {"model.embed_tokens", "token_embd", {CV_D_VOCAB, CV_D_EMBD}, 0},                                           \
        {"lm_head", "output", {CV_D_VOCAB, CV_D_EMBD}, 0}, {"model.norm", "output_norm", {CV_D_EMBD}, 0},        \
        {"model.layers.{bid}.input_layernorm", "blk.{bid}.attn_norm", {CV_D_EMBD}, 0},                         \
        {"model.layers.{bid}.self_attn.q_proj", "blk.{bid}.attn_q", {CV_D_Q, CV_D_EMBD}, 0},                   \
        {"model.layers.{bid}.self_attn.k_proj", "blk.{bid}.attn_k", {CV_D_KV, CV_D_EMBD}, 0},                  \
        {"model.layers.{bid}.self_attn.v_proj", "blk.{bid}.attn_v", {CV_D_KV, CV_D_EMBD}, 0},                  \
        {"model.layers.{bid}.self_attn.o_proj", "blk.{bid}.attn_output", {CV_D_EMBD, CV_D_Q}, 0},              \
        {"model.layers.{bid}.post_attention_layernorm", "blk.{bid}.ffn_norm", {CV_D_EMBD}, 0},                 \
        {"model.layers.{bid}.mlp.gate_proj", "blk.{bid}.ffn_gate", {CV_D_FF, CV_D_EMBD}, 0},                   \
        {"model.layers.{bid}.mlp.up_proj", "blk.{bid}.ffn_up", {CV_D_FF, CV_D_EMBD}, 0},                       \
        {"model.layers.{bid}.mlp.down_proj", "blk.{bid}.ffn_down", {CV_D_EMBD, CV_D_FF}, 0}

#define QWEN3_NORMS                                                                                              \
    {"model.layers.{bid}.self_attn.q_norm", "blk.{bid}.attn_q_norm", {CV_D_HEAD}, 0},                          \
        {"model.layers.{bid}.self_attn.k_norm", "blk.{bid}.attn_k_norm", {CV_D_HEAD}, 0}

#define QWEN_EXPERTS                                                                                             \
    {"model.layers.{bid}.mlp.gate", "blk.{bid}.ffn_gate_inp", {CV_D_NEXP, CV_D_EMBD}, CV_T_F32},               \
        {"model.layers.{bid}.mlp.experts.{xid}.down_proj", "blk.{bid}.ffn_down_exps", {CV_D_EMBD, CV_D_FF_EXP}, \
         CV_T_EXPERT},                                                                                          \
        {"model.layers.{bid}.mlp.experts.{xid}.gate_proj", "blk.{bid}.ffn_gate_exps", {CV_D_FF_EXP, CV_D_EMBD}, \
         CV_T_EXPERT},                                                                                          \
        {"model.layers.{bid}.mlp.experts.{xid}.up_proj", "blk.{bid}.ffn_up_exps", {CV_D_FF_EXP, CV_D_EMBD},     \
         CV_T_EXPERT}

static const cv_tmap QWEN2_TENSORS[] = {QWEN_COMMON, {NULL, NULL, {0}, 0}};
static const cv_tmap QWEN3_TENSORS[] = {QWEN_COMMON, QWEN3_NORMS, {NULL, NULL, {0}, 0}};
static const cv_tmap QWEN2MOE_TENSORS[] = {
    QWEN_COMMON,
    QWEN_EXPERTS,
    {"model.layers.{bid}.mlp.shared_expert.gate_proj", "blk.{bid}.ffn_gate_shexp", {CV_D_FF_SHEXP, CV_D_EMBD}, 0},
    {"model.layers.{bid}.mlp.shared_expert.up_proj", "blk.{bid}.ffn_up_shexp", {CV_D_FF_SHEXP, CV_D_EMBD}, 0},
    {"model.layers.{bid}.mlp.shared_expert.down_proj", "blk.{bid}.ffn_down_shexp", {CV_D_EMBD, CV_D_FF_SHEXP}, 0},
    {"model.layers.{bid}.mlp.shared_expert_gate", "blk.{bid}.ffn_gate_inp_shexp", {CV_D_ONE, CV_D_EMBD}, CV_T_F32},
    {NULL, NULL, {0}, 0},
};
static const cv_tmap QWEN3MOE_TENSORS[] = {QWEN_COMMON, QWEN3_NORMS, QWEN_EXPERTS, {NULL, NULL, {0}, 0}};

static const char *const QWEN_SKIP[] = {".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq", NULL};

/* Qwen2MoeModel.set_gguf_parameters: the expert sizes, when given. */
static int moe_params(const cv_hp *hp, json_t *config, cv_kv *k) {
    static const struct {
        const char *key, *suffix;
    } sizes[] = {{"moe_intermediate_size", "expert_feed_forward_length"},
                 {"shared_expert_intermediate_size", "expert_shared_feed_forward_length"}};
    (void)hp;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        json_t *v = cv_json_get(config, sizes[i].key);
        int64_t n;
        if (!v || json_is_null(v)) continue;
        if (!cv_json_int(v, &n) || n < 0)
            return kiln_fail(k->err, "config.json", sizes[i].key, -1, "must be a non-negative integer");
        if (cv_kv_arch_u32(k, sizes[i].suffix, (uint32_t)n) < 0) return -1;
    }
    return 0;
}

const cv_arch cv_arch_qwen2 = {.hf_name = "Qwen2ForCausalLM", .gguf_arch = "qwen2", .tensors = QWEN2_TENSORS,
                               .skip_suffixes = QWEN_SKIP, .flags = CV_A_VOCAB_SPM};
const cv_arch cv_arch_qwen3 = {.hf_name = "Qwen3ForCausalLM", .gguf_arch = "qwen3", .tensors = QWEN3_TENSORS,
                               .skip_suffixes = QWEN_SKIP, .flags = CV_A_VOCAB_SPM};
const cv_arch cv_arch_qwen2moe = {.hf_name = "Qwen2MoeForCausalLM", .gguf_arch = "qwen2moe",
                                  .tensors = QWEN2MOE_TENSORS, .skip_suffixes = QWEN_SKIP, .params = moe_params};
const cv_arch cv_arch_qwen3moe = {.hf_name = "Qwen3MoeForCausalLM", .gguf_arch = "qwen3moe",
                                  .tensors = QWEN3MOE_TENSORS, .skip_suffixes = QWEN_SKIP, .params = moe_params};
