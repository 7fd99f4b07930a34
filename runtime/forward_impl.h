/* runtime/forward_impl.h - what the pieces of the forward pass share
 * (forward.c, attention.c, ffn.c, moe.c, fwd_matmul.c): the context with
 * its KV cache and scratch buffers, and the block-level entry points.
 * Not part of the public API (runtime.h is).
 *
 * Tokens are evaluated in chunks of at most n_batch; every scratch buffer
 * holds n_batch rows, allocated once in kiln_ctx_new, so evaluation never
 * allocates per token. Rows are row-major: row t of a buffer of width w
 * starts at t * w. */
#ifndef KILN_FORWARD_IMPL_H
#define KILN_FORWARD_IMPL_H

#include <math.h>

#include "kv_cache.h"
#include "ops.h"
#include "runtime.h"

struct kiln_ctx {
    const kiln_model *m;
    kiln_ctx_params p;
    int64_t n_ctx, n_past, n_batch;
    kiln_kv_cache kv;
    kiln_rope rope;
    kiln_rope rope_swa; /* the sliding layers' (gemma), else unused */
    int n_threads;     /* attention workers; work holds a slice for each */

    float *x;          /* residual stream, n_embd per token */
    float *xn;         /* normed input of the current block, n_embd */
    float *q;          /* queries, n_head * head_dim */
    float *att;        /* attention output before wo, n_head * head_dim */
    float *tmp;        /* a block's output (or fused qkv), max(n_embd, qkv) */
    float *ff_a, *ff_b; /* FFN hidden activations, largest FFN width */
    float *rope_cs;    /* RoPE (cos, sin) of each token, n_rot */
    float *rope_cs_swa; /* the same with rope_swa, when the model slides */
    float *work;       /* per worker: KILN_ATTN_TILE rows of kiln_kv_view(n_ctx)
                        * attention weights, then 64 rows of head_dim
                        * partial sums, or the flash kernel's tiles
                        * (work_stride floats) */
    int64_t work_stride;
    float *vt;         /* KILN_ATTN_F32: a layer's V rows transposed for a batch,
                        * kiln_kv_view(n_ctx) per KV column (attention.c) */

    /* MoE routing: per token the selected experts and their weights, and
     * per (token, slot) the weighted expert output, summed in slot order */
    float *router;     /* n_expert */
    int32_t *sel;      /* n_expert_used */
    float *sel_w;      /* n_expert_used */
    int32_t *rows;     /* (token * n_expert_used + slot) routed to one expert */
    float *ex_in, *ex_out; /* gathered inputs / outputs of one expert, n_embd */
    float *ex_round;   /* an expert product's input rounded to f16 / bf16,
                        * max(n_embd, n_ff_exp) */
    float *slot_out;   /* n_expert_used * n_embd */
    float *sh_gate;    /* qwen2moe shared-expert gate, 1 */
    float *mla;        /* deepseek2's MLA intermediates (deepseek2.c), else NULL */
    struct kiln_ds4_state *ds4; /* deepseek4's carried state (deepseek4_state.c), else NULL */
};

/* The steps of evaluating n <= n_batch tokens at positions n_past..:
 * embed them into c->x; compute their RoPE angles; run block il on c->x
 * (in place, for every layer in turn; logits: whether the head will
 * write logits for these rows); then the final norm and output
 * projection into logits (n x n_vocab; NULL: only the output hook, when
 * one is set for it). The caller advances n_past.
 * Rows at positions below the context's logits_from output nothing, as
 * in llama.cpp's graphs (inp_out_ids): the head writes no logits for
 * them, and the last block leaves them before its FFN (every row when
 * logits is false), unless a matmul hook or an observer is set. */
void kiln_fwd_embed(kiln_ctx *c, const int32_t *tokens, int64_t n);
void kiln_fwd_positions(kiln_ctx *c, int64_t n);
int kiln_fwd_block(kiln_ctx *c, int64_t il, int64_t n, bool logits, kiln_err *err);
int kiln_fwd_head(kiln_ctx *c, int64_t n, float *logits, kiln_err *err);

/* y = W x for n rows of x, W a weight of the model (expert >= 0: that
 * expert's slab of a 3-D tensor), in the context's numeric mode. Calls
 * the hook with x first when one is set (for the output tensor only with
 * hook_output). y == NULL only calls the hook. Returns 0 or -1 with a
 * message naming the tensor. */
