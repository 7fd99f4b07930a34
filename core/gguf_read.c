/* core/gguf_read.c - GGUF parsing and validation (API in gguf.h).
 *
 * Nothing in a file is trusted. Before a byte is read its position is
 * checked against the file size, and every count is bounded by the bytes
 * that could hold it, so a hostile header cannot make kiln allocate more
 * than the file's size in bookkeeping. Checked here:
 *   magic; version (2 or 3; a byte-swapped version means a big-endian
 *   file); tensor and key counts; string and array lengths; value types;
 *   nesting depth; duplicate keys and tensor names; general.alignment (a
 *   power of two); per tensor: 1 <= n_dims <= 4, dims > 0 without overflow
 *   of the element count, a known type, rows that are a whole number of
 *   blocks, an aligned offset, data inside the file, no overlaps.
 * Every error names the file, the field or tensor, and the byte offset. */
#include "gguf.h"

#include "arena.h"
#include "strmap.h"
#include "types.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_NESTING 8
#define MAX_STRING (1ull << 30)

typedef struct gguf_priv {
    kiln_arena arena;
    kiln_strmap tensor_index;
    kiln_strmap kv_index;
    bool owns_maps;
    uint8_t *owned_image; /* kiln_gguf_parse_owned()'s buffer */
} gguf_priv;

typedef struct reader {
    const uint8_t *buf;
    uint64_t size, pos;
    const char *name;
    kiln_err *err;
    kiln_arena *arena;
} reader;

static __attribute__((noinline, cold)) void truncated(reader *r, const char *field, uint64_t need) {
    kiln_fail(r->err, r->name, field, (int64_t)r->pos, "file truncated: %llu bytes needed, %llu left",
              (unsigned long long)need, (unsigned long long)(r->size - r->pos));
}

/* Inline: every caller's n is a constant, so the copy is one load (and
 * the -1 in sight tells the compiler that a failed take sets nothing). */
static inline int take(reader *r, void *out, uint64_t n, const char *field) {
    if (r->size - r->pos < n) {
        truncated(r, field, n);
        return -1;
    }
    memcpy(out, r->buf + r->pos, n);
    r->pos += n;
    return 0;
}

static int rd_u32(reader *r, uint32_t *v, const char *f) { return take(r, v, 4, f); }
static int rd_u64(reader *r, uint64_t *v, const char *f) { return take(r, v, 8, f); }

static int rd_str(reader *r, kiln_str *s, const char *field) {
    uint64_t at = r->pos, len;
    if (rd_u64(r, &len, field) < 0) return -1;
    if (len > MAX_STRING || len > r->size - r->pos)
        return kiln_fail(r->err, r->name, field, (int64_t)at,
                         "string length %llu exceeds the %llu bytes left in the file",
                         (unsigned long long)len, (unsigned long long)(r->size - r->pos));
    s->ptr = (const char *)r->buf + r->pos;
    s->len = len;
    r->pos += len;
    return 0;
}

