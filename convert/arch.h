/* convert/arch.h - the architecture tables: one per Hugging Face
 * architecture (arch_llama.c, arch_qwen.c, arch_gpt2.c), each saying how
 * its tensor names map to llama.cpp's GGUF names, what shape every tensor
 * must have in terms of config values, which transforms apply, and which
 * metadata and tokenizer rules it follows.
 *
 * Adding an architecture is one table of about 50 lines plus one line in
 * arch.c's registry. Tables describe; plan.c, meta_arch.c and the vocab
 * files do the work. */
#ifndef KILN_CONVERT_ARCH_H
#define KILN_CONVERT_ARCH_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"
#include "../core/safetensors.h"
#include "kv.h"

/* Symbolic tensor dimensions, resolved from config.json (hparams.c). */
enum cv_dim {
    CV_D_NONE = 0, /* ends a shape */
    CV_D_ONE,      /* literally 1 */
    CV_D_VOCAB,    /* vocab_size */
    CV_D_EMBD,     /* hidden_size */
    CV_D_FF,       /* intermediate_size */
    CV_D_Q,        /* num_attention_heads * head_dim */
    CV_D_KV,       /* num_key_value_heads * head_dim */
    CV_D_HEAD,     /* head_dim */
    CV_D_NEXP,     /* number of experts */
    CV_D_FF_EXP,   /* moe_intermediate_size */
    CV_D_FF_SHEXP, /* shared_expert_intermediate_size */
    CV_D_POS,      /* learned positions (n_positions) */
    CV_D_QKV,      /* 3 * hidden_size (fused q, k, v) */
    CV_D_QKV_GQA,  /* (num_attention_heads + 2 * num_key_value_heads) * head_dim */
    CV_D_FF2,      /* 2 * intermediate_size (fused gate and up) */
    CV_D_HEADS,    /* num_attention_heads (gpt-oss's per-head sinks) */
    CV_D_Q_LORA,   /* DeepSeek MLA (arch_deepseek.c): q_lora_rank */
    CV_D_KV_LORA,  /* kv_lora_rank */
    CV_D_Q_MLA,    /* num_attention_heads * (qk_nope_head_dim + qk_rope_head_dim) */
    CV_D_KV_A_MQA, /* kv_lora_rank + qk_rope_head_dim */
    CV_D_KV_B,     /* num_key_value_heads * (qk_nope_head_dim + v_head_dim) */
    CV_D_O_MLA,    /* num_attention_heads * v_head_dim */
    CV_D_QK_NOPE,  /* qk_nope_head_dim */
    CV_D_V_HEAD,   /* v_head_dim */
    CV_D_HC,       /* DeepSeek-V4 (arch_deepseek4.c): hc_mult */
    CV_D_HC_DIM,   /* hc_mult * hidden_size */
    CV_D_HC_MIX,   /* (2 + hc_mult) * hc_mult */
    CV_D_O_A,      /* o_groups * o_lora_rank */
    CV_D_O_A_IN,   /* num_attention_heads * head_dim / o_groups */
    CV_D_IDX_Q,    /* index_n_heads * index_head_dim */
    CV_D_IDX_HEADS, /* index_n_heads */
    CV_D_IDX_HEAD, /* index_head_dim */
    CV_D_ANY,      /* any size: a per-layer one the arch's plan_first hook checks */
    CV_D_COUNT
};

/* Tensor flags. */
enum {
    CV_T_PERMUTE_Q = 1 << 0, /* llama's q row permutation (n_head groups) */
    CV_T_PERMUTE_K = 1 << 1, /* the same with n_head_kv groups */
    CV_T_CONV1D = 1 << 2,    /* GPT-2 Conv1D: stored [in, out], transposed */
    CV_T_F32 = 1 << 3,       /* .weight always F32 (router, positions) */
    CV_T_EXPERT = 1 << 4,    /* one expert's matrix, stacked into 3-D */
    CV_T_NORM_SHIFT = 1 << 5, /* Gemma norm: 1 added in the source dtype */
    CV_T_TERNARY = 1 << 6,   /* BitNet: ternarized at convert time (ternary.c) */
    CV_T_MXFP4 = 1 << 7,     /* experts stored as MXFP4 `_blocks` + `_scales` (mxfp4_hf.c) */
    CV_T_EVEN = 1 << 8,      /* the even rows (bias: columns) of a fused gate_up; the
                                next entry, CV_T_ODD, takes the odd ones of the same tensor */
    CV_T_ODD = 1 << 9,
    CV_T_KV_B_K = 1 << 10,   /* DeepSeek's kv_b_proj: its k part per head, transposed
                                (attn_k_b); the next entry, CV_T_KV_B_V, takes the v part */
    CV_T_KV_B_V = 1 << 11,
};

