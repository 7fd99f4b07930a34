/* tokenizer/tokenizer.c - loading a vocabulary from GGUF metadata, and
 * kiln_tokenize() itself: special tokens are split out of the text first,
 * then each plain run goes to the SPM or BPE merger.
 *
 * Loading follows llama.cpp's llama_vocab::impl::load so that the result
 * tokenizes identically, including its quieter rules: the default BOS/EOS
 * ids per model kind, tokens that llama.cpp promotes to control tokens by
 * their text (EOT/EOG/FIM names), Phi-3's right-stripping of special
 * tokens, and which tokens count as special (control, user-defined and
 * unknown ones; with parse_special off only user-defined ones are split
 * out). The merge algorithms live in tokenizer_spm.c and tokenizer_bpe.c,
 * the BPE pre-tokenizer in pre_split.c, the containers they share in
 * tok_base.c; this file is the top of tokenizer/ (tokenizer_impl.h). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tokenizer_impl.h"

#define FW_BAR "\xEF\xBD\x9C"     /* U+FF5C, in DeepSeek's token names */
#define SPACE_MARK "\xE2\x96\x81" /* U+2581 */

/* ---- loading ------------------------------------------------------------ */

/* The special ids llama.cpp reads; the FIM and EOT/EOM ones only matter
 * here because a token named by its key is not promoted by its text. */
enum { SP_BOS, SP_EOS, SP_EOT, SP_EOM, SP_UNK, SP_SEP, SP_PAD, SP_MASK, SP_FIM_PRE, SP_FIM_SUF, SP_FIM_MID,
       SP_FIM_PAD, SP_FIM_REP, SP_FIM_SEP, SP_COUNT };

static const struct {
    const char *key;
    int slot;
} SPECIAL_KEYS[] = {
    {"tokenizer.ggml.bos_token_id", SP_BOS},         {"tokenizer.ggml.eos_token_id", SP_EOS},
    {"tokenizer.ggml.eot_token_id", SP_EOT},         {"tokenizer.ggml.eom_token_id", SP_EOM},
    {"tokenizer.ggml.unknown_token_id", SP_UNK},     {"tokenizer.ggml.seperator_token_id", SP_SEP},
    {"tokenizer.ggml.padding_token_id", SP_PAD},     {"tokenizer.ggml.mask_token_id", SP_MASK},
    {"tokenizer.ggml.fim_pre_token_id", SP_FIM_PRE}, {"tokenizer.ggml.fim_suf_token_id", SP_FIM_SUF},
    {"tokenizer.ggml.fim_mid_token_id", SP_FIM_MID}, {"tokenizer.ggml.fim_pad_token_id", SP_FIM_PAD},
    {"tokenizer.ggml.fim_rep_token_id", SP_FIM_REP}, {"tokenizer.ggml.fim_sep_token_id", SP_FIM_SEP},
    {"tokenizer.ggml.prefix_token_id", SP_FIM_PRE},  {"tokenizer.ggml.suffix_token_id", SP_FIM_SUF},
    {"tokenizer.ggml.middle_token_id", SP_FIM_MID},
};

/* Token texts by which llama.cpp finds special ids the metadata left out;
 * the token found first becomes a control token. */
static const char *const EOT_NAMES[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
    "_<EOT>", "[EOT]", "<" FW_BAR "end" SPACE_MARK "of" SPACE_MARK "sentence" FW_BAR ">",
    "<end_of_utterance>", NULL};
