/* core/escape.h - making strings read from files safe to print.
 *
 * Tensor names, metadata keys and values, tokenizer pieces: anything a model
 * file supplies may hold bytes a terminal acts on (ESC [ 31m, a C1 CSI, a
 * carriage return that hides what came before it). Every printer and every
 * kiln_err message passes such strings through this one escaper. It writes
 *
 *   \n \t \r            for those three C0 controls,
 *   \xNN                for every other C0 byte, DEL (0x7f), each byte of a
 *                       C1 control encoded in UTF-8 (U+0080..U+009F, so
 *                       \xc2\x9b) and each byte that is not well-formed UTF-8,
 *   \\ and \Q           for a backslash and the quote character Q, only when
 *                       a quote character is given (quoted values, pieces),
 *
 * and copies everything else (printable ASCII, well-formed UTF-8) as is.
 * Unquoted escaping leaves backslashes alone, so escaping twice changes
 * nothing: error messages can be escaped whole after callers escaped parts.
 * It does not make output unambiguous or parseable; JSON output has its own
 * escaping (core/jsonw.c). */
#ifndef KILN_ESCAPE_H
#define KILN_ESCAPE_H

#include <stddef.h>
#include <stdio.h>

/* Escapes s[0..len) into out (cap > 0 bytes, always NUL-terminated; an
 * output that does not fit is cut at a whole escape and ends in "...").
 * quote: 0 for unquoted text, else the quote character to escape (with the
 * backslash). Returns the length of the whole escape, without the NUL, as
 * snprintf does: a result >= cap means out was cut. */
size_t kiln_escape(char *out, size_t cap, const char *s, size_t len, char quote);

/* Writes the escape of s[0..len) to f, however long. */
void kiln_escape_fput(FILE *f, const char *s, size_t len, char quote);

/* A value to use inside one printf call without a buffer of one's own:
 *     printf("%-40s %s\n", kiln_esc(name).s, ...);
 * (the temporary lives until the end of the full expression). Long strings
 * are cut to KILN_ESC_CAP - 1 bytes, ending in "...". Unquoted. */
#define KILN_ESC_CAP 512
typedef struct kiln_esc_buf {
    char s[KILN_ESC_CAP];
} kiln_esc_buf;

/* NUL-terminated s; NULL gives "(null)". */
kiln_esc_buf kiln_esc(const char *s);
/* s[0..len), which may hold NULs (GGUF strings are not terminated). */
kiln_esc_buf kiln_escn(const char *s, size_t len);

#endif
