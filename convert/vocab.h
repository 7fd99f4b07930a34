/* convert/vocab.h - exporting the tokenizer as tokenizer.* keys, with
 * llama.cpp's rules:
 *
 *   tokenizer.model (SentencePiece)          -> model "llama"  (vocab_spm.c)
 *   tokenizer.json, BPE with byte fallback   -> model "llama"  (vocab_hf.c)
 *   tokenizer.json, byte-level BPE           -> model "gpt2"   (vocab_bpe.c)
 *
 * Which are tried, in that order, is the architecture's choice (arch.h).
 * For byte-level BPE, tokenizer.ggml.pre is chosen from the tokenizer's
 * own pre_tokenizer definition (pre_name.c), or given by the caller.
 * Special tokens, add_bos/add_eos and the chat template follow gguf-py's
 * SpecialVocab (special.c).
 *
 * The files call each other one way only: each calls only files listed
 * below it (scripts/check_file_circles.sh fails on two files that call
 * each other):
 *
 *   vocab.c                         tokenizer files, choice of exporter
 *     vocab_spm.c  vocab_hf.c  vocab_bpe.c   one exporter each
 *       special.c                   SpecialVocab: ids, flags, merges, template
 *         tokens.c                  the token list (a leaf)
 *       spm.c                       tokenizer.model reader (vocab_spm.c; a leaf)
 *       pre_name.c                  tokenizer.ggml.pre (vocab_bpe.c; a leaf)
 */
#ifndef KILN_CONVERT_VOCAB_H
#define KILN_CONVERT_VOCAB_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "arch.h"
#include "kv.h"
#include "source.h"

/* llama.cpp's token types. */
enum { CV_TOK_NORMAL = 1, CV_TOK_UNKNOWN = 2, CV_TOK_CONTROL = 3, CV_TOK_USER_DEFINED = 4, CV_TOK_UNUSED = 5,
       CV_TOK_BYTE = 6 };

/* ---- tokens.c ------------------------------------------------------------ */

/* A token list under construction. */
typedef struct cv_tokens {
    char **text;     /* malloc'd each */
    uint64_t *len;
    float *scores;   /* NULL when the model has none (gpt2) */
    int32_t *types;
    uint64_t n;
} cv_tokens;

/* The most tokens a vocabulary may have. Real ones have at most a few
 * hundred thousand; a token id or vocab_size beyond this is a corrupt file,
 * refused before anything the size of the vocabulary is allocated (one
 * such id asked for 16 GB under the fuzzer). */
#define CV_MAX_TOKENS ((int64_t)1 << 24)

/* Starts a list of n tokens (n <= CV_MAX_TOKENS, else an error naming
 * `what`, the file and field n came from). 0 or -1. */
int cv_tokens_init(cv_tokens *t, uint64_t n, bool with_scores, kiln_err *err);
/* Replaces token i's text with a copy of s[0..len). 0 or -1. */
int cv_tokens_set(cv_tokens *t, uint64_t i, const char *s, uint64_t len, kiln_err *err);
void cv_tokens_free(cv_tokens *t);
/* tokenizer.ggml.tokens, .scores (if any) and .token_type. */
int cv_tokens_write(const cv_tokens *t, cv_kv *k);

/* gguf-py's does_token_look_special. */
bool cv_token_looks_special(const char *s, uint64_t len);

/* ---- vocab.c ------------------------------------------------------------- */

/* The files a tokenizer export reads, loaded once. NULL when absent. */
typedef struct cv_tok_files {
    json_t *config;           /* config.json, as found (not flattened) */
    json_t *tokenizer;        /* tokenizer.json */
    json_t *tokenizer_config; /* tokenizer_config.json */
    json_t *special_map;      /* special_tokens_map.json */
    json_t *added_tokens;     /* added_tokens.json */
} cv_tok_files;

int cv_tok_files_load(cv_source *src, cv_tok_files *f, kiln_err *err);
void cv_tok_files_free(cv_tok_files *f);

/* Writes every tokenizer.* key. `hparams` is the flattened config.json.
 * `pre_override` replaces the detected pre-tokenizer (byte-level BPE
 * only); NULL to detect. 0 or -1. */
int cv_vocab_write(const cv_arch *a, cv_source *src, const cv_tok_files *f, json_t *hparams,
                   const char *pre_override, cv_kv *k);

/* ---- vocab_spm.c, vocab_hf.c, vocab_bpe.c -------------------------------- */

/* The exporters; each returns 1 when it wrote the vocab, 0 when the
 * model's files are not its kind, -1 on error. */
int cv_vocab_spm(cv_source *src, const cv_tok_files *f, json_t *hparams, cv_kv *k);
int cv_vocab_phi3(cv_source *src, const cv_tok_files *f, json_t *hparams, const char *pre_override, cv_kv *k);
int cv_vocab_llama_hf(cv_source *src, const cv_tok_files *f, cv_kv *k);
int cv_vocab_gpt2(cv_source *src, const cv_tok_files *f, json_t *hparams, const char *pre_override, cv_kv *k);

/* ---- special.c ----------------------------------------------------------- */

/* gguf-py's SpecialVocab: loads special token ids, add_* flags, merges
 * (when load_merges) and the chat template, then writes them (merges,
 * ids, flags, template: add_to_gguf's order). n_vocab < 0: no range
 * check. 0 or -1. */
int cv_special_write(cv_source *src, const cv_tok_files *f, bool load_merges, int64_t n_vocab, cv_kv *k);

/* ---- pre_name.c ---------------------------------------------------------- */

/* Pre-tokenizer detection (pre_name.c): llama.cpp's name for tokenizer.json's
 * pre_tokenizer, or NULL with a description of it in `desc`. */
const char *cv_pretok_detect(json_t *tokenizer, char *desc, size_t cap);
/* Names kiln can detect ("gpt-2, qwen2, ..."), and every name llama.cpp
 * accepts for --pre-tokenizer. */
const char *cv_pretok_detectable(void);
bool cv_pretok_known(const char *name);

#endif
