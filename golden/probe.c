/* golden/probe.c - layer probes (see probe.h): two contexts in lockstep,
 * the runtime's observers capturing A's outputs of one batch and comparing
 * B's with them as they arrive.
 *
 * A capture is one product's output (one expert's, for 3-D tensors) or one
 * block's residual stream, keyed by tensor name and expert; its buffer is
 * kept and reused from batch to batch, so memory is one batch's outputs.
 * Experts are matched by token: B's row for (token t, expert e) is compared
 * with A's row for the same pair; a pair only one model routed is counted
 * as unmatched. The runtime calls the observers from one thread in
 * evaluation order; every sum is added in that order, so the figures do not
 * depend on the thread count. */
#include "probe.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/progress.h"
#include "../core/strmap.h"
#include "../tokenizer/tokenizer.h"

/* kiln_eval cuts longer calls into batches of 512 (llama.cpp's n_ubatch),
 * so a probe step of at most this many tokens is one batch: each tensor's
 * observer then fires once per step. */
#define PROBE_MAX_BATCH 512

void kiln_probe_sums_add(kiln_probe_sums *s, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const double x = a[i], y = b[i], d = y - x;
        s->ab += x * y;
        s->aa += x * x;
        s->bb += y * y;
        s->dd += d * d;
    }
    s->n += (uint64_t)n;
}

void kiln_probe_sums_merge(kiln_probe_sums *s, const kiln_probe_sums *t) {
    s->ab += t->ab;
    s->aa += t->aa;
    s->bb += t->bb;
    s->dd += t->dd;
    s->n += t->n;
}

/* sqrt(aa * aa) == aa exactly in binary floating point, so B == A gives a
 * cosine of exactly 1. */
double kiln_probe_cosine(const kiln_probe_sums *s) {
    if (s->aa == 0 && s->bb == 0) return 1.0;
    if (s->aa == 0 || s->bb == 0) return 0.0;
    return s->ab / sqrt(s->aa * s->bb);
}

double kiln_probe_rel_rms(const kiln_probe_sums *s) {
    if (s->dd == 0) return 0.0;
    if (s->aa == 0) return INFINITY;
    return sqrt(s->dd / s->aa);
}

typedef struct capture {
    char key[160];      /* "tensor name#expert" or "#residual#layer": the map's key */
    int expert;
    size_t stat;        /* index into the stats */
    float *y;           /* n_rows x n_out */
    int64_t cap_values, n_rows, n_out;
    int32_t *tok_row;   /* experts: A's row of each token of the batch, -1 when not routed */
    int64_t matched;    /* experts: A's rows B matched in this batch */
    int64_t batch;      /* the batch A last wrote it in */
} capture;

typedef struct probe {
    int64_t n_layer, n_batch, n_used; /* n_used: experts per token */
    bool comparing;                  /* false: capturing A, true: comparing B */
    int64_t batch;
    kiln_strmap map;                 /* key -> index into caps */
    capture **caps;
    size_t n_caps, max_caps;
    kiln_probe_stat *stats;
    size_t n_stats, cap_stats;
    kiln_probe_sums *row_sums;       /* n_batch */
    int32_t *pairs;                  /* n_batch: A's row of each of B's rows */
    uint64_t bytes, max_bytes;
    bool failed;
    kiln_err err;
} probe;

/* "blk.7.ffn_down_exps.weight" -> layer 7, "ffn_down_exps"; the output
 * projection (output.weight, or token_embd.weight when tied) -> n_layer,
 * "output"; anything else outside a block -> n_layer and its name. */
static void split_name(const char *name, int64_t n_layer, int64_t *layer, char *tensor, size_t size) {
    long long il;
    int used = 0;
    size_t len = strlen(name);
    if (len > 7 && !strcmp(name + len - 7, ".weight")) len -= 7;
    if (sscanf(name, "blk.%lld.%n", &il, &used) == 1 && used > 0 && (size_t)used < len) {
        *layer = il;
        snprintf(tensor, size, "%.*s", (int)(len - (size_t)used), name + used);
        return;
    }
    *layer = n_layer;
    if (!strcmp(name, "output.weight") || !strcmp(name, "token_embd.weight")) snprintf(tensor, size, "output");
    else snprintf(tensor, size, "%.*s", (int)len, name);
}

