/* runtime/deepseek4_attn.c - DeepSeek-V4's attention of one block, as
 * llama.cpp's build_attention_impl computes it (src/models/deepseek4.cpp),
 * here with an F32 cache and without flash attention (the golden logits'
 * context; the flash kernels are deepseek4_flash.c and, for one query
 * over 512+ cells, deepseek4_split.c):
 *
 *   q  = rms(q_b(rms(q_a x) * w)) per head, last n_rot dims roped
 *   kv = rms(wkv x) * w, last n_rot dims roped       K = V = kv, one head
 *   compressed rows (ratio 4 or 128): per block of `ratio` positions a
 *     softmax-weighted sum, per dimension, of compressor_kv rows under
 *     compressor_gate + ape scores (ratio 4: over the block and the one
 *     before, each half of a twice-wide row), rms-normed, roped at the
 *     block's first position (kiln_ds4_compress, deepseek4_compress.c)
 *   q, K rotated by a Hadamard matrix (llama.cpp's attn_rot_k)
 *   o  = softmax(q.K / sqrt(hd), sink) V over [raw window | compressed]
 *   o rotated back, its last n_rot dims roped back, per group wo_a, wo_b
 *
 * The layers with a compressor rope with compress_rope_freq_base and
 * YaRN; the others with rope.freq_base unscaled. The softmax rows are as
 * long as llama.cpp's views: the raw cache's cells rounded up to 256,
 * then the compressed cache's blocks rounded up to 256 (concatenated);
 * masked entries weigh exactly 0, so only the positions of the visible
 * ones in the rows matter for the sums (tinyBLAS's 16 chains for 2+
 * tokens, ggml_vec_dot_f32's 64 for one). KILN_ATTN_LLAMACPP (F16
 * caches, flash attention: llama-perplexity's context) rounds the rows
 * to f16 and hands them to deepseek4_flash.c.
 *
 * At ratio 4 each token keeps only the indexer.top_k compressed blocks
 * the lightning indexer scores best (deepseek4_indexer.c), which matters
 * once a token sees more blocks than that (batches past 4 x top_k).
 * A batch after the first reads the raw keys and compressed rows of the
 * earlier ones (cell = position) and completes the blocks they left
 * open from the compressors' carried rows (deepseek4_state.c). */
#include "deepseek4.h"

#include "forward_impl.h"

#include "../codec/codec.h"
#include "../core/types.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* llama.cpp's dsv4_rope_attn_factor: cancels YaRN's magnitude correction. */
static float ds4_attn_factor(float freq_scale, float ext_factor) {
    if (ext_factor == 0.0f) return 1.0f;
    const float l = 0.1f * logf(1.0f / freq_scale);
    return 1.0f / (1.0f + l);
}

/* The RoPE of block il: compress layers use the compress base with YaRN. */
static kiln_rope layer_rope(const kiln_ctx *c, const kiln_ds4_layer *L) {
    const kiln_hparams *hp = &c->m->hp;
    kiln_rope r = {.n_rot = hp->n_rot, .neox = false, .freq_base = hp->rope_freq_base, .freq_scale = 1.0f,
                   .attn_factor = 1.0f, .mode = c->p.mode};
    if (L->ratio != 0) {
        r.freq_base = c->m->ds4->compress_rope_base;
        r.freq_scale = hp->rope_freq_scale;
        kiln_yarn_setup(hp, &r);
        r.attn_factor = ds4_attn_factor(r.freq_scale, r.ext_factor);
    }
    return r;
}

/* o = sum over the n_row entries of p[j] * rows[j] (NULL rows weigh 0):
 * tinyBLAS's order (chain j % 16, then _mm512_reduce_add_ps) for a batch,
 * ggml_vec_dot_f32's (64 chains, combined, the rest in double) for one
 * token. acc: 64 rows of hd. */
