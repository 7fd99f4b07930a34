/* core/jsonw.c - see jsonw.h. Strings are escaped per RFC 8259; bytes
 * >= 0x80 pass through (GGUF strings are UTF-8). */
#include "jsonw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void flush(kiln_jsonw *w) {
    fwrite(w->buf, 1, w->len, w->out);
    w->len = 0;
}

static void put(kiln_jsonw *w, const char *s, size_t n) {
    if (w->len + n > sizeof w->buf) {
        flush(w);
        if (n > sizeof w->buf) {
            fwrite(s, 1, n, w->out);
            return;
        }
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

static void putc_(kiln_jsonw *w, char c) {
    if (w->len == sizeof w->buf) flush(w);
    w->buf[w->len++] = c;
}

static void puts_(kiln_jsonw *w, const char *s) { put(w, s, strlen(s)); }

void kiln_jw_init(kiln_jsonw *w, FILE *out, bool pretty) {
    w->len = 0;
    w->out = out;
    w->depth = 0;
    w->pretty = pretty;
    w->first[0] = true;
    w->after_key = false;
}

static void indent(kiln_jsonw *w) {
    static const char spaces[2 * KILN_JSONW_MAX_DEPTH + 1] =
        "                                                                ";
    if (!w->pretty) return;
    putc_(w, '\n');
    put(w, spaces, (size_t)w->depth * 2);
}

/* Called before any value or key: writes the separating comma/newline. */
static void before(kiln_jsonw *w) {
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->depth == 0) return;
    if (!w->first[w->depth]) putc_(w, ',');
    w->first[w->depth] = false;
    indent(w);
}

static void open(kiln_jsonw *w, char c) {
    before(w);
    putc_(w, c);
    if (w->depth + 1 < KILN_JSONW_MAX_DEPTH) w->depth++;
    w->first[w->depth] = true;
}

static void close_(kiln_jsonw *w, char c) {
    bool empty = w->first[w->depth];
    if (w->depth > 0) w->depth--;
    if (!empty) indent(w);
    putc_(w, c);
}

void kiln_jw_obj(kiln_jsonw *w) { open(w, '{'); }
void kiln_jw_arr(kiln_jsonw *w) { open(w, '['); }
void kiln_jw_end_obj(kiln_jsonw *w) { close_(w, '}'); }
void kiln_jw_end_arr(kiln_jsonw *w) { close_(w, ']'); }

static void put_string(kiln_jsonw *w, const char *s, uint64_t len) {
    putc_(w, '"');
    uint64_t start = 0;
    for (uint64_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        put(w, s + start, i - start);
        start = i + 1;
        char esc[8];
        switch (c) {
        case '"': puts_(w, "\\\""); break;
        case '\\': puts_(w, "\\\\"); break;
        case '\n': puts_(w, "\\n"); break;
        case '\r': puts_(w, "\\r"); break;
        case '\t': puts_(w, "\\t"); break;
        case '\b': puts_(w, "\\b"); break;
        case '\f': puts_(w, "\\f"); break;
        default: snprintf(esc, sizeof esc, "\\u%04x", c); puts_(w, esc); break;
        }
    }
    put(w, s + start, len - start);
    putc_(w, '"');
}

static void put_u64(kiln_jsonw *w, uint64_t v) {
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) putc_(w, tmp[--n]);
}

void kiln_jw_key(kiln_jsonw *w, const char *key) {
    before(w);
    put_string(w, key, strlen(key));
    puts_(w, w->pretty ? ": " : ":");
    w->after_key = true;
}

void kiln_jw_strn(kiln_jsonw *w, const char *s, uint64_t len) {
    before(w);
    put_string(w, s, len);
}
void kiln_jw_str(kiln_jsonw *w, const char *s) { kiln_jw_strn(w, s, strlen(s)); }
void kiln_jw_int(kiln_jsonw *w, int64_t v) {
    before(w);
    if (v < 0) putc_(w, '-');
    put_u64(w, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
}
void kiln_jw_uint(kiln_jsonw *w, uint64_t v) { before(w); put_u64(w, v); }
void kiln_jw_bool(kiln_jsonw *w, bool v) { before(w); puts_(w, v ? "true" : "false"); }
void kiln_jw_null(kiln_jsonw *w) { before(w); puts_(w, "null"); }

/* Writes v in decimal when v is a multiple of 1/1024 in [1e-4, 1e6)
 * (bits per weight, sizes in GiB...): such a number has an exact decimal
 * expansion of at most 9 significant digits here, which is what the
 * general path below prints, without its snprintf + strtod round trip
 * (a third of `inspect --json`'s time on 100k tensors). Returns false for
 * any other v. */
static bool put_dyadic(kiln_jsonw *w, double v) {
    double a = fabs(v), scaled = a * 1024;
    if (!(a >= 1e-4 && a < 1e6) || scaled != floor(scaled)) return false;
    uint64_t whole = (uint64_t)a;
    /* frac/1024 = frac * 5^10 / 10^10: ten exact decimal digits */
    uint64_t frac = ((uint64_t)scaled & 1023) * 9765625u;
    char digits[11];
    int nd = 0;
    for (int i = 9; i >= 0; i--, frac /= 10) digits[i] = (char)('0' + frac % 10);
    for (nd = 10; nd > 0 && digits[nd - 1] == '0'; nd--) {}
    int int_digits = 0;
    for (uint64_t t = whole; t; t /= 10) int_digits++;
    int lead_zeros = 0; /* zeros after the point before the first digit */
    if (!whole) while (lead_zeros < nd && digits[lead_zeros] == '0') lead_zeros++;
    if (int_digits + nd - lead_zeros > 9) return false;
    if (v < 0) putc_(w, '-');
    put_u64(w, whole);
    putc_(w, '.');
    if (nd) put(w, digits, (size_t)nd);
    else putc_(w, '0');
    return true;
}

void kiln_jw_real(kiln_jsonw *w, double v) {
    before(w);
    if (!isfinite(v)) {
        puts_(w, "null");
        return;
    }
    if (put_dyadic(w, v)) return;
    /* shortest of 9..17 digits that reads back as the same double */
    char buf[40];
    for (int prec = 9; prec <= 17; prec += 2) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    puts_(w, buf);
    if (!strpbrk(buf, ".eEn")) puts_(w, ".0");
}

void kiln_jw_kv_str(kiln_jsonw *w, const char *key, const char *s) {
    kiln_jw_key(w, key);
    kiln_jw_str(w, s);
}

void kiln_jw_kv_int(kiln_jsonw *w, const char *key, int64_t v) {
    kiln_jw_key(w, key);
    kiln_jw_int(w, v);
}

void kiln_jw_kv_uint(kiln_jsonw *w, const char *key, uint64_t v) {
    kiln_jw_key(w, key);
    kiln_jw_uint(w, v);
}

void kiln_jw_kv_real(kiln_jsonw *w, const char *key, double v) {
    kiln_jw_key(w, key);
    kiln_jw_real(w, v);
}

void kiln_jw_finish(kiln_jsonw *w) {
    putc_(w, '\n');
    flush(w);
}
