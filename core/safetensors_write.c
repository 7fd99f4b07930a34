/* core/safetensors_write.c - the streaming safetensors writer declared in
 * safetensors_write.h: shard planning, header layout, and the .tmp / fsync /
 * rename discipline. It never holds tensor data; callers hand it bytes as
 * they produce them. */
#include "safetensors_write.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"

typedef struct stw_tensor {
    char *name;
    kiln_st_dtype dtype;
    uint32_t n_dims;
    int64_t shape[KILN_ST_MAX_DIMS];
    uint64_t nbytes;
    uint32_t file;
    uint64_t offset; /* within its file's data section */
} stw_tensor;

typedef struct stw_file {
    char *path;
    uint64_t *order; /* tensor indices in file order */
    uint64_t n, cap;
    kiln_outfile out; /* valid once created */
    bool created;
} stw_file;

struct kiln_stw {
    char *path;
    kiln_stw_opts opts;
    stw_tensor *t;
    uint64_t n, cap;
    char **meta; /* key, value, key, value ... */
    size_t n_meta;
    stw_file *files;
    uint32_t n_files;
    bool begun;
    uint32_t cur_file;
    int64_t pos;        /* index into files[cur_file].order; -1 before the first */
    int64_t cur;        /* tensor being written, or -1 */
    uint64_t cur_done;  /* bytes of it written so far */
};

/* The order of the safetensors library's Dtype enum, which it sorts by
 * (descending) before names, so that wider types come first and stay
 * aligned. */
static const int DTYPE_RANK[KILN_ST_DTYPE_COUNT] = {
    [KILN_ST_BOOL] = 0, [KILN_ST_U8] = 1,  [KILN_ST_I8] = 2,   [KILN_ST_F8_E5M2] = 3,
    [KILN_ST_F8_E4M3] = 4, [KILN_ST_I16] = 5, [KILN_ST_F16] = 7, [KILN_ST_BF16] = 8,
    [KILN_ST_I32] = 9, [KILN_ST_F32] = 11, [KILN_ST_F64] = 12, [KILN_ST_I64] = 13,
};

kiln_stw *kiln_stw_create(const char *path, const kiln_stw_opts *opts, kiln_err *err) {
    size_t len = strlen(path);
    const char *ext = ".safetensors";
    if (len <= strlen(ext) || strcmp(path + len - strlen(ext), ext) != 0) {
        kiln_fail(err, path, NULL, -1, "a safetensors output path must end in .safetensors");
        return NULL;
    }
    kiln_stw *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        kiln_fail(err, path, NULL, -1, "out of memory");
        return NULL;
    }
    if (opts) w->opts = *opts;
    w->pos = -1;
    w->cur = -1;
    return w;
}

int kiln_stw_metadata(kiln_stw *w, const char *key, const char *value, kiln_err *err) {
    if (w->begun) return kiln_fail(err, w->path, "__metadata__", -1, "metadata added after the header was written");
    for (size_t i = 0; i < w->n_meta; i++)
        if (!strcmp(w->meta[2 * i], key))
            return kiln_fail(err, w->path, "__metadata__", -1, "duplicate key '%s'", key);
    char **m = realloc(w->meta, (w->n_meta + 1) * 2 * sizeof *m);
    if (!m) return kiln_fail(err, w->path, NULL, -1, "out of memory");
    w->meta = m;
    m[2 * w->n_meta] = strdup(key);
    m[2 * w->n_meta + 1] = strdup(value);
    w->n_meta++;
    if (!m[2 * w->n_meta - 2] || !m[2 * w->n_meta - 1])
        return kiln_fail(err, w->path, NULL, -1, "out of memory");
    return 0;
}

int64_t kiln_stw_declare(kiln_stw *w, const char *name, kiln_st_dtype dtype, uint32_t n_dims,
                         const int64_t *shape, kiln_err *err) {
    if (w->begun) return kiln_fail(err, w->path, name, -1, "tensor declared after the header was written");
    if ((unsigned)dtype >= KILN_ST_DTYPE_COUNT)
        return kiln_fail(err, w->path, name, -1, "unknown dtype %d", (int)dtype);
    if (n_dims > KILN_ST_MAX_DIMS)
        return kiln_fail(err, w->path, name, -1, "%u dimensions, at most %d", n_dims, KILN_ST_MAX_DIMS);
    if (!*name || !strcmp(name, "__metadata__"))
        return kiln_fail(err, w->path, name, -1, "reserved or empty tensor name");
    uint64_t nel = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (shape[d] < 0) return kiln_fail(err, w->path, name, -1, "negative dimension %lld", (long long)shape[d]);
        if (shape[d] && nel > UINT64_MAX / 8 / (uint64_t)shape[d])
            return kiln_fail(err, w->path, name, -1, "shape overflows");
        nel *= (uint64_t)shape[d];
    }
    if (w->n == w->cap) {
        uint64_t cap = w->cap ? w->cap * 2 : 64;
        stw_tensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return kiln_fail(err, w->path, NULL, -1, "out of memory");
        w->t = t;
        w->cap = cap;
    }
    stw_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return kiln_fail(err, w->path, NULL, -1, "out of memory");
    t->dtype = dtype;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < n_dims; d++) t->shape[d] = shape[d];
    t->nbytes = nel * kiln_st_dtype_size(dtype);
    return (int64_t)w->n++;
}

