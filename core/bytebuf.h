/* core/bytebuf.h - a growable byte buffer for serialising a file in memory
 * before it is written in one piece (GGUF headers, imatrix .dat files,
 * SentencePiece protobufs).
 *
 * Appends never fail on the spot: running out of memory sets `oom` and
 * turns every later append into a no-op, so a serialiser can put all its
 * fields and check once at the end. Integers are put in host byte order,
 * which is the little-endian order of the files kiln writes. */
#ifndef KILN_BYTEBUF_H
#define KILN_BYTEBUF_H

#include <stdbool.h>
#include <stdint.h>

typedef struct kiln_bytebuf {
    unsigned char *p;
    uint64_t len, cap;
    bool oom; /* an append failed; the contents are incomplete */
} kiln_bytebuf;

/* Appends n bytes from d. */
void kiln_bytebuf_put(kiln_bytebuf *b, const void *d, uint64_t n);
void kiln_bytebuf_put_u32(kiln_bytebuf *b, uint32_t v);
void kiln_bytebuf_put_i32(kiln_bytebuf *b, int32_t v);
void kiln_bytebuf_put_u64(kiln_bytebuf *b, uint64_t v);
/* Frees the bytes and leaves an empty buffer. */
void kiln_bytebuf_free(kiln_bytebuf *b);

#endif
