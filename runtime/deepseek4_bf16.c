/* runtime/deepseek4_bf16.c - BF16 weight products in the orders of a
 * ggml-cpu built with AVX512_BF16, for deepseek4.
 *
 * DeepSeek-V4's converter keeps the embeddings, output head, router and
 * compressor matrices BF16 even in its "f32" file, so its logits depend on
 * how ggml multiplies BF16. The reference llama.cpp (built -march=native
 * on an AVX512_BF16 machine: /root/llama.cpp, the deepseek4 goldens' build)
 * takes _mm512_dpbf16_ps there, whose order differs from the AVX-512F one
 * kiln's generic float kernels follow (matmul.c, vecdot_float.c: "without
 * AVX512_BF16"):
 *
 *   - 2+ tokens (llamafile tinyBLAS<32, __m512bh>, k % 32 == 0, rows % 4
 *     == 0): one 16-lane chain per output; lane i takes, per 32 values,
 *     element 2i+1's product and then element 2i's (each product exact,
 *     each sum rounded), then _mm512_reduce_add_ps;
 *   - otherwise ggml_vec_dot_bf16: two such chains over the two halves of
 *     64 values, each reduced and added to a double, the rest in double.
 *
 * The activations are first rounded to bf16 (ggml's vec_dot_type). Other
 * weight types, and KILN_NUM_EXACT, go to kiln_fwd_matmul. */
#include "deepseek4.h"

#include "forward_impl.h"
#include "vecdot.h"

#include "../core/fp16.h"
#include "../core/types.h"

#include <math.h>
#include <stdlib.h>

/* dpbf16ps flushes denormal results to zero */
static inline float ftz(float v) {
    return fabsf(v) < 0x1p-126f ? copysignf(0.0f, v) : v;
}

/* _mm512_reduce_add_ps as gcc emits it: 256-bit halves, 128-bit halves,
 * then (0 + 2) + (1 + 3). */
static float reduce16(const float v[16]) {
    float h[8], q[4];
    for (int i = 0; i < 8; i++) h[i] = v[i] + v[i + 8];
    for (int i = 0; i < 4; i++) q[i] = h[i] + h[i + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
}

/* acc's 16 lanes += the dpbf16 step over 32 values at w, x. */
static void dp32(float acc[16], const float *w, const float *x) {
    for (int i = 0; i < 16; i++) {
        acc[i] = ftz(acc[i] + w[2 * i + 1] * x[2 * i + 1]);
        acc[i] = ftz(acc[i] + w[2 * i] * x[2 * i]);
    }
}

static float dot_tiny(const float *w, const float *x, int64_t n) {
    float acc[16] = {0};
    for (int64_t k = 0; k < n; k += 32) dp32(acc, w + k, x + k);
    return reduce16(acc);
}

static float dot_vec(const float *w, const float *x, int64_t n) {
    float c1[16] = {0}, c2[16] = {0};
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        dp32(c1, w + i, x + i);
        dp32(c2, w + i + 32, x + i + 32);
    }
    double s = 0.0;
    s += (double)reduce16(c1);
    s += (double)reduce16(c2);
    for (; i < n; i++) s += (double)(w[i] * x[i]);
    return (float)s;
}

int kiln_ds4_matmul(kiln_ctx *c, const kiln_tensor *w, const float *x, int64_t n, float *y, kiln_err *err) {
    if (w->type != KILN_BF16 || c->p.mode != KILN_NUM_GGML) return kiln_fwd_matmul(c, w, -1, x, n, y, err);
    if (kiln_fwd_matmul(c, w, -1, x, n, NULL, err) < 0) return -1; /* the hook alone */
    const int64_t n_in = w->ne[0], n_out = w->ne[1];
    float *xr = malloc((size_t)(n * n_in + n_out * n_in) * sizeof(float));
    if (!xr) return kiln_fail(err, NULL, NULL, -1, "out of memory");
    float *wf = xr + n * n_in;
    for (int64_t t = 0; t < n; t++) kiln_act_round_bf16(x + t * n_in, xr + t * n_in, n_in);
    const uint16_t *wb = (const uint16_t *)w->data;
    for (int64_t i = 0; i < n_out * n_in; i++) wf[i] = kiln_bf16_to_fp32(wb[i]);
    const bool tiny = n >= 2 && n_in % 32 == 0 && n_out % 4 == 0;
#pragma omp parallel for schedule(static) if (n * n_out * n_in > 1000000)
    for (int64_t r = 0; r < n_out; r++)
        for (int64_t t = 0; t < n; t++)
            y[t * n_out + r] = tiny ? dot_tiny(wf + r * n_in, xr + t * n_in, n_in) : dot_vec(wf + r * n_in, xr + t * n_in, n_in);
    free(xr);
    kiln_fwd_observe(c, w, -1, y, n);
    return 0;
}
