/* splice/write.c - kiln_splice_write(): executes a plan (see splice.h).
 *
 * Tensor bytes go straight from the inputs' mappings into the core writer
 * in chunks; each chunk's pages are dropped from the mapping once written,
 * so resident memory stays near one chunk plus the writer's buffer however
 * large the model is (the kernel's page cache keeps the data; only this
 * process's share of it is let go). Only --requantize converts anything,
 * one expert slab at a time in bounded row chunks.
 *
 * The donor fingerprint recorded in kiln.splice.donor is XXH64 over the
 * donor's header bytes (every shard's, up to its data section) followed by
 * exactly the tensor bytes taken from it, in output order. It therefore
 * identifies the donor content the output depends on without reading the
 * rest of a donor that may be far larger than the output. */
#include "splice.h"

#include "../core/fileio.h"
#include "../core/progress.h"
#include "../core/types.h"
#include "../quantize/codec.h"
#include "hash.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define COPY_CHUNK (8ull << 20)
#define REQUANT_CHUNK_FLOATS (4ull << 20)

typedef struct stream {
    kiln_splice_plan *p;
    kiln_gguf_writer *w;
    kiln_progress prog;
    float *f32;     /* requantize: dequantized donor rows */
    uint8_t *q;     /* requantize: the rows in the base type */
    float *weights; /* requantize: one expert's imatrix column weights */
    uint64_t cap_rows, cap_cols;
} stream;

/* Lets the kernel drop the mapped pages of [p, p+n) from this process.
 * Only whole pages inside the range are dropped, so a neighbour's bytes
 * never need faulting back in. Advice that fails costs memory, not
 * correctness, so the result is deliberately ignored. */
static void release(const uint8_t *p, uint64_t n) {
    static uintptr_t page;
    if (!page) page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), b = ((uintptr_t)p + n) & ~(page - 1);
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

static int copy(stream *s, const uint8_t *src, uint64_t n, kiln_err *err) {
    while (n > 0) {
        uint64_t k = n < COPY_CHUNK ? n : COPY_CHUNK;
        if (kiln_writer_write(s->w, src, k, err) < 0) return -1;
        release(src, k);
        kiln_progress_add(&s->prog, k);
        src += k;
        n -= k;
    }
    return 0;
}

static uint64_t slab_bytes(const kiln_splice_plan *p, const kiln_tensor *t) { return t->nbytes / p->n_expert; }

/* Converts donor expert `e` of `it` to the base type, in row chunks. */
static int requant_slab(stream *s, const kiln_splice_item *it, uint64_t e, kiln_err *err) {
    const kiln_splice_plan *p = s->p;
    uint32_t bt = it->base->type, dt = it->donor->type;
    int64_t cols = it->base->ne[0];
    int64_t rows = it->base->nelements / (int64_t)p->n_expert / cols;
    int64_t chunk = (int64_t)(REQUANT_CHUNK_FLOATS / (uint64_t)cols);
    if (chunk < 1) chunk = 1;
    if (chunk > rows) chunk = rows;
    uint64_t drow = kiln_type_row_bytes(dt, (uint64_t)cols), brow = kiln_type_row_bytes(bt, (uint64_t)cols);
    if ((uint64_t)chunk > s->cap_rows || (uint64_t)cols > s->cap_cols) {
        free(s->f32);
        free(s->q);
        free(s->weights);
        s->f32 = malloc((size_t)(chunk * cols) * sizeof(float));
        s->q = malloc((size_t)((uint64_t)chunk * brow));
        s->weights = malloc((size_t)cols * sizeof(float));
        s->cap_rows = (uint64_t)chunk;
        s->cap_cols = (uint64_t)cols;
        if (!s->f32 || !s->q || !s->weights) {
            s->cap_rows = s->cap_cols = 0;
            return kiln_fail(err, p->opts.base, it->name, -1, "out of memory");
        }
    }
    /* Rows only ever need their own expert's weights; a zero count was
     * already reported as a warning when planning. */
    if (it->has_imatrix) (void)kiln_splice_imatrix_weights(&it->imx, (int64_t)e, s->weights);
    const uint8_t *src = it->donor->data + e * slab_bytes(p, it->donor);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t nr = rows - r0 < chunk ? rows - r0 : chunk;
        const uint8_t *rows_src = src + (uint64_t)r0 * drow;
        kiln_err cerr = {{0}};
        if (kiln_dequantize(dt, rows_src, s->f32, nr * cols, &cerr) < 0 ||
            kiln_quantize_rows(bt, s->f32, s->q, nr, cols, it->has_imatrix ? s->weights : NULL, &cerr) == 0)
            return kiln_fail(err, p->opts.donor, it->name, -1, "expert %llu: %s", (unsigned long long)e, cerr.msg);
        release(rows_src, (uint64_t)nr * drow);
        if (kiln_writer_write(s->w, s->q, (uint64_t)nr * brow, err) < 0) return -1;
        kiln_progress_add(&s->prog, (uint64_t)nr * brow);
    }
    return 0;
}

