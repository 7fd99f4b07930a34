/* runtime/ffn.c - the dense feed-forward network: SwiGLU
 * (down(silu(gate x + bg) * (up x + bu)) + bd) for llama and the qwens,
 * and GELU (down(gelu(up x + bu)) + bd) for gpt2; Gemma's gated GELU
 * (down(gelu(gate x) * up x), ggml's geglu); Phi-3's SwiGLU of one
 * fused up (no gate tensor, up twice as wide as down's input: rows
 * [gate | up]). Also qwen2moe's shared expert, which is this same SwiGLU. */
#include "forward_impl.h"

int kiln_ffn(kiln_ctx *c, const kiln_tensor *gate, const kiln_tensor *gate_b, const kiln_tensor *up,
             const kiln_tensor *up_b, const kiln_tensor *down, const kiln_tensor *down_b,
             const float *x, int64_t n, float *out, kiln_err *err) {
    const int64_t n_ff = up->ne[1];
    const kiln_tensor *w[] = {up, gate}; /* one region for both (fwd_matmul.c) */
    float *const y[] = {c->ff_b, c->ff_a};
    if (kiln_fwd_matmul_group(c, w, y, gate ? 2 : 1, x, n, err) < 0) return -1;
    kiln_fwd_bias(c->ff_b, up_b, n, n_ff);
    if (gate) {
        kiln_fwd_bias(c->ff_a, gate_b, n, n_ff);
        const kiln_arch arch = c->m->hp.arch;
        if (arch == KILN_ARCH_GEMMA2 || arch == KILN_ARCH_GEMMA3) kiln_geglu(c->ff_a, c->ff_b, c->ff_a, n * n_ff, c->p.mode);
        else kiln_swiglu(c->ff_a, c->ff_b, c->ff_a, n, n_ff, c->p.mode);
    } else if (n_ff == 2 * down->ne[0]) {
        /* phi3: up holds [gate | up] (ggml_swiglu of the fused rows) */
        const int64_t h = down->ne[0];
        for (int64_t t = 0; t < n; t++)
            kiln_swiglu(c->ff_b + t * n_ff, c->ff_b + t * n_ff + h, c->ff_a + t * h, 1, h, c->p.mode);
    } else {
        kiln_gelu(c->ff_b, c->ff_a, n * n_ff, c->p.mode);
    }
    if (kiln_fwd_matmul(c, down, -1, c->ff_a, n, out, err) < 0) return -1;
    kiln_fwd_bias(out, down_b, n, down->ne[1]);
    return 0;
}