uint32_t kiln_gguf_vtype_size(uint32_t type) {
    static const uint8_t SIZES[KILN_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return type < KILN_GGUF_VTYPE_COUNT ? SIZES[type] : 0;
}

const char *kiln_gguf_vtype_name(uint32_t type) {
    static const char *NAMES[KILN_GGUF_VTYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64"};
    return type < KILN_GGUF_VTYPE_COUNT ? NAMES[type] : "?";
}

static int rd_value(reader *r, uint32_t type, kiln_value *v, const char *field, int depth);

static int rd_array(reader *r, kiln_array *a, const char *field, int depth) {
    uint64_t at = r->pos;
    if (depth >= MAX_NESTING)
        return kiln_fail(r->err, r->name, field, (int64_t)at, "arrays nested deeper than %d", MAX_NESTING);
    if (rd_u32(r, &a->type, field) < 0 || rd_u64(r, &a->n, field) < 0) return -1;
    if (a->type >= KILN_GGUF_VTYPE_COUNT)
        return kiln_fail(r->err, r->name, field, (int64_t)at, "unknown array element type %u", a->type);
    /* Smallest encoding of one element bounds the count by the bytes left. */
    uint64_t min_elem = a->type == KILN_GGUF_STRING ? 8 : a->type == KILN_GGUF_ARRAY ? 12 : kiln_gguf_vtype_size(a->type);
    uint64_t left = r->size - r->pos;
    if (a->n > left / min_elem)
        return kiln_fail(r->err, r->name, field, (int64_t)at + 4,
                         "array of %llu %s elements cannot fit in the %llu bytes left",
                         (unsigned long long)a->n, kiln_gguf_vtype_name(a->type), (unsigned long long)left);
    if (a->type == KILN_GGUF_STRING) {
        a->strs = kiln_arena_alloc(r->arena, a->n * sizeof(kiln_str) + 1);
        if (!a->strs) return kiln_fail(r->err, r->name, field, (int64_t)at, "out of memory");
        for (uint64_t i = 0; i < a->n; i++)
            if (rd_str(r, &a->strs[i], field) < 0) return -1;
    } else if (a->type == KILN_GGUF_ARRAY) {
        a->vals = kiln_arena_alloc(r->arena, a->n * sizeof(kiln_value) + 1);
        if (!a->vals) return kiln_fail(r->err, r->name, field, (int64_t)at, "out of memory");
        for (uint64_t i = 0; i < a->n; i++)
            if (rd_value(r, KILN_GGUF_ARRAY, &a->vals[i], field, depth + 1) < 0) return -1;
    } else {
        a->data = r->buf + r->pos;
        r->pos += a->n * min_elem;
    }
    return 0;
}

static int rd_value(reader *r, uint32_t type, kiln_value *v, const char *field, int depth) {
    v->type = type;
    switch (type) {
    case KILN_GGUF_STRING: return rd_str(r, &v->str, field);
    case KILN_GGUF_ARRAY: return rd_array(r, &v->arr, field, depth);
    case KILN_GGUF_BOOL: {
        uint64_t at = r->pos;
        uint8_t b;
        if (take(r, &b, 1, field) < 0) return -1;
        if (b > 1) return kiln_fail(r->err, r->name, field, (int64_t)at, "bool value %u is neither 0 nor 1", b);
        v->b = b;
        return 0;
    }
    default:
        if (type >= KILN_GGUF_VTYPE_COUNT)
            return kiln_fail(r->err, r->name, field, (int64_t)r->pos - 4, "unknown value type %u", type);
        return take(r, &v->u64, kiln_gguf_vtype_size(type), field);
    }
}

/* Parses one file image into `shard`, appending its keys and tensors. */
/* Names the item being read for error messages: "WHAT #INDEX SUFFIX"
 * before its name is known, "WHAT 'NAME'" after (names cut at 200 bytes).
 * Written by hand, not snprintf: it runs for every key and tensor, and a
 * file of 100,000 tensors spent a tenth of `inspect`'s time formatting
 * names that only an error would print. */
static void field_by_index(char *field, const char *what, uint64_t index, const char *suffix) {
    char digits[24];
    int n = 0;
    do digits[n++] = (char)('0' + index % 10); while (index /= 10);
    size_t len = strlen(what);
    memcpy(field, what, len);
    field[len++] = ' ';
    field[len++] = '#';
    while (n) field[len++] = digits[--n];
    strcpy(field + len, suffix);
}

static void field_by_name(char *field, const char *what, kiln_str name) {
    size_t len = strlen(what), n = name.len > 200 ? 200 : name.len;
    memcpy(field, what, len);
    field[len++] = ' ';
    field[len++] = '\'';
    memcpy(field + len, name.ptr, n);
    len += n;
    field[len++] = '\'';
    field[len] = 0;
}

static int parse_shard(reader *r, kiln_gguf_shard *shard, uint32_t shard_no, kiln_kv **kv_out, uint64_t *n_kv_out,
                       kiln_tensor **t_out, uint64_t *n_t_out) {
    uint32_t magic, version;
    if (rd_u32(r, &magic, "magic") < 0) return -1;
    if (magic != KILN_GGUF_MAGIC)
        return kiln_fail(r->err, r->name, "magic", 0, "not a GGUF file (magic %02x %02x %02x %02x)",
                         magic & 0xff, (magic >> 8) & 0xff, (magic >> 16) & 0xff, magic >> 24);
    if (rd_u32(r, &version, "version") < 0) return -1;
    if (version > 0xffff && (version & 0xffff) == 0 && __builtin_bswap32(version) <= 3)
        return kiln_fail(r->err, r->name, "version", 4,
                         "big-endian (byte-swapped) GGUF v%u; kiln reads little-endian GGUF only",
                         __builtin_bswap32(version));
    if (version == 1)
        return kiln_fail(r->err, r->name, "version", 4, "GGUF v1 is not supported (v2 and v3 are)");
    if (version != 2 && version != 3)
        return kiln_fail(r->err, r->name, "version", 4, "unknown GGUF version %u", version);
    shard->version = version;

    uint64_t n_tensors, n_kv;
    if (rd_u64(r, &n_tensors, "tensor_count") < 0 || rd_u64(r, &n_kv, "kv_count") < 0) return -1;
    /* A key needs >= 13 bytes (length, type, value); a tensor info >= 32. */
    uint64_t left = r->size - r->pos;
    if (n_kv > left / 13)
        return kiln_fail(r->err, r->name, "kv_count", 16, "%llu keys cannot fit in a %llu-byte file",
                         (unsigned long long)n_kv, (unsigned long long)r->size);
    if (n_tensors > left / 32)
        return kiln_fail(r->err, r->name, "tensor_count", 8, "%llu tensors cannot fit in a %llu-byte file",
                         (unsigned long long)n_tensors, (unsigned long long)r->size);
    shard->n_kv = n_kv;
    shard->n_tensors = n_tensors;

    kiln_kv *kv = kiln_arena_alloc(r->arena, n_kv * sizeof *kv + 1);
    kiln_tensor *ts = kiln_arena_alloc(r->arena, n_tensors * sizeof *ts + 1);
    if (!kv || !ts) return kiln_fail(r->err, r->name, NULL, -1, "out of memory");
    kiln_strmap keys;
    if (kiln_strmap_init(&keys, n_kv) < 0) return kiln_fail(r->err, r->name, NULL, -1, "out of memory");

    char field[320];
    shard->alignment = KILN_GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < n_kv; i++) {
        kv[i].offset = r->pos;
        field_by_index(field, "key", i, "");
        uint32_t type;
        if (rd_str(r, &kv[i].key, field) < 0) goto fail;
        field_by_name(field, "key", kv[i].key);
        if (kiln_strmap_put(&keys, kv[i].key.ptr, kv[i].key.len, i, NULL) == 0) {
            kiln_fail(r->err, r->name, field, (int64_t)kv[i].offset, "duplicate key");
            goto fail;
        }
        uint64_t type_at = r->pos;
        if (rd_u32(r, &type, field) < 0) goto fail;
        if (type >= KILN_GGUF_VTYPE_COUNT) {
            kiln_fail(r->err, r->name, field, (int64_t)type_at, "unknown value type %u", type);
            goto fail;
        }
        if (rd_value(r, type, &kv[i].val, field, 0) < 0) goto fail;
        if (kiln_str_eq(kv[i].key, "general.alignment")) {
            if (type != KILN_GGUF_UINT32) {
                kiln_fail(r->err, r->name, field, (int64_t)type_at, "must be uint32, not %s", kiln_gguf_vtype_name(type));
                goto fail;
            }
            uint32_t a = kv[i].val.u32;
            if (a == 0 || (a & (a - 1))) {
                kiln_fail(r->err, r->name, field, (int64_t)type_at + 4, "alignment %u is not a power of two", a);
                goto fail;
            }
            shard->alignment = a;
        }
    }
    kiln_strmap_free(&keys);

    for (uint64_t i = 0; i < n_tensors; i++) {
        kiln_tensor *t = &ts[i];
        uint64_t at = r->pos;
        field_by_index(field, "tensor", i, " name");
        if (rd_str(r, &t->name, field) < 0) return -1;
        field_by_name(field, "tensor", t->name);
        uint64_t dims_at = r->pos;
        if (rd_u32(r, &t->n_dims, field) < 0) return -1;
        if (t->n_dims < 1 || t->n_dims > KILN_GGUF_MAX_DIMS)
            return kiln_fail(r->err, r->name, field, (int64_t)dims_at, "n_dims %u is not in 1..%d", t->n_dims, KILN_GGUF_MAX_DIMS);
        int64_t nel = 1;
        for (uint32_t d = 0; d < KILN_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne_at = r->pos, ne;
            if (rd_u64(r, &ne, field) < 0) return -1;
            if (ne == 0 || ne > (uint64_t)INT64_MAX)
                return kiln_fail(r->err, r->name, field, (int64_t)ne_at, "ne[%u] = %lld is not positive", d, (long long)ne);
            int64_t product; /* nel * ne <= INT64_MAX, without a division per dim */
            if (__builtin_mul_overflow(nel, (int64_t)ne, &product))
                return kiln_fail(r->err, r->name, field, (int64_t)ne_at, "element count overflows at ne[%u] = %llu", d, (unsigned long long)ne);
            t->ne[d] = (int64_t)ne;
            nel = product;
        }
        t->nelements = nel;
        uint64_t type_at = r->pos;
        if (rd_u32(r, &t->type, field) < 0) return -1;
        const kiln_type_info *ti = kiln_type_get(t->type);
        if (!ti)
            return kiln_fail(r->err, r->name, field, (int64_t)type_at, "unknown or removed ggml type %u", t->type);
        if (t->ne[0] % ti->block_size)
            return kiln_fail(r->err, r->name, field, (int64_t)dims_at + 4,
                             "row length %lld is not a multiple of %s's block size %u",
                             (long long)t->ne[0], ti->name, ti->block_size);
        /* nel / block_size * type_size cannot overflow 64 bits: nel < 2^63 and type_size/block_size <= 8 */
        t->nbytes = (uint64_t)nel / ti->block_size * ti->type_size;
        uint64_t off_at = r->pos;
        if (rd_u64(r, &t->offset, field) < 0) return -1;
        if (t->offset % shard->alignment)
            return kiln_fail(r->err, r->name, field, (int64_t)off_at, "data offset %llu is not aligned to %llu",
                             (unsigned long long)t->offset, (unsigned long long)shard->alignment);
        (void)at;
    }

    uint64_t data = (r->pos + shard->alignment - 1) / shard->alignment * shard->alignment;
    if (n_tensors > 0 && data > r->size)
        return kiln_fail(r->err, r->name, "tensor data", (int64_t)r->pos, "file ends before the tensor data section");
    shard->data_offset = data;
    for (uint64_t i = 0; i < n_tensors; i++) {
        kiln_tensor *t = &ts[i];
        uint64_t room = r->size - data;
        if (t->offset > room || t->nbytes > room - t->offset)
            return kiln_fail(r->err, r->name, "tensor data", (int64_t)(data + t->offset),
                             "tensor '%.*s' (%llu bytes at data offset %llu) extends past the end of the file (%llu bytes)",
                             (int)t->name.len, t->name.ptr, (unsigned long long)t->nbytes,
                             (unsigned long long)t->offset, (unsigned long long)r->size);
        t->file_offset = data + t->offset;
        t->data = r->buf + t->file_offset;
        t->shard = shard_no;
    }
    *kv_out = kv;
    *n_kv_out = n_kv;
    *t_out = ts;
    *n_t_out = n_tensors;
    return 0;
fail:
    kiln_strmap_free(&keys);
    return -1;
}

static int cmp_by_offset(const void *a, const void *b) {
    const kiln_tensor *x = *(kiln_tensor *const *)a, *y = *(kiln_tensor *const *)b;
    if (x->shard != y->shard) return x->shard < y->shard ? -1 : 1;
    return x->file_offset < y->file_offset ? -1 : x->file_offset > y->file_offset;
}

static bool overlaps(const kiln_tensor *a, const kiln_tensor *b) {
    return a->shard == b->shard && a->file_offset + a->nbytes > b->file_offset;
}

static int overlap_error(const kiln_gguf *g, const kiln_tensor *a, const kiln_tensor *b, kiln_err *err) {
    return kiln_fail(err, g->shards[b->shard].path, "tensor data", (int64_t)b->file_offset,
                     "tensor '%.*s' overlaps tensor '%.*s'", (int)b->name.len, b->name.ptr,
                     (int)a->name.len, a->name.ptr);
}

/* Rejects duplicate tensor names and tensors whose bytes overlap, and
 * builds the name index. Writers lay tensors out in offset order; then
 * one pass over the tensors does it all (100,000 of them are 11 MB, each
 * pass a measurable part of an open), and only files out of order pay
 * for a sorted copy. A duplicate name is reported before any overlap. */
static int finish_index(kiln_gguf *g, kiln_err *err) {
    gguf_priv *p = g->priv;
    if (kiln_strmap_init(&p->tensor_index, g->n_tensors) < 0 || kiln_strmap_init(&p->kv_index, g->n_kv) < 0)
        return kiln_fail(err, g->path, NULL, -1, "out of memory");
    for (uint64_t i = 0; i < g->n_kv; i++)
        kiln_strmap_put(&p->kv_index, g->kv[i].key.ptr, g->kv[i].key.len, i, NULL);
    bool in_order = true;
    uint64_t first_overlap = 0; /* in order: the first i overlapping tensor i - 1 */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kiln_tensor *t = &g->tensors[i];
        if (i + 16 < g->n_tensors)
            kiln_strmap_prefetch(&p->tensor_index, t[16].name.ptr, t[16].name.len);
        if (kiln_strmap_put(&p->tensor_index, t->name.ptr, t->name.len, i, NULL) == 0)
            return kiln_fail(err, g->shards[t->shard].path, "tensor name", -1, "duplicate tensor '%.*s'",
                             (int)t->name.len, t->name.ptr);
        if (i == 0 || !in_order) continue;
        const kiln_tensor *prev = t - 1;
        if (cmp_by_offset(&prev, &t) > 0) in_order = false;
        else if (!first_overlap && overlaps(prev, t)) first_overlap = i;
    }
    if (in_order)
        return first_overlap ? overlap_error(g, &g->tensors[first_overlap - 1], &g->tensors[first_overlap], err) : 0;
    kiln_tensor **sorted = malloc(g->n_tensors * sizeof *sorted + 1);
    if (!sorted) return kiln_fail(err, g->path, NULL, -1, "out of memory");
    for (uint64_t i = 0; i < g->n_tensors; i++) sorted[i] = &g->tensors[i];
    qsort(sorted, g->n_tensors, sizeof *sorted, cmp_by_offset);
    int rc = 0;
    for (uint64_t i = 1; i < g->n_tensors && rc == 0; i++)
        if (overlaps(sorted[i - 1], sorted[i])) rc = overlap_error(g, sorted[i - 1], sorted[i], err);
    free(sorted);
    return rc;
}

