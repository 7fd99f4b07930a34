/* imatrix/run.c - the collection loop of `kiln imatrix` (see run.h):
 * chunk after chunk, hook on, perplexity of each chunk's second half,
 * checkpoints every N chunks, and resuming from one. */
#include "run.h"

#include "../core/progress.h"
#include "../runtime/layer_major.h"
#include "checkpoint.h"
#include "collect.h"
#include "ppl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct run_state {
    kiln_imx_collector col;
    kiln_imx_ckpt ck;      /* identity of this run, and where it stands */
    kiln_imx_ppl ppl;
    char **datasets;       /* the names the output records */
    uint64_t n_datasets;
    bool own_datasets;     /* read from a checkpoint */
} run_state;

/* Refuses a checkpoint that belongs to another run: its sums would be
 * silently mixed with statistics of a different model or text. */
static int check_resumable(const char *path, const kiln_imx_ckpt *have, const kiln_imx_ckpt *want,
                           int64_t n_chunks, kiln_err *err) {
    if (have->model_hash != want->model_hash)
        return kiln_fail(err, path, NULL, -1, "this checkpoint was made with another model");
    if (have->n_ctx != want->n_ctx)
        return kiln_fail(err, path, NULL, -1, "this checkpoint used chunks of %lld tokens, not %lld (-c)",
                         (long long)have->n_ctx, (long long)want->n_ctx);
    if (have->tokens_hash != want->tokens_hash)
        return kiln_fail(err, path, NULL, -1, "this checkpoint was made from another calibration text");
    if (have->process_output != want->process_output || have->with_sum != want->with_sum)
        return kiln_fail(err, path, NULL, -1, "this checkpoint was made with%s --process-output and with%s sums of x",
                         have->process_output ? "" : "out", have->with_sum ? "" : "out");
    if (have->chunks_done > n_chunks)
        return kiln_fail(err, path, NULL, -1, "this checkpoint already holds %lld chunks, more than the %lld asked for",
                         (long long)have->chunks_done, (long long)n_chunks);
    return 0;
}

/* Sets up the state: from the checkpoint when resuming one, else from the
 * --in-file statistics (if any). */
static int start_state(run_state *s, const kiln_model *m, const kiln_imx_tokens *tk, const kiln_imx_run_params *p,
                       kiln_imx_run_result *r, kiln_err *err) {
    kiln_imx_collector_init(&s->col, m->gguf, p->process_output, p->with_sum);
    s->ck = (kiln_imx_ckpt){
        .model_hash = kiln_imx_model_hash(m->gguf),
        .tokens_hash = kiln_imx_tokens_hash(tk),
        .n_ctx = tk->n_ctx,
        .process_output = p->process_output,
        .with_sum = p->with_sum,
    };
    s->datasets = (char **)p->datasets;
    s->n_datasets = p->n_datasets;
    FILE *probe = p->resume && p->ckpt_path ? fopen(p->ckpt_path, "rb") : NULL;
    if (probe) {
        fclose(probe);
        kiln_imx_ckpt have;
        if (kiln_imx_ckpt_read(p->ckpt_path, &s->col, &have, err) < 0) return -1;
        if (check_resumable(p->ckpt_path, &have, &s->ck, tk->n_chunks, err) < 0) {
            kiln_imx_ckpt_clear(&have);
            return -1;
        }
        s->ck.chunks_done = have.chunks_done;
        s->ck.chunk_base = have.chunk_base;
        s->ppl = (kiln_imx_ppl){have.nll, have.nll2, have.ppl_count};
        s->datasets = have.datasets;
        s->n_datasets = have.n_datasets;
        s->own_datasets = true;
        r->resumed = true;
        r->resumed_from = have.chunks_done;
        return 0;
    }
    if (p->start) {
        if (kiln_imx_collector_add_imatrix(&s->col, p->start, err) < 0) return -1;
        s->ck.chunk_base = p->start->chunk_count;
    }
    return 0;
}

static int save(run_state *s, const char *path, kiln_err *err) {
    s->ck.nll = s->ppl.nll;
    s->ck.nll2 = s->ppl.nll2;
    s->ck.ppl_count = s->ppl.count;
    s->ck.datasets = s->datasets;
    s->ck.n_datasets = s->n_datasets;
    return kiln_imx_ckpt_write(path, &s->col, &s->ck, err);
}

