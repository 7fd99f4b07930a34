/* tests/test_vecdot_q0.c - the 32-weight types against Q8_0 activations
 * (Q8_0, Q4_0, Q5_0, IQ4_NL) in each order llama.cpp's x86 build
 * multiplies them, against what ggml-cpu itself computed
 * (tests/fixtures/deepseek2_q0/vectors, gen_vectors.c there; REGEN.md has
 * the commands), at every SIMD level:
 *
 *  - vec_dot (one token; experts ggml does not repack): kiln_matmul_head
 *    of each token alone, and the reference qt->dot on kiln's activations;
 *  - llamafile's tinyBLAS (ggml_mul_mat of 2+ tokens, matrix not
 *    repacked): kiln_matmul_head of 5 tokens (the direct kernels) and of
 *    12 (the panels);
 *  - the repacked gemm / gemv (Q4_0 and IQ4_NL, 16 rows): kiln_matmul of 5
 *    and 12 tokens and kiln_matmul_expert of 5 (ggml_mul_mat_id of a
 *    repacked expert takes the gemv).
 *
 * Rows of 96 weights (3 blocks: IQ4_NL's vec_dot adds an odd last block
 * after its pairs), 128 (4: pairs only) and 224 (7). Every output must be
 * ggml's float, bit for bit; the deepseek2 logits
 * (tests/e2e/deepseek2_runtime.sh) check the same orders through whole
 * models. */
#include "shared.h"
#include "simd_levels.h"

#include "../core/types.h"
#include "../runtime/matmul.h"
#include "../runtime/vecdot.h"

#define VEC "tests/fixtures/deepseek2_q0/vectors/"

enum { T = 12, R = 16, NMAX = 224, T_DIRECT = 5 };

static const struct {
    uint32_t type;
    const char *name;
    bool repacked;
} TYPES[] = {{KILN_Q8_0, "Q8_0", false}, {KILN_Q4_0, "Q4_0", true}, {KILN_Q5_0, "Q5_0", false},
             {KILN_IQ4_NL, "IQ4_NL", true}};
static const int WIDTHS[] = {96, 128, 224};

/* VEC/KIND TYPE.N.EXT (kind "" or "vec." etc.), which must hold `want` bytes. */
static void *load(const char *kind, const char *type, int n, const char *ext, size_t want) {
    char path[256];
    snprintf(path, sizeof path, VEC "%s%s.%d.%s", kind, type, n, ext);
    size_t len = 0;
    void *p = kiln_test_read_file(path, &len);
    if (!p || len != want) fail_msg("%s: missing or %zu bytes, not %zu", path, len, want);
    return p;
}

/* x's first n columns of tokens [0, nt), packed. */
static float *tokens(const float *x, int n, int nt) {
    float *a = malloc(sizeof(float) * (size_t)(n * nt));
    assert_non_null(a);
    for (int t = 0; t < nt; t++) memcpy(a + t * n, x + t * NMAX, sizeof(float) * (size_t)n);
    return a;
}

/* How many of the first nt tokens' outputs differ from want's bits. */
static int mismatches(const float *y, const float *want, int nt) {
    int bad = 0;
    for (int i = 0; i < nt * R; i++) bad += memcmp(&y[i], &want[i], sizeof(float)) != 0;
    return bad;
}

typedef int (*product_fn)(uint32_t, const void *, int64_t, int64_t, const float *, int64_t, float *,
                          kiln_numeric_mode);

/* `fn` over tokens [0, nt) of x against want: the mismatch count. */
static int run(product_fn fn, uint32_t type, const void *w, int n, const float *x, int nt, const float *want) {
    float *a = tokens(x, n, nt), *y = malloc(sizeof(float) * (size_t)(R * nt));
    assert_non_null(y);
    assert_int_equal(fn(type, w, n, R, a, nt, y, KILN_NUM_GGML), 0);
    const int bad = mismatches(y, want, nt);
    free(a);
    free(y);
    return bad;
}

static void test_orders(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    size_t len;
    float *x = kiln_test_read_file(VEC "x.f32", &len);
    assert_true(x && len == sizeof(float) * T * NMAX);
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++)
        for (int wi = 0; wi < 3; wi++) {
            const int n = WIDTHS[wi];
            const uint32_t type = TYPES[ti].type;
            const char *name = TYPES[ti].name;
            const kiln_qtype *qt = kiln_qtype_get(type);
            assert_non_null(qt);
            uint8_t *w = load("", name, n, "q", (size_t)kiln_type_row_bytes(type, (uint64_t)n) * R);
            float *vec = load("vec.", name, n, "f32", sizeof(float) * T * R);
            float *tiny = load("tiny.", name, n, "f32", sizeof(float) * T * R);
            int bad = 0;
            /* vec_dot: each token alone, and the reference on kiln's activations */
            for (int t = 0; t < T; t++) bad += run(kiln_matmul_head, type, w, n, x + t * NMAX, 1, vec + t * R);
            for (int t = 0; t < T; t++) {
                kiln_block_q8_0 act[NMAX / KILN_QK];
                kiln_act_q8_0(x + t * NMAX, act, n);
                for (int r = 0; r < R; r++) {
                    const float d = qt->dot(n, w + r * kiln_type_row_bytes(type, (uint64_t)n), act);
                    bad += memcmp(&d, &vec[t * R + r], sizeof d) != 0;
                }
            }
            if (bad)
                fail_msg("%s n_in %d at %s: %d vec_dot outputs differ from ggml's", name, n, kiln_simd_name(lvl), bad);
            /* tinyBLAS: a few tokens (direct kernels), many (panels) */
            bad = run(kiln_matmul_head, type, w, n, x, T_DIRECT, tiny) +
                  run(kiln_matmul_head, type, w, n, x, T, tiny);
            if (bad)
                fail_msg("%s n_in %d at %s: %d tinyBLAS outputs differ from ggml's", name, n, kiln_simd_name(lvl), bad);
            if (TYPES[ti].repacked) {
                float *rep = load("rep.", name, n, "f32", sizeof(float) * T * R);
                bad = run(kiln_matmul, type, w, n, x, T_DIRECT, rep) + run(kiln_matmul, type, w, n, x, T, rep) +
                      run(kiln_matmul_expert, type, w, n, x, T_DIRECT, rep);
                if (bad)
                    fail_msg("%s n_in %d at %s: %d repacked outputs differ from ggml's", name, n, kiln_simd_name(lvl),
                             bad);
                free(rep);
            }
            free(w);
            free(vec);
            free(tiny);
        }
    free(x);
}

/* The orders really differ on these vectors, so each check above can
 * fail: IQ4_NL's vec_dot is not its tinyBLAS sum, and a repacked product
 * is not the plain one. */
static void test_orders_differ(void **state) {
    (void)state;
    for (int wi = 0; wi < 3; wi++) {
        const int n = WIDTHS[wi];
        float *vec = load("vec.", "IQ4_NL", n, "f32", sizeof(float) * T * R);
        float *tiny = load("tiny.", "IQ4_NL", n, "f32", sizeof(float) * T * R);
        float *rep = load("rep.", "Q4_0", n, "f32", sizeof(float) * T * R);
        float *tiny4 = load("tiny.", "Q4_0", n, "f32", sizeof(float) * T * R);
        assert_true(mismatches(vec, tiny, T) > 0);
        assert_true(mismatches(rep, tiny4, T) > 0);
        free(vec);
        free(tiny);
        free(rep);
        free(tiny4);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_orders),
        cmocka_unit_test(test_orders_differ),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
