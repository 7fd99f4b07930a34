/* bench/bench_imatrix.c - `make bench` figures for kiln imatrix:
 * collection speed in tokens/s (chunks of 128, the running perplexity on,
 * as llama-imatrix runs by default) on each fixture's f32 GGUF and on a
 * llama-1B-shaped synthetic model, at 1 and 2 threads, against llama.cpp.
 *
 * llama.cpp's figures are from ../shared/golden/README.md, performance (c)
 * (llama-imatrix -c 128 --chunks 64 -t 2, best of 3 on an idle machine):
 * tokens/s over a whole pass (2048 tokens / printed seconds per pass) and
 * over the process (8192 tokens / wall time). kiln's figure is tokens over
 * the time kiln_imx_run spends evaluating (model loading and tokenizing
 * excluded, like the per-pass figure). For the 1B model there is no
 * llama-imatrix figure; llama-bench's pp512 of the same shape in F16,
 * README (e), is the nearest (a prompt pass is what imatrix does). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/progress.h"
#include "../imatrix/calib.h"
#include "../imatrix/chunks.h"
#include "../imatrix/run.h"
#include "../runtime/model.h"

typedef struct fixture {
    const char *name;
    double llama_pass, llama_wall; /* tokens/s, README (c); 0: none */
} fixture;

static const fixture FIXTURES[] = {
    {"llama", 6024, 5791},
    {"mixtral", 4655, 3870},
    {"qwen2", 11378, 10114},
};

/* llama-bench pp512, synthetic llama-1B F16, README (e), 1 and 2 threads. */
static const double PP512_1B[2] = {31.34, 61.18};

/* Best tokens/s of `runs` collections of `chunks` chunks with `threads`. */
static double measure(const kiln_model *m, const kiln_imx_tokens *tk, int threads, int runs) {
    omp_set_num_threads(threads);
    double best = 0;
    for (int i = 0; i < runs; i++) {
        kiln_imx_run_params p = {.compute_ppl = true};
        kiln_imx_run_result r;
        kiln_err err = {{0}};
        if (kiln_imx_run(m, tk, &p, &r, &err) < 0) {
            fprintf(stderr, "bench_imatrix: %s\n", err.msg);
            return -1;
        }
        double tps = (double)r.tokens / r.seconds;
        if (tps > best) best = tps;
        kiln_imatrix_free(r.im);
    }
    return best;
}

static int load(const char *path, const char *calib, int64_t chunks, kiln_model **m, kiln_imx_tokens *tk) {
    kiln_err err = {{0}};
    char *text = NULL;
    size_t len = 0;
    if (!(*m = kiln_model_load(path, &err)) || kiln_calib_read(&calib, 1, NULL, &text, &len, &err) < 0 ||
        kiln_imx_tokens_make((*m)->tok, text, len, 128, chunks, false, calib, tk, &err) < 0) {
        fprintf(stderr, "bench_imatrix: %s\n", err.msg);
        free(text);
        kiln_model_free(*m);
        return -1;
    }
    free(text);
    return 0;
}

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* The 1B model is made once in /tmp by kiln itself (testmodel + convert
 * to F16, as llama-bench's model was F16). */
static const char *synthetic_1b(void) {
    static const char *gguf = "/tmp/kiln-imx-1b/synth-1b-f16.gguf";
    if (exists(gguf)) return gguf;
    const char *kiln = getenv("KILN");
    if (!kiln) kiln = "build/kiln";
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "mkdir -p /tmp/kiln-imx-1b && %s testmodel --arch llama --size 1b -o /tmp/kiln-imx-1b/hf -q --force && "
             "%s convert /tmp/kiln-imx-1b/hf --outtype f16 -o %s -q --force && rm -rf /tmp/kiln-imx-1b/hf",
             kiln, kiln, gguf);
    fprintf(stderr, "bench_imatrix: making the 1B model in /tmp/kiln-imx-1b (once)\n");
    return system(cmd) == 0 ? gguf : NULL;
}

int main(void) {
    kiln_progress_quiet = true;
    const char *shared = getenv("KILN_SHARED");
    if (!shared) shared = "../shared";
    char calib[4096];
    snprintf(calib, sizeof calib, "%s/golden/text/calib.groups_merged.txt", shared);
    if (!exists(calib)) {
        printf("imatrix: ../shared missing, skipped\n");
        return 0;
    }
    printf("imatrix collection, -c 128, tokens/s (best of 3); llama-imatrix: README (c) per pass / whole process\n");
    printf("%-10s %8s %8s %10s %10s %8s %8s\n", "model", "kiln -t1", "kiln -t2", "llama pass", "llama wall", "t2/pass",
           "t2/wall");
    int status = 0;
    for (size_t i = 0; i < sizeof FIXTURES / sizeof *FIXTURES; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/golden/gguf/%s-f32.gguf", shared, FIXTURES[i].name);
        kiln_model *m;
        kiln_imx_tokens tk;
        if (load(path, calib, 64, &m, &tk) < 0) {
            status = 1;
            continue;
        }
        double t1 = measure(m, &tk, 1, 3), t2 = measure(m, &tk, 2, 3);
        printf("%-10s %8.0f %8.0f %10.0f %10.0f %8.2f %8.2f\n", FIXTURES[i].name, t1, t2, FIXTURES[i].llama_pass,
               FIXTURES[i].llama_wall, t2 / FIXTURES[i].llama_pass, t2 / FIXTURES[i].llama_wall);
        kiln_imx_tokens_free(&tk);
        kiln_model_free(m);
    }
    const char *big = getenv("KILN_BENCH_NO_1B") ? NULL : synthetic_1b();
    kiln_model *m;
    kiln_imx_tokens tk;
    if (big && load(big, calib, 4, &m, &tk) == 0) {
        double t1 = measure(m, &tk, 1, 1), t2 = measure(m, &tk, 2, 1);
        printf("%-10s %8.1f %8.1f   (llama-bench pp512 F16: %.2f / %.2f; ratios %.2f / %.2f)\n", "1B f16", t1, t2,
               PP512_1B[0], PP512_1B[1], t1 / PP512_1B[0], t2 / PP512_1B[1]);
        kiln_imx_tokens_free(&tk);
        kiln_model_free(m);
    } else {
        printf("1B f16: not measured%s\n", getenv("KILN_BENCH_NO_1B") ? " (KILN_BENCH_NO_1B)" : " (model could not be made)");
    }
    return status;
}
