/* runtime/deepseek4.h - DeepSeek-V4 (GGUF arch deepseek4) in kiln's
 * runtime: its weights and hyper-parameters (deepseek4_load.c), the
 * hyper-connection mixing (deepseek4_hc.c), the compressed attention
 * (deepseek4_attn.c, and deepseek4_flash.c for flash attention), the MoE
 * (deepseek4_ffn.c), its BF16 products (deepseek4_bf16.c) and the
 * forward pass (deepseek4.c), each following llama.cpp's
 * src/models/deepseek4.cpp.
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

/* Evaluates n tokens (kiln_eval's contract) through the deepseek4 graph. */
int kiln_deepseek4_eval(struct kiln_ctx *c, const int32_t *tokens, int64_t n, float *logits, kiln_err *err);

/* Block il's attention (deepseek4_attn.c) of xn (n rows, the normed
 * block input at positions n_past..) into out (n x n_embd). */
int kiln_ds4_attention(struct kiln_ctx *c, int64_t il, const float *xn, int64_t n, float *out, kiln_err *err);

/* The key rows one block's attention reads (deepseek4_attn.c): n_row
 * cells, the raw window's view [0, raw_view) then the compressed view;
 * rows[j] NULL where the cell holds nothing. Query t sees raw cell j when
 * j <= t and t - j < n_swa, compressed cell b when b < (t + 1) / ratio. */
typedef struct kiln_ds4_view {
    const float *const *rows;
    int64_t n_row, raw_view, n_swa, ratio;
    const unsigned char *keep; /* NULL, or the indexer's choice (kiln_ds4_indexer), n x n_blocks */
    int64_t n_blocks;
} kiln_ds4_view;

/* Whether query t sees cell j of v. */
static inline bool kiln_ds4_sees(const kiln_ds4_view *v, int64_t t, int64_t j) {
    if (j < v->raw_view) return j <= t && t - j < v->n_swa;
    const int64_t b = j - v->raw_view;
    return v->ratio > 0 && b < (t + 1) / v->ratio && (!v->keep || v->keep[t * v->n_blocks + b]);
}

/* KILN_ATTN_LLAMACPP* (deepseek4_flash.c): ggml's flash attention of the
 * n queries q (n x n_head x head_dim, f32) over v's rows (f16 values)
 * with the heads' sink logits, into att: its tiled kernel for 64+
 * queries under KILN_ATTN_LLAMACPP, its one_chunk kernel otherwise.
 * Returns 0. */
int kiln_ds4_attend_flash(const struct kiln_ctx *c, const kiln_ds4_view *v, const float *q, int64_t n,
                          const float *sinks, float *att, kiln_err *err);

/* The compressed rows of a compressor (ratio 4: overlapping halves of
 * twice-wide rows; 128: plain) for the n_blocks complete blocks of
 * positions 0..n: per block and dimension a softmax-weighted sum, then
 * the norm, RoPE r on the last n_rot dims at the block's first position,
 * and the Hadamard rotation; into comp (n_blocks x hd). Returns 0 or -1. */
int kiln_ds4_compress(struct kiln_ctx *c, const kiln_ds4_comp *cp, int64_t ratio, int64_t hd, const kiln_rope *r,
                      const float *xn, int64_t n, int64_t n_blocks, float *comp, kiln_err *err);

/* llama_mul_mat_hadamard of one head of n (a power of 2) values, in place. */
void kiln_ds4_hadamard(float *x, int64_t n);

/* Rotates x's n_rot dims at pos forward, or back (ggml_rope_ext_back). */
void kiln_ds4_rope(const kiln_rope *r, int64_t pos, float *x, bool back);

/* The lightning indexer of ratio-4 block il (deepseek4_indexer.c): for the
 * n tokens (xn the block input, qr the normed q_a output), keep[t *
 * n_blocks + b] = 1 when token t's attention keeps compressed block b:
 * b is visible to t and among the indexer.top_k best scored of the
 * view's cells. Returns 0 or -1. */
int kiln_ds4_indexer(struct kiln_ctx *c, int64_t il, const kiln_rope *r, const float *xn, const float *qr, int64_t n,
                     int64_t n_blocks, unsigned char *keep, kiln_err *err);

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
