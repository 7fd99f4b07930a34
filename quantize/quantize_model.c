/* quantize/quantize_model.c - the streaming model quantizer (see
 * quantize_model.h): plan, validate, then one tensor at a time from the
 * mapped input to the GGUF writer. */
#include "quantize_model.h"

#include "../core/gguf.h"
#include "../core/progress.h"
#include "../core/types.h"
#include "../convert/convert.h"
#include "../imatrix/imatrix_check.h"
#include "../codec/codec.h"
#include "budget.h"

#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- one tensor --------------------------------------------------------- */

/* The first failure among chunks quantized in parallel: the lowest row
 * wins, so the message does not depend on thread timing. */
typedef struct failure {
    int64_t row; /* global row (matrix * nrows + row) */
    kiln_err msg;
} failure;

static void fail_at(failure *f, int64_t row, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail_at(failure *f, int64_t row, const char *fmt, ...) {
    char buf[sizeof f->msg.msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    #pragma omp critical(kiln_quant_failure)
    if (row < f->row) {
        f->row = row;
        kiln_fail(&f->msg, NULL, NULL, -1, "%s", buf);
    }
}

/* Where in rows [0, nr) the first non-finite input is, for the message. */
static bool first_non_finite(const float *x, int64_t nr, int64_t ne0, int64_t *r, int64_t *c) {
    for (int64_t i = 0; i < nr * ne0; i++)
        if (!isfinite(x[i])) {
            *r = i / ne0, *c = i % ne0;
            return true;
        }
    return false;
}

/* Dequantizes rows just written and reports the first that holds a
 * non-finite value: a scale that overflowed fp16, say, would otherwise
 * reach the file unnoticed. Returns the row's index in the chunk, or -1. */
static int64_t bad_output_row(const kiln_codec *c, const uint8_t *y, uint64_t row_bytes, int64_t nr, int64_t ne0,
                              float *row) {
    for (int64_t r = 0; r < nr; r++) {
        c->dequantize_row(y + (uint64_t)r * row_bytes, row, ne0);
        /* an exponent of all ones is Inf or NaN; no early exit, so the
         * loop vectorizes */
        uint32_t bad = 0;
        #pragma omp simd reduction(|:bad)
        for (int64_t j = 0; j < ne0; j++) {
            uint32_t u;
            memcpy(&u, &row[j], sizeof u);
            bad |= (u & 0x7f800000u) == 0x7f800000u;
        }
        if (bad) return r;
    }
    return -1;
}

/* Rows per parallel chunk: at least 8 chunks per thread for balance, at
 * most 64K values so a chunk is still in cache when its output is read
 * back for the check. */
static int64_t chunk_rows(int64_t nrows, int64_t ne0) {
    int64_t per = (nrows + 8 * omp_get_max_threads() - 1) / (8 * omp_get_max_threads());
    int64_t cap = ne0 >= 65536 ? 1 : 65536 / ne0;
    return per < 1 ? 1 : per > cap ? cap : per;
}

/* One tensor's work, cut into chunks of rows over all its matrices. The
 * source rows are f32 (used in place) or another type (F16, BF16, a
 * quantized type) that each chunk converts into its thread's scratch just
 * before quantizing it: no f32 copy of the tensor, no serial conversion
 * pass, and the rows are still in cache when they are quantized. Each row
 * is converted by the same dequantize_row either way, so the bytes do not
 * depend on where the conversion happens. */
typedef struct job {
    uint32_t type;
    const kiln_codec *codec;
    const uint8_t *src;          /* rows of src_row_bytes each */
    const kiln_codec *src_codec; /* NULL: src is f32 */
    uint64_t src_row_bytes;
    const float *w;              /* ne[2] slices of ne0 weights, or NULL */
    uint8_t *dst;
    int64_t ne0, nrows, n_w, per, per_mat, nchunks;
    uint64_t row_bytes;
    failure f;
} job;

/* A thread's scratch: one chunk of converted rows (when the source is
 * not f32) and one row to read the output back into (when it is not f32). */
typedef struct scratch {
    float *rows, *check;
} scratch;

static void scratch_free(scratch *sc) {
    free(sc->rows);
    free(sc->check);
    sc->rows = sc->check = NULL;
}

static bool scratch_alloc(const job *j, scratch *sc) {
    sc->rows = j->src_codec ? malloc((size_t)(j->per * j->ne0) * sizeof(float)) : NULL;
    sc->check = j->type != KILN_F32 ? malloc((size_t)j->ne0 * sizeof(float)) : NULL;
    if ((j->src_codec && !sc->rows) || (j->type != KILN_F32 && !sc->check)) {
        scratch_free(sc);
        return false;
    }
    return true;
}

/* Quantizes chunk ci (converting its rows first when the source is not
 * f32), then reads it back while it is still in cache. */
static void quantize_chunk(job *j, int64_t ci, scratch *sc) {
    int64_t m = ci / j->per_mat, r0 = (ci % j->per_mat) * j->per, rr, cc;
    int64_t nr = j->nrows - r0 < j->per ? j->nrows - r0 : j->per, g = m * j->nrows + r0;
    const uint8_t *in = j->src + (uint64_t)g * j->src_row_bytes;
    const float *x = (const float *)in;
    if (j->src_codec) {
        for (int64_t r = 0; r < nr; r++)
            j->src_codec->dequantize_row(in + (uint64_t)r * j->src_row_bytes, sc->rows + r * j->ne0, j->ne0);
        x = sc->rows;
    }
    uint8_t *y = j->dst + (uint64_t)g * j->row_bytes;
    kiln_err inner = {{0}};
    if (!kiln_quantize_rows(j->type, x, y, nr, j->ne0, j->w ? j->w + (m % j->n_w) * j->ne0 : NULL, &inner)) {
        if (first_non_finite(x, nr, j->ne0, &rr, &cc))
            fail_at(&j->f, g + rr, "row %lld column %lld is %s; refusing to quantize", (long long)(r0 + rr),
                    (long long)cc, isnan(x[rr * j->ne0 + cc]) ? "NaN" : "infinite");
        else
            fail_at(&j->f, g, "%s", inner.msg);
        return;
    }
    int64_t bad = sc->check ? bad_output_row(j->codec, y, j->row_bytes, nr, j->ne0, sc->check) : -1;
    if (bad >= 0)
        fail_at(&j->f, g + bad, "row %lld reads back as NaN/Inf as %s; refusing to write it", (long long)(r0 + bad),
                kiln_type_name(j->type));
}

int64_t kiln_quantize_tensor_from(uint32_t type, uint32_t src_type, const void *src, void *dst, const int64_t ne[4],
                                  const kiln_imatrix_entry *imatrix, int64_t *zero_experts, kiln_err *err) {
    const int64_t groups = imatrix && ne[2] * ne[3] == 1 ? kiln_imatrix_row_groups(imatrix, ne, 2) : 1;
    if (groups > 1) { /* a grouped 2-D weight: its row groups as matrices, each with its columns' weights */
        const int64_t as_groups[4] = {ne[0], ne[1] / groups, groups, 1};
        return kiln_quantize_tensor_from(type, src_type, src, dst, as_groups, imatrix, zero_experts, err);
    }
    int64_t ne0 = ne[0], nrows = ne[1], n_mat = ne[2] * ne[3], zero = 0;
    if (zero_experts) *zero_experts = 0;
    if (ne0 <= 0 || nrows <= 0 || n_mat <= 0) return 0;
    const kiln_codec *c = kiln_codec_get(type);
    if (!c || !c->quantize) return kiln_fail(err, NULL, NULL, -1, "kiln cannot quantize to %s", kiln_type_name(type));
    const kiln_codec *src_codec = NULL;
    if (src_type != KILN_F32) {
        src_codec = kiln_codec_get(src_type);
        if (!src_codec || !src_codec->dequantize_row || ne0 % kiln_type_get(src_type)->block_size)
            return kiln_fail(err, NULL, NULL, -1, "kiln cannot read %s rows of %lld values", kiln_type_name(src_type),
                             (long long)ne0);
    }
    float *w = NULL;
    if (imatrix && (!(w = malloc((size_t)(ne0 * ne[2]) * sizeof(float))) ||
                    kiln_imatrix_weights(imatrix, ne0, ne[2], w, &zero, err) < 0)) {
        if (!w) kiln_fail(err, NULL, NULL, -1, "out of memory");
        free(w);
        return -1;
    }
    int64_t per = chunk_rows(nrows, ne0);
    job j = {type, c, src, src_codec, kiln_type_row_bytes(src_type, (uint64_t)ne0), w, dst, ne0, nrows, ne[2], per,
             (nrows + per - 1) / per, 0, kiln_type_row_bytes(type, (uint64_t)ne0), {.row = INT64_MAX}};
    j.nchunks = j.per_mat * n_mat;
    scratch main_sc;
    if (!scratch_alloc(&j, &main_sc)) {
        free(w);
        return kiln_fail(err, NULL, NULL, -1, "out of memory");
    }
    /* The first chunk runs alone and is timed: waking threads costs more
     * than a small tensor's whole work (and much more on a busy machine,
     * where a descheduled thread stalls every join), so the rest runs in
     * parallel only when it would take over a millisecond. (Outside a
     * parallel region kiln_quantize_rows may split a chunk of more than
     * 16 rows over the threads itself.) */
    double t0 = kiln_now();
    quantize_chunk(&j, 0, &main_sc);
    if ((kiln_now() - t0) * (double)(j.nchunks - 1) <= 1e-3) {
        for (int64_t ci = 1; ci < j.nchunks; ci++) quantize_chunk(&j, ci, &main_sc);
    } else {
        /* kiln_quantize_rows runs single-threaded inside this region
         * (OpenMP does not nest by default): chunks are the unit of work. */
        #pragma omp parallel
        {
            scratch mine = {0};
            bool ok = scratch_alloc(&j, &mine);
            if (!ok) fail_at(&j.f, -1, "out of memory");
            #pragma omp for schedule(dynamic, 1)
            for (int64_t ci = 1; ci < j.nchunks; ci++)
                if (ok) quantize_chunk(&j, ci, &mine);
            scratch_free(&mine);
        }
    }
    free(w);
    scratch_free(&main_sc);
    if (j.f.row != INT64_MAX) {
        if (n_mat > 1 && j.f.row >= 0)
            return kiln_fail(err, NULL, NULL, -1, "expert %lld: %s", (long long)(j.f.row / nrows), j.f.msg.msg);
        return kiln_fail(err, NULL, NULL, -1, "%s", j.f.msg.msg);
    }
    if (zero_experts) *zero_experts = zero;
    return (int64_t)(j.row_bytes * (uint64_t)(nrows * n_mat));
}

int64_t kiln_quantize_tensor(uint32_t type, const float *src, void *dst, const int64_t ne[4],
                             const kiln_imatrix_entry *imatrix, int64_t *zero_experts, kiln_err *err) {
    return kiln_quantize_tensor_from(type, KILN_F32, src, dst, ne, imatrix, zero_experts, err);
}

/* ---- the report --------------------------------------------------------- */

/* Puts "FILE: FIELD: " in front of a message a lower layer left in err. */
static int prefix_err(kiln_err *err, const char *file, const char *field) {
    if (!err) return -1;
    kiln_err inner = *err;
    return kiln_fail(err, file, field, -1, "%s", inner.msg);
}

static void warn(kiln_quant_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(kiln_quant_report *r, const char *fmt, ...) {
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    char **grown = n >= 0 ? realloc(r->warnings, (r->n_warnings + 1) * sizeof *grown) : NULL;
    if (!grown) {
        free(n >= 0 ? s : NULL);
        return; /* a lost warning must not fail the run */
    }
    r->warnings = grown;
    r->warnings[r->n_warnings++] = s;
}

void kiln_quant_report_free(kiln_quant_report *r) {
    for (uint64_t i = 0; i < r->n_tensors; i++) free(r->tensors[i].name);
    for (uint32_t i = 0; i < r->n_warnings; i++) free(r->warnings[i]);
    for (uint32_t i = 0; i < r->n_outputs; i++) free(r->outputs[i]);
    free(r->tensors);
    free(r->warnings);
    free(r->outputs);
    free(r->input);
    memset(r, 0, sizeof *r);
}

double kiln_quant_bpw(const kiln_quant_report *r, uint64_t bytes) {
    return r->n_elements ? (double)bytes * 8.0 / (double)r->n_elements : 0;
}

/* ---- the input: a GGUF, or a Hugging Face model read through convert --- */

typedef struct src_tensor {
    char *name;
    uint32_t type, n_dims, shard;
    int64_t ne[4], nelements;
    uint64_t nbytes, offset;
    const uint8_t *data; /* GGUF: the mapped bytes */
    uint64_t hf_index;   /* HF: the convert plan's index */
} src_tensor;

typedef struct source {
    const char *path;
    kiln_gguf *g;        /* GGUF input */
    kiln_hf_model *hf;   /* Hugging Face input */
    kiln_gguf *kv;       /* the metadata: g, or the HF model's keys as a tensorless GGUF */
    uint64_t n;
    src_tensor *t;       /* in file (convert plan) order */
} source;

static void source_close(source *s) {
    for (uint64_t i = 0; s->t && i < s->n; i++) free(s->t[i].name);
    free(s->t);
    if (s->kv != s->g) kiln_gguf_close(s->kv);
    kiln_gguf_close(s->g);
    kiln_hf_close(s->hf);
    memset(s, 0, sizeof *s);
}

static bool is_gguf_file(const char *path) {
    struct stat st;
    char magic[4];
    if (stat(path, &st) != 0) return true; /* let the GGUF reader say what is wrong */
    if (!S_ISREG(st.st_mode)) return false;
    FILE *f = fopen(path, "rb");
    bool gguf = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    if (f) fclose(f);
    return gguf || !f;
}

static int open_gguf(source *s, kiln_err *err) {
    if (!(s->g = kiln_gguf_open(s->path, err))) return -1;
    s->kv = s->g;
    s->n = s->g->n_tensors;
    if (!(s->t = calloc(s->n + 1, sizeof *s->t))) return kiln_fail(err, s->path, NULL, -1, "out of memory");
    for (uint64_t i = 0; i < s->n; i++) {
        const kiln_tensor *t = &s->g->tensors[i];
        src_tensor *d = &s->t[i];
        *d = (src_tensor){kiln_str_dup(t->name), t->type, t->n_dims, t->shard, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]},
                          t->nelements, t->nbytes, t->offset, t->data, 0};
        if (!d->name) return kiln_fail(err, s->path, NULL, -1, "out of memory");
    }
    return 0;
}

static int open_hf(source *s, kiln_err *err) {
    kiln_convert_opts co = {.outtype = KILN_OUT_AUTO};
    if (!(s->hf = kiln_hf_open(s->path, &co, err))) return -1;
    /* The metadata `kiln convert` would write, read back as from a GGUF
     * input: the policy then sees the same keys and hyperparameters. */
    if (!(s->kv = kiln_hf_metadata(s->hf, err))) return -1;
    s->n = kiln_hf_n_tensors(s->hf);
    if (!(s->t = calloc(s->n + 1, sizeof *s->t))) return kiln_fail(err, s->path, NULL, -1, "out of memory");
    for (uint64_t i = 0; i < s->n; i++) {
        kiln_hf_tensor h;
        kiln_hf_tensor_info(s->hf, i, &h);
        src_tensor *d = &s->t[i];
        *d = (src_tensor){strdup(h.name), h.type, h.n_dims ? h.n_dims : 1, 0, {h.ne[0], h.ne[1], h.ne[2], h.ne[3]},
                          h.ne[0] * h.ne[1] * h.ne[2] * h.ne[3], h.nbytes, i, NULL, i};
        if (!d->name) return kiln_fail(err, s->path, NULL, -1, "out of memory");
    }
    return 0;
}

static int source_open(source *s, const char *path, kiln_err *err) {
    memset(s, 0, sizeof *s);
    s->path = path;
    int rc = is_gguf_file(path) ? open_gguf(s, err) : open_hf(s, err);
    if (rc < 0) source_close(s);
    return rc;
}

static uint32_t source_shards(const source *s) {
    return s->g ? s->g->n_shards : 1;
}

/* Tensor t's rows as quantize_tensor_from() takes them: a GGUF tensor's
 * mapped bytes in its own type (each chunk converts its rows), a Hugging
 * Face tensor read by convert as f32 into dst (the HF reader streams, so it
 * is read before the parallel work starts). NULL with a message. */
static const void *source_rows(const source *s, const src_tensor *t, float *dst, uint32_t *type, kiln_err *err) {
    if (s->g) {
        *type = t->type;
        return t->data;
    }
    *type = KILN_F32;
    return kiln_hf_read_f32(s->hf, t->hf_index, 0, t->nelements / t->ne[0], dst, err) < 0 ? NULL : dst;
}

/* Asks the kernel to start reading tensor t's mapped bytes (the next one
 * to be quantized) while the current one is worked on: a cold page cache
 * then costs disk time in the background, not page faults in the
 * quantizing threads. Only advice: a failure changes nothing. */
static void source_prefetch(const source *s, const src_tensor *t) {
    if (!s->g || !t->nbytes) return;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return;
    uintptr_t a = (uintptr_t)t->data & ~((uintptr_t)page - 1);
    (void)madvise((void *)a, (uintptr_t)t->data + t->nbytes - a, MADV_WILLNEED);
}

static int source_copy(const source *s, const src_tensor *t, kiln_gguf_writer *w, kiln_err *err) {
    return s->hf ? kiln_hf_write_tensor(s->hf, t->hf_index, w, err) : kiln_writer_write(w, t->data, t->nbytes, err);
}

/* Lets go of a tensor's input once it is written, so resident memory stays
 * near one tensor however large the model: the kernel gets the mapped
 * pages back, convert its buffers and archive spool space. */
static void source_done(const source *s, const src_tensor *t) {
    if (s->hf) {
        kiln_hf_tensor_done(s->hf, t->hf_index);
        return;
    }
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)t->data + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t b = ((uintptr_t)t->data + t->nbytes) & ~((uintptr_t)page - 1);
    if (page > 0 && b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

/* ---- planning ------------------------------------------------------------ */

static uint32_t meta_u32(const kiln_gguf *g, const char *arch, const char *key, uint32_t dflt) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    uint64_t v;
    if (kiln_gguf_get_u64(g, k, &v)) return (uint32_t)v;
    /* per-layer arrays (e.g. head_count_kv): layer 0 decides, as in llama.cpp's n_gqa() */
    const kiln_kv *kv = kiln_gguf_find_kv(g, k);
    if (kv && kv->val.type == KILN_GGUF_ARRAY && kv->val.arr.n > 0 && kv->val.arr.type != KILN_GGUF_STRING &&
        kv->val.arr.type != KILN_GGUF_ARRAY)
        return (uint32_t)kiln_array_i64(&kv->val.arr, 0);
    return dflt;
}

static void model_info(const kiln_gguf *g, kiln_policy_model *m) {
    memset(m, 0, sizeof *m);
    kiln_str a;
    if (kiln_gguf_get_str(g, "general.architecture", &a))
        snprintf(m->arch, sizeof m->arch, "%.*s", (int)(a.len < 63 ? a.len : 63), a.ptr);
    m->n_layer = meta_u32(g, m->arch, "block_count", 0);
    m->n_head = meta_u32(g, m->arch, "attention.head_count", 0);
    m->n_head_kv = meta_u32(g, m->arch, "attention.head_count_kv", m->n_head);
    m->n_expert = meta_u32(g, m->arch, "expert_count", 0);
}

typedef struct order_key {
    int layer;
    const src_tensor *t;
} order_key;

static int by_layer_then_name(const void *pa, const void *pb) {
    const order_key *a = pa, *b = pb;
    if (a->layer != b->layer) return a->layer < b->layer ? -1 : 1;
    return strcmp(a->t->name, b->t->name);
}

static int by_shard_then_offset(const void *pa, const void *pb) {
    const order_key *a = pa, *b = pb;
    if (a->t->shard != b->t->shard) return a->t->shard < b->t->shard ? -1 : 1;
    return a->t->offset < b->t->offset ? -1 : a->t->offset > b->t->offset;
}

/* llama-quantize visits tensors by layer number, then name (its loader's
 * weight map order), or by input shard and offset with --keep-split; the
 * layer counters of the mix rules follow that order. Returns indexes into
 * s->t, or NULL when out of memory. */
static uint64_t *visiting_order(const source *s, bool keep_split) {
    order_key *k = malloc((s->n + 1) * sizeof *k);
    uint64_t *out = malloc((s->n + 1) * sizeof *out);
    if (!k || !out) {
        free(k);
        free(out);
        return NULL;
    }
    for (uint64_t i = 0; i < s->n; i++) {
        k[i] = (order_key){-1, &s->t[i]};
        if (sscanf(s->t[i].name, "blk.%d.", &k[i].layer) != 1) k[i].layer = -1;
    }
    qsort(k, s->n, sizeof *k, keep_split ? by_shard_then_offset : by_layer_then_name);
    for (uint64_t i = 0; i < s->n; i++) out[i] = (uint64_t)(k[i].t - s->t);
    free(k);
    return out;
}

/* Plans in visiting order; the report lists tensors in `write` order. */
static int plan_model(const source *s, const uint64_t *visit, const uint64_t *write, const kiln_quant_opts *o,
                      kiln_quant_report *r, kiln_err *err) {
    uint64_t n = s->n;
    kiln_policy_tensor *pt = calloc(n + 1, sizeof *pt);
    kiln_tensor_plan *plan = calloc(n + 1, sizeof *plan), *by_src = calloc(n + 1, sizeof *by_src);
    r->tensors = calloc(n + 1, sizeof *r->tensors);
    int rc = pt && plan && by_src && r->tensors ? 0 : kiln_fail(err, s->path, NULL, -1, "out of memory");
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        const src_tensor *t = &s->t[visit[i]];
        pt[i] = (kiln_policy_tensor){t->name, t->n_dims, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}, t->type};
    }
    kiln_policy_model m;
    model_info(s->kv, &m);
    kiln_policy_opts po = {o->target, o->pure, o->output_type, o->token_embd_type, o->overrides, o->n_overrides,
                           o->imatrix != NULL};
    if (rc == 0 && kiln_policy_plan(&m, pt, n, &po, plan, err) < 0) rc = prefix_err(err, s->path, NULL);
    for (uint64_t i = 0; rc == 0 && i < n; i++) by_src[visit[i]] = plan[i];
    for (uint64_t i = 0; rc == 0 && i < n; i++) {
        const src_tensor *t = &s->t[write[i]];
        kiln_quant_tensor *q = &r->tensors[i];
        if (!(q->name = strdup(t->name))) rc = kiln_fail(err, s->path, NULL, -1, "out of memory");
        r->n_tensors = i + 1;
        q->n_dims = t->n_dims;
        memcpy(q->ne, t->ne, sizeof q->ne);
        q->plan = by_src[write[i]];
        q->bytes_in = t->nbytes;
        q->bytes_out = kiln_type_row_bytes(q->plan.to, (uint64_t)q->ne[0]) * (uint64_t)(t->nelements / q->ne[0]);
        r->n_elements += (uint64_t)t->nelements;
        r->bytes_in += q->bytes_in;
        r->bytes_out += q->bytes_out;
        r->n_quantized += q->plan.to != q->plan.from;
        r->n_fallbacks += q->plan.fallback;
    }
    free(pt);
    free(plan);
    free(by_src);
    return rc;
}

