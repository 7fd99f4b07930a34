/* imatrix/calib_source.c - the bytes of one calibration source (a file, or
 * a member of an archive) into documents: zstd is decompressed first
 * (calib_zstd.c), a JSON Lines name is split into records (calib_jsonl.c),
 * anything else is one document (calib_text.c).
 *
 * It sits under calib.c and calib_archive.c, which both hand it the bytes
 * they read, and over the leaves it dispatches to (see calib_impl.h). */
#include "calib_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
