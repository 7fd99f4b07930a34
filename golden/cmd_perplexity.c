/* golden/cmd_perplexity.c - `kiln perplexity`: the CLI over perplexity.h.
 * Prints llama-perplexity's running estimate and final line (or its KL
 * divergence tables), or everything as JSON. */
#include "../cli/cli.h"
#include "../core/fileio.h"
#include "../runtime/layer_major.h"
#include "golden_file.h"
#include "perplexity.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: kiln perplexity MODEL -f TEXT [options]\n"
    "       kiln perplexity MODEL --kl-divergence BASE [-f TEXT] [options]\n"
    "\n"
    "Measures MODEL's perplexity on TEXT exactly as llama-perplexity does: the\n"
    "tokenized text is cut into chunks of N tokens, each starting with BOS (when\n"
    "the vocabulary adds one) and evaluated from an empty cache, and only the\n"
    "second half of every chunk is scored. Prints the running estimate per chunk\n"
    "and \"Final estimate: PPL = X +/- Y\".\n"
    "\n"
    "  -f, --file FILE          the text ('-': standard input)\n"
    "  -c, --ctx-size N         tokens per chunk (default 512)\n"
    "  -b, --batch-size N       tokens per evaluation call (default 2048; at most N)\n"
    "      --chunks N           score only the first N chunks\n"
    "  -t, --threads N          threads (default: all cores)\n"
    "      --exact              dequantize weights, f32 products (default: ggml's numbers)\n"
    "      --save-logits BASE   also write the scored logits to BASE (zstd) for a later\n"
    "                           --kl-divergence run of a quantized model\n"
    "      --logits-f16         store them as f16 (half the size, ~3 digits)\n"
    "      --kl-divergence BASE compare against BASE: KLD percentiles, same top-1,\n"
    "                           PPL ratio, RMS dp (chunks and n_ctx come from BASE;\n"
    "                           a TEXT given too must be the one BASE was made from)\n"
    "      --force              overwrite an existing --save-logits file\n"
    "      --json               print every figure as one JSON object\n"
    KILN_CLI_MEMORY_HELP
    "  -q, --quiet              no running estimate\n"
    "  -h, --help               this help\n"
    "\n"
    "exit status: 0 done, 1 error, 2 usage error\n";

typedef struct opts {
    const char *model, *text, *save, *base;
    kiln_cli_eval ev;
    bool exact, f16, force, json, quiet;
    kiln_cli_memory mem;
} opts;

enum { O_EXACT = 256, O_SAVE, O_F16, O_KLD, O_FORCE, O_JSON };

static int parse(int argc, char **argv, opts *o) {
    static const struct option lo[] = {
        {"file", required_argument, 0, 'f'},     KILN_CLI_EVAL_OPTIONS,
        {"exact", no_argument, 0, O_EXACT},
        {"save-logits", required_argument, 0, O_SAVE}, {"logits-f16", no_argument, 0, O_F16},
        {"kl-divergence", required_argument, 0, O_KLD}, {"force", no_argument, 0, O_FORCE},
        {"json", no_argument, 0, O_JSON},        {"quiet", no_argument, 0, 'q'},
        KILN_CLI_MEMORY_OPTIONS,
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0},
    };
    *o = (opts){.ev = {.n_ctx = 512, .n_batch = 2048}};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "f:" KILN_CLI_EVAL_SHORT "qh", lo, NULL)) != -1) {
        switch (c) {
        case 'f': o->text = optarg; break;
        case O_EXACT: o->exact = true; break;
        case O_SAVE: o->save = optarg; break;
        case O_F16: o->f16 = true; break;
        case O_KLD: o->base = optarg; break;
        case O_FORCE: o->force = true; break;
        case O_JSON: o->json = true; break;
        case 'q': o->quiet = true; break;
        case 'h': fputs(USAGE, stdout); return -1;
        default: {
            const int took = kiln_cli_eval_opt(&o->ev, c, optarg, "perplexity");
            const int mem = took ? took : kiln_cli_memory_opt(&o->mem, c, optarg, "perplexity");
            if (mem < 0) return KILN_EXIT_USAGE;
            if (!mem) return kiln_cli_usage_error("perplexity", "unknown option");
        }
        }
    }
    if (optind != argc - 1) return kiln_cli_usage_error("perplexity", "expects exactly one MODEL");
    o->model = argv[optind];
    if (!o->text && !o->base) return kiln_cli_usage_error("perplexity", "give the text with -f (or a base with --kl-divergence)");
    if (o->save && o->base) return kiln_cli_usage_error("perplexity", "--save-logits and --kl-divergence exclude each other");
    if (o->f16 && !o->save) return kiln_cli_usage_error("perplexity", "--logits-f16 goes with --save-logits");
    return 0;
}

