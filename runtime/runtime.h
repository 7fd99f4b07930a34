/* runtime/runtime.h - evaluating a loaded model: contexts, the KV cache,
 * batched prefill and decode, the hook through which kiln imatrix sees
 * every matrix product's input, and the observers of every product's
 * output and every block's residual stream.
 *
 *   kiln_ctx *c = kiln_ctx_new(model, &(kiln_ctx_params){.n_ctx = 512}, &err);
 *   kiln_eval(c, tokens, n, logits, &err);   // logits: n x n_vocab floats
 *   kiln_ctx_clear(c);                        // empty the KV cache
 *
 * kiln_eval appends the tokens at positions [n_past, n_past + n) and can be
 * called repeatedly (prefill, then one token at a time).
 *
 * kiln_ctx_params.attention chooses which llama.cpp context the attention
 * reproduces:
 *   KILN_ATTN_F32 (0, the default): f32 KV cache and a plain softmax, as
 *     llama.cpp computes with type_k = type_v = F32 and flash attention
 *     disabled -- the settings of the golden logits (`kiln golden`,
 *     test_forward).
 *   KILN_ATTN_LLAMACPP: llama.cpp's default context on CPU (type_k =
 *     type_v = F16, flash attention enabled), which llama-imatrix and
 *     llama-perplexity use unless told otherwise: keys, values and queries
 *     rounded to f16, Q.K summed as ggml_vec_dot_f16 sums it, an online
 *     softmax (running max and sum) and the weighted values accumulated in
 *     f16, as ggml's CPU flash-attention kernel does. Batches of 64 or more
 *     queries take ggml's tiled kernel, as llama-perplexity's do.
 *   KILN_ATTN_LLAMACPP_ONE_CHUNK: the same cache and kernel family, but
 *     always ggml's untiled "one_chunk" kernel: llama-imatrix's figures
 *     (batches of several sequences) agree with it and not with the tiled
 *     one (see runtime/attention_flash.c). */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include <stdint.h>

#include "matmul.h"
#include "model.h"

/* Called once per matrix product with the product's input activations:
 * `x` is n_tokens rows of n_in floats (before any activation quantization).
 * For 3-D expert tensors it is called once per expert with exactly the
 * tokens routed to that expert (expert >= 0); otherwise expert is -1.
 * Costs nothing when unset. */
typedef void (*kiln_matmul_hook)(void *user, const char *tensor_name, int expert, const float *x,
                                 int64_t n_tokens, int64_t n_in);

/* Observers of the forward pass, for comparing two models' hidden states
 * (kiln diff --activations) and measuring a tensor's damage (kiln
 * quantize --analyze). Both cost nothing when unset and never change the
 * numbers.
 *
 * kiln_output_hook: called once per matrix product with its output `y`,
 * n_rows rows of n_out floats, before any bias is added (for output.weight:
 * the raw logits, before soft-capping or scaling). Dense products pass
 * expert = -1 and slots = NULL: row i is token i of the batch. Expert
 * slabs of 3-D tensors pass expert >= 0 and slots: row i is the batch's
 * token slots[i] / n_expert_used, routed to this expert in selection slot
 * slots[i] % n_expert_used.
 *
 * kiln_layer_hook: called after block `layer` with the residual stream,
 * n_tokens rows of n_embd floats (the batch's tokens, in order).
 *
 * Both are called from the evaluating thread, in evaluation order (experts
 * in index order), once per product per batch of at most 512 tokens. */
typedef void (*kiln_output_hook)(void *user, const char *tensor_name, int expert, const int32_t *slots,
                                 const float *y, int64_t n_rows, int64_t n_out);
typedef void (*kiln_layer_hook)(void *user, int64_t layer, const float *x, int64_t n_tokens, int64_t n_embd);

typedef enum kiln_attention {
    KILN_ATTN_F32 = 0,  /* f32 KV cache, no flash attention (golden logits) */
    KILN_ATTN_LLAMACPP, /* F16 KV cache + flash attention (llama.cpp's defaults) */
    KILN_ATTN_LLAMACPP_ONE_CHUNK, /* the same, always with ggml's untiled kernel */
} kiln_attention;

typedef struct kiln_ctx_params {
    int64_t n_ctx;             /* KV cache length; 0: the model's n_ctx_train */
    kiln_numeric_mode mode;    /* KILN_NUM_GGML (default) or KILN_NUM_EXACT */
    kiln_matmul_hook hook;
    void *hook_user;
    bool hook_output;          /* also call the hook for output.weight */
    kiln_attention attention;  /* KILN_ATTN_F32 (default) or a KILN_ATTN_LLAMACPP* */
    kiln_output_hook output_hook; /* after every product (NULL: none) */
    kiln_layer_hook layer_hook;   /* after every block (NULL: none) */
    void *observer_user;          /* passed to output_hook and layer_hook */
    int64_t logits_from;          /* kiln_eval writes no logits for cache positions below this (their
                                   * rows are left as they are): perplexity and imatrix score only a
                                   * chunk's second half, and skip the output product of the first */
} kiln_ctx_params;

typedef struct kiln_ctx kiln_ctx;

kiln_ctx *kiln_ctx_new(const kiln_model *m, const kiln_ctx_params *p, kiln_err *err);
void kiln_ctx_free(kiln_ctx *c);
void kiln_ctx_clear(kiln_ctx *c);
int64_t kiln_ctx_n_past(const kiln_ctx *c);

/* Evaluates n tokens; when logits is not NULL writes n x n_vocab logits
 * (row i = the distribution after reading tokens[0..i]). Returns -1 with a
 * message when the cache would overflow or a token id is out of range. */
int kiln_eval(kiln_ctx *c, const int32_t *tokens, int64_t n, float *logits, kiln_err *err);

#endif
