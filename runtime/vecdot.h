/* runtime/vecdot.h - the kernels behind kiln_matmul (runtime/matmul.c).
 * Internal to the runtime (tests and benchmarks use it too).
 *
 * The layers, each in its own files:
 *
 *   act_quant.c      activations -> ggml's vec_dot_type (Q8_0 / Q8_K blocks,
 *                    f16 / bf16 rounding), exactly as ggml's x86 CPU backend
 *                    converts them;
 *   vecdot_legacy.c  the reference dot products: one weight row against one
 *   vecdot_k.c       converted activation row, written as ggml's scalar
 *   vecdot_iq2.c     (generic) vec_dot functions are: integer sums per block,
 *                    then the float combination in ggml's order. These
 *                    DEFINE kiln's numbers in KILN_NUM_GGML mode; each file
 *                    also unpacks its blocks to integer levels;
 *   vecdot_panel.c   the same numbers, fast: 16 weight rows interleaved into
 *   vecdot_qgemm.c   a "panel" so that one SIMD lane is one row, integer dot
 *                    products with VNNI / AVX2, then ggml's float
 *                    combination lane by lane - bit for bit the reference;
 *   vecdot_float.c   f32 products (F16/BF16 weights, and every type in
 *                    KILN_NUM_EXACT mode): y = fmaf chain over k in order,
 *                    the same at every SIMD level; F32 weights in
 *                    KILN_NUM_GGML mode: ggml's x86 orders instead;
 *   vecdot_fdecode.c the same chains for one token, F32/F16/BF16 weights
 *                    read in place (vecdot_simd.h: shared AVX-512 helpers).
 *
 * Nothing here prints; buffers are the caller's unless a contract says
 * otherwise. */
#ifndef KILN_VECDOT_H
#define KILN_VECDOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../quantize/blocks.h"

/* 64-byte aligned memory for the kernels' buffers (free() releases it),
 * or NULL. */
static inline void *kiln_alloc64(size_t n) {
    return aligned_alloc(64, (n + 63) / 64 * 64);
}

/* ---- activation conversion (act_quant.c) ---------------------------- */

/* ggml's x86 quantize_row_q8_0 (the CPU backend's from_float for Q8_0):
 * d = amax / 127 stored as fp16, q = x * (127 / amax) rounded to nearest
 * even (not the reference quantizer's 1/d and roundf). n % 32 == 0. */
void kiln_act_q8_0(const float *x, kiln_block_q8_0 *y, int64_t n);

/* Q8_K as ggml's CPU backend makes it on x86: quantize_row_q8_K_ref,
 * bsums included. n % 256 == 0. */
void kiln_act_q8_k(const float *x, kiln_block_q8_k *y, int64_t n);

/* x rounded to fp16 / bf16 (ggml's F16C and GGML_FP32_TO_BF16 rounding)
 * and widened back: the exact values ggml's f16 / bf16 dot products see. */
void kiln_act_round_f16(const float *x, float *y, int64_t n);
void kiln_act_round_bf16(const float *x, float *y, int64_t n);

/* ---- reference dot products (vecdot_legacy.c, vecdot_k.c, vecdot_iq2.c) */

/* One row of n weights (blocks of the weight type) against n activations
 * already converted to the type's vec_dot_type (Q8_0 or Q8_K blocks). */
typedef float (*kiln_vec_dot_fn)(int64_t n, const void *w, const void *act);

float kiln_vec_dot_q8_0(int64_t n, const void *w, const void *act);
float kiln_vec_dot_q4_0(int64_t n, const void *w, const void *act);
float kiln_vec_dot_q5_0(int64_t n, const void *w, const void *act);
float kiln_vec_dot_iq4_nl(int64_t n, const void *w, const void *act);
float kiln_vec_dot_q2_k(int64_t n, const void *w, const void *act);
float kiln_vec_dot_q3_k(int64_t n, const void *w, const void *act);
float kiln_vec_dot_q4_k(int64_t n, const void *w, const void *act);
float kiln_vec_dot_q5_k(int64_t n, const void *w, const void *act);
float kiln_vec_dot_q6_k(int64_t n, const void *w, const void *act);
float kiln_vec_dot_iq2_xxs(int64_t n, const void *w, const void *act);

/* 256 weights as integers, for the panel kernels: one k-quant / i-quant
 * super-block (weight p = d[0] * sc[p/16] * q[p] - dmin * mn[p/16], the
 * format's own constant factors, e.g. IQ2_XXS's 1/8, left to the float
 * combination), or up to 8 consecutive 32-weight blocks (weight p =
 * d[p/32] * q[p]). */
typedef struct kiln_qblock {
    int8_t q[KILN_QK_K];
    int16_t sc[16];
    int16_t mn[16];
    float d[8], dmin;
} kiln_qblock;

