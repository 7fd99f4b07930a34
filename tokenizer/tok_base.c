/* tokenizer/tok_base.c - the containers every tokenizer file shares: the
 * growing id array, the merge queue (a binary heap of candidate bigrams)
 * that SPM and BPE both pop from, and the token lookup by text.
 *
 * A leaf of tokenizer/: it calls nothing in the other tokenizer files, so
 * the merge algorithms (tokenizer_spm.c, tokenizer_bpe.c) can use it
 * without reaching back up into tokenizer.c, which calls them. */
#include <stdlib.h>

#include "tokenizer_impl.h"

int kiln_ids_push(kiln_ids *o, int32_t id) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) return -1;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return 0;
}

int kiln_heap_push(kiln_bigram_heap *h, kiln_bigram b) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        kiln_bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v) return -1;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && kiln_bigram_before(&b, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = b;
    return 0;
}

kiln_bigram kiln_heap_pop(kiln_bigram_heap *h) {
    kiln_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && kiln_bigram_before(&h->v[c + 1], &h->v[c])) c++;
        if (!kiln_bigram_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

int32_t kiln_tok_find(const kiln_tokenizer *t, const char *s, size_t n) {
    uint64_t v;
    return kiln_strmap_get(&t->by_text, s, n, &v) ? (int32_t)v : KILN_TOKEN_NULL;
}
