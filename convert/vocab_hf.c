/* convert/vocab_hf.c - an SPM-style tokenizer.json (BPE with byte
 * fallback and a Sequence decoder, as Llama and Mistral ship it without a
 * tokenizer.model) exported as tokenizer.ggml.model = "llama", following
 * gguf-py's LlamaHfVocab: base tokens in id order with score -1000, "<0xXX>"
 * pieces BYTE, the tokenizer's special tokens CONTROL, then the added
 * tokens past the base vocab (CONTROL when special, else USER_DEFINED).
 *
 * A Llama-3 style tokenizer.json (ignore_merges, no byte fallback) is not
 * this kind and goes to the byte-level exporter. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "vocab.h"

static const char *entry_content(json_t *e) {
    return json_is_object(e) ? cv_json_str(cv_json_get(e, "content")) : cv_json_str(e);
}

/* The tokenizer's special token strings (all_special_tokens): the
 * X_token entries and additional_special_tokens of tokenizer_config.json
 * and special_tokens_map.json. */
static size_t special_strings(const cv_tok_files *f, const char **out, size_t cap) {
    static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                       "pad_token", "cls_token", "mask_token", NULL};
    json_t *srcs[2] = {f->tokenizer_config, f->special_map};
    size_t n = 0;
    for (int s = 0; s < 2; s++) {
        if (!json_is_object(srcs[s])) continue;
        const char *cands[64];
        size_t nc = 0;
        for (int i = 0; keys[i]; i++)
            if (nc < 64) cands[nc++] = entry_content(cv_json_get(srcs[s], keys[i]));
        size_t j;
        json_t *e;
        json_array_foreach(cv_json_get(srcs[s], "additional_special_tokens"), j, e) if (nc < 64) cands[nc++] =
            entry_content(e);
        /* Gemma 3's {"boi_token": "<start_of_image>", ...}: transformers
         * makes each a special-token attribute, so they are special too
         * (a list, as newer transformers write it, counts the same). */
        json_t *extra = cv_json_get(srcs[s], "extra_special_tokens");
        const char *name;
        json_object_foreach(extra, name, e) if (nc < 64) cands[nc++] = entry_content(e);
        json_array_foreach(extra, j, e) if (nc < 64) cands[nc++] = entry_content(e);
        for (size_t i = 0; i < nc; i++) {
            bool dup = !cands[i];
            for (size_t m = 0; !dup && m < n; m++) dup = !strcmp(out[m], cands[i]);
            if (!dup && n < cap) out[n++] = cands[i];
        }
    }
    return n;
}

static bool is_byte_piece(const char *s) {
    return strlen(s) == 6 && !strncmp(s, "<0x", 3) && isxdigit((unsigned char)s[3]) && isxdigit((unsigned char)s[4]) &&
           s[5] == '>';
}

static int cmp_added_id(const void *x, const void *y) {
    json_int_t a = json_integer_value(cv_json_get(*(json_t *const *)x, "id"));
    json_int_t b = json_integer_value(cv_json_get(*(json_t *const *)y, "id"));
    return a < b ? -1 : a > b;
}

static int64_t vocab_id(json_t *vocab, json_t *added, const char *s) {
    int64_t id = -1;
    json_t *v = cv_json_get(vocab, s);
    if (v) id = json_integer_value(v);
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        const char *c = cv_json_str(cv_json_get(a, "content"));
        if (c && !strcmp(c, s)) id = json_integer_value(cv_json_get(a, "id"));
    }
    return id;
}

