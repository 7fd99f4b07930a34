/* inspect/stats.h - per-tensor value statistics after dequantization:
 * min, max, mean, standard deviation and NaN/Inf counts. Work is split
 * into fixed chunks of elements and reduced in chunk order, so the result
 * is the same for any thread count. */
#ifndef KILN_STATS_H
#define KILN_STATS_H

#include <stdint.h>

#include "../core/progress.h"
#include "view.h"

typedef struct kiln_stats {
    double min, max, mean, std;
    uint64_t n_nan, n_inf, n_finite;
} kiln_stats;

/* Computes stats over every element of t; progress counts bytes. */
int kiln_tensor_stats(const kiln_view_tensor *t, kiln_stats *out, kiln_progress *progress, kiln_err *err);

/* Compares two tensors element by element (same element count). */
typedef struct kiln_compare {
    double max_abs, rmse, rel, cosine;
} kiln_compare;

int kiln_tensor_compare(const kiln_view_tensor *a, const kiln_view_tensor *b, kiln_compare *out,
                        kiln_progress *progress, kiln_err *err);

#endif
