/* convert/meta_general.c - the general.* keys that come before the
 * architecture's: architecture and type, the recommended sampler settings
 * of generation_config.json, the naming keys, and the size label computed
 * from the planned tensors as gguf-py computes it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "meta.h"

cv_params cv_count_params(const cv_plan *p) {
    cv_params c = {0};
    int64_t expert_sum = 0, n_expert_tensors = 0;
    for (uint64_t i = 0; p && i < p->n; i++) {
        const cv_out *o = &p->t[i];
        if (strstr(o->name, "_exps.") && o->n_dims >= 3) {
            c.expert += o->nelements / o->ne[2];
            expert_sum += o->ne[2];
            n_expert_tensors++;
        } else {
            c.shared += o->nelements;
        }
        c.total += o->nelements;
    }
    c.expert_count = n_expert_tensors ? expert_sum / n_expert_tensors : 0;
    return c;
}

/* model_weight_count_rounded_notation(n, min_digits=2) */
static void rounded(int64_t n, char *buf, size_t cap) {
    double s;
    const char *suffix;
    if (n >= 1e12) s = (double)n * 1e-12, suffix = "T";
    else if (n >= 1e9) s = (double)n * 1e-9, suffix = "B";
    else if (n >= 1e6) s = (double)n * 1e-6, suffix = "M";
    else s = (double)n * 1e-3, suffix = "K";
    char r[64];
    snprintf(r, sizeof r, "%.0f", nearbyint(s)); /* Python's round: ties to even */
    const char *digits = r;
    while (*digits == '0') digits++;
    int fix = 2 - (int)strlen(digits);
    snprintf(buf, cap, "%.*f%s", fix > 0 ? fix : 0, s, suffix);
}

void cv_size_label(const cv_params *pc, char *buf, size_t cap) {
    char pretty[64];
    if (pc->expert_count > 0) {
        rounded(llabs(pc->shared) + llabs(pc->expert), pretty, sizeof pretty);
        snprintf(buf, cap, "%lldx%s", (long long)pc->expert_count, pretty);
    } else {
        rounded(llabs(pc->total), buf, cap);
    }
}

/* general.sampling.* from generation_config.json (a broken file is
 * ignored, as gguf-py ignores it). */
static int sampling_keys(cv_source *src, cv_kv *k) {
    static const struct {
        const char *json, *key;
        char kind; /* s: string, i: int32, f: float32 */
    } S[] = {{"sequence", "general.sampling.sequence", 's'},
             {"top_k", "general.sampling.top_k", 'i'},
             {"top_p", "general.sampling.top_p", 'f'},
             {"min_p", "general.sampling.min_p", 'f'},
             {"xtc_probability", "general.sampling.xtc_probability", 'f'},
             {"xtc_threshold", "general.sampling.xtc_threshold", 'f'},
             {"temperature", "general.sampling.temp", 'f'},
             {"penalty_last_n", "general.sampling.penalty_last_n", 'i'},
             {"penalty_repeat", "general.sampling.penalty_repeat", 'f'},
             {"mirostat", "general.sampling.mirostat", 'i'},
             {"mirostat_tau", "general.sampling.mirostat_tau", 'f'},
             {"mirostat_eta", "general.sampling.mirostat_eta", 'f'}};
    char *text = NULL;
    size_t len = 0;
    int got = cv_source_read_all(src, "generation_config.json", &text, &len, k->err);
    if (got <= 0) return got;
    json_t *gc = cv_json_parse(text, len, "generation_config.json", k->err);
    free(text);
    if (!gc) return -1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sizeof S / sizeof S[0]; i++) {
        json_t *v = cv_json_get(gc, S[i].json);
        int64_t n;
        double d;
        if (!v || json_is_null(v)) continue;
        if (S[i].kind == 's' && cv_json_str(v)) rc = cv_kv_str(k, S[i].key, cv_json_str(v));
        else if (S[i].kind == 'i' && cv_json_int(v, &n)) rc = cv_kv_i32(k, S[i].key, (int32_t)n);
        else if (S[i].kind == 'f' && cv_json_num(v, &d)) rc = cv_kv_f32(k, S[i].key, (float)d);
        else rc = kiln_fail(k->err, "generation_config.json", S[i].json, -1, "has the wrong type");
    }
    json_decref(gc);
    return rc;
}

/* Fills the unset fields of `acc` from the id's components. */
static int take_parts(cv_name_parts *acc, const char *id, int64_t total) {
    cv_name_parts p;
    if (cv_model_id_parts(id, total, &p) < 0) return -1;
    char **dst[] = {&acc->name, &acc->org, &acc->basename, &acc->finetune, &acc->version, &acc->size_label};
    char **srcs[] = {&p.name, &p.org, &p.basename, &p.finetune, &p.version, &p.size_label};
    for (int i = 0; i < 6; i++) {
        if (*dst[i] || !*srcs[i]) continue;
        *dst[i] = i < 2 ? cv_id_to_title(*srcs[i]) : strdup(*srcs[i]);
        if (!*dst[i]) return cv_name_parts_free(&p), -1;
    }
    cv_name_parts_free(&p);
    return 0;
}

int cv_meta_general(cv_source *src, json_t *config, const cv_plan *plan, const cv_arch *a, const cv_hp *hp,
                    cv_kv *k) {
    if (cv_kv_str(k, "general.architecture", k->arch) < 0) return -1;
    if (plan && a->params_head && a->params_head(hp, config, k) < 0) return -1;
    if (cv_kv_str(k, "general.type", "model") < 0) return -1;
    cv_params pc = cv_count_params(plan);
    cv_name_parts np = {0};
    const char *nop = cv_json_str(cv_json_get(config, "_name_or_path"));
    int slashes = 0;
    for (const char *c = nop; c && *c; c++) slashes += *c == '/';
    int rc = 0;
    if (nop && slashes <= 1) rc = take_parts(&np, nop, pc.total);
    if (rc == 0) rc = take_parts(&np, src->name, pc.total);
    if (rc < 0) {
        cv_name_parts_free(&np);
        return kiln_fail(k->err, NULL, NULL, -1, "out of memory");
    }
    char label[64];
    if (!np.size_label && plan && pc.total > 0) {
        cv_size_label(&pc, label, sizeof label);
        np.size_label = strdup(label);
    }
    rc = sampling_keys(src, k);
    if (rc == 0) rc = cv_kv_str(k, "general.name", np.name ? np.name : src->name);
    if (rc == 0) rc = cv_kv_str(k, "general.version", np.version);
    if (rc == 0) rc = cv_kv_str(k, "general.organization", np.org);
    if (rc == 0) rc = cv_kv_str(k, "general.finetune", np.finetune);
    if (rc == 0) rc = cv_kv_str(k, "general.basename", np.basename);
    if (rc == 0) rc = cv_kv_str(k, "general.size_label", np.size_label);
    cv_name_parts_free(&np);
    return rc;
}
