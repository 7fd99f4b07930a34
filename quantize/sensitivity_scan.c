/* quantize/sensitivity_scan.c - the sensitivity scan of `kiln quantize
 * --analyze` (method and cost in sensitivity_scan.h).
 *
 * Order of work: every input is checked (types, model, imatrix, text)
 * before the first forward pass; then one reference pass keeps what the
 * measurements start from; then tensor after tensor, in model order: its
 * f32 weights, each candidate type quantized and its error energy E, the
 * measured types re-run from the tensor's layer, and the rest placed on
 * the measured E -> ΔKLD curve. Resident memory: the mapped model, one f32
 * copy and one quantized copy of the largest tensor, the residual streams
 * entering each layer (layers x tokens x n_embd floats) and the reference
 * logits of the scored positions. */
#include "sensitivity_scan.h"

#include "../codec/codec.h"
#include "../core/progress.h"
#include "../core/types.h"
#include "../golden/fingerprint.h"
#include "../golden/kld.h"
#include "../imatrix/calib.h"
#include "../imatrix/chunks.h"
#include "../imatrix/collect.h"
#include "../imatrix/imatrix_check.h"
#include "../runtime/forward_impl.h"
#include "policy.h"
#include "quantize_model.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Multiply-adds the automatic choices may spend on measurements: about
 * four minutes on two cores of the reference machine. Small models get
 * every type measured on up to four chunks; a 1B model one type per
 * tensor on one chunk of 128 tokens. */
#define SCAN_BUDGET_MACS 1.0e13
#define SCAN_DEFAULT_CTX 512
#define SCAN_DEFAULT_CHUNKS 4
#define SCAN_MIN_AUTO_CTX 128
/* What the automatic choices may keep of activations and reference
 * logits; a large vocabulary costs chunks (4 x 255 positions of a
 * 152k vocabulary would be 620 MB of logits). */
#define SCAN_AUTO_MEMORY (512.0 * 1024 * 1024)

static const kiln_type DEFAULT_TYPES[] = {
    KILN_Q2_K, KILN_IQ2_XXS, KILN_IQ2_XS, KILN_IQ2_S, KILN_Q3_K, KILN_IQ3_XXS,
    KILN_IQ3_S, KILN_Q4_K, KILN_IQ4_XS, KILN_Q5_K, KILN_Q6_K, KILN_Q8_0,
};

size_t kiln_scan_default_types(bool have_imatrix, kiln_type *out) {
    size_t n = 0;
    for (size_t i = 0; i < sizeof DEFAULT_TYPES / sizeof *DEFAULT_TYPES; i++)
        if (have_imatrix || !kiln_policy_type_needs_imatrix(DEFAULT_TYPES[i], NULL)) out[n++] = DEFAULT_TYPES[i];
    return n;
}

/* ---- the pure pieces ------------------------------------------------------ */

double kiln_scan_error_energy(const float *ref, const float *deq, int64_t n_rows, int64_t n_cols, const double *w,
                              const double *row_w) {
    double total = 0;
    for (int64_t r = 0; r < n_rows; r++) {
        const float *a = ref + r * n_cols, *b = deq + r * n_cols;
        double row = 0;
        for (int64_t c = 0; c < n_cols; c++) {
            const double d = (double)b[c] - (double)a[c];
            row += (w ? w[c] : 1.0) * d * d;
        }
        total += (row_w ? row_w[r] : 1.0) * row;
    }
    return total;
}

void kiln_scan_estimate(const double *e, double *dkld, const bool *measured, const double *factor, size_t n) {
    double log_g = 0;
    int used = 0;
    for (size_t i = 0; i < n; i++)
        if (measured[i] && e[i] > 0 && dkld[i] > 0) log_g += log(dkld[i] / (factor[i] * e[i])), used++;
    for (size_t i = 0; i < n; i++) {
        if (measured[i]) continue;
        /* no measurement carried a signal: the logits do not see this tensor */
        dkld[i] = used && e[i] > 0 ? exp(log_g / used) * factor[i] * e[i] : 0;
    }
}

int kiln_scan_type_factors(const kiln_type *types, const double *e, const double *dkld, const bool *anchor,
                           const size_t *tensor_start, size_t n_tensors, double *factor) {
    double sum[KILN_TYPE_COUNT] = {0};
    int count[KILN_TYPE_COUNT] = {0}, n_used = 0;
    for (size_t t = 0; t < n_tensors; t++) {
        const size_t a = tensor_start[t], b = tensor_start[t + 1];
        double log_g = 0;
        int used = 0;
        for (size_t i = a; i < b; i++)
            if (anchor[i] && e[i] > 0 && dkld[i] > 0) log_g += log(dkld[i] / e[i]), used++;
        if (!used) continue;
        log_g /= used;
        n_used++;
        for (size_t i = a; i < b; i++)
            if (e[i] > 0 && dkld[i] > 0) sum[types[i]] += log(dkld[i] / e[i]) - log_g, count[types[i]]++;
    }
    for (int ty = 0; ty < KILN_TYPE_COUNT; ty++) factor[ty] = count[ty] ? exp(sum[ty] / count[ty]) : 1.0;
    return n_used;
}

