/* tokenizer/cmd_tokenize.c - `kiln tokenize MODEL -p TEXT | -f FILE |
 * --batch FILE`: the CLI over tokenizer.h. Prints the ids llama.cpp's
 * llama_tokenize would give, one `ID 'PIECE'` line per token, just the ids,
 * or JSON; in batch mode one id list per input line, so that a test of
 * hundreds of texts loads a 150k vocabulary once. */
#include "../cli/cli.h"
#include "../core/escape.h"
#include "../core/fileio.h"
#include "hf_normalize.h"
#include "tokenizer.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "usage: kiln tokenize MODEL (-p TEXT | -f FILE | --batch FILE) [options]\n"
    "\n"
    "Tokenizes TEXT with the vocabulary of the GGUF file MODEL, giving the ids\n"
    "llama.cpp's llama_tokenize gives, and prints one token per line as\n"
    "ID 'PIECE' (control bytes and invalid UTF-8 in PIECE are \\-escaped).\n"
    "\n"
    "  -p, --prompt TEXT    the text to tokenize\n"
    "  -f, --file FILE      read the text from FILE ('-' for standard input)\n"
    "      --batch FILE     tokenize every line of FILE ('-' for standard input)\n"
    "                       on its own and print one line of ids per line\n"
    "                       (space-separated, or a JSON array with --json)\n"
    "      --jsonl          with --batch: each line is a JSON string, or an\n"
    "                       object whose \"text\" is one, so texts can hold\n"
    "                       newlines\n"
    "      --ids            print only the ids, space-separated on one line\n"
    "      --no-bos         add no BOS/EOS token (by default they are added as\n"
    "                       the vocabulary's add_bos/add_eos flags say)\n"
    "      --no-parse-special\n"
    "                       treat special-token text such as \"<s>\" as plain text\n"
    "      --json           print a JSON array of {\"id\", \"piece\"} objects (of ids\n"
    "                       with --ids)\n"
    "      --hf-normalize TOKENIZER_JSON\n"
    "                       first apply the \"normalizer\" of this tokenizer.json\n"
    "                       (or of the one in this folder), as Hugging Face's\n"
    "                       tokenizers do: NFC, NFD, NFKC, NFKD, Lowercase,\n"
    "                       StripAccents, Strip. llama.cpp skips these steps, so\n"
    "                       by default kiln does too and gives llama.cpp's ids\n"
    "  -h, --help           this help\n";

/* Length of the well-formed UTF-8 sequence at p (at most n bytes), or 0. */
static size_t utf8_ok(const unsigned char *p, size_t n) {
    if (p[0] < 0x80) return 1;
    size_t len = p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC2 && p[0] < 0xE0 ? 2 : 0;
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    uint32_t cp = len == 2 ? ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu)
                : len == 3 ? ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu)
                           : ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return len;
}

/* The piece quoted on one line, escaped by core/escape.h. */
static void print_piece(const char *s, size_t n) {
    putchar('\'');
    kiln_escape_fput(stdout, s, n, '\'');
    putchar('\'');
}

/* JSON strings must be UTF-8: bytes that are not become U+FFFD. */
static json_t *json_piece(const char *s, size_t n) {
    char *o = malloc(3 * n + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t l = utf8_ok((const unsigned char *)s + i, n - i);
        if (l) {
            memcpy(o + k, s + i, l);
            k += l;
            i += l;
        } else {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            i++;
        }
    }
    json_t *j = json_stringn(o, k);
    free(o);
    return j;
}

static int print_json(const kiln_tokenizer *t, const int32_t *ids, size_t n, bool ids_only) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        json_t *item;
        if (ids_only) {
            item = json_integer(ids[i]);
        } else {
            size_t len;
            const char *piece = kiln_token_piece(t, ids[i], &len);
            item = json_pack("{s:i, s:o?}", "id", (int)ids[i], "piece", json_piece(piece, len));
        }
        if (!item || json_array_append_new(a, item) < 0) {
            json_decref(a);
            a = NULL;
        }
    }
    if (!a) {
        fprintf(stderr, "kiln: out of memory\n");
        return KILN_EXIT_FAIL;
    }
    json_dumpf(a, stdout, JSON_COMPACT);
    putchar('\n');
    json_decref(a);
    return KILN_EXIT_OK;
}

/* kiln_tokenize, on the text normalized first when a normalizer is given. */
static int tokenize_text(const kiln_tokenizer *t, const kiln_hf_normalizer *norm, const char *text, size_t len,
                         bool add_special, bool parse_special, int32_t **ids, size_t *n, kiln_err *err) {
    if (!norm) return kiln_tokenize(t, text, len, add_special, parse_special, ids, n, err);
    size_t nlen;
    char *normalized = kiln_hf_normalize(norm, text, len, &nlen, err);
    if (!normalized) return -1;
    int rc = kiln_tokenize(t, normalized, nlen, add_special, parse_special, ids, n, err);
    free(normalized);
    return rc;
}

/* One text of a --batch file: the line itself, or with --jsonl the JSON
 * string it holds (or its object's "text"). Returns a new jansson value
 * holding the text, or NULL with err set. */
static json_t *batch_text(const char *line, size_t len, bool jsonl, const char *file, uint64_t line_no,
                          kiln_err *err) {
    if (!jsonl) return json_stringn_nocheck(line, len);
    json_error_t jerr;
    json_t *v = json_loadb(line, len, JSON_DECODE_ANY, &jerr);
    json_t *text = json_is_object(v) ? json_object_get(v, "text") : v;
    if (json_is_string(text)) {
        json_incref(text);
        json_decref(v);
        return text;
    }
    char field[48];
    snprintf(field, sizeof field, "line %llu", (unsigned long long)line_no);
    kiln_fail(err, file, field, -1, v ? "not a JSON string or an object with a \"text\" string"
                                      : "invalid JSON: %s", jerr.text);
    json_decref(v);
    return NULL;
}

