/* runtime/yarn.c - YaRN RoPE scaling (rope.scaling.type yarn: gpt-oss), as
 * llama.cpp sets it up (llama_context: ext_factor 1, the attention factor
 * get_mscale(factor) / (1 + 0.1 ln factor), beta_fast 32 and beta_slow 1
 * unless the architecture reads its own) and ggml's CPU rope applies it
 * (rope_yarn: angles ramped between the interpolated freq_scale * theta and
 * the extrapolated theta over the correction dimensions, and cos / sin
 * times mscale * (1 + 0.1 ln(1 / freq_scale))).
 *
 * The float steps follow ggml's binary: gcc -O3 -march=native fuses
 * rope_yarn's a * b + c * d into one fmaf (unfused, gpt-oss's logits move
 * by an ulp: tests/e2e/gptoss.sh) and 1 + 0.1 * ln into another (for
 * factor 32 both roundings agree); libllama's setup is built without FMA,
 * so its sums are separate. */
#include <math.h>

#include "forward_impl.h"

/* ggml_rope_yarn_corr_dim: the dimension whose wavelength fits n_rot
 * (beta) turns in the original context. */
static float corr_dim(int64_t n_dims, int64_t n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

/* llama.cpp's get_mscale(scale, mscale). */
static float get_mscale(float scale, float mscale) {
    return scale <= 1.0f ? 1.0f : 0.1f * mscale * logf(scale) + 1.0f;
}

float kiln_yarn_attn_factor(const kiln_hparams *hp, float freq_scale) {
    const float factor = 1.0f / freq_scale;
    /* get_mscale(factor, 1); with a yarn_log_multiplier (deepseek2)
     * get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim),
     * mscale 1 unless deepseek2's mscale_all_dim is not 1; then the
     * cancelling 1 / (1 + 0.1 ln factor) */
    float attn = get_mscale(factor, 1.0f);
    if (hp->rope_yarn_log_mul != 0.0f) {
        const float all = hp->rope_yarn_log_mul;
        const float ms = hp->arch == KILN_ARCH_DEEPSEEK2 && all != 1.0f ? all : 1.0f;
        attn = get_mscale(factor, ms) / get_mscale(factor, all);
    }
    attn *= 1.0f / (1.0f + 0.1f * logf(factor));
    return attn * hp->rope_attn_factor;
}

void kiln_yarn_setup(const kiln_hparams *hp, kiln_rope *r) {
    if (!hp->rope_yarn) return;
    r->attn_factor = kiln_yarn_attn_factor(hp, r->freq_scale);
    r->ext_factor = 1.0f;
    const float lo = floorf(corr_dim(r->n_rot, hp->n_ctx_orig, hp->yarn_beta_fast, r->freq_base));
    const float hi = ceilf(corr_dim(r->n_rot, hp->n_ctx_orig, hp->yarn_beta_slow, r->freq_base));
    r->corr_dims[0] = lo > 0.0f ? lo : 0.0f;
    r->corr_dims[1] = hi < (float)(r->n_rot - 1) ? hi : (float)(r->n_rot - 1);
}

/* rope_yarn_ramp: 1 below the first correction dimension, 0 past the last. */
static float ramp(const kiln_rope *r, int64_t i) {
    const float y = ((float)(i / 2) - r->corr_dims[0]) / fmaxf(0.001f, r->corr_dims[1] - r->corr_dims[0]);
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

float kiln_yarn_angle(const kiln_rope *r, float e, float t, int64_t i, float *ms) {
    const float mix = ramp(r, i) * r->ext_factor;
    *ms *= fmaf(0.1f, logf(1.0f / r->freq_scale), 1.0f);
    return fmaf(t, 1.0f - mix, e * mix);
}

double kiln_yarn_angle_exact(const kiln_rope *r, double e, int64_t i, double *ms) {
    const double mix = (double)ramp(r, i) * r->ext_factor;
    *ms *= 1.0 + 0.1 * log(1.0 / r->freq_scale);
    return r->freq_scale * e * (1.0 - mix) + e * mix;
}
