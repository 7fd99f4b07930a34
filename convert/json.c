/* convert/json.c - JSON helpers for the converter (see json.h). */
#include "json.h"

#include <math.h>

json_t *cv_json_parse(const char *text, size_t len, const char *fname, kiln_err *err) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    if (!root) {
        char field[64];
        snprintf(field, sizeof field, "line %d column %d", jerr.line, jerr.column);
        kiln_fail(err, fname, field, (int64_t)jerr.position, "invalid JSON: %s", jerr.text);
        return NULL;
    }
    return root;
}

json_t *cv_json_find(const json_t *obj, const char *const *keys, const char **key) {
    if (!json_is_object(obj)) return NULL;
    for (; *keys; keys++) {
        json_t *v = json_object_get(obj, *keys);
        if (v) {
            if (key) *key = *keys;
            return v;
        }
    }
    return NULL;
}

bool cv_json_int(const json_t *v, int64_t *out) {
    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != floor(d) || fabs(d) > 9.0e15) return false;
        *out = (int64_t)d;
        return true;
    }
    return false;
}

bool cv_json_num(const json_t *v, double *out) {
    if (!json_is_number(v)) return false;
    *out = json_number_value(v);
    return true;
}

const char *cv_json_str(const json_t *v) {
    return json_is_string(v) ? json_string_value(v) : NULL;
}

bool cv_json_truthy(const json_t *v) {
    if (!v || json_is_null(v) || json_is_false(v)) return false;
    if (json_is_true(v)) return true;
    if (json_is_integer(v)) return json_integer_value(v) != 0;
    if (json_is_real(v)) return json_real_value(v) != 0.0;
    if (json_is_string(v)) return json_string_length(v) > 0;
    if (json_is_array(v)) return json_array_size(v) > 0;
    if (json_is_object(v)) return json_object_size(v) > 0;
    return false;
}
