/* convert/f8.h - FP8 (E4M3) checkpoints, as DeepSeek and Qwen FP8 ship
 * them: each .weight in F8_E4M3 comes with a .weight_scale_inv in F32 or
 * BF16 holding one scale per block of weight_block_size = [rows, cols]
 * (quantization_config in config.json). The real value is
 * f8_to_f32(w) * scale, computed in float32 as torch does; blocks at the
 * ragged edges are cut short. A scale without a block size is one value
 * per tensor, or one per row.
 *
 * The converter dequantizes inline, one chunk of rows at a time. */
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

#endif
