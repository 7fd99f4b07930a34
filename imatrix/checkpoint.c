/* imatrix/checkpoint.c - writing and reading the resumable state of an
 * imatrix run (layout and rationale in checkpoint.h). */
#include "checkpoint.h"

#include "../core/types.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKPT_TYPE "kiln.imatrix.checkpoint"
#define CKPT_VERSION 1

static uint64_t fnv(uint64_t h, const void *d, size_t n) {
    const uint8_t *p = d;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

uint64_t kiln_imx_model_hash(const kiln_gguf *g) {
    uint64_t h = fnv(0xcbf29ce484222325ull, &g->n_tensors, sizeof g->n_tensors);
    h = fnv(h, &g->total_size, sizeof g->total_size);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kiln_tensor *t = &g->tensors[i];
        h = fnv(h, t->name.ptr, t->name.len);
        h = fnv(h, &t->type, sizeof t->type);
        h = fnv(h, t->ne, sizeof t->ne);
    }
    return h;
}

static int put_f64(kiln_gguf_writer *w, const char *key, double v, kiln_err *err) {
    kiln_value val = {.type = KILN_GGUF_FLOAT64, .f64 = v};
    return kiln_writer_set(w, key, &val, err);
}

static int declare(kiln_gguf_writer *w, const kiln_imx_acc *a, const char *suffix, uint32_t type, bool per_col,
                   kiln_err *err) {
    char name[1024];
    if (snprintf(name, sizeof name, "%s%s", a->name, suffix) >= (int)sizeof name)
        return kiln_fail(err, NULL, a->name, -1, "tensor name too long");
    int64_t ne[2] = {per_col ? a->n : a->n_mat, a->n_mat};
    return kiln_writer_add_tensor(w, name, type, per_col ? 2 : 1, ne, err);
}

int kiln_imx_ckpt_write(const char *path, const kiln_imx_collector *c, const kiln_imx_ckpt *info, kiln_err *err) {
    kiln_write_opts opts = {.force = true};
    kiln_gguf_writer *w = kiln_writer_new(path, &opts, err);
    if (!w) return -1;
    int rc = kiln_writer_set_str(w, "general.type", CKPT_TYPE, err);
    if (!rc) rc = kiln_writer_set_u32(w, "kiln.checkpoint.version", CKPT_VERSION, err);
    if (!rc) rc = kiln_writer_set_u64(w, "kiln.checkpoint.model_hash", info->model_hash, err);
    if (!rc) rc = kiln_writer_set_u64(w, "kiln.checkpoint.tokens_hash", info->tokens_hash, err);
    if (!rc) rc = kiln_writer_set_u64(w, "kiln.checkpoint.n_ctx", (uint64_t)info->n_ctx, err);
    if (!rc) rc = kiln_writer_set_u64(w, "kiln.checkpoint.chunks_done", (uint64_t)info->chunks_done, err);
    if (!rc) rc = kiln_writer_set_u32(w, "kiln.checkpoint.chunk_base", info->chunk_base, err);
    if (!rc) rc = kiln_writer_set_bool(w, "kiln.checkpoint.process_output", info->process_output, err);
    if (!rc) rc = kiln_writer_set_bool(w, "kiln.checkpoint.with_sum", c->with_sum, err);
    if (!rc) rc = put_f64(w, "kiln.checkpoint.nll", info->nll, err);
    if (!rc) rc = put_f64(w, "kiln.checkpoint.nll2", info->nll2, err);
    if (!rc) rc = kiln_writer_set_u64(w, "kiln.checkpoint.ppl_count", (uint64_t)info->ppl_count, err);
    if (!rc)
        rc = kiln_writer_set_str_arr(w, "imatrix.datasets", (const char *const *)info->datasets, info->n_datasets,
                                     err);
    for (uint64_t i = 0; !rc && i < c->n_acc; i++) {
        const kiln_imx_acc *a = &c->acc[i];
        rc = declare(w, a, ".sum2", KILN_F64, true, err);
        if (!rc) rc = declare(w, a, ".counts", KILN_I64, false, err);
        if (!rc && a->sum) rc = declare(w, a, ".sum", KILN_F64, true, err);
    }
    if (!rc) rc = kiln_writer_begin(w, err);
    for (uint64_t i = 0; !rc && i < c->n_acc; i++) {
        const kiln_imx_acc *a = &c->acc[i];
        size_t nv = (size_t)(a->n * a->n_mat);
        rc = kiln_writer_write(w, a->sum2, nv * sizeof(double), err);
        if (!rc) rc = kiln_writer_write(w, a->counts, (size_t)a->n_mat * sizeof(int64_t), err);
        if (!rc && a->sum) rc = kiln_writer_write(w, a->sum, nv * sizeof(double), err);
    }
    if (rc) {
        kiln_writer_abort(w);
        return -1;
    }
    return kiln_writer_finish(w, err);
}

static const kiln_tensor *part(const kiln_gguf *g, const kiln_str base, const char *suffix) {
    char name[1024];
    if (snprintf(name, sizeof name, "%.*s%s", (int)base.len, base.ptr, suffix) >= (int)sizeof name) return NULL;
    return kiln_gguf_find_tensor(g, name);
}

