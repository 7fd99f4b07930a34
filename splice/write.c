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
#include "../codec/codec.h"
#include "../core/xxh64.h"

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
    float *weights; /* requantize: the tensor's imatrix weights, expert after expert */
    uint64_t cap_f32, cap_q; /* their sizes, in floats and bytes */
} stream;

/* The kernel maps up to this much around each faulting page of a file
 * mapping (fault_around_bytes, 64 KiB by default), so pages just before a
 * chunk come back when the chunk is read. */
#define FAULT_AROUND (64u << 10)

/* Lets the kernel drop the pages of [p, p+n) of tensor t's mapping from
 * this process, widened by the fault-around span and clipped to the
 * shard's mapping (advice must never reach memory kiln does not own).
 * The page cache keeps the data: dropping only bounds resident memory,
 * and a page needed again is simply faulted back in. Advice that fails
 * costs memory, not correctness, so its result is deliberately ignored. */
static void release(const kiln_gguf *g, const kiln_tensor *t, const uint8_t *p, uint64_t n) {
    static uintptr_t page;
    if (!page) page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const kiln_gguf_shard *sh = &g->shards[t->shard];
    uintptr_t lo = (uintptr_t)sh->map, hi = (uintptr_t)sh->map + sh->size;
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)p + n;
    a = a - lo > FAULT_AROUND ? a - FAULT_AROUND : lo;
    b = hi - b > FAULT_AROUND ? b + FAULT_AROUND : hi;
    a &= ~(page - 1);
    b = (b + page - 1) & ~(page - 1);
    (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

/* Writes n bytes of tensor t (of file g) starting at src. */
static int copy(stream *s, const kiln_gguf *g, const kiln_tensor *t, const uint8_t *src, uint64_t n, kiln_err *err) {
    while (n > 0) {
        uint64_t k = n < COPY_CHUNK ? n : COPY_CHUNK;
        if (kiln_writer_write(s->w, src, k, err) < 0) return -1;
        release(g, t, src, k);
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
    uint64_t need_f32 = (uint64_t)(chunk * cols), need_q = (uint64_t)chunk * brow;
    /* Tensors differ in width and in base type, so both buffers are sized
     * by what this one needs. */
    if (need_f32 > s->cap_f32 || need_q > s->cap_q) {
        free(s->f32);
        free(s->q);
        s->f32 = malloc((size_t)need_f32 * sizeof(float));
        s->q = malloc((size_t)need_q);
        s->cap_f32 = need_f32;
        s->cap_q = need_q;
        if (!s->f32 || !s->q) {
            s->cap_f32 = s->cap_q = 0;
            return kiln_fail(err, p->opts.base, it->name, -1, "out of memory");
        }
    }
    const float *w = it->imx ? s->weights + e * (uint64_t)cols : NULL;
    const uint8_t *src = it->donor->data + e * slab_bytes(p, it->donor);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t nr = rows - r0 < chunk ? rows - r0 : chunk;
        const uint8_t *rows_src = src + (uint64_t)r0 * drow;
        kiln_err cerr = {{0}};
        if (kiln_dequantize(dt, rows_src, s->f32, nr * cols, &cerr) < 0 ||
            kiln_quantize_rows(bt, s->f32, s->q, nr, cols, w, &cerr) == 0)
            return kiln_fail(err, p->opts.donor, it->name, -1, "expert %llu: %s", (unsigned long long)e, cerr.msg);
        release(p->donor, it->donor, rows_src, (uint64_t)nr * drow);
        if (kiln_writer_write(s->w, s->q, (uint64_t)nr * brow, err) < 0) return -1;
        kiln_progress_add(&s->prog, (uint64_t)nr * brow);
    }
    return 0;
}

/* The imatrix weights of every expert of `it` (llama-quantize's
 * in_sum2 / count; zero counts were reported when planning). */
static int load_weights(stream *s, const kiln_splice_item *it, kiln_err *err) {
    int64_t cols = it->base->ne[0], n = cols * (int64_t)s->p->n_expert, zero;
    free(s->weights);
    if (!(s->weights = malloc((size_t)n * sizeof(float))))
        return kiln_fail(err, s->p->opts.imatrix, it->name, -1, "out of memory");
    return kiln_imatrix_weights(it->imx, cols, (int64_t)s->p->n_expert, s->weights, &zero, err);
}

static int write_item(stream *s, const kiln_splice_item *it, kiln_err *err) {
    const kiln_splice_plan *p = s->p;
    switch (it->action) {
    case KILN_SPLICE_FROM_BASE: return copy(s, p->base, it->base, it->base->data, it->base->nbytes, err);
    case KILN_SPLICE_TENSOR: return copy(s, p->donor, it->donor, it->donor->data, it->donor->nbytes, err);
    case KILN_SPLICE_KEEP:
    case KILN_SPLICE_SLABS:
    case KILN_SPLICE_REQUANT: break;
    }
    if (it->action == KILN_SPLICE_REQUANT && it->imx && load_weights(s, it, err) < 0) return -1;
    uint64_t slab = slab_bytes(p, it->base);
    for (uint64_t e = 0; e < p->n_expert; e++) {
        int rc = 0;
        if (it->action == KILN_SPLICE_KEEP) {
            if (p->expert_sel[e]) rc = copy(s, p->base, it->base, it->base->data + e * slab, slab, err);
        } else if (!p->expert_sel[e]) {
            rc = copy(s, p->base, it->base, it->base->data + e * slab, slab, err);
        } else if (it->action == KILN_SPLICE_SLABS) {
            rc = copy(s, p->donor, it->donor, it->donor->data + e * slab, slab, err);
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
                release(p->donor, it->donor, it->donor->data + o, k);
            }
            continue;
        }
        uint64_t slab = slab_bytes(p, it->donor);
        for (uint64_t e = 0; e < p->n_expert; e++)
            if (p->expert_sel[e]) {
                kiln_xxh64_update(&h, it->donor->data + e * slab, slab);
                release(p->donor, it->donor, it->donor->data + e * slab, slab);
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
        /* The provenance keys describe the last splice; a donor named by
         * an earlier one would be wrongly read as this cut's. */
        kiln_writer_remove(w, "kiln.splice.donor");
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
    /* Refuse an existing output before reading a single tensor byte. Split
     * output has other names; the writer checks each shard's. */
    bool split = o->split_max_size || o->split_max_tensors;
    if (!split && kiln_check_output(o->output, p->inputs, p->n_inputs, o->force, err) < 0) return -1;
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
