/* fuzz/fuzz_gguf.c - the GGUF reader (core/gguf_read.c).
 *
 * The input is parsed in memory with kiln_gguf_parse(), then every value
 * and every tensor's first and last byte are touched so that a bound the
 * reader failed to check shows up under ASan. When the input holds more
 * than one "GGUF" magic (shards glued together), it is cut there and the
 * pieces are written as x-0000I-of-0000N.gguf and opened with
 * kiln_gguf_open(), which is the split-model path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/gguf.h"
#include "fuzz.h"
#include "harnesses.h"

#define MAX_SHARDS 4

/* A double's bits: converting a negative or huge double to an integer type
 * is undefined, and the values come straight from the fuzzed file. */
static uint64_t f64_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static uint64_t walk_value(const kiln_value *v) {
    uint64_t h = v->type;
    if (v->type == KILN_GGUF_STRING) {
        if (v->str.len) h += (uint8_t)v->str.ptr[0] + (uint8_t)v->str.ptr[v->str.len - 1];
    } else if (v->type == KILN_GGUF_ARRAY) {
        const kiln_array *a = &v->arr;
        for (uint64_t i = 0; i < a->n && i < 64; i++) {
            if (a->type == KILN_GGUF_STRING) h += a->strs[i].len ? (uint8_t)a->strs[i].ptr[a->strs[i].len - 1] : 0;
            else if (a->type == KILN_GGUF_ARRAY) h += walk_value(&a->vals[i]);
            else h += (uint64_t)kiln_array_i64(a, i) + f64_bits(kiln_array_f64(a, i));
        }
        if (a->n && kiln_gguf_vtype_size(a->type))  /* the last element too */
            h += (uint64_t)kiln_array_i64(a, a->n - 1);
    }
    return h;
}

static volatile uint64_t sink;

static void walk(const kiln_gguf *g) {
    uint64_t h = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        h += walk_value(&g->kv[i].val);
        char *key = kiln_str_dup(g->kv[i].key);
        if (key) h += kiln_gguf_find_kv(g, key) != NULL;
        free(key);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kiln_tensor *t = &g->tensors[i];
        if (t->nbytes) h += t->data[0] + t->data[t->nbytes - 1];
        char *name = kiln_str_dup(t->name);
        if (name) h += kiln_gguf_find_tensor(g, name) != NULL;
        free(name);
    }
    uint64_t u;
    kiln_str s;
    h += kiln_gguf_get_u64(g, "general.alignment", &u) + kiln_gguf_get_str(g, "general.architecture", &s);
    sink += h;
}

static void open_split(const uint8_t *data, size_t size) {
    const uint8_t *start[MAX_SHARDS];
    size_t n = 0;
    for (size_t off = 0; off + 4 <= size && n < MAX_SHARDS; off++)
        if (!memcmp(data + off, "GGUF", 4)) start[n++] = data + off;
    if (n < 2 || start[0] != data) return;
    char names[MAX_SHARDS][40];
    for (size_t i = 0; i < n; i++) {
        const uint8_t *end = i + 1 < n ? start[i + 1] : data + size;
        snprintf(names[i], sizeof names[i], "x-%05zu-of-%05zu.gguf", i + 1, n);
        fuzz_put(names[i], start[i], (size_t)(end - start[i]));
    }
    kiln_err err = {{0}};
    kiln_gguf *g = kiln_gguf_open(fuzz_path(names[0]), &err);
    if (g) walk(g);
    else fuzz_expect_err(-1, &err, "kiln_gguf_open (split)");
    kiln_gguf_close(g);
    for (size_t i = 0; i < n; i++) fuzz_unlink(names[i]);
}

int fuzz_gguf(const uint8_t *data, size_t size) {
    kiln_err err = {{0}};
    kiln_gguf *g = kiln_gguf_parse(data, size, "fuzz.gguf", &err);
    if (g) walk(g);
    else fuzz_expect_err(-1, &err, "kiln_gguf_parse");
    kiln_gguf_close(g);
    open_split(data, size);
    return 0;
}

KILN_FUZZ_ENTRY(fuzz_gguf)
