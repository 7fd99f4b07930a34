/* runtime/model.c - opening a GGUF for evaluation: the hyper-parameters
 * llama.cpp reads from the metadata and the weights it looks up by name.
 *
 * Every weight is resolved to a tensor in the mapping and checked against
 * the shape llama.cpp's loader expects, so a malformed file fails here,
 * naming the tensor, instead of producing wrong logits later. Nothing is
 * copied or converted; the forward pass reads the weights in place.
 *
 * Deliberately refused rather than approximated: per-layer head counts or
 * FFN sizes, value heads of another size than key heads, and RoPE scaling
 * types other than none/linear/yarn (phi3's LongRoPE is not a type but
 * factor tensors and rope.scaling.attn_factor, which are applied). */
#include "model.h"

#include "deepseek4.h"

#include "../core/types.h"
#include "../codec/codec.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    kiln_arch arch;
} ARCHS[] = {
    {"llama", KILN_ARCH_LLAMA},       {"qwen2", KILN_ARCH_QWEN2},
    {"qwen3", KILN_ARCH_QWEN3},       {"qwen2moe", KILN_ARCH_QWEN2MOE},
    {"qwen3moe", KILN_ARCH_QWEN3MOE}, {"gpt2", KILN_ARCH_GPT2},
    {"gemma2", KILN_ARCH_GEMMA2},     {"gemma3", KILN_ARCH_GEMMA3},
    {"phi3", KILN_ARCH_PHI3},         {"granite", KILN_ARCH_GRANITE},
    {"bitnet", KILN_ARCH_BITNET},     {"gpt-oss", KILN_ARCH_GPTOSS},
    {"olmo2", KILN_ARCH_OLMO2},       {"deepseek2", KILN_ARCH_DEEPSEEK2},
    {"deepseek4", KILN_ARCH_DEEPSEEK4},
};

/* What the lookups below share; `failed` lets a whole table of lookups
 * run and report the first error. */
typedef struct loader {
    kiln_find f; /* the file, its path, the error and whether one was set */
    const char *arch;
} loader;

/* Reads the integer ARCH.suffix into *out. A per-layer array is accepted
 * when its elements are all equal, since kiln's blocks share one shape.
 * Returns 1 when read, 0 when absent (out untouched), -1 on error. */
static int get_int(loader *L, const char *suffix, int64_t *out) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", L->arch, suffix);
    const kiln_kv *kv = kiln_gguf_find_kv(L->f.g, key);
    if (!kv) return 0;
    if (kv->val.type == KILN_GGUF_ARRAY) {
        const kiln_array *a = &kv->val.arr;
        if (a->n == 0 || a->type == KILN_GGUF_STRING || a->type == KILN_GGUF_ARRAY ||
            a->type == KILN_GGUF_FLOAT32 || a->type == KILN_GGUF_FLOAT64)
            return kiln_fail(L->f.err, L->f.path, key, -1, "expected integers");
        int64_t v0 = kiln_array_i64(a, 0);
        for (uint64_t i = 1; i < a->n; i++)
            if (kiln_array_i64(a, i) != v0)
                return kiln_fail(L->f.err, L->f.path, key, -1,
                                 "per-layer values differ; kiln supports uniform blocks only");
        *out = v0;
        return 1;
    }
    if (!kiln_gguf_get_i64(L->f.g, key, out))
        return kiln_fail(L->f.err, L->f.path, key, -1, "expected an integer");
    return 1;
}

/* As get_int, but absence is an error too, and the value must be > 0. */
static int need_int(loader *L, const char *suffix, int64_t *out) {
    int r = get_int(L, suffix, out);
    if (r < 0) return -1;
    if (r == 0) return kiln_fail(L->f.err, L->f.path, suffix, -1, "missing key %s.%s", L->arch, suffix);
    if (*out <= 0) return kiln_fail(L->f.err, L->f.path, suffix, -1, "must be positive, got %lld", (long long)*out);
    return 0;
}

/* Reads the float ARCH.suffix; returns 1, 0 when absent, -1 when not a number. */
static int get_float(loader *L, const char *suffix, float *out) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", L->arch, suffix);
    if (!kiln_gguf_find_kv(L->f.g, key)) return 0;
    double d;
    if (!kiln_gguf_get_f64(L->f.g, key, &d)) return kiln_fail(L->f.err, L->f.path, key, -1, "expected a number");
    *out = (float)d;
    return 1;
}

/* RoPE frequency scale as llama.cpp derives it: rope.scaling.factor (or the
 * older rope.scale_linear) inverted; type "none" disables it. */
static int read_rope(loader *L, kiln_hparams *hp) {
    hp->rope_freq_base = 10000.0f;
    if (get_float(L, "rope.freq_base", &hp->rope_freq_base) < 0) return -1;
    char key[160];
    snprintf(key, sizeof key, "%s.rope.scaling.type", L->arch);
    kiln_str type = {"linear", 6};
    if (kiln_gguf_find_kv(L->f.g, key) && !kiln_gguf_get_str(L->f.g, key, &type))
        return kiln_fail(L->f.err, L->f.path, key, -1, "expected a string");
    bool none = kiln_str_eq(type, "none");
    /* yarn (yarn.c): llama.cpp reads no yarn_* key for the architectures
     * kiln runs (only grok's and deepseek2's loaders do), so neither does kiln */
    hp->rope_yarn = kiln_str_eq(type, "yarn");
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    if (!none && !hp->rope_yarn && !kiln_str_eq(type, "linear"))
        return kiln_fail(L->f.err, L->f.path, key, -1, "RoPE scaling '%.*s' is not supported (none, linear, yarn)",
                         (int)type.len, type.ptr);
    float factor = 0.0f;
    int r = get_float(L, "rope.scaling.factor", &factor);
    if (r == 0) r = get_float(L, "rope.scale_linear", &factor);
    if (r < 0) return -1;
    hp->rope_freq_scale = (factor == 0.0f || none) ? 1.0f : 1.0f / factor;
    hp->rope_attn_factor = 1.0f;
    hp->n_ctx_orig = hp->n_ctx_train;
    if (get_float(L, "rope.scaling.attn_factor", &hp->rope_attn_factor) < 0 ||
        get_int(L, "rope.scaling.original_context_length", &hp->n_ctx_orig) < 0)
        return -1;
    return 0;
}

