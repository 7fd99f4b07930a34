/* tests/test_core_formats.c - fp16/bf16 conversions, the type table and
 * the safetensors reader.
 *
 *  - fp16: every one of the 65536 half values converts to f32 and back to
 *    itself; f32 -> f16 rounding checked at the exact halfway points
 *    against integer arithmetic; the SIMD rows equal the scalar ones.
 *  - bf16: round to nearest even at halfway points, NaN kept quiet.
 *  - safetensors: the fixtures in ../shared/models parse, and their tensor
 *    lists equal what their headers say (checked by an independent, naive
 *    scan of the JSON text); malformed headers give errors. */
#include "shared.h"
#include "simd_levels.h"

#include <math.h>
#include <unistd.h>

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/safetensors.h"
#include "../core/types.h"

static void test_fp16_all_values(void **state) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kiln_fp16_to_fp32((uint16_t)h);
        uint16_t back = kiln_fp32_to_fp16(f);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) { /* NaN: stays NaN, quieted */
            assert_true(isnan(f));
            assert_int_equal(back, h | 0x200);
        } else if (back != h) {
            fail_msg("half %04x -> %g -> %04x", h, f, back);
        }
    }
}

/* Halfway between two halves, ties go to the even mantissa. */
static void test_fp16_rounding(void **state) {
    for (uint32_t h = 0x0001; h < 0x7bff; h += 37) {
        double lo = kiln_fp16_to_fp32((uint16_t)h), hi = kiln_fp16_to_fp32((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2);
        if ((double)mid != (lo + hi) / 2) continue; /* not representable in f32 */
        uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        assert_int_equal(kiln_fp32_to_fp16(mid), want);
        assert_int_equal(kiln_fp32_to_fp16(nextafterf(mid, 0)), h);
        assert_int_equal(kiln_fp32_to_fp16(nextafterf(mid, INFINITY)), h + 1);
    }
    assert_int_equal(kiln_fp32_to_fp16(65519.0f), 0x7bff);
    assert_int_equal(kiln_fp32_to_fp16(65520.0f), 0x7c00);
    assert_int_equal(kiln_fp32_to_fp16(-1e10f), 0xfc00);
    assert_int_equal(kiln_fp32_to_fp16(1e-8f), 0x0000);   /* below half the smallest subnormal */
    assert_int_equal(kiln_fp32_to_fp16(6e-8f), 0x0001);   /* rounds up to the smallest subnormal */
}

static void test_bf16(void **state) {
    assert_int_equal(kiln_fp32_to_bf16(kiln_bits_f32(0x3f808000)), 0x3f80); /* tie, even stays */
    assert_int_equal(kiln_fp32_to_bf16(kiln_bits_f32(0x3f818000)), 0x3f82); /* tie, odd rounds up */
    assert_int_equal(kiln_fp32_to_bf16(kiln_bits_f32(0x3f808001)), 0x3f81);
    assert_int_equal(kiln_fp32_to_bf16(kiln_bits_f32(0x7f800001)), 0x7fc0); /* sNaN quieted */
    assert_true(kiln_bf16_to_fp32(0x3f80) == 1.0f);
}

static void test_rows_simd_equal_scalar(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    enum { N = 4099 };
    float *src = malloc(N * 4), *out0 = malloc(N * 4), *out1 = malloc(N * 4);
    uint16_t *h0 = malloc(N * 2), *h1 = malloc(N * 2);
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        src[i] = kiln_bits_f32(x); /* every bit pattern class: NaN, inf, subnormal */
    }
    for (int kind = 0; kind < 2; kind++) {
        kiln_simd_set(KILN_SIMD_SCALAR);
        if (kind == 0) kiln_fp32_to_fp16_row(src, h0, N); else kiln_fp32_to_bf16_row(src, h0, N);
        if (kind == 0) kiln_fp16_to_fp32_row(h0, out0, N); else kiln_bf16_to_fp32_row(h0, out0, N);
        kiln_simd_set(lvl);
        if (kind == 0) kiln_fp32_to_fp16_row(src, h1, N); else kiln_fp32_to_bf16_row(src, h1, N);
        assert_memory_equal(h0, h1, N * 2);
        if (kind == 0) kiln_fp16_to_fp32_row(h0, out1, N); else kiln_bf16_to_fp32_row(h0, out1, N);
        assert_memory_equal(out0, out1, N * 4);
    }
    free(src); free(out0); free(out1); free(h0); free(h1);
}

/* KILN_SIMD caps kiln_simd_set() too, so that KILN_SIMD=avx2 runs the
 * suites as an AVX2 machine would (the per-level cases above skip). */
static void test_simd_cap_holds_for_set(void **state) {
    const char *old = getenv("KILN_SIMD");
    char saved[32] = "";
    if (old) snprintf(saved, sizeof saved, "%s", old);
    assert_int_equal(setenv("KILN_SIMD", "scalar", 1), 0);
    kiln_simd_set(KILN_SIMD_AVX512);
    const kiln_simd_level capped = kiln_simd();
    if (old) setenv("KILN_SIMD", saved, 1);
    else unsetenv("KILN_SIMD");
    kiln_simd_set(KILN_SIMD_AVX512);
    assert_int_equal(capped, KILN_SIMD_SCALAR);
}

static void test_type_table(void **state) {
    assert_int_equal(kiln_type_get(KILN_Q8_0)->type_size, 34);
    assert_int_equal(kiln_type_get(KILN_Q4_K)->type_size, 144);
    assert_int_equal(kiln_type_get(KILN_Q2_K)->type_size, 84);
    assert_int_equal(kiln_type_get(KILN_IQ2_XXS)->type_size, 66);
    assert_null(kiln_type_get(4));
    assert_null(kiln_type_get(31));
    assert_null(kiln_type_get(1000));
    assert_int_equal(kiln_type_from_name("q4_k"), KILN_Q4_K);
    assert_int_equal(kiln_type_from_name("nope"), -1);
}

