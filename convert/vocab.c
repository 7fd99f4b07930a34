/* convert/vocab.c - what the tokenizer exporters share: the token list,
 * the tokenizer files, and the choice of exporter (see vocab.h). */
#include "vocab.h"

#include <stdlib.h>
#include <string.h>

#include "json.h"

int cv_tokens_init(cv_tokens *t, uint64_t n, bool with_scores, kiln_err *err) {
    memset(t, 0, sizeof *t);
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

static int load_json(cv_source *src, const char *name, json_t **out, kiln_err *err) {
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    int got = cv_source_read_all(src, name, &text, &len, err);
    if (got <= 0) return got;
    *out = cv_json_parse(text, len, name, err);
    free(text);
    return *out ? 0 : -1;
}

int cv_tok_files_load(cv_source *src, cv_tok_files *f, kiln_err *err) {
    memset(f, 0, sizeof *f);
    if (load_json(src, "config.json", &f->config, err) < 0 || load_json(src, "tokenizer.json", &f->tokenizer, err) < 0 ||
        load_json(src, "tokenizer_config.json", &f->tokenizer_config, err) < 0 ||
        load_json(src, "special_tokens_map.json", &f->special_map, err) < 0 ||
        load_json(src, "added_tokens.json", &f->added_tokens, err) < 0) {
        cv_tok_files_free(f);
        return -1;
    }
    return 0;
}

void cv_tok_files_free(cv_tok_files *f) {
    json_decref(f->config);
    json_decref(f->tokenizer);
    json_decref(f->tokenizer_config);
    json_decref(f->special_map);
    json_decref(f->added_tokens);
    memset(f, 0, sizeof *f);
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

int cv_vocab_write(const cv_arch *a, cv_source *src, const cv_tok_files *f, json_t *hparams,
                   const char *pre_override, cv_kv *k) {
    if ((a->flags & CV_A_ADD_PREFIX_SPACE) && f->tokenizer_config) {
        json_t *aps = json_object_get(f->tokenizer_config, "add_prefix_space");
        if (json_is_boolean(aps) && cv_kv_bool(k, "tokenizer.ggml.add_space_prefix", json_is_true(aps)) < 0) return -1;
    }
    int r = 0;
    if (a->flags & CV_A_VOCAB_SPM) r = cv_vocab_spm(src, f, hparams, k);
    if (r == 0 && (a->flags & CV_A_VOCAB_LLAMA_HF)) r = cv_vocab_llama_hf(src, f, k);
    if (r == 0) r = cv_vocab_gpt2(src, f, hparams, pre_override, k);
    if (r == 0)
        return kiln_fail(k->err, src->path, "tokenizer", -1, "no tokenizer: %s needs %s",
                         a->hf_name, (a->flags & CV_A_VOCAB_SPM) ? "tokenizer.model or a BPE tokenizer.json"
                                                                 : "a byte-level BPE tokenizer.json");
    return r < 0 ? -1 : 0;
}
