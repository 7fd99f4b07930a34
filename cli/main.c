/* cli/main.c - the kiln binary: dispatches `kiln COMMAND ...` to the
 * command's thin CLI layer (a cmd_*.c file beside the library code it
 * drives). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command COMMANDS[] = {
    {"testmodel", kiln_cmd_testmodel, "write a small synthetic Hugging Face model (any supported arch)"},
    {"inspect", kiln_cmd_inspect, "show a model's header, metadata, tensors and statistics"},
    {"diff", kiln_cmd_diff, "compare two models' metadata, tensors and values"},
    {"tokenize", kiln_cmd_tokenize, "show the token ids llama.cpp would give a text"},
    {"splice", kiln_cmd_splice, "mix tensors or experts of two GGUFs, or cut experts, without dequantizing"},
    {"convert", kiln_cmd_convert, "convert a Hugging Face model (dir, HF cache, archive) to GGUF"},
    {"imatrix", kiln_cmd_imatrix, "collect an importance matrix (llama-imatrix), merge or convert imatrix files"},
    {"quantize", kiln_cmd_quantize, "quantize a GGUF to a llama.cpp preset (Q4_K_M, ...) or a type"},
    {"perplexity", kiln_cmd_perplexity, "perplexity and KL divergence over a text, as llama-perplexity measures them"},
    {"golden", kiln_cmd_golden, "record a model's logits on prompts, or check a model against recorded logits"},
    {"generate", kiln_cmd_generate, "continue a prompt (greedy or sampled): a smoke check and demo"},
    /* @commands: one line per subcommand, in pipeline order */
};

static void usage(FILE *out) {
    fprintf(out, "usage: kiln COMMAND [options]   (kiln COMMAND --help for details)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(out, "  %-12s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    fprintf(out, "\nexit codes: 0 success, 1 failure (or a gate tripped), 2 usage error\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return KILN_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return KILN_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("kiln %s\n", KILN_VERSION);
        return KILN_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "kiln: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return KILN_EXIT_USAGE;
}
