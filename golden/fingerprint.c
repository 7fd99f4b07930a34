/* golden/fingerprint.c - model fingerprints (see fingerprint.h). */
#include "fingerprint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/types.h"
#include "../core/xxh64.h"

static json_t *hex(uint64_t v) {
    char b[17];
    snprintf(b, sizeof b, "%016" PRIx64, v);
    return json_string(b);
}

static void feed_str(kiln_xxh64 *h, const char *p, uint64_t n) {
    kiln_xxh64_update(h, &n, sizeof n);
    kiln_xxh64_update(h, p, n);
}

static json_t *str_or_empty(const kiln_gguf *g, const char *key) {
    kiln_str s;
    if (!kiln_gguf_get_str(g, key, &s)) return json_string("");
    return json_stringn(s.ptr, s.len);
}

static int by_name(const void *x, const void *y) {
    const kiln_str *a = &(*(const kiln_tensor *const *)x)->name, *b = &(*(const kiln_tensor *const *)y)->name;
    int c = memcmp(a->ptr, b->ptr, a->len < b->len ? a->len : b->len);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

json_t *kiln_fingerprint(const kiln_gguf *g, kiln_err *err) {
    /* hashed in name order: llama-quantize writes tensors in another
     * order than the converter, and that must not make a model "different" */
    const kiln_tensor **order = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof *order);
    if (!order) {
        kiln_fail(err, g->path, NULL, -1, "out of memory");
        return NULL;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
    qsort(order, g->n_tensors, sizeof *order, by_name);
    kiln_xxh64 layout, types, data, vocab;
    kiln_xxh64_init(&layout);
    kiln_xxh64_init(&types);
    kiln_xxh64_init(&data);
    kiln_xxh64_init(&vocab);
    json_t *counts = json_object();
    for (uint64_t i = 0; counts && i < g->n_tensors; i++) {
        const kiln_tensor *t = order[i];
        feed_str(&layout, t->name.ptr, t->name.len);
        kiln_xxh64_update(&layout, &t->n_dims, sizeof t->n_dims);
        kiln_xxh64_update(&layout, t->ne, sizeof t->ne);
        feed_str(&types, t->name.ptr, t->name.len);
        kiln_xxh64_update(&types, &t->type, sizeof t->type);
        kiln_xxh64_update(&data, t->data, t->nbytes);
        const char *tn = kiln_type_name(t->type);
        json_int_t c = json_integer_value(json_object_get(counts, tn));
        if (json_object_set_new(counts, tn, json_integer(c + 1))) {
            json_decref(counts);
            counts = NULL;
        }
    }
    free(order);
    uint64_t n_vocab = 0;
    const kiln_array *tok = kiln_gguf_get_arr(g, "tokenizer.ggml.tokens", KILN_GGUF_STRING);
    if (tok) {
        n_vocab = tok->n;
        for (uint64_t i = 0; i < tok->n; i++) feed_str(&vocab, tok->strs[i].ptr, tok->strs[i].len);
    }
    const char *base = strrchr(g->path, '/');
    json_t *fp = counts ? json_pack("{s:o, s:o, s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:o}",
                                    "arch", str_or_empty(g, "general.architecture"),
                                    "name", str_or_empty(g, "general.name"),
                                    "file", base ? base + 1 : g->path,
                                    "n_tensors", (json_int_t)g->n_tensors,
                                    "n_vocab", (json_int_t)n_vocab,
                                    "layout_xxh64", hex(kiln_xxh64_digest(&layout)),
                                    "types_xxh64", hex(kiln_xxh64_digest(&types)),
                                    "data_xxh64", hex(kiln_xxh64_digest(&data)),
                                    "vocab_xxh64", hex(kiln_xxh64_digest(&vocab)),
                                    "types", counts)
                        : NULL;
    if (!fp) kiln_fail(err, g->path, NULL, -1, "out of memory");
    return fp;
}

static bool same(const json_t *a, const json_t *b, const char *key) {
    return json_equal(json_object_get(a, key), json_object_get(b, key));
}

kiln_fp_relation kiln_fingerprint_relation(const json_t *a, const json_t *b) {
    if (!json_is_object(a) || !json_is_object(b)) return KILN_FP_UNKNOWN;
    if (!same(a, b, "arch") || !same(a, b, "layout_xxh64") || !same(a, b, "vocab_xxh64")) return KILN_FP_DIFFERENT;
    if (same(a, b, "types_xxh64") && same(a, b, "data_xxh64")) return KILN_FP_SAME_WEIGHTS;
    return KILN_FP_REQUANTIZED;
}

const char *kiln_fp_relation_name(kiln_fp_relation r) {
    switch (r) {
    case KILN_FP_SAME_WEIGHTS: return "same weights";
    case KILN_FP_REQUANTIZED: return "same network, other types or weights";
    case KILN_FP_DIFFERENT: return "a different model";
    default: return "unknown (the reference has no fingerprint)";
    }
}