static int read_arch(loader *L, kiln_hparams *hp) {
    kiln_str name;
    if (!kiln_gguf_get_str(L->f.g, "general.architecture", &name))
        return kiln_fail(L->f.err, L->f.path, "general.architecture", -1, "missing or not a string");
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++) {
        if (kiln_str_eq(name, ARCHS[i].name)) {
            hp->arch = ARCHS[i].arch;
            snprintf(hp->arch_name, sizeof hp->arch_name, "%s", ARCHS[i].name);
            L->arch = hp->arch_name;
            return 0;
        }
    }
    return kiln_fail(L->f.err, L->f.path, "general.architecture", -1,
                     "'%.*s' is not supported (llama, qwen2, qwen3, qwen2moe, qwen3moe, gpt2, gemma2, gemma3, phi3, granite, bitnet, gpt-oss, olmo2, deepseek2, deepseek4)",
                     (int)(name.len > 64 ? 64 : name.len), name.ptr);
}

static int read_deepseek2_experts(loader *L, kiln_hparams *hp);

/* Expert counts and sizes; llama.cpp fixes the top-k renormalisation per
 * architecture (it does not read ARCH.expert_weights_norm for these). */
static int read_experts(loader *L, kiln_hparams *hp) {
    if (get_int(L, "expert_count", &hp->n_expert) < 0) return -1;
    if (get_int(L, "expert_used_count", &hp->n_expert_used) < 0) return -1;
    const bool gptoss = hp->arch == KILN_ARCH_GPTOSS;
    const bool ds2 = hp->arch == KILN_ARCH_DEEPSEEK2;
    bool moe_arch = hp->arch == KILN_ARCH_QWEN2MOE || hp->arch == KILN_ARCH_QWEN3MOE || gptoss || ds2;
    if (hp->arch != KILN_ARCH_LLAMA && !moe_arch) hp->n_expert = hp->n_expert_used = 0;
    if (moe_arch && hp->n_expert == 0)
        return kiln_fail(L->f.err, L->f.path, "expert_count", -1, "%s needs experts", L->arch);
    if (hp->n_expert < 0 || hp->n_expert_used < 0 || hp->n_expert_used > hp->n_expert ||
        (hp->n_expert > 0 && hp->n_expert_used == 0))
        return kiln_fail(L->f.err, L->f.path, "expert_used_count", -1, "%lld of %lld experts is invalid",
                         (long long)hp->n_expert_used, (long long)hp->n_expert);
    hp->n_ff_exp = hp->n_ff;
    if (moe_arch) {
        int r = get_int(L, "expert_feed_forward_length", &hp->n_ff_exp);
        if (r < 0) return -1;
        if (r == 0) hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    }
    if (hp->arch == KILN_ARCH_QWEN2MOE) {
        hp->n_ff_shexp = hp->n_ff;
        if (get_int(L, "expert_shared_feed_forward_length", &hp->n_ff_shexp) < 0) return -1;
    }
    hp->expert_weights_norm = hp->arch != KILN_ARCH_QWEN2MOE && !gptoss && !ds2; /* deepseek2: its key */
    if (ds2 && read_deepseek2_experts(L, hp) < 0) return -1;
    hp->expert_softmax_weight = gptoss;
    if (hp->n_expert > 0 && hp->n_ff_exp <= 0)
        return kiln_fail(L->f.err, L->f.path, "expert_feed_forward_length", -1, "missing");
    return 0;
}

/* Gemma 2 and 3 as llama.cpp's loaders read them (src/models/gemma2.cpp,
 * gemma3.cpp): the window (gemma2 defaults to 4096 and always slides;
 * gemma3 slides only with a window), its layer period (2 and 6), the
 * sliding layers' RoPE base (gemma2: the global one; gemma3: 10000), the
 * soft-caps, and the query scale 1/sqrt(head_dim), or
 * 1/sqrt(n_embd/n_head) for the 27B sizes (46 and 62 layers). */
static int read_gemma(loader *L, kiln_hparams *hp) {
    const bool g2 = hp->arch == KILN_ARCH_GEMMA2;
    hp->n_swa = g2 ? 4096 : 0;
    hp->swa_period = g2 ? 2 : 6;
    hp->rope_freq_base_swa = g2 ? hp->rope_freq_base : 10000.0f;
    if (get_int(L, "attention.sliding_window", &hp->n_swa) < 0 ||
        get_int(L, "attention.sliding_window_pattern", &hp->swa_period) < 0 ||
        get_float(L, "rope.freq_base_swa", &hp->rope_freq_base_swa) < 0 ||
        get_float(L, "final_logit_softcapping", &hp->final_softcap) < 0)
        return -1;
    if (g2 && get_float(L, "attn_logit_softcapping", &hp->attn_softcap) < 0) return -1;
    if (hp->n_swa < 0 || hp->swa_period < 0)
        return kiln_fail(L->f.err, L->f.path, "attention.sliding_window", -1, "negative window or period");
    const bool is_27b = hp->n_layer == (g2 ? 46 : 62);
    hp->attn_scale = 1.0f / sqrtf((float)(is_27b ? hp->n_embd / hp->n_head : hp->head_dim));
    return 0;
}

