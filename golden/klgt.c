/* golden/klgt.c - the KLGT reader and writer (see klgt.h). The reader
 * parses straight from the file with one buffered pass, so a truncated or
 * padded file is reported with the offset of the field that does not fit. */
#include "klgt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/fileio.h"

int kiln_logit_set_add(kiln_logit_set *s, uint32_t n_tokens, int32_t *ids, float *logits, kiln_err *err) {
    kiln_logit_seq *seqs = realloc(s->seqs, (s->n_seqs + 1) * sizeof *seqs);
    if (!seqs) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    s->seqs = seqs;
    s->seqs[s->n_seqs++] = (kiln_logit_seq){.n_tokens = n_tokens, .ids = ids, .logits = logits};
    return 0;
}

void kiln_logit_set_free(kiln_logit_set *s) {
    if (!s) return;
    for (uint32_t i = 0; i < s->n_seqs; i++) {
        free(s->seqs[i].ids);
        free(s->seqs[i].logits);
    }
    free(s->seqs);
    memset(s, 0, sizeof *s);
}

uint64_t kiln_logit_set_positions(const kiln_logit_set *s) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < s->n_seqs; i++) n += s->seqs[i].n_tokens;
    return n;
}

/* fread of exactly n bytes at the reader's offset, or a "truncated" error
 * naming the field. */
typedef struct rd {
    FILE *f;
    const char *path;
    uint64_t off, size;
} rd;

static int rd_bytes(rd *r, void *dst, uint64_t n, const char *field, kiln_err *err) {
    if (n > r->size - r->off)
        return kiln_fail(err, r->path, field, (int64_t)r->off,
                         "file truncated (needs %llu bytes, %llu left)", (unsigned long long)n,
                         (unsigned long long)(r->size - r->off));
    if (n && fread(dst, 1, n, r->f) != n)
        return kiln_fail(err, r->path, field, (int64_t)r->off, "read error: %s", strerror(errno));
    r->off += n;
    return 0;
}

static int rd_u32(rd *r, uint32_t *v, const char *field, kiln_err *err) {
    unsigned char b[4];
    if (rd_bytes(r, b, 4, field, err)) return -1;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 0;
}

static int read_header(rd *r, uint32_t *n_vocab, uint32_t *n_prompts, kiln_err *err) {
    char magic[4];
    uint32_t version;
    if (rd_bytes(r, magic, 4, "magic", err)) return -1;
    if (memcmp(magic, KILN_KLGT_MAGIC, 4))
        return kiln_fail(err, r->path, "magic", 0, "not a KLGT logits file");
    if (rd_u32(r, &version, "version", err)) return -1;
    if (version != KILN_KLGT_VERSION)
        return kiln_fail(err, r->path, "version", 4, "unsupported KLGT version %u", version);
    if (rd_u32(r, n_vocab, "n_vocab", err) || rd_u32(r, n_prompts, "n_prompts", err)) return -1;
    if (*n_vocab == 0) return kiln_fail(err, r->path, "n_vocab", 8, "is 0");
    return 0;
}

/* One prompt record at the reader's offset. */
static int read_prompt(rd *r, uint32_t n_vocab, uint32_t index, kiln_logit_set *out, kiln_err *err) {
    char field[64];
    uint64_t at = r->off;
    uint32_t n;
    snprintf(field, sizeof field, "prompt[%u].n_tokens", index);
    if (rd_u32(r, &n, field, err)) return -1;
    /* the size check comes before any allocation, so a corrupt count
     * cannot ask for terabytes */
    uint64_t need = (uint64_t)n * 4 * (1 + (uint64_t)n_vocab);
    if (n == 0 || need > r->size - r->off)
        return kiln_fail(err, r->path, field, (int64_t)at,
                         n ? "%u tokens need %llu bytes, only %llu left (file truncated?)" : "is %u",
                         n, (unsigned long long)need, (unsigned long long)(r->size - r->off));
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    float *logits = malloc((size_t)n * n_vocab * sizeof *logits);
    if (!ids || !logits) goto oom;
    snprintf(field, sizeof field, "prompt[%u].ids", index);
    uint64_t ids_at = r->off;
    if (rd_bytes(r, ids, (uint64_t)n * 4, field, err)) goto fail;
    for (uint32_t t = 0; t < n; t++)
        if (ids[t] < 0 || (uint32_t)ids[t] >= n_vocab) {
            kiln_fail(err, r->path, field, (int64_t)(ids_at + 4 * t), "token id %d is outside the vocabulary (%u)",
                      ids[t], n_vocab);
            goto fail;
        }
    snprintf(field, sizeof field, "prompt[%u].logits", index);
    if (rd_bytes(r, logits, (uint64_t)n * n_vocab * 4, field, err)) goto fail;
    if (kiln_logit_set_add(out, n, ids, logits, err) == 0) return 0;
    goto fail;
oom:
    kiln_fail(err, r->path, field, (int64_t)at, "out of memory");
fail:
    free(ids);
    free(logits);
    return -1;
}

int kiln_klgt_read(const char *path, kiln_logit_set *out, kiln_err *err) {
    memset(out, 0, sizeof *out);
    rd r = {.path = path};
    r.f = fopen(path, "rb");
    if (!r.f) return kiln_fail(err, path, NULL, -1, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fileno(r.f), &st) != 0) {
        fclose(r.f);
        return kiln_fail(err, path, NULL, -1, "cannot stat: %s", strerror(errno));
    }
    r.size = (uint64_t)st.st_size;
    uint32_t n_prompts = 0;
    int rc = read_header(&r, &out->n_vocab, &n_prompts, err);
    for (uint32_t i = 0; rc == 0 && i < n_prompts; i++) rc = read_prompt(&r, out->n_vocab, i, out, err);
    if (rc == 0 && r.off != r.size)
        rc = kiln_fail(err, path, "end", (int64_t)r.off, "%llu unexpected bytes after prompt %u",
                       (unsigned long long)(r.size - r.off), n_prompts);
    fclose(r.f);
    if (rc) kiln_logit_set_free(out);
    return rc;
}

static int put_u32(kiln_outfile *o, uint32_t v, kiln_err *err) {
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    return kiln_out_write(o, b, 4, err);
}

int kiln_klgt_write(const char *path, const kiln_logit_set *s, bool force, kiln_err *err) {
    if (kiln_check_output(path, NULL, 0, force, err)) return -1;
    kiln_outfile o;
    if (kiln_out_open(&o, path, err)) return -1;
    int rc = kiln_out_write(&o, KILN_KLGT_MAGIC, 4, err) || put_u32(&o, KILN_KLGT_VERSION, err) ||
             put_u32(&o, s->n_vocab, err) || put_u32(&o, s->n_seqs, err);
    /* ids and logits are written as they lie in memory: kiln only runs on
     * little-endian hosts, as ggml does */
    for (uint32_t i = 0; !rc && i < s->n_seqs; i++) {
        const kiln_logit_seq *q = &s->seqs[i];
        rc = put_u32(&o, q->n_tokens, err) || kiln_out_write(&o, q->ids, (uint64_t)q->n_tokens * 4, err) ||
             kiln_out_write(&o, q->logits, (uint64_t)q->n_tokens * s->n_vocab * 4, err);
    }
    if (!rc) rc = kiln_out_close(&o, err) || kiln_out_commit(&o, err);
    if (rc) {
        kiln_out_discard(&o);
        return -1;
    }
    kiln_out_free(&o);
    return 0;
}
