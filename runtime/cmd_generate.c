/* runtime/cmd_generate.c - `kiln generate MODEL -p TEXT`: continues a
 * prompt, greedily or sampled, printing the text as it comes. A smoke check
 * that a converted or quantized model still says something, and a demo. */
#include "../cli/cli.h"
#include "../core/escape.h"
#include "generate.h"

#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *USAGE =
    "usage: kiln generate MODEL -p TEXT [options]\n"
    "\n"
    "Tokenizes TEXT (BOS as the vocabulary says; special-token text such as\n"
    "\"<s>\" becomes the token) and continues it, printing the prompt and then\n"
    "each new token as it is produced. Speeds go to standard error. On a\n"
    "terminal, control bytes in the text (other than newlines and tabs) are\n"
    "\\-escaped, so that a vocabulary cannot drive the terminal.\n"
    "\n"
    "  -p, --prompt TEXT    the prompt\n"
    "  -n, --n-predict N    tokens to generate (default 64); stops early at EOS\n"
    "      --temp T         sampling temperature; 0 (the default) is greedy\n"
    "      --top-k K        sample among the K most likely tokens (default 40)\n"
    "      --top-p P        ... and the smallest set holding P of the mass (default 0.95)\n"
    "      --seed S         random seed for sampling (default 0): same seed, same text\n"
    "      --ids            print token ids instead of text\n"
    "  -t, --threads N      threads (default: all cores)\n"
    "      --exact          dequantize weights, f32 products (default: ggml's numbers)\n"
    "  -h, --help           this help\n";

enum { O_TEMP = 256, O_TOPK, O_TOPP, O_SEED, O_IDS, O_EXACT };

typedef struct out_state {
    const kiln_tokenizer *tok;
    bool ids;
    bool strip_space; /* the next piece's leading space is SentencePiece's prefix */
    bool escape;      /* stdout is a terminal: escape what the vocabulary holds */
    char carry[4];    /* escaping: an unfinished UTF-8 character */
    size_t n_carry;
} out_state;

static void flush_carry(out_state *o) {
    kiln_escape_fput(stdout, o->carry, o->n_carry, 0);
    o->n_carry = 0;
}

/* One byte of text for a terminal: line breaks and tabs as they are, the
 * rest through core/escape.h a character at a time, so that a character a
 * byte-fallback vocabulary spreads over several tokens still prints whole
 * while ESC and other controls a crafted vocabulary holds do not reach the
 * terminal. */
static void put_escaped(out_state *o, unsigned char c) {
    if (o->n_carry && (c & 0xC0) != 0x80) flush_carry(o); /* cut short: escaped as is */
    if (!o->n_carry && (c == '\n' || c == '\t')) {
        putchar(c);
        return;
    }
    o->carry[o->n_carry++] = (char)c;
    unsigned char lead = (unsigned char)o->carry[0];
    size_t need = lead >= 0xF8 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (o->n_carry >= need) flush_carry(o);
}

static void print_token(out_state *o, int32_t id) {
    if (o->ids) {
        printf("%d ", id);
    } else if (!kiln_token_is_control(o->tok, id)) {
        size_t len;
        const char *piece = kiln_token_piece(o->tok, id, &len);
        if (o->strip_space && len && piece[0] == ' ') piece++, len--;
        o->strip_space = false;
        if (!o->escape) fwrite(piece, 1, len, stdout);
        else
            for (size_t i = 0; i < len; i++) put_escaped(o, (unsigned char)piece[i]);
    }
    fflush(stdout);
}

static bool on_token(void *user, int32_t id) {
    print_token(user, id);
    return false;
}

