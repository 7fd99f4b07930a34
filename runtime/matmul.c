/* runtime/matmul.c - kiln_matmul: converts the activations, takes the
 * kernel the table in kernels.c names for the weight type, the numeric
 * mode, the token count and the ISA level, and spreads the rows over
 * OpenMP threads. The arithmetic lives in the vecdot_*.c kernels (see
 * vecdot.h for the map).
 *
 *   KILN_NUM_GGML, quantized weights: activations -> Q8_0 / Q8_K as ggml's
 *     CPU backend makes them, then ggml's block dot products - the
 *     reference code at the scalar level, above it the panel kernels or,
 *     for a few tokens, the direct ones (identical bits) - in the orders
 *     of llama.cpp's AVX-512 build, which for the weights it repacks
 *     (Q4_K, Q2_K; Q4_0, IQ4_NL, MXFP4 in one order) differ between
 *     4-token groups, the remaining tokens and MoE experts, and for the
 *     32-weight types between one token and llamafile's batches
 *     (kiln_korder); 3-D per-head weights are never repacked
 *     (kiln_matmul_head);
 *   KILN_NUM_GGML, F32 / F16 / BF16: activations rounded to the weight's
 *     precision (products are then exact), then the orders of llama.cpp's
 *     x86 AVX-512 build: tinyBLAS for several tokens, the type's
 *     ggml_vec_dot for one and for experts (kiln_fgemm_ggml);
 *   KILN_NUM_EXACT: every type dequantized to f32, f32 activations, the
 *     same fixed-order accumulation (kiln_fgemm, vecdot_float.c).
 *
 * Every output depends only on its row and its token: not on the SIMD
 * level, the thread count or how many tokens share the call - except
 * float weights and IQ4_NL in KILN_NUM_GGML mode, where (as in ggml) one
 * token and several tokens take different orders, and repacked k-quants
 * (see above). Each product takes all its buffers at once, before its
 * one OpenMP region (par.h: opened only when the product pays for it),
 * from the thread's arena (kiln_kernel_arena: no allocation once grown,
 * where a malloc per product used to cost decode); when that fails the
 * product returns -1. */
#include "matmul.h"

#include "kernels.h"
#include "par.h"

#include "../core/cpu.h"
#include "../core/types.h"
#include "../codec/codec.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* A weight matrix as the f32 path's row source. */
typedef struct wsrc {
    const uint8_t *w;
    int64_t row_bytes;
    uint32_t block, block_bytes;
    kiln_dequantize_fn dequantize;
} wsrc;

static void rows_f32(const void *ctx, int64_t r0, int64_t nr, int64_t k0, int64_t nk, float *dst,
                     int64_t ld) {
    const wsrc *s = ctx;
    const uint8_t *p = s->w + r0 * s->row_bytes + k0 / s->block * s->block_bytes;
    for (int64_t i = 0; i < nr; i++, p += s->row_bytes) s->dequantize(p, dst + i * ld, nk);
}

/* n bytes rounded up to whole 64-byte lines, so that buffers carved one
 * after another out of one allocation stay aligned. */
static size_t lines(size_t n) {
    return (n + 63) / 64 * 64;
}

/* The activations of tokens [t0, t1) rounded to the weight's precision
 * (ggml's vec_dot_type F16 / BF16). */
static void act_round(uint32_t type, const float *x, int64_t n_in, int64_t t0, int64_t t1, float *xr) {
    for (int64_t t = t0; t < t1; t++) {
        if (type == KILN_F16) kiln_act_round_f16(x + t * n_in, xr + t * n_in, n_in);
        else kiln_act_round_bf16(x + t * n_in, xr + t * n_in, n_in);
    }
}

/* F32 / F16 / BF16 weights in KILN_NUM_GGML mode: in one OpenMP region,
 * the activations rounded to the weight's precision (round: F16 / BF16;
 * ggml's vec_dot_type), then the table's vec or tiny kernel. The region
 * has one barrier at its end and, for a batch, one after the rounding;
 * one token (decode) is rounded by every thread into its own scratch,
 * which costs less than a barrier. Products too small to pay for the
 * region (par.h) run on the calling thread alone. Buffers come from the
 * thread's arena. */
