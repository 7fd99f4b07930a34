/* core/gguf_write.c - the streaming GGUF writer (API in gguf.h).
 *
 * Keys and tensor infos are collected first; kiln_writer_begin() then
 * assigns tensors to shards, computes every offset, and writes the first
 * shard's header. Tensor bytes follow in declaration order through
 * kiln_writer_write(), which pads each tensor to the alignment and moves
 * to the next shard by itself. Each shard is written as NAME.tmp and only
 * renamed into place by kiln_writer_finish(), after all of them are
 * complete and fsynced (core/fileio.c). Split output follows
 * llama-gguf-split: shards are PREFIX-NNNNN-of-NNNNN.gguf, the first
 * carries all metadata, every shard carries split.no, split.count and
 * split.tensors.count. */
#include "gguf.h"

#include "arena.h"
#include "bytebuf.h"
#include "fileio.h"
#include "types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct wkv {
    char *key;
    kiln_value val;
} wkv;

typedef struct wtensor {
    char *name;
    uint32_t type, n_dims;
    int64_t ne[KILN_GGUF_MAX_DIMS];
    uint64_t nbytes;
    uint32_t shard;
    uint64_t offset; /* within its shard's data section */
} wtensor;

struct kiln_gguf_writer {
    char *path;
    kiln_write_opts opts;
    kiln_arena arena; /* keys, names and copied values */
    wkv *kv;
    uint64_t n_kv, cap_kv;
    wtensor *t;
    uint64_t n_t, cap_t;
    bool begun;
    uint64_t alignment;
    uint32_t n_shards;
    uint64_t *shard_first; /* first tensor index of each shard, plus n_t at the end */
    kiln_outfile *out;     /* one per shard */
    uint32_t cur_shard;
    uint64_t cur_tensor;   /* tensor being written */
    uint64_t cur_written;  /* its bytes written so far */
};

kiln_gguf_writer *kiln_writer_new(const char *path, const kiln_write_opts *opts, kiln_err *err) {
    kiln_gguf_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        kiln_fail(err, path, NULL, -1, "out of memory");
        return NULL;
    }
    if (opts) w->opts = *opts;
    return w;
}

static char *arena_strdup(kiln_arena *a, const char *s, uint64_t len) {
    char *c = kiln_arena_alloc(a, len + 1);
    if (c && len) memcpy(c, s, len);
    return c;
}

/* Deep-copies v into the writer's arena. */
static int copy_value(kiln_arena *a, kiln_value *dst, const kiln_value *src) {
    *dst = *src;
    if (src->type == KILN_GGUF_STRING) {
        dst->str.ptr = arena_strdup(a, src->str.ptr, src->str.len);
        return dst->str.ptr ? 0 : -1;
    }
    if (src->type != KILN_GGUF_ARRAY) return 0;
    const kiln_array *s = &src->arr;
    kiln_array *d = &dst->arr;
    if (s->type == KILN_GGUF_STRING) {
        d->strs = kiln_arena_alloc(a, s->n * sizeof(kiln_str) + 1);
        if (!d->strs) return -1;
        for (uint64_t i = 0; i < s->n; i++) {
            d->strs[i].len = s->strs[i].len;
            d->strs[i].ptr = arena_strdup(a, s->strs[i].ptr, s->strs[i].len);
            if (!d->strs[i].ptr) return -1;
        }
    } else if (s->type == KILN_GGUF_ARRAY) {
        d->vals = kiln_arena_alloc(a, s->n * sizeof(kiln_value) + 1);
        if (!d->vals) return -1;
        for (uint64_t i = 0; i < s->n; i++)
            if (copy_value(a, &d->vals[i], &s->vals[i]) < 0) return -1;
    } else {
        uint64_t bytes = s->n * kiln_gguf_vtype_size(s->type);
        void *p = kiln_arena_alloc(a, bytes + 1);
        if (!p) return -1;
        if (bytes) memcpy(p, s->data, bytes);
        d->data = p;
    }
    return 0;
}