/* ---- validation: everything that can be refused is refused before any
 * file is created ---------------------------------------------------------- */

static bool is_float_type(uint32_t t) {
    return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16;
}

static int check_imatrix(const char *in, kiln_quant_tensor *q, const kiln_quant_opts *o, kiln_quant_report *r,
                         kiln_err *err) {
    const kiln_imatrix_entry *e = o->imatrix ? kiln_imatrix_find(o->imatrix, q->name) : NULL;
    bool embd = !strcmp(q->name, "token_embd.weight"), output = !strcmp(q->name, "output.weight");
    if (q->plan.needs_imatrix && !e) {
        const char *what = o->imatrix ? "the imatrix has no entry for it" : "no --imatrix was given";
        if (o->dry_run) {
            warn(r, "%s: %s needs an importance matrix and %s; a real run refuses this", q->name,
                 kiln_type_name(q->plan.to), what);
            return 0;
        }
        return kiln_fail(err, in, q->name, -1,
                         "%s%s needs an importance matrix and %s: at about 2 bits per weight an unweighted fit "
                         "spends its few levels on columns that barely matter (llama-quantize refuses this too); "
                         "compute one with llama-imatrix or kiln imatrix and pass --imatrix FILE",
                         kiln_type_name(q->plan.to), q->plan.to == KILN_Q2_K ? " (in the Q2_K_S mix)" : "", what);
    }
    if (!e) {
        /* imatrix files never hold token_embd and output: not worth a word;
         * nor is a type whose quantizer takes no importance weights */
        if (o->imatrix && !embd && !output && q->plan.to != KILN_Q8_0 && !is_float_type(q->plan.to))
            warn(r, "%s: no imatrix entry; quantized to %s without importance weights", q->name,
                 kiln_type_name(q->plan.to));
        return 0;
    }
    if (e->n * e->n_mat != q->ne[0] * q->ne[2] && kiln_imatrix_row_groups(e, q->ne, q->n_dims) == 1) {
        /* llama.cpp ignores a token_embd mismatch (old imatrix files carry
         * one of another shape) and refuses every other. */
        if (embd) {
            warn(r, "%s: imatrix entry has %lld values, tensor needs %lld; quantized without it", q->name,
                 (long long)(e->n * e->n_mat), (long long)(q->ne[0] * q->ne[2]));
            return 0;
        }
        return kiln_fail(err, o->imatrix_path, q->name, -1,
                         "imatrix entry has %lld values (%lld x %lld) but the tensor needs %lld (%lld columns x %lld "
                         "experts); was the imatrix made for another model?",
                         (long long)(e->n * e->n_mat), (long long)e->n, (long long)e->n_mat,
                         (long long)(q->ne[0] * q->ne[2]), (long long)q->ne[0], (long long)q->ne[2]);
    }
    q->imatrix = true;
    return 0;
}

