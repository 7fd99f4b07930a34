/* golden/perplexity.c - llama-perplexity's method over kiln's runtime, with
 * KLD base files written or compared against (see perplexity.h). */
#include "perplexity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/progress.h"
#include "../core/xxh64.h"
#include "../runtime/layer_major.h"
#include "fingerprint.h"
#include "logits_file.h"

#define KLD_BASE_KIND "kld-base"

uint64_t kiln_text_hash(const char *text, size_t len) {
    kiln_xxh64 h;
    kiln_xxh64_init(&h);
    kiln_xxh64_update(&h, text, len);
    return kiln_xxh64_digest(&h);
}

void kiln_ppl_result_free(kiln_ppl_result *r) {
    json_decref(r->model);
    json_decref(r->base_model);
    r->model = r->base_model = NULL;
}

/* State shared by the two modes' chunk loops. */
typedef struct run {
    const kiln_model *m;
    const kiln_ppl_params *p;
    kiln_ctx *ctx;
    int64_t n_vocab, n_ctx, n_batch, first, n_score;
    float *logits;          /* n_ctx x n_vocab */
    double *nll;            /* n_score */
    kiln_pos_cmp *cmp;      /* n_score, KLD mode */
    double nll_sum, nll2_sum;
    uint64_t count;
    kiln_cmp_acc acc;
    double t0;
} run;

/* llama-perplexity's defaults: F16 KV cache, flash attention */
static kiln_ctx_params ctx_params(const kiln_ppl_params *p, int64_t n_ctx) {
    /* rows before the scored half are never read: no output product for them */
    return (kiln_ctx_params){.n_ctx = n_ctx, .mode = p->mode, .attention = KILN_ATTN_LLAMACPP,
                             .logits_from = n_ctx / 2};
}

static int run_init(run *R, const kiln_model *m, const kiln_ppl_params *p, int64_t n_ctx, kiln_err *err) {
    memset(R, 0, sizeof *R);
    R->m = m;
    R->p = p;
    R->n_vocab = m->hp.n_vocab;
    R->n_ctx = n_ctx;
    R->n_batch = p->n_batch > 0 && p->n_batch < n_ctx ? p->n_batch : n_ctx;
    R->first = n_ctx / 2;
    R->n_score = n_ctx - 1 - R->first;
    R->nll = malloc((size_t)R->n_score * sizeof *R->nll);
    R->cmp = malloc((size_t)R->n_score * sizeof *R->cmp);
    if (!R->nll || !R->cmp) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    R->t0 = kiln_now();
    if (p->layer_major) return 0; /* kiln_eval_layer_major brings its own */
    kiln_ctx_params cp = ctx_params(p, n_ctx);
    R->ctx = kiln_ctx_new(m, &cp, err);
    if (!R->ctx) return -1;
    R->logits = malloc((size_t)n_ctx * R->n_vocab * sizeof *R->logits);
    if (!R->logits) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    return 0;
}

static void run_free(run *R) {
    if (R->ctx) kiln_ctx_free(R->ctx);
    free(R->logits);
    free(R->nll);
    free(R->cmp);
    kiln_cmp_free(&R->acc);
}

/* Evaluates one chunk from an empty cache, n_batch tokens per call, as
 * llama-perplexity's batches do. */
static int eval_chunk(run *R, const int32_t *ids, kiln_err *err) {
    kiln_ctx_clear(R->ctx);
    for (int64_t j = 0; j < R->n_ctx; j += R->n_batch) {
        int64_t n = R->n_ctx - j < R->n_batch ? R->n_ctx - j : R->n_batch;
        if (kiln_eval(R->ctx, ids + j, n, R->logits + j * R->n_vocab, err)) return -1;
    }
    return 0;
}

/* Scores the second half of the chunk just evaluated; with base rows,
 * compares them too. Sums run in position order, so results do not
 * depend on the thread count. */
static int score_chunk(run *R, const int32_t *ids, const float *logits, const float *base, kiln_err *err) {
    const float *rows = logits + R->first * R->n_vocab;
    const int32_t *next = ids + R->first + 1;
    if (base) {
        kiln_compare_rows(base, rows, R->n_score, R->n_vocab, next, R->cmp);
        for (int64_t i = 0; i < R->n_score; i++) {
            if (kiln_cmp_add(&R->acc, &R->cmp[i], R->n_vocab, err)) return -1;
            R->nll[i] = R->cmp[i].nll_test;
        }
    } else {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < R->n_score; i++) R->nll[i] = kiln_nll(rows + i * R->n_vocab, R->n_vocab, next[i]);
    }
    for (int64_t i = 0; i < R->n_score; i++) {
        R->nll_sum += R->nll[i];
        R->nll2_sum += R->nll[i] * R->nll[i];
    }
    R->count += (uint64_t)R->n_score;
    return 0;
}