/* gpt-oss as llama.cpp's openai-moe loader reads it: the window
 * (required), its layer period (2 unless given: even layers slide), and
 * the sliding layers' RoPE base (the global one unless given). */
static int read_gptoss(loader *L, kiln_hparams *hp) {
    hp->swa_period = 2;
    hp->rope_freq_base_swa = hp->rope_freq_base;
    if (need_int(L, "attention.sliding_window", &hp->n_swa) < 0 ||
        get_int(L, "attention.sliding_window_pattern", &hp->swa_period) < 0 ||
        get_float(L, "rope.freq_base_swa", &hp->rope_freq_base_swa) < 0)
        return -1;
    if (hp->swa_period < 0) return kiln_fail(L->f.err, L->f.path, "attention.sliding_window_pattern", -1, "negative");
    return 0;
}

/* The vocabulary size deepseek2's loader decides by: ARCH.vocab_size,
 * else the length of the token list, else 0. Returns -1 on a bad key. */
static int deepseek2_n_vocab(loader *L, int64_t *n_vocab) {
    char key[160];
    snprintf(key, sizeof key, "%s.vocab_size", L->arch);
    *n_vocab = 0;
    if (kiln_gguf_find_kv(L->f.g, key))
        return kiln_gguf_get_i64(L->f.g, key, n_vocab) ? 0
                                                       : kiln_fail(L->f.err, L->f.path, key, -1, "expected an integer");
    const kiln_kv *kv = kiln_gguf_find_kv(L->f.g, "tokenizer.ggml.tokens");
    if (kv && kv->val.type == KILN_GGUF_ARRAY) *n_vocab = (int64_t)kv->val.arr.n;
    return 0;
}

/* DeepSeek V2/V3 as llama.cpp's deepseek2 loader reads it: MLA ranks and
 * head sizes (key_length is the MQA key, kv_lora_rank + n_rot), the
 * q_lora_rank it requires unless the block count says "lite" (26 or 27,
 * or 48 with 128256 tokens: then it reads none and wants attn_q, whatever
 * the file holds), dense lead blocks, and yarn_log_multiplier with the
 * converter's 0.1 cancelled. MTP blocks (nextn_predict_layers, which
 * llama.cpp's converter never writes for deepseek2) are refused. */
static int read_deepseek2(loader *L, kiln_hparams *hp) {
    int64_t n_vocab, n_nextn = 0;
    if (deepseek2_n_vocab(L, &n_vocab) < 0 || get_int(L, "nextn_predict_layers", &n_nextn) < 0) return -1;
    if (n_nextn != 0)
        return kiln_fail(L->f.err, L->f.path, "nextn_predict_layers", -1,
                         "%lld MTP blocks: kiln runs deepseek2 files without MTP blocks only", (long long)n_nextn);
    const bool lite = hp->n_layer == 26 || hp->n_layer == 27 || (hp->n_layer == 48 && n_vocab == 128256);
    hp->head_k_mla = hp->head_dim;
    hp->head_v_mla = hp->head_dim;
    const int q_lora = lite ? 1 : get_int(L, "attention.q_lora_rank", &hp->n_lora_q);
    if (q_lora < 0) return -1;
    if (q_lora == 0)
        return kiln_fail(L->f.err, L->f.path, "attention.q_lora_rank", -1,
                         "missing key %s.attention.q_lora_rank: llama.cpp reads a deepseek2 without it (V2-Lite) "
                         "only at 26 or 27 blocks, or 48 with 128256 tokens, and this file has %lld",
                         L->arch, (long long)hp->n_layer);
    if (hp->n_lora_q < 0)
        return kiln_fail(L->f.err, L->f.path, "attention.q_lora_rank", -1, "negative");
    if (need_int(L, "attention.kv_lora_rank", &hp->n_lora_kv) < 0 ||
        get_int(L, "attention.key_length_mla", &hp->head_k_mla) < 0 ||
        get_int(L, "attention.value_length_mla", &hp->head_v_mla) < 0 ||
        get_int(L, "leading_dense_block_count", &hp->n_layer_dense_lead) < 0 ||
        get_float(L, "rope.scaling.yarn_log_multiplier", &hp->rope_yarn_log_mul) < 0)
        return -1;
    hp->rope_yarn_log_mul /= 0.1f;
    if (hp->n_head_kv != 1 || hp->head_dim != hp->n_lora_kv + hp->n_rot)
        return kiln_fail(L->f.err, L->f.path, "attention.key_length", -1,
                         "kiln runs deepseek2 in MLA form only (attn_k_b / attn_v_b, one KV head of "
                         "kv_lora_rank + rope dims)");
    if (hp->head_k_mla <= hp->n_rot || hp->head_v_mla <= 0)
        return kiln_fail(L->f.err, L->f.path, "attention.key_length_mla", -1, "%lld is not above the rope dims %lld",
                         (long long)hp->head_k_mla, (long long)hp->n_rot);
    /* the graph's pre-scaled kq_scale: the YaRN attention factor with its
     * cancelling 1 / (1 + 0.1 ln factor) undone, times the mscale_all_dim
     * term, squared, over sqrt(q/k head size) (float steps as libllama's) */
    const float attn_factor = hp->rope_yarn ? kiln_yarn_attn_factor(hp, hp->rope_freq_scale) : hp->rope_attn_factor;
    const float attn_factor_org = attn_factor * (1.0f + 0.1f * logf(1.0f / hp->rope_freq_scale));
    const float mscale = attn_factor_org * (1.0f + 0.1f * hp->rope_yarn_log_mul * logf(1.0f / hp->rope_freq_scale));
    hp->kq_scale = 1.0f * mscale * mscale / sqrtf((float)hp->head_k_mla);
    return 0;
}

