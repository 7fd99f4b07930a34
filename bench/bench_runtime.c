/* bench/bench_runtime.c - kiln's prompt-processing and decode speed on
 * one model, measured as llama-bench measures them:
 *
 *   bench_runtime [-t THREADS] [-r REPS] MODEL.gguf
 *
 * pp512: 512 tokens in one call from an empty cache; tg32: 32 tokens one
 * at a time from an empty cache. One warm-up run, then the mean of REPS
 * (default 3). Prints one line, "pp512 MEAN SD tg32 MEAN SD" in tokens/s,
 * for bench/bench_runtime.sh, which runs llama-bench on the same file in
 * turns and prints the ratios. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/progress.h"
#include "../runtime/runtime.h"

#define PP 512
#define TG 32

typedef struct speed {
    double mean, sd;
} speed;

static speed stats(const double *v, int n) {
    double m = 0, s = 0;
    for (int i = 0; i < n; i++) m += v[i];
    m /= n;
    for (int i = 0; i < n; i++) s += (v[i] - m) * (v[i] - m);
    return (speed){m, n > 1 ? sqrt(s / (n - 1)) : 0};
}

/* pp: PP tokens in one call from an empty cache (no logits wanted, as
 * llama-bench asks only for the last one); tg: TG single-token calls. */
static int measure(kiln_ctx *c, const kiln_model *m, int threads, int reps, speed *pp, speed *tg) {
    omp_set_num_threads(threads);
    int32_t *tok = malloc(PP * sizeof *tok);
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    if (!tok || !logits) return -1;
    uint64_t x = 12345;
    for (int i = 0; i < PP; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((x >> 33) % (uint64_t)m->hp.n_vocab);
    }
    kiln_err err = {{0}};
    double *vpp = malloc((size_t)reps * sizeof *vpp), *vtg = malloc((size_t)reps * sizeof *vtg);
    if (!vpp || !vtg) {
        free(vpp), free(vtg), free(tok), free(logits);
        return -1;
    }
    int rc = 0;
    for (int r = -1; !rc && r < reps; r++) { /* r = -1: warm-up */
        kiln_ctx_clear(c);
        double t0 = kiln_now();
        rc = kiln_eval(c, tok, PP, NULL, &err);
        double t1 = kiln_now();
        kiln_ctx_clear(c);
        for (int i = 0; !rc && i < TG; i++) rc = kiln_eval(c, &tok[i], 1, logits, &err);
        double t2 = kiln_now();
        if (r >= 0) {
            vpp[r] = PP / (t1 - t0);
            vtg[r] = TG / (t2 - t1);
        }
    }
    if (rc) fprintf(stderr, "bench_runtime: %s\n", err.msg);
    if (!rc) {
        *pp = stats(vpp, reps);
        *tg = stats(vtg, reps);
    }
    free(vpp);
    free(vtg);
    free(tok);
    free(logits);
    return rc;
}

int main(int argc, char **argv) {
    int threads = 2, reps = 3, i = 1;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else break;
    }
    if (i != argc - 1 || threads < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_runtime [-t THREADS] [-r REPS] MODEL.gguf (run by bench/bench_runtime.sh)\n");
        return 2;
    }
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(argv[i], &err);
    kiln_ctx_params cp = {.n_ctx = PP + TG};
    kiln_ctx *c = m ? kiln_ctx_new(m, &cp, &err) : NULL;
    if (!c) {
        fprintf(stderr, "bench_runtime: %s: %s\n", argv[i], err.msg);
        kiln_model_free(m);
        return 1;
    }
    speed pp, tg;
    int rc = measure(c, m, threads, reps, &pp, &tg);
    if (!rc) printf("pp%d %.3f %.3f tg%d %.3f %.3f\n", PP, pp.mean, pp.sd, TG, tg.mean, tg.sd);
    kiln_ctx_free(c);
    kiln_model_free(m);
    return rc ? 1 : 0;
}