static void report_chunk(run *R, int64_t chunk, int64_t n_chunks, bool kld) {
    if (!R->p->on_chunk) return;
    kiln_ppl_progress pr = {.chunk = chunk, .n_chunks = n_chunks, .ppl = exp(R->nll_sum / R->count),
                            .kld = kld ? &R->acc : NULL, .seconds = kiln_now() - R->t0};
    R->p->on_chunk(R->p->user, &pr);
}

static void finish(run *R, int64_t n_chunks, kiln_ppl_result *r) {
    r->seconds = kiln_now() - R->t0;
    r->n_ctx = R->n_ctx;
    r->n_chunks = n_chunks;
    r->n_tokens = n_chunks * R->n_ctx;
    r->tokens_per_second = r->seconds > 0 ? r->n_tokens / r->seconds : 0;
    r->count = R->count;
    double mean = R->nll_sum / R->count, var = R->nll2_sum / R->count - mean * mean;
    r->ppl = exp(mean);
    r->ppl_err = var > 0 && R->count > 1 ? r->ppl * sqrt(var / (R->count - 1)) : NAN;
}

/* Everything after a text-mode chunk's logits: score, save, report. */
typedef struct text_chunks {
    run *R;
    const int32_t *ids;      /* all chunks' tokens, BOS in place */
    kiln_lgf_writer *save;
    int64_t n_chunks;
} text_chunks;

static int text_chunk_done(void *user, int64_t c, const float *logits, kiln_err *err) {
    text_chunks *t = user;
    run *R = t->R;
    const int32_t *ids = t->ids + c * R->n_ctx;
    if (score_chunk(R, ids, logits, NULL, err)) return -1;
    if (t->save && kiln_lgf_put(t->save, ids, (uint32_t)R->n_ctx, (uint32_t)R->first, (uint32_t)R->n_score,
                                logits + R->first * R->n_vocab, err))
        return -1;
    report_chunk(R, c + 1, t->n_chunks, false);
    return 0;
}

/* The chunks all together, layer by layer (see runtime/layer_major.h). */
static int eval_layer_major(run *R, const int32_t *ids, int64_t n_chunks,
                            int (*done)(void *, int64_t, const float *, kiln_err *), void *user, kiln_err *err) {
    kiln_lm_params lp = {.ctx = ctx_params(R->p, R->n_ctx), .n_batch = R->n_batch, .max_memory = R->p->max_memory,
                         .scratch_dir = R->p->scratch_dir, .on_logits = done, .user = user};
    return kiln_eval_layer_major(R->m, &lp, ids, n_chunks, NULL, err);
}

static int text_mode(const kiln_model *m, const char *text, size_t len, const kiln_ppl_params *p,
                     kiln_ppl_result *r, kiln_err *err) {
    int32_t *tokens = NULL;
    size_t n_tokens = 0;
    if (kiln_tokenize(m->tok, text, len, true, false, &tokens, &n_tokens, err)) return -1;
    int64_t n_ctx = p->n_ctx;
    r->n_text_tokens = (int64_t)n_tokens;
    r->add_bos = kiln_tokenizer_add_bos(m->tok);
    if ((int64_t)n_tokens < 2 * n_ctx) {
        free(tokens);
        return kiln_fail(err, NULL, NULL, -1,
                         "the text tokenizes to only %zu tokens; a context of %lld needs at least %lld", n_tokens,
                         (long long)n_ctx, 2 * (long long)n_ctx);
    }
    int64_t n_chunks = (int64_t)n_tokens / n_ctx;
    if (p->n_chunks > 0 && p->n_chunks < n_chunks) n_chunks = p->n_chunks;
    int32_t bos = kiln_tokenizer_bos(m->tok);

    run R;
    kiln_lgf_writer *save = NULL;
    /* every chunk's tokens, the first replaced by BOS as llama-perplexity does */
    int32_t *ids = malloc((size_t)(n_chunks * n_ctx) * sizeof *ids);
    for (int64_t c = 0; ids && c < n_chunks; c++) {
        memcpy(ids + c * n_ctx, tokens + c * n_ctx, (size_t)n_ctx * sizeof *ids);
        if (r->add_bos && bos >= 0) ids[c * n_ctx] = bos;
    }
    int rc = ids ? run_init(&R, m, p, n_ctx, err) : kiln_fail(err, NULL, NULL, -1, "out of memory");
    if (!rc && p->save_path) {
        char hash[17];
        snprintf(hash, sizeof hash, "%016llx", (unsigned long long)kiln_text_hash(text, len));
        kiln_lgf_header h = {
            .n_vocab = (uint32_t)R.n_vocab,
            .n_records = (uint32_t)n_chunks,
            .f16 = p->save_f16,
            .meta = json_pack("{s:s, s:O, s:s, s:I, s:I, s:I, s:I, s:I, s:b}", "kind", KLD_BASE_KIND, "model",
                              r->model, "text_xxh64", hash, "text_bytes", (json_int_t)len, "n_text_tokens",
                              (json_int_t)n_tokens, "n_ctx", (json_int_t)n_ctx, "n_chunks", (json_int_t)n_chunks,
                              "first", (json_int_t)R.first, "add_bos", r->add_bos),
        };
        if (!h.meta)
            rc = kiln_fail(err, p->save_path, NULL, -1, "out of memory");
        else if (!(save = kiln_lgf_create(p->save_path, &h, p->force, err)))
            rc = -1;
        json_decref(h.meta);
    }
    text_chunks tc = {&R, ids, save, n_chunks};
    if (!rc && p->layer_major) rc = eval_layer_major(&R, ids, n_chunks, text_chunk_done, &tc, err);
    for (int64_t c = 0; !rc && !p->layer_major && c < n_chunks; c++)
        rc = eval_chunk(&R, ids + c * n_ctx, err) || text_chunk_done(&tc, c, R.logits, err);
    if (!rc) finish(&R, n_chunks, r);
    if (save) {
        if (rc) kiln_lgf_abort(save);
        else rc = kiln_lgf_finish(save, err);
    }
    if (ids) run_free(&R);
    free(ids);
    free(tokens);
    return rc ? -1 : 0;
}

