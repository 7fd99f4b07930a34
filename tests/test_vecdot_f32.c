/* tests/test_vecdot_f32.c - ggml_vec_dot_f32's order for rows whose length
 * is no multiple of 64, against libggml-cpu's own function
 * (tests/fixtures/deepseek2_lite/vec_dot_f32.bin, gen_vec_dot_f32.py there;
 * REGEN.md has the command), at every SIMD level.
 *
 * The reference build (GCC -O3 -march=native, AVX-512) sums the leftovers
 * past the 64-wide blocks with vectorised in-order reductions of rounded
 * products for their whole 8s and fuses only the last n % 8 into fmaf
 * (runtime/vecdot.h, kiln_vec_dot_f32_tail). kiln had them all unfused in
 * kiln_vec_dot_f32 (attention scores, deepseek2's per-head k_b) and all
 * fused in the F32 vec_dot kernels (MoE experts, one-token products),
 * which made DeepSeek-V2-Lite's 32-wide experts miss llama.cpp's logits.
 * Row lengths 5 to 130: leftovers below 8, of whole 8s, of 16s plus a
 * rest, and none (64). Every path that takes ggml_vec_dot_f32's order
 * must give its float, bit for bit: kiln_vec_dot_f32, its _rows form, and
 * kiln_fgemm_ggml's vec kernel for experts (vec_only) and for one token. */
#include "shared.h"
#include "simd_levels.h"

#include "../core/types.h"
#include "../runtime/ops.h"
#include "../runtime/vecdot.h"

#define VECTORS "tests/fixtures/deepseek2_lite/vec_dot_f32.bin"

typedef struct dot_case {
    int32_t n, rows, tokens;
    const float *w, *x, *want; /* [rows][n], [tokens][n], [tokens][rows] */
} dot_case;

/* The cases of VECTORS (buf keeps them alive); returns their count. */
static int load_cases(void **buf, dot_case *cases, int max) {
    size_t len = 0;
    uint8_t *p = kiln_test_read_file(VECTORS, &len);
    if (!p) fail_msg("%s: missing", VECTORS);
    *buf = p;
    int n_cases = 0;
    for (size_t off = 0; off < len && n_cases < max; n_cases++) {
        dot_case *c = &cases[n_cases];
        if (len - off < 12) fail_msg("%s: truncated header at %zu", VECTORS, off);
        memcpy(&c->n, p + off, 4);
        memcpy(&c->rows, p + off + 4, 4);
        memcpy(&c->tokens, p + off + 8, 4);
        off += 12;
        const size_t floats = (size_t)c->rows * (size_t)c->n + (size_t)c->tokens * (size_t)c->n +
                              (size_t)c->tokens * (size_t)c->rows;
        if (c->n <= 0 || c->rows <= 0 || c->tokens <= 0 || len - off < floats * 4)
            fail_msg("%s: bad case at %zu", VECTORS, off);
        c->w = (const float *)(p + off);
        c->x = c->w + (size_t)c->rows * (size_t)c->n;
        c->want = c->x + (size_t)c->tokens * (size_t)c->n;
        off += floats * 4;
    }
    return n_cases;
}

/* How many of the rows x tokens outputs y[t][r] differ from want's bits. */
static int mismatches(const float *y, const float *want, int64_t count) {
    int bad = 0;
    for (int64_t i = 0; i < count; i++) bad += memcmp(&y[i], &want[i], sizeof(float)) != 0;
    return bad;
}

static void test_vec_dot_f32(void **state) {
    simd_level_enter(state);
    void *buf = NULL;
    dot_case cases[32];
    const int n_cases = load_cases(&buf, cases, 32);
    assert_true(n_cases >= 16);
    int leftovers_seen[3] = {0}; /* below 8 only, 8s only, both */
    for (int k = 0; k < n_cases; k++) {
        const dot_case *c = &cases[k];
        const int64_t left = c->n % 64, count = (int64_t)c->rows * c->tokens;
        leftovers_seen[left >= 8 && left % 8 ? 2 : left >= 8 ? 1 : 0]++;
        float *y = calloc((size_t)count, sizeof *y);
        assert_non_null(y);
        for (int t = 0; t < c->tokens; t++)
            for (int r = 0; r < c->rows; r++)
                y[t * c->rows + r] = kiln_vec_dot_f32(c->w + (int64_t)r * c->n, c->x + (int64_t)t * c->n, c->n);
        if (mismatches(y, c->want, count)) fail_msg("n %d: kiln_vec_dot_f32 differs from ggml's", c->n);
        for (int t = 0; t < c->tokens; t++)
            kiln_vec_dot_f32_rows(c->x + (int64_t)t * c->n, c->w, c->n, c->rows, c->n, y + t * c->rows);
        if (mismatches(y, c->want, count)) fail_msg("n %d: kiln_vec_dot_f32_rows differs from ggml's", c->n);
        /* the expert kernel (ggml_mul_mat_id: vec_dot for every token) */
        memset(y, 0, (size_t)count * sizeof *y);
        assert_int_equal(kiln_fgemm_ggml(KILN_F32, c->w, c->n, c->rows, c->x, c->tokens, y, true), 0);
        if (mismatches(y, c->want, count)) fail_msg("n %d: the F32 expert product differs from ggml's", c->n);
        /* one token at a time: llamafile declines one column */
        for (int t = 0; t < c->tokens; t++)
            assert_int_equal(kiln_fgemm_ggml(KILN_F32, c->w, c->n, c->rows, c->x + (int64_t)t * c->n, 1,
                                             y + t * c->rows, false),
                             0);
        if (mismatches(y, c->want, count)) fail_msg("n %d: the one-token F32 product differs from ggml's", c->n);
        free(y);
    }
    for (int i = 0; i < 3; i++) assert_true(leftovers_seen[i] > 0);
    free(buf);
}

/* The vectors tell the three orders apart: neither all-unfused nor
 * all-fused leftovers give ggml's floats (so the test above can fail). */
static void test_orders_differ(void **state) {
    (void)state;
    void *buf = NULL;
    dot_case cases[32];
    const int n_cases = load_cases(&buf, cases, 32);
    int unfused_bad = 0, fused_bad = 0;
    for (int k = 0; k < n_cases; k++) {
        const dot_case *c = &cases[k];
        const int64_t np = c->n & ~(int64_t)63;
        for (int t = 0; t < c->tokens; t++)
            for (int r = 0; r < c->rows; r++) {
                const float *w = c->w + (int64_t)r * c->n, *x = c->x + (int64_t)t * c->n;
                float unfused = kiln_vec_dot_f32(w, x, np), fused = unfused;
                for (int64_t i = np; i < c->n; i++) {
                    unfused += w[i] * x[i];
                    fused = fmaf(w[i], x[i], fused);
                }
                const float want = c->want[t * c->rows + r];
                unfused_bad += memcmp(&unfused, &want, sizeof want) != 0;
                fused_bad += memcmp(&fused, &want, sizeof want) != 0;
            }
    }
    assert_true(unfused_bad > 0);
    assert_true(fused_bad > 0);
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_vec_dot_f32),
        cmocka_unit_test(test_orders_differ),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
