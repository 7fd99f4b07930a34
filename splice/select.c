/* splice/select.c - what a splice selection means for a tensor name: id
 * lists like "0,3,5-7", the layer of blk.N tensors, and which tensors are
 * indexed by expert. Names follow llama.cpp's GGUF tensor naming
 * (llama-arch.cpp): routed experts are "blk.N.ffn_{gate,up,down,...}_exps.*",
 * the router is "blk.N.ffn_gate_inp.*". Shared experts ("_shexp") are not
 * routed experts and are never matched. */
#include "splice.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool parse_num(const char **s, uint64_t *v) {
    if (**s < '0' || **s > '9') return false;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(*s, &end, 10);
    if (errno) return false;
    *v = x;
    *s = end;
    return true;
}

int64_t kiln_splice_parse_set(const char *spec, uint64_t limit, const char *what, bool *sel, kiln_err *err) {
    const char *s = spec;
    if (!s || !*s) return kiln_fail(err, NULL, what, -1, "empty list");
    for (;;) {
        uint64_t a, b;
        if (!parse_num(&s, &a))
            return kiln_fail(err, NULL, what, -1, "'%s' is not a list like 0,3,5-7", spec);
        b = a;
        if (*s == '-') {
            s++;
            if (!parse_num(&s, &b) || b < a)
                return kiln_fail(err, NULL, what, -1, "'%s' has a bad range (write A-B with A <= B)", spec);
        }
        if (b >= limit)
            return kiln_fail(err, NULL, what, -1, "%llu is out of range: the model has %llu (0-%llu)",
                             (unsigned long long)b, (unsigned long long)limit,
                             (unsigned long long)(limit ? limit - 1 : 0));
        for (uint64_t i = a; i <= b; i++) sel[i] = true;
        if (*s == 0) break;
        if (*s != ',') return kiln_fail(err, NULL, what, -1, "'%s' is not a list like 0,3,5-7", spec);
        s++;
    }
    int64_t n = 0;
    for (uint64_t i = 0; i < limit; i++) n += sel[i];
    return n;
}

/* Calls match(segment, len) on each dot-separated segment of `name`. */
static bool any_segment(const char *name, bool (*match)(const char *, size_t)) {
    for (const char *s = name;;) {
        const char *dot = strchr(s, '.');
        size_t len = dot ? (size_t)(dot - s) : strlen(s);
        if (match(s, len)) return true;
        if (!dot) return false;
        s = dot + 1;
    }
}

static bool is_exps(const char *s, size_t n) {
    return n > 9 && !strncmp(s, "ffn_", 4) && !strncmp(s + n - 5, "_exps", 5);
}

static bool is_expert_indexed(const char *s, size_t n) {
    return is_exps(s, n) || (n == 12 && !strncmp(s, "ffn_gate_inp", 12)) ||
           (n == 11 && !strncmp(s, "exp_probs_b", 11));
}

bool kiln_splice_is_expert_tensor(const char *name) { return any_segment(name, is_exps); }

bool kiln_splice_is_expert_indexed(const char *name) { return any_segment(name, is_expert_indexed); }

const char *kiln_splice_action_name(kiln_splice_action a) {
    switch (a) {
    case KILN_SPLICE_FROM_BASE: return "base";
    case KILN_SPLICE_TENSOR: return "tensor";
    case KILN_SPLICE_SLABS: return "experts";
    case KILN_SPLICE_REQUANT: return "requantize";
    case KILN_SPLICE_KEEP: return "keep";
    }
    return "?";
}
