/* tests/test_quant_iq3.c - IQ3_XXS and IQ3_S and their Q8_K products
 * against ggml's own output in tests/fixtures/quant_iq3/vectors/
 * (gen_vectors.c there, linked to llama.cpp's ggml, wrote it; REGEN.md has
 * the commands):
 *
 *  - kiln's quantization of llama.cpp's three source tensors
 *    (../shared/golden/quant/SRC.f32) and of the fixture's edge rows (an
 *    all-zero super-block, zero groups of 32 - after which ggml's IQ3_S
 *    writes the later groups one slot early -, a group under IQ3_XXS's
 *    1e-8 threshold, tiny values, an outlier, negatives, imatrix zeros
 *    over a group), with and without the imatrix, is ggml_quantize_chunk's
 *    bytes, byte for byte, at every SIMD level (the neighbour scan has
 *    AVX2 and AVX-512 versions);
 *  - the SIMD levels' searches agree on many more (random) blocks;
 *  - kiln's dequantization of ggml's blocks is ggml's, bit for bit;
 *  - the dot products of a quantized tensor and of random blocks, alone
 *    and through kiln_matmul's table at every SIMD level, are ggml-cpu's
 *    vec_dot bits (its AVX2 branches).
 * The fixtures' whole files, logits and perplexity: tests/e2e/quant_iq3.sh. */
#include "shared.h"
#include "quant_fixture.h"
#include "simd_levels.h"

#include "../codec/blocks.h"
#include "../codec/codec.h"
#include "../codec/quants.h"
#include "../core/types.h"
#include "../runtime/matmul.h"
#include "../runtime/vecdot.h"

#define VEC "tests/fixtures/quant_iq3/vectors/"

static const qf_src SRCS[] = {{"blk.0.attn_q.weight", 128, 256, true},
                           {"blk.1.ffn_down.weight", 64, 512, true},
                           {"blk.2.ffn_up.weight", 128, 256, true},
                           {"edge", 6, 512, false}};

typedef struct qtype {
    uint32_t type;
    const char *name;
} qtype;

static const qtype TYPES[] = {{KILN_IQ3_XXS, "IQ3_XXS"}, {KILN_IQ3_S, "IQ3_S"}};

/* Quantization bytes and dequantization bits at this case's SIMD level. */
static void test_codec_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    SKIP_WITHOUT_SHARED();
    /* without an imatrix ggml's row reference gives the same bytes */
    static const qf_codec_type CODEC[] = {{KILN_IQ3_XXS, 0, kiln_quantize_row_iq3_xxs_ref},
                                          {KILN_IQ3_S, 0, kiln_quantize_row_iq3_s_ref}};
    assert_int_equal(qf_codec_suite(kiln_simd_name(lvl), VEC, SRCS, sizeof SRCS / sizeof *SRCS, CODEC, 2, true), 16);
}

/* The edge rows' corner cases are really in ggml's bytes, so a quantizer
 * that missed one would fail the comparison above rather than pass it by
 * luck: the all-zero super-block is all zero bytes; IQ3_S's zero group
 * (row 1, group 1) leaves the last group's slots of grid indices and
 * signs empty while its scale and high bits stay in place; IQ3_XXS's
 * group under 1e-8 (row 2, group 2) stores a zero word. */
static void test_edge_cases_present(void **state) {
    (void)state;
    size_t len;
    kiln_block_iq3_s *s = qf_load(&len, VEC "edge.IQ3_S.q");
    assert_int_equal(len, 12 * sizeof *s);
    static const uint8_t zero[sizeof *s];
    assert_memory_equal(&s[0], zero, sizeof *s);
    const kiln_block_iq3_s *b = &s[2];
    assert_memory_equal(b->qs + 56, zero, 8);
    assert_memory_equal(b->signs + 28, zero, 4);
    assert_int_equal(b->scales[0] >> 4, 0);          /* the zero group's scale */
    assert_int_not_equal(b->scales[3] >> 4, 0);      /* group 7 is fitted ... */
    assert_int_not_equal(memcmp(b->qs + 48, zero, 8), 0); /* ... and written one slot early */
    free(s);
    kiln_block_iq3_xxs *x = qf_load(&len, VEC "edge.IQ3_XXS.q");
    assert_int_equal(len, 12 * sizeof *x);
    static const uint8_t zx[sizeof *x];
    assert_memory_equal(&x[0], zx, sizeof *x);
    uint32_t word;
    memcpy(&word, x[4].qs + 64 + 4 * 2, 4);
    assert_int_equal(word, 0);
    assert_memory_equal(x[4].qs + 16, zx, 8);
    memcpy(&word, x[4].qs + 64 + 4 * 3, 4);
    assert_int_not_equal(word, 0);
    free(x);
}

