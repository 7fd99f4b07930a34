/* runtime/deepseek4_hc.c - DeepSeek-V4's hyper-connections as llama.cpp's
 * graph computes them without its fused ops (build_hc_pre, build_hc_post,
 * build_hc_sinkhorn, build_hc_head in src/models/deepseek4.cpp):
 *
 *   mixes = fn . rms(x[0] | .. | x[hc-1])            (no norm weight)
 *   pre   = sigmoid(mixes[0..hc) * s0 + base) + eps
 *   post  = 2 * sigmoid(mixes[hc..2hc) * s1 + base)
 *   comb  = sinkhorn(mixes[2hc..) * s2 + base)       hc x hc, dst fastest
 *   block input  = sum_h x[h] * pre[h]
 *   new x[dst]   = f * post[dst] + sum_src x[src] * comb[dst, src]
 *
 * llama.cpp runs the collapse, the sinkhorn and the expansion as ggml-cpu's
 * fused dsv4_hc_pre / dsv4_hc_comb / dsv4_hc_post ops (fused_dsv4_hc_*
 * resolve to true on CPU; the output head's collapse is the unfused
 * ggml_mul + ggml_add graph, which rounds the same way). In the reference
 * build (gcc -O3 -march=native) the collapse's and the expansion's
 * `sum += a * b` stay a rounded product and a rounded sum, while the
 * comb's `x * scale + base` and `v * inv + eps` are contracted into fmaf:
 * each of the three, changed, moves the fixture's logits (checked against
 * tests/fixtures/deepseek4). The other steps are single ggml ops. */
#include "deepseek4.h"

#include "forward_impl.h"

#include <math.h>

/* ggml_sigmoid: 1 / (1 + expf(-x)) */
static float sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* The row norm of each token's hc * d values, without weight. */
static void flat_norm(const kiln_ctx *c, const float *x, int64_t n, int64_t w, float *flat) {
    for (int64_t t = 0; t < n; t++) kiln_rms_norm(x + t * w, NULL, flat + t * w, w, c->m->hp.norm_eps);
}

/* col (axis 1): for each dst the sum over src; else for each src the sum
 * over dst; in float from eps, then the entries times its inverse. */
static void normalize(float *comb, int64_t hc, float eps, bool cols) {
    for (int64_t a = 0; a < hc; a++) {
        float sum = eps;
        for (int64_t b = 0; b < hc; b++) sum += comb[cols ? a + hc * b : b + hc * a];
        const float inv = 1.0f / sum;
        for (int64_t b = 0; b < hc; b++) comb[cols ? a + hc * b : b + hc * a] *= inv;
    }
}

/* ggml's fused dsv4_hc_comb (ggml-cpu ops.cpp, what llama.cpp runs on
 * CPU): per src the affine map, a softmax over dst (glibc expf, float
 * sum), + eps; one column normalisation, then iters - 1 rounds of rows
 * then columns. */
static void comb_weights(const float *mx, float s, const float *b, float eps, int64_t iters, int64_t hc,
                         float *comb) {
    for (int64_t src = 0; src < hc; src++) {
        float max = -INFINITY;
        for (int64_t dst = 0; dst < hc; dst++) {
            const int64_t i = dst + hc * src;
            comb[i] = fmaf(mx[i], s, b[i]);
            max = fmaxf(max, comb[i]);
        }
        float sum = 0.0f;
        for (int64_t dst = 0; dst < hc; dst++) {
            const int64_t i = dst + hc * src;
            comb[i] = expf(comb[i] - max);
            sum += comb[i];
        }
        const float inv = 1.0f / sum;
        for (int64_t dst = 0; dst < hc; dst++) comb[dst + hc * src] = fmaf(comb[dst + hc * src], inv, eps);
    }
    normalize(comb, hc, eps, true);
    for (int64_t it = 1; it < iters; it++) {
        normalize(comb, hc, eps, false);
        normalize(comb, hc, eps, true);
    }
}

int kiln_ds4_hc_weights(kiln_ctx *c, const kiln_tensor *fn, const kiln_tensor *scale, const kiln_tensor *base,
                        const float *x, int64_t n, float *flat, float *mixes, float *pre, float *post, float *comb,
                        kiln_err *err) {
    const kiln_ds4 *D = c->m->ds4;
    const int64_t hc = D->hc, w = hc * c->m->hp.n_embd, nm = (2 + hc) * hc;
    flat_norm(c, x, n, w, flat);
    if (kiln_ds4_matmul(c, fn, flat, n, mixes, err) < 0) return -1;
    const float *s = (const float *)scale->data, *b = (const float *)base->data;
    for (int64_t t = 0; t < n; t++) {
        const float *mx = mixes + t * nm;
        for (int64_t h = 0; h < hc; h++) {
            float v = mx[h] * s[0];
            pre[t * hc + h] = sigmoid(v + b[h]) * 1.0f + D->hc_eps;
            v = mx[hc + h] * s[1];
            post[t * hc + h] = sigmoid(v + b[hc + h]) * 2.0f;
        }
        comb_weights(mx + 2 * hc, s[2], b + 2 * hc, D->hc_eps, D->sinkhorn_iters, hc, comb + t * hc * hc);
    }
    return 0;
}

void kiln_ds4_hc_collapse(const kiln_ds4 *D, const float *x, const float *pre, int64_t n, int64_t d, float *y) {
    const int64_t hc = D->hc;
    for (int64_t t = 0; t < n; t++) {
        const float *xt = x + t * hc * d, *p = pre + t * hc;
        float *yt = y + t * d;
        for (int64_t i = 0; i < d; i++) yt[i] = xt[i] * p[0];
        for (int64_t h = 1; h < hc; h++)
            for (int64_t i = 0; i < d; i++) {
                const float v = xt[h * d + i] * p[h];
                yt[i] = yt[i] + v;
            }
    }
}

void kiln_ds4_hc_expand(const kiln_ds4 *D, const float *f, const float *res, const float *post, const float *comb,
                        int64_t n, int64_t d, float *out) {
    const int64_t hc = D->hc;
    for (int64_t t = 0; t < n; t++) {
        const float *ft = f + t * d, *rt = res + t * hc * d, *cb = comb + t * hc * hc;
        for (int64_t dst = 0; dst < hc; dst++) {
            float *o = out + (t * hc + dst) * d;
            const float p = post[t * hc + dst];
            for (int64_t i = 0; i < d; i++) o[i] = ft[i] * p;
            for (int64_t src = 0; src < hc; src++) {
                const float w = cb[dst + hc * src];
                for (int64_t i = 0; i < d; i++) {
                    const float v = rt[src * d + i] * w;
                    o[i] = o[i] + v;
                }
            }
        }
    }
}

int kiln_ds4_hc_head(kiln_ctx *c, const float *x, int64_t n, float *flat, float *mixes, float *pre, kiln_err *err) {
    const kiln_ds4 *D = c->m->ds4;
    const int64_t hc = D->hc, w = hc * c->m->hp.n_embd;
    flat_norm(c, x, n, w, flat);
    if (kiln_ds4_matmul(c, D->hc_head_fn, flat, n, mixes, err) < 0) return -1;
    const float s = ((const float *)D->hc_head_scale->data)[0], *b = (const float *)D->hc_head_base->data;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < hc; h++) {
            const float v = mixes[t * hc + h] * s;
            pre[t * hc + h] = sigmoid(v + b[h]) * 1.0f + D->hc_eps;
        }
    return 0;
}