/* The observers cannot return an error: the first one is kept here and
 * the step that ran them returns it. */
__attribute__((format(printf, 2, 3))) static int fail_probe(probe *P, const char *fmt, ...) {
    if (!P->failed) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        kiln_fail(&P->err, NULL, NULL, -1, "%s", msg);
    }
    P->failed = true;
    return -1;
}

/* The stat of (layer, tensor), created at the end when new; -1 when out
 * of memory. */
static int64_t stat_for(probe *P, int64_t layer, const char *tensor) {
    for (size_t i = P->n_stats; i-- > 0;)
        if (P->stats[i].layer == layer && !strcmp(P->stats[i].tensor, tensor)) return (int64_t)i;
    if (P->n_stats == P->cap_stats) {
        size_t cap = P->cap_stats ? 2 * P->cap_stats : 64;
        kiln_probe_stat *s = realloc(P->stats, cap * sizeof *s);
        if (!s) return fail_probe(P, "out of memory for the statistics of %s", tensor);
        P->stats = s;
        P->cap_stats = cap;
    }
    kiln_probe_stat *s = &P->stats[P->n_stats];
    memset(s, 0, sizeof *s);
    s->layer = layer;
    snprintf(s->tensor, sizeof s->tensor, "%s", tensor);
    return (int64_t)P->n_stats++;
}

static capture *find_capture(const probe *P, const char *key) {
    uint64_t i;
    return kiln_strmap_get(&P->map, key, strlen(key), &i) ? P->caps[i] : NULL;
}

static capture *new_capture(probe *P, const char *key, int expert, int64_t layer, const char *tensor) {
    int64_t s = stat_for(P, layer, tensor);
    if (s < 0) return NULL;
    capture *c = calloc(1, sizeof *c);
    if (!c || P->n_caps == P->max_caps) {
        free(c);
        fail_probe(P, "too many outputs to follow (at %s)", key);
        return NULL;
    }
    snprintf(c->key, sizeof c->key, "%s", key);
    c->expert = expert;
    c->stat = (size_t)s;
    c->batch = -1;
    if (expert >= 0 && !(c->tok_row = malloc((size_t)P->n_batch * sizeof *c->tok_row))) {
        free(c);
        fail_probe(P, "out of memory for %s", key);
        return NULL;
    }
    if (kiln_strmap_put(&P->map, c->key, strlen(c->key), P->n_caps, NULL) != 1) {
        free(c->tok_row);
        free(c);
        fail_probe(P, "too many outputs to follow (at %s)", key);
        return NULL;
    }
    P->caps[P->n_caps++] = c;
    return c;
}

/* A's side: keeps the rows. */
static void capture_rows(probe *P, capture *c, const int32_t *slots, const float *y, int64_t n, int64_t n_out) {
    if (n * n_out > c->cap_values) {
        float *buf = realloc(c->y, (size_t)(n * n_out) * sizeof *buf);
        if (!buf) {
            fail_probe(P, "out of memory capturing %s", c->key);
            return;
        }
        P->bytes += (uint64_t)(n * n_out - c->cap_values) * sizeof *buf;
        if (P->bytes > P->max_bytes) P->max_bytes = P->bytes;
        c->y = buf;
        c->cap_values = n * n_out;
    }
    memcpy(c->y, y, (size_t)(n * n_out) * sizeof *y);
    c->n_rows = n;
    c->n_out = n_out;
    c->batch = P->batch;
    c->matched = 0;
    if (c->expert < 0) return;
    for (int64_t t = 0; t < P->n_batch; t++) c->tok_row[t] = -1;
    for (int64_t i = 0; i < n; i++) c->tok_row[slots[i] / P->n_used] = (int32_t)i;
}

/* B's side: compares row i of y with A's row pairs[i] (pairs NULL: row i),
 * skipping rows paired with -1. Rows are summed in parallel, then added in
 * row order. */
