/* bench/bench_matmul.c - `make bench` figures for kiln_matmul:
 *
 *  1. GFLOP/s and tokens/s of a 2048 -> 8192 and an 8192 -> 2048 product
 *     (n_in -> n_out) at 512 tokens (prompt processing) and 1 token
 *     (decode), for F16, Q8_0 and Q4_K weights, 1 and 2 threads, both
 *     numeric modes;
 *  2. an ESTIMATE of prompt processing speed (pp512) for the 1.1 B llama
 *     of ../shared/golden/README.md section (e): the time of every matrix
 *     product of one 512-token batch (16 layers of q, k, v, o, gate, up,
 *     down, then the output matrix), from kernel timings alone - no
 *     attention, norms or activations - set against llama-bench's pp512.
 *     It is an upper bound of what kiln's forward pass can reach. The
 *     Q4_K_M model mixes Q4_K with some Q6_K; the estimate uses Q4_K for
 *     every matrix.
 *
 * Weights are a quantized block of 64 real-looking rows repeated, so the
 * bench does not spend minutes in the Q4_K quantizer. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/cpu.h"
#include "../core/progress.h"
#include "../core/types.h"
#include "../quantize/codec.h"
#include "../runtime/matmul.h"

/* llama-bench pp512 t/s from README (e), 1 and 2 threads */
static const struct {
    uint32_t type;
    const char *model;
    double pp512[2];
} LLAMA[] = {
    {KILN_F16, "F16", {31.34, 61.18}},
    {KILN_Q8_0, "Q8_0", {27.87, 46.63}},
    {KILN_Q4_K, "Q4_K_M", {32.01, 51.95}},
};

static uint64_t rng = 88172645463325252ull;
static float gauss(void) {
    double s = 0;
    for (int i = 0; i < 4; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        s += (double)(rng >> 11) / 9007199254740992.0;
    }
    return (float)((s - 2.0) * 1.7320508);
}

static void *make_weights(uint32_t type, int64_t n_in, int64_t n_out) {
    const int64_t tile = 64, rb = (int64_t)kiln_type_row_bytes(type, (uint64_t)n_in);
    float *src = malloc((size_t)(tile * n_in) * sizeof(float));
    uint8_t *w = malloc((size_t)(rb * n_out));
    if (!src || !w) return NULL;
    for (int64_t i = 0; i < tile * n_in; i++) src[i] = 0.02f * gauss();
    kiln_err err;
    if (!kiln_quantize_rows(type, src, w, tile, n_in, NULL, &err)) return NULL;
    for (int64_t r = tile; r < n_out; r += tile)
        memcpy(w + r * rb, w, (size_t)((n_out - r < tile ? n_out - r : tile) * rb));
    free(src);
    return w;
}

/* Best of `runs` wall times of one product (after a warm-up call). */
static double time_matmul(uint32_t type, const void *w, int64_t n_in, int64_t n_out, const float *x,
                          int64_t n_tok, float *y, kiln_numeric_mode mode, int runs) {
    if (kiln_matmul(type, w, n_in, n_out, x, n_tok, y, mode) != 0) return -1;
    double best = 1e30;
    for (int i = 0; i < runs; i++) {
        double t0 = kiln_now();
        kiln_matmul(type, w, n_in, n_out, x, n_tok, y, mode);
        double t = kiln_now() - t0;
        if (t < best) best = t;
    }
    return best;
}

typedef struct shape {
    int64_t n_in, n_out, count; /* count: how many per pp512 batch */
} shape;

/* the 1.1 B llama: hidden 2048, ffn 8192, 8 KV heads of 64, vocab 32000 */
static const shape MODEL[] = {
    {2048, 2048, 32},   /* q, o    x 16 layers */
    {2048, 512, 32},    /* k, v    x 16 */
    {2048, 8192, 32},   /* gate, up x 16 */
    {8192, 2048, 16},   /* down    x 16 */
    {2048, 32000, 1},   /* output */
};

int main(void) {
    const int64_t T = 512;
    float *x = malloc((size_t)(T * 8192) * sizeof(float));
    float *y = malloc((size_t)(T * 32000) * sizeof(float));
    if (!x || !y) return 1;
    for (int64_t i = 0; i < T * 8192; i++) x[i] = gauss();
    printf("kiln_matmul on %s (%s%s); figures are best-of-3 wall times\n",
           kiln_simd_name(kiln_simd()), kiln_cpu_has_vnni() ? "VNNI, " : "", "OpenMP");

    static const shape CASES[] = {{2048, 8192, 0}, {8192, 2048, 0}};
    for (size_t ti = 0; ti < 3; ti++) {
        const uint32_t type = LLAMA[ti].type;
        for (size_t c = 0; c < 2; c++) {
            const shape s = CASES[c];
            void *w = make_weights(type, s.n_in, s.n_out);
            if (!w) return 1;
            for (int mode = 0; mode < 2; mode++)
                for (int nt = 1; nt <= 2; nt++) {
                    omp_set_num_threads(nt);
                    for (int64_t tok = T; tok >= 1; tok = tok == T ? 1 : 0) {
                        double t = time_matmul(type, w, s.n_in, s.n_out, x, tok, y, (kiln_numeric_mode)mode,
                                               tok == 1 ? 20 : 3);
                        printf("%-5s %s %5lld -> %-5lld tokens %3lld threads %d: %8.2f ms %8.1f GFLOP/s %9.1f tok/s\n",
                               kiln_type_name(type), mode ? "exact" : "ggml ", (long long)s.n_in,
                               (long long)s.n_out, (long long)tok, nt, t * 1e3,
                               2.0 * s.n_in * s.n_out * tok / t * 1e-9, tok / t);
                    }
                }
            free(w);
        }
    }

    printf("\nESTIMATE from kernel timings (matrix products only, no attention/norms), pp512 of the\n"
           "1.1 B llama of README (e), against llama-bench pp512 measured on the README's machine:\n");
    for (size_t ti = 0; ti < 3; ti++) {
        const uint32_t type = LLAMA[ti].type;
        for (int nt = 1; nt <= 2; nt++) {
            omp_set_num_threads(nt);
            double total = 0;
            for (size_t k = 0; k < sizeof MODEL / sizeof MODEL[0]; k++) {
                void *w = make_weights(type, MODEL[k].n_in, MODEL[k].n_out);
                if (!w) return 1;
                total += MODEL[k].count * time_matmul(type, w, MODEL[k].n_in, MODEL[k].n_out, x, T, y,
                                                      KILN_NUM_GGML, 2);
                free(w);
            }
            const double est = T / total, ref = LLAMA[ti].pp512[nt - 1];
            printf("estimate pp512 %-6s %d thread%s: %6.1f t/s  (llama-bench %6.2f t/s)  ratio %.2fx%s\n",
                   LLAMA[ti].model, nt, nt > 1 ? "s" : " ", est, ref, est / ref,
                   type == KILN_Q4_K ? "  [all matrices Q4_K]" : "");
        }
    }
    free(x);
    free(y);
    return 0;
}
