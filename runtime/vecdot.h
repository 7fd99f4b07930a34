/* runtime/vecdot.h - the kernels behind kiln_matmul (runtime/matmul.c).
 * Internal to the runtime (tests and benchmarks use it too).
 *
 * The layers, each in its own files:
 *
 *   act_quant.c      activations -> ggml's vec_dot_type (Q8_0 / Q8_K blocks,
 *                    f16 / bf16 rounding), exactly as ggml's x86 CPU backend
 *                    converts them;
 *   vecdot_legacy.c  the reference dot products: one weight row against one
 *   vecdot_k.c       converted activation row: integer sums per block, then
 *   vecdot_iq2.c     the float combination in the order of llama.cpp's x86
 *                    AVX-512 build (vecdot_korder.c for the k-quants:
 *                    ggml's AVX2 vec_dot functions, or the gemv / gemm
 *                    kernels of the weights ggml repacks). These DEFINE
 *                    kiln's numbers in KILN_NUM_GGML mode; each file also
 *                    unpacks its blocks to integer levels;
 *   vecdot_panel.c   the same numbers, fast: 16 weight rows interleaved into
 *   vecdot_qgemm.c   a "panel" so that one SIMD lane is one row, integer dot
 *                    products with VNNI / AVX2, then ggml's float
 *                    combination lane by lane - bit for bit the reference;
 *   vecdot_kdirect.c the same numbers for a few tokens (decode, experts),
 *                    from the weights' own blocks, without panels;
 *   vecdot_float.c   f32 products: every type in KILN_NUM_EXACT mode,
 *                    y = fmaf chain over k in order, the same at every
 *                    SIMD level; F32 / F16 / BF16 weights in KILN_NUM_GGML
 *                    mode: ggml's x86 orders (vec_dot, tinyBLAS) instead;
 *   vecdot_fdecode.c the exact chains for one token, F32/F16/BF16 weights
 *                    read in place (vecdot_simd.h: shared AVX-512 helpers);
 *   vecdot_frows.c   ggml's vec_dot orders of F32/F16/BF16 weights, row
 *                    by row against a token (decode), several rows at once;
 *   kernels.c        the table of which of these runs, per weight type and
 *                    ISA level (kernels.h, with a glossary of the names).
 *
 * Nothing here prints; buffers are the caller's unless a contract says
 * otherwise. */
#ifndef KILN_VECDOT_H
#define KILN_VECDOT_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../codec/blocks.h"

/* ---- activation conversion (act_quant.c) ---------------------------- */

/* ggml's x86 quantize_row_q8_0 (the CPU backend's from_float for Q8_0):
 * d = amax / 127 stored as fp16, q = x * (127 / amax) rounded to nearest
 * even (not the reference quantizer's 1/d and roundf). n % 32 == 0. */
void kiln_act_q8_0(const float *x, kiln_block_q8_0 *y, int64_t n);

/* ggml's x86 quantize_row_q8_1 (AVX2): kiln_act_q8_0's d and levels,
 * and s = d * (sum of the levels) as fp16. n % 32 == 0. */
void kiln_act_q8_1(const float *x, kiln_block_q8_1 *y, int64_t n);

/* Q8_K as ggml's CPU backend makes it on x86: quantize_row_q8_K_ref,
 * bsums included. n % 256 == 0. */
void kiln_act_q8_k(const float *x, kiln_block_q8_k *y, int64_t n);

/* Q8_K as ggml_quantize_mat_q8_K_4x8 (x86) makes it for the 4-token groups
 * of a repacked product: the same bytes, except that a block whose largest
 * magnitude occurs with both signs takes the positive one (the reference
 * takes the first). */
void kiln_act_q8_k_x4(const float *x, kiln_block_q8_k *y, int64_t n);

/* x rounded to fp16 / bf16 (ggml's F16C and GGML_FP32_TO_BF16 rounding)
 * and widened back: the exact values ggml's f16 / bf16 dot products see. */
