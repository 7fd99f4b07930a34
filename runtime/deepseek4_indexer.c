/* runtime/deepseek4_indexer.c - DeepSeek-V4's lightning indexer, which
 * picks the compressed blocks each token of a ratio-4 block attends to,
 * as llama.cpp's build_lid_top_k computes it with its fused
 * ggml_lightning_indexer op (ggml-cpu ops.cpp, on by default on CPU):
 *
 *   q_h   = indexer q_b (normed q_a output), head by head: last n_rot dims
 *           roped (the compressor's RoPE), Hadamard-rotated
 *   w_h   = indexer proj (block input) / sqrt(key_length * head_count)
 *   k_b   = the indexer's own compressor (ratio 4, overlapping), normed,
 *           roped and rotated like the attention's compressed rows: its
 *           cache, which deepseek4_attn.c fills batch by batch
 *           (kiln_ds4_compress), the F16 cache under KILN_ATTN_LLAMACPP*
 *   score = sum over h of max(q_h . k_b, 0) * w_h   (+ the causal mask)
 *
 * then each token keeps the top_k best scored blocks of its view; masked
 * blocks score -inf, so a token that sees no more than top_k blocks keeps
 * them all and the scores do not matter. Which of the top_k come first is
 * immaterial (they only unmask cells); which tied blocks make the cut is
 * ggml's (keep_top). */
#include "deepseek4.h"

#include "forward_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ggml's top_k on CPU is std::partial_sort of the indices 0..n by
 * s[a] > s[b], whose first k (any order) are kept. Scores tie often (a
 * block every head scores <= 0 sums to exactly 0), so which tied blocks
 * make the cut is libstdc++'s heap selection, reproduced here: a heap of
 * the first k indices (root: the worst), then each later index that beats
 * the root strictly replaces it. */
typedef struct heap {
    int32_t *a;
    const float *s;
} heap;

static bool better(const heap *h, int32_t x, int32_t y) {
    return h->s[x] > h->s[y];
}

static void push(const heap *h, int64_t hole, int64_t top, int32_t v) {
    int64_t parent = (hole - 1) / 2;
    while (hole > top && better(h, h->a[parent], v)) {
        h->a[hole] = h->a[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    h->a[hole] = v;
}

static void adjust(const heap *h, int64_t hole, int64_t len, int32_t v) {
    const int64_t top = hole;
    int64_t child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (better(h, h->a[child], h->a[child - 1])) child--;
        h->a[hole] = h->a[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        h->a[hole] = h->a[child - 1];
        hole = child - 1;
    }
    push(h, hole, top, v);
}

/* keep[b] = 1 for the blocks b < n_vis that ggml's top_k of the n-cell
 * row s (-inf past n_vis) returns; idx holds n ints of scratch. */
static void keep_top(const float *s, int64_t n, int64_t k, int32_t *idx, unsigned char *keep, int64_t n_vis) {
    const heap h = {idx, s};
    for (int64_t j = 0; j < n; j++) idx[j] = (int32_t)j;
    if (k >= 2)
        for (int64_t parent = (k - 2) / 2;; parent--) {
            adjust(&h, parent, k, idx[parent]);
            if (parent == 0) break;
        }
    for (int64_t i = k; i < n; i++)
        if (better(&h, idx[i], idx[0])) { /* __pop_heap(first, middle, i) */
            const int32_t v = idx[i];
            idx[i] = idx[0];
            adjust(&h, 0, k, v);
        }
    memset(keep, 0, (size_t)n_vis);
    for (int64_t j = 0; j < k; j++)
        if (idx[j] < n_vis) keep[idx[j]] = 1;
}

int kiln_ds4_indexer(kiln_ctx *c, int64_t il, const kiln_rope *r, const float *xn, const float *qr, int64_t n,
                     const float *keys, int64_t n_blocks, unsigned char *keep, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const kiln_ds4 *D = c->m->ds4;
    const kiln_ds4_layer *L = &D->layers[il];
    const int64_t ih = D->idx_hd, inh = D->idx_heads, nope = ih - hp->n_rot, top = D->indexer_top_k;
    const int64_t view = kiln_kv_view(n_blocks); /* the indexer's row: its cache view */
    float *q = malloc((size_t)(n * inh * ih + n * inh + 2 * view) * sizeof(float));
    if (!q) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    float *w = q + n * inh * ih, *score = w + n * inh;
    int32_t *idx = (int32_t *)(score + view);
    int rc = -1;
    if (kiln_ds4_matmul(c, L->idx_q_b, qr, n, q, err) < 0 || kiln_ds4_matmul(c, L->idx_proj, xn, n, w, err) < 0)
        goto out;
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < inh; h++) {
            float *qh = q + (t * inh + h) * ih;
            kiln_ds4_rope(r, c->n_past + t, qh + nope, false);
            kiln_ds4_hadamard(qh, ih);
        }
    const float ws = 1.0f / sqrtf((float)(ih * inh));
    for (int64_t i = 0; i < n * inh; i++) w[i] = w[i] * ws;
    for (int64_t t = 0; t < n; t++) {
        const int64_t vis = (c->n_past + t + 1) / 4;
        unsigned char *kt = keep + t * n_blocks;
        memset(kt, 0, (size_t)n_blocks);
        if (vis <= top) { /* every visible block is among the best */
            memset(kt, 1, (size_t)vis);
            continue;
        }
        for (int64_t b = vis; b < view; b++) score[b] = -INFINITY; /* the causal mask */
        for (int64_t b = 0; b < vis; b++) {
            float s = 0.0f;
            for (int64_t h = 0; h < inh; h++) {
                const float qk = kiln_vec_dot_f32(q + (t * inh + h) * ih, keys + b * ih, ih);
                const float v = fmaxf(qk, 0.0f) * w[t * inh + h]; /* not contracted */
                s = s + v;
            }
            score[b] = s;
        }
        keep_top(score, view, top, idx, kt, vis);
    }
    rc = 0;
out:
    free(q);
    return rc;
}