static const char *const EOM_NAMES[] = {"<|eom_id|>", NULL};
static const char *const FIM_PRE_NAMES[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                            "<" FW_BAR "fim" SPACE_MARK "begin" FW_BAR ">", "<PRE>",
                                            SPACE_MARK "<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const FIM_SUF_NAMES[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                            "<" FW_BAR "fim" SPACE_MARK "hole" FW_BAR ">", "<SUF>",
                                            SPACE_MARK "<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const FIM_MID_NAMES[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                            "<" FW_BAR "fim" SPACE_MARK "end" FW_BAR ">", "<MID>",
                                            SPACE_MARK "<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const FIM_PAD_NAMES[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const FIM_REP_NAMES[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                            "<reponame>", NULL};
static const char *const FIM_SEP_NAMES[] = {"<|file_sep|>", NULL};

/* End-of-generation names: all of them become control tokens. */
static const char *const EOG_NAMES[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<" FW_BAR "end" SPACE_MARK "of" SPACE_MARK "sentence" FW_BAR ">", "[e~[", NULL};

static int32_t find_cstr(const kiln_tokenizer *t, const char *s) { return kiln_tok_find(t, s, strlen(s)); }

static void set_attr(kiln_tokenizer *t, const char *name, uint16_t set, uint16_t clear) {
    int32_t id = find_cstr(t, name);
    if (id != KILN_TOKEN_NULL) t->attr[id] = (uint16_t)((t->attr[id] & ~clear) | set);
}

/* llama.cpp's corrections of token attributes by token text. */
static void promote_by_name(kiln_tokenizer *t, int32_t *ids) {
    static const struct {
        int slot;
        const char *const *names;
    } AUTO[] = {{SP_EOT, EOT_NAMES},         {SP_EOM, EOM_NAMES},         {SP_FIM_PRE, FIM_PRE_NAMES},
                {SP_FIM_SUF, FIM_SUF_NAMES}, {SP_FIM_MID, FIM_MID_NAMES}, {SP_FIM_PAD, FIM_PAD_NAMES},
                {SP_FIM_REP, FIM_REP_NAMES}, {SP_FIM_SEP, FIM_SEP_NAMES}};
    for (size_t a = 0; a < sizeof AUTO / sizeof AUTO[0]; a++) {
        if (ids[AUTO[a].slot] != KILN_TOKEN_NULL) continue;
        for (const char *const *n = AUTO[a].names; *n; n++) {
            int32_t id = find_cstr(t, *n);
            if (id == KILN_TOKEN_NULL) continue;
            ids[AUTO[a].slot] = id;
            t->attr[id] |= KILN_ATTR_CONTROL;
            break;
        }
    }
    for (const char *const *n = EOG_NAMES; *n; n++) set_attr(t, *n, KILN_ATTR_CONTROL, 0);

    /* gpt-oss renders these; Harmony / Solar keep <|end|> out of EOG;
     * Gemma 4 keeps </s> a normal token */
    static const char *const RENDERED[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t i = 0; i < 4; i++) set_attr(t, RENDERED[i], KILN_ATTR_USER_DEFINED, 0xFFFF);
    bool has_return = find_cstr(t, "<|return|>") != KILN_TOKEN_NULL;
    bool has_call = find_cstr(t, "<|call|>") != KILN_TOKEN_NULL || find_cstr(t, "<|calls|>") != KILN_TOKEN_NULL;
    bool has_flush = find_cstr(t, "<|flush|>") != KILN_TOKEN_NULL;
    if (has_call && (has_return || has_flush)) set_attr(t, "<|end|>", KILN_ATTR_USER_DEFINED, 0xFFFF);
    if (find_cstr(t, "<|tool_response>") != KILN_TOKEN_NULL) set_attr(t, "</s>", KILN_ATTR_NORMAL, 0xFFFF);
}

typedef struct by_len {
    uint32_t len;
    int32_t id;
} by_len;

/* Longest first; ties keep id order (llama.cpp's unstable std::sort leaves
 * them unspecified, and they only matter for overlapping same-length names). */
static int by_length_desc(const void *a, const void *b) {
    const by_len *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Substring test; llama.cpp lower-cases the model name, not the others. */
static bool contains(kiln_str s, const char *needle, bool fold) {
    size_t n = strlen(needle);
    for (uint64_t i = 0; i + n <= s.len; i++)
        if (fold ? !strncasecmp(s.ptr + i, needle, n) : !memcmp(s.ptr + i, needle, n)) return true;
    return false;
}

/* The special-token candidates, longest first, and the per-model strip
 * attributes llama.cpp sets afterwards (so they do not change the set). */
static int collect_special(kiln_tokenizer *t, const kiln_gguf *g) {
    const uint16_t special = KILN_ATTR_CONTROL | KILN_ATTR_USER_DEFINED | KILN_ATTR_UNKNOWN;
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) n += (t->attr[i] & special) != 0;
    by_len *order = malloc((n + 1) * sizeof *order);
    if (!order || !(t->special = malloc((n + 1) * sizeof *t->special))) {
        free(order);
        return -1;
    }
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->attr[i] & special) order[t->n_special++] = (by_len){t->len[i], (int32_t)i};
    qsort(order, t->n_special, sizeof *order, by_length_desc);
    for (uint32_t i = 0; i < t->n_special; i++) t->special[i] = order[i].id;
    free(order);

    kiln_str pre = {"", 0}, arch = {"", 0}, name = {"", 0};
    kiln_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    kiln_gguf_get_str(g, "general.architecture", &arch);
    kiln_gguf_get_str(g, "general.name", &name);
    if (contains(pre, "jina-v2-de", false) || contains(pre, "jina-v2-es", false) ||
        contains(pre, "jina-v2-code", false) || contains(arch, "nomic-bert-moe", false) ||
        contains(arch, "jina-bert-v3", false)) {
        set_attr(t, "<mask>", KILN_ATTR_LSTRIP, 0);
    } else if (contains(name, "phi-3", true) || contains(name, "phi3", true)) {
        for (uint32_t i = 0; i < t->n_special; i++) t->attr[t->special[i]] |= KILN_ATTR_RSTRIP;
        set_attr(t, "</s>", KILN_ATTR_RSTRIP, 0);
        set_attr(t, "<unk>", 0, KILN_ATTR_RSTRIP);
        set_attr(t, "<s>", 0, KILN_ATTR_RSTRIP);
        set_attr(t, "<|endoftext|>", 0, KILN_ATTR_RSTRIP);
    } else if (contains(name, "modern-bert", true)) {
        set_attr(t, "[MASK]", KILN_ATTR_LSTRIP, 0);
    }
    return 0;
}

typedef struct pbuf {
    char *v;
    size_t len, cap;
} pbuf;

static int pbuf_put(pbuf *b, const void *p, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *v = realloc(b->v, cap);
        if (!v) return -1;
        b->v = v;
        b->cap = cap;
    }
    memcpy(b->v + b->len, p, n);
    b->len += n;
    return 0;
}

/* The printable piece of every token (llama.cpp's token_to_piece cache),
 * each followed by a NUL. */
static int build_pieces(kiln_tokenizer *t) {
    const uint16_t verbatim = KILN_ATTR_UNKNOWN | KILN_ATTR_CONTROL | KILN_ATTR_USER_DEFINED;
    pbuf b = {0};
    if (!(t->piece_off = malloc(t->n_vocab * sizeof *t->piece_off)) ||
        !(t->piece_len = malloc(t->n_vocab * sizeof *t->piece_len)))
        return -1;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        const char *s = t->text[i];
        size_t n = t->len[i], start = b.len;
        uint16_t a = t->attr[i];
        int rc = 0;
        if (a & verbatim) {
            rc = pbuf_put(&b, s, n);
        } else if ((a & KILN_ATTR_NORMAL) && t->kind == KILN_TOK_BPE && !t->spm_bpe) {
            rc = kiln_bpe_decode(s, n, &b.v, &b.len, &b.cap);
        } else if (a & KILN_ATTR_NORMAL) {
            for (size_t j = 0; j < n && rc == 0;) {
                bool mark = n - j >= 3 && !memcmp(s + j, SPACE_MARK, 3);
                rc = pbuf_put(&b, mark ? " " : s + j, 1);
                j += mark ? 3 : 1;
            }
        } else if ((a & KILN_ATTR_BYTE) && n == 6 && !memcmp(s, "<0x", 3)) {
            char hex[3] = {s[3], s[4], 0};
            char byte = (char)strtol(hex, NULL, 16);
            rc = pbuf_put(&b, &byte, 1);
        }
        t->piece_off[i] = start;
        t->piece_len[i] = (uint32_t)(b.len - start);
        if (rc < 0 || pbuf_put(&b, "", 1) < 0) {
            free(b.v);
            return -1;
        }
    }
    t->pieces = b.v;
    return 0;
}

/* Copies the token strings (llama.cpp names an empty one [EMPTY_i]) and
 * indexes them; a token spelled twice is an error, as in llama.cpp. */
static int load_tokens(kiln_tokenizer *t, const kiln_array *tok, kiln_err *err) {
    size_t total = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) total += tok->strs[i].len ? tok->strs[i].len + 1 : 24;
    if (!(t->blob = malloc(total + 1)) || !(t->text = malloc(t->n_vocab * sizeof *t->text)) ||
        !(t->len = malloc(t->n_vocab * sizeof *t->len)) || kiln_strmap_init(&t->by_text, t->n_vocab) < 0)
        return kiln_fail(err, t->name, NULL, -1, "out of memory");
    char *p = t->blob;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        size_t n = tok->strs[i].len;
        if (n) memcpy(p, tok->strs[i].ptr, n);
        else n = (size_t)snprintf(p, 24, "[EMPTY_%u]", i);
        p[n] = 0;
        t->text[i] = p;
        t->len[i] = (uint32_t)n;
        p += n + 1;
        uint64_t prev;
        int rc = kiln_strmap_put(&t->by_text, t->text[i], n, i, &prev);
        if (rc < 0) return kiln_fail(err, t->name, NULL, -1, "out of memory");
        if (rc == 0)
            return kiln_fail(err, t->name, "tokenizer.ggml.tokens", -1, "duplicate token '%s' (ids %llu and %u)",
                             t->text[i], (unsigned long long)prev, i);
    }
    return 0;
}

