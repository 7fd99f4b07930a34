/* core/gguf.h - reading and writing GGUF files (v2 and v3).
 *
 * Reading: kiln_gguf_open() maps the file, validates every field against
 * the file size (see gguf_read.c for the list of checks) and gives the
 * metadata and tensor infos, with zero-copy pointers to each tensor's
 * bytes. A path like NAME-00001-of-00003.gguf opens every shard and
 * presents the model as one logical file (gguf-split's split.* keys).
 *
 * Writing: kiln_gguf_writer streams a file: metadata and tensor infos are
 * declared first, then the tensors' bytes are written in declaration order.
 * Output goes to OUT.tmp, is fsynced and renamed at kiln_writer_finish();
 * kiln_writer_abort() (or any error) leaves nothing behind. The writer can
 * split its output into shards the way llama-gguf-split does.
 *
 * Strings in kiln_str are NOT NUL-terminated: they point into the mapping. */
#ifndef KILN_GGUF_H
#define KILN_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define KILN_GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define KILN_GGUF_DEFAULT_ALIGNMENT 32
#define KILN_GGUF_MAX_DIMS 4

enum kiln_gguf_vtype {
    KILN_GGUF_UINT8 = 0,
    KILN_GGUF_INT8 = 1,
    KILN_GGUF_UINT16 = 2,
    KILN_GGUF_INT16 = 3,
    KILN_GGUF_UINT32 = 4,
    KILN_GGUF_INT32 = 5,
    KILN_GGUF_FLOAT32 = 6,
    KILN_GGUF_BOOL = 7,
    KILN_GGUF_STRING = 8,
    KILN_GGUF_ARRAY = 9,
    KILN_GGUF_UINT64 = 10,
    KILN_GGUF_INT64 = 11,
    KILN_GGUF_FLOAT64 = 12,
    KILN_GGUF_VTYPE_COUNT = 13,
};

typedef struct kiln_str {
    const char *ptr;
    uint64_t len;
} kiln_str;

typedef struct kiln_value kiln_value;

typedef struct kiln_array {
    uint32_t type;     /* element type */
    uint64_t n;        /* element count */
    const void *data;  /* numeric elements, packed little-endian (may be unaligned) */
    kiln_str *strs;    /* STRING elements */
    kiln_value *vals;  /* ARRAY elements (nested arrays) */
} kiln_array;

struct kiln_value {
    uint32_t type;
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        float f32;
        bool b;
        uint64_t u64;
        int64_t i64;
        double f64;
        kiln_str str;
        kiln_array arr;
    };
};

typedef struct kiln_kv {
    kiln_str key;
    kiln_value val;
    uint64_t offset; /* byte offset of the key in its file */
} kiln_kv;

typedef struct kiln_tensor {
    kiln_str name;
    uint32_t n_dims;
    int64_t ne[KILN_GGUF_MAX_DIMS]; /* ne[0] is the row length; unused dims are 1 */
    uint32_t type;                  /* ggml type id (core/types.h) */
    uint64_t offset;                /* relative to its shard's data section */
    uint64_t file_offset;           /* absolute, in its shard's file */
    uint64_t nbytes;
    int64_t nelements;
    const uint8_t *data;            /* the bytes, in the mapping */
    uint32_t shard;                 /* index into kiln_gguf.shards */
} kiln_tensor;

typedef struct kiln_gguf_shard {
    char *path;
    const uint8_t *map;
    uint64_t size;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset; /* start of the tensor data section */
    uint64_t n_tensors;   /* tensors in this shard */
    uint64_t n_kv;        /* kv_count from this shard's header */
} kiln_gguf_shard;

typedef struct kiln_gguf {
    char *path;              /* as given to kiln_gguf_open */
    uint32_t n_shards;
    kiln_gguf_shard *shards;
    uint32_t version;        /* of the first shard */
    uint64_t alignment;      /* of the first shard */
    uint64_t n_kv;
    kiln_kv *kv;             /* the first shard's metadata, in file order */
    uint64_t n_tensors;
    kiln_tensor *tensors;    /* every shard's tensors, in file order */
    uint64_t total_size;     /* sum of the shards' file sizes */
    void *priv;              /* allocations and the name index */
} kiln_gguf;