typedef struct cv_tmap {
    const char *hf;       /* HF name without .weight/.bias: "{bid}" is the
                             block number, "{xid}" the expert number */
    const char *gguf;     /* llama.cpp's name without suffix */
    uint8_t shape[3];     /* HF shape of .weight (one expert's, for
                             experts); a .bias has shape[0] (shape[1] for
                             Conv1D, the whole shape for 1-D weights) */
    uint16_t flags;
} cv_tmap;

/* Architecture flags. */
enum {
    CV_A_VOCAB_SPM = 1 << 0,       /* try tokenizer.model first */
    CV_A_VOCAB_LLAMA_HF = 1 << 1,  /* then an SPM-style tokenizer.json */
    CV_A_ADD_PREFIX_SPACE = 1 << 2, /* tokenizer_config add_prefix_space */
    CV_A_ROPE_FREQS = 1 << 3,      /* llama3 rope scaling as a tensor */
    CV_A_FF_4X = 1 << 4,           /* feed-forward defaults to 4 * embd */
    CV_A_OWN_PARAMS = 1 << 5,      /* params() writes every arch key */
    CV_A_NO_SPACE_PREFIX = 1 << 6, /* add_space_prefix false after the vocab (Gemma) */
    CV_A_VOCAB_PHI3 = 1 << 7,      /* Phi-3's SentencePiece rules, or GPT-2 BPE (vocab_spm.c) */
    CV_A_DROP_MTP = 1 << 8,        /* tensors of blocks past the block count (DeepSeek's
                                      multi-token-prediction layers) are dropped */
    CV_A_FTYPE_MXFP4_MOE = 1 << 9, /* general.file_type is MOSTLY_MXFP4_MOE (38) at every
                                      outtype (DeepSeek-V4's prepare_tensors) */
};

/* An output an architecture plans itself, before all others (plan_first):
 * llama.cpp's tensors written from generate_extra_tensors, such as
 * DeepSeek-V4's stacked FP4 experts and hash-routing tables. */
typedef struct cv_first_out {
    char *name;       /* malloc'd GGUF name; the plan takes it */
    int64_t hf[3];    /* HF-order shape (the last is the row length) */
    uint32_t n_dims;
    uint32_t type;    /* KILN_MXFP4: parts are FP4 codes (two a byte, element
                         2i low) + one E8M0 scale per 32, stacked; KILN_I32:
                         one integer part, narrowed */
    int64_t *st;      /* malloc'd: n_parts source tensors (stlist indices) */
    int64_t *scale;   /* malloc'd: their scales (MXFP4), or NULL */
    uint32_t n_parts;
} cv_first_out;

/* An F32 tensor an architecture generates from config.json (llama.cpp's
 * generate_extra_tensors), written before the model's own tensors. */
typedef struct cv_gen_tensor {
    const char *name; /* static */
    float *data;      /* malloc'd; the plan takes it */
    int64_t n;
} cv_gen_tensor;
enum { CV_MAX_GEN = 4 };

typedef struct cv_hp cv_hp;
struct cv_stlist;