/* Scores and token types; both optional, as in llama.cpp. */
static int load_scores_types(kiln_tokenizer *t, const kiln_gguf *g, kiln_err *err) {
    const kiln_array *sc = kiln_gguf_get_arr(g, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32);
    if (!sc) sc = kiln_gguf_get_arr(g, "tokenizer.ggml.scores", KILN_GGUF_INT32);
    if (!sc && kiln_gguf_find_kv(g, "tokenizer.ggml.scores"))
        return kiln_fail(err, t->name, "tokenizer.ggml.scores", -1, "not an array of float32 or int32");
    const kiln_array *ty = kiln_gguf_get_arr(g, "tokenizer.ggml.token_type", KILN_GGUF_INT32);
    if (!ty && kiln_gguf_find_kv(g, "tokenizer.ggml.token_type"))
        return kiln_fail(err, t->name, "tokenizer.ggml.token_type", -1, "not an array of int32");
    if ((sc && sc->n < t->n_vocab) || (ty && ty->n < t->n_vocab))
        return kiln_fail(err, t->name, sc && sc->n < t->n_vocab ? "tokenizer.ggml.scores" : "tokenizer.ggml.token_type",
                         -1, "has fewer entries than the %u tokens", t->n_vocab);
    if (!(t->score = malloc(t->n_vocab * sizeof *t->score)) || !(t->attr = malloc(t->n_vocab * sizeof *t->attr)))
        return kiln_fail(err, t->name, NULL, -1, "out of memory");
    /* token_type values 0..6 (llama_token_type) as attributes */
    static const uint16_t TYPE_ATTR[7] = {0, KILN_ATTR_NORMAL, KILN_ATTR_UNKNOWN, KILN_ATTR_CONTROL,
                                          KILN_ATTR_USER_DEFINED, KILN_ATTR_UNUSED, KILN_ATTR_BYTE};
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        t->score[i] = sc ? (float)kiln_array_f64(sc, i) : 0.0f;
        int64_t ty_i = ty ? kiln_array_i64(ty, i) : 1;
        t->attr[i] = ty_i >= 0 && ty_i <= 6 ? TYPE_ATTR[ty_i] : 0;
    }
    return 0;
}

