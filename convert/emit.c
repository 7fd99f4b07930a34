/* convert/emit.c - reading, transforming and converting planned tensors
 * (see emit.h). */
#include "emit.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../core/fp16.h"
#include "../core/types.h"
#include "../codec/codec.h"
#include "direct_read.h"
#include "f8.h"
#include "mxfp4_hf.h"
#include "q8_rows.h"
#include "ternary.h"

#define CHUNK_ELEMS (4u << 20) /* 16 MiB of f32 per chunk */
/* FP8, BF16, F16 or F32 -> Q8_0 in one step keeps no f32 chunk, so its
 * chunks are larger (32 MiB of FP8 in, 34 MiB of Q8_0 out, the size of a
 * write pipe buffer, to which it is handed whole): each chunk is one split
 * over the threads (row_split.h), and fewer chunks mean fewer thread
 * starts and hand-offs. */
#define Q8_CHUNK_ELEMS (32u << 20)

static int grow(void *pp, uint64_t *cap, uint64_t need, kiln_err *err) {
    void **p = pp;
    if (need <= *cap) return 0;
    free(*p);
    *p = malloc(need ? need : 1);
    if (!*p) {
        *cap = 0;
        return kiln_fail(err, NULL, NULL, -1, "out of memory (%llu bytes)", (unsigned long long)need);
    }
    *cap = need;
    return 0;
}

/* Buffers up to this size are kept from one tensor to the next: a model's
 * many tensors of one shape (DeepSeek's kv_b, read whole, in every layer)
 * would otherwise fault in and zero fresh pages each time, which cost
 * convert more system time than reading them. */
#define KEEP_BYTES (128u << 20)

/* Gives back a buffer that a whole tensor made larger than KEEP_BYTES. */
static void shrink(void *pp, uint64_t *cap) {
    void **p = pp;
    if (*cap > KEEP_BYTES) {
        free(*p);
        *p = NULL;
        *cap = 0;
    }
}

static const cv_out *plan_out(const cv_reader *r, uint64_t i) { return &r->plan->t[i]; }

static bool is_e4m3(kiln_st_dtype d) { return d == KILN_ST_F8_E4M3; }

/* Registers, for archives, the parts the stream passes before they are
 * needed (see source.h): a simulation of the stream position. */
static int plan_spools(cv_reader *r, kiln_err *err) {
    if (!r->src->is_archive) return 0;
    int64_t cur = -1;
    uint64_t pos = 0;
    for (uint64_t i = 0; i < r->plan->n; i++) {
        const cv_out *o = plan_out(r, i);
        for (uint32_t p = 0; p < o->n_parts; p++) {
            int64_t ids[2] = {o->parts[p].scale, o->parts[p].st};
            for (int k = 0; k < 2; k++) {
                if (ids[k] < 0) continue;
                const kiln_st_tensor *t = &r->st->t[ids[k]];
                int64_t m = r->src->files[t->file].member;
                uint64_t end = t->file_offset + t->nbytes;
                if (m == cur && t->file_offset < pos) {
                    if (cv_source_want_later(r->src, t->file, t->file_offset, t->nbytes) < 0)
                        return kiln_fail(err, NULL, NULL, -1, "out of memory");
                } else {
                    if (m != cur) pos = 0;
                    cur = m;
                    if (end > pos) pos = end;
                }
            }
        }
    }
    return 0;
}

int cv_reader_init(cv_reader *r, cv_source *src, const cv_stlist *st, const cv_plan *plan, kiln_err *err) {
    memset(r, 0, sizeof *r);
    r->src = src;
    r->st = st;
    r->plan = plan;
    r->chunk_elems = CHUNK_ELEMS;
    r->whole_for = -1;
    r->scale_for = -1;
    if (!src->is_archive && !(r->direct = cv_direct_new(src->n_files)))
        return kiln_fail(err, NULL, NULL, -1, "cannot start the reader thread");
    return plan_spools(r, err);
}

void cv_reader_free(cv_reader *r) {
    cv_direct_free(r->direct);
    free(r->raw);
    free(r->f32);
    free(r->out);
    free(r->whole);
    free(r->scale);
    memset(r, 0, sizeof *r);
}

