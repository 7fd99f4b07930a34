/* runtime/deepseek4_split.c - DeepSeek-V4's attention of one query in
 * llama.cpp's default CPU context (KILN_ATTN_LLAMACPP: F16 caches, flash
 * attention) when its view has 512 or more cells: ggml's split-KV decode
 * path (ggml_compute_forward_flash_attn_ext_f16, use_split_kv_path),
 * which token-by-token evaluation (llama-perplexity -b 1, generation)
 * takes on every block that sees a compressed cell ([256 raw | 256+
 * compressed]).
 *
 * ggml cuts the view into one chunk of ceil(n_row / nth) cells per thread
 * (nth: the graph's threads, kiln's -t), runs its one_chunk kernel over
 * each (query rounded to f16, f16 accumulator, the sink logit joining
 * the first chunk only) and keeps each chunk's maximum M, sum S and f32
 * accumulator; then merges them in chunk order, skipping a chunk whose S
 * is 0: M' = max(M, M_c), acc = acc * e^(M - M') + acc_c * e^(M_c - M')
 * (fused as GCC fuses ggml's expression: the first product into the
 * add), S likewise, and divides by S. deepseek4_flash.c has the other
 * two kernels; the chunking is why the thread count matters here only. */
#include "deepseek4.h"

#include "forward_impl.h"

#include <math.h>
#include <string.h>

/* One chunk [c0, c1) of the view for head h: M, S and acc (hd). */
static void chunk(const kiln_ds4_view *v, const float *q16, int64_t hd, float scale, const float *sink, int64_t c0,
                  int64_t c1, float *M, float *S, float *acc) {
    *M = -INFINITY;
    *S = 0.0f;
    memset(acc, 0, (size_t)hd * sizeof *acc);
    for (int64_t j = c0; j < c1; j++)
        if (v->rows[j] && kiln_ds4_sees(v, 0, j))
            kiln_attn_one_chunk_step(kiln_vec_dot(q16, v->rows[j], hd) * scale, v->rows[j], M, S, acc, hd);
    if (sink) kiln_attn_sink_step(*sink, M, S, acc, hd);
}

int kiln_ds4_attend_split(const kiln_ctx *c, const kiln_ds4_view *v, const float *q, const float *sinks, float *att,
                          kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t hd = hp->head_dim, nh = hp->n_head, nth = c->n_threads;
    const int64_t size = (v->n_row + nth - 1) / nth;
    const float scale = 1.0f / sqrtf((float)hd);
    (void)err;
#pragma omp parallel for schedule(dynamic, 1) num_threads(c->n_threads)
    for (int64_t h = 0; h < nh; h++) {
        float buf[3 * hd], *q16 = buf, *acc = buf + hd, *part = buf + 2 * hd;
        kiln_f16_round(q + h * hd, q16, hd);
        float M = -INFINITY, S = 0.0f;
        memset(acc, 0, (size_t)hd * sizeof *acc);
        for (int64_t c0 = 0; c0 < v->n_row; c0 += size) {
            const int64_t c1 = c0 + size < v->n_row ? c0 + size : v->n_row;
            float Mc, Sc;
            chunk(v, q16, hd, scale, c0 == 0 ? &sinks[h] : NULL, c0, c1, &Mc, &Sc, part);
            if (Sc == 0.0f) continue;
            const float Mn = fmaxf(M, Mc), s_old = expf(M - Mn), s_new = expf(Mc - Mn);
            for (int64_t d = 0; d < hd; d++) acc[d] = fmaf(acc[d], s_old, part[d] * s_new);
            S = fmaf(S, s_old, Sc * s_new);
            M = Mn;
        }
        const float inv = S != 0.0f ? 1.0f / S : 1.0f;
        float *o = att + h * hd;
        for (int64_t d = 0; d < hd; d++) o[d] = acc[d] * inv;
    }
    return 0;
}