/* deepseek2's MoE keys: shared experts (each n_ff_exp wide), routing
 * weight scale and renormalisation, gating function (llama.cpp's 1
 * softmax, 2 sigmoid; absent: softmax) and expert groups. */
static int read_deepseek2_experts(loader *L, kiln_hparams *hp) {
    int64_t n_shared = 0, gating = 0;
    if (need_int(L, "expert_shared_count", &n_shared) < 0 ||
        get_float(L, "expert_weights_scale", &hp->expert_weights_scale) < 0 ||
        get_int(L, "expert_gating_func", &gating) < 0 ||
        get_int(L, "expert_group_count", &hp->n_expert_groups) < 0 ||
        get_int(L, "expert_group_used_count", &hp->n_group_used) < 0)
        return -1;
    char key[160];
    snprintf(key, sizeof key, "%s.expert_weights_norm", L->arch);
    const kiln_kv *kv = kiln_gguf_find_kv(L->f.g, key);
    if (kv && kv->val.type == KILN_GGUF_BOOL) hp->expert_weights_norm = kv->val.b;
    else if (kv) return kiln_fail(L->f.err, L->f.path, key, -1, "expected a bool");
    if (gating < 0 || gating > 2)
        return kiln_fail(L->f.err, L->f.path, "expert_gating_func", -1, "gating function %lld is not supported",
                         (long long)gating);
    hp->expert_gating_sigmoid = gating == 2;
    hp->n_ff_shexp = hp->n_ff_exp * n_shared;
    if (hp->n_expert_groups > 1 &&
        (hp->n_expert % hp->n_expert_groups || hp->n_group_used <= 0 || hp->n_group_used >= hp->n_expert_groups))
        return kiln_fail(L->f.err, L->f.path, "expert_group_count", -1, "%lld groups, %lld used, of %lld experts",
                         (long long)hp->n_expert_groups, (long long)hp->n_group_used, (long long)hp->n_expert);
    return 0;
}

static int read_hparams(loader *L, kiln_hparams *hp) {
    if (read_arch(L, hp) < 0) return -1;
    if (hp->arch == KILN_ARCH_DEEPSEEK4) return kiln_ds4_read_hparams(L->f.g, L->f.path, hp, L->f.err);
    if (need_int(L, "context_length", &hp->n_ctx_train) < 0 ||
        need_int(L, "embedding_length", &hp->n_embd) < 0 ||
        need_int(L, "block_count", &hp->n_layer) < 0 ||
        need_int(L, "attention.head_count", &hp->n_head) < 0)
        return -1;
    if (get_int(L, "feed_forward_length", &hp->n_ff) < 0) return -1;
    hp->n_head_kv = hp->n_head;
    if (get_int(L, "attention.head_count_kv", &hp->n_head_kv) < 0) return -1;
    if (hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv != 0)
        return kiln_fail(L->f.err, L->f.path, "attention.head_count_kv", -1,
                         "%lld does not divide head_count %lld", (long long)hp->n_head_kv,
                         (long long)hp->n_head);
    hp->head_dim = hp->n_embd / hp->n_head;
    if (get_int(L, "attention.key_length", &hp->head_dim) < 0) return -1;
    int64_t v_len = hp->head_dim;
    if (get_int(L, "attention.value_length", &v_len) < 0) return -1;
    if (hp->head_dim <= 0 || (v_len != hp->head_dim && hp->arch != KILN_ARCH_DEEPSEEK2)) /* MLA: kv_lora_rank */
        return kiln_fail(L->f.err, L->f.path, "attention.value_length", -1,
                         "value heads of %lld differ from key heads of %lld", (long long)v_len,
                         (long long)hp->head_dim);

    if (hp->arch == KILN_ARCH_GPT2) {
        hp->n_rot = 0;
        if (get_float(L, "attention.layer_norm_epsilon", &hp->norm_eps) != 1)
            return kiln_fail(L->f.err, L->f.path, "attention.layer_norm_epsilon", -1, "missing");
    } else {
        if (get_float(L, "attention.layer_norm_rms_epsilon", &hp->norm_eps) != 1)
            return kiln_fail(L->f.err, L->f.path, "attention.layer_norm_rms_epsilon", -1, "missing");
        hp->n_rot = hp->head_dim;
        if (get_int(L, "rope.dimension_count", &hp->n_rot) < 0) return -1;
        /* every supported builder but phi3's (partial rotary factor)
         * asserts n_rot == head size */
        if (hp->arch == KILN_ARCH_PHI3 || hp->arch == KILN_ARCH_DEEPSEEK2
                ? hp->n_rot <= 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2
                : hp->n_rot != hp->head_dim)
            return kiln_fail(L->f.err, L->f.path, "rope.dimension_count", -1,
                             "%lld differs from the head size %lld", (long long)hp->n_rot,
                             (long long)hp->head_dim);
        hp->rope_neox = hp->arch != KILN_ARCH_LLAMA && hp->arch != KILN_ARCH_GRANITE && hp->arch != KILN_ARCH_DEEPSEEK2;
        if (read_rope(L, hp) < 0) return -1;
    }
    if (hp->arch == KILN_ARCH_DEEPSEEK2 && read_deepseek2(L, hp) < 0) return -1;
    if ((hp->arch == KILN_ARCH_GEMMA2 || hp->arch == KILN_ARCH_GEMMA3) && read_gemma(L, hp) < 0) return -1;
    if (hp->arch == KILN_ARCH_GPTOSS && read_gptoss(L, hp) < 0) return -1;
    /* olmo2: OLMo 3's sliding-window layers (same arch name) are not run */
    if (hp->arch == KILN_ARCH_OLMO2 && get_int(L, "attention.sliding_window", &hp->n_swa) < 0) return -1;
    if (hp->arch == KILN_ARCH_OLMO2 && hp->n_swa > 0)
        return kiln_fail(L->f.err, L->f.path, "olmo2.attention.sliding_window", -1,
                         "sliding-window attention (OLMo 3) is not supported");
    /* phi3: ggml_scale(Qcur, 1/sqrt(head_dim)) before attention; its
     * sliding_window is ignored, as llama.cpp disables Phi SWA */
    if (hp->arch == KILN_ARCH_PHI3) hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    /* granite: logit_scale required, the other multipliers optional, as
     * llama.cpp's loader reads them */
    if (hp->arch == KILN_ARCH_GRANITE &&
        (get_float(L, "embedding_scale", &hp->embd_scale) < 0 || get_float(L, "residual_scale", &hp->residual_scale) < 0 ||
         get_float(L, "attention.scale", &hp->kq_scale) < 0))
        return -1;
    if (hp->arch == KILN_ARCH_GRANITE && get_float(L, "logit_scale", &hp->logit_scale) != 1)
        return kiln_fail(L->f.err, L->f.path, "logit_scale", -1, "missing key granite.logit_scale");
    return read_experts(L, hp);
}

