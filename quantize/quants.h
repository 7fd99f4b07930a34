/* quantize/quants.h - prototypes of every codec's entry points.
 *
 * One block of three prototypes per format, in ggml's naming scheme (see
 * codec.h). The block structs and their byte diagrams live in blocks.h. */
#ifndef KILN_QUANTS_H
#define KILN_QUANTS_H

#include <stddef.h>
#include <stdint.h>

#define KILN_QUANT_FNS(x)                                                           \
    void kiln_dequantize_row_##x(const void *src, float *dst, int64_t n);           \
    void kiln_quantize_row_##x##_ref(const float *src, void *dst, int64_t n);       \
    size_t kiln_quantize_##x(const float *src, void *dst, int64_t nrows,           \
                             int64_t n_per_row, const float *imatrix);

void kiln_dequantize_row_f32(const void *src, float *dst, int64_t n);
void kiln_dequantize_row_f16(const void *src, float *dst, int64_t n);
void kiln_dequantize_row_bf16(const void *src, float *dst, int64_t n);
size_t kiln_quantize_f32(const float *, void *, int64_t, int64_t, const float *);
size_t kiln_quantize_f16(const float *, void *, int64_t, int64_t, const float *);
size_t kiln_quantize_bf16(const float *, void *, int64_t, int64_t, const float *);

KILN_QUANT_FNS(q8_0)
KILN_QUANT_FNS(q4_0)
KILN_QUANT_FNS(q5_0)
KILN_QUANT_FNS(iq4_nl)
KILN_QUANT_FNS(q2_k)
KILN_QUANT_FNS(q3_k)
KILN_QUANT_FNS(q4_k)
KILN_QUANT_FNS(q5_k)
KILN_QUANT_FNS(q6_k)
KILN_QUANT_FNS(q8_k)
KILN_QUANT_FNS(iq2_xxs)
size_t kiln_quantize_iq2_xxs_ggml(const float *, void *, int64_t, int64_t, const float *); /* llama.cpp's bytes */

#endif