static int64_t find_key(const kiln_gguf_writer *w, const char *key) {
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) return (int64_t)i;
    return -1;
}

int kiln_writer_set(kiln_gguf_writer *w, const char *key, const kiln_value *v, kiln_err *err) {
    if (w->begun) return kiln_fail(err, w->path, key, -1, "metadata set after the header was written");
    if (v->type >= KILN_GGUF_VTYPE_COUNT) return kiln_fail(err, w->path, key, -1, "unknown value type %u", v->type);
    int64_t at = find_key(w, key);
    if (at < 0) {
        if (w->n_kv == w->cap_kv) {
            uint64_t cap = w->cap_kv ? w->cap_kv * 2 : 64;
            wkv *kv = realloc(w->kv, cap * sizeof *kv);
            if (!kv) return kiln_fail(err, w->path, key, -1, "out of memory");
            w->kv = kv;
            w->cap_kv = cap;
        }
        at = (int64_t)w->n_kv++;
        w->kv[at].key = arena_strdup(&w->arena, key, strlen(key));
        if (!w->kv[at].key) return kiln_fail(err, w->path, key, -1, "out of memory");
    }
    if (copy_value(&w->arena, &w->kv[at].val, v) < 0) return kiln_fail(err, w->path, key, -1, "out of memory");
    return 0;
}

#define SETTER(fn, ctype, vt, member)                                                        \
    int fn(kiln_gguf_writer *w, const char *key, ctype v, kiln_err *err) {                  \
        kiln_value val = {.type = vt};                                                       \
        val.member = v;                                                                      \
        return kiln_writer_set(w, key, &val, err);                                           \
    }
SETTER(kiln_writer_set_u32, uint32_t, KILN_GGUF_UINT32, u32)
SETTER(kiln_writer_set_i32, int32_t, KILN_GGUF_INT32, i32)
SETTER(kiln_writer_set_u64, uint64_t, KILN_GGUF_UINT64, u64)
SETTER(kiln_writer_set_f32, float, KILN_GGUF_FLOAT32, f32)
SETTER(kiln_writer_set_bool, bool, KILN_GGUF_BOOL, b)

int kiln_writer_set_str(kiln_gguf_writer *w, const char *key, const char *v, kiln_err *err) {
    kiln_value val = {.type = KILN_GGUF_STRING, .str = {v, strlen(v)}};
    return kiln_writer_set(w, key, &val, err);
}

int kiln_writer_set_str_arr(kiln_gguf_writer *w, const char *key, const char *const *v, uint64_t n,
                            kiln_err *err) {
    kiln_str *strs = malloc(n * sizeof *strs + 1);
    if (!strs) return kiln_fail(err, w->path, key, -1, "out of memory");
    for (uint64_t i = 0; i < n; i++) strs[i] = (kiln_str){v[i], strlen(v[i])};
    kiln_value val = {.type = KILN_GGUF_ARRAY, .arr = {.type = KILN_GGUF_STRING, .n = n, .strs = strs}};
    int rc = kiln_writer_set(w, key, &val, err);
    free(strs);
    return rc;
}

int kiln_writer_set_arr(kiln_gguf_writer *w, const char *key, uint32_t elem_type, const void *data,
                        uint64_t n, kiln_err *err) {
    if (!kiln_gguf_vtype_size(elem_type))
        return kiln_fail(err, w->path, key, -1, "kiln_writer_set_arr takes numeric elements only");
    kiln_value val = {.type = KILN_GGUF_ARRAY, .arr = {.type = elem_type, .n = n, .data = data}};
    return kiln_writer_set(w, key, &val, err);
}

void kiln_writer_remove(kiln_gguf_writer *w, const char *key) {
    int64_t at = find_key(w, key);
    if (at < 0 || w->begun) return;
    memmove(&w->kv[at], &w->kv[at + 1], (w->n_kv - (uint64_t)at - 1) * sizeof *w->kv);
    w->n_kv--;
}

