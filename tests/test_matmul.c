/* tests/test_matmul.c - kiln_matmul in both numeric modes, for the 13
 * weight types the runtime multiplies: F32 F16 BF16 Q8_0 Q4_0 Q5_0 IQ4_NL
 * Q2_K Q3_K Q4_K Q5_K Q6_K IQ2_XXS.
 *
 * KILN_NUM_GGML is checked against a double-precision product of the
 * dequantized weights (the codecs' own dequantizers) with the dequantized
 * converted activations: what is left is float rounding of the block
 * combination, so a wrong integer anywhere shows up at once. Then every
 * SIMD level must give the scalar reference's bits, and a batch of tokens
 * the bits of one token at a time. KILN_NUM_EXACT is checked against the
 * double product of dequantized weights and raw activations. Q8_0 and
 * F32 / F16 / BF16 in KILN_NUM_GGML mode follow llama.cpp's x86 orders, which are
 * written out once more here and compared bit for bit. Needs no
 * ../shared. Each SIMD level is its own test case, skipped where the CPU
 * lacks it (tests/simd_levels.h). */
#include "shared.h"
#include "simd_levels.h"

#include <math.h>

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../codec/blocks.h"
#include "../codec/codec.h"
#include "../codec/quants.h"
#include "../runtime/matmul.h"
#include "../runtime/vecdot.h"
#include "../runtime/kernels.h"

static const uint32_t TYPES[] = {KILN_F32,  KILN_F16,  KILN_BF16, KILN_Q8_0, KILN_Q4_0,
                                 KILN_Q5_0, KILN_IQ4_NL, KILN_Q2_K, KILN_Q3_K, KILN_Q4_K,
                                 KILN_Q5_K, KILN_Q6_K, KILN_IQ2_XXS};
#define N_TYPES (sizeof TYPES / sizeof TYPES[0])

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) { return kiln_test_xorshift64(&rng); }
static float uniform(void) { return (float)((next() >> 11) * (1.0 / 9007199254740992.0)); }
static float gauss(void) { return kiln_test_gaussf(&rng); }

/* Random values with an occasional outlier, as in real activations. */
static void fill(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = scale * gauss() * (next() % 61 == 0 ? 12.0f : 1.0f);
}

/* Values of one sign and nearly one size: levels sit at the ends of
 * their range, so block sums get large (|sumi| > 2^13 for legacy blocks,
 * > 2^24 for k-quant lanes) and every rounding of the float combination
 * shows: products like (sumi * dx) * dy and sumi * (dx * dy) differ. */
static bool coherent;
static void fill_data(float *x, int64_t n, float scale) {
    if (!coherent) {
        fill(x, n, scale);
        return;
    }
    for (int64_t i = 0; i < n; i++) x[i] = scale * (1.0f + 0.05f * gauss());
}

typedef struct mat {
    uint32_t type;
    int64_t n_in, n_out, row_bytes;
    uint8_t *w;
    double *wd; /* dequantized, n_out x n_in */
} mat;

static mat make_mat(uint32_t type, int64_t n_in, int64_t n_out) {
    mat m = {type, n_in, n_out, (int64_t)kiln_type_row_bytes(type, (uint64_t)n_in), NULL, NULL};
    float *src = malloc((size_t)(n_in * n_out) * sizeof(float));
    float *imat = malloc((size_t)n_in * sizeof(float));
    float *row = malloc((size_t)n_in * sizeof(float));
    fill_data(src, n_in * n_out, 0.02f);
    for (int64_t i = 0; i < n_in; i++) imat[i] = 0.5f + uniform();
    m.w = malloc((size_t)(m.row_bytes * n_out));
    m.wd = malloc((size_t)(n_in * n_out) * sizeof(double));
    kiln_err err;
    size_t got = kiln_quantize_rows(type, src, m.w, n_out, n_in, imat, &err);
    assert_int_equal(got, (size_t)(m.row_bytes * n_out));
    for (int64_t r = 0; r < n_out; r++) {
        assert_int_equal(kiln_dequantize(type, m.w + r * m.row_bytes, row, n_in, &err), 0);
        for (int64_t i = 0; i < n_in; i++) m.wd[r * n_in + i] = row[i];
    }
    free(src);
    free(imat);
    free(row);
    return m;
}

