/* convert/q8_rows.h - rows of any source encoding straight to Q8_0, a
 * piece of a row at a time through L1, without a chunk of f32 rows in
 * memory: FP8 with its block scales (f8.c) and BF16 / F16 / F32 (emit.c).
 *
 * Q8_0's blocks of 32 are independent, so quantizing a row piece by piece
 * gives the codec's bytes; non-finite values are refused as the codec
 * refuses them. The rows are split over all threads (row_split.h): with
 * the output written past the page cache (core/fileio.c, direct mode),
 * the writer thread needs little CPU, and the conversion is the work
 * left. */
#ifndef KILN_CONVERT_Q8_ROWS_H
#define KILN_CONVERT_Q8_ROWS_H

#include <stdint.h>

#include "../core/error.h"
#include "../core/safetensors.h"

/* Decodes columns [c0, c1) of row `row` (counted from the first row
 * given) to f32 at dst; c1 - c0 <= CV_Q8_PIECE. Called from several
 * threads at once. */
typedef void (*cv_decode_fn)(const void *ctx, int64_t row, int64_t c0, int64_t c1, float *dst);

/* Weights a row piece holds: small enough to stay in L1, a multiple of 32. */
#define CV_Q8_PIECE 1024

/* nrows rows of cols values (a multiple of 32) as Q8_0 at dst. Returns
 * -1, or the index row * cols + col of the first NaN or infinity in row
 * order (dst is then incomplete). */
int64_t cv_q8_0_rows(cv_decode_fn decode, const void *ctx, void *dst, int64_t nrows, int64_t cols);

/* The arguments of cv_decode_plain: rows of a float encoding. */
typedef struct cv_plain_rows {
    const void *src; /* row 0's first value; any alignment */
    kiln_st_dtype dtype; /* F32, F16 or BF16 */
    int64_t cols;
} cv_plain_rows;

/* A cv_decode_fn over a cv_plain_rows. */
void cv_decode_plain(const void *ctx, int64_t row, int64_t c0, int64_t c1, float *dst);

/* cv_q8_0_rows over plain rows, with the codec's error for a non-finite
 * value ("row R column C is NaN; refusing to quantize", R counted from
 * first_row) in err. 0 or -1. */
int cv_plain_q8_0_rows(const void *src, kiln_st_dtype dtype, void *dst, int64_t first_row, int64_t nrows, int64_t cols,
                       kiln_err *err);

#endif
