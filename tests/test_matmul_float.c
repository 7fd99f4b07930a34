/* tests/test_matmul_float.c - the F32 / F16 / BF16 products of
 * KILN_NUM_GGML mode on the shapes their blocked kernels cut unevenly
 * (runtime/vecdot_float.c): row counts that are no multiple of the
 * tinyBLAS tile (qwen2's 1027-row output takes the vec order for every
 * token) and that leave a partial row block, 1 to 9 tokens and counts
 * past the 6-token tile, k that is no multiple of 64 and k over several
 * chunks with a partial last one, k of 8192 (F16 rows read in place by
 * tinyBLAS's blocks; one token's activation copied to f16) and k past
 * that copy's limit. Every SIMD level, at 1, 2 and 3
 * threads (the row blocks go out on a dynamic schedule), must give the
 * scalar reference's bits, token for token; a sample of tinyBLAS outputs
 * is also summed here in its order (16 lanes of fmaf over k, gcc's
 * _mm512_reduce_add_ps tree) as a check on the reference itself. The
 * thread's kernel arena (kiln_kernel_arena) is checked on its own. */
#include "shared.h"
#include "simd_levels.h"

#include <omp.h>

#include "../core/cpu.h"
#include "../core/fp16.h"
#include "../core/types.h"
#include "../runtime/kernels.h"
#include "../runtime/matmul.h"

static const uint32_t FTYPES[] = {KILN_F32, KILN_F16, KILN_BF16};

static uint64_t rng = 0x2545f4914f6cdd1dull;

typedef struct fmat {
    uint32_t type;
    int64_t n_in, n_out, row_bytes;
    uint8_t *w;
    float *wf; /* the stored weights widened, n_out x n_in */
} fmat;

static fmat make_fmat(uint32_t type, int64_t n_in, int64_t n_out) {
    fmat m = {type, n_in, n_out, (int64_t)kiln_type_row_bytes(type, (uint64_t)n_in), NULL, NULL};
    m.w = malloc((size_t)(m.row_bytes * n_out));
    m.wf = malloc((size_t)(n_in * n_out) * sizeof(float));
    assert_non_null(m.w);
    assert_non_null(m.wf);
    for (int64_t i = 0; i < n_in * n_out; i++) {
        const float v = 0.05f * kiln_test_gaussf(&rng);
        if (type == KILN_F32) {
            ((float *)m.w)[i] = v;
            m.wf[i] = v;
        } else if (type == KILN_F16) {
            ((uint16_t *)m.w)[i] = kiln_fp32_to_fp16(v);
            m.wf[i] = kiln_fp16_to_fp32(((uint16_t *)m.w)[i]);
        } else {
            ((uint16_t *)m.w)[i] = kiln_fp32_to_bf16(v);
            m.wf[i] = kiln_bf16_to_fp32(((uint16_t *)m.w)[i]);
        }
    }
    return m;
}

static void free_fmat(fmat *m) {
    free(m->w);
    free(m->wf);
}

static float *product(const fmat *m, const float *x, int64_t nt) {
    float *y = malloc((size_t)(nt * m->n_out) * sizeof(float));
    assert_non_null(y);
    for (int64_t i = 0; i < nt * m->n_out; i++) y[i] = NAN;
    assert_int_equal(kiln_matmul(m->type, m->w, m->n_in, m->n_out, x, nt, y, KILN_NUM_GGML), 0);
    return y;
}

/* tinyBLAS's order for one output, written out: lane l sums k = l mod 16
 * with fmaf, then the reduce tree (halves, quarters, 0+2, 1+3). x is
 * already in the weight's precision (what kiln_matmul makes of it). */
