/* runtime/deepseek2.c - the DeepSeek V2/V3 block (GGUF arch deepseek2) as
 * llama.cpp's src/models/deepseek2.cpp builds it for a file with split
 * attn_k_b / attn_v_b, the "MLA" form (what both converters write):
 *
 *   q       = q_b(rms(q_a x))  (or attn_q x: V2-Lite, which model.c
 *             tells by the block count as llama.cpp does), per head
 *             [nope | rope]
 *   kv      = kv_a_mqa x = [c (kv_lora_rank) | k_pe (n_rot)]
 *   q_pe, k_pe roped (normal pairs, YaRN); c = rms(c)
 *   Q_h     = [k_b_h q_nope_h | q_pe_h]     K = V = [c | k_pe]  (one KV head)
 *   o_h     = v_b_h (softmax(Q_h K / kq_scale') V)[0..kv_lora_rank)
 *   out     = wo [o_0 .. o_nh)
 *
 * so attention is MQA over kv_lora_rank + n_rot dimensions, and the cache
 * holds one row of those per position (hp->head_dim, n_head_kv 1; its V
 * rows repeat the K rows, of which the product reads the first
 * kv_lora_rank, each dimension summed on its own so the extra ones change
 * nothing). kq_scale is llama.cpp's pre-scaled one (model.c). The FFN is
 * dense in the first leading_dense_block_count blocks, else the MoE of
 * moe.c (sigmoid scores, selection bias, groups, weight scale) plus the
 * shared experts as one SwiGLU FFN added to it.
 *
 * The per-head products follow ggml's mul_mat for 3-D weights, which
 * llama.cpp never repacks: k_b's input is a permuted (non-contiguous) view,
 * so F32 weights take ggml_vec_dot_f32 for every (row, token) (its
 * leftovers past 64 in gcc's order, kiln_vec_dot_f32); v_b's input is
 * contiguous, so F32 takes the dense order (tinyBLAS for 2+ tokens).
 * Quantized ones convert either input to Q8_0 / Q8_K rows first, so both
 * take kiln_matmul_head (tinyBLAS for 2+ tokens of the types it takes).
 * The imatrix hook sees each of them as llama-imatrix does: one product
 * whose input row holds every head's side by side (hook_heads). */
#include "forward_impl.h"

#include "../core/types.h"
#include "vecdot.h"

#include <stdio.h>
#include <string.h>

/* The MLA intermediates, each n_batch rows wide as named, carved from c->mla. */
typedef struct mla_bufs {
    float *qa, *qraw, *kv, *gin, *gout, *heads, *hooked;
} mla_bufs;

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

int64_t kiln_deepseek2_scratch(const kiln_hparams *hp) {
    const int64_t nope = hp->head_k_mla - hp->n_rot, rank = hp->n_lora_kv;
    return hp->n_lora_q + hp->n_head * hp->head_k_mla + rank + hp->n_rot + max64(nope, rank) +
           max64(rank, hp->head_v_mla) + hp->n_head * hp->head_v_mla + hp->n_head * max64(nope, rank);
}

static mla_bufs carve(const kiln_ctx *c) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t b = c->n_batch, nope = hp->head_k_mla - hp->n_rot, rank = hp->n_lora_kv;
    mla_bufs m;
    m.qa = c->mla;
    m.qraw = m.qa + b * hp->n_lora_q;
    m.kv = m.qraw + b * hp->n_head * hp->head_k_mla;
    m.gin = m.kv + b * (rank + hp->n_rot);
    m.gout = m.gin + b * max64(nope, rank);
    m.heads = m.gout + b * max64(rank, hp->head_v_mla);
    m.hooked = m.heads + b * hp->n_head * hp->head_v_mla;
    return m;
}

/* The imatrix hook for the per-head weight w: llama-imatrix collects
 * ggml's mul_mat of a 3-D weight [n_in, n_out, n_head] as one matrix of
 * n_head x n_in columns with one count, so it gets one call whose token t
 * row is every head's input side by side - head h's n_in values at
 * src + (t * n_head + h) * stride - gathered into `buf`. */