static void weighted_sum(const float *const *rows, const float *p, int64_t n_row, int64_t hd, bool batch,
                         kiln_numeric_mode mode, float *acc, float *o) {
    if (mode == KILN_NUM_EXACT) {
        for (int64_t d = 0; d < hd; d++) {
            double s = 0.0;
            for (int64_t j = 0; j < n_row; j++)
                if (rows[j]) s += (double)p[j] * rows[j][d];
            o[d] = (float)s;
        }
        return;
    }
    if (batch) {
        memset(acc, 0, (size_t)(16 * hd) * sizeof *acc);
        for (int64_t j = 0; j < n_row; j++)
            if (rows[j]) kiln_vec_axpy(acc + (j % 16) * hd, rows[j], p[j], hd);
        kiln_reduce16_rows(acc, hd, o, hd);
        return;
    }
    const int64_t np = n_row & ~(int64_t)63;
    memset(o, 0, (size_t)hd * sizeof *o);
    if (np > 0) {
        memset(acc, 0, (size_t)(64 * hd) * sizeof *acc);
        for (int64_t j = 0; j < np; j++)
            if (rows[j]) kiln_vec_axpy(acc + (j % 64) * hd, rows[j], p[j], hd);
        for (int64_t l = 0; l < 16; l++) {
            kiln_vec_add(acc + l * hd, acc + (32 + l) * hd, hd);
            kiln_vec_add(acc + (16 + l) * hd, acc + (48 + l) * hd, hd);
            kiln_vec_add(acc + l * hd, acc + (16 + l) * hd, hd);
        }
        kiln_reduce16_rows(acc, hd, o, hd);
    }
    for (int64_t d = 0; d < hd && n_row > np; d++) {
        double s = o[d];
        for (int64_t j = np; j < n_row; j++)
            if (rows[j]) s += (double)(rows[j][d] * p[j]);
        o[d] = (float)s;
    }
}

static float dot(const float *a, const float *b, int64_t n, kiln_numeric_mode mode) {
    if (mode != KILN_NUM_EXACT) return kiln_vec_dot_f32(a, b, n);
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return (float)s;
}

/* Attention of the n queries (q: n x nh x hd) over the view's rows into
 * att, as ggml's soft_max_ext + mul_mat compute it (F32 cache). */
static void attend(const kiln_ctx *c, const kiln_ds4_layer *L, const kiln_ds4_view *v, const float *q, int64_t n,
                   float *att, const float **seen, float *scratch) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t hd = hp->head_dim, nh = hp->n_head, n_row = v->n_row;
    const float scale = 1.0f / sqrtf((float)hd), *sinks = (const float *)L->attn_sinks->data;
    float *s = scratch, *acc = s + n_row;
    for (int64_t t = 0; t < n; t++) {
        for (int64_t j = 0; j < n_row; j++) {
            seen[j] = kiln_ds4_sees(v, t, j) ? v->rows[j] : NULL;
        }
        for (int64_t h = 0; h < nh; h++) {
            const float *qh = q + (t * nh + h) * hd;
            for (int64_t j = 0; j < n_row; j++) s[j] = seen[j] ? dot(qh, seen[j], hd, c->p.mode) : -INFINITY;
            kiln_softmax_sink(s, n_row, scale, sinks[h], c->p.mode);
            weighted_sum(seen, s, n_row, hd, n >= 2, c->p.mode, acc, att + (t * nh + h) * hd);
        }
    }
}

/* wo_a per group (a 3-D product ggml never repacks), then wo_b. The
 * output observers see wo_b, not the groups' products (no rows of the
 * whole tensor's width to show them as). The imatrix hook sees wo_a as
 * llama-imatrix collects ggml's mul_mat of the 3-D [gdim, rank, groups]
 * weight: one matrix of groups x gdim columns, one count per token - a
 * token's row is its attention output att as it stands (group g's input
 * at g * gdim), so the file holds groups x gdim values for a tensor gdim
 * wide, column c of group g being the statistic of rows g * rank ..
 * (g + 1) * rank - 1 (what kiln quantize uses them for). */
