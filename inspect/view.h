/* inspect/view.h - one read-only view over every model format kiln reads.
 *
 * inspect and diff work on GGUF files (split or not), single safetensors
 * files, sharded safetensors indexes and Hugging Face model directories
 * alike. A view lists tensors with their native type name, shape, offset
 * and bytes, and can dequantize any range of a tensor's elements to f32
 * when kiln has a codec for its type. Shapes are in each format's own
 * order: GGUF's ne[] (row length first), safetensors' row-major shape. */
#ifndef KILN_VIEW_H
#define KILN_VIEW_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"
#include "../core/gguf.h"
#include "../core/safetensors.h"

typedef enum { KILN_VIEW_GGUF, KILN_VIEW_SAFETENSORS } kiln_view_kind;

/* 80 bytes: a view of 100,000 tensors is 8 MB, all of it written at open,
 * so nothing the source already holds (the shape) is copied. */
typedef struct kiln_view_tensor {
    const char *name;
    const char *type_name;   /* "Q4_K", "BF16", ... */
    const int64_t *shape;    /* n_dims sizes, in the source's own tensor record */
    int64_t nelements;
    uint64_t offset;         /* absolute, in its file */
    uint64_t nbytes;
    const uint8_t *data;
    const char *file;        /* the file (shard) holding it */
    int ggml_type;           /* ggml id for GGUF, -1 for safetensors */
    int st_dtype;            /* safetensors dtype, -1 for GGUF */
    uint32_t n_dims;
} kiln_view_tensor;

typedef struct kiln_view {
    kiln_view_kind kind;
    const char *path;
    kiln_gguf *gguf;         /* GGUF views */
    kiln_st *st;             /* safetensors views */
    uint64_t n_tensors;
    kiln_view_tensor *tensors;
    uint64_t total_size;     /* bytes of every file in the view */
    char *names;             /* GGUF tensor names, NUL-terminated, one block */
} kiln_view;

/* Opens `path` (a .gguf, a split shard, a .safetensors, an index .json or
 * a directory) and fills `v`. Returns -1 with a message on error. */
int kiln_view_open(kiln_view *v, const char *path, kiln_err *err);
void kiln_view_close(kiln_view *v);

/* The tensor named `name`, or NULL. */
const kiln_view_tensor *kiln_view_find(const kiln_view *v, const char *name);

/* True when kiln can turn this tensor's values into floats. */
bool kiln_view_can_dequantize(const kiln_view_tensor *t);

/* Dequantizes elements [first, first + n) to f32. For block types, first
 * and n must be multiples of the block size. Returns -1 with a message. */
int kiln_view_dequantize(const kiln_view_tensor *t, int64_t first, int64_t n, float *out, kiln_err *err);

/* Elements per block of the tensor's type (1 for plain types). */
int64_t kiln_view_block(const kiln_view_tensor *t);

#endif