void kiln_scan_pick_measured(size_t n, size_t k, bool *pick) {
    for (size_t i = 0; i < n; i++) pick[i] = k >= n;
    if (k >= n || k == 0) return;
    /* k equal slices of the list, each measured at its middle (rounded
     * down: towards the fewer bits, where the curve bends most) */
    for (size_t j = 0; j < k; j++) pick[(2 * j * n + n - k) / (2 * k)] = true;
}

/* ---- one scan's state ------------------------------------------------------ */

/* A tensor the scan gives rows to. */
typedef struct scan_tensor {
    const kiln_tensor *t;
    bool calibrate;      /* every type measured: the per-type factors come from these */
    size_t row0;         /* its first row in the result */
    char *name;          /* t's name, NUL-terminated (GGUF names are not) */
    int64_t from;        /* layer whose input the re-run starts from: -1 embeddings, n_layer the head */
    int64_t n_mat;       /* experts of a 3-D tensor, else 1 */
    const kiln_imatrix_entry *im; /* --imatrix entry used to quantize, or NULL */
    kiln_type types[KILN_TYPE_COUNT];
    size_t n_types;
    double rerun_macs;   /* multiply-adds per token of one measurement */
} scan_tensor;

typedef struct scan {
    const char *model_path;
    const kiln_scan_params *p;
    kiln_model *m;
    kiln_model *view;        /* m with one tensor swapped during a measurement */
    kiln_imatrix *im;
    kiln_imx_tokens tk;
    scan_tensor *ts;
    size_t n_ts, cap_ts;
    kiln_type types[KILN_TYPE_COUNT];
    size_t n_types;
    int64_t n_ctx, n_chunks, first, n_score, measure;
    float *acts;             /* (n_layer + 1) x n_chunks x n_ctx x n_embd: the input of each layer, then of the head */
    float *ref_logits;       /* n_chunks x n_score x n_vocab */
    float *logits, *cur;     /* one chunk's logits and residual stream */
    int32_t *ids;            /* one chunk's tokens */
    kiln_pos_cmp *cmp;
    double *token_counts;    /* n_vocab: how often each token is embedded */
    kiln_imx_collector col;  /* sum of x^2 per column of every product's input */
    double *row_e;           /* per row of the result: E */
    bool *row_measured;      /* per row: measured (else estimated) */
    bool *row_anchor;        /* per row: a type the ordinary tensors measure */
    double measure_seconds;
    bool col_init;
} scan;

/* ---- checks before any work ------------------------------------------------ */

static bool is_float_type(uint32_t t) {
    return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16;
}

static int check_types(scan *S, kiln_err *err) {
    const kiln_scan_params *p = S->p;
    if (!p->n_types) {
        S->n_types = kiln_scan_default_types(S->im != NULL, S->types);
        return 0;
    }
    if (p->n_types > KILN_TYPE_COUNT) return kiln_fail(err, NULL, "types", -1, "too many candidate types");
    for (size_t i = 0; i < p->n_types; i++) {
        const kiln_type t = p->types[i];
        for (size_t j = 0; j < i; j++)
            if (p->types[j] == t) return kiln_fail(err, NULL, "types", -1, "%s is listed twice", kiln_type_name(t));
        if (t == KILN_F32 || t == KILN_Q8_K || !kiln_can_quantize(t))
            return kiln_fail(err, NULL, "types", -1, "kiln cannot quantize to type %s", kiln_type_name(t));
        if (!S->im && kiln_policy_type_needs_imatrix(t, NULL))
            return kiln_fail(err, NULL, "types", -1,
                             "%s needs an importance matrix (--imatrix), as llama-quantize requires", kiln_type_name(t));
        S->types[S->n_types++] = t;
    }
    return 0;
}

static int64_t expert_count(const kiln_tensor *t) {
    return t->n_dims >= 3 ? t->ne[2] : 1;
}

/* Multiply-adds per token of the weights of layer il (experts: only the
 * ones a token is routed to). */
static double layer_macs(const kiln_model *m, int64_t il) {
    double macs = 0;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const kiln_tensor *t = &m->gguf->tensors[i];
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        if (t->n_dims < 2 || kiln_tensor_layer(name) != il) continue;
        double n = (double)t->nelements;
        if (t->n_dims >= 3 && m->hp.n_expert > 0) n *= (double)m->hp.n_expert_used / (double)t->ne[2];
        macs += n;
    }
    return macs;
}