void cv_reader_done(cv_reader *r, uint64_t i) {
    const cv_out *o = plan_out(r, i);
    for (uint32_t p = 0; p < o->n_parts; p++) {
        const kiln_st_tensor *t = &r->st->t[o->parts[p].st];
        cv_source_done(r->src, t->file, t->file_offset, t->nbytes);
        if (o->parts[p].scale >= 0) {
            t = &r->st->t[o->parts[p].scale];
            cv_source_done(r->src, t->file, t->file_offset, t->nbytes);
        }
    }
    if (r->whole_for == (int64_t)i) {
        shrink(&r->whole, &r->whole_cap);
        r->whole_for = -1;
    }
}

/* ---- element conversions ---------------------------------------------- */

/* n values of dtype d to f32. One thread: the SIMD row converters run at
 * several GB/s, faster than the output can be written, and worker
 * threads would only spin against the writer on a busy machine. */
static int to_f32(const void *src, kiln_st_dtype d, float *dst, int64_t n, kiln_err *err) {
    if (d == KILN_ST_F32) memcpy(dst, src, (size_t)n * 4);
    else if (d == KILN_ST_F16) kiln_fp16_to_fp32_row(src, dst, n);
    else if (d == KILN_ST_BF16) kiln_bf16_to_fp32_row(src, dst, n);
    else if (kiln_st_to_f32(d, src, dst, n) < 0)
        return kiln_fail(err, NULL, "dtype", -1, "cannot convert %s to f32", kiln_st_dtype_name(d));
    return 0;
}

static void f32_to_half(const float *src, uint16_t *dst, int64_t n, bool bf16) {
    if (bf16) kiln_fp32_to_bf16_row(src, dst, n);
    else kiln_fp32_to_fp16_row(src, dst, n);
}

/* gguf-py turns BF16 into f32 and back, which sets a NaN's quiet bit.
 * NaNs are rare: the common case is one vectorized read-only pass. The
 * values may sit at odd offsets of a mapped safetensors file (its header
 * has any length), hence the byte-wise loads. */
static bool bf16_has_nan(const void *p, int64_t n) {
    const uint8_t *b = p;
    uint16_t any = 0;
#pragma omp simd reduction(| : any)
    for (int64_t i = 0; i < n; i++) {
        uint16_t v;
        memcpy(&v, b + 2 * i, sizeof v);
        any |= (uint16_t)((v & 0x7fff) > 0x7f80);
    }
    return any != 0;
}

static void bf16_quiet_nans(uint16_t *p, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if ((p[i] & 0x7fff) > 0x7f80) p[i] |= 0x40;
}

/* ---- reading rows --------------------------------------------------- */

static int load_scale(cv_reader *r, int64_t si, kiln_err *err) {
    if (si == r->scale_for) return 0;
    const kiln_st_tensor *t = &r->st->t[si];
    uint8_t *tmp = malloc(t->nbytes ? t->nbytes : 1);
    if (!tmp || grow(&r->scale, &r->scale_cap, (uint64_t)t->nelements * 4, err) < 0) {
        free(tmp);
        return tmp ? -1 : kiln_fail(err, t->name, NULL, -1, "out of memory");
    }
    int rc = cv_source_pread(r->src, t->file, tmp, t->nbytes, t->file_offset, err);
    if (rc == 0 && kiln_st_to_f32(t->dtype, tmp, r->scale, t->nelements) < 0)
        rc = kiln_fail(err, t->name, "dtype", -1, "cannot read %s scales", kiln_st_dtype_name(t->dtype));
    free(tmp);
    if (rc == 0) r->scale_for = si;
    return rc;
}

/* Rows [lr, lr + n) of F8 part p into dst: as f32, or, when `q8`, as
 * Q8_0 blocks straight from the FP8 bytes (cv_f8_q8_0_rows). */
static int dequant_part_rows(cv_reader *r, const cv_part *part, const uint8_t *src, void *dst, bool q8, int64_t lr,
                             int64_t n, int64_t cols, kiln_err *err) {
    const float *scale = NULL;
    int64_t scale_cols = 0;
    bool per_row = false;
    if (part->scale >= 0) {
        if (load_scale(r, part->scale, err) < 0) return -1;
        const kiln_st_tensor *s = &r->st->t[part->scale];
        scale = r->scale;
        scale_cols = s->n_dims == 2 ? s->shape[1] : 0;
        per_row = s->nelements > 1 && r->plan->block[0] == 0;
    }
    if (!q8) {
        cv_f8_dequant_rows(src, dst, lr, n, cols, scale, scale_cols, r->plan->block, per_row);
        return 0;
    }
    int64_t bad = cv_f8_q8_0_rows(src, dst, lr, n, cols, scale, scale_cols, r->plan->block, per_row);
    if (bad < 0) return 0;
    return kiln_fail(err, r->st->t[part->st].name, NULL, -1, "row %lld column %lld is %s; refusing to quantize",
                     (long long)(lr + bad / cols), (long long)(bad % cols), "NaN or infinite");
}