int kiln_writer_copy_kv(kiln_gguf_writer *w, const kiln_gguf *src, kiln_err *err) {
    char key[4096];
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const kiln_kv *kv = &src->kv[i];
        if (kv->key.len >= sizeof key) return kiln_fail(err, w->path, "key", -1, "key too long");
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = 0;
        if (!strncmp(key, "split.", 6)) continue;
        if (kiln_writer_set(w, key, &kv->val, err) < 0) return -1;
    }
    return 0;
}

int kiln_writer_add_tensor(kiln_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const int64_t *ne, kiln_err *err) {
    if (w->begun) return kiln_fail(err, w->path, name, -1, "tensor added after the header was written");
    const kiln_type_info *ti = kiln_type_get(type);
    if (!ti) return kiln_fail(err, w->path, name, -1, "unknown ggml type %u", type);
    if (n_dims < 1 || n_dims > KILN_GGUF_MAX_DIMS) return kiln_fail(err, w->path, name, -1, "n_dims %u not in 1..4", n_dims);
    if (ne[0] % ti->block_size)
        return kiln_fail(err, w->path, name, -1, "row length %lld is not a multiple of %s's block size %u",
                         (long long)ne[0], ti->name, ti->block_size);
    if (w->n_t == w->cap_t) {
        uint64_t cap = w->cap_t ? w->cap_t * 2 : 256;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return kiln_fail(err, w->path, name, -1, "out of memory");
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    t->name = arena_strdup(&w->arena, name, strlen(name));
    if (!t->name) return kiln_fail(err, w->path, name, -1, "out of memory");
    t->type = type;
    t->n_dims = n_dims;
    uint64_t nel = 1;
    for (uint32_t d = 0; d < KILN_GGUF_MAX_DIMS; d++) {
        t->ne[d] = d < n_dims ? ne[d] : 1;
        if (t->ne[d] <= 0) return kiln_fail(err, w->path, name, -1, "ne[%u] = %lld is not positive", d, (long long)t->ne[d]);
        nel *= (uint64_t)t->ne[d];
    }
    t->nbytes = kiln_type_row_bytes(type, nel);
    return 0;
}

/* ---- header serialisation into a growable buffer ---------------------- */

static void put_str(kiln_bytebuf *b, const char *s, uint64_t n) {
    kiln_bytebuf_put_u64(b, n);
    kiln_bytebuf_put(b, s, n);
}

static void put_value(kiln_bytebuf *b, const kiln_value *v) {
    switch (v->type) {
    case KILN_GGUF_STRING: put_str(b, v->str.ptr, v->str.len); break;
    case KILN_GGUF_ARRAY:
        kiln_bytebuf_put_u32(b, v->arr.type);
        kiln_bytebuf_put_u64(b, v->arr.n);
        if (v->arr.type == KILN_GGUF_STRING)
            for (uint64_t i = 0; i < v->arr.n; i++) put_str(b, v->arr.strs[i].ptr, v->arr.strs[i].len);
        else if (v->arr.type == KILN_GGUF_ARRAY)
            for (uint64_t i = 0; i < v->arr.n; i++) put_value(b, &v->arr.vals[i]);
        else
            kiln_bytebuf_put(b, v->arr.data, v->arr.n * kiln_gguf_vtype_size(v->arr.type));
        break;
    case KILN_GGUF_BOOL: {
        uint8_t x = v->b;
        kiln_bytebuf_put(b, &x, 1);
        break;
    }
    default: kiln_bytebuf_put(b, &v->u64, kiln_gguf_vtype_size(v->type)); break;
    }
}

static void put_kv(kiln_bytebuf *b, const char *key, const kiln_value *v) {
    put_str(b, key, strlen(key));
    kiln_bytebuf_put_u32(b, v->type);
    put_value(b, v);
}

/* Shard s's header (magic to the last tensor info) appended to b. */
static void serialise_header(const kiln_gguf_writer *w, uint32_t s, kiln_bytebuf *b) {
    uint64_t first = w->shard_first[s], end = w->shard_first[s + 1];
    bool split = w->n_shards > 1;
    uint64_t n_kv = (s == 0 ? w->n_kv : 0) + (split ? 3 : 0);
    kiln_bytebuf_put_u32(b, KILN_GGUF_MAGIC);
    kiln_bytebuf_put_u32(b, w->opts.version ? w->opts.version : 3);
    kiln_bytebuf_put_u64(b, end - first);
    kiln_bytebuf_put_u64(b, n_kv);
    if (s == 0)
        for (uint64_t i = 0; i < w->n_kv; i++) put_kv(b, w->kv[i].key, &w->kv[i].val);
    if (split) {
        kiln_value no = {.type = KILN_GGUF_UINT16, .u16 = (uint16_t)s};
        kiln_value count = {.type = KILN_GGUF_UINT16, .u16 = (uint16_t)w->n_shards};
        kiln_value total = {.type = KILN_GGUF_INT32, .i32 = (int32_t)w->n_t};
        put_kv(b, "split.no", &no);
        put_kv(b, "split.count", &count);
        put_kv(b, "split.tensors.count", &total);
    }
    for (uint64_t i = first; i < end; i++) {
        const wtensor *t = &w->t[i];
        put_str(b, t->name, strlen(t->name));
        kiln_bytebuf_put_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) kiln_bytebuf_put_u64(b, (uint64_t)t->ne[d]);
        kiln_bytebuf_put_u32(b, t->type);
        kiln_bytebuf_put_u64(b, t->offset);
    }
}

