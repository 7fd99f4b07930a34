/* tokenizer/tokenizer_bpe.c - byte-level BPE (`tokenizer.ggml.model =
 * gpt2`) of one run of plain text, as llama.cpp's llm_tokenizer_bpe_session
 * does it.
 *
 * The pre-tokenizer (pre_split.c) cuts the text into words; each word's
 * bytes are written as GPT-2's printable stand-in characters (space is "Ġ")
 * and its characters are merged pairwise, always the pair with the lowest
 * rank in tokenizer.ggml.merges, leftmost on ties. A final symbol that is
 * not a token is spelled byte by byte, and llama.cpp drops bytes that have
 * no single-byte token; so does this file.
 *
 * SentencePiece-style BPE (t->spm_bpe: llama.cpp's Gemma 4 pre type, which
 * Gemma 3's tokenizer.json gets) differs in three places: spaces are
 * escaped to U+2581 before the split, words are merged as plain UTF-8, and
 * the bytes of a symbol that is not a token are the <0xXX> tokens. A word
 * of newlines only that is itself a token is taken whole. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

/* GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for
 * themselves, the other 68 bytes for U+0100.. in byte order. */
static uint32_t byte_to_cp(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    if (b <= 0x20) return 0x100 + b;
    if (b <= 0xA0) return 0x100 + 33 + (b - 0x7F);
    return 0x100 + 33 + 34; /* 0xAD */
}

/* The inverse; -1 for code points that stand for no byte. */
static int cp_to_byte(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp >= 0x100 && cp <= 0x120) return (int)(cp - 0x100);
    if (cp >= 0x121 && cp <= 0x142) return (int)(0x7F + cp - 0x121);
    if (cp == 0x143) return 0xAD;
    return -1;
}

static int append(char **out, size_t *len, size_t *cap, const void *p, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 64;
        while (c < *len + n + 1) c *= 2;
        char *q = realloc(*out, c);
        if (!q) return -1;
        *out = q;
        *cap = c;
    }
    memcpy(*out + *len, p, n);
    *len += n;
    (*out)[*len] = 0;
    return 0;
}

int kiln_bpe_decode(const char *s, size_t n, char **out, size_t *out_len, size_t *cap) {
    for (size_t i = 0; i < n;) {
        const unsigned char *u = (const unsigned char *)s + i;
        size_t l = kiln_utf8_len(u[0]);
        if (l > n - i) l = n - i;
        uint32_t cp = l == 1 ? u[0] : l == 2 ? ((u[0] & 0x1Fu) << 6) | (u[1] & 0x3Fu) : 0x110000;
        int b = cp_to_byte(cp);
        if (b >= 0) {
            unsigned char c = (unsigned char)b;
            if (append(out, out_len, cap, &c, 1) < 0) return -1;
        } else {
            /* what llama.cpp's llama_decode_text writes for such a character */
            char hex[3 * 4 + 16] = "[UNK_BYTE_0x";
            for (size_t j = 0; j < l; j++) snprintf(hex + strlen(hex), 3, "%02x", u[j]);
            if (append(out, out_len, cap, hex, strlen(hex)) < 0 || append(out, out_len, cap, s, n) < 0 ||
                append(out, out_len, cap, "]", 1) < 0)
                return -1;
        }
        i += l;
    }
    return 0;
}

typedef struct bpe {
    const kiln_tokenizer *t;
    const char *buf;      /* the current word, GPT-2 encoded */
    kiln_symbol *sym;
    kiln_bigram_heap heap;
    char *key;            /* "left right" lookup buffer */
    size_t key_cap;
} bpe;

/* Queues the merge of symbols left and right if the pair has a rank. */
static int try_bigram(bpe *b, int left, int right) {
    if (left < 0 || right < 0) return 0;
    const kiln_symbol *l = &b->sym[left], *r = &b->sym[right];
    size_t n = l->n + 1 + r->n;
    if (n > b->key_cap) {
        char *k = realloc(b->key, n * 2);
        if (!k) return -1;
        b->key = k;
        b->key_cap = n * 2;
    }
    memcpy(b->key, b->buf + l->start, l->n);
    b->key[l->n] = ' ';
    memcpy(b->key + l->n + 1, b->buf + r->start, r->n);
    uint64_t rank;
    if (!kiln_strmap_get(&b->t->merges, b->key, n, &rank)) return 0;
    return kiln_heap_push(&b->heap, (kiln_bigram){.key = (double)rank, .left = left, .right = right,
                                                  .size = l->n + r->n});
}

static bool only_newlines(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != '\n') return false;
    return true;
}

/* The token of byte `c` when a symbol is spelled byte by byte. */
static int32_t byte_token(const kiln_tokenizer *t, const char *c) {
    if (!t->spm_bpe) return kiln_tok_find(t, c, 1);
    static const char HEX[] = "0123456789ABCDEF";
    unsigned char u = (unsigned char)*c;
    char name[6] = {'<', '0', 'x', HEX[u >> 4], HEX[u & 15], '>'};
    return kiln_tok_find(t, name, sizeof name);
}