/* Bytes [off, off + n) of a source file: *p points into the file's
 * mapping when there is one (zero copy), else they are read into dst. */
static int source_bytes(cv_reader *r, uint32_t file, uint64_t off, uint64_t n, uint8_t *dst, const uint8_t **p,
                        kiln_err *err) {
    const uint8_t *base;
    int m = cv_source_map(r->src, file, &base, err);
    if (m < 0) return -1;
    if (m == 0) {
        *p = base + off;
        return 0;
    }
    *p = dst;
    return cv_source_pread(r->src, file, dst, n, off, err);
}

/* Asks the kernel to start reading bytes [off, off + n) of a mapped file
 * now, so that the next chunk's page faults find them in the page cache
 * while this chunk is converted. Only a hint: when the file is not mapped,
 * or madvise declines, nothing changes but the speed. */
static void read_ahead(cv_reader *r, uint32_t file, uint64_t off, uint64_t n) {
    const uint8_t *base;
    kiln_err ignored;
    if (n == 0 || cv_source_map(r->src, file, &base, &ignored) != 0) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)(base + off) / page * page;
    (void)madvise((void *)lo, (uintptr_t)(base + off + n) - lo, MADV_WILLNEED);
}

/* Rows of tensor o in a chunk of about `elems` weights (at least one). */
static int64_t chunk_rows(const cv_out *o, uint64_t elems) {
    int64_t rows = (int64_t)elems / o->ne[0];
    return rows > 0 ? rows : 1;
}

/* Tensors cv_emit_tensor turns into Q8_0 in one step, without f32 rows in
 * memory: FP8 (*f8) or float rows read as they are stored. */
static bool one_step_q8(const cv_out *o, bool *f8) {
    *f8 = is_e4m3(o->dtype);
    return !o->gen && o->xform == CV_X_NONE && o->type == KILN_Q8_0 && o->ne[0] % 32 == 0 &&
           (*f8 || o->dtype == KILN_ST_F32 || o->dtype == KILN_ST_F16 || o->dtype == KILN_ST_BF16);
}

/* Rows per chunk of cv_emit_tensor for o. */
static int64_t emit_step(const cv_reader *r, const cv_out *o) {
    bool f8;
    return chunk_rows(o, one_step_q8(o, &f8) ? Q8_CHUNK_ELEMS : r->chunk_elems);
}

/* Where the bytes of rows [row, end) of a streamed tensor that lie in
 * row's part are: *nx gets their file and range. */
static void part_span(const cv_reader *r, const cv_out *o, int64_t row, int64_t end, cv_direct_next *nx) {
    int64_t cols = o->ne[0], rows_pp = o->nelements / cols / o->n_parts, p = row / rows_pp, lr = row % rows_pp;
    int64_t n = end - row < rows_pp - lr ? end - row : rows_pp - lr;
    const kiln_st_tensor *t = &r->st->t[o->parts[p].st];
    uint64_t row_bytes = (uint64_t)cols * kiln_st_dtype_size(o->dtype);
    *nx = (cv_direct_next){.file = t->file, .path = r->src->files[t->file].path,
                           .off = t->file_offset + (uint64_t)lr * row_bytes, .n = (uint64_t)n * row_bytes};
}

/* What the stream reads after rows [row, row + n) of chunk [r0, r1) of
 * o: the next part in the chunk, the next chunk, or the next tensor's
 * first chunk (r->next_tensor). */
static void next_span(const cv_reader *r, const cv_out *o, int64_t row, int64_t n, int64_t r0, int64_t r1,
                      cv_direct_next *nx) {
    int64_t rows = o->nelements / o->ne[0];
    if (row + n < r1) part_span(r, o, row + n, r1, nx);
    else if (r1 < rows) part_span(r, o, r1, r1 + (r1 - r0) < rows ? r1 + (r1 - r0) : rows, nx);
    else *nx = r->next_tensor;
}

/* Bytes [off, off + n) of a tensor part for the stream of its chunks, as
 * source_bytes gives them, except that bytes the page cache does not hold
 * are read direct (direct_read.h), `next` read ahead meanwhile; *p is then
 * good until the next call. Mapped bytes get the kernel's read-ahead of
 * `next` instead. */
