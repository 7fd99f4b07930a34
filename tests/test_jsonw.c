/* tests/test_jsonw.c - the streaming JSON writer.
 *
 * kiln_jw_real prints the shortest of 9..17 significant digits that
 * reads back as the same double; multiples of 1/1024 take a fast exact
 * path. Both must print the same text: every value below is written by
 * the writer and compared with the general rule computed here.
 *
 * Strings are escaped 8 bytes at a time (and 4..7-byte strings with two
 * overlapping loads); integers are written two digits at a time after a
 * digit count. Each is compared with a byte-by-byte reference written
 * here: every byte value at every position of short strings, the bytes
 * next to the escaped ones ('!' '#' '[' ']' ' ' 0x7f), UTF-8, random
 * strings, strings longer than the writer's buffer, integers at every
 * power of ten; the layout of nested objects, pretty and compact; and
 * the key-value calls, which write both in one go, against the two
 * calls they stand for. */
#include "shared.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/jsonw.h"

/* The general rule, written independently of the writer. */
static void reference(double v, char *out, size_t cap) {
    char buf[40];
    for (int prec = 9; prec <= 17; prec += 2) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    snprintf(out, cap, "%s%s", buf, strpbrk(buf, ".eEn") ? "" : ".0");
}

/* A writer into memory; done() finishes it and returns the text without
 * the final newline (malloc'd, *len bytes). */
static kiln_jsonw writer;
static FILE *mem_file;
static char *mem_buf;
static size_t mem_len;

static kiln_jsonw *start(bool pretty) {
    mem_file = open_memstream(&mem_buf, &mem_len);
    assert_non_null(mem_file);
    kiln_jw_init(&writer, mem_file, pretty);
    return &writer;
}

static char *done(size_t *len) {
    kiln_jw_finish(&writer);
    assert_int_equal(fclose(mem_file), 0);
    assert_true(mem_len > 0 && mem_buf[mem_len - 1] == '\n');
    mem_buf[--mem_len] = 0;
    if (len) *len = mem_len;
    return mem_buf;
}

static void written(double v, char *out, size_t cap) {
    kiln_jw_real(start(false), v);
    char *text = done(NULL);
    snprintf(out, cap, "%s", text);
    free(text);
}

static int check(double v) {
    char want[64], got[64];
    reference(v, want, sizeof want);
    written(v, got, sizeof got);
    if (strcmp(want, got)) {
        fprintf(stderr, "# %.17g: writer %s, rule %s\n", v, got, want);
        return 1;
    }
    return 0;
}

static void test_reals_match_the_shortest_round_trip(void **state) {
    (void)state;
    int bad = 0;
    /* every bits-per-weight figure and other multiples of 1/1024, both
     * signs, across the fast path's bounds and past them */
    for (int64_t m = 0; m < 40000; m++) {
        bad += check(m / 1024.0) + check(-m / 1024.0);
        bad += check(m / 64.0 + 999000.0);
    }
    const double edges[] = {1e-4, 1.0 / 1024, 0.5, 8.5, 2.0625, 999999.9990234375, 1e6, 1e9,
                            123456.78125, 1234567.5, 0.0001, 65536.0009765625, -0.0};
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) bad += check(edges[i]);
    /* values the fast path must decline */
    srand(7);
    for (int i = 0; i < 20000; i++) bad += check(((double)rand() / RAND_MAX - 0.5) * pow(10, rand() % 20 - 8));
    assert_int_equal(bad, 0);
}

static void test_non_finite_is_null(void **state) {
    (void)state;
    char got[64];
    written(NAN, got, sizeof got);
    assert_string_equal(got, "null");
    written(-INFINITY, got, sizeof got);
    assert_string_equal(got, "null");
}

/* The reference escaper: RFC 8259, one byte at a time, into a malloc'd
 * buffer with the quotes. */