void kiln_act_round_f16(const float *x, float *y, int64_t n);
void kiln_act_round_bf16(const float *x, float *y, int64_t n);
/* x as a product with weights of `type` sees it: rounded for F16 / BF16
 * (above), copied for any other float type. */
void kiln_act_round(uint32_t type, const float *x, float *y, int64_t n);
/* The same rounding kept in 16 bits: x as `type` (KILN_F16 or KILN_BF16)
 * values, for the kernels that widen them as they load them (run16). */
void kiln_act_bits16(uint32_t type, const float *x, uint16_t *y, int64_t n);

/* ---- reference dot products (vecdot_legacy.c; the Q8_K types' is
 * kiln_kdot_ref, vecdot_korder.c) */

/* One row of n weights (blocks of the weight type) against n activations
 * already converted to the type's vec_dot_type (Q8_0 blocks). */
typedef float (*kiln_vec_dot_fn)(int64_t n, const void *w, const void *act);

float kiln_vec_dot_q8_0(int64_t n, const void *w, const void *act);
float kiln_vec_dot_q4_0(int64_t n, const void *w, const void *act);
float kiln_vec_dot_q5_0(int64_t n, const void *w, const void *act);
float kiln_vec_dot_iq4_nl(int64_t n, const void *w, const void *act);
/* The other x86 orders of the 32-weight types (vecdot_legacy.c): IQ4_NL
 * in llamafile's tinyBLAS (Q8_0's eight lanes; its vec_dot pairs blocks),
 * and Q4_0 / IQ4_NL repacked (q4_0_8x8 / iq4_nl_8x8 gemv and gemm). */
float kiln_vec_dot_iq4_nl_tiny(int64_t n, const void *w, const void *act);
float kiln_vec_dot_q4_0_gemv(int64_t n, const void *w, const void *act);
float kiln_vec_dot_iq4_nl_gemv(int64_t n, const void *w, const void *act);
/* Q4_1 and Q5_1 take Q8_1 activations (ggml's x86 AVX2 order). */
float kiln_vec_dot_q4_1(int64_t n, const void *w, const void *act);
float kiln_vec_dot_q5_1(int64_t n, const void *w, const void *act);
/* IQ1_S and IQ1_M take Q8_K activations but not kiln_kdot_ref's unpacked
 * sums (their +-1/8 shifts are summed apart): ggml's AVX2 order, whole
 * (vecdot_iq1.c). */
float kiln_vec_dot_iq1_s(int64_t n, const void *w, const void *act);
float kiln_vec_dot_iq1_m(int64_t n, const void *w, const void *act);
/* MXFP4 (vecdot_mxfp4.c): ggml's vec_dot order, and the order of the
 * gemv / gemm kernels of the matrices llama.cpp repacks (n_out % 8 == 0). */
float kiln_vec_dot_mxfp4(int64_t n, const void *w, const void *act);
float kiln_vec_dot_mxfp4_gemv(int64_t n, const void *w, const void *act);
/* Q1_0 (128 weights) and Q2_0 (64) against the 4 / 2 Q8_0 blocks each
 * weight block spans (vecdot_q12.c): ggml's x86 orders. */
float kiln_vec_dot_q1_0(int64_t n, const void *w, const void *act);
float kiln_vec_dot_q2_0(int64_t n, const void *w, const void *act);

