/* runtime/deepseek4_flash.c - DeepSeek-V4's attention in llama.cpp's
 * default CPU context (KILN_ATTN_LLAMACPP: F16 caches, flash attention),
 * what llama-perplexity runs: ggml's tiled flash-attention kernel
 * (ggml_compute_forward_flash_attn_ext_f16, 64+ queries, f32 queries,
 * f16 keys widened to f32) over deepseek4's key rows, [raw window view |
 * compressed view] as deepseek4_attn.c lays them out.
 *
 * Per head and tile of 64 queries, for each tile of 64 cells that some
 * query of the tile sees: scores are fused multiply-add chains over the
 * head's dimensions, times the scale; per query the tile maximum, the
 * running maximum (a new one rescales the f32 accumulator and the sum by
 * expf(M - M')), the numerators and their sum as ggml_vec_soft_max_f32
 * (kiln_exp_sum) added to the running sum in double, then the
 * accumulator takes numerators x V as chains over the tile's cells. A
 * query that sees none of a tile's cells leaves its numbers untouched.
 * The sink logit joins last; the output is acc / sum. attention_flash.c
 * does the same for the generic models' cache layout; this file takes
 * row pointers and deepseek4's visibility instead. Batches of fewer than
 * 64 queries, and KILN_ATTN_LLAMACPP_ONE_CHUNK (kiln imatrix), take
 * ggml's one_chunk kernel (one_chunk below). */
#include "deepseek4.h"

#include "forward_impl.h"

#include <math.h>
#include <string.h>

#define FA_TILE 64 /* GGML_FA_TILE_Q and GGML_FA_TILE_KV */

/* One Q tile (queries t0 .. t0 + nq - 1) of head h. kq: FA_TILE^2,
 * acc: FA_TILE x hd, m, s: FA_TILE. */
static void tile(const kiln_ds4_view *v, const float *q, int64_t nh, int64_t hd, int64_t h, int64_t t0, int nq,
                 float scale, float sink, float *att, float *kq, float *acc, float *m, float *s) {
    memset(acc, 0, (size_t)(nq * hd) * sizeof(float));
    for (int i = 0; i < nq; i++) {
        m[i] = -INFINITY;
        s[i] = 0.0f;
    }
    for (int64_t c0 = 0; c0 < v->n_row; c0 += FA_TILE) {
        const int nc = (int)(v->n_row - c0 < FA_TILE ? v->n_row - c0 : FA_TILE);
        bool any = false;
        for (int i = 0; i < nq && !any; i++)
            for (int j = 0; j < nc && !any; j++) any = v->rows[c0 + j] && kiln_ds4_sees(v, t0 + i, c0 + j);
        if (!any) continue; /* every query masks the whole tile: ggml skips it */
        for (int i = 0; i < nq; i++) {
            const float *qi = q + ((t0 + i) * nh + h) * hd;
            float *row = kq + i * FA_TILE;
            bool seen = false;
            for (int j = 0; j < FA_TILE; j++) {
                const float *k = j < nc ? v->rows[c0 + j] : NULL;
                if (!k || !kiln_ds4_sees(v, t0 + i, c0 + j)) {
                    row[j] = -INFINITY;
                    continue;
                }
                float d = 0.0f;
                for (int64_t e = 0; e < hd; e++) d = fmaf(k[e], qi[e], d);
                row[j] = d * scale;
                seen = true;
            }
            if (!seen) { /* all -INFINITY: ggml skips the query for this tile */
                memset(row, 0, FA_TILE * sizeof(float));
                continue;
            }
            float tile_max = -INFINITY;
            for (int j = 0; j < FA_TILE; j++) tile_max = fmaxf(tile_max, row[j]);
            const float m_new = fmaxf(m[i], tile_max);
            if (m_new > m[i]) {
                const float ms = expf(m[i] - m_new);
                for (int64_t d = 0; d < hd; d++) acc[i * hd + d] *= ms;
                s[i] *= ms;
            }
            m[i] = m_new;
            s[i] = (float)((double)s[i] + kiln_exp_sum(row, FA_TILE, m_new));
        }
        for (int i = 0; i < nq; i++) /* acc += numerators x V, a chain over the cells */
            for (int j = 0; j < nc; j++) {
                const float *vr = v->rows[c0 + j], p = kq[i * FA_TILE + j];
                if (!vr) continue; /* a zero row: fused adds of 0 change nothing */
                for (int64_t d = 0; d < hd; d++) acc[i * hd + d] = fmaf(vr[d], p, acc[i * hd + d]);
            }
    }
    for (int i = 0; i < nq; i++) {
        kiln_attn_sink_step_tiled(sink, &m[i], &s[i], acc + i * hd, hd);
        const float inv = s[i] == 0.0f ? 0.0f : 1.0f / s[i];
        float *o = att + ((t0 + i) * nh + h) * hd;
        for (int64_t d = 0; d < hd; d++) o[d] = acc[i * hd + d] * inv;
    }
}

