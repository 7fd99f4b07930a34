/* testmodel/cmd_testmodel.c - `kiln testmodel --arch ARCH -o DIR`: the CLI
 * over testmodel.c, which writes a small deterministic Hugging Face model
 * for demos and tests. */
#include "../cli/cli.h"
#include "../core/progress.h"
#include "testmodel.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *USAGE =
    "usage: kiln testmodel --arch ARCH -o DIR [options]\n"
    "\n"
    "Writes a synthetic Hugging Face model: config.json, generation_config.json,\n"
    "model.safetensors (or shards and an index) and a tokenizer, with the real\n"
    "tensor names, shapes and config keys of ARCH, and heavy-tailed weights with\n"
    "outlier channels that are a pure function of the options (same options,\n"
    "byte-identical files). The model is not trained: it outputs noise.\n"
    "\n"
    "  --arch ARCH          llama, mistral, qwen2, qwen3, mixtral, qwen2moe,\n"
    "                       qwen3moe, gpt2, llama3 (Llama 3.x rope_scaling,\n"
    "                       tied embeddings), phi3 (Phi-3-mini: fused qkv and\n"
    "                       gate_up), gemma3 (Gemma 3 text, 6 layers: 5\n"
    "                       sliding, 1 global) (or the HF class name), or\n"
    "                       deepseek2 / deepseek4 (below)\n"
    "  -o, --output DIR     created if missing; refused if it holds a model\n"
    "  --size 1b            llama-1B shape: hidden 2048, 16 layers, ffn 8192,\n"
    "                       32 heads, 8 KV heads, vocab 32000 (~2.2 GB in bf16)\n"
    "  --layers N           default 2\n"
    "  --hidden N           default 256\n"
    "  --ffn N              MLP width (MoE: one expert's), default 512\n"
    "                       (MoE 256, gpt2 1024)\n"
    "  --heads N            default 4\n"
    "  --kv-heads N         default 2 (gpt2: = heads)\n"
    "  --experts N          MoE only, default 4\n"
    "  --experts-used N     MoE only, default 2\n"
    "  --vocab N            vocab_size, special tokens included, default 512\n"
    "  --ctx N              max_position_embeddings, default 2048 (gpt2 1024)\n"
    "  --dtype T            bf16 (default), f16 or f32\n"
    "  --seed N             default 0\n"
    "  --shard-size SIZE    split into shards of at most SIZE bytes (500M, 2G...)\n"
    "                       with model.safetensors.index.json\n"
    "  --tie-embeddings     no lm_head.weight (always so for gpt2)\n"
    "  --force              overwrite a model already in DIR\n"
    "  --dry-run            print the configuration and tensors, write nothing\n"
    "  -q, --quiet          no progress bar and no summary line\n"
    "  -h, --help           this help\n"
    "\n"
    "--arch deepseek2 (DeepSeek-V3, 61 layers) and --arch deepseek4 (DeepSeek-V4-\n"
    "Flash, 43 layers) write the real model's tensor names, shapes and dtypes,\n"
    "FP8 with block scales (V4: FP4 routed experts), in 5 GB shards, filled with\n"
    "noise: for benchmarks and scale tests, not for running. Only these apply:\n"
    "  --layers N           the first N blocks (default all)\n"
    "  --experts N          routed experts per block, 1..256 (default 256)\n"
    "  --vocab N            default 129280, DeepSeek-V3's tokenizer, which is not\n"
    "                       written (copy its tokenizer.json and\n"
    "                       tokenizer_config.json in); another N writes kiln's\n"
    "                       byte-level BPE tokenizer of N tokens\n"
    "  --sparse             headers and holes: the full 671B shape takes no disk\n"
    "                       (for convert --dry-run; reads as zeros)\n"
    "  --shard-size, --seed, --force, --dry-run (the tensor count, sizes and\n"
    "                       largest tensor), -q as above\n";