int cv_vocab_llama_hf(cv_source *src, const cv_tok_files *f, cv_kv *k) {
    json_t *tok = f->tokenizer, *model = cv_json_get(tok, "model");
    const char *type = cv_json_str(cv_json_get(model, "type"));
    json_t *fb = cv_json_get(model, "byte_fallback");
    if (!type || strcmp(type, "BPE")) return 0;
    if (cv_json_truthy(cv_json_get(model, "ignore_merges")) && fb && !cv_json_truthy(fb)) return 0; /* Llama 3 */
    const char *dec = cv_json_str(cv_json_get(cv_json_get(tok, "decoder"), "type"));
    if (!cv_json_truthy(fb) || !dec || strcmp(dec, "Sequence")) return 0;
    json_t *vocab = cv_json_get(model, "vocab"), *added = cv_json_get(tok, "added_tokens");
    if (!json_is_object(vocab)) return kiln_fail(k->err, "tokenizer.json", "model.vocab", -1, "not an object");
    uint64_t base = json_object_size(vocab);
    const char *specials[128];
    size_t n_spec = special_strings(f, specials, 128);
    int64_t spec_ids[128];
    for (size_t i = 0; i < n_spec; i++) spec_ids[i] = vocab_id(vocab, added, specials[i]);
    const char **rev = calloc(base + 1, sizeof *rev);
    if (!rev) return kiln_fail(k->err, "tokenizer.json", NULL, -1, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        int64_t id = json_integer_value(v);
        if (id >= 0 && (uint64_t)id < base) rev[id] = key;
    }
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        int64_t id = json_integer_value(cv_json_get(a, "id"));
        if (id >= 0 && (uint64_t)id < base) rev[id] = cv_json_str(cv_json_get(a, "content"));
    }
    /* added tokens past the base vocab, in id order */
    size_t n_extra = 0;
    json_t **extra = calloc(json_array_size(added) + 1, sizeof *extra);
    json_array_foreach(added, i, a) if (extra && (uint64_t)json_integer_value(cv_json_get(a, "id")) >= base)
        extra[n_extra++] = a;
    if (extra) qsort(extra, n_extra, sizeof *extra, cmp_added_id);
    cv_tokens t = {0};
    int rc = extra ? cv_tokens_init(&t, base + n_extra, true, k->err)
                   : kiln_fail(k->err, "tokenizer.json", NULL, -1, "out of memory");
    for (uint64_t id = 0; rc == 0 && id < base; id++) {
        if (!rev[id]) {
            rc = kiln_fail(k->err, "tokenizer.json", "model.vocab", -1, "no token has id %llu", (unsigned long long)id);
            break;
        }
        bool special = false;
        for (size_t s = 0; s < n_spec; s++) special |= spec_ids[s] == (int64_t)id;
        rc = cv_tokens_set(&t, id, rev[id], strlen(rev[id]), k->err);
        t.scores[id] = -1000.0f;
        t.types[id] = is_byte_piece(rev[id]) ? CV_TOK_BYTE : special ? CV_TOK_CONTROL : CV_TOK_NORMAL;
    }
    for (size_t e = 0; rc == 0 && e < n_extra; e++) {
        const char *c = cv_json_str(cv_json_get(extra[e], "content"));
        if (!c) {
            rc = kiln_fail(k->err, "tokenizer.json", "added_tokens", -1, "token %lld has no string content",
                           (long long)json_integer_value(cv_json_get(extra[e], "id")));
            break;
        }
        bool special = false;
        for (size_t s = 0; s < n_spec; s++) special |= !strcmp(specials[s], c);
        rc = cv_tokens_set(&t, base + e, c, strlen(c), k->err);
        t.scores[base + e] = -1000.0f;
        t.types[base + e] = special ? CV_TOK_CONTROL : CV_TOK_USER_DEFINED;
    }
    free(extra);
    free(rev);
    if (rc == 0) rc = cv_kv_str(k, "tokenizer.ggml.model", "llama");
    if (rc == 0) rc = cv_kv_str(k, "tokenizer.ggml.pre", "default");
    if (rc == 0) rc = cv_tokens_write(&t, k);
    if (rc == 0) rc = cv_special_write(src, f, false, (int64_t)t.n, k);
    cv_tokens_free(&t);
    return rc < 0 ? -1 : 1;
}
