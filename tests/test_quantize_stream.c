/* tests/test_quantize_stream.c - kiln_quantize_tensor_from(), the path
 * `kiln quantize` takes from a GGUF whose weights are not f32: each chunk
 * of rows is converted to f32 by the thread that quantizes it. Its bytes
 * must be those of converting the whole tensor first and calling
 * kiln_quantize_tensor() (the path it replaced), for every source type the
 * tool reads (F16, BF16, a quantized type when requantizing), for target
 * types with and without importance weights, per expert, at 1 and 2
 * threads; and its refusals must name the same row and column. */
#include "shared.h"

#include "../codec/codec.h"
#include "../core/imatrix_file.h"
#include "../core/types.h"
#include "../quantize/quantize_model.h"

#include <omp.h>

enum { NE0 = 512, NROWS = 300, NEXP = 2 };

/* Heavy-tailed weights for NEXP experts of NROWS rows, stored as src_type
 * (its bytes in *src, malloc'd) and read back as f32 (*ref): what the old
 * path quantized. */
static void make_source(uint32_t src_type, uint8_t **src, float **ref, uint64_t seed) {
    const int64_t rows = (int64_t)NROWS * NEXP;
    float *x = malloc((size_t)(rows * NE0) * sizeof(float));
    assert_non_null(x);
    for (int64_t i = 0; i < rows * NE0; i++) x[i] = kiln_test_heavy(&seed);
    uint64_t row_bytes = kiln_type_row_bytes(src_type, NE0);
    *src = malloc(row_bytes * (uint64_t)rows);
    *ref = malloc((size_t)(rows * NE0) * sizeof(float));
    assert_non_null(*src);
    assert_non_null(*ref);
    kiln_err err = {{0}};
    assert_int_equal(kiln_quantize_rows(src_type, x, *src, rows, NE0, NULL, &err), row_bytes * (uint64_t)rows);
    const kiln_codec *c = kiln_codec_get(src_type);
    for (int64_t r = 0; r < rows; r++) c->dequantize_row(*src + (uint64_t)r * row_bytes, *ref + r * NE0, NE0);
    free(x);
}

/* An imatrix entry for the NEXP experts, with a different spread of
 * column weights per expert (so using the wrong slice would show). */
static kiln_imatrix *make_imatrix(void) {
    kiln_imatrix *im = kiln_imatrix_new();
    assert_non_null(im);
    kiln_err err = {{0}};
    kiln_imatrix_entry *e = kiln_imatrix_add(im, "w", NE0, NEXP, false, &err);
    assert_non_null(e);
    uint64_t seed = 99;
    for (int64_t i = 0; i < (int64_t)NE0 * NEXP; i++) {
        double u = kiln_test_uniform(&seed);
        e->in_sum2[i] = (float)(u * u * (i >= NE0 ? 40.0 : 3.0));
    }
    for (int k = 0; k < NEXP; k++) e->counts[k] = 17.0f;
    return im;
}

static void fused_equals_convert_first(void **state) {
    (void)state;
    const uint32_t sources[] = {KILN_F16, KILN_BF16, KILN_Q8_0};
    const uint32_t targets[] = {KILN_Q8_0, KILN_Q4_K, KILN_Q2_K, KILN_IQ2_XXS, KILN_IQ4_XS, KILN_F16, KILN_F32};
    kiln_imatrix *im = make_imatrix();
    const kiln_imatrix_entry *e = kiln_imatrix_find(im, "w");
    const int64_t ne[4] = {NE0, NROWS, NEXP, 1};
    int max_threads = omp_get_max_threads();
    for (size_t si = 0; si < sizeof sources / sizeof *sources; si++) {
        uint8_t *src;
        float *ref;
        make_source(sources[si], &src, &ref, 7 + si);
        for (size_t ti = 0; ti < sizeof targets / sizeof *targets; ti++) {
            const uint32_t t = targets[ti];
            const bool weighted = t == KILN_Q2_K || t == KILN_IQ2_XXS || t == KILN_IQ4_XS;
            const uint64_t bytes = kiln_type_row_bytes(t, NE0) * (uint64_t)NROWS * NEXP;
            uint8_t *want = malloc(bytes), *got = malloc(bytes);
            assert_non_null(want);
            assert_non_null(got);
            kiln_err err = {{0}};
            int64_t zw = -1, zg = -1;
            omp_set_num_threads(1);
            assert_int_equal(kiln_quantize_tensor(t, ref, want, ne, weighted ? e : NULL, &zw, &err), (int64_t)bytes);
            for (int threads = 1; threads <= 2; threads++) {
                omp_set_num_threads(threads);
                memset(got, 0xa5, bytes);
                int64_t n = kiln_quantize_tensor_from(t, sources[si], src, got, ne, weighted ? e : NULL, &zg, &err);
                if (n < 0) fail_msg("%s from %s: %s", kiln_type_name(t), kiln_type_name(sources[si]), err.msg);
                assert_int_equal(n, (int64_t)bytes);
                if (memcmp(want, got, bytes))
                    fail_msg("%s from %s, %d thread(s): bytes differ from converting first", kiln_type_name(t),
                             kiln_type_name(sources[si]), threads);
                assert_int_equal(zg, zw);
            }
            free(want);
            free(got);
        }
        free(src);
        free(ref);
    }
    omp_set_num_threads(max_threads);
    kiln_imatrix_free(im);
}

static void refusals_name_the_same_place(void **state) {
    (void)state;
    uint8_t *src;
    float *ref;
    make_source(KILN_F16, &src, &ref, 3);
    /* a NaN in expert 1, row 123, column 45 of an F16 source */
    const int64_t at = ((int64_t)NROWS + 123) * NE0 + 45;
    uint16_t nan16 = 0x7e00;
    memcpy(src + at * 2, &nan16, 2);
    ref[at] = NAN;
    const int64_t ne[4] = {NE0, NROWS, NEXP, 1};
    uint8_t *out = malloc(kiln_type_row_bytes(KILN_Q4_K, NE0) * (uint64_t)NROWS * NEXP);
    assert_non_null(out);
    kiln_err want = {{0}}, got = {{0}};
    assert_int_equal(kiln_quantize_tensor(KILN_Q4_K, ref, out, ne, NULL, NULL, &want), -1);
    assert_int_equal(kiln_quantize_tensor_from(KILN_Q4_K, KILN_F16, src, out, ne, NULL, NULL, &got), -1);
    assert_string_equal(got.msg, want.msg);
    assert_non_null(strstr(got.msg, "expert 1: row 123 column 45 is NaN"));
    /* a source type whose blocks do not divide the row is refused, not read past */
    const int64_t odd[4] = {NE0 + 32, 4, 1, 1};
    assert_int_equal(kiln_quantize_tensor_from(KILN_Q8_0, KILN_Q4_K, src, out, odd, NULL, NULL, &got), -1);
    assert_non_null(strstr(got.msg, "cannot read Q4_K rows"));
    free(out);
    free(src);
    free(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fused_equals_convert_first),
        cmocka_unit_test(refusals_name_the_same_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
