/* core/bytebuf.c - the growable byte buffer (see bytebuf.h). */
#include "bytebuf.h"

#include <stdlib.h>
#include <string.h>

void kiln_bytebuf_put(kiln_bytebuf *b, const void *d, uint64_t n) {
    if (b->oom || n == 0) return;
    if (b->len + n > b->cap) {
        /* Doubling keeps appends amortised O(1) however small they are. */
        uint64_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

void kiln_bytebuf_put_u32(kiln_bytebuf *b, uint32_t v) { kiln_bytebuf_put(b, &v, sizeof v); }
void kiln_bytebuf_put_i32(kiln_bytebuf *b, int32_t v) { kiln_bytebuf_put(b, &v, sizeof v); }
void kiln_bytebuf_put_u64(kiln_bytebuf *b, uint64_t v) { kiln_bytebuf_put(b, &v, sizeof v); }

void kiln_bytebuf_free(kiln_bytebuf *b) {
    free(b->p);
    *b = (kiln_bytebuf){0};
}
