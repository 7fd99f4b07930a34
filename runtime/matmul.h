/* runtime/matmul.h - the runtime's matrix products, in kiln's two numeric
 * modes.
 *
 * KILN_NUM_GGML (default) converts the activations before each product the
 * way ggml's CPU backend does for the weight type (its vec_dot_type):
 *   F32 -> f32; F16 -> f16; BF16 -> bf16; Q8_0, Q4_0, Q5_0, IQ4_NL -> Q8_0
 *   blocks; Q2_K..Q6_K and IQ2_XXS -> Q8_K blocks,
 * and then takes integer (or f16/bf16) dot products block by block, as
 * ggml's vec_dot functions do. This reproduces llama.cpp's numbers.
 * KILN_NUM_EXACT dequantizes weight rows to f32 and multiplies f32
 * activations with f32 accumulation: the more accurate instrument.
 *
 * Weights are used in place (from the mmap). Work is split across output
 * rows with OpenMP; SIMD paths are chosen at run time. */
#ifndef KILN_MATMUL_H
#define KILN_MATMUL_H

#include <stdint.h>

typedef enum kiln_numeric_mode {
    KILN_NUM_GGML = 0,
    KILN_NUM_EXACT = 1,
} kiln_numeric_mode;

/* y[t * n_out + r] = sum_c W[r][c] * x[t * n_in + c], for t < n_tokens and
 * r < n_out, where W is n_out rows of n_in weights of ggml type `wtype`
 * stored consecutively at `w` (a GGUF tensor with ne0 = n_in, or one
 * expert's slab of a 3-D tensor). n_in is a multiple of the type's block
 * size. Returns 0, or -1 when kiln has no kernel for the type. */
int kiln_matmul(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                int64_t n_tokens, float *y, kiln_numeric_mode mode);

/* The same for one expert's matrix of a MoE layer, which ggml multiplies
 * with MUL_MAT_ID: for the weights it repacks (Q4_K, Q2_K) every token
 * then takes the one-token order. */
int kiln_matmul_expert(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                       int64_t n_tokens, float *y, kiln_numeric_mode mode);

/* The same for one head's matrix of a 3-D weight that ggml multiplies
 * with a batched ggml_mul_mat (deepseek2's attn_k_b / attn_v_b), which
 * ggml-cpu never repacks: tinyBLAS's order for 2+ tokens, vec_dot's for
 * one. */
int kiln_matmul_head(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                     int64_t n_tokens, float *y, kiln_numeric_mode mode);

/* One product of a kiln_matmul_group: y = W x for the group's x, W being
 * n_out rows of type wtype at w, as kiln_matmul reads them. */
typedef struct kiln_mm {
    uint32_t wtype;
    const void *w;
    int64_t n_out;
    float *y;
} kiln_mm;

#define KILN_MM_GROUP_MAX 4

/* Up to KILN_MM_GROUP_MAX dense products of one input x (n_tokens rows
 * of n_in), each with the bits kiln_matmul gives it, in one OpenMP region
 * in KILN_NUM_GGML mode: x is converted once for the products that read
 * it in the same vec_dot_type (attention's q, k and v; the FFN's gate and
 * up), and the team meets once where separate calls would open a region
 * each. Other modes run the products in turn. Returns 0, or -1 with *bad
 * the index of the product that has no kernel or a bad shape (or, in
 * KILN_NUM_EXACT, could not have its buffers), -1 when the group's
 * buffers could not be had or n_mm is out of range. */
int kiln_matmul_group(const kiln_mm *mm, int n_mm, int64_t n_in, const float *x, int64_t n_tokens,
                      kiln_numeric_mode mode, int *bad);

#endif