/* kiln_find_tensor's flags (find_tensor.c), short for this file's tables */
enum { OPT = KILN_FIND_OPT, REQ = KILN_FIND_REQ, VEC = KILN_FIND_VEC };

static void find_attention(loader *L, const kiln_hparams *hp, int64_t i, kiln_layer *y) {
    const int64_t n_embd = hp->n_embd, n_q = hp->head_dim * hp->n_head;
    const int64_t n_kv = hp->head_dim * hp->n_head_kv;
    const bool gpt2 = hp->arch == KILN_ARCH_GPT2, olmo2 = hp->arch == KILN_ARCH_OLMO2;
    if (!olmo2) /* olmo2 norms after attention and the FFN, not before */
        y->attn_norm = kiln_find_tensor(&L->f, VEC | REQ, n_embd, 1, 1, "blk.%lld.attn_norm.weight", (long long)i);
    y->attn_norm_b = kiln_find_tensor(&L->f, VEC | (gpt2 ? REQ : OPT), n_embd, 1, 1, "blk.%lld.attn_norm.bias", (long long)i);
    if (gpt2 || hp->arch == KILN_ARCH_PHI3) {
        y->wqkv = kiln_find_tensor(&L->f, REQ, n_embd, n_q + 2 * n_kv, 1, "blk.%lld.attn_qkv.weight", (long long)i);
        y->bqkv = kiln_find_tensor(&L->f, VEC | (gpt2 ? REQ : OPT), n_q + 2 * n_kv, 1, 1, "blk.%lld.attn_qkv.bias", (long long)i);
    } else {
        y->wq = kiln_find_tensor(&L->f, REQ, n_embd, n_q, 1, "blk.%lld.attn_q.weight", (long long)i);
        y->wk = kiln_find_tensor(&L->f, REQ, n_embd, n_kv, 1, "blk.%lld.attn_k.weight", (long long)i);
        y->wv = kiln_find_tensor(&L->f, REQ, n_embd, n_kv, 1, "blk.%lld.attn_v.weight", (long long)i);
        y->bq = kiln_find_tensor(&L->f, VEC | OPT, n_q, 1, 1, "blk.%lld.attn_q.bias", (long long)i);
        y->bk = kiln_find_tensor(&L->f, VEC | OPT, n_kv, 1, 1, "blk.%lld.attn_k.bias", (long long)i);
        y->bv = kiln_find_tensor(&L->f, VEC | OPT, n_kv, 1, 1, "blk.%lld.attn_v.bias", (long long)i);
    }
    y->wo = kiln_find_tensor(&L->f, REQ, n_q, n_embd, 1, "blk.%lld.attn_output.weight", (long long)i);
    y->bo = kiln_find_tensor(&L->f, VEC | (gpt2 ? REQ : OPT), n_embd, 1, 1, "blk.%lld.attn_output.bias", (long long)i);
    if (hp->arch == KILN_ARCH_GEMMA2 || hp->arch == KILN_ARCH_GEMMA3 || olmo2)
        y->attn_post_norm = kiln_find_tensor(&L->f, VEC | REQ, n_embd, 1, 1, "blk.%lld.post_attention_norm.weight", (long long)i);
    if (hp->arch == KILN_ARCH_BITNET)
        y->attn_sub_norm = kiln_find_tensor(&L->f, VEC | REQ, n_embd, 1, 1, "blk.%lld.attn_sub_norm.weight", (long long)i);
    if (hp->arch == KILN_ARCH_GPTOSS)
        y->attn_sinks = kiln_find_tensor(&L->f, VEC | REQ, hp->n_head, 1, 1, "blk.%lld.attn_sinks.weight", (long long)i);
    if (hp->arch == KILN_ARCH_QWEN3 || hp->arch == KILN_ARCH_QWEN3MOE || hp->arch == KILN_ARCH_GEMMA3) {
        y->attn_q_norm = kiln_find_tensor(&L->f, VEC | REQ, hp->head_dim, 1, 1, "blk.%lld.attn_q_norm.weight", (long long)i);
        y->attn_k_norm = kiln_find_tensor(&L->f, VEC | REQ, hp->head_dim, 1, 1, "blk.%lld.attn_k_norm.weight", (long long)i);
    }
    if (olmo2) { /* over the whole projection (attention.c norms by the weight's width) */
        y->attn_q_norm = kiln_find_tensor(&L->f, VEC | REQ, n_q, 1, 1, "blk.%lld.attn_q_norm.weight", (long long)i);
        y->attn_k_norm = kiln_find_tensor(&L->f, VEC | REQ, n_kv, 1, 1, "blk.%lld.attn_k_norm.weight", (long long)i);
    }
}

