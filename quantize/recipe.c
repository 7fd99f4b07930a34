/* quantize/recipe.c - recipe files (see recipe.h): the tensor-class table
 * and the line parser that expands each rule into one --tensor-type
 * override. Nothing here decides a type: policy.c does, from the overrides. */
#include "recipe.h"

#include "../codec/codec.h"
#include "../core/name_regex.h"
#include "../core/types.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Names are llama.cpp's GGUF names (src/llama-arch.cpp), which ds4's GGUFs
 * share. A class of per-block tensors must start with "^blk\.\d+\." so that
 * layers=SPEC can narrow it; the README's table is printed from this one. */
const kiln_recipe_class kiln_recipe_classes[] = {
    {"experts.routed", "^blk\\.\\d+\\.ffn_(?:gate|up|down)_exps\\.weight$",
     "routed experts, all three matrices (ds4 --experts)"},
    {"experts.routed.gate", "^blk\\.\\d+\\.ffn_gate_exps\\.weight$", "routed experts' gate, w1 (ds4 --routed-w1)"},
    {"experts.routed.up", "^blk\\.\\d+\\.ffn_up_exps\\.weight$", "routed experts' up, w3 (ds4 --routed-w3)"},
    {"experts.routed.down", "^blk\\.\\d+\\.ffn_down_exps\\.weight$", "routed experts' down, w2 (ds4 --routed-w2)"},
    {"experts.shared", "^blk\\.\\d+\\.ffn_(?:gate|up|down)_shexp\\.weight$", "shared experts (ds4 --shared)"},
    {"ffn.dense", "^blk\\.\\d+\\.ffn_(?:gate|up|down)\\.weight$",
     "dense FFN: DeepSeek's first_k_dense_replace blocks, every block of a dense model"},
    {"attn.proj",
     "^blk\\.\\d+\\.attn_(?:q|k|v|qkv|q_a|q_b|kv|kv_a_mqa|kv_b|k_b|v_b|output|output_a|output_b)\\.weight$",
     "attention projections: q/k/v/output, MLA's q_a/q_b/kv_a_mqa/k_b/v_b, deepseek4's kv/output_a/output_b "
     "(ds4 --attention-proj)"},
    {"attn.compressor", "^blk\\.\\d+\\.(?:attn|indexer)_compressor_", "deepseek4's KV compressors"},
    {"attn.indexer", "^blk\\.\\d+\\.indexer\\.", "deepseek4's lightning indexer (not its compressor)"},
    {"attn", "^blk\\.\\d+\\.(?:attn_|indexer)",
     "every attention weight: projections, compressors, indexer (ds4 --attention, after attn.proj)"},
    {"hc", "^blk\\.\\d+\\.hc_", "deepseek4's per-block hyper-connection mixers"},
    {"output.hc", "^output_hc_", "deepseek4's output hyper-connection mixer"},
    {"output", "^output\\.weight$", "the output projection, lm_head (ds4 --output)"},
    {"embed", "^token_embd\\.weight$", "token embeddings (ds4 --embedding)"},
    {NULL, NULL, NULL},
};

#define BLOCK_PREFIX "^blk\\.\\d+\\."
#define MAX_LAYER 99999

const kiln_recipe_class *kiln_recipe_class_find(const char *name) {
    for (const kiln_recipe_class *c = kiln_recipe_classes; c->name; c++)
        if (!strcmp(c->name, name)) return c;
    return NULL;
}

/* Parses a decimal block number at *s (advancing it). False when there is
 * none or it exceeds MAX_LAYER. */
static bool parse_layer(const char **s, unsigned *out) {
    if (!isdigit((unsigned char)**s)) return false;
    unsigned long v = 0;
    while (isdigit((unsigned char)**s)) {
        v = v * 10 + (unsigned long)(**s - '0');
        if (v > MAX_LAYER) return false;
        (*s)++;
    }
    *out = (unsigned)v;
    return true;
}

/* "3-20,40" -> "3|4|...|20|40" (ascending, each block once), malloc'd.
 * NULL with a message on bad syntax or a backwards range. */
static char *layer_alternation(const char *spec, const char *where, kiln_err *err) {
    bool *sel = calloc(MAX_LAYER + 1, 1);
    if (!sel) return kiln_fail(err, where, "layers", -1, "out of memory"), NULL;
    const char *s = spec;
    size_t count = 0;
    for (;;) {
        unsigned a, b;
        if (!parse_layer(&s, &a)) goto bad;
        b = a;
        if (*s == '-') {
            s++;
            if (!parse_layer(&s, &b) || b < a) goto bad;
        }
        for (unsigned l = a; l <= b; l++) count += !sel[l], sel[l] = true;
        if (*s != ',') break;
        s++; /* a number must follow */
    }
    if (*s) goto bad;
    char *out = malloc(count * 6 + 1), *w = out;
    if (!out) {
        free(sel);
        return kiln_fail(err, where, "layers", -1, "out of memory"), NULL;
    }
    for (unsigned l = 0; l <= MAX_LAYER; l++)
        if (sel[l]) w += sprintf(w, "%s%u", w == out ? "" : "|", l);
    free(sel);
    return out;
bad:
    free(sel);
    kiln_fail(err, where, "layers", -1, "'%s' is not a set of blocks like 37-42 or 0,3,10-12 (ascending ranges, "
                                        "numbers up to %d)", spec, MAX_LAYER);
    return NULL;
}