/* One llama-perplexity per-chunk row of the KLD table. */
static void print_kld_row(const kiln_ppl_progress *p) {
    kiln_cmp_summary s;
    kiln_cmp_running(p->kld, &s);
    if (p->chunk == 1)
        printf("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              "
               "\xce\x94p RMS            Same top p\n");
    printf("%4lld    %9.4f \xc2\xb1 %9.4f    %10.5f \xc2\xb1 %10.5f    %10.5f \xc2\xb1 %10.5f    %6.3f \xc2\xb1 %6.3f %%"
           "    %6.3f \xc2\xb1 %6.3f %%\n",
           (long long)p->chunk, s.ppl.val, s.ppl.unc, s.ln_ppl_ratio.val, s.ln_ppl_ratio.unc, s.kld.val, s.kld.unc,
           100 * s.p_diff_rms.val, 100 * s.p_diff_rms.unc, 100 * s.same_top.val, 100 * s.same_top.unc);
}

static void on_chunk(void *user, const kiln_ppl_progress *p) {
    (void)user;
    if (p->kld) print_kld_row(p);
    else printf("[%lld]%.4f,", (long long)p->chunk, p->ppl);
    fflush(stdout);
}

static void print_kld(const kiln_cmp_summary *s) {
    printf("\n====== Perplexity statistics ======\n");
    printf("Mean PPL(Q)                   : %10.6f \xc2\xb1 %10.6f\n", s->ppl.val, s->ppl.unc);
    printf("Mean PPL(base)                : %10.6f \xc2\xb1 %10.6f\n", s->ppl_ref.val, s->ppl_ref.unc);
    printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * s->ln_ppl_cor);
    printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f \xc2\xb1 %10.6f\n", s->ln_ppl_ratio.val, s->ln_ppl_ratio.unc);
    printf("Mean PPL(Q)/PPL(base)         : %10.6f \xc2\xb1 %10.6f\n", s->ppl_ratio.val, s->ppl_ratio.unc);
    printf("Mean PPL(Q)-PPL(base)         : %10.6f \xc2\xb1 %10.6f\n", s->ppl_diff.val, s->ppl_diff.unc);
    printf("\n====== KL divergence statistics ======\n");
    printf("Mean    KLD: %10.6f \xc2\xb1 %10.6f\n", s->kld.val, s->kld.unc);
    printf("Maximum KLD: %10.6f\n99.9%%   KLD: %10.6f\n99.0%%   KLD: %10.6f\n95.0%%   KLD: %10.6f\n"
           "90.0%%   KLD: %10.6f\nMedian  KLD: %10.6f\n10.0%%   KLD: %10.6f\n 1.0%%   KLD: %10.6f\n"
           "Minimum KLD: %10.6f\n",
           s->kld_max, s->kld_p999, s->kld_p99, s->kld_p95, s->kld_p90, s->kld_median, s->kld_p10, s->kld_p01,
           s->kld_min);
    printf("\n====== Token probability statistics ======\n");
    printf("Mean    \xce\x94p: %6.3f \xc2\xb1 %5.3f %%\n", 100 * s->p_diff.val, 100 * s->p_diff.unc);
    printf("Maximum \xce\x94p: %6.3f%%\nMedian  \xce\x94p: %6.3f%%\nMinimum \xce\x94p: %6.3f%%\n", 100 * s->p_diff_max,
           100 * s->p_diff_median, 100 * s->p_diff_min);
    printf("RMS \xce\x94p    : %6.3f \xc2\xb1 %5.3f %%\n", 100 * s->p_diff_rms.val, 100 * s->p_diff_rms.unc);
    printf("Same top p: %6.3f \xc2\xb1 %5.3f %%\n", 100 * s->same_top.val, 100 * s->same_top.unc);
}

/* NaN and infinities are not JSON: they become null. */
static json_t *num(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}

