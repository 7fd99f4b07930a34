/* golden/check.c - comparing a model against a golden file (see check.h). */
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/progress.h"

void kiln_golden_report_free(kiln_golden_report *rep) {
    free(rep->n_tokens);
    free(rep->prompts);
    json_decref(rep->model);
    memset(rep, 0, sizeof *rep);
}

/* Evaluates prompt i and folds its comparison into `one` and `all`. */
static int check_prompt(kiln_ctx *ctx, const kiln_logit_set *set, uint32_t i, int64_t n_batch, float *logits,
                        int32_t *next, kiln_pos_cmp *cmp, kiln_cmp_acc *one, kiln_cmp_acc *all, kiln_err *err) {
    const kiln_logit_seq *q = &set->seqs[i];
    kiln_ctx_clear(ctx);
    for (int64_t j = 0; j < q->n_tokens; j += n_batch) /* one call per batch, the cache carried */
        if (kiln_eval(ctx, q->ids + j, q->n_tokens - j < n_batch ? q->n_tokens - j : n_batch,
                      logits + j * set->n_vocab, err))
            return -1;
    for (uint32_t t = 0; t < q->n_tokens; t++) next[t] = t + 1 < q->n_tokens ? q->ids[t + 1] : -1;
    kiln_compare_rows(q->logits, logits, q->n_tokens, set->n_vocab, next, cmp);
    for (uint32_t t = 0; t < q->n_tokens; t++)
        if (kiln_cmp_add(one, &cmp[t], set->n_vocab, err) || kiln_cmp_add(all, &cmp[t], set->n_vocab, err))
            return -1;
    return 0;
}

int kiln_golden_check(const kiln_model *m, const kiln_golden *g, const kiln_golden_thresholds *t,
                      kiln_numeric_mode mode, int64_t n_batch, kiln_golden_report *rep, kiln_err *err) {
    memset(rep, 0, sizeof *rep);
    const kiln_logit_set *set = &g->set;
    if ((int64_t)set->n_vocab != m->hp.n_vocab)
        return kiln_fail(err, NULL, "n_vocab", -1, "the golden file has %u tokens per row, the model %lld",
                         set->n_vocab, (long long)m->hp.n_vocab);
    double t0 = kiln_now();
    rep->model = kiln_fingerprint(m->gguf, err);
    if (!rep->model) return -1;
    rep->relation = kiln_fingerprint_relation(rep->model, kiln_golden_model(g));
    uint32_t longest = 0;
    for (uint32_t i = 0; i < set->n_seqs; i++)
        if (set->seqs[i].n_tokens > longest) longest = set->seqs[i].n_tokens;
    rep->n_prompts = set->n_seqs;
    rep->n_tokens = calloc(set->n_seqs, sizeof *rep->n_tokens);
    rep->prompts = calloc(set->n_seqs, sizeof *rep->prompts);
    float *logits = malloc((size_t)longest * set->n_vocab * sizeof *logits);
    int32_t *next = malloc((size_t)longest * sizeof *next);
    kiln_pos_cmp *cmp = malloc((size_t)longest * sizeof *cmp);
    kiln_ctx_params cp = {.n_ctx = longest, .mode = mode};
    kiln_ctx *ctx = NULL;
    int rc = 0;
    if (!rep->n_tokens || !rep->prompts || !logits || !next || !cmp)
        rc = kiln_fail(err, NULL, NULL, -1, "out of memory");
    else if (!(ctx = kiln_ctx_new(m, &cp, err)))
        rc = -1;
    kiln_cmp_acc all = {0};
    for (uint32_t i = 0; !rc && i < set->n_seqs; i++) {
        kiln_cmp_acc one = {0};
        rc = check_prompt(ctx, set, i, n_batch > 0 ? n_batch : (int64_t)longest, logits, next, cmp, &one, &all, err);
        if (!rc) {
            rep->n_tokens[i] = set->seqs[i].n_tokens;
            kiln_cmp_summarize(&one, &rep->prompts[i]);
        }
        kiln_cmp_free(&one);
    }
    if (!rc) {
        kiln_cmp_summarize(&all, &rep->all);
        kiln_golden_apply_thresholds(rep, t);
    }
    kiln_cmp_free(&all);
    if (ctx) kiln_ctx_free(ctx);
    free(logits);
    free(next);
    free(cmp);
    rep->seconds = kiln_now() - t0;
    if (rc) kiln_golden_report_free(rep);
    return rc;
}
