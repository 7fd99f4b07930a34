/* golden/cmd_probe.c - the CLI of the layer probes (probe.h), shared by
 * `kiln diff --activations A B -f TEXT` and `kiln golden --layers A B -f
 * TEXT`: options as llama.cpp names them, then a table (default), the
 * JSON report (--json, kiln.activations/1) or a plot-friendly TSV. Exit
 * status as every command: 0 success, 1 an error, 2 a usage error. */
#include "../cli/cli.h"
#include "../core/escape.h"
#include "../core/fileio.h"
#include "../core/progress.h"
#include "cmd_probe.h"
#include "probe.h"

#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: kiln diff --activations A B -f TEXT [options]\n"
    "       kiln golden --layers A B -f TEXT [options]     (the same report)\n"
    "\n"
    "Evaluates A and B, the same network stored differently (F16 and a\n"
    "quantization of it, two quantizations), on the same tokens of TEXT and\n"
    "reports how far B's hidden states drift from A's, per layer: for every\n"
    "matrix product's output (attn_q/k/v/output, ffn_gate/up/down, the experts\n"
    "of a 3-D tensor together, output) and for the residual stream after every\n"
    "block, the cosine similarity and the relative RMS ||b-a|| / ||a||; and the\n"
    "KL divergence of the final logits with top-1 agreement, over the positions\n"
    "`kiln perplexity --kl-divergence` scores (it gives the same figures). The\n"
    "text is cut into chunks as llama-perplexity cuts it. A and B must have the\n"
    "same architecture, tensor names and shapes, and vocabulary.\n"
    "\n"
    "  -f, --file TEXT        the text (required)\n"
    "  -c, --ctx-size N       tokens per chunk (default 512, or the text's length\n"
    "                         when shorter)\n"
    "  -b, --batch-size N     tokens per step (default: the chunk; at most 512).\n"
    "                         Memory: one step's outputs of A are held\n"
    "      --chunks N         only the first N chunks\n"
    "  -t, --threads N        threads (default: all cores)\n"
    "      --exact            dequantize weights, f32 products (default: ggml's numbers)\n"
    "      --json             the report as JSON (schema kiln.activations/1)\n"
    "      --tsv              one row per (layer, tensor): layer, tensor, cosine,\n"
    "                         rel_rms (the output projection is layer n_layer)\n"
    "  -q, --quiet            no progress bar\n"
    "  -h, --help             this help\n"
    "\n"
    "exit status: 0 success, 1 an error (e.g. A and B are different networks),\n"
    "2 usage error\n";

enum { O_EXACT = 256, O_JSON, O_TSV, O_CHOSEN };

typedef struct opts {
    const char *text, *a, *b;
    kiln_cli_eval ev;
    bool exact, json, tsv;
} opts;

/* Returns 0, -1 after --help, or the usage exit code. */
static int parse(const char *cmd, int argc, char **argv, opts *o) {
    static const struct option lo[] = {
        {"file", required_argument, 0, 'f'},    KILN_CLI_EVAL_OPTIONS,
        {"exact", no_argument, 0, O_EXACT},
        {"json", no_argument, 0, O_JSON},       {"tsv", no_argument, 0, O_TSV},
        {"quiet", no_argument, 0, 'q'},         {"help", no_argument, 0, 'h'},
        {"activations", no_argument, 0, O_CHOSEN}, {"layers", no_argument, 0, O_CHOSEN},
        {0, 0, 0, 0},
    };
    *o = (opts){0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "f:" KILN_CLI_EVAL_SHORT "qh", lo, NULL)) != -1) {
        switch (c) {
        case 'f': o->text = optarg; break;
        case O_EXACT: o->exact = true; break;
        case O_JSON: o->json = true; break;
        case O_TSV: o->tsv = true; break;
        case 'q': kiln_progress_quiet = true; break;
        case O_CHOSEN: break;
        case 'h': fputs(USAGE, stdout); return -1;
        default: {
            const int took = kiln_cli_eval_opt(&o->ev, c, optarg, cmd);
            if (took < 0) return KILN_EXIT_USAGE;
            if (!took) return kiln_cli_usage_error(cmd, "unknown option");
        }
        }
    }
    if (optind != argc - 2) return kiln_cli_usage_error(cmd, "expects two models, A and B");
    o->a = argv[optind];
    o->b = argv[optind + 1];
    if (!o->text) return kiln_cli_usage_error(cmd, "give the text with -f FILE");
    if (o->json && o->tsv) return kiln_cli_usage_error(cmd, "--json and --tsv exclude each other");
    return 0;
}

