/* convert/vocab_bpe.c - a byte-level BPE tokenizer.json exported as
 * tokenizer.ggml.model = "gpt2", following llama.cpp's get_vocab_base:
 * the vocab (model vocab plus added tokens) is laid out by id up to
 * config.json's vocab_size, holes become "[PADn]" (UNUSED), added tokens
 * are CONTROL when special (or when they look special, like "<|x|>") and
 * USER_DEFINED otherwise; merges and special ids follow (special.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "vocab.h"

typedef struct added_info {
    bool present, special, normalized;
} added_info;

static int user_defined_text(cv_tokens *t, uint64_t id, const char *s, kiln_err *err) {
    size_t n = strlen(s);
    char *c = malloc(n + 1), *o = c;
    if (!c) return kiln_fail(err, "tokenizer.json", NULL, -1, "out of memory");
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(s + i, "\xe2\x96\x81", 3)) *o++ = ' ', i += 3;
        else *o++ = s[i++];
    }
    int rc = cv_tokens_set(t, id, c, (uint64_t)(o - c), err);
    free(c);
    return rc;
}

/* id -> text, model vocab first, added tokens overriding (get_vocab). */
static int reverse_vocab(json_t *vocab, json_t *added, const char ***rev, int64_t *max_id, uint64_t *n_strings,
                         kiln_err *err) {
    int64_t hi = -1;
    const char *key;
    json_t *v;
    size_t i;
    json_object_foreach(vocab, key, v) {
        int64_t id;
        if (!cv_json_int(v, &id) || id < 0 || id >= CV_MAX_TOKENS)
            return kiln_fail(err, "tokenizer.json", "model.vocab", -1, "bad id for '%s'", key);
        if (id > hi) hi = id;
    }
    json_array_foreach(added, i, v) {
        int64_t id;
        if (!cv_json_int(cv_json_get(v, "id"), &id) || id < 0 || id >= CV_MAX_TOKENS ||
            !cv_json_str(cv_json_get(v, "content")))
            return kiln_fail(err, "tokenizer.json", "added_tokens", -1, "entry %zu needs an id and a content", i);
        if (id > hi) hi = id;
    }
    const char **r = calloc((size_t)hi + 2, sizeof *r);
    if (!r) return kiln_fail(err, "tokenizer.json", NULL, -1, "out of memory");
    uint64_t count = json_object_size(vocab);
    json_object_foreach(vocab, key, v) r[json_integer_value(v)] = key;
    json_array_foreach(added, i, v) {
        const char *c = json_string_value(cv_json_get(v, "content"));
        if (!cv_json_get(vocab, c)) count++;
        r[json_integer_value(cv_json_get(v, "id"))] = c;
    }
    *rev = r;
    *max_id = hi;
    *n_strings = count;
    return 0;
}

int cv_vocab_gpt2(cv_source *src, const cv_tok_files *f, json_t *hparams, const char *pre_override, cv_kv *k) {
    json_t *tok = f->tokenizer, *model = tok ? cv_json_get(tok, "model") : NULL;
    json_t *vocab = cv_json_get(model, "vocab");
    if (!json_is_object(vocab)) return 0;
    json_t *added = cv_json_get(tok, "added_tokens");
    if (added && !json_is_array(added)) return kiln_fail(k->err, "tokenizer.json", "added_tokens", -1, "not a list");
    const char **rev = NULL;
    int64_t max_id = -1;
    uint64_t n_strings = 0;
    if (reverse_vocab(vocab, added, &rev, &max_id, &n_strings, k->err) < 0) return -1;
    int64_t vocab_size = (int64_t)n_strings;
    json_t *vs = cv_json_get(hparams, "vocab_size");
    int rc = 0;
    if (vs && !cv_json_int(vs, &vocab_size)) rc = kiln_fail(k->err, "config.json", "vocab_size", -1, "not an integer");
    if (rc == 0 && vocab_size > CV_MAX_TOKENS)
        rc = kiln_fail(k->err, "config.json", "vocab_size", -1, "%lld is more than kiln's limit of %lld tokens",
                       (long long)vocab_size, (long long)CV_MAX_TOKENS);
    if (rc == 0 && max_id >= vocab_size)
        rc = kiln_fail(k->err, "config.json", "vocab_size", -1, "is %lld, but tokenizer.json has token id %lld",
                       (long long)vocab_size, (long long)max_id);
    char desc[1024];
    const char *pre = pre_override;
    if (rc == 0 && !pre && !(pre = cv_pretok_detect(tok, desc, sizeof desc)))
        rc = kiln_fail(k->err, "tokenizer.json", "pre_tokenizer", -1,
                       "unknown pre-tokenizer (%s); kiln recognizes %s; choose one with --pre-tokenizer NAME", desc,
                       cv_pretok_detectable());
    added_info *info = rc == 0 ? calloc((size_t)vocab_size + 1, sizeof *info) : NULL;
    if (rc == 0 && !info) rc = kiln_fail(k->err, "tokenizer.json", NULL, -1, "out of memory");
    size_t i;
    json_t *a;
    if (rc == 0) json_array_foreach(added, i, a) {
            int64_t id = json_integer_value(cv_json_get(a, "id"));
            info[id] = (added_info){true, cv_json_truthy(cv_json_get(a, "special")),
                                    cv_json_truthy(cv_json_get(a, "normalized"))};
        }
    cv_tokens t = {0};
    if (rc == 0) rc = cv_tokens_init(&t, (uint64_t)vocab_size, false, k->err);
    for (int64_t id = 0; rc == 0 && id < vocab_size; id++) {
        const char *s = id <= max_id ? rev[id] : NULL;
        if (!s) {
            char pad[32];
            int n = snprintf(pad, sizeof pad, "[PAD%lld]", (long long)id);
            rc = cv_tokens_set(&t, (uint64_t)id, pad, (uint64_t)n, k->err);
            t.types[id] = CV_TOK_UNUSED;
        } else if (info[id].present) {
            /* non-normalized added tokens decode to themselves here */
            if (info[id].special || cv_token_looks_special(s, strlen(s))) {
                t.types[id] = CV_TOK_CONTROL;
                rc = cv_tokens_set(&t, (uint64_t)id, s, strlen(s), k->err);
            } else {
                t.types[id] = CV_TOK_USER_DEFINED;
                rc = user_defined_text(&t, (uint64_t)id, s, k->err);
            }
        } else {
            t.types[id] = CV_TOK_NORMAL;
            rc = cv_tokens_set(&t, (uint64_t)id, s, strlen(s), k->err);
        }
    }
    if (rc == 0) rc = cv_kv_str(k, "tokenizer.ggml.model", "gpt2");
    if (rc == 0) rc = cv_kv_str(k, "tokenizer.ggml.pre", pre);
    if (rc == 0) rc = cv_tokens_write(&t, k);
    if (rc == 0) rc = cv_special_write(src, f, true, -1, k);
    cv_tokens_free(&t);
    free(info);
    free(rev);
    return rc < 0 ? -1 : 1;
}
