/* tests/test_quant_iq1.c - IQ1_S and IQ1_M and their Q8_K products
 * against ggml's own output in tests/fixtures/quant_iq1/vectors/
 * (gen_vectors.c there, linked to llama.cpp's ggml, wrote it; REGEN.md
 * has the commands):
 *
 *  - kiln's quantization of llama.cpp's three source tensors
 *    (../shared/golden/quant/SRC.f32) and of the fixture's edge rows (an
 *    all-zero super-block, a zero group, tiny values, an outlier, imatrix
 *    zeros over a group, ties and zeros in the sort), with the imatrix and
 *    for IQ1_M without, is ggml_quantize_chunk's bytes, byte for byte, at
 *    every SIMD level (the split searches have AVX2 / AVX-512 paths);
 *  - kiln's dequantization of ggml's blocks is ggml's, bit for bit;
 *  - the dot products, alone and through kiln_matmul's table at every
 *    SIMD level (the direct kernels, 1 and 8 tokens), are ggml-cpu's
 *    vec_dot bits;
 *  - the grid, the neighbour lists and the sort are what ggml builds;
 *  - the round trip's imatrix-weighted error is bounded;
 *  - IQ1_S is refused without an imatrix (ggml asserts), IQ1_M is not.
 * Whole files, logits and perplexity: tests/e2e/quant_iq1.sh. */
#include "shared.h"
#include "quant_fixture.h"
#include "simd_levels.h"

#include "../codec/blocks.h"
#include "../codec/codec.h"
#include "../codec/iq1_search.h"
#include "../codec/iq1_tables.h"
#include "../codec/quants.h"
#include "../core/types.h"
#include "../runtime/matmul.h"
#include "../runtime/vecdot.h"

#include <math.h>

#define VEC "tests/fixtures/quant_iq1/vectors/"

static const qf_src SRCS[] = {{"blk.0.attn_q.weight", 128, 256, true},
                           {"blk.1.ffn_down.weight", 64, 512, true},
                           {"blk.2.ffn_up.weight", 128, 256, true},
                           {"edge", 6, 512, false}};

static const struct {
    uint32_t type;
    const char *name;
} TYPES[] = {{KILN_IQ1_S, "IQ1_S"}, {KILN_IQ1_M, "IQ1_M"}};

/* Quantization bytes and dequantization bits at this case's SIMD level. */
static void test_codec_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    SKIP_WITHOUT_SHARED();
    /* IQ1_S only with an imatrix (ggml asserts one); without one IQ1_M's
     * row reference is the same search */
    static const qf_codec_type CODEC[] = {{KILN_IQ1_S, 1, NULL}, {KILN_IQ1_M, 0, kiln_quantize_row_iq1_m_ref}};
    assert_int_equal(qf_codec_suite(kiln_simd_name(lvl), VEC, SRCS, sizeof SRCS / sizeof *SRCS, CODEC, 2, true), 12);
}

/* The edge rows' corner cases are really there, so that a quantizer that
 * missed one would fail the byte comparison above, not pass it by luck:
 * the all-zero super-block is stored as all zeros, the group without
 * imatrix weight has scale 0 and index 0 while its neighbours are fitted,
 * and the tiny values (below IQ1_M's threshold, above IQ1_S's) make IQ1_M
 * groups of zeros. */
static void test_edge_cases_present(void **state) {
    (void)state;
    size_t len;
    kiln_block_iq1_s *s = qf_load(&len, VEC "edge.IQ1_S.imx.q");
    assert_int_equal(len, 12 * sizeof *s);
    const kiln_block_iq1_s zero_s = {0};
    assert_memory_equal(&s[0], &zero_s, sizeof zero_s);
    /* every row's first super-block has imatrix zeros over group 1
     * (weights 32..63): row 1's (block 2) is stored as zeros, its group 0 not */
    assert_int_equal(s[2].qh[1], 0);
    assert_int_equal(s[2].qs[4] | s[2].qs[5] | s[2].qs[6] | s[2].qs[7], 0);
    assert_int_not_equal(s[2].qh[0], 0);
    kiln_block_iq1_m *m = qf_load(&len, VEC "edge.IQ1_M.imx.q");
    assert_int_equal(len, 12 * sizeof *m);
    const kiln_block_iq1_m zero_m = {0};
    assert_memory_equal(&m[0], &zero_m, sizeof zero_m);
    /* row 2 (blocks 4, 5): weights 0..63 scaled by 1e-20, under 1e-7 */
    for (int g = 0; g < 8; g++) assert_int_equal(m[4].qs[g], 0);
    assert_int_not_equal(m[4].qs[8] | m[4].qs[9] | m[4].qs[10] | m[4].qs[11], 0);
    free(m);
    free(s);
}