static int float_ggml(const kiln_kernels *k, uint32_t type, const void *w, int64_t n_in, int64_t n_out,
                      const float *x, int64_t n_tokens, float *y, bool round, bool vec_only) {
    /* llamafile_sgemm takes prompt batches when tinyBLAS accepts the
     * shape (k whole vectors, m whole 4-row tiles); mul_mat_id never */
    const bool tiny = !vec_only && n_tokens >= 2 && n_in % 16 == 0 && n_out % 4 == 0;
    const kiln_isa_kernels *ik = &k->isa[kiln_isa_now()];
    const kiln_fkernel fk = tiny ? ik->tiny : ik->vec;
    if (!fk.run) return -1;
    const bool own_x = round && n_tokens == 1;
    const size_t x_bytes = round && !own_x ? lines((size_t)(n_tokens * n_in) * sizeof(float)) : 0;
    const size_t scratch_bytes = fk.scratch ? lines((size_t)fk.scratch(type, n_in) * sizeof(float)) : 0;
    const size_t per_thread = scratch_bytes + (own_x ? lines((size_t)n_in * sizeof(float)) : 0);
    const size_t total = x_bytes + (size_t)omp_get_max_threads() * per_thread;
    /* no allocation once the arena has grown to the model's largest
     * product */
    uint8_t *buf = NULL;
    if (total && !(buf = kiln_kernel_arena(total))) return -1;
    const int64_t row_bytes = (int64_t)kiln_type_row_bytes(type, (uint64_t)n_in);
#pragma omp parallel if (kiln_par_worth((double)n_in * (double)n_out * (double)n_tokens))
    {
        uint8_t *mine = per_thread ? buf + x_bytes + (size_t)omp_get_thread_num() * per_thread : NULL;
        const float *xa = x;
        if (own_x) {
            float *xr = (float *)(mine + scratch_bytes);
            act_round(type, x, n_in, 0, 1, xr);
            xa = xr;
        } else if (round) {
#pragma omp for schedule(dynamic, 8)
            for (int64_t t = 0; t < n_tokens; t++) act_round(type, x, n_in, t, t + 1, (float *)buf);
            xa = (const float *)buf;
        }
        fk.run(type, w, row_bytes, xa, n_in, n_out, n_tokens, y, scratch_bytes ? (float *)mine : NULL);
    }
    return 0;
}

int kiln_fgemm_ggml(uint32_t type, const void *w, int64_t n_in, int64_t n_out, const float *x, int64_t n_tokens,
                    float *y, bool vec_only) {
    const kiln_kernels *k = kiln_kernels_get(type);
    if (!k || k->qt.block) return -1;
    return float_ggml(k, type, w, n_in, n_out, x, n_tokens, y, false, vec_only);
}

/* KILN_NUM_EXACT: the table's one-token kernel where it has one, else the
 * chain over dequantized rows. */
static int exact_matmul(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                        int64_t n_tokens, float *y) {
    const kiln_codec *c = kiln_codec_get(wtype);
    const kiln_type_info *ti = kiln_type_get(wtype);
    if (!c || !c->dequantize_row || !ti) return -1;
    const kiln_kernels *k = kiln_kernels_get(wtype);
    const kiln_fdecode_fn decode = k ? k->isa[kiln_isa_now()].exact_decode : NULL;
    if (n_tokens == 1 && decode) {
        decode(wtype, w, n_in, n_out, x, y);
        return 0;
    }
    wsrc s = {w, (int64_t)kiln_type_row_bytes(wtype, (uint64_t)n_in), ti->block_size, ti->type_size,
              c->dequantize_row};
    return kiln_fgemm(rows_f32, &s, n_in, n_out, x, n_tokens, y);
}

/* What ggml does with a weight matrix, which decides its order: a 2-D
 * weight (ggml_mul_mat; repacked when ggml-cpu repacks the type and
 * shape), a MoE expert (ggml_mul_mat_id; repacked likewise, never
 * tinyBLAS), or one matrix of a 3-D weight multiplied per head
 * (ggml_mul_mat of a 3-D weight: never repacked). */
typedef enum wlayout { W_DENSE, W_EXPERT, W_HEAD } wlayout;

/* How the tokens of a product split between ggml's orders: for weights
 * llama.cpp repacks, tokens [0, n_gemm) take the gemm order and the rest
 * the gemv order (a MoE expert's product: all of them); other weights
 * take `rest` for every token: tinyBLAS's order for 2+ tokens of a dense
 * product where the type has one of its own, else vec_dot's. */
typedef struct korders {
    int64_t n_gemm;
    kiln_korder rest;
} korders;

