/* runtime/deepseek4.h - DeepSeek-V4 (GGUF arch deepseek4) in kiln's
 * runtime: its weights and hyper-parameters (deepseek4_load.c), the
 * hyper-connection mixing (deepseek4_hc.c), the compressed attention
 * (deepseek4_attn.c, and deepseek4_flash.c and deepseek4_split.c for
 * flash attention), the MoE (deepseek4_ffn.c), its BF16 products
 * (deepseek4_bf16.c), what a context carries from batch to batch
 * (deepseek4_state.c) and the forward pass (deepseek4.c), each following
 * llama.cpp's src/models/deepseek4.cpp and its llama_kv_cache_dsv4.
 *
 * The model keeps hc_mult copies of the residual stream ("hyper
 * connections"); every block mixes them down to one row before its
 * attention and its FFN and back up after, so the generic block loop of
 * forward.c does not fit and kiln_eval hands the whole evaluation to
 * kiln_deepseek4_eval. Not part of the public API. */
#ifndef KILN_DEEPSEEK4_H
#define KILN_DEEPSEEK4_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"
#include "../core/gguf.h"
#include "ops.h"

struct kiln_model;
struct kiln_hparams;
struct kiln_ctx;

/* A KV compressor's weights: kv and gate projections, the positional
 * bias ape added to the gate per position in the block, the output norm. */
typedef struct kiln_ds4_comp {
    const kiln_tensor *wkv, *wgate, *ape, *norm;
} kiln_ds4_comp;

/* One block's weights (NULL where the block has none). */
typedef struct kiln_ds4_layer {
    int64_t ratio; /* KV compression: 0 (sliding window only), 4 (CSA) or 128 (HCA) */
    float swiglu_clamp_exp, swiglu_clamp_shexp;
    const kiln_tensor *attn_norm, *attn_sinks;
    const kiln_tensor *wq_a, *q_a_norm, *wq_b, *wkv, *kv_norm, *wo_a, *wo_b;
    const kiln_tensor *hc_attn_fn, *hc_attn_base, *hc_attn_scale;
    const kiln_tensor *hc_ffn_fn, *hc_ffn_base, *hc_ffn_scale;
    kiln_ds4_comp comp;                       /* ratio 4 or 128 */
    kiln_ds4_comp idx_comp;                   /* ratio 4: the lightning indexer's keys */
    const kiln_tensor *idx_q_b, *idx_proj;    /* ratio 4: its queries and head weights */
    const kiln_tensor *ffn_norm, *ffn_gate_inp, *tid2eid, *exp_probs_b;
    const kiln_tensor *gate_exps, *up_exps, *down_exps;
    const kiln_tensor *gate_shexp, *up_shexp, *down_shexp;
} kiln_ds4_layer;

/* What deepseek4 adds to kiln_model: its own keys and tensors. */
typedef struct kiln_ds4 {
    int64_t hc;               /* hyper_connection.count (4) */
    int64_t sinkhorn_iters;   /* hyper_connection.sinkhorn_iterations */
    float hc_eps;             /* hyper_connection.epsilon */
    int64_t n_hash_layers;    /* hash_layer_count: these route by token id */
    int64_t o_groups, o_rank; /* attention.output_group_count / output_lora_rank */
    int64_t indexer_top_k;    /* attention.indexer.top_k */
    int64_t idx_heads, idx_hd; /* attention.indexer.head_count / key_length */
    float compress_rope_base; /* attention.compress_rope_freq_base */
    const kiln_tensor *hc_head_fn, *hc_head_base, *hc_head_scale;
    kiln_ds4_layer *layers;   /* n_layer entries */
} kiln_ds4;

/* deepseek4's generic hyper-parameters into hp (head sizes, RoPE, YaRN,
 * window, expert counts), as llama.cpp's loader reads them. Returns 0, or
 * -1 with a message naming the key. */
int kiln_ds4_read_hparams(const kiln_gguf *g, const char *path, struct kiln_hparams *hp, kiln_err *err);

/* Reads the deepseek4 keys and resolves every tensor of m (checking the
 * shapes llama.cpp's loader expects) into a new m->ds4, and the shared
 * ones (token_embd, output_norm, output) into m. Returns 0 or -1. */
int kiln_ds4_load(const kiln_gguf *g, const char *path, struct kiln_model *m, kiln_err *err);
void kiln_ds4_free(kiln_ds4 *d);

/* Evaluates n tokens (kiln_eval's contract) through the deepseek4 graph,
 * in calls of at most n_batch tokens, each a batch at positions n_past..
 * that reads what the earlier ones left (deepseek4_state.c). */
int kiln_deepseek4_eval(struct kiln_ctx *c, const int32_t *tokens, int64_t n, float *logits, kiln_err *err);

