/* quantize/quantize_model.h - quantizing a whole model, streaming.
 *
 * kiln_quantize_model() is `kiln quantize` without the printing: it plans
 * every tensor's type (quantize/policy.h), refuses what cannot be done
 * well (requantizing without permission, a type llama-quantize will not
 * write without an imatrix (IQ1/IQ2, IQ3_XXS, Q2_K_S) when none is given, a
 * row no type fits (llama.cpp defines no fallback), a
 * fallback under --no-fallback, an imatrix that does not fit), then writes
 * the output one tensor at a time: each tensor is quantized with OpenMP
 * in chunks of rows, each chunk converted to f32 by the thread that
 * quantizes it when the input is not f32 already (a Hugging Face input is
 * read as f32 first), checked for NaN/Inf, written, and its input
 * released; the next tensor's input is prefetched meanwhile. Memory is
 * one quantized copy of the largest tensor and a chunk of f32 rows per
 * thread (plus one f32 copy of the largest tensor from a Hugging Face
 * input).
 *
 * The input is a GGUF (any shard of a split model), or a Hugging Face
 * model (directory, HF cache folder or archive) which convert/convert.h
 * reads tensor by tensor as f32: convert + quantize in one pass, without
 * an intermediate file.
 *
 * The output mirrors llama-quantize's: tensors by layer, then name (in
 * input shard order with keep_split; in the converter's order from an
 * archive, which then streams in one pass), the input's metadata with
 * general.quantization_version = 2 and general.file_type moved to the end,
 * then quantize.imatrix.{file,dataset,entries_count,chunks_count} when an
 * imatrix is given, then kiln.quantize.* with a size budget (the types
 * then come from quantize/budget.h; README, "Quantizing to a size
 * budget").
 *
 * kiln_quantize_tensor() is the piece other tools reuse (splice
 * --requantize, ...): f32 rows in, blocks out, with each expert of a 3-D
 * tensor weighted by its own imatrix slice. */
#ifndef KILN_QUANTIZE_MODEL_H
#define KILN_QUANTIZE_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/error.h"
#include "../core/imatrix_file.h"
#include "policy.h"
#include "sensitivity_file.h"

/* Quantizes a tensor of ne[0] x ne[1] x ne[2] x ne[3] f32 values (GGUF
 * order: rows of ne[0]) to `type`, into dst (kiln_type_row_bytes(type,
 * ne[0]) per row). `imatrix` is NULL or the tensor's entry, holding
 * ne[0] * ne[2] values: expert e is quantized with slice e (an expert
 * whose count is 0 gets weight 1 and is counted in *zero_experts, which
 * may be NULL). Input and output rows are checked for NaN/Inf. Returns
 * the bytes written, or -1 with a message. */
int64_t kiln_quantize_tensor(uint32_t type, const float *src, void *dst, const int64_t ne[4],
                              const kiln_imatrix_entry *imatrix, int64_t *zero_experts, kiln_err *err);

/* kiln_quantize_tensor() from rows of src_type (F32, F16, BF16 or any type
 * kiln can dequantize; kiln_type_row_bytes(src_type, ne[0]) per row), each
 * chunk of rows converted to f32 by the thread that quantizes it: the same
 * bytes as converting the whole tensor first and calling
 * kiln_quantize_tensor(), without the f32 copy. Returns the bytes written,
 * or -1 with a message (also for a src_type kiln cannot read). */
int64_t kiln_quantize_tensor_from(uint32_t type, uint32_t src_type, const void *src, void *dst, const int64_t ne[4],
                                  const kiln_imatrix_entry *imatrix, int64_t *zero_experts, kiln_err *err);

