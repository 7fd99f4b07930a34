/* runtime/gptoss.c - what gpt-oss (OpenAI's MoE; llama.cpp's openai-moe
 * graph) adds to the forward pass, as ggml's CPU backend computes it:
 *
 *   attention: each head has a learned sink logit that takes part in the
 *     softmax's maximum and sum but attends to nothing (soft_max_ext with
 *     sinks; the flash kernels' sink step lives in attention_flash.c);
 *   router: logits + bias, the top k by logit, their weights the softmax
 *     of those k logits (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT);
 *   experts: each product plus the expert's bias (ggml_add_id), and
 *     swiglu_oai between them: min(g, 7) * sigmoid(1.702 min(g, 7)) *
 *     (clamp(u, -7, 7) + 1).
 *
 * The rest of the block is the common one (forward.c): attn_norm,
 * attention with q/k/v/o biases, NeoX YaRN RoPE (yarn.c), sliding window
 * on even layers, then post_attention_norm (loaded as the FFN norm) and
 * the MoE (moe.c). */
#include <math.h>
#include <string.h>

#include "forward_impl.h"

void kiln_softmax_sink(float *x, int64_t n, float scale, float sink, kiln_numeric_mode mode) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        x[i] *= scale;
        if (x[i] > max) max = x[i];
    }
    max = fmaxf(max, sink); /* as if the sink were one more entry */
    if (mode == KILN_NUM_EXACT) {
        double sum = exp((double)sink - max);
        for (int64_t i = 0; i < n; i++) sum += exp((double)x[i] - max);
        for (int64_t i = 0; i < n; i++) x[i] = (float)(exp((double)x[i] - max) / sum);
        return;
    }
    double sum = kiln_exp_sum(x, n, max);
    sum += (double)expf(sink - max);
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void kiln_swiglu_oai(const float *g, const float *u, float *y, int64_t n, kiln_numeric_mode mode) {
    const float alpha = 1.702f, limit = 7.0f;
    for (int64_t i = 0; i < n; i++) {
        const float x = fminf(g[i], limit), v = fminf(fmaxf(u[i], -limit), limit);
        if (mode == KILN_NUM_EXACT) {
            y[i] = (float)((double)x / (1.0 + exp(-(double)alpha * x)) * ((double)v + 1.0));
            continue;
        }
        const float glu = x / (1.0f + expf(alpha * (-x)));
        y[i] = glu * (v + 1.0f);
    }
}

void kiln_expert_bias(float *y, const kiln_tensor *b, int e, int64_t m, int64_t w) {
    if (!b) return;
    const float *be = (const float *)b->data + (int64_t)e * w;
    for (int64_t t = 0; t < m; t++)
        for (int64_t j = 0; j < w; j++) y[t * w + j] += be[j];
}
