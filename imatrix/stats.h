/* imatrix/stats.h - what `kiln imatrix --show-statistics` and the end of a
 * run report about an importance matrix: per tensor, the sum, mean and
 * maximum of the per-column sums of x^2, the share of columns that carry
 * no data, and how many experts calibration tokens reached; and, per
 * layer, which experts none reached (they are kept with count 0, never
 * dropped, and quantization treats them as unweighted).
 *
 * Computing is separate from rendering; the renderers write to a stream
 * the caller chooses. */
#ifndef KILN_IMATRIX_STATS_H
#define KILN_IMATRIX_STATS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/error.h"
#include "../core/imatrix_file.h"

typedef struct kiln_imx_tstat {
    const char *name;       /* the entry's name (borrowed from the imatrix) */
    int64_t layer;          /* N of "blk.N.", else -1 */
    int64_t n, n_mat;       /* columns, matrices (experts) */
    double tokens;          /* counts summed over matrices */
    double sum, mean, max;  /* of the per-column sums of x^2, over matrices with data */
    double zero_share;      /* columns with no data (zero sum or no tokens) / all */
    int64_t n_covered;      /* matrices with a non-zero count */
} kiln_imx_tstat;

/* One record per entry of `im`, in its order, in a malloc'd array. */
kiln_imx_tstat *kiln_imx_stats(const kiln_imatrix *im, kiln_err *err);

/* A fixed-width table, one row per tensor, layers in numeric order. */
void kiln_imx_stats_table(FILE *out, const kiln_imatrix *im, const kiln_imx_tstat *st);

/* The same as JSON (schema "kiln.imatrix.stats/1"), including for each
 * tensor the list of experts that got no tokens. */
void kiln_imx_stats_json(FILE *out, const kiln_imatrix *im, const kiln_imx_tstat *st);

/* Lists, one line per layer (and per distinct set of experts), the
 * experts of 3-D weights that no token reached. Returns the number of
 * weights with such experts (0: full coverage, nothing written). */
int64_t kiln_imx_coverage_report(FILE *out, const kiln_imatrix *im);

#endif
