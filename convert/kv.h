/* convert/kv.h - how the converter sets metadata: a thin layer over the
 * GGUF writer that also counts the bytes the keys will take (for
 * --dry-run's size) and builds "ARCH.name" keys.
 *
 * Like gguf-py's GGUFWriter, an empty string or an empty array is not
 * written at all. Every setter returns 0 or -1 (message in k->err). */
#ifndef KILN_CONVERT_KV_H
#define KILN_CONVERT_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/gguf.h"

typedef struct cv_kv {
    kiln_gguf_writer *w;
    const char *arch;  /* general.architecture, for arch keys */
    uint64_t bytes;    /* serialized size of the keys set so far */
    uint64_t n;        /* keys set so far */
    bool chat_template; /* tokenizer.chat_template was set from the checkpoint */
    kiln_err *err;
} cv_kv;

int cv_kv_u32(cv_kv *k, const char *key, uint32_t v);
int cv_kv_i32(cv_kv *k, const char *key, int32_t v);
int cv_kv_f32(cv_kv *k, const char *key, float v);
int cv_kv_bool(cv_kv *k, const char *key, bool v);
int cv_kv_str(cv_kv *k, const char *key, const char *v);
/* Strings given with explicit lengths (token texts may hold NUL bytes). */
int cv_kv_str_arr(cv_kv *k, const char *key, const char *const *v, const uint64_t *lens, uint64_t n);
int cv_kv_arr(cv_kv *k, const char *key, uint32_t elem_type, const void *data, uint64_t n);

/* The same for "ARCH.suffix" keys. */
int cv_kv_arch_u32(cv_kv *k, const char *suffix, uint32_t v);
int cv_kv_arch_f32(cv_kv *k, const char *suffix, float v);
int cv_kv_arch_bool(cv_kv *k, const char *suffix, bool v);
int cv_kv_arch_str(cv_kv *k, const char *suffix, const char *v);

#endif
