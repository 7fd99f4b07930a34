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
 * hc times wider than kiln_ctx's, so this file owns its buffers (the
 * streams per batch, a block's scratch per block); what carries from one
 * batch to the next (the raw keys, the compressed caches, the
 * compressors' rows) is the context's (deepseek4_state.c). The steps
 * (embed, block, head) are exported for layer-major evaluation
 * (layer_major.c). The layer hook sees the mean of the streams after
 * each block. The MTP block is not evaluated (llama.cpp evaluates
 * the trunk for logits too). */
#include "deepseek4.h"

#include "forward_impl.h"

#include "../codec/codec.h"
#include "../core/types.h"

#include <stdlib.h>
#include <string.h>

/* The scratch of one block or head over n tokens (the streams x are the
 * caller's). */
typedef struct ds4_bufs {
    float *x, *x2;            /* hc streams per token, n * hc * d: x the caller's, x2 scratch */
    float *flat;              /* their normed rows, n * hc * d */
    float *mixes;             /* n * (2 + hc) * hc */
    float *pre, *post, *comb; /* n * hc, n * hc, n * hc * hc */
    float *cur, *xn, *f;      /* n * d each */
    float *mem;
} ds4_bufs;

static float *carve(float **at, int64_t n) {
    float *p = *at;
    *at += n;
    return p;
}

static int bufs_new(const kiln_ctx *c, float *x, int64_t n, ds4_bufs *b, kiln_err *err) {
    const int64_t d = c->m->hp.n_embd, hc = c->m->ds4->hc;
    const int64_t total = 2 * n * hc * d + n * (2 + hc) * hc + 2 * n * hc + n * hc * hc + 3 * n * d;
    float *at = b->mem = malloc((size_t)total * sizeof(float));
    if (!at) return kiln_fail(err, NULL, NULL, -1, "out of memory for %lld tokens", (long long)n);
    b->x = x;
    b->x2 = carve(&at, n * hc * d);
    b->flat = carve(&at, n * hc * d);
    b->mixes = carve(&at, n * (2 + hc) * hc);
    b->pre = carve(&at, n * hc);
    b->post = carve(&at, n * hc);
    b->comb = carve(&at, n * hc * hc);
    b->cur = carve(&at, n * d);
    b->xn = carve(&at, n * d);
    b->f = carve(&at, n * d);
    return 0;
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

/* Adds this half's output b->f back into the streams: b->x = expand(f, x)
 * (into x2, then the two swap: after both halves x is the caller's again). */
static void half_out(const kiln_ctx *c, ds4_bufs *b, int64_t n) {
    kiln_ds4_hc_expand(c->m->ds4, b->f, b->x, b->post, b->comb, n, c->m->hp.n_embd, b->x2);
    float *t = b->x;
    b->x = b->x2;
    b->x2 = t;
}

void kiln_ds4_embed(const kiln_ctx *c, const int32_t *tokens, int64_t n, float *x) {
    const kiln_model *m = c->m;
    const int64_t d = m->hp.n_embd, hc = m->ds4->hc;
    const uint64_t rb = kiln_type_row_bytes(m->tok_embd->type, (uint64_t)d);
    for (int64_t t = 0; t < n; t++) {
        float *x0 = x + t * hc * d;
        kiln_codec_get(m->tok_embd->type)->dequantize_row(m->tok_embd->data + (uint64_t)tokens[t] * rb, x0, d);
        for (int64_t h = 1; h < hc; h++) memcpy(x0 + h * d, x0, (size_t)d * sizeof(float));
    }
}

/* Past the raw cache's first cells llama.cpp reuses masked ones, in an
 * order kiln does not follow; one batch from an empty cache never does. */
static int check_cells(kiln_ctx *c, int64_t n, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t cells = kiln_ds4_raw_cells(hp);
    if (c->n_past + n > cells && c->n_past > 0)
        return kiln_fail(err, NULL, NULL, -1,
                         "deepseek4: kiln evaluates positions past %lld (llama.cpp's sliding-window cache holds "
                         "at least n_swa + 1 = %lld cells rounded up to 256; past them it may reuse cells, in an "
                         "order kiln does not follow) only as one batch from an empty cache (%lld tokens after %lld)",
                         (long long)cells, (long long)(hp->n_swa + 1), (long long)n, (long long)c->n_past);
    if (!c->ds4 && !(c->ds4 = kiln_ds4_state_new(c->m, c->n_ctx, err))) return -1;
    return 0;
}

int kiln_ds4_block(kiln_ctx *c, int64_t il, const int32_t *tokens, float *x, int64_t n, kiln_err *err) {
    const kiln_ds4 *D = c->m->ds4;
    const kiln_ds4_layer *L = &D->layers[il];
    const int64_t d = c->m->hp.n_embd, hc = D->hc;
    ds4_bufs b;
    if (check_cells(c, n, err) < 0 || bufs_new(c, x, n, &b, err) < 0) return -1;
    int rc = -1;
    if (half_in(c, L->hc_attn_fn, L->hc_attn_scale, L->hc_attn_base, L->attn_norm, &b, n, err) < 0 ||
        kiln_ds4_attention(c, il, b.xn, n, b.f, err) < 0)
        goto out;
    half_out(c, &b, n);
    if (half_in(c, L->hc_ffn_fn, L->hc_ffn_scale, L->hc_ffn_base, L->ffn_norm, &b, n, err) < 0 ||
        kiln_ds4_ffn(c, il, tokens, b.xn, n, b.f, err) < 0)
        goto out;
    half_out(c, &b, n);
    if (c->p.layer_hook) { /* the streams' mean, as llama.cpp's t_layer_inp (dsv4_hc_mean) */
        for (int64_t t = 0; t < n; t++) {
            const float *xt = x + t * hc * d;
            float *o = b.cur + t * d;
            for (int64_t i = 0; i < d; i++) o[i] = xt[i];
            for (int64_t h = 1; h < hc; h++)
                for (int64_t i = 0; i < d; i++) o[i] = o[i] + xt[h * d + i];
            for (int64_t i = 0; i < d; i++) o[i] = o[i] * (1.0f / (float)hc);
        }
        c->p.layer_hook(c->p.observer_user, il, b.cur, n, d);
    }
    rc = 0;
out:
    free(b.mem);
    return rc;
}

int kiln_ds4_head(kiln_ctx *c, float *x, int64_t n, float *logits, kiln_err *err) {
    const kiln_model *m = c->m;
    const int64_t d = m->hp.n_embd;
    /* the head's mixer is a product the imatrix hook sees, logits or not */
    if (!logits && !c->p.hook) return 0;
    ds4_bufs b;
    if (bufs_new(c, x, n, &b, err) < 0) return -1;
    int rc = -1;
    if (kiln_ds4_hc_head(c, x, n, b.flat, b.mixes, b.pre, err) < 0) goto out;
    rc = 0;
    if (!logits && !c->p.hook_output) goto out;
    kiln_ds4_hc_collapse(m->ds4, x, b.pre, n, d, b.cur);
    for (int64_t t = 0; t < n; t++)
        kiln_rms_norm(b.cur + t * d, (const float *)m->output_norm->data, b.xn + t * d, d, m->hp.norm_eps);
    rc = kiln_ds4_matmul(c, m->output, b.xn, n, logits, err);
out:
    free(b.mem);
    return rc;
}

/* One batch of n <= n_batch tokens at positions n_past.. */
static int eval_batch(kiln_ctx *c, const int32_t *tokens, int64_t n, float *logits, kiln_err *err) {
    const int64_t d = c->m->hp.n_embd, hc = c->m->ds4->hc;
    float *x = malloc((size_t)(n * hc * d) * sizeof(float));
    if (!x) return kiln_fail(err, NULL, NULL, -1, "out of memory for %lld tokens", (long long)n);
    kiln_ds4_embed(c, tokens, n, x);
    int rc = 0;
    for (int64_t il = 0; rc == 0 && il < c->m->hp.n_layer; il++) rc = kiln_ds4_block(c, il, tokens, x, n, err);
    if (rc == 0) rc = kiln_ds4_head(c, x, n, logits, err);
    free(x);
    if (rc == 0) c->n_past += n;
    return rc;
}

int kiln_deepseek4_eval(kiln_ctx *c, const int32_t *tokens, int64_t n, float *logits, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    for (int64_t i = 0; i < n; i += c->n_batch) {
        const int64_t len = n - i < c->n_batch ? n - i : c->n_batch;
        if (eval_batch(c, tokens + i, len, logits ? logits + i * hp->n_vocab : NULL, err) < 0) return -1;
    }
    return 0;
}
