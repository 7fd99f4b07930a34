/* convert/arch_deepseek.c - DeepseekV2ForCausalLM and DeepseekV3ForCausalLM
 * (DeepSeek-V2, V2-Lite, V3, R1), llama.cpp arch `deepseek2`, as
 * llama.cpp's DeepseekV2Model converts them.
 *
 * Attention is MLA: q through a low-rank pair (q_a_proj, q_a_layernorm,
 * q_b_proj) or, with q_lora_rank null (V2-Lite), one q_proj; keys and
 * values through kv_a_proj_with_mqa (the latent plus the shared RoPE key)
 * and kv_a_layernorm; kv_b_proj is cut per head into attn_k_b (the k rows,
 * transposed: llama.cpp absorbs it into q) and attn_v_b, which is
 * cv_kv_b_split below. The first first_k_dense_replace blocks have a dense
 * FFN, the others routed experts (stacked down, gate, up), shared experts
 * and a router whose e_score_correction_bias becomes exp_probs_b.bias.
 * Blocks past num_hidden_layers (V3's multi-token-prediction layer) are
 * dropped, as llama.cpp drops them. FP8 checkpoints (F8_E4M3 with 128x128
 * weight_scale_inv) need nothing here: plan.c and emit.c dequantize every
 * weight inline, kv_b before it is cut.
 *
 * Metadata: llama.cpp sets num_key_value_heads to 1 (MLA runs as MQA over
 * the latent) and a default rms_norm_eps before the common keys, then adds
 * the MLA sizes, expert counts and YaRN's log multiplier after
 * general.file_type (params below). The vocabulary is the tokenizer.json
 * BPE (DeepSeek-V3's pre-tokenizer is `deepseek-v3`). */
#include <stdio.h>
#include <string.h>

#include "arch.h"
#include "hparams.h"
#include "json.h"
#include "rope.h"

#define BLK "model.layers.{bid}."

static const cv_tmap DEEPSEEK_TENSORS[] = {
    {"model.embed_tokens", "token_embd", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"lm_head", "output", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"model.norm", "output_norm", {CV_D_EMBD}, 0},
    {BLK "input_layernorm", "blk.{bid}.attn_norm", {CV_D_EMBD}, 0},
    {BLK "self_attn.q_proj", "blk.{bid}.attn_q", {CV_D_Q_MLA, CV_D_EMBD}, 0},
    {BLK "self_attn.q_a_proj", "blk.{bid}.attn_q_a", {CV_D_Q_LORA, CV_D_EMBD}, 0},
    {BLK "self_attn.q_a_layernorm", "blk.{bid}.attn_q_a_norm", {CV_D_Q_LORA}, 0},
    {BLK "self_attn.q_b_proj", "blk.{bid}.attn_q_b", {CV_D_Q_MLA, CV_D_Q_LORA}, 0},
    {BLK "self_attn.kv_a_proj_with_mqa", "blk.{bid}.attn_kv_a_mqa", {CV_D_KV_A_MQA, CV_D_EMBD}, 0},
    {BLK "self_attn.kv_a_layernorm", "blk.{bid}.attn_kv_a_norm", {CV_D_KV_LORA}, 0},
    /* one source, two outputs: the k part, then (next entry) the v part */
    {BLK "self_attn.kv_b_proj", "blk.{bid}.attn_k_b", {CV_D_KV_B, CV_D_KV_LORA}, CV_T_KV_B_K},
    {BLK "self_attn.kv_b_proj", "blk.{bid}.attn_v_b", {CV_D_KV_B, CV_D_KV_LORA}, CV_T_KV_B_V},
    {BLK "self_attn.o_proj", "blk.{bid}.attn_output", {CV_D_EMBD, CV_D_O_MLA}, 0},
    {BLK "post_attention_layernorm", "blk.{bid}.ffn_norm", {CV_D_EMBD}, 0},
    {BLK "mlp.gate_proj", "blk.{bid}.ffn_gate", {CV_D_FF, CV_D_EMBD}, 0},
    {BLK "mlp.up_proj", "blk.{bid}.ffn_up", {CV_D_FF, CV_D_EMBD}, 0},
    {BLK "mlp.down_proj", "blk.{bid}.ffn_down", {CV_D_EMBD, CV_D_FF}, 0},
    {BLK "mlp.gate", "blk.{bid}.ffn_gate_inp", {CV_D_NEXP, CV_D_EMBD}, CV_T_F32},
    {BLK "mlp.gate.e_score_correction", "blk.{bid}.exp_probs_b", {CV_D_NEXP}, 0},
    {BLK "mlp.experts.{xid}.down_proj", "blk.{bid}.ffn_down_exps", {CV_D_EMBD, CV_D_FF_EXP}, CV_T_EXPERT},
    {BLK "mlp.experts.{xid}.gate_proj", "blk.{bid}.ffn_gate_exps", {CV_D_FF_EXP, CV_D_EMBD}, CV_T_EXPERT},
    {BLK "mlp.experts.{xid}.up_proj", "blk.{bid}.ffn_up_exps", {CV_D_FF_EXP, CV_D_EMBD}, CV_T_EXPERT},
    {BLK "mlp.shared_experts.gate_proj", "blk.{bid}.ffn_gate_shexp", {CV_D_FF_SHEXP, CV_D_EMBD}, 0},
    {BLK "mlp.shared_experts.up_proj", "blk.{bid}.ffn_up_shexp", {CV_D_FF_SHEXP, CV_D_EMBD}, 0},
    {BLK "mlp.shared_experts.down_proj", "blk.{bid}.ffn_down_shexp", {CV_D_EMBD, CV_D_FF_SHEXP}, 0},
    {NULL, NULL, {0}, 0},
};

