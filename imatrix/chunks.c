/* imatrix/chunks.c - tokenizing the calibration text and cutting it into
 * chunks (see chunks.h for llama-imatrix's rules this follows). */
#include "chunks.h"

#include <stdlib.h>
#include <string.h>

int kiln_imx_tokens_from_ids(const int32_t *ids, size_t n, int32_t bos, int64_t n_ctx, int64_t max_chunks,
                             const char *what, kiln_imx_tokens *out, kiln_err *err) {
    memset(out, 0, sizeof *out);
    if (n_ctx <= 0) return kiln_fail(err, NULL, "-c", -1, "the chunk size must be positive");
    if (n == 0 || (n == 1 && ids[0] == bos)) return kiln_fail(err, what, NULL, -1, "the calibration text is empty");
    if ((int64_t)n < n_ctx)
        return kiln_fail(err, what, NULL, -1,
                         "the calibration text is %zu tokens long, shorter than one chunk of %lld (-c)", n,
                         (long long)n_ctx);
    int64_t whole = (int64_t)n / n_ctx;
    out->ids = malloc(n * sizeof *ids);
    if (!out->ids) return kiln_fail(err, what, NULL, -1, "out of memory");
    memcpy(out->ids, ids, n * sizeof *ids);
    out->n = n;
    out->n_ctx = n_ctx;
    out->n_chunks = max_chunks > 0 && max_chunks < whole ? max_chunks : whole;
    out->bos = bos;
    return 0;
}

int kiln_imx_tokens_make(const kiln_tokenizer *t, const char *text, size_t len, int64_t n_ctx,
                         int64_t max_chunks, bool parse_special, const char *what, kiln_imx_tokens *out,
                         kiln_err *err) {
    memset(out, 0, sizeof *out);
    if (len == 0) return kiln_fail(err, what, NULL, -1, "the calibration text is empty");
    int32_t *ids;
    size_t n;
    if (kiln_tokenize(t, text, len, true, parse_special, &ids, &n, err) < 0) return -1;
    if (kiln_tokenizer_add_eos(t) && n > 0 && ids[n - 1] == kiln_tokenizer_eos(t)) n--;
    int32_t bos = kiln_tokenizer_add_bos(t) ? kiln_tokenizer_bos(t) : KILN_TOKEN_NULL;
    int rc = kiln_imx_tokens_from_ids(ids, n, bos, n_ctx, max_chunks, what, out, err);
    free(ids);
    return rc;
}

void kiln_imx_tokens_free(kiln_imx_tokens *tk) {
    free(tk->ids);
    memset(tk, 0, sizeof *tk);
}

void kiln_imx_chunk(const kiln_imx_tokens *tk, int64_t c, int32_t *out) {
    memcpy(out, tk->ids + c * tk->n_ctx, (size_t)tk->n_ctx * sizeof *out);
    if (tk->bos != KILN_TOKEN_NULL) out[0] = tk->bos;
}

uint64_t kiln_imx_tokens_hash(const kiln_imx_tokens *tk) {
    uint64_t h = 0xcbf29ce484222325ull;
    const uint8_t *p = (const uint8_t *)tk->ids;
    for (size_t i = 0; i < tk->n * sizeof *tk->ids; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    for (int i = 0; i < 8; i++) h = (h ^ (uint8_t)((uint64_t)tk->n_ctx >> (8 * i))) * 0x100000001b3ull;
    for (int i = 0; i < 4; i++) h = (h ^ (uint8_t)((uint32_t)tk->bos >> (8 * i))) * 0x100000001b3ull;
    return h;
}
