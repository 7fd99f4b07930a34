/* convert/arch_phi.c - Phi3ForCausalLM (Phi-3, Phi-3.5, Phi-4, Phi-4-mini),
 * general.architecture = phi3, as llama.cpp's Phi3MiniModel converts it.
 *
 * What is particular to it: q, k and v come fused (qkv_proj, rows
 * [q | k | v]) and so do gate and up (gate_up_proj, rows [gate | up]);
 * both are copied as they are, to attn_qkv and ffn_up, the runtime
 * splitting them. RoPE is NEOX over rope.dimension_count =
 * partial_rotary_factor * hidden_size / heads dimensions. LongRoPE
 * ("longrope", formerly "su") adds two generated tensors,
 * rope_factors_long and rope_factors_short, and rope.scaling.attn_factor
 * sqrt(1 + ln(max / original) / ln(original)), which llama.cpp sets while
 * preparing tensors, hence right after general.architecture. Phi3 writes
 * its own arch keys (not TextModel's), with sliding_window 0 when absent.
 * The vocab is SentencePiece with Phi-3's added-token rules, or GPT-2
 * BPE when tokenizer_class is GPT2Tokenizer (Phi-4). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "hparams.h"
#include "json.h"
#include "rope.h"

static const cv_tmap PHI3_TENSORS[] = {
    {"model.embed_tokens", "token_embd", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"lm_head", "output", {CV_D_VOCAB, CV_D_EMBD}, 0},
    {"model.norm", "output_norm", {CV_D_EMBD}, 0},
    {"model.layers.{bid}.input_layernorm", "blk.{bid}.attn_norm", {CV_D_EMBD}, 0},
    {"model.layers.{bid}.self_attn.qkv_proj", "blk.{bid}.attn_qkv", {CV_D_QKV_GQA, CV_D_EMBD}, 0},
    {"model.layers.{bid}.self_attn.o_proj", "blk.{bid}.attn_output", {CV_D_EMBD, CV_D_Q}, 0},
    {"model.layers.{bid}.post_attention_layernorm", "blk.{bid}.ffn_norm", {CV_D_EMBD}, 0},
    {"model.layers.{bid}.mlp.gate_up_proj", "blk.{bid}.ffn_up", {CV_D_FF2, CV_D_EMBD}, 0},
    {"model.layers.{bid}.mlp.down_proj", "blk.{bid}.ffn_down", {CV_D_EMBD, CV_D_FF}, 0},
    {NULL, NULL, {0}, 0},
};

static const char *const PHI3_SKIP[] = {".rotary_emb.inv_freq", NULL};

/* The rope facts Phi3MiniModel reads, with their errors. */
typedef struct phi_rope {
    int64_t max_pos, orig_ctx, rope_dims;
    double theta;
    json_t *params; /* owned */
} phi_rope;

static int need_u(json_t *obj, const char *key, const char *where, int64_t *out, kiln_err *err) {
    if (!cv_json_int(cv_json_get(obj, key), out) || *out <= 0)
        return kiln_fail(err, "config.json", where, -1, "missing or not a positive integer (needed by phi3)");
    return 0;
}

static int read_rope(json_t *config, const cv_hp *hp, phi_rope *r, kiln_err *err) {
    static const char *const KEYS_POS[] = {"n_positions", "max_position_embeddings", NULL};
    memset(r, 0, sizeof *r);
    const char *key = "max_position_embeddings";
    if (!cv_json_int(cv_json_find(config, KEYS_POS, &key), &r->max_pos) || r->max_pos <= 0)
        return kiln_fail(err, "config.json", key, -1, "missing or not a positive integer (needed by phi3)");
    if (!(r->params = cv_rope_params(config))) return kiln_fail(err, "config.json", NULL, -1, "out of memory");
    json_t *p = cv_json_get(r->params, "full_attention");
    if (!json_is_object(p)) p = r->params;
    int rc = need_u(r->params, "original_max_position_embeddings", "original_max_position_embeddings",
                    &r->orig_ctx, err);
    if (rc == 0 && !cv_json_num(cv_json_get(p, "rope_theta"), &r->theta))
        rc = kiln_fail(err, "config.json", "rope_theta", -1, "missing (needed by phi3)");
    if (rc < 0) {
        json_decref(r->params);
        r->params = NULL;
        return -1;
    }
    /* partial_rotary_factor: mirrored in from the top level */
    double pct = 1.0;
    json_t *pj = cv_json_get(r->params, "partial_rotary_factor");
    if (!pj) pj = cv_json_get(config, "partial_rotary_factor");
    if (pj && !json_is_null(pj) && !cv_json_num(pj, &pct)) {
        json_decref(r->params);
        r->params = NULL;
        return kiln_fail(err, "config.json", "partial_rotary_factor", -1, "must be a number");
    }
    r->rope_dims = (int64_t)(pct * (double)hp->dim[CV_D_EMBD]) / hp->n_head;
    return 0;
}

