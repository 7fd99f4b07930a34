/* core/error.h - the one error convention used everywhere in kiln.
 *
 * Library functions never print and never exit. A function that can fail
 * takes a `kiln_err *` as its last argument and returns -1 (or NULL) after
 * filling it with one line of the form
 *
 *     FILE: FIELD at offset N: what is wrong
 *
 * The CLI prints that line prefixed with "kiln: " and exits non-zero.
 * Passing a NULL kiln_err is allowed: the message is then dropped. */
#ifndef KILN_ERROR_H
#define KILN_ERROR_H

#include <stdint.h>

typedef struct kiln_err {
    char msg[1024];
} kiln_err;

/* Fills `err` with "file: field at offset N: <fmt...>". `file` and `field`
 * may be NULL and `offset` may be negative; those parts are then omitted.
 * Always returns -1 so callers can write `return kiln_fail(...)`. */
int kiln_fail(kiln_err *err, const char *file, const char *field,
              int64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Exit codes of the kiln binary, documented once in README.md. */
enum {
    KILN_EXIT_OK = 0,
    KILN_EXIT_FAIL = 1,   /* the work failed, or a gate/threshold tripped */
    KILN_EXIT_USAGE = 2,  /* bad command line */
};

#endif