/* The tensors to scan (model order) and the types each can take. */
static int plan_tensors(scan *S, kiln_err *err) {
    const kiln_model *m = S->m;
    const kiln_gguf *g = m->gguf;
    const int64_t n_layer = m->hp.n_layer;
    double *after = calloc((size_t)n_layer + 2, sizeof *after); /* after[l]: macs from layer l to the logits */
    S->cap_ts = g->n_tensors ? g->n_tensors : 1;
    S->ts = calloc(S->cap_ts, sizeof *S->ts);
    if (!after || !S->ts) {
        free(after);
        return kiln_fail(err, NULL, NULL, -1, "out of memory");
    }
    after[n_layer] = (double)m->output->nelements;
    for (int64_t il = n_layer - 1; il >= 0; il--) after[il] = after[il + 1] + layer_macs(m, il);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kiln_tensor *t = &g->tensors[i];
        scan_tensor *st = &S->ts[S->n_ts];
        free(st->name); /* a tensor left out below */
        if (!(st->name = kiln_str_dup(t->name))) return free(after), kiln_fail(err, NULL, NULL, -1, "out of memory");
        const char *name = st->name;
        if (!kiln_policy_quantizable(name, t->n_dims)) continue;
        if (!is_float_type(t->type))
            return free(after), kiln_fail(err, S->model_path, name, -1,
                                          "is %s; the scan measures quantization of a float model (F32, F16 or "
                                          "BF16 weights)", kiln_type_name(t->type));
        st->t = t;
        st->n_mat = expert_count(t);
        const int64_t il = kiln_tensor_layer(name);
        st->from = !strcmp(name, "output.weight") ? n_layer : il >= 0 && il < n_layer ? il : -1;
        st->rerun_macs = after[st->from < 0 ? 0 : st->from];
        /* the last block is the cheapest to re-run: its tensors are measured
         * in every type, which calibrates each type's ΔKLD per unit of E */
        st->calibrate = n_layer > 1 && il == n_layer - 1;
        st->im = S->im ? kiln_imatrix_find(S->im, name) : NULL;
        /* token_embd entries of another shape are ignored, as kiln quantize ignores them */
        if (st->im && st->im->n * st->im->n_mat != t->ne[0] * st->n_mat) st->im = NULL;
        if (S->im && !st->im && il >= 0)
            return free(after), kiln_fail(err, S->p->imatrix_path, name, -1,
                                          "the imatrix has no entry for this weight of %s; it was made for another "
                                          "model or without this layer", S->model_path);
        for (size_t k = 0; k < S->n_types; k++) {
            const kiln_type ty = S->types[k];
            if (t->ne[0] % kiln_type_get(ty)->block_size) continue;          /* row does not fit its blocks */
            if (kiln_codec_get(ty)->needs_imatrix && !st->im) continue;      /* token_embd, output: no entry */
            st->types[st->n_types++] = ty;
        }
        /* output order: type id */
        for (size_t a = 1; a < st->n_types; a++)
            for (size_t b = a; b > 0 && st->types[b - 1] > st->types[b]; b--) {
                kiln_type x = st->types[b];
                st->types[b] = st->types[b - 1], st->types[b - 1] = x;
            }
        if (st->n_types) S->n_ts++;
    }
    free(after);
    if (!S->n_ts) return kiln_fail(err, S->model_path, NULL, -1, "no tensor fits any of the candidate types");
    return 0;
}

static int check_imatrix(scan *S, kiln_err *err) {
    const char *path = S->p->imatrix_path;
    if (!path) return 0;
    if (!(S->im = kiln_imatrix_read(path, err))) return -1;
    const kiln_gguf *g = S->m->gguf;
    for (uint64_t i = 0; i < S->im->n_entries; i++) {
        const kiln_imatrix_entry *e = &S->im->entries[i];
        const kiln_tensor *t = kiln_gguf_find_tensor(g, e->name);
        if (t && !strcmp(e->name, "token_embd.weight")) continue;
        if (kiln_imatrix_check_entry(e, path, S->model_path, t ? t->ne : NULL, t ? t->n_dims : 0, err) < 0) return -1;
    }
    return 0;
}

/* Chunk size, chunk count and measured types per tensor: the user's, or
 * what fits SCAN_BUDGET_MACS (see sensitivity_scan.h). */