static int stream_bytes(cv_reader *r, uint32_t file, uint64_t off, uint64_t n, const cv_direct_next *next,
                        uint8_t *dst, const uint8_t **p, kiln_err *err) {
    if (r->direct && !cv_source_cached(r->src, file, off, n)) {
        int rc = cv_direct_read(r->direct, file, r->src->files[file].path, off, n, next, p, err);
        if (rc <= 0) return rc;
    }
    if (source_bytes(r, file, off, n, dst, p, err) < 0) return -1;
    if (*p != dst && next->n) read_ahead(r, next->file, next->off, next->n);
    return 0;
}

/* Done with source bytes: mapped pages leave the process's memory. */
static void release_bytes(cv_reader *r, uint32_t file, uint64_t off, uint64_t n) {
    cv_source_unmap_hint(r->src, file, off, n);
}

/* Rows [r0, r1) of a plain or stacked tensor, read from the parts. A chunk
 * inside one part of a mapped file is handed out in place; the caller
 * releases it (r->pending) once it has been used. FP8 rows come out as f32
 * in r->f32, or, when `f8_q8`, already in Q8_0 in r->out (*cd is then
 * F8_E4M3, meaning "converted"). */
static int stream_rows(cv_reader *r, const cv_out *o, int64_t r0, int64_t r1, bool f8_q8, const void **ptr,
                       kiln_st_dtype *cd, kiln_err *err) {
    int64_t cols = o->ne[0], rows_pp = o->nelements / cols / o->n_parts;
    uint64_t es = kiln_st_dtype_size(o->dtype), row_bytes = (uint64_t)cols * es;
    bool f8 = is_e4m3(o->dtype);
    uint64_t f8_row_out = f8_q8 ? kiln_type_row_bytes(KILN_Q8_0, (uint64_t)cols) : (uint64_t)cols * 4;
    uint8_t **f8_dst = f8_q8 ? &r->out : (uint8_t **)&r->f32;
    if (f8 && grow(f8_dst, f8_q8 ? &r->out_cap : &r->f32_cap, (uint64_t)(r1 - r0) * f8_row_out, err) < 0) return -1;
    bool one_part = r0 / rows_pp == (r1 - 1) / rows_pp;
    for (int64_t row = r0; row < r1;) {
        int64_t p = row / rows_pp, lr = row % rows_pp, n = r1 - row < rows_pp - lr ? r1 - row : rows_pp - lr;
        const kiln_st_tensor *t = &r->st->t[o->parts[p].st];
        uint64_t off = t->file_offset + (uint64_t)lr * row_bytes, len = (uint64_t)n * row_bytes;
        /* a buffer for when the bytes cannot be used in place (untouched
         * when they can, so it costs no memory then) */
        if (grow(&r->raw, &r->raw_cap, (uint64_t)(r1 - r0) * row_bytes, err) < 0) return -1;
        uint8_t *dst = r->raw + (uint64_t)(row - r0) * row_bytes;
        const uint8_t *src;
        /* scales first: the order plan_spools() assumed for archives */
        if (f8 && o->parts[p].scale >= 0 && load_scale(r, o->parts[p].scale, err) < 0) return -1;
        /* what comes next is read while this is converted */
        cv_direct_next nx;
        next_span(r, o, row, n, r0, r1, &nx);
        if (stream_bytes(r, t->file, off, len, &nx, dst, &src, err) < 0) return -1;
        if (f8) {
            if (dequant_part_rows(r, &o->parts[p], src, *f8_dst + (uint64_t)(row - r0) * f8_row_out, f8_q8, lr, n,
                                  cols, err) < 0)
                return -1;
            release_bytes(r, t->file, off, len);
        } else if (one_part) {
            *ptr = src;
            r->pending_file = t->file, r->pending_off = off, r->pending_len = len;
        } else {
            if (src != dst) memcpy(dst, src, len);
            release_bytes(r, t->file, off, len);
            *ptr = r->raw;
        }
        row += n;
    }
    if (f8) *ptr = *f8_dst;
    *cd = f8 && !f8_q8 ? KILN_ST_F32 : o->dtype;
    return 0;
}

/* llama's q/k permutation: within each of n_head groups of 2 * half
 * units, unit i * 2 + j comes from unit j * half + i. */
