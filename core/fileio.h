/* core/fileio.h - the output-file discipline every kiln tool follows, and
 * the one way to read a whole input file into memory.
 *
 * An output is written to NAME.tmp, fsynced, then renamed over NAME, and
 * the directory is fsynced, so a crash or an error leaves either the old
 * file or the complete new one, never a partial one. Before anything is
 * created, kiln_check_output() refuses to write over an input (compared by
 * device and inode, so other spellings of the same path are caught) and
 * over an existing file unless forced. */
#ifndef KILN_FILEIO_H
#define KILN_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef struct kiln_outfile {
    char *path;     /* final name */
    char *tmp_path; /* path + ".tmp" */
    int fd;
    uint64_t pos;   /* bytes written so far */
    uint64_t synced; /* bytes whose writeback has been started */
    unsigned char *buf;
    uint64_t buf_len;
    uint64_t buf_cap; /* bytes of buf */
    bool direct;      /* writes bypass the page cache (kiln_out_direct) */
} kiln_outfile;

/* Fails when `path` is one of `inputs`, or exists and !force. */
int kiln_check_output(const char *path, const char *const *inputs, int n_inputs, bool force,
                      kiln_err *err);

/* Creates path.tmp for writing (buffered). */
int kiln_out_open(kiln_outfile *f, const char *path, kiln_err *err);
int kiln_out_write(kiln_outfile *f, const void *data, uint64_t n, kiln_err *err);
/* Asks for the rest of the file to be written past the page cache
 * (O_DIRECT), in whole aligned blocks from an aligned buffer, the last
 * partial block through the page cache at close. For outputs of gigabytes:
 * the kernel's copy into the page cache, and the eviction of other data it
 * forces, cost more than the disk write on a busy machine, and the file
 * would not stay cached anyway. Call it before anything is written. 1 when
 * direct writes are on; 0 when the filesystem does not offer them (the
 * file stays buffered: only the speed differs); -1 with err when out of
 * memory or called after a write. A direct write the kernel refuses later
 * (EINVAL: an alignment this device does not take) turns the mode off and
 * is done buffered. */
int kiln_out_direct(kiln_outfile *f, kiln_err *err);
/* Writes zero bytes until pos is a multiple of `alignment`. */
int kiln_out_pad(kiln_outfile *f, uint64_t alignment, kiln_err *err);
/* Moves n bytes on without writing them: a hole that reads as zeros and,
 * on filesystems with sparse files, takes no disk (kiln testmodel --sparse). */
int kiln_out_skip(kiln_outfile *f, uint64_t n, kiln_err *err);
/* Flushes and fsyncs, closes; the file keeps its .tmp name. */
int kiln_out_close(kiln_outfile *f, kiln_err *err);
/* Renames path.tmp to path and fsyncs the directory. */
int kiln_out_commit(kiln_outfile *f, kiln_err *err);
/* Closes if open and removes path.tmp; frees the names. */
void kiln_out_discard(kiln_outfile *f);
/* Frees the names after a commit. */
void kiln_out_free(kiln_outfile *f);

/* Convenience: writes a whole buffer atomically to `path`. */
int kiln_write_file_atomic(const char *path, const void *data, uint64_t n, kiln_err *err);

/* Writes a jansson document atomically as json_dumps(root, flags) gives
 * it, plus a final newline (as Python's json tools end their files). */
struct json_t;
int kiln_write_json_atomic(const char *path, const struct json_t *root, size_t flags, kiln_err *err);

/* Reads all of `path` ("-": standard input) into a malloc'd buffer of *len
 * bytes followed by a NUL, so text can be used as a C string (binary data
 * is returned unchanged and may hold NULs of its own); NULL with err
 * filled on failure. */
char *kiln_read_text(const char *path, size_t *len, kiln_err *err);

#endif
