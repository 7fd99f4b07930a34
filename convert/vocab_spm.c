/* convert/vocab_spm.c - a SentencePiece tokenizer.model exported as
 * tokenizer.ggml.model = "llama", following llama.cpp's
 * _create_vocab_sentencepiece: the vocab is sized by config.json's
 * vocab_size (unfilled ids become "[PADn]", UNUSED, score -10000), piece
 * types map UNKNOWN/CONTROL/UNUSED/BYTE through and everything else to
 * NORMAL, then added_tokens.json and tokenizer_config.json's
 * added_tokens_decoder overwrite their ids as USER_DEFINED or CONTROL
 * tokens with score -1000. Phi-3 (cv_vocab_phi3) has its own rule for
 * those (apply_phi3_added), or a GPT-2 vocab when its tokenizer_class
 * says so. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "spm.h"
#include "vocab.h"

static const char *const KEYS_VOCAB[] = {"vocab_size_per_layer_input", "vocab_size", NULL};

static int32_t token_type(int32_t spm_type) {
    switch (spm_type) {
    case CV_SPM_UNKNOWN: return CV_TOK_UNKNOWN;
    case CV_SPM_CONTROL: return CV_TOK_CONTROL;
    case CV_SPM_UNUSED: return CV_TOK_UNUSED;
    case CV_SPM_BYTE: return CV_TOK_BYTE;
    default: return CV_TOK_NORMAL;
    }
}

/* "▁" (U+2581) -> " " in a user-defined token, as llama.cpp does. */
static int set_user_text(cv_tokens *t, uint64_t id, const char *s, kiln_err *err) {
    size_t n = strlen(s);
    char *c = malloc(n + 1), *o = c;
    if (!c) return kiln_fail(err, "tokenizer_config.json", NULL, -1, "out of memory");
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(s + i, "\xe2\x96\x81", 3)) {
            *o++ = ' ';
            i += 3;
        } else {
            *o++ = s[i++];
        }
    }
    int rc = cv_tokens_set(t, id, c, (uint64_t)(o - c), err);
    free(c);
    return rc;
}

static int apply_added_tokens(cv_tokens *t, json_t *added, kiln_err *err) {
    const char *key;
    json_t *v;
    json_object_foreach(added, key, v) {
        int64_t id;
        if (!cv_json_int(v, &id) || id < 0) return kiln_fail(err, "added_tokens.json", key, -1, "id is not an integer");
        if ((uint64_t)id >= t->n) continue;
        if (cv_tokens_set(t, (uint64_t)id, key, strlen(key), err) < 0) return -1;
        t->scores[id] = -1000.0f;
        t->types[id] = CV_TOK_USER_DEFINED;
    }
    return 0;
}

/* Phi-3's rule for added tokens (Phi3MiniModel.set_vocab), applied to
 * tokenizer_config.json's added_tokens_decoder and then tokenizer.json's
 * added_tokens: the text as given, USER_DEFINED, CONTROL when "special"
 * is set (no guess from the text, no U+2581 rewrite), score -1000.
 * `keyed`: an object keyed by id; else an array of entries with an "id". */
static int apply_phi3_added(cv_tokens *t, json_t *entries, bool keyed, const char *fname, kiln_err *err) {
    size_t n = keyed ? json_object_size(entries) : json_array_size(entries);
    void *it = keyed ? json_object_iter(entries) : NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *v = keyed ? json_object_iter_value(it) : json_array_get(entries, i);
        int64_t id = -1;
        if (keyed) {
            char *end;
            id = strtoll(json_object_iter_key(it), &end, 10);
            if (*end) id = -1;
            it = json_object_iter_next(entries, it);
        } else if (!cv_json_int(cv_json_get(v, "id"), &id)) {
            id = -1;
        }
        const char *content = cv_json_str(cv_json_get(v, "content"));
        if (id < 0 || !content) return kiln_fail(err, fname, "added tokens", -1, "entry %zu has no id or content", i);
        if ((uint64_t)id >= t->n)
            return kiln_fail(err, fname, "added tokens", -1, "id %lld is past the vocabulary of %llu", (long long)id,
                             (unsigned long long)t->n);
        if (cv_tokens_set(t, (uint64_t)id, content, strlen(content), err) < 0) return -1;
        t->scores[id] = -1000.0f;
        t->types[id] = cv_json_truthy(cv_json_get(v, "special")) ? CV_TOK_CONTROL : CV_TOK_USER_DEFINED;
    }
    return 0;
}