enum { NT = 8, NIN = 512, NOUT = 64 };

/* ggml's vec_dot bits: the reference dot on ggml's activation bytes, and
 * kiln_matmul (the kernel table, activations converted by kiln) at this
 * case's SIMD level, one token at a time and all 8 at once. */
static void test_dot_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    size_t alen, qlen;
    float *act = qf_load(&alen, VEC "act.f32");
    uint8_t *aq = qf_load(&qlen, VEC "act.q8_k");
    assert_int_equal(alen, sizeof(float) * NT * NIN);
    assert_true(qf_act_q8_k_matches(act, aq, qlen, NT, NIN)); /* the products below see ggml's activations */
    for (size_t ty = 0; ty < sizeof TYPES / sizeof *TYPES; ty++) {
        char wname[128], dname[64];
        snprintf(wname, sizeof wname, "blk.1.ffn_down.weight.%s.imx.q", TYPES[ty].name);
        snprintf(dname, sizeof dname, "dot.%s.f32", TYPES[ty].name);
        assert_int_equal(qf_dot_case(kiln_simd_name(lvl), VEC, TYPES[ty].type, KILN_Q8_K, wname, dname, act, aq, NT,
                                     NIN, NOUT),
                         0);
    }
    free(aq);
    free(act);
}

/* The grid as ggml's iq1s_grid spells its first and last entries, every
 * key on the grid found again, and every other key of levels <= 2 given a
 * neighbour list ordered by distance, whose first entries are the
 * nearest points. */
static void test_tables(void **state) {
    (void)state;
    const kiln_iq1_tables *t = kiln_iq1_search_tables();
    assert_non_null(t);
    assert_int_equal(t->grid[0], 0xffffffffffffffffull);     /* all levels 0: all -1 */
    assert_int_equal(t->grid[1], 0xffffffffffffff01ull);     /* (1, -1, ..., -1) */
    assert_int_equal(t->grid[2047], 0x0101010101010101ull); /* all levels 2: all +1 */
    int on = 0, lists = 0;
    for (uint32_t key = 0; key < KILN_IQ1_KEYS; key++) {
        int lv[8], ok = 1;
        for (int j = 0; j < 8; j++) ok &= (lv[j] = (int)(key >> 2 * j) & 3) <= 2;
        if (!ok) continue;
        if (t->map[key] >= 0) {
            for (int j = 0; j < 8; j++) assert_int_equal(t->level[t->map[key]][j], lv[j]);
            on++;
            continue;
        }
        const uint16_t *nb = t->nbr + (-t->map[key] - 1);
        assert_true(nb[0] >= 1);
        int prev = 0, distinct = 0;
        for (int k = 1; k <= nb[0]; k++) {
            int d2 = 0;
            for (int j = 0; j < 8; j++) d2 += (t->level[nb[k]][j] - lv[j]) * (t->level[nb[k]][j] - lv[j]);
            assert_true(d2 >= prev);
            distinct += k == 1 || d2 > prev;
            prev = d2;
        }
        assert_true(distinct <= 3);
        lists++;
    }
    assert_int_equal(on, KILN_IQ1_GRID);
    assert_int_equal(lists, 6561 - KILN_IQ1_GRID);
}

static int by_value(const void *a, const void *b) {
    const float *l = a, *r = b;
    return *l < *r ? -1 : *l > *r ? 1 : 0;
}

/* kiln_iq1_sort is the order glibc's qsort gives ggml's (value, index)
 * pairs, ties included (ties decide which weights share a level). */
