/* runtime/deepseek4.c - the forward pass of DeepSeek-V4 (GGUF arch
 * deepseek4) as llama.cpp's llama_model_deepseek4::graph builds it:
 *
 *   X      = hc copies of the token's embedding
 *   block: pre, post, comb = hc weights of X (attn)
 *          X = expand(attention(rms(collapse(X, pre))), X, post, comb)
 *          pre, post, comb = hc weights of X (ffn)
 *          X = expand(moe + shared(rms(collapse(X, pre))), X, post, comb)
 *   logits = output . rms(collapse(X, head pre))
 *
 * (deepseek4_hc.c mixes the streams, deepseek4_attn.c and
 * deepseek4_ffn.c are the two halves of a block.) The residual stream is
 * hc times wider than kiln_ctx's, so this file owns its buffers, one
 * allocation per evaluation. The layer hook sees the mean of the streams
 * after each block. The MTP block is not evaluated (llama.cpp evaluates
 * the trunk for logits too). */
#include "deepseek4.h"

#include "forward_impl.h"

#include "../codec/codec.h"
#include "../core/types.h"

#include <stdlib.h>
#include <string.h>

/* The buffers of one evaluation of n tokens. */
typedef struct ds4_bufs {
    float *x, *x2;            /* hc streams per token, n * hc * d */
    float *flat;              /* their normed rows, n * hc * d */
    float *mixes;             /* n * (2 + hc) * hc */
    float *pre, *post, *comb; /* n * hc, n * hc, n * hc * hc */
    float *cur, *xn, *f;      /* n * d each */
} ds4_bufs;

static float *carve(float **at, int64_t n) {
    float *p = *at;
    *at += n;
    return p;
}

/* Mixes the streams of b->x down with this block half's weights into b->xn
 * (normed with w), leaving post and comb for expand. */
static int half_in(kiln_ctx *c, const kiln_tensor *fn, const kiln_tensor *scale, const kiln_tensor *base,
                   const kiln_tensor *norm, ds4_bufs *b, int64_t n, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t d = hp->n_embd;
    if (kiln_ds4_hc_weights(c, fn, scale, base, b->x, n, b->flat, b->mixes, b->pre, b->post, b->comb, err) < 0)
        return -1;
    kiln_ds4_hc_collapse(c->m->ds4, b->x, b->pre, n, d, b->cur);
    for (int64_t t = 0; t < n; t++) kiln_rms_norm(b->cur + t * d, (const float *)norm->data, b->xn + t * d, d, hp->norm_eps);
    return 0;
}

/* Adds this half's output b->f back into the streams: b->x = expand(f, x). */
static void half_out(const kiln_ctx *c, ds4_bufs *b, int64_t n) {
    kiln_ds4_hc_expand(c->m->ds4, b->f, b->x, b->post, b->comb, n, c->m->hp.n_embd, b->x2);
    float *t = b->x;
    b->x = b->x2;
    b->x2 = t;
}

static int run(kiln_ctx *c, const int32_t *tokens, int64_t n, float *logits, ds4_bufs *b, kiln_err *err) {
    const kiln_model *m = c->m;
    const kiln_ds4 *D = m->ds4;
    const int64_t d = m->hp.n_embd, hc = D->hc;
    const uint64_t rb = kiln_type_row_bytes(m->tok_embd->type, (uint64_t)d);
    for (int64_t t = 0; t < n; t++) {
        float *x0 = b->x + t * hc * d;
        kiln_codec_get(m->tok_embd->type)->dequantize_row(m->tok_embd->data + (uint64_t)tokens[t] * rb, x0, d);
        for (int64_t h = 1; h < hc; h++) memcpy(x0 + h * d, x0, (size_t)d * sizeof(float));
    }
    for (int64_t il = 0; il < m->hp.n_layer; il++) {
        const kiln_ds4_layer *L = &D->layers[il];
        if (half_in(c, L->hc_attn_fn, L->hc_attn_scale, L->hc_attn_base, L->attn_norm, b, n, err) < 0 ||
            kiln_ds4_attention(c, il, b->xn, n, b->f, err) < 0)
            return -1;
        half_out(c, b, n);
        if (half_in(c, L->hc_ffn_fn, L->hc_ffn_scale, L->hc_ffn_base, L->ffn_norm, b, n, err) < 0 ||
            kiln_ds4_ffn(c, il, tokens, b->xn, n, b->f, err) < 0)
            return -1;
        half_out(c, b, n);
        if (c->p.layer_hook) { /* the streams' mean, as llama.cpp's t_layer_inp (dsv4_hc_mean) */
            for (int64_t t = 0; t < n; t++) {
                const float *xt = b->x + t * hc * d;
                float *o = b->cur + t * d;
                for (int64_t i = 0; i < d; i++) o[i] = xt[i];
                for (int64_t h = 1; h < hc; h++)
                    for (int64_t i = 0; i < d; i++) o[i] = o[i] + xt[h * d + i];
                for (int64_t i = 0; i < d; i++) o[i] = o[i] * (1.0f / (float)hc);
            }
            c->p.layer_hook(c->p.observer_user, il, b->cur, n, d);
        }
    }
    /* the head's mixer is a product the imatrix hook sees, logits or not */
    if (!logits && !c->p.hook) return 0;
    if (kiln_ds4_hc_head(c, b->x, n, b->flat, b->mixes, b->pre, err) < 0) return -1;
    if (!logits && !c->p.hook_output) return 0;
    kiln_ds4_hc_collapse(D, b->x, b->pre, n, d, b->cur);
    for (int64_t t = 0; t < n; t++)
        kiln_rms_norm(b->cur + t * d, (const float *)m->output_norm->data, b->xn + t * d, d, m->hp.norm_eps);
    return kiln_ds4_matmul(c, m->output, b->xn, n, logits, err);
}

int kiln_deepseek4_eval(kiln_ctx *c, const int32_t *tokens, int64_t n, float *logits, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    if (c->n_past != 0 || n > c->n_batch)
        return kiln_fail(err, NULL, NULL, -1,
                         "deepseek4: kiln evaluates one batch of at most %lld tokens from an empty cache "
                         "(%lld after %lld)",
                         (long long)c->n_batch, (long long)n, (long long)c->n_past);
    if (n == 0) return 0;
    const int64_t d = hp->n_embd, hc = c->m->ds4->hc;
    const int64_t total = 3 * n * hc * d + n * (2 + hc) * hc + 2 * n * hc + n * hc * hc + 3 * n * d;
    float *buf = malloc((size_t)total * sizeof(float)), *at = buf;
    if (!buf) return kiln_fail(err, NULL, NULL, -1, "out of memory for %lld tokens", (long long)n);
    ds4_bufs b;
    b.x = carve(&at, n * hc * d);
    b.x2 = carve(&at, n * hc * d);
    b.flat = carve(&at, n * hc * d);
    b.mixes = carve(&at, n * (2 + hc) * hc);
    b.pre = carve(&at, n * hc);
    b.post = carve(&at, n * hc);
    b.comb = carve(&at, n * hc * hc);
    b.cur = carve(&at, n * d);
    b.xn = carve(&at, n * d);
    b.f = carve(&at, n * d);
    const int rc = run(c, tokens, n, logits, &b, err);
    free(buf);
    if (rc == 0) c->n_past += n;
    return rc;
}