int kiln_fwd_matmul(kiln_ctx *c, const kiln_tensor *w, int expert, const float *x, int64_t n,
                    float *y, kiln_err *err);

/* y[i] = W[i] x for n_w <= KILN_MM_GROUP_MAX weights of one input
 * (kiln_matmul_group: one OpenMP region, x converted once), the same bits
 * and hooks as n_w kiln_fwd_matmul calls in turn (which is what runs
 * when a hook is set, so that hooks see the same order of calls). */
int kiln_fwd_matmul_group(kiln_ctx *c, const kiln_tensor *const *w, float *const *y, int n_w, const float *x,
                          int64_t n, kiln_err *err);

/* Calls the output hook, when set, with the n rows y = W x just computed
 * (expert >= 0: the rows routed to that expert, listed in c->rows). */
void kiln_fwd_observe(kiln_ctx *c, const kiln_tensor *w, int expert, const float *y, int64_t n);

/* y[t] += b for each of n rows of width w; b may be NULL. */
void kiln_fwd_bias(float *y, const kiln_tensor *b, int64_t n, int64_t w);

/* Self-attention of block il for the n tokens at positions n_past..:
 * reads c->xn, appends their keys and values to the cache and writes the
 * projected output (n x n_embd) to c->tmp. */
int kiln_attention_block(kiln_ctx *c, int64_t il, int64_t n, kiln_err *err);

/* Attention of the n queries in c->q against cache layer il (causal),
 * into c->att. In KILN_NUM_GGML mode it sums as llama.cpp does for a batch
 * of n tokens over its KV view (n_past + n cells rounded up to 256, at
 * most n_ctx: softmax rows that long, the V product by tinyBLAS or by
 * ggml_vec_dot_f32), so a token's numbers depend slightly on how it was
 * batched and on n_ctx, as they do in llama.cpp; KILN_NUM_EXACT's do not.
 * With KILN_ATTN_LLAMACPP (whatever the mode) it is ggml's flash
 * attention over an F16 cache instead (attention_flash.c), whose numbers
 * depend on the batch only through the choice of kernel (64+ queries:
 * the tiled one). */
void kiln_attend(kiln_ctx *c, int64_t il, int64_t n);
/* The score scale inside the softmax: 1/sqrt(head_dim), or 1 when the
 * queries were scaled already (gemma, phi3), or granite's attention.scale. */
static inline float kiln_attn_scale(const kiln_hparams *hp) {
    return hp->attn_scale != 0.0f ? 1.0f : hp->kq_scale != 0.0f ? hp->kq_scale : 1.0f / sqrtf((float)hp->head_dim);
}

/* x[i] *= s for n values, unless s is 0 (granite.c). */
void kiln_scale_rows(float *x, int64_t n, float s);
/* Granite: n rows of logits times 1/logit_scale (when set). */
void kiln_granite_logits(const kiln_hparams *hp, float *logits, int64_t n);

/* The first cell a sliding layer's query at pos sees (llama.cpp's
 * standard SWA: masked when pos - p >= n_swa). */
static inline int64_t kiln_window_start(const kiln_hparams *hp, int64_t pos) {
    return pos - hp->n_swa + 1 > 0 ? pos - hp->n_swa + 1 : 0;
}

/* Raw scores s[0..n_att) of one query: soft-capped (cap != 0) as ggml's
 * non-flash graph does, then -INFINITY below the window start lo. */
void kiln_mask_scores(float *s, int64_t lo, int64_t n_att, float cap);

/* Tokens of a batch kiln_attend's f32 path takes together for one head:
 * their scores and V sums read each cache row once for all of them. */
#define KILN_ATTN_TILE 8

/* kiln_attend's KILN_ATTN_LLAMACPP path (attention_flash.c). */
void kiln_attend_flash(kiln_ctx *c, int64_t il, int64_t n);
/* Floats of c->work each worker of kiln_attend_flash needs. */
int64_t kiln_attend_flash_scratch(int64_t head_dim);
/* A head's attention-sink logit s folded into a flash row's running
 * maximum *M, sum *S and accumulator acc (hd values), as ggml's one_chunk
 * kernel adds it after every cell (attention_flash.c; deepseek4_flash.c
 * too). */
