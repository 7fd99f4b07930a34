/* core/arena.h - a bump allocator for data that lives exactly as long as
 * its owner (a parsed file's string tables, nested arrays). Freeing the
 * arena frees everything at once, so parsers need no per-item cleanup on
 * their many error paths. */
#ifndef KILN_ARENA_H
#define KILN_ARENA_H

#include <stddef.h>

typedef struct kiln_arena_chunk kiln_arena_chunk;
typedef struct kiln_arena {
    kiln_arena_chunk *head;
} kiln_arena;

/* Zeroed memory of `size` bytes aligned to 16, or NULL when out of memory. */
void *kiln_arena_alloc(kiln_arena *a, size_t size);
void kiln_arena_free(kiln_arena *a);

#endif
