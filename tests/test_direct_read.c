/* tests/test_direct_read.c - convert's direct reader
 * (convert/direct_read.c): any range of a file, at any offset and length
 * against the 4 KiB blocks, comes back as the file's bytes, whether it
 * was read ahead (the range named as next), read ahead wrongly, or not at
 * all; the bytes handed out stay put while the next range is read; a
 * range past the end of the file is an error. A filesystem without
 * O_DIRECT makes the cases skip. */
#include "shared.h"

#include <fcntl.h>

#include "../convert/direct_read.h"

enum { FILE_BYTES = (5 << 20) + 777 }; /* a partial last block */

static uint8_t *g_bytes;
static const char *g_path;

static int setup(void **state) {
    (void)state;
    g_bytes = malloc(FILE_BYTES);
    if (!g_bytes) return -1;
    uint64_t seed = 17;
    for (int i = 0; i < FILE_BYTES; i++) g_bytes[i] = (uint8_t)kiln_test_xorshift64(&seed);
    g_path = kiln_test_tmp_path("direct-read.bin");
    kiln_test_write_file(g_path, g_bytes, FILE_BYTES);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unlink(g_path);
    free(g_bytes);
    return 0;
}

/* Reads [off, off + n) naming next_n bytes after it, and checks them. */
static const uint8_t *read_check(cv_direct *d, uint64_t off, uint64_t n, uint64_t next_n) {
    kiln_err err = {0};
    const uint8_t *p = NULL;
    const cv_direct_next next = {.file = 0, .path = g_path, .off = off + n, .n = next_n};
    int rc = cv_direct_read(d, 0, g_path, off, n, &next, &p, &err);
    if (rc < 0) fail_msg("%s", err.msg);
    if (rc == 1) {
        cv_direct_free(d);
        skip(); /* no O_DIRECT here */
    }
    assert_memory_equal(p, g_bytes + off, n);
    return p;
}

static void test_stream_read_ahead(void **state) {
    cv_direct *d = cv_direct_new(1);
    assert_non_null(d);
    /* a stream of chunks at an odd offset, each naming the next: the
     * previous chunk's bytes stay as they were while the next is read */
    const uint64_t chunk = 300001;
    uint64_t off = 123;
    const uint8_t *prev = NULL;
    uint64_t prev_off = 0;
    while (off < FILE_BYTES) {
        uint64_t n = FILE_BYTES - off < chunk ? FILE_BYTES - off : chunk;
        uint64_t next = FILE_BYTES - off - n < chunk ? FILE_BYTES - off - n : chunk;
        if (prev) assert_memory_equal(prev, g_bytes + prev_off, chunk);
        prev = read_check(d, off, n, next);
        prev_off = off;
        off += n;
    }
    cv_direct_free(d);
}

static void test_wrong_guess_and_jumps(void **state) {
    cv_direct *d = cv_direct_new(1);
    assert_non_null(d);
    uint64_t seed = 99;
    for (int i = 0; i < 200; i++) {
        uint64_t off = kiln_test_xorshift64(&seed) % FILE_BYTES;
        uint64_t n = 1 + kiln_test_xorshift64(&seed) % 70000;
        if (n > FILE_BYTES - off) n = FILE_BYTES - off;
        uint64_t next = kiln_test_xorshift64(&seed) % 50000;
        if (next > FILE_BYTES - off - n) next = FILE_BYTES - off - n;
        read_check(d, off, n, next); /* the guess is right only when the next draw happens to follow */
    }
    /* the last bytes of the file, with its partial block */
    read_check(d, FILE_BYTES - 5000, 5000, 0);
    cv_direct_free(d);
}

static void test_past_end_fails(void **state) {
    cv_direct *d = cv_direct_new(1);
    assert_non_null(d);
    read_check(d, 0, 4096, 0); /* skips where there is no O_DIRECT */
    kiln_err err = {0};
    const uint8_t *p;
    assert_int_equal(cv_direct_read(d, 0, g_path, FILE_BYTES - 10, 20, NULL, &p, &err), -1);
    assert_non_null(strstr(err.msg, "end of file"));
    /* and the reader goes on */
    read_check(d, 10, 10, 0);
    cv_direct_free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_read_ahead),
        cmocka_unit_test(test_wrong_guess_and_jumps),
        cmocka_unit_test(test_past_end_fails),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