static int cmp_name_ptr(const void *a, const void *b) {
    return strcmp((*(stw_tensor *const *)a)->name, (*(stw_tensor *const *)b)->name);
}

static int cmp_file_order(const void *a, const void *b) {
    const stw_tensor *x = *(stw_tensor *const *)a, *y = *(stw_tensor *const *)b;
    if (DTYPE_RANK[x->dtype] != DTYPE_RANK[y->dtype]) return DTYPE_RANK[y->dtype] - DTYPE_RANK[x->dtype];
    return strcmp(x->name, y->name);
}

static int file_push(stw_file *f, uint64_t idx) {
    if (f->n == f->cap) {
        uint64_t cap = f->cap ? f->cap * 2 : 16;
        uint64_t *o = realloc(f->order, cap * sizeof *o);
        if (!o) return -1;
        f->order = o;
        f->cap = cap;
    }
    f->order[f->n++] = idx;
    return 0;
}

static stw_file *new_file(kiln_stw *w) {
    stw_file *f = realloc(w->files, (w->n_files + 1) * sizeof *f);
    if (!f) return NULL;
    w->files = f;
    memset(&f[w->n_files], 0, sizeof *f);
    return &f[w->n_files++];
}

/* huggingface_hub's split_state_dict_into_shards: declaration order, a new
 * shard when the next tensor would tip the current one over, and a tensor
 * bigger than the limit alone in a shard appended at once (so it can take a
 * lower number than the shard still being filled). */
static int plan_shards(kiln_stw *w, kiln_err *err) {
    uint64_t max = w->opts.shard_size, cur_size = 0;
    int64_t cur = -1;
    for (uint64_t i = 0; i < w->n; i++) {
        uint64_t sz = w->t[i].nbytes;
        stw_file *f;
        if (max && sz > max) {
            if (!(f = new_file(w)) || file_push(f, i)) return kiln_fail(err, w->path, NULL, -1, "out of memory");
            continue;
        }
        if (max && cur >= 0 && cur_size + sz > max) cur = -1;
        if (cur < 0) {
            if (!new_file(w)) return kiln_fail(err, w->path, NULL, -1, "out of memory");
            cur = w->n_files - 1;
            cur_size = 0;
        }
        if (file_push(&w->files[cur], i)) return kiln_fail(err, w->path, NULL, -1, "out of memory");
        cur_size += sz;
    }
    /* a model without tensors is still one file */
    if (w->n_files == 0 && !new_file(w)) return kiln_fail(err, w->path, NULL, -1, "out of memory");
    return 0;
}

static int name_files(kiln_stw *w, kiln_err *err) {
    size_t stem = strlen(w->path) - strlen(".safetensors");
    for (uint32_t i = 0; i < w->n_files; i++) {
        stw_file *f = &w->files[i];
        if (w->n_files == 1) {
            f->path = strdup(w->path);
        } else {
            size_t len = stem + 64;
            if ((f->path = malloc(len)))
                snprintf(f->path, len, "%.*s-%05u-of-%05u.safetensors", (int)stem, w->path, i + 1, w->n_files);
        }
        if (!f->path)
            return kiln_fail(err, w->path, NULL, -1, "out of memory");
    }
    return 0;
}

/* The header as the safetensors library serializes it: compact JSON,
 * "__metadata__" first, then each tensor {dtype, shape, data_offsets} in
 * file order, padded with spaces to a multiple of 8 bytes. */