static void hook_heads(kiln_ctx *c, const kiln_tensor *w, const float *src, int64_t stride, int64_t n,
                       float *buf) {
    if (!c->p.hook) return;
    const int64_t nh = c->m->hp.n_head, n_in = w->ne[0];
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < nh; h++)
            memcpy(buf + (t * nh + h) * n_in, src + (t * nh + h) * stride, (size_t)n_in * sizeof(float));
    char name[160];
    snprintf(name, sizeof name, "%.*s", (int)w->name.len, w->name.ptr);
    c->p.hook(c->p.hook_user, name, -1, buf, n, nh * n_in);
}

/* ggml_vec_dot_f32 for every (row, token) of n_out rows of n_in F32
 * weights: how ggml multiplies a non-contiguous input (k_b's). */
static void vec_dot_rows(const float *w, int64_t n_in, int64_t n_out, const float *x, int64_t n, float *y) {
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = 0; r < n_out; r++) y[t * n_out + r] = kiln_vec_dot_f32(w + r * n_in, x + t * n_in, n_in);
}

/* y = head h's matrix of the 3-D weight w times n rows of x. vec_only:
 * F32 weights by ggml_vec_dot_f32 for every (row, token), else the dense
 * order (tinyBLAS for 2+ tokens). Other types and KILN_NUM_EXACT:
 * kiln_matmul_head. The imatrix hook is hook_heads'. */
static int head_matmul(kiln_ctx *c, const kiln_tensor *w, int h, const float *x, int64_t n, float *y,
                       bool vec_only, kiln_err *err) {
    const int64_t n_in = w->ne[0], n_out = w->ne[1];
    const uint8_t *slab = w->data + (uint64_t)h * kiln_type_row_bytes(w->type, (uint64_t)n_in) * (uint64_t)n_out;
    const bool f32 = c->p.mode == KILN_NUM_GGML && w->type == KILN_F32;
    if (f32 && vec_only) {
        vec_dot_rows((const float *)slab, n_in, n_out, x, n, y);
        kiln_fwd_observe(c, w, h, y, n);
        return 0;
    }
    const int r = f32 ? kiln_fgemm_ggml(KILN_F32, slab, n_in, n_out, x, n, y, false)
                      : kiln_matmul_head(w->type, slab, n_in, n_out, x, n, y, c->p.mode);
    if (r < 0)
        return kiln_fail(err, NULL, NULL, -1, "%.*s: matrix product failed (type %s unsupported, or out of memory)",
                         (int)w->name.len, w->name.ptr, kiln_type_name(w->type));
    kiln_fwd_observe(c, w, h, y, n);
    return 0;
}

static void rms_rows(float *x, const kiln_tensor *w, int64_t n, int64_t width, int64_t stride, float eps) {
    for (int64_t t = 0; t < n; t++) kiln_rms_norm(x + t * stride, (const float *)w->data, x + t * stride, width, eps);
}

