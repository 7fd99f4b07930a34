/* core/safetensors.c - safetensors reading and validation (safetensors.h).
 *
 * A safetensors file is an 8-byte little-endian header length, a JSON
 * object {name: {dtype, shape, data_offsets: [begin, end]}, __metadata__},
 * then the data; offsets are relative to the end of the header. Checked:
 * the header fits in the file and is valid JSON; every dtype is known;
 * every shape is non-negative with no overflow; end - begin equals shape x
 * dtype size; data stays inside the file; tensors do not overlap. For a
 * sharded model the index's weight_map must agree with the shards. */
#include "safetensors.h"

#include "fp16.h"
#include "strmap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER (256ull << 20)

typedef struct st_priv {
    kiln_strmap index;
} st_priv;

static const struct {
    const char *name;
    uint32_t size;
} DTYPES[KILN_ST_DTYPE_COUNT] = {
    [KILN_ST_F64] = {"F64", 8}, [KILN_ST_F32] = {"F32", 4}, [KILN_ST_F16] = {"F16", 2},
    [KILN_ST_BF16] = {"BF16", 2}, [KILN_ST_I64] = {"I64", 8}, [KILN_ST_I32] = {"I32", 4},
    [KILN_ST_I16] = {"I16", 2}, [KILN_ST_I8] = {"I8", 1}, [KILN_ST_U8] = {"U8", 1},
    [KILN_ST_BOOL] = {"BOOL", 1}, [KILN_ST_F8_E4M3] = {"F8_E4M3", 1}, [KILN_ST_F8_E5M2] = {"F8_E5M2", 1},
    [KILN_ST_F8_E8M0] = {"F8_E8M0", 1},
};

uint32_t kiln_st_dtype_size(kiln_st_dtype d) { return d < KILN_ST_DTYPE_COUNT ? DTYPES[d].size : 0; }
const char *kiln_st_dtype_name(kiln_st_dtype d) { return d < KILN_ST_DTYPE_COUNT ? DTYPES[d].name : "?"; }

static int dtype_from_name(const char *s) {
    for (int i = 0; i < KILN_ST_DTYPE_COUNT; i++)
        if (!strcmp(DTYPES[i].name, s)) return i;
    return -1;
}

static int cmp_offset(const void *a, const void *b) {
    const kiln_st_tensor *x = *(kiln_st_tensor *const *)a, *y = *(kiln_st_tensor *const *)b;
    return x->file_offset < y->file_offset ? -1 : x->file_offset > y->file_offset;
}

