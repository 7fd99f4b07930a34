/* tokenizer/hf_normalize.c - see hf_normalize.h. The Unicode work (the
 * normalization forms, full lowercasing with its context rules, general
 * categories and the White_Space property) is GNU libunistring's: its
 * tables follow the Unicode standard release by release, which a
 * hand-written table here would not. */
#include "hf_normalize.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unicase.h>
#include <unictype.h>
#include <uninorm.h>
#include <unistr.h>

enum step_kind { STEP_NFC, STEP_NFD, STEP_NFKC, STEP_NFKD, STEP_LOWERCASE, STEP_STRIP_ACCENTS, STEP_STRIP };

typedef struct {
    enum step_kind kind;
    bool left, right; /* STEP_STRIP: which ends */
} step;

#define MAX_STEPS 32

struct kiln_hf_normalizer {
    int n;
    step steps[MAX_STEPS];
};

static const struct {
    const char *type;
    enum step_kind kind;
} SIMPLE_STEPS[] = {
    {"NFC", STEP_NFC},   {"NFD", STEP_NFD},   {"NFKC", STEP_NFKC},
    {"NFKD", STEP_NFKD}, {"Lowercase", STEP_LOWERCASE}, {"StripAccents", STEP_STRIP_ACCENTS},
};

static const char SPM_SPACE[] = "\xe2\x96\x81"; /* U+2581, SentencePiece's space */

/* Prepend("▁") and Replace(" " -> "▁"): an SPM normalizer's space steps,
 * which the SPM tokenizer applies itself. */
static bool is_spm_space_step(const char *type, json_t *j) {
    if (!strcmp(type, "Prepend")) {
        const char *p = json_string_value(json_object_get(j, "prepend"));
        return p && !strcmp(p, SPM_SPACE);
    }
    if (!strcmp(type, "Replace")) {
        const char *from = json_string_value(json_object_get(json_object_get(j, "pattern"), "String"));
        const char *to = json_string_value(json_object_get(j, "content"));
        return from && to && !strcmp(from, " ") && !strcmp(to, SPM_SPACE);
    }
    return false;
}

/* Adds the steps of normalizer j (at `where` in the file) to n. */
static int add_steps(kiln_hf_normalizer *n, json_t *j, const char *file, const char *where, kiln_err *err) {
    if (json_is_null(j)) return 0;
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) return kiln_fail(err, file, where, -1, "normalizer has no \"type\" string");
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(j, "normalizers");
        if (!json_is_array(list)) return kiln_fail(err, file, where, -1, "Sequence has no \"normalizers\" array");
        for (size_t i = 0; i < json_array_size(list); i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", where, i);
            if (add_steps(n, json_array_get(list, i), file, sub, err) < 0) return -1;
        }
        return 0;
    }
    if (is_spm_space_step(type, j)) return 0;
    step s = {0};
    bool known = false;
    for (size_t i = 0; i < sizeof SIMPLE_STEPS / sizeof *SIMPLE_STEPS; i++)
        if (!strcmp(type, SIMPLE_STEPS[i].type)) {
            s.kind = SIMPLE_STEPS[i].kind;
            known = true;
        }
    if (!strcmp(type, "Strip")) {
        s = (step){STEP_STRIP, json_is_true(json_object_get(j, "strip_left")),
                   json_is_true(json_object_get(j, "strip_right"))};
        known = true;
    }
    if (!known)
        return kiln_fail(err, file, where, -1,
                         "unsupported normalizer step '%s' (kiln applies NFC, NFD, NFKC, NFKD, Lowercase, "
                         "StripAccents, Strip and SPM's space steps)", type);
    if (n->n == MAX_STEPS) return kiln_fail(err, file, where, -1, "more than %d normalizer steps", MAX_STEPS);
    n->steps[n->n++] = s;
    return 0;
}

