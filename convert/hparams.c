/* convert/hparams.c - resolving the symbolic tensor dimensions from
 * config.json (see hparams.h). */
#include "hparams.h"

#include <stdio.h>
#include <string.h>

#include "json.h"

const char *const CV_KEYS_LAYERS[] = {"n_layers", "num_hidden_layers", "n_layer", "num_layers", NULL};
const char *const CV_KEYS_CTX[] = {"max_position_embeddings", "n_ctx", "n_positions", "max_length",
                                   "max_sequence_length", "model_max_length", NULL};
const char *const CV_KEYS_EMBD[] = {"hidden_size", "n_embd", "dim", NULL};
const char *const CV_KEYS_FF[] = {"prefix_dense_intermediate_size", "dense_intermediate_size", "intermediate_size",
                                  "n_inner", "hidden_dim", NULL};
const char *const CV_KEYS_HEADS[] = {"num_attention_heads", "n_head", "n_heads", NULL};
const char *const CV_KEYS_KV_HEADS[] = {"num_key_value_heads", "n_kv_heads", NULL};
const char *const CV_KEYS_EXPERTS[] = {"num_local_experts", "num_experts", "n_routed_experts", NULL};
const char *const CV_KEYS_EXPERTS_USED[] = {"num_experts_per_tok", "num_experts_per_token", "top_k_experts", NULL};

static const char *const KEYS_VOCAB[] = {"vocab_size", NULL};
static const char *const KEYS_HEAD_DIM[] = {"head_dim", NULL};
static const char *const KEYS_FF_EXP[] = {"moe_intermediate_size", NULL};
static const char *const KEYS_FF_SHEXP[] = {"shared_expert_intermediate_size", NULL};
static const char *const KEYS_POS[] = {"n_positions", "n_ctx", "max_position_embeddings", NULL};

json_t *cv_config_flatten(json_t *config) {
    json_t *flat = json_deep_copy(config);
    json_t *text = flat ? cv_json_get(flat, "text_config") : NULL;
    if (json_is_object(text)) json_object_update(flat, text);
    return flat;
}

/* Looks up one of `keys`: 1 with a positive integer, 0 when absent or
 * null, -1 (error set) when present with another type. */
static int get_dim(json_t *config, const char *const *keys, int64_t *out, const char **key, kiln_err *err) {
    const char *k = NULL;
    json_t *v = cv_json_find(config, keys, &k);
    if (!v || json_is_null(v)) return 0;
    if (!cv_json_int(v, out) || *out <= 0)
        return kiln_fail(err, "config.json", k, -1, "must be a positive integer");
    if (key) *key = k;
    return 1;
}

static void set_dim(cv_hp *hp, int d, int64_t v, const char *key) {
    hp->dim[d] = v;
    snprintf(hp->dim_key[d], sizeof hp->dim_key[d], "%s", key);
}

static int load(const cv_arch *a, json_t *config, cv_hp *hp, kiln_err *err) {
    memset(hp, 0, sizeof *hp);
    const char *key = NULL;
    int64_t v;
    int r;
    if ((r = get_dim(config, CV_KEYS_LAYERS, &hp->n_layer, &hp->layer_key, err)) < 0) return -1;
    if (r == 0)
        return kiln_fail(err, "config.json", "num_hidden_layers", -1,
                         "missing: the block count is needed (none of n_layers, num_hidden_layers, n_layer, num_layers)");
    struct {
        int dim;
        const char *const *keys;
    } direct[] = {{CV_D_VOCAB, KEYS_VOCAB},       {CV_D_EMBD, CV_KEYS_EMBD},   {CV_D_FF, CV_KEYS_FF},
                  {CV_D_NEXP, CV_KEYS_EXPERTS},   {CV_D_FF_EXP, KEYS_FF_EXP},  {CV_D_FF_SHEXP, KEYS_FF_SHEXP},
                  {CV_D_POS, KEYS_POS}};
    for (size_t i = 0; i < sizeof direct / sizeof direct[0]; i++) {
        if ((r = get_dim(config, direct[i].keys, &v, &key, err)) < 0) return -1;
        if (r) set_dim(hp, direct[i].dim, v, key);
    }
    set_dim(hp, CV_D_ONE, 1, "1");
    int64_t embd = hp->dim[CV_D_EMBD];
    if (!hp->dim[CV_D_FF] && (a->flags & CV_A_FF_4X) && embd) set_dim(hp, CV_D_FF, 4 * embd, "4 * n_embd");
    if (hp->dim[CV_D_FF]) {
        char k2[96];
        snprintf(k2, sizeof k2, "2 * %.40s", hp->dim_key[CV_D_FF]);
        set_dim(hp, CV_D_FF2, 2 * hp->dim[CV_D_FF], k2);
    }
    if (embd) {
        char k3[96];
        snprintf(k3, sizeof k3, "3 * %.40s", hp->dim_key[CV_D_EMBD]);
        set_dim(hp, CV_D_QKV, 3 * embd, k3);
    }
    const char *hk = NULL, *kvk = NULL, *hdk = "head_dim";
    if ((r = get_dim(config, CV_KEYS_HEADS, &hp->n_head, &hk, err)) < 0) return -1;
    if (r == 0) return 0;
    if ((r = get_dim(config, CV_KEYS_KV_HEADS, &hp->n_kv, &kvk, err)) < 0) return -1;
    if (r == 0) hp->n_kv = hp->n_head, kvk = hk;
    set_dim(hp, CV_D_HEADS, hp->n_head, hk);
    if ((r = get_dim(config, KEYS_HEAD_DIM, &hp->head_dim, NULL, err)) < 0) return -1;
    if (r == 0) {
        if (!embd) return 0;
        hp->head_dim = embd / hp->n_head;
        hdk = NULL;
    }
    char buf[96];
    if (hdk) {
        snprintf(buf, sizeof buf, "%s * head_dim", hk);
        set_dim(hp, CV_D_Q, hp->n_head * hp->head_dim, buf);
        snprintf(buf, sizeof buf, "%s * head_dim", kvk);
        set_dim(hp, CV_D_KV, hp->n_kv * hp->head_dim, buf);
        set_dim(hp, CV_D_HEAD, hp->head_dim, "head_dim");
    } else {
        snprintf(buf, sizeof buf, "%.40s", hp->dim_key[CV_D_EMBD]);
        set_dim(hp, CV_D_Q, hp->n_head * hp->head_dim, buf);
        snprintf(buf, sizeof buf, "%.28s * %.28s / %.28s", kvk, hp->dim_key[CV_D_EMBD], hk);
        set_dim(hp, CV_D_KV, hp->n_kv * hp->head_dim, buf);
        snprintf(buf, sizeof buf, "%.40s / %.40s", hp->dim_key[CV_D_EMBD], hk);
        set_dim(hp, CV_D_HEAD, hp->head_dim, buf);
    }
    snprintf(buf, sizeof buf, "(%.20s + 2 * %.20s) * head_dim", hk, kvk);
    set_dim(hp, CV_D_QKV_GQA, (hp->n_head + 2 * hp->n_kv) * hp->head_dim, buf);
    return 0;
}

int cv_hp_load(const cv_arch *a, json_t *config, cv_hp *hp, kiln_err *err) {
    if (load(a, config, hp, err) < 0) return -1;
    return a->hparams ? a->hparams(config, hp, err) : 0;
}
