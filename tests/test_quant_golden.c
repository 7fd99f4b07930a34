/* tests/test_quant_golden.c - every codec against llama.cpp's own vectors
 * in ../shared/golden/quant/ (README section 7), one test per type:
 *
 *  1. dequantizing llama.cpp's blocks equals llama.cpp's dequantization
 *     bit for bit (with and without imatrix);
 *  2. kiln's quantization of the same source rows has rmse (and, with the
 *     imatrix, weighted rmse) no worse than llama.cpp's: <= 1.00x + 1e-6;
 *  3. the count of byte-identical blocks is printed, so drift from ggml's
 *     algorithm shows even when the error bound holds. */
#include "shared.h"
#include "quant_golden.h"

#include "../core/types.h"
#include "../codec/codec.h"

typedef struct type_case {
    const char *name;
    int with_plain; /* llama.cpp wrote a no-imatrix variant (all but IQ2_XXS) */
} type_case;

static const type_case CASES[] = {
    {"Q8_0", 1}, {"Q4_0", 1}, {"Q5_0", 1}, {"IQ4_NL", 1}, {"Q2_K", 1},
    {"Q3_K", 1}, {"Q4_K", 1}, {"Q5_K", 1}, {"Q6_K", 1}, {"IQ2_XXS", 0},
};

static void check_variant(const type_case *tc, const golden_src *src, int imx) {
    int type = kiln_type_from_name(tc->name);
    const kiln_codec *codec = kiln_codec_get((uint32_t)type);
    if (!codec) fail_msg("no codec for %s", tc->name);
    const char *sfx = imx ? ".imx" : "";

    size_t qlen, dlen, slen, wlen;
    uint8_t *q = golden_load(&qlen, "%s.%s%s.q", src->name, tc->name, sfx);
    float *deq = golden_load(&dlen, "%s.%s%s.deq.f32", src->name, tc->name, sfx);
    float *x = golden_load(&slen, "%s.f32", src->name);
    float *w = golden_load(&wlen, "%s.imatrix.f32", src->name);
    int64_t n = src->rows * src->cols;
    assert_int_equal(dlen, (size_t)n * 4);
    assert_int_equal(slen, (size_t)n * 4);
    size_t row_bytes = kiln_type_row_bytes((uint32_t)type, (uint64_t)src->cols);
    assert_int_equal(qlen, row_bytes * (size_t)src->rows);

    /* 1. dequantization, bit for bit */
    float *out = malloc((size_t)n * 4);
    codec->dequantize_row(q, out, n);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&out[i], &deq[i], 4)) mismatches++;
    if (mismatches)
        fail_msg("%s %s%s: %lld of %lld dequantized values differ from llama.cpp", src->name,
                 tc->name, sfx, (long long)mismatches, (long long)n);

    /* 2. quantization error against llama.cpp's */
    if (codec->quantize) {
        uint8_t *mine = malloc(qlen);
        kiln_err err = {{0}};
        size_t wrote = kiln_quantize_rows((uint32_t)type, x, mine, src->rows, src->cols,
                                          imx ? w : NULL, &err);
        if (wrote != qlen) fail_msg("%s: %s", tc->name, err.msg);
        codec->dequantize_row(mine, out, n);
        double ref_rmse = 0, ref_wrmse = 0;
        assert_int_equal(golden_index_rmse(src->name, tc->name, imx, &ref_rmse, &ref_wrmse), 0);
        double rmse = golden_rmse(x, out, src->rows, src->cols, NULL);
        double wrmse = golden_rmse(x, out, src->rows, src->cols, w);
        const kiln_type_info *ti = kiln_type_get((uint32_t)type);
        size_t nblocks = qlen / ti->type_size, same = 0;
        for (size_t b = 0; b < nblocks; b++)
            same += !memcmp(mine + b * ti->type_size, q + b * ti->type_size, ti->type_size);
        printf("# %-22s %-7s%-4s rmse %.9f (llama.cpp %.9f, %.4fx) wrmse %.9f (%.4fx) identical blocks %zu/%zu\n",
               src->name, tc->name, sfx, rmse, ref_rmse, rmse / ref_rmse, wrmse,
               wrmse / ref_wrmse, same, nblocks);
        if (rmse > ref_rmse * 1.00 + 1e-6)
            fail_msg("%s %s%s: rmse %.9g worse than llama.cpp's %.9g", src->name, tc->name, sfx,
                     rmse, ref_rmse);
        if (imx && wrmse > ref_wrmse * 1.00 + 1e-6)
            fail_msg("%s %s%s: weighted rmse %.9g worse than llama.cpp's %.9g", src->name,
                     tc->name, sfx, wrmse, ref_wrmse);
        free(mine);
    }
    free(out);
    free(q);
    free(deq);
    free(x);
    free(w);
}

static void test_type(void **state) {
    SKIP_WITHOUT_SHARED();
    const type_case *tc = *state;
    for (int s = 0; s < N_GOLDEN_SRCS; s++) {
        if (tc->with_plain) check_variant(tc, &GOLDEN_SRCS[s], 0);
        check_variant(tc, &GOLDEN_SRCS[s], 1);
    }
}

int main(void) {
    struct CMUnitTest tests[sizeof CASES / sizeof CASES[0]];
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        tests[i] = (struct CMUnitTest){CASES[i].name, test_type, NULL, NULL, (void *)&CASES[i]};
    }
    return _cmocka_run_group_tests("quant_golden", tests, sizeof CASES / sizeof CASES[0], NULL, NULL);
}
