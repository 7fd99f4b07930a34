/* runtime/model.h - a GGUF model loaded for evaluation.
 *
 * kiln_model_load() opens a GGUF (split or not) that kiln or llama.cpp
 * wrote for one of the supported architectures (llama and mistral incl.
 * mixtral-style experts, qwen2, qwen3, qwen2moe, qwen3moe, gpt2, gemma2,
 * gemma3, phi3, granite, bitnet, gpt-oss, olmo2, deepseek2, deepseek4), reads the
 * hyper-parameters llama.cpp reads, and resolves every weight to a tensor
 * in the mapping (nothing is copied). Missing or mis-shaped tensors are
 * errors naming the tensor. */
#ifndef KILN_MODEL_H
#define KILN_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/gguf.h"
#include "../tokenizer/tokenizer.h"

typedef enum kiln_arch {
    KILN_ARCH_LLAMA,    /* llama, mistral, mixtral (experts when n_expert > 0) */
    KILN_ARCH_QWEN2,
    KILN_ARCH_QWEN3,
    KILN_ARCH_QWEN2MOE,
    KILN_ARCH_QWEN3MOE,
    KILN_ARCH_GPT2,
    KILN_ARCH_GEMMA2,
    KILN_ARCH_GEMMA3,
    KILN_ARCH_PHI3,     /* fused attn_qkv and ffn_up, LongRoPE factors */
    KILN_ARCH_GRANITE,  /* llama with Granite's multipliers (granite.c) */
    KILN_ARCH_BITNET,   /* BitNet b1.58: sub-norms, tied output (bitnet.c) */
    KILN_ARCH_GPTOSS,   /* gpt-oss: sinks, biased experts, swiglu_oai (gptoss.c) */
    KILN_ARCH_OLMO2,    /* OLMo 2: post-norms only, whole-width q/k norms (olmo2.c) */
    KILN_ARCH_DEEPSEEK2, /* DeepSeek V2/V3: MLA attention, grouped sigmoid MoE (deepseek2.c) */
    KILN_ARCH_DEEPSEEK4, /* DeepSeek V4: hyper-connections, compressed attention (deepseek4*.c) */
} kiln_arch;

typedef struct kiln_hparams {
    kiln_arch arch;
    char arch_name[32];       /* general.architecture */
    int64_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv;
    int64_t head_dim;         /* attention.key_length, else n_embd / n_head */
    int64_t n_ff;             /* feed_forward_length (dense) */
    int64_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    bool expert_weights_norm; /* renormalise the top-k routing weights */
    bool expert_softmax_weight; /* gpt-oss: top k by logit, softmax of those k */
    float norm_eps;           /* rms or layer norm epsilon */
    float rope_freq_base, rope_freq_scale;
    int64_t n_rot;            /* rope.dimension_count; 0: no RoPE (gpt2) */
    bool rope_neox;           /* NEOX (rotate halves) vs normal (pairs) */
    float rope_attn_factor;   /* rope.scaling.attn_factor: cos and sin scaled by it (1: none) */
    int64_t n_ctx_orig;       /* rope.scaling.original_context_length (else n_ctx_train) */
    bool rope_yarn;           /* rope.scaling.type yarn (yarn.c) */
    float yarn_beta_fast, yarn_beta_slow; /* llama.cpp's defaults 32 and 1 */
    /* Granite (runtime/granite.c); 0: not applied (kq_scale 0: 1/sqrt(head_dim)) */
    float embd_scale, residual_scale, logit_scale, kq_scale;
    /* Gemma (runtime/gemma.c): sliding-window layers, soft-caps, query scale */
    int64_t n_swa;            /* window of the sliding layers; 0: none */
    int64_t swa_period;       /* layer il slides when il % period < period - 1 */
    float rope_freq_base_swa; /* RoPE base of the sliding layers */
    float attn_softcap, final_softcap; /* c * tanh(x / c) of scores / logits; 0: none */
    float attn_scale;         /* queries scaled by this before attention
                               * (which then scales by 1); 0: 1/sqrt(head_dim)
                               * inside the softmax */
    /* DeepSeek V2/V3 (deepseek2.c): head_dim is the MQA key (kv_lora_rank
     * + n_rot) and n_head_kv 1; these are the rest of MLA and its MoE */
    int64_t n_lora_q, n_lora_kv;      /* q_lora_rank (0: plain attn_q), kv_lora_rank */
    int64_t head_k_mla, head_v_mla;   /* per-head q/k (nope + rope) and value sizes */
    int64_t n_layer_dense_lead;       /* the first blocks have a dense FFN */
    int64_t n_expert_groups, n_group_used; /* group-limited top-k (groups <= 1: none) */
    float expert_weights_scale;       /* routing weights times this (0 or 1: none) */
    bool expert_gating_sigmoid;       /* sigmoid scores, else softmax */
    float rope_yarn_log_mul;          /* mscale_all_dim (0: none), as llama.cpp reads it */
} kiln_hparams;