/* The AVX2 / AVX-512 neighbour scans against the scalar one on 64 rows of
 * heavy-tailed random weights (with and without an imatrix). */
static void test_search_levels_agree(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    enum { ROWS = 64, COLS = 512 };
    float *x = malloc(sizeof(float) * ROWS * COLS), w[COLS];
    uint64_t r = 2463534242u;
    for (int i = 0; i < ROWS * COLS; i++) {
        float g = kiln_test_gaussf(&r);
        x[i] = g * g * g * 0.01f; /* heavy tails: many groups far off the grid */
    }
    for (int j = 0; j < COLS; j++) w[j] = 0.1f + (float)kiln_test_uniform(&r);
    for (size_t ti = 0; ti < sizeof TYPES / sizeof *TYPES; ti++)
        for (int imx = 0; imx < 2; imx++) {
            const size_t len = kiln_type_row_bytes(TYPES[ti].type, COLS) * ROWS;
            uint8_t *a = malloc(len), *b = malloc(len);
            kiln_err err = {{0}};
            kiln_simd_set(KILN_SIMD_SCALAR);
            assert_int_equal(kiln_quantize_rows(TYPES[ti].type, x, a, ROWS, COLS, imx ? w : NULL, &err), len);
            kiln_simd_set(lvl);
            assert_int_equal(kiln_quantize_rows(TYPES[ti].type, x, b, ROWS, COLS, imx ? w : NULL, &err), len);
            const size_t diff = qf_bytes_differ(a, b, len);
            printf("# %s %s%s: %zu of %zu bytes differ from the scalar search\n", kiln_simd_name(lvl),
                   TYPES[ti].name, imx ? ".imx" : "", diff, len);
            assert_int_equal(diff, 0);
            free(a);
            free(b);
        }
    free(x);
}

enum { NT = 8, NIN = 512, NOUT = 64 };

/* The weights of the dot products: a quantized tensor, and random bytes
 * (every grid index, sign and scale nibble: levels up to 62 meet
 * activations up to +-127 in the lifted byte products). */
static const struct {
    const char *prefix, *suffix; /* the weights: prefix TYPE suffix; ggml's dots: dot.[rand.]TYPE.f32 */
    bool random;
} DOT_WEIGHTS[] = {{"blk.1.ffn_down.weight.", ".imx.q", false}, {"rand.", ".q", true}};

/* ggml's vec_dot bits: the reference dot on ggml's activation bytes, and
 * kiln_matmul (the kernel table, activations converted by kiln) at this
 * case's SIMD level, one token at a time and all 8 at once. */
static void test_dot_vs_ggml(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    size_t alen, qlen;
    float *act = qf_load(&alen, VEC "act.f32");
    uint8_t *aq = qf_load(&qlen, VEC "act.q8_k");
    assert_int_equal(alen, sizeof(float) * NT * NIN);
    assert_int_equal(qlen, sizeof(kiln_block_q8_k) * NT * NIN / KILN_QK_K);
    int64_t total = 0;
    for (size_t ti = 0; ti < sizeof TYPES / sizeof *TYPES; ti++)
        for (size_t k = 0; k < sizeof DOT_WEIGHTS / sizeof *DOT_WEIGHTS; k++) {
            char wname[128], dname[128];
            snprintf(wname, sizeof wname, "%s%s%s", DOT_WEIGHTS[k].prefix, TYPES[ti].name, DOT_WEIGHTS[k].suffix);
            snprintf(dname, sizeof dname, "dot.%s%s.f32", DOT_WEIGHTS[k].random ? "rand." : "", TYPES[ti].name);
            total += qf_dot_case(kiln_simd_name(lvl), VEC, TYPES[ti].type, KILN_Q8_K, wname, dname, act, aq, NT,
                                 NIN, NOUT);
        }
    assert_int_equal(total, 0);
    free(aq);
    free(act);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_codec_vs_ggml),
        cmocka_unit_test(test_edge_cases_present),
        SIMD_VECTOR_TESTS(test_search_levels_agree),
        SIMD_LEVEL_TESTS(test_dot_vs_ggml),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