static void permute_units(const uint8_t *src, uint8_t *dst, int64_t units, uint64_t unit_bytes, uint32_t n_head) {
    int64_t half = units / n_head / 2;
    for (int64_t h = 0; h < (int64_t)n_head; h++)
        for (int64_t i = 0; i < half; i++)
            for (int64_t j = 0; j < 2; j++)
                memcpy(dst + (uint64_t)(h * 2 * half + i * 2 + j) * unit_bytes,
                       src + (uint64_t)(h * 2 * half + j * half + i) * unit_bytes, unit_bytes);
}

/* rows x cols elements of es bytes -> cols x rows, in 32x32 tiles. */
static void transpose(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t cols, uint32_t es) {
    for (int64_t rb = 0; rb < rows; rb += 32)
        for (int64_t cb = 0; cb < cols; cb += 32)
            for (int64_t r = rb; r < rb + 32 && r < rows; r++)
                for (int64_t c = cb; c < cb + 32 && c < cols; c++)
                    memcpy(dst + (uint64_t)(c * rows + r) * es, src + (uint64_t)(r * cols + c) * es, es);
}

/* Reads, dequantizes and transforms a permuted, transposed or (BitNet)
 * ternarized tensor whole; the last becomes f32. */
static int load_whole(cv_reader *r, uint64_t i, kiln_err *err) {
    if (r->whole_for == (int64_t)i) return 0;
    const cv_out *o = plan_out(r, i);
    const kiln_st_tensor *t = &r->st->t[o->parts[0].st];
    const uint8_t *src;
    if (is_e4m3(o->dtype) && o->parts[0].scale >= 0 && load_scale(r, o->parts[0].scale, err) < 0) return -1;
    int m = cv_source_map(r->src, t->file, &src, err);
    if (m < 0) return -1;
    if (m == 0) {
        src += t->file_offset;
    } else {
        if (grow(&r->raw, &r->raw_cap, t->nbytes, err) < 0 ||
            cv_source_pread(r->src, t->file, r->raw, t->nbytes, t->file_offset, err) < 0)
            return -1;
        src = r->raw;
    }
    kiln_st_dtype sd = o->dtype;
    int64_t cols = t->n_dims >= 2 ? t->nelements / t->shape[0] : 1;
    /* FP8 is dequantized first, except for a permutation: its rows move
     * whole, so they are permuted as bytes and dequantized per chunk with
     * their source row's scales (get_rows), in a quarter of the memory. */
    if (is_e4m3(sd) && !(o->xform == CV_X_PERMUTE && t->n_dims == 2)) {
        if (grow(&r->f32, &r->f32_cap, (uint64_t)t->nelements * 4, err) < 0 ||
            dequant_part_rows(r, &o->parts[0], src, r->f32, false, 0, t->nelements / cols, cols, err) < 0)
            return -1;
        src = (const uint8_t *)r->f32;
        sd = KILN_ST_F32;
    }
    if (o->xform == CV_X_TERNARY) {
        if (grow(&r->whole, &r->whole_cap, (uint64_t)t->nelements * 4, err) < 0 ||
            to_f32(src, sd, (float *)r->whole, t->nelements, err) < 0)
            return -1;
        cv_ternarize((float *)r->whole, t->nelements, o->dtype);
        sd = KILN_ST_F32;
    } else if (o->xform == CV_X_DEINTERLEAVE) {
        uint32_t es = kiln_st_dtype_size(sd);
        if (grow(&r->whole, &r->whole_cap, (uint64_t)o->nelements * es, err) < 0) return -1;
        cv_deinterleave(src, r->whole, o->nelements, es, o->parity);
    } else if (o->xform == CV_X_KV_B) {
        /* k_b is [n_head, kv_lora, nope] (ne 0..2 = nope, kv_lora, n_head), v_b [n_head, v, kv_lora] */
        uint32_t es = kiln_st_dtype_size(sd);
        int64_t nh = o->ne[2], per_head = o->src_rows / nh;
        int64_t nope = o->parity ? per_head - o->ne[1] : o->ne[0], kv_lora = o->parity ? o->ne[0] : o->ne[1];
        if (grow(&r->whole, &r->whole_cap, (uint64_t)o->nelements * es, err) < 0) return -1;
        cv_kv_b_split(src, r->whole, nh, nope, per_head - nope, kv_lora, es, o->parity);
    } else {
        uint32_t es = kiln_st_dtype_size(sd);
        if (grow(&r->whole, &r->whole_cap, (uint64_t)t->nelements * es, err) < 0) return -1;
        if (o->xform == CV_X_PERMUTE)
            permute_units(src, r->whole, o->src_rows, (uint64_t)(t->nelements / o->src_rows) * es, o->n_head);
        else
            transpose(src, r->whole, t->shape[0], t->shape[1], es);
    }
    release_bytes(r, t->file, t->file_offset, t->nbytes);
    r->whole_for = (int64_t)i;
    r->whole_dtype = sd;
    shrink(&r->raw, &r->raw_cap);
    shrink(&r->f32, &r->f32_cap);
    return 0;
}

