/* runtime/matmul.c - kiln_matmul: chooses the numeric path for a weight
 * type and mode, converts the activations, and spreads the rows over
 * OpenMP threads. The arithmetic lives in the vecdot_*.c kernels (see
 * vecdot.h for the map).
 *
 *   KILN_NUM_GGML, quantized weights: activations -> Q8_0 / Q8_K as ggml's
 *     CPU backend makes them, then ggml's block dot products - the
 *     reference code at the scalar level, above it the panel kernels or,
 *     for a few tokens, the direct ones (identical bits) - in the orders
 *     of llama.cpp's AVX-512 build, which for the weights it repacks
 *     (Q4_K, Q2_K) differ between 4-token groups, the remaining tokens
 *     and MoE experts (kiln_korder);
 *   KILN_NUM_GGML, F32 / F16 / BF16: activations rounded to the weight's
 *     precision (products are then exact), then the orders of llama.cpp's
 *     x86 AVX-512 build: tinyBLAS for several tokens, the type's
 *     ggml_vec_dot for one (kiln_fgemm_ggml, vecdot_float.c);
 *   KILN_NUM_EXACT: every type dequantized to f32, f32 activations, the
 *     same fixed-order accumulation.
 *
 * Every output depends only on its row and its token: not on the SIMD
 * level, the thread count or how many tokens share the call - except
 * float weights in KILN_NUM_GGML mode, where (as in ggml) one token and
 * several tokens take different orders, and repacked k-quants
 * (see above). */
#include "matmul.h"

#include "vecdot.h"

#include "../core/cpu.h"
#include "../core/types.h"
#include "../codec/codec.h"

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

static bool is_float_type(uint32_t t) {
    return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16;
}

static int float_matmul(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                        int64_t n_tokens, float *y, kiln_numeric_mode mode) {
    const kiln_codec *c = kiln_codec_get(wtype);
    const kiln_type_info *ti = kiln_type_get(wtype);
    if (!c || !c->dequantize_row || !ti) return -1;
    if (mode == KILN_NUM_GGML && wtype == KILN_F32) return kiln_fgemm_ggml(wtype, w, n_in, n_out, x, n_tokens, y, false);

    /* ggml converts activations to the weight's own f16 / bf16 first */
    float *xr = NULL;
    if (mode == KILN_NUM_GGML) {
        xr = malloc((size_t)(n_tokens * n_in) * sizeof(float));
        if (!xr) return -1;
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < n_tokens; t++) {
            if (wtype == KILN_F16) kiln_act_round_f16(x + t * n_in, xr + t * n_in, n_in);
            else kiln_act_round_bf16(x + t * n_in, xr + t * n_in, n_in);
        }
        const int rc = kiln_fgemm_ggml(wtype, w, n_in, n_out, xr, n_tokens, y, false);
        free(xr);
        return rc;
    }
    wsrc s = {w, (int64_t)kiln_type_row_bytes(wtype, (uint64_t)n_in), ti->block_size, ti->type_size,
              c->dequantize_row};
    if (n_tokens > 1 || !kiln_fdecode(wtype, w, n_in, n_out, x, y)) kiln_fgemm(rows_f32, &s, n_in, n_out, x, n_tokens, y);
    return 0;
}

/* How the tokens of a product split between ggml's k-quant orders: for
 * weights llama.cpp repacks, tokens [0, n_gemm) take the gemm order and
 * the rest the gemv order (a MoE expert's product: all of them); other
 * weights take `rest` = the vec_dot order for every token. */
typedef struct korders {
    int64_t n_gemm;
    kiln_korder rest;
} korders;

static korders korders_for(const kiln_qtype *qt, int64_t n_out, int64_t n_tokens, bool expert) {
    korders k = {0, KILN_KORDER_VECDOT};
    if (qt->act_type != KILN_Q8_K || !kiln_qtype_repacked(qt, n_out)) return k;
    k.rest = KILN_KORDER_GEMV;
    if (!expert) k.n_gemm = n_tokens - n_tokens % 4;
    return k;
}

/* Rows [r0, r0 + nr) with the reference dot products: the scalar level,
 * and the fallback when a panel buffer cannot be had. */
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
                                   : qt->dot(n_in, wr, a);
        }
}

/* Activations of every token in the type's vec_dot_type, then (above
 * the scalar level) in the panel kernels' byte layout. */
