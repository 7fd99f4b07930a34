/* runtime/deepseek4_state.c - what a DeepSeek-V4 context carries from one
 * batch to the next, so that kiln evaluates a sequence in several
 * batches as llama.cpp does in several ubatches (its llama_kv_cache_dsv4,
 * src/llama-kv-cache-dsv4.cpp):
 *
 *   - the raw window's keys: kiln_ctx's KV cache, cell = position (K only;
 *     DeepSeek-V4's values are its keys);
 *   - per compressing block, the compressed cache: one row per complete
 *     block of `ratio` positions (kiln_ds4_compress writes it);
 *   - per compressing block, the compressor's carried rows (llama.cpp's
 *     llama_dsv4_comp_state, F32): the kv and score rows of the last
 *     2 x 4 (ratio 4, overlapping blocks) or 128 positions, which the
 *     block completing in a later batch still needs;
 *   - per ratio-4 block, the same two for the lightning indexer.
 *
 * One allocation per context, sized for n_ctx positions. */
#include "deepseek4.h"

#include "forward_impl.h"

#include <stdint.h>
#include <stdlib.h>

/* the rows a block's carried state needs, in floats */
static int64_t layer_floats(const kiln_ds4 *D, const kiln_hparams *hp, const kiln_ds4_layer *L, int64_t n_ctx) {
    if (L->ratio == 0) return 0;
    const int64_t hd = hp->head_dim, n_blocks = n_ctx / L->ratio + 1;
    const int64_t ring = L->ratio == 4 ? 2 * 4 * 2 * hd : L->ratio * hd;
    int64_t total = n_blocks * hd + 2 * ring;
    if (L->ratio == 4) total += n_blocks * D->idx_hd + 2 * (2 * 4 * 2 * D->idx_hd);
    return total;
}

static float *take(float **at, int64_t n) {
    float *p = *at;
    *at += n;
    return p;
}

/* ratio 4: the block before overlaps, so two blocks of rows twice hd wide */
static kiln_ds4_ring ring_at(float **at, int64_t ratio, int64_t hd) {
    kiln_ds4_ring r = {.size = ratio == 4 ? 2 * ratio : ratio, .w = ratio == 4 ? 2 * hd : hd};
    r.kv = take(at, r.size * r.w);
    r.score = take(at, r.size * r.w);
    return r;
}

kiln_ds4_state *kiln_ds4_state_new(const kiln_model *m, int64_t n_ctx, kiln_err *err) {
    const kiln_ds4 *D = m->ds4;
    const kiln_hparams *hp = &m->hp;
    int64_t n_float = 0;
    for (int64_t il = 0; il < hp->n_layer; il++) n_float += layer_floats(D, hp, &D->layers[il], n_ctx);
    const size_t head = sizeof(kiln_ds4_state) + (size_t)hp->n_layer * sizeof(kiln_ds4_lstate);
    const size_t off = (head + 63) / 64 * 64;
    kiln_ds4_state *s = calloc(1, off + (size_t)n_float * sizeof(float));
    if (!s) {
        kiln_fail(err, NULL, "n_ctx", -1, "deepseek4: out of memory for the carried state of %lld positions",
                  (long long)n_ctx);
        return NULL;
    }
    s->n_ctx = n_ctx;
    s->layers = (kiln_ds4_lstate *)(s + 1);
    float *at = (float *)((char *)s + off);
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const kiln_ds4_layer *L = &D->layers[il];
        kiln_ds4_lstate *ls = &s->layers[il];
        if (L->ratio == 0) continue;
        const int64_t n_blocks = n_ctx / L->ratio + 1;
        ls->comp = take(&at, n_blocks * hp->head_dim);
        ls->ring = ring_at(&at, L->ratio, hp->head_dim);
        if (L->ratio == 4) {
            ls->idx_comp = take(&at, n_blocks * D->idx_hd);
            ls->idx_ring = ring_at(&at, 4, D->idx_hd);
        }
    }
    return s;
}

void kiln_ds4_state_free(kiln_ds4_state *s) {
    free(s);
}

int64_t kiln_ds4_raw_cells(const kiln_hparams *hp) {
    return kiln_kv_view(hp->n_swa + 1);
}