static int plan_work(scan *S, kiln_err *err) {
    const kiln_scan_params *p = S->p;
    double per_token = 0; /* one measurement of every tensor */
    size_t max_types = 0;
    for (size_t i = 0; i < S->n_ts; i++) {
        per_token += S->ts[i].rerun_macs;
        if (S->ts[i].n_types > max_types) max_types = S->ts[i].n_types;
    }
    int64_t n_ctx = S->tk.n_ctx, n_chunks = S->tk.n_chunks;
    if (!p->n_chunks) {
        if (n_chunks > SCAN_DEFAULT_CHUNKS) n_chunks = SCAN_DEFAULT_CHUNKS;
        const kiln_hparams *hp = &S->m->hp;
        const double per_chunk_bytes = 4.0 * (double)n_ctx * ((double)(hp->n_layer + 1) * (double)hp->n_embd +
                                                              0.5 * (double)hp->n_vocab);
        while (n_chunks > 1 && (per_token * (double)(n_ctx * n_chunks) > SCAN_BUDGET_MACS ||
                                per_chunk_bytes * (double)n_chunks > SCAN_AUTO_MEMORY))
            n_chunks--;
        while (!p->n_ctx && n_chunks == 1 && n_ctx > SCAN_MIN_AUTO_CTX && per_token * (double)n_ctx > SCAN_BUDGET_MACS)
            n_ctx /= 2;
    }
    if (n_ctx != S->tk.n_ctx || n_chunks != S->tk.n_chunks) {
        kiln_imx_tokens re;
        if (kiln_imx_tokens_from_ids(S->tk.ids, S->tk.n, S->tk.bos, n_ctx, n_chunks, p->text_path, &re, err) < 0)
            return -1;
        kiln_imx_tokens_free(&S->tk);
        S->tk = re;
    }
    S->n_ctx = S->tk.n_ctx;
    S->n_chunks = S->tk.n_chunks;
    S->first = S->n_ctx / 2;
    S->n_score = S->n_ctx - 1 - S->first;
    if (S->n_score < 1) return kiln_fail(err, NULL, "n_ctx", -1, "chunks of %lld tokens leave no position to score", (long long)S->n_ctx);
    const double per_type = per_token * (double)(S->n_ctx * S->n_chunks);
    if (p->measure < 0) S->measure = (int64_t)max_types;
    else if (p->measure > 0) S->measure = p->measure;
    else S->measure = per_type > 0 ? (int64_t)(SCAN_BUDGET_MACS / per_type) : (int64_t)max_types;
    if (S->measure < 1) S->measure = 1;
    if (S->measure > (int64_t)max_types) S->measure = (int64_t)max_types;
    return 0;
}

static int read_text(scan *S, kiln_err *err) {
    const char *paths[1] = {S->p->text_path};
    char *text = NULL;
    size_t len = 0;
    if (!S->p->text_path) return kiln_fail(err, NULL, "text", -1, "a calibration text is needed (-f FILE)");
    if (kiln_calib_read(paths, 1, NULL, &text, &len, err) < 0) return -1;
    int rc = kiln_imx_tokens_make(S->m->tok, text, len, S->p->n_ctx > 0 ? S->p->n_ctx : SCAN_DEFAULT_CTX,
                                  S->p->n_chunks, false, S->p->text_path, &S->tk, err);
    free(text);
    return rc;
}

/* ---- evaluation --------------------------------------------------------------- */

static float *act_at(const scan *S, int64_t layer, int64_t chunk) {
    return S->acts + ((uint64_t)(layer * S->n_chunks + chunk) * (uint64_t)S->n_ctx) * (uint64_t)S->m->hp.n_embd;
}

/* Chunk `s` from the input of layer `from` (-1: from the tokens) to its
 * logits (S->logits, every position), in batches of the context's n_batch
 * cut as kiln perplexity's kiln_eval calls cut them. With `keep`, the
 * input of every layer and of the head is saved (the reference pass). */
static int run_chunk(scan *S, kiln_ctx *c, int64_t s, int64_t from, bool keep, kiln_err *err) {
    const int64_t n_tok = S->n_ctx, d = S->m->hp.n_embd, n_layer = S->m->hp.n_layer, n_vocab = S->m->hp.n_vocab;
    const size_t row = (size_t)d * sizeof(float);
    if (from < 0) {
        for (int64_t i = 0; i < n_tok; i += c->n_batch) {
            const int64_t len = n_tok - i < c->n_batch ? n_tok - i : c->n_batch;
            c->n_past = i;
            kiln_fwd_embed(c, S->ids + i, len);
            memcpy(S->cur + i * d, c->x, (size_t)len * row);
        }
        from = 0;
    } else {
        memcpy(S->cur, act_at(S, from, s), (size_t)n_tok * row);
    }
    for (int64_t il = from; il < n_layer; il++) {
        if (keep) memcpy(act_at(S, il, s), S->cur, (size_t)n_tok * row);
        for (int64_t i = 0; i < n_tok; i += c->n_batch) {
            const int64_t len = n_tok - i < c->n_batch ? n_tok - i : c->n_batch;
            memcpy(c->x, S->cur + i * d, (size_t)len * row);
            c->n_past = i;
            kiln_fwd_positions(c, len);
            if (kiln_fwd_block(c, il, len, true, err) < 0) return -1;
            memcpy(S->cur + i * d, c->x, (size_t)len * row);
        }
    }
    if (keep) memcpy(act_at(S, n_layer, s), S->cur, (size_t)n_tok * row);
    for (int64_t i = 0; i < n_tok; i += c->n_batch) {
        const int64_t len = n_tok - i < c->n_batch ? n_tok - i : c->n_batch;
        memcpy(c->x, S->cur + i * d, (size_t)len * row);
        c->n_past = i;
        if (kiln_fwd_head(c, len, S->logits + i * n_vocab, err) < 0) return -1;
    }
    return 0;
}

