/* bench/bench_quantize.c - kiln's per-type quantization throughput (MB/s
 * of f32 input) for every type kiln writes, at 1 and 2 threads, through
 * kiln_quantize_tensor() (the tool's path: NaN/Inf checks in and out
 * included), on an 11008 x 4096 tensor of 0.02 * Student-t(3) values;
 * IQ2_XXS with the per-column mean of x^2 as imatrix. Slow types run on a
 * prefix of the rows sized to about a second (every row costs the same),
 * best of 3. Run by bench/bench_quantize.sh, which then times whole models
 * side by side with llama-quantize: llama.cpp's build has no tool that
 * times one tensor, so this table is kiln's alone. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/progress.h"
#include "../core/types.h"
#include "../core/imatrix_file.h"
#include "../quantize/quantize_model.h"

#define ROWS 11008
#define COLS 4096

static const uint32_t TYPES[] = {KILN_Q8_0, KILN_Q4_0, KILN_Q5_0, KILN_IQ4_NL, KILN_Q2_K,
                                 KILN_Q3_K, KILN_Q4_K, KILN_Q5_K, KILN_Q6_K, KILN_IQ2_XXS};

static uint64_t next(uint64_t *s) {
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

/* Two standard normals per call (Box-Muller). */
static void normals(uint64_t *s, double *a, double *b) {
    double u1 = ((double)(next(s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(next(s) >> 11) / 9007199254740992.0, r = sqrt(-2 * log(u1));
    *a = r * cos(6.283185307179586 * u2);
    *b = r * sin(6.283185307179586 * u2);
}

/* 0.02 * Student-t with 3 degrees of freedom: heavy tails, like real weights. */
static void fill(float *x) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < ROWS; r++) {
        uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)(r + 1) * 0xbf58476d1ce4e5b9ull;
        for (int64_t c = 0; c < COLS; c++) {
            double z, a, b, d;
            normals(&s, &z, &a);
            normals(&s, &b, &d);
            x[r * COLS + c] = (float)(0.02 * z / sqrt((a * a + b * b + d * d) / 3));
        }
    }
}

static double time_rows(uint32_t type, const float *x, void *q, int64_t rows, const kiln_imatrix_entry *im) {
    int64_t ne[4] = {COLS, rows, 1, 1};
    kiln_err err;
    double t0 = kiln_now();
    if (kiln_quantize_tensor(type, x, q, ne, im, NULL, &err) < 0) {
        fprintf(stderr, "bench_quantize: %s: %s\n", kiln_type_name(type), err.msg);
        exit(1);
    }
    return kiln_now() - t0;
}

static double throughput(uint32_t type, int threads, const float *x, void *q, const kiln_imatrix_entry *im,
                         int64_t *rows_used) {
    omp_set_num_threads(threads);
    /* a probe sizes the run to about a second of work */
    double probe = time_rows(type, x, q, 128, im);
    int64_t rows = probe > 0 ? (int64_t)(128 * 1.0 / probe) : ROWS;
    rows = rows < 256 ? 256 : rows > ROWS ? ROWS : rows / 16 * 16;
    double best = 1e30;
    for (int i = 0; i < 3; i++) {
        double t = time_rows(type, x, q, rows, im);
        if (t < best) best = t;
    }
    *rows_used = rows;
    return (double)rows * COLS * 4 / 1e6 / best;
}

static void bench_types(void) {
    float *x = malloc((size_t)ROWS * COLS * sizeof(float));
    void *q = malloc((size_t)ROWS * COLS * 2);
    kiln_imatrix *im = kiln_imatrix_new();
    kiln_err err;
    if (!x || !q || !im) {
        fprintf(stderr, "bench_quantize: out of memory\n");
        exit(1);
    }
    double t0 = kiln_now();
    fill(x);
    printf("synthetic 11008 x 4096 f32 (180.4 MB), 0.02 * Student-t(3), made in %.1f s\n", kiln_now() - t0);
    kiln_imatrix_entry *e = kiln_imatrix_add(im, "w", COLS, 1, false, &err);
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t c = 0; c < COLS; c++) e->in_sum2[c] += x[r * COLS + c] * x[r * COLS + c];
    e->counts[0] = ROWS; /* weights = per-column mean of x^2 */
    printf("\n%-8s %7s %10s %10s\n", "type", "rows", "1 thr MB/s", "2 thr MB/s");
    for (size_t i = 0; i < sizeof TYPES / sizeof *TYPES; i++) {
        const kiln_imatrix_entry *w = TYPES[i] == KILN_IQ2_XXS ? e : NULL;
        int64_t r1, r2;
        double m1 = throughput(TYPES[i], 1, x, q, w, &r1);
        double m2 = throughput(TYPES[i], 2, x, q, w, &r2);
        printf("%-8s %7lld %10.1f %10.1f\n", kiln_type_name(TYPES[i]), (long long)(r1 < r2 ? r1 : r2), m1, m2);
        fflush(stdout);
    }
    kiln_imatrix_free(im);
    free(x);
    free(q);
}

/* Other work on the machine skews every figure, 2-thread ones most: the
 * load average is printed before and after so a reader can tell. */
static void print_load(const char *when) {
    char buf[128] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
    printf("load average %s: %s\n", when, buf);
}

int main(void) {
    kiln_progress_quiet = true;
    double t0 = kiln_now();
    print_load("before");
    bench_types();
    print_load("after");
    printf("bench_quantize: %.0f s in all\n", kiln_now() - t0);
    return 0;
}