/* Opens and validates a GGUF file, or every shard of a split model when
 * `path` is a -NNNNN-of-NNNNN.gguf name (any shard may be named). Returns
 * NULL with one line in `err` on any error. */
kiln_gguf *kiln_gguf_open(const char *path, kiln_err *err);

/* Parses a GGUF image already in memory (not copied; must outlive the
 * result). `name` is used in error messages. No split handling. */
kiln_gguf *kiln_gguf_parse(const uint8_t *buf, uint64_t size, const char *name, kiln_err *err);
/* The same for a malloc'd image the result takes over: kiln_gguf_close()
 * frees it, and so does a failure. */
kiln_gguf *kiln_gguf_parse_owned(uint8_t *image, uint64_t size, const char *name, kiln_err *err);

void kiln_gguf_close(kiln_gguf *g);

/* Lookups; NULL when absent. Tensor lookup is a hash probe. */
const kiln_kv *kiln_gguf_find_kv(const kiln_gguf *g, const char *key);
const kiln_tensor *kiln_gguf_find_tensor(const kiln_gguf *g, const char *name);

/* The layer of a tensor named by llama.cpp's convention "blk.N.*": N, or
 * -1 for any other name (token_embd.weight, output_norm.weight, ...). */
int64_t kiln_tensor_layer(const char *name);

/* Typed getters. Integer getters accept any integer value type (and bool)
 * that fits; return false when the key is absent or of another kind. */
bool kiln_gguf_get_u64(const kiln_gguf *g, const char *key, uint64_t *out);
bool kiln_gguf_get_i64(const kiln_gguf *g, const char *key, int64_t *out);
bool kiln_gguf_get_f64(const kiln_gguf *g, const char *key, double *out);
bool kiln_gguf_get_bool(const kiln_gguf *g, const char *key, bool *out);
bool kiln_gguf_get_str(const kiln_gguf *g, const char *key, kiln_str *out);
/* An array value of the given element type (UINT8..FLOAT64 or STRING). */
const kiln_array *kiln_gguf_get_arr(const kiln_gguf *g, const char *key, uint32_t elem_type);

/* Numeric array element i of any numeric element type, as double/int64. */
double kiln_array_f64(const kiln_array *a, uint64_t i);
int64_t kiln_array_i64(const kiln_array *a, uint64_t i);

/* Helpers on kiln_str. kiln_str_dup returns a malloc'd NUL-terminated copy. */
bool kiln_str_eq(kiln_str s, const char *cstr);
char *kiln_str_dup(kiln_str s);

/* Name of a metadata value type ("uint32", "string", ...). */
const char *kiln_gguf_vtype_name(uint32_t type);

/* Size in bytes of one numeric value type; 0 for STRING/ARRAY/unknown. */
uint32_t kiln_gguf_vtype_size(uint32_t type);

/* If `path` names a shard ("X-00002-of-00005.gguf"), sets *no (1-based) and
 * *count and writes the prefix "X" to prefix; returns false otherwise. */
bool kiln_gguf_split_name(const char *path, char *prefix, size_t cap, int *no, int *count);

/* ---- writer ---------------------------------------------------------- */

typedef struct kiln_gguf_writer kiln_gguf_writer;

typedef struct kiln_write_opts {
    uint64_t alignment;          /* 0: 32, or general.alignment if set */
    uint64_t split_max_size;     /* bytes per shard, 0: no limit */
    uint64_t split_max_tensors;  /* tensors per shard, 0: no limit */
    bool force;                  /* overwrite existing outputs */
    const char *const *inputs;   /* paths that must never be written */
    int n_inputs;
    uint32_t version;            /* 0: 3 */
    bool direct_io;              /* write past the page cache where possible (kiln_out_direct) */
} kiln_write_opts;