/* BPE merges "left right" -> rank; a repeated merge keeps its first rank. */
static int load_merges(kiln_tokenizer *t, const kiln_gguf *g, kiln_err *err) {
    const kiln_array *m = kiln_gguf_get_arr(g, "tokenizer.ggml.merges", KILN_GGUF_STRING);
    if (!m) return kiln_fail(err, t->name, "tokenizer.ggml.merges", -1, "missing (or not an array of strings)");
    size_t total = 0;
    for (uint64_t i = 0; i < m->n; i++) total += m->strs[i].len;
    if (!(t->merge_blob = malloc(total + 1)) || kiln_strmap_init(&t->merges, m->n) < 0)
        return kiln_fail(err, t->name, NULL, -1, "out of memory");
    char *p = t->merge_blob;
    for (uint64_t i = 0; i < m->n; i++) {
        kiln_str s = m->strs[i];
        /* llama.cpp splits at the first space after the first byte; a merge
         * without one can never be looked up */
        if (s.len < 2 || !memchr(s.ptr + 1, ' ', s.len - 1)) continue;
        memcpy(p, s.ptr, s.len);
        if (kiln_strmap_put(&t->merges, p, s.len, i, NULL) < 0)
            return kiln_fail(err, t->name, NULL, -1, "out of memory");
        p += s.len;
    }
    return 0;
}

