/* tests/test_fileio_direct.c - direct (O_DIRECT) output files
 * (kiln_out_direct, core/fileio.c): the bytes that reach the file are the
 * ones written, whatever the sizes of the pieces against the aligned
 * buffer, with a partial last block, and with a hole in the middle (which
 * ends the mode); the mode is refused once data was written. A filesystem
 * without O_DIRECT (tmpfs on older kernels) makes the direct cases skip. */
#include "shared.h"

#include <fcntl.h>

/* Writes `n` bytes of src in pieces of random sizes up to max_piece. */
static void write_pieces(kiln_outfile *f, const uint8_t *src, uint64_t n, uint64_t max_piece, uint64_t *seed) {
    kiln_err err = {0};
    for (uint64_t off = 0; off < n;) {
        uint64_t k = kiln_test_xorshift64(seed) % (max_piece + 1);
        if (k > n - off) k = n - off;
        if (kiln_out_write(f, src + off, k, &err) < 0) fail_msg("%s", err.msg);
        off += k;
    }
}

static uint8_t *random_bytes(uint64_t n, uint64_t seed) {
    uint8_t *p = malloc(n);
    assert_non_null(p);
    for (uint64_t i = 0; i < n; i++) p[i] = (uint8_t)kiln_test_xorshift64(&seed);
    return p;
}

/* Opens `name` in the scratch directory in direct mode; skips the test
 * when the filesystem has none. */
static void open_direct(kiln_outfile *f, const char *name) {
    kiln_err err = {0};
    if (kiln_out_open(f, kiln_test_tmp_path(name), &err) < 0) fail_msg("%s", err.msg);
    int r = kiln_out_direct(f, &err);
    if (r < 0) fail_msg("%s", err.msg);
    if (r == 0) {
        kiln_out_discard(f);
        skip();
    }
    assert_true(f->direct);
    int fl = fcntl(f->fd, F_GETFL);
    assert_true(fl >= 0 && (fl & O_DIRECT));
}

static void commit(kiln_outfile *f) {
    kiln_err err = {0};
    if (kiln_out_commit(f, &err) < 0) fail_msg("%s", err.msg);
    kiln_out_free(f);
}

static void test_direct_bytes_in_order(void **state) {
    /* 3 buffers of 8 MiB and a tail that is not whole blocks */
    const uint64_t n = (25u << 20) + 1234;
    uint8_t *src = random_bytes(n, 7);
    kiln_outfile f;
    open_direct(&f, "direct.bin");
    uint64_t seed = 11;
    write_pieces(&f, src, n, 3u << 20, &seed);
    assert_true(f.direct); /* still direct before the close: every write so far was whole blocks */
    commit(&f);
    size_t len = 0;
    uint8_t *got = kiln_test_read_file(kiln_test_tmp_path("direct.bin"), &len);
    assert_non_null(got);
    assert_int_equal(len, n);
    assert_memory_equal(got, src, n);
    free(got);
    free(src);
}

static void test_direct_with_hole(void **state) {
    const uint64_t a = (9u << 20) + 5000, hole = 3000, b = 100;
    uint8_t *src = random_bytes(a + b, 5);
    kiln_outfile f;
    open_direct(&f, "hole.bin");
    kiln_err err = {0};
    uint64_t seed = 3;
    write_pieces(&f, src, a, 1u << 20, &seed);
    if (kiln_out_skip(&f, hole, &err) < 0) fail_msg("%s", err.msg);
    assert_false(f.direct); /* the file goes on off a block boundary: buffered */
    write_pieces(&f, src + a, b, 64, &seed);
    commit(&f);
    size_t len = 0;
    uint8_t *got = kiln_test_read_file(kiln_test_tmp_path("hole.bin"), &len);
    assert_non_null(got);
    assert_int_equal(len, a + hole + b);
    assert_memory_equal(got, src, a);
    for (uint64_t i = 0; i < hole; i++) assert_int_equal(got[a + i], 0);
    assert_memory_equal(got + a + hole, src + a, b);
    free(got);
    free(src);
}

static void test_direct_after_write_refused(void **state) {
    kiln_outfile f;
    kiln_err err = {0};
    if (kiln_out_open(&f, kiln_test_tmp_path("late.bin"), &err) < 0) fail_msg("%s", err.msg);
    assert_int_equal(kiln_out_write(&f, "x", 1, &err), 0);
    assert_int_equal(kiln_out_direct(&f, &err), -1);
    assert_non_null(strstr(err.msg, "after 1 bytes"));
    assert_false(f.direct);
    kiln_out_discard(&f);
    assert_false(kiln_test_exists(kiln_test_tmp_path("late.bin.tmp")));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_direct_bytes_in_order),
        cmocka_unit_test(test_direct_with_hole),
        cmocka_unit_test(test_direct_after_write_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
