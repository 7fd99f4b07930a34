/* runtime/generate.c - sampling and the generation loop (see generate.h). */
#include "generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/progress.h"

void kiln_sampler_init(kiln_sampler *s, const kiln_sampler_params *p) {
    memset(s, 0, sizeof *s);
    s->p = *p;
    /* splitmix64 of the seed, so that seeds 0, 1, 2 start far apart */
    s->state = p->seed + 0x9E3779B97F4A7C15ull;
}

void kiln_sampler_free(kiln_sampler *s) {
    free(s->cand);
    free(s->prob);
    memset(s, 0, sizeof *s);
}

/* splitmix64: a uniform double in [0, 1). */
static double uniform(kiln_sampler *s) {
    uint64_t z = (s->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static int by_logit_desc(const void *x, const void *y) {
    const kiln_cand *a = x, *b = y;
    if (a->logit != b->logit) return a->logit < b->logit ? 1 : -1;
    return (a->id > b->id) - (a->id < b->id);
}

int32_t kiln_sample(kiln_sampler *s, const float *logits, int64_t n_vocab) {
    if (s->p.temp <= 0) {
        int64_t best = 0;
        for (int64_t i = 1; i < n_vocab; i++)
            if (logits[i] > logits[best]) best = i;
        return (int32_t)best;
    }
    if (n_vocab > s->cap) {
        kiln_cand *cand = realloc(s->cand, (size_t)n_vocab * sizeof *cand);
        double *prob = realloc(s->prob, (size_t)n_vocab * sizeof *prob);
        if (cand) s->cand = cand;
        if (prob) s->prob = prob;
        if (!cand || !prob) return -1;
        s->cap = n_vocab;
    }
    for (int64_t i = 0; i < n_vocab; i++) s->cand[i] = (kiln_cand){logits[i], (int32_t)i};
    qsort(s->cand, (size_t)n_vocab, sizeof *s->cand, by_logit_desc);
    int64_t n = s->p.top_k > 0 && s->p.top_k < n_vocab ? s->p.top_k : n_vocab;
    double max = s->cand[0].logit, sum = 0;
    for (int64_t i = 0; i < n; i++) sum += s->prob[i] = exp((s->cand[i].logit - max) / s->p.temp);
    if (s->p.top_p > 0 && s->p.top_p < 1) {
        double mass = 0;
        for (int64_t i = 0; i < n; i++) {
            mass += s->prob[i] / sum;
            if (mass >= s->p.top_p) {
                n = i + 1;
                break;
            }
        }
        sum = 0;
        for (int64_t i = 0; i < n; i++) sum += s->prob[i];
    }
    double r = uniform(s) * sum;
    for (int64_t i = 0; i < n; i++) {
        r -= s->prob[i];
        if (r < 0) return s->cand[i].id;
    }
    return s->cand[n - 1].id;
}

int kiln_generate(kiln_ctx *c, const kiln_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n_predict,
                  int64_t n_batch, kiln_sampler *s, kiln_token_cb cb, void *user, kiln_gen_stats *st, kiln_err *err) {
    memset(st, 0, sizeof *st);
    if (n_prompt <= 0) return kiln_fail(err, NULL, NULL, -1, "the prompt has no tokens");
    if (n_batch <= 0) n_batch = 512;
    int64_t nv = m->hp.n_vocab, rows = n_batch < n_prompt ? n_batch : n_prompt;
    float *logits = malloc((size_t)rows * nv * sizeof *logits);
    if (!logits) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    int32_t eos = kiln_tokenizer_eos(m->tok);
    double t0 = kiln_now();
    int64_t last = 0;
    for (int64_t j = 0; j < n_prompt; j += n_batch) {
        int64_t n = n_prompt - j < n_batch ? n_prompt - j : n_batch;
        if (kiln_eval(c, prompt + j, n, logits, err)) {
            free(logits);
            return -1;
        }
        last = n - 1;
    }
    st->n_prompt = n_prompt;
    st->prompt_seconds = kiln_now() - t0;
    const float *row = logits + last * nv;
    t0 = kiln_now();
    int rc = 0;
    for (int64_t i = 0; i < n_predict; i++) {
        int32_t id = kiln_sample(s, row, nv);
        if (id < 0) {
            rc = kiln_fail(err, NULL, NULL, -1, "out of memory");
            break;
        }
        st->n_generated++;
        if (id == eos) {
            st->stopped_at_eos = true;
            break;
        }
        if ((cb && cb(user, id)) || i + 1 == n_predict) break;
        if (kiln_eval(c, &id, 1, logits, err)) {
            rc = -1;
            break;
        }
        row = logits;
    }
    st->gen_seconds = kiln_now() - t0;
    free(logits);
    return rc;
}