/* Rows of a Gemma norm weight as f32: w + 1 as llama.cpp's converter
 * computes `data_torch + 1` in torch: F16 and F32 tensors in their own
 * dtype (an f16 sum is rounded to f16), every other dtype (BF16, FP8)
 * after its conversion to f32. */
static int shifted_rows(cv_reader *r, const cv_out *o, int64_t r0, int64_t r1, const void **ptr,
                        kiln_st_dtype *cd, kiln_err *err) {
    const void *src;
    kiln_st_dtype sd;
    if (stream_rows(r, o, r0, r1, false, &src, &sd, err) < 0) return -1;
    const int64_t n = (r1 - r0) * o->ne[0];
    if (src != (const void *)r->f32) {
        if (grow(&r->f32, &r->f32_cap, (uint64_t)n * 4, err) < 0 || to_f32(src, sd, r->f32, n, err) < 0) return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        float v = r->f32[i] + 1.0f;
        if (sd == KILN_ST_F16) v = kiln_fp16_to_fp32(kiln_fp32_to_fp16(v));
        r->f32[i] = v;
    }
    *ptr = r->f32;
    *cd = KILN_ST_F32;
    return 0;
}

/* Rows [r0, r1) of plan tensor i in the dtype *cd (the source's, or f32). */
static int get_rows(cv_reader *r, uint64_t i, int64_t r0, int64_t r1, const void **ptr, kiln_st_dtype *cd,
                    kiln_err *err) {
    const cv_out *o = plan_out(r, i);
    if (o->gen) {
        *ptr = o->gen + r0 * o->ne[0];
        *cd = KILN_ST_F32;
        return 0;
    }
    if (o->xform == CV_X_NONE) return stream_rows(r, o, r0, r1, false, ptr, cd, err);
    if (o->xform == CV_X_NORM_SHIFT) return shifted_rows(r, o, r0, r1, ptr, cd, err);
    if (load_whole(r, i, err) < 0) return -1;
    *cd = r->whole_dtype;
    *ptr = r->whole + (uint64_t)r0 * o->ne[0] * kiln_st_dtype_size(*cd);
    if (!is_e4m3(*cd)) return 0;
    /* permuted FP8 rows: output row (h, i, j) is source row (h, j, i) */
    int64_t cols = o->ne[0], half = o->src_rows / o->n_head / 2;
    if (grow(&r->f32, &r->f32_cap, (uint64_t)(r1 - r0) * cols * 4, err) < 0) return -1;
    for (int64_t row = r0; row < r1; row++) {
        int64_t h = row / (2 * half), i2 = (row % (2 * half)) / 2, j = row % 2;
        int64_t src_row = h * 2 * half + j * half + i2;
        if (dequant_part_rows(r, &o->parts[0], r->whole + (uint64_t)row * cols, r->f32 + (row - r0) * cols, false,
                              src_row, 1, cols, err) < 0)
            return -1;
    }
    *ptr = r->f32;
    *cd = KILN_ST_F32;
    return 0;
}

/* Integer source elements narrowed to I32, as numpy's astype wraps them
 * (DeepSeek-V4's I64 hash-routing table). */
static int narrow_to_i32(cv_reader *r, const void *src, kiln_st_dtype cd, int64_t n, const void **out,
                         kiln_err *err) {
    *out = src;
    if (cd == KILN_ST_I32) return 0;
    if (cd != KILN_ST_I64) return kiln_fail(err, NULL, "dtype", -1, "cannot write %s as I32", kiln_st_dtype_name(cd));
    if (grow(&r->out, &r->out_cap, (uint64_t)n * 4, err) < 0) return -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t v;
        memcpy(&v, (const uint8_t *)src + 8 * i, 8);
        uint32_t u = (uint32_t)(uint64_t)v;
        memcpy(r->out + 4 * i, &u, 4);
    }
    *out = r->out;
    return 0;
}

/* Converts rows [r0, r0 + nrows) in dtype cd to the planned type. *out
 * points to the result (possibly `src` itself, which may be fixed up in
 * place). */