static korders korders_for(const kiln_kernels *k, int64_t n_out, int64_t n_tokens, wlayout layout) {
    korders ko = {0, KILN_KORDER_VECDOT};
    if (layout == W_HEAD || !kiln_qtype_repacked(&k->qt, n_out)) {
        if (layout != W_EXPERT && n_tokens >= 2 && k->qt.dot_tiny) ko.rest = KILN_KORDER_TINY;
        return ko;
    }
    ko.rest = KILN_KORDER_GEMV;
    /* gemm_group 0: the gemm order is the gemv one (MXFP4, Q4_0, IQ4_NL) */
    if (layout == W_DENSE && k->gemm_group) ko.n_gemm = n_tokens - n_tokens % k->gemm_group;
    return ko;
}

/* The reference dot product of a Q8_0 / Q8_1-activation type in `order`. */
static kiln_vec_dot_fn q0_dot(const kiln_qtype *qt, kiln_korder order) {
    return order == KILN_KORDER_GEMV ? qt->dot_gemv : order == KILN_KORDER_TINY ? qt->dot_tiny : qt->dot;
}

/* Rows [r0, r0 + nr) with the reference dot products (the scalar level). */
static void ref_rows(const kiln_qtype *qt, korders ko, const uint8_t *w, int64_t n_in, int64_t r0, int64_t nr,
                     int64_t n_out, const uint8_t *act, int64_t n_tokens, float *y) {
    const int64_t row_bytes = n_in / qt->block * qt->block_bytes;
    const int64_t act_row = n_in / qt->block * qt->act_bytes;
    for (int64_t r = r0; r < r0 + nr; r++)
        for (int64_t t = 0; t < n_tokens; t++) {
            const uint8_t *wr = w + r * row_bytes, *a = act + t * act_row;
            y[t * n_out + r] = qt->act_type == KILN_Q8_K
                                   ? kiln_kdot_ref(n_in, wr, qt, t < ko.n_gemm ? KILN_KORDER_GEMM : ko.rest,
                                                   (const kiln_block_q8_k *)a)
                                   : q0_dot(qt, ko.rest)(n_in, wr, a);
        }
}

/* Quantized weights in KILN_NUM_GGML mode, in one OpenMP region: the
 * activations of every token in the type's vec_dot_type, then the
 * table's direct kernel (a few tokens, none in the gemm order: packing
 * panels would cost more than the products; or an order without panels),
 * or the panel kernels (the activations first repacked in their byte
 * layout), or at the scalar level the reference rows. */
static int quant_matmul(const kiln_kernels *k, const void *w, int64_t n_in, int64_t n_out, const float *x,
                        int64_t n_tokens, float *y, wlayout layout) {
    const kiln_qtype *qt = &k->qt;
    const kiln_isa_kernels *ik = &k->isa[kiln_isa_now()];
    const int64_t nb = n_in / qt->block, act_row = nb * qt->act_bytes;
    const bool kq = qt->act_type == KILN_Q8_K;
    const korders ko = korders_for(k, n_out, n_tokens, layout);
    const kiln_qpanel_fn pgemm = ik->panel[KILN_KORDER_GEMM], prest = ik->panel[ko.rest];
    const kiln_qrow_fn direct =
        ko.n_gemm == 0 && (n_tokens <= k->direct_tokens || !prest) ? ik->direct[ko.rest] : NULL;
    const bool panels = !direct && prest && (ko.n_gemm == 0 || pgemm);

    /* one allocation: activations, then for the panels their activation
     * layout (u, d, bsums) and one weight panel per thread */
    const int64_t pbytes = panels ? kiln_panel_bytes(qt, n_in) : 0;
    const size_t act_at = 0, u_at = act_at + lines((size_t)(n_tokens * act_row));
    const size_t d_at = u_at + (panels ? lines((size_t)(n_tokens * n_in)) : 0);
    const size_t bs_at = d_at + (panels ? lines((size_t)(n_tokens * nb) * sizeof(float)) : 0);
    const size_t panel_at = bs_at + (panels && kq ? lines((size_t)(n_tokens * (n_in / 16)) * sizeof(int16_t)) : 0);
    const size_t total = panel_at + (size_t)omp_get_max_threads() * lines((size_t)pbytes);
    uint8_t *buf = kiln_kernel_arena(total);
    if (!buf) return -1;
    uint8_t *act = buf + act_at;
    const kiln_pact A = {buf + u_at, (const float *)(buf + d_at), kq ? (const int16_t *)(buf + bs_at) : NULL, n_in,
                         nb};
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < n_tokens; t++) {
            kiln_block_q8_k *ak = (kiln_block_q8_k *)(act + t * act_row);
            if (t < ko.n_gemm) kiln_act_q8_k_x4(x + t * n_in, ak, n_in);
            else if (kq) kiln_act_q8_k(x + t * n_in, ak, n_in);
            else if (qt->act_type == KILN_Q8_1) kiln_act_q8_1(x + t * n_in, (kiln_block_q8_1 *)(act + t * act_row), n_in);
            else kiln_act_q8_0(x + t * n_in, (kiln_block_q8_0 *)(act + t * act_row), n_in);
        }
        if (direct) {
            kiln_direct_rows4(ik->rows[ko.rest], direct, qt, w, n_in, n_out, act, n_tokens, y);
        } else if (panels) {
#pragma omp for schedule(static)
            for (int64_t t = 0; t < n_tokens; t++)
                kiln_pact_pack(qt, act + t * act_row, n_in, buf + u_at + t * n_in, (float *)(buf + d_at) + t * nb,
                               kq ? (int16_t *)(buf + bs_at) + t * (n_in / 16) : NULL);
            void *panel = buf + panel_at + (size_t)omp_get_thread_num() * lines((size_t)pbytes);
#pragma omp for schedule(static)
            for (int64_t r0 = 0; r0 < n_out; r0 += KILN_PANEL) {
                const int nr = n_out - r0 < KILN_PANEL ? (int)(n_out - r0) : KILN_PANEL;
                kiln_panel_pack(qt, w, n_in, n_out, r0, panel);
                if (ko.n_gemm) pgemm(panel, &A, 0, ko.n_gemm, y + r0, n_out, nr);
                prest(panel, &A, ko.n_gemm, n_tokens - ko.n_gemm, y + r0, n_out, nr);
            }
        } else {
#pragma omp for schedule(static)
            for (int64_t r = 0; r < n_out; r++) ref_rows(qt, ko, w, n_in, r, 1, n_out, act, n_tokens, y);
        }
    }
    return 0;
}