/* An imatrix for another model is refused as a whole, before any tensor:
 * names it does not share would otherwise pass as "no entry" warnings
 * and the tensors it does share would be weighted by chance. */
/* An imatrix with entries for some of the model's layers but none for
 * another was collected on a different (e.g. shallower) model: every
 * calibration token passes through every layer. */
static int check_imatrix_layers(const char *in, const kiln_quant_opts *o, const kiln_quant_report *r,
                                kiln_err *err) {
    int64_t n_layers = 0;
    for (uint64_t j = 0; j < r->n_tensors; j++) {
        const int64_t l = kiln_tensor_layer(r->tensors[j].name);
        if (l >= n_layers) n_layers = l + 1;
    }
    bool *covered = calloc((size_t)n_layers + 1, 1);
    if (!covered) return kiln_fail(err, in, NULL, -1, "out of memory");
    int64_t n_covered = 0;
    for (uint64_t i = 0; i < o->imatrix->n_entries; i++) {
        const int64_t l = kiln_tensor_layer(o->imatrix->entries[i].name);
        if (l >= 0 && l < n_layers && !covered[l]) covered[l] = true, n_covered++;
    }
    int64_t missing = -1;
    for (uint64_t j = 0; j < r->n_tensors && missing < 0; j++) {
        const int64_t l = kiln_tensor_layer(r->tensors[j].name);
        if (l >= 0 && !covered[l] && r->tensors[j].n_dims >= 2) missing = l;
    }
    free(covered);
    if (n_covered == 0 || missing < 0) return 0;
    return kiln_fail(err, o->imatrix_path, NULL, -1,
                     "has entries for %lld of the %lld layers of %s and none for blk.%lld: it was made for "
                     "another model",
                     (long long)n_covered, (long long)n_layers, in, (long long)missing);
}

