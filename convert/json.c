/* convert/json.c - JSON helpers for the converter (see json.h), and the
 * read marks behind `kiln convert --verbose`. */
#include "json.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Hugging Face writes integers no int64 holds into many configs (the real
 * Llama-2 and Llama-3 tokenizer_config.json carry "model_max_length":
 * 1000000000000000019884624838656), which jansson refuses as "too big
 * integer". Python reads them as ints and the converter never looks at
 * most of them, so kiln reads them as floats: this returns a copy of the
 * text in which every integer literal outside a string that overflows
 * int64 gets ".0" appended, or NULL when out of memory. */
static char *reals_for_big_integers(const char *text, size_t len, size_t *out_len) {
    char *out = malloc(len * 3 / 2 + 16); /* each widened literal has >= 19 digits */
    if (!out) return NULL;
    size_t o = 0;
    bool in_string = false;
    for (size_t i = 0; i < len;) {
        char c = text[i];
        if (in_string) {
            out[o++] = text[i++];
            if (c == '\\' && i < len) out[o++] = text[i++];
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        if (c != '-' && !isdigit((unsigned char)c)) {
            out[o++] = text[i++];
            continue;
        }
        size_t start = i, digits = 0;
        bool integral = true;
        if (text[i] == '-') i++;
        for (; i < len && isdigit((unsigned char)text[i]); i++) digits++;
        for (; i < len && (isdigit((unsigned char)text[i]) || strchr(".eE+-", text[i])); i++) integral = false;
        memcpy(out + o, text + start, i - start);
        o += i - start;
        if (integral && digits >= 19) {
            char buf[32] = {0};
            memcpy(buf, text + start, i - start < sizeof buf - 1 ? i - start : sizeof buf - 1);
            errno = 0;
            (void)strtoll(buf, NULL, 10);
            if (digits > 19 || errno == ERANGE) {
                memcpy(out + o, ".0", 2);
                o += 2;
            }
        }
    }
    *out_len = o;
    return out;
}

json_t *cv_json_parse(const char *text, size_t len, const char *fname, kiln_err *err) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    if (!root && strstr(jerr.text, "too big")) {
        size_t wide_len = 0;
        char *wide = reals_for_big_integers(text, len, &wide_len);
        if (!wide) {
            kiln_fail(err, fname, NULL, -1, "out of memory");
            return NULL;
        }
        root = json_loadb(wide, wide_len, 0, &jerr);
        free(wide);
    }
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
        json_t *v = cv_json_get(obj, *keys);
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

/* ---- read marks ---------------------------------------------------------- */

/* The marks lookups on this thread record into (cv_json_reads_use). */
static _Thread_local cv_json_reads *reads_in_use;

/* The entry that holds the marks of `obj`, or NULL when it is not watched. */
static struct cv_json_watched *marks_of(const cv_json_reads *r, const json_t *obj) {
    for (size_t i = 0; r && obj && i < r->n; i++)
        if (r->w[i].obj == obj) return (struct cv_json_watched *)&r->w[r->w[i].marks_in];
    return NULL;
}

static int watch(cv_json_reads *r, const json_t *obj, size_t marks_in) {
    if (!obj || marks_of(r, obj)) return 0;
    if (r->n == CV_JSON_WATCH_MAX) {
        r->incomplete = true;
        return -1;
    }
    r->w[r->n] = (struct cv_json_watched){.obj = obj, .marks_in = marks_in};
    r->n++;
    return 0;
}

int cv_json_reads_watch(cv_json_reads *r, const json_t *obj) { return watch(r, obj, r->n); }

int cv_json_reads_alias(cv_json_reads *r, const json_t *copy, const json_t *orig) {
    const struct cv_json_watched *o = marks_of(r, orig);
    if (!o || !copy || marks_of(r, copy)) return 0;
    if (watch(r, copy, (size_t)(o - r->w)) < 0) return -1;
    json_incref((json_t *)copy);
    return 0;
}

cv_json_reads *cv_json_reads_use(cv_json_reads *r) {
    cv_json_reads *prev = reads_in_use;
    reads_in_use = r;
    return prev;
}

bool cv_json_reads_hit(const cv_json_reads *r, const json_t *obj, const char *key) {
    const struct cv_json_watched *w = marks_of(r, obj);
    for (size_t i = 0; w && i < w->n; i++)
        if (!strcmp(w->keys[i], key)) return true;
    return false;
}

static void mark(cv_json_reads *r, struct cv_json_watched *w, const char *key) {
    for (size_t i = 0; i < w->n; i++)
        if (!strcmp(w->keys[i], key)) return;
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 32;
        char **keys = realloc(w->keys, cap * sizeof *keys);
        if (!keys) {
            r->incomplete = true;
            return;
        }
        w->keys = keys;
        w->cap = cap;
    }
    if (!(w->keys[w->n] = strdup(key))) {
        r->incomplete = true;
        return;
    }
    w->n++;
}

void cv_json_reads_free(cv_json_reads *r) {
    for (size_t i = 0; i < r->n; i++) {
        for (size_t k = 0; k < r->w[i].n; k++) free(r->w[i].keys[k]);
        free(r->w[i].keys);
        if (r->w[i].marks_in != i) json_decref((json_t *)r->w[i].obj); /* a copy: held by alias */
    }
    memset(r, 0, sizeof *r);
}

json_t *cv_json_copy(const json_t *obj) {
    json_t *copy = json_deep_copy(obj);
    if (copy) (void)cv_json_reads_alias(reads_in_use, copy, obj); /* a failure marks the list incomplete */
    return copy;
}

json_t *cv_json_get(const json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    struct cv_json_watched *w = v ? marks_of(reads_in_use, obj) : NULL;
    if (w) mark(reads_in_use, w, key);
    return v;
}
