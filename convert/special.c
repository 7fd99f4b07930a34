/* convert/special.c - special tokens, add_bos/add_eos/add_sep, BPE merges
 * and the chat template, as gguf-py's SpecialVocab finds them:
 *
 *   1. tokenizer.json: merges (when wanted), and its post_processor
 *      (RobertaProcessing, or a TemplateProcessing whose leading/trailing
 *      special tokens say whether BOS/EOS/SEP are added);
 *   2. tokenizer_config.json: the chat template (else chat_template.jinja
 *      or chat_template.json), add_X_token flags, and X_token contents,
 *      resolved to ids through tokenizer.json's added_tokens;
 *   3. config.json: X_token_id for the types still unset;
 *   4. merges.txt when merges are wanted and tokenizer.json had none.
 *
 * The first id found for a type wins. Keys are written in add_to_gguf's
 * order: merges, ids, flags, template. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "vocab.h"

#define MAX_TYPES 9

typedef struct sv {
    const char *types[MAX_TYPES];
    int n_types;
    const char *id_type[MAX_TYPES]; /* in the order they were set */
    int64_t id_val[MAX_TYPES];
    int n_ids;
    const char *add_type[MAX_TYPES];
    bool add_val[MAX_TYPES];
    int n_add;
    int64_t n_vocab;
    json_t *tc; /* a private copy of tokenizer_config.json (it gets edited) */
    kiln_err *err;
} sv;

static void set_add(sv *s, const char *typ, bool v) {
    for (int i = 0; i < s->n_add; i++)
        if (!strcmp(s->add_type[i], typ)) {
            s->add_val[i] = v;
            return;
        }
    if (s->n_add < MAX_TYPES) s->add_type[s->n_add] = typ, s->add_val[s->n_add++] = v;
}

/* _set_special_token: only integer ids; the first one wins. */
static int set_id(sv *s, const char *typ, json_t *v) {
    if (!json_is_integer(v)) return 0;
    int64_t id = json_integer_value(v);
    if (id < 0) return kiln_fail(s->err, "config.json", typ, -1, "invalid value for special token type: %lld", (long long)id);
    if (s->n_vocab >= 0 && id >= s->n_vocab) return 0; /* out of range: gguf-py skips it */
    for (int i = 0; i < s->n_ids; i++)
        if (!strcmp(s->id_type[i], typ)) return 0;
    if (s->n_ids < MAX_TYPES) s->id_type[s->n_ids] = typ, s->id_val[s->n_ids++] = id;
    return 0;
}

static void add_type(sv *s, const char *typ) {
    if (s->n_types < MAX_TYPES) s->types[s->n_types++] = typ;
}

static bool has_type(const sv *s, const char *typ) {
    for (int i = 0; i < s->n_types; i++)
        if (!strcmp(s->types[i], typ)) return true;
    return false;
}

/* Python equality of a JSON value with a string. */
static bool eq(json_t *v, const char *str) { return str && json_is_string(v) && !strcmp(json_string_value(v), str); }

static const char *special_id(json_t *item) {
    return cv_json_str(cv_json_get(cv_json_get(item, "SpecialToken"), "id"));
}

static const char *sequence_id(json_t *item) {
    return cv_json_str(cv_json_get(cv_json_get(item, "Sequence"), "id"));
}

static void tc_set(sv *s, const char *key, json_t *v) {
    if (s->tc && cv_json_truthy(s->tc) && v) json_object_set(s->tc, key, v);
}

