/* tests/test_strmap.c - the string index (core/strmap.h): every key put
 * is found with its value, every key not put is absent, duplicates are
 * reported with the first value, and a full map refuses. Keys of every
 * length 0..40 (the hash reads 8 bytes at a time and the tail in pieces),
 * keys that differ in one byte at any position, keys with NUL bytes and
 * 100,000 names shaped like a GGUF's all go through the same checks
 * against a plain linear search written here. */
#include "shared.h"

#include "../core/strmap.h"

/* The reference: position of key in keys[0, n), or -1. */
static int64_t linear_find(char **keys, const uint64_t *lens, uint64_t n, const char *key, uint64_t len) {
    for (uint64_t i = 0; i < n; i++)
        if (lens[i] == len && !memcmp(keys[i], key, len)) return (int64_t)i;
    return -1;
}

static void test_put_get_duplicates(void **state) {
    (void)state;
    kiln_strmap m;
    assert_int_equal(kiln_strmap_init(&m, 4), 0);
    uint64_t v = 99, old = 0;
    assert_false(kiln_strmap_get(&m, "a", 1, &v));
    assert_int_equal(kiln_strmap_put(&m, "a", 1, 7, NULL), 1);
    assert_int_equal(kiln_strmap_put(&m, "", 0, 8, NULL), 1);
    assert_int_equal(kiln_strmap_put(&m, "a\0b", 3, 9, NULL), 1);
    assert_int_equal(kiln_strmap_put(&m, "a", 1, 10, &old), 0);
    assert_int_equal(old, 7);
    assert_true(kiln_strmap_get(&m, "a", 1, &v));
    assert_int_equal(v, 7);
    assert_true(kiln_strmap_get(&m, "", 0, &v));
    assert_int_equal(v, 8);
    assert_true(kiln_strmap_get(&m, "a\0b", 3, &v));
    assert_int_equal(v, 9);
    assert_false(kiln_strmap_get(&m, "a\0c", 3, &v));
    assert_false(kiln_strmap_get(&m, "ab", 2, &v));
    assert_int_equal(m.count, 3);
    kiln_strmap_free(&m);
    assert_false(kiln_strmap_get(&m, "a", 1, &v)); /* a freed map is empty */
    kiln_strmap_free(&m);                          /* and can be freed again */
}

static void test_full_map_refuses(void **state) {
    (void)state;
    kiln_strmap m;
    assert_int_equal(kiln_strmap_init(&m, 3), 0);
    uint64_t room = m.cap / 2; /* the map holds at least n, at most cap / 2 */
    assert_true(room >= 3);
    assert_true(room <= 64);
    char keys[64][4] = {{0}};
    for (uint64_t i = 0; i < room; i++) {
        keys[i][0] = 'k';
        keys[i][1] = (char)('0' + i / 10);
        keys[i][2] = (char)('0' + i % 10);
        assert_int_equal(kiln_strmap_put(&m, keys[i], strlen(keys[i]), i, NULL), 1);
    }
    assert_int_equal(kiln_strmap_put(&m, "one more", 8, 0, NULL), -1);
    for (uint64_t i = 0; i < room; i++) {
        uint64_t v;
        assert_true(kiln_strmap_get(&m, keys[i], strlen(keys[i]), &v));
        assert_int_equal(v, i);
    }
    kiln_strmap_free(&m);
    assert_int_equal(kiln_strmap_init(&m, 1ull << 31), -1);
}

/* Puts keys[0, n) (duplicates allowed), then checks every put's answer
 * and every lookup against linear_find, plus each key with its last byte
 * changed and with one byte more or less. */
