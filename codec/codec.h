/* codec/codec.h - the table of block codecs kiln can read and write.
 *
 * Every block format follows ggml's naming scheme with three entry points
 * (see the per-format files, e.g. quantize/q4_k.c):
 *
 *   kiln_dequantize_row_X(src, dst, n)        blocks -> n floats
 *   kiln_quantize_row_X_ref(src, dst, n)      reference quantizer, no imatrix
 *   kiln_quantize_X(src, dst, nrows, n_per_row, imatrix)
 *                                             rows -> blocks; imatrix holds
 *                                             n_per_row column weights or NULL
 *
 * kiln_codec_get() turns a ggml type id into those functions, so tools never
 * switch on types themselves. */
#ifndef KILN_CODEC_H
#define KILN_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"

typedef void (*kiln_dequantize_fn)(const void *src, float *dst, int64_t n);
/* Quantizes `nrows` rows of `n_per_row` floats into consecutive rows of
 * blocks and returns the bytes written. `imatrix` is NULL or n_per_row
 * importance weights (one per column). */
typedef size_t (*kiln_quantize_fn)(const float *src, void *dst, int64_t nrows,
                                   int64_t n_per_row, const float *imatrix);

typedef struct kiln_codec {
    uint32_t type;
    kiln_dequantize_fn dequantize_row; /* NULL: kiln cannot dequantize */
    kiln_quantize_fn quantize;         /* NULL: kiln cannot quantize */
    bool needs_imatrix;                /* quantizing without one is refused */
} kiln_codec;

/* The codec for a ggml type id, or NULL when kiln has none for it. */
const kiln_codec *kiln_codec_get(uint32_t type);
bool kiln_can_dequantize(uint32_t type);
bool kiln_can_quantize(uint32_t type);

/* Dequantizes `n` values of any supported type (n a multiple of the block
 * size). Returns -1 with a message when the type has no dequantizer. */
int kiln_dequantize(uint32_t type, const void *src, float *dst, int64_t n, kiln_err *err);

/* Quantizes `nrows` x `n_per_row` with OpenMP across rows (blocks of rows
 * per thread, so the output equals a single-threaded run byte for byte).
 * Returns bytes written, or 0 with a message in err. */
size_t kiln_quantize_rows(uint32_t type, const float *src, void *dst, int64_t nrows,
                          int64_t n_per_row, const float *imatrix, kiln_err *err);

#endif