static int check_imatrix_model(const char *in, const kiln_quant_opts *o, const kiln_quant_report *r, kiln_err *err) {
    for (uint64_t i = 0; o->imatrix && i < o->imatrix->n_entries; i++) {
        const kiln_imatrix_entry *e = &o->imatrix->entries[i];
        const kiln_quant_tensor *q = NULL;
        for (uint64_t j = 0; j < r->n_tensors && !q; j++)
            if (!strcmp(r->tensors[j].name, e->name)) q = &r->tensors[j];
        if (q && !strcmp(q->name, "token_embd.weight")) continue; /* see check_imatrix */
        if (kiln_imatrix_check_entry(e, o->imatrix_path, in, q ? q->ne : NULL, q ? q->n_dims : 0, err) < 0)
            return -1;
    }
    return o->imatrix ? check_imatrix_layers(in, o, r, err) : 0;
}

static int validate(const char *in, const kiln_quant_opts *o, kiln_quant_report *r, kiln_err *err) {
    if (check_imatrix_model(in, o, r, err) < 0) return -1;
    for (uint64_t i = 0; i < r->n_tensors; i++) {
        kiln_quant_tensor *q = &r->tensors[i];
        const kiln_tensor_plan *p = &q->plan;
        if (p->fallback && o->no_fallback)
            return kiln_fail(err, in, q->name, -1,
                             "row length %lld is not a multiple of %s's block size %u; it would fall back to %s "
                             "(--no-fallback)",
                             (long long)q->ne[0], kiln_type_name(p->wanted), kiln_type_get(p->wanted)->block_size,
                             kiln_type_name(p->to));
        if (p->unfit)
            return kiln_fail(err, in, q->name, -1,
                             "row length %lld is not a multiple of %s's block size %u, and llama.cpp defines no "
                             "fallback type for %s (llama-quantize refuses this too)",
                             (long long)q->ne[0], kiln_type_name(p->wanted), kiln_type_get(p->wanted)->block_size,
                             kiln_type_name(p->wanted));
        if (p->to == p->from) continue;
        if (!is_float_type(p->from) && !o->allow_requantize)
            return kiln_fail(err, in, q->name, -1,
                             "is already quantized (%s); requantizing compounds two rounding errors, so quantize "
                             "from the F32/F16/BF16 original, or pass --allow-requantize",
                             kiln_type_name(p->from));
        if (!kiln_can_dequantize(p->from))
            return kiln_fail(err, in, q->name, -1, "kiln cannot read type %s", kiln_type_name(p->from));
        if (!kiln_can_quantize(p->to))
            return kiln_fail(err, in, q->name, -1, "kiln cannot quantize to %s", kiln_type_name(p->to));
        if (check_imatrix(in, q, o, r, err) < 0) return -1;
    }
    return 0;
}

