/* core/jsonw.c - see jsonw.h. Strings are escaped per RFC 8259; bytes
 * >= 0x80 pass through (GGUF strings are UTF-8).
 *
 * Written for volume: `inspect --json` of 100,000 tensors is 20 MB and
 * two million calls. Each call asks room() once for the most bytes it can
 * write (the separator, the indentation and the value) and then stores
 * through a plain pointer, so the buffer bound is checked once per value,
 * not once per byte; the string escaper copies plain text 8 bytes at a
 * time and goes byte by byte only around a byte that needs escaping. */
#include "jsonw.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A separator: a comma, a newline and two spaces per level. */
#define SEP_MAX (2 + 2 * KILN_JSONW_MAX_DEPTH)
/* Strings are escaped in pieces of this many bytes: a piece's worst case,
 * every byte a \u00XX, fits the buffer with a separator and quotes. */
#define ESC_PIECE 4096
_Static_assert(SEP_MAX + 2 * (6 * ESC_PIECE + 4) <= sizeof(((kiln_jsonw *)0)->buf),
               "a key and a string value of one piece each must fit the buffer");

static void flush(kiln_jsonw *w) {
    fwrite(w->buf, 1, w->len, w->out);
    w->len = 0;
}

/* A pointer to at least n free bytes of the buffer (n <= its size);
 * commit() takes the bytes written up to the pointer it is given. */
static inline char *room(kiln_jsonw *w, size_t n) {
    if (w->len + n > sizeof w->buf) flush(w);
    return w->buf + w->len;
}

static inline void commit(kiln_jsonw *w, char *end) { w->len = (size_t)(end - w->buf); }

void kiln_jw_init(kiln_jsonw *w, FILE *out, bool pretty) {
    w->len = 0;
    w->out = out;
    w->depth = 0;
    w->pretty = pretty;
    w->first[0] = true;
    w->after_key = false;
}

/* A newline and the indentation of the current depth, when pretty. */
static inline char *indent(const kiln_jsonw *w, char *p) {
    static const char spaces[2 * KILN_JSONW_MAX_DEPTH] =
        "                                                                ";
    if (!w->pretty) return p;
    *p++ = '\n';
    memcpy(p, spaces, sizeof spaces); /* all of them: a fixed-size copy is one store */
    return p + (size_t)w->depth * 2;
}

/* Called before any value or key: makes room for the separator and n
 * more bytes, writes the separating comma/newline and returns where the
 * value goes. */
static inline char *before(kiln_jsonw *w, size_t n) {
    char *p = room(w, SEP_MAX + n);
    if (w->after_key) {
        w->after_key = false;
        return p;
    }
    if (w->depth == 0) return p;
    if (!w->first[w->depth]) *p++ = ',';
    w->first[w->depth] = false;
    return indent(w, p);
}

static void open(kiln_jsonw *w, char c) {
    char *p = before(w, 1);
    *p++ = c;
    commit(w, p);
    if (w->depth + 1 < KILN_JSONW_MAX_DEPTH) w->depth++;
    w->first[w->depth] = true;
}

static void close_(kiln_jsonw *w, char c) {
    bool empty = w->first[w->depth];
    if (w->depth > 0) w->depth--;
    char *p = room(w, SEP_MAX + 1);
    if (!empty) p = indent(w, p);
    *p++ = c;
    commit(w, p);
}

void kiln_jw_obj(kiln_jsonw *w) { open(w, '{'); }
void kiln_jw_arr(kiln_jsonw *w) { open(w, '['); }
void kiln_jw_end_obj(kiln_jsonw *w) { close_(w, '}'); }
void kiln_jw_end_arr(kiln_jsonw *w) { close_(w, ']'); }

/* True when any of the 8 bytes in x is a control character (< 0x20), a
 * double quote or a backslash. Each test is the exact "some byte is..."
 * bit trick: a borrow can only mark bytes above a byte that truly
 * matches, so the result is never wrong, only imprecise about where. */
static inline bool word_needs_escape(uint64_t x) {
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t below_space = (x - ones * 0x20) & ~x;
    uint64_t q = x ^ (ones * '"'), bs = x ^ (ones * '\\');
    uint64_t is_quote = (q - ones) & ~q, is_backslash = (bs - ones) & ~bs;
    return ((below_space | is_quote | is_backslash) & highs) != 0;
}