static char *build_header(kiln_stw *w, stw_file *f, uint64_t *len) {
    json_t *root = json_object();
    if (!root) return NULL;
    int bad = 0;
    if (w->n_meta) {
        json_t *m = json_object();
        bad |= json_object_set_new(root, "__metadata__", m);
        for (size_t i = 0; i < w->n_meta && m; i++)
            bad |= json_object_set_new(m, w->meta[2 * i], json_string(w->meta[2 * i + 1]));
    }
    for (uint64_t k = 0; k < f->n && !bad; k++) {
        const stw_tensor *t = &w->t[f->order[k]];
        json_t *o = json_object(), *shape = json_array(), *offs = json_array();
        for (uint32_t d = 0; d < t->n_dims; d++) bad |= json_array_append_new(shape, json_integer(t->shape[d]));
        bad |= json_array_append_new(offs, json_integer((json_int_t)t->offset));
        bad |= json_array_append_new(offs, json_integer((json_int_t)(t->offset + t->nbytes)));
        bad |= json_object_set_new(o, "dtype", json_string(kiln_st_dtype_name(t->dtype)));
        bad |= json_object_set_new(o, "shape", shape);
        bad |= json_object_set_new(o, "data_offsets", offs);
        bad |= json_object_set_new(root, t->name, o);
    }
    char *s = bad ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s) return NULL;
    size_t n = strlen(s), padded = (n + 7) / 8 * 8;
    char *h = realloc(s, padded + 1);
    if (!h) {
        free(s);
        return NULL;
    }
    memset(h + n, ' ', padded - n);
    h[padded] = 0;
    *len = padded;
    return h;
}

static int open_file(kiln_stw *w, uint32_t i, kiln_err *err) {
    stw_file *f = &w->files[i];
    uint64_t hlen = 0;
    char *h = build_header(w, f, &hlen);
    if (!h) return kiln_fail(err, f->path, NULL, -1, "cannot build the header (bad UTF-8 in a name?)");
    if (kiln_out_open(&f->out, f->path, err)) {
        free(h);
        return -1;
    }
    f->created = true;
    uint8_t le[8];
    for (int b = 0; b < 8; b++) le[b] = (uint8_t)(hlen >> (8 * b));
    int rc = kiln_out_write(&f->out, le, 8, err) || kiln_out_write(&f->out, h, hlen, err) ? -1 : 0;
    free(h);
    return rc;
}

int kiln_stw_begin(kiln_stw *w, kiln_err *err) {
    if (w->begun) return kiln_fail(err, w->path, NULL, -1, "kiln_stw_begin called twice");
    w->begun = true;
    /* pointers to sort, first by name to find duplicates, then in file order */
    stw_tensor **ptr = malloc((w->n ? w->n : 1) * sizeof *ptr);
    if (!ptr) return kiln_fail(err, w->path, NULL, -1, "out of memory");
    for (uint64_t i = 0; i < w->n; i++) ptr[i] = &w->t[i];
    if (w->n > 1) qsort(ptr, w->n, sizeof *ptr, cmp_name_ptr);
    for (uint64_t i = 1; i < w->n; i++)
        if (!strcmp(ptr[i - 1]->name, ptr[i]->name)) {
            kiln_fail(err, w->path, ptr[i]->name, -1, "tensor declared twice");
            free(ptr);
            return -1;
        }
    if (plan_shards(w, err) || name_files(w, err)) {
        free(ptr);
        return -1;
    }
    for (uint32_t i = 0; i < w->n_files; i++) {
        stw_file *f = &w->files[i];
        if (!w->opts.keep_order && f->n > 1) {
            for (uint64_t k = 0; k < f->n; k++) ptr[k] = &w->t[f->order[k]];
            qsort(ptr, f->n, sizeof *ptr, cmp_file_order);
            for (uint64_t k = 0; k < f->n; k++) f->order[k] = (uint64_t)(ptr[k] - w->t);
        }
        uint64_t off = 0;
        for (uint64_t k = 0; k < f->n; k++) {
            stw_tensor *t = &w->t[f->order[k]];
            t->file = i;
            t->offset = off;
            off += t->nbytes;
        }
    }
    free(ptr);
    return open_file(w, 0, err);
}

int kiln_stw_next(kiln_stw *w, int64_t *idx, kiln_err *err) {
    if (!w->begun || !w->n_files) return kiln_fail(err, w->path, NULL, -1, "kiln_stw_next before kiln_stw_begin");
    if (w->cur >= 0 && w->cur_done != w->t[w->cur].nbytes)
        return kiln_fail(err, w->files[w->cur_file].path, w->t[w->cur].name, (int64_t)w->files[w->cur_file].out.pos,
                         "only %llu of %llu bytes written", (unsigned long long)w->cur_done,
                         (unsigned long long)w->t[w->cur].nbytes);
    w->cur = -1;
    if (w->cur_file >= w->n_files) return 0;
    w->pos++;
    while ((uint64_t)w->pos >= w->files[w->cur_file].n) {
        if (kiln_out_close(&w->files[w->cur_file].out, err)) return -1;
        if (++w->cur_file >= w->n_files) return 0;
        if (open_file(w, w->cur_file, err)) return -1;
        w->pos = 0;
    }
    w->cur = (int64_t)w->files[w->cur_file].order[w->pos];
    w->cur_done = 0;
    *idx = w->cur;
    return 1;
}

