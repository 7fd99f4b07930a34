/* runtime/bitnet.c - BitNet b1.58's block (arch bitnet), as llama.cpp's
 * graph computes it (src/models/bitnet.cpp):
 *
 *   h = attn_norm(x); x += wo(attn_sub_norm(attention(h)))
 *   h = ffn_norm(x);  x += down(ffn_sub_norm(silu(gate h) * up h))
 *
 * RMS norms everywhere; the attention sub-norm is applied inside
 * kiln_attention_block (attention.c: attn_sub_norm, over the heads'
 * output before wo), the FFN sub-norm here, over the n_ff gated
 * activations. The weights are the converter's ternary values in any
 * type (F32, TQ1_0, TQ2_0, or a llama-quantize preset); nothing here
 * depends on the type. The RoPE is NEOX (model.c) and the logits use
 * token_embd (there is no output tensor).
 *
 * llama.cpp's loader also takes optional one-value "*.scale" tensors per
 * matrix (multiplying its output); its converter never writes them, and
 * kiln refuses a file that has them (kiln_bitnet_check) rather than run
 * it without. */
#include "forward_impl.h"

#include <stdio.h>

static void rms_rows(const kiln_ctx *c, const kiln_tensor *w, const float *x, float *y, int64_t n, int64_t width) {
    for (int64_t t = 0; t < n; t++)
        kiln_rms_norm(x + t * width, (const float *)w->data, y + t * width, width, c->m->hp.norm_eps);
}

int kiln_bitnet_block(kiln_ctx *c, int64_t il, int64_t n, kiln_err *err) {
    const kiln_layer *L = &c->m->layers[il];
    const int64_t d = c->m->hp.n_embd, n_ff = c->m->hp.n_ff;
    rms_rows(c, L->attn_norm, c->x, c->xn, n, d);
    if (kiln_attention_block(c, il, n, err) < 0) return -1; /* with attn_sub_norm */
    kiln_vec_add(c->x, c->tmp, n * d);                       /* ffn_inp */
    rms_rows(c, L->ffn_norm, c->x, c->xn, n, d);
    if (kiln_fwd_matmul(c, L->ffn_up, -1, c->xn, n, c->ff_b, err) < 0 ||
        kiln_fwd_matmul(c, L->ffn_gate, -1, c->xn, n, c->ff_a, err) < 0)
        return -1;
    kiln_swiglu(c->ff_a, c->ff_b, c->ff_a, n, n_ff, c->p.mode);
    rms_rows(c, L->ffn_sub_norm, c->ff_a, c->ff_a, n, n_ff);
    if (kiln_fwd_matmul(c, L->ffn_down, -1, c->ff_a, n, c->tmp, err) < 0) return -1;
    kiln_vec_add(c->x, c->tmp, n * d);
    return 0;
}

int kiln_bitnet_check(const kiln_gguf *g, const char *path, int64_t n_layer, kiln_err *err) {
    static const char *const MATRICES[] = {"attn_q", "attn_k", "attn_v", "attn_output",
                                           "ffn_gate", "ffn_up", "ffn_down"};
    for (int64_t il = 0; il < n_layer; il++)
        for (size_t i = 0; i < sizeof MATRICES / sizeof MATRICES[0]; i++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%lld.%s.scale", (long long)il, MATRICES[i]);
            if (kiln_gguf_find_tensor(g, name))
                return kiln_fail(err, path, name, -1,
                                 "BitNet weight scale tensors are not supported (llama.cpp's converter writes none)");
        }
    return 0;
}
