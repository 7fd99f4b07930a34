/* runtime/attention.c - one block's self-attention: q/k/v projections
 * (fused for gpt2, with biases where present), the q/k RMS norms (per
 * head for qwen3 and gemma3, over the whole projection for olmo2), RoPE,
 * the append to the f32 KV cache, causal softmax attention with grouped KV
 * heads, and the output projection.
 *
 * As in llama.cpp: head h reads KV head h / (n_head / n_head_kv); scores
 * are f32 dot products scaled by 1/sqrt(head_dim) inside the softmax; and
 * in KILN_NUM_GGML mode every sum is ordered as ggml's CPU backend orders
 * it (see kiln_attend). New keys and values are written straight into the
 * cache rows of their positions (consecutive); a batch's V product reads a
 * transposed copy of the V rows (c->vt, made once a call, as llama.cpp
 * keeps its V cache), and its jobs are tiles of KILN_ATTN_TILE tokens of
 * one head, which read each cache row once for the whole tile.
 *
 * KILN_ATTN_LLAMACPP instead follows ggml's CPU flash-attention kernel with
 * an F16 cache (attention_flash.c). */
#include "forward_impl.h"
#include "par.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "../core/fp16.h"

/* ---- KILN_ATTN_F32 ------------------------------------------------------ */

/* The same as ggml_vec_dot_f32 over n_kv positions computes it: 64 chains
 * over the first n_kv & ~63, combined (c + c+32) + (c+16 + c+48) per lane
 * and reduced like kiln_vec_dot, the remaining products added in double.
 * acc: 64 rows of hd. */
static void kqv_vecdot(const kiln_kv_cache *kv, int64_t il, int64_t off, const float *p, int64_t n_att,
                       int64_t n_kv, int64_t hd, float *acc, float *o) {
    const int64_t np = n_kv & ~(int64_t)63, nj = n_att < np ? n_att : np;
    if (np == 0) {
        memset(o, 0, (size_t)hd * sizeof *o); /* short rows: all in double */
    } else {
        memset(acc, 0, (size_t)(64 * hd) * sizeof *acc);
        kiln_vec_axpy_cyclic(acc, 64, hd, kiln_kv_v(kv, il, 0) + off, kv->row, p, nj, hd);
        for (int64_t l = 0; l < 16; l++) {
            kiln_vec_add(acc + l * hd, acc + (32 + l) * hd, hd);
            kiln_vec_add(acc + (16 + l) * hd, acc + (48 + l) * hd, hd);
            kiln_vec_add(acc + l * hd, acc + (16 + l) * hd, hd);
        }
        kiln_reduce16_rows(acc, hd, o, hd);
    }
    for (int64_t d = 0; d < hd && n_att > np; d++) {
        double s = o[d];
        for (int64_t j = np; j < n_att; j++) s += (double)(kiln_kv_v(kv, il, j)[off + d] * p[j]);
        o[d] = (float)s;
    }
}

/* Rows [0, n_rows) of KV head g's V cache transposed into vt (column d
 * of the head at vt + d * ldt), zeros up to ldt: llama.cpp's own V layout
 * for a batch's V product (kiln_vec_wsum16_tr). */
static void transpose_v(const kiln_kv_cache *kv, int64_t il, int64_t g, int64_t hd, int64_t n_rows, int64_t ldt,
                        float *vt) {
    float *col = vt + g * hd * ldt;
    for (int64_t j0 = 0; j0 < ldt; j0 += 16)
        for (int64_t j = j0; j < j0 + 16; j++) {
            const float *v = j < n_rows ? kiln_kv_v(kv, il, j) + g * hd : NULL;
            for (int64_t d = 0; d < hd; d++) col[d * ldt + j] = v ? v[d] : 0.0f;
        }
}

/* KILN_NUM_EXACT: scores and weighted sums in double, the same whatever
 * the batch. */
static float dot_exact(const float *a, const float *b, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return (float)s;
}

static void kqv_exact(const kiln_kv_cache *kv, int64_t il, int64_t off, const float *p, int64_t n_att, int64_t hd,
                      float *o) {
    for (int64_t d = 0; d < hd; d++) {
        double s = 0.0;
        for (int64_t j = 0; j < n_att; j++) s += (double)p[j] * kiln_kv_v(kv, il, j)[off + d];
        o[d] = (float)s;
    }
}

