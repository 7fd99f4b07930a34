/* tokenizer/pre_split.c - the word splitter that byte-level BPE runs before
 * its merges, reproducing llama.cpp's unicode_regex_split() for every
 * `tokenizer.ggml.pre` it knows.
 *
 * llama.cpp does not run its regexes the way a Unicode regex engine would,
 * and its token ids depend on the differences, so this file copies its
 * method rather than its regexes' textbook meaning:
 *   - The text is decoded to code points with llama.cpp's lenient rules
 *     (each bad byte becomes U+FFFD) and every regex of the list refines
 *     the previous one's pieces: matches and the gaps between them are both
 *     kept as pieces.
 *   - The GPT-2 and Llama-3 regexes are hand-written state machines there;
 *     they are here too (split_gpt2, split_llama3).
 *   - A regex using \p{..} runs over a "collapsed" text with one byte per
 *     code point: ASCII as itself, other whitespace as \v, other code points
 *     as one byte per category (0xD1 number, 0xD2 letter, 0xD3 punctuation,
 *     0xD4 mark, 0xD5 symbol, 0xD0 anything else), and \p{X} is rewritten
 *     to that byte plus llama.cpp's ASCII members of X (whose \p{S} lacks
 *     '~'). PCRE2 runs it in 8-bit non-UTF mode, where \s is ASCII only,
 *     like std::regex.
 *   - A regex without \p{..} runs on the real code points (PCRE2 UTF mode,
 *     ASCII \s/\d/\b as std::wregex in the C locale), after non-ASCII
 *     whitespace was replaced by \v as llama.cpp does.
 * Code point categories come from PCRE2's Unicode tables (UCP), looked up
 * once per code point and cached; llama.cpp generates its table from the
 * Unicode data of its day, so only code points assigned in very recent
 * Unicode versions could differ.
 *
 * The gemma4 style (and granite-embed-multi-311m, its name for Gemma 3's
 * tokenizer.json) only cuts newline runs from the rest; what else differs
 * there (spaces as U+2581, no GPT-2 byte encoding) is tokenizer_bpe.c's,
 * told by the spm_bpe flag.
 *
 * Not implemented (refused at load): the kimi-k2 and afmoe custom
 * splitters, and the sarvam / whitespace styles that skip GPT-2's byte
 * encoding. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

/* ---- code point classes ------------------------------------------------ */

/* llama.cpp's categories (unicode_cpt_flags); CL_SPACE is its White_Space
 * set; CL_KNOWN marks a cached entry and makes every in-text class non-zero
 * (0 means "outside the current piece"). */
enum { CAT_UNDEF, CAT_NUMBER, CAT_LETTER, CAT_SEPARATOR, CAT_MARK, CAT_PUNCT, CAT_SYMBOL, CAT_CONTROL };
#define CL_CAT 0x07u
#define CL_SPACE 0x08u
#define CL_KNOWN 0x80u
#define MAX_CP 0x110000u

static _Atomic unsigned char class_cache[MAX_CP];
static pcre2_code *class_re;
static pthread_once_t class_once = PTHREAD_ONCE_INIT;

/* Group i of this pattern matches category i of the enum above; Cn
 * (unassigned) matches none, which is llama.cpp's "undefined". */
static void class_init(void) {
    static const char PAT[] = "(\\p{N})|(\\p{L})|(\\p{Z})|(\\p{M})|(\\p{P})|(\\p{S})|"
                              "(\\p{Cc}|\\p{Cf}|\\p{Co}|\\p{Cs})";
    int code;
    PCRE2_SIZE at;
    class_re = pcre2_compile((PCRE2_SPTR)PAT, PCRE2_ZERO_TERMINATED,
                             PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &code, &at, NULL);
    if (class_re) (void)pcre2_jit_compile(class_re, PCRE2_JIT_COMPLETE); /* interpreter if no JIT */
}

static bool is_white_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}

/* Writes cp as UTF-8 (up to 4 bytes) and returns the length. Surrogates are
 * encoded like any value, as llama.cpp does; values past U+10FFFF, which
 * llama.cpp cannot encode at all, become U+FFFD. */
