/* convert/emit.h - producing a planned tensor's bytes: read its source
 * parts, dequantize FP8, stack, permute or transpose, and convert to the
 * planned type, a chunk of rows at a time (HF MXFP4 experts are repacked
 * block by block into ggml's MXFP4 instead, mxfp4_hf.c).
 *
 * Plain and stacked tensors stream: each chunk of rows is read straight
 * from its source part (about 16 MiB at a time, 32 Mi weights going to
 * Q8_0), so memory does not grow with the tensor. From a directory, a
 * chunk the page cache holds is mapped and used in place (no copy), its
 * pages dropped from the process once used, and the next chunk (of the
 * part, or the next tensor's first) is asked of the kernel (madvise
 * WILLNEED); a chunk it does not hold is read past it (direct_read.h), the
 * next one read ahead by a thread. Either way reading overlaps converting.
 * FP8 and float rows to Q8_0 go straight to the blocks (q8_rows.h), with
 * no f32 chunk in memory. Permuted and transposed tensors are read whole once
 * (a transform needs every row), which is the "2x the largest tensor" of
 * the memory budget. Values are converted as llama.cpp does: through f32,
 * with the row converters of core/fp16.h and Q8_0 from quantize/codec.h;
 * same-type copies are byte copies (a BF16 NaN gets its quiet bit, as
 * gguf-py's f32 -> bf16 gives it). Only the compute-bound steps (FP8
 * dequantization, Q8_0) use all threads (row_split.h; other quantized
 * types, OpenMP in the codec); the rest is memory-bound and one core
 * outruns the disk. */
#ifndef KILN_CONVERT_EMIT_H
#define KILN_CONVERT_EMIT_H

#include <stdint.h>

#include "direct_read.h"
#include "plan.h"
#include "source.h"
#include "stlist.h"

/* Receives consecutive pieces of a tensor's bytes. 0 or -1. */
typedef int (*cv_sink)(void *user, const void *data, uint64_t n, kiln_err *err);
/* A sink that can take a malloc'd buffer of *cap bytes, n of them filled,
 * instead of copying it, leaving another (or the same) in *buf and *cap. */
typedef int (*cv_give)(void *user, uint8_t **buf, uint64_t *cap, uint64_t n, kiln_err *err);

typedef struct cv_reader {
    cv_source *src;
    const cv_stlist *st;
    const cv_plan *plan;
    uint64_t chunk_elems;   /* f32 elements per chunk */
    uint8_t *raw;           /* a chunk in the source dtype */
    float *f32;             /* a chunk as f32 */
    uint8_t *out;           /* a chunk in the output type */
    uint64_t raw_cap, f32_cap, out_cap;
    uint8_t *whole;         /* a whole transformed tensor */
    uint64_t whole_cap;
    int64_t whole_for;      /* plan index held in `whole`, or -1 */
    kiln_st_dtype whole_dtype;
    float *scale;           /* the scale tensor of the current part, as f32 */
    uint64_t scale_cap;
    int64_t scale_for;      /* stlist index held in `scale`, or -1 */
    cv_direct *direct;      /* direct reads of a directory's files, or NULL */
    cv_direct_next next_tensor; /* what the stream reads after the current tensor */
    cv_give give;           /* set: chunks made in `out` go to the sink's user by it, uncopied */
    uint32_t pending_file;  /* mapped bytes handed out in place, released */
    uint64_t pending_off, pending_len; /* once the chunk has been used */
} cv_reader;

/* Prepares a reader; for archives, tells the source which ranges will be
 * read out of stream order. 0 or -1. */
int cv_reader_init(cv_reader *r, cv_source *src, const cv_stlist *st, const cv_plan *plan, kiln_err *err);
void cv_reader_free(cv_reader *r);

/* Sends plan tensor i, in its planned type, to `sink`. 0 or -1. */
int cv_emit_tensor(cv_reader *r, uint64_t i, cv_sink sink, void *user, kiln_err *err);

/* Rows [r0, r1) of plan tensor i as f32, after every transform; a row is
 * ne[0] values. dst holds (r1 - r0) * ne[0] floats. 0 or -1. */
int cv_read_f32(cv_reader *r, uint64_t i, int64_t r0, int64_t r1, float *dst, kiln_err *err);

/* Releases what the reader holds for plan tensor i (spool space, the
 * whole-tensor buffer). */
void cv_reader_done(cv_reader *r, uint64_t i);

#endif