static int load_entry(const kiln_gguf *g, const kiln_tensor *s2, kiln_imx_collector *c, kiln_err *err) {
    kiln_str base = {s2->name.ptr, s2->name.len - 5};
    char *name = kiln_str_dup(base);
    if (!name) return kiln_fail(err, g->path, NULL, -1, "out of memory");
    const kiln_tensor *cn = part(g, base, ".counts"), *s1 = part(g, base, ".sum");
    int64_t n = s2->ne[0], n_mat = s2->ne[1];
    int rc = 0;
    if (s2->type != KILN_F64 || !cn || cn->type != KILN_I64 || cn->nelements != n_mat ||
        (s1 && (s1->type != KILN_F64 || s1->nelements != s2->nelements)))
        rc = kiln_fail(err, g->path, name, (int64_t)s2->file_offset, "damaged checkpoint entry");
    kiln_imx_acc *a = rc ? NULL : kiln_imx_collector_get(c, name, n, n_mat, err);
    if (!rc && !a) rc = -1;
    if (!rc) {
        memcpy(a->sum2, s2->data, (size_t)s2->nelements * sizeof(double));
        memcpy(a->counts, cn->data, (size_t)n_mat * sizeof(int64_t));
        if (a->sum && s1) memcpy(a->sum, s1->data, (size_t)s1->nelements * sizeof(double));
        else if (a->sum) rc = kiln_fail(err, g->path, name, -1, "the checkpoint has no sums of x");
    }
    free(name);
    return rc;
}

static int get_u64(const kiln_gguf *g, const char *key, uint64_t *v, kiln_err *err) {
    if (!kiln_gguf_get_u64(g, key, v)) return kiln_fail(err, g->path, key, -1, "missing from the checkpoint");
    return 0;
}

static int get_f64(const kiln_gguf *g, const char *key, double *v, kiln_err *err) {
    if (!kiln_gguf_get_f64(g, key, v)) return kiln_fail(err, g->path, key, -1, "missing from the checkpoint");
    return 0;
}

static int read_meta(const kiln_gguf *g, kiln_imx_ckpt *info, kiln_err *err) {
    kiln_str type;
    if (!kiln_gguf_get_str(g, "general.type", &type) || !kiln_str_eq(type, CKPT_TYPE))
        return kiln_fail(err, g->path, "general.type", -1, "not a kiln imatrix checkpoint");
    uint64_t v, n_ctx, done, base, count;
    if (get_u64(g, "kiln.checkpoint.version", &v, err) < 0) return -1;
    if (v != CKPT_VERSION) return kiln_fail(err, g->path, "kiln.checkpoint.version", -1, "unknown version %llu", (unsigned long long)v);
    if (get_u64(g, "kiln.checkpoint.model_hash", &info->model_hash, err) < 0 ||
        get_u64(g, "kiln.checkpoint.tokens_hash", &info->tokens_hash, err) < 0 ||
        get_u64(g, "kiln.checkpoint.n_ctx", &n_ctx, err) < 0 ||
        get_u64(g, "kiln.checkpoint.chunks_done", &done, err) < 0 ||
        get_u64(g, "kiln.checkpoint.chunk_base", &base, err) < 0 ||
        get_u64(g, "kiln.checkpoint.ppl_count", &count, err) < 0 ||
        get_f64(g, "kiln.checkpoint.nll", &info->nll, err) < 0 ||
        get_f64(g, "kiln.checkpoint.nll2", &info->nll2, err) < 0)
        return -1;
    if (!kiln_gguf_get_bool(g, "kiln.checkpoint.process_output", &info->process_output) ||
        !kiln_gguf_get_bool(g, "kiln.checkpoint.with_sum", &info->with_sum))
        return kiln_fail(err, g->path, "kiln.checkpoint.with_sum", -1, "missing from the checkpoint");
    info->n_ctx = (int64_t)n_ctx;
    info->chunks_done = (int64_t)done;
    info->chunk_base = (uint32_t)base;
    info->ppl_count = (int64_t)count;
    const kiln_array *ds = kiln_gguf_get_arr(g, "imatrix.datasets", KILN_GGUF_STRING);
    if (ds && ds->n) {
        if (!(info->datasets = calloc(ds->n, sizeof(char *)))) return kiln_fail(err, g->path, NULL, -1, "out of memory");
        for (uint64_t i = 0; i < ds->n; i++) {
            if (!(info->datasets[i] = kiln_str_dup(ds->strs[i]))) return kiln_fail(err, g->path, NULL, -1, "out of memory");
            info->n_datasets = i + 1;
        }
    }
    return 0;
}

int kiln_imx_ckpt_read(const char *path, kiln_imx_collector *c, kiln_imx_ckpt *info, kiln_err *err) {
    memset(info, 0, sizeof *info);
    kiln_gguf *g = kiln_gguf_open(path, err);
    if (!g) return -1;
    int rc = read_meta(g, info, err);
    for (uint64_t i = 0; !rc && i < g->n_tensors; i++) {
        const kiln_tensor *t = &g->tensors[i];
        if (t->name.len > 5 && !memcmp(t->name.ptr + t->name.len - 5, ".sum2", 5)) rc = load_entry(g, t, c, err);
    }
    kiln_gguf_close(g);
    if (rc) kiln_imx_ckpt_clear(info);
    return rc;
}

void kiln_imx_ckpt_clear(kiln_imx_ckpt *info) {
    for (uint64_t i = 0; i < info->n_datasets; i++) free(info->datasets[i]);
    free(info->datasets);
    info->datasets = NULL;
    info->n_datasets = 0;
}
