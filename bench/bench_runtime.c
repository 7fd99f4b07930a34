/* bench/bench_runtime.c - kiln's prompt-processing and decode speed on
 * one model, measured as llama-bench measures them:
 *
 *   bench_runtime [-t THREADS] [-r REPS] [-s pp|tg|read] [-fa 0|1] MODEL.gguf
 *
 * -s runs one of the two phases alone (the other prints as 0), for perf
 * record to see one phase at a time. -s read prints "read GBPS BYTES"
 * instead: the bytes of weights one decoded token reads (every tensor but
 * a token embedding that is not also the output) and the best of REPS
 * plain reads of those bytes by THREADS threads (read_ceiling): the
 * memory's ceiling for a decode that streams its weights, measured at
 * the moment, since the bandwidth of a VM moves. -fa 1 takes llama.cpp's
 * CPU attention (F16 cache, flash kernels: llama-bench's default) instead
 * of kiln generate's (f32 cache, plain softmax).
 * pp512: 512 tokens in one call from an empty cache; tg32: 32 tokens one
 * at a time from an empty cache. Two tests, as llama-bench's: each a
 * warm-up, then the mean of REPS runs (default 3). Prints one line,
 * "pp512 MEAN SD tg32 MEAN SD" in tokens/s, for bench/bench_runtime.sh,
 * which runs llama-bench on the same file in turns and prints the ratios. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/progress.h"
#include "../runtime/kernels.h"
#include "../runtime/model.h"
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

/* One test as llama-bench runs it: a warm-up, then REPS timed runs, each
 * from an empty cache. n_tokens > 1: one call of that many tokens, whose
 * context (logits_from = PP - 1) writes the last token's logits alone, as
 * llama-bench asks for the last one only (its warm-up is the same call).
 * n_tokens == 1: TG single-token calls (the warm-up is one token, as
 * llama-bench's). pp512 and tg32 are separate tests there, so a tg run
 * never starts from caches a pp run just filled. */
static int one_test(kiln_ctx *c, const int32_t *tok, int n_tokens, int reps, float *logits, double *rate,
                    kiln_err *err) {
    const int calls = n_tokens == 1 ? TG : 1;
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        kiln_ctx_clear(c);
        const double t0 = kiln_now();
        for (int i = 0; i < (r < 0 ? 1 : calls); i++) {
            int rc = kiln_eval(c, n_tokens == 1 ? &tok[i] : tok, n_tokens, logits, err);
            if (rc) return rc;
        }
        if (r >= 0) rate[r] = (double)calls * n_tokens / (kiln_now() - t0);
    }
    return 0;
}

/* c_pp, c_tg: contexts for the two tests (c_pp's writes the last logits
 * row of a PP-token call alone) */
static int measure(kiln_ctx *c_pp, kiln_ctx *c_tg, const kiln_model *m, int threads, int reps, const char *only,
                   speed *pp, speed *tg) {
    omp_set_num_threads(threads);
    int32_t *tok = malloc(PP * sizeof *tok);
    float *logits = malloc((size_t)PP * (size_t)m->hp.n_vocab * sizeof *logits); /* one row is written */
    double *rate = malloc((size_t)reps * sizeof *rate);
    if (!tok || !logits || !rate) {
        free(tok), free(logits), free(rate);
        return -1;
    }
    uint64_t x = 12345;
    for (int i = 0; i < PP; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((x >> 33) % (uint64_t)m->hp.n_vocab);
    }
    kiln_err err = {{0}};
    int rc = 0;
    *pp = *tg = (speed){0, 0};
    if (strcmp(only, "tg") && !(rc = one_test(c_pp, tok, PP, reps, logits, rate, &err))) *pp = stats(rate, reps);
    if (!rc && strcmp(only, "pp") && !(rc = one_test(c_tg, tok, 1, reps, logits, rate, &err))) *tg = stats(rate, reps);
    if (rc) fprintf(stderr, "bench_runtime: %s\n", err.msg);
    free(rate);
    free(tok);
    free(logits);
    return rc;
}

/* Whether tensor t is read by every decoded token: all but a token
 * embedding the output does not share (one row of it is read). */
