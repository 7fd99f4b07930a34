/* convert/meta_name.c - splitting a model id into general.name,
 * organization, basename, finetune, version and size label, following
 * gguf-py's Metadata.get_model_id_components and id_to_title, so that a
 * folder called "Mistral-7B-Instruct-v0.2" gets the same general.* keys
 * it gets from llama.cpp. The regular expressions are gguf-py's, run with
 * PCRE2. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <math.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "meta.h"

enum { T_BASENAME = 1, T_SIZE = 2, T_FINETUNE = 4, T_VERSION = 8, T_TYPE = 16 };

static bool full_match(const char *re, const char *s) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_CASELESS | PCRE2_UTF, &ec, &eo, NULL);
    if (!c) return false;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    int rc = md ? pcre2_match(c, (PCRE2_SPTR)s, strlen(s), 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, md, NULL) : -1;
    pcre2_match_data_free(md);
    pcre2_code_free(c);
    return rc >= 0;
}

static bool is_decimal(char c) { return c >= '0' && c <= '9'; }

/* "7b1" -> "7.1B", "1_5b" -> "1.5B" (normalize_size_label). */
static void normalize_size(char *l) {
    for (char *p = l; *p; p++)
        if (*p == '_') *p = '.';
    size_t n = strlen(l);
    if (n >= 2 && is_decimal(l[n - 1])) {
        char last = l[n - 1], unit = l[n - 2];
        l[n - 2] = '.';
        l[n - 1] = last;
        l[n] = unit;
        l[n + 1] = 0;
        n++;
    }
    if (n > 1 && is_decimal(l[n - 2]) && strchr("kmbt", l[n - 1])) l[n - 1] = (char)toupper((unsigned char)l[n - 1]);
}

/* float(label[:-1]) * 1000 ** " KMBT".find(label[-1]); false when the
 * number does not parse (Python's ValueError). */
static bool size_params(const char *l, double *out) {
    size_t n = strlen(l);
    if (n < 2) return false;
    char num[64];
    if (n - 1 >= sizeof num) return false;
    memcpy(num, l, n - 1);
    num[n - 1] = 0;
    char *end;
    double v = strtod(num, &end);
    if (*end || end == num) return false;
    const char *units = " KMBT", *u = strchr(units, l[n - 1]);
    int e = u && l[n - 1] ? (int)(u - units) : -1;
    *out = v * pow(1000.0, e);
    return true;
}

static char *join(char **parts, const int *types, int n, int want, int exclude) {
    size_t len = 0;
    for (int i = 0; i < n; i++)
        if ((types[i] & want) && !(types[i] & exclude)) len += strlen(parts[i]) + 1;
    if (!len) return NULL;
    char *out = calloc(1, len);
    for (int i = 0; out && i < n; i++) {
        if (!(types[i] & want) || (types[i] & exclude)) continue;
        bool dup = false;
        if (want == T_SIZE)
            for (int j = 0; j < i; j++) dup |= (types[j] & T_SIZE) && !strcmp(parts[j], parts[i]);
        if (dup) continue;
        if (*out) strcat(out, "-");
        strcat(out, parts[i]);
    }
    return out;
}

static void annotate(char **parts, int *types, int n, int64_t total) {
    for (int i = 0; i < n; i++) {
        char *p = parts[i];
        if (full_match("(v|iter)?\\d+([.]\\d+)*", p)) {
            types[i] |= T_VERSION;
        } else if (full_match("i?q\\d(_\\w)*|b?fp?(16|32)", p)) {
            types[i] |= T_TYPE;
            for (char *c = p; *c; c++) *c = (char)toupper((unsigned char)*c);
        } else if (i > 0 && full_match("(([A]|\\d+[x])?\\d+([._]\\d+)?[KMBT][\\d]?|small|mini|medium|large|x?xl)", p)) {
            normalize_size(p);
            double lp, np;
            if (total != 0 && size_params(p, &lp)) {
                bool active = false;
                if (i + 1 < n) {
                    char next[80];
                    snprintf(next, sizeof next, "%s", parts[i + 1]);
                    normalize_size(next);
                    active = full_match("A\\d+([._]\\d+)?[KMBT][\\d]?", next) && size_params(next + 1, &np) &&
                             fabs(np - (double)llabs(total)) <= (double)(7 * llabs(total) / 8);
                }
                if (!active && ((total < 0 && lp < (double)(llabs(total) / 8)) ||
                                (total > 0 && fabs(lp - (double)total) > (double)(7 * total / 8)))) {
                    types[i] |= T_FINETUNE;
                    size_t l = strlen(p);
                    p[l - 1] = (char)tolower((unsigned char)p[l - 1]);
                }
            }
            if (!types[i]) types[i] |= T_SIZE;
        } else if (i > 0 && full_match("chat|instruct|vision|lora", p)) {
            types[i] |= (total < 0 && !strcasecmp(p, "lora")) ? T_TYPE : T_FINETUNE;
        }
    }
}

