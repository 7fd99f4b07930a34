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
 * so the Llama-3 regex without a BOS template is named smaug-bpe here too. */
#include <stdio.h>
#include <string.h>

#include "json.h"
#include "vocab.h"

#define GPT2_REGEX "bytelevel-regex"

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
    "glm4", "hybriddna", NULL};

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
    const char *type = cv_json_str(json_object_get(p, "type"));
    if (!type) {
        s->unknown = true;
        describe(s, "?");
        return;
    }
    if (!strcmp(type, "Split")) {
        json_t *pat = json_object_get(p, "pattern");
        const char *re = cv_json_str(json_object_get(pat, "Regex")), *str = cv_json_str(json_object_get(pat, "String"));
        const char *beh = cv_json_str(json_object_get(p, "behavior"));
        if (!re && !str) s->unknown = true;
        if ((beh && strcmp(beh, "Isolated")) || cv_json_truthy(json_object_get(p, "invert"))) s->unknown = true;
        if (re) add_step(s, "split:", re);
        else add_step(s, "string:", str ? str : "");
        char d[160];
        snprintf(d, sizeof d, "Split /%.100s%s/%s", re ? re : str ? str : "", (re && strlen(re) > 100) ? "..." : "",
                 beh && strcmp(beh, "Isolated") ? " (not Isolated)" : "");
        describe(s, d);
    } else if (!strcmp(type, "ByteLevel")) {
        json_t *ur = json_object_get(p, "use_regex");
        if (!ur || json_is_true(ur)) add_step(s, "", GPT2_REGEX);
        if (cv_json_truthy(json_object_get(p, "add_prefix_space"))) s->unknown = true;
        s->byte_level = true;
        describe(s, (!ur || json_is_true(ur)) ? "ByteLevel(use_regex)" : "ByteLevel");
    } else if (!strcmp(type, "Digits")) {
        bool ind = cv_json_truthy(json_object_get(p, "individual_digits"));
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
    const char *type = cv_json_str(json_object_get(post, "type"));
    if (!type) return false;
    if (!strcmp(type, "Sequence")) {
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(post, "processors"), i, p) if (template_adds_bos(p)) return true;
        return false;
    }
    if (strcmp(type, "TemplateProcessing")) return false;
    json_t *first = json_array_get(json_object_get(post, "single"), 0);
    return json_object_get(first, "SpecialToken") != NULL;
}

const char *cv_pretok_detect(json_t *tokenizer, char *desc, size_t cap) {
    sig s;
    memset(&s, 0, sizeof s);
    json_t *pre = json_object_get(tokenizer, "pre_tokenizer");
    const char *type = cv_json_str(json_object_get(pre, "type"));
    if (!pre || json_is_null(pre)) {
        snprintf(desc, cap, "no pre_tokenizer");
        return NULL;
    }
    if (type && !strcmp(type, "Sequence")) {
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(pre, "pretokenizers"), i, p) one_step(&s, p);
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
        if (!strcmp(KNOWN[k].name, "llama-bpe") && !template_adds_bos(json_object_get(tokenizer, "post_processor")))
            return "smaug-bpe";
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
    }
    return buf;
}

bool cv_pretok_known(const char *name) {
    for (int i = 0; LLAMA_CPP_NAMES[i]; i++)
        if (!strcmp(LLAMA_CPP_NAMES[i], name)) return true;
    return false;
}