static int decode_reads(const kiln_model *m, const kiln_tensor *t) {
    return t != m->tok_embd || m->output == m->tok_embd;
}

/* The best of reps plain reads of the weights one token reads, in GB/s,
 * each thread taking its share of every tensor in file order; *bytes:
 * how many bytes that is. Every byte is loaded (one 8-byte load per
 * 64-byte line read slower than the F16 decode does) and the lines
 * KILN_STREAM_AHEAD bytes on are prefetched into L2, as the decode
 * kernels do. */
static volatile uint64_t read_sink; /* keeps the loads */
static double read_ceiling(const kiln_model *m, int threads, int reps, uint64_t *bytes) {
    const kiln_gguf *g = m->gguf;
    *bytes = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (decode_reads(m, &g->tensors[i])) *bytes += g->tensors[i].nbytes;
    double best = 0;
    uint64_t sink = 0;
    for (int r = -1; r < reps; r++) { /* r = -1: faults the pages in */
        const double t0 = kiln_now();
#pragma omp parallel num_threads(threads) reduction(^ : sink)
        {
            const int me = omp_get_thread_num(), team = omp_get_num_threads();
            uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
            for (uint64_t i = 0; i < g->n_tensors; i++) {
                const kiln_tensor *t = &g->tensors[i];
                if (!decode_reads(m, t)) continue;
                const uint64_t lines = t->nbytes / 64, from = lines * me / team, to = lines * (me + 1) / team;
                const uint8_t *p = t->data;
                for (uint64_t l = from; l < to; l++) {
                    uint64_t v[8];
                    __builtin_prefetch(p + l * 64 + KILN_STREAM_AHEAD, 0, 2);
                    memcpy(v, p + l * 64, 64);
                    a0 ^= v[0] ^ v[4], a1 ^= v[1] ^ v[5], a2 ^= v[2] ^ v[6], a3 ^= v[3] ^ v[7];
                }
            }
            sink ^= a0 ^ a1 ^ a2 ^ a3;
        }
        const double gbps = (double)*bytes / (kiln_now() - t0) / 1e9;
        if (r >= 0 && gbps > best) best = gbps;
    }
    read_sink = sink;
    return best;
}

int main(int argc, char **argv) {
    int threads = 2, reps = 3, i = 1;
    const char *only = "";
    kiln_attention attention = KILN_ATTN_F32;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-s")) only = argv[i + 1];
        else if (!strcmp(argv[i], "-fa")) attention = atoi(argv[i + 1]) ? KILN_ATTN_LLAMACPP : KILN_ATTN_F32;
        else break;
    }
    if (i != argc - 1 || threads < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_runtime [-t THREADS] [-r REPS] [-s pp|tg|read] [-fa 0|1] MODEL.gguf (run by bench/bench_runtime.sh)\n");
        return 2;
    }
    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(argv[i], &err);
    if (m && !strcmp(only, "read")) { /* no context: the weights alone */
        uint64_t bytes;
        const double gbps = read_ceiling(m, threads, reps, &bytes);
        printf("read %.3f %llu\n", gbps, (unsigned long long)bytes);
        kiln_model_free(m);
        return 0;
    }
    kiln_ctx_params cp = {.n_ctx = PP + TG, .attention = attention}, cp_pp = cp;
    cp_pp.logits_from = PP - 1;
    kiln_ctx *c_tg = m ? kiln_ctx_new(m, &cp, &err) : NULL;
    kiln_ctx *c_pp = c_tg ? kiln_ctx_new(m, &cp_pp, &err) : NULL;
    if (!c_pp) {
        fprintf(stderr, "bench_runtime: %s: %s\n", argv[i], err.msg);
        kiln_ctx_free(c_tg);
        kiln_model_free(m);
        return 1;
    }
    speed pp, tg;
    int rc = measure(c_pp, c_tg, m, threads, reps, only, &pp, &tg);
    if (!rc) printf("pp%d %.3f %.3f tg%d %.3f %.3f\n", PP, pp.mean, pp.sd, TG, tg.mean, tg.sd);
    kiln_ctx_free(c_pp);
    kiln_ctx_free(c_tg);
    kiln_model_free(m);
    return rc ? 1 : 0;
}