static void compare_rows(probe *P, kiln_probe_stat *s, const float *a, const int32_t *pairs, const float *y,
                         int64_t n, int64_t n_out) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        P->row_sums[i] = (kiln_probe_sums){0};
        const int64_t ra = pairs ? pairs[i] : i;
        if (ra >= 0) kiln_probe_sums_add(&P->row_sums[i], a + ra * n_out, y + i * n_out, n_out);
    }
    for (int64_t i = 0; i < n; i++) {
        if (pairs && pairs[i] < 0) continue;
        kiln_probe_sums_merge(&s->sums, &P->row_sums[i]);
        s->n_rows++;
    }
}

static void compare(probe *P, const char *key, capture *c, int64_t layer, const char *tensor, int expert,
                    const int32_t *slots, const float *y, int64_t n, int64_t n_out) {
    const bool captured = c && c->batch == P->batch;
    if (expert < 0 && (!captured || c->n_rows != n || c->n_out != n_out)) {
        fail_probe(P, "%s: model B computed an output model A did not (or of another shape)", key);
        return;
    }
    if (expert < 0) {
        compare_rows(P, &P->stats[c->stat], c->y, NULL, y, n, n_out);
        return;
    }
    int64_t s = captured ? (int64_t)c->stat : stat_for(P, layer, tensor);
    if (s < 0) return;
    int64_t matched = 0;
    for (int64_t i = 0; i < n; i++) {
        P->pairs[i] = captured ? c->tok_row[slots[i] / P->n_used] : -1;
        matched += P->pairs[i] >= 0;
    }
    P->stats[s].n_unmatched += (uint64_t)(n - matched);
    if (!captured) return;
    c->matched += matched;
    compare_rows(P, &P->stats[s], c->y, P->pairs, y, n, n_out);
}

static void observe(probe *P, const char *key, int64_t layer, const char *tensor, int expert, const int32_t *slots,
                    const float *y, int64_t n, int64_t n_out) {
    if (P->failed || n <= 0) return;
    if (n > P->n_batch) {
        fail_probe(P, "%s: more rows than a batch", key);
        return;
    }
    capture *c = find_capture(P, key);
    if (P->comparing) {
        compare(P, key, c, layer, tensor, expert, slots, y, n, n_out);
        return;
    }
    if (!c && !(c = new_capture(P, key, expert, layer, tensor))) return;
    capture_rows(P, c, slots, y, n, n_out);
}

static void on_output(void *user, const char *name, int expert, const int32_t *slots, const float *y, int64_t n,
                      int64_t n_out) {
    probe *P = user;
    char key[160], tensor[48];
    int64_t layer;
    snprintf(key, sizeof key, "%s#%d", name, expert);
    split_name(name, P->n_layer, &layer, tensor, sizeof tensor);
    observe(P, key, layer, tensor, expert, slots, y, n, n_out);
}

static void on_layer(void *user, int64_t layer, const float *x, int64_t n, int64_t n_embd) {
    probe *P = user;
    char key[48];
    snprintf(key, sizeof key, "#residual#%lld", (long long)layer);
    observe(P, key, layer, "residual", -1, NULL, x, n, n_embd);
}

/* After B's batch: A's expert rows B did not route count as unmatched. */
static void finish_batch(probe *P) {
    for (size_t i = 0; i < P->n_caps; i++) {
        const capture *c = P->caps[i];
        if (c->expert >= 0 && c->batch == P->batch) P->stats[c->stat].n_unmatched += (uint64_t)(c->n_rows - c->matched);
    }
}

static void probe_free(probe *P) {
    for (size_t i = 0; i < P->n_caps; i++) {
        free(P->caps[i]->y);
        free(P->caps[i]->tok_row);
        free(P->caps[i]);
    }
    free(P->caps);
    kiln_strmap_free(&P->map);
    free(P->stats);
    free(P->row_sums);
    free(P->pairs);
}

static const char *fp_str(const json_t *fp, const char *key) {
    const char *s = json_string_value(json_object_get(fp, key));
    return s ? s : "?";
}

