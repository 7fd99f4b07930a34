/* core/arena.c - see arena.h. */
#include "arena.h"

#include <stdlib.h>
#include <string.h>

struct kiln_arena_chunk {
    kiln_arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *kiln_arena_alloc(kiln_arena *a, size_t size) {
    size = (size + 15) & ~(size_t)15;
    kiln_arena_chunk *c = a->head;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > (1u << 20) ? size : (1u << 20);
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

void kiln_arena_free(kiln_arena *a) {
    kiln_arena_chunk *c = a->head;
    while (c) {
        kiln_arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}
