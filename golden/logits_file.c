/* golden/logits_file.c - the KILNLOGT container (see logits_file.h):
 * header with its hash, then one checksummed zstd frame of byte-planed
 * records, written and read as streams. */
#include "logits_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#include "../core/fileio.h"
#include "../core/fp16.h"
#include "../core/xxh64.h"

#define FIXED_HEADER 28
#define MAX_META (16u << 20)
/* a record longer than this is corruption, not a prompt */
#define MAX_IDS (1u << 26)
#define ZSTD_LEVEL 3

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t hash_bytes(const void *a, uint64_t na, const void *b, uint64_t nb) {
    kiln_xxh64 h;
    kiln_xxh64_init(&h);
    kiln_xxh64_update(&h, a, na);
    kiln_xxh64_update(&h, b, nb);
    return kiln_xxh64_digest(&h);
}

/* Element i's byte b goes to plane b: out[b * n + i]. */
static void to_planes(const unsigned char *in, unsigned char *out, uint64_t n, int es) {
    for (uint64_t i = 0; i < n; i++)
        for (int b = 0; b < es; b++) out[(uint64_t)b * n + i] = in[i * es + b];
}

static void from_planes(const unsigned char *in, unsigned char *out, uint64_t n, int es) {
    for (uint64_t i = 0; i < n; i++)
        for (int b = 0; b < es; b++) out[i * es + b] = in[(uint64_t)b * n + i];
}

const char *kiln_lgf_kind(const kiln_lgf_header *h) {
    const char *k = h->meta ? json_string_value(json_object_get(h->meta, "kind")) : NULL;
    return k ? k : "";
}

void kiln_lgf_header_free(kiln_lgf_header *h) {
    if (!h) return;
    json_decref(h->meta);
    h->meta = NULL;
}

bool kiln_lgf_sniff(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char m[8];
    bool ok = fread(m, 1, 8, f) == 8 && !memcmp(m, KILN_LGF_MAGIC, 8);
    fclose(f);
    return ok;
}

/* ---- writer ---------------------------------------------------------- */

struct kiln_lgf_writer {
    kiln_outfile out;
    ZSTD_CCtx *cc;
    unsigned char *zbuf;
    size_t zcap;
    unsigned char *tmp; /* f16 rows and byte planes of one record */
    uint64_t tmp_cap;
    kiln_xxh64 frame_hash;
    uint32_t n_vocab, n_records, n_put;
    bool f16;
};

void kiln_lgf_abort(kiln_lgf_writer *w) {
    if (!w) return;
    kiln_out_discard(&w->out);
    ZSTD_freeCCtx(w->cc);
    free(w->zbuf);
    free(w->tmp);
    free(w);
}

/* Feeds bytes to the frame and writes whatever zstd has ready. */
static int zfeed(kiln_lgf_writer *w, const void *data, size_t n, ZSTD_EndDirective mode, kiln_err *err) {
    ZSTD_inBuffer in = {data, n, 0};
    for (;;) {
        ZSTD_outBuffer o = {w->zbuf, w->zcap, 0};
        size_t left = ZSTD_compressStream2(w->cc, &o, &in, mode);
        if (ZSTD_isError(left))
            return kiln_fail(err, w->out.path, NULL, -1, "zstd: %s", ZSTD_getErrorName(left));
        kiln_xxh64_update(&w->frame_hash, w->zbuf, o.pos);
        if (o.pos && kiln_out_write(&w->out, w->zbuf, o.pos, err)) return -1;
        if (mode == ZSTD_e_end ? left == 0 : in.pos == in.size) return 0;
    }
}

