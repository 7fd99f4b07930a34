/* convert/pre_name.c - choosing tokenizer.ggml.pre from the tokenizer's own
 * definition, not from a hash of its output.
 *
 * tokenizer.json's pre_tokenizer (one step, or a Sequence) is reduced to a
 * list of steps: each regex Split with its pattern, the GPT-2 regex that a
 * ByteLevel step with use_regex applies, Digits splitting, Punctuation, and
 * whether the whole is byte-level. That list is compared with the known
 * pre-tokenizers below, each written down from the tokenizer.json of the
 * models llama.cpp names it after (the regexes are the ones llama.cpp's
 * llama-vocab.cpp quotes as "original regex from tokenizer.json"). Names
 * that share one regex in llama.cpp (qwen2 / stablelm2 / hunyuan, or
 * gpt-2 / mpt / olmo) tokenize identically, so the first name is used.
 *
 * One name depends on more than the pre_tokenizer. llama.cpp's converter
 * names a vocabulary by hashing the ids it gives a test string, BOS
 * included, and the Llama-3 tokenizer.json as first published (no
 * TemplateProcessing adding <|begin_of_text|>; Smaug copied it) hashes to
 * "smaug-bpe", not "llama-bpe". The two tokenize differently in llama.cpp
 * (smaug-bpe does not take whole words from the vocabulary before merging),
 * so the Llama-3 regex without a BOS template is named smaug-bpe here too.
 * cl100k_base (GPT-4's vocabulary, DBRX's and Phi-4's) has the same regex
 * and no BOS template, and hashes to "dbrx"; it is told from Llama 3's by
 * its size: its 100,256 byte-level tokens are the 256 bytes and one per
 * merge, 100,000 merges where Llama 3 has 280,147. dbrx and smaug-bpe
 * tokenize alike in llama.cpp; only the name in the file differs.
 *
 * One kind is not byte-level: SentencePiece-style BPE in a tokenizer.json
 * (Gemma 3's, without its tokenizer.model), which spm_style_bpe() below
 * recognizes. */
#include <stdio.h>
#include <string.h>

#include "json.h"
#include "vocab.h"

#define GPT2_REGEX "bytelevel-regex"
#define CL100K_MERGES 100000

#define LLAMA3_RE                                                                                                  \
    "split:(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[" \
    "\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN2_RE                                                                                                   \
    "split:(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+" \
    "|\\s+(?!\\S)|\\s+"
#define SEED_CODER_RE                                                                                              \
    "split:(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\r\n]+|\\s*[\r\n]+|" \
    "\\s+(?!\\S)|\\s+"
#define GPT4O_RE                                                                                                   \
    "split:[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|" \
    "'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|" \
    "'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define TEKKEN_RE                                                                                                  \
    "split:[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]" \
    "?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]" \
    "+|\\s+(?!\\S)|\\s+"
#define DEEPSEEK3_MAIN_RE                                                                                          \
    "split:[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]" \
    "+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"

typedef struct known {
    const char *name;
    const char *steps[6]; /* NULL-terminated */
} known;

/* Every entry is byte-level (a final ByteLevel step); "bytelevel-regex" is
 * a ByteLevel step with use_regex, i.e. GPT-2's own split. */
static const known KNOWN[] = {
    {"gpt-2", {GPT2_REGEX}},
    {"qwen2", {QWEN2_RE}},
    {"llama-bpe", {LLAMA3_RE}},
    {"starcoder", {"digits:individual", GPT2_REGEX}},
    {"deepseek-v3", {"split:\\p{N}{1,3}", "split:[一-龥぀-ゟ゠-ヿ]+", DEEPSEEK3_MAIN_RE}},
    {"gpt-4o", {GPT4O_RE}},
    {"tekken", {TEKKEN_RE}},
    {"seed-coder", {SEED_CODER_RE}},
};

/* The pre names llama.cpp's llama-vocab.cpp accepts (for the override). */
static const char *const LLAMA_CPP_NAMES[] = {
    "default", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
    "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon", "mpt", "starcoder", "gpt-2", "phi-2", "jina-es",
    "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum", "jina-v2-code",
    "roberta-bpe", "refact", "command-r", "qwen2", "deepseek-r1-qwen", "kormo", "stablelm2", "olmo", "dbrx",
    "smaug-bpe", "poro-chat", "chatglm-bpe", "viking", "jais", "tekken", "smollm", "codeshell", "bloom",
    "gpt3-finnish", "exaone", "exaone4", "chameleon", "minerva-7b", "megrez", "gpt-4o", "llama4", "superbpe",
    "trillion", "granite-docling", "bailingmoe", "bailingmoe2", "seed-coder", "hunyuan", "hunyuan-dense",
    "kimi-k2", "grok-2", "afmoe", "minimax-m2", "qwen35", "joyai-llm", "kanana2", "tiny_aya", "cohere2moe",
    "glm4", "hybriddna", "gemma4", "granite-embed-multi-311m", NULL};

