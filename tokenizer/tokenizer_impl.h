/* tokenizer/tokenizer_impl.h - what the tokenizer's files share, and nothing
 * else includes: the loaded vocabulary (tokenizer.c), the two merge
 * algorithms (tokenizer_spm.c, tokenizer_bpe.c), the pre-tokenizer
 * (pre_split.c) and their shared containers (tok_base.c). Callers outside
 * tokenizer/ use tokenizer.h.
 *
 * The files call each other one way only: each calls only files listed
 * below it (scripts/check_file_circles.sh fails on two files that call
 * each other):
 *
 *   tokenizer.c                      loading, special tokens, kiln_tokenize
 *     tokenizer_spm.c  tokenizer_bpe.c   the merges of one plain run
 *       pre_split.c                  BPE's word splitter (a leaf)
 *       tok_base.c                   ids, merge queue, token lookup (a leaf)
 */
#ifndef KILN_TOKENIZER_IMPL_H
#define KILN_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"
#include "../core/strmap.h"
#include "tokenizer.h"

enum kiln_tok_kind { KILN_TOK_SPM = 1, KILN_TOK_BPE = 2 };

/* llama.cpp's per-token attributes (llama_token_attr), derived from
 * tokenizer.ggml.token_type and then adjusted by name the way llama.cpp
 * does; they decide which tokens are split out of text as special. */
enum {
    KILN_ATTR_UNKNOWN = 1 << 0,
    KILN_ATTR_UNUSED = 1 << 1,
    KILN_ATTR_NORMAL = 1 << 2,
    KILN_ATTR_CONTROL = 1 << 3,
    KILN_ATTR_USER_DEFINED = 1 << 4,
    KILN_ATTR_BYTE = 1 << 5,
    KILN_ATTR_LSTRIP = 1 << 7,
    KILN_ATTR_RSTRIP = 1 << 8,
};

typedef struct kiln_pretok kiln_pretok;

struct kiln_tokenizer {
    enum kiln_tok_kind kind;
    uint32_t n_vocab;
    const char **text;      /* token strings, NUL-terminated, in `blob` */
    uint32_t *len;
    float *score;
    uint16_t *attr;
    char *blob;
    kiln_strmap by_text;    /* token string -> id */
    kiln_strmap merges;     /* BPE: "left right" -> rank */
    char *merge_blob;
    int32_t bos, eos, unk;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    bool spm_bpe;           /* BPE over UTF-8 with spaces as U+2581 (pretok flags) */
    int32_t *special;       /* special-token candidates, longest first */
    uint32_t n_special;
    char *pieces;           /* kiln_token_piece() strings */
    uint64_t *piece_off;
    uint32_t *piece_len;
    kiln_pretok *pretok;    /* BPE only */
    char *name;             /* the GGUF's path, for messages */
};

/* A growing array of ids. */
typedef struct kiln_ids {
    int32_t *v;
    size_t n, cap;
} kiln_ids;

/* ---- tok_base.c ---------------------------------------------------------- */

/* Appends one id. 0, or -1 on out of memory. */
int kiln_ids_push(kiln_ids *o, int32_t id);

/* Id of the token spelled by s[0..n), or KILN_TOKEN_NULL. */
int32_t kiln_tok_find(const kiln_tokenizer *t, const char *s, size_t n);

/* Byte length of the UTF-8 sequence that `lead` starts, from its high
 * nibble only (llama.cpp's unicode_len_utf8: a stray continuation byte
 * counts as 1). */
static inline size_t kiln_utf8_len(unsigned char lead) {
    static const unsigned char LEN[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return LEN[lead >> 4];
}

/* ---- the merges (tokenizer_spm.c, tokenizer_bpe.c) ----------------------- */

/* Tokenize one run of plain text (no special tokens in it) and append the
 * ids. SPM escapes spaces to U+2581 itself, after prepending one space when
 * `space_prefix` is set. */
int kiln_spm_tokenize(const kiln_tokenizer *t, const char *text, size_t len, bool space_prefix,
                      kiln_ids *out, kiln_err *err);
int kiln_bpe_tokenize(const kiln_tokenizer *t, const char *text, size_t len, kiln_ids *out,
                      kiln_err *err);

/* Appends to `out` the raw bytes that a byte-level BPE token string stands
 * for (GPT-2's byte-to-unicode table reversed). Returns -1 on out of memory. */
int kiln_bpe_decode(const char *s, size_t n, char **out, size_t *out_len, size_t *cap);

/* ---- pre-tokenizer (pre_split.c) ----------------------------------------- */

typedef struct kiln_pretok_flags {
    bool ignore_merges; /* whole words that are tokens skip the merges */
    bool add_bos;       /* default add_bos before tokenizer.ggml.add_bos_token */
    bool no_bos;        /* the vocabulary has no default BOS */
    bool spm_bpe;       /* SentencePiece-style BPE (llama.cpp's Gemma 4 type): spaces
                           escaped to U+2581, words kept as UTF-8 (no GPT-2 byte
                           encoding), <0xXX> byte fallback, add_bos forced on */
} kiln_pretok_flags;

/* Compiles the splitter for a tokenizer.ggml.pre value (`pre` NULL or ""
 * means llama.cpp's "default"). Fails for names llama.cpp does not know or
 * kiln does not implement. */
int kiln_pretok_new(const char *pre, kiln_pretok **out, kiln_pretok_flags *flags,
                    const char *file, kiln_err *err);
void kiln_pretok_free(kiln_pretok *p);

/* Words of a text: `buf` holds the text re-encoded from its code points
 * (invalid UTF-8 became U+FFFD, as in llama.cpp), word i is
 * buf[end[i-1] .. end[i]) with end[-1] = 0. Reusable across calls. */
typedef struct kiln_words {
    char *buf;
    size_t len, buf_cap;
    size_t *end;
    size_t n, end_cap;
} kiln_words;

int kiln_pretok_split(const kiln_pretok *p, const char *text, size_t len, kiln_words *w,
                      kiln_err *err);
void kiln_words_free(kiln_words *w);

/* ---- the merge queue shared by SPM and BPE (tok_base.c) ------------------ */

/* A candidate merge of symbols `left` and `right` (whose texts together are
 * `size` bytes long). The queue pops the smallest key first and, on ties,
 * the leftmost pair: SPM uses -score as the key, BPE the merge rank. */
typedef struct kiln_bigram {
    double key;
    int left, right;
    size_t size;
} kiln_bigram;

typedef struct kiln_bigram_heap {
    kiln_bigram *v;
    size_t n, cap;
} kiln_bigram_heap;

static inline bool kiln_bigram_before(const kiln_bigram *a, const kiln_bigram *b) {
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

/* Adds a candidate: 0, or -1 on out of memory. Pop returns the first
 * candidate in kiln_bigram_before order; the heap must not be empty. */
int kiln_heap_push(kiln_bigram_heap *h, kiln_bigram b);
kiln_bigram kiln_heap_pop(kiln_bigram_heap *h);

/* A text symbol in a doubly linked list over the symbol array. */
typedef struct kiln_symbol {
    int prev, next;
    size_t start, n;
} kiln_symbol;

#endif