/* ---- output --------------------------------------------------------------- */

typedef struct outputs {
    kiln_gguf_writer **w;
    uint32_t n;
} outputs;

static void outputs_abort(outputs *os) {
    for (uint32_t i = 0; i < os->n; i++) kiln_writer_abort(os->w[i]);
    free(os->w);
    os->w = NULL;
    os->n = 0;
}

static int set_imatrix_keys(kiln_gguf_writer *w, const kiln_quant_opts *o, kiln_err *err) {
    const kiln_imatrix *im = o->imatrix;
    if (kiln_writer_set_str(w, "quantize.imatrix.file", o->imatrix_path ? o->imatrix_path : "", err) < 0) return -1;
    if (im->n_datasets && kiln_writer_set_str(w, "quantize.imatrix.dataset", im->datasets[0], err) < 0) return -1;
    if (kiln_writer_set_u32(w, "quantize.imatrix.entries_count", (uint32_t)im->n_entries, err) < 0) return -1;
    if (im->chunk_count && kiln_writer_set_u32(w, "quantize.imatrix.chunks_count", im->chunk_count, err) < 0)
        return -1;
    return 0;
}

/* What a budget run was given and found (README, "Quantizing to a size
 * budget"). Every value has a fixed size whatever the allocation, so the
 * file size computed before allocating holds after it. */