static int convert_rows(cv_reader *r, const cv_out *o, const void *src, kiln_st_dtype cd, int64_t r0, int64_t nrows,
                        const void **out, kiln_err *err) {
    int64_t n = nrows * o->ne[0];
    if (o->type == KILN_I32) return narrow_to_i32(r, src, cd, n, out, err);
    if (o->type == KILN_Q8_0 && o->ne[0] % 32 == 0 &&
        (cd == KILN_ST_F32 || cd == KILN_ST_F16 || cd == KILN_ST_BF16)) { /* in one step (q8_rows.h) */
        if (grow(&r->out, &r->out_cap, kiln_type_row_bytes(KILN_Q8_0, (uint64_t)n), err) < 0 ||
            cv_plain_q8_0_rows(src, cd, r->out, r0, nrows, o->ne[0], err) < 0)
            return -1;
        *out = r->out;
        return 0;
    }
    if ((cd == KILN_ST_F32 && o->type == KILN_F32) || (cd == KILN_ST_F16 && o->type == KILN_F16)) {
        *out = src;
        return 0;
    }
    if (cd == KILN_ST_BF16 && o->type == KILN_BF16) {
        *out = src;
        if (!bf16_has_nan(src, n)) return 0;
        if (src != r->raw) {
            if (grow(&r->raw, &r->raw_cap, (uint64_t)n * 2, err) < 0) return -1;
            memcpy(r->raw, src, (uint64_t)n * 2);
        }
        bf16_quiet_nans((uint16_t *)r->raw, n);
        *out = r->raw;
        return 0;
    }
    const float *f = src;
    if (cd != KILN_ST_F32) {
        if (grow(&r->f32, &r->f32_cap, (uint64_t)n * 4, err) < 0 || to_f32(src, cd, r->f32, n, err) < 0) return -1;
        f = r->f32;
    }
    if (o->type == KILN_F32) {
        *out = f;
        return 0;
    }
    if (grow(&r->out, &r->out_cap, kiln_type_row_bytes(o->type, (uint64_t)n), err) < 0) return -1;
    if (o->type == KILN_F16 || o->type == KILN_BF16) {
        f32_to_half(f, (uint16_t *)r->out, n, o->type == KILN_BF16);
    } else if (!kiln_quantize_rows(o->type, f, r->out, nrows, o->ne[0], NULL, err)) {
        return -1;
    }
    *out = r->out;
    return 0;
}

static void release_pending(cv_reader *r) {
    if (r->pending_len) release_bytes(r, r->pending_file, r->pending_off, r->pending_len);
    r->pending_len = 0;
}

/* Rows [r0, r1) of one part of an MXFP4 expert tensor as ggml blocks at
 * dst, from the HF blocks and scales of the source rows they take (mapped
 * in place from a directory, read otherwise). */
static int mxfp4_part_rows(cv_reader *r, const cv_out *o, const cv_part *part, int64_t r0, int64_t r1, uint8_t *dst,
                           kiln_err *err) {
    const kiln_st_tensor *bt = &r->st->t[part->st], *st = &r->st->t[part->scale];
    int64_t nb = o->ne[0] / 32, s0 = r0 * o->stride, s1 = r1 * o->stride; /* source rows [s0, s1) */
    uint64_t n_scales = (uint64_t)((s1 - s0) * nb);
    const uint8_t *blocks, *scales;
    uint8_t *scale_copy = malloc(n_scales);
    if (!scale_copy) return kiln_fail(err, st->name, NULL, -1, "out of memory");
    int rc = -1;
    if (grow(&r->raw, &r->raw_cap, n_scales * 16, err) == 0 &&
        source_bytes(r, st->file, st->file_offset + (uint64_t)(s0 * nb), n_scales, scale_copy, &scales, err) == 0 &&
        source_bytes(r, bt->file, bt->file_offset + (uint64_t)(s0 * nb) * 16, n_scales * 16, r->raw, &blocks, err) ==
            0) {
        cv_mxfp4_repack_rows(blocks, scales, nb, 0, r1 - r0, o->stride, o->parity, dst);
        release_bytes(r, bt->file, bt->file_offset + (uint64_t)(s0 * nb) * 16, n_scales * 16);
        rc = 0;
    }
    free(scale_copy);
    return rc;
}

/* Rows [r0, r1) of an MXFP4 expert tensor into r->out: one HF tensor
 * (gpt-oss), or one per expert stacked (DeepSeek-V4). */
