/* quantize/sensitivity_file.h - the sensitivity file: for each quantizable
 * tensor of one model and each candidate type, the bytes the tensor takes
 * in that type and the KLD it adds to the final logits when it alone has
 * that type. `kiln quantize --analyze` writes it (sensitivity_scan.c);
 * `kiln quantize --target-bpw/--target-size` reads it (budget.c).
 *
 * Format "kiln-sensitivity/1", UTF-8 text, tab-separated:
 *
 *     # kiln-sensitivity/1
 *     # arch	llama	layout_xxh64	0123456789abcdef	n_tensors	75
 *     # text	calib.txt	n_tokens	512	imatrix	-
 *     tensor	type	bytes	dkld
 *     blk.0.attn_q.weight	Q2_K	86016	1.234567891e-04
 *     ...
 *
 * The three header lines and the column line are required, in that order;
 * then one row per (tensor, type), unique, with the type by ggml's name,
 * bytes as a decimal integer (all experts of a 3-D tensor) and dkld printed
 * with %.9e. This file only reads and writes; it does not judge whether the
 * numbers make sense for a quantization (budget.c checks bytes against the
 * model it quantizes). */
#ifndef KILN_SENSITIVITY_FILE_H
#define KILN_SENSITIVITY_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"
#include "../core/gguf.h"
#include "../core/types.h"

typedef enum kiln_type kiln_type;

typedef struct kiln_sens_row {
    char *tensor;   /* tensor name as in the GGUF */
    kiln_type type; /* candidate ggml type (core type enum) */
    uint64_t bytes; /* bytes of the tensor in that type (all experts) */
    double dkld;    /* estimated mean KLD added to the final logits when only this tensor has this type */
} kiln_sens_row;

typedef struct kiln_sensitivity {
    char arch[64];         /* general.architecture */
    char layout_xxh64[17]; /* kiln_fingerprint()'s layout_xxh64 of the model scanned (golden/fingerprint.h) */
    int64_t n_tensors;     /* tensors in the model */
    char text[256];        /* calibration text file base name */
    int64_t n_tokens;      /* tokens scanned */
    char imatrix[256];     /* imatrix base name, "-" for none */
    size_t n_rows;
    kiln_sens_row *rows;   /* sorted by tensor (model order) then type id */
} kiln_sensitivity;

/* Writes `s` to `path` as NAME.tmp, fsynced, renamed over NAME. Fails (and
 * leaves no file) when a name or header field holds a tab or newline, which
 * the format cannot carry. Returns 0, or -1 with err filled. */
int kiln_sensitivity_write(const char *path, const kiln_sensitivity *s, kiln_err *err);

/* Reads `path` into `s` (which it zeroes first; free with
 * kiln_sensitivity_free, also after a failure). Rows keep the file's order.
 * Errors are one line naming the file, the line and the field:
 * "FILE: bytes at line 7: not an integer: 'x'". Returns 0 or -1. */
int kiln_sensitivity_read(const char *path, kiln_sensitivity *s, kiln_err *err);

/* Frees the rows and zeroes `s`. */
void kiln_sensitivity_free(kiln_sensitivity *s);

/* 0 when s was scanned from a model with this layout (same arch, tensor
 * count and layout_xxh64 as `g`), else -1 with
 * "PATH: sensitivity file is for another model (...)" in err, PATH being the
 * sensitivity file's name. */
int kiln_sensitivity_matches(const kiln_sensitivity *s, const char *path, const kiln_gguf *g,
                             kiln_err *err);

#endif
