/* core/xxh64.c - XXH64 (see xxh64.h), written from the xxHash specification:
 * four accumulators over 32-byte stripes, merged, then the tail in 8-, 4-
 * and 1-byte steps and a final avalanche. */
#include "xxh64.h"

#include <string.h>

#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
#define P3 0x165667B19E3779F9ull
#define P4 0x85EBCA77C2B2AE63ull
#define P5 0x27D4EB2F165667C5ull

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* GGUF files are little-endian and so is every host kiln builds on; the
 * memcpy keeps unaligned reads legal. */
static inline uint64_t rd64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline uint32_t rd32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t round64(uint64_t acc, uint64_t lane) {
    acc += lane * P2;
    acc = rotl(acc, 31);
    return acc * P1;
}

static inline uint64_t merge(uint64_t h, uint64_t acc) {
    h ^= round64(0, acc);
    return h * P1 + P4;
}

void kiln_xxh64_init(kiln_xxh64 *h) {
    memset(h, 0, sizeof *h);
    h->acc[0] = P1 + P2;
    h->acc[1] = P2;
    h->acc[2] = 0;
    h->acc[3] = (uint64_t)0 - P1;
}

static inline void stripe(uint64_t *acc, const unsigned char *p) {
    acc[0] = round64(acc[0], rd64(p));
    acc[1] = round64(acc[1], rd64(p + 8));
    acc[2] = round64(acc[2], rd64(p + 16));
    acc[3] = round64(acc[3], rd64(p + 24));
}

void kiln_xxh64_update(kiln_xxh64 *h, const void *data, uint64_t n) {
    const unsigned char *p = data;
    h->total += n;
    if (h->buf_len) {
        uint32_t k = 32 - h->buf_len;
        if (k > n) k = (uint32_t)n;
        memcpy(h->buf + h->buf_len, p, k);
        h->buf_len += k;
        p += k;
        n -= k;
        if (h->buf_len < 32) return;
        stripe(h->acc, h->buf);
        h->buf_len = 0;
    }
    uint64_t a[4] = {h->acc[0], h->acc[1], h->acc[2], h->acc[3]};
    for (; n >= 32; p += 32, n -= 32) stripe(a, p);
    memcpy(h->acc, a, sizeof a);
    memcpy(h->buf, p, n);
    h->buf_len = (uint32_t)n;
}

uint64_t kiln_xxh64_digest(const kiln_xxh64 *h) {
    uint64_t r;
    if (h->total >= 32) {
        const uint64_t *a = h->acc;
        r = rotl(a[0], 1) + rotl(a[1], 7) + rotl(a[2], 12) + rotl(a[3], 18);
        for (int i = 0; i < 4; i++) r = merge(r, a[i]);
    } else {
        r = h->acc[2] + P5; /* acc[2] is the seed */
    }
    r += h->total;
    const unsigned char *p = h->buf;
    uint32_t n = h->buf_len;
    for (; n >= 8; p += 8, n -= 8) r = rotl(r ^ round64(0, rd64(p)), 27) * P1 + P4;
    if (n >= 4) {
        r = rotl(r ^ (uint64_t)rd32(p) * P1, 23) * P2 + P3;
        p += 4;
        n -= 4;
    }
    for (; n > 0; p++, n--) r = rotl(r ^ (uint64_t)*p * P5, 11) * P1;
    r ^= r >> 33;
    r *= P2;
    r ^= r >> 29;
    r *= P3;
    r ^= r >> 32;
    return r;
}
