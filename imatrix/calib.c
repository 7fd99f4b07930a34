/* imatrix/calib.c - joining calibration documents into one text, and
 * telling the kinds of source apart (see calib.h for the rules). */
#include "calib.h"
#include "calib_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int calib_put(calib_text *t, const void *d, size_t n, kiln_err *err) {
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 1 << 16;
        while (cap < t->n + n + 1) cap *= 2;
        char *p = realloc(t->p, cap);
        if (!p) return kiln_fail(err, NULL, NULL, -1, "out of memory joining the calibration text");
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->n, d, n);
    t->n += n;
    t->p[t->n] = 0;
    return 0;
}

int calib_add_doc(calib_text *t, const char *d, size_t n, kiln_err *err) {
    if (n == 0) return 0;
    /* Without a separator the last word of one document and the first of
     * the next would tokenize as one word. */
    if (t->n > 0 && t->p[t->n - 1] != '\n' && calib_put(t, "\n", 1, err) < 0) return -1;
    return calib_put(t, d, n, err);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* JSON Lines is recognised by name because plain text may well start with
 * '{'. A .zst suffix is looked through. */
static bool is_jsonl_name(const char *name) {
    char base[4096];
    snprintf(base, sizeof base, "%s", name);
    size_t n = strlen(base);
    if (ends_with(base, ".zst")) base[n - 4] = 0;
    else if (ends_with(base, ".zstd")) base[n - 5] = 0;
    return ends_with(base, ".jsonl") || ends_with(base, ".ndjson");
}

int calib_add_source(calib_text *t, const char *name, const uint8_t *d, size_t n, kiln_err *err) {
    uint8_t *plain = NULL;
    size_t plain_n = n;
    if (calib_is_zstd(d, n)) {
        if (calib_unzstd(name, d, n, &plain, &plain_n, err) < 0) return -1;
        d = plain;
    }
    int rc = is_jsonl_name(name) ? calib_add_jsonl(t, name, (const char *)d, plain_n, err)
                                 : calib_add_doc(t, (const char *)d, plain_n, err);
    free(plain);
    return rc;
}

/* Reads a whole file ("-": standard input) into a malloc'd buffer. */
static int slurp(const char *path, uint8_t **out, size_t *out_n, kiln_err *err) {
    bool is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) return kiln_fail(err, path, NULL, -1, "cannot open: %s", strerror(errno));
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 1 << 16;
            uint8_t *b = realloc(buf, ncap);
            if (!b) {
                rc = kiln_fail(err, path, NULL, -1, "out of memory");
                break;
            }
            buf = b;
            cap = ncap;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) rc = kiln_fail(err, path, NULL, (int64_t)n, "read error: %s", strerror(errno));
            break;
        }
    }
    if (!is_stdin) fclose(f);
    if (rc < 0) {
        free(buf);
        return -1;
    }
    *out = buf;
    *out_n = n;
    return 0;
}

/* The first bytes of a file, enough to recognise a tar header. */
static size_t peek(const char *path, uint8_t *head, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(head, 1, cap, f);
    fclose(f);
    return n;
}

int kiln_calib_read(const char *const *paths, int n_paths, const char *field, char **text, size_t *len,
                    kiln_err *err) {
    calib_text t = {.field = field ? field : "text"};
    if (n_paths <= 0) return kiln_fail(err, NULL, NULL, -1, "no calibration file given");
    for (int i = 0; i < n_paths; i++) {
        const char *path = paths[i];
        uint8_t head[512];
        size_t nh = strcmp(path, "-") ? peek(path, head, sizeof head) : 0;
        int rc;
        if (calib_is_archive(path, head, nh)) {
            rc = calib_add_archive(&t, path, err);
        } else {
            uint8_t *d = NULL;
            size_t n = 0;
            rc = slurp(path, &d, &n, err);
            if (rc == 0) {
                rc = calib_add_source(&t, path, d, n, err);
                free(d);
            }
        }
        if (rc < 0) {
            free(t.p);
            return -1;
        }
    }
    if (!t.p && calib_put(&t, "", 0, err) < 0) return -1;
    *text = t.p;
    *len = t.n;
    return 0;
}