static void test_sort_matches_qsort(void **state) {
    (void)state;
    uint32_t r = 7;
    for (int trial = 0; trial < 200; trial++) {
        const int n = trial % 2 ? 16 : 32;
        float x[32];
        struct {
            float v;
            int i;
        } pairs[32];
        for (int i = 0; i < n; i++) {
            r = r * 1664525u + 1013904223u;
            x[i] = (float)((int)(r >> 28) - 8) * (trial % 3 ? 0.25f : -0.0f); /* many ties, -0 and 0 */
            pairs[i].v = x[i];
            pairs[i].i = i;
        }
        qsort(pairs, (size_t)n, sizeof pairs[0], by_value);
        int order[32];
        kiln_iq1_sort(x, n, order);
        for (int i = 0; i < n; i++) assert_int_equal(order[i], pairs[i].i);
    }
}

/* The imatrix-weighted relative rms error of a round trip of llama.cpp's
 * ffn_down source: bounded (at 1.56 and 1.75 bits per weight about 0.41
 * and 0.35), and for IQ1_M lower with the imatrix than without it (0.50),
 * which is what the importance weights are for. */
static double weighted_rmse(uint32_t type, const float *x, const float *w, int64_t rows, int64_t cols,
                            const float *imatrix) {
    uint8_t *q = malloc(kiln_type_row_bytes(type, (uint64_t)cols) * (size_t)rows);
    float *d = malloc(sizeof(float) * (size_t)(rows * cols));
    kiln_err err = {{0}};
    assert_int_not_equal(kiln_quantize_rows(type, x, q, rows, cols, imatrix, &err), 0);
    assert_int_equal(kiln_dequantize(type, q, d, rows * cols, &err), 0);
    double e = 0, s = 0;
    for (int64_t i = 0; i < rows * cols; i++) {
        e += w[i % cols] * (double)(d[i] - x[i]) * (double)(d[i] - x[i]);
        s += w[i % cols] * (double)x[i] * (double)x[i];
    }
    free(d);
    free(q);
    return sqrt(e / s);
}

static void test_error_bounds(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    size_t xlen, wlen;
    float *x = qf_load(&xlen, "%s/golden/quant/blk.1.ffn_down.weight.f32", kiln_shared());
    float *w = qf_load(&wlen, "%s/golden/quant/blk.1.ffn_down.weight.imatrix.f32", kiln_shared());
    const double s = weighted_rmse(KILN_IQ1_S, x, w, 64, 512, w);
    const double m = weighted_rmse(KILN_IQ1_M, x, w, 64, 512, w);
    const double m0 = weighted_rmse(KILN_IQ1_M, x, w, 64, 512, NULL);
    printf("# weighted relative rmse: IQ1_S %.4f, IQ1_M %.4f (without the imatrix %.4f)\n", s, m, m0);
    assert_true(s < 0.45);
    assert_true(m < 0.40);
    assert_true(m < m0);
    free(w);
    free(x);
}

/* ggml asserts an imatrix for IQ1_S (llama-quantize would abort); kiln
 * refuses it before any work. IQ1_M quantizes without one. */
static void test_imatrix_requirement(void **state) {
    (void)state;
    float x[256], w[256];
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 17) - 8, w[i] = 1;
    uint8_t q[64];
    kiln_err err = {{0}};
    assert_int_equal(kiln_quantize_rows(KILN_IQ1_S, x, q, 1, 256, NULL, &err), 0);
    assert_non_null(strstr(err.msg, "importance matrix"));
    assert_int_equal(kiln_quantize_rows(KILN_IQ1_S, x, q, 1, 256, w, &err), sizeof(kiln_block_iq1_s));
    assert_int_equal(kiln_quantize_rows(KILN_IQ1_M, x, q, 1, 256, NULL, &err), sizeof(kiln_block_iq1_m));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_codec_vs_ggml),
        cmocka_unit_test(test_edge_cases_present),
        SIMD_LEVEL_TESTS(test_dot_vs_ggml),
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_sort_matches_qsort),
        cmocka_unit_test(test_imatrix_requirement),
        cmocka_unit_test(test_error_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
