/* core/safetensors.h - reading Hugging Face safetensors files.
 *
 * kiln_st_open() accepts a single .safetensors file, a
 * model.safetensors.index.json (sharded model), or a directory holding
 * either. Headers are parsed with jansson and validated: every dtype is
 * known, each tensor's byte size equals its shape times the dtype size,
 * offsets are in bounds and do not overlap, and a sharded index agrees
 * with its shards (every tensor it names is in the shard it names, and no
 * shard holds a tensor the index does not list). Tensor bytes are mapped,
 * not copied. */
#ifndef KILN_SAFETENSORS_H
#define KILN_SAFETENSORS_H

#include <stdint.h>

#include "error.h"

typedef enum kiln_st_dtype {
    KILN_ST_F64, KILN_ST_F32, KILN_ST_F16, KILN_ST_BF16,
    KILN_ST_I64, KILN_ST_I32, KILN_ST_I16, KILN_ST_I8,
    KILN_ST_U8, KILN_ST_BOOL, KILN_ST_F8_E4M3, KILN_ST_F8_E5M2,
    KILN_ST_F8_E8M0, /* a power of two 2^(b - 127): MX block scales (DeepSeek-V4) */
    KILN_ST_DTYPE_COUNT
} kiln_st_dtype;

#define KILN_ST_MAX_DIMS 8

typedef struct kiln_st_tensor {
    char *name;
    kiln_st_dtype dtype;
    uint32_t n_dims;
    int64_t shape[KILN_ST_MAX_DIMS]; /* row-major: shape[n_dims-1] varies fastest */
    int64_t nelements;
    uint64_t nbytes;
    uint64_t file_offset;  /* absolute offset of the data in its file */
    const uint8_t *data;   /* in the mapping; NULL when parsed from a header only */
    uint32_t file;         /* index into kiln_st.files */
} kiln_st_tensor;

typedef struct kiln_st_file {
    char *path;
    const uint8_t *map;
    uint64_t size;
    uint64_t header_len;   /* the JSON header's length (after the 8-byte prefix) */
} kiln_st_file;

typedef struct kiln_st {
    uint32_t n_files;
    kiln_st_file *files;
    uint64_t n_tensors;
    kiln_st_tensor *tensors; /* file by file, each in header order */
    void *priv;
} kiln_st;

/* Opens a .safetensors file, an index .json, or a directory. */
kiln_st *kiln_st_open(const char *path, kiln_err *err);
void kiln_st_close(kiln_st *st);
const kiln_st_tensor *kiln_st_find(const kiln_st *st, const char *name);

/* Parses one safetensors header (the JSON text of `len` bytes, as found
 * after the 8-byte length prefix) for a file of `file_size` bytes, and
 * appends its tensors to *out (realloc'd; *n updated) with file = file_idx
 * and data = NULL. Used by kiln_st_open and by archive readers that see a
 * file as a stream. */
int kiln_st_parse_header(const char *json, uint64_t len, uint64_t file_size, const char *fname,
                         uint32_t file_idx, kiln_st_tensor **out, uint64_t *n, kiln_err *err);

/* Bytes per element of a dtype, and its name ("BF16"). */
uint32_t kiln_st_dtype_size(kiln_st_dtype d);
const char *kiln_st_dtype_name(kiln_st_dtype d);

/* Converts `n` elements of a float dtype (F64, F32, F16, BF16, F8_E4M3,
 * F8_E5M2, F8_E8M0) to f32. Returns -1 for non-float dtypes. */
int kiln_st_to_f32(kiln_st_dtype d, const void *src, float *dst, int64_t n);

#endif