static void free_mat(mat *m) {
    free(m->w);
    free(m->wd);
}

/* What ggml's product sees of one activation row for this weight type. */
static void ggml_activations(uint32_t type, const float *x, int64_t n, double *out) {
    float *f = malloc((size_t)n * sizeof(float));
    const kiln_qtype *qt = kiln_qtype_get(type);
    if (type == KILN_F32) {
        memcpy(f, x, (size_t)n * sizeof(float));
    } else if (type == KILN_F16) {
        for (int64_t i = 0; i < n; i++) f[i] = kiln_fp16_to_fp32(kiln_fp32_to_fp16(x[i]));
    } else if (type == KILN_BF16) {
        for (int64_t i = 0; i < n; i++) f[i] = kiln_bf16_to_fp32(kiln_fp32_to_bf16(x[i]));
    } else if (qt->act_type == KILN_Q8_0) {
        kiln_block_q8_0 *b = malloc((size_t)(n / 32) * sizeof *b);
        kiln_act_q8_0(x, b, n);
        kiln_dequantize_row_q8_0(b, f, n);
        free(b);
    } else {
        kiln_block_q8_k *b = malloc((size_t)(n / 256) * sizeof *b);
        kiln_act_q8_k(x, b, n);
        kiln_dequantize_row_q8_k(b, f, n);
        free(b);
    }
    for (int64_t i = 0; i < n; i++) out[i] = f[i];
    free(f);
}

/* |y - sum w a| <= tol * sum |w a| for every output. */
static void check_against(const mat *m, const float *x, int64_t n_tokens, const float *y,
                          kiln_numeric_mode mode, double tol) {
    double *a = malloc((size_t)m->n_in * sizeof(double));
    double worst = 0;
    for (int64_t t = 0; t < n_tokens; t++) {
        if (mode == KILN_NUM_GGML) {
            ggml_activations(m->type, x + t * m->n_in, m->n_in, a);
        } else {
            for (int64_t i = 0; i < m->n_in; i++) a[i] = x[t * m->n_in + i];
        }
        for (int64_t r = 0; r < m->n_out; r++) {
            double s = 0, mag = 0;
            for (int64_t i = 0; i < m->n_in; i++) {
                double p = m->wd[r * m->n_in + i] * a[i];
                s += p;
                mag += fabs(p);
            }
            double e = fabs((double)y[t * m->n_out + r] - s) / (mag + 1e-30);
            if (e > worst) worst = e;
            if (e > tol)
                fail_msg("%s %s: token %lld row %lld: %.9g vs %.9g (rel err %.3g > %.3g)",
                         kiln_type_name(m->type), mode == KILN_NUM_GGML ? "ggml" : "exact",
                         (long long)t, (long long)r, y[t * m->n_out + r], s, e, tol);
        }
    }
    free(a);
}

static float *run(const mat *m, const float *x, int64_t n_tokens, kiln_numeric_mode mode) {
    float *y = malloc((size_t)(n_tokens * m->n_out) * sizeof(float));
    for (int64_t i = 0; i < n_tokens * m->n_out; i++) y[i] = NAN;
    assert_int_equal(kiln_matmul(m->type, m->w, m->n_in, m->n_out, x, n_tokens, y, mode), 0);
    return y;
}

/* Sizes: rows not a multiple of the panel width, tokens that leave a
 * remainder after every token grouping, n_in over more than one k block
 * with a partial last block where the type allows it. */
static int64_t n_in_for(uint32_t type) {
    const kiln_type_info *ti = kiln_type_get(type);
    return ti->block_size == 256 ? 768 : ti->block_size == 32 ? 608 : 601;
}

static void test_ggml_mode_integer_path(void **state) {
    for (size_t i = 0; i < N_TYPES; i++) {
        mat m = make_mat(TYPES[i], n_in_for(TYPES[i]), 37);
        const int64_t T = 7;
        float *x = malloc((size_t)(T * m.n_in) * sizeof(float));
        fill(x, T * m.n_in, 1.0f);
        kiln_simd_set(KILN_SIMD_AVX512);
        float *y = run(&m, x, T, KILN_NUM_GGML);
        check_against(&m, x, T, y, KILN_NUM_GGML, 1e-5);
        free(y);
        free(x);
        free_mat(&m);
    }
}