static int set_budget_keys(kiln_gguf_writer *w, const kiln_quant_opts *o, const kiln_quant_report *r,
                           kiln_err *err) {
    const kiln_sensitivity *sn = o->sensitivity;
    const char *base = strrchr(o->sensitivity_path, '/');
    base = base ? base + 1 : o->sensitivity_path;
    int rc = o->target_size ? kiln_writer_set_u64(w, "kiln.quantize.target_size", o->target_size, err)
                            : kiln_writer_set_f32(w, "kiln.quantize.target_bpw", (float)o->target_bpw, err);
    if (rc == 0) rc = kiln_writer_set_u64(w, "kiln.quantize.budget_bytes", r->budget_bytes, err);
    if (rc == 0) rc = kiln_writer_set_str(w, "kiln.quantize.sensitivity", base, err);
    if (rc == 0) rc = kiln_writer_set_str(w, "kiln.quantize.sensitivity.layout_xxh64", sn->layout_xxh64, err);
    if (rc == 0) rc = kiln_writer_set_str(w, "kiln.quantize.sensitivity.text", sn->text, err);
    if (rc == 0) rc = kiln_writer_set_u64(w, "kiln.quantize.sensitivity.n_tokens", (uint64_t)sn->n_tokens, err);
    if (rc == 0) rc = kiln_writer_set_f32(w, "kiln.quantize.estimated_kld", (float)r->estimated_kld, err);
    return rc;
}

/* The input's keys, then what llama-quantize sets: it removes and re-adds
 * these two, so they move to the end; then the imatrix's keys and a
 * budget run's. */
static int set_metadata(kiln_gguf_writer *w, const kiln_gguf *g, const kiln_quant_opts *o,
                        const kiln_quant_report *r, kiln_err *err) {
    if (kiln_writer_copy_kv(w, g, err) < 0) return -1;
    kiln_writer_remove(w, "general.quantization_version");
    kiln_writer_remove(w, "general.file_type");
    if (kiln_writer_set_u32(w, "general.quantization_version", 2, err) < 0 ||
        kiln_writer_set_u32(w, "general.file_type", r->ftype, err) < 0)
        return -1;
    if (o->imatrix && set_imatrix_keys(w, o, err) < 0) return -1;
    return o->sensitivity ? set_budget_keys(w, o, r, err) : 0;
}

static int set_split_keys(kiln_gguf_writer *w, uint32_t no, uint32_t count, uint64_t n_tensors, kiln_err *err) {
    kiln_value vno = {.type = KILN_GGUF_UINT16, .u16 = (uint16_t)no};
    kiln_value vcount = {.type = KILN_GGUF_UINT16, .u16 = (uint16_t)count};
    kiln_value vtotal = {.type = KILN_GGUF_INT32, .i32 = (int32_t)n_tensors};
    if (kiln_writer_set(w, "split.no", &vno, err) < 0 || kiln_writer_set(w, "split.count", &vcount, err) < 0)
        return -1;
    return kiln_writer_set(w, "split.tensors.count", &vtotal, err);
}

/* One writer, split by size or not at all; or with keep_split one writer
 * per input shard, named the way llama-gguf-split names shards, the first
 * with all metadata (as llama-quantize --keep-split writes them). */
