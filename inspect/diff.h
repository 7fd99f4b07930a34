/* inspect/diff.h - what `kiln diff A B` reports, as a JSON tree (schema
 * "kiln.diff/1", documented in README.md): metadata keys added, removed
 * and changed; tensors added, removed, or changed in type or shape; with
 * values, per-tensor max abs difference, RMSE, relative error and cosine;
 * and whether the gates (tolerances) held. */
#ifndef KILN_DIFF_H
#define KILN_DIFF_H

#include <jansson.h>
#include <stdbool.h>

#include "view.h"

typedef struct kiln_diff_opts {
    bool values;          /* compare tensor values */
    const char *tensor_regex;
    double max_abs;       /* gates; < 0 when unset */
    double max_rmse;
    double max_rel;
    double min_cosine;
} kiln_diff_opts;

/* Builds the report. "passed" is false when any gate is set and either a
 * tensor breaks it or the two files differ in tensor names or shapes. */
json_t *kiln_diff_report(const kiln_view *a, const kiln_view *b, const kiln_diff_opts *o, kiln_err *err);

#endif
