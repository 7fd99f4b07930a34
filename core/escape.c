/* core/escape.c - the one escaper for file strings on a terminal (see
 * escape.h). Works one unit at a time (a character, or one byte to escape),
 * so the bounded and the streaming forms share every decision. */
#include "escape.h"

#include <stdio.h>
#include <string.h>

/* Length of the well-formed UTF-8 sequence at p (n > 0 bytes left), or 0
 * when the first byte does not start one: overlong forms, surrogates and
 * code points above U+10FFFF are not well-formed. */
static size_t utf8_len(const unsigned char *p, size_t n) {
    if (p[0] < 0x80) return 1;
    size_t len = p[0] >= 0xC2 && p[0] <= 0xDF ? 2 : p[0] >= 0xE0 && p[0] <= 0xEF ? 3 : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : 0;
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    if (len == 3 && p[0] == 0xE0 && p[1] < 0xA0) return 0;  /* overlong */
    if (len == 3 && p[0] == 0xED && p[1] >= 0xA0) return 0; /* surrogate */
    if (len == 4 && p[0] == 0xF0 && p[1] < 0x90) return 0;  /* overlong */
    if (len == 4 && p[0] == 0xF4 && p[1] >= 0x90) return 0; /* > U+10FFFF */
    return len;
}

/* Escapes the unit at p (n > 0 bytes left) into unit[] (at least 9 bytes):
 * returns how many input bytes it took and sets *out_len. */
static size_t escape_unit(const unsigned char *p, size_t n, char quote, char *unit, size_t *out_len) {
    size_t l = utf8_len(p, n);
    unsigned c = p[0];
    /* C1 controls U+0080..U+009F are C2 80..C2 9F in UTF-8. */
    if (l == 2 && c == 0xC2 && p[1] <= 0x9F) {
        *out_len = (size_t)snprintf(unit, 9, "\\x%02x\\x%02x", c, p[1]);
        return 2;
    }
    if (l > 1) {
        memcpy(unit, p, l);
        *out_len = l;
        return l;
    }
    if (c == '\n') *out_len = (size_t)snprintf(unit, 9, "\\n");
    else if (c == '\t') *out_len = (size_t)snprintf(unit, 9, "\\t");
    else if (c == '\r') *out_len = (size_t)snprintf(unit, 9, "\\r");
    else if (quote && (c == '\\' || c == (unsigned char)quote)) *out_len = (size_t)snprintf(unit, 9, "\\%c", c);
    else if (l == 1 && c >= 0x20 && c != 0x7F) {
        unit[0] = (char)c;
        *out_len = 1;
    } else *out_len = (size_t)snprintf(unit, 9, "\\x%02x", c);
    return 1;
}

size_t kiln_escape(char *out, size_t cap, const char *s, size_t len, char quote) {
    const unsigned char *p = (const unsigned char *)s;
    char unit[9];
    size_t ul, need = 0;
    for (size_t i = 0; i < len;) {
        i += escape_unit(p + i, len - i, quote, unit, &ul);
        need += ul;
    }
    /* When it does not fit, stop at the last whole unit that leaves room
     * for "..." and the NUL. */
    size_t room = need < cap ? cap - 1 : cap >= 4 ? cap - 4 : 0, o = 0;
    for (size_t i = 0; i < len;) {
        size_t took = escape_unit(p + i, len - i, quote, unit, &ul);
        if (o + ul > room) break;
        memcpy(out + o, unit, ul);
        o += ul;
        i += took;
    }
    if (need >= cap && cap >= 4) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    if (cap) out[o] = 0;
    return need;
}

void kiln_escape_fput(FILE *f, const char *s, size_t len, char quote) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        char unit[9];
        size_t ul;
        i += escape_unit(p + i, len - i, quote, unit, &ul);
        fwrite(unit, 1, ul, f);
    }
}

kiln_esc_buf kiln_escn(const char *s, size_t len) {
    kiln_esc_buf b;
    kiln_escape(b.s, sizeof b.s, s, len, 0);
    return b;
}

kiln_esc_buf kiln_esc(const char *s) {
    if (!s) s = "(null)";
    return kiln_escn(s, strlen(s));
}