static int quant_matmul(const kiln_qtype *qt, const void *w, int64_t n_in, int64_t n_out,
                        const float *x, int64_t n_tokens, float *y, bool expert) {
    const int64_t nb = n_in / qt->block, act_row = nb * qt->act_bytes;
    const bool kq = qt->act_type == KILN_Q8_K;
    const korders ko = korders_for(qt, n_out, n_tokens, expert);
    uint8_t *act = malloc((size_t)(n_tokens * act_row));
    if (!act) return -1;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n_tokens; t++) {
        kiln_block_q8_k *ak = (kiln_block_q8_k *)(act + t * act_row);
        if (t < ko.n_gemm) kiln_act_q8_k_x4(x + t * n_in, ak, n_in);
        else if (kq) kiln_act_q8_k(x + t * n_in, ak, n_in);
        else kiln_act_q8_0(x + t * n_in, (kiln_block_q8_0 *)(act + t * act_row), n_in);
    }

    /* a few tokens, none in the gemm order: packing panels would cost more
     * than the products */
    if (ko.n_gemm == 0 && n_tokens <= KILN_KDIRECT_TOKENS &&
        kiln_kdirect(qt, ko.rest, w, n_in, n_out, act, n_tokens, y)) {
        free(act);
        return 0;
    }

    if (kiln_simd() == KILN_SIMD_SCALAR) {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < n_out; r++) ref_rows(qt, ko, w, n_in, r, 1, n_out, act, n_tokens, y);
        free(act);
        return 0;
    }

    uint8_t *u = malloc((size_t)(n_tokens * n_in));
    float *d = malloc((size_t)(n_tokens * nb) * sizeof(float));
    int16_t *bs = kq ? malloc((size_t)(n_tokens * (n_in / 16)) * sizeof(int16_t)) : NULL;
    int rc = -1;
    if (u && d && (bs || !kq)) {
        const kiln_pact A = {u, d, bs, n_in, nb};
        const int64_t pbytes = kiln_panel_bytes(qt, n_in);
#pragma omp parallel
        {
#pragma omp for schedule(static)
            for (int64_t t = 0; t < n_tokens; t++)
                kiln_pact_pack(qt, act + t * act_row, n_in, u + t * n_in, d + t * nb,
                               kq ? bs + t * (n_in / 16) : NULL);

            void *panel = kiln_alloc64((size_t)pbytes);
#pragma omp for schedule(static)
            for (int64_t r0 = 0; r0 < n_out; r0 += KILN_PANEL) {
                const int nr = n_out - r0 < KILN_PANEL ? (int)(n_out - r0) : KILN_PANEL;
                bool done = false;
                if (panel) {
                    kiln_panel_pack(qt, w, n_in, n_out, r0, panel);
                    done = kiln_qgemm_panel(qt, KILN_KORDER_GEMM, panel, &A, 0, ko.n_gemm, y + r0, n_out, nr) &&
                           kiln_qgemm_panel(qt, ko.rest, panel, &A, ko.n_gemm, n_tokens - ko.n_gemm, y + r0,
                                            n_out, nr);
                }
                if (!done) ref_rows(qt, ko, w, n_in, r0, nr, n_out, act, n_tokens, y);
            }
            free(panel);
        }
        rc = 0;
    }
    free(u);
    free(d);
    free(bs);
    free(act);
    return rc;
}

static int matmul(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x, int64_t n_tokens,
                  float *y, kiln_numeric_mode mode, bool expert) {
    const kiln_type_info *ti = kiln_type_get(wtype);
    if (!ti || n_in < 0 || n_in % ti->block_size) return -1;
    if (n_out <= 0 || n_tokens <= 0) return 0;
    if (n_in == 0) {
        memset(y, 0, (size_t)(n_out * n_tokens) * sizeof(float));
        return 0;
    }
    if (mode == KILN_NUM_GGML && !is_float_type(wtype)) {
        const kiln_qtype *qt = kiln_qtype_get(wtype);
        return qt ? quant_matmul(qt, w, n_in, n_out, x, n_tokens, y, expert) : -1;
    }
    return float_matmul(wtype, w, n_in, n_out, x, n_tokens, y, mode);
}

int kiln_matmul(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                int64_t n_tokens, float *y, kiln_numeric_mode mode) {
    return matmul(wtype, w, n_in, n_out, x, n_tokens, y, mode, false);
}

int kiln_matmul_expert(uint32_t wtype, const void *w, int64_t n_in, int64_t n_out, const float *x,
                       int64_t n_tokens, float *y, kiln_numeric_mode mode) {
    return matmul(wtype, w, n_in, n_out, x, n_tokens, y, mode, true);
}