static kiln_ctx_params ctx_params(const scan *S) {
    /* kiln perplexity's (llama-perplexity's) context: F16 KV cache, flash attention */
    return (kiln_ctx_params){.n_ctx = S->n_ctx, .mode = KILN_NUM_GGML, .attention = KILN_ATTN_LLAMACPP};
}

/* The reference pass: layer inputs, scored logits, activation statistics. */
static int reference_pass(scan *S, kiln_err *err) {
    kiln_ctx_params cp = ctx_params(S);
    kiln_imx_collector_init(&S->col, S->m->gguf, true, false);
    S->col_init = true;
    cp.hook = kiln_imx_hook;
    cp.hook_user = &S->col;
    kiln_ctx *c = kiln_ctx_new(S->m, &cp, err);
    if (!c) return -1;
    const int64_t n_vocab = S->m->hp.n_vocab;
    kiln_progress pr = {0};
    if (S->p->progress) kiln_progress_start(&pr, "reference", (uint64_t)S->n_chunks, "chunks");
    int rc = 0;
    for (int64_t s = 0; rc == 0 && s < S->n_chunks; s++) {
        kiln_imx_chunk(&S->tk, s, S->ids);
        for (int64_t i = 0; i < S->n_ctx; i++) S->token_counts[S->ids[i]] += 1;
        S->col.chunk = s;
        rc = run_chunk(S, c, s, -1, true, err);
        if (rc == 0 && S->col.failed) rc = kiln_fail(err, NULL, NULL, -1, "%s", S->col.err.msg);
        if (rc == 0)
            memcpy(S->ref_logits + (uint64_t)(s * S->n_score) * (uint64_t)n_vocab, S->logits + S->first * n_vocab,
                   (size_t)(S->n_score * n_vocab) * sizeof(float));
        if (S->p->progress) kiln_progress_add(&pr, 1);
    }
    if (S->p->progress) kiln_progress_end(&pr);
    kiln_ctx_free(c);
    return rc;
}

/* Mean KLD of the logits with st's tensor replaced by `q` (type ty)
 * against the reference, over every scored position. */
static int measure(scan *S, kiln_ctx *c, const scan_tensor *st, kiln_type ty, const void *q, uint64_t q_bytes,
                   double *out, kiln_err *err) {
    kiln_tensor repl = *st->t;
    repl.type = ty;
    repl.data = q;
    repl.nbytes = q_bytes;
    *out = 0;
    if (kiln_model_view_swap(S->view, st->t, &repl) == 0) return 0; /* the forward pass never reads it */
    const int64_t n_vocab = S->m->hp.n_vocab;
    const double t0 = kiln_now();
    double sum = 0;
    int rc = 0;
    for (int64_t s = 0; rc == 0 && s < S->n_chunks; s++) {
        if (st->from < 0) kiln_imx_chunk(&S->tk, s, S->ids);
        rc = run_chunk(S, c, s, st->from, false, err);
        if (rc < 0) break;
        kiln_compare_rows(S->ref_logits + (uint64_t)(s * S->n_score) * (uint64_t)n_vocab, S->logits + S->first * n_vocab,
                          S->n_score, n_vocab, NULL, S->cmp);
        for (int64_t i = 0; i < S->n_score; i++) sum += S->cmp[i].kld;
    }
    kiln_model_view_swap(S->view, &repl, st->t);
    S->measure_seconds += kiln_now() - t0;
    if (rc == 0 && !isfinite(sum))
        rc = kiln_fail(err, S->model_path, st->name, -1, "as %s the logits are not finite", kiln_type_name(ty));
    *out = sum / (double)(S->n_chunks * S->n_score);
    return rc;
}

/* ---- one tensor ------------------------------------------------------------ */

/* E of st quantized to `q` (type ty) against its f32 weights: each
 * expert's columns weighted by the sum of x^2 that reached them on the
 * calibration text, token_embd's rows by how often each token occurred.
 * Rows run in parallel into per-row sums, added in order afterwards. */