kiln_hf_normalizer *kiln_hf_normalizer_load(const char *path, kiln_err *err) {
    char file[4096];
    struct stat st;
    bool dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (snprintf(file, sizeof file, dir ? "%s/tokenizer.json" : "%s", path) >= (int)sizeof file) {
        kiln_fail(err, path, NULL, -1, "path too long");
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_load_file(file, 0, &jerr);
    if (!root) {
        kiln_fail(err, file, NULL, jerr.position, "%s", jerr.text);
        return NULL;
    }
    kiln_hf_normalizer *n = calloc(1, sizeof *n);
    json_t *j = json_is_object(root) ? json_object_get(root, "normalizer") : NULL;
    if (!n) {
        kiln_fail(err, file, NULL, -1, "out of memory");
    } else if (!j) {
        kiln_fail(err, file, "normalizer", -1, "no \"normalizer\" key: not a tokenizer.json");
        free(n);
        n = NULL;
    } else if (add_steps(n, j, file, "normalizer", err) < 0) {
        free(n);
        n = NULL;
    }
    json_decref(root);
    return n;
}

int kiln_hf_normalizer_steps(const kiln_hf_normalizer *n) { return n->n; }

/* s without its characters of general category Mark (HF's StripAccents). */
static uint8_t *strip_accents(const uint8_t *s, size_t len, size_t *out_len) {
    uint8_t *o = malloc(len + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        ucs4_t uc;
        int l = u8_mbtouc(&uc, s + i, len - i);
        if (!uc_is_general_category(uc, UC_CATEGORY_M)) {
            memcpy(o + k, s + i, (size_t)l);
            k += (size_t)l;
        }
        i += (size_t)l;
    }
    *out_len = k;
    return o;
}

/* s without White_Space characters at the ends asked for (HF's Strip). */
static uint8_t *strip_space(const uint8_t *s, size_t len, bool left, bool right, size_t *out_len) {
    size_t start = 0, end = len;
    ucs4_t uc;
    while (left && start < end) {
        int l = u8_mbtouc(&uc, s + start, end - start);
        if (!uc_is_property_white_space(uc)) break;
        start += (size_t)l;
    }
    while (right && end > start) {
        const uint8_t *prev = u8_prev(&uc, s + end, s + start);
        if (!prev || !uc_is_property_white_space(uc)) break;
        end = (size_t)(prev - s);
    }
    uint8_t *o = malloc(end - start + 1);
    if (o) memcpy(o, s + start, end - start);
    *out_len = end - start;
    return o;
}

static uint8_t *apply(const step *st, const uint8_t *s, size_t len, size_t *out_len) {
    switch (st->kind) {
    case STEP_NFC: return u8_normalize(UNINORM_NFC, s, len, NULL, out_len);
    case STEP_NFD: return u8_normalize(UNINORM_NFD, s, len, NULL, out_len);
    case STEP_NFKC: return u8_normalize(UNINORM_NFKC, s, len, NULL, out_len);
    case STEP_NFKD: return u8_normalize(UNINORM_NFKD, s, len, NULL, out_len);
    case STEP_LOWERCASE: return u8_tolower(s, len, NULL, NULL, NULL, out_len);
    case STEP_STRIP_ACCENTS: return strip_accents(s, len, out_len);
    case STEP_STRIP: return strip_space(s, len, st->left, st->right, out_len);
    }
    return NULL;
}

char *kiln_hf_normalize(const kiln_hf_normalizer *n, const char *text, size_t len, size_t *out_len, kiln_err *err) {
    const uint8_t *bad = u8_check((const uint8_t *)text, len);
    if (bad) {
        kiln_fail(err, NULL, "text", (int64_t)(bad - (const uint8_t *)text),
                  "not valid UTF-8: Hugging Face normalizers need Unicode text");
        return NULL;
    }
    uint8_t *cur = malloc(len + 1);
    if (cur) memcpy(cur, text, len);
    size_t cur_len = len;
    for (int i = 0; cur && i < n->n; i++) {
        size_t next_len = 0;
        uint8_t *next = apply(&n->steps[i], cur, cur_len, &next_len);
        free(cur);
        cur = next;
        cur_len = next_len;
    }
    /* room for the terminator: libunistring's results are sized exactly */
    uint8_t *out = cur ? realloc(cur, cur_len + 1) : NULL;
    if (!out) {
        free(cur);
        kiln_fail(err, NULL, "text", -1, "out of memory while normalizing");
        return NULL;
    }
    out[cur_len] = 0;
    *out_len = cur_len;
    return (char *)out;
}

void kiln_hf_normalizer_free(kiln_hf_normalizer *n) { free(n); }
