/* imatrix/run.h - a whole `kiln imatrix` collection: every chunk of the
 * calibration text evaluated from an empty KV cache with the statistics
 * hook on, the running perplexity, checkpoints and resuming.
 *
 * This is llama-imatrix's compute_imatrix loop with one sequence per
 * evaluation (llama-imatrix packs 16 chunks into one batch as separate
 * sequences; the chunks are independent either way, so the statistics are
 * the same). The thread count is the caller's (OpenMP's, process-wide).
 *
 * The statistics are those of the runtime's forward pass in the chosen
 * numeric mode. llama-imatrix evaluates with llama.cpp's default
 * attention, flash attention over an F16 KV cache (queries rounded to f16,
 * values accumulated in f16); the inputs of every product downstream of
 * attention agree with its files only as closely as the runtime's
 * attention reproduces that. */
#ifndef KILN_IMATRIX_RUN_H
#define KILN_IMATRIX_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"
#include "../runtime/runtime.h"
#include "chunks.h"
#include "../core/imatrix_file.h"

typedef struct kiln_imx_run_params {
    bool process_output;       /* collect output.weight too */
    bool with_sum;             /* keep the sums of x (in_sum) as well */
    bool compute_ppl;          /* running perplexity (needs the logits) */
    kiln_numeric_mode mode;
    const char *ckpt_path;     /* checkpoint file; NULL: none */
    uint32_t save_every;       /* checkpoint after every N chunks (0: never) */
    bool resume;               /* continue from ckpt_path when it exists */
    int64_t stop_after;        /* > 0: stop after this many new chunks, as a
                                  kill would, leaving only the checkpoint */
    const kiln_imatrix *start; /* statistics to add to (--in-file), counts in tokens */
    /* Layer-major evaluation (runtime/layer_major.h): all chunks through
     * layer 0, then layer 1, ..., each weight read once, for models larger
     * than memory. Same statistics, bit for bit. It can resume from a
     * checkpoint but writes none (save_every and stop_after are refused). */
    bool layer_major;
    uint64_t max_memory;       /* cap for layer-major (0: none) */
    const char *scratch_dir;   /* where its activations spill (NULL: $TMPDIR) */
    const char *const *datasets; /* names recorded in the output */
    uint64_t n_datasets;
    /* Called after every chunk with chunks done (of the text), the chunk
     * total and the running perplexity (0 without it). May be NULL. */
    void (*on_chunk)(void *user, int64_t done, int64_t total, double ppl);
    void *user;
} kiln_imx_run_params;

typedef struct kiln_imx_run_result {
    kiln_imatrix *im;      /* the statistics; NULL when stopped by stop_after */
    int64_t resumed_from;  /* chunk this invocation started at (0: from scratch) */
    bool resumed;          /* a checkpoint was read */
    int64_t chunks_done;   /* chunks of the text in the statistics */
    double ppl, ppl_err;   /* final estimate (0 without compute_ppl) */
    int64_t tokens;        /* evaluated by this invocation */
    double seconds;        /* spent evaluating them */
} kiln_imx_run_result;

/* Runs the collection over tk's chunks. On success returns 0 with the
 * statistics in r->im (the caller frees it with kiln_imatrix_free), or
 * with r->im NULL after stop_after chunks. Returns -1 with a message on
 * failure: a checkpoint of another model, text, chunk size or settings
 * when resuming, an evaluation error, or a non-finite activation (naming
 * the tensor and the chunk; the last checkpoint is left as it was). */
int kiln_imx_run(const kiln_model *m, const kiln_imx_tokens *tk, const kiln_imx_run_params *p,
                 kiln_imx_run_result *r, kiln_err *err);

#endif
