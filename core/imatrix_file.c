/* core/imatrix_file.c - reading, writing and merging llama.cpp's two
 * importance-matrix formats (see imatrix_file.h for both layouts). */
#include "imatrix_file.h"

#include "bytebuf.h"
#include "fileio.h"
#include "gguf.h"
#include "types.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SUFFIX_SUM2 ".in_sum2"
#define SUFFIX_COUNTS ".counts"
#define SUFFIX_SUM ".in_sum"

/* ---- the in-memory structure ------------------------------------------ */

kiln_imatrix *kiln_imatrix_new(void) {
    return calloc(1, sizeof(kiln_imatrix));
}

static void entry_free(kiln_imatrix_entry *e) {
    free(e->name);
    free(e->in_sum2);
    free(e->counts);
    free(e->in_sum);
}

void kiln_imatrix_free(kiln_imatrix *im) {
    if (!im) return;
    for (uint64_t i = 0; i < im->n_entries; i++) entry_free(&im->entries[i]);
    for (uint64_t i = 0; i < im->n_datasets; i++) free(im->datasets[i]);
    free(im->entries);
    free(im->datasets);
    free(im);
}

/* Position of `name` in the sorted entries, or where it would go. */
static uint64_t lower_bound(const kiln_imatrix *im, const char *name) {
    uint64_t lo = 0, hi = im->n_entries;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (strcmp(im->entries[mid].name, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

const kiln_imatrix_entry *kiln_imatrix_find(const kiln_imatrix *im, const char *name) {
    uint64_t i = lower_bound(im, name);
    return i < im->n_entries && !strcmp(im->entries[i].name, name) ? &im->entries[i] : NULL;
}

kiln_imatrix_entry *kiln_imatrix_add(kiln_imatrix *im, const char *name, int64_t n, int64_t n_mat,
                                     bool with_sum, kiln_err *err) {
    if (n <= 0 || n_mat <= 0 || n > INT32_MAX / n_mat) {
        kiln_fail(err, NULL, name, -1, "bad imatrix shape %lld x %lld", (long long)n, (long long)n_mat);
        return NULL;
    }
    uint64_t at = lower_bound(im, name);
    if (at < im->n_entries && !strcmp(im->entries[at].name, name)) {
        kiln_fail(err, NULL, name, -1, "imatrix entry appears twice");
        return NULL;
    }
    kiln_imatrix_entry e = {
        .name = strdup(name),
        .n = n,
        .n_mat = n_mat,
        .in_sum2 = calloc((size_t)(n * n_mat), sizeof(float)),
        .counts = calloc((size_t)n_mat, sizeof(float)),
        .in_sum = with_sum ? calloc((size_t)(n * n_mat), sizeof(float)) : NULL,
    };
    kiln_imatrix_entry *grown = realloc(im->entries, (im->n_entries + 1) * sizeof *grown);
    if (!e.name || !e.in_sum2 || !e.counts || (with_sum && !e.in_sum) || !grown) {
        if (grown) im->entries = grown;
        entry_free(&e);
        kiln_fail(err, NULL, name, -1, "out of memory");
        return NULL;
    }
    im->entries = grown;
    memmove(&im->entries[at + 1], &im->entries[at], (im->n_entries - at) * sizeof *grown);
    im->entries[at] = e;
    im->n_entries++;
    return &im->entries[at];
}

int kiln_imatrix_add_dataset(kiln_imatrix *im, const char *name, kiln_err *err) {
    char **grown = realloc(im->datasets, (im->n_datasets + 1) * sizeof *grown);
    if (!grown) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    im->datasets = grown;
    if (!(im->datasets[im->n_datasets] = strdup(name))) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    im->n_datasets++;
    return 0;
}

/* Every value of an entry must be a finite number and counts must not be
 * negative: a corrupt imatrix would silently steer every quantized block. */
static int check_entry(const char *path, const kiln_imatrix_entry *e, kiln_err *err) {
    int64_t nv = e->n * e->n_mat;
    for (int64_t i = 0; i < nv; i++)
        if (!isfinite(e->in_sum2[i]) || (e->in_sum && !isfinite(e->in_sum[i])))
            return kiln_fail(err, path, e->name, -1, "value %lld is not finite", (long long)i);
    for (int64_t j = 0; j < e->n_mat; j++)
        if (!isfinite(e->counts[j]) || e->counts[j] < 0)
            return kiln_fail(err, path, e->name, -1, "count of matrix %lld is %g", (long long)j,
                             (double)e->counts[j]);
    return 0;
}

/* ---- GGUF format ------------------------------------------------------- */

/* Copies a tensor's F32 values after checking its type and element count. */
static int copy_f32(const char *path, const kiln_tensor *t, float *dst, int64_t n, kiln_err *err) {
    char name[512];
    snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
    if (t->type != KILN_F32)
        return kiln_fail(err, path, name, (int64_t)t->file_offset, "type is %s, expected F32",
                         kiln_type_name(t->type));
    if (t->nelements != n)
        return kiln_fail(err, path, name, (int64_t)t->file_offset, "has %lld values, expected %lld",
                         (long long)t->nelements, (long long)n);
    memcpy(dst, t->data, (size_t)n * sizeof(float));
    return 0;
}

static bool has_suffix(kiln_str s, const char *suffix, uint64_t *base_len) {
    size_t k = strlen(suffix);
    if (s.len <= k || memcmp(s.ptr + s.len - k, suffix, k)) return false;
    *base_len = s.len - k;
    return true;
}

/* Finds the tensor named base + suffix, or NULL. */
static const kiln_tensor *find_part(const kiln_gguf *g, const char *base, const char *suffix) {
    char name[1024];
    if (snprintf(name, sizeof name, "%s%s", base, suffix) >= (int)sizeof name) return NULL;
    return kiln_gguf_find_tensor(g, name);
}

static int read_gguf_meta(const kiln_gguf *g, kiln_imatrix *im, kiln_err *err) {
    const kiln_kv *kv = kiln_gguf_find_kv(g, "general.type");
    if (kv && (kv->val.type != KILN_GGUF_STRING || !kiln_str_eq(kv->val.str, "imatrix")))
        return kiln_fail(err, g->path, "general.type", (int64_t)kv->offset,
                         "this GGUF is not an importance matrix");
    const kiln_array *ds = kiln_gguf_get_arr(g, "imatrix.datasets", KILN_GGUF_STRING);
    for (uint64_t i = 0; ds && i < ds->n; i++) {
        char *s = kiln_str_dup(ds->strs[i]);
        int rc = s ? kiln_imatrix_add_dataset(im, s, err) : kiln_fail(err, g->path, NULL, -1, "out of memory");
        free(s);
        if (rc < 0) return -1;
    }
    uint64_t v;
    if (kiln_gguf_get_u64(g, "imatrix.chunk_count", &v)) im->chunk_count = (uint32_t)v;
    if (kiln_gguf_get_u64(g, "imatrix.chunk_size", &v)) im->chunk_size = (uint32_t)v;
    return 0;
}

static int read_gguf_entry(const kiln_gguf *g, const kiln_tensor *sum2, uint64_t base_len, kiln_imatrix *im,
                           kiln_err *err) {
    char base[1024];
    if (base_len >= sizeof base) return kiln_fail(err, g->path, NULL, (int64_t)sum2->file_offset, "name too long");
    memcpy(base, sum2->name.ptr, base_len);
    base[base_len] = 0;
    const kiln_tensor *counts = find_part(g, base, SUFFIX_COUNTS), *sum = find_part(g, base, SUFFIX_SUM);
    if (!counts) return kiln_fail(err, g->path, base, -1, "has %s but no %s tensor", SUFFIX_SUM2, SUFFIX_COUNTS);
    int64_t n = sum2->ne[0], n_mat = sum2->ne[1];
    if (sum2->n_dims > 2 || counts->ne[0] != 1 || counts->nelements != n_mat)
        return kiln_fail(err, g->path, base, (int64_t)counts->file_offset,
                         "counts hold %lld values for %lld matrices of in_sum2", (long long)counts->nelements,
                         (long long)n_mat);
    kiln_imatrix_entry *e = kiln_imatrix_add(im, base, n, n_mat, sum != NULL, err);
    if (!e) return -1;
    if (copy_f32(g->path, sum2, e->in_sum2, n * n_mat, err) < 0 ||
        copy_f32(g->path, counts, e->counts, n_mat, err) < 0 ||
        (sum && copy_f32(g->path, sum, e->in_sum, n * n_mat, err) < 0))
        return -1;
    return check_entry(g->path, e, err);
}

static kiln_imatrix *read_gguf(const char *path, kiln_err *err) {
    kiln_gguf *g = kiln_gguf_open(path, err);
    if (!g) return NULL;
    kiln_imatrix *im = kiln_imatrix_new();
    int rc = im ? read_gguf_meta(g, im, err) : kiln_fail(err, path, NULL, -1, "out of memory");
    for (uint64_t i = 0; rc == 0 && i < g->n_tensors; i++) {
        uint64_t base_len;
        if (has_suffix(g->tensors[i].name, SUFFIX_SUM2, &base_len))
            rc = read_gguf_entry(g, &g->tensors[i], base_len, im, err);
    }
    if (rc == 0 && im->n_entries == 0)
        rc = kiln_fail(err, path, NULL, -1, "not an importance matrix: no *%s tensors", SUFFIX_SUM2);
    kiln_gguf_close(g);
    if (rc < 0) {
        kiln_imatrix_free(im);
        return NULL;
    }
    im->format = KILN_IMATRIX_GGUF;
    return im;
}

static void dims_of(int64_t n, int64_t n_mat, uint32_t *n_dims, int64_t ne[2]) {
    /* ggml drops trailing dimensions of 1, so [256, 1] is stored 1-D. */
    ne[0] = n;
    ne[1] = n_mat;
    *n_dims = n_mat > 1 ? 2 : 1;
}

int kiln_imatrix_write_gguf(const kiln_imatrix *im, const char *path, bool force, kiln_err *err) {
    kiln_write_opts o = {.force = force};
    kiln_gguf_writer *w = kiln_writer_new(path, &o, err);
    if (!w) return -1;
    int rc = kiln_writer_set_str(w, "general.type", "imatrix", err);
    if (rc == 0)
        rc = kiln_writer_set_str_arr(w, "imatrix.datasets", (const char *const *)im->datasets, im->n_datasets, err);
    if (rc == 0) rc = kiln_writer_set_u32(w, "imatrix.chunk_count", im->chunk_count, err);
    if (rc == 0) rc = kiln_writer_set_u32(w, "imatrix.chunk_size", im->chunk_size ? im->chunk_size : 1, err);
    char name[1100];
    for (uint64_t i = 0; rc == 0 && i < im->n_entries; i++) {
        const kiln_imatrix_entry *e = &im->entries[i];
        uint32_t nd;
        int64_t ne[2], one[2] = {1, e->n_mat};
        dims_of(e->n, e->n_mat, &nd, ne);
        snprintf(name, sizeof name, "%s%s", e->name, SUFFIX_SUM2);
        rc = kiln_writer_add_tensor(w, name, KILN_F32, nd, ne, err);
        snprintf(name, sizeof name, "%s%s", e->name, SUFFIX_COUNTS);
        if (rc == 0) rc = kiln_writer_add_tensor(w, name, KILN_F32, e->n_mat > 1 ? 2 : 1, one, err);
        snprintf(name, sizeof name, "%s%s", e->name, SUFFIX_SUM);
        if (rc == 0 && e->in_sum) rc = kiln_writer_add_tensor(w, name, KILN_F32, nd, ne, err);
    }
    if (rc == 0) rc = kiln_writer_begin(w, err);
    for (uint64_t i = 0; rc == 0 && i < im->n_entries; i++) {
        const kiln_imatrix_entry *e = &im->entries[i];
        uint64_t nv = (uint64_t)(e->n * e->n_mat) * sizeof(float);
        rc = kiln_writer_write(w, e->in_sum2, nv, err);
        if (rc == 0) rc = kiln_writer_write(w, e->counts, (uint64_t)e->n_mat * sizeof(float), err);
        if (rc == 0 && e->in_sum) rc = kiln_writer_write(w, e->in_sum, nv, err);
    }
    if (rc < 0) {
        kiln_writer_abort(w);
        return -1;
    }
    return kiln_writer_finish(w, err);
}

/* ---- legacy .dat format ------------------------------------------------ */

typedef struct rd {
    const char *path;
    const uint8_t *p;
    uint64_t size, pos;
} rd;

static int rd_i32(rd *r, const char *field, int32_t *v, kiln_err *err) {
    if (r->size - r->pos < 4) return kiln_fail(err, r->path, field, (int64_t)r->pos, "file truncated");
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int rd_bytes(rd *r, const char *field, int64_t n, const uint8_t **out, kiln_err *err) {
    if (n < 0 || (uint64_t)n > r->size - r->pos)
        return kiln_fail(err, r->path, field, (int64_t)r->pos, "length %lld runs past the end of the file",
                         (long long)n);
    *out = r->p + r->pos;
    r->pos += (uint64_t)n;
    return 0;
}

static int read_dat_entry(rd *r, int32_t idx, kiln_imatrix *im, kiln_err *err) {
    int32_t len = 0, ncall = 0, nval = 0;
    const uint8_t *name = NULL, *vals = NULL;
    char field[64], nm[1024];
    snprintf(field, sizeof field, "entry %d", idx);
    if (rd_i32(r, field, &len, err) < 0) return -1;
    if (len <= 0 || len >= (int32_t)sizeof nm)
        return kiln_fail(err, r->path, field, (int64_t)r->pos - 4, "bad name length %d", len);
    if (rd_bytes(r, field, len, &name, err) < 0) return -1;
    memcpy(nm, name, (size_t)len);
    nm[len] = 0;
    int64_t at = (int64_t)r->pos;
    if (rd_i32(r, nm, &ncall, err) < 0 || rd_i32(r, nm, &nval, err) < 0) return -1;
    if (ncall < 0 || nval < 1)
        return kiln_fail(err, r->path, nm, at, "bad ncall %d / value count %d", ncall, nval);
    if (rd_bytes(r, nm, (int64_t)nval * 4, &vals, err) < 0) return -1;
    kiln_imatrix_entry *e = kiln_imatrix_add(im, nm, nval, 1, false, err);
    if (!e) return -1;
    memcpy(e->in_sum2, vals, (size_t)nval * sizeof(float));
    e->counts[0] = (float)ncall;
    return check_entry(r->path, e, err);
}

/* The chunk count and dataset name at the end are optional: llama.cpp
 * itself tolerates files that stop after the entries. */
static int read_dat_tail(rd *r, kiln_imatrix *im, kiln_err *err) {
    int32_t chunks = 0, len = 0;
    const uint8_t *s = NULL;
    if (r->pos == r->size) return 0;
    if (rd_i32(r, "chunk count", &chunks, err) < 0) return -1;
    im->chunk_count = chunks > 0 ? (uint32_t)chunks : 0;
    if (r->pos == r->size) return 0;
    if (rd_i32(r, "dataset", &len, err) < 0 || rd_bytes(r, "dataset", len, &s, err) < 0) return -1;
    char *ds = strndup((const char *)s, (size_t)len);
    int rc = ds ? kiln_imatrix_add_dataset(im, ds, err) : kiln_fail(err, r->path, NULL, -1, "out of memory");
    free(ds);
    if (rc == 0 && r->pos != r->size)
        rc = kiln_fail(err, r->path, NULL, (int64_t)r->pos, "%llu unexpected bytes after the dataset name",
                       (unsigned long long)(r->size - r->pos));
    return rc;
}

static kiln_imatrix *read_dat(const char *path, const uint8_t *data, uint64_t size, kiln_err *err) {
    rd r = {path, data, size, 0};
    int32_t n_entries = 0;
    if (rd_i32(&r, "entry count", &n_entries, err) < 0) return NULL;
    if (n_entries < 1 || (uint64_t)n_entries > size / 16) {
        kiln_fail(err, path, "entry count", 0, "%d entries cannot fit in %llu bytes; not an imatrix file",
                  n_entries, (unsigned long long)size);
        return NULL;
    }
    kiln_imatrix *im = kiln_imatrix_new();
    int rc = im ? 0 : kiln_fail(err, path, NULL, -1, "out of memory");
    for (int32_t i = 0; rc == 0 && i < n_entries; i++) rc = read_dat_entry(&r, i, im, err);
    if (rc == 0) rc = read_dat_tail(&r, im, err);
    if (rc < 0) {
        kiln_imatrix_free(im);
        return NULL;
    }
    im->format = KILN_IMATRIX_DAT;
    return im;
}

kiln_imatrix *kiln_imatrix_read(const char *path, kiln_err *err) {
    size_t size = 0;
    char *data = kiln_read_text(path, &size, err);
    if (!data) return NULL;
    kiln_imatrix *im;
    if (size >= 4 && !memcmp(data, "GGUF", 4)) {
        free(data); /* the GGUF reader maps the file itself */
        im = read_gguf(path, err);
    } else {
        im = read_dat(path, (const uint8_t *)data, size, err);
        free(data);
    }
    return im;
}

static void put_dat_entry(kiln_bytebuf *b, const kiln_imatrix_entry *e, uint32_t chunk_size) {
    float max = 0;
    for (int64_t j = 0; j < e->n_mat; j++) max = e->counts[j] > max ? e->counts[j] : max;
    int32_t ncall = (int32_t)(((int64_t)max + chunk_size - 1) / chunk_size), len = (int32_t)strlen(e->name);
    int32_t nval = (int32_t)(e->n * e->n_mat);
    kiln_bytebuf_put_i32(b, len);
    kiln_bytebuf_put(b, e->name, (uint64_t)len);
    kiln_bytebuf_put_i32(b, ncall);
    kiln_bytebuf_put_i32(b, nval);
    for (int32_t i = 0; i < nval; i++) {
        float count = e->counts[i / e->n], value = e->in_sum2[i];
        if (count == 0.0f) value = count = 1.0f;
        /* Counts already in calls need no rescaling; float (v / c) * c is
         * not always v, and the round trip must give back the same bytes. */
        float v = count == (float)ncall ? value : value / count * (float)ncall;
        kiln_bytebuf_put(b, &v, 4);
    }
}

int kiln_imatrix_write_dat(const kiln_imatrix *im, const char *path, bool force, kiln_err *err) {
    if (kiln_check_output(path, NULL, 0, force, err) < 0) return -1;
    uint32_t cs = im->chunk_size ? im->chunk_size : 1;
    int32_t n = 0;
    for (uint64_t i = 0; i < im->n_entries; i++)
        for (int64_t j = 0; j < im->entries[i].n_mat; j++)
            if (im->entries[i].counts[j] > 0) {
                n++;
                break;
            }
    kiln_bytebuf b = {0};
    kiln_bytebuf_put_i32(&b, n);
    for (uint64_t i = 0; i < im->n_entries; i++) {
        const kiln_imatrix_entry *e = &im->entries[i];
        for (int64_t j = 0; j < e->n_mat; j++)
            if (e->counts[j] > 0) {
                put_dat_entry(&b, e, cs);
                break;
            }
    }
    kiln_bytebuf_put_i32(&b, (int32_t)im->chunk_count);
    const char *ds = im->n_datasets ? im->datasets[im->n_datasets - 1] : "";
    kiln_bytebuf_put_i32(&b, (int32_t)strlen(ds));
    kiln_bytebuf_put(&b, ds, strlen(ds));
    int rc = b.oom ? kiln_fail(err, path, NULL, -1, "out of memory") : kiln_write_file_atomic(path, b.p, b.len, err);
    kiln_bytebuf_free(&b);
    return rc;
}

/* ---- merging and weights ---------------------------------------------- */

void kiln_imatrix_set_chunk_size(kiln_imatrix *im, uint32_t chunk_size) {
    if (im->chunk_size || !chunk_size) return;
    for (uint64_t i = 0; i < im->n_entries; i++) {
        kiln_imatrix_entry *e = &im->entries[i];
        for (int64_t k = 0; k < e->n * e->n_mat; k++) {
            e->in_sum2[k] *= (float)chunk_size;
            if (e->in_sum) e->in_sum[k] *= (float)chunk_size;
        }
        for (int64_t j = 0; j < e->n_mat; j++) e->counts[j] *= (float)chunk_size;
    }
    im->chunk_size = chunk_size;
}

static int merge_entry(kiln_imatrix *dst, const kiln_imatrix_entry *s, float scale, kiln_err *err) {
    kiln_imatrix_entry *d = (kiln_imatrix_entry *)kiln_imatrix_find(dst, s->name);
    if (!d && !(d = kiln_imatrix_add(dst, s->name, s->n, s->n_mat, s->in_sum != NULL, err))) return -1;
    if (d->n != s->n || d->n_mat != s->n_mat)
        return kiln_fail(err, NULL, s->name, -1, "cannot merge %lld x %lld values into %lld x %lld",
                         (long long)s->n, (long long)s->n_mat, (long long)d->n, (long long)d->n_mat);
    for (int64_t k = 0; k < d->n * d->n_mat; k++) d->in_sum2[k] += s->in_sum2[k] * scale;
    for (int64_t j = 0; j < d->n_mat; j++) d->counts[j] += s->counts[j] * scale;
    if (d->in_sum && s->in_sum) {
        for (int64_t k = 0; k < d->n * d->n_mat; k++) d->in_sum[k] += s->in_sum[k] * scale;
    } else {
        free(d->in_sum);
        d->in_sum = NULL;
    }
    return 0;
}

int kiln_imatrix_merge(kiln_imatrix *dst, const kiln_imatrix *src, kiln_err *err) {
    /* Counts in chunks meet counts in tokens: bring dst to src's unit, and
     * scale src's values on the way in when it is the one in chunks. */
    if (!dst->chunk_size && src->chunk_size) kiln_imatrix_set_chunk_size(dst, src->chunk_size);
    float scale = !src->chunk_size && dst->chunk_size ? (float)dst->chunk_size : 1.0f;
    if (!dst->n_entries && !dst->chunk_size) dst->chunk_size = src->chunk_size;
    for (uint64_t i = 0; i < src->n_entries; i++)
        if (merge_entry(dst, &src->entries[i], scale, err) < 0) return -1;
    for (uint64_t i = 0; i < src->n_datasets; i++)
        if (kiln_imatrix_add_dataset(dst, src->datasets[i], err) < 0) return -1;
    dst->chunk_count += src->chunk_count;
    return 0;
}

int kiln_imatrix_weights(const kiln_imatrix_entry *e, int64_t n_per_row, int64_t n_expert, float *out,
                         int64_t *zero_matrices, kiln_err *err) {
    int64_t total = e->n * e->n_mat;
    *zero_matrices = 0;
    if (n_per_row <= 0 || n_expert <= 0 || total != n_per_row * n_expert)
        return kiln_fail(err, NULL, e->name, -1,
                         "imatrix holds %lld values (%lld x %lld) but the tensor needs %lld (%lld columns x %lld "
                         "experts)",
                         (long long)total, (long long)e->n, (long long)e->n_mat, (long long)(n_per_row * n_expert),
                         (long long)n_per_row, (long long)n_expert);
    int64_t per_count = total / e->n_mat;
    for (int64_t j = 0; j < e->n_mat; j++) {
        float c = e->counts[j];
        const float *s = e->in_sum2 + j * per_count;
        float *o = out + j * per_count;
        if (c > 0) {
            for (int64_t i = 0; i < per_count; i++) o[i] = s[i] / c;
        } else {
            for (int64_t i = 0; i < per_count; i++) o[i] = 1.0f;
        }
    }
    /* A matrix is an expert's slice of n_per_row columns; .dat entries
     * have a single count for all of them. */
    for (int64_t x = 0; x < n_expert; x++)
        if (e->counts[x * n_per_row / per_count] <= 0) (*zero_matrices)++;
    for (int64_t i = 0; i < total; i++)
        if (!isfinite(out[i]))
            return kiln_fail(err, NULL, e->name, -1, "importance weight %lld is not finite", (long long)i);
    return 0;
}