static bool is_residual(const kiln_probe_stat *s) {
    return !strcmp(s->tensor, "residual");
}

/* The block tensors in the order the report first meets them. */
static size_t columns(const kiln_probe_result *r, const char **cols, size_t max) {
    size_t n = 0;
    for (size_t i = 0; i < r->n_stats; i++) {
        const kiln_probe_stat *s = &r->stats[i];
        if (s->layer >= r->n_layer || is_residual(s)) continue;
        size_t j = 0;
        while (j < n && strcmp(cols[j], s->tensor)) j++;
        if (j == n && n < max) cols[n++] = s->tensor;
    }
    return n;
}

static const kiln_probe_stat *find(const kiln_probe_result *r, int64_t layer, const char *tensor) {
    for (size_t i = 0; i < r->n_stats; i++)
        if (r->stats[i].layer == layer && !strcmp(r->stats[i].tensor, tensor)) return &r->stats[i];
    return NULL;
}

/* Indices of the n stats (residuals left out) with the largest rel_rms. */
static size_t worst(const kiln_probe_result *r, size_t *idx, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < r->n_stats; i++) {
        if (is_residual(&r->stats[i])) continue;
        const double v = kiln_probe_rel_rms(&r->stats[i].sums);
        size_t j = k < n ? k++ : n;
        while (j > 0 && kiln_probe_rel_rms(&r->stats[idx[j - 1]].sums) < v) {
            if (j < n) idx[j] = idx[j - 1];
            j--;
        }
        if (j < n) idx[j] = i;
    }
    return k;
}

static void print_table(const opts *o, const kiln_probe_result *r) {
    printf("activations: B = %s against A = %s (%s)\n", kiln_esc(o->b).s, kiln_esc(o->a).s,
           kiln_fp_relation_name(r->relation));
    printf("%lld chunk%s of %lld tokens (%lld of the text's %lld), steps of %lld, one step's captures %.1f MiB\n\n",
           (long long)r->n_chunks, r->n_chunks == 1 ? "" : "s", (long long)r->n_ctx, (long long)r->n_tokens,
           (long long)r->n_text_tokens, (long long)r->n_batch, r->capture_bytes / 1048576.0);
    const char *cols[32];
    const size_t nc = columns(r, cols, 32);
    const int64_t w = kiln_probe_worst_output(r);
    double jump;
    const int64_t jl = kiln_probe_largest_jump(r, &jump);
    printf("relative RMS ||b-a||/||a|| of each output (* the worst), and of the residual stream:\n%5s", "layer");
    int width[32];
    for (size_t c = 0; c < nc; c++) {
        width[c] = (int)strlen(cols[c]) + 1 > 10 ? (int)strlen(cols[c]) + 1 : 10;
        printf(" %*s", width[c], kiln_esc(cols[c]).s);
    }
    printf(" | %10s %10s %10s\n", "residual", "cosine", "jump");
    double prev = 0;
    for (int64_t l = 0; l < r->n_layer; l++) {
        printf("%5lld", (long long)l);
        for (size_t c = 0; c < nc; c++) {
            const kiln_probe_stat *s = find(r, l, cols[c]);
            char cell[32] = "-";
            if (s) snprintf(cell, sizeof cell, "%.4g%s", kiln_probe_rel_rms(&s->sums), s - r->stats == w ? "*" : "");
            printf(" %*s", width[c], cell);
        }
        const kiln_probe_stat *res = find(r, l, "residual");
        if (!res) {
            putchar('\n');
            continue;
        }
        const double rel = kiln_probe_rel_rms(&res->sums);
        printf(" | %10.4g %10.7f %+10.4g%s\n", rel, kiln_probe_cosine(&res->sums), rel - prev,
               res - r->stats == jl && jump > 0 ? "  <- largest jump" : "");
        prev = rel;
    }
    for (size_t i = 0; i < r->n_stats; i++) {
        const kiln_probe_stat *s = &r->stats[i];
        if (s->layer >= r->n_layer)
            printf("%s: rel_rms %.4g, cosine %.7f%s\n", kiln_esc(s->tensor).s, kiln_probe_rel_rms(&s->sums),
                   kiln_probe_cosine(&s->sums), (int64_t)i == w ? " (the worst)" : "");
    }
    size_t idx[5];
    const size_t nw = worst(r, idx, 5);
    printf("\nworst outputs:");
    for (size_t i = 0; i < nw; i++) {
        const kiln_probe_stat *s = &r->stats[idx[i]];
        if (s->layer < r->n_layer) printf("%s blk.%lld.%s %.4g", i ? "," : "", (long long)s->layer, kiln_esc(s->tensor).s,
                                          kiln_probe_rel_rms(&s->sums));
        else printf("%s %s %.4g", i ? "," : "", kiln_esc(s->tensor).s, kiln_probe_rel_rms(&s->sums));
    }
    putchar('\n');
    if (jl >= 0 && jump > 0)
        printf("largest jump of the residual's rel_rms: +%.4g at layer %lld\n", jump, (long long)r->stats[jl].layer);
    uint64_t unmatched = 0;
    for (size_t i = 0; i < r->n_stats; i++) unmatched += r->stats[i].n_unmatched;
    if (unmatched)
        printf("experts: %llu (token, expert) rows were routed by one model only and are not compared\n",
               (unsigned long long)unmatched);
    const kiln_cmp_summary *k = &r->kld;
    printf("final logits: KLD mean %.6f \xc2\xb1 %.6f, max %.6f; top-1 agreement %.3f%% over %llu positions\n",
           k->kld.val, k->kld.unc, k->kld_max, 100 * k->same_top.val, (unsigned long long)k->count);
}