static size_t utf8_put(uint32_t cp, unsigned char *o) {
    if (cp > 0x10FFFF) cp = 0xFFFD;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

static unsigned classify(uint32_t cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) return CAT_CONTROL; /* Cs: not encodable for PCRE2 */
    pthread_once(&class_once, class_init);
    if (!class_re) return CAT_UNDEF;
    pcre2_match_data *md = pcre2_match_data_create(8, NULL);
    if (!md) return CAT_UNDEF;
    unsigned char u[4];
    size_t n = utf8_put(cp, u);
    unsigned cat = CAT_UNDEF;
    if (pcre2_match(class_re, u, n, 0, 0, md, NULL) > 0) {
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        for (unsigned g = 1; g <= CAT_CONTROL; g++)
            if (ov[2 * g] != PCRE2_UNSET) cat = g;
    }
    pcre2_match_data_free(md);
    return cat;
}

/* Relaxed atomics: racing threads only ever store the same value. */
static unsigned cp_class(uint32_t cp) {
    if (cp >= MAX_CP) return CL_KNOWN | CAT_UNDEF;
    unsigned c = atomic_load_explicit(&class_cache[cp], memory_order_relaxed);
    if (!c) {
        c = CL_KNOWN | classify(cp) | (is_white_space(cp) ? CL_SPACE : 0);
        atomic_store_explicit(&class_cache[cp], (unsigned char)c, memory_order_relaxed);
    }
    return c;
}

static inline bool cl_letter(unsigned c) { return c && (c & CL_CAT) == CAT_LETTER; }
static inline bool cl_number(unsigned c) { return c && (c & CL_CAT) == CAT_NUMBER; }
static inline bool cl_space(unsigned c) { return (c & CL_SPACE) != 0; }
static inline bool cl_other(unsigned c) { return c && !cl_space(c) && !cl_letter(c) && !cl_number(c); }

/* Decodes like llama.cpp's unicode_cpts_from_utf8: no checks for overlong
 * forms or surrogates, and each byte that starts no complete sequence
 * becomes one U+FFFD. Returns the number of code points written to `cp`. */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    size_t i = 0, k = 0;
    while (i < n) {
        unsigned b = s[i];
        size_t need = b < 0x80 ? 0 : !(b & 0x40) ? 9 : !(b & 0x20) ? 1 : !(b & 0x10) ? 2 : !(b & 0x08) ? 3 : 9;
        bool ok = need != 9 && i + need < n;
        for (size_t j = 1; ok && j <= need; j++) ok = (s[i + j] & 0xC0) == 0x80;
        if (!ok) {
            cp[k++] = 0xFFFD;
            i++;
            continue;
        }
        static const unsigned LEAD_MASK[4] = {0x7F, 0x1F, 0x0F, 0x07};
        uint32_t v = b & LEAD_MASK[need];
        for (size_t j = 1; j <= need; j++) v = (v << 6) | (s[i + j] & 0x3F);
        cp[k++] = v;
        i += need + 1;
    }
    return k;
}

/* ---- the regex lists of llama.cpp's llm_tokenizer_bpe ------------------ */

#define RX_GPT2_TEXT "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RX_LLAMA3_TEXT                                                                         \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_LLAMA3_TEXT_I                                                                       \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RX_QWEN2_TEXT                                                                          \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"      \
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Case-split words as in tekken / gpt-4o: ((?=[\p{L}])([^a-z])) is "a
 * letter that is not a-z". */
#define UPPER_RUN "((?=[\\p{L}])([^a-z]))"
#define LOWER_RUN "((?=[\\p{L}])([^A-Z]))"
/* CJK ideographs, U+0800..U+4E00 and Hangul, as in deepseek's tokenizer.json. */
#define CJK_HANGUL "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define PORO_WORD " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+"

static const char *const RX_DEFAULT[] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RX_GPT2_TEXT, "\\p{N}+",
                                         "[0-9][0-9][0-9]", NULL};
static const char *const RX_GPT2[] = {RX_GPT2_TEXT, NULL};
static const char *const RX_LLAMA3[] = {RX_LLAMA3_TEXT, NULL};
static const char *const RX_QWEN2[] = {RX_QWEN2_TEXT, NULL};
static const char *const RX_STARCODER[] = {"\\p{N}", RX_GPT2_TEXT, NULL};
static const char *const RX_FALCON[] = {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RX_GPT2_TEXT, "[0-9][0-9][0-9]",
                                        NULL};