static int open_outputs(const source *s, const char *out, const kiln_quant_opts *o, const kiln_quant_report *r,
                        const uint64_t *write, outputs *os, kiln_err *err) {
    uint32_t n_in = source_shards(s), n = o->keep_split ? n_in : 1;
    const char **inputs = calloc(n_in + 1, sizeof *inputs);
    if (!inputs) return kiln_fail(err, out, NULL, -1, "out of memory");
    inputs[0] = s->path;
    for (uint32_t k = 0; s->g && k < n_in; k++) inputs[k + 1] = s->g->shards[k].path;
    kiln_write_opts wo = {.split_max_size = o->split_max_size, .force = o->force, .inputs = inputs,
                          .n_inputs = s->g ? (int)n_in + 1 : 1};
    os->w = calloc(n, sizeof *os->w);
    int rc = os->w ? 0 : kiln_fail(err, out, NULL, -1, "out of memory");
    size_t len = strlen(out);
    int base = (int)(len > 5 && !strcmp(out + len - 5, ".gguf") ? len - 5 : len);
    for (uint32_t k = 0; rc == 0 && k < n; k++) {
        char *name = NULL;
        if (n == 1) name = strdup(out);
        else if (asprintf(&name, "%.*s-%05u-of-%05u.gguf", base, out, k + 1, n) < 0) name = NULL;
        os->w[k] = name ? kiln_writer_new(name, &wo, err) : NULL;
        if (!name) rc = kiln_fail(err, out, NULL, -1, "out of memory");
        else if (!os->w[k]) rc = -1;
        else os->n = k + 1;
        free(name);
        if (rc == 0 && k == 0) rc = set_metadata(os->w[0], s->kv, o, r, err);
        if (rc == 0 && n > 1) rc = set_split_keys(os->w[k], k, n, r->n_tensors, err);
    }
    for (uint64_t i = 0; rc == 0 && i < r->n_tensors; i++) {
        const kiln_quant_tensor *q = &r->tensors[i];
        rc = kiln_writer_add_tensor(os->w[n > 1 ? s->t[write[i]].shard : 0], q->name, q->plan.to, q->n_dims, q->ne,
                                    err);
    }
    for (uint32_t k = 0; rc == 0 && k < n; k++) rc = kiln_writer_begin(os->w[k], err);
    free(inputs);
    return rc;
}

typedef struct buffers {
    float *f32;
    uint8_t *q;
} buffers;

/* Buffers for the largest conversion; f32 only for a Hugging Face input
 * (a GGUF's rows are converted chunk by chunk in the threads' scratch). */
static int alloc_buffers(const source *s, const kiln_quant_report *r, const uint64_t *write, buffers *b,
                         kiln_err *err) {
    uint64_t max_f32 = 0, max_q = 0;
    for (uint64_t i = 0; i < r->n_tensors; i++) {
        const kiln_quant_tensor *q = &r->tensors[i];
        const src_tensor *t = &s->t[write[i]];
        if (q->plan.to == q->plan.from) continue;
        if (s->hf && (uint64_t)t->nelements > max_f32) max_f32 = (uint64_t)t->nelements;
        if (q->bytes_out > max_q) max_q = q->bytes_out;
    }
    b->f32 = max_f32 ? malloc(max_f32 * sizeof(float)) : NULL;
    b->q = max_q ? malloc(max_q) : NULL;
    if ((max_f32 && !b->f32) || (max_q && !b->q))
        return kiln_fail(err, NULL, NULL, -1, "out of memory for a %llu-byte tensor",
                         (unsigned long long)(max_f32 * 4 + max_q));
    return 0;
}

static int write_tensor(const source *s, kiln_gguf_writer *w, const src_tensor *t, kiln_quant_tensor *q,
                        const kiln_quant_opts *o, buffers *b, kiln_err *err) {
    if (q->plan.to == q->plan.from)
        return source_copy(s, t, w, err) < 0 ? prefix_err(err, s->path, q->name) : 0;
    uint32_t src_type;
    const void *rows = source_rows(s, t, b->f32, &src_type, err);
    if (!rows) return prefix_err(err, s->path, q->name);
    const kiln_imatrix_entry *e = q->imatrix ? kiln_imatrix_find(o->imatrix, q->name) : NULL;
    int64_t n = kiln_quantize_tensor_from(q->plan.to, src_type, rows, b->q, q->ne, e, &q->zero_experts, err);
    if (n < 0) return prefix_err(err, s->path, q->name);
    if ((uint64_t)n != q->bytes_out)
        return kiln_fail(err, s->path, q->name, -1, "quantized to %lld bytes, expected %llu", (long long)n,
                         (unsigned long long)q->bytes_out);
    return kiln_writer_write(w, b->q, (uint64_t)n, err);
}

static int write_model(const source *s, const char *out, const kiln_quant_opts *o, kiln_quant_report *r,
                       const uint64_t *write, kiln_err *err) {
    outputs os = {0};
    buffers b = {0};
    int rc = alloc_buffers(s, r, write, &b, err);
    if (rc == 0) rc = open_outputs(s, out, o, r, write, &os, err);
    kiln_progress p;
    kiln_progress_start(&p, "quantize", r->bytes_in, "B");
    for (uint64_t i = 0; rc == 0 && i < r->n_tensors; i++) {
        kiln_quant_tensor *q = &r->tensors[i];
        const src_tensor *t = &s->t[write[i]];
        if (i + 1 < r->n_tensors) source_prefetch(s, &s->t[write[i + 1]]);
        rc = write_tensor(s, os.w[os.n > 1 ? t->shard : 0], t, q, o, &b, err);
        if (rc == 0 && q->zero_experts)
            warn(r, "%s: %lld of %lld experts have no imatrix data (count 0); they were quantized with weight 1",
                 q->name, (long long)q->zero_experts, (long long)q->ne[2]);
        source_done(s, t);
        kiln_progress_add(&p, q->bytes_in);
    }
    kiln_progress_end(&p);
    free(b.f32);
    free(b.q);
    for (uint32_t k = 0; rc == 0 && k < os.n; k++) {
        uint32_t m = kiln_writer_shard_count(os.w[k]);
        char **grown = realloc(r->outputs, (r->n_outputs + m) * sizeof *grown);
        if (!grown) {
            rc = kiln_fail(err, out, NULL, -1, "out of memory");
            break;
        }
        r->outputs = grown;
        for (uint32_t j = 0; j < m; j++) r->outputs[r->n_outputs++] = strdup(kiln_writer_shard_path(os.w[k], j));
    }
    /* Every shard is complete before the first is renamed into place. */
    for (uint32_t k = 0; rc == 0 && k < os.n; k++) {
        rc = kiln_writer_finish(os.w[k], err);
        os.w[k] = NULL;
    }
    if (rc < 0) outputs_abort(&os);
    free(os.w);
    return rc;
}

