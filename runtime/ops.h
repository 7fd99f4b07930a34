/* runtime/ops.h - the forward pass's operations other than weight
 * products: norms, RoPE, softmax, activations and small vector kernels.
 *
 * In KILN_NUM_GGML mode each one performs the float operations that
 * llama.cpp's CPU backend performs on the machine the golden logits come
 * from (an x86 AVX-512 build by gcc 12): the RMS of a row summed in
 * double, RoPE angles advanced by repeated float multiplication and
 * rotated with the fused multiply-adds gcc makes of ggml's expressions,
 * exponentials of softmax and SiLU by ggml's AVX-512 polynomial in blocks
 * of 16 (glibc's expf for the rest of a row), block sums in the order of
 * _mm512_reduce_add_ps, GELU through ggml's fp16 table. Agreeing with
 * llama.cpp's logits depends on these details, since one ulp of
 * difference can flip an activation's 8-bit quantization later on. Every
 * SIMD level of kiln gives the same bits as the scalar code.
 *
 * KILN_NUM_EXACT evaluates the transcendental functions in double
 * instead.
 *
 * Rows are independent; nothing allocates except the one-time GELU
 * table. */
#ifndef KILN_OPS_H
#define KILN_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "matmul.h"

/* y = x / sqrt(mean(x^2) + eps) * w; w may be NULL (no weight). y may be x. */
void kiln_rms_norm(const float *x, const float *w, float *y, int64_t n, float eps);
/* kiln_rms_norm of `rows` consecutive rows of n values (x and y may be the
 * same buffer): the same bits, four rows at a time. */
void kiln_rms_norm_rows(const float *x, const float *w, float *y, int64_t rows, int64_t n, float eps);

/* y = (x - mean) / sqrt(var + eps) * w + b; w, b may be NULL. y may be x. */
void kiln_layer_norm(const float *x, const float *w, const float *b, float *y, int64_t n, float eps);

/* RoPE of one model: n_rot dimensions per head, rotated as pairs (i, i+1)
 * or, for NEOX, as halves (i, i + n_rot/2). */
typedef struct kiln_rope {
    int64_t n_rot;
    bool neox;
    float freq_base, freq_scale;
    const float *freq_factors; /* n_rot/2 divisors of the angles, or NULL */
    float attn_factor;         /* cos and sin are multiplied by it (ggml's
                                * mscale); 1 for no scaling */
    float ext_factor;          /* YaRN (yarn.c): the ramp's weight, 0 off */
    float corr_dims[2];        /* YaRN: dimensions where the ramp starts, ends */
    kiln_numeric_mode mode;
} kiln_rope;

/* Writes the n_rot/2 (cos, sin) pairs for position pos into cs[n_rot]. */
void kiln_rope_angles(const kiln_rope *r, int64_t pos, float *cs);

/* YaRN (yarn.c): the angle of dimension pair i from its extrapolated
 * angle e and interpolated one t (freq_scale * e), ramped between them as
 * ggml's rope_yarn does, and *ms times YaRN's magnitude correction; the
 * second in double for KILN_NUM_EXACT. */
float kiln_yarn_angle(const kiln_rope *r, float e, float t, int64_t i, float *ms);
double kiln_yarn_angle_exact(const kiln_rope *r, double e, int64_t i, double *ms);

/* Rotates the first n_rot values of one head in place with angles cs. */
void kiln_rope_head(const kiln_rope *r, const float *cs, float *x);

/* In place: x = softmax(x * scale). Entries of -INFINITY get 0; a row that
 * is -INFINITY everywhere becomes all zeros instead of NaN. The blocks of
 * 16 start at x[0]: callers that mimic a padded row pad it with -INFINITY. */
void kiln_softmax(float *x, int64_t n, float scale, kiln_numeric_mode mode);

/* In place: x = exp(x - max) as ggml_vec_soft_max_f32 computes it (the
 * polynomial on blocks of 16 from x[0], glibc's expf for the rest; -INFINITY
 * gives 0); returns the sum of the results in its order: each block's sum
 * in _mm512_reduce_add_ps's order, added to a double. */
double kiln_exp_sum(float *x, int64_t n, float max);

/* For each of `rows` rows of n: y = silu(g) * u (SwiGLU). y may alias g
 * or u. */
void kiln_swiglu(const float *g, const float *u, float *y, int64_t rows, int64_t n, kiln_numeric_mode mode);

/* y = gelu(x) (tanh form), n values; y may be x. */
void kiln_gelu(const float *x, float *y, int64_t n, kiln_numeric_mode mode);

