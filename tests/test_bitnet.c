/* tests/test_bitnet.c - BitNet b1.58's pieces that the end-to-end case
 * (tests/e2e/bitnet.sh) reaches only through whole files: the convert-time
 * ternarization (convert/ternary.c) against torch's own numbers, and the
 * runtime's refusal of per-matrix weight scale tensors (runtime/bitnet.c).
 *
 * The expected bits were printed by torch 1.13 (one thread, AVX2) running
 * tests/fixtures/bitnet/ternary_truth.py, which applies llama.cpp's
 * BitnetModel.weight_quant to the weights below:
 *
 *   k = (arange(n) * 7919) % 2003 - 1001;  w = float32(k) / 1024
 *   s = w.abs().mean().clamp(min=1e-5); is = 1 / s
 *   q = (w * is).round().clamp(-1, 1) / is    (.half() for the F16 rows)
 *
 * and the counts of q > 0, q < 0, q == 0 and of zeros with the sign bit. For
 * n = 65549 and 262144 torch's float32 cascade sum differs from the
 * correctly rounded mean by an ulp (0x3efa619e, 0x3efa607b in double), so
 * those rows fail for a plain double-precision mean. */
#include "shared.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../convert/ternary.h"
#include "../core/gguf.h"
#include "../runtime/model.h"

static float *weights(int64_t n) {
    float *w = malloc((size_t)n * sizeof *w);
    assert_non_null(w);
    for (int64_t i = 0; i < n; i++) w[i] = (float)((i * 7919) % 2003 - 1001) / 1024.0f;
    return w;
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_torch_values(void **state) {
    (void)state;
    static const struct {
        int64_t n;
        uint32_t max_bits;
        int64_t pos, neg, zero, neg_zero;
        kiln_st_dtype dtype;
    } cases[] = {
        {5, 0x3f4bf332, 4, 1, 0, 0, KILN_ST_F32},
        {8, 0x3f291800, 7, 1, 0, 0, KILN_ST_F32},
        {1000, 0x3efae8b4, 379, 372, 249, 125, KILN_ST_F32},
        {32768, 0x3efa642a, 12290, 12283, 8195, 4090, KILN_ST_F32},
        {65536 + 13, 0x3efa619f, 24581, 24574, 16394, 8180, KILN_ST_BF16}, /* BF16 reaches it as f32 */
        {262144, 0x3efa607a, 98292, 98285, 65567, 32718, KILN_ST_F32},
        {1000, 0x3efae000, 379, 372, 249, 125, KILN_ST_F16},
        {65536 + 13, 0x3efa6000, 24581, 24574, 16394, 8180, KILN_ST_F16},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float *w = weights(cases[c].n);
        cv_ternarize(w, cases[c].n, cases[c].dtype);
        float max = 0.0f;
        int64_t pos = 0, neg = 0, zero = 0, neg_zero = 0;
        for (int64_t i = 0; i < cases[c].n; i++) {
            if (w[i] > 0.0f) pos++;
            else if (w[i] < 0.0f) neg++;
            else zero++, neg_zero += signbit(w[i]) != 0;
            if (fabsf(w[i]) > max) max = fabsf(w[i]);
        }
        for (int64_t i = 0; i < cases[c].n; i++) /* ternary: every value is 0 or +-max */
            if (w[i] != 0.0f && fabsf(w[i]) != max) fail_msg("case %zu: value %g at %lld is not ternary", c, w[i], (long long)i);
        if (bits(max) != cases[c].max_bits)
            fail_msg("case %zu (n %lld): |q| is 0x%08x, torch's 0x%08x", c, (long long)cases[c].n, bits(max),
                     cases[c].max_bits);
        assert_int_equal(pos, cases[c].pos);
        assert_int_equal(neg, cases[c].neg);
        assert_int_equal(zero, cases[c].zero);
        assert_int_equal(neg_zero, cases[c].neg_zero);
        free(w);
    }
}

/* Clamping, ties to even (0.5 -> 0, 1.5 -> 2 -> 1), the sign of a
 * negative zero, and the 1e-5 floor of an all-zero tensor. */
static void test_edges(void **state) {
    (void)state;
    float a[4] = {0.5f, -0.5f, 1.5f, 1.0f}; /* s 0.875: 0.57, -0.57, 1.71, 1.14 */
    cv_ternarize(a, 4, KILN_ST_F32);
    const float s = 1.0f / (1.0f / 0.875f);
    assert_true(a[0] == s && a[1] == -s && a[2] == s && a[3] == s);
    float b[4] = {0.25f, -0.125f, -0.01f, 0.0f}; /* s 0.09625: 2.6, -1.3, -0.1, 0 */
    cv_ternarize(b, 4, KILN_ST_F32);
    assert_true(b[0] > 0.0f && b[1] == -b[0] && b[2] == 0.0f && signbit(b[2]) && b[3] == 0.0f && !signbit(b[3]));
    float even[2] = {0.25f, 0.75f}; /* s 0.5: 0.5 -> 0, 1.5 -> 2 -> 1 */
    cv_ternarize(even, 2, KILN_ST_F32);
    assert_true(even[0] == 0.0f && even[1] == 0.5f);
    float z[3] = {0.0f, -0.0f, 0.0f}; /* s clamped to 1e-5 */
    cv_ternarize(z, 3, KILN_ST_F32);
    assert_true(z[0] == 0.0f && z[1] == 0.0f && signbit(z[1]) && z[2] == 0.0f);
}

/* Writes a GGUF holding only the named one-value F32 tensors. */
static void write_tensors(const char *path, const char *const *names, int n) {
    kiln_err err = {{0}};
    kiln_gguf_writer *w = kiln_writer_new(path, &(kiln_write_opts){.force = true}, &err);
    assert_non_null(w);
    const int64_t ne[1] = {1};
    for (int i = 0; i < n; i++) assert_int_equal(kiln_writer_add_tensor(w, names[i], 0 /* F32 */, 1, ne, &err), 0);
    assert_int_equal(kiln_writer_begin(w, &err), 0);
    const float one = 1.0f;
    for (int i = 0; i < n; i++) assert_int_equal(kiln_writer_write(w, &one, 4, &err), 0);
    assert_int_equal(kiln_writer_finish(w, &err), 0);
}

static void test_scale_tensors_refused(void **state) {
    (void)state;
    const char *path = kiln_test_tmp_path("bitnet-scales.gguf");
    static const char *const plain[] = {"blk.1.ffn_sub_norm.weight", "blk.0.attn_q.weight"};
    static const char *const scaled[] = {"blk.0.attn_q.weight", "blk.1.ffn_down.scale"};
    kiln_err err = {{0}};
    write_tensors(path, plain, 2);
    kiln_gguf *g = kiln_gguf_open(path, &err);
    assert_non_null(g);
    assert_int_equal(kiln_bitnet_check(g, path, 2, &err), 0);
    kiln_gguf_close(g);
    write_tensors(path, scaled, 2);
    g = kiln_gguf_open(path, &err);
    assert_non_null(g);
    assert_int_equal(kiln_bitnet_check(g, path, 2, &err), -1);
    if (!strstr(err.msg, "blk.1.ffn_down.scale") && !strstr(err.msg, "scale tensors"))
        fail_msg("unexpected message: %s", err.msg);
    kiln_gguf_close(g);
    remove(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torch_values),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_scale_tensors_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
