/* runtime/forward.c - contexts and the forward pass of runtime.h: token
 * (and gpt2 position) embeddings, the blocks, the final norm and the
 * output projection, over batches of tokens appended to a KV cache.
 *
 * A block is: x += attention(norm(x)); x += ffn(norm(x)), with RMS norms
 * (llama, qwens) or layer norms with bias (gpt2), and a dense or MoE FFN.
 * The details live in attention.c, ffn.c and moe.c; this file owns the
 * buffers and the order of operations. */
#include "forward_impl.h"

#include "deepseek4.h"

#include "../core/types.h"
#include "../codec/codec.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Largest internal batch: longer evaluations run in chunks of this many
 * tokens. It is llama.cpp's default n_ubatch, so a long evaluation is cut
 * where llama.cpp would cut it (in KILN_NUM_GGML mode attention sums
 * depend on the batch, see kiln_attend). */
#define KILN_MAX_BATCH 512

static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

static int alloc_scratch(kiln_ctx *c) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t b = c->n_batch, d = hp->n_embd;
    const int64_t n_q = hp->head_dim * hp->n_head, n_qkv = n_q + 2 * hp->head_dim * hp->n_head_kv;
    /* phi3's fused ffn_up gives 2 * n_ff per token */
    const int64_t n_ff = max64(hp->n_ff * (hp->arch == KILN_ARCH_PHI3 ? 2 : 1), max64(hp->n_ff_exp, hp->n_ff_shexp));
    const int64_t k = hp->n_expert_used;
    float **bufs[] = {&c->x, &c->xn, &c->q, &c->att, &c->tmp, &c->ff_a, &c->ff_b, &c->rope_cs, &c->rope_cs_swa,
                      &c->work};
    const int64_t sizes[] = {b * d, b * d, b * n_q, b * n_q, b * max64(d, n_qkv), b * n_ff, b * n_ff,
                             b * max64(hp->n_rot, 1), hp->n_swa > 0 ? b * max64(hp->n_rot, 1) : 1,
                             (int64_t)c->n_threads * c->work_stride};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (!(*bufs[i] = malloc((size_t)sizes[i] * sizeof(float)))) return -1;
    /* the f32 attention's transposed V rows, for batches */
    if (c->p.attention == KILN_ATTN_F32 && b > 1 &&
        !(c->vt = malloc((size_t)(hp->n_head_kv * hp->head_dim * kiln_kv_view(c->n_ctx)) * sizeof(float))))
        return -1;
    if (hp->arch == KILN_ARCH_DEEPSEEK2 && !(c->mla = malloc((size_t)(b * kiln_deepseek2_scratch(hp)) * sizeof(float))))
        return -1;
    if (hp->n_expert == 0) return 0;
    c->router = malloc((size_t)(b * hp->n_expert) * sizeof(float));
    c->sel = malloc((size_t)(b * k) * sizeof(int32_t));
    c->sel_w = malloc((size_t)(b * k) * sizeof(float));
    c->rows = malloc((size_t)(b * k) * sizeof(int32_t));
    c->ex_in = malloc((size_t)(b * d) * sizeof(float));
    c->ex_out = malloc((size_t)(b * d) * sizeof(float));
    c->ex_round = malloc((size_t)(b * max64(d, hp->n_ff_exp)) * sizeof(float));
    c->slot_out = malloc((size_t)(b * k * d) * sizeof(float));
    c->sh_gate = malloc((size_t)b * sizeof(float));
    return c->router && c->sel && c->sel_w && c->rows && c->ex_in && c->ex_out && c->ex_round && c->slot_out &&
                   c->sh_gate
               ? 0
               : -1;
}