static void find_ffn(loader *L, const kiln_hparams *hp, int64_t i, kiln_layer *y) {
    const int64_t n_embd = hp->n_embd, n_ff = hp->n_ff;
    const bool gpt2 = hp->arch == KILN_ARCH_GPT2, olmo2 = hp->arch == KILN_ARCH_OLMO2;
    /* gpt-oss's norm in front of the MoE is its post_attention_norm */
    if (!olmo2)
        y->ffn_norm = kiln_find_tensor(&L->f, VEC | REQ, n_embd, 1, 1,
                           hp->arch == KILN_ARCH_GPTOSS ? "blk.%lld.post_attention_norm.weight"
                                                        : "blk.%lld.ffn_norm.weight",
                           (long long)i);
    y->ffn_norm_b = kiln_find_tensor(&L->f, VEC | (gpt2 ? REQ : OPT), n_embd, 1, 1, "blk.%lld.ffn_norm.bias", (long long)i);
    if (hp->arch == KILN_ARCH_GEMMA2 || hp->arch == KILN_ARCH_GEMMA3 || olmo2)
        y->ffn_post_norm = kiln_find_tensor(&L->f, VEC | REQ, n_embd, 1, 1, "blk.%lld.post_ffw_norm.weight", (long long)i);
    if (hp->arch == KILN_ARCH_BITNET)
        y->ffn_sub_norm = kiln_find_tensor(&L->f, VEC | REQ, n_ff, 1, 1, "blk.%lld.ffn_sub_norm.weight", (long long)i);
    if (hp->n_expert == 0) {
        /* phi3: gate and up fused in ffn_up, rows [gate | up] */
        const bool fused = hp->arch == KILN_ARCH_PHI3;
        if (!gpt2 && !fused) y->ffn_gate = kiln_find_tensor(&L->f, REQ, n_embd, n_ff, 1, "blk.%lld.ffn_gate.weight", (long long)i);
        y->ffn_up = kiln_find_tensor(&L->f, REQ, n_embd, fused ? 2 * n_ff : n_ff, 1, "blk.%lld.ffn_up.weight", (long long)i);
        y->ffn_down = kiln_find_tensor(&L->f, REQ, n_ff, n_embd, 1, "blk.%lld.ffn_down.weight", (long long)i);
        if (!gpt2) y->ffn_gate_b = kiln_find_tensor(&L->f, VEC | OPT, n_ff, 1, 1, "blk.%lld.ffn_gate.bias", (long long)i);
        y->ffn_up_b = kiln_find_tensor(&L->f, VEC | (gpt2 ? REQ : OPT), fused ? 2 * n_ff : n_ff, 1, 1, "blk.%lld.ffn_up.bias",
                           (long long)i);
        y->ffn_down_b = kiln_find_tensor(&L->f, VEC | (gpt2 ? REQ : OPT), n_embd, 1, 1, "blk.%lld.ffn_down.bias", (long long)i);
        return;
    }
    const int64_t n_exp = hp->n_expert, n_ff_exp = hp->n_ff_exp;
    y->ffn_gate_inp = kiln_find_tensor(&L->f, REQ, n_embd, n_exp, 1, "blk.%lld.ffn_gate_inp.weight", (long long)i);
    y->ffn_gate_exps = kiln_find_tensor(&L->f, REQ, n_embd, n_ff_exp, n_exp, "blk.%lld.ffn_gate_exps.weight", (long long)i);
    y->ffn_up_exps = kiln_find_tensor(&L->f, REQ, n_embd, n_ff_exp, n_exp, "blk.%lld.ffn_up_exps.weight", (long long)i);
    y->ffn_down_exps = kiln_find_tensor(&L->f, REQ, n_ff_exp, n_embd, n_exp, "blk.%lld.ffn_down_exps.weight", (long long)i);
    if (hp->arch == KILN_ARCH_GPTOSS) {
        y->ffn_gate_inp_b = kiln_find_tensor(&L->f, VEC | REQ, n_exp, 1, 1, "blk.%lld.ffn_gate_inp.bias", (long long)i);
        y->ffn_gate_exps_b = kiln_find_tensor(&L->f, VEC | REQ, n_ff_exp, n_exp, 1, "blk.%lld.ffn_gate_exps.bias", (long long)i);
        y->ffn_up_exps_b = kiln_find_tensor(&L->f, VEC | REQ, n_ff_exp, n_exp, 1, "blk.%lld.ffn_up_exps.bias", (long long)i);
        y->ffn_down_exps_b = kiln_find_tensor(&L->f, VEC | REQ, n_embd, n_exp, 1, "blk.%lld.ffn_down_exps.bias", (long long)i);
    }
    if (hp->arch == KILN_ARCH_QWEN2MOE) {
        const int64_t n_sh = hp->n_ff_shexp;
        y->ffn_gate_inp_shexp = kiln_find_tensor(&L->f, REQ, n_embd, 1, 1, "blk.%lld.ffn_gate_inp_shexp.weight", (long long)i);
        y->ffn_gate_shexp = kiln_find_tensor(&L->f, REQ, n_embd, n_sh, 1, "blk.%lld.ffn_gate_shexp.weight", (long long)i);
        y->ffn_up_shexp = kiln_find_tensor(&L->f, REQ, n_embd, n_sh, 1, "blk.%lld.ffn_up_shexp.weight", (long long)i);
        y->ffn_down_shexp = kiln_find_tensor(&L->f, REQ, n_sh, n_embd, 1, "blk.%lld.ffn_down_shexp.weight", (long long)i);
    }
}

