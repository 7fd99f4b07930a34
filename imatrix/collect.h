/* imatrix/collect.h - accumulating importance statistics from the
 * runtime's matmul hook (runtime.h: kiln_matmul_hook).
 *
 * For every weight whose product input reaches the hook, and for each of
 * its matrices (the experts of a 3-D weight, else one), per input column:
 * the sum of x^2 and, when asked, the sum of x, plus the number of input
 * rows (tokens) seen. As llama-imatrix: only weights named "blk.*" are
 * collected, and output.weight only with process_output (kiln adds
 * deepseek4's output_hc_fn.weight, see collect.c); an expert's
 * statistics come from exactly the tokens routed to it, and experts that
 * got none keep count 0.
 *
 * Sums are kept in double and counts in int64 (llama-imatrix uses float),
 * so that long calibration runs do not stall on float rounding; files get
 * the float values llama.cpp expects. The whole state round-trips through
 * a checkpoint (checkpoint.h) bit for bit, so a resumed run ends with the
 * same numbers as an uninterrupted one.
 *
 * A non-finite sum stops collection: the collector remembers the first
 * one (tensor, expert, chunk, token, column) and ignores later calls; the
 * driver checks `failed` after every chunk. */
#ifndef KILN_IMATRIX_COLLECT_H
#define KILN_IMATRIX_COLLECT_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"
#include "../core/gguf.h"
#include "../core/imatrix_file.h"

typedef struct kiln_imx_acc {
    char *name;       /* the weight, e.g. "blk.3.ffn_up_exps.weight" */
    int64_t n;        /* input columns */
    int64_t n_mat;    /* experts of a 3-D weight, else 1 */
    double *sum2;     /* n_mat * n, matrix after matrix */
    double *sum;      /* n_mat * n, or NULL when sums of x are not kept */
    int64_t *counts;  /* n_mat: rows (tokens) seen per matrix */
} kiln_imx_acc;

typedef struct kiln_imx_collector {
    kiln_imx_acc *acc;       /* sorted by name (strcmp) */
    uint64_t n_acc, cap_acc;
    const kiln_gguf *model;  /* where 3-D weights' expert counts are read; may be NULL */
    int64_t n_expert;        /* expert count used when the model does not say */
    bool process_output;     /* collect output.weight too */
    bool with_sum;           /* keep sums of x as well */
    int64_t chunk;           /* chunk being evaluated, for messages */
    bool failed;
    kiln_err err;            /* why, when failed */
} kiln_imx_collector;

/* A collector with nothing in it. */
void kiln_imx_collector_init(kiln_imx_collector *c, const kiln_gguf *model, bool process_output, bool with_sum);
void kiln_imx_collector_free(kiln_imx_collector *c);

/* The kiln_matmul_hook: `user` is the collector. */
void kiln_imx_hook(void *user, const char *tensor_name, int expert, const float *x, int64_t n_tokens,
                   int64_t n_in);

/* The accumulator of `name`, created (zeroed) when absent. An entry read
 * from a legacy .dat file (one matrix of n * n_mat values) is reshaped to
 * n_mat matrices with its count broadcast, as llama-imatrix does; one
 * kept per matrix for a dense 3-D weight joins the single matrix of n_mat
 * x n columns asked for when its counts agree. NULL with a message when
 * the shape disagrees with what is there. */
kiln_imx_acc *kiln_imx_collector_get(kiln_imx_collector *c, const char *name, int64_t n, int64_t n_mat,
                                     kiln_err *err);

/* Binary search; NULL when absent. */
kiln_imx_acc *kiln_imx_collector_find(const kiln_imx_collector *c, const char *name);

/* Adds the sums and counts of `im` (counts rounded to integers; a matrix
 * whose counts are in chunks must first be given a chunk size with
 * kiln_imatrix_set_chunk_size()). */
int kiln_imx_collector_add_imatrix(kiln_imx_collector *c, const kiln_imatrix *im, kiln_err *err);

/* The statistics as an imatrix (float sums and counts, entries sorted as
 * llama.cpp writes them) with the given chunk count, chunk size and
 * datasets; sums of x only when the collector keeps them. NULL on error. */
kiln_imatrix *kiln_imx_collector_export(const kiln_imx_collector *c, uint32_t chunk_count, uint32_t chunk_size,
                                        const char *const *datasets, uint64_t n_datasets, kiln_err *err);

#endif