kiln_ctx *kiln_ctx_new(const kiln_model *m, const kiln_ctx_params *p, kiln_err *err) {
    kiln_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        kiln_fail(err, NULL, NULL, -1, "out of memory");
        return NULL;
    }
    const kiln_hparams *hp = &m->hp;
    c->m = m;
    if (p) c->p = *p;
    if (c->p.mode != KILN_NUM_GGML && c->p.mode != KILN_NUM_EXACT) {
        kiln_fail(err, NULL, "mode", -1, "unknown numeric mode %d", (int)c->p.mode);
        goto fail;
    }
    if (c->p.attention < KILN_ATTN_F32 || c->p.attention > KILN_ATTN_LLAMACPP_ONE_CHUNK) {
        kiln_fail(err, NULL, "attention", -1, "unknown attention kind %d", (int)c->p.attention);
        goto fail;
    }
    c->n_ctx = c->p.n_ctx > 0 ? c->p.n_ctx : hp->n_ctx_train;
    c->n_batch = c->n_ctx < KILN_MAX_BATCH ? c->n_ctx : KILN_MAX_BATCH;
    c->n_threads = omp_get_max_threads();
    if (c->n_threads < 1) c->n_threads = 1;
    c->work_stride = max64(KILN_ATTN_TILE * kiln_kv_view(c->n_ctx) + 64 * hp->head_dim,
                           kiln_attend_flash_scratch(hp->head_dim));
    c->rope = (kiln_rope){.n_rot = hp->n_rot, .neox = hp->rope_neox, .freq_base = hp->rope_freq_base,
                          .freq_scale = hp->rope_freq_scale,
                          .freq_factors = m->rope_freqs ? (const float *)m->rope_freqs->data : NULL,
                          .attn_factor = hp->rope_attn_factor, .mode = c->p.mode};
    /* phi3 LongRoPE: llama.cpp picks the factors by its padded context */
    const kiln_tensor *lr = kiln_kv_view(c->n_ctx) > hp->n_ctx_orig ? m->rope_long : m->rope_short;
    if (lr) c->rope.freq_factors = (const float *)lr->data;
    c->rope_swa = c->rope;
    c->rope_swa.freq_base = hp->rope_freq_base_swa;
    kiln_yarn_setup(hp, &c->rope); /* YaRN's correction dims depend on the base */
    kiln_yarn_setup(hp, &c->rope_swa);
    if (kiln_kv_init(&c->kv, hp->n_layer, c->n_ctx, hp->head_dim * hp->n_head_kv, err) < 0) goto fail;
    if (alloc_scratch(c) < 0) {
        kiln_fail(err, NULL, "n_ctx", -1, "out of memory for the buffers of %lld positions",
                  (long long)c->n_ctx);
        goto fail;
    }
    return c;
fail:
    kiln_ctx_free(c);
    return NULL;
}

void kiln_ctx_free(kiln_ctx *c) {
    if (!c) return;
    kiln_kv_free(&c->kv);
    kiln_ds4_state_free(c->ds4);
    void *bufs[] = {c->x,  c->xn,     c->q,    c->att,   c->tmp,   c->ff_a,   c->ff_b,
                    c->rope_cs, c->rope_cs_swa, c->work, c->router, c->sel, c->sel_w, c->rows, c->ex_in,
                    c->ex_out, c->ex_round, c->slot_out, c->sh_gate, c->mla, c->vt};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(c);
}

void kiln_ctx_clear(kiln_ctx *c) {
    c->n_past = 0;
}

int64_t kiln_ctx_n_past(const kiln_ctx *c) {
    return c->n_past;
}

/* Writes row `id` of a token or position table (any readable type) as
 * floats, as ggml_get_rows does. */
static void get_row(const kiln_tensor *t, int64_t id, float *dst) {
    const uint64_t rb = kiln_type_row_bytes(t->type, (uint64_t)t->ne[0]);
    kiln_codec_get(t->type)->dequantize_row(t->data + (uint64_t)id * rb, dst, t->ne[0]);
}

static void embed(kiln_ctx *c, const int32_t *tokens, int64_t n) {
    const kiln_model *m = c->m;
    const int64_t d = m->hp.n_embd;
    for (int64_t t = 0; t < n; t++) {
        get_row(m->tok_embd, tokens[t], c->x + t * d);
        if (m->pos_embd) {
            get_row(m->pos_embd, c->n_past + t, c->xn);
            kiln_vec_add(c->x + t * d, c->xn, d);
        }
    }
}

/* The norm in front of a block or the output: RMS for llama and the
 * qwens, layer norm with bias for gpt2. */