/* Model kind, pre-tokenizer and the defaults that depend on them. */
static int load_kind(kiln_tokenizer *t, const kiln_gguf *g, int32_t *ids, kiln_err *err) {
    kiln_str model;
    if (!kiln_gguf_get_str(g, "tokenizer.ggml.model", &model))
        return kiln_fail(err, t->name, "tokenizer.ggml.model", -1, "missing: the file has no vocabulary");
    for (int i = 0; i < SP_COUNT; i++) ids[i] = KILN_TOKEN_NULL;
    if (kiln_str_eq(model, "llama")) {
        t->kind = KILN_TOK_SPM;
        ids[SP_BOS] = 1;
        ids[SP_EOS] = 2;
        ids[SP_UNK] = 0;
        t->add_space_prefix = true;
        t->add_bos = true;
        return 0;
    }
    if (!kiln_str_eq(model, "gpt2"))
        return kiln_fail(err, t->name, "tokenizer.ggml.model", -1,
                         "'%.*s' vocabularies are not supported (kiln tokenizes 'llama' and 'gpt2')",
                         (int)model.len, model.ptr);
    t->kind = KILN_TOK_BPE;
    ids[SP_BOS] = ids[SP_EOS] = 11;
    kiln_str pre = {"", 0};
    kiln_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
    char *pre_c = kiln_str_dup(pre);
    if (!pre_c) return kiln_fail(err, t->name, NULL, -1, "out of memory");
    kiln_pretok_flags fl = {0};
    int rc = kiln_pretok_new(pre_c, &t->pretok, &fl, t->name, err);
    free(pre_c);
    if (rc < 0) return -1;
    t->ignore_merges = fl.ignore_merges;
    t->add_bos = fl.add_bos;
    t->spm_bpe = fl.spm_bpe;
    if (fl.no_bos) ids[SP_BOS] = KILN_TOKEN_NULL;
    return 0;
}

/* Special ids from the metadata over the defaults; an id out of range is
 * ignored (and a default out of range dropped), as llama.cpp does. */
static int load_special(kiln_tokenizer *t, const kiln_gguf *g, int32_t *ids, kiln_err *err) {
    for (size_t i = 0; i < sizeof SPECIAL_KEYS / sizeof SPECIAL_KEYS[0]; i++) {
        int32_t *id = &ids[SPECIAL_KEYS[i].slot];
        if (*id >= 0 && (uint32_t)*id >= t->n_vocab) *id = KILN_TOKEN_NULL;
        uint64_t v;
        if (kiln_gguf_get_u64(g, SPECIAL_KEYS[i].key, &v) && v < t->n_vocab) *id = (int32_t)v;
    }
    bool b;
    if (kiln_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b)) t->add_space_prefix = b;
    if (kiln_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b)) t->add_bos = b;
    if (t->spm_bpe) t->add_bos = true; /* llama.cpp's Gemma 4 workaround: always */
    if (kiln_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b)) t->add_eos = b;
    if (t->add_bos && ids[SP_BOS] == KILN_TOKEN_NULL)
        return kiln_fail(err, t->name, "tokenizer.ggml.add_bos_token", -1,
                         "is true, but tokenizer.ggml.bos_token_id is not set");
    if (t->add_eos && ids[SP_EOS] == KILN_TOKEN_NULL)
        return kiln_fail(err, t->name, "tokenizer.ggml.add_eos_token", -1,
                         "is true, but tokenizer.ggml.eos_token_id is not set");
    t->bos = ids[SP_BOS];
    t->eos = ids[SP_EOS];
    t->unk = ids[SP_UNK];
    return 0;
}

