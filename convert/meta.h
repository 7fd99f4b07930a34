/* convert/meta.h - the converter's metadata, key group by key group, in
 * the order llama.cpp writes them:
 *
 *   general.architecture, general.type, general.sampling.*, general.name
 *   and the other naming keys, general.size_label   (meta_general.c)
 *   ARCH.* and general.file_type                     (meta_arch.c)
 *   general.quantization_version
 *   tokenizer.*                                      (vocab*.c)
 *
 * Naming follows gguf-py's Metadata heuristics on config.json's
 * _name_or_path and the model folder name; the model card (README.md) is
 * not read. */
#ifndef KILN_CONVERT_META_H
#define KILN_CONVERT_META_H

#include <jansson.h>

#include "arch.h"
#include "hparams.h"
#include "kv.h"
#include "plan.h"
#include "source.h"

/* Parameter counts as gguf-py's get_total_parameter_count gives them. */
typedef struct cv_params {
    int64_t total, shared, expert, expert_count;
} cv_params;

cv_params cv_count_params(const cv_plan *p);

/* "2.9M", "4x2.1M": gguf-py's size_label. Writes into buf. */
void cv_size_label(const cv_params *pc, char *buf, size_t cap);

/* The general.* keys up to size_label, with the arch's params_head keys
 * after general.architecture. `plan` is NULL for vocab-only output (no
 * size label then, and no params_head keys, as in llama.cpp). 0 or -1. */
int cv_meta_general(cv_source *src, json_t *config, const cv_plan *plan, const cv_arch *a, const cv_hp *hp,
                    cv_kv *k);

/* ARCH.* keys and general.file_type. 0 or -1. */
int cv_meta_arch(const cv_arch *a, json_t *config, const cv_hp *hp, uint32_t file_type, cv_kv *k);

/* Model naming from an id like "org/Name-7B-Instruct-v2" (gguf-py's
 * get_model_id_components). Every out string is malloc'd or NULL. */
typedef struct cv_name_parts {
    char *name, *org, *basename, *finetune, *version, *size_label;
} cv_name_parts;
int cv_model_id_parts(const char *model_id, int64_t total_params, cv_name_parts *out);
void cv_name_parts_free(cv_name_parts *p);
/* gguf-py's id_to_title ("tiny-llama" -> "Tiny Llama"). malloc'd. */
char *cv_id_to_title(const char *id);

#endif
