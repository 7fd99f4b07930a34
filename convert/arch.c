/* convert/arch.c - the registry of architecture tables and the name
 * pattern matcher they share (see arch.h). */
#include "arch.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cv_arch *const ARCHS[] = {
    &cv_arch_llama, &cv_arch_mistral, &cv_arch_mixtral, &cv_arch_qwen2, &cv_arch_qwen3,
    &cv_arch_qwen2moe, &cv_arch_qwen3moe, &cv_arch_gpt2, &cv_arch_gemma2, &cv_arch_gemma3,
    &cv_arch_phi3, &cv_arch_granite, &cv_arch_bitnet, &cv_arch_bitnet2, &cv_arch_gptoss, &cv_arch_olmo2,
    &cv_arch_deepseek2, &cv_arch_deepseek3, &cv_arch_deepseek4,
};

const cv_arch *cv_arch_find(const char *name) {
    for (size_t i = 0; name && i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (!strcmp(ARCHS[i]->hf_name, name)) return ARCHS[i];
    return NULL;
}

const char *cv_arch_list(void) {
    static char buf[2048];
    if (!buf[0]) {
        /* snprintf truncates and returns the length it wanted: stop at a
         * full buffer rather than step past it. */
        size_t off = 0;
        for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0] && off < sizeof buf; i++)
            off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s", i ? ", " : "", ARCHS[i]->hf_name);
    }
    return buf;
}

/* Reads a decimal number at *p (at least one digit, no sign). */
static bool take_number(const char **p, int64_t *out) {
    if (!isdigit((unsigned char)**p)) return false;
    int64_t v = 0;
    while (isdigit((unsigned char)**p)) {
        if (v > (INT64_MAX - 9) / 10) return false;
        v = v * 10 + (**p - '0');
        (*p)++;
    }
    *out = v;
    return true;
}

bool cv_tmap_match(const char *pattern, const char *name, int64_t *bid, int64_t *xid, bool *is_bias) {
    *bid = *xid = -1;
    const char *p = pattern, *n = name;
    while (*p) {
        if (*p == '{') {
            int64_t *slot = !strncmp(p, "{bid}", 5) ? bid : !strncmp(p, "{xid}", 5) ? xid : NULL;
            if (!slot || !take_number(&n, slot)) return false;
            p += 5;
        } else if (*p++ != *n++) {
            return false;
        }
    }
    if (!strcmp(n, ".weight")) *is_bias = false;
    else if (!strcmp(n, ".bias")) *is_bias = true;
    else return false;
    return true;
}
