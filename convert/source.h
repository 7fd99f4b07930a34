/* convert/source.h - where a Hugging Face model's files come from.
 *
 * A source is the flat list of files at a model's root, whatever holds
 * them: a plain directory, a Hugging Face cache folder
 * (models--ORG--NAME, or one of its snapshots/HASH directories), or an
 * archive of such a directory (.tar, .tar.gz, .tar.zst, .zip ... anything
 * libarchive reads; the root is the shallowest folder holding config.json).
 *
 * Small files (JSON, tokenizer.model, merges.txt) are read whole. Tensor
 * data is read with cv_source_pread(), which for a directory is pread(2)
 * and for an archive is a forward stream through the members: the archive
 * is never unpacked. A caller that knows it will read a range after the
 * stream has passed it declares that range first (cv_source_want_later);
 * the stream then copies it to an unlinked spool file on the way past, and
 * cv_source_done() gives the spool space back. Reading backwards without
 * such a declaration still works, by reopening the archive.
 *
 * Sources never print. The model name (general.name's fallback) is the
 * directory name, NAME of a cache folder, or the archive's top folder (or
 * its file name without extensions).
 *
 * The files call each other one way only: each calls only files listed
 * below it (scripts/check_file_circles.sh fails on two files that call
 * each other):
 *
 *   source.c           directories, cache folders; dispatches to archives
 *     source_archive.c archives through libarchive
 *       source_list.c  the file list both kinds fill (a leaf) */
#ifndef KILN_CONVERT_SOURCE_H
#define KILN_CONVERT_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"

typedef struct cv_file {
    char *name;        /* relative to the model root, e.g. "config.json" */
    uint64_t size;
    char *path;        /* directories: the file's path; NULL for archives */
    int64_t member;    /* archives: the entry's position in the archive */
    char *data;        /* archives: whole contents of a small file, or the
                          8-byte prefix + header of a .safetensors file */
    uint64_t data_len;
} cv_file;

typedef struct cv_source {
    char *path;        /* as given by the caller */
    char *name;        /* model name derived from the path */
    bool is_archive;
    cv_file *files;
    uint32_t n_files;
    void *priv;        /* the kind's own state */
} cv_source;

/* Opens a directory, HF cache folder or archive. NULL with a message on
 * error (missing path, no config.json, unreadable archive). */
cv_source *cv_source_open(const char *path, kiln_err *err);
void cv_source_close(cv_source *s);

/* Index of the file `name` at the model root, or -1 (source_list.c). */
int cv_source_find(const cv_source *s, const char *name);

/* Reads a whole file (at most 1 GiB) into malloc'd memory with a NUL after
 * it. Returns 1 (found), 0 (absent; *buf untouched) or -1 on error. */
int cv_source_read_all(cv_source *s, const char *name, char **buf, size_t *len, kiln_err *err);

/* The JSON header of safetensors file `file`: *json (malloc'd) holds `len`
 * bytes of header text. Returns 0 or -1. */
int cv_source_st_header(cv_source *s, uint32_t file, char **json, uint64_t *len, kiln_err *err);

/* Reads n bytes at offset off of file `file`. 0 or -1. */
int cv_source_pread(cv_source *s, uint32_t file, void *dst, uint64_t n, uint64_t off, kiln_err *err);

/* Directories only: *base gets a read-only mapping of the whole file
 * (made on first use). Returns 0, or 1 when the source cannot map (an
 * archive), or -1 on error. Mapped pages count as the process's memory
 * until cv_source_unmap_hint() drops them. */
int cv_source_map(cv_source *s, uint32_t file, const uint8_t **base, kiln_err *err);
/* Drops the mapped pages of [off, off+n) from the process (the page cache
 * keeps them); for reading a large file without its size in RSS. */
void cv_source_unmap_hint(cv_source *s, uint32_t file, uint64_t off, uint64_t n);
/* Directories only: true when the page cache holds at least half of the
 * pages of [off, off+n) (mincore on the mapping), so that mapping them
 * costs no disk read; false for archives, or when it cannot tell. */
bool cv_source_cached(cv_source *s, uint32_t file, uint64_t off, uint64_t n);

/* Archives only (no-ops otherwise): the range will be read after the
 * stream passed it, so keep a copy when passing. 0 or -1 (no memory). */
int cv_source_want_later(cv_source *s, uint32_t file, uint64_t off, uint64_t n);
/* The caller is done with a range declared above; its spool space is
 * released. */
void cv_source_done(cv_source *s, uint32_t file, uint64_t off, uint64_t n);

/* Internal: the archive kind (source_archive.c). */
int cv_archive_open(cv_source *s, kiln_err *err);
void cv_archive_close(cv_source *s);
int cv_archive_pread(cv_source *s, uint32_t file, void *dst, uint64_t n, uint64_t off, kiln_err *err);
int cv_archive_want_later(cv_source *s, uint32_t file, uint64_t off, uint64_t n);
void cv_archive_done(cv_source *s, uint32_t file, uint64_t off, uint64_t n);

/* Internal: appends a file entry (copies name; size as given, no path,
 * member -1) to s->files (source_list.c). 0 or -1. */
int cv_source_add_file(cv_source *s, const char *name, uint64_t size, kiln_err *err);

#endif