static void test_exact_mode(void **state) {
    for (size_t i = 0; i < N_TYPES; i++) {
        mat m = make_mat(TYPES[i], n_in_for(TYPES[i]), 37);
        const int64_t T = 7;
        float *x = malloc((size_t)(T * m.n_in) * sizeof(float));
        fill(x, T * m.n_in, 1.0f);
        kiln_simd_set(KILN_SIMD_AVX512);
        float *y = run(&m, x, T, KILN_NUM_EXACT);
        check_against(&m, x, T, y, KILN_NUM_EXACT, 2e-6);
        free(y);
        free(x);
        free_mat(&m);
    }
}

/* Every SIMD level, and every way of batching tokens, gives the scalar
 * level's bits, on random and on coherent data. */
static void test_simd_and_batching_bit_exact(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    for (int pass = 0; pass < 4; pass++) {
        const int mode = pass & 1;
        coherent = pass >= 2;
        for (size_t i = 0; i < N_TYPES; i++) {
            mat m = make_mat(TYPES[i], n_in_for(TYPES[i]), 21);
            const int64_t T = 30; /* > 24: two activation blocks in the f32 path */
            float *x = malloc((size_t)(T * m.n_in) * sizeof(float));
            fill_data(x, T * m.n_in, 1.0f);
            kiln_simd_set(KILN_SIMD_SCALAR);
            float *ref = run(&m, x, T, (kiln_numeric_mode)mode);
            kiln_simd_set(lvl);
            float *y = run(&m, x, T, (kiln_numeric_mode)mode);
            for (int64_t j = 0; j < T * m.n_out; j++)
                if (memcmp(&y[j], &ref[j], 4))
                    fail_msg("%s %s at %s: output %lld is %.9g, scalar %.9g", kiln_type_name(m.type),
                             mode ? "exact" : "ggml", kiln_simd_name(lvl), (long long)j, y[j], ref[j]);
            free(y);
            /* one token at a time (F32 in GGML mode only because n_in = 601
             * is no multiple of 16: see test_float_ggml_orders); not IQ4_NL
             * in GGML mode, whose one token takes vec_dot's order and 2+
             * tokens tinyBLAS's (test_vecdot_q0.c checks both) */
            const kiln_qtype *qt = kiln_qtype_get(m.type);
            for (int64_t t = 0; t < T && (mode || !qt || !qt->dot_tiny); t += 5) {
                float *y1 = run(&m, x + t * m.n_in, 1, (kiln_numeric_mode)mode);
                assert_memory_equal(y1, ref + t * m.n_out, (size_t)m.n_out * sizeof(float));
                free(y1);
            }
            free(ref);
            free(x);
            free_mat(&m);
        }
    }
    coherent = false;
}

/* A realistic width: 8 k blocks, full panels, 3 activation blocks. */
static void test_large(void **state) {
    const uint32_t types[] = {KILN_F16, KILN_Q8_0, KILN_Q4_K, KILN_Q6_K};
    for (size_t i = 0; i < 4; i++) {
        mat m = make_mat(types[i], 2048, 48);
        const int64_t T = 50;
        float *x = malloc((size_t)(T * m.n_in) * sizeof(float));
        fill(x, T * m.n_in, 1.0f);
        for (int mode = 0; mode < 2; mode++) {
            kiln_simd_set(KILN_SIMD_AVX512);
            float *y = run(&m, x, T, (kiln_numeric_mode)mode);
            check_against(&m, x, T, y, (kiln_numeric_mode)mode, mode ? 2e-6 : 1e-5);
            kiln_simd_set(KILN_SIMD_SCALAR);
            float *ref = run(&m, x, T, (kiln_numeric_mode)mode);
            assert_memory_equal(y, ref, (size_t)(T * m.n_out) * sizeof(float));
            free(ref);
            free(y);
        }
        kiln_simd_set(KILN_SIMD_AVX512);
        free(x);
        free_mat(&m);
    }
}