static int write_header(kiln_gguf_writer *w, uint32_t s, kiln_err *err) {
    kiln_bytebuf b = {0};
    serialise_header(w, s, &b);
    int rc = b.oom ? kiln_fail(err, w->path, NULL, -1, "out of memory") : 0;
    if (rc == 0) rc = kiln_out_write(&w->out[s], b.p, b.len, err);
    if (rc == 0) rc = kiln_out_pad(&w->out[s], w->alignment, err);
    kiln_bytebuf_free(&b);
    return rc;
}

/* Assigns tensors to shards the way llama-gguf-split does: a new shard
 * starts when the current one has a tensor and the next would pass the
 * size or tensor-count limit. */
static int plan_shards(kiln_gguf_writer *w, kiln_err *err) {
    w->shard_first = calloc(w->n_t + 2, sizeof *w->shard_first);
    if (!w->shard_first) return kiln_fail(err, w->path, NULL, -1, "out of memory");
    uint32_t s = 0;
    uint64_t in_shard = 0, size = 0, off = 0;
    for (uint64_t i = 0; i < w->n_t; i++) {
        uint64_t padded = (w->t[i].nbytes + w->alignment - 1) / w->alignment * w->alignment;
        bool full = in_shard > 0 &&
                    ((w->opts.split_max_tensors && in_shard >= w->opts.split_max_tensors) ||
                     (w->opts.split_max_size && size + padded > w->opts.split_max_size));
        if (full) {
            w->shard_first[++s] = i;
            in_shard = size = off = 0;
        }
        w->t[i].shard = s;
        w->t[i].offset = off;
        off += padded;
        size += padded;
        in_shard++;
    }
    w->n_shards = s + 1;
    w->shard_first[w->n_shards] = w->n_t;
    if (w->n_shards > 65535) return kiln_fail(err, w->path, NULL, -1, "too many shards (%u)", w->n_shards);
    return 0;
}

static int shard_name(const kiln_gguf_writer *w, uint32_t s, char *out, size_t cap) {
    if (w->n_shards == 1) return snprintf(out, cap, "%s", w->path) >= (int)cap ? -1 : 0;
    size_t n = strlen(w->path);
    int base = (int)(n > 5 && !strcmp(w->path + n - 5, ".gguf") ? n - 5 : n);
    return snprintf(out, cap, "%.*s-%05u-of-%05u.gguf", base, w->path, s + 1, w->n_shards) >= (int)cap ? -1 : 0;
}

