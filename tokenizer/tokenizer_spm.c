/* tokenizer/tokenizer_spm.c - SentencePiece-style tokenization of one run of
 * plain text (`tokenizer.ggml.model = llama`), as llama.cpp's
 * llm_tokenizer_spm_session does it.
 *
 * Spaces become U+2581 ("▁"), the text is cut into UTF-8 characters, and
 * adjacent symbols are merged greedily: always the pair whose concatenation
 * is the vocabulary token with the highest score, leftmost on ties. What
 * is left and is not a token is spelled with byte tokens <0xXX>. Unlike
 * BPE there is no pre-tokenizer: the whole run is one merge problem, kept
 * O(n log n) by the merge queue. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

#define SPACE_MARK "\xE2\x96\x81" /* U+2581 */

typedef struct spm {
    const kiln_tokenizer *t;
    const char *buf;
    kiln_symbol *sym;
    kiln_bigram_heap heap;
} spm;

/* Queues the merge of symbols left and right if their text is a token. */
static int try_bigram(spm *s, int left, int right) {
    if (left < 0 || right < 0) return 0;
    size_t n = s->sym[left].n + s->sym[right].n;
    int32_t id = kiln_tok_find(s->t, s->buf + s->sym[left].start, n);
    if (id == KILN_TOKEN_NULL) return 0;
    kiln_bigram b = {.key = -(double)s->t->score[id], .left = left, .right = right, .size = n};
    return kiln_heap_push(&s->heap, b);
}

/* llama.cpp's byte_to_token for SPM: <0xXX>, else the byte itself. */
static int push_byte(const kiln_tokenizer *t, unsigned char byte, kiln_ids *out, kiln_err *err) {
    char hex[8];
    snprintf(hex, sizeof hex, "<0x%02X>", byte);
    int32_t id = kiln_tok_find(t, hex, 6);
    if (id == KILN_TOKEN_NULL) id = kiln_tok_find(t, (const char *)&byte, 1);
    if (id == KILN_TOKEN_NULL)
        return kiln_fail(err, t->name, "tokenizer.ggml.tokens", -1,
                         "no token for byte 0x%02X (the vocabulary has no byte fallback)", byte);
    return kiln_ids_push(out, id) < 0 ? kiln_fail(err, NULL, NULL, -1, "out of memory") : 0;
}

int kiln_spm_tokenize(const kiln_tokenizer *t, const char *text, size_t len, bool space_prefix,
                      kiln_ids *out, kiln_err *err) {
    size_t spaces = 0;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    size_t blen = len + 2 * spaces + 3 * space_prefix; /* each space grows from 1 to 3 bytes */
    char *buf = malloc(blen + 1);
    spm s = {.t = t, .buf = buf, .sym = malloc((blen + 1) * sizeof *s.sym)};
    int rc = -1;
    if (!buf || !s.sym) goto oom;

    size_t k = 0;
    if (space_prefix) {
        memcpy(buf, SPACE_MARK, 3);
        k = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + k, SPACE_MARK, 3);
            k += 3;
        } else {
            buf[k++] = text[i];
        }
    }

    int ns = 0;
    for (size_t off = 0; off < blen; ns++) {
        size_t l = kiln_utf8_len((unsigned char)buf[off]);
        if (l > blen - off) l = blen - off;
        s.sym[ns] = (kiln_symbol){.prev = ns - 1, .next = off + l == blen ? -1 : ns + 1, .start = off, .n = l};
        off += l;
    }
    for (int i = 1; i < ns; i++)
        if (try_bigram(&s, i - 1, i) < 0) goto oom;

    while (s.heap.n) {
        kiln_bigram b = kiln_heap_pop(&s.heap);
        kiln_symbol *l = &s.sym[b.left], *r = &s.sym[b.right];
        /* a pair whose symbols changed since it was queued is stale */
        if (!l->n || !r->n || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s.sym[r->next].prev = b.left;
        if (try_bigram(&s, l->prev, b.left) < 0 || try_bigram(&s, b.left, l->next) < 0) goto oom;
    }

    for (int i = ns ? 0 : -1; i != -1; i = s.sym[i].next) {
        const char *p = buf + s.sym[i].start;
        int32_t id = kiln_tok_find(t, p, s.sym[i].n);
        if (id != KILN_TOKEN_NULL) {
            if (kiln_ids_push(out, id) < 0) goto oom;
            continue;
        }
        for (size_t j = 0; j < s.sym[i].n; j++)
            if (push_byte(t, (unsigned char)p[j], out, err) < 0) goto done;
    }
    rc = 0;
    goto done;
oom:
    rc = kiln_fail(err, NULL, NULL, -1, "out of memory");
done:
    free(buf);
    free(s.sym);
    free(s.heap.v);
    return rc;
}