/* The x86 backend's Q8_0 activations: 127 / amax and round half to even
 * (the codec's reference quantizer would give 1 for 0.5 and 3 for 2.5),
 * at this case's level. */
static void test_act_q8_0_rounding(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    float x[32] = {127.0f, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 3.5f, 0.0f, -0.0f, 126.5f};
    for (int j = 10; j < 32; j++) x[j] = (float)j * 1.75f - 30.0f;
    const int want[10] = {127, 0, 0, 2, 2, -2, 4, 0, 0, 126};
    kiln_block_q8_0 q;
    kiln_act_q8_0(x, &q, 32);
    assert_int_equal(q.d, kiln_fp32_to_fp16(1.0f));
    for (int j = 0; j < 10; j++) assert_int_equal(q.qs[j], want[j]);
    /* this level and scalar agree on arbitrary rows, zero blocks included */
    float r[4096];
    fill(r, 4096, 3.0f);
    memset(r + 64, 0, 32 * sizeof(float));
    kiln_block_q8_0 a[128], b[128];
    kiln_simd_set(KILN_SIMD_SCALAR);
    kiln_act_q8_0(r, a, 4096);
    kiln_simd_set(lvl);
    kiln_act_q8_0(r, b, 4096);
    assert_memory_equal(a, b, sizeof a);
}

/* The AVX2 unpackers give the portable code's integers for arbitrary
 * bytes (any scale field, any sign pattern), 8 blocks at a time for the
 * 32-weight formats. */
static void test_unpack_simd(void **state) {
    simd_level_enter(state);
    for (size_t i = 3; i < N_TYPES; i++) {
        const kiln_qtype *qt = kiln_qtype_get(TYPES[i]);
        const int n = qt->block == 32 ? 8 : 1;
        uint8_t raw[8 * sizeof(kiln_block_q6_k)];
        for (int rep = 0; rep < 200; rep++) {
            for (size_t j = 0; j < sizeof raw; j++) raw[j] = (uint8_t)next();
            kiln_qblock a, b;
            memset(&a, 0, sizeof a);
            memset(&b, 0, sizeof b);
            kiln_simd_set(KILN_SIMD_SCALAR);
            qt->unpack(raw, n, &a);
            kiln_simd_set(KILN_SIMD_AVX2);
            qt->unpack(raw, n, &b);
            if (memcmp(&a, &b, sizeof a)) fail_msg("%s: AVX2 unpack differs", kiln_type_name(TYPES[i]));
        }
    }
}

/* Sum of 16 lanes in the tree of gcc's _mm512_reduce_add_ps. */
static float tree16(const float *v) {
    float h[8];
    for (int i = 0; i < 8; i++) h[i] = v[i] + v[i + 8];
    return ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
}

/* Q8_0 in GGML mode has ggml's x86 AVX2 order: eight lanes of 4-weight
 * integer sums, fmaf per block, hsum_float_8. Written out here once more,
 * independently of the kernels, on coherent data (large sums, so any other
 * order shows), at every SIMD level, batched and one token at a time. */
