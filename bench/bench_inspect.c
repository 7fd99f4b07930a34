/* bench/bench_inspect.c - `make bench` figures for the foundation issue:
 *
 *  1. open + `kiln inspect --json` of a synthetic GGUF with 100,000
 *     tensors and 10 MB of metadata (target: under 100 ms);
 *  2. `kiln inspect --stats` throughput in GB/s on the largest fixture
 *     (../shared/golden/gguf/mixtral-f32.gguf), at 1 and 2 threads.
 * kiln's figures alone: llama.cpp has no tool that does either. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/gguf.h"
#include "../core/progress.h"
#include "../core/types.h"

/* User + system seconds of every waited-for child process so far. */
static double children_cpu(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru) != 0) return 0;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Runs cmd `runs` times and returns the best wall time, or -1 when it
 * fails. *best_cpu (when not NULL) gets the best CPU time, user + system,
 * of one run (the shell's share, about a millisecond, included): on a
 * loaded machine the wall time adds the wait for a core, the CPU time is
 * the work. */
static double time_cmd(const char *cmd, int runs, double *best_cpu) {
    double best = 1e9, best_c = 1e9;
    for (int i = 0; i < runs; i++) {
        double c0 = children_cpu(), t0 = kiln_now();
        if (system(cmd) != 0) return -1;
        double t = kiln_now() - t0, c = children_cpu() - c0;
        if (t < best) best = t;
        if (c < best_c) best_c = c;
    }
    if (best_cpu) *best_cpu = best_c;
    return best;
}

static int write_synthetic(const char *path) {
    kiln_err err;
    kiln_write_opts o = {.force = true};
    kiln_gguf_writer *w = kiln_writer_new(path, &o, &err);
    if (!w) return -1;
    /* 10 MB of metadata: 250,000 strings of 36 bytes (+8 length each) */
    enum { NSTR = 250000 };
    char **strs = malloc(NSTR * sizeof *strs);
    for (int i = 0; i < NSTR; i++) {
        strs[i] = malloc(40);
        snprintf(strs[i], 40, "token-%029d", i);
    }
    kiln_writer_set_str(w, "general.architecture", "llama", &err);
    kiln_writer_set_str_arr(w, "tokenizer.ggml.tokens", (const char *const *)strs, NSTR, &err);
    for (int i = 0; i < NSTR; i++) free(strs[i]);
    free(strs);
    int64_t ne[2] = {32, 1};
    char name[64];
    for (int i = 0; i < 100000; i++) {
        snprintf(name, sizeof name, "blk.%d.t%d.weight", i / 100, i % 100);
        if (kiln_writer_add_tensor(w, name, KILN_Q8_0, 2, ne, &err) < 0) return -1;
    }
    if (kiln_writer_begin(w, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    unsigned char block[34] = {0};
    for (int i = 0; i < 100000; i++)
        if (kiln_writer_write(w, block, 34, &err) < 0) return -1;
    return kiln_writer_finish(w, &err);
}

int main(void) {
    const char *kiln = getenv("KILN") ? getenv("KILN") : "build/kiln";
    const char *path = "/tmp/kiln-bench-100k.gguf";
    if (write_synthetic(path) < 0) {
        fprintf(stderr, "bench_inspect: cannot write %s\n", path);
        return 1;
    }
    struct stat sb;
    stat(path, &sb);
    kiln_err err;
    double best_open = 1e9;
    for (int i = 0; i < 5; i++) {
        double t0 = kiln_now();
        kiln_gguf *g = kiln_gguf_open(path, &err);
        double t = kiln_now() - t0;
        kiln_gguf_close(g);
        if (t < best_open) best_open = t;
    }
    char cmd[2 * 1024 + 64];
    snprintf(cmd, sizeof cmd, "%s inspect --json %s > /dev/null", kiln, path);
    double cpu = 0, t = time_cmd(cmd, 5, &cpu);
    if (!getenv("KILN_BENCH_KEEP")) unlink(path);
    if (t < 0) {
        fprintf(stderr, "bench_inspect: '%s' failed\n", cmd);
        return 1;
    }
    printf("inspect: 100,000 tensors + 10 MB metadata (%.1f MB file): open %.1f ms, inspect --json %.1f ms, "
           "%.1f ms CPU (target < 100 ms: %s)\n",
           sb.st_size / 1e6, best_open * 1e3, t * 1e3, cpu * 1e3, t < 0.1 ? "met" : "NOT met");

    const char *shared = getenv("KILN_SHARED") ? getenv("KILN_SHARED") : "../shared";
    char fix[1024];
    snprintf(fix, sizeof fix, "%s/golden/gguf/mixtral-f32.gguf", shared);
    if (stat(fix, &sb) != 0) {
        printf("inspect --stats: skipped (no %s)\n", fix);
        return 0;
    }
    for (int th = 1; th <= 2; th++) {
        snprintf(cmd, sizeof cmd, "%s inspect --stats --quiet -t %d %s > /dev/null", kiln, th, fix);
        t = time_cmd(cmd, 5, NULL);
        if (t < 0) {
            fprintf(stderr, "bench_inspect: '%s' failed\n", cmd);
            return 1;
        }
        printf("inspect --stats: mixtral-f32.gguf (%.1f MB), %d thread%s: %.3f s, %.2f GB/s (incl. process start)\n",
               sb.st_size / 1e6, th, th > 1 ? "s" : "", t, sb.st_size / t / 1e9);
    }
    return 0;
}
