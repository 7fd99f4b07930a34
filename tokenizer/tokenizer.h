/* tokenizer/tokenizer.h - turning text into token ids the way llama.cpp does.
 *
 * A kiln_tokenizer is built from a GGUF's tokenizer.ggml.* metadata and
 * reproduces llama_tokenize() id for id: SentencePiece-style merges by score
 * with byte fallback for `tokenizer.ggml.model = llama`, byte-level BPE by
 * merge rank with the `tokenizer.ggml.pre` pre-tokenizer for `gpt2`, and
 * llama.cpp's splitting of special (control / user-defined) tokens out of
 * the text first. Other vocabulary kinds (bert, t5, rwkv, ...) are refused
 * at load time rather than tokenized approximately.
 *
 * The runtime, perplexity and imatrix tools use only this header. A loaded
 * tokenizer owns copies of everything it needs, so the GGUF may be closed
 * afterwards, and it is read-only: several threads may tokenize at once. */
#ifndef KILN_TOKENIZER_H
#define KILN_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"
#include "../core/gguf.h"

/* "no such token", as llama.cpp's LLAMA_TOKEN_NULL. */
#define KILN_TOKEN_NULL (-1)

typedef struct kiln_tokenizer kiln_tokenizer;

/* Builds the tokenizer of `g`'s vocabulary. Returns NULL with one line in
 * `err` when the metadata is missing, malformed, or of an unsupported kind.
 * Free with kiln_tokenizer_free(). */
kiln_tokenizer *kiln_tokenizer_load(const kiln_gguf *g, kiln_err *err);

/* NULL is fine. */
void kiln_tokenizer_free(kiln_tokenizer *t);

/* Tokenizes `len` bytes of `text` (UTF-8; invalid bytes are handled as
 * llama.cpp does) exactly like llama_tokenize(vocab, text, len, ..,
 * add_special, parse_special): add_special adds BOS and/or EOS as the
 * vocabulary's add_bos/add_eos flags say; parse_special lets control tokens
 * written in the text (e.g. "<s>") become their ids. On success *ids is a
 * malloc'd array of *n ids (never NULL, even when *n is 0) that the caller
 * frees; returns 0. Returns -1 with `err` filled on failure. */
int kiln_tokenize(const kiln_tokenizer *t, const char *text, size_t len, bool add_special,
                  bool parse_special, int32_t **ids, size_t *n, kiln_err *err);

/* The bytes token `id` stands for when printed (llama_token_to_piece with
 * special=true): "▁" turned back into spaces, byte tokens as their byte,
 * byte-level BPE text decoded. The result lives as long as `t`, is
 * NUL-terminated, and its length is stored in *len (it may hold NUL bytes,
 * e.g. the piece of <0x00>). Returns "" for an out-of-range id. */
const char *kiln_token_piece(const kiln_tokenizer *t, int32_t id, size_t *len);

/* Vocabulary facts; ids are KILN_TOKEN_NULL when the vocabulary has none. */
uint32_t kiln_tokenizer_n_vocab(const kiln_tokenizer *t);
int32_t kiln_tokenizer_bos(const kiln_tokenizer *t);
int32_t kiln_tokenizer_eos(const kiln_tokenizer *t);
bool kiln_tokenizer_add_bos(const kiln_tokenizer *t);
bool kiln_tokenizer_add_eos(const kiln_tokenizer *t);
/* Whether `id` is a control token (BOS, EOS, <|im_start|>, ...), which
 * text output leaves out as llama.cpp's does without --special. */
bool kiln_token_is_control(const kiln_tokenizer *t, int32_t id);

#endif
