/* imatrix/calib.c - joining calibration documents into one text, and
 * telling the kinds of source apart (see calib.h for the rules). */
#include "calib.h"
#include "calib_impl.h"

#include "../core/fileio.h"

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
            size_t n = 0;
            char *d = kiln_read_text(path, &n, err);
            rc = d ? calib_add_source(&t, path, (const uint8_t *)d, n, err) : -1;
            free(d);
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
