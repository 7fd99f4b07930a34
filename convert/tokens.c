/* convert/tokens.c - the token list the tokenizer exporters fill
 * (vocab_spm.c, vocab_hf.c, vocab_bpe.c, and special.c for merges), and
 * gguf-py's test for a token that looks special.
 *
 * A leaf of the vocab files: it calls none of them, so they can all use
 * it without a circle through vocab.c (see vocab.h). */
#include "vocab.h"

#include <stdlib.h>
#include <string.h>

int cv_tokens_init(cv_tokens *t, uint64_t n, bool with_scores, kiln_err *err) {
    memset(t, 0, sizeof *t);
    if (n > (uint64_t)CV_MAX_TOKENS)
        return kiln_fail(err, "tokenizer", "vocab_size", -1, "%llu tokens is more than kiln's limit of %lld",
                         (unsigned long long)n, (long long)CV_MAX_TOKENS);
    t->text = calloc(n + 1, sizeof *t->text);
    t->len = calloc(n + 1, sizeof *t->len);
    t->types = calloc(n + 1, sizeof *t->types);
    t->scores = with_scores ? calloc(n + 1, sizeof *t->scores) : NULL;
    t->n = n;
    if (!t->text || !t->len || !t->types || (with_scores && !t->scores)) {
        cv_tokens_free(t);
        return kiln_fail(err, "tokenizer", NULL, -1, "out of memory");
    }
    return 0;
}

int cv_tokens_set(cv_tokens *t, uint64_t i, const char *s, uint64_t len, kiln_err *err) {
    char *c = malloc(len + 1);
    if (!c) return kiln_fail(err, "tokenizer", NULL, -1, "out of memory");
    memcpy(c, s, len);
    c[len] = 0;
    free(t->text[i]);
    t->text[i] = c;
    t->len[i] = len;
    return 0;
}

void cv_tokens_free(cv_tokens *t) {
    for (uint64_t i = 0; t->text && i < t->n; i++) free(t->text[i]);
    free(t->text);
    free(t->len);
    free(t->scores);
    free(t->types);
    memset(t, 0, sizeof *t);
}

int cv_tokens_write(const cv_tokens *t, cv_kv *k) {
    if (cv_kv_str_arr(k, "tokenizer.ggml.tokens", (const char *const *)t->text, t->len, t->n) < 0) return -1;
    if (t->scores && cv_kv_arr(k, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32, t->scores, t->n) < 0) return -1;
    return cv_kv_arr(k, "tokenizer.ggml.token_type", KILN_GGUF_INT32, t->types, t->n);
}

static bool starts_ends(const char *s, uint64_t len, const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    return len >= la + lb && !memcmp(s, a, la) && !memcmp(s + len - lb, b, lb);
}

bool cv_token_looks_special(const char *s, uint64_t len) {
    static const char *const exact[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]", NULL};
    for (int i = 0; exact[i]; i++)
        if (len == strlen(exact[i]) && !memcmp(s, exact[i], len)) return true;
    return starts_ends(s, len, "<|", "|>") || starts_ends(s, len, "<\xef\xbd\x9c", "\xef\xbd\x9c>") ||
           starts_ends(s, len, "<unused", ">");
}