/* MLA attention of block il for c->xn (n rows) into c->tmp (n x n_embd). */
static int mla_attention(kiln_ctx *c, int64_t il, int64_t n, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const kiln_layer *L = &c->m->layers[il];
    const int64_t nh = hp->n_head, hk = hp->head_k_mla, hv = hp->head_v_mla, rot = hp->n_rot;
    const int64_t nope = hk - rot, rank = hp->n_lora_kv, w_kv = rank + rot, hd = hp->head_dim;
    const mla_bufs m = carve(c);
    if (L->wq_a) {
        if (kiln_fwd_matmul(c, L->wq_a, -1, c->xn, n, m.qa, err) < 0) return -1;
        rms_rows(m.qa, L->attn_q_a_norm, n, hp->n_lora_q, hp->n_lora_q, hp->norm_eps);
        if (kiln_fwd_matmul(c, L->wq_b, -1, m.qa, n, m.qraw, err) < 0) return -1;
    } else if (kiln_fwd_matmul(c, L->wq, -1, c->xn, n, m.qraw, err) < 0) {
        return -1;
    }
    if (kiln_fwd_matmul(c, L->wkv_a_mqa, -1, c->xn, n, m.kv, err) < 0) return -1;
    for (int64_t t = 0; t < n; t++) {
        const float *cs = c->rope_cs + t * rot;
        for (int64_t h = 0; h < nh; h++) kiln_rope_head(&c->rope, cs, m.qraw + (t * nh + h) * hk + nope);
        kiln_rope_head(&c->rope, cs, m.kv + t * w_kv + rank);
    }
    rms_rows(m.kv, L->attn_kv_a_norm, n, rank, w_kv, hp->norm_eps);
    /* the cache row [c | k_pe], as K and as V */
    for (int64_t t = 0; t < n; t++) {
        float *k = kiln_kv_k(&c->kv, il, c->n_past + t), *v = kiln_kv_v(&c->kv, il, c->n_past + t);
        memcpy(k, m.kv + t * w_kv, (size_t)w_kv * sizeof(float));
        if (c->p.attention != KILN_ATTN_F32) kiln_f16_round(k, k, w_kv); /* the F16 cache */
        memcpy(v, k, (size_t)w_kv * sizeof(float));
    }
    /* queries: k_b absorbs q_nope head by head, q_pe follows */
    hook_heads(c, L->wk_b, m.qraw, hk, n, m.hooked);
    for (int64_t h = 0; h < nh; h++) {
        for (int64_t t = 0; t < n; t++)
            memcpy(m.gin + t * nope, m.qraw + (t * nh + h) * hk, (size_t)nope * sizeof(float));
        if (head_matmul(c, L->wk_b, (int)h, m.gin, n, m.gout, true, err) < 0) return -1;
        for (int64_t t = 0; t < n; t++) {
            float *q = c->q + (t * nh + h) * hd;
            memcpy(q, m.gout + t * rank, (size_t)rank * sizeof(float));
            memcpy(q + rank, m.qraw + (t * nh + h) * hk + nope, (size_t)rot * sizeof(float));
        }
    }
    kiln_attend(c, il, n);
    /* v_b decompresses each head's kv_lora_rank values to head_v_mla; its
     * input is contiguous after ggml's plain attention but a permuted view
     * of the flash-attention output (llama-perplexity's context) */
    const bool flash = c->p.attention != KILN_ATTN_F32;
    hook_heads(c, L->wv_b, c->att, hd, n, m.hooked);
    for (int64_t h = 0; h < nh; h++) {
        for (int64_t t = 0; t < n; t++)
            memcpy(m.gin + t * rank, c->att + (t * nh + h) * hd, (size_t)rank * sizeof(float));
        if (head_matmul(c, L->wv_b, (int)h, m.gin, n, m.gout, flash, err) < 0) return -1;
        for (int64_t t = 0; t < n; t++)
            memcpy(m.heads + (t * nh + h) * hv, m.gout + t * hv, (size_t)hv * sizeof(float));
    }
    return kiln_fwd_matmul(c, L->wo, -1, m.heads, n, c->tmp, err);
}

int kiln_deepseek2_block(kiln_ctx *c, int64_t il, int64_t n, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const kiln_layer *L = &c->m->layers[il];
    const int64_t d = hp->n_embd;
    rms_rows(memcpy(c->xn, c->x, (size_t)(n * d) * sizeof(float)), L->attn_norm, n, d, d, hp->norm_eps);
    if (mla_attention(c, il, n, err) < 0) return -1;
    kiln_vec_add(c->x, c->tmp, n * d);
    rms_rows(memcpy(c->xn, c->x, (size_t)(n * d) * sizeof(float)), L->ffn_norm, n, d, d, hp->norm_eps);
    if (!L->ffn_gate_inp) {
        if (kiln_ffn(c, L->ffn_gate, NULL, L->ffn_up, NULL, L->ffn_down, NULL, c->xn, n, c->tmp, err) < 0) return -1;
    } else {
        if (kiln_moe_block(c, il, c->xn, n, c->tmp, err) < 0 ||
            kiln_ffn(c, L->ffn_gate_shexp, NULL, L->ffn_up_shexp, NULL, L->ffn_down_shexp, NULL, c->xn, n,
                     c->ex_out, err) < 0)
            return -1;
        kiln_vec_add(c->tmp, c->ex_out, n * d);
    }
    kiln_vec_add(c->x, c->tmp, n * d);
    return 0;
}