/* What every job of one kiln_attend call shares. */
typedef struct attn_call {
    kiln_ctx *c;
    int64_t il, hd, n_q, group, n_kv, row_len, ldt;
    float scale, cap;
    bool swa, exact, tinyblas, vt;
    const float *sinks;
} attn_call;

/* One job: head h of tokens [t0, t0 + m) of the batch, m <= KILN_ATTN_TILE;
 * rows: the worker's slice of c->work. */
static void attend_tile(const attn_call *a, int64_t t0, int m, int64_t h, float *rows) {
    kiln_ctx *c = a->c;
    const kiln_hparams *hp = &c->m->hp;
    const kiln_kv_cache *kv = &c->kv;
    const int64_t il = a->il, hd = a->hd, n_q = a->n_q, off = (h / a->group) * hd, n_past = c->n_past;
    float *acc = rows + KILN_ATTN_TILE * a->row_len;
    const float *q0 = c->q + t0 * n_q + h * hd;
    float *o0 = c->att + t0 * n_q + h * hd;
    int64_t n_att[KILN_ATTN_TILE]; /* causal: each token sees itself and before */
    for (int i = 0; i < m; i++) n_att[i] = n_past + t0 + i + 1;
    if (!a->exact) kiln_vec_dot_f32_rows_multi(q0, n_q, m, kiln_kv_k(kv, il, 0) + off, kv->row, n_att, hd, rows, a->row_len);
    for (int i = 0; i < m; i++) {
        float *s = rows + i * a->row_len;
        const int64_t lo = a->swa ? kiln_window_start(hp, n_past + t0 + i) : 0; /* sliding: masked below */
        if (a->exact) {
            for (int64_t j = 0; j < n_att[i]; j++) s[j] = dot_exact(q0 + i * n_q, kiln_kv_k(kv, il, j) + off, hd);
            kiln_mask_scores(s, lo, n_att[i], a->cap);
            if (a->sinks) kiln_softmax_sink(s, n_att[i], a->scale, a->sinks[h], KILN_NUM_EXACT);
            else kiln_softmax(s, n_att[i], a->scale, KILN_NUM_EXACT);
            kqv_exact(kv, il, off, s, n_att[i], hd, o0 + i * n_q);
            continue;
        }
        /* ggml's softmax row is n_kv long, but the masked cells past the
         * last 16-value block that holds a visible one add exact zeros to
         * its sum (a block at a time, in double), and nothing reads their
         * weights: that block is where the row can end, the same bits at
         * a fraction of the cost early in a batch or a decode */
        const int64_t n_soft = (n_att[i] + 15) / 16 * 16 < a->n_kv ? (n_att[i] + 15) / 16 * 16 : a->n_kv;
        for (int64_t j = n_att[i]; j < n_soft; j++) s[j] = -INFINITY;
        kiln_mask_scores(s, lo, n_att[i], a->cap);
        if (a->sinks) kiln_softmax_sink(s, n_soft, a->scale, a->sinks[h], KILN_NUM_GGML); /* gpt-oss */
        else kiln_softmax(s, n_soft, a->scale, KILN_NUM_GGML);
        if (!a->tinyblas) kqv_vecdot(kv, il, off, s, n_att[i], a->n_kv, hd, acc, o0 + i * n_q);
    }
    if (a->exact || !a->tinyblas) return;
    if (a->vt) kiln_vec_wsum16_tr(c->vt + off * a->ldt, a->ldt, rows, a->row_len, n_att, m, hd, o0, n_q);
    else kiln_vec_wsum16_multi(kiln_kv_v(kv, il, 0) + off, kv->row, rows, a->row_len, n_att, m, hd, acc, o0, n_q);
}