/* Naive independent count of tensors in a safetensors header: entries
 * with a "data_offsets" key. */
static int count_header_tensors(const char *path) {
    FILE *f = fopen(path, "rb");
    uint64_t n;
    assert_int_equal(fread(&n, 8, 1, f), 1);
    char *h = malloc(n + 1);
    assert_int_equal(fread(h, 1, n, f), n);
    h[n] = 0;
    fclose(f);
    int c = 0;
    for (char *p = h; (p = strstr(p, "data_offsets")); p++) c++;
    free(h);
    return c;
}

static void test_fixtures_parse(void **state) {
    SKIP_WITHOUT_SHARED();
    const char *models[] = {"models/llama", "models/mixtral", "models/qwen2"};
    for (int m = 0; m < 3; m++) {
        kiln_err err;
        kiln_st *st = kiln_st_open(kiln_shared_path(models[m]), &err);
        if (!st) fail_msg("%s", err.msg);
        int expected = 0;
        for (uint32_t f = 0; f < st->n_files; f++) expected += count_header_tensors(st->files[f].path);
        assert_int_equal(st->n_tensors, (uint64_t)expected);
        for (uint64_t i = 0; i < st->n_tensors; i++) {
            const kiln_st_tensor *t = &st->tensors[i];
            assert_ptr_equal(kiln_st_find(st, t->name), t);
            assert_int_equal(t->nbytes, (uint64_t)t->nelements * kiln_st_dtype_size(t->dtype));
        }
        kiln_st_close(st);
    }
    /* the sharded llama index: 2 files, and its tensor is where the map says */
    kiln_err err;
    kiln_st *st = kiln_st_open(kiln_shared_path("models/llama/model.safetensors.index.json"), &err);
    assert_non_null(st);
    assert_int_equal(st->n_files, 2);
    const kiln_st_tensor *t = kiln_st_find(st, "lm_head.weight");
    assert_non_null(t);
    assert_non_null(strstr(st->files[t->file].path, "model-00002-of-00002"));
    assert_int_equal(t->dtype, KILN_ST_BF16);
    assert_int_equal(t->shape[0], 1024);
    assert_int_equal(t->shape[1], 256);
    kiln_st_close(st);
}

static void write_st(const char *path, const char *json, uint64_t data_len) {
    FILE *f = fopen(path, "wb");
    uint64_t n = strlen(json);
    fwrite(&n, 8, 1, f);
    fwrite(json, 1, n, f);
    for (uint64_t i = 0; i < data_len; i++) fputc(0, f);
    fclose(f);
}

static void test_malformed_safetensors(void **state) {
    char path[512];
    snprintf(path, sizeof path, "%s/bad.safetensors", kiln_test_tmpdir());
    struct { const char *json; uint64_t data; const char *expect; } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, NULL},
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unknown dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "needs 12"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "past the end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlaps"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,8]}}", 8, "shape[0]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "data_offsets"},
        {"{\"a\":", 0, "invalid JSON"},
        {"[1,2]", 0, "not a JSON object"},
        {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,8]}}", 8, "overflow"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        write_st(path, cases[c].json, cases[c].data);
        kiln_err err = {{0}};
        kiln_st *st = kiln_st_open(path, &err);
        if (cases[c].expect) {
            if (st) fail_msg("case %zu parsed", c);
            if (!strstr(err.msg, cases[c].expect)) fail_msg("case %zu: '%s' lacks '%s'", c, err.msg, cases[c].expect);
            assert_non_null(strstr(err.msg, "bad.safetensors"));
        } else {
            if (!st) fail_msg("case %zu: %s", c, err.msg);
            kiln_st_close(st);
        }
    }
    /* a file shorter than its header length */
    FILE *f = fopen(path, "wb");
    uint64_t n = 1000;
    fwrite(&n, 8, 1, f);
    fclose(f);
    kiln_err err;
    assert_null(kiln_st_open(path, &err));
    assert_non_null(strstr(err.msg, "header length at offset 0"));
}

static void test_f8(void **state) {
    /* E4M3: 0x38 = 0.0111.000 -> 2^(7-7) = 1.0; 0x3c -> 1.5; 0x01 -> 2^-9;
     * 0x7e -> 448 (max); 0x7f NaN. E5M2: 0x3c -> 1.0 */
    uint8_t e4[6] = {0x38, 0x3c, 0x01, 0x7e, 0x7f, 0xb8};
    float out[6];
    assert_int_equal(kiln_st_to_f32(KILN_ST_F8_E4M3, e4, out, 6), 0);
    assert_true(out[0] == 1.0f);
    assert_true(out[1] == 1.5f);
    assert_true(out[2] == ldexpf(1, -9));
    assert_true(out[3] == 448.0f);
    assert_true(isnan(out[4]));
    assert_true(out[5] == -1.0f);
    uint8_t e5[2] = {0x3c, 0x7c};
    assert_int_equal(kiln_st_to_f32(KILN_ST_F8_E5M2, e5, out, 2), 0);
    assert_true(out[0] == 1.0f);
    assert_true(isinf(out[1]));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_all_values),
        cmocka_unit_test(test_fp16_rounding),
        cmocka_unit_test(test_bf16),
        SIMD_VECTOR_TESTS(test_rows_simd_equal_scalar),
        cmocka_unit_test(test_simd_cap_holds_for_set),
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_fixtures_parse),
        cmocka_unit_test(test_malformed_safetensors),
        cmocka_unit_test(test_f8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