/* Writes s[0, n) escaped at p and returns the end: at most 6 * n bytes. */
static char *escape(char *p, const unsigned char *s, size_t n) {
    static const char HEX[] = "0123456789abcdef";
    if (n >= 4 && n < 8) {
        /* a short key or type name: two overlapping 4-byte loads */
        uint32_t head, tail;
        memcpy(&head, s, 4);
        memcpy(&tail, s + n - 4, 4);
        if (!word_needs_escape(head | (uint64_t)tail << 32)) {
            memcpy(p, &head, 4);
            memcpy(p + n - 4, &tail, 4);
            return p + n;
        }
    }
    size_t i = 0;
    while (i < n) {
        uint64_t x;
        if (n - i >= 8) {
            memcpy(&x, s + i, 8);
            if (!word_needs_escape(x)) {
                memcpy(p, &x, 8);
                p += 8;
                i += 8;
                continue;
            }
        } else if (n >= 8) {
            /* The last 1..7 bytes: when the 8 bytes ending the string are
             * all plain, the ones before i were copied as they are, so the
             * word can be stored over them. */
            memcpy(&x, s + n - 8, 8);
            if (!word_needs_escape(x)) {
                memcpy(p - (8 - (n - i)), &x, 8);
                return p + (n - i);
            }
        }
        unsigned char c = s[i++];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *p++ = (char)c;
            continue;
        }
        *p++ = '\\';
        switch (c) {
        case '"': *p++ = '"'; break;
        case '\\': *p++ = '\\'; break;
        case '\n': *p++ = 'n'; break;
        case '\r': *p++ = 'r'; break;
        case '\t': *p++ = 't'; break;
        case '\b': *p++ = 'b'; break;
        case '\f': *p++ = 'f'; break;
        default:
            memcpy(p, "u00", 3);
            p[3] = HEX[c >> 4];
            p[4] = HEX[c & 15];
            p += 5;
            break;
        }
    }
    return p;
}

/* Writes the separator and the quoted, escaped string; a key also gets
 * its colon (and a space when pretty). */
static void put_string(kiln_jsonw *w, const char *s, uint64_t len, bool is_key) {
    size_t piece = len < ESC_PIECE ? (size_t)len : ESC_PIECE;
    char *p = before(w, 6 * piece + 4);
    *p++ = '"';
    for (;;) {
        p = escape(p, (const unsigned char *)s, piece);
        s += piece;
        len -= piece;
        if (!len) break;
        commit(w, p);
        piece = len < ESC_PIECE ? (size_t)len : ESC_PIECE;
        p = room(w, 6 * piece + 4);
    }
    *p++ = '"';
    if (is_key) {
        *p++ = ':';
        if (w->pretty) *p++ = ' ';
    }
    commit(w, p);
}

static const uint64_t POW10[20] = {
    1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull, 100000000ull,
    1000000000ull, 10000000000ull, 100000000000ull, 1000000000000ull, 10000000000000ull,
    100000000000000ull, 1000000000000000ull, 10000000000000000ull, 100000000000000000ull,
    1000000000000000000ull, 10000000000000000000ull};

/* Decimal digits of v (1 for 0): t = floor(bits * log10(2)) (1233/4096
 * is just above log10(2)) is the digit count of 2^bits less one, and v,
 * below 2^bits, has t or t + 1 digits. */
static inline int digits10(uint64_t v) {
    v |= 1; /* the same digit count, and 0 counts as 1 */
    int bits = 64 - __builtin_clzll(v);
    int t = bits * 1233 >> 12;
    return t + (v >= POW10[t]);
}

/* Writes the last n decimal digits of v at p (zero-padded), two at a
 * time from the end; returns p + n. */
static char *put_digits(char *p, uint64_t v, int n) {
    static const char PAIRS[] = "00010203040506070809101112131415161718192021222324"
                                "25262728293031323334353637383940414243444546474849"
                                "50515253545556575859606162636465666768697071727374"
                                "75767778798081828384858687888990919293949596979899";
    char *end = p + n, *q = end;
    for (; n >= 2; n -= 2, v /= 100) {
        q -= 2;
        memcpy(q, PAIRS + 2 * (v % 100), 2);
    }
    if (n) *--q = (char)('0' + v % 10);
    return end;
}

/* Writes v in decimal at p; returns the end (at most 20 bytes). */
static inline char *put_u64(char *p, uint64_t v) { return put_digits(p, v, digits10(v)); }

void kiln_jw_keyn(kiln_jsonw *w, const char *key, uint64_t len) {
    put_string(w, key, len, true);
    w->after_key = true;
}

void kiln_jw_strn(kiln_jsonw *w, const char *s, uint64_t len) { put_string(w, s, len, false); }