static kiln_gguf *new_gguf(const char *path, uint32_t n_shards) {
    kiln_gguf *g = calloc(1, sizeof *g);
    gguf_priv *p = calloc(1, sizeof *p);
    if (!g || !p) {
        free(g);
        free(p);
        return NULL;
    }
    g->priv = p;
    g->path = strdup(path);
    g->n_shards = n_shards;
    g->shards = kiln_arena_alloc(&p->arena, n_shards * sizeof *g->shards);
    if (!g->path || !g->shards) {
        kiln_gguf_close(g);
        return NULL;
    }
    return g;
}

/* Parses the already-mapped shards of g, in order, merging their tensors. */
static int parse_all(kiln_gguf *g, kiln_err *err) {
    gguf_priv *p = g->priv;
    kiln_tensor **parts = calloc(g->n_shards, sizeof *parts);
    if (!parts) return kiln_fail(err, g->path, NULL, -1, "out of memory");
    int rc = 0;
    for (uint32_t s = 0; s < g->n_shards && rc == 0; s++) {
        kiln_gguf_shard *sh = &g->shards[s];
        reader r = {sh->map, sh->size, 0, sh->path, err, &p->arena};
        kiln_kv *kv = NULL;
        uint64_t n_kv = 0, n_t = 0;
        rc = parse_shard(&r, sh, s, &kv, &n_kv, &parts[s], &n_t);
        if (rc == 0 && s == 0) {
            g->kv = kv;
            g->n_kv = n_kv;
            g->version = sh->version;
            g->alignment = sh->alignment;
        }
        g->n_tensors += rc == 0 ? n_t : 0;
        g->total_size += sh->size;
    }
    if (rc == 0 && g->n_shards == 1) {
        g->tensors = parts[0]; /* one shard: its array is the model's */
    } else if (rc == 0) {
        g->tensors = kiln_arena_alloc(&p->arena, g->n_tensors * sizeof *g->tensors + 1);
        if (!g->tensors) rc = kiln_fail(err, g->path, NULL, -1, "out of memory");
        uint64_t k = 0;
        for (uint32_t s = 0; rc == 0 && s < g->n_shards; s++) {
            memcpy(g->tensors + k, parts[s], g->shards[s].n_tensors * sizeof *g->tensors);
            k += g->shards[s].n_tensors;
        }
    }
    free(parts);
    return rc ? rc : finish_index(g, err);
}