/* The steps of one batch (deepseek4.c), for kiln_deepseek4_eval and
 * layer-major evaluation (layer_major.c). The streams x are n x hc x
 * n_embd floats. embed: hc copies of each token's embedding; block: block
 * il in place, at positions n_past.. (tokens: for the hash-routed
 * blocks); head: the logits (n x n_vocab; NULL: only the hooks' products).
 * The caller advances n_past. block and head return 0 or -1; block
 * refuses a batch after the first that reaches past kiln_ds4_raw_cells. */
void kiln_ds4_embed(const struct kiln_ctx *c, const int32_t *tokens, int64_t n, float *x);
int kiln_ds4_block(struct kiln_ctx *c, int64_t il, const int32_t *tokens, float *x, int64_t n, kiln_err *err);
int kiln_ds4_head(struct kiln_ctx *c, float *x, int64_t n, float *logits, kiln_err *err);

/* Block il's attention (deepseek4_attn.c) of xn (n rows, the normed
 * block input at positions n_past..) into out (n x n_embd). */
int kiln_ds4_attention(struct kiln_ctx *c, int64_t il, const float *xn, int64_t n, float *out, kiln_err *err);

/* The key rows one block's attention reads (deepseek4_attn.c): n_row
 * cells, the raw window's view [0, raw_view) (cell j holds position j)
 * then the compressed view; rows[j] NULL where the cell holds nothing.
 * Query t of the batch is at position p = pos0 + t and sees raw cell j
 * when j <= p and p - j < n_swa, compressed cell b when b < (p + 1) /
 * ratio (and the indexer kept it). */
typedef struct kiln_ds4_view {
    const float *const *rows;
    int64_t n_row, raw_view, n_swa, ratio;
    const unsigned char *keep; /* NULL, or the indexer's choice (kiln_ds4_indexer), n x n_blocks */
    int64_t n_blocks;
    int64_t pos0;              /* the batch's first position (kiln_ctx's n_past) */
} kiln_ds4_view;

/* Whether query t of the batch sees cell j of v. */
static inline bool kiln_ds4_sees(const kiln_ds4_view *v, int64_t t, int64_t j) {
    const int64_t p = v->pos0 + t;
    if (j < v->raw_view) return j <= p && p - j < v->n_swa;
    const int64_t b = j - v->raw_view;
    return v->ratio > 0 && b < (p + 1) / v->ratio && (!v->keep || v->keep[t * v->n_blocks + b]);
}

/* ggml's split-KV flash kernel (deepseek4_split.c): one query (n = 1,
 * KILN_ATTN_LLAMACPP) over a view of 512+ cells, which ggml cuts into one
 * chunk of cells per thread and merges. Returns 0. */
int kiln_ds4_attend_split(const struct kiln_ctx *c, const kiln_ds4_view *v, const float *q, const float *sinks,
                          float *att, kiln_err *err);

/* KILN_ATTN_LLAMACPP* (deepseek4_flash.c): ggml's flash attention of the
 * n queries q (n x n_head x head_dim, f32) over v's rows (f16 values)
 * with the heads' sink logits, into att: its tiled kernel for 64+
 * queries under KILN_ATTN_LLAMACPP, its one_chunk kernel otherwise.
 * Returns 0. */
int kiln_ds4_attend_flash(const struct kiln_ctx *c, const kiln_ds4_view *v, const float *q, int64_t n,
                          const float *sinks, float *att, kiln_err *err);

/* ---- what a context carries from batch to batch (deepseek4_state.c) ---- */

/* A compressor's carried rows (llama.cpp's llama_dsv4_comp_state): the kv
 * and score (gate + ape) rows of the last `size` positions, position p in
 * row p % size, w floats each (ratio 4: size 8, w 2 x hd; 128: 128, hd):
 * the rows of a block not yet complete, and for ratio 4 the block before. */
typedef struct kiln_ds4_ring {
    float *kv, *score;
    int64_t size, w;
} kiln_ds4_ring;

/* One block's carried state: the compressed cache (comp_row floats per
 * block, block b in row b) and its compressor's rows; for ratio 4 the
 * lightning indexer's compressed keys and compressor rows as well. The
 * raw window's keys live in kiln_ctx's KV cache (K only: V = K). */
typedef struct kiln_ds4_lstate {
    float *comp, *idx_comp;
    kiln_ds4_ring ring, idx_ring;
} kiln_ds4_lstate;

typedef struct kiln_ds4_state {
    int64_t n_ctx;
    kiln_ds4_lstate *layers; /* n_layer entries; zeroed for ratio-0 blocks */
} kiln_ds4_state;

/* The state of a context of n_ctx positions for model m, one allocation
 * (free with kiln_ds4_state_free). Returns NULL with a message when out
 * of memory. Rows are written before they are read, so a cleared context
 * (n_past = 0) needs no reset. */
