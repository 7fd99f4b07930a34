/* runtime/generate.h - continuing a prompt token by token: a sampler
 * (greedy, or temperature with top-k / top-p and a seeded generator) and
 * the prefill-then-decode loop over kiln_eval.
 *
 * This is a smoke check and a demo, not a serving stack: one sequence, no
 * repetition penalties, no grammar. The same seed gives the same tokens on
 * every run and thread count (the logits do not depend on the thread
 * count, and the generator is kiln's own). */
#ifndef KILN_GENERATE_H
#define KILN_GENERATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime.h"

typedef struct kiln_sampler_params {
    float temp;       /* <= 0: greedy (argmax, lowest id on ties) */
    int32_t top_k;    /* keep the k most likely tokens; <= 0: all */
    float top_p;      /* then the smallest set with this much mass; >= 1: all */
    uint64_t seed;
} kiln_sampler_params;

typedef struct kiln_cand {
    float logit;
    int32_t id;
} kiln_cand;

typedef struct kiln_sampler {
    kiln_sampler_params p;
    uint64_t state;
    int64_t cap;
    kiln_cand *cand;  /* scratch, n_vocab */
    double *prob;
} kiln_sampler;

/* Zero-initialise, then call; free with kiln_sampler_free. */
void kiln_sampler_init(kiln_sampler *s, const kiln_sampler_params *p);
void kiln_sampler_free(kiln_sampler *s);

/* Picks the next token from one row of logits; -1 when out of memory. */
int32_t kiln_sample(kiln_sampler *s, const float *logits, int64_t n_vocab);

/* Called with each generated token; return true to stop early. */
typedef bool (*kiln_token_cb)(void *user, int32_t id);

typedef struct kiln_gen_stats {
    int64_t n_prompt, n_generated;
    double prompt_seconds, gen_seconds;
    bool stopped_at_eos;
} kiln_gen_stats;

/* Evaluates the prompt (n_batch tokens per call, 0: 512), then samples and
 * evaluates up to n_predict tokens, stopping at the vocabulary's EOS or
 * when cb asks. The context must have room for n_prompt + n_predict
 * tokens. Returns 0 or -1 with err set. */
int kiln_generate(kiln_ctx *c, const kiln_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n_predict,
                  int64_t n_batch, kiln_sampler *s, kiln_token_cb cb, void *user, kiln_gen_stats *st, kiln_err *err);

#endif