kiln_gguf *kiln_gguf_parse(const uint8_t *buf, uint64_t size, const char *name, kiln_err *err) {
    kiln_gguf *g = new_gguf(name, 1);
    if (!g) {
        kiln_fail(err, name, NULL, -1, "out of memory");
        return NULL;
    }
    g->shards[0].path = g->path;
    g->shards[0].map = buf;
    g->shards[0].size = size;
    if (parse_all(g, err) < 0) {
        kiln_gguf_close(g);
        return NULL;
    }
    return g;
}

kiln_gguf *kiln_gguf_parse_owned(uint8_t *image, uint64_t size, const char *name, kiln_err *err) {
    kiln_gguf *g = kiln_gguf_parse(image, size, name, err);
    if (!g) {
        free(image);
        return NULL;
    }
    ((gguf_priv *)g->priv)->owned_image = image;
    return g;
}

static int map_file(const char *path, kiln_gguf_shard *sh, kiln_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kiln_fail(err, path, NULL, -1, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kiln_fail(err, path, NULL, -1, "not a regular file");
    }
    sh->size = (uint64_t)st.st_size;
    sh->map = NULL;
    if (sh->size > 0) {
        void *m = mmap(NULL, sh->size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            close(fd);
            return kiln_fail(err, path, NULL, -1, "cannot map: %s", strerror(errno));
        }
        sh->map = m;
    }
    close(fd);
    return 0;
}

