/* quantize/sensitivity_scan.h - `kiln quantize --analyze`: how much each
 * quantizable tensor, quantized alone to each candidate type, adds to the
 * KL divergence of the final logits on a calibration text.
 *
 * The answer is a kiln_sensitivity (sensitivity_file.h), one row per
 * (tensor, type): the bytes of the tensor in that type and its estimated
 * ΔKLD. The budget allocation (--target-bpw) picks types from it.
 *
 * Method, per tensor t (token_embd, output and every weight the policy
 * quantizes; a 3-D expert tensor is one tensor):
 *
 *   1. One reference pass over the calibration chunks keeps the residual
 *      stream entering every layer, the reference logits of the scored
 *      positions, and each product's sum of squared inputs per column
 *      (the imatrix of this text; token_embd is weighted by how often
 *      each token occurs).
 *   2. For each candidate type T the tensor is quantized exactly as `kiln
 *      quantize` would (with the --imatrix entry when one is given) and
 *      its layer-local error energy is computed:
 *          E(t,T) = sum over matrices, rows, columns of
 *                   act2[col] * (deq(q(W,T)) - W)[row,col]^2,
 *      the expected squared error of the tensor's outputs on this text.
 *   3. For a few "measured" types the true ΔKLD is computed: the model is
 *      re-run from t's layer only (starting from the cached residual
 *      stream, so the layers before it are never evaluated again) with t
 *      swapped for its quantized version (runtime/override.c), and the
 *      logits are compared with the reference, as `kiln perplexity
 *      --kl-divergence` compares them (second half of each chunk, F16 KV
 *      cache and flash attention as llama-perplexity runs).
 *   4. Every other type is estimated as ΔKLD = g_t * c_T * E(t,T): g_t is
 *      the tensor's gain (from its measured types), c_T the type's ΔKLD
 *      per unit of E relative to the other types, learnt from the last
 *      block's tensors, which are measured in every type (they are the
 *      cheapest to re-run). E alone misjudges types against each other:
 *      at 2 bits the logits suffer more than E says, and every quantized
 *      type also rounds the product's activations (Q8_K / Q8_0), a floor
 *      E does not see; c_T absorbs both.
 * Measured rows are exact (on this text); the others are estimates.
 *
 * Cost: measuring type T of tensor t costs the layers from t's to the
 * output for every calibration token. By default the scan measures as
 * many types per tensor as fit a fixed compute budget (all of them on
 * small models) and, when even one does not fit, uses fewer calibration
 * tokens (down to one chunk of 128); see plan_work in sensitivity_scan.c.
 * What it does not do: read Hugging Face models (convert first), or
 * measure pairs of tensors together (the allocation adds the ΔKLDs).
 *
 * Deterministic: every sum is taken in a fixed order whatever the thread
 * count, so the same inputs give the same file byte for byte. */
#ifndef KILN_SENSITIVITY_SCAN_H
#define KILN_SENSITIVITY_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"
#include "sensitivity_file.h"

/* What a scan did, beyond the file (for the summary and --json). */
typedef struct kiln_scan_info {
    int64_t n_ctx, n_chunks;        /* calibration chunking used */
    int64_t n_scored;               /* positions compared per measurement */
    int64_t measure;                /* types measured per tensor (the rest estimated) */
    int64_t n_tensors_scanned;      /* tensors with rows */
    int64_t n_measurements;         /* re-runs made */
    size_t n_types;                 /* candidate types used */
    kiln_type types[KILN_TYPE_COUNT];
    bool *measured;                 /* per row of the result: a measurement, not an estimate (malloc'd) */
    double *energy;                 /* per row: the error energy E (malloc'd) */
    double ref_seconds, quant_seconds, measure_seconds, seconds;
} kiln_scan_info;

typedef struct kiln_scan_params {
    const char *text_path;        /* calibration text (-f): plain, .zst, .jsonl, archive (imatrix/calib.h) */
    const char *imatrix_path;     /* optional: quantize with it, as kiln quantize --imatrix */
    const kiln_type *types;       /* candidate types; n_types 0: kiln_scan_default_types */
    size_t n_types;
    int64_t n_ctx, n_chunks;      /* llama.cpp's -c / --chunks; 0: chosen by the cost budget */
    int n_threads;                /* 0: OpenMP's default */
    bool progress;                /* progress bar (drawn only on a terminal) */
    /* Fields below are kiln's own (zero: the defaults). */
    int64_t measure;              /* types measured per tensor; 0: as many as the budget allows; < 0: all */
    kiln_scan_info *info;         /* when set, filled (free its `measured` with kiln_scan_info_free) */
} kiln_scan_params;

/* The default candidates: Q2_K, IQ2_XXS, IQ2_XS, IQ2_S, Q3_K, IQ3_XXS,
 * IQ3_S, Q4_K, IQ4_XS, Q5_K, Q6_K, Q8_0 (the IQ types that llama-quantize
 * refuses without an imatrix are left out when there is none). Writes at
 * most KILN_TYPE_COUNT types to out and returns how many. */
size_t kiln_scan_default_types(bool have_imatrix, kiln_type *out);

/* Scans model_path (a float GGUF: F32, F16 or BF16 weights) into *out
 * (zeroed first; free with kiln_sensitivity_free, also after a failure).
 * Every check that can fail on bad input runs before any work: an unknown
 * or unquantizable type, an IQ type without an imatrix, an imatrix for
 * another model or missing one of the model's weights, a text shorter
 * than one chunk, a quantized model. Returns 0, or -1 with one line in
 * err. */
int kiln_sensitivity_scan(const char *model_path, const kiln_scan_params *p, kiln_sensitivity *out, kiln_err *err);

void kiln_scan_info_free(kiln_scan_info *info);

/* ---- the pure pieces, for tests ----------------------------------------- */

/* E of one matrix: sum over rows r and columns c of
 * w[c] * (deq[r,c] - ref[r,c])^2 (w NULL: 1), with row r additionally
 * weighted by row_w[r] (NULL: 1; token_embd's token counts). Summed per
 * row, then over rows in order, in double. */
double kiln_scan_error_energy(const float *ref, const float *deq, int64_t n_rows, int64_t n_cols, const double *w,
                              const double *row_w);

/* Fills the unmeasured types of one tensor: e[i] is type i's E, dkld[i]
 * holds the measurement where measured[i], and factor[i] is type i's
 * ΔKLD per unit of E relative to the others (kiln_scan_type_factors).
 * The tensor's gain g is the geometric mean of dkld / (factor * e) over
 * its measured types; an unmeasured type gets g * factor * e (0 when E
 * is 0 or no measurement is above 0). */
void kiln_scan_estimate(const double *e, double *dkld, const bool *measured, const double *factor, size_t n);

/* Per-type factors from tensors measured in every type: tensor t holds
 * rows tensor_start[t] .. tensor_start[t + 1] - 1 (types, e, dkld);
 * anchor marks the types ordinary tensors measure. For each tensor its
 * gain over the anchors, then factor[type] = the geometric mean over
 * tensors of dkld / (gain * e); 1 for types no tensor gives. factor has
 * KILN_TYPE_COUNT entries, indexed by type id. Returns the tensors used. */
int kiln_scan_type_factors(const kiln_type *types, const double *e, const double *dkld, const bool *anchor,
                           const size_t *tensor_start, size_t n_tensors, double *factor);

/* Which of n types (sorted by bits per weight, lowest first) to measure
 * when k of them can be: spread evenly, the single one in the middle.
 * Sets pick[i]. */
void kiln_scan_pick_measured(size_t n, size_t k, bool *pick);

#endif
