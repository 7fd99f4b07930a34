/* testmodel/testmodel_tok.c - the synthetic models' tokenizers: a
 * SentencePiece tokenizer.model (via spm_write.c) for the Llama family and
 * a byte-level BPE tokenizer.json for Qwen and GPT-2, with the
 * tokenizer_config.json and special_tokens_map.json transformers writes.
 *
 * The vocabulary is not trained: its pieces are the prefixes of common
 * English words, then of made-up syllable words, each reachable by one
 * merge from a shorter piece, so any tokenizer implementation can encode
 * text with it and a vocabulary of any size can be built. */
#include "testmodel_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fileio.h"
#include "../core/strmap.h"

/* ------------------------------------------------------------------ */
/* tokenizer vocabularies                                              */

/* Common English words first, so that small vocabularies look like real ones. */
static const char *const WORDS[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were",
    "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would",
    "who", "so", "no", "she", "other", "its", "may", "these", "about", "into", "than", "them", "only", "some",
    "time", "out", "two", "first", "new", "then", "could", "also", "what", "any", "like", "over", "such", "our",
    "most", "do", "after", "year", "many", "people", "state", "between", "world", "under", "through", "where",
    "each", "work", "well", "used", "model", "token", "layer", "weight", "value", "number", "system", "water",
    "house", "light", "small", "large", "great", "little", "long", "right", "place", "point", "hand", "part",
    "child", "life", "day", "way", "man", "woman", "city", "country", "school", "history", "music", "science",
    "kiln", "quant", "tensor", "matrix", "block", "scale", "hello", "language", "machine", "learning",
};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])

/* Word k of an endless list: the words above, then two-, three-, ...
 * syllable words over 90 consonant-vowel syllables. */
static void word_at(uint64_t k, char *out) {
    if (k < N_WORDS) {
        strcpy(out, WORDS[k]);
        return;
    }
    static const char cons[] = "bcdfghjklmnprstvwz", vow[] = "aeiou";
    uint64_t j = k - N_WORDS, count = 90 * 90;
    int syl = 2;
    while (j >= count && syl < 8) {
        j -= count;
        count *= 90;
        syl++;
    }
    char *p = out;
    for (int i = 0; i < syl; i++, j /= 90) {
        *p++ = cons[(j % 90) / 5];
        *p++ = vow[(j % 90) % 5];
    }
    *p = 0;
}

/* Enumerates new vocabulary pieces: for each word, the prefixes (of two
 * characters or more) of MARKER+word and then of the bare word, each
 * obtainable by merging its last character onto the previous prefix, which
 * is what both SentencePiece-BPE and byte-level BPE need to reach them. */
typedef struct piece_gen {
    kiln_strmap seen; /* keys are the pieces handed out, in the caller's storage */
    const char *marker;
    uint64_t word;
    int form;       /* 0: marker + word, 1: bare word */
    char buf[64];   /* the current form */
    size_t len, at; /* its length, and the end of the next prefix to try */
} piece_gen;

static void piece_gen_load(piece_gen *g) {
    char w[32];
    word_at(g->word, w);
    snprintf(g->buf, sizeof g->buf, "%s%s", g->form == 0 ? g->marker : "", w);
    g->len = strlen(g->buf);
    /* the first prefix has two characters; the marker is one multi-byte one */
    g->at = g->form == 0 ? strlen(g->marker) + 1 : 2;
}

/* Copies the next new piece into out (64 bytes, NUL-terminated, which must
 * stay valid as long as g) and its left part's byte length into *split.
 * Returns 0, or -1 when more pieces are asked than piece_gen_init said. */
static int piece_next(piece_gen *g, char *out, size_t *split) {
    for (;;) {
        while (g->at > g->len) {
            if (g->form == 1) g->word++;
            g->form ^= 1;
            piece_gen_load(g);
        }
        size_t at = g->at++;
        memcpy(out, g->buf, at);
        out[at] = 0;
        int r = kiln_strmap_put(&g->seen, out, at, 0, NULL);
        if (r < 0) return -1;
        if (r == 1) {
            *split = at - 1;
            return 0;
        }
    }
}

/* For up to n pieces. Returns -1 when out of memory. */
static int piece_gen_init(piece_gen *g, const char *marker, size_t n) {
    memset(g, 0, sizeof *g);
    g->marker = marker;
    piece_gen_load(g);
    return kiln_strmap_init(&g->seen, n);
}

#define SPM_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's space */
#define BPE_SPACE "\xc4\xa0"     /* U+0120, GPT-2's byte-level space */

