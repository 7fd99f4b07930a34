/* runtime/granite.c - IBM Granite's multipliers on top of the llama block
 * (llama.cpp's src/models/granite.cpp): the token embeddings times
 * embedding_scale, each block's attention and FFN output times
 * residual_scale before it joins the residual stream, the attention
 * softmax scaled by attention.scale instead of 1/sqrt(head_dim)
 * (kiln_attn_scale), and the logits times 1/logit_scale. Each is one
 * ggml_scale in llama.cpp, a float multiply per element; a scale that is
 * 0 (absent) is not applied. */
#include "forward_impl.h"

void kiln_scale_rows(float *x, int64_t n, float s) {
    if (s == 0.0f) return;
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

void kiln_granite_logits(const kiln_hparams *hp, float *logits, int64_t n) {
    if (hp->logit_scale != 0.0f) kiln_scale_rows(logits, n * hp->n_vocab, 1.0f / hp->logit_scale);
}
