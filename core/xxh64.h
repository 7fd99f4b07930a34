/* core/xxh64.h - XXH64, streamed, for the donor fingerprint splice records.
 *
 * XXH64 (Yann Collet's public specification, seed 0) is fast enough to run
 * over every byte a splice takes from its donor without showing up beside
 * the copy itself, and its values can be checked with any xxHash tool
 * (zstd's frame checksum is its low 32 bits). It is not a cryptographic
 * hash: it tells files apart, it does not defend against forgery. */
#ifndef KILN_XXH64_H
#define KILN_XXH64_H

#include <stdint.h>

typedef struct kiln_xxh64 {
    uint64_t acc[4];
    uint64_t total;      /* bytes fed so far */
    unsigned char buf[32];
    uint32_t buf_len;    /* bytes pending in buf (< 32) */
} kiln_xxh64;

/* Starts a hash with seed 0. */
void kiln_xxh64_init(kiln_xxh64 *h);
/* Feeds n bytes; any split of the input gives the same result. */
void kiln_xxh64_update(kiln_xxh64 *h, const void *data, uint64_t n);
/* The digest of everything fed; h is left unchanged. */
uint64_t kiln_xxh64_digest(const kiln_xxh64 *h);

#endif