int kiln_cmd_generate(int argc, char **argv) {
    static const struct option lo[] = {
        {"prompt", required_argument, 0, 'p'}, {"n-predict", required_argument, 0, 'n'},
        {"temp", required_argument, 0, O_TEMP}, {"top-k", required_argument, 0, O_TOPK},
        {"top-p", required_argument, 0, O_TOPP}, {"seed", required_argument, 0, O_SEED},
        {"ids", no_argument, 0, O_IDS},         {"threads", required_argument, 0, 't'},
        {"exact", no_argument, 0, O_EXACT},     {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *prompt = NULL;
    uint64_t n_predict = 64, threads = 0, top_k = 40, seed = 0;
    double temp = 0, top_p = 0.95;
    bool ids = false, exact = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "p:n:t:h", lo, NULL)) != -1) {
        switch (c) {
        case 'p': prompt = optarg; break;
        case 'n':
            if (!kiln_parse_u64(optarg, &n_predict) || n_predict > (1u << 24))
                return kiln_cli_usage_error("generate", "-n needs a number of tokens");
            break;
        case O_TEMP:
            if (!kiln_parse_double(optarg, &temp) || !(temp >= 0))
                return kiln_cli_usage_error("generate", "--temp needs a non-negative number");
            break;
        case O_TOPK:
            if (!kiln_parse_u64(optarg, &top_k) || top_k > (1u << 30))
                return kiln_cli_usage_error("generate", "--top-k needs a number");
            break;
        case O_TOPP:
            if (!kiln_parse_double(optarg, &top_p) || !(top_p > 0 && top_p <= 1))
                return kiln_cli_usage_error("generate", "--top-p needs a number in (0, 1]");
            break;
        case O_SEED:
            if (!kiln_parse_u64(optarg, &seed)) return kiln_cli_usage_error("generate", "--seed needs a number");
            break;
        case O_IDS: ids = true; break;
        case 't':
            if (!kiln_parse_u64(optarg, &threads) || !threads || threads > 1024)
                return kiln_cli_usage_error("generate", "--threads needs a positive number");
            break;
        case O_EXACT: exact = true; break;
        case 'h': fputs(USAGE, stdout); return KILN_EXIT_OK;
        default: return kiln_cli_usage_error("generate", "unknown option");
        }
    }
    if (optind != argc - 1) return kiln_cli_usage_error("generate", "expects exactly one MODEL");
    if (!prompt) return kiln_cli_usage_error("generate", "give the prompt with -p");
    if (threads) omp_set_num_threads((int)threads);

    kiln_err err = {{0}};
    kiln_model *m = kiln_model_load(argv[optind], &err);
    if (!m) return kiln_cli_fail(&err);
    int32_t *tokens = NULL;
    size_t n = 0;
    kiln_ctx *ctx = NULL;
    int rc = KILN_EXIT_OK;
    if (kiln_tokenize(m->tok, prompt, strlen(prompt), true, true, &tokens, &n, &err)) {
        rc = kiln_cli_fail(&err);
    } else {
        kiln_ctx_params cp = {.n_ctx = (int64_t)(n + n_predict), .mode = exact ? KILN_NUM_EXACT : KILN_NUM_GGML};
        if (m->hp.n_ctx_train > 0 && cp.n_ctx > m->hp.n_ctx_train)
            fprintf(stderr, "kiln generate: warning: %lld prompt + %llu new tokens exceed the model's training "
                            "context of %lld; text past it is unreliable\n",
                    (long long)n, (unsigned long long)n_predict, (long long)m->hp.n_ctx_train);
        if (!(ctx = kiln_ctx_new(m, &cp, &err))) rc = kiln_cli_fail(&err);
    }
    if (rc == KILN_EXIT_OK) {
        /* as llama.cpp's detokenizer does, the space SentencePiece puts
         * before the first word is not printed */
        out_state o = {.tok = m->tok, .ids = ids, .strip_space = prompt[0] != ' ', .escape = isatty(STDOUT_FILENO)};
        /* the prompt as the model sees it (control tokens such as BOS
         * print as nothing, except with --ids) */
        for (size_t i = 0; i < n; i++) print_token(&o, tokens[i]);
        kiln_sampler s;
        kiln_sampler_params sp = {.temp = (float)temp, .top_k = (int32_t)top_k, .top_p = (float)top_p, .seed = seed};
        kiln_sampler_init(&s, &sp);
        kiln_gen_stats st;
        int gen_rc = kiln_generate(ctx, m, tokens, (int64_t)n, (int64_t)n_predict, 0, &s, on_token, &o, &st, &err);
        /* The text ends its line, and reaches the stream before anything
         * goes to stderr: when both go to one file or terminal, stdout's
         * buffered newline would otherwise land after the message. */
        flush_carry(&o);
        putchar('\n');
        fflush(stdout);
        if (gen_rc) {
            rc = kiln_cli_fail(&err);
        } else {
            fprintf(stderr, "prompt: %lld tokens, %.1f tok/s; generated: %lld tokens, %.1f tok/s%s\n",
                    (long long)st.n_prompt, st.prompt_seconds > 0 ? st.n_prompt / st.prompt_seconds : 0,
                    (long long)st.n_generated, st.gen_seconds > 0 ? st.n_generated / st.gen_seconds : 0,
                    st.stopped_at_eos ? " (stopped at EOS)" : "");
        }
        kiln_sampler_free(&s);
    }
    if (ctx) kiln_ctx_free(ctx);
    free(tokens);
    kiln_model_free(m);
    return rc;
}