/* The TemplateProcessing rules of _try_load_from_tokenizer_json. */
static void template_processing(sv *s, json_t *proc, json_t **bos, json_t **eos, json_t **cls, json_t **sep) {
    json_t *single = cv_json_get(proc, "single"), *pair = cv_json_get(proc, "pair");
    size_t ns = json_array_size(single), np = json_array_size(pair);
    bool have_tc = s->tc && cv_json_truthy(s->tc);
    const char *first = NULL, *last = NULL;
    if (ns > 1) {
        if ((first = special_id(json_array_get(single, 0))) && *first) {
            json_t *fv = json_string(first);
            if (!have_tc) *bos = fv, fv = NULL;
            set_add(s, "bos", eq(*bos, first) || eq(*cls, first));
            json_decref(fv);
        } else {
            first = NULL;
        }
        if ((last = special_id(json_array_get(single, ns - 1))) && *last) {
            if (!have_tc) {
                *eos = json_string(last);
            } else if (!eq(*eos, last)) {
                const char *extra = !has_type(s, "eot") ? "eot" : !has_type(s, "eom") ? "eom" : NULL;
                if (extra) {
                    add_type(s, extra);
                    tc_set(s, !strcmp(extra, "eot") ? "eot_token" : "eom_token", *eos);
                }
                *eos = json_string(last);
                tc_set(s, "eos_token", *eos);
            }
            set_add(s, "eos", eq(*eos, last));
        } else {
            last = NULL;
        }
    }
    if (!np) return;
    const char *p0 = special_id(json_array_get(pair, 0)), *pl = special_id(json_array_get(pair, np - 1));
    size_t start = first && p0 && !strcmp(p0, first) ? 1 : 0;
    size_t stop = last && pl && !strcmp(pl, last) ? np - 1 : np;
    if (stop <= start) return;
    const char *a = sequence_id(json_array_get(pair, start)), *b = sequence_id(json_array_get(pair, stop - 1));
    if (!a || !b || strcmp(a, "A") || strcmp(b, "B") || stop - start <= 2) return;
    /* A [sep] [eos] B */
    bool add_sep = false;
    const char *e0 = special_id(json_array_get(pair, start + 1));
    if (e0 && *e0 && (eq(*sep, e0) || eq(*eos, e0)) && !last) add_sep = true;
    if (stop - start - 2 == 2) {
        const char *e1 = special_id(json_array_get(pair, start + 2));
        if (e1 && *e1 && (eq(*sep, e1) || eq(*eos, e1))) add_sep = true;
    }
    set_add(s, "sep", add_sep);
    if (add_sep && !cv_json_truthy(*sep) && have_tc) json_object_set(s->tc, "sep_token", *eos);
}

/* post_processor: what the tokenizer adds around a sequence. */
static void post_processor(sv *s, json_t *tok) {
    json_t *tc = s->tc;
    json_t *bos = tc ? cv_json_get(tc, "bos_token") : NULL, *cls = tc ? cv_json_get(tc, "cls_token") : NULL;
    json_t *eos = tc ? cv_json_get(tc, "eos_token") : NULL, *sep = tc ? cv_json_get(tc, "sep_token") : NULL;
    json_incref(bos), json_incref(cls), json_incref(eos), json_incref(sep);
    bool have_tc = tc && cv_json_truthy(tc);
    if (!cv_json_truthy(bos) && cv_json_truthy(cls) && have_tc) {
        json_object_set(tc, "bos_token", cls);
        json_decref(bos), bos = json_incref(cls);
    }
    if (!cv_json_truthy(eos) && cv_json_truthy(sep) && have_tc) {
        json_object_set(tc, "eos_token", sep);
        json_decref(eos), eos = json_incref(sep);
    }
    json_t *pp = cv_json_get(tok, "post_processor");
    if (cv_json_truthy(pp)) {
        json_t *procs = cv_json_get(pp, "processors");
        size_t n = json_is_array(procs) ? json_array_size(procs) : 1;
        for (size_t i = 0; i < n; i++) {
            json_t *proc = json_is_array(procs) ? json_array_get(procs, i) : pp;
            const char *type = cv_json_str(cv_json_get(proc, "type"));
            if (type && !strcmp(type, "RobertaProcessing")) {
                set_add(s, "bos", true), set_add(s, "eos", true), set_add(s, "sep", true);
                if (!cv_json_truthy(cls) && have_tc) {
                    json_t *c = json_array_get(cv_json_get(proc, "cls"), 0);
                    json_object_set(tc, "cls_token", c ? c : (bos ? bos : json_null()));
                }
                if (!cv_json_truthy(sep) && have_tc) {
                    json_t *c = json_array_get(cv_json_get(proc, "sep"), 0);
                    json_object_set(tc, "sep_token", c ? c : (eos ? eos : json_null()));
                }
            } else if (type && !strcmp(type, "TemplateProcessing")) {
                json_t *b = bos, *e = eos;
                template_processing(s, proc, &b, &e, &cls, &sep);
                if (b != bos) json_decref(bos), bos = b;
                if (e != eos) json_decref(eos), eos = e;
            }
        }
    }
    json_decref(bos), json_decref(cls), json_decref(eos), json_decref(sep);
}

/* tokenizer_config.json's X_token (a string or {"content": ...}) -> id. */
static int config_tokens(sv *s, json_t *added) {
    for (int i = 0; i < s->n_types; i++) {
        const char *typ = s->types[i];
        char key[32];
        snprintf(key, sizeof key, "add_%s_token", typ);
        json_t *flag = cv_json_get(s->tc, key);
        if (json_is_boolean(flag)) set_add(s, typ, json_is_true(flag));
        snprintf(key, sizeof key, "%s_token", typ);
        json_t *entry = cv_json_get(s->tc, key);
        const char *content = json_is_object(entry) ? cv_json_str(cv_json_get(entry, "content")) : cv_json_str(entry);
        if (!content) continue;
        size_t j;
        json_t *atok;
        json_array_foreach(added, j, atok) {
            if (eq(cv_json_get(atok, "content"), content)) {
                if (set_id(s, typ, cv_json_get(atok, "id")) < 0) return -1;
                break;
            }
        }
    }
    return 0;
}

