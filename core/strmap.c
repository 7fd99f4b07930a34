/* core/strmap.c - see strmap.h. FNV-1a hashing, linear probing, load <= 1/2. */
#include "strmap.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash(const char *s, uint64_t len) {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

int kiln_strmap_init(kiln_strmap *m, uint64_t n) {
    uint64_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    m->cap = cap;
    m->count = 0;
    m->keys = calloc(cap, sizeof *m->keys);
    m->lens = calloc(cap, sizeof *m->lens);
    m->vals = calloc(cap, sizeof *m->vals);
    if (!m->keys || !m->lens || !m->vals) {
        kiln_strmap_free(m);
        return -1;
    }
    return 0;
}

void kiln_strmap_free(kiln_strmap *m) {
    free(m->keys);
    free(m->lens);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

int kiln_strmap_put(kiln_strmap *m, const char *key, uint64_t len, uint64_t val, uint64_t *existing) {
    if (!m->cap || m->count * 2 >= m->cap) return -1;
    uint64_t i = hash(key, len) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->lens[i] == len && !memcmp(m->keys[i], key, len)) {
            if (existing) *existing = m->vals[i];
            return 0;
        }
        i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = key ? key : "";
    m->lens[i] = len;
    m->vals[i] = val;
    m->count++;
    return 1;
}

bool kiln_strmap_get(const kiln_strmap *m, const char *key, uint64_t len, uint64_t *val) {
    if (!m->cap) return false;
    uint64_t i = hash(key, len) & (m->cap - 1);
    while (m->keys[i]) {
        if (m->lens[i] == len && !memcmp(m->keys[i], key, len)) {
            *val = m->vals[i];
            return true;
        }
        i = (i + 1) & (m->cap - 1);
    }
    return false;
}