/* The options' alignment, or general.alignment when the keys set one. */
static int resolve_alignment(kiln_gguf_writer *w, kiln_err *err) {
    w->alignment = w->opts.alignment ? w->opts.alignment : KILN_GGUF_DEFAULT_ALIGNMENT;
    int64_t a = find_key(w, "general.alignment");
    if (a >= 0 && w->kv[a].val.type == KILN_GGUF_UINT32) w->alignment = w->kv[a].val.u32;
    if (w->alignment == 0 || (w->alignment & (w->alignment - 1)))
        return kiln_fail(err, w->path, "general.alignment", -1, "alignment %llu is not a power of two",
                         (unsigned long long)w->alignment);
    return 0;
}

int kiln_writer_begin(kiln_gguf_writer *w, kiln_err *err) {
    if (w->begun) return kiln_fail(err, w->path, NULL, -1, "writer already begun");
    if (resolve_alignment(w, err) < 0 || plan_shards(w, err) < 0) return -1;
    char name[4200];
    for (uint32_t s = 0; s < w->n_shards; s++) {
        if (shard_name(w, s, name, sizeof name) < 0) return kiln_fail(err, w->path, NULL, -1, "path too long");
        if (kiln_check_output(name, w->opts.inputs, w->opts.n_inputs, w->opts.force, err) < 0) return -1;
    }
    w->out = calloc(w->n_shards, sizeof *w->out);
    if (!w->out) return kiln_fail(err, w->path, NULL, -1, "out of memory");
    for (uint32_t s = 0; s < w->n_shards; s++) w->out[s].fd = -1;
    w->begun = true;
    /* Every shard's .tmp is created up front, so a bad output directory
     * fails before any tensor work is done. */
    for (uint32_t s = 0; s < w->n_shards; s++) {
        shard_name(w, s, name, sizeof name);
        if (kiln_out_open(&w->out[s], name, err) < 0) return -1;
        if (w->opts.direct_io && kiln_out_direct(&w->out[s], err) < 0) return -1;
    }
    w->cur_shard = 0;
    w->cur_tensor = 0;
    w->cur_written = 0;
    return write_header(w, 0, err);
}

/* Closes the shard just completed and starts the next one's header. */
static int next_shard(kiln_gguf_writer *w, kiln_err *err) {
    if (kiln_out_close(&w->out[w->cur_shard], err) < 0) return -1;
    w->cur_shard++;
    return write_header(w, w->cur_shard, err);
}

int kiln_writer_write(kiln_gguf_writer *w, const void *data, uint64_t n, kiln_err *err) {
    if (!w->begun) return kiln_fail(err, w->path, NULL, -1, "kiln_writer_write before kiln_writer_begin");
    const unsigned char *p = data;
    while (n > 0) {
        if (w->cur_tensor >= w->n_t)
            return kiln_fail(err, w->path, NULL, -1, "more tensor data written than the %llu tensors declared",
                             (unsigned long long)w->n_t);
        wtensor *t = &w->t[w->cur_tensor];
        if (t->shard != w->cur_shard && next_shard(w, err) < 0) return -1;
        uint64_t k = t->nbytes - w->cur_written;
        if (k > n) k = n;
        if (kiln_out_write(&w->out[w->cur_shard], p, k, err) < 0) return -1;
        p += k;
        n -= k;
        w->cur_written += k;
        if (w->cur_written == t->nbytes) {
            if (kiln_out_pad(&w->out[w->cur_shard], w->alignment, err) < 0) return -1;
            w->cur_tensor++;
            w->cur_written = 0;
        }
    }
    return 0;
}

static void writer_free(kiln_gguf_writer *w) {
    kiln_arena_free(&w->arena);
    free(w->kv);
    free(w->t);
    free(w->shard_first);
    free(w->out);
    free(w->path);
    free(w);
}