bool kiln_gguf_split_name(const char *path, char *prefix, size_t cap, int *no, int *count) {
    size_t n = strlen(path);
    const char *tail = "-00000-of-00000.gguf";
    size_t tl = strlen(tail);
    if (n < tl) return false;
    const char *s = path + n - tl;
    int a, b;
    char of[3], ext[6];
    if (sscanf(s, "-%5d-%2[of]-%5d.%5s", &a, of, &b, ext) != 4 || strcmp(of, "of") || strcmp(ext, "gguf"))
        return false;
    if (a < 1 || b < 1 || a > b) return false;
    if ((size_t)(s - path) + 1 > cap) return false;
    memcpy(prefix, path, (size_t)(s - path));
    prefix[s - path] = 0;
    *no = a;
    *count = b;
    return true;
}

/* Checks the split.* keys of every shard against the shard's position. */
static int check_split_keys(kiln_gguf *g, kiln_err *err) {
    uint64_t want_total = 0, total = 0;
    for (uint32_t s = 0; s < g->n_shards; s++) total += g->shards[s].n_tensors;
    if (kiln_gguf_get_u64(g, "split.tensors.count", &want_total) && want_total != total)
        return kiln_fail(err, g->shards[0].path, "split.tensors.count", (int64_t)kiln_gguf_find_kv(g, "split.tensors.count")->offset,
                         "says %llu tensors but the %u shards hold %llu", (unsigned long long)want_total,
                         g->n_shards, (unsigned long long)total);
    uint64_t count;
    if (kiln_gguf_get_u64(g, "split.count", &count) && count != g->n_shards)
        return kiln_fail(err, g->shards[0].path, "split.count", (int64_t)kiln_gguf_find_kv(g, "split.count")->offset,
                         "says %llu shards but the file name says %u", (unsigned long long)count, g->n_shards);
    return 0;
}

