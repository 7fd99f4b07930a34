/* core/error.c - formatting of kiln's one-line error messages (see error.h). */
#include "error.h"
#include "escape.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int kiln_fail(kiln_err *err, const char *file, const char *field,
              int64_t offset, const char *fmt, ...) {
    if (!err) return -1;
    size_t cap = sizeof(err->msg), n = 0;
    char *p = err->msg;
    if (file) n += (size_t)snprintf(p + n, cap - n, "%s: ", file);
    if (n < cap && field) n += (size_t)snprintf(p + n, cap - n, "%s", field);
    if (n < cap && offset >= 0)
        n += (size_t)snprintf(p + n, cap - n, "%soffset %lld",
                              field ? " at " : "at ", (long long)offset);
    if (n < cap && (field || offset >= 0))
        n += (size_t)snprintf(p + n, cap - n, ": ");
    if (n < cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p + n, cap - n, fmt, ap);
        va_end(ap);
    }
    /* One line, always: fold any newline a caller let through, and escape
     * the control bytes a file string (a tensor name, a key) may carry. */
    for (char *c = err->msg; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    char safe[sizeof err->msg];
    kiln_escape(safe, sizeof safe, err->msg, strlen(err->msg), 0);
    memcpy(err->msg, safe, sizeof safe);
    return -1;
}
