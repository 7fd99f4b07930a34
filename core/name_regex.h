/* core/name_regex.h - the one regex dialect for tensor-name patterns.
 *
 * `inspect --tensors`, `diff --tensors`, `splice --tensors` and `quantize
 * --tensor-type REGEX=TYPE` all take PCRE2 patterns, the closest C engine to
 * the ECMAScript std::regex llama.cpp's --tensor-type uses (\d, (?:...),
 * lazy quantifiers, lookahead). A pattern matches a name when it matches
 * anywhere in it, like std::regex_search; anchor it with ^...$ to match the
 * whole name. Names are matched as bytes (no UTF mode): a GGUF name need not
 * be UTF-8. */
#ifndef KILN_NAME_REGEX_H
#define KILN_NAME_REGEX_H

#include <stddef.h>

#include "error.h"

typedef struct kiln_name_regex kiln_name_regex;

/* Compiles `pattern`. `option` ("--tensors", ...) names where it came from
 * in the one-line error: "--tensors: bad regex 'blk(': missing closing
 * parenthesis at pattern offset 4". NULL with that message on error; the
 * caller frees the result with kiln_name_regex_free. */
kiln_name_regex *kiln_name_regex_compile(const char *pattern, const char *option, kiln_err *err);

/* 0 when `pattern` compiles, else -1 with the message above: command lines
 * check their patterns up front, to refuse a bad one as a usage error. */
int kiln_name_regex_check(const char *pattern, const char *option, kiln_err *err);

/* 1 when the pattern matches somewhere in name[0..len), 0 when not, -1 with
 * a message when PCRE2 gives up (its match limit, on a pathological
 * pattern). A compiled regex holds its match data: one thread at a time. */
int kiln_name_regex_match(kiln_name_regex *re, const char *name, size_t len, kiln_err *err);

/* The pattern as given. */
const char *kiln_name_regex_pattern(const kiln_name_regex *re);

/* NULL is fine. */
void kiln_name_regex_free(kiln_name_regex *re);

#endif