static void test_q8_0_x86_order(void **state) {
    simd_level_enter(state);
    coherent = true;
    mat m = make_mat(KILN_Q8_0, 1024, 37);
    coherent = false;
    const int64_t T = 9, nb = m.n_in / 32;
    float *x = malloc((size_t)(T * m.n_in) * sizeof(float));
    fill(x, T * m.n_in, 1.0f);
    kiln_block_q8_0 *a = malloc((size_t)(T * nb) * sizeof *a);
    for (int64_t t = 0; t < T; t++) kiln_act_q8_0(x + t * m.n_in, a + t * nb, m.n_in);
    float *want = malloc((size_t)(T * m.n_out) * sizeof(float));
    for (int64_t t = 0; t < T; t++)
        for (int64_t r = 0; r < m.n_out; r++) {
            const kiln_block_q8_0 *w = (const kiln_block_q8_0 *)(m.w + r * m.row_bytes), *y = a + t * nb;
            float acc[8] = {0};
            for (int64_t b = 0; b < nb; b++) {
                const float d = kiln_fp16_to_fp32(w[b].d) * kiln_fp16_to_fp32(y[b].d);
                for (int l = 0; l < 8; l++) {
                    int s = 0;
                    for (int j = 0; j < 4; j++) s += w[b].qs[4 * l + j] * y[b].qs[4 * l + j];
                    acc[l] = fmaf(d, (float)s, acc[l]);
                }
            }
            want[t * m.n_out + r] = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
        }
    float *y = run(&m, x, T, KILN_NUM_GGML);
    assert_memory_equal(y, want, (size_t)(T * m.n_out) * sizeof(float));
    free(y);
    float *y1 = run(&m, x + 4 * m.n_in, 1, KILN_NUM_GGML);
    assert_memory_equal(y1, want + 4 * m.n_out, (size_t)m.n_out * sizeof(float));
    free(y1);
    free(want);
    free(a);
    free(x);
    free_mat(&m);
}

/* F32 / F16 / BF16 weights in GGML mode have the orders of llama.cpp's
 * AVX-512 build: tinyBLAS (16 lanes over k, the reduce tree) for several
 * tokens when n_in % 16 == 0 and the weight's rows are a multiple of 4
 * (tinyBLAS's smallest row tile; otherwise llamafile_sgemm declines),
 * otherwise the type's ggml_vec_dot: _f32 4 x 16 lanes over 64 values a
 * step, (a0+a2) + (a1+a3), the tree, then the leftovers as gcc compiled
 * ggml's loop (rounded products added for their whole 8s, the last n % 8
 * fused: tests/test_vecdot_f32.c holds this to libggml-cpu's own
 * function); _f16 the same blocks,
 * the leftover products added in double; _bf16 two 16-lane accumulators
 * over 32 values a step, each reduced into a double, leftovers in double.
 * The activations are first rounded to the weight's precision. Written out
 * here independently; every SIMD level must give these bits, for batches
 * of 7 and 8 tokens (token tiles of 3 leave 1 and 2) and single tokens. */
static float vec_order(uint32_t type, const float *w, const float *xt, int64_t n) {
    if (type == KILN_BF16) {
        float c[2][16] = {{0}};
        int64_t k = 0;
        for (; k + 32 <= n; k += 32)
            for (int j = 0; j < 2; j++)
                for (int l = 0; l < 16; l++) c[j][l] = fmaf(w[k + 16 * j + l], xt[k + 16 * j + l], c[j][l]);
        double s = 0;
        s += (double)tree16(c[0]);
        s += (double)tree16(c[1]);
        for (; k < n; k++) s += (double)(w[k] * xt[k]);
        return (float)s;
    }
    float a4[4][16] = {{0}}, v[16];
    const int64_t np = n / 64 * 64;
    for (int64_t k = 0; k < np; k += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) a4[j][l] = fmaf(w[k + 16 * j + l], xt[k + 16 * j + l], a4[j][l]);
    for (int l = 0; l < 16; l++) v[l] = (a4[0][l] + a4[2][l]) + (a4[1][l] + a4[3][l]);
    if (type == KILN_F16) {
        double s = tree16(v);
        for (int64_t k = np; k < n; k++) s += (double)(w[k] * xt[k]);
        return (float)s;
    }
    float s = tree16(v);
    int64_t k = np;
    for (; k < np + (n - np) / 8 * 8; k++) s += w[k] * xt[k];
    for (; k < n; k++) s = fmaf(w[k], xt[k], s);
    return s;
}