static void check_against_linear(char **keys, uint64_t *lens, uint64_t n, bool check_misses) {
    kiln_strmap m;
    assert_int_equal(kiln_strmap_init(&m, n), 0);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t old = UINT64_MAX;
        int64_t first = linear_find(keys, lens, i, keys[i], lens[i]);
        int rc = kiln_strmap_put(&m, keys[i], lens[i], i, &old);
        if (first < 0) {
            assert_int_equal(rc, 1);
        } else {
            assert_int_equal(rc, 0);
            assert_int_equal(old, (uint64_t)first);
        }
    }
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v;
        assert_true(kiln_strmap_get(&m, keys[i], lens[i], &v));
        assert_int_equal(v, (uint64_t)linear_find(keys, lens, n, keys[i], lens[i]));
        if (!check_misses || !lens[i]) continue;
        char other[64];
        memcpy(other, keys[i], lens[i]);
        other[lens[i] - 1] ^= 0x40;
        bool present = linear_find(keys, lens, n, other, lens[i]) >= 0;
        assert_int_equal(kiln_strmap_get(&m, other, lens[i], &v), present);
        present = linear_find(keys, lens, n, keys[i], lens[i] - 1) >= 0;
        assert_int_equal(kiln_strmap_get(&m, keys[i], lens[i] - 1, &v), present);
    }
    kiln_strmap_free(&m);
}

static void test_every_length_and_position(void **state) {
    (void)state;
    /* for each length 0..40: the key of all 'x', and the keys with one
     * byte changed at each position (to a letter, a NUL, a high byte) */
    enum { MAXLEN = 40, N = (MAXLEN + 1) * (1 + 3 * MAXLEN) + 8 };
    char **keys = calloc(N, sizeof *keys);
    uint64_t *lens = calloc(N, sizeof *lens);
    assert_non_null(keys);
    assert_non_null(lens);
    uint64_t n = 0;
    const char changes[3] = {'y', '\0', (char)0xe9};
    for (int len = 0; len <= MAXLEN; len++) {
        for (int pos = -1; pos < len; pos++) {
            for (int c = 0; c < (pos < 0 ? 1 : 3); c++) {
                keys[n] = malloc(MAXLEN + 1);
                assert_non_null(keys[n]);
                memset(keys[n], 'x', MAXLEN);
                if (pos >= 0) keys[n][pos] = changes[c];
                lens[n++] = (uint64_t)len;
            }
        }
    }
    /* and a few repeats, which must be reported as duplicates */
    for (int i = 0; i < 8; i++) {
        keys[n] = malloc(MAXLEN + 1);
        assert_non_null(keys[n]);
        memcpy(keys[n], keys[i * 37], MAXLEN);
        lens[n] = lens[i * 37];
        n++;
    }
    check_against_linear(keys, lens, n, true);
    for (uint64_t i = 0; i < n; i++) free(keys[i]);
    free(keys);
    free(lens);
}

static void test_many_tensor_names(void **state) {
    (void)state;
    /* 100,000 names as a big GGUF has them; all distinct */
    enum { N = 100000 };
    char *blob = malloc((size_t)N * 32);
    kiln_strmap m;
    assert_non_null(blob);
    assert_int_equal(kiln_strmap_init(&m, N), 0);
    for (uint64_t i = 0; i < N; i++) {
        char *k = blob + i * 32;
        int len = snprintf(k, 32, "blk.%llu.t%llu.weight", (unsigned long long)(i / 100), (unsigned long long)(i % 100));
        assert_int_equal(kiln_strmap_put(&m, k, (uint64_t)len, i, NULL), 1);
    }
    for (uint64_t i = 0; i < N; i++) {
        uint64_t v;
        const char *k = blob + i * 32;
        assert_true(kiln_strmap_get(&m, k, strlen(k), &v));
        assert_int_equal(v, i);
    }
    uint64_t v;
    assert_false(kiln_strmap_get(&m, "blk.1000.t0.weight", 18, &v));
    assert_false(kiln_strmap_get(&m, "blk.0.t100.weight", 17, &v));
    assert_int_equal(kiln_strmap_put(&m, "blk.999.t99.weight", 18, 0, &v), 0);
    assert_int_equal(v, N - 1);
    kiln_strmap_free(&m);
    free(blob);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_duplicates),
        cmocka_unit_test(test_full_map_refuses),
        cmocka_unit_test(test_every_length_and_position),
        cmocka_unit_test(test_many_tensor_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
