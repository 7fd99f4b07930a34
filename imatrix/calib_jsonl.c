/* imatrix/calib_jsonl.c - JSON Lines calibration sets: each non-blank line
 * is an object whose string field (t->field) is one document. A line that
 * is not such an object is an error naming the line, not something to
 * skip: a dataset with the text under another key would otherwise
 * calibrate on nothing. */
#include "calib_impl.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return false;
    return true;
}

int calib_add_jsonl(calib_text *t, const char *name, const char *d, size_t n, kiln_err *err) {
    size_t line_no = 0;
    for (size_t at = 0; at < n;) {
        const char *nl = memchr(d + at, '\n', n - at);
        size_t end = nl ? (size_t)(nl - d) : n;
        line_no++;
        const char *line = d + at;
        size_t len = end - at;
        at = end + 1;
        if (blank(line, len)) continue;
        json_error_t jerr;
        json_t *obj = json_loadb(line, len, JSON_DECODE_ANY, &jerr);
        char where[64];
        snprintf(where, sizeof where, "line %zu", line_no);
        if (!obj) return kiln_fail(err, name, where, -1, "not JSON: %s", jerr.text);
        json_t *v = json_is_object(obj) ? json_object_get(obj, t->field) : NULL;
        if (!json_is_string(v)) {
            json_decref(obj);
            return kiln_fail(err, name, where, -1, "no string field \"%s\" (see --jsonl-field)", t->field);
        }
        int rc = calib_add_doc(t, json_string_value(v), json_string_length(v), err);
        json_decref(obj);
        if (rc < 0) return -1;
    }
    return 0;
}