int kiln_writer_finish(kiln_gguf_writer *w, kiln_err *err) {
    int rc = 0;
    if (!w->begun && kiln_writer_begin(w, err) < 0) rc = -1;
    if (rc == 0 && w->cur_tensor < w->n_t)
        rc = kiln_fail(err, w->path, w->t[w->cur_tensor].name, -1,
                       "only %llu of %llu bytes of this tensor were written (%llu of %llu tensors complete)",
                       (unsigned long long)w->cur_written, (unsigned long long)w->t[w->cur_tensor].nbytes,
                       (unsigned long long)w->cur_tensor, (unsigned long long)w->n_t);
    /* Shards with no data left to write (e.g. trailing empty plan) still
     * need their headers; then everything is fsynced before any rename. */
    while (rc == 0 && w->cur_shard + 1 < w->n_shards) rc = next_shard(w, err);
    for (uint32_t s = 0; rc == 0 && s < w->n_shards; s++) rc = kiln_out_close(&w->out[s], err);
    for (uint32_t s = 0; rc == 0 && s < w->n_shards; s++) rc = kiln_out_commit(&w->out[s], err);
    if (rc < 0) {
        kiln_writer_abort(w);
        return -1;
    }
    for (uint32_t s = 0; s < w->n_shards; s++) kiln_out_free(&w->out[s]);
    writer_free(w);
    return 0;
}

int kiln_writer_file_size(kiln_gguf_writer *w, uint64_t *size, kiln_err *err) {
    *size = 0;
    if (w->begun || w->shard_first) return kiln_fail(err, w->path, NULL, -1, "writer already begun");
    if (w->opts.split_max_size || w->opts.split_max_tensors)
        return kiln_fail(err, w->path, NULL, -1, "the size of a split output is not one file's");
    int rc = resolve_alignment(w, err);
    if (rc == 0) rc = plan_shards(w, err);
    kiln_bytebuf b = {0};
    if (rc == 0) {
        serialise_header(w, 0, &b);
        if (b.oom) rc = kiln_fail(err, w->path, NULL, -1, "out of memory");
    }
    if (rc == 0) {
        uint64_t a = w->alignment, total = (b.len + a - 1) / a * a;
        for (uint64_t i = 0; i < w->n_t; i++) total += (w->t[i].nbytes + a - 1) / a * a;
        *size = total;
    }
    kiln_bytebuf_free(&b);
    /* planned again by kiln_writer_begin, with whatever is added later */
    free(w->shard_first);
    w->shard_first = NULL;
    return rc;
}

int kiln_writer_finish_image(kiln_gguf_writer *w, uint8_t **image, uint64_t *len, kiln_err *err) {
    *image = NULL;
    *len = 0;
    int rc = 0;
    if (w->begun) rc = kiln_fail(err, w->path, NULL, -1, "writer already begun");
    else if (w->n_t)
        rc = kiln_fail(err, w->path, NULL, -1, "an in-memory GGUF holds metadata only, not %llu tensors",
                       (unsigned long long)w->n_t);
    if (rc == 0) rc = resolve_alignment(w, err);
    if (rc == 0) rc = plan_shards(w, err); /* no tensors: one shard */
    kiln_bytebuf b = {0};
    if (rc == 0) {
        serialise_header(w, 0, &b);
        /* padded like the file, so the image is that file byte for byte */
        static const uint8_t zero = 0;
        while (!b.oom && b.len % w->alignment) kiln_bytebuf_put(&b, &zero, 1);
        if (b.oom) rc = kiln_fail(err, w->path, NULL, -1, "out of memory");
    }
    if (rc == 0) {
        *image = b.p;
        *len = b.len;
    } else {
        kiln_bytebuf_free(&b);
    }
    writer_free(w);
    return rc;
}

void kiln_writer_abort(kiln_gguf_writer *w) {
    if (!w) return;
    if (w->out)
        for (uint32_t s = 0; s < w->n_shards; s++) kiln_out_discard(&w->out[s]);
    writer_free(w);
}

const char *kiln_writer_shard_path(const kiln_gguf_writer *w, uint32_t i) {
    if (!w->out || i >= w->n_shards) return w->path;
    return w->out[i].path;
}

uint32_t kiln_writer_shard_count(const kiln_gguf_writer *w) {
    return w->begun ? w->n_shards : 1;
}
