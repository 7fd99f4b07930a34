/* core/name_regex.c - PCRE2 tensor-name patterns (see name_regex.h). A thin
 * wrapper, so that every tool compiles, matches and reports errors the same
 * way. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "name_regex.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

struct kiln_name_regex {
    char *pattern;
    const char *option;
    pcre2_code *code;
    pcre2_match_data *md;
};

kiln_name_regex *kiln_name_regex_compile(const char *pattern, const char *option, kiln_err *err) {
    kiln_name_regex *re = calloc(1, sizeof *re);
    if (!re || !(re->pattern = strdup(pattern))) {
        free(re);
        kiln_fail(err, NULL, option, -1, "out of memory");
        return NULL;
    }
    re->option = option;
    int code;
    PCRE2_SIZE at;
    re->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, 0, &code, &at, NULL);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        kiln_fail(err, NULL, option, -1, "bad regex '%s': %s at pattern offset %zu", pattern, (const char *)msg,
                  (size_t)at);
        kiln_name_regex_free(re);
        return NULL;
    }
    if (!(re->md = pcre2_match_data_create_from_pattern(re->code, NULL))) {
        kiln_fail(err, NULL, option, -1, "out of memory");
        kiln_name_regex_free(re);
        return NULL;
    }
    return re;
}

int kiln_name_regex_check(const char *pattern, const char *option, kiln_err *err) {
    kiln_name_regex *re = kiln_name_regex_compile(pattern, option, err);
    kiln_name_regex_free(re);
    return re ? 0 : -1;
}

int kiln_name_regex_match(kiln_name_regex *re, const char *name, size_t len, kiln_err *err) {
    int rc = pcre2_match(re->code, (PCRE2_SPTR)name, len, 0, 0, re->md, NULL);
    if (rc >= 0) return 1;
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    return kiln_fail(err, NULL, re->option, -1, "regex '%s' on '%.*s': %s", re->pattern, (int)len, name,
                     (const char *)msg);
}

const char *kiln_name_regex_pattern(const kiln_name_regex *re) { return re->pattern; }

void kiln_name_regex_free(kiln_name_regex *re) {
    if (!re) return;
    pcre2_match_data_free(re->md);
    pcre2_code_free(re->code);
    free(re->pattern);
    free(re);
}
