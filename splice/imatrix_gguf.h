/* splice/imatrix_gguf.h - reads llama.cpp's GGUF importance matrices, for
 * `kiln splice --requantize --imatrix FILE`.
 *
 * llama-imatrix stores, per weight tensor NAME, `NAME.in_sum2` (F32,
 * [ne0, n_mat]: sums of squared activations per input column, one row per
 * expert, or one row for a dense matrix) and `NAME.counts` (F32, [1, n_mat]:
 * how many activations each row saw). The column weights llama-quantize
 * uses for matrix e are in_sum2[e][j] / counts[e]; a matrix that saw no
 * input gets weight 1 everywhere.
 *
 * Kept in splice/ (and prefixed kiln_splice_) because no shared loader
 * existed when splice was written; it only reads, it never computes or
 * writes imatrices, and it does not read the legacy .dat format. */
#ifndef KILN_SPLICE_IMATRIX_GGUF_H
#define KILN_SPLICE_IMATRIX_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"
#include "../core/gguf.h"

typedef struct kiln_splice_imatrix {
    kiln_gguf *g;
} kiln_splice_imatrix;

/* One tensor's entry; the pointers point into the mapped file. */
typedef struct kiln_splice_imatrix_entry {
    const kiln_tensor *sums;   /* NAME.in_sum2 */
    const kiln_tensor *counts; /* NAME.counts */
    int64_t ne0;               /* columns (the weight's row length) */
    int64_t n_mat;             /* experts, or 1 */
} kiln_splice_imatrix_entry;

/* Opens an imatrix GGUF. Returns -1 with a message when the file cannot be
 * read or is not an imatrix (general.type must be "imatrix"). */
int kiln_splice_imatrix_open(kiln_splice_imatrix *m, const char *path, kiln_err *err);
void kiln_splice_imatrix_close(kiln_splice_imatrix *m);

/* Finds the entry of weight tensor `name`. Returns 1 when found and
 * well-formed, 0 when the file has no entry for it, -1 (with a message)
 * when the entry's tensors have the wrong type or shape. */
int kiln_splice_imatrix_find(const kiln_splice_imatrix *m, const char *name,
                             kiln_splice_imatrix_entry *e, kiln_err *err);

/* Writes matrix `mat`'s ne0 column weights to w. Returns false when that
 * matrix saw no input (counts == 0): w is then all ones. */
bool kiln_splice_imatrix_weights(const kiln_splice_imatrix_entry *e, int64_t mat, float *w);

#endif