typedef struct kiln_quant_opts {
    kiln_quant_target target;      /* kiln_quant_target_parse() */
    bool pure;                     /* --pure: no mix rules */
    int output_type;               /* --output-tensor-type, -1 for the policy's */
    int token_embd_type;           /* --token-embedding-type, -1 for the policy's */
    kiln_type_override *overrides; /* --tensor-type, kiln_override_parse(); hit counts are updated */
    uint32_t n_overrides;
    const kiln_imatrix *imatrix;   /* --imatrix, or NULL */
    const char *imatrix_path;      /* as given, for quantize.imatrix.file */
    bool allow_requantize;         /* quantized inputs may be requantized */
    bool no_fallback;              /* a block-size fallback is an error */
    bool dry_run;                  /* plan only: nothing is written */
    bool keep_split;               /* one output shard per input shard */
    uint64_t split_max_size;       /* bytes per output shard, 0: one file */
    bool force;                    /* overwrite existing outputs */
    /* A size budget (--target-bpw / --target-size; target is then COPY and
     * no override, split or HF input is allowed): every tensor the
     * sensitivity file has rows for gets the type budget.c picks from
     * them, the rest keep theirs, and the whole file (header, metadata,
     * padding, tensors) stays within target_size bytes, or target_bpw x
     * the model's weights / 8. */
    const kiln_sensitivity *sensitivity;
    const char *sensitivity_path;  /* as given, for messages and kiln.quantize.sensitivity */
    double target_bpw;             /* > 0: the budget in bits per weight of the whole file */
    uint64_t target_size;          /* > 0: the budget in bytes of the whole file */
} kiln_quant_opts;

typedef struct kiln_quant_tensor {
    char *name;
    uint32_t n_dims;
    int64_t ne[4];
    kiln_tensor_plan plan;
    uint64_t bytes_in, bytes_out;
    bool imatrix;          /* quantized with importance weights */
    int64_t zero_experts;  /* experts whose imatrix count was 0 */
    double dkld;           /* budget: the estimated dKLD of the type picked (0 for the rest) */
} kiln_quant_tensor;

typedef struct kiln_quant_report {
    char *input;
    uint32_t ftype;                /* general.file_type written */
    uint64_t n_tensors;
    kiln_quant_tensor *tensors;    /* in output order */
    uint64_t n_elements, bytes_in, bytes_out;
    uint64_t n_quantized;          /* tensors whose type changed */
    uint64_t n_fallbacks;
    uint64_t imatrix_entries;      /* entries in the imatrix given */
    char **warnings;
    uint32_t n_warnings;
    char **outputs;                /* files written (shards) */
    uint32_t n_outputs;
    double seconds;
    /* With a budget: */
    uint64_t budget_bytes;         /* the whole file's allowance */
    uint64_t file_bytes;           /* the size of the file written (computed as the writer lays it out) */
    double estimated_kld;          /* sum of the picked rows' dKLD */
    double kld_lower_bound;        /* no plan within the budget has a smaller sum */
    bool budget_exact;             /* the allocation is proven optimal for the estimates */
} kiln_quant_report;

/* Quantizes `in` (a GGUF or a Hugging Face model) to `out` as `o` says,
 * filling `r` (also on failure, as far as it got; free it either way).
 * With dry_run, `out` may be NULL and `r` holds the full plan. Returns 0,
 * or -1 with one line in err and nothing written. */
int kiln_quantize_model(const char *in, const char *out, const kiln_quant_opts *o, kiln_quant_report *r,
                        kiln_err *err);

/* The plan alone: `in`'s tensors with the type each gets, as
 * kiln_quantize_model() chooses them, without checking or reading any
 * tensor data, so it works for types kiln has no codec for. Only whether
 * o->imatrix is set matters (its entries are not looked at). Fills `r`
 * (free it either way); 0, or -1 with a message. */
int kiln_quantize_plan(const char *in, const kiln_quant_opts *o, kiln_quant_report *r, kiln_err *err);

void kiln_quant_report_free(kiln_quant_report *r);

/* Bits per weight of `bytes` over the report's elements. */
double kiln_quant_bpw(const kiln_quant_report *r, uint64_t bytes);

#endif