kiln_lgf_writer *kiln_lgf_create(const char *path, const kiln_lgf_header *h, bool force, kiln_err *err) {
    if (kiln_check_output(path, NULL, 0, force, err)) return NULL;
    char *meta = json_dumps(h->meta, JSON_COMPACT | JSON_SORT_KEYS);
    kiln_lgf_writer *w = calloc(1, sizeof *w);
    if (!meta || !w) {
        free(meta);
        free(w);
        kiln_fail(err, path, NULL, -1, "out of memory");
        return NULL;
    }
    w->out.fd = -1;
    w->n_vocab = h->n_vocab;
    w->n_records = h->n_records;
    w->f16 = h->f16;
    kiln_xxh64_init(&w->frame_hash);
    w->zcap = ZSTD_CStreamOutSize();
    w->zbuf = malloc(w->zcap);
    w->cc = ZSTD_createCCtx();
    if (!w->zbuf || !w->cc) {
        kiln_fail(err, path, NULL, -1, "out of memory");
        goto fail;
    }
    size_t r1 = ZSTD_CCtx_setParameter(w->cc, ZSTD_c_compressionLevel, ZSTD_LEVEL);
    size_t r2 = ZSTD_CCtx_setParameter(w->cc, ZSTD_c_checksumFlag, 1);
    if (ZSTD_isError(r1) || ZSTD_isError(r2)) {
        kiln_fail(err, path, NULL, -1, "zstd: cannot set parameters");
        goto fail;
    }
    if (kiln_out_open(&w->out, path, err)) goto fail;
    unsigned char fixed[FIXED_HEADER], hb[8];
    uint32_t meta_len = (uint32_t)strlen(meta);
    memcpy(fixed, KILN_LGF_MAGIC, 8);
    put32(fixed + 8, KILN_LGF_VERSION);
    put32(fixed + 12, h->f16 ? 1u : 0u);
    put32(fixed + 16, h->n_vocab);
    put32(fixed + 20, h->n_records);
    put32(fixed + 24, meta_len);
    uint64_t hv = hash_bytes(fixed, FIXED_HEADER, meta, meta_len);
    for (int i = 0; i < 8; i++) hb[i] = (unsigned char)(hv >> (8 * i));
    if (kiln_out_write(&w->out, fixed, FIXED_HEADER, err) || kiln_out_write(&w->out, meta, meta_len, err) ||
        kiln_out_write(&w->out, hb, 8, err))
        goto fail;
    free(meta);
    return w;
fail:
    free(meta);
    kiln_lgf_abort(w);
    return NULL;
}

int kiln_lgf_put(kiln_lgf_writer *w, const int32_t *ids, uint32_t n_ids, uint32_t row0, uint32_t n_rows,
                 const float *rows, kiln_err *err) {
    if (w->n_put >= w->n_records)
        return kiln_fail(err, w->out.path, NULL, -1, "more records than the %u announced", w->n_records);
    if ((uint64_t)row0 + n_rows > n_ids)
        return kiln_fail(err, w->out.path, NULL, -1, "record rows %u..%u exceed its %u ids", row0, row0 + n_rows,
                         n_ids);
    unsigned char rh[12];
    put32(rh, n_ids);
    put32(rh + 4, row0);
    put32(rh + 8, n_rows);
    uint64_t n = (uint64_t)n_rows * w->n_vocab;
    int es = w->f16 ? 2 : 4;
    uint64_t need = n * (uint64_t)es * (w->f16 ? 2 : 1);
    if (need > w->tmp_cap) {
        unsigned char *t = realloc(w->tmp, need);
        if (!t) return kiln_fail(err, w->out.path, NULL, -1, "out of memory");
        w->tmp = t;
        w->tmp_cap = need;
    }
    const unsigned char *src = (const unsigned char *)rows;
    unsigned char *planes = w->tmp;
    if (w->f16) {
        kiln_fp32_to_fp16_row(rows, (uint16_t *)(w->tmp + n * 2), (int64_t)n);
        src = w->tmp + n * 2;
    }
    to_planes(src, planes, n, es);
    if (zfeed(w, rh, sizeof rh, ZSTD_e_continue, err) || zfeed(w, ids, (size_t)n_ids * 4, ZSTD_e_continue, err) ||
        zfeed(w, planes, n * es, ZSTD_e_continue, err))
        return -1;
    w->n_put++;
    return 0;
}