int kiln_st_parse_header(const char *json, uint64_t len, uint64_t file_size, const char *fname,
                         uint32_t file_idx, kiln_st_tensor **out, uint64_t *n, kiln_err *err) {
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return kiln_fail(err, fname, "header", 8 + (int64_t)jerr.position, "invalid JSON: %s", jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return kiln_fail(err, fname, "header", 8, "header is not a JSON object");
    }
    uint64_t data_start = 8 + len, data_len = file_size - data_start;
    uint64_t first = *n, count = json_object_size(root);
    kiln_st_tensor *ts = realloc(*out, (first + count + 1) * sizeof *ts);
    if (!ts) {
        json_decref(root);
        return kiln_fail(err, fname, NULL, -1, "out of memory");
    }
    *out = ts;
    const char *key;
    json_t *val;
    int rc = 0;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) continue;
        kiln_st_tensor *t = &ts[*n];
        memset(t, 0, sizeof *t);
        char field[300];
        snprintf(field, sizeof field, "tensor '%.200s'", key);
        json_t *dt = json_object_get(val, "dtype"), *shape = json_object_get(val, "shape");
        json_t *offs = json_object_get(val, "data_offsets");
        if (!json_is_object(val) || !json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs) ||
            json_array_size(offs) != 2) {
            rc = kiln_fail(err, fname, field, 8, "needs dtype, shape and data_offsets [begin, end]");
            break;
        }
        int d = dtype_from_name(json_string_value(dt));
        if (d < 0) {
            rc = kiln_fail(err, fname, field, 8, "unknown dtype '%s'", json_string_value(dt));
            break;
        }
        t->dtype = (kiln_st_dtype)d;
        size_t nd = json_array_size(shape);
        if (nd > KILN_ST_MAX_DIMS) {
            rc = kiln_fail(err, fname, field, 8, "%zu dimensions; at most %d are supported", nd, KILN_ST_MAX_DIMS);
            break;
        }
        t->n_dims = (uint32_t)nd;
        uint64_t nel = 1;
        for (size_t i = 0; i < nd && rc == 0; i++) {
            json_t *dim = json_array_get(shape, i);
            json_int_t v = json_is_integer(dim) ? json_integer_value(dim) : -1;
            if (v < 0) rc = kiln_fail(err, fname, field, 8, "shape[%zu] is not a non-negative integer", i);
            else if (v > 0 && nel > (uint64_t)INT64_MAX / (uint64_t)v / 8)
                rc = kiln_fail(err, fname, field, 8, "element count overflows at shape[%zu]", i);
            t->shape[i] = v;
            nel *= (uint64_t)(v < 0 ? 0 : v);
        }
        if (rc) break;
        t->nelements = (int64_t)nel;
        json_t *b = json_array_get(offs, 0), *e = json_array_get(offs, 1);
        if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
            json_integer_value(e) < json_integer_value(b)) {
            rc = kiln_fail(err, fname, field, 8, "data_offsets must be two integers with 0 <= begin <= end");
            break;
        }
        uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(e);
        t->nbytes = end - begin;
        if (t->nbytes != nel * DTYPES[d].size) {
            rc = kiln_fail(err, fname, field, (int64_t)(data_start + begin),
                           "data_offsets span %llu bytes but shape x %s needs %llu",
                           (unsigned long long)t->nbytes, DTYPES[d].name, (unsigned long long)(nel * DTYPES[d].size));
            break;
        }
        if (end > data_len) {
            rc = kiln_fail(err, fname, field, (int64_t)(data_start + begin),
                           "data [%llu, %llu) extends past the end of the file (%llu data bytes)",
                           (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_len);
            break;
        }
        t->file_offset = data_start + begin;
        t->file = file_idx;
        t->name = strdup(key);
        if (!t->name) {
            rc = kiln_fail(err, fname, field, -1, "out of memory");
            break;
        }
        (*n)++;
    }
    json_decref(root);
    if (rc) return rc;
    /* Overlap check over this file's tensors. */
    uint64_t k = *n - first;
    kiln_st_tensor **sorted = malloc((k + 1) * sizeof *sorted);
    if (!sorted) return kiln_fail(err, fname, NULL, -1, "out of memory");
    for (uint64_t i = 0; i < k; i++) sorted[i] = &ts[first + i];
    qsort(sorted, k, sizeof *sorted, cmp_offset);
    for (uint64_t i = 1; i < k && rc == 0; i++)
        if (sorted[i - 1]->file_offset + sorted[i - 1]->nbytes > sorted[i]->file_offset)
            rc = kiln_fail(err, fname, "data_offsets", (int64_t)sorted[i]->file_offset,
                           "tensor '%s' overlaps tensor '%s'", sorted[i]->name, sorted[i - 1]->name);
    free(sorted);
    return rc;
}

