/* inspect/inspect.h - what `kiln inspect` reports.
 *
 * kiln_inspect_collect() does the work (filtering, statistics, per-type
 * totals) into a result; the two renderers write it as text or as JSON
 * (schema "kiln.inspect/1", documented in README.md) from the same data,
 * so the two can never disagree. JSON is streamed (core/jsonw.h): a model
 * with 100,000 tensors renders in milliseconds. */
#ifndef KILN_INSPECT_H
#define KILN_INSPECT_H

#include <stdbool.h>
#include <stdio.h>

#include "stats.h"
#include "view.h"

typedef struct kiln_inspect_opts {
    const char *tensor_regex; /* PCRE2 filter (core/name_regex.h), or NULL */
    bool stats;               /* add per-tensor statistics */
    size_t max_items;         /* array items shown in metadata; 0 = all */
} kiln_inspect_opts;

typedef struct kiln_type_total {
    const char *type;
    uint64_t count, bytes;
} kiln_type_total;

typedef struct kiln_inspect_result {
    uint64_t n_sel;
    const kiln_view_tensor **sel;  /* selected tensors, in file order */
    kiln_stats *stats;             /* per selected tensor, when asked */
    bool *has_stats;               /* false: kiln cannot dequantize it */
    kiln_type_total types[64];     /* in first-seen order */
    int n_types;
    uint64_t total_bytes, total_elements;
} kiln_inspect_result;

int kiln_inspect_collect(const kiln_view *v, const kiln_inspect_opts *o, kiln_inspect_result *r, kiln_err *err);
void kiln_inspect_free(kiln_inspect_result *r);

void kiln_inspect_write_json(FILE *out, const kiln_view *v, const kiln_inspect_result *r, const kiln_inspect_opts *o);
void kiln_inspect_write_text(FILE *out, const kiln_view *v, const kiln_inspect_result *r, const kiln_inspect_opts *o);

#endif
