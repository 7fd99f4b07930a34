/* core/imatrix_file.h - importance matrices on disk and in memory.
 *
 * llama.cpp writes an importance matrix in two formats, and kiln reads and
 * writes both into one structure:
 *
 *   GGUF (llama-imatrix's default): per weight W, a tensor W.in_sum2 of
 *   F32 [n, n_mat] (the sum of x^2 over every token that reached each
 *   column, per expert matrix) and W.counts of F32 [1, n_mat] (tokens per
 *   matrix), plus general.type = "imatrix", imatrix.datasets,
 *   imatrix.chunk_count and imatrix.chunk_size.
 *
 *   legacy .dat (--output-format dat): i32 n_entries, then per entry
 *   i32 len, name bytes, i32 ncall, i32 nval, f32 values[nval] with
 *   values = in_sum2 / count * ncall, ncall = ceil(max count / chunk_size);
 *   then i32 chunk_count, i32 len and the dataset path. The format keeps
 *   neither the chunk size nor how values split into expert matrices.
 *
 * A .dat entry is read as n_mat = 1, in_sum2 = values and counts = ncall,
 * i.e. counted in chunks rather than tokens (chunk_size = 0, "unknown").
 * Every mean in_sum2 / count is then exactly what llama-quantize computes
 * from either format, and .dat -> GGUF -> .dat gives back the same bytes.
 * The quantizer asks for a tensor's weights with kiln_imatrix_weights(),
 * which reshapes any entry to the tensor's experts.
 *
 * This module does not compute importance matrices (that is the imatrix
 * tool's job) and never prints. */
#ifndef KILN_IMATRIX_FILE_H
#define KILN_IMATRIX_FILE_H

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

typedef enum kiln_imatrix_format {
    KILN_IMATRIX_GGUF = 0,
    KILN_IMATRIX_DAT = 1,
} kiln_imatrix_format;

typedef struct kiln_imatrix_entry {
    char *name;      /* the weight's name, e.g. "blk.0.ffn_down_exps.weight" */
    int64_t n;       /* columns per matrix (the weight's row length) */
    int64_t n_mat;   /* matrices: experts of a 3-D weight, else 1 */
    float *in_sum2;  /* n_mat * n sums of x^2, matrix after matrix */
    float *counts;   /* n_mat: tokens (or chunks, see chunk_size) per matrix */
    float *in_sum;   /* n_mat * n sums of x when the file had them, else NULL */
} kiln_imatrix_entry;

typedef struct kiln_imatrix {
    uint64_t n_entries;
    kiln_imatrix_entry *entries; /* sorted by name (strcmp), names unique */
    uint64_t n_datasets;
    char **datasets;             /* calibration files named by the producer */
    uint32_t chunk_count;        /* chunks the statistics were collected over */
    uint32_t chunk_size;         /* tokens per chunk; 0: counts are in chunks */
    kiln_imatrix_format format;  /* the format it was read in */
} kiln_imatrix;

/* Reads either format (GGUF when the file starts with "GGUF"). Validates
 * every length against the file size, shapes (in_sum2 [n, n_mat], counts
 * [1, n_mat], all F32), and refuses non-finite or negative values. Returns
 * NULL with one line in err. */
kiln_imatrix *kiln_imatrix_read(const char *path, kiln_err *err);

/* An empty matrix (for building one in memory); NULL when out of memory. */
kiln_imatrix *kiln_imatrix_new(void);
void kiln_imatrix_free(kiln_imatrix *im);

/* Adds an entry with zeroed sums and counts (in_sum only if with_sum) and
 * returns it, keeping the entries sorted. Fails if the name exists. The
 * entries array may move: earlier entry pointers are then stale. */
kiln_imatrix_entry *kiln_imatrix_add(kiln_imatrix *im, const char *name, int64_t n, int64_t n_mat,
                                     bool with_sum, kiln_err *err);
/* Appends a dataset name (copied). 0 or -1. */
int kiln_imatrix_add_dataset(kiln_imatrix *im, const char *name, kiln_err *err);

/* The entry for weight `name`, or NULL. Binary search. */
const kiln_imatrix_entry *kiln_imatrix_find(const kiln_imatrix *im, const char *name);

/* Writes llama.cpp's GGUF imatrix format atomically (core/gguf.h writer:
 * refuses to overwrite an existing file unless force). Entries keep their
 * sorted order, each as in_sum2, counts (and in_sum). A matrix with
 * chunk_size 0 is written with chunk_size 1: its counts are chunks. */
int kiln_imatrix_write_gguf(const kiln_imatrix *im, const char *path, bool force, kiln_err *err);

/* Writes the legacy .dat format atomically, as llama-imatrix does: values
 * in_sum2 / count * ncall in float (1 * ncall for a matrix with no count),
 * entries whose counts are all zero left out (the format cannot hold
 * them). Values whose count already equals ncall are stored unchanged. */
int kiln_imatrix_write_dat(const kiln_imatrix *im, const char *path, bool force, kiln_err *err);

/* Converts counts kept in chunks (chunk_size 0, a .dat file) to tokens of
 * `chunk_size` each, as llama-imatrix does when it loads a .dat file with
 * a known context size: sums and counts are multiplied by it. No-op when
 * chunk_size is already known. */
void kiln_imatrix_set_chunk_size(kiln_imatrix *im, uint32_t chunk_size);

/* Adds `src` into `dst`: sums and counts of entries present in both are
 * added (shapes must agree), other entries are copied, datasets appended,
 * chunk counts added. A side whose counts are in chunks is first converted
 * to the other side's chunk size. in_sum survives only where both have it. */
int kiln_imatrix_merge(kiln_imatrix *dst, const kiln_imatrix *src, kiln_err *err);

/* The per-column weights llama-quantize uses for a weight of n_expert
 * matrices of rows n_per_row long: in_sum2 / count, matrix by matrix
 * (a matrix whose count is 0 gets weight 1 everywhere and is counted in
 * *zero_matrices). The entry must hold exactly n_per_row * n_expert
 * values; `out` receives that many. -1 with a message on a size mismatch
 * or a non-finite weight. */
int kiln_imatrix_weights(const kiln_imatrix_entry *e, int64_t n_per_row, int64_t n_expert, float *out,
                         int64_t *zero_matrices, kiln_err *err);

#endif