/* The size of the file the plan in `r` gives, from a writer declared as
 * write_model declares it (nothing is written). */
static int planned_file_size(const source *s, const kiln_quant_opts *o, const kiln_quant_report *r, uint64_t *size,
                             kiln_err *err) {
    kiln_write_opts wo = {0};
    kiln_gguf_writer *w = kiln_writer_new(s->path, &wo, err);
    if (!w) return -1;
    int rc = set_metadata(w, s->kv, o, r, err);
    for (uint64_t i = 0; rc == 0 && i < r->n_tensors; i++) {
        const kiln_quant_tensor *q = &r->tensors[i];
        rc = kiln_writer_add_tensor(w, q->name, q->plan.to, q->n_dims, q->ne, err);
    }
    if (rc == 0) rc = kiln_writer_file_size(w, size, err);
    kiln_writer_abort(w);
    return rc;
}

/* --target-bpw / --target-size: replaces the kept types of the tensors
 * the sensitivity file covers with the allocation's (budget.h). */
static int apply_budget(const source *s, const kiln_quant_opts *o, kiln_quant_report *r, kiln_err *err) {
    if (!s->g)
        return kiln_fail(err, s->path, NULL, -1,
                         "a size budget needs a GGUF input (the sensitivity file describes one); convert it first");
    if (kiln_sensitivity_matches(o->sensitivity, o->sensitivity_path, s->g, err) < 0) return -1;
    uint64_t size, left_out;
    if (planned_file_size(s, o, r, &size, err) < 0) return -1;
    if (kiln_budget_apply(o, r, size, s->kv->alignment, &left_out, err) < 0) return -1;
    if (left_out)
        warn(r, "%llu rows of %s left out: their types need an importance matrix and no --imatrix was given",
             (unsigned long long)left_out, o->sensitivity_path);
    if (!r->budget_exact)
        warn(r, "the allocation search stopped at its node limit: the plan is the best found, within %.3g of the "
                "best possible estimate", r->estimated_kld - r->kld_lower_bound);
    /* the computed size must be the file's: checked, not assumed */
    uint64_t check;
    if (planned_file_size(s, o, r, &check, err) < 0) return -1;
    if (check != r->file_bytes)
        return kiln_fail(err, s->path, NULL, -1, "internal: the budget plan's file is %llu bytes, computed %llu",
                         (unsigned long long)check, (unsigned long long)r->file_bytes);
    return 0;
}

/* general.file_type of the output: the target's, or for COPY the
 * input's own (llama.cpp's loader ftype; 0, all F32, when it has none). */
static uint32_t output_ftype(const source *s, const kiln_quant_opts *o) {
    uint64_t v;
    if (o->target.preset && o->target.preset->kind == KILN_PRESET_COPY)
        return kiln_gguf_get_u64(s->kv, "general.file_type", &v) ? (uint32_t)v : 0;
    return o->target.ftype;
}

int kiln_quantize_plan(const char *in, const kiln_quant_opts *o, kiln_quant_report *r, kiln_err *err) {
    memset(r, 0, sizeof *r);
    r->input = strdup(in);
    source s;
    if (source_open(&s, in, err) < 0) return -1;
    r->ftype = output_ftype(&s, o);
    uint64_t *visit = visiting_order(&s, o->keep_split && source_shards(&s) > 1);
    int rc = visit ? plan_model(&s, visit, visit, o, r, err) : kiln_fail(err, in, NULL, -1, "out of memory");
    if (rc == 0 && o->sensitivity) rc = apply_budget(&s, o, r, err);
    free(visit);
    source_close(&s);
    return rc;
}

int kiln_quantize_model(const char *in, const char *out, const kiln_quant_opts *o, kiln_quant_report *r,
                        kiln_err *err) {
    double t0 = kiln_now();
    memset(r, 0, sizeof *r);
    r->input = strdup(in);
    if (!o->dry_run && !out) return kiln_fail(err, in, NULL, -1, "no output file given");
    source s;
    if (source_open(&s, in, err) < 0) return -1;
    r->ftype = output_ftype(&s, o);
    if (o->imatrix) r->imatrix_entries = o->imatrix->n_entries;
    /* A Hugging Face archive is written in the converter's order, so that
     * it streams in one pass; the types still follow llama-quantize's
     * visit. From a directory the file equals convert + quantize. */
    struct stat st;
    bool archive = s.hf && !(stat(in, &st) == 0 && S_ISDIR(st.st_mode));
    uint64_t *visit = visiting_order(&s, o->keep_split && source_shards(&s) > 1), *write = visit;
    if (archive && (write = malloc((s.n + 1) * sizeof *write)))
        for (uint64_t i = 0; i < s.n; i++) write[i] = i;
    int rc = visit && write ? 0 : kiln_fail(err, in, NULL, -1, "out of memory");
    if (rc == 0) rc = plan_model(&s, visit, write, o, r, err);
    if (rc == 0 && o->sensitivity) rc = apply_budget(&s, o, r, err);
    if (rc == 0) rc = validate(in, o, r, err);
    if (rc == 0 && !o->dry_run) rc = write_model(&s, out, o, r, write, err);
    if (write != visit) free(write);
    free(visit);
    source_close(&s);
    r->seconds = kiln_now() - t0;
    return rc;
}
