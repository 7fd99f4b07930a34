/* convert/direct_read.h - reading a source file's bytes past the page
 * cache (O_DIRECT), with the next range read by a thread meanwhile.
 *
 * For checkpoints larger than the page cache, read once: faulting them in
 * through a mapping makes the kernel allocate, map, unmap and evict a page
 * cache page per 4 KiB, which cost convert more CPU than converting them;
 * a direct read lands in one of two reused buffers. The caller names the
 * range it will want next (the next chunk of a tensor); a thread reads it
 * into the other buffer while the caller works on this one. It does not
 * decide when direct reads pay (the caller does: bytes already in the
 * page cache are better mapped) and does not know archives. */
#ifndef KILN_CONVERT_DIRECT_READ_H
#define KILN_CONVERT_DIRECT_READ_H

#include <stdint.h>

#include "../core/error.h"

typedef struct cv_direct cv_direct;

/* A reader for files 0 .. n_files - 1 (opened on first use). NULL when
 * out of memory or no thread can be had. */
cv_direct *cv_direct_new(uint32_t n_files);

/* Stops the thread and frees the buffers. NULL is fine. */
void cv_direct_free(cv_direct *d);

/* The range the caller will ask for next: the read-ahead. */
typedef struct cv_direct_next {
    uint32_t file;
    const char *path;
    uint64_t off, n; /* n == 0: none */
} cv_direct_next;

/* Bytes [off, off + n) of `file` (at `path`): *p points to them until the
 * next call. Then `next` is read ahead (NULL or n == 0: nothing). 0; 1
 * when the file cannot be opened for direct I/O (its filesystem has none:
 * read it another way); -1 with err on a read error. */
int cv_direct_read(cv_direct *d, uint32_t file, const char *path, uint64_t off, uint64_t n,
                   const cv_direct_next *next, const uint8_t **p, kiln_err *err);

#endif
