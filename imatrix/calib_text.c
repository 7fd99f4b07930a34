/* imatrix/calib_text.c - the one growing text that calibration documents
 * are joined into, under calib.h's joining rule (a newline between two
 * documents only when the first does not end with one).
 *
 * A leaf of the calib files: every reader appends here and this file calls
 * none of them (see calib_impl.h). */
#include "calib_impl.h"

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