static int project_out(kiln_ctx *c, const kiln_ds4_layer *L, const float *att, int64_t n, float *gin, float *gout,
                       float *oa, float *out, kiln_err *err) {
    const kiln_ds4 *D = c->m->ds4;
    const kiln_hparams *hp = &c->m->hp;
    const int64_t gdim = hp->n_head / D->o_groups * hp->head_dim, rank = D->o_rank, w = D->o_groups * rank;
    const kiln_tensor *wa = L->wo_a;
    /* ggml's order for a float 3-D product is not kiln's; --exact has no order to follow */
    if ((wa->type == KILN_F32 || wa->type == KILN_F16 || wa->type == KILN_BF16) && c->p.mode != KILN_NUM_EXACT)
        return kiln_fail(err, NULL, NULL, -1,
                         "%.*s: float attn_output_a (%s) is supported for deepseek4 in --exact mode only",
                         (int)wa->name.len, wa->name.ptr, kiln_type_name(wa->type));
    const uint64_t slab = kiln_type_row_bytes(wa->type, (uint64_t)gdim) * (uint64_t)rank;
    if (c->p.hook) {
        char name[160];
        snprintf(name, sizeof name, "%.*s", (int)wa->name.len, wa->name.ptr);
        c->p.hook(c->p.hook_user, name, -1, att, n, D->o_groups * gdim);
    }
    for (int64_t g = 0; g < D->o_groups; g++) {
        for (int64_t t = 0; t < n; t++)
            memcpy(gin + t * gdim, att + t * hp->n_head * hp->head_dim + g * gdim, (size_t)gdim * sizeof(float));
        if (kiln_matmul_head(wa->type, wa->data + (uint64_t)g * slab, gdim, rank, gin, n, gout, c->p.mode) < 0)
            return kiln_fail(err, NULL, NULL, -1, "%.*s: matrix product failed (type %s)", (int)wa->name.len,
                             wa->name.ptr, kiln_type_name(wa->type));
        for (int64_t t = 0; t < n; t++) memcpy(oa + t * w + g * rank, gout + t * rank, (size_t)rank * sizeof(float));
    }
    return kiln_ds4_matmul(c, L->wo_b, oa, n, out, err);
}