static void end_state(run_state *s) {
    kiln_imx_collector_free(&s->col);
    if (s->own_datasets) {
        s->ck.datasets = s->datasets;
        s->ck.n_datasets = s->n_datasets;
        kiln_imx_ckpt_clear(&s->ck);
    }
}

/* The flash-attention kernel llama-imatrix's batches take. It evaluates
 * max(1, 2048 / n_ctx) chunks at once as parallel sequences, each with its
 * own KV cache, and cuts the 2048-token batch into 512-token ubatches that
 * take the same number of tokens from every sequence (llama-kv-cache's
 * split_equal). Each sequence's attention thus sees 512 / n_seq queries at
 * a time, and ggml uses its tiled kernel for 64 or more (as kiln's
 * KILN_ATTN_LLAMACPP does for a whole chunk: every query's numbers depend
 * only on its own scores), its one_chunk kernel below: -c 128 gives 32
 * queries (one_chunk), -c 512 gives 128 (tiled). */
static kiln_attention imatrix_attention(int64_t n_ctx) {
    int64_t n_seq = 2048 / n_ctx > 1 ? 2048 / n_ctx : 1;
    return 512 / n_seq >= 64 ? KILN_ATTN_LLAMACPP : KILN_ATTN_LLAMACPP_ONE_CHUNK;
}

/* Evaluates chunks [from, to) and returns how many were done. */
static int evaluate(run_state *s, const kiln_model *m, const kiln_imx_tokens *tk, const kiln_imx_run_params *p,
                    kiln_imx_run_result *r, kiln_err *err) {
    /* only the second half of a chunk is scored (kiln_imx_ppl_add): the
     * output product of the first is skipped, 3% of a 1B model's work */
    kiln_ctx_params cp = {.n_ctx = tk->n_ctx, .mode = p->mode, .hook = kiln_imx_hook, .hook_user = &s->col,
                          .hook_output = p->process_output, .attention = imatrix_attention(tk->n_ctx),
                          .logits_from = tk->n_ctx / 2};
    kiln_ctx *ctx = kiln_ctx_new(m, &cp, err);
    if (!ctx) return -1;
    const int64_t n_vocab = m->hp.n_vocab;
    int32_t *chunk = malloc((size_t)tk->n_ctx * sizeof *chunk);
    float *logits = p->compute_ppl ? malloc((size_t)(tk->n_ctx * n_vocab) * sizeof *logits) : NULL;
    int rc = chunk && (logits || !p->compute_ppl) ? 0 : kiln_fail(err, NULL, NULL, -1, "out of memory for the logits");
    char label[32] = "imatrix";
    kiln_progress bar;
    kiln_progress_start(&bar, label, (uint64_t)((tk->n_chunks - s->ck.chunks_done) * tk->n_ctx), "tok");
    double t0 = kiln_now();
    int64_t fresh = 0;
    for (int64_t c = s->ck.chunks_done; rc == 0 && c < tk->n_chunks; c++) {
        kiln_imx_chunk(tk, c, chunk);
        s->col.chunk = c;
        kiln_ctx_clear(ctx);
        if (kiln_eval(ctx, chunk, tk->n_ctx, logits, err) < 0) {
            rc = -1;
            break;
        }
        if (s->col.failed) {
            *err = s->col.err;
            rc = -1;
            break;
        }
        if (logits) {
            /* Scored against the text's own tokens; the BOS put over the
             * first one is never a target (scoring starts mid-chunk). */
            kiln_imx_ppl_add(&s->ppl, logits, tk->ids + c * tk->n_ctx, tk->n_ctx, n_vocab);
            snprintf(label, sizeof label, "imatrix ppl %.5g", kiln_imx_ppl_value(&s->ppl));
        }
        s->ck.chunks_done = c + 1;
        r->tokens += tk->n_ctx;
        fresh++;
        kiln_progress_add(&bar, (uint64_t)tk->n_ctx);
        if (p->on_chunk) p->on_chunk(p->user, c + 1, tk->n_chunks, kiln_imx_ppl_value(&s->ppl));
        if (p->ckpt_path && p->save_every && (c + 1) % p->save_every == 0 && save(s, p->ckpt_path, err) < 0) rc = -1;
        if (p->stop_after > 0 && fresh == p->stop_after) break;
    }
    r->seconds = kiln_now() - t0;
    kiln_progress_end(&bar);
    free(chunk);
    free(logits);
    kiln_ctx_free(ctx);
    return rc;
}