/* merges: tokenizer.json's model.merges (strings, or pairs whose spaces
 * become U+0120), else merges.txt. */
static int load_merges(cv_source *src, json_t *tok, cv_tokens *m, kiln_err *err) {
    json_t *merges = tok ? cv_json_get(cv_json_get(tok, "model"), "merges") : NULL;
    size_t n = json_array_size(merges);
    if (n) {
        json_t *first = json_array_get(merges, 0);
        bool pairs = json_is_array(first) && json_array_size(first) == 2 && json_is_string(json_array_get(first, 0));
        if (!json_is_string(first) && !pairs)
            return kiln_fail(err, "tokenizer.json", "model.merges", -1, "unknown merges format");
        if (cv_tokens_init(m, n, false, err) < 0) return -1;
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_array_get(merges, i);
            char *buf = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&buf, &len);
            if (!f) return kiln_fail(err, "tokenizer.json", NULL, -1, "out of memory");
            if (pairs) {
                for (int p = 0; p < 2; p++) {
                    const char *part = cv_json_str(json_array_get(e, (size_t)p));
                    if (p) fputc(' ', f);
                    for (const char *c = part ? part : ""; *c; c++)
                        if (*c == ' ') fputs("\xc4\xa0", f);
                        else fputc(*c, f);
                }
            } else {
                fputs(cv_json_str(e) ? cv_json_str(e) : "", f);
            }
            fclose(f);
            int rc = buf ? cv_tokens_set(m, i, buf, len, err) : kiln_fail(err, "tokenizer.json", NULL, -1, "out of memory");
            free(buf);
            if (rc < 0) return -1;
        }
        return 0;
    }
    char *text = NULL;
    size_t len = 0;
    int got = cv_source_read_all(src, "merges.txt", &text, &len, err);
    if (got <= 0) return got;
    if (cv_tokens_init(m, len / 2 + 1, false, err) < 0) {
        free(text);
        return -1;
    }
    uint64_t count = 0, line_no = 0;
    int rc = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && rc == 0; line = strtok_r(NULL, "\n", &save)) {
        while (isspace((unsigned char)*line)) line++;
        size_t l = strlen(line);
        while (l && isspace((unsigned char)line[l - 1])) line[--l] = 0;
        if (line_no++ == 0 && line[0] == '#') continue;
        if (!l) continue;
        char *a = line, *b = line;
        while (*b && !isspace((unsigned char)*b)) b++;
        size_t la = (size_t)(b - a);
        while (isspace((unsigned char)*b)) b++;
        char *end = b;
        while (*end && !isspace((unsigned char)*end)) end++;
        if (!*b || *end) continue; /* malformed: not exactly two parts */
        char pair[1024];
        int plen = snprintf(pair, sizeof pair, "%.*s %s", (int)la, a, b);
        if (plen > 0 && (size_t)plen < sizeof pair) rc = cv_tokens_set(m, count++, pair, (uint64_t)plen, err);
    }
    free(text);
    m->n = rc == 0 ? count : m->n;
    return rc;
}

static int write_chat_template(json_t *tmpl, cv_kv *k) {
    if (json_is_string(tmpl)) {
        k->chat_template = true;
        return cv_kv_str(k, "tokenizer.chat_template", json_string_value(tmpl));
    }
    if (!json_is_array(tmpl)) return 0;
    const char *dflt = NULL;
    const char **names = calloc(json_array_size(tmpl) + 1, sizeof *names);
    char(*clean)[64] = calloc(json_array_size(tmpl) + 1, sizeof *clean);
    size_t n = 0, i;
    json_t *c;
    int rc = names && clean ? 0 : kiln_fail(k->err, "tokenizer_config.json", NULL, -1, "out of memory");
    json_array_foreach(tmpl, i, c) {
        const char *name = cv_json_str(cv_json_get(c, "name")), *t = cv_json_str(cv_json_get(c, "template"));
        if (rc || !name || !*name || !t) continue;
        size_t l = 0;
        for (; name[l] && l < 63; l++) clean[n][l] = isalnum((unsigned char)name[l]) ? name[l] : '_';
        if (!strcmp(clean[n], "default")) {
            dflt = t;
            continue;
        }
        char key[128];
        snprintf(key, sizeof key, "tokenizer.chat_template.%s", clean[n]);
        rc = cv_kv_str(k, key, t);
        names[n] = clean[n];
        n++;
    }
    if (rc == 0 && n) rc = cv_kv_str_arr(k, "tokenizer.chat_templates", names, NULL, n);
    if (rc == 0 && dflt) {
        k->chat_template = true;
        rc = cv_kv_str(k, "tokenizer.chat_template", dflt);
    }
    free(names);
    free(clean);
    return rc;
}