/* deepseek2's block i as llama.cpp loads it in MLA form: q_a / q_a_norm /
 * q_b (or attn_q), kv_a_mqa, kv_a_norm, per-head k_b and v_b, wo; a dense
 * FFN in the lead blocks, else router, selection bias, experts and the
 * shared experts. */
static void find_deepseek2(loader *L, const kiln_hparams *hp, int64_t i, kiln_layer *y) {
    const int64_t d = hp->n_embd, nh = hp->n_head, hk = hp->head_k_mla, hv = hp->head_v_mla;
    const int64_t rank = hp->n_lora_kv, nope = hk - hp->n_rot;
    y->attn_norm = kiln_find_tensor(&L->f, VEC | REQ, d, 1, 1, "blk.%lld.attn_norm.weight", (long long)i);
    if (i == 0 && hp->n_lora_q == 0 && !kiln_gguf_find_tensor(L->f.g, "blk.0.attn_q.weight") &&
        kiln_gguf_find_tensor(L->f.g, "blk.0.attn_q_a.weight")) { /* e.g. 27 blocks with q LoRA */
        kiln_fail(L->f.err, L->f.path, "blk.0.attn_q.weight", -1,
                  "tensor is missing: llama.cpp reads a deepseek2 of %lld blocks without q LoRA (V2-Lite: "
                  "attn_q), but this file has attn_q_a / attn_q_b",
                  (long long)hp->n_layer);
        L->f.failed = true;
        return;
    }
    if (hp->n_lora_q > 0) {
        y->attn_q_a_norm = kiln_find_tensor(&L->f, VEC | REQ, hp->n_lora_q, 1, 1, "blk.%lld.attn_q_a_norm.weight", (long long)i);
        y->wq_a = kiln_find_tensor(&L->f, REQ, d, hp->n_lora_q, 1, "blk.%lld.attn_q_a.weight", (long long)i);
        y->wq_b = kiln_find_tensor(&L->f, REQ, hp->n_lora_q, nh * hk, 1, "blk.%lld.attn_q_b.weight", (long long)i);
    } else {
        y->wq = kiln_find_tensor(&L->f, REQ, d, nh * hk, 1, "blk.%lld.attn_q.weight", (long long)i);
    }
    y->attn_kv_a_norm = kiln_find_tensor(&L->f, VEC | REQ, rank, 1, 1, "blk.%lld.attn_kv_a_norm.weight", (long long)i);
    y->wkv_a_mqa = kiln_find_tensor(&L->f, REQ, d, rank + hp->n_rot, 1, "blk.%lld.attn_kv_a_mqa.weight", (long long)i);
    y->wk_b = kiln_find_tensor(&L->f, REQ, nope, rank, nh, "blk.%lld.attn_k_b.weight", (long long)i);
    y->wv_b = kiln_find_tensor(&L->f, REQ, rank, hv, nh, "blk.%lld.attn_v_b.weight", (long long)i);
    y->wo = kiln_find_tensor(&L->f, REQ, nh * hv, d, 1, "blk.%lld.attn_output.weight", (long long)i);
    y->ffn_norm = kiln_find_tensor(&L->f, VEC | REQ, d, 1, 1, "blk.%lld.ffn_norm.weight", (long long)i);
    if (i < hp->n_layer_dense_lead) {
        y->ffn_gate = kiln_find_tensor(&L->f, REQ, d, hp->n_ff, 1, "blk.%lld.ffn_gate.weight", (long long)i);
        y->ffn_up = kiln_find_tensor(&L->f, REQ, d, hp->n_ff, 1, "blk.%lld.ffn_up.weight", (long long)i);
        y->ffn_down = kiln_find_tensor(&L->f, REQ, hp->n_ff, d, 1, "blk.%lld.ffn_down.weight", (long long)i);
        return;
    }
    const int64_t n_exp = hp->n_expert, f = hp->n_ff_exp, fs = hp->n_ff_shexp;
    y->ffn_gate_inp = kiln_find_tensor(&L->f, REQ, d, n_exp, 1, "blk.%lld.ffn_gate_inp.weight", (long long)i);
    y->exp_probs_b = kiln_find_tensor(&L->f, VEC | OPT, n_exp, 1, 1, "blk.%lld.exp_probs_b.bias", (long long)i);
    y->ffn_gate_exps = kiln_find_tensor(&L->f, REQ, d, f, n_exp, "blk.%lld.ffn_gate_exps.weight", (long long)i);
    y->ffn_up_exps = kiln_find_tensor(&L->f, REQ, d, f, n_exp, "blk.%lld.ffn_up_exps.weight", (long long)i);
    y->ffn_down_exps = kiln_find_tensor(&L->f, REQ, f, d, n_exp, "blk.%lld.ffn_down_exps.weight", (long long)i);
    y->ffn_gate_shexp = kiln_find_tensor(&L->f, REQ, d, fs, 1, "blk.%lld.ffn_gate_shexp.weight", (long long)i);
    y->ffn_up_shexp = kiln_find_tensor(&L->f, REQ, d, fs, 1, "blk.%lld.ffn_up_shexp.weight", (long long)i);
    y->ffn_down_shexp = kiln_find_tensor(&L->f, REQ, fs, d, 1, "blk.%lld.ffn_down_shexp.weight", (long long)i);
}

