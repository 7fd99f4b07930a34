/* codec/float.c - the plain float "codecs": F32, F16 and BF16.
 *
 * They fit the same three-function scheme as the block formats so that
 * quantize, convert and the runtime treat every type alike. The imatrix is
 * meaningless for them and ignored. */
#include "quants.h"

#include "../core/fp16.h"

#include <string.h>

void kiln_dequantize_row_f32(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void kiln_dequantize_row_f16(const void *src, float *dst, int64_t n) {
    kiln_fp16_to_fp32_row(src, dst, n);
}

void kiln_dequantize_row_bf16(const void *src, float *dst, int64_t n) {
    kiln_bf16_to_fp32_row(src, dst, n);
}

size_t kiln_quantize_f32(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                         const float *imatrix) {
    (void)imatrix;
    memcpy(dst, src, (size_t)(nrows * n_per_row) * sizeof(float));
    return (size_t)(nrows * n_per_row) * sizeof(float);
}

size_t kiln_quantize_f16(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                         const float *imatrix) {
    (void)imatrix;
    kiln_fp32_to_fp16_row(src, dst, nrows * n_per_row);
    return (size_t)(nrows * n_per_row) * 2;
}

size_t kiln_quantize_bf16(const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                          const float *imatrix) {
    (void)imatrix;
    kiln_fp32_to_bf16_row(src, dst, nrows * n_per_row);
    return (size_t)(nrows * n_per_row) * 2;
}
