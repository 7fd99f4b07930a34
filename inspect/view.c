/* inspect/view.c - the format-independent model view (see view.h). */
#include "view.h"

#include "../core/types.h"
#include "../codec/codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool is_gguf_path(const char *path) {
    size_t n = strlen(path);
    return n >= 5 && !strcmp(path + n - 5, ".gguf");
}

static int open_gguf(kiln_view *v, const char *path, kiln_err *err) {
    v->kind = KILN_VIEW_GGUF;
    v->gguf = kiln_gguf_open(path, err);
    if (!v->gguf) return -1;
    v->n_tensors = v->gguf->n_tensors;
    v->total_size = v->gguf->total_size;
    v->tensors = calloc(v->n_tensors + 1, sizeof *v->tensors);
    /* GGUF names are not NUL-terminated; copy them all into one block. */
    uint64_t names_len = 0;
    for (uint64_t i = 0; i < v->n_tensors; i++) names_len += v->gguf->tensors[i].name.len + 1;
    v->names = malloc(names_len + 1);
    if (!v->tensors || !v->names) return kiln_fail(err, path, NULL, -1, "out of memory");
    char *np = v->names;
    for (uint64_t i = 0; i < v->n_tensors; i++) {
        const kiln_tensor *t = &v->gguf->tensors[i];
        kiln_view_tensor *o = &v->tensors[i];
        memcpy(np, t->name.ptr, t->name.len);
        np[t->name.len] = 0;
        o->name = np;
        np += t->name.len + 1;
        o->type_name = kiln_type_name(t->type);
        o->ggml_type = (int)t->type;
        o->st_dtype = -1;
        o->n_dims = t->n_dims;
        o->shape = t->ne;
        o->nelements = t->nelements;
        o->offset = t->file_offset;
        o->nbytes = t->nbytes;
        o->data = t->data;
        o->file = v->gguf->shards[t->shard].path;
    }
    return 0;
}

static int open_st(kiln_view *v, const char *path, kiln_err *err) {
    v->kind = KILN_VIEW_SAFETENSORS;
    v->st = kiln_st_open(path, err);
    if (!v->st) return -1;
    v->n_tensors = v->st->n_tensors;
    for (uint32_t f = 0; f < v->st->n_files; f++) v->total_size += v->st->files[f].size;
    v->tensors = calloc(v->n_tensors + 1, sizeof *v->tensors);
    if (!v->tensors) return kiln_fail(err, path, NULL, -1, "out of memory");
    for (uint64_t i = 0; i < v->n_tensors; i++) {
        const kiln_st_tensor *t = &v->st->tensors[i];
        kiln_view_tensor *o = &v->tensors[i];
        o->name = t->name; /* owned by the kiln_st */
        o->type_name = kiln_st_dtype_name(t->dtype);
        o->ggml_type = -1;
        o->st_dtype = (int)t->dtype;
        o->n_dims = t->n_dims;
        o->shape = t->shape;
        o->nelements = t->nelements;
        o->offset = t->file_offset;
        o->nbytes = t->nbytes;
        o->data = t->data;
        o->file = v->st->files[t->file].path;
    }
    return 0;
}

int kiln_view_open(kiln_view *v, const char *path, kiln_err *err) {
    memset(v, 0, sizeof *v);
    v->path = path;
    struct stat sb;
    if (stat(path, &sb) != 0 && !is_gguf_path(path))
        return kiln_fail(err, path, NULL, -1, "no such file or directory");
    int rc;
    if (is_gguf_path(path)) {
        rc = open_gguf(v, path, err);
    } else if (S_ISDIR(sb.st_mode) || strstr(path, ".safetensors") || strstr(path, ".json")) {
        rc = open_st(v, path, err);
    } else {
        /* Unknown extension: sniff the GGUF magic. */
        FILE *f = fopen(path, "rb");
        char magic[4] = {0};
        if (f) {
            if (fread(magic, 1, 4, f) != 4) magic[0] = 0;
            fclose(f);
        }
        rc = memcmp(magic, "GGUF", 4) == 0 ? open_gguf(v, path, err) : open_st(v, path, err);
    }
    if (rc < 0) kiln_view_close(v);
    return rc;
}

void kiln_view_close(kiln_view *v) {
    free(v->tensors);
    free(v->names);
    kiln_gguf_close(v->gguf);
    kiln_st_close(v->st);
    memset(v, 0, sizeof *v);
}

const kiln_view_tensor *kiln_view_find(const kiln_view *v, const char *name) {
    if (v->gguf) {
        const kiln_tensor *t = kiln_gguf_find_tensor(v->gguf, name);
        return t ? &v->tensors[t - v->gguf->tensors] : NULL;
    }
    const kiln_st_tensor *t = kiln_st_find(v->st, name);
    return t ? &v->tensors[t - v->st->tensors] : NULL;
}

bool kiln_view_can_dequantize(const kiln_view_tensor *t) {
    if (t->ggml_type >= 0) return kiln_can_dequantize((uint32_t)t->ggml_type);
    switch (t->st_dtype) {
    case KILN_ST_F64: case KILN_ST_F32: case KILN_ST_F16: case KILN_ST_BF16:
    case KILN_ST_F8_E4M3: case KILN_ST_F8_E5M2: return true;
    default: return false;
    }
}

int64_t kiln_view_block(const kiln_view_tensor *t) {
    if (t->ggml_type < 0) return 1;
    const kiln_type_info *ti = kiln_type_get((uint32_t)t->ggml_type);
    return ti ? ti->block_size : 1;
}

int kiln_view_dequantize(const kiln_view_tensor *t, int64_t first, int64_t n, float *out, kiln_err *err) {
    if (!kiln_view_can_dequantize(t))
        return kiln_fail(err, t->file, t->name, -1, "kiln cannot dequantize type %s", t->type_name);
    if (t->ggml_type >= 0) {
        const kiln_type_info *ti = kiln_type_get((uint32_t)t->ggml_type);
        uint64_t byte0 = (uint64_t)first / ti->block_size * ti->type_size;
        return kiln_dequantize((uint32_t)t->ggml_type, t->data + byte0, out, n, err);
    }
    uint32_t es = kiln_st_dtype_size((kiln_st_dtype)t->st_dtype);
    if (kiln_st_to_f32((kiln_st_dtype)t->st_dtype, t->data + (uint64_t)first * es, out, n) < 0)
        return kiln_fail(err, t->file, t->name, -1, "cannot convert %s to f32", t->type_name);
    return 0;
}
