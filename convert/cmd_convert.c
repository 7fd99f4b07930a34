/* convert/cmd_convert.c - `kiln convert MODEL -o OUT.gguf`: the CLI over
 * convert.h. Parses options, prints the plan for --dry-run, shows a
 * progress bar on a terminal, and reports errors; the work is in the
 * library. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cli/cli.h"
#include "../core/escape.h"
#include "../core/progress.h"
#include "../core/safetensors.h"
#include "../core/types.h"
#include "convert.h"

static const char *USAGE =
    "usage: kiln convert MODEL [options]\n"
    "\n"
    "Converts a Hugging Face model to GGUF the way llama.cpp's convert_hf_to_gguf.py\n"
    "does: same tensor names, order, types and bytes, same metadata. MODEL is a model\n"
    "directory, a Hugging Face cache folder (models--ORG--NAME or a snapshot of it),\n"
    "or an archive of a model directory (.tar, .tar.gz, .tar.zst, .zip), read in place.\n"
    "Architectures: Llama, Mistral, Mixtral, Qwen2, Qwen3, Qwen2-MoE, Qwen3-MoE, GPT-2,\n"
    "Phi-3, Granite, Gemma 2, Gemma 3, BitNet b1.58, gpt-oss, OLMo 2, DeepSeek-V2/V3.\n"
    "Source dtypes: F32, F16, BF16, F8_E4M3 with block scales (dequantized inline),\n"
    "MXFP4 experts (gpt-oss; written as MXFP4 whatever the outtype).\n"
    "\n"
    "  -o, --outfile OUT          output GGUF (default: NAME-OUTTYPE.gguf here)\n"
    "      --outtype TYPE         f32, f16, bf16, q8_0, tq1_0, tq2_0 or auto (default f16);\n"
    "                             auto keeps the source precision (bf16 stays bf16,\n"
    "                             f8 -> bf16); tq1_0/tq2_0 are the ternary types for\n"
    "                             BitNet (embeddings f16, other rows not of 256: f16)\n"
    "      --split-max-size SIZE  split the output into shards of at most SIZE (500M, 2G)\n"
    "      --split-max-tensors N  split the output into shards of at most N tensors\n"
    "      --vocab-only           write the metadata and tokenizer only\n"
    "      --pre-tokenizer NAME   tokenizer.ggml.pre to use instead of detecting it\n"
    "      --dry-run              print the tensor plan and the output size; write nothing\n"
    "  -v, --verbose              list on stderr the config.json and tokenizer_config.json\n"
    "                             keys kiln did not read (they are ignored)\n"
    "  -f, --force                overwrite OUT if it exists\n"
    "  -q, --quiet                no progress bar\n"
    "  -h, --help                 this help\n";

static void progress_cb(void *ud, uint64_t done, uint64_t total) {
    kiln_progress *p = ud;
    if (!p->total) p->total = total;
    kiln_progress_add(p, done - p->done);
}

/* --verbose: one line per key the conversion ignored, after the progress
 * bar (if any) is finished so that the two do not interleave. */
static void print_unread(void *ud, const char *file, const char *key) {
    kiln_progress_end(ud);
    fprintf(stderr, "kiln: %s: %s: not read by kiln convert (ignored)\n", file, kiln_esc(key).s);
}