static void norm_rows(const kiln_ctx *c, const kiln_tensor *w, const kiln_tensor *b, const float *x,
                      float *y, int64_t n) {
    const kiln_hparams *hp = &c->m->hp;
    const float *wv = (const float *)w->data, *bv = b ? (const float *)b->data : NULL;
    if (hp->arch != KILN_ARCH_GPT2) {
        kiln_rms_norm_rows(x, wv, y, n, hp->n_embd, hp->norm_eps);
        return;
    }
    for (int64_t t = 0; t < n; t++)
        kiln_layer_norm(x + t * hp->n_embd, wv, bv, y + t * hp->n_embd, hp->n_embd, hp->norm_eps);
}

/* A block over n rows of c->x, of which only rows [from, n) are read
 * afterwards: the last layer's FFN then runs on those rows alone, as
 * llama.cpp's graphs drop the rows that output nothing (ggml_get_rows of
 * inp_out_ids) after the last attention. The attention still takes every
 * row, since the KV cache needs each one's keys and values. */
static int block(kiln_ctx *c, int64_t il, int64_t n, int64_t from, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    if (hp->arch == KILN_ARCH_GEMMA2 || hp->arch == KILN_ARCH_GEMMA3) return kiln_gemma_block(c, il, n, err);
    if (hp->arch == KILN_ARCH_BITNET) return kiln_bitnet_block(c, il, n, err);
    if (hp->arch == KILN_ARCH_OLMO2) return kiln_olmo2_block(c, il, n, err);
    if (hp->arch == KILN_ARCH_DEEPSEEK2) return kiln_deepseek2_block(c, il, n, err);
    const kiln_layer *L = &c->m->layers[il];
    const int64_t d = hp->n_embd;
    norm_rows(c, L->attn_norm, L->attn_norm_b, c->x, c->xn, n);
    if (kiln_attention_block(c, il, n, err) < 0) return -1;
    float *x = c->x + from * d, *xn = c->xn + from * d, *tmp = c->tmp + from * d;
    const int64_t rows = n - from;
    if (rows == 0) return 0;
    kiln_scale_rows(tmp, rows * d, hp->residual_scale); /* granite */
    kiln_vec_add(x, tmp, rows * d);
    norm_rows(c, L->ffn_norm, L->ffn_norm_b, x, xn, rows);
    int r = L->ffn_gate_inp ? kiln_moe_block(c, il, xn, rows, tmp, err)
                            : kiln_ffn(c, L->ffn_gate, L->ffn_gate_b, L->ffn_up, L->ffn_up_b, L->ffn_down,
                                       L->ffn_down_b, xn, rows, tmp, err);
    if (r < 0) return -1;
    kiln_scale_rows(tmp, rows * d, hp->residual_scale);
    kiln_vec_add(x, tmp, rows * d);
    return 0;
}

/* The first of the n rows at n_past whose logits are wanted: rows at
 * positions below logits_from get none (kiln_ctx_params). */
static int64_t first_out(const kiln_ctx *c, int64_t n) {
    const int64_t skip = c->p.logits_from - c->n_past;
    return skip < 0 ? 0 : skip > n ? n : skip;
}

/* The first row of the last block whose output is read: the first row
 * with logits, or none (n) without logits. Every row while a hook or an
 * observer looks at the products or the blocks' outputs. */
static int64_t last_block_from(const kiln_ctx *c, int64_t n, bool logits) {
    if (c->p.hook || c->p.output_hook || c->p.layer_hook) return 0;
    return logits ? first_out(c, n) : n;
}

/* Every way of evaluating (kiln_eval, layer_major.c) runs blocks through
 * here, so the layer hook sees each one. */
int kiln_fwd_block(kiln_ctx *c, int64_t il, int64_t n, bool logits, kiln_err *err) {
    if (c->m->hp.arch == KILN_ARCH_DEEPSEEK4) /* its streams are hc rows wide: kiln_deepseek4_eval only */
        return kiln_fail(err, NULL, NULL, -1, "deepseek4 is evaluated whole (kiln_eval), not block by block");
    const int64_t from = il == c->m->hp.n_layer - 1 ? last_block_from(c, n, logits) : 0;
    if (block(c, il, n, from, err) < 0) return -1;
    if (c->p.layer_hook) c->p.layer_hook(c->p.observer_user, il, c->x, n, c->m->hp.n_embd);
    return 0;
}