static char *reference_string(const unsigned char *s, size_t n, size_t *out_len) {
    char *out = malloc(6 * n + 3), *p = out;
    assert_non_null(out);
    *p++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        switch (c) {
        case '"': p += sprintf(p, "\\\""); break;
        case '\\': p += sprintf(p, "\\\\"); break;
        case '\n': p += sprintf(p, "\\n"); break;
        case '\r': p += sprintf(p, "\\r"); break;
        case '\t': p += sprintf(p, "\\t"); break;
        case '\b': p += sprintf(p, "\\b"); break;
        case '\f': p += sprintf(p, "\\f"); break;
        default:
            if (c < 0x20) p += sprintf(p, "\\u%04x", c);
            else *p++ = (char)c;
        }
    }
    *p++ = '"';
    *out_len = (size_t)(p - out);
    return out;
}

/* 1 (and a message) when the writer's string differs from the reference.
 * The writer reads a copy of exactly n bytes, so that under ASan (`make
 * check`) a load past either end fails. */
static int check_string(const unsigned char *s, size_t n) {
    size_t want_len, got_len;
    char *want = reference_string(s, n, &want_len);
    unsigned char *exact = malloc(n ? n : 1);
    assert_non_null(exact);
    if (n) memcpy(exact, s, n);
    kiln_jw_strn(start(false), (const char *)exact, n);
    free(exact);
    char *got = done(&got_len);
    int bad = got_len != want_len || memcmp(got, want, want_len);
    if (bad) {
        fprintf(stderr, "# string of %zu bytes:", n);
        for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %02x", s[i]);
        fprintf(stderr, "\n#   writer %.*s\n#   reference %.*s\n", (int)(got_len < 200 ? got_len : 200), got,
                (int)(want_len < 200 ? want_len : 200), want);
    }
    free(want);
    free(got);
    return bad;
}

static void test_every_byte_at_every_position(void **state) {
    (void)state;
    int bad = 0;
    unsigned char s[40];
    for (size_t n = 1; n <= 24; n++)
        for (size_t pos = 0; pos < n; pos++)
            for (int c = 0; c < 256; c++) {
                memset(s, 'a', n);
                s[pos] = (unsigned char)c;
                bad += check_string(s, n);
            }
    assert_int_equal(bad, 0);
}

static void test_escapes_and_neighbours_in_runs(void **state) {
    (void)state;
    /* two special bytes at any two positions of strings up to 40 bytes:
     * the escaped bytes, their neighbours, and UTF-8 (passed through) */
    static const unsigned char specials[] = {'"', '\\', 0, 1, '\n', '\r', '\t', '\b', '\f', 0x1b, 0x1f,
                                             ' ', '!', '#', '[', ']', 0x7f, 0x80, 0xc3, 0xa9, 0xe2, 0xff};
    const size_t n_specials = sizeof specials;
    int bad = 0;
    unsigned char s[40];
    for (size_t n = 0; n <= 40; n++) {
        memset(s, 'x', n);
        bad += check_string(s, n); /* plain: every length */
        for (size_t a = 0; a < n; a++)
            for (size_t b = a; b < n; b += 3) {
                memset(s, 'x', n);
                s[a] = specials[(a + n) % n_specials];
                s[b] = specials[(b * 7 + n) % n_specials];
                bad += check_string(s, n);
            }
    }
    const char *utf8 = "caf\xc3\xa9 \xe2\x96\x81token \xf0\x9f\x98\x80 \"quoted\"\tand\\ more";
    bad += check_string((const unsigned char *)utf8, strlen(utf8));
    srand(11);
    for (int i = 0; i < 20000; i++) {
        size_t n = (size_t)(rand() % 40);
        for (size_t k = 0; k < n; k++)
            s[k] = (unsigned char)(rand() % 4 ? 'a' + rand() % 26 : rand() % 256); /* mostly plain */
        bad += check_string(s, n);
    }
    assert_int_equal(bad, 0);
}

