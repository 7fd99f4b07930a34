/* tests/test_quant_kq_b.c - what the generic codec suites do not pin down
 * for Q4_K, Q5_K and Q6_K:
 *
 *  - the shared 6-bit scale/min packing reads back what was packed, for
 *    every sub-block position;
 *  - both entry points (the reference row quantizer and kiln_quantize_X,
 *    with and without imatrix) give llama.cpp's blocks byte for byte on
 *    every golden source: the generic suite only bounds the error;
 *  - rows are independent, also for multi-super-block rows with an imatrix
 *    (each super-block must use its own columns' weights);
 *  - an all-zero super-block encodes to zero factors and decodes to zeros. */
#include "shared.h"
#include "quant_golden.h"

#include "../core/types.h"
#include "../codec/blocks.h"
#include "../codec/kscales.h"
#include "../codec/quants.h"

typedef void (*ref_fn)(const float *, void *, int64_t);
typedef size_t (*quant_fn)(const float *, void *, int64_t, int64_t, const float *);
typedef void (*deq_fn)(const void *, float *, int64_t);

typedef struct kq_case {
    const char *name;
    uint32_t type;
    ref_fn ref;
    quant_fn quant;
    deq_fn deq;
} kq_case;

static const kq_case KQ[] = {
    {"Q4_K", KILN_Q4_K, kiln_quantize_row_q4_k_ref, kiln_quantize_q4_k, kiln_dequantize_row_q4_k},
    {"Q5_K", KILN_Q5_K, kiln_quantize_row_q5_k_ref, kiln_quantize_q5_k, kiln_dequantize_row_q5_k},
    {"Q6_K", KILN_Q6_K, kiln_quantize_row_q6_k_ref, kiln_quantize_q6_k, kiln_dequantize_row_q6_k},
};
#define N_KQ (sizeof KQ / sizeof KQ[0])

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t next_u32(void) { return (uint32_t)(kiln_test_xorshift64(&rng) >> 32); }

static void test_kscales_round_trip(void **state) {
    (void)state;
    for (int t = 0; t < 2000; t++) {
        uint8_t ls[8], lm[8], packed[12];
        for (int j = 0; j < 8; j++) {
            /* the first sets hit the extremes: all 0, all 63, alternating */
            ls[j] = t == 0 ? 0 : t == 1 ? 63 : t == 2 ? (j & 1) * 63 : next_u32() % 64;
            lm[j] = t == 0 ? 0 : t == 1 ? 63 : t == 2 ? (~j & 1) * 63 : next_u32() % 64;
        }
        kiln_kscales_pack(packed, ls, lm);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            kiln_kscale_get(j, packed, &sc, &m);
            assert_int_equal(sc, ls[j]);
            assert_int_equal(m, lm[j]);
        }
    }
}

/* Both entry points against llama.cpp's bytes, every block. */
static void test_golden_bytes(void **state) {
    (void)state;
    SKIP_WITHOUT_SHARED();
    for (size_t k = 0; k < N_KQ; k++) {
        for (int s = 0; s < N_GOLDEN_SRCS; s++) {
            const golden_src *src = &GOLDEN_SRCS[s];
            float *x = golden_load(NULL, "%s.f32", src->name);
            float *w = golden_load(NULL, "%s.imatrix.f32", src->name);
            size_t qlen, ilen;
            uint8_t *want = golden_load(&qlen, "%s.%s.q", src->name, KQ[k].name);
            uint8_t *want_imx = golden_load(&ilen, "%s.%s.imx.q", src->name, KQ[k].name);
            uint8_t *got = malloc(qlen);
            assert_int_equal(qlen, ilen);

            KQ[k].ref(x, got, src->rows * src->cols);
            if (memcmp(got, want, qlen))
                fail_msg("%s %s: reference quantizer differs from llama.cpp", src->name, KQ[k].name);
            memset(got, 0, qlen);
            assert_int_equal(KQ[k].quant(x, got, src->rows, src->cols, NULL), qlen);
            if (memcmp(got, want, qlen))
                fail_msg("%s %s: kiln_quantize without imatrix differs from llama.cpp", src->name,
                         KQ[k].name);
            assert_int_equal(KQ[k].quant(x, got, src->rows, src->cols, w), qlen);
            if (memcmp(got, want_imx, qlen))
                fail_msg("%s %s: kiln_quantize with imatrix differs from llama.cpp", src->name,
                         KQ[k].name);
            free(x);
            free(w);
            free(want);
            free(want_imx);
            free(got);
        }
    }
}

/* Three rows of three super-blocks in one call equal three one-row calls,
 * with an imatrix whose columns differ wildly between super-blocks. */
static void test_rows_independent(void **state) {
    (void)state;
    enum { ROWS = 3, COLS = 3 * KILN_QK_K };
    static float x[ROWS * COLS], w[COLS];
    for (int i = 0; i < ROWS * COLS; i++) x[i] = ((int)(next_u32() % 2001) - 1000) * 1e-5f;
    for (int i = 0; i < COLS; i++) w[i] = (float)(1 + (i / KILN_QK_K) * 40 + next_u32() % 7);
    for (size_t k = 0; k < N_KQ; k++) {
        size_t row_bytes = kiln_type_row_bytes(KQ[k].type, COLS);
        uint8_t *all = malloc(row_bytes * ROWS), *one = malloc(row_bytes);
        for (int use_w = 0; use_w < 2; use_w++) {
            KQ[k].quant(x, all, ROWS, COLS, use_w ? w : NULL);
            for (int r = 0; r < ROWS; r++) {
                KQ[k].quant(x + r * COLS, one, 1, COLS, use_w ? w : NULL);
                if (memcmp(one, all + r * row_bytes, row_bytes))
                    fail_msg("%s row %d (imatrix %d) depends on its neighbours", KQ[k].name, r, use_w);
            }
        }
        free(all);
        free(one);
    }
}

static void test_zero_block(void **state) {
    (void)state;
    float x[KILN_QK_K] = {0}, w[KILN_QK_K], y[KILN_QK_K];
    for (int i = 0; i < KILN_QK_K; i++) w[i] = 1;
    uint8_t q[256];
    for (size_t k = 0; k < N_KQ; k++) {
        for (int use_w = 0; use_w < 2; use_w++) {
            memset(q, 0xAB, sizeof q);
            size_t n = KQ[k].quant(x, q, 1, KILN_QK_K, use_w ? w : NULL);
            assert_int_equal(n, kiln_type_get(KQ[k].type)->type_size);
            for (size_t i = 0; i < n; i++)
                if (q[i]) fail_msg("%s: byte %zu of an all-zero block is %d", KQ[k].name, i, q[i]);
            KQ[k].deq(q, y, KILN_QK_K);
            for (int i = 0; i < KILN_QK_K; i++) assert_true(y[i] == 0.0f);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kscales_round_trip),
        cmocka_unit_test(test_golden_bytes),
        cmocka_unit_test(test_rows_independent),
        cmocka_unit_test(test_zero_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