static int write_item(stream *s, const kiln_splice_item *it, kiln_err *err) {
    const kiln_splice_plan *p = s->p;
    switch (it->action) {
    case KILN_SPLICE_FROM_BASE: return copy(s, it->base->data, it->base->nbytes, err);
    case KILN_SPLICE_TENSOR: return copy(s, it->donor->data, it->donor->nbytes, err);
    case KILN_SPLICE_KEEP:
    case KILN_SPLICE_SLABS:
    case KILN_SPLICE_REQUANT: break;
    }
    uint64_t slab = slab_bytes(p, it->base);
    for (uint64_t e = 0; e < p->n_expert; e++) {
        int rc = 0;
        if (it->action == KILN_SPLICE_KEEP) {
            if (p->expert_sel[e]) rc = copy(s, it->base->data + e * slab, slab, err);
        } else if (!p->expert_sel[e]) {
            rc = copy(s, it->base->data + e * slab, slab, err);
        } else if (it->action == KILN_SPLICE_SLABS) {
            rc = copy(s, it->donor->data + e * slab, slab, err);
        } else {
            rc = requant_slab(s, it, e, err);
        }
        if (rc < 0) return -1;
    }
    return 0;
}

/* Hashes (then releases) what the output takes from the donor; see the
 * top of this file. */
static void fingerprint_donor(kiln_splice_plan *p) {
    kiln_xxh64 h;
    kiln_xxh64_init(&h);
    for (uint32_t s = 0; s < p->donor->n_shards; s++)
        kiln_xxh64_update(&h, p->donor->shards[s].map, p->donor->shards[s].data_offset);
    for (uint64_t i = 0; i < p->n_items; i++) {
        const kiln_splice_item *it = &p->items[i];
        if (!it->donor) continue;
        if (it->action == KILN_SPLICE_TENSOR) {
            for (uint64_t o = 0; o < it->donor->nbytes; o += COPY_CHUNK) {
                uint64_t k = it->donor->nbytes - o < COPY_CHUNK ? it->donor->nbytes - o : COPY_CHUNK;
                kiln_xxh64_update(&h, it->donor->data + o, k);
                release(it->donor->data + o, k);
            }
            continue;
        }
        uint64_t slab = slab_bytes(p, it->donor);
        for (uint64_t e = 0; e < p->n_expert; e++)
            if (p->expert_sel[e]) {
                kiln_xxh64_update(&h, it->donor->data + e * slab, slab);
                release(it->donor->data + e * slab, slab);
            }
    }
    const char *name = strrchr(p->opts.donor, '/');
    snprintf(p->donor_id, sizeof p->donor_id, "%s xxh64:%016llx", name ? name + 1 : p->opts.donor,
             (unsigned long long)kiln_xxh64_digest(&h));
}