void kiln_attn_sink_step(float s, float *M, float *S, float *acc, int64_t hd);
/* The same after a row of ggml's tiled kernel, whose sum update is one
 * fused multiply-add (attention_flash.c, sink_step). */
void kiln_attn_sink_step_tiled(float s, float *M, float *S, float *acc, int64_t hd);
/* One visible cell of ggml's one_chunk flash kernel: score s (already
 * scaled) with value row v (f16 values) folded into the running maximum
 * *M, sum *S and the f16 accumulator acc (attention_flash.c; also
 * deepseek4_flash.c). */
void kiln_attn_one_chunk_step(float s, const float *v, float *M, float *S, float *acc, int64_t hd);

/* Gemma's block il (gemma.c): four RMS norms around attention and a GELU
 * gated FFN. */
int kiln_gemma_block(kiln_ctx *c, int64_t il, int64_t n, kiln_err *err);

/* BitNet b1.58's block il (bitnet.c): the llama block with RMS sub-norms
 * before wo and ffn_down. */
int kiln_bitnet_block(kiln_ctx *c, int64_t il, int64_t n, kiln_err *err);

/* OLMo 2's block il (olmo2.c): no pre-norms, RMS norms on the attention
 * and FFN outputs before each joins the residual stream. */
int kiln_olmo2_block(kiln_ctx *c, int64_t il, int64_t n, kiln_err *err);

/* gpt-oss (gptoss.c): x = softmax(x * scale) with a sink logit in the
 * maximum and the sum (ggml's soft_max_ext with sinks); swiglu_oai of n
 * gate and up values; y[t] += row e of an expert bias [w, n_expert] for m
 * rows of width w (b may be NULL). */
void kiln_softmax_sink(float *x, int64_t n, float scale, float sink, kiln_numeric_mode mode);
void kiln_swiglu_oai(const float *g, const float *u, float *y, int64_t n, kiln_numeric_mode mode);
void kiln_expert_bias(float *y, const kiln_tensor *b, int e, int64_t m, int64_t w);

/* YaRN (yarn.c): sets r's ramp, correction dimensions and attention
 * factor from hp when the model's rope scaling is yarn; else nothing. */
void kiln_yarn_setup(const kiln_hparams *hp, kiln_rope *r);

/* DeepSeek V2/V3's block il (deepseek2.c): MLA attention in llama.cpp's
 * absorbed form (MQA over kv_lora_rank + n_rot), then a dense FFN or the
 * grouped MoE with shared experts. */
int kiln_deepseek2_block(kiln_ctx *c, int64_t il, int64_t n, kiln_err *err);
/* Floats per token of c->mla that kiln_deepseek2_block needs. */
int64_t kiln_deepseek2_scratch(const kiln_hparams *hp);

/* Gemma's embedding scale, x *= sqrt(n_embd) over n rows (gemma.c). */
void kiln_gemma_scale_embd(const kiln_ctx *c, float *x, int64_t n);

/* Dense FFN of x (n rows) into out: SwiGLU when gate is set, else GELU
 * (gpt2). Biases may be NULL. Uses c->ff_a / c->ff_b. */
int kiln_ffn(kiln_ctx *c, const kiln_tensor *gate, const kiln_tensor *gate_b, const kiln_tensor *up,
             const kiln_tensor *up_b, const kiln_tensor *down, const kiln_tensor *down_b,
             const float *x, int64_t n, float *out, kiln_err *err);

/* Mixture-of-experts FFN of block il (plus qwen2moe's shared expert) of x
 * (n rows) into out. */
int kiln_moe_block(kiln_ctx *c, int64_t il, const float *x, int64_t n, float *out, kiln_err *err);
/* The slots (token t's j-th chosen expert is slot t * k + j) that chose
 * expert e, ascending, into rows; returns how many (moe.c, and
 * deepseek4_ffn.c's own routing). */
int64_t kiln_moe_rows_of(const int32_t *sel, int64_t n_slots, int e, int32_t *rows);
/* out[t] = the sum of token t's k slot outputs (d floats each), in slot
 * order, as ggml adds the experts' views. */
void kiln_moe_sum_slots(const float *slot_out, int64_t n, int64_t k, int64_t d, float *out);

#endif