static const char *const DEEPSEEK_SKIP[] = {".rotary_emb.inv_freq", NULL};

void cv_kv_b_split(const uint8_t *src, uint8_t *dst, int64_t n_head, int64_t nope, int64_t v, int64_t kv_lora,
                   uint32_t es, int part) {
    for (int64_t h = 0; h < n_head; h++) {
        const uint8_t *head = src + (uint64_t)(h * (nope + v) * kv_lora) * es;
        if (part == 0) {
            uint8_t *out = dst + (uint64_t)(h * kv_lora * nope) * es;
            for (int64_t c = 0; c < kv_lora; c++)
                for (int64_t j = 0; j < nope; j++)
                    memcpy(out + (uint64_t)(c * nope + j) * es, head + (uint64_t)(j * kv_lora + c) * es, es);
        } else {
            memcpy(dst + (uint64_t)(h * v * kv_lora) * es, head + (uint64_t)(nope * kv_lora) * es,
                   (uint64_t)(v * kv_lora) * es);
        }
    }
}

/* llama.cpp's ModelBase renames `e_score_correction_bias` to
 * `e_score_correction.bias` before mapping. */
static const char *rename_tensor(const char *name, char *buf, size_t cap) {
    static const char suffix[] = "e_score_correction_bias";
    size_t n = strlen(name), m = sizeof suffix - 1;
    if (n < m || strcmp(name + n - m, suffix) || n + 1 >= cap) return name;
    memcpy(buf, name, n - 5);
    memcpy(buf + n - 5, ".bias", 6);
    return buf;
}

/* A positive integer key: 1 found, 0 absent or null, -1 error. */
static int pos_int(json_t *config, const char *key, int64_t *out, kiln_err *err) {
    json_t *v = cv_json_get(config, key);
    if (!v || json_is_null(v)) return 0;
    if (!cv_json_int(v, out) || *out <= 0) return kiln_fail(err, "config.json", key, -1, "must be a positive integer");
    return 1;
}

static void set_dim(cv_hp *hp, int d, int64_t v, const char *key) {
    hp->dim[d] = v;
    snprintf(hp->dim_key[d], sizeof hp->dim_key[d], "%s", key);
}

/* The MLA dimensions, then llama.cpp's config edits (set_gguf_parameters
 * runs them before the common keys). The edit is in place: the config
 * goes through here once. */