static int error_energy(const scan *S, const scan_tensor *st, const float *w32, kiln_type ty, const void *q,
                        double *row_e, double *out, kiln_err *err) {
    const kiln_tensor *t = st->t;
    const int64_t ne0 = t->ne[0], nrows = t->ne[1], n_all = nrows * st->n_mat;
    const uint64_t rb = kiln_type_row_bytes(ty, (uint64_t)ne0);
    const kiln_imx_acc *acc = kiln_imx_collector_find(&S->col, st->name);
    if (acc && acc->n * acc->n_mat != ne0 * st->n_mat) acc = NULL;
    const bool embd = !strcmp(st->name, "token_embd.weight");
    const kiln_dequantize_fn deq = kiln_codec_get(ty)->dequantize_row;
    bool oom = false;
    #pragma omp parallel
    {
        float *row = malloc((size_t)ne0 * sizeof *row);
        if (!row) {
            #pragma omp atomic write
            oom = true;
        }
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < n_all; r++) {
            if (!row) continue;
            deq((const uint8_t *)q + (uint64_t)r * rb, row, ne0);
            const double *cw = acc ? acc->sum2 + (r / nrows) * ne0 : NULL;
            const double rw = embd ? S->token_counts[r] : 1.0;
            row_e[r] = kiln_scan_error_energy(w32 + r * ne0, row, 1, ne0, cw, &rw);
        }
        free(row);
    }
    if (oom) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    double e = 0;
    for (int64_t r = 0; r < n_all; r++) e += row_e[r];
    *out = e;
    return 0;
}

/* Types of st in bits-per-weight order, lowest first (ties by id). */
static void by_bpw(const scan_tensor *st, size_t *order) {
    for (size_t i = 0; i < st->n_types; i++) order[i] = i;
    for (size_t a = 1; a < st->n_types; a++)
        for (size_t b = a; b > 0; b--) {
            const double x = kiln_type_bpw(st->types[order[b - 1]]), y = kiln_type_bpw(st->types[order[b]]);
            if (x < y || (x == y && st->types[order[b - 1]] < st->types[order[b]])) break;
            size_t tmp = order[b];
            order[b] = order[b - 1], order[b - 1] = tmp;
        }
}

typedef struct tensor_bufs {
    float *w32;       /* f32 weights of a non-f32 tensor */
    uint8_t *q;       /* one quantized copy */
    double *row_e;    /* per-row error energy */
} tensor_bufs;

static int scan_tensor_rows(scan *S, kiln_ctx *c, scan_tensor *st, tensor_bufs *b, kiln_sensitivity *out,
                            int64_t *n_meas, kiln_err *err) {
    const kiln_tensor *t = st->t;
    const char *name = st->name;
    const int64_t ne0 = t->ne[0], n_all = t->nelements / ne0;
    const float *w32 = (const float *)t->data;
    if (t->type != KILN_F32) {
        const kiln_codec *cd = kiln_codec_get(t->type);
        const uint64_t rb = kiln_type_row_bytes(t->type, (uint64_t)ne0);
        #pragma omp parallel for schedule(static) if (n_all > 64)
        for (int64_t r = 0; r < n_all; r++) cd->dequantize_row(t->data + (uint64_t)r * rb, b->w32 + r * ne0, ne0);
        w32 = b->w32;
    }
    const int64_t ne[4] = {ne0, t->ne[1], st->n_mat, 1};
    size_t order[KILN_TYPE_COUNT];
    bool pick_sorted[KILN_TYPE_COUNT];
    st->row0 = out->n_rows;
    kiln_sens_row *rows = out->rows + st->row0;
    double *e = S->row_e + st->row0;
    bool *anchor = S->row_anchor + st->row0, *pick = S->row_measured + st->row0;
    by_bpw(st, order);
    kiln_scan_pick_measured(st->n_types, (size_t)S->measure, pick_sorted);
    for (size_t i = 0; i < st->n_types; i++) anchor[order[i]] = pick_sorted[i];
    for (size_t i = 0; i < st->n_types; i++) pick[i] = anchor[i] || st->calibrate;
    for (size_t k = 0; k < st->n_types; k++) {
        const kiln_type ty = st->types[k];
        kiln_err qerr = {{0}};
        int64_t bytes = kiln_quantize_tensor(ty, w32, b->q, ne, st->im, NULL, &qerr);
        if (bytes < 0) return kiln_fail(err, S->model_path, name, -1, "as %s: %s", kiln_type_name(ty), qerr.msg);
        rows[k] = (kiln_sens_row){.tensor = strdup(name), .type = ty, .bytes = (uint64_t)bytes};
        out->n_rows++;
        if (!rows[k].tensor) return kiln_fail(err, NULL, NULL, -1, "out of memory");
        if (error_energy(S, st, w32, ty, b->q, b->row_e, &e[k], err) < 0) return -1;
        if (pick[k]) {
            if (measure(S, c, st, ty, b->q, (uint64_t)bytes, &rows[k].dkld, err) < 0) return -1;
            (*n_meas)++;
        }
    }
    return 0;
}

/* Fills the rows not measured: per-type factors from the calibration
 * tensors (rows packed into scratch arrays), then each tensor's gain from
 * its own measurements. */
