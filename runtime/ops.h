/* runtime/ops.h - the forward pass's operations other than matrix
 * products: norms, RoPE, softmax, activations and small vector kernels.
 *
 * Each one performs the float operations ggml's CPU backend performs, in
 * the same precision (e.g. the RMS of a row is summed in double, RoPE
 * angles are advanced by repeated float multiplication, softmax sums in
 * double), because agreeing with llama.cpp's logits depends on it. Where
 * ggml is deliberately approximate (GELU through an fp16 table) the
 * KILN_NUM_EXACT mode computes the exact function instead.
 *
 * Rows are independent; no function allocates except the one-time GELU
 * table. Hot kernels have AVX2 / AVX-512 paths chosen by core/cpu.h. */
#ifndef KILN_OPS_H
#define KILN_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "matmul.h"

/* y = x / sqrt(mean(x^2) + eps) * w; w may be NULL (no weight). y may be x. */
void kiln_rms_norm(const float *x, const float *w, float *y, int64_t n, float eps);

/* y = (x - mean) / sqrt(var + eps) * w + b; w, b may be NULL. y may be x. */
void kiln_layer_norm(const float *x, const float *w, const float *b, float *y, int64_t n, float eps);

/* RoPE of one model: n_rot dimensions per head, rotated as pairs (i, i+1)
 * or, for NEOX, as halves (i, i + n_rot/2). */
typedef struct kiln_rope {
    int64_t n_rot;
    bool neox;
    float freq_base, freq_scale;
    const float *freq_factors; /* n_rot/2 divisors of the angles, or NULL */
} kiln_rope;

/* Writes the n_rot/2 (cos, sin) pairs for position pos into cs[n_rot]. */
void kiln_rope_angles(const kiln_rope *r, int64_t pos, float *cs);

/* Rotates the first n_rot values of one head in place with angles cs. */
void kiln_rope_head(const kiln_rope *r, const float *cs, float *x);

/* In place: x = softmax(x * scale). Entries of -INFINITY get 0; a row that
 * is -INFINITY everywhere becomes all zeros instead of NaN. */
void kiln_softmax(float *x, int64_t n, float scale);

/* y = silu(g) * u (SwiGLU); y may alias g or u. */
void kiln_swiglu(const float *g, const float *u, float *y, int64_t n);

/* y = gelu(x) (tanh form). KILN_NUM_GGML rounds through ggml's fp16
 * table; KILN_NUM_EXACT evaluates it in double. y may be x. */
void kiln_gelu(const float *x, float *y, int64_t n, kiln_numeric_mode mode);

/* The logistic function as llama.cpp's qwen2moe graph computes it,
 * silu(x) / x (GGML), or exactly (EXACT). */
float kiln_sigmoid(float x, kiln_numeric_mode mode);

/* y += x */
void kiln_vec_add(float *y, const float *x, int64_t n);

/* sum of a[i] * b[i] in float lanes */
float kiln_vec_dot(const float *a, const float *b, int64_t n);

/* y += a * x */
void kiln_vec_axpy(float *y, const float *x, float a, int64_t n);

#endif