enum { O_ARCH = 256, O_SIZE, O_LAYERS, O_HIDDEN, O_FFN, O_HEADS, O_KV, O_EXPERTS, O_USED, O_VOCAB, O_CTX,
       O_DTYPE, O_SEED, O_SHARD, O_TIE, O_FORCE, O_DRY, O_SPARSE };

typedef struct progress_state {
    kiln_progress bar;
    uint64_t last;
    bool started;
} progress_state;

static void on_progress(void *ud, uint64_t done, uint64_t total) {
    progress_state *p = ud;
    if (!p->started) {
        kiln_progress_start(&p->bar, "testmodel", total, "B");
        p->started = true;
    }
    kiln_progress_add(&p->bar, done - p->last);
    p->last = done;
}

static void print_plan(const kiln_tm_config *c, const kiln_tm_tensor *t, size_t n) {
    uint64_t params = 0, esize = kiln_st_dtype_size(c->dtype);
    printf("%s (%s): %u layers, hidden %u, ffn %u, heads %u/%u, vocab %u, ctx %u", kiln_tm_arch_class(c->arch),
           kiln_tm_arch_name(c->arch), c->layers, c->hidden, c->ffn, c->heads, c->kv_heads, c->vocab, c->ctx);
    if (kiln_tm_arch_is_moe(c->arch)) printf(", %u experts top-%u", c->experts, c->experts_used);
    printf(", %s, seed %llu%s\n", kiln_st_dtype_name(c->dtype), (unsigned long long)c->seed,
           c->tie_embeddings ? ", tied embeddings" : "");
    for (size_t i = 0; i < n; i++) {
        uint64_t ne = (uint64_t)t[i].shape[0] * (t[i].n_dims == 2 ? (uint64_t)t[i].shape[1] : 1);
        params += ne;
        if (t[i].n_dims == 2)
            printf("  %-60s [%lld, %lld]\n", t[i].name, (long long)t[i].shape[0], (long long)t[i].shape[1]);
        else
            printf("  %-60s [%lld]\n", t[i].name, (long long)t[i].shape[0]);
    }
    printf("%zu tensors, %llu parameters, %llu bytes of tensor data\n", n, (unsigned long long)params,
           (unsigned long long)(params * esize));
}

/* --arch deepseek2 / deepseek4: the plan's totals (--dry-run) or the model. */
static int deepseek(const kiln_tm_ds_config *c, const char *dir, bool force, bool dry, bool quiet) {
    kiln_err err = {{0}};
    if (kiln_tm_ds_check(c, &err)) return kiln_cli_usage_error("testmodel", "%s", err.msg);
    kiln_tm_summary sum = {0};
    if (dry) {
        kiln_tm_ds_tensor *t;
        size_t n;
        if (kiln_tm_ds_plan(c, &t, &n, &err)) return kiln_cli_fail(&err);
        kiln_tm_ds_totals(t, n, &sum);
        free(t);
    } else {
        kiln_progress_quiet |= quiet;
        progress_state ps = {0};
        kiln_tm_opts o = {.force = force, .progress = on_progress, .progress_ud = &ps};
        int rc = kiln_tm_ds_write(c, dir, &o, &sum, &err);
        if (ps.started) kiln_progress_end(&ps.bar);
        if (rc) return kiln_cli_fail(&err);
        if (quiet) return KILN_EXIT_OK;
    }
    printf("%s%s: %s, %u layers, %u routed experts, %llu parameters, %llu tensors, %llu bytes%s%s; "
           "largest tensor %llu bytes\n", dry ? "plan" : "wrote ", dry ? "" : dir, kiln_tm_ds_arch_class(c->arch),
           c->layers, c->experts, (unsigned long long)sum.n_params, (unsigned long long)sum.n_tensors,
           (unsigned long long)sum.tensor_bytes, c->sparse ? " (sparse: holes)" : "",
           c->vocab == KILN_TM_DS_REAL_VOCAB ? ", no tokenizer (copy DeepSeek-V3's in)" : "",
           (unsigned long long)sum.largest_tensor_bytes);
    return KILN_EXIT_OK;
}

