/* convert/spm.c - a bounded protobuf reader for SentencePiece models (see
 * spm.h). */
#include "spm.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PIECES (1u << 24)

typedef struct rd {
    const uint8_t *base, *p, *end;
    const char *name;
    kiln_err *err;
} rd;

static int fail(rd *r, const char *field, const char *what) {
    return kiln_fail(r->err, r->name, field, (int64_t)(r->p - r->base), "%s", what);
}

static int varint(rd *r, uint64_t *out, const char *field) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end) return fail(r, field, "truncated varint");
        uint8_t b = *r->p++;
        if (shift == 63 && b > 1) return fail(r, field, "varint overflows 64 bits");
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return fail(r, field, "varint longer than 10 bytes");
}

/* Reads a length-delimited payload: *sub covers it, r moves past it. */
static int bytes(rd *r, rd *sub, const char *field) {
    uint64_t n;
    if (varint(r, &n, field) < 0) return -1;
    if (n > (uint64_t)(r->end - r->p)) return fail(r, field, "length runs past the end of its message");
    *sub = (rd){r->base, r->p, r->p + n, r->name, r->err};
    r->p += n;
    return 0;
}

/* Skips a field of wire type `wt`. */
static int skip(rd *r, uint32_t wt, const char *field) {
    uint64_t v;
    rd sub;
    switch (wt) {
    case 0: return varint(r, &v, field);
    case 1:
        if (r->end - r->p < 8) return fail(r, field, "truncated 64-bit field");
        r->p += 8;
        return 0;
    case 2: return bytes(r, &sub, field);
    case 5:
        if (r->end - r->p < 4) return fail(r, field, "truncated 32-bit field");
        r->p += 4;
        return 0;
    default: return fail(r, field, "unsupported wire type (groups are not allowed)");
    }
}

static int tag(rd *r, uint32_t *field_no, uint32_t *wt, const char *field) {
    uint64_t t;
    if (varint(r, &t, field) < 0) return -1;
    if ((t >> 3) == 0 || (t >> 3) > 0x1fffffff) return fail(r, field, "invalid field number");
    *field_no = (uint32_t)(t >> 3);
    *wt = (uint32_t)(t & 7);
    return 0;
}

static int piece(rd *r, cv_spm_piece *pc) {
    *pc = (cv_spm_piece){.text = "", .len = 0, .score = 0.0f, .type = CV_SPM_NORMAL};
    while (r->p < r->end) {
        uint32_t f = 0, wt = 0;
        if (tag(r, &f, &wt, "pieces") < 0) return -1;
        if (f == 1 && wt == 2) {
            rd s;
            if (bytes(r, &s, "pieces.piece") < 0) return -1;
            pc->text = (const char *)s.p;
            pc->len = (uint32_t)(s.end - s.p);
        } else if (f == 2 && wt == 5) {
            if (r->end - r->p < 4) return fail(r, "pieces.score", "truncated float");
            uint32_t u = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 | (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
            memcpy(&pc->score, &u, 4);
            r->p += 4;
        } else if (f == 3 && wt == 0) {
            uint64_t v;
            if (varint(r, &v, "pieces.type") < 0) return -1;
            if (v < CV_SPM_NORMAL || v > CV_SPM_BYTE) return fail(r, "pieces.type", "unknown piece type");
            pc->type = (int32_t)v;
        } else if (skip(r, wt, "pieces") < 0) {
            return -1;
        }
    }
    return 0;
}

int cv_spm_parse(const uint8_t *buf, size_t len, const char *name, cv_spm *out, kiln_err *err) {
    memset(out, 0, sizeof *out);
    rd r = {buf, buf, buf + len, name, err};
    uint32_t cap = 0;
    while (r.p < r.end) {
        uint32_t f = 0, wt = 0;
        if (tag(&r, &f, &wt, "ModelProto") < 0) goto bad;
        if (f != 1 || wt != 2) {
            if (skip(&r, wt, "ModelProto") < 0) goto bad;
            continue;
        }
        rd sub;
        if (bytes(&r, &sub, "pieces") < 0) goto bad;
        if (out->n == cap) {
            if (cap >= MAX_PIECES) {
                fail(&r, "pieces", "too many pieces");
                goto bad;
            }
            cap = cap ? cap * 2 : 1024;
            cv_spm_piece *np = realloc(out->pieces, cap * sizeof *np);
            if (!np) {
                kiln_fail(err, name, NULL, -1, "out of memory");
                goto bad;
            }
            out->pieces = np;
        }
        if (piece(&sub, &out->pieces[out->n]) < 0) goto bad;
        out->n++;
    }
    if (out->n == 0) {
        kiln_fail(err, name, "pieces", 0, "no pieces: not a SentencePiece model");
        goto bad;
    }
    return 0;
bad:
    cv_spm_free(out);
    return -1;
}

void cv_spm_free(cv_spm *s) {
    free(s->pieces);
    memset(s, 0, sizeof *s);
}
