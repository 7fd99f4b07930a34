/* tests/test_escape.c - core/escape.h, the escaper for file strings on a
 * terminal, and core/name_regex.h, the tensor-name pattern dialect.
 *
 *  - every C0 byte, DEL, C1 controls in UTF-8 and bytes that are not
 *    well-formed UTF-8 come out as escapes, and no byte of the output is a
 *    control byte, for all 256 single bytes and every pair of them;
 *  - printable ASCII and well-formed UTF-8 pass unchanged;
 *  - quoting escapes the quote and the backslash, unquoted text neither;
 *  - a cut output ends in "..." at a whole escape and reports the length;
 *  - kiln_fail escapes the message it builds;
 *  - name patterns are PCRE2, searched anywhere in the name, and a bad one
 *    names itself and its offset. */
#include "shared.h"

#include "../core/error.h"
#include "../core/escape.h"
#include "../core/name_regex.h"

/* True when s holds no C0 byte, DEL, or byte >= 0x80 that is not part of
 * well-formed UTF-8 outside U+0080..U+009F: what a terminal may act on. */
static bool terminal_safe(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    for (; *p; p++) {
        if (*p < 0x20 || *p == 0x7F) return false;
        if (*p == 0xC2 && p[1] >= 0x80 && p[1] <= 0x9F) return false;
        if (*p >= 0x80 && *p <= 0x9F) {
            /* only as a continuation byte of a multi-byte character */
            const unsigned char *q = p;
            while (q > (const unsigned char *)s && (q[-1] & 0xC0) == 0x80) q--;
            if (q == (const unsigned char *)s || q[-1] < 0xC2) return false;
        }
    }
    return true;
}