int kiln_lgf_finish(kiln_lgf_writer *w, kiln_err *err) {
    int rc = 0;
    if (w->n_put != w->n_records)
        rc = kiln_fail(err, w->out.path, NULL, -1, "%u records written, %u announced", w->n_put, w->n_records);
    if (!rc) rc = zfeed(w, NULL, 0, ZSTD_e_end, err);
    if (!rc) {
        unsigned char tb[8];
        uint64_t hv = kiln_xxh64_digest(&w->frame_hash);
        for (int i = 0; i < 8; i++) tb[i] = (unsigned char)(hv >> (8 * i));
        rc = kiln_out_write(&w->out, tb, 8, err);
    }
    if (!rc) rc = kiln_out_commit(&w->out, err);
    if (rc) {
        kiln_lgf_abort(w);
        return -1;
    }
    kiln_out_free(&w->out);
    ZSTD_freeCCtx(w->cc);
    free(w->zbuf);
    free(w->tmp);
    free(w);
    return 0;
}

/* ---- reader ---------------------------------------------------------- */

struct kiln_lgf_reader {
    FILE *f;
    char *path;
    uint64_t size, data_start;
    ZSTD_DCtx *dc;
    unsigned char *ibuf;
    size_t icap;
    ZSTD_inBuffer in;
    uint64_t in_file_off;  /* file offset of ibuf[0] */
    size_t last;           /* last ZSTD_decompressStream result: 0 = frame complete */
    kiln_xxh64 frame_hash; /* of the compressed bytes consumed */
    uint32_t n_vocab, n_records, n_read;
    bool f16, done;
    int32_t *ids;
    uint64_t ids_cap;
    unsigned char *raw;    /* planes of one record */
    float *rows;
    uint64_t rows_cap;     /* elements */
};

void kiln_lgf_close(kiln_lgf_reader *r) {
    if (!r) return;
    if (r->f) fclose(r->f);
    ZSTD_freeDCtx(r->dc);
    free(r->path);
    free(r->ibuf);
    free(r->ids);
    free(r->raw);
    free(r->rows);
    free(r);
}

static int64_t zoff(const kiln_lgf_reader *r) { return (int64_t)(r->in_file_off + r->in.pos); }

/* Loads the next piece of the file into ibuf; 0 at end of file. */
static size_t refill(kiln_lgf_reader *r) {
    r->in_file_off += r->in.size;
    size_t got = fread(r->ibuf, 1, r->icap, r->f);
    r->in = (ZSTD_inBuffer){r->ibuf, got, 0};
    return got;
}

/* One decompression step, hashing the compressed bytes it consumed. */
static int zstep(kiln_lgf_reader *r, ZSTD_outBuffer *o, const char *field, kiln_err *err) {
    if (r->in.pos == r->in.size && refill(r) == 0) {
        if (ferror(r->f)) return kiln_fail(err, r->path, field, zoff(r), "read error: %s", strerror(errno));
        return kiln_fail(err, r->path, field, zoff(r), "file truncated (compressed data ends early)");
    }
    size_t before = r->in.pos;
    r->last = ZSTD_decompressStream(r->dc, o, &r->in);
    if (ZSTD_isError(r->last))
        return kiln_fail(err, r->path, field, zoff(r), "corrupt compressed data: %s", ZSTD_getErrorName(r->last));
    kiln_xxh64_update(&r->frame_hash, (const unsigned char *)r->in.src + before, r->in.pos - before);
    return 0;
}

/* Decompresses exactly n bytes into dst. Running out of file before that
 * is truncation; the frame ending before that, missing records. */
static int zread(kiln_lgf_reader *r, void *dst, size_t n, const char *field, kiln_err *err) {
    ZSTD_outBuffer o = {dst, n, 0};
    while (o.pos < o.size) {
        if (zstep(r, &o, field, err)) return -1;
        if (r->last == 0 && o.pos < o.size)
            return kiln_fail(err, r->path, field, zoff(r), "data ends before the %u records announced", r->n_records);
    }
    return 0;
}