/* Unpacks n consecutive blocks (n <= 8 for 32-weight formats, n == 1
 * otherwise) into *out. Each format has a portable version and an AVX2
 * one, chosen by kiln_simd(); both give the same integers (tested). */
typedef void (*kiln_unpack_fn)(const void *blocks, int n, kiln_qblock *out);

void kiln_unpack_q8_0(const void *blocks, int n, kiln_qblock *out);
void kiln_unpack_q4_0(const void *blocks, int n, kiln_qblock *out);
void kiln_unpack_q5_0(const void *blocks, int n, kiln_qblock *out);
void kiln_unpack_iq4_nl(const void *blocks, int n, kiln_qblock *out);
void kiln_unpack_q2_k(const void *blocks, int n, kiln_qblock *out);
void kiln_unpack_q3_k(const void *blocks, int n, kiln_qblock *out);
void kiln_unpack_q4_k(const void *blocks, int n, kiln_qblock *out);
void kiln_unpack_q5_k(const void *blocks, int n, kiln_qblock *out);
void kiln_unpack_q6_k(const void *blocks, int n, kiln_qblock *out);
void kiln_unpack_iq2_xxs(const void *blocks, int n, kiln_qblock *out);

/* ggml's hsum_float_8 (x86): ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). */
static inline float kiln_hsum8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* How a type's integer block sums become floats; each is ggml's
 * expression for that type (see the kernels for the exact operations):
 * the generic scalar one, except for Q8_0, which has ggml's x86 order. */
typedef enum kiln_combine {
    KILN_COMB_LANES8,   /* Q8_0: 8 lanes of 4-weight sums, acc[l] = fmaf(dx * dy,
                           sumi[l], acc[l]), then kiln_hsum8 */
    KILN_COMB_Q8_0,     /* sumf += sumi * (dx * dy)          Q5_0 IQ4_NL */
    KILN_COMB_Q4_0,     /* sumf += (sumi * dx) * dy          Q4_0 */
    KILN_COMB_Q2_K,     /* sumf += dall * isum - dmin * summs */
    KILN_COMB_LANES,    /* 8 class sums, sums[l] += d * aux32[l]   Q3_K Q6_K */
    KILN_COMB_LANES_MIN,/* the same, and sumf -= dmin * sumi       Q4_K Q5_K */
    KILN_COMB_IQ2,      /* sumf += d * bsum, result * 0.125    IQ2_XXS */
} kiln_combine;

/* The reference dot product of every Q8_K type (vecdot_k.c): unpack each
 * weight block, take the exact integer sums, combine them as `comb` says. */
float kiln_kdot_ref(int64_t n, const void *w, size_t block_bytes, kiln_unpack_fn unpack,
                    kiln_combine comb, const kiln_block_q8_k *act);

/* Everything the GGML-mode path needs to know about a weight type. */
typedef struct kiln_qtype {
    uint32_t type;
    uint32_t act_type;   /* KILN_Q8_0 or KILN_Q8_K */
    int block;           /* weights per block: 32 or 256 */
    int block_bytes;     /* bytes per weight block */
    int act_bytes;       /* bytes per activation block */
    kiln_vec_dot_fn dot;
    kiln_unpack_fn unpack;
    kiln_combine comb;
} kiln_qtype;

/* The entry for a quantized weight type, or NULL when KILN_NUM_GGML has
 * no kernel for it (vecdot_panel.c holds the table). */
const kiln_qtype *kiln_qtype_get(uint32_t type);

/* ---- panels: 16 interleaved rows (vecdot_panel.c) -------------------- */

#define KILN_PANEL 16

/* A 32-weight block of 16 rows. Group g holds weights 4g..4g+3 of every
 * row, so one 64-byte load feeds one dpbusd for 16 rows. */
typedef struct kiln_pblk32 {
    int8_t w[8][KILN_PANEL][4];
    int32_t bias[KILN_PANEL]; /* -128 * sum of the row's levels */
    float d[KILN_PANEL];
} kiln_pblk32;

/* A 256-weight super-block of 16 rows. Chunk c covers weights 32c..32c+31
 * and is stored by class l = position mod 8, the lanes of ggml's scalar
 * k-quant dot products: w[c][l][r] = levels of weights 32c + l + {0,8,16,24}
 * of row r. The first two share the scale of 16-weight sub-block 2c, the
 * last two that of 2c+1, which is the order of sc[c][r]. */
typedef struct kiln_pblk256 {
    int8_t w[8][8][KILN_PANEL][4];
    int16_t sc[8][KILN_PANEL][2];
    int16_t mn[8][KILN_PANEL][2];  /* mins of 16-weight sub-blocks 2j, 2j+1 */
    int32_t bias[8][KILN_PANEL];   /* class l: -128 * sum(scale * level) */
    float d[KILN_PANEL], dmin[KILN_PANEL];
} kiln_pblk256;