static const char *const RX_DEEPSEEK_LLM[] = {
    "[\r\n]",
    /* the cased letters (Unicode LC) of the original tokenizer.json */
    "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}"
    "\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}"
    "\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}"
    "\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}"
    "\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}"
    "\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}"
    "\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
    "\\x{1E900}-\\x{1E943}]+",
    /* ASCII and full-width punctuation, curly quotes, ideographic space/comma/stop */
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    CJK_HANGUL,
    "\\p{N}+",
    NULL};
static const char *const RX_DEEPSEEK_CODER[] = {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", CJK_HANGUL,
                                                "\\p{N}", NULL};
static const char *const RX_DEEPSEEK3[] = {
    "\\p{N}{1,3}",
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+", /* ideographs, kana */
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const RX_QWEN35[] = {
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const RX_PORO[] = {PORO_WORD, NULL};
static const char *const RX_VIKING[] = {PORO_WORD, "\\p{N}", NULL};
static const char *const RX_TEKKEN[] = {
    "[^\\r\\n\\p{L}\\p{N}]?" UPPER_RUN "*" LOWER_RUN "+|[^\\r\\n\\p{L}\\p{N}]?" UPPER_RUN "+" LOWER_RUN
    "*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL};
static const char *const RX_GPT4O[] = {
    "[^\\r\\n\\p{L}\\p{N}]?" UPPER_RUN "*" LOWER_RUN "+" CONTRACTIONS "?|[^\\r\\n\\p{L}\\p{N}]?" UPPER_RUN
    "+" LOWER_RUN "*" CONTRACTIONS "?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+",
    NULL};
static const char *const RX_CHAMELEON[] = {
    "<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
    "[\\p{P}!-/:-@\\[-`{-~]", RX_GPT2_TEXT, NULL};
static const char *const RX_SEED_CODER[] = {
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|"
                 "\\s+(?!\\S)|\\s+",
    NULL};
static const char *const RX_BAILINGMOE[] = {
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL};

static const char *const RX_NEWLINES[] = {"[^\\n]+|[\\n]+", NULL};

enum { PRE_IGNORE_MERGES = 1, PRE_ADD_BOS = 2, PRE_NO_BOS = 4, PRE_SPM_BPE = 8 };

/* tokenizer.ggml.pre values, as llama.cpp's llama_vocab::impl::load maps them. */
static const struct pre_type {
    const char *name;
    const char *const *rx;
    unsigned flags;
} PRE_TYPES[] = {
    {"default", RX_DEFAULT, 0},
    {"llama3", RX_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"llama-v3", RX_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"llama-bpe", RX_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"falcon3", RX_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"falcon-h1", RX_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"pixtral", RX_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"midm-2.0", RX_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"lfm2", RX_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"jina-v5-nano", RX_LLAMA3, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"dbrx", RX_LLAMA3, 0},
    {"smaug-bpe", RX_LLAMA3, 0},
    {"glm4", RX_LLAMA3, PRE_NO_BOS},
    {"chatglm-bpe", RX_LLAMA3, PRE_NO_BOS},
    {"deepseek-llm", RX_DEEPSEEK_LLM, 0},
    {"deepseek-coder", RX_DEEPSEEK_CODER, 0},
    {"deepseek-v3", RX_DEEPSEEK3, 0},
    {"hunyuan-dense", RX_DEEPSEEK3, 0},
    {"joyai-llm", RX_DEEPSEEK3, 0},
    {"hy_v4", RX_DEEPSEEK3, 0},
    {"falcon", RX_FALCON, 0},
    {"starcoder", RX_STARCODER, 0},
    {"refact", RX_STARCODER, 0},
    {"command-r", RX_STARCODER, 0},
    {"smollm", RX_STARCODER, 0},
    {"codeshell", RX_STARCODER, 0},
    {"exaone", RX_STARCODER, 0},
    {"minerva-7b", RX_STARCODER, 0},
    {"mellum2", RX_STARCODER, 0},
    {"gpt-2", RX_GPT2, 0},
    {"phi-2", RX_GPT2, 0},
    {"jina-es", RX_GPT2, 0},
    {"jina-de", RX_GPT2, 0},
    {"gigachat", RX_GPT2, 0},
    {"jina-v2-es", RX_GPT2, 0},
    {"jina-v2-de", RX_GPT2, 0},
    {"a.x-4.0", RX_GPT2, 0},
    {"mellum", RX_GPT2, 0},
    {"modern-bert", RX_GPT2, 0},
    {"jina-v1-en", RX_GPT2, 0},
    {"jina-v2-code", RX_GPT2, 0},
    {"roberta-bpe", RX_GPT2, 0},
    {"mpt", RX_GPT2, 0},
    {"olmo", RX_GPT2, 0},
    {"jais", RX_GPT2, 0},
    {"exaone4", RX_GPT2, 0},
    {"trillion", RX_GPT2, 0},
    {"granite-docling", RX_GPT2, 0},
    {"qwen2", RX_QWEN2, 0},
    {"deepseek-r1-qwen", RX_QWEN2, 0},
    {"kormo", RX_QWEN2, 0},
    {"f2llmv2", RX_QWEN2, 0},
    {"stablelm2", RX_QWEN2, 0},
    {"megrez", RX_QWEN2, 0},
    {"hunyuan", RX_QWEN2, 0},
    {"solar-open", RX_QWEN2, 0},
    {"grok-2", RX_QWEN2, 0},
    {"qwen35", RX_QWEN35, 0},
    {"poro-chat", RX_PORO, 0},
    {"bloom", RX_PORO, 0},
    {"gpt3-finnish", RX_PORO, 0},
    {"viking", RX_VIKING, 0},
    {"tekken", RX_TEKKEN, PRE_IGNORE_MERGES | PRE_ADD_BOS},
    {"chameleon", RX_CHAMELEON, PRE_ADD_BOS},
    {"gpt-4o", RX_GPT4O, 0},
    {"llama4", RX_GPT4O, 0},
    {"kanana2", RX_GPT4O, 0},
    {"talkie", RX_GPT4O, 0},
    {"minimax-m2", RX_GPT4O, 0},
    {"seed-coder", RX_SEED_CODER, 0},
    {"bailingmoe", RX_BAILINGMOE, 0},
    {"bailingmoe2", RX_BAILINGMOE, 0},
    {"llada-moe", RX_BAILINGMOE, 0},
    {"gemma4", RX_NEWLINES, PRE_SPM_BPE},
    {"granite-embed-multi-311m", RX_NEWLINES, PRE_SPM_BPE},
};

/* ---- compiled pre-tokenizer ------------------------------------------- */

enum rx_kind { RX_KIND_GPT2, RX_KIND_LLAMA3, RX_KIND_BYTES, RX_KIND_UTF };

typedef struct rx {
    enum rx_kind kind;
    pcre2_code *code;
} rx;

struct kiln_pretok {
    rx *rx;
    int n_rx;
    bool need_bytes, need_utf;
};

/* llama.cpp's \p{..} names and what they become in the collapsed regex:
 * the category byte plus the ASCII characters it counts in that category. */
static const struct ucat {
    const char *name;
    unsigned char byte;
    const char *ascii;
} UCATS[] = {
    {"\\p{N}", 0xD1, "0-9"},
    {"\\p{L}", 0xD2, "A-Za-z"},
    {"\\p{P}", 0xD3, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"},
    {"\\p{M}", 0xD4, ""},
    {"\\p{S}", 0xD5, "\\$\\+<->^`\\|"},
    {"\\p{Lu}", 0xD2, "A-Za-z"},
    {"\\p{Ll}", 0xD2, "A-Za-z"},
    {"\\p{Lt}", 0xD2, "A-Za-z"},
    {"\\p{Lm}", 0xD2, "A-Za-z"},
    {"\\p{Lo}", 0xD2, "A-Za-z"},
};
#define N_UCATS (sizeof UCATS / sizeof UCATS[0])

static const struct ucat *ucat_find(const char *s, size_t n) {
    for (size_t i = 0; i < N_UCATS; i++)
        if (strlen(UCATS[i].name) == n && !memcmp(UCATS[i].name, s, n)) return &UCATS[i];
    return NULL;
}

static bool uses_ucat(const char *re) {
    for (size_t i = 0; i < N_UCATS; i++)
        if (strstr(re, UCATS[i].name)) return true;
    return false;
}

/* Rewrites \p{X} for the collapsed text, with llama.cpp's bracket tracking
 * (a '[' or ']' right after a backslash is not a bracket). Returns a
 * malloc'd string or NULL when out of memory. */
static char *collapse_regex(const char *re) {
    size_t n = strlen(re);
    char *o = malloc(n * 8 + 1);
    if (!o) return NULL;
    size_t k = 0;
    bool inside = false;
    for (size_t i = 0; i < n; i++) {
        if (re[i] == '[' && (i == 0 || re[i - 1] != '\\')) {
            o[k++] = '[';
            inside = true;
            continue;
        }
        if (inside && re[i] == ']' && re[i - 1] != '\\') {
            o[k++] = ']';
            inside = false;
            continue;
        }
        if (re[i] == '\\' && i + 3 < n && re[i + 1] == 'p' && re[i + 2] == '{') {
            const char *close = strchr(re + i + 3, '}');
            const struct ucat *u = close && (size_t)(close - re) <= i + 10
                                       ? ucat_find(re + i, (size_t)(close - re) - i + 1)
                                       : NULL;
            if (u) {
                if (!inside) o[k++] = '[';
                o[k++] = (char)u->byte;
                size_t al = strlen(u->ascii);
                memcpy(o + k, u->ascii, al);
                k += al;
                if (!inside) o[k++] = ']';
                i = (size_t)(close - re);
                continue;
            }
        }
        o[k++] = re[i];
    }
    o[k] = 0;
    return o;
}

void kiln_pretok_free(kiln_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n_rx; i++) pcre2_code_free(p->rx[i].code);
    free(p->rx);
    free(p);
}

static int compile_rx(rx *r, const char *re, const char *file, kiln_err *err) {
    if (!strcmp(re, RX_GPT2_TEXT)) {
        r->kind = RX_KIND_GPT2;
        return 0;
    }
    if (!strcmp(re, RX_LLAMA3_TEXT) || !strcmp(re, RX_LLAMA3_TEXT_I)) {
        r->kind = RX_KIND_LLAMA3;
        return 0;
    }
    char *pat = NULL;
    uint32_t opts = PCRE2_DOLLAR_ENDONLY; /* std::regex's $ is the end only */
    if (uses_ucat(re)) {
        r->kind = RX_KIND_BYTES;
        if (!(pat = collapse_regex(re)))
            return kiln_fail(err, file, "tokenizer.ggml.pre", -1, "out of memory");
    } else {
        r->kind = RX_KIND_UTF;
        opts |= PCRE2_UTF;
    }
    int code;
    PCRE2_SIZE at;
    r->code = pcre2_compile((PCRE2_SPTR)(pat ? pat : re), PCRE2_ZERO_TERMINATED, opts, &code, &at, NULL);
    free(pat);
    if (!r->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return kiln_fail(err, file, "tokenizer.ggml.pre", -1, "pre-tokenizer regex /%s/ at %zu: %s", re,
                         (size_t)at, (const char *)msg);
    }
    (void)pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    return 0;
}

int kiln_pretok_new(const char *pre, kiln_pretok **out, kiln_pretok_flags *flags, const char *file,
                    kiln_err *err) {
    *out = NULL;
    if (!pre || !*pre) pre = "default";
    const struct pre_type *pt = NULL;
    for (size_t i = 0; i < sizeof PRE_TYPES / sizeof PRE_TYPES[0]; i++)
        if (!strcmp(PRE_TYPES[i].name, pre)) pt = &PRE_TYPES[i];
    if (!pt)
        return kiln_fail(err, file, "tokenizer.ggml.pre", -1, "pre-tokenizer '%s' is not supported", pre);
    pthread_once(&class_once, class_init);
    if (!class_re)
        return kiln_fail(err, file, NULL, -1, "PCRE2 cannot compile Unicode property classes");

    kiln_pretok *p = calloc(1, sizeof *p);
    int n = 0;
    while (pt->rx[n]) n++;
    if (!p || !(p->rx = calloc((size_t)n, sizeof *p->rx))) {
        free(p);
        return kiln_fail(err, file, NULL, -1, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        p->n_rx = i + 1;
        if (compile_rx(&p->rx[i], pt->rx[i], file, err) < 0) {
            kiln_pretok_free(p);
            return -1;
        }
        p->need_bytes |= p->rx[i].kind == RX_KIND_BYTES;
        p->need_utf |= p->rx[i].kind == RX_KIND_UTF;
    }
    flags->ignore_merges = pt->flags & PRE_IGNORE_MERGES;
    flags->add_bos = pt->flags & PRE_ADD_BOS;
    flags->no_bos = pt->flags & PRE_NO_BOS;
    flags->spm_bpe = pt->flags & PRE_SPM_BPE;
    *out = p;
    return 0;
}

/* ---- splitting ---------------------------------------------------------- */

/* One split run: the text's code points and their classes, the subjects
 * the PCRE2 regexes see, and the current pieces as code point counts. */
typedef struct split {
    const uint32_t *cp;
    const unsigned char *cls;
    size_t n;
    unsigned char *bytes;   /* collapsed text, one byte per code point */
    unsigned char *utf;     /* UTF-8 subject for non-\p regexes */
    size_t *c2b;            /* code point index -> byte offset in utf */
    size_t *b2c;            /* byte offset in utf -> code point index */
    size_t *piece, n_piece, cap_piece;
    pcre2_match_context *mctx; /* with a big JIT stack, made when needed */
    pcre2_jit_stack *jit_stack;
    kiln_err *err;
} split;

/* Regexes with repeated groups (tekken, gpt-4o) use JIT stack per letter of
 * a word, beyond PCRE2's default 32 KiB for long words. The stack is only
 * reserved address space until used. */
#define JIT_STACK_MAX (1024u * 1024u * 1024u)

static int big_jit_stack(split *s) {
    if (s->mctx) return 0;
    if (!(s->mctx = pcre2_match_context_create(NULL)) ||
        !(s->jit_stack = pcre2_jit_stack_create(1024 * 1024, JIT_STACK_MAX, NULL)))
        return -1;
    pcre2_jit_stack_assign(s->mctx, NULL, s->jit_stack);
    return 0;
}

static int emit(split *s, size_t len) {
    if (!len) return 0;
    if (s->n_piece == s->cap_piece) {
        size_t cap = s->cap_piece ? s->cap_piece * 2 : 64;
        size_t *p = realloc(s->piece, cap * sizeof *p);
        if (!p) return kiln_fail(s->err, NULL, NULL, -1, "out of memory");
        s->piece = p;
        s->cap_piece = cap;
    }
    s->piece[s->n_piece++] = len;
    return 0;
}

#define EMIT(len)                              \
    do {                                       \
        if (emit(s, (len)) < 0) return -1;     \
    } while (0)

/* Class of code point i inside the piece [lo, hi), 0 outside it. */
#define CL(i) ((i) >= lo && (i) < hi ? s->cls[i] : 0u)

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static int split_gpt2(split *s, size_t lo, size_t hi) {
    const uint32_t *cp = s->cp;
    size_t pos = lo;
    while (pos < hi) {
        uint32_t c = cp[pos];
        if (c == '\'' && pos + 1 < hi) {
            uint32_t a = cp[pos + 1];
            if (a == 's' || a == 't' || a == 'm' || a == 'd') {
                EMIT(2);
                pos += 2;
                continue;
            }
            if (pos + 2 < hi) {
                uint32_t b = cp[pos + 2];
                if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
                    EMIT(3);
                    pos += 3;
                    continue;
                }
            }
        }
        unsigned f2 = c == ' ' ? CL(pos + 1) : CL(pos);
        size_t e = pos + (c == ' ');
        if (cl_letter(f2)) {
            while (cl_letter(CL(e))) e++;
        } else if (cl_number(f2)) {
            while (cl_number(CL(e))) e++;
        } else if (cl_other(f2)) {
            while (cl_other(CL(e))) e++;
        } else {
            size_t nw = 0;
            while (cl_space(CL(pos + nw))) nw++;
            if (nw > 1 && pos + nw < hi) /* \s+(?!\S): leave the last space to the next word */
                e = pos + nw - 1;
            else
                e = pos + (nw ? nw : 1);
        }
        EMIT(e - pos);
        pos = e;
    }
    return 0;
}

static uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 * ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static int split_llama3(split *s, size_t lo, size_t hi) {
    const uint32_t *cp = s->cp;
    size_t pos = lo;
    while (pos < hi) {
        uint32_t c = cp[pos];
        unsigned f = CL(pos);
        if (c == '\'' && pos + 1 < hi) {
            uint32_t a = ascii_lower(cp[pos + 1]);
            if (a == 's' || a == 't' || a == 'm' || a == 'd') {
                EMIT(2);
                pos += 2;
                continue;
            }
            if (pos + 2 < hi) {
                uint32_t b = ascii_lower(cp[pos + 2]);
                if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
                    EMIT(3);
                    pos += 3;
                    continue;
                }
            }
        }
        size_t e;
        if (!(c == '\r' || c == '\n' || cl_number(f)) && (cl_letter(f) || cl_letter(CL(pos + 1)))) {
            e = pos + 1;
            while (cl_letter(CL(e))) e++;
        } else if (cl_number(f)) {
            e = pos;
            while (cl_number(CL(e)) && e - pos < 3) e++;
        } else if (cl_other(c == ' ' ? CL(pos + 1) : f) || (c == ' ' && !CL(pos + 1))) {
            /* a lone space at the end of the piece also ends up here */
            e = pos + (c == ' ');
            while (cl_other(CL(e))) e++;
            while (e < hi && (cp[e] == '\r' || cp[e] == '\n')) e++;
        } else {
            size_t nw = 0, last_nl = 0;
            while (cl_space(CL(pos + nw))) {
                if (cp[pos + nw] == '\r' || cp[pos + nw] == '\n') last_nl = pos + nw + 1;
                nw++;
            }
            if (last_nl)
                e = last_nl;
            else if (nw > 1 && pos + nw < hi)
                e = pos + nw - 1;
            else
                e = pos + (nw ? nw : 1);
        }
        EMIT(e - pos);
        pos = e;
    }
    return 0;
}

/* Matches and the gaps between them become pieces, the way llama.cpp walks
 * a std::regex_iterator over the piece (empty matches included). */
static int split_regex(split *s, const rx *r, pcre2_match_data *md, size_t lo, size_t hi) {
    bool bytes = r->kind == RX_KIND_BYTES;
    const unsigned char *subj = bytes ? s->bytes + lo : s->utf + s->c2b[lo];
    size_t len = bytes ? hi - lo : s->c2b[hi] - s->c2b[lo];
    size_t base = bytes ? 0 : s->c2b[lo];
#define AT(u) (bytes ? lo + (u) : s->b2c[base + (u)]) /* code point index of unit offset u */
    size_t start = 0, last = 0;
    uint32_t opts = 0;
    for (;;) {
        uint32_t o = opts | (bytes ? 0 : PCRE2_NO_UTF_CHECK);
        int rc = pcre2_match(r->code, subj, len, start, o, md, s->mctx);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !s->mctx) {
            if (big_jit_stack(s) < 0) return kiln_fail(s->err, NULL, NULL, -1, "out of memory");
            rc = pcre2_match(r->code, subj, len, start, o, md, s->mctx);
        }
        if (rc == PCRE2_ERROR_NOMATCH && opts) {
            /* no non-empty match where the empty one was: move one character on */
            opts = 0;
            start += bytes ? 1 : kiln_utf8_len(subj[start]);
            continue;
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return kiln_fail(s->err, NULL, NULL, -1, "pre-tokenizer regex failed: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms > last) EMIT(AT(ms) - AT(last));
        EMIT(AT(me) - AT(ms));
        last = start = me;
        if (me == ms) {
            if (me == len) break;
            opts = PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED;
        } else {
            opts = 0;
        }
    }
    if (last < len) EMIT(AT(len) - AT(last));
#undef AT
    return 0;
}

#undef CL

/* Builds the PCRE2 subjects the regexes of `p` need. */
static int make_subjects(split *s, const kiln_pretok *p) {
    size_t n = s->n;
    if (p->need_bytes) {
        if (!(s->bytes = malloc(n + 1))) return -1;
        for (size_t i = 0; i < n; i++) {
            static const unsigned char CAT_BYTE[8] = {0xD0, 0xD1, 0xD2, 0xD0, 0xD4, 0xD3, 0xD5, 0xD0};
            uint32_t c = s->cp[i];
            s->bytes[i] = c < 0x80 ? (unsigned char)c : cl_space(s->cls[i]) ? 0x0B : CAT_BYTE[s->cls[i] & CL_CAT];
        }
    }
    if (p->need_utf) {
        if (!(s->utf = malloc(4 * n + 1)) || !(s->c2b = malloc((n + 1) * sizeof *s->c2b)) ||
            !(s->b2c = malloc((4 * n + 1) * sizeof *s->b2c)))
            return -1;
        size_t b = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t c = s->cp[i];
            if (c > 0x7F && cl_space(s->cls[i])) c = 0x0B;
            if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) c = 0xFFFD; /* PCRE2 needs valid UTF-8 */
            s->c2b[i] = b;
            size_t k = utf8_put(c, s->utf + b);
            for (size_t j = 0; j < k; j++) s->b2c[b + j] = i;
            b += k;
        }
        s->c2b[n] = b;
        s->b2c[b] = n;
    }
    return 0;
}

/* Writes the pieces as words: the text re-encoded, one end offset each. */
static int make_words(const split *s, kiln_words *w) {
    w->len = w->n = 0;
    if (w->buf_cap < 4 * s->n + 1) {
        char *b = realloc(w->buf, 4 * s->n + 1);
        if (!b) return -1;
        w->buf = b;
        w->buf_cap = 4 * s->n + 1;
    }
    if (w->end_cap < s->n_piece + 1) {
        size_t *e = realloc(w->end, (s->n_piece + 1) * sizeof *e);
        if (!e) return -1;
        w->end = e;
        w->end_cap = s->n_piece + 1;
    }
    size_t i = 0;
    for (size_t k = 0; k < s->n_piece; k++) {
        for (size_t j = 0; j < s->piece[k]; j++, i++)
            w->len += utf8_put(s->cp[i], (unsigned char *)w->buf + w->len);
        w->end[w->n++] = w->len;
    }
    w->buf[w->len] = 0;
    return 0;
}

int kiln_pretok_split(const kiln_pretok *p, const char *text, size_t len, kiln_words *w, kiln_err *err) {
    split s = {.err = err};
    uint32_t *cp = malloc((len + 1) * sizeof *cp);
    unsigned char *cls = NULL;
    size_t *next = NULL, cap_next = 0;
    pcre2_match_data *md = NULL;
    int rc = -1;
    if (!cp) goto oom;
    s.n = utf8_decode((const unsigned char *)text, len, cp);
    s.cp = cp;
    if (!(cls = malloc(s.n + 1))) goto oom;
    for (size_t i = 0; i < s.n; i++) cls[i] = (unsigned char)cp_class(cp[i]);
    s.cls = cls;
    if (make_subjects(&s, p) < 0) goto oom;
    if ((p->need_bytes || p->need_utf) && !(md = pcre2_match_data_create(1, NULL))) goto oom;
    if (emit(&s, s.n) < 0) goto done;

    for (int r = 0; r < p->n_rx; r++) {
        /* split every current piece into the next generation of pieces */
        size_t *cur = s.piece, n_cur = s.n_piece, cap_cur = s.cap_piece;
        s.piece = next;
        s.n_piece = 0;
        s.cap_piece = cap_next;
        size_t lo = 0;
        int ok = 0;
        for (size_t k = 0; k < n_cur && ok == 0; k++) {
            size_t hi = lo + cur[k];
            switch (p->rx[r].kind) {
            case RX_KIND_GPT2: ok = split_gpt2(&s, lo, hi); break;
            case RX_KIND_LLAMA3: ok = split_llama3(&s, lo, hi); break;
            default: ok = split_regex(&s, &p->rx[r], md, lo, hi); break;
            }
            lo = hi;
        }
        next = cur;
        cap_next = cap_cur;
        if (ok < 0) goto done;
    }
    if (make_words(&s, w) < 0) goto oom;
    rc = 0;
    goto done;
oom:
    rc = kiln_fail(err, NULL, NULL, -1, "out of memory");
done:
    pcre2_match_data_free(md);
    pcre2_match_context_free(s.mctx);
    pcre2_jit_stack_free(s.jit_stack);
    free(cp);
    free(cls);
    free(next);
    free(s.piece);
    free(s.bytes);
    free(s.utf);
    free(s.c2b);
    free(s.b2c);
    return rc;
}

void kiln_words_free(kiln_words *w) {
    free(w->buf);
    free(w->end);
    memset(w, 0, sizeof *w);
}