kiln_tokenizer *kiln_tokenizer_load(const kiln_gguf *g, kiln_err *err) {
    kiln_tokenizer *t = calloc(1, sizeof *t);
    if (!t || !(t->name = strdup(g->path ? g->path : "model"))) {
        free(t);
        kiln_fail(err, NULL, NULL, -1, "out of memory");
        return NULL;
    }
    int32_t ids[SP_COUNT];
    const kiln_array *tok = kiln_gguf_get_arr(g, "tokenizer.ggml.tokens", KILN_GGUF_STRING);
    if (load_kind(t, g, ids, err) < 0) goto fail;
    if (!tok) {
        kiln_fail(err, t->name, "tokenizer.ggml.tokens", -1, "missing (or not an array of strings)");
        goto fail;
    }
    if (tok->n == 0 || tok->n > INT32_MAX) {
        kiln_fail(err, t->name, "tokenizer.ggml.tokens", -1, "holds %llu tokens", (unsigned long long)tok->n);
        goto fail;
    }
    t->n_vocab = (uint32_t)tok->n;
    if (load_tokens(t, tok, err) < 0 || load_scores_types(t, g, err) < 0) goto fail;
    if (t->kind == KILN_TOK_BPE && load_merges(t, g, err) < 0) goto fail;
    if (load_special(t, g, ids, err) < 0) goto fail;
    promote_by_name(t, ids);
    if (collect_special(t, g) < 0 || build_pieces(t) < 0) {
        kiln_fail(err, t->name, NULL, -1, "out of memory");
        goto fail;
    }
    return t;
fail:
    kiln_tokenizer_free(t);
    return NULL;
}

void kiln_tokenizer_free(kiln_tokenizer *t) {
    if (!t) return;
    free(t->text);
    free(t->len);
    free(t->score);
    free(t->attr);
    free(t->blob);
    kiln_strmap_free(&t->by_text);
    kiln_strmap_free(&t->merges);
    free(t->merge_blob);
    free(t->special);
    free(t->pieces);
    free(t->piece_off);
    free(t->piece_len);
    kiln_pretok_free(t->pretok);
    free(t->name);
    free(t);
}

/* ---- tokenizing ---------------------------------------------------------- */

/* A piece of the input: a special token (id >= 0) or a run of plain text. */
typedef struct frag {
    int32_t id;
    size_t off, len;
} frag;

typedef struct frags {
    frag *v;
    size_t n, cap;
} frags;

static int frag_push(frags *f, frag x) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        frag *v = realloc(f->v, cap * sizeof *v);
        if (!v) return -1;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = x;
    return 0;
}

/* Splits every plain run of `in` at the occurrences of special token `id`
 * into `out`, honouring its lstrip/rstrip attributes. */
static int split_at(const kiln_tokenizer *t, int32_t id, const char *text, const frags *in, frags *out) {
    const char *tok = t->text[id];
    size_t tlen = t->len[id];
    out->n = 0;
    for (size_t k = 0; k < in->n; k++) {
        frag f = in->v[k];
        if (f.id >= 0) {
            if (frag_push(out, f) < 0) return -1;
            continue;
        }
        size_t pos = f.off, end = f.off + f.len;
        const char *m;
        while (pos < end && (m = memmem(text + pos, end - pos, tok, tlen))) {
            size_t at = (size_t)(m - text), left = at - pos;
            if (t->attr[id] & KILN_ATTR_LSTRIP)
                while (left && isspace((unsigned char)text[pos + left - 1])) left--;
            if (left && frag_push(out, (frag){-1, pos, left}) < 0) return -1;
            if (frag_push(out, (frag){id, 0, 0}) < 0) return -1;
            pos = at + tlen;
            if (t->attr[id] & KILN_ATTR_RSTRIP)
                while (pos < end && isspace((unsigned char)text[pos])) pos++;
        }
        if (pos < end && frag_push(out, (frag){-1, pos, end - pos}) < 0) return -1;
    }
    return 0;
}