typedef struct cv_arch {
    const char *hf_name;              /* config.json architectures[0] */
    const char *gguf_arch;            /* general.architecture */
    const cv_tmap *tensors;           /* ends with hf == NULL */
    const char *strip_prefix;         /* dropped from names first, or NULL */
    const char *const *skip_suffixes; /* tensors ignored, NULL-terminated */
    uint32_t flags;
    /* Arch keys after the common ones (or all of them, CV_A_OWN_PARAMS).
     * NULL: none. Returns 0 or -1. */
    int (*params)(const cv_hp *hp, json_t *config, cv_kv *k);
    /* Arch keys after general.file_type, or NULL. */
    int (*params_tail)(const cv_hp *hp, json_t *config, cv_kv *k);
    /* Arch keys llama.cpp sets while it prepares the tensors, so right
     * after general.architecture, or NULL. */
    int (*params_head)(const cv_hp *hp, json_t *config, cv_kv *k);
    /* Fills up to CV_MAX_GEN generated tensors; returns their count or
     * -1. NULL: none. */
    int (*extra_tensors)(json_t *config, const cv_hp *hp, cv_gen_tensor *out, kiln_err *err);
    /* The HF name as llama.cpp renames it before mapping (gpt-oss's
     * `sinks`, `down_proj_bias`), written into buf; NULL: names as they are. */
    const char *(*rename)(const char *name, char *buf, size_t cap);
    /* Run at the end of cv_hp_load: llama.cpp's edits of the config
     * (DeepSeek's num_key_value_heads = 1) and the arch's own dimensions
     * in hp. NULL: none. 0 or -1. */
    int (*hparams)(json_t *config, cv_hp *hp, kiln_err *err);
    /* The type llama.cpp's tensor_force_quant gives a tensor from source
     * `src` (fp8_scaled: an F8 weight dequantized with its scales), or -1
     * for the outtype's rules. 1-D tensors and norms stay F32 whatever it
     * says. NULL: none. */
    int (*tensor_type)(const kiln_st_tensor *src, bool fp8_scaled);
    /* Outputs planned before all others, in order (*out malloc'd, *n of
     * them); it sets drop[i] for every source tensor they consume or that
     * is to be dropped. NULL: none. 0 or -1. */
    int (*plan_first)(json_t *config, const cv_hp *hp, const struct cv_stlist *st, bool *drop, cv_first_out **out,
                      uint64_t *n, kiln_err *err);
} cv_arch;

/* The architecture whose hf_name is `name`, or NULL. */
const cv_arch *cv_arch_find(const char *name);

/* "A, B, C" list of supported architectures, for error messages. */
const char *cv_arch_list(void);

/* Matches an HF name (after strip_prefix) against a table pattern: the
 * name must be the pattern followed by ".weight" or ".bias". Sets *bid and
 * *xid (-1 when the pattern has none) and *is_bias. */
bool cv_tmap_match(const char *pattern, const char *name, int64_t *bid, int64_t *xid, bool *is_bias);

/* The tables (arch_*.c). */
extern const cv_arch cv_arch_llama, cv_arch_mistral, cv_arch_mixtral;
extern const cv_arch cv_arch_qwen2, cv_arch_qwen3, cv_arch_qwen2moe, cv_arch_qwen3moe;
extern const cv_arch cv_arch_gpt2;
extern const cv_arch cv_arch_gemma2, cv_arch_gemma3;
extern const cv_arch cv_arch_phi3, cv_arch_granite;
extern const cv_arch cv_arch_gptoss;
extern const cv_arch cv_arch_olmo2;
extern const cv_arch cv_arch_bitnet, cv_arch_bitnet2;
extern const cv_arch cv_arch_deepseek2, cv_arch_deepseek3;
extern const cv_arch cv_arch_deepseek4;

/* DeepSeek's kv_b_proj split (arch_deepseek.c): src is [n_head, nope + v,
 * kv_lora] elements of es bytes; part 0 writes attn_k_b [n_head, kv_lora,
 * nope] (the k rows of each head, transposed), part 1 attn_v_b [n_head, v,
 * kv_lora], as llama.cpp's DeepseekV2Model.modify_tensors cuts it. */
void cv_kv_b_split(const uint8_t *src, uint8_t *dst, int64_t n_head, int64_t nope, int64_t v, int64_t kv_lora,
                   uint32_t es, int part);

/* Llama's table, skips and keys, which Granite extends (arch_llama.c). */
extern const cv_tmap cv_llama_tensors[];
extern const char *const cv_llama_skip[];
int cv_llama_params(const cv_hp *hp, json_t *config, cv_kv *k);

#endif
