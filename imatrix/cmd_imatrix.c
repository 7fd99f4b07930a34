/* imatrix/cmd_imatrix.c - `kiln imatrix`: the CLI over imatrix/. Three
 * jobs, told apart by the arguments:
 *   MODEL -f CALIB ...        collect an importance matrix (run.h)
 *   --in-file A [--in-file B] -o OUT     merge or convert files
 *   --show-statistics --in-file A        report on a file (stats.h)
 * Options and defaults follow llama-imatrix where it has them. */
#include "../cli/cli.h"
#include "../core/fileio.h"
#include "../core/progress.h"
#include "../runtime/layer_major.h"
#include "../runtime/model.h"
#include "calib.h"
#include "chunks.h"
#include "imatrix_check.h"
#include "merge_files.h"
#include "run.h"
#include "stats.h"

#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *USAGE =
    "usage: kiln imatrix MODEL -f CALIB [options]          collect an importance matrix\n"
    "       kiln imatrix --in-file A [--in-file B ...] -o OUT   merge or convert\n"
    "       kiln imatrix --show-statistics --in-file A [--json]\n"
    "\n"
    "Evaluates the GGUF model MODEL on the calibration text in chunks of N tokens\n"
    "(BOS first when the model adds one, as llama-imatrix) and records, for every\n"
    "matrix-product weight and every input column, the sum of squared activations\n"
    "and the number of tokens seen; per expert for 3-D MoE weights, from exactly\n"
    "the tokens routed to each expert.\n"
    "\n"
    "input:\n"
    "  -f, --file FILE        calibration text: plain, zstd-compressed, JSON Lines\n"
    "                         (.jsonl), or a tar/zip archive of such files; repeat\n"
    "                         for several ('-' reads standard input)\n"
    "      --jsonl-field NAME the JSON Lines field holding the text (default text)\n"
    "      --parse-special    let control-token text such as \"<s>\" become tokens\n"
    "  -c, --ctx-size N       tokens per chunk (default 512)\n"
    "      --chunks N         use at most N chunks (default: all whole chunks)\n"
    "      --process-output   also collect output.weight (left out by default)\n"
    "      --with-in-sum      also keep the sums of activations (TENSOR.in_sum)\n"
    "      --in-file FILE     start from (or, without MODEL, merge) these statistics,\n"
    "                         GGUF or legacy .dat; repeatable\n"
    "output:\n"
    "  -o, --output FILE      where to write (default imatrix.gguf)\n"
    "      --output-format F  gguf (default, llama.cpp's format) or dat (legacy)\n"
    "      --force            overwrite an existing output\n"
    "      --save-frequency N write a checkpoint (OUT.ckpt) every N chunks\n"
    "      --resume           continue from OUT.ckpt left by a killed run\n"
    "report:\n"
    "      --show-statistics  per tensor: sum, mean and max of the column sums of x^2,\n"
    "                         share of columns without data, expert coverage\n"
    "      --json             the statistics as JSON\n"
    "      --no-ppl           skip the running perplexity (no logits are computed)\n"
    KILN_CLI_MEMORY_HELP
    "other:\n"
    "  -t, --threads N        threads (default: all cores)\n"
    "      --mode M           ggml (default: llama.cpp's numbers) or exact\n"
    "  -q, --quiet            no progress output\n"
    "  -h, --help             this help\n";

typedef struct opts {
    const char *model, *out, *field, *format;
    const char **files, **in_files;
    int n_files, n_in_files;
    int64_t n_ctx, n_chunks;
    uint32_t save_every;
    int threads;
    bool process_output, with_sum, parse_special, force, resume, show_stats, json, no_ppl, quiet;
    bool ctx_given;
    kiln_cli_memory mem;
    kiln_numeric_mode mode;
} opts;

enum {
    O_JSONL = 256, O_PARSE, O_CHUNKS, O_POUT, O_SUM, O_IN, O_FMT, O_FORCE, O_SAVE, O_RESUME, O_STATS,
    O_JSON, O_NOPPL, O_MODE,
};

static bool push(const char ***list, int *n, const char *v) {
    const char **l = realloc(*list, (size_t)(*n + 1) * sizeof *l);
    if (!l) return false;
    l[(*n)++] = v;
    *list = l;
    return true;
}

static bool parse_count(const char *s, uint64_t max, uint64_t *v) {
    return kiln_parse_u64(s, v) && *v > 0 && *v <= max;
}

