/* imatrix/checkpoint.h - the resumable state of a `kiln imatrix` run.
 *
 * A checkpoint is one GGUF file (general.type "kiln.imatrix.checkpoint"),
 * written atomically (OUT.tmp, fsync, rename), holding the collector's
 * exact state: F64 sums (NAME.sum2, NAME.sum) and I64 counts
 * (NAME.counts), plus what is needed to refuse resuming the wrong run:
 * fingerprints of the model and of the tokenized text, the chunk size and
 * which statistics were kept, and the running perplexity. It is not an
 * imatrix (llama.cpp cannot read it) on purpose: the float imatrix formats
 * would round the state, and a resumed run would no longer end with the
 * numbers of an uninterrupted one. */
#ifndef KILN_IMATRIX_CHECKPOINT_H
#define KILN_IMATRIX_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"
#include "../core/gguf.h"
#include "collect.h"

typedef struct kiln_imx_ckpt {
    uint64_t model_hash;   /* kiln_imx_model_hash() of the model */
    uint64_t tokens_hash;  /* kiln_imx_tokens_hash() of the text */
    int64_t n_ctx;
    int64_t chunks_done;   /* chunks of the text already in the sums */
    uint32_t chunk_base;   /* chunks carried in from --in-file matrices */
    bool process_output, with_sum;
    double nll, nll2;      /* running perplexity sums */
    int64_t ppl_count;
    uint64_t n_datasets;
    char **datasets;       /* owned when read */
} kiln_imx_ckpt;

/* A fingerprint of a model's tensor layout (names, types, shapes) and
 * size: cheap, and enough to tell two models apart. */
uint64_t kiln_imx_model_hash(const kiln_gguf *g);

/* Writes `c` and `info` to `path` atomically, replacing an older
 * checkpoint. 0 or -1. */
int kiln_imx_ckpt_write(const char *path, const kiln_imx_collector *c, const kiln_imx_ckpt *info, kiln_err *err);

/* Reads a checkpoint into an empty collector (initialised with the
 * with_sum the run uses) and fills `info` (free with
 * kiln_imx_ckpt_clear()). -1 with a message when the file is not a
 * checkpoint or is damaged. */
int kiln_imx_ckpt_read(const char *path, kiln_imx_collector *c, kiln_imx_ckpt *info, kiln_err *err);

void kiln_imx_ckpt_clear(kiln_imx_ckpt *info);

#endif