kiln_ds4_state *kiln_ds4_state_new(const struct kiln_model *m, int64_t n_ctx, kiln_err *err);
void kiln_ds4_state_free(kiln_ds4_state *s);

/* The position up to which kiln keeps llama.cpp's raw cache layout (cell
 * j holds position j): llama.cpp's sliding-window cache has at least
 * this many cells (n_swa + 1 rounded up to 256), and past them it reuses
 * masked cells, which kiln does not reproduce. */
int64_t kiln_ds4_raw_cells(const struct kiln_hparams *hp);

/* A compressor (ratio 4: overlapping halves of twice-wide rows; 128:
 * plain) over the n batch rows xn at positions n_past..: their kv and
 * score rows; each block that completes in the batch, from these rows
 * and ring's (the positions before n_past): per dimension a
 * softmax-weighted sum, then the norm, RoPE r on the last n_rot dims at
 * the block's first position and the Hadamard rotation, rounded to f16
 * under KILN_ATTN_LLAMACPP* (the F16 cache), into comp (block b at b x
 * hd); then the batch's rows are kept in ring. Returns 0 or -1. */
int kiln_ds4_compress(struct kiln_ctx *c, const kiln_ds4_comp *cp, int64_t ratio, int64_t hd, const kiln_rope *r,
                      const float *xn, int64_t n, kiln_ds4_ring *ring, float *comp, kiln_err *err);

/* llama_mul_mat_hadamard of one head of n (a power of 2) values, in place. */
void kiln_ds4_hadamard(float *x, int64_t n);

/* Rotates x's n_rot dims at pos forward, or back (ggml_rope_ext_back). */
void kiln_ds4_rope(const kiln_rope *r, int64_t pos, float *x, bool back);

/* The lightning indexer of ratio-4 block il (deepseek4_indexer.c): for the
 * n tokens at positions n_past.. (xn the block input, qr the normed q_a
 * output) against keys, the indexer's n_blocks compressed keys so far
 * (kiln_ds4_compress), keep[t * n_blocks + b] = 1 when token t's
 * attention keeps compressed block b: b is visible to t and among the
 * indexer.top_k best scored of the view's cells. Returns 0 or -1. */
int kiln_ds4_indexer(struct kiln_ctx *c, int64_t il, const kiln_rope *r, const float *xn, const float *qr, int64_t n,
                     const float *keys, int64_t n_blocks, unsigned char *keep, kiln_err *err);

/* Block il's MoE plus shared expert (deepseek4_ffn.c) of xn (n rows, the
 * tokens' ids for the hash-routed blocks) into out (n x n_embd). */
int kiln_ds4_ffn(struct kiln_ctx *c, int64_t il, const int32_t *tokens, const float *xn, int64_t n, float *out,
                 kiln_err *err);

/* y = W x for n rows of x (deepseek4_bf16.c): BF16 weights in the
 * orders of ggml built with AVX512_BF16, anything else as kiln_fwd_matmul. */
int kiln_ds4_matmul(struct kiln_ctx *c, const kiln_tensor *w, const float *x, int64_t n, float *y, kiln_err *err);

/* ---- hyper-connections (deepseek4_hc.c) ---- */

/* For n tokens of x (hc rows of d each per token): the mixing weights
 * from fn (F32 [hc * d, (2 + hc) * hc]), scale [3] and base:
 * pre (hc), post (hc) and comb (hc x hc, dst fastest), llama.cpp's
 * build_hc_pre with its sinkhorn normalisation. mixes holds n * (2+hc)*hc
 * floats of scratch, flat n * hc * d. */
int kiln_ds4_hc_weights(struct kiln_ctx *c, const kiln_tensor *fn, const kiln_tensor *scale,
                        const kiln_tensor *base, const float *x, int64_t n, float *flat, float *mixes,
                        float *pre, float *post, float *comb, kiln_err *err);
/* y[t] = sum over h of x[t][h] * pre[t][h] (n rows of d), each product
 * and each sum rounded. */
void kiln_ds4_hc_collapse(const kiln_ds4 *D, const float *x, const float *pre, int64_t n, int64_t d, float *y);
/* out[t][dst] = f[t] * post[t][dst] + sum over src of res[t][src] * comb[t][dst + hc * src]. */
void kiln_ds4_hc_expand(const kiln_ds4 *D, const float *f, const float *res, const float *post, const float *comb,
                        int64_t n, int64_t d, float *out);
/* The output head's pre weights (build_hc_head): n * hc into pre. */
int kiln_ds4_hc_head(struct kiln_ctx *c, const float *x, int64_t n, float *flat, float *mixes, float *pre,
                     kiln_err *err);

#endif
