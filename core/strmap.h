/* core/strmap.h - an open-addressing hash index from byte strings to
 * array positions. Keys are not copied: they must outlive the map (they
 * usually point into a mapped file). Used for tensor and key lookups, so a
 * model with 100,000 tensors opens and resolves names in linear time. */
#ifndef KILN_STRMAP_H
#define KILN_STRMAP_H

#include <stdbool.h>
#include <stdint.h>

typedef struct kiln_strmap_entry {
    const char *key;
    uint64_t len;
    uint64_t val;
} kiln_strmap_entry;

typedef struct kiln_strmap {
    uint64_t cap;           /* slots: a power of two, at least twice count */
    uint64_t count;
    uint64_t *slots;        /* 0 when empty, else hash tag << 32 | (entry + 1) */
    kiln_strmap_entry *entries; /* cap / 2 of them, the first count in use */
} kiln_strmap;

/* Sizes the map for `n` entries (n < 2^31). Returns -1 when out of memory
 * or n is larger. */
int kiln_strmap_init(kiln_strmap *m, uint64_t n);
/* Frees the map; a zeroed map is fine. */
void kiln_strmap_free(kiln_strmap *m);

/* Inserts key -> val. Returns 1 when inserted, 0 when the key was already
 * present (its value is stored in *existing if not NULL), -1 when full. */
int kiln_strmap_put(kiln_strmap *m, const char *key, uint64_t len, uint64_t val, uint64_t *existing);

/* Starts loading the slot `key` hashes to, for a put or get of it a
 * little later: a loop over many keys hints a few keys ahead, so that
 * its probes (one random read each in a table larger than the cache) do
 * not wait one by one. Changes nothing. */
void kiln_strmap_prefetch(const kiln_strmap *m, const char *key, uint64_t len);

/* Looks a key up; false when absent. */
bool kiln_strmap_get(const kiln_strmap *m, const char *key, uint64_t len, uint64_t *val);

#endif