/* After the last record: the frame must end here (zstd verifying its
 * content checksum on the way), then come the 8 bytes of the frame's
 * hash, then nothing. */
static int check_end(kiln_lgf_reader *r, kiln_err *err) {
    unsigned char extra[64];
    while (r->last != 0) {
        ZSTD_outBuffer o = {extra, sizeof extra, 0};
        if (zstep(r, &o, "frame", err)) return -1;
        if (o.pos)
            return kiln_fail(err, r->path, "frame", zoff(r), "more data than the %u records announced", r->n_records);
    }
    unsigned char tb[8];
    int64_t at = zoff(r);
    for (int i = 0; i < 8; i++) {
        if (r->in.pos == r->in.size && refill(r) == 0)
            return kiln_fail(err, r->path, "frame_hash", at, "file truncated");
        tb[i] = ((const unsigned char *)r->in.src)[r->in.pos++];
    }
    uint64_t want = 0;
    for (int i = 0; i < 8; i++) want |= (uint64_t)tb[i] << (8 * i);
    if (want != kiln_xxh64_digest(&r->frame_hash))
        return kiln_fail(err, r->path, "frame_hash", at, "checksum mismatch (corrupt file)");
    if (r->in.pos < r->in.size || fgetc(r->f) != EOF)
        return kiln_fail(err, r->path, "end", zoff(r), "unexpected bytes after the data");
    return 0;
}

kiln_lgf_reader *kiln_lgf_open(const char *path, kiln_lgf_header *h, kiln_err *err) {
    memset(h, 0, sizeof *h);
    kiln_lgf_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        kiln_fail(err, path, NULL, -1, "out of memory");
        return NULL;
    }
    char *meta = NULL;
    r->f = fopen(path, "rb");
    if (!r->f) {
        kiln_fail(err, path, NULL, -1, "cannot open: %s", strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(fileno(r->f), &st) != 0) {
        kiln_fail(err, path, NULL, -1, "cannot stat: %s", strerror(errno));
        goto fail;
    }
    r->size = (uint64_t)st.st_size;
    unsigned char fixed[FIXED_HEADER], hb[8];
    size_t got = fread(fixed, 1, FIXED_HEADER, r->f);
    if (got < 8 || memcmp(fixed, KILN_LGF_MAGIC, 8)) {
        kiln_fail(err, path, "magic", 0, got < 8 ? "file truncated" : "not a kiln logits file");
        goto fail;
    }
    if (got < FIXED_HEADER) {
        kiln_fail(err, path, "header", (int64_t)got, "file truncated");
        goto fail;
    }
    if (get32(fixed + 8) != KILN_LGF_VERSION) {
        kiln_fail(err, path, "version", 8, "unsupported version %u", get32(fixed + 8));
        goto fail;
    }
    uint32_t flags = get32(fixed + 12), meta_len = get32(fixed + 24);
    if (meta_len > MAX_META || FIXED_HEADER + (uint64_t)meta_len + 8 > r->size) {
        kiln_fail(err, path, "meta_len", 24, "%u bytes of metadata do not fit in the file (truncated?)", meta_len);
        goto fail;
    }
    meta = malloc(meta_len + 1u);
    if (!meta) {
        kiln_fail(err, path, "meta", FIXED_HEADER, "out of memory");
        goto fail;
    }
    if (fread(meta, 1, meta_len, r->f) != meta_len || fread(hb, 1, 8, r->f) != 8) {
        kiln_fail(err, path, "meta", FIXED_HEADER, "read error");
        goto fail;
    }
    uint64_t want = 0;
    for (int i = 0; i < 8; i++) want |= (uint64_t)hb[i] << (8 * i);
    if (hash_bytes(fixed, FIXED_HEADER, meta, meta_len) != want) {
        kiln_fail(err, path, "header_hash", FIXED_HEADER + (int64_t)meta_len, "header checksum mismatch (corrupt file)");
        goto fail;
    }
    json_error_t je;
    h->meta = json_loadb(meta, meta_len, 0, &je);
    if (!h->meta || !json_is_object(h->meta) || !json_is_string(json_object_get(h->meta, "kind"))) {
        kiln_fail(err, path, "meta", FIXED_HEADER, "metadata is not a JSON object with a \"kind\"");
        goto fail;
    }
    if ((flags & ~1u) || get32(fixed + 16) == 0) {
        kiln_fail(err, path, flags & ~1u ? "flags" : "n_vocab", flags & ~1u ? 12 : 16, "invalid value");
        goto fail;
    }
    h->f16 = r->f16 = flags & 1u;
    h->n_vocab = r->n_vocab = get32(fixed + 16);
    h->n_records = r->n_records = get32(fixed + 20);
    r->data_start = r->in_file_off = FIXED_HEADER + (uint64_t)meta_len + 8;
    r->icap = ZSTD_DStreamInSize();
    r->ibuf = malloc(r->icap);
    r->dc = ZSTD_createDCtx();
    r->last = 1;
    kiln_xxh64_init(&r->frame_hash);
    if (!r->ibuf || !r->dc) {
        kiln_fail(err, path, NULL, -1, "out of memory");
        goto fail;
    }
    free(meta);
    return r;
fail:
    free(meta);
    kiln_lgf_header_free(h);
    kiln_lgf_close(r);
    return NULL;
}

