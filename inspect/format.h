/* inspect/format.h - turning GGUF metadata values into text and JSON.
 * Shared by inspect (printing) and diff (comparing and printing). Long
 * arrays are summarised as their first `max_items` items plus a count. */
#ifndef KILN_FORMAT_H
#define KILN_FORMAT_H

#include <stdbool.h>
#include <stddef.h>

#include "../core/gguf.h"
#include "../core/jsonw.h"

/* "string", "[string x 1024]", "[[uint8]] x 2" ... */
void kiln_value_type_str(const kiln_value *v, char *out, size_t cap);

/* Human-readable value; arrays show at most max_items items (0: all).
 * Output is truncated (ending in "...") at cap bytes. */
void kiln_value_str(const kiln_value *v, char *out, size_t cap, size_t max_items);

/* Streams the value as JSON: numbers, booleans, strings, arrays (at most
 * max_items elements when max_items > 0; the key's "count" gives the
 * full length). */
void kiln_jw_value(kiln_jsonw *w, const kiln_value *v, size_t max_items);

/* True when two values have the same type and content. */
bool kiln_value_equal(const kiln_value *a, const kiln_value *b);

#endif