static int print_json(const opts *o, const kiln_ppl_result *r, int threads) {
    json_t *j = json_pack("{s:s, s:s, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:b, s:o, s:o, s:i, s:s, s:O}",
                          "schema", "kiln.perplexity/1", "model", o->model, "ppl", num(r->ppl), "ppl_err", num(r->ppl_err),
                          "n_ctx", (json_int_t)r->n_ctx, "n_chunks", (json_int_t)r->n_chunks,
                          "n_tokens", (json_int_t)r->n_tokens, "n_scored", (json_int_t)r->count,
                          "n_text_tokens", (json_int_t)r->n_text_tokens, "add_bos", r->add_bos,
                          "seconds", num(r->seconds), "tokens_per_second", num(r->tokens_per_second),
                          "threads", threads, "numeric_mode", o->exact ? "exact" : "ggml",
                          "fingerprint", r->model);
    if (j && o->save) json_object_set_new(j, "saved_logits", json_string(o->save));
    if (j && r->has_kld) {
        const kiln_cmp_summary *s = &r->kld;
        /* 2 + 24 pairs */
        json_t *k = json_pack("{s:s, s:O, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o,"
                              " s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
                              "base", o->base, "base_fingerprint", r->base_model ? r->base_model : json_null(),
                              "ppl_base", num(s->ppl_ref.val), "ppl_base_err", num(s->ppl_ref.unc),
                              "ppl_ratio", num(s->ppl_ratio.val), "ppl_ratio_err", num(s->ppl_ratio.unc),
                              "ln_ppl_ratio", num(s->ln_ppl_ratio.val), "ln_ppl_ratio_err", num(s->ln_ppl_ratio.unc),
                              "ln_ppl_correlation", num(s->ln_ppl_cor),
                              "kld_mean", num(s->kld.val), "kld_mean_err", num(s->kld.unc),
                              "kld_median", num(s->kld_median), "kld_p90", num(s->kld_p90),
                              "kld_p95", num(s->kld_p95), "kld_p99", num(s->kld_p99), "kld_p999", num(s->kld_p999),
                              "kld_max", num(s->kld_max), "kld_min", num(s->kld_min),
                              "same_top1", num(s->same_top.val), "same_top1_err", num(s->same_top.unc),
                              "dp_mean", num(s->p_diff.val), "dp_rms", num(s->p_diff_rms.val),
                              "dp_rms_err", num(s->p_diff_rms.unc), "dp_max", num(s->p_diff_max),
                              "dp_min", num(s->p_diff_min), "max_abs", num(s->max_abs));
        if (!k || json_object_update(j, k)) {
            json_decref(j);
            j = NULL;
        }
        json_decref(k);
    }
    if (!j) {
        fprintf(stderr, "kiln: out of memory\n");
        return KILN_EXIT_FAIL;
    }
    json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    putchar('\n');
    json_decref(j);
    return KILN_EXIT_OK;
}

int kiln_cmd_perplexity(int argc, char **argv) {
    opts o;
    int prc = parse(argc, argv, &o);
    if (prc) return prc < 0 ? KILN_EXIT_OK : prc;
    if (o.ev.threads) omp_set_num_threads((int)o.ev.threads);
    int threads = o.ev.threads ? (int)o.ev.threads : omp_get_max_threads();

    kiln_err err = {{0}};
    size_t len = 0;
    char *text = o.text ? kiln_read_text(o.text, &len, &err) : NULL;
    if (o.text && !text) return kiln_cli_fail(&err);
    kiln_model *m = kiln_model_load(o.model, &err);
    if (!m) {
        free(text);
        return kiln_cli_fail(&err);
    }
    kiln_cli_memory mem = o.mem;
    kiln_cli_memory_decide(&mem, kiln_model_weight_bytes(m), "perplexity", o.quiet || o.json);
    kiln_ppl_params p = {
        .layer_major = mem.layer_major,
        .max_memory = mem.max_memory,
        .scratch_dir = mem.scratch_dir,
        .n_ctx = o.base && !o.ev.ctx_given ? 0 : (int64_t)o.ev.n_ctx,
        .n_batch = (int64_t)o.ev.n_batch,
        .n_chunks = (int64_t)o.ev.n_chunks,
        .mode = o.exact ? KILN_NUM_EXACT : KILN_NUM_GGML,
        .save_path = o.save,
        .save_f16 = o.f16,
        .force = o.force,
        .base_path = o.base,
        .on_chunk = o.json || o.quiet ? NULL : on_chunk,
    };
    if (!o.json) {
        printf("perplexity: %s, ", o.model);
        if (p.n_ctx) printf("n_ctx=%lld", (long long)p.n_ctx);
        else printf("n_ctx and chunks from %s", o.base);
        /* each chunk is evaluated alone, so a batch never exceeds it */
        uint64_t nb = p.n_ctx && o.ev.n_batch > o.ev.n_ctx ? o.ev.n_ctx : o.ev.n_batch;
        printf(", batch_size=%s%llu, %d thread%s, %s numbers\n", p.n_ctx ? "" : "at most ",
               (unsigned long long)nb, threads, threads == 1 ? "" : "s", o.exact ? "exact" : "ggml");
    }
    kiln_ppl_result r;
    int rc = kiln_perplexity(m, text, len, &p, &r, &err);
    if (rc) {
        if (!o.json && !o.quiet) putchar('\n');
        fflush(stdout);
        rc = kiln_cli_fail(&err);
    } else if (o.json) {
        rc = print_json(&o, &r, threads);
    } else {
        if (!o.quiet && !r.has_kld) putchar('\n');
        if (r.has_kld) print_kld(&r.kld);
        else if (isnan(r.ppl_err)) printf("Final estimate: PPL = %.4f (no spread: every token scored the same)\n", r.ppl);
        else printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_err);
        printf("%lld chunk%s, %lld tokens evaluated in %.2f s: %.1f tokens/s\n", (long long)r.n_chunks,
               r.n_chunks == 1 ? "" : "s", (long long)r.n_tokens, r.seconds, r.tokens_per_second);
        if (o.save) printf("logits saved to %s\n", o.save);
    }
    if (!rc) kiln_ppl_result_free(&r);
    kiln_model_free(m);
    free(text);
    return rc;
}