/* Returns -1 when parsing went fine, else the exit code. */
static int parse(int argc, char **argv, opts *o) {
    static const struct option lo[] = {
        {"file", required_argument, 0, 'f'},        {"jsonl-field", required_argument, 0, O_JSONL},
        {"parse-special", no_argument, 0, O_PARSE}, {"ctx-size", required_argument, 0, 'c'},
        {"chunks", required_argument, 0, O_CHUNKS}, {"process-output", no_argument, 0, O_POUT},
        {"with-in-sum", no_argument, 0, O_SUM},     {"in-file", required_argument, 0, O_IN},
        {"output", required_argument, 0, 'o'},      {"output-format", required_argument, 0, O_FMT},
        {"force", no_argument, 0, O_FORCE},         {"save-frequency", required_argument, 0, O_SAVE},
        {"resume", no_argument, 0, O_RESUME},       {"show-statistics", no_argument, 0, O_STATS},
        {"json", no_argument, 0, O_JSON},           {"no-ppl", no_argument, 0, O_NOPPL},
        {"threads", required_argument, 0, 't'},     {"mode", required_argument, 0, O_MODE},
        {"model", required_argument, 0, 'm'},       {"quiet", no_argument, 0, 'q'},
        KILN_CLI_MEMORY_OPTIONS,
        {"help", no_argument, 0, 'h'},              {0, 0, 0, 0},
    };
    *o = (opts){.out = "imatrix.gguf", .format = NULL, .n_ctx = 512};
    uint64_t v;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "f:c:o:t:m:qh", lo, NULL)) != -1) {
        switch (c) {
        case 'f': if (!push(&o->files, &o->n_files, optarg)) return kiln_cli_usage_error("imatrix", "out of memory"); break;
        case O_IN: if (!push(&o->in_files, &o->n_in_files, optarg)) return kiln_cli_usage_error("imatrix", "out of memory"); break;
        case O_JSONL: o->field = optarg; break;
        case O_PARSE: o->parse_special = true; break;
        case 'c':
            if (!parse_count(optarg, 1u << 24, &v)) return kiln_cli_usage_error("imatrix", "-c wants a positive size, not '%s'", optarg);
            o->n_ctx = (int64_t)v;
            o->ctx_given = true;
            break;
        case O_CHUNKS:
            if (!parse_count(optarg, INT32_MAX, &v)) return kiln_cli_usage_error("imatrix", "--chunks wants a positive count, not '%s'", optarg);
            o->n_chunks = (int64_t)v;
            break;
        case O_SAVE:
            if (!parse_count(optarg, INT32_MAX, &v)) return kiln_cli_usage_error("imatrix", "--save-frequency wants a positive count, not '%s'", optarg);
            o->save_every = (uint32_t)v;
            break;
        case 't':
            if (!parse_count(optarg, 4096, &v)) return kiln_cli_usage_error("imatrix", "-t wants a thread count, not '%s'", optarg);
            o->threads = (int)v;
            break;
        case O_MODE:
            if (!strcmp(optarg, "ggml")) o->mode = KILN_NUM_GGML;
            else if (!strcmp(optarg, "exact")) o->mode = KILN_NUM_EXACT;
            else return kiln_cli_usage_error("imatrix", "--mode is ggml or exact, not '%s'", optarg);
            break;
        case O_FMT:
            if (strcmp(optarg, "gguf") && strcmp(optarg, "dat"))
                return kiln_cli_usage_error("imatrix", "--output-format is gguf or dat, not '%s'", optarg);
            o->format = optarg;
            break;
        case 'o': o->out = optarg; break;
        case 'm': o->model = optarg; break;
        case O_POUT: o->process_output = true; break;
        case O_SUM: o->with_sum = true; break;
        case O_FORCE: o->force = true; break;
        case O_RESUME: o->resume = true; break;
        case O_STATS: o->show_stats = true; break;
        case O_JSON: o->json = true; break;
        case O_NOPPL: o->no_ppl = true; break;
        case 'q': o->quiet = true; break;
        case 'h': fputs(USAGE, stdout); return KILN_EXIT_OK;
        case KILN_OPT_MAX_MEMORY: case KILN_OPT_LAYER_MAJOR: case KILN_OPT_SCRATCH_DIR:
            if (kiln_cli_memory_opt(&o->mem, c, optarg, "imatrix") < 0) return KILN_EXIT_USAGE;
            break;
        default: return kiln_cli_usage_error("imatrix", "unknown option");
        }
    }
    if (optind < argc && !o->model) o->model = argv[optind++];
    if (optind < argc) return kiln_cli_usage_error("imatrix", "unexpected argument '%s'", argv[optind]);
    if (o->model && !o->n_files) return kiln_cli_usage_error("imatrix", "give the calibration text with -f");
    if (!o->model && o->n_files) return kiln_cli_usage_error("imatrix", "-f needs a MODEL to evaluate");
    if (!o->model && !o->n_in_files)
        return kiln_cli_usage_error("imatrix", "expects MODEL -f CALIB, or --in-file files to merge or show");
    if (!o->model && o->show_stats && o->n_in_files != 1)
        return kiln_cli_usage_error("imatrix", "--show-statistics reports on exactly one --in-file");
    return -1;
}