static int map_one(kiln_st *st, const char *path, kiln_err *err) {
    kiln_st_file *files = realloc(st->files, (st->n_files + 1) * sizeof *files);
    if (!files) return kiln_fail(err, path, NULL, -1, "out of memory");
    st->files = files;
    kiln_st_file *f = &files[st->n_files];
    memset(f, 0, sizeof *f);
    f->path = strdup(path);
    if (!f->path) return kiln_fail(err, path, NULL, -1, "out of memory");
    st->n_files++;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kiln_fail(err, path, NULL, -1, "cannot open: %s", strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return kiln_fail(err, path, NULL, -1, "not a regular file");
    }
    f->size = (uint64_t)sb.st_size;
    if (f->size < 8) {
        close(fd);
        return kiln_fail(err, path, "header length", 0, "file truncated: %llu bytes, at least 8 needed",
                         (unsigned long long)f->size);
    }
    void *m = mmap(NULL, f->size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return kiln_fail(err, path, NULL, -1, "cannot map: %s", strerror(errno));
    f->map = m;
    uint64_t hlen;
    memcpy(&hlen, f->map, 8);
    if (hlen > MAX_HEADER || hlen > f->size - 8)
        return kiln_fail(err, path, "header length", 0, "header of %llu bytes does not fit in a %llu-byte file",
                         (unsigned long long)hlen, (unsigned long long)f->size);
    f->header_len = hlen;
    uint64_t before = st->n_tensors;
    if (kiln_st_parse_header((const char *)f->map + 8, hlen, f->size, path, st->n_files - 1, &st->tensors,
                             &st->n_tensors, err) < 0)
        return -1;
    for (uint64_t i = before; i < st->n_tensors; i++) st->tensors[i].data = f->map + st->tensors[i].file_offset;
    return 0;
}

static char *join(const char *dir, const char *name) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    if (p) sprintf(p, "%s/%s", dir, name);
    return p;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Opens every shard named in an index's weight_map (in first-seen order)
 * and checks the map against what the shards hold. */
static int open_index(kiln_st *st, const char *index_path, kiln_err *err) {
    json_error_t jerr;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return kiln_fail(err, index_path, NULL, (int64_t)jerr.position, "invalid JSON: %s", jerr.text);
    json_t *map = json_object_get(root, "weight_map");
    int rc = 0;
    if (!json_is_object(map)) {
        json_decref(root);
        return kiln_fail(err, index_path, "weight_map", -1, "missing or not an object");
    }
    char *dir = strdup(index_path);
    if (!dir) {
        json_decref(root);
        return kiln_fail(err, index_path, NULL, -1, "out of memory");
    }
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else strcpy(dir, ".");
    const char *name;
    json_t *file;
    /* Shards in the order the map first names them, each opened once. */
    json_object_foreach(map, name, file) {
        if (!json_is_string(file)) {
            rc = kiln_fail(err, index_path, "weight_map", -1, "entry '%s' is not a file name", name);
            break;
        }
        const char *fn = json_string_value(file);
        if (strchr(fn, '/') || !strcmp(fn, "..")) {
            rc = kiln_fail(err, index_path, "weight_map", -1, "shard name '%s' must be a plain file name", fn);
            break;
        }
        bool seen = false;
        for (uint32_t i = 0; i < st->n_files && !seen; i++) {
            const char *base = strrchr(st->files[i].path, '/');
            seen = !strcmp(base ? base + 1 : st->files[i].path, fn);
        }
        if (seen) continue;
        char *path = join(dir, fn);
        if (!path) {
            rc = kiln_fail(err, index_path, NULL, -1, "out of memory");
            break;
        }
        struct stat sb;
        if (stat(path, &sb) != 0)
            rc = kiln_fail(err, index_path, "weight_map", -1, "tensor '%s' is in shard %s, which is missing", name, fn);
        else
            rc = map_one(st, path, err);
        free(path);
        if (rc) break;
    }
    if (rc == 0) {
        st_priv *p = st->priv;
        if (kiln_strmap_init(&p->index, st->n_tensors) < 0) rc = kiln_fail(err, index_path, NULL, -1, "out of memory");
        for (uint64_t i = 0; i < st->n_tensors && rc == 0; i++) {
            kiln_st_tensor *t = &st->tensors[i];
            uint64_t prev;
            if (kiln_strmap_put(&p->index, t->name, strlen(t->name), i, &prev) == 0)
                rc = kiln_fail(err, st->files[t->file].path, "tensor", (int64_t)t->file_offset,
                               "tensor '%s' also appears in %s", t->name, st->files[st->tensors[prev].file].path);
            json_t *f = json_object_get(map, t->name);
            const char *base = strrchr(st->files[t->file].path, '/');
            base = base ? base + 1 : st->files[t->file].path;
            if (rc == 0 && !f)
                rc = kiln_fail(err, index_path, "weight_map", -1, "tensor '%s' (in %s) is missing from the index",
                               t->name, base);
            else if (rc == 0 && strcmp(json_string_value(f), base))
                rc = kiln_fail(err, index_path, "weight_map", -1, "tensor '%s' is listed in %s but found in %s",
                               t->name, json_string_value(f), base);
        }
        json_object_foreach(map, name, file) {
            uint64_t idx;
            if (rc == 0 && !kiln_strmap_get(&p->index, name, strlen(name), &idx))
                rc = kiln_fail(err, index_path, "weight_map", -1, "tensor '%s' is not in its shard %s", name,
                               json_string_value(file));
        }
    }
    free(dir);
    json_decref(root);
    return rc;
}

/* A directory: the index if there is one, else the single model file, else
 * every *.safetensors file in name order. */
static int open_dir(kiln_st *st, const char *dir, kiln_err *err) {
    char *idx = join(dir, "model.safetensors.index.json");
    if (!idx) return kiln_fail(err, dir, NULL, -1, "out of memory");
    struct stat sb;
    int rc;
    if (stat(idx, &sb) == 0) {
        rc = open_index(st, idx, err);
        free(idx);
        return rc;
    }
    free(idx);
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort);
    if (n < 0) return kiln_fail(err, dir, NULL, -1, "cannot read directory: %s", strerror(errno));
    rc = 0;
    int found = 0;
    for (int i = 0; i < n; i++) {
        if (rc == 0 && ends_with(list[i]->d_name, ".safetensors")) {
            char *p = join(dir, list[i]->d_name);
            rc = p ? map_one(st, p, err) : kiln_fail(err, dir, NULL, -1, "out of memory");
            free(p);
            found++;
        }
        free(list[i]);
    }
    free(list);
    if (rc == 0 && !found) rc = kiln_fail(err, dir, NULL, -1, "no .safetensors files in this directory");
    return rc;
}