int kiln_probe_check_pair(const kiln_model *a, const kiln_model *b, const kiln_probe_params *p,
                          kiln_probe_result *r, kiln_err *err) {
    const char *pa = p->path_a ? p->path_a : "A", *pb = p->path_b ? p->path_b : "B";
    if (!(r->model_a = kiln_fingerprint(a->gguf, err)) || !(r->model_b = kiln_fingerprint(b->gguf, err))) return -1;
    r->relation = kiln_fingerprint_relation(r->model_a, r->model_b);
    if (r->relation == KILN_FP_SAME_WEIGHTS || r->relation == KILN_FP_REQUANTIZED) return 0;
    const char *why = strcmp(fp_str(r->model_a, "arch"), fp_str(r->model_b, "arch")) ? "architectures"
                      : strcmp(fp_str(r->model_a, "layout_xxh64"), fp_str(r->model_b, "layout_xxh64"))
                          ? "tensor names or shapes"
                          : "vocabularies";
    return kiln_fail(err, NULL, NULL, -1, "%s (%s) and %s (%s) are not the same network: their %s differ", pa,
                     fp_str(r->model_a, "arch"), pb, fp_str(r->model_b, "arch"), why);
}

/* Stable sort of the stats by layer (a stat only B produced, an expert
 * tensor A never routed to, is created late). */
static void sort_stats(kiln_probe_stat *s, size_t n) {
    for (size_t i = 1; i < n; i++) {
        kiln_probe_stat t = s[i];
        size_t j = i;
        for (; j > 0 && s[j - 1].layer > t.layer; j--) s[j] = s[j - 1];
        s[j] = t;
    }
}

typedef struct lockstep {
    probe P;
    kiln_ctx *ca, *cb;
    float *la, *lb;            /* n_batch x n_vocab */
    kiln_pos_cmp *cmp;         /* n_batch */
    kiln_cmp_acc acc;
} lockstep;

static int lockstep_init(lockstep *L, const kiln_model *a, const kiln_model *b, int64_t n_ctx, int64_t n_batch,
                         kiln_numeric_mode mode, kiln_err *err) {
    probe *P = &L->P;
    const kiln_hparams *hp = &a->hp;
    P->n_layer = hp->n_layer;
    P->n_batch = n_batch;
    P->n_used = hp->n_expert_used > 0 ? hp->n_expert_used : 1;
    /* every product of a block (at most ~16), each expert's three, the
     * residual, and the tensors outside blocks */
    P->max_caps = (size_t)(hp->n_layer * (20 + 3 * hp->n_expert) + 16);
    P->caps = calloc(P->max_caps, sizeof *P->caps);
    P->row_sums = malloc((size_t)n_batch * sizeof *P->row_sums);
    P->pairs = malloc((size_t)n_batch * sizeof *P->pairs);
    const size_t logit_bytes = (size_t)(n_batch * hp->n_vocab) * sizeof(float);
    L->la = malloc(logit_bytes);
    L->lb = malloc(logit_bytes);
    L->cmp = malloc((size_t)n_batch * sizeof *L->cmp);
    if (!P->caps || !P->row_sums || !P->pairs || !L->la || !L->lb || !L->cmp ||
        kiln_strmap_init(&P->map, P->max_caps) < 0)
        return kiln_fail(err, NULL, NULL, -1, "out of memory");
    /* llama-perplexity's context: F16 KV cache, flash attention */
    kiln_ctx_params cp = {.n_ctx = n_ctx, .mode = mode, .attention = KILN_ATTN_LLAMACPP, .output_hook = on_output,
                          .layer_hook = on_layer, .observer_user = P};
    if (!(L->ca = kiln_ctx_new(a, &cp, err)) || !(L->cb = kiln_ctx_new(b, &cp, err))) return -1;
    return 0;
}

static void lockstep_free(lockstep *L) {
    kiln_ctx_free(L->ca);
    kiln_ctx_free(L->cb);
    free(L->la);
    free(L->lb);
    free(L->cmp);
    kiln_cmp_free(&L->acc);
    probe_free(&L->P);
}

static int observer_failed(probe *P, kiln_err *err) {
    *err = P->err;
    return -1;
}

/* One step: the same n tokens (at chunk offset j) through A, then B, then
 * the final logits of the positions perplexity scores. */