static bool is_dat(const opts *o) {
    return o->format && !strcmp(o->format, "dat");
}

static int write_out(const kiln_imatrix *im, const opts *o, kiln_err *err) {
    size_t n = strlen(o->out);
    if (!o->format && !(n >= 5 && !strcmp(o->out + n - 5, ".gguf")) && !o->quiet)
        fprintf(stderr, "kiln imatrix: note: writing GGUF to %s (use --output-format dat for the legacy format)\n",
                o->out);
    return is_dat(o) ? kiln_imatrix_write_dat(im, o->out, o->force, err)
                     : kiln_imatrix_write_gguf(im, o->out, o->force, err);
}

static void show(const kiln_imatrix *im, const opts *o) {
    kiln_err err = {{0}};
    kiln_imx_tstat *st = kiln_imx_stats(im, &err);
    if (!st) {
        kiln_cli_fail(&err);
        return;
    }
    if (o->json) kiln_imx_stats_json(stdout, im, st);
    else kiln_imx_stats_table(stdout, im, st);
    free(st);
}

/* Merging, converting, or reporting on existing files: no model needed. */
static int files_only(const opts *o) {
    kiln_err err = {{0}};
    /* Legacy counts are in chunks; they become tokens only when told how
     * long a chunk was (llama-imatrix assumes its -c). */
    kiln_imatrix *im = kiln_imatrix_read_all(o->in_files, o->n_in_files, o->ctx_given ? (uint32_t)o->n_ctx : 0, &err);
    if (!im) return kiln_cli_fail(&err);
    int rc = KILN_EXIT_OK;
    if (o->show_stats) {
        show(im, o);
    } else if (kiln_check_output(o->out, o->in_files, o->n_in_files, o->force, &err) < 0 ||
               write_out(im, o, &err) < 0) {
        rc = kiln_cli_fail(&err);
    } else if (!o->quiet) {
        fprintf(stderr, "kiln imatrix: %llu entries, %u chunks from %d file(s) written to %s\n",
                (unsigned long long)im->n_entries, im->chunk_count, o->n_in_files, o->out);
    }
    kiln_imatrix_free(im);
    return rc;
}

/* llama-imatrix's per-chunk perplexity lines, for logs (the progress bar
 * shows the same on a terminal). */
static void chunk_line(void *user, int64_t done, int64_t total, double ppl) {
    (void)user;
    if (ppl > 0) fprintf(stderr, "[%lld]%.4f,%s", (long long)done, ppl, done % 16 == 0 || done == total ? "\n" : "");
}

static bool exists(const char *path) {
    return access(path, F_OK) == 0;
}

/* Everything a collection run needs, gathered before any evaluation so
 * that bad inputs fail in seconds, not after hours. */
typedef struct job {
    char *ckpt;              /* OUT.ckpt */
    kiln_model *m;
    kiln_imatrix *start;     /* --in-file statistics, or NULL */
    kiln_imx_tokens tk;
    const char **datasets;   /* recorded in the output */
    int n_datasets;
} job;

static void job_free(job *j) {
    free(j->ckpt);
    kiln_model_free(j->m);
    kiln_imatrix_free(j->start);
    kiln_imx_tokens_free(&j->tk);
    free(j->datasets);
}

static int prepare(const opts *o, job *j, kiln_err *err) {
    const char **inputs = NULL;
    int n_inputs = 0;
    bool ok = push(&inputs, &n_inputs, o->model);
    for (int i = 0; ok && i < o->n_files; i++) ok = push(&inputs, &n_inputs, o->files[i]);
    for (int i = 0; ok && i < o->n_in_files; i++) ok = push(&inputs, &n_inputs, o->in_files[i]);
    if (!ok || !(j->ckpt = malloc(strlen(o->out) + 6))) {
        free(inputs);
        return kiln_fail(err, NULL, NULL, -1, "out of memory");
    }
    sprintf(j->ckpt, "%s.ckpt", o->out);
    int rc = kiln_check_output(o->out, inputs, n_inputs, o->force, err);
    free(inputs);
    if (rc < 0) return -1;
    /* Checkpoints are hours of work: a new run does not write over one. */
    if (o->save_every && !o->resume && !o->force && exists(j->ckpt))
        return kiln_fail(err, j->ckpt, NULL, -1,
                         "a checkpoint of an earlier run exists: continue it with --resume, or start over with --force");
    if (o->n_in_files && !(j->start = kiln_imatrix_read_all(o->in_files, o->n_in_files, (uint32_t)o->n_ctx, err)))
        return -1;
    if (!(j->m = kiln_model_load(o->model, err))) return -1;
    if (j->start && kiln_imatrix_check_model(j->start, o->in_files[0], j->m->gguf, err) < 0) return -1;
    char *text;
    size_t len;
    if (kiln_calib_read(o->files, o->n_files, o->field, &text, &len, err) < 0) return -1;
    rc = kiln_imx_tokens_make(j->m->tok, text, len, o->n_ctx, o->n_chunks, o->parse_special, o->files[0], &j->tk, err);
    free(text);
    if (rc < 0) return -1;
    for (uint64_t i = 0; ok && j->start && i < j->start->n_datasets; i++)
        ok = push(&j->datasets, &j->n_datasets, j->start->datasets[i]);
    for (int i = 0; ok && i < o->n_files; i++) ok = push(&j->datasets, &j->n_datasets, o->files[i]);
    return ok ? 0 : kiln_fail(err, NULL, NULL, -1, "out of memory");
}