/* 256 weights as integers, for the panel kernels: one k-quant / i-quant
 * super-block (weight p = d[0] * sc[p/16] * q[p] - dmin * mn[p/16], the
 * format's own constant factors, e.g. IQ2_XXS's 1/8, left to the float
 * combination; Q6_K as levels 0..63 with mn = 32 * sc and dmin = d, the
 * way ggml's dot product splits it), or up to 8 consecutive 32-weight
 * blocks (weight p = d[p/32] * q[p]). */
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
void kiln_unpack_iq2_xs(const void *blocks, int n, kiln_qblock *out);
void kiln_unpack_iq2_s(const void *blocks, int n, kiln_qblock *out);
void kiln_unpack_iq4_xs(const void *blocks, int n, kiln_qblock *out);
void kiln_unpack_iq3_xxs(const void *blocks, int n, kiln_qblock *out); /* vecdot_iq3.c */
void kiln_unpack_iq3_s(const void *blocks, int n, kiln_qblock *out);
void kiln_unpack_tq1_0(const void *blocks, int n, kiln_qblock *out); /* vecdot_tq.c */
void kiln_unpack_tq2_0(const void *blocks, int n, kiln_qblock *out);
void kiln_unpack_mxfp4(const void *blocks, int n, kiln_qblock *out); /* vecdot_mxfp4.c */

/* ggml_vec_dot_f32's leftovers past its 64-wide blocks, a[i..n) . b[i..n)
 * onto the blocks' sum s, as the reference build (GCC -O3 -march=native,
 * AVX-512) compiled the loop `sumf += x[i]*y[i]`: vectorised in-order
 * reductions (16 then 8 wide) add rounded products for the leftovers' whole
 * 8s, and the scalar epilogue fuses the last (n - i) % 8 into fmaf. Checked
 * against libggml-cpu's ggml_vec_dot_f32 for n from 5 to 130
 * (tests/fixtures/deepseek2_lite/REGEN.md). */
static inline float kiln_vec_dot_f32_tail(float s, const float *a, const float *b, int64_t i, int64_t n) {
    const int64_t unfused = i + ((n - i) & ~(int64_t)7);
    for (; i < unfused; i++) s += a[i] * b[i]; /* -ffp-contract=off: rounded, then added */
    for (; i < n; i++) s = fmaf(a[i], b[i], s);
    return s;
}

