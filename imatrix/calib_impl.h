/* imatrix/calib_impl.h - what the calibration readers (calib*.c) share:
 * the growing text that documents are joined into, and one entry point per
 * kind of source. Not for use outside imatrix/calib*.c.
 *
 * The files call each other one way only: each calls only files listed
 * below it (scripts/check_file_circles.sh fails on two files that call
 * each other):
 *
 *   calib.c                kiln_calib_read: paths to archives or sources
 *     calib_archive.c      tar/zip members, each handed on as one source
 *       calib_source.c     one source's bytes: zstd? JSON Lines? plain?
 *         calib_jsonl.c    one document per record
 *           calib_text.c   the joined text (a leaf)
 *         calib_zstd.c     decompression (a leaf)
 */
#ifndef KILN_IMATRIX_CALIB_IMPL_H
#define KILN_IMATRIX_CALIB_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"

typedef struct calib_text {
    char *p;
    size_t n, cap;
    const char *field; /* JSON Lines field */
} calib_text;

/* ---- calib_text.c -------------------------------------------------------- */

/* Appends raw bytes (no document boundary). 0 or -1 (out of memory). */
int calib_put(calib_text *t, const void *d, size_t n, kiln_err *err);

/* Appends one document under the joining rule of calib.h. */
int calib_add_doc(calib_text *t, const char *d, size_t n, kiln_err *err);

/* ---- calib_source.c ------------------------------------------------------ */

/* Adds the bytes of one source named `name` (a path, or "ARCHIVE:MEMBER"):
 * decompresses zstd, splits JSON Lines, else adds them as one document.
 * Archives are handled before this is called. */
int calib_add_source(calib_text *t, const char *name, const uint8_t *d, size_t n, kiln_err *err);

/* ---- calib_zstd.c -------------------------------------------------------- */

/* True when the bytes start with a zstd frame. */
bool calib_is_zstd(const uint8_t *d, size_t n);

/* Decompresses every frame of `d` into a malloc'd buffer. */
int calib_unzstd(const char *name, const uint8_t *d, size_t n, uint8_t **out, size_t *out_n, kiln_err *err);

/* ---- calib_jsonl.c ------------------------------------------------------- */

/* Adds each record's `t->field` string as a document. */
int calib_add_jsonl(calib_text *t, const char *name, const char *d, size_t n, kiln_err *err);

/* ---- calib_archive.c ----------------------------------------------------- */

/* True when the path names (or its first bytes show) a tar or zip file. */
bool calib_is_archive(const char *path, const uint8_t *head, size_t n_head);

/* Adds every member of the archive at `path`. */
int calib_add_archive(calib_text *t, const char *path, kiln_err *err);

#endif