static int step(lockstep *L, const int32_t *ids, int64_t j, int64_t n, int64_t n_ctx, int64_t n_vocab,
                kiln_err *err) {
    probe *P = &L->P;
    P->batch++;
    P->comparing = false;
    if (kiln_eval(L->ca, ids + j, n, L->la, err) < 0) return -1;
    if (P->failed) return observer_failed(P, err);
    P->comparing = true;
    if (kiln_eval(L->cb, ids + j, n, L->lb, err) < 0) return -1;
    if (P->failed) return observer_failed(P, err);
    finish_batch(P);
    const int64_t first = n_ctx / 2, lo = j > first ? j : first, hi = j + n < n_ctx - 1 ? j + n : n_ctx - 1;
    if (hi <= lo) return 0;
    kiln_compare_rows(L->la + (lo - j) * n_vocab, L->lb + (lo - j) * n_vocab, hi - lo, n_vocab, ids + lo + 1,
                      L->cmp);
    for (int64_t i = 0; i < hi - lo; i++)
        if (kiln_cmp_add(&L->acc, &L->cmp[i], n_vocab, err) < 0) return -1;
    return 0;
}

int kiln_probe_run(const kiln_model *a, const kiln_model *b, const char *text, size_t len,
                   const kiln_probe_params *p, kiln_probe_result *r, kiln_err *err) {
    memset(r, 0, sizeof *r);
    const double t0 = kiln_now();
    if (kiln_probe_check_pair(a, b, p, r, err) < 0) return -1;
    int32_t *tokens = NULL;
    size_t n_tok = 0;
    if (kiln_tokenize(a->tok, text, len, true, false, &tokens, &n_tok, err) < 0) return -1;
    int64_t n_ctx = p->n_ctx > 0 ? p->n_ctx : (n_tok < 512 ? (int64_t)n_tok : 512);
    if (n_ctx < 4 || (int64_t)n_tok < n_ctx) {
        free(tokens);
        return kiln_fail(err, NULL, NULL, -1, "the text tokenizes to %zu tokens; a context of %lld needs at least %lld",
                         n_tok, (long long)n_ctx, (long long)(n_ctx < 4 ? 4 : n_ctx));
    }
    if (n_ctx > a->hp.n_ctx_train && a->pos_embd) {
        free(tokens);
        return kiln_fail(err, NULL, NULL, -1, "a context of %lld exceeds the model's %lld positions", (long long)n_ctx,
                         (long long)a->hp.n_ctx_train);
    }
    int64_t n_chunks = (int64_t)n_tok / n_ctx;
    if (p->n_chunks > 0 && p->n_chunks < n_chunks) n_chunks = p->n_chunks;
    int64_t n_batch = p->n_batch > 0 && p->n_batch < n_ctx ? p->n_batch : n_ctx;
    if (n_batch > PROBE_MAX_BATCH) n_batch = PROBE_MAX_BATCH;
    const bool add_bos = kiln_tokenizer_add_bos(a->tok);
    const int32_t bos = kiln_tokenizer_bos(a->tok);

    lockstep L;
    memset(&L, 0, sizeof L);
    int rc = lockstep_init(&L, a, b, n_ctx, n_batch, p->mode, err);
    for (int64_t c = 0; !rc && c < n_chunks; c++) {
        int32_t *ids = tokens + c * n_ctx; /* chunks do not overlap: BOS can go in place */
        if (add_bos && bos >= 0) ids[0] = bos;
        kiln_ctx_clear(L.ca);
        kiln_ctx_clear(L.cb);
        for (int64_t j = 0; !rc && j < n_ctx; j += n_batch)
            rc = step(&L, ids, j, n_ctx - j < n_batch ? n_ctx - j : n_batch, n_ctx, a->hp.n_vocab, err);
        if (!rc && p->on_chunk) p->on_chunk(p->user, c + 1, n_chunks);
    }
    if (!rc) {
        sort_stats(L.P.stats, L.P.n_stats);
        r->stats = L.P.stats;
        r->n_stats = L.P.n_stats;
        L.P.stats = NULL;
        r->n_layer = a->hp.n_layer;
        r->n_ctx = n_ctx;
        r->n_batch = n_batch;
        r->n_chunks = n_chunks;
        r->n_text_tokens = (int64_t)n_tok;
        r->n_tokens = n_chunks * n_ctx;
        r->capture_bytes = L.P.max_bytes;
        kiln_cmp_summarize(&L.acc, &r->kld);
        r->seconds = kiln_now() - t0;
    }
    lockstep_free(&L);
    free(tokens);
    return rc ? -1 : 0;
}

