/* convert/json.h - the small JSON helpers the converter needs on top of
 * jansson: parsing a file's text with a one-line error, and reading Hugging
 * Face config values the way convert_hf_to_gguf.py does (find_hparam: the
 * first of several alternative keys that is present wins, even when its
 * value is null).
 *
 * Nothing here knows about models; see convert/hparams.c for that. */
#ifndef KILN_CONVERT_JSON_H
#define KILN_CONVERT_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"

/* Parses `len` bytes of JSON text. Returns a new reference, or NULL with
 * "FILE: line L column C: what" in err. */
json_t *cv_json_parse(const char *text, size_t len, const char *fname, kiln_err *err);

/* The first key of the NULL-terminated `keys` present in `obj` (its value
 * may be JSON null). Returns the value (borrowed) and sets *key, or NULL
 * when none is present. */
json_t *cv_json_find(const json_t *obj, const char *const *keys, const char **key);

/* An integer value: a JSON integer, or a real with an integral value.
 * Booleans are not integers here. */
bool cv_json_int(const json_t *v, int64_t *out);

/* A number (integer or real) as a double. */
bool cv_json_num(const json_t *v, double *out);

/* String value or NULL (borrowed). */
const char *cv_json_str(const json_t *v);

/* Python truthiness of a JSON value, as `if value:` sees it. */
bool cv_json_truthy(const json_t *v);

#endif
