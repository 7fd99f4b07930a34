/* core/safetensors_write.h - writing Hugging Face safetensors files, streamed.
 *
 * The writer is told every tensor first (name, dtype, shape), then takes the
 * bytes tensor by tensor, in pieces of any size, so a caller never needs more
 * than a chunk of one tensor in memory. Files come out the way the
 * safetensors library writes them: compact JSON header with "__metadata__"
 * first, tensors sorted by descending dtype rank then name (unless asked to
 * keep declaration order), header padded with spaces to a multiple of 8.
 *
 * With a shard size, tensors are split into model-0000i-of-0000n.safetensors
 * by huggingface_hub's rule (declaration order; a new shard when the next
 * tensor would pass the limit; an oversized tensor gets a shard of its own)
 * and model.safetensors.index.json is written beside them. As in
 * save_pretrained, a model that fits one shard is one plain file, no index.
 *
 * Every file is written as NAME.tmp and fsynced (core/fileio.h); nothing is
 * renamed into place until kiln_stw_finish() has seen every byte, so a
 * failure leaves no partial model. It does not check tensor values, and does not delete stale
 * files of an earlier model in the same directory: that is the caller's
 * business. */
#ifndef KILN_SAFETENSORS_WRITE_H
#define KILN_SAFETENSORS_WRITE_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "safetensors.h"

typedef struct kiln_stw kiln_stw;

typedef struct kiln_stw_opts {
    uint64_t shard_size; /* 0: a single file; else the most tensor bytes per shard */
    bool keep_order;     /* true: tensors in declaration order, not sorted */
} kiln_stw_opts;

/* Starts a writer for `path`, which must end in ".safetensors" (shards and
 * the index are named from it: DIR/model.safetensors gives
 * DIR/model-00001-of-00003.safetensors and DIR/model.safetensors.index.json).
 * `opts` may be NULL. Nothing is created until kiln_stw_begin(). Returns NULL
 * on error. The writer is freed by kiln_stw_finish() or kiln_stw_abort(). */
kiln_stw *kiln_stw_create(const char *path, const kiln_stw_opts *opts, kiln_err *err);

/* Adds a "__metadata__" string entry (written in the order added) to every
 * file. Returns 0, or -1 after kiln_stw_begin() or on a duplicate key. */
int kiln_stw_metadata(kiln_stw *w, const char *key, const char *value, kiln_err *err);

/* Declares a tensor; `shape` has `n_dims` (0..KILN_ST_MAX_DIMS) entries, all
 * >= 0. Returns its index (0, 1, ...) or -1 (bad shape, called after
 * kiln_stw_begin()). Duplicate names are caught by kiln_stw_begin(). */
int64_t kiln_stw_declare(kiln_stw *w, const char *name, kiln_st_dtype dtype, uint32_t n_dims,
                         const int64_t *shape, kiln_err *err);

/* Plans the files and creates the first one (a file is created, header
 * first, when writing reaches it). Returns 0 or -1 (duplicate names...). */
int kiln_stw_begin(kiln_stw *w, kiln_err *err);

/* Moves to the next tensor to be written, in file order, after checking the
 * previous one got all its bytes. Returns 1 and sets *idx to the declared
 * index, 0 when every tensor has been written, -1 on error. */
int kiln_stw_next(kiln_stw *w, int64_t *idx, kiln_err *err);

/* Appends `n` bytes to the current tensor. Returns 0, or -1 when that would
 * overrun the tensor or the write fails. */
int kiln_stw_write(kiln_stw *w, const void *data, uint64_t n, kiln_err *err);

/* As kiln_stw_write(), but the `n` bytes are a hole (kiln_out_skip):
 * zeros that take no disk. */
int kiln_stw_skip(kiln_stw *w, uint64_t n, kiln_err *err);

/* The declared name / byte size of tensor `idx` (owned by the writer). */
const char *kiln_stw_name(const kiln_stw *w, int64_t idx);
uint64_t kiln_stw_nbytes(const kiln_stw *w, int64_t idx);

/* Number of files kiln_stw_begin() planned (1 when not sharded), and the
 * path of file `i` as it will be named after kiln_stw_finish(). */
uint32_t kiln_stw_n_files(const kiln_stw *w);
const char *kiln_stw_file_path(const kiln_stw *w, uint32_t i);

/* Checks that every tensor is complete, fsyncs, renames every file into
 * place, writes the index when sharded, fsyncs the directory. Frees `w`
 * whatever happens; on error no final file has been created or replaced
 * (except in the rare case of a rename failing midway). Returns 0 or -1. */
int kiln_stw_finish(kiln_stw *w, kiln_err *err);

/* Removes every .tmp file and frees `w`. NULL is allowed. */
void kiln_stw_abort(kiln_stw *w);

#endif
