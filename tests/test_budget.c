/* tests/test_budget.c - quantize/budget.c on synthetic items: the picks
 * equal a brute-force optimum on small random cases (and on hand-made
 * ones where the convex-hull greedy alone is wrong), never pass the
 * budget, a budget under the smallest sum fails naming it, ties resolve
 * the same way on every run (the lower choice index, the earlier item),
 * and kiln_writer_file_size() (what the budget counts) is the size of the
 * file the writer then writes. */
#include "shared.h"

#include "../core/gguf.h"
#include "../core/types.h"
#include "../quantize/budget.h"

/* Minimal dkld over every combination (n^m of them), or INFINITY when
 * nothing fits. */
static double brute(const kiln_budget_item *it, size_t n, uint64_t budget, size_t at, uint64_t used, double d) {
    if (at == n) return d;
    double best = INFINITY;
    for (size_t c = 0; c < it[at].n_choices; c++) {
        uint64_t u = used + it[at].choices[c].bytes;
        if (u > budget) continue;
        double r = brute(it, n, budget, at + 1, u, d + it[at].choices[c].dkld);
        if (r < best) best = r;
    }
    return best;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Item i gets 1..5 choices with bytes growing and dkld mostly falling (a
 * few deliberately dominated or off the hull). */
static void random_items(kiln_budget_choice ch[][6], kiln_budget_item *it, size_t n) {
    for (size_t i = 0; i < n; i++) {
        size_t m = 1 + rnd() % 5;
        uint64_t b = 10 + rnd() % 50;
        double d = 1.0 + (double)(rnd() % 1000) / 100.0;
        for (size_t c = 0; c < m; c++) {
            ch[i][c] = (kiln_budget_choice){(uint32_t)c, b, d};
            b += 1 + rnd() % 40;
            d = rnd() % 7 == 0 ? d + 0.5 : d * (double)(rnd() % 100) / 100.0;
        }
        it[i] = (kiln_budget_item){ch[i], m};
    }
}

static void matches_brute_force(void **state) {
    (void)state;
    kiln_budget_choice ch[8][6];
    kiln_budget_item it[8];
    size_t pick[8];
    int checked = 0;
    for (int round = 0; round < 400; round++) {
        size_t n = 1 + rnd() % 7;
        random_items(ch, it, n);
        uint64_t lo = 0, hi = 0;
        for (size_t i = 0; i < n; i++) {
            lo += it[i].choices[0].bytes;
            hi += it[i].choices[it[i].n_choices - 1].bytes;
        }
        uint64_t budget = lo + rnd() % (hi - lo + 1);
        kiln_budget_result r;
        kiln_err err = {{0}};
        if (kiln_budget_solve(it, n, budget, 0, pick, &r, &err)) fail_msg("round %d: %s", round, err.msg);
        double opt = brute(it, n, budget, 0, 0, 0);
        uint64_t bytes = 0;
        double d = 0;
        for (size_t i = 0; i < n; i++) {
            assert_true(pick[i] < it[i].n_choices);
            bytes += it[i].choices[pick[i]].bytes;
            d += it[i].choices[pick[i]].dkld;
        }
        assert_true(bytes <= budget);
        assert_int_equal(bytes, r.bytes);
        assert_true(fabs(d - r.dkld) <= 1e-9 * fabs(d) + 1e-12);
        assert_true(r.exact);
        assert_true(r.lower_bound <= opt + 1e-9);
        if (fabs(d - opt) > 1e-9 * fabs(opt) + 1e-12)
            fail_msg("round %d: %zu items, budget %llu: dkld %.12g, optimum %.12g", round, n,
                     (unsigned long long)budget, d, opt);
        checked++;
    }
    assert_int_equal(checked, 400);
}

/* Two items where the hull greedy takes the efficient small upgrade and
 * then cannot afford the big one that the optimum takes. */
static void greedy_alone_is_wrong(void **state) {
    (void)state;
    kiln_budget_choice a[] = {{0, 10, 10.0}, {1, 11, 8.0}};   /* 2 saved for 1 byte */
    kiln_budget_choice b[] = {{0, 10, 10.0}, {1, 20, 0.5}};   /* 9.5 saved for 10 bytes */
    kiln_budget_item it[] = {{a, 2}, {b, 2}};
    size_t pick[2];
    kiln_budget_result r;
    kiln_err err = {{0}};
    assert_int_equal(kiln_budget_solve(it, 2, 30, 0, pick, &r, &err), 0);
    assert_int_equal(pick[0], 0);
    assert_int_equal(pick[1], 1);
    assert_true(r.dkld == 10.5);
    assert_int_equal(r.bytes, 30);
    /* with the node allowance at 1 the search stops at once: the
     * greedy's answer is kept and the result says it is not proven */
    assert_int_equal(kiln_budget_solve(it, 2, 30, 1, pick, &r, &err), 0);
    assert_false(r.exact);
    assert_true(r.bytes <= 30);
}

static void below_smallest(void **state) {
    (void)state;
    kiln_budget_choice a[] = {{0, 100, 1.0}, {1, 50, 2.0}};
    kiln_budget_choice b[] = {{0, 70, 1.0}};
    kiln_budget_item it[] = {{a, 2}, {b, 1}};
    size_t pick[2];
    kiln_budget_result r;
    kiln_err err = {{0}};
    assert_int_equal(kiln_budget_solve(it, 2, 119, 0, pick, &r, &err), -1);
    assert_non_null(strstr(err.msg, "budget 119 bytes is below the smallest achievable, 120 bytes"));
    assert_int_equal(r.min_bytes, 120);
    assert_int_equal(kiln_budget_solve(it, 2, 120, 0, pick, &r, &err), 0);
    assert_int_equal(pick[0], 1);
    assert_int_equal(r.bytes, 120);
    kiln_budget_choice bad[] = {{0, 1, NAN}};
    kiln_budget_item itb[] = {{bad, 1}};
    assert_int_equal(kiln_budget_solve(itb, 1, 10, 0, pick, &r, &err), -1);
    assert_non_null(strstr(err.msg, "not finite"));
}

/* Identical items and equal-dkld choices: the same picks every time, the
 * lower choice index on a tie of bytes and dkld, and the earlier item
 * upgraded first when only one can be. */
static void ties_are_deterministic(void **state) {
    (void)state;
    kiln_budget_choice c[] = {{7, 10, 5.0}, {8, 20, 1.0}, {9, 20, 1.0}};
    kiln_budget_item it[] = {{c, 3}, {c, 3}, {c, 3}};
    size_t pick[3], again[3];
    kiln_budget_result r;
    kiln_err err = {{0}};
    assert_int_equal(kiln_budget_solve(it, 3, 40, 0, pick, &r, &err), 0);
    assert_int_equal(pick[0], 1);
    assert_int_equal(pick[1], 0);
    assert_int_equal(pick[2], 0);
    for (int k = 0; k < 5; k++) {
        assert_int_equal(kiln_budget_solve(it, 3, 40, 0, again, &r, &err), 0);
        assert_memory_equal(pick, again, sizeof pick);
    }
}

/* Odd tensor sizes (padding), a string key, an alignment of 64: the size
 * computed before writing is the written file's. */
static void writer_file_size(void **state) {
    (void)state;
    kiln_err err = {{0}};
    const char *path = kiln_test_tmp_path("size.gguf");
    kiln_write_opts wo = {.force = true};
    kiln_gguf_writer *w = kiln_writer_new(path, &wo, &err);
    assert_non_null(w);
    assert_int_equal(kiln_writer_set_str(w, "general.name", "size test", &err), 0);
    assert_int_equal(kiln_writer_set_u32(w, "general.alignment", 64, &err), 0);
    int64_t a[4] = {3, 1, 1, 1}, b[4] = {256, 5, 1, 1};
    assert_int_equal(kiln_writer_add_tensor(w, "a", KILN_F32, 1, a, &err), 0);
    assert_int_equal(kiln_writer_add_tensor(w, "bb.weight", KILN_Q4_K, 2, b, &err), 0);
    uint64_t size = 0, again = 0;
    if (kiln_writer_file_size(w, &size, &err)) fail_msg("%s", err.msg);
    assert_int_equal(kiln_writer_file_size(w, &again, &err), 0);
    assert_int_equal(size, again);
    if (kiln_writer_begin(w, &err)) fail_msg("%s", err.msg);
    float x[3] = {1, 2, 3};
    uint8_t q[5 * 144] = {0};
    assert_int_equal(kiln_writer_write(w, x, sizeof x, &err), 0);
    assert_int_equal(kiln_writer_write(w, q, sizeof q, &err), 0);
    if (kiln_writer_finish(w, &err)) fail_msg("%s", err.msg);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((uint64_t)st.st_size, size);
    assert_int_equal(size % 64, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_brute_force), cmocka_unit_test(greedy_alone_is_wrong),
        cmocka_unit_test(below_smallest),      cmocka_unit_test(ties_are_deterministic),          cmocka_unit_test(writer_file_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
