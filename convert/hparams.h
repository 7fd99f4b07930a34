/* convert/hparams.h - the numbers of config.json the tensor shapes are
 * checked against: each symbolic dimension of arch.h resolved to a value,
 * with the config key it came from so that an error can name it.
 *
 * Keys are looked up with convert_hf_to_gguf.py's alternatives (hidden_size
 * or n_embd or dim, ...). A dimension that no key gives stays 0; it is an
 * error only when a tensor needs it (plan.c). */
#ifndef KILN_CONVERT_HPARAMS_H
#define KILN_CONVERT_HPARAMS_H

#include <jansson.h>

#include "arch.h"

struct cv_hp {
    int64_t dim[CV_D_COUNT];
    char dim_key[CV_D_COUNT][96]; /* "hidden_size", "num_attention_heads * head_dim", ... */
    int64_t n_layer;
    const char *layer_key;
    int64_t n_head, n_kv, head_dim;
};

/* config.json with text_config merged in (a new reference), as
 * convert_hf_to_gguf.py sees it. */
json_t *cv_config_flatten(json_t *config);

/* Fills hp from the (flattened) config. Fails only when the block count
 * is missing or a value has the wrong type. */
int cv_hp_load(const cv_arch *a, json_t *config, cv_hp *hp, kiln_err *err);

/* The alternative keys convert_hf_to_gguf.py tries, NULL-terminated. */
extern const char *const CV_KEYS_LAYERS[], *const CV_KEYS_CTX[], *const CV_KEYS_EMBD[], *const CV_KEYS_FF[],
    *const CV_KEYS_HEADS[], *const CV_KEYS_KV_HEADS[], *const CV_KEYS_EXPERTS[], *const CV_KEYS_EXPERTS_USED[];

#endif
