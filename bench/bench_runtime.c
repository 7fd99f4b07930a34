/* bench/bench_runtime.c - `make bench` figures for the runtime:
 *
 *  1. perplexity throughput on each fixture's F32 GGUF, run exactly as
 *     README (d) ran llama-perplexity (-c 128 -b 128, 2 threads, the whole
 *     text/ppl.txt, all evaluated tokens / wall time of the chunk loop),
 *     with the ratio to llama.cpp's best-of-3 figure;
 *  2. prompt processing (512 tokens in one call) and single-token decode
 *     (32 tokens one at a time from an empty cache) at 1 and 2 threads, on
 *     each fixture and on a synthetic llama-1B (F16, Q8_0, Q4_K_M) made by
 *     `kiln testmodel --size 1b` + `kiln convert` + `kiln quantize` into
 *     /tmp/kiln-bench-1b (kept for the next run; skipped with a message when
 *     it cannot be made), with ratios to README (e)'s llama-bench pp512 and
 *     tg32 figures. Like llama-bench: one warm-up run, then the mean of 3.
 * Target: every ratio >= 1.0x. KILN_BENCH_QUICK=1 skips the 1B model. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/progress.h"
#include "../golden/golden_file.h"
#include "../golden/perplexity.h"
#include "../runtime/runtime.h"

#define REPS 3
#define PP 512
#define TG 32

/* README (d): llama-perplexity tok/s, f32 fixtures, 2 threads, best of 3. */
static const struct {
    const char *fixture;
    double ppl_tps;
} FIXTURES[] = {{"llama", 9466}, {"mixtral", 6915}, {"qwen2", 16849}};

/* README (e): llama-bench on synth-1b, t/s (mean of 3). */
static const struct {
    const char *type;
    double pp[2], tg[2]; /* [1 thread, 2 threads] */
} LLAMA_BENCH_1B[] = {
    {"F16", {31.34, 61.18}, {4.38, 8.59}},
    {"Q8_0", {27.87, 46.63}, {6.78, 12.52}},
    {"Q4_K_M", {32.01, 51.95}, {9.98, 14.05}},
};

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

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
static int measure(kiln_ctx *c, const kiln_model *m, int threads, speed *pp, speed *tg) {
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
    double vpp[REPS], vtg[REPS];
    int rc = 0;
    for (int r = -1; !rc && r < REPS; r++) { /* r = -1: warm-up */
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
    *pp = stats(vpp, REPS);
    *tg = stats(vtg, REPS);
    free(tok);
    free(logits);
    return rc;
}

/* Prints pp/tg at 1 and 2 threads; with reference figures, the ratios. */
static void bench_pp_tg(const char *label, const char *path, const double *ref_pp, const double *ref_tg) {
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(path, &err);
    kiln_ctx_params cp = {.n_ctx = PP + TG};
    kiln_ctx *c = m ? kiln_ctx_new(m, &cp, &err) : NULL;
    if (!c) {
        printf("  %-16s skipped: %s\n", label, err.msg);
        if (m) kiln_model_free(m);
        return;
    }
    for (int t = 1; t <= 2; t++) {
        speed pp, tg;
        if (measure(c, m, t, &pp, &tg)) break;
        printf("  %-16s %d thr  pp%d %8.2f ± %5.2f t/s", label, t, PP, pp.mean, pp.sd);
        if (ref_pp) printf(" (%.2fx llama.cpp %.2f)", pp.mean / ref_pp[t - 1], ref_pp[t - 1]);
        printf("   tg%d %7.2f ± %5.2f t/s", TG, tg.mean, tg.sd);
        if (ref_tg) printf(" (%.2fx llama.cpp %.2f)", tg.mean / ref_tg[t - 1], ref_tg[t - 1]);
        putchar('\n');
        fflush(stdout);
    }
    kiln_ctx_free(c);
    kiln_model_free(m);
}

static void bench_perplexity(const char *shared) {
    char path[4096], text_path[4096];
    snprintf(text_path, sizeof text_path, "%s/golden/text/ppl.txt", shared);
    kiln_err err = {{0}};
    size_t len;
    char *text = kiln_read_text(text_path, &len, &err);
    if (!text) {
        printf("  perplexity skipped: %s\n", err.msg);
        return;
    }
    omp_set_num_threads(2);
    for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) {
        snprintf(path, sizeof path, "%s/golden/gguf/%s-f32.gguf", shared, FIXTURES[i].fixture);
        kiln_model *m = kiln_model_load(path, &err);
        double best = 0, ppl = 0;
        for (int r = 0; m && r < REPS; r++) {
            kiln_ppl_params p = {.n_ctx = 128, .n_batch = 128};
            kiln_ppl_result res;
            if (kiln_perplexity(m, text, len, &p, &res, &err)) break;
            if (res.tokens_per_second > best) best = res.tokens_per_second;
            ppl = res.ppl;
            kiln_ppl_result_free(&res);
        }
        if (best > 0)
            printf("  %-8s f32 perplexity -c 128 -b 128, 2 thr: %8.0f tok/s (%.2fx llama.cpp %.0f), PPL %.4f\n",
                   FIXTURES[i].fixture, best, best / FIXTURES[i].ppl_tps, FIXTURES[i].ppl_tps, ppl);
        else
            printf("  %-8s perplexity failed: %s\n", FIXTURES[i].fixture, err.msg);
        fflush(stdout);
        if (m) kiln_model_free(m);
    }
    free(text);
}