/* chat_template from tokenizer_config.json, else the .jinja/.json file. */
static int chat_template(cv_source *src, sv *s, json_t **out) {
    *out = NULL;
    json_t *v = cv_json_get(s->tc, "chat_template");
    if (v) {
        *out = json_incref(v);
        return 0;
    }
    char *text = NULL;
    size_t len = 0;
    int got = cv_source_read_all(src, "chat_template.jinja", &text, &len, s->err);
    if (got < 0) return -1;
    if (got) {
        *out = json_stringn(text, len);
        free(text);
        return 0;
    }
    got = cv_source_read_all(src, "chat_template.json", &text, &len, s->err);
    if (got <= 0) return got;
    json_t *j = cv_json_parse(text, len, "chat_template.json", s->err);
    free(text);
    if (!j) return -1;
    *out = json_incref(cv_json_get(j, "chat_template"));
    json_decref(j);
    return 0;
}

static const char *id_key(const char *typ) {
    static const char *const map[][2] = {{"bos", "bos_token_id"},     {"eos", "eos_token_id"},
                                         {"unk", "unknown_token_id"}, {"sep", "seperator_token_id"},
                                         {"pad", "padding_token_id"}, {"cls", "cls_token_id"},
                                         {"mask", "mask_token_id"},   {"eot", "eot_token_id"},
                                         {"eom", "eom_token_id"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i][0], typ)) return map[i][1];
    return NULL;
}

static int write_all(sv *s, const cv_tokens *merges, json_t *tmpl, cv_kv *k) {
    if (merges->n &&
        cv_kv_str_arr(k, "tokenizer.ggml.merges", (const char *const *)merges->text, merges->len, merges->n) < 0)
        return -1;
    for (int i = 0; i < s->n_ids; i++) {
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.%s", id_key(s->id_type[i]));
        if (cv_kv_u32(k, key, (uint32_t)s->id_val[i]) < 0) return -1;
    }
    for (int i = 0; i < s->n_add; i++) {
        const char *t = s->add_type[i];
        if (strcmp(t, "bos") && strcmp(t, "eos") && strcmp(t, "sep")) continue; /* gguf-py has no handler */
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.add_%s_token", t);
        if (cv_kv_bool(k, key, s->add_val[i]) < 0) return -1;
    }
    return write_chat_template(tmpl, k);
}

int cv_special_write(cv_source *src, const cv_tok_files *f, bool want_merges, int64_t n_vocab, cv_kv *k) {
    sv s = {.n_vocab = n_vocab, .err = k->err};
    static const char *const base[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
    for (size_t i = 0; i < 7; i++) add_type(&s, base[i]);
    s.tc = f->tokenizer_config ? cv_json_copy(f->tokenizer_config) : NULL;
    cv_tokens merges = {0};
    json_t *tmpl = NULL;
    int rc = 0;
    if (want_merges && f->tokenizer) rc = load_merges(src, f->tokenizer, &merges, k->err);
    json_t *added = f->tokenizer ? cv_json_get(f->tokenizer, "added_tokens") : NULL;
    if (rc == 0 && cv_json_truthy(f->tokenizer)) post_processor(&s, f->tokenizer);
    if (rc == 0 && cv_json_truthy(s.tc)) {
        rc = chat_template(src, &s, &tmpl);
        if (rc == 0) rc = config_tokens(&s, json_is_array(added) ? added : NULL);
    }
    for (int i = 0; rc == 0 && f->config && i < s.n_types; i++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", s.types[i]);
        json_t *v = cv_json_get(f->config, key);
        if (!v) v = cv_json_get(cv_json_get(f->config, "text_config"), key);
        rc = set_id(&s, s.types[i], v);
    }
    if (rc == 0 && want_merges && !merges.n) rc = load_merges(src, NULL, &merges, k->err);
    if (rc == 0) rc = write_all(&s, &merges, tmpl, k);
    cv_tokens_free(&merges);
    json_decref(tmpl);
    json_decref(s.tc);
    return rc;
}
