/* convert/write_pipe.h - a writer thread behind a cv_sink, so that the
 * output's write() calls (and the kernel's copy into the page cache) run
 * while the next chunk of a tensor is read and converted.
 *
 * The pipe copies what it is given into one of two buffers and hands a
 * full buffer to its thread, which passes it to the real sink; the caller
 * waits only when both buffers are still being written. Pieces are
 * delivered to the real sink in order, and only from the writer thread.
 * It adds two buffers of memory and one memcpy per byte (none for a
 * buffer handed over whole: cv_write_pipe_give); it does nothing else
 * (no reordering, no error recovery): the first error of the real sink
 * stops the pipe and is returned by every later call. */
#ifndef KILN_CONVERT_WRITE_PIPE_H
#define KILN_CONVERT_WRITE_PIPE_H

#include <stdint.h>

#include "emit.h"

typedef struct cv_write_pipe cv_write_pipe;

/* Starts a pipe in front of `sink` with two buffers of buf_bytes each.
 * NULL with err filled when memory or the thread cannot be had. */
cv_write_pipe *cv_write_pipe_new(cv_sink sink, void *user, uint64_t buf_bytes, kiln_err *err);

/* A cv_sink (user = the pipe): queues n bytes. 0, or -1 with the real
 * sink's error (or this call's) in err. */
int cv_write_pipe_put(void *pipe, const void *data, uint64_t n, kiln_err *err);

/* A cv_give (user = the pipe): queues the n bytes at *buf without copying
 * them: the pipe takes the buffer (*cap bytes, from malloc) and leaves one
 * of its own in *buf and *cap, as the caller's to fill or free. Pieces
 * smaller than a sixteenth of a pipe buffer, and buffers smaller than
 * half of one, are copied as cv_write_pipe_put does, leaving *buf alone.
 * 0, or -1 as cv_write_pipe_put. */
int cv_write_pipe_give(void *pipe, uint8_t **buf, uint64_t *cap, uint64_t n, kiln_err *err);

/* Sends what is buffered and waits until the real sink has taken it all.
 * 0, or -1 with the first error. */
int cv_write_pipe_flush(cv_write_pipe *p, kiln_err *err);

/* Stops the thread, dropping what was not written (flush first to keep
 * it), and frees the pipe. NULL is fine. */
void cv_write_pipe_free(cv_write_pipe *p);

#endif
