/* core/strmap.c - see strmap.h. Linear probing at load <= 1/2.
 *
 * Laid out for a large map built once (100,000 tensor names at every GGUF
 * open): a slot is 8 bytes, 32 bits of the key's hash beside the index of
 * its entry, so a probe reads one slot and looks at a key only when the
 * hash bits agree; the entries (key, length, value) fill a second array
 * in insertion order, touched once each. The hash reads 8 bytes per step.
 * It is not seeded: a crafted file can make its names collide and slow
 * the open down, as with any unseeded hash, but never change a result. */
#include "strmap.h"

#include <stdlib.h>
#include <string.h>

static inline uint64_t load64(const char *s) {
    uint64_t w;
    memcpy(&w, s, 8);
    return w;
}

static inline uint64_t load32(const char *s) {
    uint32_t w;
    memcpy(&w, s, 4);
    return w;
}

/* Multiply and fold: each step spreads every input bit over the word. */
static inline uint64_t stir(uint64_t h, uint64_t w) {
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
}

static uint64_t hash(const char *s, uint64_t len) {
    uint64_t h = stir(0x9e3779b97f4a7c15ull, len);
    uint64_t n = len;
    for (; n >= 8; s += 8, n -= 8) h = stir(h, load64(s));
    /* The last 1..7 bytes as two overlapping loads (4..7) or three single
     * bytes (1..3): every byte is read, none past the end. */
    if (n >= 4) h = stir(h, load32(s) | load32(s + n - 4) << 32);
    else if (n > 0) h = stir(h, (uint64_t)(unsigned char)s[0] | (uint64_t)(unsigned char)s[n / 2] << 8 |
                                    (uint64_t)(unsigned char)s[n - 1] << 16);
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 29);
}

int kiln_strmap_init(kiln_strmap *m, uint64_t n) {
    memset(m, 0, sizeof *m);
    if (n >= (1ull << 31)) return -1;
    uint64_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    m->cap = cap;
    m->slots = calloc(cap, sizeof *m->slots);
    m->entries = malloc(cap / 2 * sizeof *m->entries);
    if (!m->slots || !m->entries) {
        kiln_strmap_free(m);
        return -1;
    }
    return 0;
}

void kiln_strmap_free(kiln_strmap *m) {
    free(m->slots);
    free(m->entries);
    memset(m, 0, sizeof *m);
}

/* The slot holding key, or the empty slot where it would go. */
static uint64_t *find(const kiln_strmap *m, const char *key, uint64_t len, uint64_t h) {
    uint64_t mask = m->cap - 1, tag = h >> 32;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        uint64_t *slot = &m->slots[i];
        if (!*slot) return slot;
        if (*slot >> 32 != tag) continue;
        const kiln_strmap_entry *e = &m->entries[(uint32_t)*slot - 1];
        if (e->len == len && (len == 0 || !memcmp(e->key, key, len))) return slot;
    }
}

int kiln_strmap_put(kiln_strmap *m, const char *key, uint64_t len, uint64_t val, uint64_t *existing) {
    if (!m->cap || m->count * 2 >= m->cap) return -1;
    uint64_t h = hash(key, len), *slot = find(m, key, len, h);
    if (*slot) {
        if (existing) *existing = m->entries[(uint32_t)*slot - 1].val;
        return 0;
    }
    m->entries[m->count] = (kiln_strmap_entry){key ? key : "", len, val};
    m->count++;
    *slot = (h >> 32) << 32 | m->count; /* entry index + 1: never 0 */
    return 1;
}

bool kiln_strmap_get(const kiln_strmap *m, const char *key, uint64_t len, uint64_t *val) {
    if (!m->cap) return false;
    const uint64_t *slot = find(m, key, len, hash(key, len));
    if (!*slot) return false;
    *val = m->entries[(uint32_t)*slot - 1].val;
    return true;
}

void kiln_strmap_prefetch(const kiln_strmap *m, const char *key, uint64_t len) {
    if (m->cap) __builtin_prefetch(&m->slots[hash(key, len) & (m->cap - 1)], 1);
}