static void test_float_ggml_orders(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    const uint32_t types[] = {KILN_F32, KILN_F16, KILN_BF16};
    /* 4096: more rows than one AVX2 block of widened rows (and a partial one) */
    const int64_t sizes[] = {640, 608, 601, 48, 640, 4096}, rows[] = {24, 24, 21, 24, 21, 24};
    for (int ti = 0; ti < 3; ti++)
        for (int si = 0; si < 6; si++) {
            const uint32_t type = types[ti];
            const int64_t n = sizes[si], T = 8;
            coherent = si & 1;
            mat m = make_mat(type, n, rows[si]);
            coherent = false;
            float *W = malloc((size_t)(n * m.n_out) * sizeof(float));
            for (int64_t i = 0; i < n * m.n_out; i++) W[i] = (float)m.wd[i];
            float *x = malloc((size_t)(T * n) * sizeof(float)), *xr = malloc((size_t)(T * n) * sizeof(float));
            double *xd = malloc((size_t)n * sizeof(double));
            fill(x, T * n, 1.0f);
            for (int64_t t = 0; t < T; t++) {
                ggml_activations(type, x + t * n, n, xd);
                for (int64_t k = 0; k < n; k++) xr[t * n + k] = (float)xd[k];
            }
            float *tiny = malloc((size_t)(T * m.n_out) * sizeof(float));
            float *vec = malloc((size_t)(T * m.n_out) * sizeof(float));
            for (int64_t t = 0; t < T; t++)
                for (int64_t r = 0; r < m.n_out; r++) {
                    const float *w = W + r * n, *xt = xr + t * n;
                    float acc[16] = {0};
                    for (int64_t k = 0; k + 16 <= n; k += 16)
                        for (int l = 0; l < 16; l++) acc[l] = fmaf(w[k + l], xt[k + l], acc[l]);
                    tiny[t * m.n_out + r] = tree16(acc);
                    vec[t * m.n_out + r] = vec_order(type, w, xt, n);
                }
            const bool tinyblas = n % 16 == 0 && m.n_out % 4 == 0;
            const float *batch = tinyblas ? tiny : vec;
            for (int64_t nt = T - 1; nt <= T; nt++) {
                float *y = run(&m, x, nt, KILN_NUM_GGML);
                if (memcmp(y, batch, (size_t)(nt * m.n_out) * sizeof(float)))
                    fail_msg("%s n_in %lld, %lld tokens at %s: batch differs from the %s order",
                             kiln_type_name(type), (long long)n, (long long)nt, kiln_simd_name(lvl),
                             tinyblas ? "tinyBLAS" : "vec_dot");
                check_against(&m, x, nt, y, KILN_NUM_GGML, 1e-5);
                free(y);
            }
            for (int64_t t = 0; t < T; t += 3) {
                float *y1 = run(&m, x + t * n, 1, KILN_NUM_GGML);
                if (memcmp(y1, vec + t * m.n_out, (size_t)m.n_out * sizeof(float)))
                    fail_msg("%s n_in %lld at %s: one token differs from the vec_dot order", kiln_type_name(type),
                             (long long)n, kiln_simd_name(lvl));
                free(y1);
            }
            free(tiny);
            free(vec);
            free(x);
            free(xr);
            free(xd);
            free(W);
            free_mat(&m);
        }
}

/* A kernel buffer that cannot be had fails the product: with the k-th
 * allocation refused (k = 0, 1, ...; runtime/kernels.h's test hook),
 * every call returns -1 or gives the bits of an unhindered one, never
 * 0 with outputs left unwritten - both numeric modes, every type, decode
 * and batches, tinyBLAS's shape too. */