static int matmul(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x, int64_t n_tokens,
                  float *y, kiln_numeric_mode mode, wlayout layout) {
    const kiln_type_info *ti = kiln_type_get(wtype);
    if (!ti || n_in < 0 || n_in % ti->block_size) return -1;
    if (n_out <= 0 || n_tokens <= 0) return 0;
    if (n_in == 0) {
        memset(y, 0, (size_t)(n_out * n_tokens) * sizeof(float));
        return 0;
    }
    if (mode != KILN_NUM_GGML) return exact_matmul(wtype, w, n_in, n_out, x, n_tokens, y);
    const kiln_kernels *k = kiln_kernels_get(wtype);
    if (!k) return -1;
    if (k->qt.block) return quant_matmul(k, w, n_in, n_out, x, n_tokens, y, layout);
    return float_ggml(k, wtype, w, n_in, n_out, x, n_tokens, y, wtype != KILN_F32, layout == W_EXPERT);
}

int kiln_matmul(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                int64_t n_tokens, float *y, kiln_numeric_mode mode) {
    return matmul(wtype, w, n_in, n_out, x, n_tokens, y, mode, W_DENSE);
}

int kiln_matmul_expert(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                       int64_t n_tokens, float *y, kiln_numeric_mode mode) {
    return matmul(wtype, w, n_in, n_out, x, n_tokens, y, mode, W_EXPERT);
}

int kiln_matmul_head(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                     int64_t n_tokens, float *y, kiln_numeric_mode mode) {
    return matmul(wtype, w, n_in, n_out, x, n_tokens, y, mode, W_HEAD);
}

/* The direct kernels' dispatcher (declared in vecdot.h): it reads the
 * table, so it lives with the other dispatchers, above the kernels. */
bool kiln_kdirect(const kiln_qtype *qt, kiln_korder order, const void *w, int64_t n_in, int64_t n_out,
                  const void *act, int64_t n_tokens, float *y) {
    const kiln_kernels *k = kiln_kernels_get(qt->type);
    const kiln_isa_kernels *ik = k ? &k->isa[kiln_isa_now()] : NULL;
    const kiln_qrow_fn fn = ik && order != KILN_KORDER_GEMM ? ik->direct[order] : NULL;
    if (!fn) return false;
#pragma omp parallel
    kiln_direct_rows4(ik->rows[order], fn, qt, w, n_in, n_out, act, n_tokens, y);
    return true;
}