/* llama.cpp's tokenizer_st_partition: special tokens, longest first, are
 * cut out of the text; with parse_special off only user-defined ones. */
static int partition(const kiln_tokenizer *t, const char *text, size_t len, bool parse_special, frags *out) {
    frags tmp = {0};
    out->n = 0;
    if (len && frag_push(out, (frag){-1, 0, len}) < 0) return -1;
    for (uint32_t i = 0; i < t->n_special && out->n; i++) {
        int32_t id = t->special[i];
        if (!parse_special && (t->attr[id] & (KILN_ATTR_CONTROL | KILN_ATTR_UNKNOWN))) continue;
        bool found = false;
        for (size_t k = 0; k < out->n && !found; k++)
            found = out->v[k].id < 0 && memmem(text + out->v[k].off, out->v[k].len, t->text[id], t->len[id]);
        if (!found) continue;
        if (split_at(t, id, text, out, &tmp) < 0) {
            free(tmp.v);
            return -1;
        }
        frags swap = *out;
        *out = tmp;
        tmp = swap;
    }
    free(tmp.v);
    return 0;
}

int kiln_tokenize(const kiln_tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                  int32_t **ids, size_t *n, kiln_err *err) {
    kiln_ids out = {0};
    frags fr = {0};
    *ids = NULL;
    *n = 0;
    if (partition(t, text, len, parse_special, &fr) < 0) goto oom;
    if (add_special && t->add_bos && kiln_ids_push(&out, t->bos) < 0) goto oom;
    bool prev_special = true; /* SPM prefixes a space to text after a special token or at the start */
    for (size_t k = 0; k < fr.n; k++) {
        const frag *f = &fr.v[k];
        if (f->id >= 0) {
            if (kiln_ids_push(&out, f->id) < 0) goto oom;
            prev_special = true;
            continue;
        }
        int rc = t->kind == KILN_TOK_SPM
                     ? kiln_spm_tokenize(t, text + f->off, f->len, t->add_space_prefix && prev_special, &out, err)
                     : kiln_bpe_tokenize(t, text + f->off, f->len, &out, err);
        if (rc < 0) goto fail;
        prev_special = false;
    }
    if (add_special && t->add_eos && kiln_ids_push(&out, t->eos) < 0) goto oom;
    if (!out.v && !(out.v = malloc(sizeof *out.v))) goto oom;
    free(fr.v);
    *ids = out.v;
    *n = out.n;
    return 0;
oom:
    kiln_fail(err, NULL, NULL, -1, "out of memory");
fail:
    free(fr.v);
    free(out.v);
    return -1;
}

const char *kiln_token_piece(const kiln_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || (uint32_t)id >= t->n_vocab) {
        if (len) *len = 0;
        return "";
    }
    if (len) *len = t->piece_len[id];
    return t->pieces + t->piece_off[id];
}

uint32_t kiln_tokenizer_n_vocab(const kiln_tokenizer *t) { return t->n_vocab; }
int32_t kiln_tokenizer_bos(const kiln_tokenizer *t) { return t->bos; }
int32_t kiln_tokenizer_eos(const kiln_tokenizer *t) { return t->eos; }
bool kiln_tokenizer_add_bos(const kiln_tokenizer *t) { return t->add_bos; }
bool kiln_tokenizer_add_eos(const kiln_tokenizer *t) { return t->add_eos; }
bool kiln_token_is_control(const kiln_tokenizer *t, int32_t id) {
    return id >= 0 && (uint32_t)id < t->n_vocab && (t->attr[id] & KILN_ATTR_CONTROL);
}
