/* runtime/deepseek4_compress.c - what DeepSeek-V4's attention
 * (deepseek4_attn.c) and its lightning indexer (deepseek4_indexer.c) both
 * apply to keys: RoPE forward and back, the Hadamard rotation, and the
 * KV compressor that turns each block of `ratio` positions into one
 * compressed row. Kept apart so that neither of those two files calls
 * the other for them. */
#include "deepseek4.h"

#include "forward_impl.h"

#include "../codec/codec.h"
#include "../core/types.h"

#include <math.h>
#include <stdlib.h>

/* ggml_rope_ext_back negates the sines. */
void kiln_ds4_rope(const kiln_rope *r, int64_t pos, float *x, bool back) {
    float cs[r->n_rot];
    kiln_rope_angles(r, pos, cs);
    if (back)
        for (int64_t i = 1; i < r->n_rot; i += 2) cs[i] = -cs[i];
    kiln_rope_head(r, cs, x);
}

/* llama_mul_mat_hadamard of one head as ggml-cpu computes it (its FWHT
 * for the Hadamard hint): the values times 1/sqrt(n), then log2(n)
 * butterfly passes (u + v, u - v). llama.cpp rotates DeepSeek-V4's
 * queries, keys, compressed keys and attention output with it (the KV
 * caches' attn_rot_k, always on when the head size equals the indexer's);
 * an orthonormal rotation, so only the roundings change. n: power of 2. */
void kiln_ds4_hadamard(float *x, int64_t n) {
    const float scale = 1.0f / sqrtf((float)n);
    for (int64_t j = 0; j < n; j++) x[j] = x[j] * scale;
    for (int64_t len = 1; len < n; len <<= 1)
        for (int64_t i = 0; i < n; i += 2 * len)
            for (int64_t j = 0; j < len; j++) {
                const float u = x[i + j], v = x[i + len + j];
                x[i + j] = u + v;
                x[i + len + j] = u - v;
            }
}

int kiln_ds4_compress(kiln_ctx *c, const kiln_ds4_comp *cp, int64_t ratio, int64_t hd, const kiln_rope *r,
                      const float *xn, int64_t n, int64_t n_blocks, float *comp, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t overlap = ratio == 4, w = (overlap ? 2 : 1) * hd;
    float *skv = malloc((size_t)(2 * n * w) * sizeof(float)), *ssc = skv + n * w;
    if (!skv) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    if (kiln_ds4_matmul(c, cp->wkv, xn, n, skv, err) < 0 || kiln_ds4_matmul(c, cp->wgate, xn, n, ssc, err) < 0) {
        free(skv);
        return -1;
    }
    /* ape's rows by ggml_get_rows (dequantized when the file quantized it) */
    const kiln_tensor *A = cp->ape;
    const uint64_t arb = kiln_type_row_bytes(A->type, (uint64_t)w);
    float ape[w];
    for (int64_t t = 0; t < n; t++) {
        kiln_codec_get(A->type)->dequantize_row(A->data + (uint64_t)(t % ratio) * arb, ape, w);
        for (int64_t i = 0; i < w; i++) ssc[t * w + i] = ssc[t * w + i] + ape[i];
    }
    const int64_t n_ent = overlap ? 2 * ratio : ratio;
    float v[n_ent], s[n_ent];
    for (int64_t b = 0; b < n_blocks; b++) {
        float *o = comp + b * hd;
        for (int64_t d = 0; d < hd; d++) {
            for (int64_t j = 0; j < n_ent; j++) {
                if (!overlap) {
                    v[j] = skv[(b * ratio + j) * w + d];
                    s[j] = ssc[(b * ratio + j) * w + d];
                } else if (j < ratio) { /* the block before, first half; none before block 0 */
                    const int64_t t = (b - 1) * ratio + j;
                    v[j] = t >= 0 ? skv[t * w + d] : 0.0f;
                    s[j] = t >= 0 ? ssc[t * w + d] : -INFINITY;
                } else { /* this block, second half */
                    const int64_t t = b * ratio + j - ratio;
                    v[j] = skv[t * w + hd + d];
                    s[j] = ssc[t * w + hd + d];
                }
            }
            kiln_softmax(s, n_ent, 1.0f, c->p.mode);
            double sum = 0.0; /* ggml_mul, then ggml_sum_rows in double */
            for (int64_t j = 0; j < n_ent; j++) sum += (double)(v[j] * s[j]);
            o[d] = (float)sum;
        }
        kiln_rms_norm(o, (const float *)cp->norm->data, o, hd, hp->norm_eps);
        kiln_ds4_rope(r, b * ratio, o + hd - hp->n_rot, false);
        kiln_ds4_hadamard(o, hd);
    }
    free(skv);
    return 0;
}