static int64_t meta_int(const json_t *meta, const char *key) {
    const json_t *v = json_object_get(meta, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : -1;
}

/* Checks a base file's header against the model, the text and the
 * command line; returns its n_ctx or -1. */
static int64_t check_base(const kiln_model *m, const char *text, size_t len, const kiln_ppl_params *p,
                          const kiln_lgf_header *h, kiln_ppl_result *r, kiln_err *err) {
    const char *path = p->base_path;
    if (strcmp(kiln_lgf_kind(h), KLD_BASE_KIND))
        return kiln_fail(err, path, "kind", -1, "is \"%s\", not a KL-divergence base file (--save-logits writes those)",
                         kiln_lgf_kind(h));
    if ((int64_t)h->n_vocab != m->hp.n_vocab)
        return kiln_fail(err, path, "n_vocab", 16, "base has %u tokens, the model %lld", h->n_vocab,
                         (long long)m->hp.n_vocab);
    r->base_model = json_incref(json_object_get(h->meta, "model"));
    if (!json_equal(json_object_get(r->base_model, "vocab_xxh64"), json_object_get(r->model, "vocab_xxh64")))
        return kiln_fail(err, path, "model.vocab_xxh64", -1, "the base model has another vocabulary");
    int64_t n_ctx = meta_int(h->meta, "n_ctx");
    if (n_ctx < 4 || n_ctx > (1 << 24) || meta_int(h->meta, "first") != n_ctx / 2)
        return kiln_fail(err, path, "n_ctx", -1, "missing or invalid");
    if (p->n_ctx > 0 && p->n_ctx != n_ctx)
        return kiln_fail(err, path, "n_ctx", -1, "base was computed with a context of %lld, not %lld",
                         (long long)n_ctx, (long long)p->n_ctx);
    if (text) {
        char hash[17];
        snprintf(hash, sizeof hash, "%016llx", (unsigned long long)kiln_text_hash(text, len));
        const char *want = json_string_value(json_object_get(h->meta, "text_xxh64"));
        if (!want || strcmp(want, hash))
            return kiln_fail(err, path, "text_xxh64", -1, "base was computed on another text");
    }
    r->n_text_tokens = meta_int(h->meta, "n_text_tokens");
    r->add_bos = json_is_true(json_object_get(h->meta, "add_bos"));
    return n_ctx;
}

/* A base file's next record, checked against the run's shape. */
static int next_record(kiln_lgf_reader *rd, const run *R, const char *path, int64_t c, kiln_lgf_record *rec,
                       kiln_err *err) {
    if (kiln_lgf_next(rd, rec, err) <= 0) return -1;
    if (rec->n_ids != R->n_ctx || rec->row0 != R->first || rec->n_rows != R->n_score)
        return kiln_fail(err, path, "record", -1, "chunk %lld has %u tokens and rows %u+%u; expected %lld and %lld+%lld",
                         (long long)c, rec->n_ids, rec->row0, rec->n_rows, (long long)R->n_ctx, (long long)R->first,
                         (long long)R->n_score);
    return 0;
}

/* KLD mode, layer by layer: the base is read twice, once for the chunks'
 * tokens (needed before the first layer) and once, record by record, for
 * the base logits as each chunk's own come out. */
typedef struct kld_chunks {
    run *R;
    kiln_lgf_reader *rd;
    const char *path;
    int64_t n_chunks;
} kld_chunks;

static int kld_chunk_done(void *user, int64_t c, const float *logits, kiln_err *err) {
    kld_chunks *k = user;
    kiln_lgf_record rec;
    if (next_record(k->rd, k->R, k->path, c, &rec, err) || score_chunk(k->R, rec.ids, logits, rec.rows, err))
        return -1;
    report_chunk(k->R, c + 1, k->n_chunks, true);
    return 0;
}

static int kld_layer_major(run *R, kiln_lgf_reader *rd, int64_t n_chunks, kiln_err *err) {
    const char *path = R->p->base_path;
    int32_t *ids = malloc((size_t)(n_chunks * R->n_ctx) * sizeof *ids + 1);
    if (!ids) return kiln_fail(err, path, NULL, -1, "out of memory for the chunks' tokens");
    int rc = 0;
    for (int64_t c = 0; !rc && c < n_chunks; c++) {
        kiln_lgf_record rec;
        rc = next_record(rd, R, path, c, &rec, err);
        if (!rc) memcpy(ids + c * R->n_ctx, rec.ids, (size_t)R->n_ctx * sizeof *ids);
    }
    kiln_lgf_header h2;
    kld_chunks k = {R, rc ? NULL : kiln_lgf_open(path, &h2, err), path, n_chunks};
    if (!rc && !k.rd) rc = -1;
    if (!rc) rc = eval_layer_major(R, ids, n_chunks, kld_chunk_done, &k, err);
    if (k.rd) {
        kiln_lgf_close(k.rd);
        kiln_lgf_header_free(&h2);
    }
    free(ids);
    return rc;
}

static int kld_mode(const kiln_model *m, const char *text, size_t len, const kiln_ppl_params *p,
                    kiln_ppl_result *r, kiln_err *err) {
    kiln_lgf_header h;
    kiln_lgf_reader *rd = kiln_lgf_open(p->base_path, &h, err);
    if (!rd) return -1;
    int64_t n_ctx = check_base(m, text, len, p, &h, r, err);
    run R;
    int rc = n_ctx < 0 ? -1 : run_init(&R, m, p, n_ctx, err);
    int64_t n_chunks = h.n_records;
    if (p->n_chunks > 0 && p->n_chunks < n_chunks) n_chunks = p->n_chunks;
    if (!rc && n_chunks == 0) rc = kiln_fail(err, p->base_path, "n_records", 20, "holds no chunks");
    if (!rc && p->layer_major) rc = kld_layer_major(&R, rd, n_chunks, err);
    for (int64_t c = 0; !rc && !p->layer_major && c < n_chunks; c++) {
        kiln_lgf_record rec;
        rc = next_record(rd, &R, p->base_path, c, &rec, err) || eval_chunk(&R, rec.ids, err) ||
             score_chunk(&R, rec.ids, R.logits, rec.rows, err);
        if (!rc) report_chunk(&R, c + 1, n_chunks, true);
    }
    /* a complete run also proves the file intact to its last byte */
    if (!rc && n_chunks == h.n_records) {
        kiln_lgf_record rec;
        rc = kiln_lgf_next(rd, &rec, err) == 0 ? 0 : -1;
        if (rc && !err->msg[0]) kiln_fail(err, p->base_path, NULL, -1, "more chunks than announced");
    }
    if (!rc) {
        finish(&R, n_chunks, r);
        r->has_kld = true;
        kiln_cmp_summarize(&R.acc, &r->kld);
    }
    if (n_ctx >= 0) run_free(&R);
    kiln_lgf_close(rd);
    kiln_lgf_header_free(&h);
    return rc ? -1 : 0;
}

int kiln_perplexity(const kiln_model *m, const char *text, size_t len, const kiln_ppl_params *p,
                    kiln_ppl_result *r, kiln_err *err) {
    memset(r, 0, sizeof *r);
    if (!p->base_path && !text) return kiln_fail(err, NULL, NULL, -1, "no text to score");
    if (!p->base_path && p->n_ctx < 4) return kiln_fail(err, NULL, NULL, -1, "context of %lld is too small", (long long)p->n_ctx);
    if (p->base_path && p->save_path)
        return kiln_fail(err, NULL, NULL, -1, "cannot save a base and compare against one in the same run");
    r->model = kiln_fingerprint(m->gguf, err);
    if (!r->model) return -1;
    int rc = p->base_path ? kld_mode(m, text, len, p, r, err) : text_mode(m, text, len, p, r, err);
    if (rc) kiln_ppl_result_free(r);
    return rc;
}