/* kiln_stw_write, or kiln_stw_skip when `hole` */
static int put(kiln_stw *w, const void *data, uint64_t n, bool hole, kiln_err *err) {
    if (w->cur < 0) return kiln_fail(err, w->path, NULL, -1, "kiln_stw_write with no current tensor");
    stw_tensor *t = &w->t[w->cur];
    stw_file *f = &w->files[w->cur_file];
    if (n > t->nbytes - w->cur_done)
        return kiln_fail(err, f->path, t->name, (int64_t)f->out.pos, "%llu bytes more than its %llu",
                         (unsigned long long)(n - (t->nbytes - w->cur_done)), (unsigned long long)t->nbytes);
    if (hole ? kiln_out_skip(&f->out, n, err) : kiln_out_write(&f->out, data, n, err)) return -1;
    w->cur_done += n;
    return 0;
}

int kiln_stw_write(kiln_stw *w, const void *data, uint64_t n, kiln_err *err) {
    return put(w, data, n, false, err);
}

int kiln_stw_skip(kiln_stw *w, uint64_t n, kiln_err *err) { return put(w, NULL, n, true, err); }

const char *kiln_stw_name(const kiln_stw *w, int64_t idx) {
    return idx >= 0 && (uint64_t)idx < w->n ? w->t[idx].name : NULL;
}

uint64_t kiln_stw_nbytes(const kiln_stw *w, int64_t idx) {
    return idx >= 0 && (uint64_t)idx < w->n ? w->t[idx].nbytes : 0;
}

uint32_t kiln_stw_n_files(const kiln_stw *w) { return w->n_files; }

const char *kiln_stw_file_path(const kiln_stw *w, uint32_t i) {
    return i < w->n_files ? w->files[i].path : NULL;
}

static void stw_free(kiln_stw *w) {
    for (uint64_t i = 0; i < w->n; i++) free(w->t[i].name);
    for (size_t i = 0; i < 2 * w->n_meta; i++) free(w->meta[i]);
    for (uint32_t i = 0; i < w->n_files; i++) {
        if (w->files[i].created) kiln_out_free(&w->files[i].out);
        free(w->files[i].path);
        free(w->files[i].order);
    }
    free(w->files);
    free(w->meta);
    free(w->t);
    free(w->path);
    free(w);
}

void kiln_stw_abort(kiln_stw *w) {
    if (!w) return;
    for (uint32_t i = 0; i < w->n_files; i++)
        if (w->files[i].created) {
            kiln_out_discard(&w->files[i].out);
            w->files[i].created = false;
        }
    stw_free(w);
}

/* model.safetensors.index.json as transformers writes it: sorted keys,
 * indent 2, a final newline. */
static int write_index(kiln_stw *w, kiln_err *err) {
    size_t stem = strlen(w->path) - strlen(".safetensors");
    char path[4096];
    snprintf(path, sizeof path, "%.*s.safetensors.index.json", (int)stem, w->path);
    uint64_t total = 0;
    json_t *root = json_object(), *meta = json_object(), *map = json_object();
    int bad = !root || json_object_set_new(root, "metadata", meta) || json_object_set_new(root, "weight_map", map);
    for (uint64_t i = 0; i < w->n && !bad; i++) {
        const char *fp = w->files[w->t[i].file].path, *base = strrchr(fp, '/');
        bad |= json_object_set_new(map, w->t[i].name, json_string(base ? base + 1 : fp));
        total += w->t[i].nbytes;
    }
    bad |= json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    int rc = bad ? kiln_fail(err, path, NULL, -1, "cannot build the index JSON")
                 : kiln_write_json_atomic(path, root, JSON_INDENT(2) | JSON_SORT_KEYS, err);
    json_decref(root);
    return rc;
}

int kiln_stw_finish(kiln_stw *w, kiln_err *err) {
    int64_t idx;
    int r;
    if (!w->begun && kiln_stw_begin(w, err)) goto fail;
    /* trailing tensors of zero bytes need no write; anything else is missing */
    while ((r = kiln_stw_next(w, &idx, err)) == 1)
        if (w->t[idx].nbytes) {
            kiln_fail(err, w->files[w->cur_file].path, w->t[idx].name, (int64_t)w->files[w->cur_file].out.pos,
                      "tensor never written");
            goto fail;
        }
    if (r < 0) goto fail;
    for (uint32_t i = 0; i < w->n_files; i++) {
        if (kiln_out_commit(&w->files[i].out, err)) goto fail;
        kiln_out_free(&w->files[i].out);
        w->files[i].created = false;
    }
    if (w->n_files > 1 && write_index(w, err)) goto fail;
    stw_free(w);
    return 0;
fail:
    kiln_stw_abort(w);
    return -1;
}
