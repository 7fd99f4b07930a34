/* imatrix/chunks.h - the calibration text as llama-imatrix feeds it to the
 * model: tokenized once as a whole (llama_tokenize with add_special, so
 * BOS first when the vocabulary adds one; control-token text is plain text
 * unless parse_special), then cut into consecutive chunks of n_ctx tokens.
 * The tail that does not fill a chunk is not used. When the vocabulary
 * adds BOS, each chunk's first token is *replaced* by BOS (not shifted),
 * exactly as llama-imatrix does, so chunk c always starts at token
 * c * n_ctx of the text and a resumed run sees the same chunks. */
#ifndef KILN_IMATRIX_CHUNKS_H
#define KILN_IMATRIX_CHUNKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"
#include "../tokenizer/tokenizer.h"

typedef struct kiln_imx_tokens {
    int32_t *ids;     /* the whole text's tokens */
    size_t n;
    int64_t n_ctx;    /* tokens per chunk */
    int64_t n_chunks; /* chunks to evaluate */
    int32_t bos;      /* put first in every chunk; KILN_TOKEN_NULL: none */
} kiln_imx_tokens;

/* Tokenizes `text` and plans min(max_chunks, whole chunks) chunks
 * (max_chunks <= 0: all). Refuses, with a message naming `what` (e.g. the
 * calibration file), an empty text and a text of fewer than n_ctx tokens.
 * A trailing EOS that the vocabulary adds is dropped: llama-imatrix runs
 * only on vocabularies without one, and mid-text EOS would mislead. */
int kiln_imx_tokens_make(const kiln_tokenizer *t, const char *text, size_t len, int64_t n_ctx,
                         int64_t max_chunks, bool parse_special, const char *what, kiln_imx_tokens *out,
                         kiln_err *err);

/* Builds a plan over ids the caller already has (copied). Same checks. */
int kiln_imx_tokens_from_ids(const int32_t *ids, size_t n, int32_t bos, int64_t n_ctx, int64_t max_chunks,
                             const char *what, kiln_imx_tokens *out, kiln_err *err);

void kiln_imx_tokens_free(kiln_imx_tokens *tk);

/* Writes chunk c's n_ctx tokens to out, BOS first when there is one. */
void kiln_imx_chunk(const kiln_imx_tokens *tk, int64_t c, int32_t *out);

/* A 64-bit fingerprint of the token stream and chunk size (FNV-1a), so a
 * checkpoint is never resumed on other text or other chunking. */
uint64_t kiln_imx_tokens_hash(const kiln_imx_tokens *tk);

#endif