/* Writes v at p (at most 21 bytes) and returns the end. */
static char *put_i64(char *p, int64_t v) {
    if (v < 0) *p++ = '-';
    return put_u64(p, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
}

void kiln_jw_int(kiln_jsonw *w, int64_t v) { commit(w, put_i64(before(w, 21), v)); }

void kiln_jw_uint(kiln_jsonw *w, uint64_t v) { commit(w, put_u64(before(w, 20), v)); }

static void put_word(kiln_jsonw *w, const char *word) {
    size_t n = strlen(word);
    char *p = before(w, n);
    memcpy(p, word, n);
    commit(w, p + n);
}

void kiln_jw_bool(kiln_jsonw *w, bool v) { put_word(w, v ? "true" : "false"); }
void kiln_jw_null(kiln_jsonw *w) { put_word(w, "null"); }

/* Writes v in decimal at p when v is a multiple of 1/1024 in [1e-4, 1e6)
 * (bits per weight, sizes in GiB...): such a number has an exact decimal
 * expansion of at most 9 significant digits here, which is what the
 * general path below prints, without its snprintf + strtod round trip
 * (a third of `inspect --json`'s time on 100k tensors). Returns the end,
 * or NULL, having written nothing, for any other v. */
static char *put_dyadic(char *p, double v) {
    double a = fabs(v), scaled = a * 1024;
    if (!(a >= 1e-4 && a < 1e6) || scaled != floor(scaled)) return NULL;
    uint64_t whole = (uint64_t)a;
    /* The fraction k/1024 is k * 5^10 / 10^10: ten exact decimal digits.
     * Its trailing zeros are the 2s in k (at most 9 of them, against ten
     * 5s), so the nd digits kept are (k >> zeros) * 5^nd. */
    static const uint32_t POW5[11] = {1, 5, 25, 125, 625, 3125, 15625, 78125, 390625, 1953125, 9765625};
    uint64_t k = (uint64_t)scaled & 1023;
    int nd = k ? 10 - __builtin_ctzll(k) : 0;
    uint64_t frac = (k >> (10 - nd)) * POW5[nd];
    int int_digits = whole ? digits10(whole) : 0;
    int lead_zeros = whole || !frac ? 0 : nd - digits10(frac); /* zeros after the point before the first digit */
    if (int_digits + nd - lead_zeros > 9) return NULL;
    if (v < 0) *p++ = '-';
    p = put_u64(p, whole);
    *p++ = '.';
    if (!nd) *p++ = '0';
    return put_digits(p, frac, nd);
}

/* Writes v at p (at most 42 bytes) and returns the end. */
static char *put_real(char *p, double v) {
    char *end;
    if (!isfinite(v)) {
        memcpy(p, "null", 4);
        return p + 4;
    }
    if ((end = put_dyadic(p, v))) return end;
    /* shortest of 9..17 digits that reads back as the same double */
    char buf[40];
    int n = 0;
    for (int prec = 9; prec <= 17; prec += 2) {
        n = snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    memcpy(p, buf, (size_t)n);
    p += n;
    if (!strpbrk(buf, ".eEn")) {
        memcpy(p, ".0", 2);
        p += 2;
    }
    return p;
}

void kiln_jw_real(kiln_jsonw *w, double v) { commit(w, put_real(before(w, 48), v)); }

/* The kv_* calls write the key and its value in one reservation: the
 * separator, the key and its colon, then n more bytes at the pointer
 * returned. A key longer than ESC_PIECE bytes is written piecewise by
 * kiln_jw_keyn first, and only the value's n bytes are reserved. */
static char *put_key(kiln_jsonw *w, const char *key, size_t len, size_t n) {
    if (len > ESC_PIECE) {
        kiln_jw_keyn(w, key, len);
        return before(w, n);
    }
    char *p = before(w, 6 * len + 4 + n);
    *p++ = '"';
    p = escape(p, (const unsigned char *)key, len);
    *p++ = '"';
    *p++ = ':';
    if (w->pretty) *p++ = ' ';
    return p;
}

void kiln_jw_kv_str(kiln_jsonw *w, const char *key, const char *s) {
    size_t key_len = strlen(key), len = strlen(s);
    if (len > ESC_PIECE) {
        kiln_jw_keyn(w, key, key_len);
        kiln_jw_strn(w, s, len);
        return;
    }
    char *p = put_key(w, key, key_len, 6 * len + 2);
    *p++ = '"';
    p = escape(p, (const unsigned char *)s, len);
    *p++ = '"';
    commit(w, p);
}

void kiln_jw_kv_int(kiln_jsonw *w, const char *key, int64_t v) {
    commit(w, put_i64(put_key(w, key, strlen(key), 21), v));
}

void kiln_jw_kv_uint(kiln_jsonw *w, const char *key, uint64_t v) {
    commit(w, put_u64(put_key(w, key, strlen(key), 20), v));
}

void kiln_jw_kv_real(kiln_jsonw *w, const char *key, double v) {
    commit(w, put_real(put_key(w, key, strlen(key), 48), v));
}

void kiln_jw_finish(kiln_jsonw *w) {
    char *p = room(w, 1);
    *p++ = '\n';
    commit(w, p);
    flush(w);
}