/* ggml's one_chunk kernel (llama-imatrix's, whose parallel sequences give
 * each ubatch 32 queries per sequence at -c 128; see imatrix/run.c): per
 * query and head, the query rounded to f16, then every cell it sees in
 * the view's order, one kiln_attn_one_chunk_step each (score
 * ggml_vec_dot_f16 times the scale, f16 accumulator), the sink last.
 * Each query's numbers depend only on its own cells, so how llama.cpp
 * cuts the chunk into ubatches changes no bit here. */
static void one_chunk(const kiln_ctx *c, const kiln_ds4_view *v, const float *q, int64_t n, const float *sinks,
                      float *att) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t hd = hp->head_dim, nh = hp->n_head;
    const float scale = 1.0f / sqrtf((float)hd);
#pragma omp parallel for schedule(dynamic, 1) num_threads(c->n_threads)
    for (int64_t job = 0; job < n * nh; job++) {
        const int64_t t = job / nh, h = job % nh;
        float buf[2 * hd], *q16 = buf, *acc = buf + hd;
        kiln_f16_round(q + (t * nh + h) * hd, q16, hd);
        memset(acc, 0, (size_t)hd * sizeof *acc);
        float S = 0.0f, M = -INFINITY;
        for (int64_t j = 0; j < v->n_row; j++)
            if (v->rows[j] && kiln_ds4_sees(v, t, j))
                kiln_attn_one_chunk_step(kiln_vec_dot(q16, v->rows[j], hd) * scale, v->rows[j], &M, &S, acc, hd);
        kiln_attn_sink_step(sinks[h], &M, &S, acc, hd);
        const float inv = S == 0.0f ? 0.0f : 1.0f / S;
        float *o = att + (t * nh + h) * hd;
        for (int64_t d = 0; d < hd; d++) o[d] = acc[d] * inv;
    }
}

int kiln_ds4_attend_flash(const kiln_ctx *c, const kiln_ds4_view *v, const float *q, int64_t n, const float *sinks,
                          float *att, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t hd = hp->head_dim, nh = hp->n_head, n_tiles = (n + FA_TILE - 1) / FA_TILE;
    (void)err;
    /* ggml's choice, as kiln_attend_flash makes it (attention_flash.c) */
    if (n < FA_TILE || hd % 16 || c->p.attention != KILN_ATTN_LLAMACPP) {
        one_chunk(c, v, q, n, sinks, att);
        return 0;
    }
    const float scale = 1.0f / sqrtf((float)hd);
    const int64_t per = FA_TILE * FA_TILE + FA_TILE * hd + 2 * FA_TILE;
#pragma omp parallel for schedule(dynamic, 1) num_threads(c->n_threads)
    for (int64_t job = 0; job < nh * n_tiles; job++) {
        const int64_t h = job / n_tiles, t0 = job % n_tiles * FA_TILE;
        float buf[per];
        tile(v, q, nh, hd, h, t0, (int)(n - t0 < FA_TILE ? n - t0 : FA_TILE), scale, sinks[h], att, buf,
             buf + FA_TILE * FA_TILE, buf + FA_TILE * FA_TILE + FA_TILE * hd,
             buf + FA_TILE * FA_TILE + FA_TILE * hd + FA_TILE);
    }
    return 0;
}