kiln_gguf *kiln_gguf_open(const char *path, kiln_err *err) {
    char prefix[4096];
    int no, count;
    bool split = kiln_gguf_split_name(path, prefix, sizeof prefix, &no, &count) && count > 1;
    kiln_gguf *g = new_gguf(path, split ? (uint32_t)count : 1);
    if (!g) {
        kiln_fail(err, path, NULL, -1, "out of memory");
        return NULL;
    }
    gguf_priv *p = g->priv;
    p->owns_maps = true;
    for (uint32_t s = 0; s < g->n_shards; s++) {
        char name[4200];
        if (split) snprintf(name, sizeof name, "%s-%05u-of-%05d.gguf", prefix, s + 1, count);
        else snprintf(name, sizeof name, "%s", path);
        g->shards[s].path = kiln_arena_alloc(&p->arena, strlen(name) + 1);
        if (!g->shards[s].path) {
            kiln_fail(err, path, NULL, -1, "out of memory");
            goto fail;
        }
        strcpy(g->shards[s].path, name);
        if (map_file(name, &g->shards[s], err) < 0) goto fail;
    }
    if (parse_all(g, err) < 0) goto fail;
    if (split && check_split_keys(g, err) < 0) goto fail;
    return g;
fail:
    kiln_gguf_close(g);
    return NULL;
}