static int estimate_rows(scan *S, kiln_sensitivity *out, kiln_err *err) {
    const size_t n = out->n_rows;
    kiln_type *types = calloc(n + 1, sizeof *types);
    double *e = calloc(n + 1, sizeof *e), *dk = calloc(n + 1, sizeof *dk);
    bool *anchor = calloc(n + 1, sizeof *anchor);
    size_t *start = calloc(S->n_ts + 1, sizeof *start);
    int rc = 0;
    if (!types || !e || !dk || !anchor || !start) {
        rc = kiln_fail(err, NULL, NULL, -1, "out of memory");
    } else {
        size_t m = 0, n_cal = 0;
        for (size_t i = 0; i < S->n_ts; i++) {
            const scan_tensor *st = &S->ts[i];
            if (!st->calibrate) continue;
            start[n_cal++] = m;
            for (size_t k = 0; k < st->n_types; k++, m++) {
                types[m] = out->rows[st->row0 + k].type;
                dk[m] = out->rows[st->row0 + k].dkld;
                e[m] = S->row_e[st->row0 + k];
                anchor[m] = S->row_anchor[st->row0 + k];
            }
        }
        start[n_cal] = m;
        double factor[KILN_TYPE_COUNT];
        kiln_scan_type_factors(types, e, dk, anchor, start, n_cal, factor);
        for (size_t i = 0; i < S->n_ts; i++) {
            const scan_tensor *st = &S->ts[i];
            double f[KILN_TYPE_COUNT], d[KILN_TYPE_COUNT];
            for (size_t k = 0; k < st->n_types; k++) {
                f[k] = factor[st->types[k]];
                d[k] = out->rows[st->row0 + k].dkld;
            }
            kiln_scan_estimate(S->row_e + st->row0, d, S->row_measured + st->row0, f, st->n_types);
            for (size_t k = 0; k < st->n_types; k++)
                out->rows[st->row0 + k].dkld = d[k] > 0 ? d[k] : 0; /* a KLD is never negative: clears -0 */
        }
    }
    free(types);
    free(e);
    free(dk);
    free(anchor);
    free(start);
    return rc;
}

/* ---- the whole scan -------------------------------------------------------- */

