/* convert/f8.h - FP8 (E4M3) checkpoints, as DeepSeek and Qwen FP8 ship
 * them: each .weight in F8_E4M3 comes with a .weight_scale_inv in F32 or
 * BF16 holding one scale per block of weight_block_size = [rows, cols]
 * (quantization_config in config.json). The real value is
 * f8_to_f32(w) * scale, computed in float32 as torch does; blocks at the
 * ragged edges are cut short. A scale without a block size is one value
 * per tensor, or one per row.
 *
 * The converter dequantizes inline, one chunk of rows at a time; to Q8_0
 * it goes straight from the FP8 bytes, a row piece at a time through L1,
 * with the same float operations as dequantizing then quantizing. */
#ifndef KILN_CONVERT_F8_H
#define KILN_CONVERT_F8_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"

/* Reads quantization_config: *fp8 is set when quant_method is "fp8", and
 * block[] to weight_block_size (0, 0 when absent). Another quant_method
 * is an error (kiln converts only float and FP8 checkpoints). */
int cv_f8_config(json_t *config, bool *fp8, int64_t block[2], kiln_err *err);

/* The 256 values of an E4M3 byte (no infinities; 0x7f/0xff are NaN). */
float cv_f8_e4m3_to_f32(uint8_t b);

/* Dequantizes rows [r0, r0 + nrows) of a rows x cols F8 matrix whose row
 * r0 starts at `src`. `scale` holds the whole scale tensor as f32 with
 * `scale_cols` columns (0 for one value per tensor or per row: see
 * `per_row`). block = weight_block_size. */
void cv_f8_dequant_rows(const uint8_t *src, float *dst, int64_t r0, int64_t nrows, int64_t cols, const float *scale,
                        int64_t scale_cols, const int64_t block[2], bool per_row);

/* The same rows as Q8_0 blocks at dst (cols / 32 blocks a row; cols must
 * be a multiple of 32): byte for byte what cv_f8_dequant_rows followed by
 * the Q8_0 quantizer gives, without the f32 rows in memory. Returns -1,
 * or, when a value is NaN or infinite (which Q8_0 refuses), the index
 * row * cols + col (row counted from r0) of the first one in row order;
 * dst is then incomplete. */
int64_t cv_f8_q8_0_rows(const uint8_t *src, void *dst, int64_t r0, int64_t nrows, int64_t cols, const float *scale,
                        int64_t scale_cols, const int64_t block[2], bool per_row);

/* dst[i] = e4m3(src[i]) * scale for n bytes, on the SIMD level kiln_simd()
 * allows (the tests compare the levels). */
void cv_f8_span(const uint8_t *src, float *dst, int64_t n, float scale);

#endif