int kiln_ds4_attention(kiln_ctx *c, int64_t il, const float *xn, int64_t n, float *out, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const kiln_ds4 *D = c->m->ds4;
    const kiln_ds4_layer *L = &D->layers[il];
    kiln_ds4_lstate *S = &c->ds4->layers[il];
    const int64_t hd = hp->head_dim, nh = hp->n_head, ql = hp->n_lora_q, nope = hd - hp->n_rot;
    const int64_t n_past = c->n_past, n_tot = n_past + n;
    const int64_t n_blocks = L->ratio ? n_tot / L->ratio : 0; /* complete blocks after this batch */
    const int64_t raw_view = kiln_kv_view(n_tot), n_row = raw_view + kiln_kv_view(n_blocks);
    const int64_t gdim = nh / D->o_groups * hd, ow = D->o_groups * D->o_rank;
    const int64_t sizes[] = {n * ql,       n * nh * hd,    n * hd,        (n * n_blocks + 3) / 4 + 1,
                             n * nh * hd,  n * gdim,       n * D->o_rank, n * ow,
                             n_row + 64 * hd};
    int64_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) total += sizes[i];
    float *buf = malloc((size_t)total * sizeof(float));
    const float **rows = malloc((size_t)(2 * n_row) * sizeof *rows);
    if (!buf || !rows) {
        free(buf);
        free(rows);
        return kiln_fail(err, NULL, NULL, -1, "out of memory");
    }
    float *p[sizeof sizes / sizeof sizes[0]];
    p[0] = buf;
    for (size_t i = 1; i < sizeof sizes / sizeof sizes[0]; i++) p[i] = p[i - 1] + sizes[i - 1];
    float *qr = p[0], *q = p[1], *kv = p[2], *att = p[4];
    unsigned char *keep = (unsigned char *)p[3]; /* n x n_blocks, when the indexer chooses */
    float *gin = p[5], *gout = p[6], *oa = p[7], *scratch = p[8];
    const kiln_rope r = layer_rope(c, L);
    const bool flash = c->p.attention != KILN_ATTN_F32;
    int rc = -1;
    if (kiln_ds4_matmul(c, L->wq_a, xn, n, qr, err) < 0) goto out;
    for (int64_t t = 0; t < n; t++) kiln_rms_norm(qr + t * ql, (const float *)L->q_a_norm->data, qr + t * ql, ql, hp->norm_eps);
    if (kiln_ds4_matmul(c, L->wq_b, qr, n, q, err) < 0) goto out;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < nh; h++) {
            float *qh = q + (t * nh + h) * hd;
            kiln_rms_norm(qh, NULL, qh, hd, hp->norm_eps);
            kiln_ds4_rope(&r, n_past + t, qh + nope, false);
            kiln_ds4_hadamard(qh, hd);
        }
    if (kiln_ds4_matmul(c, L->wkv, xn, n, kv, err) < 0) goto out;
    for (int64_t t = 0; t < n; t++) { /* into the raw cache (K only), f16 under flash */
        float *k = kiln_kv_k(&c->kv, il, n_past + t);
        kiln_rms_norm(kv + t * hd, (const float *)L->kv_norm->data, k, hd, hp->norm_eps);
        kiln_ds4_rope(&r, n_past + t, k + nope, false);
        kiln_ds4_hadamard(k, hd);
        if (flash) kiln_f16_round(k, k, hd);
    }
    /* llama.cpp runs the compressors on every batch: their rows carry */
    if (L->ratio != 0 && kiln_ds4_compress(c, &L->comp, L->ratio, hd, &r, xn, n, &S->ring, S->comp, err) < 0) goto out;
    if (L->ratio == 4 && kiln_ds4_compress(c, &L->idx_comp, 4, D->idx_hd, &r, xn, n, &S->idx_ring, S->idx_comp, err) < 0)
        goto out;
    /* the indexer matters once a token sees more blocks than it keeps;
     * llama.cpp scores on every ratio-4 batch that sees a block, so the
     * imatrix hook sees its products whenever there are blocks to score */
    const bool choose = L->ratio == 4 && n_blocks > D->indexer_top_k;
    const bool hooked = L->ratio == 4 && n_blocks > 0 && c->p.hook;
    if ((choose || hooked) && kiln_ds4_indexer(c, il, &r, xn, qr, n, S->idx_comp, n_blocks, keep, err) < 0) goto out;
    for (int64_t j = 0; j < n_row; j++) /* the cells: raw rows, then compressed ones */
        rows[j] = j < raw_view ? (j < n_tot ? kiln_kv_k(&c->kv, il, j) : NULL)
                  : j - raw_view < n_blocks ? S->comp + (j - raw_view) * hd : NULL;
    const kiln_ds4_view view = {rows, n_row, raw_view, hp->n_swa, L->ratio, choose ? keep : NULL, n_blocks, n_past};
    const float *sinks = (const float *)L->attn_sinks->data;
    if (flash && n == 1 && n_row >= 512 && c->p.attention == KILN_ATTN_LLAMACPP) { /* ggml's decode path */
        if (kiln_ds4_attend_split(c, &view, q, sinks, att, err) < 0) goto out;
    } else if (flash) {
        if (kiln_ds4_attend_flash(c, &view, q, n, sinks, att, err) < 0) goto out;
    } else {
        attend(c, L, &view, q, n, att, rows + n_row, scratch);
    }
    for (int64_t t = 0; t < n; t++) /* rotated back, then the rope dims unroped */
        for (int64_t h = 0; h < nh; h++) {
            kiln_ds4_hadamard(att + (t * nh + h) * hd, hd);
            kiln_ds4_rope(&r, n_past + t, att + (t * nh + h) * hd + nope, true);
        }
    rc = project_out(c, L, att, n, gin, gout, oa, out, err);
out:
    free(buf);
    free(rows);
    return rc;
}