static int mxfp4_rows(cv_reader *r, const cv_out *o, int64_t r0, int64_t r1, kiln_err *err) {
    int64_t rows_pp = o->nelements / o->ne[0] / o->n_parts;
    uint64_t row_bytes = kiln_type_row_bytes(KILN_MXFP4, (uint64_t)o->ne[0]);
    if (grow(&r->out, &r->out_cap, (uint64_t)(r1 - r0) * row_bytes, err) < 0) return -1;
    for (int64_t row = r0; row < r1;) {
        int64_t p = row / rows_pp, lr = row % rows_pp, n = r1 - row < rows_pp - lr ? r1 - row : rows_pp - lr;
        if (mxfp4_part_rows(r, o, &o->parts[p], lr, lr + n, r->out + (uint64_t)(row - r0) * row_bytes, err) < 0)
            return -1;
        row += n;
    }
    return 0;
}

/* r->next_tensor: the first bytes plan tensor i streams, or none (past the
 * plan, or a tensor read whole or generated). */
static void set_next_tensor(cv_reader *r, uint64_t i) {
    r->next_tensor = (cv_direct_next){0};
    if (i >= r->plan->n) return;
    const cv_out *o = plan_out(r, i);
    if (o->gen || o->nelements <= 0 || (o->xform != CV_X_NONE && o->xform != CV_X_NORM_SHIFT)) return;
    int64_t rows = o->nelements / o->ne[0], step = emit_step(r, o);
    part_span(r, o, 0, step < rows ? step : rows, &r->next_tensor);
}

int cv_emit_tensor(cv_reader *r, uint64_t i, cv_sink sink, void *user, kiln_err *err) {
    const cv_out *o = plan_out(r, i);
    set_next_tensor(r, i + 1);
    int64_t rows = o->nelements / o->ne[0], step = chunk_rows(o, r->chunk_elems);
    if (o->xform == CV_X_MXFP4) {
        for (int64_t r0 = 0; r0 < rows; r0 += step) {
            int64_t r1 = r0 + step < rows ? r0 + step : rows;
            if (mxfp4_rows(r, o, r0, r1, err) < 0 ||
                sink(user, r->out, kiln_type_row_bytes(KILN_MXFP4, (uint64_t)((r1 - r0) * o->ne[0])), err) < 0)
                return -1;
        }
        return 0;
    }
    /* FP8 and float rows to Q8_0 in one step, without the f32 rows in
     * memory (FP8 here, float rows in convert_rows) */
    bool f8, f8_q8 = one_step_q8(o, &f8) && f8;
    step = emit_step(r, o);
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
        int64_t r1 = r0 + step < rows ? r0 + step : rows;
        const void *src, *out;
        kiln_st_dtype cd;
        if (f8_q8) {
            if (stream_rows(r, o, r0, r1, true, &out, &cd, err) < 0) return -1;
        } else if (get_rows(r, i, r0, r1, &src, &cd, err) < 0 ||
                   convert_rows(r, o, src, cd, r0, r1 - r0, &out, err) < 0) {
            return -1;
        }
        uint64_t nb = kiln_type_row_bytes(o->type, (uint64_t)((r1 - r0) * o->ne[0]));
        if (out == r->out && r->give ? r->give(user, &r->out, &r->out_cap, nb, err) < 0 : sink(user, out, nb, err) < 0)
            return -1;
        release_pending(r);
    }
    return 0;
}

int cv_read_f32(cv_reader *r, uint64_t i, int64_t r0, int64_t r1, float *dst, kiln_err *err) {
    const cv_out *o = plan_out(r, i);
    int64_t step = chunk_rows(o, r->chunk_elems);
    for (int64_t a = r0; a < r1; a += step) {
        int64_t b = a + step < r1 ? a + step : r1;
        if (o->xform == CV_X_MXFP4) { /* the values the GGUF's blocks mean */
            if (mxfp4_rows(r, o, a, b, err) < 0 ||
                kiln_dequantize(KILN_MXFP4, r->out, dst + (a - r0) * o->ne[0], (b - a) * o->ne[0], err) < 0)
                return -1;
            continue;
        }
        const void *src;
        kiln_st_dtype cd;
        if (get_rows(r, i, a, b, &src, &cd, err) < 0 ||
            to_f32(src, cd, dst + (a - r0) * o->ne[0], (b - a) * o->ne[0], err) < 0)
            return -1;
        release_pending(r);
    }
    return 0;
}