static int deepseek_hparams(json_t *config, cv_hp *hp, kiln_err *err) {
    int64_t qr = 0, kvr = 512, nope = 0, rope = 0, v = 0, nsh = 0;
    if (pos_int(config, "q_lora_rank", &qr, err) < 0 || pos_int(config, "kv_lora_rank", &kvr, err) < 0 ||
        pos_int(config, "qk_nope_head_dim", &nope, err) < 0 || pos_int(config, "qk_rope_head_dim", &rope, err) < 0 ||
        pos_int(config, "v_head_dim", &v, err) < 0 || pos_int(config, "n_shared_experts", &nsh, err) < 0)
        return -1;
    if (qr) set_dim(hp, CV_D_Q_LORA, qr, "q_lora_rank");
    set_dim(hp, CV_D_KV_LORA, kvr, "kv_lora_rank");
    if (nope) set_dim(hp, CV_D_QK_NOPE, nope, "qk_nope_head_dim");
    if (v) set_dim(hp, CV_D_V_HEAD, v, "v_head_dim");
    if (rope) set_dim(hp, CV_D_KV_A_MQA, kvr + rope, "kv_lora_rank + qk_rope_head_dim");
    if (hp->n_head && nope && rope)
        set_dim(hp, CV_D_Q_MLA, hp->n_head * (nope + rope), "num_attention_heads * (qk_nope + qk_rope_head_dim)");
    if (hp->n_kv && nope && v)
        set_dim(hp, CV_D_KV_B, hp->n_kv * (nope + v), "num_key_value_heads * (qk_nope_head_dim + v_head_dim)");
    if (hp->n_head && v) set_dim(hp, CV_D_O_MLA, hp->n_head * v, "num_attention_heads * v_head_dim");
    if (nsh && hp->dim[CV_D_FF_EXP])
        set_dim(hp, CV_D_FF_SHEXP, nsh * hp->dim[CV_D_FF_EXP], "n_shared_experts * moe_intermediate_size");
    if (json_object_set_new(config, "num_key_value_heads", json_integer(1)) < 0 ||
        (!cv_json_get(config, "rms_norm_eps") && json_object_set_new(config, "rms_norm_eps", json_real(1e-6)) < 0))
        return kiln_fail(err, "config.json", NULL, -1, "out of memory");
    return 0;
}

/* An integer key that must be there: -1 (error naming it) when absent. */
static int need_int(json_t *config, const char *key, int64_t *out, kiln_err *err) {
    int r = pos_int(config, key, out, err);
    return r == 0 ? kiln_fail(err, "config.json", key, -1, "missing (needed for deepseek2's metadata)") : r;
}

/* An arch key the common keys may have set already (gguf-py then
 * overwrites it in place, keeping its position): `was_set` says whether
 * they did, so that the metadata's byte count (--dry-run's output size)
 * counts it once. */
static int set_again_u32(cv_kv *k, const char *suffix, uint32_t v, bool was_set) {
    if (cv_kv_arch_u32(k, suffix, v) < 0) return -1;
    if (was_set) {
        k->bytes -= 8 + strlen(k->arch) + 1 + strlen(suffix) + 4 + 4;
        k->n--;
    }
    return 0;
}

