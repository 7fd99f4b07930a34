/* runtime/layer_major.h - evaluating many sequences layer by layer, for
 * models larger than memory.
 *
 * kiln_eval's order is token-major: each chunk of text goes through every
 * layer before the next chunk starts, so every chunk reads the whole
 * model. When the model does not fit in RAM that re-reads it from disk
 * once per chunk (thrashing). Here the loops are swapped: all sequences go
 * through layer 0, then all through layer 1, ..., so each weight is read
 * once per pass, and a layer's pages are let go once it is done. Between
 * layers each sequence's residual stream (n_tok x n_embd floats) waits in
 * memory, or in a scratch file when those would not fit the memory cap.
 *
 * Every sequence starts at position 0 with an empty cache and is cut into
 * batches exactly as kiln_eval calls of n_batch tokens cut it, and each
 * tensor sees the
 * sequences in order, so the numbers (logits, and the statistics a matmul
 * hook collects) are bit-identical to evaluating the sequences one after
 * another with kiln_eval. */
#ifndef KILN_LAYER_MAJOR_H
#define KILN_LAYER_MAJOR_H

#include "runtime.h"

typedef struct kiln_lm_params {
    kiln_ctx_params ctx;     /* n_ctx: the tokens of one sequence */
    int64_t n_batch;         /* tokens per kiln_eval call it stands for (0: n_ctx) */
    uint64_t max_memory;     /* bytes kiln may keep resident (0: no cap) */
    const char *scratch_dir; /* where activations spill (NULL: $TMPDIR, else /tmp) */
    /* Called before sequence `seq` is evaluated in a layer, and before its
     * final norm and output (imatrix: which chunk the hook's data is of). */
    void (*on_seq)(void *user, int64_t seq);
    /* Called with each sequence's n_tok x n_vocab logits after the last
     * layer, in order; NULL: no logits are computed (the output hook still
     * runs when set). Rows at positions below ctx.logits_from are zeros:
     * as kiln_eval, the last layer's FFN and the output skip them. A
     * negative return stops the pass. */
    int (*on_logits)(void *user, int64_t seq, const float *logits, kiln_err *err);
    /* Called after each layer (progress). */
    void (*on_layer)(void *user, int64_t layer, int64_t n_layer);
    void *user;
} kiln_lm_params;

typedef struct kiln_lm_stats {
    uint64_t activation_bytes; /* n_seqs x n_tok x n_embd x 4 (x hc: deepseek4's streams) */
    bool spilled;              /* activations went to a scratch file */
} kiln_lm_stats;

/* Evaluates n_seqs sequences of p->ctx.n_ctx tokens each (tokens holds
 * them one after another). Returns 0, or -1 with err set. */
int kiln_eval_layer_major(const kiln_model *m, const kiln_lm_params *p, const int32_t *tokens, int64_t n_seqs,
                          kiln_lm_stats *stats, kiln_err *err);

/* Bytes of the model's tensors: what token-major evaluation keeps touching. */
uint64_t kiln_model_weight_bytes(const kiln_model *m);

/* Bytes this process can hold before the system (or its memory cgroup)
 * reclaims them: the smaller of MemAvailable and the cgroup's limit
 * minus its usage. 0 when neither can be read. */
uint64_t kiln_memory_available(void);

#endif