/* Merges one encoded word of `n` bytes and appends its ids. */
static int merge_word(bpe *b, size_t n, kiln_ids *out) {
    const kiln_tokenizer *t = b->t;
    if (t->ignore_merges || (t->spm_bpe && only_newlines(b->buf, n))) {
        int32_t id = kiln_tok_find(t, b->buf, n);
        if (id != KILN_TOKEN_NULL) return kiln_ids_push(out, id);
    }
    int ns = 0;
    for (size_t off = 0; off < n; ns++) {
        size_t l = kiln_utf8_len((unsigned char)b->buf[off]);
        if (l > n - off) l = n - off;
        b->sym[ns] = (kiln_symbol){.prev = ns - 1, .next = off + l == n ? -1 : ns + 1, .start = off, .n = l};
        off += l;
    }
    b->heap.n = 0;
    for (int i = 1; i < ns; i++)
        if (try_bigram(b, i - 1, i) < 0) return -1;
    while (b->heap.n) {
        kiln_bigram g = kiln_heap_pop(&b->heap);
        kiln_symbol *l = &b->sym[g.left], *r = &b->sym[g.right];
        if (!l->n || !r->n || l->n + r->n != g.size) continue; /* stale pair */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) b->sym[r->next].prev = g.left;
        if (try_bigram(b, l->prev, g.left) < 0 || try_bigram(b, g.left, l->next) < 0) return -1;
    }
    for (int i = ns ? 0 : -1; i != -1; i = b->sym[i].next) {
        const char *p = b->buf + b->sym[i].start;
        int32_t id = kiln_tok_find(t, p, b->sym[i].n);
        if (id != KILN_TOKEN_NULL) {
            if (kiln_ids_push(out, id) < 0) return -1;
            continue;
        }
        for (size_t j = 0; j < b->sym[i].n; j++) {
            id = byte_token(t, p + j);
            if (id != KILN_TOKEN_NULL && kiln_ids_push(out, id) < 0) return -1;
        }
    }
    return 0;
}

/* A copy of text[0..len) with every space written as U+2581 (llama.cpp's
 * llama_escape_whitespace), or NULL when out of memory. */
static char *escape_spaces(const char *text, size_t len, size_t *out_len) {
    size_t spaces = 0;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    char *e = malloc(len + 2 * spaces + 1), *o = e;
    if (!e) return NULL;
    for (size_t i = 0; i < len; i++) {
        if (text[i] != ' ') {
            *o++ = text[i];
            continue;
        }
        memcpy(o, "\xe2\x96\x81", 3);
        o += 3;
    }
    *out_len = (size_t)(o - e);
    return e;
}

int kiln_bpe_tokenize(const kiln_tokenizer *t, const char *text, size_t len, kiln_ids *out, kiln_err *err) {
    kiln_words w = {0};
    bpe b = {.t = t};
    char *enc = NULL, *escaped = NULL;
    int rc = -1;
    if (t->spm_bpe) {
        if (!(escaped = escape_spaces(text, len, &len))) {
            rc = kiln_fail(err, NULL, NULL, -1, "out of memory");
            goto done;
        }
        text = escaped;
    }
    if (kiln_pretok_split(t->pretok, text, len, &w, err) < 0) goto done;
    size_t longest = 0;
    for (size_t i = 0, start = 0; i < w.n; start = w.end[i++])
        if (w.end[i] - start > longest) longest = w.end[i] - start;
    /* every byte is written as at most 2 bytes, and becomes at most 1 symbol */
    if (!(enc = malloc(2 * longest + 1)) || !(b.sym = malloc((2 * longest + 1) * sizeof *b.sym))) {
        rc = kiln_fail(err, NULL, NULL, -1, "out of memory");
        goto done;
    }
    b.buf = enc;
    for (size_t i = 0, start = 0; i < w.n; start = w.end[i++]) {
        size_t n = 0;
        for (size_t j = start; j < w.end[i] && t->spm_bpe; j++) enc[n++] = w.buf[j];
        for (size_t j = start; j < w.end[i] && !t->spm_bpe; j++) {
            uint32_t cp = byte_to_cp((unsigned char)w.buf[j]);
            if (cp < 0x80) {
                enc[n++] = (char)cp;
            } else {
                enc[n++] = (char)(0xC0 | (cp >> 6));
                enc[n++] = (char)(0x80 | (cp & 0x3F));
            }
        }
        if (n && merge_word(&b, n, out) < 0) {
            rc = kiln_fail(err, NULL, NULL, -1, "out of memory");
            goto done;
        }
    }
    rc = 0;
done:
    kiln_words_free(&w);
    free(escaped);
    free(enc);
    free(b.sym);
    free(b.heap.v);
    free(b.key);
    return rc;
}
