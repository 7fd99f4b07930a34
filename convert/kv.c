/* convert/kv.c - metadata setters that count bytes (see kv.h). */
#include "kv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int set(cv_kv *k, const char *key, const kiln_value *v, uint64_t value_bytes) {
    if (kiln_writer_set(k->w, key, v, k->err) < 0) return -1;
    k->bytes += 8 + strlen(key) + 4 + value_bytes;
    k->n++;
    return 0;
}

int cv_kv_u32(cv_kv *k, const char *key, uint32_t v) {
    kiln_value val = {.type = KILN_GGUF_UINT32, .u32 = v};
    return set(k, key, &val, 4);
}

int cv_kv_i32(cv_kv *k, const char *key, int32_t v) {
    kiln_value val = {.type = KILN_GGUF_INT32, .i32 = v};
    return set(k, key, &val, 4);
}

int cv_kv_f32(cv_kv *k, const char *key, float v) {
    kiln_value val = {.type = KILN_GGUF_FLOAT32, .f32 = v};
    return set(k, key, &val, 4);
}

int cv_kv_bool(cv_kv *k, const char *key, bool v) {
    kiln_value val = {.type = KILN_GGUF_BOOL, .b = v};
    return set(k, key, &val, 1);
}

int cv_kv_str(cv_kv *k, const char *key, const char *v) {
    if (!v || !*v) return 0;
    kiln_value val = {.type = KILN_GGUF_STRING, .str = {v, strlen(v)}};
    return set(k, key, &val, 8 + strlen(v));
}

int cv_kv_str_arr(cv_kv *k, const char *key, const char *const *v, const uint64_t *lens, uint64_t n) {
    if (n == 0) return 0;
    kiln_str *strs = malloc(n * sizeof *strs);
    if (!strs) return kiln_fail(k->err, key, NULL, -1, "out of memory");
    uint64_t bytes = 4 + 8;
    for (uint64_t i = 0; i < n; i++) {
        strs[i].ptr = v[i];
        strs[i].len = lens ? lens[i] : strlen(v[i]);
        bytes += 8 + strs[i].len;
    }
    kiln_value val = {.type = KILN_GGUF_ARRAY, .arr = {.type = KILN_GGUF_STRING, .n = n, .strs = strs}};
    int rc = set(k, key, &val, bytes);
    free(strs);
    return rc;
}

int cv_kv_arr(cv_kv *k, const char *key, uint32_t elem_type, const void *data, uint64_t n) {
    if (n == 0) return 0;
    if (kiln_writer_set_arr(k->w, key, elem_type, data, n, k->err) < 0) return -1;
    k->bytes += 8 + strlen(key) + 4 + 4 + 8 + n * kiln_gguf_vtype_size(elem_type);
    k->n++;
    return 0;
}

static const char *arch_key(cv_kv *k, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", k->arch, suffix);
    return buf;
}

int cv_kv_arch_u32(cv_kv *k, const char *suffix, uint32_t v) {
    char b[256];
    return cv_kv_u32(k, arch_key(k, suffix, b, sizeof b), v);
}

int cv_kv_arch_f32(cv_kv *k, const char *suffix, float v) {
    char b[256];
    return cv_kv_f32(k, arch_key(k, suffix, b, sizeof b), v);
}

int cv_kv_arch_bool(cv_kv *k, const char *suffix, bool v) {
    char b[256];
    return cv_kv_bool(k, arch_key(k, suffix, b, sizeof b), v);
}

int cv_kv_arch_str(cv_kv *k, const char *suffix, const char *v) {
    char b[256];
    return cv_kv_str(k, arch_key(k, suffix, b, sizeof b), v);
}