/* Single characters, Llama-style at the end of the vocabulary. */
static const char *const SPM_SINGLES[] = {
    SPM_SPACE, "e", "t", "a", "o", "i", "n", "s", "r", "h", "l", "d", "c", "u", "m", "f", "p", "g", "w", "y",
    "b", ",", ".", "v", "k", "-", "x", "'", "j", "q", "z", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
    "T", "S", "A", "I", "C", "M", "P", "B", "D", "H", "R", "E", "F", "L", "W", "N", "G", "O", "!", "?", ":",
};
#define N_SPM_SINGLES (sizeof SPM_SINGLES / sizeof SPM_SINGLES[0])

/* tokenizer.model: <unk> <s> </s>, the 256 byte pieces, word pieces scored
 * by rank as spm_train's BPE does, then single characters. */
static int write_spm(const kiln_tm_config *c, const char *dir, kiln_err *err) {
    size_t n = c->vocab, n_single = (n - 259) / 4 < N_SPM_SINGLES ? (n - 259) / 4 : N_SPM_SINGLES;
    size_t n_word = n - 259 - n_single;
    kiln_spm_piece *p = calloc(n, sizeof *p);
    char *bytes = malloc(256 * 8), *words = malloc(n_word * 64 + 1);
    piece_gen g;
    int rc = -1;
    if (piece_gen_init(&g, SPM_SPACE, n_word) || !p || !bytes || !words) {
        kiln_fail(err, dir, "tokenizer.model", -1, "out of memory");
        goto done;
    }
    p[0] = (kiln_spm_piece){"<unk>", 0, KILN_SPM_UNKNOWN};
    p[1] = (kiln_spm_piece){"<s>", 0, KILN_SPM_CONTROL};
    p[2] = (kiln_spm_piece){"</s>", 0, KILN_SPM_CONTROL};
    for (int b = 0; b < 256; b++) {
        snprintf(bytes + 8 * b, 8, "<0x%02X>", b);
        p[3 + b] = (kiln_spm_piece){bytes + 8 * b, 0, KILN_SPM_BYTE};
    }
    for (size_t i = 0; i < n_word; i++) {
        size_t split;
        if (piece_next(&g, words + 64 * i, &split)) {
            kiln_fail(err, dir, "tokenizer.model", -1, "out of memory");
            goto done;
        }
        p[259 + i] = (kiln_spm_piece){words + 64 * i, -(float)i, KILN_SPM_NORMAL};
    }
    for (size_t i = 0; i < n_single; i++)
        p[259 + n_word + i] = (kiln_spm_piece){SPM_SINGLES[i], -(float)(n_word + i), KILN_SPM_NORMAL};
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.model", dir);
    rc = kiln_spm_write(path, p, n, err);
done:
    kiln_strmap_free(&g.seen);
    free(p);
    free(bytes);
    free(words);
    return rc;
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the
 * others map to U+0100 and up, in byte order. Vocabulary id i is the i-th
 * byte of the list that puts the printable ones first. */
static bool byte_printable(int b) { return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae); }

static void byte_level_token(int id, char out[4]) {
    int b = -1, cp;
    if (id < 188) { /* the printable ones, ascending */
        for (int x = 0, k = 0; x < 256; x++)
            if (byte_printable(x) && k++ == id) b = x;
        cp = b;
    } else {
        cp = 256 + (id - 188);
    }
    if (cp < 0x80) {
        out[0] = (char)cp, out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3f)), out[2] = 0;
    }
}

static json_t *added_token(int id, const char *content, bool normalized) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(id));
    json_object_set_new(o, "content", json_string(content));
    json_object_set_new(o, "single_word", json_false());
    json_object_set_new(o, "lstrip", json_false());
    json_object_set_new(o, "rstrip", json_false());
    json_object_set_new(o, "normalized", json_boolean(normalized));
    json_object_set_new(o, "special", json_true());
    return o;
}

static json_t *byte_level(bool add_prefix_space, bool trim_offsets, bool use_regex) {
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", add_prefix_space,
                     "trim_offsets", trim_offsets, "use_regex", use_regex);
}

