/* core/jsonw.h - a small streaming JSON writer.
 *
 * jansson builds a tree, which is right for parsing and for small outputs
 * but costs a million allocations for a 100,000-tensor inspect report.
 * This writer emits straight into a stdio stream, tracking only nesting
 * and commas, so reports of any size stream in linear time. It fills its
 * own 64 KiB buffer and hands the stream whole buffers: a stream made
 * unbuffered (setvbuf _IONBF) passes them to write() without a copy. */
#ifndef KILN_JSONW_H
#define KILN_JSONW_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KILN_JSONW_MAX_DEPTH 32

typedef struct kiln_jsonw {
    FILE *out;
    int depth;
    bool pretty;
    bool first[KILN_JSONW_MAX_DEPTH]; /* no element written yet at this level */
    bool after_key;
    size_t len;        /* bytes pending in buf */
    char buf[1 << 16]; /* own buffer: unlocked, no per-call stdio cost */
} kiln_jsonw;

void kiln_jw_init(kiln_jsonw *w, FILE *out, bool pretty);
void kiln_jw_obj(kiln_jsonw *w);   /* { */
void kiln_jw_arr(kiln_jsonw *w);   /* [ */
void kiln_jw_end_obj(kiln_jsonw *w);
void kiln_jw_end_arr(kiln_jsonw *w);
void kiln_jw_keyn(kiln_jsonw *w, const char *key, uint64_t len);
void kiln_jw_strn(kiln_jsonw *w, const char *s, uint64_t len);
/* Inline so that a literal's length is known when compiling the caller. */
static inline void kiln_jw_key(kiln_jsonw *w, const char *key) { kiln_jw_keyn(w, key, strlen(key)); }
static inline void kiln_jw_str(kiln_jsonw *w, const char *s) { kiln_jw_strn(w, s, strlen(s)); }
void kiln_jw_int(kiln_jsonw *w, int64_t v);
void kiln_jw_uint(kiln_jsonw *w, uint64_t v);
void kiln_jw_real(kiln_jsonw *w, double v); /* non-finite becomes null */
void kiln_jw_bool(kiln_jsonw *w, bool v);
void kiln_jw_null(kiln_jsonw *w);
/* A key and its value in one call, for objects of many fields. */
void kiln_jw_kv_str(kiln_jsonw *w, const char *key, const char *s);
void kiln_jw_kv_int(kiln_jsonw *w, const char *key, int64_t v);
void kiln_jw_kv_uint(kiln_jsonw *w, const char *key, uint64_t v);
void kiln_jw_kv_real(kiln_jsonw *w, const char *key, double v);
/* Ends the document with a newline and flushes to the stream. */
void kiln_jw_finish(kiln_jsonw *w);

#endif
