/* bench/bench_matmul.c - `make bench` figures for kiln_matmul:
 *
 *  1. GFLOP/s and tokens/s of a 2048 -> 8192 and an 8192 -> 2048 product
 *     (n_in -> n_out) at 512 tokens (prompt processing) and 1 token
 *     (decode), for F16, Q8_0 and Q4_K weights, 1 and 2 threads, both
 *     numeric modes;
 *  2. an ESTIMATE of prompt processing speed (pp512) for the 1.1 B llama
 *     of `kiln testmodel --size 1b`: the time of every matrix
 *     product of one 512-token batch (16 layers of q, k, v, o, gate, up,
 *     down, then the output matrix), from kernel timings alone - no
 *     attention, norms or activations. It is an upper bound of what
 *     kiln's forward pass can reach; bench/bench_runtime.sh measures the
 *     real pp512 beside llama-bench's. The
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
#include <time.h>

#include "../core/cpu.h"
#include "../core/progress.h"
#include "../core/types.h"
#include "../codec/codec.h"
#include "../runtime/matmul.h"

/* the 1B model's matrix types: F16, Q8_0, and Q4_K standing for Q4_K_M */
static const struct {
    uint32_t type;
    const char *model;
} TYPES[] = {
    {KILN_F16, "F16"},
    {KILN_Q8_0, "Q8_0"},
    {KILN_Q4_K, "Q4_K_M"},
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

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Best of `runs` wall times of one product (after a warm-up call), and
 * the best process CPU time: on a loaded machine the wall time of one
 * thread counts the time others held the core, its CPU time does not. */
typedef struct timing {
    double wall, cpu;
} timing;

static timing time_matmul(uint32_t type, const void *w, int64_t n_in, int64_t n_out, const float *x,
                          int64_t n_tok, float *y, kiln_numeric_mode mode, int runs) {
    timing best = {1e30, 1e30};
    if (kiln_matmul(type, w, n_in, n_out, x, n_tok, y, mode) != 0) return best;
    for (int i = 0; i < runs; i++) {
        double t0 = kiln_now(), c0 = cpu_now();
        kiln_matmul(type, w, n_in, n_out, x, n_tok, y, mode);
        double t = kiln_now() - t0, c = cpu_now() - c0;
        if (t < best.wall) best.wall = t;
        if (c < best.cpu) best.cpu = c;
    }
    return best;
}

/* Wall times mean little on a busy machine: the load is printed along. */
static const char *loadavg(void) {
    static char buf[96];
    FILE *f = fopen("/proc/loadavg", "r");
    double l1 = -1;
    if (f) {
        if (fscanf(f, "%lf", &l1) != 1) l1 = -1;
        fclose(f);
    }
    snprintf(buf, sizeof buf, "load average %.2f", l1);
    return buf;
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
    printf("kiln_matmul on %s%s; best-of-3 wall times (decode: best of 20); %s\n",
           kiln_simd_name(kiln_simd()), kiln_cpu_has_vnni() ? " + VNNI" : "", loadavg());

    static const shape CASES[] = {{2048, 8192, 0}, {8192, 2048, 0}};
    for (size_t ti = 0; ti < 3; ti++) {
        const uint32_t type = TYPES[ti].type;
        for (size_t c = 0; c < 2; c++) {
            const shape s = CASES[c];
            void *w = make_weights(type, s.n_in, s.n_out);
            if (!w) return 1;
            for (int mode = 0; mode < 2; mode++)
                for (int nt = 1; nt <= 2; nt++) {
                    omp_set_num_threads(nt);
                    for (int64_t tok = T; tok >= 1; tok = tok == T ? 1 : 0) {
                        timing t = time_matmul(type, w, s.n_in, s.n_out, x, tok, y, (kiln_numeric_mode)mode,
                                               tok == 1 ? 20 : 3);
                        printf("%-5s %s %5lld -> %-5lld tokens %3lld threads %d: %8.2f ms %7.1f GFLOP/s "
                               "%8.1f tok/s  (cpu %8.2f ms)\n",
                               kiln_type_name(type), mode ? "exact" : "ggml ", (long long)s.n_in,
                               (long long)s.n_out, (long long)tok, nt, t.wall * 1e3,
                               2.0 * s.n_in * s.n_out * tok / t.wall * 1e-9, tok / t.wall, t.cpu * 1e3);
                    }
                }
            free(w);
        }
    }

    printf("\nESTIMATE from kernel timings (matrix products only, no attention/norms), pp512 of the\n"
           "1.1 B llama of `kiln testmodel --size 1b` (bench/bench_runtime.sh measures the real one\n"
           "beside llama-bench). "
           "'wall' uses wall times; 'cpu' uses the 1-thread CPU time (x threads, linear scaling\n"
           "assumed), the figure to trust when the machine is busy:\n");
    for (size_t ti = 0; ti < 3; ti++) {
        const uint32_t type = TYPES[ti].type;
        double cpu1 = 0;
        for (int nt = 1; nt <= 2; nt++) {
            omp_set_num_threads(nt);
            double total = 0;
            for (size_t k = 0; k < sizeof MODEL / sizeof MODEL[0]; k++) {
                void *w = make_weights(type, MODEL[k].n_in, MODEL[k].n_out);
                if (!w) return 1;
                timing t = time_matmul(type, w, MODEL[k].n_in, MODEL[k].n_out, x, T, y, KILN_NUM_GGML, 2);
                total += MODEL[k].count * t.wall;
                if (nt == 1) cpu1 += MODEL[k].count * t.cpu;
                free(w);
            }
            const double wall = T / total, cpu = T / cpu1 * nt;
            printf("estimate pp512 %-6s %d thread%s: wall %6.1f t/s  cpu %6.1f t/s%s\n",
                   TYPES[ti].model, nt, nt > 1 ? "s" : " ", wall, cpu,
                   type == KILN_Q4_K ? "  [all matrices Q4_K]" : "");
        }
    }
    printf("(%s at the end)\n", loadavg());
    free(x);
    free(y);
    return 0;
}
