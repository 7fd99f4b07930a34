/* inspect/cmd_inspect.c - `kiln inspect FILE|DIR`: the CLI over
 * inspect.c. Renders the report as text or JSON, and --dump prints a
 * tensor's values. */
#include "../cli/cli.h"
#include "../core/escape.h"
#include "../core/name_regex.h"
#include "../core/progress.h"
#include "format.h"
#include <jansson.h>
#include "inspect.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: kiln inspect FILE|DIR [options]\n"
    "\n"
    "Shows a model's header, metadata, tensors and per-type totals. FILE is a\n"
    "GGUF (any shard of a split model opens all of it), a .safetensors file,\n"
    "a model.safetensors.index.json, or a Hugging Face model directory.\n"
    "\n"
    "  --json             print the report as JSON (schema kiln.inspect/1)\n"
    "  --tensors REGEX    only tensors whose name matches (PCRE2)\n"
    "  --stats            min/max/mean/std and NaN/Inf counts per tensor,\n"
    "                     after dequantization\n"
    "  --dump NAME        print the values of tensor NAME\n"
    "  --count N          with --dump: how many values (default 16, 0 = all)\n"
    "  --items N          array items shown per metadata key (default 8, 0 = all)\n"
    "  -t, --threads N    threads for --stats (default: all cores)\n"
    "  -q, --quiet        no progress bar\n"
    "  -h, --help         this help\n";

static int dump_tensor(const kiln_view *v, const char *name, uint64_t count, bool as_json) {
    kiln_err err = {{0}};
    const kiln_view_tensor *t = kiln_view_find(v, name);
    if (!t) {
        kiln_fail(&err, v->path, "--dump", -1, "no tensor named '%s'", name);
        return kiln_cli_fail(&err);
    }
    int64_t block = kiln_view_block(t);
    int64_t n = count == 0 || (int64_t)count > t->nelements ? t->nelements : (int64_t)count;
    int64_t n_read = (n + block - 1) / block * block;
    float *vals = malloc((size_t)n_read * sizeof(float));
    if (!vals) {
        kiln_fail(&err, v->path, name, -1, "out of memory");
        return kiln_cli_fail(&err);
    }
    if (kiln_view_dequantize(t, 0, n_read, vals, &err) < 0) {
        free(vals);
        return kiln_cli_fail(&err);
    }
    if (as_json) {
        json_t *o = json_object(), *a = json_array();
        json_object_set_new(o, "name", json_string(t->name));
        json_object_set_new(o, "type", json_string(t->type_name));
        for (int64_t i = 0; i < n; i++) json_array_append_new(a, isfinite(vals[i]) ? json_real(vals[i]) : json_null());
        json_object_set_new(o, "values", a);
        json_dumpf(o, stdout, JSON_INDENT(2));
        printf("\n");
        json_decref(o);
    } else {
        printf("%s (%s, %lld elements), first %lld values:\n", kiln_esc(t->name).s, kiln_esc(t->type_name).s, (long long)t->nelements, (long long)n);
        for (int64_t i = 0; i < n; i++) printf("%.9g%c", vals[i], (i % 8 == 7 || i == n - 1) ? '\n' : ' ');
    }
    free(vals);
    return KILN_EXIT_OK;
}

int kiln_cmd_inspect(int argc, char **argv) {
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'},     {"tensors", required_argument, 0, 'T'},
        {"stats", no_argument, 0, 's'},    {"dump", required_argument, 0, 'd'},
        {"count", required_argument, 0, 'n'}, {"items", required_argument, 0, 'i'},
        {"threads", required_argument, 0, 't'}, {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},     {0, 0, 0, 0},
    };
    bool as_json = false;
    const char *dump = NULL;
    uint64_t count = 16, items = 8, threads = 0;
    kiln_inspect_opts o = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'j': as_json = true; break;
        case 'T': {
            kiln_err bad;
            if (kiln_name_regex_check(optarg, "--tensors", &bad) < 0) return kiln_cli_usage_error("inspect", "%s", bad.msg);
            o.tensor_regex = optarg;
            break;
        }
        case 's': o.stats = true; break;
        case 'd': dump = optarg; break;
        case 'n': if (!kiln_parse_u64(optarg, &count)) return kiln_cli_usage_error("inspect", "--count needs a number"); break;
        case 'i': if (!kiln_parse_u64(optarg, &items)) return kiln_cli_usage_error("inspect", "--items needs a number"); break;
        case 't': if (!kiln_parse_u64(optarg, &threads) || !threads) return kiln_cli_usage_error("inspect", "--threads needs a positive number"); break;
        case 'q': kiln_progress_quiet = true; break;
        case 'h': fputs(USAGE, stdout); return KILN_EXIT_OK;
        default: return kiln_cli_usage_error("inspect", "unknown option");
        }
    }
    if (optind != argc - 1) return kiln_cli_usage_error("inspect", "expects exactly one FILE or DIR");
    if (threads) omp_set_num_threads((int)threads);
    o.max_items = (size_t)items;
    kiln_view v;
    kiln_err err = {{0}};
    if (kiln_view_open(&v, argv[optind], &err) < 0) return kiln_cli_fail(&err);
    int rc = KILN_EXIT_OK;
    if (dump) {
        rc = dump_tensor(&v, dump, count, as_json);
    } else {
        kiln_inspect_result r;
        if (kiln_inspect_collect(&v, &o, &r, &err) < 0) {
            rc = kiln_cli_fail(&err);
        } else {
            static char buf[1 << 20];
            /* The JSON writer has its own buffer: stdout unbuffered, its
             * bytes go to write() as they are, not copied once more. */
            if (as_json) setvbuf(stdout, NULL, _IONBF, 0);
            else setvbuf(stdout, buf, _IOFBF, sizeof buf);
            if (as_json) kiln_inspect_write_json(stdout, &v, &r, &o);
            else kiln_inspect_write_text(stdout, &v, &r, &o);
            fflush(stdout);
            kiln_inspect_free(&r);
        }
    }
    kiln_view_close(&v);
    return rc;
}