/* A tokenizer's pre-tokenizer steps, each a prefix ("split:", ...) and a
 * value pointing into the tokenizer JSON, so that a regex of any length is
 * compared whole. A sequence longer than MAX_STEPS is longer than any known
 * signature: it is marked unknown, never compared cut short. */
#define MAX_STEPS 8
_Static_assert(MAX_STEPS >= sizeof KNOWN[0].steps / sizeof KNOWN[0].steps[0], "a known signature must fit in a sig");
typedef struct sig {
    struct {
        const char *prefix, *value;
    } steps[MAX_STEPS];
    int n;
    bool byte_level, unknown, too_long;
    char desc[1024];
} sig;

/* Appends the step PREFIX followed by VALUE. */
static void add_step(sig *s, const char *prefix, const char *value) {
    if (s->n == MAX_STEPS) {
        s->unknown = s->too_long = true;
        return;
    }
    s->steps[s->n].prefix = prefix;
    s->steps[s->n].value = value;
    s->n++;
}

/* True when the known step text equals PREFIX followed by VALUE. */
static bool same_step(const char *known_step, const char *prefix, const char *value) {
    size_t np = strlen(prefix);
    return !strncmp(known_step, prefix, np) && !strcmp(known_step + np, value);
}

static void describe(sig *s, const char *what) {
    size_t off = strlen(s->desc);
    snprintf(s->desc + off, sizeof s->desc - off, "%s%s", off ? " + " : "", what);
}

static void one_step(sig *s, json_t *p) {
    const char *type = cv_json_str(cv_json_get(p, "type"));
    if (!type) {
        s->unknown = true;
        describe(s, "?");
        return;
    }
    if (!strcmp(type, "Split")) {
        json_t *pat = cv_json_get(p, "pattern");
        const char *re = cv_json_str(cv_json_get(pat, "Regex")), *str = cv_json_str(cv_json_get(pat, "String"));
        const char *beh = cv_json_str(cv_json_get(p, "behavior"));
        if (!re && !str) s->unknown = true;
        if ((beh && strcmp(beh, "Isolated")) || cv_json_truthy(cv_json_get(p, "invert"))) s->unknown = true;
        if (re) add_step(s, "split:", re);
        else add_step(s, "string:", str ? str : "");
        char d[160];
        snprintf(d, sizeof d, "Split /%.100s%s/%s", re ? re : str ? str : "", (re && strlen(re) > 100) ? "..." : "",
                 beh && strcmp(beh, "Isolated") ? " (not Isolated)" : "");
        describe(s, d);
    } else if (!strcmp(type, "ByteLevel")) {
        json_t *ur = cv_json_get(p, "use_regex");
        if (!ur || json_is_true(ur)) add_step(s, "", GPT2_REGEX);
        if (cv_json_truthy(cv_json_get(p, "add_prefix_space"))) s->unknown = true;
        s->byte_level = true;
        describe(s, (!ur || json_is_true(ur)) ? "ByteLevel(use_regex)" : "ByteLevel");
    } else if (!strcmp(type, "Digits")) {
        bool ind = cv_json_truthy(cv_json_get(p, "individual_digits"));
        add_step(s, "", ind ? "digits:individual" : "digits:contiguous");
        describe(s, ind ? "Digits(individual)" : "Digits");
    } else {
        s->unknown = true;
        describe(s, type);
    }
}

/* True when a TemplateProcessing step of the post_processor puts a special
 * token before the sequence (a BOS) in single-sequence encodings. */
static bool template_adds_bos(json_t *post) {
    const char *type = cv_json_str(cv_json_get(post, "type"));
    if (!type) return false;
    if (!strcmp(type, "Sequence")) {
        size_t i;
        json_t *p;
        json_array_foreach(cv_json_get(post, "processors"), i, p) if (template_adds_bos(p)) return true;
        return false;
    }
    if (strcmp(type, "TemplateProcessing")) return false;
    json_t *first = json_array_get(cv_json_get(post, "single"), 0);
    return cv_json_get(first, "SpecialToken") != NULL;
}

