/* cli/cli.c - error printing and option parsing shared by the commands. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kiln_cli_fail(const kiln_err *err) {
    fprintf(stderr, "kiln: %s\n", err->msg[0] ? err->msg : "unknown error");
    return KILN_EXIT_FAIL;
}

int kiln_cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kiln %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'kiln %s --help')\n", cmd);
    va_end(ap);
    return KILN_EXIT_USAGE;
}

bool kiln_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end) return false;
    *out = v;
    return true;
}

bool kiln_parse_double(const char *s, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end) return false;
    *out = v;
    return true;
}

bool kiln_parse_size(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || v < 0) return false;
    double mul = 1;
    if (*end) {
        char u = (char)(*end | 0x20);
        int bin = end[1] == 'i' || end[1] == 'I';
        double base = bin ? 1024.0 : 1000.0;
        if (u == 'k') mul = base;
        else if (u == 'm') mul = base * base;
        else if (u == 'g') mul = base * base * base;
        else if (u == 't') mul = base * base * base * base;
        else return false;
        end += 1 + bin;
        if (*end == 'B' || *end == 'b') end++;
        if (*end) return false;
    }
    *out = (uint64_t)(v * mul);
    return true;
}