void kiln_probe_result_free(kiln_probe_result *r) {
    free(r->stats);
    json_decref(r->model_a);
    json_decref(r->model_b);
    memset(r, 0, sizeof *r);
}

int64_t kiln_probe_worst_output(const kiln_probe_result *r) {
    int64_t best = -1;
    for (size_t i = 0; i < r->n_stats; i++) {
        if (!strcmp(r->stats[i].tensor, "residual")) continue;
        if (best < 0 || kiln_probe_rel_rms(&r->stats[i].sums) > kiln_probe_rel_rms(&r->stats[best].sums))
            best = (int64_t)i;
    }
    return best;
}

int64_t kiln_probe_largest_jump(const kiln_probe_result *r, double *jump) {
    int64_t best = -1;
    double prev = 0, best_jump = 0;
    for (size_t i = 0; i < r->n_stats; i++) {
        if (strcmp(r->stats[i].tensor, "residual")) continue;
        const double rel = kiln_probe_rel_rms(&r->stats[i].sums), d = rel - prev;
        if (best < 0 || d > best_jump) {
            best = (int64_t)i;
            best_jump = d;
        }
        prev = rel;
    }
    if (jump) *jump = best_jump;
    return best;
}

/* NaN and infinities are not JSON: they become null. */
static json_t *num(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}

static json_t *stat_json(const kiln_probe_stat *s) {
    return json_pack("{s:I, s:s, s:o, s:o, s:I, s:I, s:I}", "layer", (json_int_t)s->layer, "tensor", s->tensor,
                     "cosine", num(kiln_probe_cosine(&s->sums)), "rel_rms", num(kiln_probe_rel_rms(&s->sums)),
                     "n_rows", (json_int_t)s->n_rows, "n_values", (json_int_t)s->sums.n, "unmatched_rows",
                     (json_int_t)s->n_unmatched);
}

json_t *kiln_probe_json(const kiln_probe_result *r) {
    json_t *entries = json_array();
    for (size_t i = 0; entries && i < r->n_stats; i++)
        if (json_array_append_new(entries, stat_json(&r->stats[i]))) {
            json_decref(entries);
            entries = NULL;
        }
    double jump;
    const int64_t w = kiln_probe_worst_output(r), jl = kiln_probe_largest_jump(r, &jump);
    json_t *worst = w >= 0 ? stat_json(&r->stats[w]) : json_null();
    json_t *largest = jl >= 0 ? stat_json(&r->stats[jl]) : json_null();
    if (jl >= 0 && largest) json_object_set_new(largest, "jump", num(jump));
    const kiln_cmp_summary *k = &r->kld;
    json_t *logits = json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "n_positions", (json_int_t)k->count,
                               "kld_mean", num(k->kld.val), "kld_mean_err", num(k->kld.unc), "kld_median",
                               num(k->kld_median), "kld_p99", num(k->kld_p99), "kld_max", num(k->kld_max),
                               "top1_agreement", num(k->same_top.val), "top1_agreement_err", num(k->same_top.unc));
    if (!entries || !worst || !largest || !logits) {
        json_decref(entries);
        json_decref(worst);
        json_decref(largest);
        json_decref(logits);
        return NULL;
    }
    return json_pack("{s:s, s:O, s:O, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o}", "schema",
                     "kiln.activations/1", "model_a", r->model_a, "model_b", r->model_b, "relation",
                     kiln_fp_relation_name(r->relation), "n_layer", (json_int_t)r->n_layer, "n_ctx",
                     (json_int_t)r->n_ctx, "n_batch", (json_int_t)r->n_batch, "n_chunks", (json_int_t)r->n_chunks,
                     "n_text_tokens", (json_int_t)r->n_text_tokens, "n_tokens", (json_int_t)r->n_tokens,
                     "capture_bytes", (json_int_t)r->capture_bytes, "seconds", num(r->seconds), "entries", entries,
                     "worst", worst, "largest_jump", largest, "logits", logits);
}