/* The layer-major pass: every remaining chunk at once (see run.h). */
typedef struct lm_state {
    run_state *s;
    const kiln_imx_tokens *tk;
    int64_t n_vocab;
    int64_t first;       /* chunk of sequence 0 */
    kiln_progress bar;
    char label[32];
} lm_state;

static void lm_on_seq(void *user, int64_t seq) {
    lm_state *l = user;
    l->s->col.chunk = l->first + seq;
}

static int lm_on_logits(void *user, int64_t seq, const float *logits, kiln_err *err) {
    (void)err;
    lm_state *l = user;
    const int64_t n_ctx = l->tk->n_ctx;
    kiln_imx_ppl_add(&l->s->ppl, logits, l->tk->ids + (l->first + seq) * n_ctx, n_ctx, l->n_vocab);
    return 0;
}

static void lm_on_layer(void *user, int64_t layer, int64_t n_layer) {
    (void)layer, (void)n_layer;
    lm_state *l = user;
    kiln_progress_add(&l->bar, 1);
}

static int evaluate_layer_major(run_state *s, const kiln_model *m, const kiln_imx_tokens *tk,
                                const kiln_imx_run_params *p, kiln_imx_run_result *r, kiln_err *err) {
    if (p->save_every || p->stop_after > 0)
        return kiln_fail(err, NULL, NULL, -1, "a layer-major pass (--max-memory) finishes all chunks together: "
                         "it cannot checkpoint every N chunks or stop after some");
    lm_state l = {.s = s, .tk = tk, .n_vocab = m->hp.n_vocab, .first = s->ck.chunks_done};
    const int64_t n_seqs = tk->n_chunks - l.first;
    int32_t *ids = malloc((size_t)(n_seqs * tk->n_ctx) * sizeof *ids + 1);
    if (!ids) return kiln_fail(err, NULL, NULL, -1, "out of memory for the chunks' tokens");
    for (int64_t c = 0; c < n_seqs; c++) kiln_imx_chunk(tk, l.first + c, ids + c * tk->n_ctx);
    kiln_lm_params lp = {
        .ctx = {.n_ctx = tk->n_ctx, .mode = p->mode, .hook = kiln_imx_hook, .hook_user = &s->col,
                .hook_output = p->process_output, .attention = imatrix_attention(tk->n_ctx)},
        .max_memory = p->max_memory, .scratch_dir = p->scratch_dir,
        .on_seq = lm_on_seq, .on_logits = p->compute_ppl ? lm_on_logits : NULL, .on_layer = lm_on_layer, .user = &l,
    };
    kiln_progress_start(&l.bar, "imatrix (by layer)", (uint64_t)m->hp.n_layer, "layers");
    double t0 = kiln_now();
    int rc = kiln_eval_layer_major(m, &lp, ids, n_seqs, NULL, err);
    r->seconds = kiln_now() - t0;
    kiln_progress_end(&l.bar);
    free(ids);
    if (rc == 0 && s->col.failed) {
        *err = s->col.err;
        rc = -1;
    }
    if (rc < 0) return -1;
    s->ck.chunks_done = tk->n_chunks;
    r->tokens += n_seqs * tk->n_ctx;
    if (p->on_chunk) p->on_chunk(p->user, tk->n_chunks, tk->n_chunks, kiln_imx_ppl_value(&s->ppl));
    return 0;
}

int kiln_imx_run(const kiln_model *m, const kiln_imx_tokens *tk, const kiln_imx_run_params *p,
                 kiln_imx_run_result *r, kiln_err *err) {
    memset(r, 0, sizeof *r);
    run_state s = {0};
    int rc = start_state(&s, m, tk, p, r, err);
    if (rc == 0) rc = p->layer_major ? evaluate_layer_major(&s, m, tk, p, r, err) : evaluate(&s, m, tk, p, r, err);
    r->chunks_done = s.ck.chunks_done;
    r->ppl = kiln_imx_ppl_value(&s.ppl);
    r->ppl_err = kiln_imx_ppl_error(&s.ppl);
    if (rc == 0 && s.ck.chunks_done == tk->n_chunks) {
        uint32_t count = s.ck.chunk_base + (uint32_t)s.ck.chunks_done;
        r->im = kiln_imx_collector_export(&s.col, count, (uint32_t)tk->n_ctx, (const char *const *)s.datasets,
                                          s.n_datasets, err);
        if (!r->im) rc = -1;
    }
    end_state(&s);
    return rc;
}