/* Parses a 32-bit option value into *out; false on junk or overflow. */
static bool parse_u32(const char *s, uint32_t *out) {
    uint64_t v;
    if (!kiln_parse_u64(s, &v) || v > UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

int kiln_cmd_testmodel(int argc, char **argv) {
    static const struct option opts[] = {
        {"arch", required_argument, 0, O_ARCH},       {"output", required_argument, 0, 'o'},
        {"size", required_argument, 0, O_SIZE},       {"layers", required_argument, 0, O_LAYERS},
        {"hidden", required_argument, 0, O_HIDDEN},   {"ffn", required_argument, 0, O_FFN},
        {"heads", required_argument, 0, O_HEADS},     {"kv-heads", required_argument, 0, O_KV},
        {"experts", required_argument, 0, O_EXPERTS}, {"experts-used", required_argument, 0, O_USED},
        {"vocab", required_argument, 0, O_VOCAB},     {"ctx", required_argument, 0, O_CTX},
        {"dtype", required_argument, 0, O_DTYPE},     {"seed", required_argument, 0, O_SEED},
        {"shard-size", required_argument, 0, O_SHARD}, {"tie-embeddings", no_argument, 0, O_TIE},
        {"force", no_argument, 0, O_FORCE},           {"dry-run", no_argument, 0, O_DRY},
        {"quiet", no_argument, 0, 'q'},               {"help", no_argument, 0, 'h'},
        {"sparse", no_argument, 0, O_SPARSE},         {0, 0, 0, 0},
    };
    /* option values are kept apart from the defaults, which depend on --arch and --size */
    const char *arch_name = NULL, *dir = NULL, *size = NULL, *dtype = NULL;
    uint32_t val[O_DRY + 1] = {0};
    bool given[O_DRY + 1] = {0};
    uint64_t seed = 0, shard = 0;
    bool tie = false, force = false, dry = false, quiet = false, sparse = false;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:qh", opts, NULL)) != -1) {
        switch (ch) {
        case O_ARCH: arch_name = optarg; break;
        case 'o': dir = optarg; break;
        case O_SIZE: size = optarg; break;
        case O_DTYPE: dtype = optarg; break;
        case O_SEED:
            if (!kiln_parse_u64(optarg, &seed)) return kiln_cli_usage_error("testmodel", "--seed needs a number");
            break;
        case O_SHARD:
            if (!kiln_parse_size(optarg, &shard) || !shard)
                return kiln_cli_usage_error("testmodel", "--shard-size needs a size such as 500M or 2G");
            break;
        case O_TIE: tie = true; break;
        case O_FORCE: force = true; break;
        case O_DRY: dry = true; break;
        case O_SPARSE: sparse = true; break;
        case 'q': quiet = true; break;
        case 'h': fputs(USAGE, stdout); return KILN_EXIT_OK;
        case O_LAYERS: case O_HIDDEN: case O_FFN: case O_HEADS: case O_KV:
        case O_EXPERTS: case O_USED: case O_VOCAB: case O_CTX:
            if (!parse_u32(optarg, &val[ch])) {
                const struct option *o = opts;
                while (o->val != ch) o++;
                return kiln_cli_usage_error("testmodel", "--%s needs a number", o->name);
            }
            given[ch] = true;
            break;
        default: return kiln_cli_usage_error("testmodel", "unknown option");
        }
    }
    if (optind != argc) return kiln_cli_usage_error("testmodel", "unexpected argument '%s'", argv[optind]);
    if (!arch_name) return kiln_cli_usage_error("testmodel", "--arch is required");
    if (!dir && !dry) return kiln_cli_usage_error("testmodel", "-o DIR is required");
    kiln_tm_ds_arch ds;
    if (!kiln_tm_ds_arch_parse(arch_name, &ds)) {
        if (size || dtype || tie || given[O_HIDDEN] || given[O_FFN] || given[O_HEADS] || given[O_KV] ||
            given[O_USED] || given[O_CTX])
            return kiln_cli_usage_error("testmodel", "%s has its real shapes: only --layers, --experts, --vocab, "
                                        "--sparse, --shard-size and --seed apply", arch_name);
        kiln_tm_ds_config dc;
        kiln_tm_ds_defaults(&dc, ds);
        if (given[O_LAYERS]) dc.layers = val[O_LAYERS];
        if (given[O_EXPERTS]) dc.experts = val[O_EXPERTS];
        if (given[O_VOCAB]) dc.vocab = val[O_VOCAB];
        if (shard) dc.shard_size = shard;
        dc.seed = seed;
        dc.sparse = sparse;
        return deepseek(&dc, dir, force, dry, quiet);
    }
    if (sparse) return kiln_cli_usage_error("testmodel", "--sparse is for deepseek2 and deepseek4 only");
    kiln_tm_arch arch;
    if (kiln_tm_arch_parse(arch_name, &arch))
        return kiln_cli_usage_error("testmodel", "unknown architecture '%s'", arch_name);
    kiln_tm_config c;
    kiln_err err = {{0}};
    if (kiln_tm_defaults(&c, arch, size, &err)) return kiln_cli_usage_error("testmodel", "%s", err.msg);
    uint32_t *field[O_DRY + 1] = {
        [O_LAYERS] = &c.layers, [O_HIDDEN] = &c.hidden, [O_FFN] = &c.ffn, [O_HEADS] = &c.heads,
        [O_KV] = &c.kv_heads, [O_EXPERTS] = &c.experts, [O_USED] = &c.experts_used, [O_VOCAB] = &c.vocab,
        [O_CTX] = &c.ctx,
    };
    for (int i = 0; i <= O_DRY; i++)
        if (given[i]) *field[i] = val[i];
    /* gpt2 has no grouped-query attention: its KV heads follow --heads */
    if (arch == KILN_TM_GPT2 && !given[O_KV]) c.kv_heads = c.heads;
    if (dtype) {
        if (!strcasecmp(dtype, "bf16")) c.dtype = KILN_ST_BF16;
        else if (!strcasecmp(dtype, "f16")) c.dtype = KILN_ST_F16;
        else if (!strcasecmp(dtype, "f32")) c.dtype = KILN_ST_F32;
        else return kiln_cli_usage_error("testmodel", "--dtype must be bf16, f16 or f32");
    }
    c.seed = seed;
    c.shard_size = shard;
    c.tie_embeddings |= tie;
    if (kiln_tm_check(&c, &err)) return kiln_cli_usage_error("testmodel", "%s", err.msg);

    if (dry) {
        kiln_tm_tensor *t;
        size_t n;
        if (kiln_tm_plan(&c, &t, &n, &err)) return kiln_cli_fail(&err);
        print_plan(&c, t, n);
        free(t);
        return KILN_EXIT_OK;
    }
    kiln_progress_quiet |= quiet;
    progress_state ps = {0};
    kiln_tm_opts o = {.force = force, .progress = on_progress, .progress_ud = &ps};
    kiln_tm_summary sum;
    int rc = kiln_tm_write(&c, dir, &o, &sum, &err);
    if (ps.started) kiln_progress_end(&ps.bar);
    if (rc) return kiln_cli_fail(&err);
    if (!quiet)
        printf("wrote %s: %s, %u layers, %llu parameters, %s, %llu bytes in %u safetensors file%s\n", dir,
               kiln_tm_arch_class(c.arch), c.layers, (unsigned long long)sum.n_params, kiln_st_dtype_name(c.dtype),
               (unsigned long long)sum.tensor_bytes, sum.n_files, sum.n_files == 1 ? "" : "s");
    return KILN_EXIT_OK;
}
