/* inspect/inspect.h - what `kiln inspect` reports, as a JSON tree.
 *
 * The report is built once, as data (schema "kiln.inspect/1", documented
 * in README.md), and the command renders it either as JSON or as text, so
 * the two can never disagree. */
#ifndef KILN_INSPECT_H
#define KILN_INSPECT_H

#include <jansson.h>
#include <stdbool.h>

#include "view.h"

typedef struct kiln_inspect_opts {
    const char *tensor_regex; /* POSIX extended regex filter, or NULL */
    bool stats;               /* add per-tensor statistics */
    size_t max_items;         /* array items shown in metadata; 0 = all */
} kiln_inspect_opts;

/* Builds the report for an open view. NULL with a message on error. */
json_t *kiln_inspect_report(const kiln_view *v, const kiln_inspect_opts *o, kiln_err *err);

#endif
