/* runtime/gemma.c - what Gemma 2 and 3 add to the forward pass, as
 * llama.cpp's graphs (src/models/gemma2.cpp, gemma3.cpp) compute it:
 *
 *   x = embd * sqrt(n_embd)
 *   per block: x += post_attn_norm(attention(attn_norm(x)))
 *              x += post_ffw_norm(down(geglu(gate h, up h))), h = ffn_norm(x)
 *   logits = cap * tanh(logits / cap) when final_logit_softcapping is set
 *
 * The attention itself (attention.c) takes the Gemma details from the
 * hyper-parameters: queries scaled by attn_scale before the scores,
 * gemma3's q/k norms, score soft-capping (gemma2), and the sliding window
 * and its own RoPE base on the sliding layers. Every norm weight already
 * holds 1 + w (the converter adds it), so the norms are plain RMS norms.
 *
 * The cache keeps every position for every layer, as llama.cpp's
 * full-size SWA cache does (dump_logits runs with it; llama-perplexity's
 * and llama-imatrix's chunks fit in their smaller one). llama.cpp's
 * smaller SWA cache reuses the cells of positions that left the window, so
 * past its size the cell order of a sliding layer, and with it the order
 * of the non-flash softmax sums, can differ from kiln's. */
#include "forward_impl.h"

#include <math.h>

void kiln_gemma_scale_embd(const kiln_ctx *c, float *x, int64_t n) {
    /* ggml_scale(inpL, sqrtf(n_embd)) */
    const float s = sqrtf((float)c->m->hp.n_embd);
    for (int64_t i = 0; i < n * c->m->hp.n_embd; i++) x[i] *= s;
}

static void rms_rows(const kiln_ctx *c, const kiln_tensor *w, const float *x, float *y, int64_t n) {
    const kiln_hparams *hp = &c->m->hp;
    for (int64_t t = 0; t < n; t++)
        kiln_rms_norm(x + t * hp->n_embd, (const float *)w->data, y + t * hp->n_embd, hp->n_embd, hp->norm_eps);
}

int kiln_gemma_block(kiln_ctx *c, int64_t il, int64_t n, kiln_err *err) {
    const kiln_layer *L = &c->m->layers[il];
    const int64_t d = c->m->hp.n_embd;
    rms_rows(c, L->attn_norm, c->x, c->xn, n);
    if (kiln_attention_block(c, il, n, err) < 0) return -1;
    rms_rows(c, L->attn_post_norm, c->tmp, c->tmp, n);
    kiln_vec_add(c->x, c->tmp, n * d); /* sa_out */
    rms_rows(c, L->ffn_norm, c->x, c->xn, n);
    if (kiln_ffn(c, L->ffn_gate, NULL, L->ffn_up, NULL, L->ffn_down, NULL, c->xn, n, c->tmp, err) < 0) return -1;
    rms_rows(c, L->ffn_post_norm, c->tmp, c->tmp, n);
    kiln_vec_add(c->x, c->tmp, n * d);
    return 0;
}
