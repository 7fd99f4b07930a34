/* runtime/olmo2.c - OLMo 2's block (arch olmo2), as llama.cpp's graph
 * computes it (src/models/olmo2.cpp):
 *
 *   x += post_attention_norm(attention(x))
 *   x += post_ffw_norm(down(silu(gate x) * up x))
 *
 * There is no norm in front of either: attention and the FFN read the
 * residual stream itself. The attention (attention.c) takes OLMo 2's q/k
 * norms from their weights' width: one RMS norm over the whole q (and k)
 * projection, before RoPE, rather than one per head. The RoPE is NEOX and
 * the softmax scale 1/sqrt(head_dim) (model.c). */
#include "forward_impl.h"

#include <string.h>

/* n rows of n_embd, RMS-normed by w in place. */
static void post_norm(const kiln_ctx *c, const kiln_tensor *w, float *x, int64_t n) {
    const kiln_hparams *hp = &c->m->hp;
    for (int64_t t = 0; t < n; t++)
        kiln_rms_norm(x + t * hp->n_embd, (const float *)w->data, x + t * hp->n_embd, hp->n_embd, hp->norm_eps);
}

int kiln_olmo2_block(kiln_ctx *c, int64_t il, int64_t n, kiln_err *err) {
    const kiln_layer *L = &c->m->layers[il];
    const int64_t d = c->m->hp.n_embd;
    /* kiln_attention_block reads c->xn, the normed input other blocks give it */
    memcpy(c->xn, c->x, (size_t)(n * d) * sizeof *c->x);
    if (kiln_attention_block(c, il, n, err) < 0) return -1;
    post_norm(c, L->attn_post_norm, c->tmp, n);
    kiln_vec_add(c->x, c->tmp, n * d); /* ffn_inp */
    if (kiln_ffn(c, L->ffn_gate, NULL, L->ffn_up, NULL, L->ffn_down, NULL, c->x, n, c->tmp, err) < 0) return -1;
    post_norm(c, L->ffn_post_norm, c->tmp, n);
    kiln_vec_add(c->x, c->tmp, n * d);
    return 0;
}
