/* tests/test_write_pipe.c - convert's writer thread (convert/write_pipe.c):
 * bytes reach the real sink whole and in order, whatever the sizes of the
 * pieces against the buffers, or handed over whole, and the real sink's
 * error comes back to the caller, with nothing written after it. */
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

/* Buffers handed over whole (cv_write_pipe_give) and pieces copied in
 * (cv_write_pipe_put, and give's small pieces) reach the sink in the
 * order given; a large piece's buffer changes hands (the caller gets one
 * of the pipe's), a small one's stays the caller's. */
static void test_give_mixed_with_put(void **state) {
    enum { TOTAL = 1 << 20, CAP = 4096 };
    uint8_t *src = malloc(TOTAL);
    collect c = {.data = malloc(TOTAL), .cap = TOTAL};
    assert_true(src && c.data);
    uint64_t seed = 21;
    for (int i = 0; i < TOTAL; i++) src[i] = (uint8_t)kiln_test_xorshift64(&seed);
    kiln_err err = {0};
    cv_write_pipe *p = cv_write_pipe_new(collect_sink, &c, CAP, &err);
    assert_non_null(p);
    uint64_t cap = 3 * CAP;
    uint8_t *mine = malloc(cap);
    assert_non_null(mine);
    int swapped = 0, kept = 0;
    for (uint64_t off = 0; off < TOTAL;) {
        /* a quarter of the pieces under give's copy limit (CAP / 16) */
        uint64_t n = kiln_test_xorshift64(&seed) % 4 ? kiln_test_xorshift64(&seed) % (3 * CAP + 1)
                                                     : kiln_test_xorshift64(&seed) % (CAP / 16);
        if (n > TOTAL - off) n = TOTAL - off;
        if (kiln_test_xorshift64(&seed) % 2) {
            assert_int_equal(cv_write_pipe_put(p, src + off, n, &err), 0);
        } else {
            if (n > cap) n = cap;
            memcpy(mine, src + off, n);
            uint8_t *before = mine;
            assert_int_equal(cv_write_pipe_give(p, &mine, &cap, n, &err), 0);
            assert_non_null(mine);
            if (n >= CAP / 16) {
                assert_ptr_not_equal(mine, before);
                swapped++;
            } else {
                assert_ptr_equal(mine, before);
                kept++;
            }
            if (cap < 3 * CAP) { /* one of the pipe's: trade it for a caller-size buffer again */
                free(mine);
                cap = 3 * CAP;
                mine = malloc(cap);
                assert_non_null(mine);
            }
        }
        off += n;
    }
    assert_int_equal(cv_write_pipe_flush(p, &err), 0);
    assert_true(swapped > 10 && kept > 10);
    assert_int_equal(c.len, TOTAL);
    assert_memory_equal(c.data, src, TOTAL);
    cv_write_pipe_free(p);
    free(mine), free(src), free(c.data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_in_order),
        cmocka_unit_test(test_sink_error_returns),
        cmocka_unit_test(test_give_mixed_with_put),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
