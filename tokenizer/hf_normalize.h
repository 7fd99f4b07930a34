/* tokenizer/hf_normalize.h - the Unicode steps of a Hugging Face
 * tokenizer.json "normalizer", for `kiln tokenize --hf-normalize`.
 *
 * llama.cpp does not normalize text before tokenizing (Qwen's NFC, BERT's
 * lowercasing...), and kiln's contract is llama.cpp's ids, so by default
 * kiln does not either. A user who wants the ids Hugging Face's tokenizers
 * give runs the text through this first. Supported steps: NFC, NFD, NFKC,
 * NFKD, Lowercase, StripAccents, Strip, Sequence. The two steps of an SPM
 * normalizer, Prepend("▁") and Replace(" " -> "▁"), are what kiln's (and
 * llama.cpp's) SPM tokenizer already does to every text, so they are
 * recognised and left to it. Anything else is refused when the file is
 * loaded, naming the step, so no text is ever half-normalized. */
#ifndef KILN_HF_NORMALIZE_H
#define KILN_HF_NORMALIZE_H

#include <stddef.h>

#include "../core/error.h"

typedef struct kiln_hf_normalizer kiln_hf_normalizer;

/* Reads the "normalizer" of PATH, a tokenizer.json or a folder holding
 * one. A null normalizer gives one with no steps. NULL with err set on a
 * missing file, invalid JSON or an unsupported step. */
kiln_hf_normalizer *kiln_hf_normalizer_load(const char *path, kiln_err *err);

/* Number of steps that change text (0: the text passes unchanged). */
int kiln_hf_normalizer_steps(const kiln_hf_normalizer *n);

/* The normalized copy of text[0..len) (NUL-terminated, malloc'd; its
 * length in *out_len), or NULL with err set when the text is not UTF-8. */
char *kiln_hf_normalize(const kiln_hf_normalizer *n, const char *text, size_t len, size_t *out_len, kiln_err *err);

void kiln_hf_normalizer_free(kiln_hf_normalizer *n);

#endif