static void *alloc_floats(uint64_t n) {
    return malloc((size_t)(n ? n : 1) * sizeof(float));
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static int fill_header(scan *S, kiln_sensitivity *out, kiln_err *err) {
    json_t *fp = kiln_fingerprint(S->m->gguf, err);
    if (!fp) return -1;
    const char *layout = json_string_value(json_object_get(fp, "layout_xxh64"));
    if (!layout || strlen(layout) != 16) {
        json_decref(fp);
        return kiln_fail(err, S->model_path, NULL, -1, "no layout fingerprint");
    }
    memcpy(out->layout_xxh64, layout, 17);
    json_decref(fp);
    snprintf(out->arch, sizeof out->arch, "%s", S->m->hp.arch_name);
    out->n_tensors = (int64_t)S->m->gguf->n_tensors;
    snprintf(out->text, sizeof out->text, "%s", base_name(S->p->text_path));
    snprintf(out->imatrix, sizeof out->imatrix, "%s", S->p->imatrix_path ? base_name(S->p->imatrix_path) : "-");
    out->n_tokens = S->n_ctx * S->n_chunks;
    return 0;
}

static int scan_all(scan *S, kiln_sensitivity *out, kiln_scan_info *info, kiln_err *err) {
    const kiln_hparams *hp = &S->m->hp;
    double t0 = kiln_now();
    /* buffers: activations, logits, one tensor */
    uint64_t max_el = 0, max_q = 0, max_rows = 0;
    size_t total_rows = 0;
    for (size_t i = 0; i < S->n_ts; i++) {
        const kiln_tensor *t = S->ts[i].t;
        if ((uint64_t)t->nelements > max_el) max_el = (uint64_t)t->nelements;
        if ((uint64_t)(t->nelements / t->ne[0]) > max_rows) max_rows = (uint64_t)(t->nelements / t->ne[0]);
        for (size_t k = 0; k < S->ts[i].n_types; k++) {
            uint64_t qb = kiln_type_row_bytes(S->ts[i].types[k], (uint64_t)t->ne[0]) * (uint64_t)(t->nelements / t->ne[0]);
            if (qb > max_q) max_q = qb;
        }
        total_rows += S->ts[i].n_types;
    }
    const uint64_t n_tok = (uint64_t)(S->n_ctx * S->n_chunks);
    S->acts = alloc_floats((uint64_t)(hp->n_layer + 1) * n_tok * (uint64_t)hp->n_embd);
    S->ref_logits = alloc_floats((uint64_t)(S->n_chunks * S->n_score) * (uint64_t)hp->n_vocab);
    S->logits = alloc_floats((uint64_t)S->n_ctx * (uint64_t)hp->n_vocab);
    S->cur = alloc_floats((uint64_t)S->n_ctx * (uint64_t)hp->n_embd);
    S->ids = malloc((size_t)S->n_ctx * sizeof *S->ids);
    S->cmp = malloc((size_t)S->n_score * sizeof *S->cmp);
    S->token_counts = calloc((size_t)hp->n_vocab, sizeof *S->token_counts);
    out->rows = calloc(total_rows, sizeof *out->rows);
    tensor_bufs b = {alloc_floats(max_el), malloc(max_q ? max_q : 1), malloc((size_t)max_rows * sizeof(double))};
    S->row_e = calloc(total_rows + 1, sizeof *S->row_e);
    S->row_measured = calloc(total_rows + 1, sizeof *S->row_measured);
    S->row_anchor = calloc(total_rows + 1, sizeof *S->row_anchor);
    int rc = 0;
    if (!S->acts || !S->ref_logits || !S->logits || !S->cur || !S->ids || !S->cmp || !S->token_counts || !out->rows ||
        !b.w32 || !b.q || !b.row_e || !S->row_e || !S->row_measured || !S->row_anchor)
        rc = kiln_fail(err, NULL, NULL, -1, "out of memory for the scan's buffers (%llu tokens of %lld layers)",
                       (unsigned long long)n_tok, (long long)hp->n_layer);
    if (rc == 0) rc = reference_pass(S, err);
    const double t1 = kiln_now();
    kiln_ctx *c = NULL;
    kiln_ctx_params cp = ctx_params(S);
    if (rc == 0 && !(S->view = kiln_model_view(S->m, err))) rc = -1;
    if (rc == 0 && !(c = kiln_ctx_new(S->view, &cp, err))) rc = -1;
    int64_t n_meas = 0;
    kiln_progress pr = {0};
    if (rc == 0 && S->p->progress) kiln_progress_start(&pr, "analyze", (uint64_t)S->n_ts, "tensors");
    for (size_t i = 0; rc == 0 && i < S->n_ts; i++) {
        rc = scan_tensor_rows(S, c, &S->ts[i], &b, out, &n_meas, err);
        if (S->p->progress) kiln_progress_add(&pr, 1);
    }
    if (S->p->progress && pr.active) kiln_progress_end(&pr);
    kiln_ctx_free(c);
    free(b.w32);
    free(b.q);
    free(b.row_e);
    if (rc == 0) rc = estimate_rows(S, out, err);
    if (rc == 0) rc = fill_header(S, out, err);
    if (info) {
        *info = (kiln_scan_info){.n_ctx = S->n_ctx, .n_chunks = S->n_chunks, .n_scored = S->n_chunks * S->n_score,
                                 .measure = S->measure, .n_tensors_scanned = (int64_t)S->n_ts,
                                 .n_measurements = n_meas, .n_types = S->n_types, .measured = S->row_measured,
                                 .energy = S->row_e, .ref_seconds = t1 - t0, .measure_seconds = S->measure_seconds,
                                 .quant_seconds = kiln_now() - t1 - S->measure_seconds, .seconds = kiln_now() - t0};
        memcpy(info->types, S->types, S->n_types * sizeof *S->types);
        S->row_measured = NULL; /* now the caller's */
        S->row_e = NULL;
    }
    return rc;
}

int kiln_sensitivity_scan(const char *model_path, const kiln_scan_params *p, kiln_sensitivity *out, kiln_err *err) {
    memset(out, 0, sizeof *out);
    if (p->info) memset(p->info, 0, sizeof *p->info);
    if (p->n_threads > 0) omp_set_num_threads(p->n_threads);
    scan S = {.model_path = model_path, .p = p};
    int rc = 0;
    if (!(S.m = kiln_model_load(model_path, err))) rc = -1;
    if (rc == 0) rc = check_imatrix(&S, err);
    if (rc == 0) rc = check_types(&S, err);
    if (rc == 0) rc = plan_tensors(&S, err);
    if (rc == 0) rc = read_text(&S, err);
    if (rc == 0) rc = plan_work(&S, err);
    if (rc == 0) rc = scan_all(&S, out, p->info, err);
    if (rc < 0) {
        kiln_sensitivity_free(out);
        if (p->info) kiln_scan_info_free(p->info);
    }
    free(S.acts);
    free(S.ref_logits);
    free(S.logits);
    free(S.cur);
    free(S.ids);
    free(S.cmp);
    free(S.token_counts);
    free(S.row_e);
    free(S.row_measured);
    free(S.row_anchor);
    for (size_t i = 0; S.ts && i < S.cap_ts; i++) free(S.ts[i].name);
    free(S.ts);
    if (S.col_init) kiln_imx_collector_free(&S.col);
    kiln_imx_tokens_free(&S.tk);
    kiln_imatrix_free(S.im);
    kiln_model_view_free(S.view);
    kiln_model_free(S.m);
    return rc;
}

void kiln_scan_info_free(kiln_scan_info *info) {
    if (!info) return;
    free(info->measured);
    free(info->energy);
    info->measured = NULL;
    info->energy = NULL;
}
