/* splice/splice.h - `kiln splice`: mixing tensors of two GGUF models, and
 * cutting experts out of a MoE, without dequantizing anything.
 *
 * A splice takes a BASE and a DONOR of the same architecture and shape.
 * The output is BASE (metadata, tensor order, alignment, every unselected
 * tensor byte for byte) with the selected tensors taken byte for byte from
 * DONOR, in DONOR's type. With expert ids, only those experts' slabs of the
 * 3-D expert tensors are replaced; that is a byte copy when both files store
 * the tensor in one type, and a dequantize-and-requantize of just those
 * slabs (optionally imatrix-weighted) when --requantize allows it.
 * Keep-experts mode has no donor: it slices every expert-indexed tensor
 * (the ffn_*_exps tensors, the router ffn_gate_inp, exp_probs_b) down to
 * the kept experts and updates ARCH.expert_count.
 *
 * Work is split in two so that --dry-run and the real run can never
 * disagree: kiln_splice_plan_make() opens the inputs, checks everything
 * that can be refused and decides the fate of every tensor without reading
 * tensor data; kiln_splice_write() executes that plan, streaming through
 * the core writer (atomic, split-capable) with memory bounded by a copy
 * chunk, not by the model.
 *
 * What it does not do: rename or add tensors, merge metadata from the
 * donor, or change general.file_type (the base's value is kept, so a
 * spliced file still says what its bulk was quantized to). */
#ifndef KILN_SPLICE_H
#define KILN_SPLICE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/error.h"
#include "../core/gguf.h"
#include "../core/imatrix_file.h"

typedef struct kiln_splice_opts {
    const char *base;
    const char *donor;                /* NULL in keep-experts mode */
    const char *output;               /* may be NULL for a dry run */
    const char *const *tensor_regex;  /* PCRE2 (core/name_regex.h); a tensor matching any is selected */
    int n_tensor_regex;
    const char *layers;               /* "A-B,C,..." or NULL */
    bool experts;                     /* only ffn_*_exps tensors */
    const char *expert_ids;           /* "0,3,5" (ranges allowed) or NULL */
    bool requantize;                  /* convert donor slabs whose type differs */
    const char *imatrix;              /* imatrix GGUF for --requantize, or NULL */
    const char *keep_experts;         /* "0,2": keep-experts mode, or NULL */
    uint64_t split_max_size;          /* output shards, as llama-gguf-split */
    uint64_t split_max_tensors;
    bool force;                       /* overwrite an existing output */
} kiln_splice_opts;

typedef enum kiln_splice_action {
    KILN_SPLICE_FROM_BASE, /* the base's bytes, unchanged */
    KILN_SPLICE_TENSOR,    /* the donor's whole tensor, in its type */
    KILN_SPLICE_SLABS,     /* the chosen experts' slabs copied from the donor */
    KILN_SPLICE_REQUANT,   /* the chosen experts' slabs requantized to the base type */
    KILN_SPLICE_KEEP,      /* the base tensor cut down to the kept experts */
} kiln_splice_action;

typedef struct kiln_splice_item {
    char *name;
    const kiln_tensor *base;
    const kiln_tensor *donor;       /* NULL unless the donor contributes */
    kiln_splice_action action;
    uint32_t type;                  /* output type */
    uint32_t n_dims;
    int64_t ne[KILN_GGUF_MAX_DIMS]; /* output shape */
    uint64_t bytes_before, bytes_after;
    const kiln_imatrix_entry *imx;  /* REQUANT: the importance weights, or NULL */
} kiln_splice_item;

typedef struct kiln_splice_plan {
    kiln_splice_opts opts;
    kiln_gguf *base, *donor;
    kiln_imatrix *imatrix;          /* NULL without --imatrix */
    char *arch;                     /* general.architecture */
    uint64_t n_expert;              /* ARCH.expert_count, 0 for a dense model */
    bool *expert_sel;               /* n_expert flags: --expert-ids / --keep-experts */
    uint64_t n_expert_sel;
    uint64_t expert_used, expert_used_after; /* ARCH.expert_used_count */
    kiln_splice_item *items;        /* one per base tensor, in base order */
    uint64_t n_items, n_changed;
    uint64_t bytes_before, bytes_after;       /* all tensor data */
    uint64_t weights_before, weights_after;   /* all elements */
    char *selection;                /* recorded as kiln.splice.selection */
    char donor_id[512];             /* kiln.splice.donor, set by kiln_splice_write */
    char **warnings;
    uint64_t n_warnings;
    const char **inputs;            /* every input file (all shards): never written */
    int n_inputs;
} kiln_splice_plan;

/* Opens the inputs and decides every tensor's fate; reads no tensor data.
 * Every refusal (different architecture, block or expert count, shape
 * mismatch, empty selection, missing donor tensor, type mismatch on an
 * expert splice, output equal to an input) happens here, with one line
 * in err. On success the plan owns the open files; free it with
 * kiln_splice_plan_free() (also after a failure: it is then empty). */
int kiln_splice_plan_make(const kiln_splice_opts *o, kiln_splice_plan *p, kiln_err *err);
void kiln_splice_plan_free(kiln_splice_plan *p);

/* Writes the output the plan describes. On any error, nothing is left at
 * the output path (nor a .tmp). Fills p->donor_id. */
int kiln_splice_write(kiln_splice_plan *p, kiln_err *err);

/* The plan for people (changed tensors, totals, bits per weight) and as
 * JSON (schema "kiln.splice/1"). */
void kiln_splice_print_plan(FILE *out, const kiln_splice_plan *p);
void kiln_splice_print_plan_json(FILE *out, const kiln_splice_plan *p);

/* ---- selection helpers (select.c) --------------------------------------- */

/* Parses "0,3,5-7" into flags sel[0..limit-1] (set, not cleared first).
 * `what` names the option in messages. Returns the number of distinct
 * values, or -1 with a message on bad syntax or a value >= limit. */
int64_t kiln_splice_parse_set(const char *spec, uint64_t limit, const char *what, bool *sel, kiln_err *err);

/* True for routed-expert weights: a name segment ffn_*_exps. */
bool kiln_splice_is_expert_tensor(const char *name);

/* True for every tensor indexed by expert along its outermost dimension:
 * expert tensors, the router (ffn_gate_inp) and exp_probs_b. */
bool kiln_splice_is_expert_indexed(const char *name);

/* Name of the action, as printed in plans ("tensor", "experts", ...). */
const char *kiln_splice_action_name(kiln_splice_action a);

#endif