void kiln_attend(kiln_ctx *c, int64_t il, int64_t n) {
    if (c->p.attention != KILN_ATTN_F32) {
        kiln_attend_flash(c, il, n);
        return;
    }
    const kiln_hparams *hp = &c->m->hp;
    const int64_t hd = hp->head_dim, nh = hp->n_head;
    /* llama.cpp's KV view (llama_kv_cache::get_n_kv) holds the cells in
     * use rounded up to a multiple of 256, and its cache has room for
     * that (llama_context pads n_ctx to 256): softmax rows are n_kv long,
     * masked beyond each token, and the V product goes to tinyBLAS for
     * batches of 2+ tokens, else to ggml_vec_dot_f32. tinyBLAS's order
     * (llamafile's product with the transposed V cache): 16 fused chains,
     * position j in chain j % 16, then _mm512_reduce_add_ps
     * (kiln_vec_wsum16_multi); where kiln_vec_wsum16_tr has a kernel, from
     * a copy of the V rows transposed as llama.cpp keeps them, made once
     * a call (c->vt: allocated for contexts that take batches). */
    const int64_t n_kv = kiln_kv_view(c->n_past + n);
    attn_call a = {.c = c, .il = il, .hd = hd, .n_q = hd * nh, .group = nh / hp->n_head_kv, .n_kv = n_kv,
                   .row_len = kiln_kv_view(c->n_ctx), .ldt = (c->n_past + n + 15) / 16 * 16,
                   .scale = kiln_attn_scale(hp), .cap = hp->attn_softcap, .swa = kiln_layer_slides(hp, il),
                   .exact = c->p.mode == KILN_NUM_EXACT, .tinyblas = n >= 2 && n_kv % 16 == 0 && hd % 4 == 0};
    const kiln_tensor *sink_t = c->m->layers[il].attn_sinks;
    a.sinks = sink_t ? (const float *)sink_t->data : NULL;
    a.vt = !a.exact && a.tinyblas && c->vt && kiln_vec_wsum16_tr(NULL, 0, NULL, 0, NULL, 0, hd, NULL, 0);
    /* a job: one head of up to KILN_ATTN_TILE consecutive tokens, whose
     * cache rows are read once for all of them */
    const int64_t n_tiles = (n + KILN_ATTN_TILE - 1) / KILN_ATTN_TILE;
    /* threads only pay off once there is real work (par.h) */
    const double work = (double)n * (double)nh * (double)n_kv * (double)hd;
#pragma omp parallel num_threads(c->n_threads) if (work > 1e6)
    {
        if (a.vt) {
#pragma omp for schedule(static)
            for (int64_t g = 0; g < hp->n_head_kv; g++) transpose_v(&c->kv, il, g, hd, c->n_past + n, a.ldt, c->vt);
        }
        float *rows = c->work + (int64_t)omp_get_thread_num() * c->work_stride;
#pragma omp for schedule(dynamic, 1)
        for (int64_t job = 0; job < n_tiles * nh; job++) {
            const int64_t t0 = job / nh * KILN_ATTN_TILE;
            attend_tile(&a, t0, (int)(n - t0 < KILN_ATTN_TILE ? n - t0 : KILN_ATTN_TILE), job % nh, rows);
        }
    }
}

void kiln_mask_scores(float *s, int64_t lo, int64_t n_att, float cap) {
    if (cap != 0.0f) kiln_softcap(s + lo, n_att - lo, cap);
    for (int64_t j = 0; j < lo; j++) s[j] = -INFINITY;
}

/* Applies the RMS norm w (q_norm / k_norm) to n rows of `width` values in
 * pieces as wide as w: one head for qwen3 and gemma3, the whole row for
 * olmo2. */
static void head_norm(float *x, const kiln_tensor *w, int64_t n, int64_t width, float eps) {
    if (!w) return;
    const int64_t len = w->ne[0];
    kiln_rms_norm_rows(x, (const float *)w->data, x, n * (width / len), len, eps);
}

/* RoPE of one token's n_heads heads of hd values, angles cs. */
static void rope_token(const kiln_rope *r, const float *cs, float *x, int64_t n_heads, int64_t hd) {
    for (int64_t h = 0; h < n_heads; h++) kiln_rope_head(r, cs, x + h * hd);
}