static int apply_decoder(cv_tokens *t, json_t *dec, kiln_err *err) {
    const char *key;
    json_t *v;
    json_object_foreach(dec, key, v) {
        char *end;
        long long id = strtoll(key, &end, 10);
        const char *content = cv_json_str(cv_json_get(v, "content"));
        if (*end || id < 0 || !content)
            return kiln_fail(err, "tokenizer_config.json", "added_tokens_decoder", -1, "bad entry '%s'", key);
        if ((uint64_t)id >= t->n) continue;
        if (cv_json_truthy(cv_json_get(v, "special")) || cv_token_looks_special(content, strlen(content))) {
            t->types[id] = CV_TOK_CONTROL;
            if (cv_tokens_set(t, (uint64_t)id, content, strlen(content), err) < 0) return -1;
        } else {
            t->types[id] = CV_TOK_USER_DEFINED;
            if (set_user_text(t, (uint64_t)id, content, err) < 0) return -1;
        }
        t->scores[id] = -1000.0f;
    }
    return 0;
}

/* The vocab with llama's rules for added tokens, or Phi-3's. */
static int spm_vocab(cv_source *src, const cv_tok_files *f, json_t *hparams, bool phi3, cv_kv *k) {
    char *buf = NULL;
    size_t len = 0;
    int got = cv_source_read_all(src, "tokenizer.model", &buf, &len, k->err);
    if (got == 0 && phi3)
        return kiln_fail(k->err, src->path, "tokenizer.model", -1, "missing (Phi-3 needs it unless tokenizer_class "
                                                                   "is GPT2Tokenizer)");
    if (got <= 0) return got;
    cv_spm spm;
    if (cv_spm_parse((const uint8_t *)buf, len, "tokenizer.model", &spm, k->err) < 0) {
        free(buf);
        return -1;
    }
    int64_t vocab_size = 0;
    json_t *vs = cv_json_find(hparams, KEYS_VOCAB, NULL);
    if (!cv_json_truthy(vs) || !cv_json_int(vs, &vocab_size) || vocab_size <= 0) vocab_size = spm.n;
    cv_tokens t;
    int rc = cv_tokens_init(&t, (uint64_t)vocab_size, true, k->err);
    for (int64_t i = 0; rc == 0 && i < vocab_size; i++) {
        char pad[32];
        int n = snprintf(pad, sizeof pad, "[PAD%lld]", (long long)i);
        rc = cv_tokens_set(&t, (uint64_t)i, pad, (uint64_t)n, k->err);
        t.scores[i] = -10000.0f;
        t.types[i] = CV_TOK_UNUSED;
    }
    for (uint32_t i = 0; rc == 0 && i < spm.n && i < (uint64_t)vocab_size; i++) {
        rc = cv_tokens_set(&t, i, spm.pieces[i].text, spm.pieces[i].len, k->err);
        t.scores[i] = spm.pieces[i].score;
        t.types[i] = token_type(spm.pieces[i].type);
    }
    if (rc == 0 && json_is_object(f->added_tokens)) rc = apply_added_tokens(&t, f->added_tokens, k->err);
    json_t *dec = f->tokenizer_config ? cv_json_get(f->tokenizer_config, "added_tokens_decoder") : NULL;
    json_t *added = f->tokenizer ? cv_json_get(f->tokenizer, "added_tokens") : NULL;
    if (rc == 0 && phi3 && json_is_object(dec))
        rc = apply_phi3_added(&t, dec, true, "tokenizer_config.json", k->err);
    if (rc == 0 && phi3 && json_is_array(added)) rc = apply_phi3_added(&t, added, false, "tokenizer.json", k->err);
    if (rc == 0 && !phi3 && json_is_object(dec)) rc = apply_decoder(&t, dec, k->err);
    if (rc == 0) rc = cv_kv_str(k, "tokenizer.ggml.model", "llama");
    if (rc == 0) rc = cv_kv_str(k, "tokenizer.ggml.pre", "default");
    if (rc == 0) rc = cv_tokens_write(&t, k);
    if (rc == 0) rc = cv_special_write(src, f, false, (int64_t)t.n, k);
    cv_tokens_free(&t);
    cv_spm_free(&spm);
    free(buf);
    return rc < 0 ? -1 : 1;
}

int cv_vocab_spm(cv_source *src, const cv_tok_files *f, json_t *hparams, cv_kv *k) {
    return spm_vocab(src, f, hparams, false, k);
}

int cv_vocab_phi3(cv_source *src, const cv_tok_files *f, json_t *hparams, const char *pre_override, cv_kv *k) {
    json_t *cls = f->tokenizer_config ? cv_json_get(f->tokenizer_config, "tokenizer_class") : NULL;
    const char *name = cv_json_str(cls);
    if (name && !strcmp(name, "GPT2Tokenizer")) return cv_vocab_gpt2(src, f, hparams, pre_override, k);
    return spm_vocab(src, f, hparams, true, k);
}