static void test_long_strings(void **state) {
    (void)state;
    /* longer than the writer's 4096-byte pieces and its 64 KiB buffer, with
     * escapes on and around the piece boundaries and at the end */
    size_t n = 200000;
    unsigned char *s = malloc(n);
    assert_non_null(s);
    int bad = 0;
    memset(s, 'y', n);
    bad += check_string(s, n);
    for (size_t k = 4096 - 2; k + 2 < n; k += 4096) {
        s[k] = '"';
        s[k + 1] = 0x01;
        s[k + 2] = 0xc3;
    }
    s[n - 1] = '\\';
    bad += check_string(s, n);
    memset(s, 0x1f, n); /* every byte six: the worst case */
    bad += check_string(s, n);
    free(s);
    /* many short strings in one array: buffer flushes between values */
    kiln_jsonw *w = start(false);
    kiln_jw_arr(w);
    for (int i = 0; i < 20000; i++) kiln_jw_str(w, "blk.0.attn_q.weight\n");
    kiln_jw_end_arr(w);
    size_t len;
    char *text = done(&len);
    const char *item = "\"blk.0.attn_q.weight\\n\"";
    assert_int_equal(len, 2 + 20000 * strlen(item) + 19999);
    for (int i = 0; i < 20000; i++)
        if (memcmp(text + 1 + (size_t)i * (strlen(item) + 1), item, strlen(item))) bad++;
    free(text);
    assert_int_equal(bad, 0);
}

static void test_integers(void **state) {
    (void)state;
    int bad = 0;
    uint64_t p = 1;
    for (int e = 0; e <= 19; e++, p *= 10) {
        for (int d = -2; d <= 2; d++) {
            if (e == 0 && d < 0) continue;
            uint64_t u = p + (uint64_t)(int64_t)d;
            char want[64], got[64];
            snprintf(want, sizeof want, "[%llu,%lld,%lld]", (unsigned long long)u, (long long)(int64_t)u,
                     -(long long)(u & (uint64_t)INT64_MAX));
            kiln_jsonw *w = start(false);
            kiln_jw_arr(w);
            kiln_jw_uint(w, u);
            kiln_jw_int(w, (int64_t)u);
            kiln_jw_int(w, -(int64_t)(u & (uint64_t)INT64_MAX));
            kiln_jw_end_arr(w);
            char *text = done(NULL);
            snprintf(got, sizeof got, "%s", text);
            free(text);
            if (strcmp(got, want)) {
                fprintf(stderr, "# writer %s, printf %s\n", got, want);
                bad++;
            }
        }
    }
    kiln_jsonw *w = start(false);
    kiln_jw_arr(w);
    kiln_jw_uint(w, UINT64_MAX);
    kiln_jw_int(w, INT64_MIN);
    kiln_jw_int(w, INT64_MAX);
    kiln_jw_uint(w, 0);
    kiln_jw_int(w, -1);
    kiln_jw_end_arr(w);
    char *text = done(NULL);
    assert_string_equal(text, "[18446744073709551615,-9223372036854775808,9223372036854775807,0,-1]");
    free(text);
    assert_int_equal(bad, 0);
}

static void test_layout(void **state) {
    (void)state;
    for (int pretty = 0; pretty <= 1; pretty++) {
        kiln_jsonw *w = start(pretty);
        kiln_jw_obj(w);
        kiln_jw_kv_str(w, "name", "a\"b");
        kiln_jw_key(w, "shape");
        kiln_jw_arr(w);
        kiln_jw_int(w, 4096);
        kiln_jw_int(w, -1);
        kiln_jw_end_arr(w);
        kiln_jw_key(w, "empty");
        kiln_jw_obj(w);
        kiln_jw_end_obj(w);
        kiln_jw_key(w, "none");
        kiln_jw_arr(w);
        kiln_jw_end_arr(w);
        kiln_jw_kv_real(w, "bpw", 8.5);
        kiln_jw_kv_uint(w, "bytes", 34);
        kiln_jw_key(w, "k\x01");
        kiln_jw_bool(w, true);
        kiln_jw_key(w, "n");
        kiln_jw_null(w);
        kiln_jw_end_obj(w);
        char *text = done(NULL);
        if (pretty)
            assert_string_equal(text, "{\n  \"name\": \"a\\\"b\",\n  \"shape\": [\n    4096,\n    -1\n  ],\n"
                                      "  \"empty\": {},\n  \"none\": [],\n  \"bpw\": 8.5,\n  \"bytes\": 34,\n"
                                      "  \"k\\u0001\": true,\n  \"n\": null\n}");
        else
            assert_string_equal(text, "{\"name\":\"a\\\"b\",\"shape\":[4096,-1],\"empty\":{},\"none\":[],"
                                      "\"bpw\":8.5,\"bytes\":34,\"k\\u0001\":true,\"n\":null}");
        free(text);
    }
}

