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

/* ---- read marks ----------------------------------------------------------
 * Which members of config.json and tokenizer_config.json a conversion
 * looked up, so that `kiln convert --verbose` can name the keys kiln
 * ignored. The lookups are scattered over every arch_*.c, meta*.c and
 * vocab*.c; rather than thread a tracker through all of them, every
 * member lookup in convert/ goes through cv_json_get (never jansson's
 * json_object_get directly), which marks the member it finds when its
 * object is watched by the marks in use on this thread. Objects nobody
 * watches (tokenizer.json's 150k-entry vocab) cost one pointer compare
 * per watched object. */
#define CV_JSON_WATCH_MAX 16

typedef struct cv_json_reads {
    struct cv_json_watched {
        const json_t *obj;
        size_t marks_in;  /* the entry its marks go to: itself, or the
                             original it is a copy of; a copy is held (a
                             reference) so that its address stays its own */
        char **keys;      /* the members found, each once (owned) */
        size_t n, cap;
    } w[CV_JSON_WATCH_MAX];
    size_t n;
    bool incomplete; /* a mark or a copy could not be kept (out of memory,
                        or more than CV_JSON_WATCH_MAX objects) */
} cv_json_reads;

/* Watches `obj` (borrowed; must outlive the marks). NULL and repeated
 * objects are ignored. Returns 0, or -1 when CV_JSON_WATCH_MAX are taken. */
int cv_json_reads_watch(cv_json_reads *r, const json_t *obj);

/* Makes lookups on `copy` mark the members of watched `orig` (a no-op when
 * `orig` is not watched), holding a reference to `copy` until
 * cv_json_reads_free. Returns 0, or -1 when CV_JSON_WATCH_MAX are taken. */
int cv_json_reads_alias(cv_json_reads *r, const json_t *copy, const json_t *orig);

/* Makes `r` (or NULL: none) the marks lookups on this thread record into,
 * and returns the previous one, to be put back when done. */
cv_json_reads *cv_json_reads_use(cv_json_reads *r);

/* Whether member `key` of watched `obj` (or of a copy of it) was looked up
 * and found. */
bool cv_json_reads_hit(const cv_json_reads *r, const json_t *obj, const char *key);

/* Frees the marks and drops the copies' references. */
void cv_json_reads_free(cv_json_reads *r);

/* json_deep_copy, whose lookups mark the original's members when the
 * marks in use watch it. A new reference, or NULL when out of memory. */
json_t *cv_json_copy(const json_t *obj);

/* json_object_get, marking the member found (see above). */
json_t *cv_json_get(const json_t *obj, const char *key);

#endif