/* Tensors of one block; NULL where the architecture has none. */
typedef struct kiln_layer {
    const kiln_tensor *attn_norm, *attn_norm_b;
    const kiln_tensor *wq, *wk, *wv, *wo, *wqkv;
    const kiln_tensor *bq, *bk, *bv, *bo, *bqkv;
    const kiln_tensor *attn_q_norm, *attn_k_norm;
    const kiln_tensor *ffn_norm, *ffn_norm_b;
    const kiln_tensor *attn_post_norm, *ffn_post_norm; /* gemma, olmo2 */
    const kiln_tensor *attn_sub_norm, *ffn_sub_norm;   /* bitnet: before wo / ffn_down */
    const kiln_tensor *ffn_gate, *ffn_up, *ffn_down, *ffn_gate_b, *ffn_up_b, *ffn_down_b;
    const kiln_tensor *ffn_gate_inp;                                  /* router */
    const kiln_tensor *attn_sinks;                                    /* gpt-oss: n_head */
    const kiln_tensor *ffn_gate_inp_b, *ffn_gate_exps_b, *ffn_up_exps_b, *ffn_down_exps_b; /* gpt-oss */
    const kiln_tensor *ffn_gate_exps, *ffn_up_exps, *ffn_down_exps;   /* 3-D */
    const kiln_tensor *ffn_gate_shexp, *ffn_up_shexp, *ffn_down_shexp, *ffn_gate_inp_shexp;
    /* deepseek2's MLA (wq when there is no q_lora_rank) and selection bias */
    const kiln_tensor *wq_a, *wq_b, *attn_q_a_norm, *wkv_a_mqa, *attn_kv_a_norm, *wk_b, *wv_b;
    const kiln_tensor *exp_probs_b;
} kiln_layer;

typedef struct kiln_model {
    kiln_gguf *gguf;
    kiln_hparams hp;
    kiln_tokenizer *tok;
    const kiln_tensor *tok_embd, *pos_embd, *output_norm, *output_norm_b, *output;
    const kiln_tensor *rope_freqs; /* llama 3 rope frequency factors, or NULL */
    /* phi3 LongRoPE factors (or NULL): long when the context, padded as
     * llama.cpp pads it, exceeds n_ctx_orig, else short */
    const kiln_tensor *rope_long, *rope_short;
    kiln_layer *layers;  /* hp.n_layer entries */
    struct kiln_ds4 *ds4; /* deepseek4's own keys and tensors (deepseek4.h), else NULL */
} kiln_model;

/* Whether block il attends through the sliding window (llama.cpp's
 * set_swa_pattern: period 0 slides everywhere). */
static inline bool kiln_layer_slides(const kiln_hparams *hp, int64_t il) {
    return hp->n_swa > 0 && (hp->swa_period == 0 || il % hp->swa_period < hp->swa_period - 1);
}

kiln_model *kiln_model_load(const char *path, kiln_err *err);

/* The attention factor YaRN's cos and sin are scaled by (llama_context's
 * yarn_attn_factor) at RoPE frequency scale freq_scale (yarn.c). */
float kiln_yarn_attn_factor(const kiln_hparams *hp, float freq_scale);

/* BitNet: 0, or -1 when the file has per-matrix weight scale tensors
 * ("blk.N.attn_q.scale", ...), which kiln does not apply (bitnet.c). */
int kiln_bitnet_check(const kiln_gguf *g, const char *path, int64_t n_layer, kiln_err *err);
void kiln_model_free(kiln_model *m);

/* A table of tensor lookups (model.c, deepseek4_load.c): `failed` lets the
 * whole table run and report its first error. */
typedef struct kiln_find {
    const kiln_gguf *g;
    const char *path;
    kiln_err *err;
    bool failed;
} kiln_find;

/* Flags of kiln_find_tensor: OPT tensors may be absent, REQ ones not; VEC
 * (norms, biases) must be F32 and I32 (index tables) I32, as both are read
 * as plain arrays; other tensors must be of a type kiln can read, with
 * whole blocks per row. */
enum { KILN_FIND_OPT = 0, KILN_FIND_REQ = 1, KILN_FIND_VEC = 2, KILN_FIND_I32 = 4 };

/* The tensor named by fmt, checked against the shape (ne0, ne1, ne2, 1).
 * NULL when it is absent (an error when REQ) or wrong (always an error);
 * errors set f->failed, after which calls do nothing. */
const kiln_tensor *kiln_find_tensor(kiln_find *f, int flags, int64_t ne0, int64_t ne1, int64_t ne2, const char *fmt,
                                    ...) __attribute__((format(printf, 6, 7)));

/* Model views (override.c): a copy of m sharing its mapping, tokenizer and
 * hyper-parameters but with its own tensor table, in which single weights
 * can be swapped for another version of themselves (same name and shape,
 * another type or other bytes, owned by the caller), e.g. to evaluate one
 * tensor quantized. m must outlive the view; free it with
 * kiln_model_view_free, never kiln_model_free. NULL when out of memory. */
kiln_model *kiln_model_view(const kiln_model *m, kiln_err *err);
/* Points every use of `from` in the view at `to` (to swap back, call it
 * again the other way). Returns how many uses changed: 0 when the forward
 * pass never reads `from` (or either is NULL); 2 for a tied embedding that
 * is also the output. */
int64_t kiln_model_view_swap(kiln_model *view, const kiln_tensor *from, const kiln_tensor *to);
void kiln_model_view_free(kiln_model *view);

#endif