/* ggml's hsum_float_8 (x86): ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)). */
static inline float kiln_hsum8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* How a type's integer block sums become floats; each is ggml's
 * expression for that type (see the kernels for the exact operations).
 * The 32-weight types against Q8_0: ggml's x86 orders - LANES8 (vec_dot
 * of Q8_0 / Q4_0 / Q5_0, tinyBLAS of all four), FMA (repacked Q4_0 /
 * IQ4_NL; IQ4_NL's own vec_dot pairs blocks, vecdot_legacy.c). The Q8_K types: ggml's AVX2 vec_dot order - eight int32 lanes,
 * lane l summing sc * q * a over the weights p with (p / 4) % 8 == l,
 * acc[l] = fmaf(dx * dy, lane[l], acc[l]) per super-block, kiln_hsum8 -
 * with the type's own handling of the mins; see vecdot_korder.c. */
typedef enum kiln_combine {
    KILN_COMB_LANES8,   /* Q8_0: 8 lanes of 4-weight sums, acc[l] = fmaf(dx * dy,
                           sumi[l], acc[l]), then kiln_hsum8 */
    KILN_COMB_FMA,      /* acc = fmaf(sumi, dx * dy, acc)    Q4_0 IQ4_NL repacked */
    KILN_COMB_K,        /* the lanes alone                   Q3_K */
    KILN_COMB_K_Q6,     /* the lanes minus their mins        Q6_K */
    KILN_COMB_K_Q2,     /* mins into the lanes first         Q2_K */
    KILN_COMB_K_Q4,     /* 4 min lanes beside them           Q4_K */
    KILN_COMB_K_Q5,     /* one running min sum beside them   Q5_K */
    KILN_COMB_IQ2,      /* the lanes, the total * 0.125      IQ2_XXS IQ2_XS IQ2_S */
    KILN_COMB_IQ4,      /* the lanes alone, as K; levels are
                           table values up to +-127          IQ4_XS */
    KILN_COMB_IQ3,      /* the lanes, the total * 0.25       IQ3_XXS */
    KILN_COMB_IQ3S,     /* the lanes alone, as K; levels from
                           the unpacker                      IQ3_S */
    KILN_COMB_DOT,      /* qt->dot sums and combines alone   IQ1_S IQ1_M */
} kiln_combine;

/* Which of ggml's k-quant orders a product takes. llama.cpp's CPU backend
 * repacks some weights at load (ggml-cpu/repack.cpp: on this AVX-512 CPU
 * Q4_K and Q2_K matrices whose row count is a multiple of 8) and then
 * multiplies them with its own kernels: tokens in groups of 4 through the
 * gemm kernel (one fma per 64 weights for Q4_K, per 128 for Q2_K, mins
 * apart, subtracted at the end; Q8_K made by kiln_act_q8_k_x4), the
 * remaining tokens - and every token of a MoE expert (MUL_MAT_ID) -
 * through the gemv kernel (one fma per super-block). Other weights take
 * the vec_dot order. */
typedef enum kiln_korder {
    KILN_KORDER_VECDOT = 0,
    KILN_KORDER_GEMV = 1,
    KILN_KORDER_GEMM = 2,
    /* the 32-weight types against Q8_0 that llamafile's tinyBLAS_Q0_AVX
     * takes (ggml_mul_mat of 2+ tokens, weights not repacked), where its
     * order is not the type's vec_dot one (kiln_qtype.dot_tiny) */
    KILN_KORDER_TINY = 3,
    KILN_KORDER_COUNT
} kiln_korder;

/* Everything the GGML-mode path needs to know about a weight type. */
typedef struct kiln_qtype {
    uint32_t type;
    uint32_t act_type;   /* KILN_Q8_0, KILN_Q8_1 or KILN_Q8_K */
    int block;           /* weights per block: 32 or 256 (Q1_0 128, Q2_0 64) */
    int block_bytes;     /* bytes per weight block */
    int act_bytes;       /* bytes of the activation blocks one weight block spans */
    kiln_vec_dot_fn dot; /* the vec_dot order; NULL for Q8_K types, whose
                          * every order is kiln_kdot_ref, except those
                          * (KILN_COMB_DOT) kiln_kdot_ref hands to it */
    kiln_unpack_fn unpack;
    kiln_combine comb;
    int gemm_chunks;     /* repacked types: 32-weight chunks per gemm fma; else 0 */
    kiln_vec_dot_fn dot_gemv; /* Q8_0 types llama.cpp repacks (gemm_chunks > 0):
                               * the gemv / gemm order; else NULL */
    kiln_vec_dot_fn dot_tiny; /* KILN_KORDER_TINY's order; NULL where tinyBLAS
                               * sums as vec_dot does (or never runs) */
} kiln_qtype;

/* One row of x (n values) in qt's vec_dot_type: Q8_K, Q8_1 or Q8_0 blocks
 * as kiln_act_q8_k / _q8_1 / _q8_0 make them (act_quant.c). */
void kiln_act_row(const kiln_qtype *qt, const float *x, void *dst, int64_t n);

/* The reference dot product of every Q8_K type (vecdot_korder.c): unpack
 * each weight block, take the exact integer sums, combine them in `order`
 * (KILN_KORDER_GEMV / GEMM only for types with gemm_chunks > 0). */
float kiln_kdot_ref(int64_t n, const void *w, const kiln_qtype *qt, kiln_korder order,
                    const kiln_block_q8_k *act);

/* True when llama.cpp repacks a matrix of this type with n_out rows. */
bool kiln_qtype_repacked(const kiln_qtype *qt, int64_t n_out);

/* The entry for a quantized weight type, or NULL when KILN_NUM_GGML has
 * no kernel for it (the table in kernels.c holds it). */
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

/* A 256-weight super-block of 16 rows. Chunk c covers weights
 * 32c..32c+31; w[c][l][r] holds weights 32c + 4l .. 32c + 4l + 3 of row
 * r, the bytes of int32 lane l of ggml's 256-bit registers. They share
 * the scale of 16-weight sub-block 2c + l / 4: sc[c][l / 4][r] (twice, one
 * per vpmaddubsw pair). The biases, -128 * sum(scale * level), per lane l
 * (for the vec_dot order) and per chunk c (for the gemm / gemv orders). */
typedef struct kiln_pblk256 {
    int8_t w[8][8][KILN_PANEL][4];
    int16_t sc[8][2][KILN_PANEL][2];
    int16_t mn[8][KILN_PANEL][2];  /* mins of 16-weight sub-blocks 2j, 2j+1 */
    int32_t bias[8][KILN_PANEL];   /* lane l */
    int32_t cbias[8][KILN_PANEL];  /* chunk c */
    float d[KILN_PANEL], dmin[KILN_PANEL];
} kiln_pblk256;

/* Activations for the panel kernels, every token of a product: q + 128 as
 * bytes, the fp32 scale of each block and, for Q8_K, the bsums. */
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

/* ---- a few tokens, weights read in place (vecdot_kdirect.c) ---------- */

/* y[t * n_out + r] for every row and token, `act` being the tokens'
 * converted activations (n_tokens rows of Q8_0 / Q8_K blocks): Q8_K types
 * in `order` (KILN_KORDER_VECDOT or KILN_KORDER_GEMV), Q8_0 types in
 * qt->dot's order, from the weights' own blocks, with the kernel the
 * table in kernels.c names for this level. Equal to kiln_kdot_ref /
 * qt->dot bit for bit; OpenMP inside. Returns false, doing nothing, below
 * AVX2 or for an order or type it does not cover. */
bool kiln_kdirect(const kiln_qtype *qt, kiln_korder order, const void *w, int64_t n_in, int64_t n_out,
                  const void *act, int64_t n_tokens, float *y);

/* ---- f32 products (vecdot_float.c) ------------------------------------ */

/* Produces rows [r0, r0 + nr) of a weight matrix as f32, columns
 * [k0, k0 + nk): dst[i * ld + j] = W[r0 + i][k0 + j]. k0 and nk are
 * multiples of the block size. */
typedef void (*kiln_rows_f32_fn)(const void *ctx, int64_t r0, int64_t nr, int64_t k0, int64_t nk,
                                 float *dst, int64_t ld);

/* y[t * n_out + r] = the fmaf chain acc = fmaf(W[r][k], x[t][k], acc) for
 * k = 0..n_in-1 from acc = 0, for every row and token, with W delivered
 * by `rows` (OpenMP inside); every SIMD level computes exactly this. x is
 * n_tokens x n_in. Returns 0, or -1 when its buffers cannot be had (y is
 * then untouched). */
int kiln_fgemm(kiln_rows_f32_fn rows, const void *ctx, int64_t n_in, int64_t n_out,
               const float *x, int64_t n_tokens, float *y);

/* F32, F16 and BF16 weights (type) in KILN_NUM_GGML mode (matmul.c): as
 * ggml's x86 AVX-512 build (without AVX512_BF16) multiplies them, x being
 * the activations already rounded to the weight's f16 / bf16 (products of
 * such values are exact in f32). tinyBLAS's order for 2+ tokens when
 * n_in % 16 == 0 and n_out % 4 == 0, unless vec_only (ggml_mul_mat_id,
 * the expert products, never uses it); otherwise the type's
 * ggml_vec_dot. The kernels and their orders: the table in kernels.c and
 * vecdot_float.c. w is n_out rows of n_in weights; OpenMP inside; every
 * SIMD level gives the same bits. Returns 0, or -1 for another type or
 * when out of memory. */
int kiln_fgemm_ggml(uint32_t type, const void *w, int64_t n_in, int64_t n_out, const float *x, int64_t n_tokens,
                    float *y, bool vec_only);

#endif
