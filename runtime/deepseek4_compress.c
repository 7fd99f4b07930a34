/* runtime/deepseek4_compress.c - what DeepSeek-V4's attention
 * (deepseek4_attn.c) and its lightning indexer (deepseek4_indexer.c) both
 * apply to keys: RoPE forward and back, the Hadamard rotation, and the
 * KV compressor that turns each block of `ratio` positions into one
 * compressed row, the rows of a block a batch leaves incomplete carried
 * to the next batch (kiln_ds4_ring, deepseek4_state.c). Kept apart so that neither of those two files calls
 * the other for them. */
#include "deepseek4.h"

#include "forward_impl.h"

#include "../codec/codec.h"
#include "../core/types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* The kv and score rows of position p: the batch's (positions n_past..)
 * or, before the batch, the ring's; before position 0 none (a zero
 * value, a -inf score: the first block has no block before it). */
static void source_rows(const kiln_ds4_ring *ring, const float *skv, const float *ssc, int64_t n_past, int64_t p,
                        const float **kv, const float **score) {
    if (p >= n_past) {
        *kv = skv + (p - n_past) * ring->w;
        *score = ssc + (p - n_past) * ring->w;
    } else if (p >= 0) {
        *kv = ring->kv + p % ring->size * ring->w;
        *score = ring->score + p % ring->size * ring->w;
    } else {
        *kv = *score = NULL;
    }
}

/* Block b (positions b * ratio ..) from its rows: per dimension the
 * softmax of the scores, the weighted values summed (ggml_mul, then
 * ggml_sum_rows in double); the norm, RoPE and rotation. */
static void compress_block(kiln_ctx *c, const kiln_ds4_comp *cp, int64_t ratio, int64_t hd, const kiln_rope *r,
                           const kiln_ds4_ring *ring, const float *skv, const float *ssc, int64_t b, float *o) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t overlap = ratio == 4, n_ent = overlap ? 2 * ratio : ratio;
    const float *kv[n_ent], *sc[n_ent];
    int64_t col[n_ent];
    for (int64_t j = 0; j < n_ent; j++) {
        /* ratio 4: the block before, first half, then this block, second half */
        const int64_t p = overlap && j < ratio ? (b - 1) * ratio + j : b * ratio + j - (overlap ? ratio : 0);
        source_rows(ring, skv, ssc, c->n_past, p, &kv[j], &sc[j]);
        col[j] = overlap && j >= ratio ? hd : 0;
    }
    float v[n_ent], s[n_ent];
    for (int64_t d = 0; d < hd; d++) {
        for (int64_t j = 0; j < n_ent; j++) {
            v[j] = kv[j] ? kv[j][col[j] + d] : 0.0f;
            s[j] = sc[j] ? sc[j][col[j] + d] : -INFINITY;
        }
        kiln_softmax(s, n_ent, 1.0f, c->p.mode);
        double sum = 0.0;
        for (int64_t j = 0; j < n_ent; j++) sum += (double)(v[j] * s[j]);
        o[d] = (float)sum;
    }
    kiln_rms_norm(o, (const float *)cp->norm->data, o, hd, hp->norm_eps);
    kiln_ds4_rope(r, b * ratio, o + hd - hp->n_rot, false);
    kiln_ds4_hadamard(o, hd);
    if (c->p.attention != KILN_ATTN_F32) kiln_f16_round(o, o, hd); /* the F16 compressed cache */
}

int kiln_ds4_compress(kiln_ctx *c, const kiln_ds4_comp *cp, int64_t ratio, int64_t hd, const kiln_rope *r,
                      const float *xn, int64_t n, kiln_ds4_ring *ring, float *comp, kiln_err *err) {
    const int64_t w = ring->w, n_past = c->n_past;
    float *skv = malloc((size_t)(2 * n * w) * sizeof(float)), *ssc = skv + n * w;
    if (!skv) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    if (kiln_ds4_matmul(c, cp->wkv, xn, n, skv, err) < 0 || kiln_ds4_matmul(c, cp->wgate, xn, n, ssc, err) < 0) {
        free(skv);
        return -1;
    }
    /* ape's rows by ggml_get_rows at pos % ratio (dequantized when the
     * file quantized it) */
    const kiln_tensor *A = cp->ape;
    const uint64_t arb = kiln_type_row_bytes(A->type, (uint64_t)w);
    float ape[w];
    for (int64_t t = 0; t < n; t++) {
        kiln_codec_get(A->type)->dequantize_row(A->data + (uint64_t)((n_past + t) % ratio) * arb, ape, w);
        for (int64_t i = 0; i < w; i++) ssc[t * w + i] = ssc[t * w + i] + ape[i];
    }
    for (int64_t p = n_past; p < n_past + n; p++) /* the blocks this batch completes */
        if ((p + 1) % ratio == 0) compress_block(c, cp, ratio, hd, r, ring, skv, ssc, p / ratio, comp + p / ratio * hd);
    for (int64_t t = 0; t < n; t++) { /* carried to the next batch */
        const int64_t row = (n_past + t) % ring->size * w;
        memcpy(ring->kv + row, skv + t * w, (size_t)w * sizeof(float));
        memcpy(ring->score + row, ssc + t * w, (size_t)w * sizeof(float));
    }
    free(skv);
    return 0;
}