/* Phi3MiniModel.set_gguf_parameters, without file_type and sliding_window. */
static int phi3_params(const cv_hp *hp, json_t *config, cv_kv *k) {
    if (!hp->n_head || !hp->dim[CV_D_EMBD] || !hp->dim[CV_D_FF])
        return kiln_fail(k->err, "config.json", "hidden_size", -1,
                         "hidden_size, num_attention_heads and intermediate_size are needed by phi3");
    double eps;
    if (!cv_json_num(cv_json_get(config, "rms_norm_eps"), &eps))
        return kiln_fail(k->err, "config.json", "rms_norm_eps", -1, "missing (needed by phi3)");
    phi_rope r;
    if (read_rope(config, hp, &r, k->err) < 0) return -1;
    json_decref(r.params);
    if (cv_kv_arch_u32(k, "context_length", (uint32_t)r.max_pos) < 0 ||
        cv_kv_arch_u32(k, "rope.scaling.original_context_length", (uint32_t)r.orig_ctx) < 0 ||
        cv_kv_arch_u32(k, "embedding_length", (uint32_t)hp->dim[CV_D_EMBD]) < 0 ||
        cv_kv_arch_u32(k, "feed_forward_length", (uint32_t)hp->dim[CV_D_FF]) < 0 ||
        cv_kv_arch_u32(k, "block_count", (uint32_t)hp->n_layer) < 0 ||
        cv_kv_arch_u32(k, "attention.head_count", (uint32_t)hp->n_head) < 0 ||
        cv_kv_arch_u32(k, "attention.head_count_kv", (uint32_t)hp->n_kv) < 0 ||
        cv_kv_arch_f32(k, "attention.layer_norm_rms_epsilon", (float)eps) < 0 ||
        cv_kv_arch_u32(k, "rope.dimension_count", (uint32_t)r.rope_dims) < 0)
        return -1;
    return cv_kv_arch_f32(k, "rope.freq_base", (float)r.theta);
}

/* sliding_window after general.file_type; 0 (not absent) when unset. */
static int phi3_params_tail(const cv_hp *hp, json_t *config, cv_kv *k) {
    (void)hp;
    json_t *sw = cv_json_get(config, "sliding_window");
    int64_t n = 0;
    if (sw && !json_is_null(sw) && (!cv_json_int(sw, &n) || n < 0 || n > UINT32_MAX))
        return kiln_fail(k->err, "config.json", "sliding_window", -1, "must be a non-negative integer");
    return cv_kv_arch_u32(k, "attention.sliding_window", (uint32_t)n);
}

/* The LongRoPE facts: *long_f NULL when the config has no long factors.
 * Returns 0 or -1. */
static int longrope(json_t *config, const cv_hp *hp, phi_rope *r, json_t **long_f, json_t **short_f,
                    double *attn_factor, kiln_err *err) {
    *long_f = *short_f = NULL;
    if (read_rope(config, hp, r, err) < 0) return -1;
    json_t *lf = cv_json_get(r->params, "long_factor"), *sf = cv_json_get(r->params, "short_factor");
    if (!cv_json_truthy(lf)) return 0;
    const char *type = cv_json_str(cv_json_get(r->params, "rope_type"));
    const double scale = (double)r->max_pos / (double)r->orig_ctx;
    if (!type || !*type) return kiln_fail(err, "config.json", "rope_scaling.type", -1, "missing");
    if (!strcasecmp(type, "su") || !strcasecmp(type, "longrope"))
        *attn_factor = scale > 1.0 ? sqrt(1.0 + log(scale) / log((double)r->orig_ctx)) : 1.0;
    else if (!strcasecmp(type, "yarn"))
        *attn_factor = scale > 1.0 ? 0.1 * log(scale) + 1.0 : 1.0;
    else
        return kiln_fail(err, "config.json", "rope_scaling.type", -1, "'%s' is not supported by phi3", type);
    if (!json_is_array(lf) || !json_is_array(sf) || json_array_size(lf) != json_array_size(sf) ||
        (int64_t)json_array_size(lf) * 2 != r->rope_dims)
        return kiln_fail(err, "config.json", "rope_scaling.long_factor", -1,
                         "long and short factors must both have %lld entries", (long long)(r->rope_dims / 2));
    *long_f = lf;
    *short_f = sf;
    return 0;
}

static int phi3_params_head(const cv_hp *hp, json_t *config, cv_kv *k) {
    phi_rope r;
    json_t *lf, *sf;
    double attn = 1.0;
    int rc = longrope(config, hp, &r, &lf, &sf, &attn, k->err);
    json_decref(r.params);
    if (rc < 0 || !lf) return rc;
    return cv_kv_arch_f32(k, "rope.scaling.attn_factor", (float)attn);
}

static float *factors(json_t *arr, kiln_err *err) {
    size_t n = json_array_size(arr);
    float *f = malloc(n * sizeof *f);
    if (!f) return kiln_fail(err, "config.json", NULL, -1, "out of memory"), NULL;
    for (size_t i = 0; i < n; i++) {
        double d;
        if (!cv_json_num(json_array_get(arr, i), &d)) {
            free(f);
            return kiln_fail(err, "config.json", "rope_scaling", (int64_t)i, "factor is not a number"), NULL;
        }
        f[i] = (float)d;
    }
    return f;
}

static int phi3_extra_tensors(json_t *config, const cv_hp *hp, cv_gen_tensor *out, kiln_err *err) {
    phi_rope r;
    json_t *lf, *sf;
    double attn = 1.0;
    int rc = longrope(config, hp, &r, &lf, &sf, &attn, err);
    if (rc == 0 && lf) {
        out[0] = (cv_gen_tensor){"rope_factors_long.weight", factors(lf, err), (int64_t)json_array_size(lf)};
        out[1] = (cv_gen_tensor){"rope_factors_short.weight", out[0].data ? factors(sf, err) : NULL,
                                 (int64_t)json_array_size(sf)};
        if (!out[1].data) {
            free(out[0].data);
            rc = -1;
        } else {
            rc = 2;
        }
    }
    json_decref(r.params);
    return rc;
}

const cv_arch cv_arch_phi3 = {
    .hf_name = "Phi3ForCausalLM",
    .gguf_arch = "phi3",
    .tensors = PHI3_TENSORS,
    .skip_suffixes = PHI3_SKIP,
    .flags = CV_A_VOCAB_PHI3 | CV_A_OWN_PARAMS,
    .params = phi3_params,
    .params_tail = phi3_params_tail,
    .params_head = phi3_params_head,
    .extra_tensors = phi3_extra_tensors,
};