void kiln_fwd_embed(kiln_ctx *c, const int32_t *tokens, int64_t n) {
    embed(c, tokens, n);
    if (c->m->hp.arch == KILN_ARCH_GEMMA2 || c->m->hp.arch == KILN_ARCH_GEMMA3) kiln_gemma_scale_embd(c, c->x, n);
    kiln_scale_rows(c->x, n * c->m->hp.n_embd, c->m->hp.embd_scale); /* granite */
}

void kiln_fwd_positions(kiln_ctx *c, int64_t n) {
    for (int64_t t = 0; t < n && c->rope.n_rot > 0; t++) {
        kiln_rope_angles(&c->rope, c->n_past + t, c->rope_cs + t * c->rope.n_rot);
        if (c->m->hp.n_swa > 0) kiln_rope_angles(&c->rope_swa, c->n_past + t, c->rope_cs_swa + t * c->rope.n_rot);
    }
}

/* The head: logits for the rows from first_out on (the rows before get
 * none, though a hook on output.weight still sees every row, in order). */
int kiln_fwd_head(kiln_ctx *c, int64_t n, float *logits, kiln_err *err) {
    const kiln_model *m = c->m;
    const bool hook = c->p.hook && c->p.hook_output;
    if (!logits && !hook) return 0;
    const int64_t from = first_out(c, n);
    /* rows below `from` are normed for the hook alone (the last block
     * left them unfinished otherwise, see last_block_from) */
    const int64_t d = m->hp.n_embd, first = hook ? 0 : from;
    norm_rows(c, m->output_norm, m->output_norm_b, c->x + first * d, c->xn + first * d, n - first);
    /* the skipped rows: the hook alone (no y, no product) */
    if (from > 0 && hook && kiln_fwd_matmul(c, m->output, -1, c->xn, from, NULL, err) < 0)
        return -1;
    float *rows = logits ? logits + from * m->hp.n_vocab : NULL;
    if (n > from && kiln_fwd_matmul(c, m->output, -1, c->xn + from * m->hp.n_embd, n - from, rows, err) < 0)
        return -1;
    if (rows && m->hp.final_softcap != 0.0f) kiln_softcap(rows, (n - from) * m->hp.n_vocab, m->hp.final_softcap);
    if (rows) kiln_granite_logits(&m->hp, rows, n - from);
    return 0;
}

/* Evaluates n <= n_batch tokens at positions n_past.. and advances n_past:
 * the token-major order. runtime/layer_major.c runs the same steps with
 * the loops over layers and sequences swapped. */
static int eval_chunk(kiln_ctx *c, const int32_t *tokens, int64_t n, float *logits, kiln_err *err) {
    kiln_fwd_embed(c, tokens, n);
    kiln_fwd_positions(c, n);
    for (int64_t il = 0; il < c->m->hp.n_layer; il++)
        if (kiln_fwd_block(c, il, n, logits != NULL, err) < 0) return -1;
    if (kiln_fwd_head(c, n, logits, err) < 0) return -1;
    c->n_past += n;
    return 0;
}

int kiln_eval(kiln_ctx *c, const int32_t *tokens, int64_t n, float *logits, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    if (n < 0) return kiln_fail(err, NULL, NULL, -1, "negative token count");
    if (n > c->n_ctx - c->n_past)
        return kiln_fail(err, NULL, "n_ctx", -1, "%lld tokens after %lld overflow a context of %lld",
                         (long long)n, (long long)c->n_past, (long long)c->n_ctx);
    if (c->m->pos_embd && c->n_past + n > hp->n_ctx_train)
        return kiln_fail(err, NULL, "position_embd.weight", -1, "position %lld beyond the %lld learned",
                         (long long)(c->n_past + n - 1), (long long)hp->n_ctx_train);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return kiln_fail(err, NULL, "tokens", i, "id %d is not in the vocabulary of %lld",
                             (int)tokens[i], (long long)hp->n_vocab);
    if (hp->arch == KILN_ARCH_DEEPSEEK4) return kiln_deepseek4_eval(c, tokens, n, logits, err); /* its own graph */
    for (int64_t i = 0; i < n; i += c->n_batch) {
        const int64_t len = n - i < c->n_batch ? n - i : c->n_batch;
        if (eval_chunk(c, tokens + i, len, logits ? logits + i * hp->n_vocab : NULL, err) < 0) return -1;
    }
    return 0;
}