/* Sets an integer key to v, keeping the value type the base used. */
static int set_count(kiln_gguf_writer *w, const kiln_gguf *g, const char *key, uint64_t v, kiln_err *err) {
    const kiln_kv *kv = kiln_gguf_find_kv(g, key);
    kiln_value val = {.type = KILN_GGUF_UINT32, .u32 = (uint32_t)v};
    if (kv) {
        val = kv->val;
        switch (val.type) {
        case KILN_GGUF_UINT8: val.u8 = (uint8_t)v; break;
        case KILN_GGUF_INT8: val.i8 = (int8_t)v; break;
        case KILN_GGUF_UINT16: val.u16 = (uint16_t)v; break;
        case KILN_GGUF_INT16: val.i16 = (int16_t)v; break;
        case KILN_GGUF_UINT32: val.u32 = (uint32_t)v; break;
        case KILN_GGUF_INT32: val.i32 = (int32_t)v; break;
        case KILN_GGUF_UINT64: val.u64 = v; break;
        case KILN_GGUF_INT64: val.i64 = (int64_t)v; break;
        default: return kiln_fail(err, g->path, key, (int64_t)kv->offset, "is not an integer");
        }
    }
    return kiln_writer_set(w, key, &val, err);
}

/* Metadata: the base's, the expert counts after --keep-experts, and the
 * provenance keys. */
static int declare(kiln_splice_plan *p, kiln_gguf_writer *w, kiln_err *err) {
    if (kiln_writer_copy_kv(w, p->base, err) < 0) return -1;
    if (p->opts.keep_experts) {
        char key[256];
        snprintf(key, sizeof key, "%s.expert_count", p->arch);
        if (set_count(w, p->base, key, p->n_expert_sel, err) < 0) return -1;
        snprintf(key, sizeof key, "%s.expert_used_count", p->arch);
        if (p->expert_used_after != p->expert_used && set_count(w, p->base, key, p->expert_used_after, err) < 0)
            return -1;
    }
    if (p->donor && kiln_writer_set_str(w, "kiln.splice.donor", p->donor_id, err) < 0) return -1;
    if (kiln_writer_set_u32(w, "kiln.splice.tensors", (uint32_t)p->n_changed, err) < 0 ||
        kiln_writer_set_str(w, "kiln.splice.selection", p->selection, err) < 0)
        return -1;
    for (uint64_t i = 0; i < p->n_items; i++) {
        const kiln_splice_item *it = &p->items[i];
        if (kiln_writer_add_tensor(w, it->name, it->type, it->n_dims, it->ne, err) < 0) return -1;
    }
    return 0;
}

int kiln_splice_write(kiln_splice_plan *p, kiln_err *err) {
    const kiln_splice_opts *o = &p->opts;
    if (!o->output) return kiln_fail(err, NULL, "-o", -1, "no output path");
    /* Refuse an existing output before reading a single tensor byte. */
    if (kiln_check_output(o->output, p->inputs, p->n_inputs, o->force, err) < 0) return -1;
    kiln_write_opts wo = {
        .alignment = p->base->alignment,
        .split_max_size = o->split_max_size,
        .split_max_tensors = o->split_max_tensors,
        .force = o->force,
        .inputs = p->inputs,
        .n_inputs = p->n_inputs,
        .version = p->base->version,
    };
    if (p->donor) fingerprint_donor(p);
    stream s = {.p = p};
    if (!(s.w = kiln_writer_new(o->output, &wo, err))) return -1;
    int rc = declare(p, s.w, err);
    if (rc == 0) rc = kiln_writer_begin(s.w, err);
    if (rc == 0) {
        kiln_progress_start(&s.prog, "splice", p->bytes_after, "B");
        for (uint64_t i = 0; rc == 0 && i < p->n_items; i++) rc = write_item(&s, &p->items[i], err);
        /* Ends the bar's line on failure too, so the error starts a line. */
        kiln_progress_end(&s.prog);
    }
    free(s.f32);
    free(s.q);
    free(s.weights);
    if (rc < 0) {
        kiln_writer_abort(s.w);
        return -1;
    }
    return kiln_writer_finish(s.w, err);
}
