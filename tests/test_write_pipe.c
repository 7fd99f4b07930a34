/* tests/test_write_pipe.c - convert's writer thread (convert/write_pipe.c):
 * bytes reach the real sink whole and in order, whatever the sizes of the
 * pieces against the buffers, and the real sink's error comes back to the
 * caller, with nothing written after it. */
#include "shared.h"

#include "../convert/write_pipe.h"

typedef struct collect {
    uint8_t *data;
    uint64_t len, cap;
    int calls, fail_at; /* fail the fail_at-th call (1-based; 0 never) */
} collect;

static int collect_sink(void *user, const void *data, uint64_t n, kiln_err *err) {
    collect *c = user;
    if (++c->calls == c->fail_at) return kiln_fail(err, "out.gguf", NULL, -1, "write failed: disk full");
    assert_true(c->len + n <= c->cap);
    memcpy(c->data + c->len, data, n);
    c->len += n;
    return 0;
}

static void test_bytes_in_order(void **state) {
    enum { TOTAL = 1 << 20 };
    uint8_t *src = malloc(TOTAL);
    collect c = {.data = malloc(TOTAL), .cap = TOTAL};
    assert_true(src && c.data);
    uint64_t seed = 3;
    for (int i = 0; i < TOTAL; i++) src[i] = (uint8_t)kiln_test_xorshift64(&seed);
    kiln_err err = {0};
    cv_write_pipe *p = cv_write_pipe_new(collect_sink, &c, 1000, &err); /* pieces cross buffer ends */
    assert_non_null(p);
    uint64_t off = 0;
    while (off < TOTAL) {
        uint64_t n = kiln_test_xorshift64(&seed) % 3001;
        if (n > TOTAL - off) n = TOTAL - off;
        assert_int_equal(cv_write_pipe_put(p, src + off, n, &err), 0);
        off += n;
    }
    assert_int_equal(cv_write_pipe_flush(p, &err), 0);
    assert_int_equal(c.len, TOTAL);
    assert_memory_equal(c.data, src, TOTAL);
    cv_write_pipe_free(p);
    free(src), free(c.data);
}

static void test_sink_error_returns(void **state) {
    uint8_t buf[4096] = {0};
    collect c = {.data = malloc(1 << 20), .cap = 1 << 20, .fail_at = 3};
    kiln_err err = {0};
    cv_write_pipe *p = cv_write_pipe_new(collect_sink, &c, 1024, &err);
    assert_non_null(p);
    int rc = 0;
    for (int i = 0; i < 64 && rc == 0; i++) rc = cv_write_pipe_put(p, buf, sizeof buf, &err);
    if (rc == 0) rc = cv_write_pipe_flush(p, &err);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err.msg, "disk full"));
    assert_int_equal(c.len, 2 * 1024); /* the two buffers before the failure, nothing after */
    assert_int_equal(cv_write_pipe_flush(p, &err), -1); /* and it stays failed */
    cv_write_pipe_free(p);
    free(c.data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_in_order),
        cmocka_unit_test(test_sink_error_returns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