/* Starts a file at `path` (shards get -NNNNN-of-NNNNN.gguf names when the
 * output is split). Nothing is created until kiln_writer_begin(). */
kiln_gguf_writer *kiln_writer_new(const char *path, const kiln_write_opts *opts, kiln_err *err);

/* Sets a metadata key, deep-copying the value. An existing key keeps its
 * position and gets the new value. */
int kiln_writer_set(kiln_gguf_writer *w, const char *key, const kiln_value *v, kiln_err *err);
int kiln_writer_set_u32(kiln_gguf_writer *w, const char *key, uint32_t v, kiln_err *err);
int kiln_writer_set_i32(kiln_gguf_writer *w, const char *key, int32_t v, kiln_err *err);
int kiln_writer_set_u64(kiln_gguf_writer *w, const char *key, uint64_t v, kiln_err *err);
int kiln_writer_set_f32(kiln_gguf_writer *w, const char *key, float v, kiln_err *err);
int kiln_writer_set_bool(kiln_gguf_writer *w, const char *key, bool v, kiln_err *err);
int kiln_writer_set_str(kiln_gguf_writer *w, const char *key, const char *v, kiln_err *err);
/* Array of n strings, or of n packed numeric elements of `elem_type`. */
int kiln_writer_set_str_arr(kiln_gguf_writer *w, const char *key, const char *const *v,
                            uint64_t n, kiln_err *err);
int kiln_writer_set_arr(kiln_gguf_writer *w, const char *key, uint32_t elem_type,
                        const void *data, uint64_t n, kiln_err *err);
/* Removes a key if present. */
void kiln_writer_remove(kiln_gguf_writer *w, const char *key);
/* Copies every metadata key of `src` except the split.* keys. */
int kiln_writer_copy_kv(kiln_gguf_writer *w, const kiln_gguf *src, kiln_err *err);

/* Declares the next tensor. Its bytes are written later, in this order. */
int kiln_writer_add_tensor(kiln_gguf_writer *w, const char *name, uint32_t type,
                           uint32_t n_dims, const int64_t *ne, kiln_err *err);

/* Plans the shards, creates OUT.tmp (each shard's) and writes the first
 * header. After this, no more keys or tensors can be added. */
int kiln_writer_begin(kiln_gguf_writer *w, kiln_err *err);

/* Appends bytes of the current tensor; a tensor may be written in several
 * calls. Padding and shard changes happen by themselves. */
int kiln_writer_write(kiln_gguf_writer *w, const void *data, uint64_t n, kiln_err *err);

/* Checks that every tensor was written in full, fsyncs, renames every
 * shard into place and frees the writer (also on error). */
int kiln_writer_finish(kiln_gguf_writer *w, kiln_err *err);

/* Instead of kiln_writer_begin() .. kiln_writer_finish(), for a writer of
 * metadata only: the GGUF it would write, as a malloc'd image in *image
 * (open it with kiln_gguf_parse_owned()). Nothing touches the disk; the
 * writer is freed (also on error). */
int kiln_writer_finish_image(kiln_gguf_writer *w, uint8_t **image, uint64_t *len, kiln_err *err);

/* The size in bytes of the one file this unsplit writer would write with
 * the keys and tensors declared so far: header, metadata, tensor infos
 * and every tensor padded to the alignment, as kiln_writer_begin() ..
 * kiln_writer_finish() lay it out. Nothing is written and the writer
 * stays usable. 0, or -1 (begun already, or split options set). */
int kiln_writer_file_size(kiln_gguf_writer *w, uint64_t *size, kiln_err *err);

/* Removes any temporary file and frees the writer. NULL is fine. */
void kiln_writer_abort(kiln_gguf_writer *w);

/* Final path of shard i (0-based) once begun; the single path when unsplit. */
const char *kiln_writer_shard_path(const kiln_gguf_writer *w, uint32_t i);
uint32_t kiln_writer_shard_count(const kiln_gguf_writer *w);

#endif