/* str_is(v, key, want): member `key` of v is the string `want`. */
static bool str_is(json_t *v, const char *key, const char *want) {
    const char *got = cv_json_str(cv_json_get(v, key));
    return got && !strcmp(got, want);
}

/* SentencePiece-style BPE: the normalizer turns every space into U+2581
 * (and prepends none), the pre_tokenizer only cuts after each space
 * (Split " " MergedWithPrevious), and the BPE runs on UTF-8 with <0xXX>
 * byte fallback: Gemma 3's tokenizer.json. llama.cpp's converter hashes
 * it to "granite-embed-multi-311m" (an embedding model with Gemma 3's
 * vocabulary), which llama.cpp runs as its Gemma 4 pre-tokenizer: spaces
 * escaped, newline runs split off, no GPT-2 byte encoding. With a ▁
 * prepended (Llama 2's tokenizer.json) it would be another tokenizer,
 * which llama.cpp's hash list does not name. */
static bool spm_style_bpe(json_t *tokenizer) {
    json_t *norm = cv_json_get(tokenizer, "normalizer"), *pre = cv_json_get(tokenizer, "pre_tokenizer");
    json_t *model = cv_json_get(tokenizer, "model");
    return str_is(norm, "type", "Replace") && str_is(cv_json_get(norm, "pattern"), "String", " ") &&
           str_is(norm, "content", "\xe2\x96\x81") && str_is(pre, "type", "Split") &&
           str_is(cv_json_get(pre, "pattern"), "String", " ") && str_is(pre, "behavior", "MergedWithPrevious") &&
           !cv_json_truthy(cv_json_get(pre, "invert")) && str_is(model, "type", "BPE") &&
           json_is_true(cv_json_get(model, "byte_fallback"));
}

const char *cv_pretok_detect(json_t *tokenizer, char *desc, size_t cap) {
    if (spm_style_bpe(tokenizer)) {
        snprintf(desc, cap, "SentencePiece-style BPE (normalizer Replace ' ' -> U+2581, Split ' ')");
        return "granite-embed-multi-311m";
    }
    sig s;
    memset(&s, 0, sizeof s);
    json_t *pre = cv_json_get(tokenizer, "pre_tokenizer");
    const char *type = cv_json_str(cv_json_get(pre, "type"));
    if (!pre || json_is_null(pre)) {
        snprintf(desc, cap, "no pre_tokenizer");
        return NULL;
    }
    if (type && !strcmp(type, "Sequence")) {
        size_t i;
        json_t *p;
        json_array_foreach(cv_json_get(pre, "pretokenizers"), i, p) one_step(&s, p);
    } else {
        one_step(&s, pre);
    }
    snprintf(desc, cap, "%s%s", s.desc[0] ? s.desc : "empty",
             s.too_long ? " (more steps than any known pre-tokenizer has)" : "");
    if (s.unknown || !s.byte_level) return NULL;
    for (size_t k = 0; k < sizeof KNOWN / sizeof KNOWN[0]; k++) {
        int n = 0;
        while (n < 6 && KNOWN[k].steps[n]) n++;
        bool same = n == s.n;
        for (int i = 0; same && i < n; i++) same = same_step(KNOWN[k].steps[i], s.steps[i].prefix, s.steps[i].value);
        if (!same) continue;
        if (!strcmp(KNOWN[k].name, "llama-bpe") && !template_adds_bos(cv_json_get(tokenizer, "post_processor")))
            return json_array_size(cv_json_get(cv_json_get(tokenizer, "model"), "merges")) == CL100K_MERGES
                       ? "dbrx"
                       : "smaug-bpe";
        return KNOWN[k].name;
    }
    return NULL;
}

const char *cv_pretok_detectable(void) {
    static char buf[256];
    if (!buf[0]) {
        size_t off = 0;
        for (size_t k = 0; k < sizeof KNOWN / sizeof KNOWN[0]; k++)
            off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s", k ? ", " : "", KNOWN[k].name);
        snprintf(buf + off, sizeof buf - off, ", granite-embed-multi-311m (SentencePiece-style BPE)");
    }
    return buf;
}

bool cv_pretok_known(const char *name) {
    for (int i = 0; LLAMA_CPP_NAMES[i]; i++)
        if (!strcmp(LLAMA_CPP_NAMES[i], name)) return true;
    return false;
}