static float tiny_order(const float *w, const float *x, int64_t n) {
    float acc[16] = {0}, h[8], q[4];
    for (int64_t k = 0; k < n; k += 16)
        for (int l = 0; l < 16; l++) acc[l] = fmaf(w[k + l], x[k + l], acc[l]);
    for (int i = 0; i < 8; i++) h[i] = acc[i] + acc[i + 8];
    for (int i = 0; i < 4; i++) q[i] = h[i] + h[i + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
}

/* The activation as the product sees it: rounded to F16 / BF16. */
static float act_round(uint32_t type, float v) {
    return type == KILN_F16 ? kiln_fp16_to_fp32(kiln_fp32_to_fp16(v))
           : type == KILN_BF16 ? kiln_bf16_to_fp32(kiln_fp32_to_bf16(v))
                               : v;
}

typedef struct shape {
    int64_t n_in, n_out;
    int64_t tokens[12];
} shape;

/* tokens lists end at 0 */
static const shape SHAPES[] = {
    {592, 1027, {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 31, 0}},  /* vec order, many tokens; k % 64 = 16 */
    {592, 1028, {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 31, 0}},  /* tinyBLAS, a partial last row block */
    {2064, 68, {2, 7, 12, 0}},                            /* k over 5 chunks, the last of 16 */
    {601, 37, {1, 2, 3, 9, 0}},                           /* k % 16 != 0: the vec order */
    {8192, 36, {1, 2, 7, 0}},   /* ffn_down's k: F16 rows in place (tiny), f16 activations (decode) */
    {16400, 8, {1, 2, 0}},      /* past the decode's f16 activation buffer: the f32 one; k % 64 = 16 */
    {64, 4, {2, 5, 0}},                                   /* one tile, fewer rows than a block */
};

static void test_blocked_bit_exact(void **state) {
    const kiln_simd_level lvl = simd_level_enter(state);
    const int threads_before = omp_get_max_threads();
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
        for (size_t ti = 0; ti < sizeof FTYPES / sizeof FTYPES[0]; ti++) {
            const shape *sh = &SHAPES[s];
            fmat m = make_fmat(FTYPES[ti], sh->n_in, sh->n_out);
            const int64_t T = 31;
            float *x = malloc((size_t)(T * m.n_in) * sizeof(float));
            for (int64_t i = 0; i < T * m.n_in; i++) x[i] = kiln_test_gaussf(&rng);
            for (const int64_t *nt = sh->tokens; *nt; nt++) {
                kiln_simd_set(KILN_SIMD_SCALAR);
                float *ref = product(&m, x, *nt);
                kiln_simd_set(lvl);
                for (int th = 1; th <= 3; th++) {
                    omp_set_num_threads(th);
                    float *y = product(&m, x, *nt);
                    for (int64_t j = 0; j < *nt * m.n_out; j++)
                        if (memcmp(&y[j], &ref[j], sizeof(float)))
                            fail_msg("%s %lld x %lld, %lld tokens, %d threads at %s: token %lld row %lld is "
                                     "%.9g, scalar %.9g",
                                     kiln_type_name(m.type), (long long)m.n_in, (long long)m.n_out, (long long)*nt,
                                     th, kiln_simd_name(lvl), (long long)(j / m.n_out), (long long)(j % m.n_out),
                                     y[j], ref[j]);
                    free(y);
                }
                omp_set_num_threads(threads_before);
                /* tinyBLAS's shapes: a sample of outputs in its order */
                if (*nt >= 2 && m.n_in % 16 == 0 && m.n_out % 4 == 0) {
                    float *xr = malloc((size_t)m.n_in * sizeof(float));
                    for (int64_t t = 0; t < *nt; t += 3) {
                        for (int64_t k = 0; k < m.n_in; k++) xr[k] = act_round(m.type, x[t * m.n_in + k]);
                        for (int64_t r = 0; r < m.n_out; r += 7) {
                            const float want = tiny_order(m.wf + r * m.n_in, xr, m.n_in);
                            if (memcmp(&want, &ref[t * m.n_out + r], sizeof(float)))
                                fail_msg("%s %lld x %lld: token %lld row %lld is %.9g, tinyBLAS's order %.9g",
                                         kiln_type_name(m.type), (long long)m.n_in, (long long)m.n_out,
                                         (long long)t, (long long)r, ref[t * m.n_out + r], want);
                        }
                    }
                    free(xr);
                }
                free(ref);
            }
            free(x);
            free_fmat(&m);
        }
}

/* The arena: aligned, kept while big enough (no allocation: the test
 * hook's refusal is not even asked for), grown when asked for more, and
 * a refused growth returns NULL and leaves a later call able to grow. */
static void test_arena(void **state) {
    (void)state;
    uint8_t *a = kiln_kernel_arena(1000);
    assert_non_null(a);
    assert_int_equal((uintptr_t)a % 64, 0);
    memset(a, 0x5a, 1000);
    kiln_kernel_alloc_fail_after(0);
    uint8_t *b = kiln_kernel_arena(900);
    kiln_kernel_alloc_fail_after(-1);
    assert_ptr_equal(a, b);
    kiln_kernel_alloc_fail_after(0);
    assert_null(kiln_kernel_arena((size_t)64 << 20));
    kiln_kernel_alloc_fail_after(-1);
    uint8_t *c = kiln_kernel_arena((size_t)64 << 20);
    assert_non_null(c);
    assert_int_equal((uintptr_t)c % 64, 0);
    memset(c, 0, (size_t)64 << 20);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        SIMD_VECTOR_TESTS(test_blocked_bit_exact),
        cmocka_unit_test(test_arena),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
