/* core/strmap.h - an open-addressing hash index from byte strings to
 * array positions. Keys are not copied: they must outlive the map (they
 * usually point into a mapped file). Used for tensor and key lookups, so a
 * model with 100,000 tensors opens and resolves names in linear time. */
#ifndef KILN_STRMAP_H
#define KILN_STRMAP_H

#include <stdbool.h>
#include <stdint.h>

typedef struct kiln_strmap {
    uint64_t cap;           /* power of two */
    uint64_t count;
    const char **keys;
    uint64_t *lens;
    uint64_t *vals;
} kiln_strmap;

/* Sizes the map for `n` entries. Returns -1 when out of memory. */
int kiln_strmap_init(kiln_strmap *m, uint64_t n);
void kiln_strmap_free(kiln_strmap *m);

/* Inserts key -> val. Returns 1 when inserted, 0 when the key was already
 * present (its value is stored in *existing if not NULL), -1 when full. */
int kiln_strmap_put(kiln_strmap *m, const char *key, uint64_t len, uint64_t val, uint64_t *existing);

/* Looks a key up; false when absent. */
bool kiln_strmap_get(const kiln_strmap *m, const char *key, uint64_t len, uint64_t *val);

#endif
