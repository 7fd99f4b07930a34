/* tests/test_jsonw.c - the streaming JSON writer's numbers.
 *
 * kiln_jw_real prints the shortest of 9..17 significant digits that
 * reads back as the same double; multiples of 1/1024 take a fast exact
 * path. Both must print the same text: every value below is written by
 * the writer and compared with the general rule computed here. */
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

static void written(double v, char *out, size_t cap) {
    char *mem = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mem, &len);
    assert_non_null(f);
    static kiln_jsonw w;
    kiln_jw_init(&w, f, false);
    kiln_jw_real(&w, v);
    kiln_jw_finish(&w);
    fclose(f);
    assert_true(len > 0 && mem[len - 1] == '\n');
    snprintf(out, cap, "%.*s", (int)len - 1, mem);
    free(mem);
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reals_match_the_shortest_round_trip),
        cmocka_unit_test(test_non_finite_is_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
