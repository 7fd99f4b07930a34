/* convert/rope.c - RoPE metadata and llama3 rope_freqs (see rope.h). */
#include "rope.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static const char *const KEYS_THETA[] = {"global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta",
                                         "rotary_emb_base", NULL};
static const char *const KEYS_LOCAL_THETA[] = {"local_rope_theta", "rope_local_theta", "rope_theta_local",
                                               "swa_rope_theta", "rope_local_base_freq", NULL};

json_t *cv_rope_params(json_t *config) {
    json_t *src = cv_json_get(config, "rope_parameters");
    if (!src) src = cv_json_get(config, "rope_scaling");
    json_t *rp = cv_json_truthy(src) && json_is_object(src) ? json_deep_copy(src) : json_object();
    if (!rp) return NULL;
    if (cv_json_get(rp, "full_attention") || cv_json_get(rp, "sliding_attention")) return rp;
    json_t *local = cv_json_find(config, KEYS_LOCAL_THETA, NULL);
    if (local && !json_is_null(local)) {
        json_t *sw = json_object();
        json_object_set(sw, "rope_theta", local);
        json_object_set_new(rp, "sliding_attention", sw);
    }
    json_t *theta = cv_json_find(config, KEYS_THETA, NULL);
    if (!cv_json_get(rp, "rope_theta") && theta && !json_is_null(theta)) json_object_set(rp, "rope_theta", theta);
    json_t *type = cv_json_get(rp, "type");
    if (!cv_json_get(rp, "rope_type") && type && !json_is_null(type)) json_object_set(rp, "rope_type", type);
    json_t *orig = cv_json_get(config, "original_max_position_embeddings");
    if (!cv_json_get(rp, "original_max_position_embeddings") && orig && !json_is_null(orig))
        json_object_set(rp, "original_max_position_embeddings", orig);
    return rp;
}

/* An optional float key of `obj` written as "ARCH.suffix". */
static int opt_f32(json_t *obj, const char *key, const char *suffix, cv_kv *k) {
    double v;
    json_t *j = cv_json_get(obj, key);
    if (!j || json_is_null(j)) return 0;
    if (!cv_json_num(j, &v)) return kiln_fail(k->err, "config.json", key, -1, "must be a number");
    return cv_kv_arch_f32(k, suffix, (float)v);
}

static int scaling_keys(json_t *p, cv_kv *k) {
    const char *type = cv_json_str(cv_json_get(p, "rope_type"));
    if (!type) return 0;
    json_t *factor = cv_json_get(p, "factor");
    bool has_factor = factor && !json_is_null(factor);
    if (!strcmp(type, "linear") && has_factor) {
        if (cv_kv_arch_str(k, "rope.scaling.type", "linear") < 0) return -1;
        return opt_f32(p, "factor", "rope.scaling.factor", k);
    }
    if (!strcmp(type, "yarn") && has_factor) {
        int64_t orig;
        if (cv_kv_arch_str(k, "rope.scaling.type", "yarn") < 0 ||
            opt_f32(p, "factor", "rope.scaling.factor", k) < 0)
            return -1;
        if (!cv_json_int(cv_json_get(p, "original_max_position_embeddings"), &orig))
            return kiln_fail(k->err, "config.json", "rope_scaling.original_max_position_embeddings", -1,
                             "missing (needed for yarn scaling)");
        if (cv_kv_arch_u32(k, "rope.scaling.original_context_length", (uint32_t)orig) < 0 ||
            opt_f32(p, "extrapolation_factor", "rope.scaling.yarn_ext_factor", k) < 0)
            return -1;
        const char *attn = cv_json_get(p, "attention_factor") ? "attention_factor" : "attn_factor";
        if (opt_f32(p, attn, "rope.scaling.yarn_attn_factor", k) < 0 ||
            opt_f32(p, "beta_fast", "rope.scaling.yarn_beta_fast", k) < 0)
            return -1;
        return opt_f32(p, "beta_slow", "rope.scaling.yarn_beta_slow", k);
    }
    if (!strcmp(type, "su") || !strcmp(type, "longrope")) return cv_kv_arch_str(k, "rope.scaling.type", "longrope");
    return 0; /* dynamic, llama3 (a tensor), or unknown: no keys */
}