/* The class names, comma-separated, for the unknown-class message. */
static void class_list(char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (const kiln_recipe_class *c = kiln_recipe_classes; c->name && n < cap; c++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", c->name);
}

char *kiln_recipe_rule_regex(const char *subject, const char *layers, const char *where, kiln_err *err) {
    size_t len = strlen(subject);
    bool is_regex = len > 2 && subject[0] == '/' && subject[len - 1] == '/'; /* "//" is no regex */
    const kiln_recipe_class *cls = is_regex ? NULL : kiln_recipe_class_find(subject);
    if (!is_regex && !cls) {
        char known[512];
        class_list(known, sizeof known);
        kiln_fail(err, where, "class", -1, "'%s' is not a tensor class (%s; or /REGEX/)", subject, known);
        return NULL;
    }
    char *out = NULL;
    if (is_regex) {
        char *re = strndup(subject + 1, len - 2);
        if (!re) return kiln_fail(err, where, "regex", -1, "out of memory"), NULL;
        if (kiln_name_regex_check(re, where, err) < 0) return free(re), NULL;
        if (!layers) return re;
        char *alt = layer_alternation(layers, where, err);
        /* the lookahead pins the block; .*? lets REGEX match anywhere after it,
         * as --tensor-type patterns do (a leading ^ in REGEX still holds) */
        if (alt && asprintf(&out, "^(?=blk\\.(?:%s)\\.).*?(?:%s)", alt, re) < 0) out = NULL;
        if (alt && !out) kiln_fail(err, where, "regex", -1, "out of memory");
        free(alt);
        free(re);
        return out;
    }
    if (!layers) {
        if (!(out = strdup(cls->regex))) kiln_fail(err, where, "class", -1, "out of memory");
        return out;
    }
    size_t plen = strlen(BLOCK_PREFIX);
    if (strncmp(cls->regex, BLOCK_PREFIX, plen)) {
        kiln_fail(err, where, "layers", -1, "class %s is not a per-block class: layers= does not apply", cls->name);
        return NULL;
    }
    char *alt = layer_alternation(layers, where, err);
    if (alt && asprintf(&out, "^blk\\.(?:%s)\\.%s", alt, cls->regex + plen) < 0) out = NULL;
    if (alt && !out) kiln_fail(err, where, "class", -1, "out of memory");
    free(alt);
    return out;
}

/* Splits line `s` (modified) into at most `max` whitespace-separated
 * fields, stopping at a field that starts with '#'. Returns the count, or
 * max + 1 when there are more. */
static int split_fields(char *s, char **f, int max) {
    int n = 0;
    for (;;) {
        while (*s && isspace((unsigned char)*s)) s++;
        if (!*s || *s == '#') return n;
        if (n == max) return max + 1;
        f[n++] = s;
        while (*s && !isspace((unsigned char)*s)) s++;
        if (*s) *s++ = 0;
    }
}

/* One rule line into override `o`; `where` is "FILE:LINE". */
static int parse_rule(char **f, int nf, const char *where, kiln_type_override *o, kiln_err *err) {
    if (nf < 2 || nf > 3)
        return kiln_fail(err, where, NULL, -1, "expected CLASS|/REGEX/ [layers=SPEC] TYPE, got %s",
                         nf == 1 ? "one field" : "more than three fields");
    const char *layers = NULL;
    if (nf == 3) {
        if (strncmp(f[1], "layers=", 7))
            return kiln_fail(err, where, "layers", -1, "'%s': the middle field must be layers=SPEC", f[1]);
        layers = f[1] + 7;
    }
    const char *tname = f[nf - 1];
    int type = kiln_type_from_name(tname);
    if (type < 0 || type == KILN_Q8_K || !kiln_can_quantize((uint32_t)type))
        return kiln_fail(err, where, "type", -1, "'%s' is not a type kiln quantizes to (see kiln quantize "
                                                 "--list-types)", tname);
    char *re = kiln_recipe_rule_regex(f[0], layers, where, err);
    if (!re) return -1;
    char *spec = NULL;
    int rc = asprintf(&spec, "%s=%s", re, kiln_type_name((uint32_t)type)) < 0
                 ? kiln_fail(err, where, NULL, -1, "out of memory")
                 : kiln_override_parse(spec, o, err);
    free(spec);
    free(re);
    return rc;
}

int kiln_recipe_load(const char *path, kiln_type_override **ov, uint32_t *n, kiln_err *err) {
    FILE *fp = fopen(path, "r");
    if (!fp) return kiln_fail(err, path, NULL, -1, "cannot open recipe: %s", strerror(errno));
    char *line = NULL, where[600];
    size_t cap = 0;
    uint32_t added = 0;
    int rc = 0;
    for (unsigned lineno = 1; rc == 0 && getline(&line, &cap, fp) >= 0; lineno++) {
        char *f[4];
        int nf = split_fields(line, f, 3);
        if (nf == 0) continue;
        snprintf(where, sizeof where, "%s:%u", path, lineno);
        kiln_type_override *grown = realloc(*ov, (*n + added + 1) * sizeof *grown);
        if (!grown) {
            rc = kiln_fail(err, where, NULL, -1, "out of memory");
            break;
        }
        *ov = grown;
        if (parse_rule(f, nf, where, &grown[*n + added], err) < 0) rc = -1;
        else added++;
    }
    if (rc == 0 && ferror(fp)) rc = kiln_fail(err, path, NULL, -1, "read error");
    free(line);
    fclose(fp);
    if (rc < 0) {
        for (uint32_t i = 0; i < added; i++) kiln_override_free(&(*ov)[*n + i]);
        return -1;
    }
    *n += added;
    return (int)added;
}
