/* golden/golden_file.h - golden files: a model's logits at every position
 * of a few prompts, kept so that later builds, conversions or quantizations
 * can be checked against them (check.h).
 *
 * `kiln golden record` writes a KILNLOGT file (logits_file.h) of kind
 * "golden": one record per prompt (all its ids, every row), and in the
 * metadata the model's fingerprint (fingerprint.h), the prompt texts and
 * the numeric mode. Prompts are tokenized as llama.cpp's dump_logits does
 * for ../shared/golden/logits/ (add_special, no special-token parsing) and
 * each is evaluated as one batch from an empty cache.
 *
 * Loading accepts those files and KLGT files written by other engines
 * (klgt.h), told apart by their magic. */
#ifndef KILN_GOLDEN_FILE_H
#define KILN_GOLDEN_FILE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "../core/fileio.h" /* kiln_read_text(), used by the golden tools */
#include "../runtime/runtime.h"
#include "klgt.h"

#define KILN_GOLDEN_KIND "golden"

typedef struct kiln_golden {
    kiln_logit_set set;
    const char *format;  /* "kiln" or "klgt" */
    json_t *meta;        /* kiln files: the metadata object; KLGT: NULL */
} kiln_golden;

/* Reads a golden file of either format. Returns 0 or -1 (unknown magic,
 * corrupt or truncated file, a KILNLOGT file of another kind, ...). */
int kiln_golden_load(const char *path, kiln_golden *g, kiln_err *err);
void kiln_golden_free(kiln_golden *g);

/* The model fingerprint stored in the file, or NULL (KLGT). */
const json_t *kiln_golden_model(const kiln_golden *g);

/* Splits a prompts file into its non-empty lines (a trailing '\r' is
 * dropped), at most max (0: all). *lines is malloc'd, each line too; free
 * with kiln_golden_free_prompts. Returns 0 or -1 (unreadable, no prompt). */
int kiln_golden_read_prompts(const char *path, size_t max, char ***lines, size_t *n, kiln_err *err);
void kiln_golden_free_prompts(char **lines, size_t n);

typedef struct kiln_golden_record_params {
    bool f16;                 /* store rows as f16: half the size */
    bool force;               /* replace an existing output */
    kiln_numeric_mode mode;
} kiln_golden_record_params;

/* Evaluates every prompt and writes the golden file `out` atomically
 * (record.c). Returns 0 or -1. */
int kiln_golden_record(const kiln_model *m, char *const *prompts, size_t n_prompts, const char *out,
                       const kiln_golden_record_params *p, kiln_err *err);

#endif