int cv_rope_keys(json_t *config, cv_kv *k) {
    json_t *rp = cv_rope_params(config);
    if (!rp) return kiln_fail(k->err, "config.json", NULL, -1, "out of memory");
    json_t *p = cv_json_get(rp, "full_attention");
    if (!json_is_object(p)) p = rp;
    int rc = scaling_keys(p, k);
    if (rc == 0) rc = opt_f32(p, "rope_theta", "rope.freq_base", k);
    json_t *sw = cv_json_get(rp, "sliding_attention");
    if (rc == 0 && json_is_object(sw)) rc = opt_f32(sw, "rope_theta", "rope.freq_base_swa", k);
    json_decref(rp);
    return rc;
}

static double num_or(json_t *obj, const char *key, double dflt) {
    double v;
    return cv_json_num(cv_json_get(obj, key), &v) ? v : dflt;
}

/* The llama3 factors, each operation rounded to float32 as torch does it
 * in LlamaModel.generate_extra_tensors: `scalar / tensor` is the tensor's
 * reciprocal times the scalar, `tensor / scalar` a true division, and a
 * tensor compared with a Python float is compared with the float rounded
 * to float32. The base frequencies are base^(2i/dim) correctly rounded;
 * torch's vectorized pow (SLEEF, 1 ulp) can differ from that in the last
 * bit, which changes only a factor in the smooth band (see the tests). */
int cv_rope_freqs(json_t *config, const cv_hp *hp, float **out, int64_t *n, kiln_err *err) {
    *out = NULL;
    *n = 0;
    json_t *rp = cv_rope_params(config);
    if (!rp) return kiln_fail(err, "config.json", NULL, -1, "out of memory");
    json_t *p = cv_json_get(rp, "full_attention");
    if (!json_is_object(p)) p = rp;
    const char *type = cv_json_str(cv_json_get(p, "rope_type"));
    if (!type || strcasecmp(type, "llama3")) {
        json_decref(rp);
        return 0;
    }
    int64_t dim = hp->head_dim;
    if (dim <= 0) {
        json_decref(rp);
        return kiln_fail(err, "config.json", "num_attention_heads", -1, "missing (needed for llama3 rope_freqs)");
    }
    const double base = num_or(p, "rope_theta", 10000.0), factor = num_or(p, "factor", 8.0);
    const double low = num_or(p, "low_freq_factor", 1.0), high = num_or(p, "high_freq_factor", 4.0);
    /* mirrored into the rope parameters from the top level by cv_rope_params */
    const double old_ctx = num_or(p, "original_max_position_embeddings", 8192.0);
    json_decref(rp);
    const float low_wavelen = (float)(old_ctx / low), high_wavelen = (float)(old_ctx / high);
    const float two_pi = (float)(2.0 * M_PI), old_f = (float)old_ctx, factor_f = (float)factor;
    const float low_f = (float)low, band = (float)(high - low);
    int64_t count = (dim + 1) / 2;
    float *f = malloc((size_t)count * sizeof *f);
    if (!f) return kiln_fail(err, "config.json", NULL, -1, "out of memory");
    for (int64_t i = 0; i < count; i++) {
        const float exponent = (float)(2 * i) / (float)dim;
        const float freq = 1.0f / (float)pow((double)(float)base, (double)exponent);
        const float wavelen = (1.0f / freq) * two_pi;
        if (wavelen < high_wavelen) {
            f[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            f[i] = factor_f;
        } else {
            const float smooth = ((1.0f / wavelen) * old_f - low_f) / band;
            f[i] = 1.0f / ((1.0f - smooth) / factor_f + smooth);
        }
    }
    *out = f;
    *n = count;
    return 0;
}