static void fmt_ne(char *buf, size_t cap, const kiln_hf_tensor *t) {
    size_t off = 0;
    for (uint32_t d = 0; d < t->n_dims && off < cap; d++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%lld", d ? " x " : "", (long long)t->ne[d]);
    if (!t->n_dims) snprintf(buf, cap, "%lld", (long long)t->ne[0]);
}

static int dry_run(const char *model, const kiln_convert_opts *o, bool split) {
    kiln_err err = {{0}};
    kiln_hf_model *m = kiln_hf_open(model, o, &err);
    if (!m) return kiln_cli_fail(&err);
    uint64_t size = kiln_hf_output_size(m, &err);
    if (!size || (o->unread && kiln_hf_unread_keys(m, o->unread, o->unread_ud, &err) < 0)) {
        kiln_hf_close(m);
        return kiln_cli_fail(&err);
    }
    printf("%s (%s) -> %s, outtype %s\n", model, kiln_esc(kiln_hf_class(m)).s, kiln_esc(kiln_hf_arch(m)).s,
           kiln_outtype_name(o->vocab_only ? o->outtype : kiln_hf_outtype(m)));
    uint64_t n = o->vocab_only ? 0 : kiln_hf_n_tensors(m);
    if (n) printf("%-36s %-6s %-22s %-8s %s\n", "tensor", "type", "shape", "from", "source");
    for (uint64_t i = 0; i < n; i++) {
        kiln_hf_tensor t;
        char shape[96];
        kiln_hf_tensor_info(m, i, &t);
        fmt_ne(shape, sizeof shape, &t);
        printf("%-36s %-6s %-22s %-8s %s\n", kiln_esc(t.name).s, kiln_type_name(t.type), shape, kiln_esc(t.src_dtype).s,
               kiln_esc(t.hf_name).s);
    }
    printf("%llu tensors, %llu bytes of tensor data; output size %llu bytes (%.2f MiB)%s\n", (unsigned long long)n,
           (unsigned long long)(o->vocab_only ? 0 : kiln_hf_data_bytes(m)), (unsigned long long)size,
           (double)size / (1024.0 * 1024.0), split ? " as one file; each shard adds its own header" : "");
    kiln_hf_close(m);
    return KILN_EXIT_OK;
}

/* NAME-OUTTYPE.gguf after the model folder or archive name. */
static char *default_out(const char *model, const char *outtype) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", model);
    size_t n = strlen(tmp);
    while (n > 1 && tmp[n - 1] == '/') tmp[--n] = 0;
    const char *b = strrchr(tmp, '/');
    b = b ? b + 1 : tmp;
    char name[512];
    snprintf(name, sizeof name, "%.500s", b);
    static const char *const ext[] = {".tar.gz", ".tar.zst", ".tgz", ".tar", ".zip", NULL};
    for (int i = 0; ext[i]; i++) {
        size_t l = strlen(name), e = strlen(ext[i]);
        if (l > e && !strcmp(name + l - e, ext[i])) name[l - e] = 0;
    }
    char *out = malloc(strlen(name) + strlen(outtype) + 8);
    if (!out) return NULL;
    sprintf(out, "%s-%s.gguf", name, outtype);
    for (char *c = out + strlen(name) + 1; *c; c++)
        if (*c >= 'a' && *c <= 'z') *c = (char)(*c - 'a' + 'A');
    for (char *c = out + strlen(out) - 5; *c; c++)
        if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
    return out;
}

int kiln_cmd_convert(int argc, char **argv) {
    static const struct option opts[] = {
        {"outfile", required_argument, 0, 'o'},         {"outtype", required_argument, 0, 'T'},
        {"split-max-size", required_argument, 0, 'S'},  {"split-max-tensors", required_argument, 0, 'N'},
        {"vocab-only", no_argument, 0, 'V'},            {"pre-tokenizer", required_argument, 0, 'P'},
        {"dry-run", no_argument, 0, 'D'},               {"force", no_argument, 0, 'f'},
        {"quiet", no_argument, 0, 'q'},                 {"help", no_argument, 0, 'h'},
        {"verbose", no_argument, 0, 'v'},               {0, 0, 0, 0},
    };
    kiln_convert_opts co = {.outtype = KILN_OUT_F16};
    kiln_write_opts wo = {0};
    const char *out = NULL;
    bool dry = false, verbose = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:fqhv", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'T': {
            int t = kiln_outtype_parse(optarg);
            if (t < 0) return kiln_cli_usage_error("convert", "unknown --outtype '%s' (f32, f16, bf16, q8_0, tq1_0, tq2_0, auto)", optarg);
            co.outtype = (kiln_outtype)t;
            break;
        }
        case 'S':
            if (!kiln_parse_size(optarg, &wo.split_max_size) || !wo.split_max_size)
                return kiln_cli_usage_error("convert", "bad --split-max-size '%s'", optarg);
            break;
        case 'N':
            if (!kiln_parse_u64(optarg, &wo.split_max_tensors) || !wo.split_max_tensors)
                return kiln_cli_usage_error("convert", "bad --split-max-tensors '%s'", optarg);
            break;
        case 'V': co.vocab_only = true; break;
        case 'P': co.pre_tokenizer = optarg; break;
        case 'D': dry = true; break;
        case 'f': wo.force = true; break;
        case 'q': kiln_progress_quiet = true; break;
        case 'v': verbose = true; break;
        case 'h': fputs(USAGE, stdout); return KILN_EXIT_OK;
        default: return kiln_cli_usage_error("convert", "bad option");
        }
    }
    if (optind != argc - 1) return kiln_cli_usage_error("convert", "expected one MODEL");
    const char *model = argv[optind];
    kiln_progress bar = {0};
    if (verbose) co.unread = print_unread, co.unread_ud = &bar;
    if (dry) return dry_run(model, &co, wo.split_max_size || wo.split_max_tensors);
    char *dflt = out ? NULL : default_out(model, kiln_outtype_name(co.outtype));
    if (!out && !dflt) return kiln_cli_usage_error("convert", "out of memory");
    kiln_err err = {{0}};
    kiln_progress_start(&bar, "convert", 0, "B");
    bar.done = 0;
    int rc = kiln_convert(model, out ? out : dflt, &co, &wo, progress_cb, &bar, &err);
    if (bar.active) kiln_progress_end(&bar);
    free(dflt);
    return rc < 0 ? kiln_cli_fail(&err) : KILN_EXIT_OK;
}