int kiln_lgf_next(kiln_lgf_reader *r, kiln_lgf_record *rec, kiln_err *err) {
    if (r->done) return 0;
    if (r->n_read == r->n_records) {
        if (check_end(r, err)) return -1;
        r->done = true;
        return 0;
    }
    char field[48];
    snprintf(field, sizeof field, "record[%u]", r->n_read);
    unsigned char rh[12];
    int64_t at = zoff(r);
    if (zread(r, rh, sizeof rh, field, err)) return -1;
    uint32_t n_ids = get32(rh), row0 = get32(rh + 4), n_rows = get32(rh + 8);
    if (n_ids > MAX_IDS || (uint64_t)row0 + n_rows > n_ids)
        return kiln_fail(err, r->path, field, at, "invalid record header (%u ids, rows %u+%u)", n_ids, row0, n_rows);
    uint64_t n = (uint64_t)n_rows * r->n_vocab;
    int es = r->f16 ? 2 : 4;
    if (n_ids > r->ids_cap) {
        int32_t *p = realloc(r->ids, (size_t)n_ids * 4);
        if (!p) return kiln_fail(err, r->path, field, at, "out of memory");
        r->ids = p;
        r->ids_cap = n_ids;
    }
    if (n > r->rows_cap) {
        float *p = realloc(r->rows, n * 4);
        unsigned char *q = realloc(r->raw, n * 4); /* f16: planes, then the flat halves */
        if (p) r->rows = p;
        if (q) r->raw = q;
        if (!p || !q) return kiln_fail(err, r->path, field, at, "out of memory");
        r->rows_cap = n;
    }
    if (zread(r, r->ids, (size_t)n_ids * 4, field, err)) return -1;
    for (uint32_t i = 0; i < n_ids; i++)
        if (r->ids[i] < 0 || (uint32_t)r->ids[i] >= r->n_vocab)
            return kiln_fail(err, r->path, field, at, "token id %d is outside the vocabulary (%u)", r->ids[i],
                             r->n_vocab);
    if (zread(r, r->raw, n * es, field, err)) return -1;
    unsigned char *flat = r->raw + n * es;
    from_planes(r->raw, r->f16 ? flat : (unsigned char *)r->rows, n, es);
    if (r->f16) kiln_fp16_to_fp32_row((const uint16_t *)flat, r->rows, (int64_t)n);
    *rec = (kiln_lgf_record){.n_ids = n_ids, .row0 = row0, .n_rows = n_rows, .ids = r->ids, .rows = r->rows};
    r->n_read++;
    return 1;
}