/* y = gelu(g) * u over n values as ggml_vec_geglu_f32 (Gemma's FFN):
 * gelu(g) through kiln_gelu, 0 where g <= -10. y may alias g or u. */
void kiln_geglu(const float *g, const float *u, float *y, int64_t n, kiln_numeric_mode mode);

/* In place: x = cap * tanh(x / cap), ggml_scale(1/cap), ggml_tanh,
 * ggml_scale(cap) (Gemma's soft-capping of scores and logits). */
void kiln_softcap(float *x, int64_t n, float cap);

/* The logistic function as llama.cpp's qwen2moe graph computes it,
 * silu(x) / x (GGML), or in double (EXACT). */
float kiln_sigmoid(float x, kiln_numeric_mode mode);

/* y += x */
void kiln_vec_add(float *y, const float *x, int64_t n);

/* sum of a[i] * b[i] exactly as ggml_vec_dot_f32 on AVX-512: four
 * 16-lane fused accumulators over blocks of 64, summed as ggml does, the
 * last n % 64 products added in double. */
float kiln_vec_dot(const float *a, const float *b, int64_t n);
/* ggml_vec_dot_f32 exactly: kiln_vec_dot's blocks of 64, then the n % 64
 * leftovers onto the float sum, not in double: rounded products for their
 * whole 8s, the last n % 8 fused (kiln_vec_dot_f32_tail, vecdot.h; checked
 * against libggml-cpu's own function, tests/test_vecdot_f32.c). Equal to
 * kiln_vec_dot when n % 64 == 0. */
float kiln_vec_dot_f32(const float *a, const float *b, int64_t n);

/* out[j] = kiln_vec_dot_f32(a, b + j * stride, n) for j < rows: the same
 * bits, with the SIMD level chosen once for all rows (attention scores
 * against consecutive cache rows, where a call per row cost 5 % of a
 * small model's prompt). */
void kiln_vec_dot_f32_rows(const float *a, const float *b, int64_t stride, int64_t rows, int64_t n, float *out);

/* kiln_vec_dot_f32_rows for m queries a + i * lda against the same rows
 * b: out + i * ldo gets the scores of its first rows[i] rows, the same
 * bits as m calls, each block of rows read from memory once for all of
 * them (attention's scores for a tile of a batch's tokens). */
void kiln_vec_dot_f32_rows_multi(const float *a, int64_t lda, int m, const float *b, int64_t stride,
                                 const int64_t *rows, int64_t n, float *out, int64_t ldo);

/* y += a * x, each element one fused multiply-add. */
void kiln_vec_axpy(float *y, const float *x, float a, int64_t n);

/* For j < rows in turn: acc + (j % m) * ld += p[j] * (x + j * stride), as
 * kiln_vec_axpy does it (the same bits), the SIMD level chosen once:
 * attention's V sums spread over m chains. */
void kiln_vec_axpy_cyclic(float *acc, int64_t m, int64_t ld, const float *x, int64_t stride, const float *p,
                          int64_t rows, int64_t n);

/* Sums 16 rows of n floats (rows[l * stride ...]) into out, element by
 * element in the order of _mm512_reduce_add_ps over the 16 rows. Clobbers
 * the rows. */
void kiln_reduce16_rows(float *rows, int64_t stride, float *out, int64_t n);

/* For each of m queries i: o + i * ldo gets the sum over j < rows[i] of
 * (p + i * ldp)[j] * (x + j * stride)[0..n) in 16 chains, row j in chain
 * j % 16, reduced as kiln_reduce16_rows (llamafile's tinyBLAS order for
 * attention's V product): zeroed acc (16 * n floats of scratch),
 * kiln_vec_axpy_cyclic(acc, 16, n, ...) and kiln_reduce16_rows. */
void kiln_vec_wsum16_multi(const float *x, int64_t stride, const float *p, int64_t ldp, const int64_t *rows, int m,
                           int64_t n, float *acc, float *o, int64_t ldo);

/* kiln_vec_wsum16_multi with the rows given transposed: column d of the
 * rows is xt + d * ldx (llama.cpp's V cache layout, v_trans), padded
 * with anything readable to a whole 16 past the longest rows[i]; the
 * same bits, each 16 rows' weights one vector. Returns false (and does
 * nothing) where it has no kernel: below AVX-512, or n % 4 != 0; with
 * m = 0 it only answers that. */
bool kiln_vec_wsum16_tr(const float *xt, int64_t ldx, const float *p, int64_t ldp, const int64_t *rows, int m,
                        int64_t n, float *o, int64_t ldo);

#endif