static void test_alloc_failure(void **state) {
    simd_level_enter(state);
    for (size_t i = 0; i < N_TYPES; i++) {
        const uint32_t type = TYPES[i];
        const bool is_float = type == KILN_F32 || type == KILN_F16 || type == KILN_BF16;
        for (int shape = 0; shape < (is_float ? 2 : 1); shape++) {
            mat m = make_mat(type, shape ? 640 : n_in_for(type), shape ? 24 : 21);
            const int64_t T = 9;
            float *x = malloc((size_t)(T * m.n_in) * sizeof(float));
            float *y = malloc((size_t)(T * m.n_out) * sizeof(float));
            fill(x, T * m.n_in, 1.0f);
            for (int mode = 0; mode < 2; mode++)
                for (int64_t nt = 1; nt <= T; nt += T - 1) {
                    float *ref = run(&m, x, nt, (kiln_numeric_mode)mode);
                    for (int k = 0; k < 6; k++) {
                        for (int64_t j = 0; j < nt * m.n_out; j++) y[j] = NAN;
                        kiln_kernel_alloc_fail_after(k);
                        const int rc = kiln_matmul(type, m.w, m.n_in, m.n_out, x, nt, y, (kiln_numeric_mode)mode);
                        kiln_kernel_alloc_fail_after(-1);
                        if (rc == 0) {
                            if (memcmp(y, ref, (size_t)(nt * m.n_out) * sizeof(float)))
                                fail_msg("%s %s, %lld tokens, allocation %d refused: returned 0 with wrong outputs",
                                         kiln_type_name(type), mode ? "exact" : "ggml", (long long)nt, k);
                        } else {
                            assert_int_equal(rc, -1);
                        }
                    }
                    /* a product that asks for a buffer must report its refusal
                     * (F32 in GGML mode, and one-token exact products on
                     * AVX-512, need none): the probe gets the refusal
                     * only if the product did not ask */
                    kiln_kernel_alloc_fail_after(0);
                    const int rc = kiln_matmul(type, m.w, m.n_in, m.n_out, x, nt, y, (kiln_numeric_mode)mode);
                    void *probe = kiln_kernel_alloc(1);
                    kiln_kernel_alloc_fail_after(-1);
                    assert_int_equal(rc, probe ? -1 : 0);
                    free(probe);
                    free(ref);
                }
            free(x);
            free(y);
            free_mat(&m);
        }
    }
}

/* An expert's product (ggml_mul_mat_id) of float weights in GGML mode
 * takes the type's vec_dot order for every token, never tinyBLAS's: a
 * batch gives the bits of one token at a time. */
static void test_expert_float_order(void **state) {
    simd_level_enter(state);
    const uint32_t types[] = {KILN_F32, KILN_F16, KILN_BF16};
    for (int ti = 0; ti < 3; ti++) {
        mat m = make_mat(types[ti], 640, 24); /* a shape tinyBLAS takes */
        const int64_t T = 8;
        float *x = malloc((size_t)(T * m.n_in) * sizeof(float));
        float *y = malloc((size_t)(T * m.n_out) * sizeof(float));
        fill(x, T * m.n_in, 1.0f);
        assert_int_equal(kiln_matmul_expert(m.type, m.w, m.n_in, m.n_out, x, T, y, KILN_NUM_GGML), 0);
        for (int64_t t = 0; t < T; t++) {
            float *y1 = run(&m, x + t * m.n_in, 1, KILN_NUM_GGML);
            if (memcmp(y1, y + t * m.n_out, (size_t)m.n_out * sizeof(float)))
                fail_msg("%s expert, token %lld: differs from the one-token (vec_dot) order",
                         kiln_type_name(m.type), (long long)t);
            free(y1);
        }
        free(x);
        free(y);
        free_mat(&m);
    }
}

static void test_unsupported(void **state) {
    float x[256] = {0}, y[4];
    uint8_t w[1024] = {0};
    /* NVFP4: a type kiln has no kernel for (TQ1_0 was one until it got its row) */
    assert_int_equal(kiln_matmul(KILN_NVFP4, w, 256, 1, x, 1, y, KILN_NUM_GGML), -1);
    assert_int_equal(kiln_matmul(KILN_Q8_0, w, 33, 1, x, 1, y, KILN_NUM_GGML), -1);
    assert_int_equal(kiln_matmul(KILN_F32, w, 4, 1, x, 0, y, KILN_NUM_GGML), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_LEVEL_TESTS(test_act_q8_0_rounding),
        SIMD_LEVEL_TEST(test_unpack_simd, 1, "avx2"),
        cmocka_unit_test(test_ggml_mode_integer_path),
        cmocka_unit_test(test_exact_mode),
        SIMD_VECTOR_TESTS(test_simd_and_batching_bit_exact),
        cmocka_unit_test(test_large),
        SIMD_LEVEL_TESTS(test_q8_0_x86_order),
        SIMD_LEVEL_TESTS(test_float_ggml_orders),
        cmocka_unit_test(test_unsupported),
        SIMD_LEVEL_TESTS(test_alloc_failure),
        SIMD_LEVEL_TESTS(test_expert_float_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