static int find_tensors(loader *L, kiln_model *m) {
    const kiln_hparams *hp = &m->hp;
    const int64_t n_embd = hp->n_embd;
    const bool gpt2 = hp->arch == KILN_ARCH_GPT2;
    if (hp->arch == KILN_ARCH_DEEPSEEK4) return kiln_ds4_load(L->f.g, L->f.path, m, L->f.err);
    if (hp->n_expert == 0 && hp->n_ff <= 0)
        return kiln_fail(L->f.err, L->f.path, "feed_forward_length", -1, "missing");
    m->tok_embd = kiln_find_tensor(&L->f, REQ, n_embd, hp->n_vocab, 1, "token_embd.weight");
    if (gpt2) m->pos_embd = kiln_find_tensor(&L->f, REQ, n_embd, hp->n_ctx_train, 1, "position_embd.weight");
    m->output_norm = kiln_find_tensor(&L->f, VEC | REQ, n_embd, 1, 1, "output_norm.weight");
    m->output_norm_b = kiln_find_tensor(&L->f, VEC | (gpt2 ? REQ : OPT), n_embd, 1, 1, "output_norm.bias");
    /* gemma2's and bitnet's loaders always tie the output to token_embd */
    if (hp->arch != KILN_ARCH_GEMMA2 && hp->arch != KILN_ARCH_BITNET)
        m->output = kiln_find_tensor(&L->f, hp->arch == KILN_ARCH_QWEN2MOE ? REQ : OPT, n_embd, hp->n_vocab, 1, "output.weight");
    if (!m->output) m->output = m->tok_embd; /* tied embeddings */
    if (hp->arch == KILN_ARCH_LLAMA || hp->arch == KILN_ARCH_GRANITE)
        m->rope_freqs = kiln_find_tensor(&L->f, VEC | OPT, hp->n_rot / 2, 1, 1, "rope_freqs.weight");
    if (hp->arch == KILN_ARCH_PHI3) {
        m->rope_long = kiln_find_tensor(&L->f, VEC | OPT, hp->n_rot / 2, 1, 1, "rope_factors_long.weight");
        m->rope_short = kiln_find_tensor(&L->f, VEC | OPT, hp->n_rot / 2, 1, 1, "rope_factors_short.weight");
    }
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return kiln_fail(L->f.err, L->f.path, NULL, -1, "out of memory");
    for (int64_t i = 0; i < hp->n_layer && !L->f.failed; i++) {
        if (hp->arch == KILN_ARCH_DEEPSEEK2) {
            find_deepseek2(L, hp, i, &m->layers[i]);
            continue;
        }
        find_attention(L, hp, i, &m->layers[i]);
        find_ffn(L, hp, i, &m->layers[i]);
    }
    return L->f.failed ? -1 : 0;
}

kiln_model *kiln_model_load(const char *path, kiln_err *err) {
    kiln_model *m = calloc(1, sizeof *m);
    if (!m) {
        kiln_fail(err, path, NULL, -1, "out of memory");
        return NULL;
    }
    m->gguf = kiln_gguf_open(path, err);
    if (!m->gguf) goto fail;
    loader L = {.f = {.g = m->gguf, .path = path, .err = err}};
    if (read_hparams(&L, &m->hp) < 0) goto fail;
    m->tok = kiln_tokenizer_load(m->gguf, err);
    if (!m->tok) goto fail;
    m->hp.n_vocab = kiln_tokenizer_n_vocab(m->tok);
    if (find_tensors(&L, m) < 0) goto fail;
    if (m->hp.arch == KILN_ARCH_BITNET && kiln_bitnet_check(m->gguf, path, m->hp.n_layer, err) < 0) goto fail;
    return m;
fail:
    kiln_model_free(m);
    return NULL;
}

void kiln_model_free(kiln_model *m) {
    if (!m) return;
    kiln_tokenizer_free(m->tok);
    kiln_ds4_free(m->ds4);
    free(m->layers);
    kiln_gguf_close(m->gguf);
    free(m);
}
