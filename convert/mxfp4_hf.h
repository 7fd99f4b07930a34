/* convert/mxfp4_hf.h - Hugging Face's MXFP4 checkpoint layout (gpt-oss)
 * into ggml's MXFP4 blocks, byte for byte, never through floats.
 *
 * HF stores an MXFP4 matrix [rows, cols] as two tensors: `X_blocks`, uint8
 * [.., rows, cols/32, 16], two E2M1 codes a byte with element 2i in the
 * low nibble of byte i, and `X_scales`, uint8 [.., rows, cols/32], the
 * E8M0 exponent of each 32-element block. ggml's block (codec/blocks_fp4.h)
 * is the exponent byte followed by 16 bytes holding element j in the low
 * nibble and element j + 16 in the high nibble of byte j; the code and
 * exponent values mean the same in both, so a block is one byte moved and
 * sixteen bytes of nibbles regrouped. */
#ifndef KILN_CONVERT_MXFP4_HF_H
#define KILN_CONVERT_MXFP4_HF_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* True when config.json's quantization_config.quant_method is "mxfp4". */
bool cv_mxfp4_checkpoint(json_t *config);

/* One HF block (16 bytes) and its exponent -> one ggml MXFP4 block (17
 * bytes at dst). */
void cv_mxfp4_repack_block(const uint8_t hf[16], uint8_t e8m0, uint8_t dst[17]);

/* Output rows [r0, r0 + n) of nb blocks each, where output row q is HF
 * row q * stride + parity (stride 1: all rows; 2: a fused gate_up's even
 * or odd rows), from whole `blocks` / `scales` tensors. */
void cv_mxfp4_repack_rows(const uint8_t *blocks, const uint8_t *scales, int64_t nb, int64_t r0, int64_t n,
                          int stride, int parity, uint8_t *dst);

/* Every other unit of unit_bytes: dst unit u = src unit 2u + parity, for
 * n_out units (a fused gate_up bias split into gate and up). */
void cv_deinterleave(const uint8_t *src, uint8_t *dst, int64_t n_out, uint64_t unit_bytes, int parity);

#endif