int cv_model_id_parts(const char *model_id, int64_t total, cv_name_parts *out) {
    memset(out, 0, sizeof *out);
    if (!model_id) return 0;
    if (strchr(model_id, ' ')) return (out->name = strdup(model_id)) ? 0 : -1;
    const char *slash = strchr(model_id, '/'), *full = slash ? slash + 1 : model_id;
    if (slash && slash > model_id && model_id[0] != '.') out->org = strndup(model_id, (size_t)(slash - model_id));
    out->name = strdup(full);
    /* each part gets room to grow by one character (normalize_size) */
    size_t len = strlen(full);
    char **parts = calloc(len + 1, sizeof *parts);
    int *types = calloc(len + 1, sizeof *types);
    char *copy = strdup(full);
    if (!out->name || !parts || !types || !copy) {
        free(parts), free(types), free(copy);
        return -1;
    }
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(copy, "-", &save); tok; tok = strtok_r(NULL, "-", &save)) {
        parts[n] = malloc(strlen(tok) + 2);
        if (parts[n]) strcpy(parts[n++], tok);
    }
    annotate(parts, types, n, total);
    bool numeric_size = false;
    for (int i = 0; i < n; i++)
        for (char *c = parts[i]; (types[i] & T_SIZE) && *c; c++) numeric_size |= is_decimal(*c);
    for (int i = 0; numeric_size && i < n; i++) {
        bool alpha = true;
        for (char *c = parts[i]; *c; c++) alpha &= isalpha((unsigned char)*c) != 0;
        if ((types[i] & T_SIZE) && alpha) types[i] &= ~T_SIZE;
    }
    bool at_start = true;
    for (int i = 0; i < n; i++) {
        if (at_start && ((!types[i] && isalpha((unsigned char)parts[i][0])) || (types[i] & T_VERSION))) {
            types[i] |= T_BASENAME;
        } else {
            at_start = false;
            if (!types[i]) types[i] |= T_FINETUNE;
        }
    }
    for (int i = n - 1; i >= 0; i--) {
        if ((types[i] & T_BASENAME) && (types[i] & ~T_BASENAME)) types[i] &= ~T_BASENAME;
        else break;
    }
    out->basename = join(parts, types, n, T_BASENAME, 0);
    out->size_label = join(parts, types, n, T_SIZE, 0);
    out->finetune = join(parts, types, n, T_FINETUNE, 0);
    out->version = join(parts, types, n, T_VERSION, T_BASENAME);
    if (!out->size_label && !out->finetune && !out->version) {
        free(out->basename);
        out->basename = NULL;
    }
    for (int i = 0; i < n; i++) free(parts[i]);
    free(parts);
    free(types);
    free(copy);
    return 0;
}

void cv_name_parts_free(cv_name_parts *p) {
    free(p->name), free(p->org), free(p->basename), free(p->finetune), free(p->version), free(p->size_label);
    memset(p, 0, sizeof *p);
}

/* Python's str.islower(): some cased character, none upper case. ASCII
 * only; other bytes count as uncased. */
static bool py_islower(const char *w, size_t n) {
    bool cased = false;
    for (size_t i = 0; i < n; i++) {
        if (isupper((unsigned char)w[i])) return false;
        cased |= islower((unsigned char)w[i]) != 0;
    }
    return cased;
}

char *cv_id_to_title(const char *id) {
    size_t n = strlen(id);
    char *out = malloc(n + 1), *o = out;
    if (!out) return NULL;
    const char *p = id;
    while (*p) {
        while (*p == ' ' || *p == '-' || *p == '\t' || *p == '\n') p++;
        const char *w = p;
        while (*p && *p != ' ' && *p != '-' && *p != '\t' && *p != '\n') p++;
        size_t wl = (size_t)(p - w);
        if (!wl) break;
        if (o != out) *o++ = ' ';
        char word[512];
        snprintf(word, sizeof word, "%.*s", (int)wl, w);
        bool keep = !py_islower(w, wl) || full_match("(v\\d+(?:\\.\\d+)*|\\d.*)", word);
        bool prev_letter = false;
        for (size_t i = 0; i < wl; i++) {
            char c = w[i];
            if (!keep && isalpha((unsigned char)c)) c = (char)(prev_letter ? tolower((unsigned char)c) : toupper((unsigned char)c));
            prev_letter = isalpha((unsigned char)w[i]) != 0;
            *o++ = c;
        }
    }
    *o = 0;
    return out;
}