/* DeepseekV2Model.set_gguf_parameters after the common keys. */
static int deepseek_params(const cv_hp *hp, json_t *config, cv_kv *k) {
    kiln_err *err = k->err;
    int64_t vocab, qr = 0, kvr = 512, nope, rope, v, ff, n_exp = 0, n_shared = 0;
    /* the common keys wrote key_length and value_length from head_dim */
    json_t *head_dim = cv_json_get(config, "head_dim");
    bool has_head_dim = head_dim && !json_is_null(head_dim);
    json_t *moe = cv_json_get(config, "n_routed_experts");
    bool has_moe = moe && !json_is_null(moe);
    int64_t dense = has_moe ? 0 : hp->n_layer;
    json_t *fk = cv_json_get(config, "first_k_dense_replace");
    if (fk && !json_is_null(fk) && (!cv_json_int(fk, &dense) || dense < 0))
        return kiln_fail(err, "config.json", "first_k_dense_replace", -1, "must be a non-negative integer");
    if (need_int(config, "vocab_size", &vocab, err) < 0 || pos_int(config, "q_lora_rank", &qr, err) < 0 ||
        pos_int(config, "kv_lora_rank", &kvr, err) < 0 || need_int(config, "qk_nope_head_dim", &nope, err) < 0 ||
        need_int(config, "qk_rope_head_dim", &rope, err) < 0 || need_int(config, "v_head_dim", &v, err) < 0 ||
        pos_int(config, "n_routed_experts", &n_exp, err) < 0)
        return -1;
    json_t *sh = cv_json_get(config, "n_shared_experts");
    if (sh && !json_is_null(sh) && (!cv_json_int(sh, &n_shared) || n_shared < 0))
        return kiln_fail(err, "config.json", "n_shared_experts", -1, "must be a non-negative integer");
    static const char *const FF_KEYS[] = {"moe_intermediate_size", "intermediate_size", NULL};
    const char *ff_key = FF_KEYS[0];
    if (!cv_json_int(cv_json_find(config, FF_KEYS, &ff_key), &ff) || ff <= 0)
        return kiln_fail(err, "config.json", ff_key, -1, "must be a positive integer (expert feed-forward length)");
    if (cv_kv_arch_u32(k, "leading_dense_block_count", (uint32_t)dense) < 0 ||
        cv_kv_arch_u32(k, "vocab_size", (uint32_t)vocab) < 0 ||
        (qr && cv_kv_arch_u32(k, "attention.q_lora_rank", (uint32_t)qr) < 0) ||
        cv_kv_arch_u32(k, "attention.kv_lora_rank", (uint32_t)kvr) < 0 ||
        set_again_u32(k, "attention.key_length", (uint32_t)(kvr + rope), has_head_dim) < 0 ||
        set_again_u32(k, "attention.value_length", (uint32_t)kvr, has_head_dim) < 0 ||
        cv_kv_arch_u32(k, "attention.key_length_mla", (uint32_t)(nope + rope)) < 0 ||
        cv_kv_arch_u32(k, "attention.value_length_mla", (uint32_t)v) < 0 ||
        cv_kv_arch_u32(k, "expert_feed_forward_length", (uint32_t)ff) < 0)
        return -1;
    /* the common keys took expert_count from the first of num_local_experts,
     * num_experts, n_routed_experts; llama.cpp sets it again from the last */
    const char *first = NULL;
    if (has_moe && cv_json_find(config, CV_KEYS_EXPERTS, &first) && strcmp(first, "n_routed_experts") &&
        set_again_u32(k, "expert_count", (uint32_t)n_exp, true) < 0)
        return -1;
    if (cv_kv_arch_u32(k, "expert_shared_count", (uint32_t)n_shared) < 0) return -1;
    double d;
    json_t *scale = cv_json_get(config, "routed_scaling_factor");
    if (scale && !json_is_null(scale)) {
        if (!cv_json_num(scale, &d)) return kiln_fail(err, "config.json", "routed_scaling_factor", -1, "must be a number");
        if (cv_kv_arch_f32(k, "expert_weights_scale", (float)d) < 0) return -1;
    }
    if (cv_json_truthy(cv_json_get(config, "norm_topk_prob")) && cv_kv_arch_bool(k, "expert_weights_norm", true) < 0)
        return -1;
    if (cv_kv_arch_u32(k, "rope.dimension_count", (uint32_t)rope) < 0) return -1;
    json_t *rp = cv_rope_params(config);
    if (!rp) return kiln_fail(err, "config.json", NULL, -1, "out of memory");
    json_t *ms = cv_json_get(rp, "mscale_all_dim");
    int rc = 0;
    if (ms && !json_is_null(ms)) {
        /* llama.cpp's [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]: 0.1 * mscale_all_dim, in double, then float32 */
        if (!cv_json_num(ms, &d)) rc = kiln_fail(err, "config.json", "rope_scaling.mscale_all_dim", -1, "must be a number");
        else rc = cv_kv_arch_f32(k, "rope.scaling.yarn_log_multiplier", (float)(0.1 * d));
    }
    json_decref(rp);
    return rc;
}

const cv_arch cv_arch_deepseek2 = {.hf_name = "DeepseekV2ForCausalLM", .gguf_arch = "deepseek2",
                                   .tensors = DEEPSEEK_TENSORS, .skip_suffixes = DEEPSEEK_SKIP,
                                   .flags = CV_A_DROP_MTP, .params = deepseek_params, .rename = rename_tensor,
                                   .hparams = deepseek_hparams};
const cv_arch cv_arch_deepseek3 = {.hf_name = "DeepseekV3ForCausalLM", .gguf_arch = "deepseek2",
                                   .tensors = DEEPSEEK_TENSORS, .skip_suffixes = DEEPSEEK_SKIP,
                                   .flags = CV_A_DROP_MTP, .params = deepseek_params, .rename = rename_tensor,
                                   .hparams = deepseek_hparams};