/* kiln_jw_kv_* write the key and value in one go: the same text as
 * kiln_jw_key then the value, for short and for long keys and values. */
static void test_key_value_pairs(void **state) {
    (void)state;
    size_t long_len = 5000; /* past the writer's 4096-byte escape piece */
    char *long_key = malloc(long_len + 1), *long_val = malloc(long_len + 1);
    assert_non_null(long_key);
    assert_non_null(long_val);
    memset(long_key, 'k', long_len);
    memset(long_val, 'v', long_len);
    long_key[long_len] = long_val[long_len] = 0;
    long_key[4095] = '"';
    long_val[4096] = '\n';
    const char *keys[] = {"bpw", "a\tkey", "", long_key};
    const char *vals[] = {"Q8_0", "blk.0.attn_q.weight", "\x1b[31m", "", long_val};
    for (int pretty = 0; pretty <= 1; pretty++) {
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
            kiln_jsonw *w = start(pretty);
            kiln_jw_obj(w);
            for (size_t v = 0; v < sizeof vals / sizeof *vals; v++) kiln_jw_kv_str(w, keys[k], vals[v]);
            kiln_jw_kv_int(w, keys[k], INT64_MIN);
            kiln_jw_kv_uint(w, keys[k], UINT64_MAX);
            kiln_jw_kv_real(w, keys[k], 8.5);
            kiln_jw_kv_real(w, keys[k], 0.1);
            kiln_jw_end_obj(w);
            size_t fused_len;
            char *fused = done(&fused_len);
            w = start(pretty);
            kiln_jw_obj(w);
            for (size_t v = 0; v < sizeof vals / sizeof *vals; v++) {
                kiln_jw_key(w, keys[k]);
                kiln_jw_str(w, vals[v]);
            }
            kiln_jw_key(w, keys[k]);
            kiln_jw_int(w, INT64_MIN);
            kiln_jw_key(w, keys[k]);
            kiln_jw_uint(w, UINT64_MAX);
            kiln_jw_key(w, keys[k]);
            kiln_jw_real(w, 8.5);
            kiln_jw_key(w, keys[k]);
            kiln_jw_real(w, 0.1);
            kiln_jw_end_obj(w);
            size_t plain_len;
            char *plain = done(&plain_len);
            assert_int_equal(fused_len, plain_len);
            assert_memory_equal(fused, plain, plain_len);
            free(fused);
            free(plain);
        }
    }
    kiln_jsonw *w = start(false);
    kiln_jw_obj(w);
    kiln_jw_kv_int(w, "delta", -42);
    kiln_jw_kv_str(w, "q", "\"");
    kiln_jw_end_obj(w);
    char *text = done(NULL);
    assert_string_equal(text, "{\"delta\":-42,\"q\":\"\\\"\"}");
    free(text);
    free(long_key);
    free(long_val);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reals_match_the_shortest_round_trip),
        cmocka_unit_test(test_non_finite_is_null),
        cmocka_unit_test(test_every_byte_at_every_position),
        cmocka_unit_test(test_escapes_and_neighbours_in_runs),
        cmocka_unit_test(test_long_strings),
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_key_value_pairs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