/* Qwen2's pre-tokenizer split, as in its tokenizer.json. */
static const char QWEN2_REGEX[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

static const char *const QWEN_ADDED[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

/* tokenizer.json (with vocab.json and merges.txt, as the fixture has): the
 * 256 byte tokens, then one token per merge, then the special tokens. */
static int write_bpe(const kiln_tm_config *c, bool gpt2, const char *dir, kiln_err *err) {
    size_t n_added = gpt2 ? 1 : 3, n_model = c->vocab - (gpt2 ? 0 : n_added), n_merge = c->vocab - 256 - n_added;
    json_t *vocab = json_object(), *merges = json_array(), *added = json_array();
    char *mtxt = malloc(n_merge * 80 + 32), *pieces = malloc(n_merge * 64 + 1);
    size_t mlen = 0;
    piece_gen g;
    int rc = -1;
    if (piece_gen_init(&g, BPE_SPACE, n_merge) || !vocab || !merges || !added || !mtxt || !pieces) {
        kiln_fail(err, dir, "tokenizer.json", -1, "out of memory");
        goto done;
    }
    mlen = (size_t)sprintf(mtxt, "#version: 0.2\n");
    for (int id = 0; id < 256; id++) {
        char tok[4];
        byte_level_token(id, tok);
        json_object_set_new(vocab, tok, json_integer(id));
    }
    for (size_t i = 0; i < n_merge; i++) {
        char *piece = pieces + 64 * i, m[80];
        size_t split;
        if (piece_next(&g, piece, &split)) {
            kiln_fail(err, dir, "tokenizer.json", -1, "out of memory");
            goto done;
        }
        snprintf(m, sizeof m, "%.*s %s", (int)split, piece, piece + split);
        json_array_append_new(merges, json_string(m));
        mlen += (size_t)sprintf(mtxt + mlen, "%s\n", m);
        json_object_set_new(vocab, piece, json_integer((json_int_t)(256 + i)));
    }
    for (size_t i = 0; i < n_added; i++) {
        int id = (int)(256 + n_merge + i);
        const char *content = gpt2 ? "<|endoftext|>" : QWEN_ADDED[i];
        json_array_append_new(added, added_token(id, content, gpt2));
        if (gpt2) json_object_set_new(vocab, content, json_integer(id)); /* GPT-2 keeps it in the model vocab */
    }
    if (json_object_size(vocab) != n_model) {
        kiln_fail(err, dir, "tokenizer.json", -1, "vocabulary has %zu tokens, expected %zu", json_object_size(vocab),
                  n_model);
        goto done;
    }
    json_t *pre, *post, *dec;
    if (gpt2) {
        pre = byte_level(false, true, true);
        post = byte_level(true, false, true);
        dec = byte_level(true, true, true);
    } else {
        json_t *split = json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex", QWEN2_REGEX,
                                  "behavior", "Isolated", "invert", 0);
        pre = json_pack("{s:s, s:[o, o]}", "type", "Sequence", "pretokenizers", split, byte_level(false, false, false));
        post = byte_level(false, false, false);
        dec = byte_level(false, false, false);
    }
    json_t *model = json_pack("{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:b, s:O, s:O}", "type", "BPE", "dropout",
                              "unk_token", "continuing_subword_prefix", "", "end_of_word_suffix", "", "fuse_unk", 0,
                              "byte_fallback", 0, "ignore_merges", 0, "vocab", vocab, "merges", merges);
    json_t *root = json_pack("{s:s, s:n, s:n, s:O, s:n, s:o, s:o, s:o, s:o}", "version", "1.0", "truncation",
                             "padding", "added_tokens", added, "normalizer", "pre_tokenizer", pre, "post_processor",
                             post, "decoder", dec, "model", model);
    if (!pre || !post || !dec || !model || !root) {
        json_decref(root);
        kiln_fail(err, dir, "tokenizer.json", -1, "cannot build the JSON");
        goto done;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    if (kiln_tm_write_json(dir, "tokenizer.json", root, JSON_INDENT(2), err) ||
        kiln_tm_write_json(dir, "vocab.json", json_incref(vocab), JSON_INDENT(2) | JSON_SORT_KEYS, err) ||
        kiln_write_file_atomic(path, mtxt, mlen, err))
        goto done;
    rc = 0;
done:
    json_decref(vocab);
    json_decref(merges);
    json_decref(added);
    kiln_strmap_free(&g.seen);
    free(mtxt);
    free(pieces);
    return rc;
}

/* Llama: <s> 1, </s> 2; Qwen: <|endoftext|> both (after the merges); GPT-2: the last id. */
void kiln_tm_bos_eos(const kiln_tm_config *c, enum kiln_tm_tok tok, int *bos, int *eos) {
    switch (tok) {
    case KILN_TM_TOK_SPM: *bos = 1, *eos = 2; break;
    case KILN_TM_TOK_QWEN: *bos = *eos = (int)c->vocab - 3; break;
    default: *bos = *eos = (int)c->vocab - 1;
    }
}

#define SET(o, k, v) json_object_set_new(o, k, v)

/* {content, lstrip, normalized, rstrip, single_word[, special]} as in
 * special_tokens_map.json and tokenizer_config.json */
static json_t *token_obj(const char *content, bool normalized, bool special) {
    json_t *o = json_pack("{s:s, s:b, s:b, s:b, s:b}", "content", content, "lstrip", 0, "normalized", normalized,
                          "rstrip", 0, "single_word", 0);
    if (o && special) SET(o, "special", json_true());
    return o;
}

static const char LLAMA_TEMPLATE[] =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
    "message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + "
    "eos_token }}{% else %}{{ message['content'] + '\\n' }}{% endif %}{% endfor %}";

static const char QWEN_TEMPLATE[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static int write_tokenizer_configs(const kiln_tm_config *c, enum kiln_tm_tok tok, const char *dir, kiln_err *err) {
    int flags = JSON_INDENT(2) | JSON_SORT_KEYS;
    json_t *cfg = json_object(), *dec = json_object(), *map = json_object();
    char id[16];
    SET(cfg, "added_tokens_decoder", dec);
    SET(cfg, "clean_up_tokenization_spaces", json_boolean(tok == KILN_TM_TOK_GPT2));
    SET(cfg, "model_max_length", json_integer(c->ctx));
    if (tok == KILN_TM_TOK_SPM) {
        static const char *const sp[3] = {"<unk>", "<s>", "</s>"};
        for (int i = 0; i < 3; i++) {
            snprintf(id, sizeof id, "%d", i);
            SET(dec, id, token_obj(sp[i], false, true));
        }
        SET(cfg, "add_bos_token", json_true());
        SET(cfg, "add_eos_token", json_false());
        SET(cfg, "bos_token", json_string("<s>"));
        SET(cfg, "chat_template", json_string(LLAMA_TEMPLATE));
        SET(cfg, "eos_token", json_string("</s>"));
        SET(cfg, "legacy", json_true());
        SET(cfg, "pad_token", json_null());
        SET(cfg, "padding_side", json_string("right"));
        SET(cfg, "sp_model_kwargs", json_object());
        SET(cfg, "spaces_between_special_tokens", json_false());
        SET(cfg, "tokenizer_class", json_string("LlamaTokenizer"));
        SET(cfg, "unk_token", json_string("<unk>"));
        SET(cfg, "use_default_system_prompt", json_false());
        SET(map, "bos_token", token_obj("<s>", false, false));
        SET(map, "eos_token", token_obj("</s>", false, false));
        SET(map, "unk_token", token_obj("<unk>", false, false));
    } else if (tok == KILN_TM_TOK_QWEN) {
        for (int i = 0; i < 3; i++) {
            snprintf(id, sizeof id, "%u", c->vocab - 3 + i);
            SET(dec, id, token_obj(QWEN_ADDED[i], false, true));
        }
        SET(cfg, "add_bos_token", json_false());
        SET(cfg, "add_prefix_space", json_false());
        SET(cfg, "additional_special_tokens", json_pack("[s, s]", QWEN_ADDED[1], QWEN_ADDED[2]));
        SET(cfg, "bos_token", json_null());
        SET(cfg, "chat_template", json_string(QWEN_TEMPLATE));
        SET(cfg, "eos_token", json_string(QWEN_ADDED[0]));
        SET(cfg, "errors", json_string("replace"));
        SET(cfg, "pad_token", json_string(QWEN_ADDED[0]));
        SET(cfg, "split_special_tokens", json_false());
        SET(cfg, "tokenizer_class", json_string("Qwen2Tokenizer"));
        SET(cfg, "unk_token", json_null());
        SET(map, "additional_special_tokens", json_pack("[s, s]", QWEN_ADDED[1], QWEN_ADDED[2]));
        SET(map, "eos_token", token_obj(QWEN_ADDED[0], false, false));
        SET(map, "pad_token", token_obj(QWEN_ADDED[0], false, false));
    } else {
        const char *eot = "<|endoftext|>";
        snprintf(id, sizeof id, "%u", c->vocab - 1);
        SET(dec, id, token_obj(eot, true, true));
        SET(cfg, "add_bos_token", json_false());
        SET(cfg, "add_prefix_space", json_false());
        SET(cfg, "bos_token", json_string(eot));
        SET(cfg, "eos_token", json_string(eot));
        SET(cfg, "errors", json_string("replace"));
        SET(cfg, "pad_token", json_null());
        SET(cfg, "tokenizer_class", json_string("GPT2Tokenizer"));
        SET(cfg, "unk_token", json_string(eot));
        SET(map, "bos_token", token_obj(eot, true, false));
        SET(map, "eos_token", token_obj(eot, true, false));
        SET(map, "unk_token", token_obj(eot, true, false));
    }
    if (kiln_tm_write_json(dir, "tokenizer_config.json", cfg, flags, err)) return json_decref(map), -1;
    return kiln_tm_write_json(dir, "special_tokens_map.json", map, flags, err);
}

int kiln_tm_write_tokenizer(const kiln_tm_config *c, enum kiln_tm_tok tok, const char *dir, kiln_err *err) {
    int rc = tok == KILN_TM_TOK_SPM ? write_spm(c, dir, err) : write_bpe(c, tok == KILN_TM_TOK_GPT2, dir, err);
    return rc ? rc : write_tokenizer_configs(c, tok, dir, err);
}