void kiln_gguf_close(kiln_gguf *g) {
    if (!g) return;
    gguf_priv *p = g->priv;
    if (p) {
        if (p->owns_maps)
            for (uint32_t s = 0; s < g->n_shards && g->shards; s++)
                if (g->shards[s].map) munmap((void *)g->shards[s].map, g->shards[s].size);
        kiln_strmap_free(&p->tensor_index);
        kiln_strmap_free(&p->kv_index);
        kiln_arena_free(&p->arena);
        free(p->owned_image);
        free(p);
    }
    free(g->path);
    free(g);
}

const kiln_kv *kiln_gguf_find_kv(const kiln_gguf *g, const char *key) {
    gguf_priv *p = g->priv;
    uint64_t i;
    if (!kiln_strmap_get(&p->kv_index, key, strlen(key), &i)) return NULL;
    return &g->kv[i];
}

const kiln_tensor *kiln_gguf_find_tensor(const kiln_gguf *g, const char *name) {
    gguf_priv *p = g->priv;
    uint64_t i;
    if (!kiln_strmap_get(&p->tensor_index, name, strlen(name), &i)) return NULL;
    return &g->tensors[i];
}

int64_t kiln_tensor_layer(const char *name) {
    if (strncmp(name, "blk.", 4) || !isdigit((unsigned char)name[4])) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(name + 4, &end, 10);
    return *end == '.' && errno == 0 ? v : -1;
}

/* Reads scalar value v as a signed/unsigned integer; false if not integral. */
static bool value_as_i128(const kiln_value *v, int64_t *s, uint64_t *u, bool *is_unsigned) {
    *is_unsigned = false;
    switch (v->type) {
    case KILN_GGUF_UINT8: *u = v->u8; *is_unsigned = true; return true;
    case KILN_GGUF_UINT16: *u = v->u16; *is_unsigned = true; return true;
    case KILN_GGUF_UINT32: *u = v->u32; *is_unsigned = true; return true;
    case KILN_GGUF_UINT64: *u = v->u64; *is_unsigned = true; return true;
    case KILN_GGUF_BOOL: *u = v->b; *is_unsigned = true; return true;
    case KILN_GGUF_INT8: *s = v->i8; return true;
    case KILN_GGUF_INT16: *s = v->i16; return true;
    case KILN_GGUF_INT32: *s = v->i32; return true;
    case KILN_GGUF_INT64: *s = v->i64; return true;
    default: return false;
    }
}