static void print_tsv(const kiln_probe_result *r) {
    printf("layer\ttensor\tcosine\trel_rms\n");
    for (size_t i = 0; i < r->n_stats; i++) {
        const kiln_probe_stat *s = &r->stats[i];
        printf("%lld\t%s\t%.9g\t%.9g\n", (long long)s->layer, kiln_esc(s->tensor).s, kiln_probe_cosine(&s->sums),
               kiln_probe_rel_rms(&s->sums));
    }
}

static void on_chunk(void *user, int64_t chunk, int64_t n_chunks) {
    kiln_progress *pr = user;
    if (chunk == 1) kiln_progress_start(pr, "probing", (uint64_t)n_chunks, "chunks");
    kiln_progress_add(pr, 1);
}

int kiln_probe_cli(const char *cmd, int argc, char **argv) {
    opts o;
    int rc = parse(cmd, argc, argv, &o);
    if (rc) return rc < 0 ? KILN_EXIT_OK : rc;
    if (o.ev.threads) omp_set_num_threads((int)o.ev.threads);
    kiln_err err = {{0}};
    size_t len = 0;
    char *text = kiln_read_text(o.text, &len, &err);
    if (!text) return kiln_cli_fail(&err);
    kiln_model *a = kiln_model_load(o.a, &err), *b = a ? kiln_model_load(o.b, &err) : NULL;
    kiln_progress pr = {0};
    kiln_probe_params p = {.path_a = o.a, .path_b = o.b, .n_ctx = (int64_t)o.ev.n_ctx, .n_batch = (int64_t)o.ev.n_batch,
                           .n_chunks = (int64_t)o.ev.n_chunks, .mode = o.exact ? KILN_NUM_EXACT : KILN_NUM_GGML,
                           .on_chunk = on_chunk, .user = &pr};
    kiln_probe_result r;
    memset(&r, 0, sizeof r);
    if (!b || kiln_probe_run(a, b, text, len, &p, &r, &err) < 0) {
        if (pr.active) kiln_progress_end(&pr);
        rc = kiln_cli_fail(&err);
    } else {
        if (pr.active) kiln_progress_end(&pr);
        rc = KILN_EXIT_OK;
        if (o.json) {
            json_t *j = kiln_probe_json(&r);
            if (!j) {
                fprintf(stderr, "kiln: out of memory\n");
                rc = KILN_EXIT_FAIL;
            } else {
                json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
                putchar('\n');
                json_decref(j);
            }
        } else if (o.tsv) {
            print_tsv(&r);
        } else {
            print_table(&o, &r);
        }
    }
    kiln_probe_result_free(&r);
    kiln_model_free(b);
    kiln_model_free(a);
    free(text);
    return rc;
}