/* RoPE of block il: the sliding layers of a gemma have their own base. */
static void rope_rows(const kiln_ctx *c, int64_t il, float *x, int64_t n, int64_t n_heads, int64_t hd) {
    if (c->rope.n_rot == 0) return;
    const bool swa = kiln_layer_slides(&c->m->hp, il);
    const kiln_rope *r = swa ? &c->rope_swa : &c->rope;
    const float *cs = swa ? c->rope_cs_swa : c->rope_cs;
    if (kiln_par_worth_floats((double)(n * n_heads * r->n_rot))) {
        /* a batch: its tokens shared by the team (par.h) */
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < n; t++) rope_token(r, cs + t * r->n_rot, x + t * n_heads * hd, n_heads, hd);
    } else {
        for (int64_t t = 0; t < n; t++) rope_token(r, cs + t * r->n_rot, x + t * n_heads * hd, n_heads, hd);
    }
}

/* gpt2's fused projection: rows of [q | k | v], split into c->q and the
 * cache rows of the new positions. */
static int project_fused(kiln_ctx *c, const kiln_layer *L, int64_t il, int64_t n, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t n_q = hp->head_dim * hp->n_head, n_kv = hp->head_dim * hp->n_head_kv;
    const int64_t w = n_q + 2 * n_kv;
    if (kiln_fwd_matmul(c, L->wqkv, -1, c->xn, n, c->tmp, err) < 0) return -1;
    kiln_fwd_bias(c->tmp, L->bqkv, n, w);
    for (int64_t t = 0; t < n; t++) {
        const float *r = c->tmp + t * w;
        memcpy(c->q + t * n_q, r, (size_t)n_q * sizeof(float));
        memcpy(kiln_kv_k(&c->kv, il, c->n_past + t), r + n_q, (size_t)n_kv * sizeof(float));
        memcpy(kiln_kv_v(&c->kv, il, c->n_past + t), r + n_q + n_kv, (size_t)n_kv * sizeof(float));
    }
    return 0;
}

int kiln_attention_block(kiln_ctx *c, int64_t il, int64_t n, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const kiln_layer *L = &c->m->layers[il];
    const int64_t hd = hp->head_dim, n_q = hd * hp->n_head, n_kv = hd * hp->n_head_kv;
    float *k = kiln_kv_k(&c->kv, il, c->n_past), *v = kiln_kv_v(&c->kv, il, c->n_past);
    if (L->wqkv) {
        if (project_fused(c, L, il, n, err) < 0) return -1;
    } else {
        const kiln_tensor *w[] = {L->wq, L->wk, L->wv};
        float *const y[] = {c->q, k, v};
        if (kiln_fwd_matmul_group(c, w, y, 3, c->xn, n, err) < 0) return -1;
        kiln_fwd_bias(c->q, L->bq, n, n_q);
        kiln_fwd_bias(k, L->bk, n, n_kv);
        kiln_fwd_bias(v, L->bv, n, n_kv);
    }
    head_norm(c->q, L->attn_q_norm, n, n_q, hp->norm_eps);
    head_norm(k, L->attn_k_norm, n, n_kv, hp->norm_eps);
    rope_rows(c, il, c->q, n, hp->n_head, hd);
    rope_rows(c, il, k, n, hp->n_head_kv, hd);
    if (hp->attn_scale != 0.0f) /* gemma: ggml_scale(Qcur, f_attention_scale) */
        for (int64_t i = 0; i < n * n_q; i++) c->q[i] *= hp->attn_scale;
    if (c->p.attention != KILN_ATTN_F32) { /* the F16 cache */
        kiln_f16_round(k, k, n * n_kv);
        kiln_f16_round(v, v, n * n_kv);
    }
    kiln_attend(c, il, n);
    for (int64_t t = 0; L->attn_sub_norm && t < n; t++) /* bitnet: RMS norm of the heads' output */
        kiln_rms_norm(c->att + t * n_q, (const float *)L->attn_sub_norm->data, c->att + t * n_q, n_q, hp->norm_eps);
    if (kiln_fwd_matmul(c, L->wo, -1, c->att, n, c->tmp, err) < 0) return -1;
    kiln_fwd_bias(c->tmp, L->bo, n, hp->n_embd);
    return 0;
}