/* --batch: one tokenization per line, one output line each. Streams the
 * file, so memory stays at one line and its ids. */
static int tokenize_batch(const kiln_tokenizer *t, const kiln_hf_normalizer *norm, const char *file, bool jsonl,
                          bool as_json, bool add_special, bool parse_special) {
    kiln_err err = {{0}};
    FILE *f = strcmp(file, "-") ? fopen(file, "rb") : stdin;
    if (!f) {
        kiln_fail(&err, file, NULL, -1, "cannot open: %s", strerror(errno));
        return kiln_cli_fail(&err);
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    uint64_t line_no = 0;
    int rc = KILN_EXIT_OK;
    while (rc == KILN_EXIT_OK && (got = getline(&line, &cap, f)) >= 0) {
        line_no++;
        size_t len = (size_t)got;
        if (len && line[len - 1] == '\n') len--;
        json_t *text = batch_text(line, len, jsonl, file, line_no, &err);
        int32_t *ids = NULL;
        size_t n = 0;
        if (!text || tokenize_text(t, norm, json_string_value(text), json_string_length(text), add_special,
                                   parse_special, &ids, &n, &err) < 0) {
            if (text) { /* say which line of the batch */
                char field[48], why[sizeof err.msg];
                snprintf(field, sizeof field, "line %llu", (unsigned long long)line_no);
                snprintf(why, sizeof why, "%s", err.msg);
                kiln_fail(&err, file, field, -1, "%s", why);
            }
            rc = kiln_cli_fail(&err);
        } else {
            if (as_json) putchar('[');
            for (size_t i = 0; i < n; i++) printf(as_json ? (i ? ",%d" : "%d") : (i ? " %d" : "%d"), ids[i]);
            puts(as_json ? "]" : "");
        }
        free(ids);
        json_decref(text);
    }
    if (rc == KILN_EXIT_OK && ferror(f)) {
        kiln_fail(&err, file, NULL, -1, "read error: %s", strerror(errno));
        rc = kiln_cli_fail(&err);
    }
    free(line);
    if (f != stdin) fclose(f);
    return rc;
}

int kiln_cmd_tokenize(int argc, char **argv) {
    static const struct option opts[] = {
        {"prompt", required_argument, 0, 'p'}, {"file", required_argument, 0, 'f'},
        {"ids", no_argument, 0, 'i'},          {"no-bos", no_argument, 0, 'b'},
        {"no-parse-special", no_argument, 0, 's'}, {"json", no_argument, 0, 'j'},
        {"batch", required_argument, 0, 'B'},  {"jsonl", no_argument, 0, 'J'},
        {"hf-normalize", required_argument, 0, 'N'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0},
    };
    const char *prompt = NULL, *file = NULL, *batch = NULL, *normalizer = NULL;
    bool ids_only = false, add_special = true, parse_special = true, as_json = false, jsonl = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "p:f:h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': prompt = optarg; break;
        case 'f': file = optarg; break;
        case 'i': ids_only = true; break;
        case 'b': add_special = false; break;
        case 's': parse_special = false; break;
        case 'j': as_json = true; break;
        case 'B': batch = optarg; break;
        case 'J': jsonl = true; break;
        case 'N': normalizer = optarg; break;
        case 'h': fputs(USAGE, stdout); return KILN_EXIT_OK;
        default: return kiln_cli_usage_error("tokenize", "unknown option");
        }
    }
    if (optind != argc - 1) return kiln_cli_usage_error("tokenize", "expects exactly one MODEL");
    if ((prompt != NULL) + (file != NULL) + (batch != NULL) != 1)
        return kiln_cli_usage_error("tokenize", "give the text with one of -p, -f or --batch");
    if (jsonl && !batch) return kiln_cli_usage_error("tokenize", "--jsonl needs --batch");

    kiln_err err = {{0}};
    kiln_hf_normalizer *norm = NULL;
    if (normalizer && !(norm = kiln_hf_normalizer_load(normalizer, &err))) return kiln_cli_fail(&err);
    size_t len = prompt ? strlen(prompt) : 0;
    char *text = file ? kiln_read_text(file, &len, &err) : NULL;
    if (file && !text) {
        kiln_hf_normalizer_free(norm);
        return kiln_cli_fail(&err);
    }
    kiln_gguf *g = kiln_gguf_open(argv[optind], &err);
    kiln_tokenizer *t = g ? kiln_tokenizer_load(g, &err) : NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = KILN_EXIT_OK;
    if (t && batch) {
        rc = tokenize_batch(t, norm, batch, jsonl, as_json, add_special, parse_special);
    } else if (!t || tokenize_text(t, norm, prompt ? prompt : text, len, add_special, parse_special, &ids, &n, &err) < 0) {
        rc = kiln_cli_fail(&err);
    } else if (as_json) {
        rc = print_json(t, ids, n, ids_only);
    } else {
        for (size_t i = 0; i < n; i++) {
            if (ids_only) {
                printf(i + 1 < n ? "%d " : "%d", ids[i]);
                continue;
            }
            size_t plen;
            const char *piece = kiln_token_piece(t, ids[i], &plen);
            printf("%d ", ids[i]);
            print_piece(piece, plen);
            putchar('\n');
        }
        if (ids_only) putchar('\n');
    }
    free(ids);
    free(text);
    kiln_tokenizer_free(t);
    kiln_gguf_close(g);
    kiln_hf_normalizer_free(norm);
    return rc;
}