kiln_st *kiln_st_open(const char *path, kiln_err *err) {
    kiln_st *st = calloc(1, sizeof *st);
    st_priv *p = calloc(1, sizeof *p);
    if (!st || !p) {
        free(st);
        free(p);
        kiln_fail(err, path, NULL, -1, "out of memory");
        return NULL;
    }
    st->priv = p;
    struct stat sb;
    int rc;
    if (stat(path, &sb) != 0) rc = kiln_fail(err, path, NULL, -1, "cannot open: %s", strerror(errno));
    else if (S_ISDIR(sb.st_mode)) rc = open_dir(st, path, err);
    else if (ends_with(path, ".json")) rc = open_index(st, path, err);
    else rc = map_one(st, path, err);
    if (rc == 0 && !p->index.cap) {
        if (kiln_strmap_init(&p->index, st->n_tensors) < 0) rc = kiln_fail(err, path, NULL, -1, "out of memory");
        for (uint64_t i = 0; i < st->n_tensors && rc == 0; i++) {
            uint64_t prev;
            if (kiln_strmap_put(&p->index, st->tensors[i].name, strlen(st->tensors[i].name), i, &prev) == 0)
                rc = kiln_fail(err, st->files[st->tensors[i].file].path, "tensor", (int64_t)st->tensors[i].file_offset,
                               "duplicate tensor '%s'", st->tensors[i].name);
        }
    }
    if (rc) {
        kiln_st_close(st);
        return NULL;
    }
    return st;
}

void kiln_st_close(kiln_st *st) {
    if (!st) return;
    for (uint32_t i = 0; i < st->n_files; i++) {
        if (st->files[i].map) munmap((void *)st->files[i].map, st->files[i].size);
        free(st->files[i].path);
    }
    for (uint64_t i = 0; i < st->n_tensors; i++) free(st->tensors[i].name);
    st_priv *p = st->priv;
    if (p) kiln_strmap_free(&p->index);
    free(p);
    free(st->files);
    free(st->tensors);
    free(st);
}

const kiln_st_tensor *kiln_st_find(const kiln_st *st, const char *name) {
    st_priv *p = st->priv;
    uint64_t i;
    if (!kiln_strmap_get(&p->index, name, strlen(name), &i)) return NULL;
    return &st->tensors[i];
}

/* FP8 decoders: sign, exponent and mantissa fields widened exactly to f32.
 * E4M3 ("fn" variant, as in PyTorch/HF): bias 7, no infinities, only
 * S.1111.111 is NaN. E5M2: bias 15, IEEE-like with inf and NaN. */
static float f8_e4m3_to_f32(uint8_t v) {
    uint32_t sign = (uint32_t)(v & 0x80) << 24;
    uint32_t exp = (v >> 3) & 0xf, mant = v & 7;
    if (exp == 0xf && mant == 7) return kiln_bits_f32(sign | 0x7fc00000);
    if (exp == 0) {
        float f = (float)mant * (1.0f / 512.0f); /* mant * 2^-3 * 2^-6 */
        return sign ? -f : f;
    }
    return kiln_bits_f32(sign | ((exp + 120) << 23) | (mant << 20));
}

static float f8_e5m2_to_f32(uint8_t v) {
    return kiln_fp16_to_fp32((uint16_t)v << 8);
}

int kiln_st_to_f32(kiln_st_dtype d, const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    switch (d) {
    case KILN_ST_F32: memcpy(dst, src, (size_t)n * 4); return 0;
    case KILN_ST_F16: kiln_fp16_to_fp32_row(src, dst, n); return 0;
    case KILN_ST_BF16: kiln_bf16_to_fp32_row(src, dst, n); return 0;
    case KILN_ST_F64:
        for (int64_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, s + 8 * i, 8);
            dst[i] = (float)v;
        }
        return 0;
    case KILN_ST_F8_E4M3:
        for (int64_t i = 0; i < n; i++) dst[i] = f8_e4m3_to_f32(s[i]);
        return 0;
    case KILN_ST_F8_E5M2:
        for (int64_t i = 0; i < n; i++) dst[i] = f8_e5m2_to_f32(s[i]);
        return 0;
    case KILN_ST_F8_E8M0:
        /* as llama.cpp's converter decodes it, exp2(b - 127): 255 is +inf there */
        for (int64_t i = 0; i < n; i++) dst[i] = s[i] == 255 ? INFINITY : ldexpf(1.0f, (int)s[i] - 127);
        return 0;
    default: return -1;
    }
}