/* Activations for the panel kernels, every token of a product: q + 128 as
 * bytes (Q8_K rows in the class order of kiln_pblk256), the fp32 scale of
 * each block and, for Q8_K, the bsums. */
typedef struct kiln_pact {
    const uint8_t *u;    /* n_tokens x n_in */
    const float *d;      /* n_tokens x (n_in / block) */
    const int16_t *bsums;/* n_tokens x (n_in / 16), Q8_K only */
    int64_t n_in, nb;
} kiln_pact;

/* Packs one token's converted activation row (Q8_0 or Q8_K blocks) into
 * the panel activation layout: u[n], d[n / block], bsums[n / 16]. */
void kiln_pact_pack(const kiln_qtype *qt, const void *act, int64_t n, uint8_t *u, float *d,
                    int16_t *bsums);

/* Interleaves rows [r0, r0 + 16) of the weight matrix (rows past n_rows
 * become zeros) into `panel`: n_in / block blocks of kiln_pblk32 or
 * kiln_pblk256. */
void kiln_panel_pack(const kiln_qtype *qt, const void *w, int64_t n_in, int64_t n_rows,
                     int64_t r0, void *panel);

/* Bytes of one panel (16 rows of n_in weights). */
int64_t kiln_panel_bytes(const kiln_qtype *qt, int64_t n_in);

/* ---- panel kernels (vecdot_qgemm.c) ----------------------------------- */

/* y[t * ldy + r] for r < n_rows (<= 16) and t < n_tokens: panel rows
 * against tokens [0, n_tokens) of `act`. Needs AVX2 at least; picks the
 * VNNI kernel when the CPU has it. Equal to the reference dot products
 * bit for bit. Returns false when no SIMD kernel runs on this CPU. */
bool kiln_qgemm_panel(const kiln_qtype *qt, const void *panel, const kiln_pact *act,
                      int64_t t0, int64_t n_tokens, float *y, int64_t ldy, int n_rows);

/* ---- f32 products (vecdot_float.c) ------------------------------------ */

/* The defining order: acc = fmaf(w[k], x[k], acc) for k = 0..n-1 from
 * acc = 0. Every SIMD path computes exactly this for every output. */
float kiln_fdot_chain(const float *w, const float *x, int64_t n);

/* Produces rows [r0, r0 + nr) of a weight matrix as f32, columns
 * [k0, k0 + nk): dst[i * ld + j] = W[r0 + i][k0 + j]. k0 and nk are
 * multiples of the block size. */
typedef void (*kiln_rows_f32_fn)(const void *ctx, int64_t r0, int64_t nr, int64_t k0, int64_t nk,
                                 float *dst, int64_t ld);

/* y[t * n_out + r] = kiln_fdot_chain(W[r], x[t]) for every row and token,
 * with W delivered by `rows` (OpenMP inside). x is n_tokens x n_in. */
void kiln_fgemm(kiln_rows_f32_fn rows, const void *ctx, int64_t n_in, int64_t n_out,
                const float *x, int64_t n_tokens, float *y);

/* F32 weights in KILN_NUM_GGML mode take the orders of llama.cpp's x86
 * AVX-512 build instead of the chain (vecdot_float.c):
 *   kiln_fdot_ggml_tiny - llamafile's tinyBLAS, which ggml uses for two
 *     tokens or more when n % 16 == 0: 16 lanes, acc[l] = fmaf(w[k], x[k],
 *     acc[l]) for k = l mod 16, then _mm512_reduce_add_ps's tree (lanes
 *     l + l+8, then l + l+4, then (0+2) + (1+3));
 *   kiln_fdot_ggml_vec - ggml_vec_dot_f32 (AVX-512) otherwise: four 16-lane
 *     accumulators over 64 values a step, combined (a0+a2) + (a1+a3), the
 *     same tree, then the n % 64 leftovers as s = fmaf(w, x, s) (gcc
 *     contracts ggml's s += w * x).
 * kiln_fgemm_ggml_f32 picks between them as ggml does, so in this mode an
 * F32 output depends on whether it is one token or several. w is row-major
 * n_out x n_in; OpenMP inside; every SIMD level gives the same bits. */
float kiln_fdot_ggml_tiny(const float *w, const float *x, int64_t n);
float kiln_fdot_ggml_vec(const float *w, const float *x, int64_t n);
void kiln_fgemm_ggml_f32(const float *w, int64_t n_in, int64_t n_out, const float *x,
                         int64_t n_tokens, float *y);

/* One token against F32 / F16 / BF16 weights read in place
 * (vecdot_fdecode.c): y[r] = kiln_fdot_chain(W[r], x), OpenMP inside.
 * Returns false, doing nothing, below AVX-512 or for other types. */
bool kiln_fdecode(uint32_t type, const void *w, int64_t n_in, int64_t n_out, const float *x,
                  float *y);

#endif
