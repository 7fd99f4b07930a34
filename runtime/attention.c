/* runtime/attention.c - one block's self-attention: q/k/v projections
 * (fused for gpt2, with biases where present), qwen3's per-head q/k RMS
 * norms, RoPE, the append to the f32 KV cache, causal softmax attention
 * with grouped KV heads, and the output projection.
 *
 * As in llama.cpp: head h reads KV head h / (n_head / n_head_kv); scores
 * are f32 dot products scaled by 1/sqrt(head_dim) inside the softmax. New
 * keys and values are written straight into the cache rows of their
 * positions (consecutive), so a batch costs no extra copies. */
#include "forward_impl.h"

#include <math.h>
#include <omp.h>
#include <string.h>

void kiln_attend(kiln_ctx *c, int64_t il, int64_t n) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t hd = hp->head_dim, nh = hp->n_head, n_q = hd * nh;
    const int64_t group = nh / hp->n_head_kv, n_past = c->n_past;
    const float scale = 1.0f / sqrtf((float)hd);
    const kiln_kv_cache *kv = &c->kv;
    /* threads only pay off once there is real work */
    const double work = (double)n * (double)nh * (double)(n_past + n) * (double)hd;
#pragma omp parallel for schedule(dynamic, 1) num_threads(c->n_threads) if (work > 1e6)
    for (int64_t job = 0; job < n * nh; job++) {
        const int64_t t = job / nh, h = job % nh, g = h / group;
        const int64_t n_att = n_past + t + 1; /* causal: itself and before */
        float *s = c->scores + (int64_t)omp_get_thread_num() * c->n_ctx;
        const float *qh = c->q + t * n_q + h * hd;
        for (int64_t j = 0; j < n_att; j++) s[j] = kiln_vec_dot(qh, kiln_kv_k(kv, il, j) + g * hd, hd);
        kiln_softmax(s, n_att, scale);
        float *o = c->att + t * n_q + h * hd;
        memset(o, 0, (size_t)hd * sizeof *o);
        for (int64_t j = 0; j < n_att; j++) kiln_vec_axpy(o, kiln_kv_v(kv, il, j) + g * hd, s[j], hd);
    }
}

/* Applies a per-head RMS norm (qwen3's q_norm / k_norm) to n rows of
 * n_heads heads. */
static void head_norm(float *x, const kiln_tensor *w, int64_t n, int64_t n_heads, int64_t hd, float eps) {
    if (!w) return;
    for (int64_t i = 0; i < n * n_heads; i++) kiln_rms_norm(x + i * hd, (const float *)w->data, x + i * hd, hd, eps);
}

static void rope_rows(const kiln_ctx *c, float *x, int64_t n, int64_t n_heads, int64_t hd) {
    if (c->rope.n_rot == 0) return;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < n_heads; h++)
            kiln_rope_head(&c->rope, c->rope_cs + t * c->rope.n_rot, x + (t * n_heads + h) * hd);
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
        if (kiln_fwd_matmul(c, L->wq, -1, c->xn, n, c->q, err) < 0 ||
            kiln_fwd_matmul(c, L->wk, -1, c->xn, n, k, err) < 0 ||
            kiln_fwd_matmul(c, L->wv, -1, c->xn, n, v, err) < 0)
            return -1;
        kiln_fwd_bias(c->q, L->bq, n, n_q);
        kiln_fwd_bias(k, L->bk, n, n_kv);
        kiln_fwd_bias(v, L->bv, n, n_kv);
    }
    head_norm(c->q, L->attn_q_norm, n, hp->n_head, hd, hp->norm_eps);
    head_norm(k, L->attn_k_norm, n, hp->n_head_kv, hd, hp->norm_eps);
    rope_rows(c, c->q, n, hp->n_head, hd);
    rope_rows(c, k, n, hp->n_head_kv, hd);
    kiln_attend(c, il, n);
    if (kiln_fwd_matmul(c, L->wo, -1, c->att, n, c->tmp, err) < 0) return -1;
    kiln_fwd_bias(c->tmp, L->bo, n, hp->n_embd);
    return 0;
}