bool kiln_gguf_get_u64(const kiln_gguf *g, const char *key, uint64_t *out) {
    const kiln_kv *kv = kiln_gguf_find_kv(g, key);
    int64_t s;
    uint64_t u;
    bool uns;
    if (!kv || !value_as_i128(&kv->val, &s, &u, &uns)) return false;
    if (!uns && s < 0) return false;
    *out = uns ? u : (uint64_t)s;
    return true;
}

bool kiln_gguf_get_i64(const kiln_gguf *g, const char *key, int64_t *out) {
    const kiln_kv *kv = kiln_gguf_find_kv(g, key);
    int64_t s;
    uint64_t u;
    bool uns;
    if (!kv || !value_as_i128(&kv->val, &s, &u, &uns)) return false;
    if (uns && u > (uint64_t)INT64_MAX) return false;
    *out = uns ? (int64_t)u : s;
    return true;
}

bool kiln_gguf_get_f64(const kiln_gguf *g, const char *key, double *out) {
    const kiln_kv *kv = kiln_gguf_find_kv(g, key);
    if (!kv) return false;
    if (kv->val.type == KILN_GGUF_FLOAT32) { *out = kv->val.f32; return true; }
    if (kv->val.type == KILN_GGUF_FLOAT64) { *out = kv->val.f64; return true; }
    int64_t i;
    if (kiln_gguf_get_i64(g, key, &i)) { *out = (double)i; return true; }
    return false;
}

bool kiln_gguf_get_bool(const kiln_gguf *g, const char *key, bool *out) {
    const kiln_kv *kv = kiln_gguf_find_kv(g, key);
    if (!kv || kv->val.type != KILN_GGUF_BOOL) return false;
    *out = kv->val.b;
    return true;
}

bool kiln_gguf_get_str(const kiln_gguf *g, const char *key, kiln_str *out) {
    const kiln_kv *kv = kiln_gguf_find_kv(g, key);
    if (!kv || kv->val.type != KILN_GGUF_STRING) return false;
    *out = kv->val.str;
    return true;
}

const kiln_array *kiln_gguf_get_arr(const kiln_gguf *g, const char *key, uint32_t elem_type) {
    const kiln_kv *kv = kiln_gguf_find_kv(g, key);
    if (!kv || kv->val.type != KILN_GGUF_ARRAY || kv->val.arr.type != elem_type) return NULL;
    return &kv->val.arr;
}

double kiln_array_f64(const kiln_array *a, uint64_t i) {
    const uint8_t *p = (const uint8_t *)a->data + i * kiln_gguf_vtype_size(a->type);
    kiln_value v = {.type = a->type};
    memcpy(&v.u64, p, kiln_gguf_vtype_size(a->type));
    switch (a->type) {
    case KILN_GGUF_FLOAT32: return v.f32;
    case KILN_GGUF_FLOAT64: return v.f64;
    default: return (double)kiln_array_i64(a, i);
    }
}

int64_t kiln_array_i64(const kiln_array *a, uint64_t i) {
    uint32_t sz = kiln_gguf_vtype_size(a->type);
    if (!sz) return 0;
    kiln_value v = {.type = a->type};
    memcpy(&v.u64, (const uint8_t *)a->data + i * sz, sz);
    switch (a->type) {
    case KILN_GGUF_UINT8: return v.u8;
    case KILN_GGUF_INT8: return v.i8;
    case KILN_GGUF_UINT16: return v.u16;
    case KILN_GGUF_INT16: return v.i16;
    case KILN_GGUF_UINT32: return v.u32;
    case KILN_GGUF_INT32: return v.i32;
    case KILN_GGUF_UINT64: return (int64_t)v.u64;
    case KILN_GGUF_INT64: return v.i64;
    case KILN_GGUF_BOOL: return v.b;
    case KILN_GGUF_FLOAT32: return (int64_t)v.f32;
    case KILN_GGUF_FLOAT64: return (int64_t)v.f64;
    default: return 0;
    }
}

bool kiln_str_eq(kiln_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

char *kiln_str_dup(kiln_str s) {
    char *c = malloc(s.len + 1);
    if (!c) return NULL;
    if (s.len) memcpy(c, s.ptr, s.len);
    c[s.len] = 0;
    return c;
}