static void report(const opts *o, const job *j, const kiln_imx_run_result *res) {
    if (o->quiet) return;
    if (res->resumed) fprintf(stderr, "kiln imatrix: resumed from %s after chunk %lld\n", j->ckpt, (long long)res->resumed_from);
    if (!o->no_ppl) fprintf(stderr, "Final estimate: PPL = %.4f +/- %.5f\n", res->ppl, res->ppl_err);
    fprintf(stderr, "kiln imatrix: %lld tokens in %.2f s (%.0f tokens/s); %llu tensors written to %s\n",
            (long long)res->tokens, res->seconds, res->seconds > 0 ? (double)res->tokens / res->seconds : 0,
            (unsigned long long)res->im->n_entries, o->out);
    kiln_imx_coverage_report(stderr, res->im);
}

static int collect(const opts *o) {
    kiln_err err = {{0}};
    job j = {0};
    kiln_imx_run_result res = {0};
    int rc = prepare(o, &j, &err);
    if (rc == 0 && !o->quiet) {
        const int threads = omp_get_max_threads();
        fprintf(stderr, "kiln imatrix: %zu tokens, computing over %lld chunk%s of %lld (%s numerics, %d thread%s)\n",
                j.tk.n, (long long)j.tk.n_chunks, j.tk.n_chunks == 1 ? "" : "s", (long long)j.tk.n_ctx,
                o->mode == KILN_NUM_EXACT ? "exact" : "ggml", threads, threads == 1 ? "" : "s");
        if (o->resume && !exists(j.ckpt))
            fprintf(stderr, "kiln imatrix: no checkpoint %s: starting from the first chunk\n", j.ckpt);
    }
    /* A model larger than the memory left would be read from disk once
     * per chunk: go layer by layer instead, within what is available. */
    kiln_cli_memory mem = o->mem;
    if (rc == 0) kiln_cli_memory_decide(&mem, kiln_model_weight_bytes(j.m), "imatrix", o->quiet);
    if (rc == 0 && mem.layer_major && o->save_every) {
        kiln_fail(&err, NULL, "--save-frequency", -1, "a layer-major pass (--max-memory, --layer-major) "
                  "finishes all chunks together and writes no checkpoints");
        rc = -1;
    }
    kiln_imx_run_params rp = {
        .layer_major = mem.layer_major,
        .max_memory = mem.max_memory,
        .scratch_dir = mem.scratch_dir,
        .process_output = o->process_output,
        .with_sum = o->with_sum,
        .compute_ppl = !o->no_ppl,
        .mode = o->mode,
        .ckpt_path = j.ckpt,
        .save_every = o->save_every,
        .resume = o->resume,
        .start = j.start,
        .datasets = j.datasets,
        .n_datasets = (uint64_t)j.n_datasets,
        .on_chunk = !o->quiet && !isatty(STDERR_FILENO) ? chunk_line : NULL,
    };
    if (rc == 0) rc = kiln_imx_run(j.m, &j.tk, &rp, &res, &err);
    if (rc == 0) rc = write_out(res.im, o, &err);
    if (rc == 0) {
        /* The checkpoint has done its job once the output is safely written. */
        if ((o->save_every || o->resume) && exists(j.ckpt) && unlink(j.ckpt) != 0)
            fprintf(stderr, "kiln imatrix: warning: could not remove %s\n", j.ckpt);
        report(o, &j, &res);
        if (o->show_stats) show(res.im, o);
    }
    kiln_imatrix_free(res.im);
    job_free(&j);
    return rc == 0 ? KILN_EXIT_OK : kiln_cli_fail(&err);
}

int kiln_cmd_imatrix(int argc, char **argv) {
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc < 0) {
        if (o.quiet) kiln_progress_quiet = true;
        if (o.threads > 0) omp_set_num_threads(o.threads);
        rc = o.model ? collect(&o) : files_only(&o);
    }
    free(o.files);
    free(o.in_files);
    return rc;
}
