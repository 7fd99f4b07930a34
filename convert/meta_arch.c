/* convert/meta_arch.c - the architecture metadata keys (ARCH.*), written
 * in the order and with the types of llama.cpp's
 * TextModel.set_gguf_parameters, then general.file_type, then the
 * table's own keys (arch_*.c). GPT-2 writes its own set instead.
 *
 * llama.cpp skips a key whose config value is absent; kiln does too,
 * except for the keys every llama.cpp model needs (context length,
 * embedding length, head count), whose absence is an error naming them. */
#include "meta.h"

#include <string.h>

#include "json.h"
#include "rope.h"

static const char *const KEYS_RMS_EPS[] = {"rms_norm_eps", "norm_eps", NULL};
static const char *const KEYS_NORM_EPS[] = {"layer_norm_eps", "layer_norm_epsilon", "norm_epsilon", NULL};
static const char *const KEYS_SCORE[] = {"score_function", "scoring_func", "score_func", "moe_router_activation",
                                         "moe_router_activation_func", "expert_selection_fn", NULL};
static const char *const KEYS_GROUPS[] = {"n_group", NULL};
static const char *const KEYS_GROUPS_USED[] = {"topk_group", NULL};
static const char *const KEYS_HEAD_DIM[] = {"head_dim", NULL};

/* An integer key: 1 written, 0 absent (or null), -1 error. `required`
 * turns absence into an error. */
static int int_key(json_t *config, const char *const *keys, const char *suffix, bool required, cv_kv *k) {
    const char *key = keys[0];
    json_t *v = cv_json_find(config, keys, &key);
    if (!v || json_is_null(v)) {
        if (required) return kiln_fail(k->err, "config.json", key, -1, "missing (needed for %s.%s)", k->arch, suffix);
        return 0;
    }
    int64_t n;
    if (!cv_json_int(v, &n) || n < 0 || n > UINT32_MAX)
        return kiln_fail(k->err, "config.json", key, -1, "must be a non-negative integer");
    return cv_kv_arch_u32(k, suffix, (uint32_t)n) < 0 ? -1 : 1;
}

static int float_key(json_t *config, const char *const *keys, const char *suffix, cv_kv *k) {
    const char *key = keys[0];
    json_t *v = cv_json_find(config, keys, &key);
    double d;
    if (!v || json_is_null(v)) return 0;
    if (!cv_json_num(v, &d)) return kiln_fail(k->err, "config.json", key, -1, "must be a number");
    return cv_kv_arch_f32(k, suffix, (float)d);
}

static int gating_key(json_t *config, cv_kv *k) {
    const char *key = NULL;
    json_t *v = cv_json_find(config, KEYS_SCORE, &key);
    if (!v || json_is_null(v)) return 0;
    const char *s = cv_json_str(v);
    /* llama.cpp's ExpertGatingFuncType */
    uint32_t t = s && !strcmp(s, "softmax") ? 1 : s && !strcmp(s, "sigmoid") ? 2 : s && !strcmp(s, "sqrtsoftplus") ? 4 : 0;
    if (!t) return kiln_fail(k->err, "config.json", key, -1, "unsupported expert gating function");
    return cv_kv_arch_u32(k, "expert_gating_func", t);
}

/* TextModel.set_gguf_parameters without the file type. */
static int base_keys(json_t *config, const cv_hp *hp, cv_kv *k) {
    if (cv_kv_arch_u32(k, "block_count", (uint32_t)hp->n_layer) < 0 ||
        int_key(config, CV_KEYS_CTX, "context_length", true, k) < 0 ||
        int_key(config, CV_KEYS_EMBD, "embedding_length", true, k) < 0 ||
        int_key(config, CV_KEYS_FF, "feed_forward_length", false, k) < 0 ||
        int_key(config, CV_KEYS_HEADS, "attention.head_count", true, k) < 0 ||
        int_key(config, CV_KEYS_KV_HEADS, "attention.head_count_kv", false, k) < 0)
        return -1;
    json_t *causal = cv_json_get(config, "is_causal");
    if (json_is_false(causal) && cv_kv_arch_bool(k, "attention.causal", false) < 0) return -1;
    if (cv_rope_keys(config, k) < 0 ||
        float_key(config, KEYS_RMS_EPS, "attention.layer_norm_rms_epsilon", k) < 0 ||
        float_key(config, KEYS_NORM_EPS, "attention.layer_norm_epsilon", k) < 0 ||
        int_key(config, CV_KEYS_EXPERTS, "expert_count", false, k) < 0 ||
        int_key(config, CV_KEYS_EXPERTS_USED, "expert_used_count", false, k) < 0 ||
        int_key(config, KEYS_GROUPS, "expert_group_count", false, k) < 0 ||
        int_key(config, KEYS_GROUPS_USED, "expert_group_used_count", false, k) < 0 || gating_key(config, k) < 0)
        return -1;
    int r = int_key(config, KEYS_HEAD_DIM, "attention.key_length", false, k);
    if (r < 0 || (r == 1 && int_key(config, KEYS_HEAD_DIM, "attention.value_length", false, k) < 0)) return -1;
    return 0;
}

int cv_meta_arch(const cv_arch *a, json_t *config, const cv_hp *hp, uint32_t file_type, cv_kv *k) {
    if (a->flags & CV_A_OWN_PARAMS) {
        if (a->params(hp, config, k) < 0 || cv_kv_u32(k, "general.file_type", file_type) < 0) return -1;
        return a->params_tail ? a->params_tail(hp, config, k) : 0;
    }
    if (base_keys(config, hp, k) < 0 || cv_kv_u32(k, "general.file_type", file_type) < 0) return -1;
    if (a->params && a->params(hp, config, k) < 0) return -1;
    return a->params_tail ? a->params_tail(hp, config, k) : 0;
}