static void test_escape_table(void **state) {
    (void)state;
    char out[64];
    static const struct {
        const char *in;
        size_t len;
        char quote;
        const char *want;
    } cases[] = {
        {"plain.name", 10, 0, "plain.name"},
        {"a\x1b[31mb", 7, 0, "a\\x1b[31mb"},
        {"\n\t\r", 3, 0, "\\n\\t\\r"},
        {"nul\0x", 5, 0, "nul\\x00x"},
        {"del\x7f", 4, 0, "del\\x7f"},
        {"csi\xc2\x9b" "2J", 7, 0, "csi\\xc2\\x9b2J"},       /* C1 CSI in UTF-8 */
        {"raw\x9b" "2J", 6, 0, "raw\\x9b2J"},                /* lone C1 byte */
        {"caf\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x98\x80", 14, 0, "caf\xc3\xa9 \xe6\xbc\xa2 \xf0\x9f\x98\x80"},
        {"\xc3", 1, 0, "\\xc3"},                             /* cut character */
        {"\xc0\xaf", 2, 0, "\\xc0\\xaf"},                    /* overlong */
        {"\xed\xa0\x80", 3, 0, "\\xed\\xa0\\x80"},           /* surrogate */
        {"\xf4\x90\x80\x80", 4, 0, "\\xf4\\x90\\x80\\x80"},  /* > U+10FFFF */
        {"back\\slash\"q'", 13, 0, "back\\slash\"q'"},
        {"back\\slash\"q'", 13, '"', "back\\\\slash\\\"q'"},
        {"it's", 4, '\'', "it\\'s"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = kiln_escape(out, sizeof out, cases[i].in, cases[i].len, cases[i].quote);
        assert_string_equal(out, cases[i].want);
        assert_int_equal(n, strlen(cases[i].want));
    }
}

static void test_escape_all_pairs_safe(void **state) {
    (void)state;
    char out[64];
    for (int a = 0; a < 256; a++)
        for (int b = 0; b < 256; b++) {
            char in[2] = {(char)a, (char)b};
            kiln_escape(out, sizeof out, in, 2, 0);
            if (!terminal_safe(out)) fail_msg("bytes %02x %02x escape to an unsafe '%s'", a, b, out);
            /* printable ASCII is kept as it is */
            if (a >= 0x20 && a < 0x7F) assert_int_equal((unsigned char)out[0], a);
        }
}

static void test_escape_cut(void **state) {
    (void)state;
    char out[12];
    /* "ab" then four escapes of 4 bytes: 18 bytes do not fit in 11 */
    size_t n = kiln_escape(out, sizeof out, "ab\x01\x02\x03\x04", 6, 0);
    assert_int_equal(n, 18);
    assert_string_equal(out, "ab\\x01...");
    char tiny[3];
    kiln_escape(tiny, sizeof tiny, "abcdef", 6, 0);
    assert_int_equal(strlen(tiny), 0);
    /* the buffer form cuts long names, but never into a control byte */
    char name[2000];
    memset(name, '\x1b', sizeof name);
    kiln_esc_buf b = kiln_escn(name, sizeof name);
    assert_true(strlen(b.s) < KILN_ESC_CAP);
    assert_true(terminal_safe(b.s));
    assert_non_null(strstr(b.s, "..."));
    assert_string_equal(kiln_esc(NULL).s, "(null)");
    /* escaping twice changes nothing (unquoted) */
    kiln_esc_buf once = kiln_esc("x\x1b[0m\\y"), twice = kiln_esc(once.s);
    assert_string_equal(once.s, twice.s);
}

static void test_escape_streaming_equals_buffer(void **state) {
    (void)state;
    const char in[] = "t\x1b]0;pwned\x07\xc2\x9b\xe6\xbc\xa2'\\";
    char want[128], got[128] = "";
    kiln_escape(want, sizeof want, in, sizeof in - 1, '\'');
    FILE *f = fmemopen(got, sizeof got, "w");
    assert_non_null(f);
    kiln_escape_fput(f, in, sizeof in - 1, '\'');
    fclose(f);
    assert_string_equal(got, want);
}

static void test_fail_escapes_message(void **state) {
    (void)state;
    kiln_err err;
    kiln_fail(&err, "m.gguf", "blk.0\x1b[31m", 12, "tensor '%s'\nbad\x9b", "x\x1b]2;t\x07");
    assert_true(terminal_safe(err.msg));
    assert_non_null(strstr(err.msg, "blk.0\\x1b[31m at offset 12"));
    assert_non_null(strstr(err.msg, "'x\\x1b]2;t\\x07' bad\\x9b"));
}

static void test_name_regex(void **state) {
    (void)state;
    kiln_err err = {{0}};
    /* PCRE2 syntax POSIX ERE lacks: \d, (?:...) */
    kiln_name_regex *re = kiln_name_regex_compile("blk\\.\\d+\\.ffn_(?:up|down)", "--tensors", &err);
    assert_non_null(re);
    assert_int_equal(kiln_name_regex_match(re, "blk.12.ffn_up.weight", 20, &err), 1);
    assert_int_equal(kiln_name_regex_match(re, "blk.12.ffn_gate.weight", 22, &err), 0);
    assert_int_equal(kiln_name_regex_match(re, "xblk.3.ffn_down", 15, &err), 1); /* searched, not anchored */
    /* the length is honoured: the match may not read past it */
    assert_int_equal(kiln_name_regex_match(re, "blk.1.ffn_upXXX", 8, &err), 0);
    assert_string_equal(kiln_name_regex_pattern(re), "blk\\.\\d+\\.ffn_(?:up|down)");
    kiln_name_regex_free(re);
    assert_null(kiln_name_regex_compile("blk(", "--tensor-type", &err));
    assert_non_null(strstr(err.msg, "--tensor-type: bad regex 'blk(': "));
    assert_non_null(strstr(err.msg, "at pattern offset 4"));
    assert_null(strchr(err.msg, '\n'));
    assert_int_equal(kiln_name_regex_check("a[", "--tensors", &err), -1);
    assert_int_equal(kiln_name_regex_check("a|b", "--tensors", &err), 0);
    kiln_name_regex_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape_table),
        cmocka_unit_test(test_escape_all_pairs_safe),
        cmocka_unit_test(test_escape_cut),
        cmocka_unit_test(test_escape_streaming_equals_buffer),
        cmocka_unit_test(test_fail_escapes_message),
        cmocka_unit_test(test_name_regex),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