/* Makes the synthetic 1B models once; returns false (having said why)
 * when kiln cannot make them. */
static bool make_1b(const char *kiln, const char *dir) {
    char cmd[16384], f16[4096], q[4096];
    snprintf(f16, sizeof f16, "%s/synth-1b-F16.gguf", dir);
    if (!exists(f16)) {
        printf("  making the 1B model in %s (one time; about 2 GB, a few minutes)...\n", dir);
        fflush(stdout);
        snprintf(cmd, sizeof cmd,
                 "mkdir -p '%s' && '%s' testmodel --arch llama --size 1b --dtype f16 -o '%s/hf' > '%s/make.log' 2>&1 && "
                 "'%s' convert '%s/hf' --outtype f16 -o '%s' >> '%s/make.log' 2>&1 && rm -rf '%s/hf'",
                 dir, kiln, dir, dir, kiln, dir, f16, dir, dir);
        if (system(cmd) != 0) {
            printf("  1B model skipped: could not make it (see %s/make.log)\n", dir);
            return false;
        }
    }
    for (size_t i = 1; i < sizeof LLAMA_BENCH_1B / sizeof LLAMA_BENCH_1B[0]; i++) {
        snprintf(q, sizeof q, "%s/synth-1b-%s.gguf", dir, LLAMA_BENCH_1B[i].type);
        if (exists(q)) continue;
        snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' %s >> '%s/make.log' 2>&1", kiln, f16, q,
                 LLAMA_BENCH_1B[i].type, dir);
        if (system(cmd) != 0) {
            printf("  1B %s skipped: kiln quantize failed (see %s/make.log)\n", LLAMA_BENCH_1B[i].type, dir);
            remove(q);
        }
    }
    return true;
}

int main(void) {
    const char *shared = getenv("KILN_SHARED") ? getenv("KILN_SHARED") : "../shared";
    const char *kiln = getenv("KILN") ? getenv("KILN") : "build/kiln";
    char path[4096];
    printf("runtime: perplexity vs README (d)\n");
    bench_perplexity(shared);
    printf("runtime: pp%d / tg%d, fixtures (F32 and Q4_K_M)\n", PP, TG);
    for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) {
        const char *types[] = {"f32", "Q4_K_M"};
        for (int k = 0; k < 2; k++) {
            char label[64];
            snprintf(path, sizeof path, "%s/golden/gguf/%s-%s.gguf", shared, FIXTURES[i].fixture, types[k]);
            snprintf(label, sizeof label, "%s-%s", FIXTURES[i].fixture, types[k]);
            bench_pp_tg(label, path, NULL, NULL);
        }
    }
    const char *quick = getenv("KILN_BENCH_QUICK");
    if (quick && *quick && strcmp(quick, "0")) {
        printf("runtime: 1B model skipped (KILN_BENCH_QUICK)\n");
        return 0;
    }
    printf("runtime: pp%d / tg%d, synthetic llama-1B vs README (e) llama-bench\n", PP, TG);
    const char *dir = "/tmp/kiln-bench-1b";
    if (!make_1b(kiln, dir)) return 0;
    for (size_t i = 0; i < sizeof LLAMA_BENCH_1B / sizeof LLAMA_BENCH_1B[0]; i++) {
        char label[64];
        snprintf(path, sizeof path, "%s/synth-1b-%s.gguf", dir, LLAMA_BENCH_1B[i].type);
        snprintf(label, sizeof label, "1B %s", LLAMA_BENCH_1B[i].type);
        if (exists(path)) bench_pp_tg(label, path, LLAMA_BENCH_1B[i].pp, LLAMA_BENCH_1B[i].tg);
    }
    return 0;
}
