/* imatrix/calib.c - kiln_calib_read(): each input path is read as an
 * archive (calib_archive.c) or as one source (calib_source.c), and the
 * documents are joined into one text (calib_text.c). See calib.h for the
 * rules, calib_impl.h for the order of the calib files. */
#include "calib.h"
#include "calib_impl.h"

#include "../core/fileio.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
