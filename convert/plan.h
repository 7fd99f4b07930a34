/* convert/plan.h - the tensor plan: every GGUF tensor the conversion will
 * write, in llama.cpp's order, with its name, shape, type, and where its
 * bytes come from and how they are transformed. Built from the safetensors
 * headers and config.json alone; no tensor data is read.
 *
 * Building the plan is where a model is validated: every tensor must map
 * to a GGUF name, have a supported dtype, and have the shape config.json
 * implies (an error names the key and the tensor); every block needs its
 * tensors and every expert set must be complete. */
#ifndef KILN_CONVERT_PLAN_H
#define KILN_CONVERT_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/safetensors.h"
#include "arch.h"
#include "hparams.h"
#include "stlist.h"

typedef enum cv_outtype { CV_OUT_AUTO, CV_OUT_F32, CV_OUT_F16, CV_OUT_BF16, CV_OUT_Q8_0, CV_OUT_TQ1_0, CV_OUT_TQ2_0 } cv_outtype;

enum cv_xform {
    CV_X_NONE,      /* parts' bytes in order (one part, or stacked experts) */
    CV_X_PERMUTE,   /* llama q/k: rows regrouped within n_head groups */
    CV_X_TRANSPOSE, /* GPT-2 Conv1D */
    CV_X_NORM_SHIFT, /* Gemma norms: w + 1, rounded to the source dtype */
    CV_X_TERNARY,   /* BitNet: the whole tensor ternarized (ternary.c) */
    CV_X_MXFP4,     /* HF MXFP4 blocks (part.st) + scales (part.scale) -> ggml MXFP4 */
    CV_X_DEINTERLEAVE, /* every other row (bias: value) of a fused gate_up, from `parity` */
    CV_X_KV_B,      /* DeepSeek kv_b_proj: `parity` 0 its k part transposed, 1 its v part */
};

typedef struct cv_part {
    int64_t st;    /* index in the stlist */
    int64_t scale; /* F8 block scales (weight_scale_inv), or -1 */
} cv_part;

typedef struct cv_out {
    char *name;             /* GGUF tensor name */
    const char *hf_name;    /* first source tensor's name (borrowed) */
    uint32_t n_dims;
    int64_t ne[4];          /* GGUF order: ne[0] is the row length */
    uint32_t type;          /* ggml type written */
    bool f32_rule;          /* F32 by llama.cpp's rules, whatever the outtype */
    kiln_st_dtype dtype;    /* source dtype (all parts share it) */
    uint8_t xform;
    uint32_t n_head;        /* groups for CV_X_PERMUTE */
    int64_t src_rows;       /* HF dim 0 of one part (permute, transpose) */
    uint8_t parity;         /* CV_X_MXFP4 with stride 2, CV_X_DEINTERLEAVE: 0 even, 1 odd; CV_X_KV_B: 0 k, 1 v */
    uint8_t stride;         /* CV_X_MXFP4: 1 all rows, 2 every other row */
    uint32_t n_parts;
    cv_part *parts;
    float *gen;             /* generated F32 data instead of parts, or NULL */
    uint64_t nbytes;        /* bytes written */
    int64_t nelements;
} cv_out;

typedef struct cv_plan {
    cv_out *t;
    uint64_t n;
    cv_outtype outtype;      /* resolved: never AUTO */
    uint32_t file_type;      /* general.file_type (llama_ftype) */
    int64_t block[2];        /* F8 weight_block_size, 0 when none */
    uint64_t data_bytes;     /* sum of nbytes */
} cv_plan;

/* Builds the plan. `config` is the flattened config.json. 0 or -1. */
int cv_plan_build(const cv_arch *a, json_t *config, const cv_hp *hp, const cv_stlist *st, cv_outtype outtype,
                  cv_plan *p, kiln_err *err);
void cv_plan_free(cv_plan *p);

/* Outtype names ("f32", "f16", "bf16", "q8_0", "tq1_0", "tq2_0", "auto") <-> values. */
int cv_outtype_parse(const char *s);
const char *cv_outtype_name(cv_outtype t);

#endif
