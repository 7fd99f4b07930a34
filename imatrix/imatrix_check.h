/* imatrix/imatrix_check.h - does an importance matrix belong to a model?
 *
 * An imatrix names weights and gives per-column statistics; used on
 * another model it either fails deep inside quantization or, worse, fits
 * by accident and steers every block with the wrong columns. This check
 * runs before any work: every entry must name a weight of the model whose
 * row length (and expert count, for 3-D weights) matches. A legacy .dat
 * entry, which flattens experts into one matrix, matches when its total
 * size does; so does one of a grouped 2-D weight (kiln_imatrix_row_groups).
 * Weights the imatrix does not mention are not an error here (the
 * quantizer decides whether it needs them). */
#ifndef KILN_IMATRIX_CHECK_H
#define KILN_IMATRIX_CHECK_H

#include "../core/error.h"
#include "../core/gguf.h"
#include "../core/imatrix_file.h"

/* The number of row groups of a 2-D weight whose statistics `e` holds
 * side by side: a weight the graph applies as `groups` separate products,
 * each to its own run of ne[1] / groups rows and its own input, which
 * llama-imatrix stores as one matrix of groups x ne[0] columns
 * (deepseek4's attn_output_a: ggml's mul_mat of the weight viewed as
 * [ne[0], ne[1] / groups, groups]). Group g's columns weigh rows
 * g * ne[1] / groups .. (g + 1) * ne[1] / groups - 1. Returns groups > 1
 * when e is one matrix of groups * ne[0] values for a 2-D weight whose
 * rows split evenly, else 1. */
int64_t kiln_imatrix_row_groups(const kiln_imatrix_entry *e, const int64_t *ne, uint32_t n_dims);

/* 0 when entry `e` fits a weight of `model_path` whose shape is ne[0..n_dims)
 * (ne NULL: the model has no weight of that name); else -1. */
int kiln_imatrix_check_entry(const kiln_imatrix_entry *e, const char *im_path, const char *model_path,
                             const int64_t *ne, uint32_t n_dims, kiln_err *err);

/* 0 when every entry of `im` fits a weight of `model`; else -1 with one
 * line naming `im_path`, the entry and what does not match. */
int kiln_imatrix_check_model(const kiln_imatrix *im, const char *im_path, const kiln_gguf *model, kiln_err *err);

#endif
