/* imatrix/imatrix_check.h - does an importance matrix belong to a model?
 *
 * An imatrix names weights and gives per-column statistics; used on
 * another model it either fails deep inside quantization or, worse, fits
 * by accident and steers every block with the wrong columns. This check
 * runs before any work: every entry must name a weight of the model whose
 * row length (and expert count, for 3-D weights) matches. A legacy .dat
 * entry, which flattens experts into one matrix, matches when its total
 * size does. Weights the imatrix does not mention are not an error here
 * (the quantizer decides whether it needs them). */
#ifndef KILN_IMATRIX_CHECK_H
#define KILN_IMATRIX_CHECK_H

#include "../core/error.h"
#include "../core/gguf.h"
#include "../core/imatrix_file.h"

/* 0 when entry `e` fits a weight of `model_path` whose shape is ne[0..n_dims)
 * (ne NULL: the model has no weight of that name); else -1. */
int kiln_imatrix_check_entry(const kiln_imatrix_entry *e, const char *im_path, const char *model_path,
                             const int64_t *ne, uint32_t n_dims, kiln_err *err);

/* 0 when every entry of `im` fits a weight of `model`; else -1 with one
 * line naming `im_path`, the entry and what does not match. */
int kiln_imatrix_check_model(const kiln_imatrix *im, const char *im_path, const kiln_gguf *model, kiln_err *err);

#endif
