/* golden/perplexity.h - perplexity over a text the way llama-perplexity
 * measures it, and the KL divergence of a model against a saved base.
 *
 * Method (llama.cpp tools/perplexity, perplexity()): the whole text is
 * tokenized once with add_special (BOS when the vocabulary adds one) and
 * without parsing special tokens; it is cut into n_chunks = n_tokens / n_ctx
 * chunks of n_ctx tokens (the tail is dropped; at least 2 * n_ctx tokens are
 * required); each chunk is evaluated from an empty cache, n_batch tokens per
 * call, with its first token replaced by BOS when the vocabulary adds BOS;
 * only the second half is scored: the logits at positions n_ctx/2 ..
 * n_ctx - 2 predict the tokens after them (n_ctx - 1 - n_ctx/2 per chunk).
 * PPL = exp(mean NLL), and its error is PPL * sqrt((mean(NLL^2) -
 * mean(NLL)^2) / (count - 1)).
 *
 * With a save path, the scored logits of every chunk go to a KILNLOGT file
 * of kind "kld-base" (with the chunk's tokens as evaluated). With a base
 * path, the chunks come from that file instead of a text, and each scored
 * position is compared with the base's logits (kld.h). */
#ifndef KILN_PERPLEXITY_H
#define KILN_PERPLEXITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "../runtime/runtime.h"
#include "kld.h"

typedef struct kiln_ppl_progress {
    int64_t chunk, n_chunks;        /* chunk is 1-based */
    double ppl;                     /* running estimate */
    const kiln_cmp_acc *kld;        /* running comparison in KLD mode, else NULL */
    double seconds;                 /* so far */
} kiln_ppl_progress;

typedef struct kiln_ppl_params {
    int64_t n_ctx;                  /* chunk length (>= 4) */
    int64_t n_batch;                /* tokens per kiln_eval call; clamped to n_ctx */
    int64_t n_chunks;               /* <= 0: every chunk */
    kiln_numeric_mode mode;
    const char *save_path;          /* write a KLD base file (text mode only) */
    bool save_f16, force;
    const char *base_path;          /* KLD mode: chunks and base logits from this file */
    bool layer_major;               /* all chunks through each layer in turn (runtime/layer_major.h):
                                     * each weight read once, for models larger than memory */
    uint64_t max_memory;            /* its cap (0: none) */
    const char *scratch_dir;        /* where its activations spill */
    void (*on_chunk)(void *user, const kiln_ppl_progress *p);
    void *user;
} kiln_ppl_params;

typedef struct kiln_ppl_result {
    double ppl, ppl_err;            /* ppl_err is NaN when the variance is not positive */
    uint64_t count;                 /* scored tokens */
    int64_t n_ctx, n_chunks;
    int64_t n_text_tokens;          /* of the whole text (KLD mode: of the base's text) */
    int64_t n_tokens;               /* evaluated: n_chunks * n_ctx */
    double seconds, tokens_per_second;
    bool add_bos;
    bool has_kld;
    kiln_cmp_summary kld;           /* KLD mode */
    json_t *model;                  /* the model's fingerprint */
    json_t *base_model;             /* KLD mode: the base's fingerprint */
} kiln_ppl_result;

/* Text mode: scores `text` (len bytes). KLD mode (p->base_path set): text
 * may be NULL; when given, its hash must match the one in the base file.
 * Fills *r (free with kiln_ppl_result_free). Returns 0, or -1 with err set:
 * a too-short text, a base file for another vocabulary or corrupt, ... */
int kiln_perplexity(const kiln_model *m, const char *text, size_t len, const kiln_ppl_params *p,
                    kiln_ppl_result *r, kiln_err *err);

void kiln_ppl_result_free(kiln_ppl_result *r);

/* XXH64 of a text, as recorded in base files. */
uint64_t kiln_text_hash(const char *text, size_t len);

#endif
