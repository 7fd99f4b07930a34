/* runtime/fwd_matmul.c - how the forward pass multiplies by a weight: the
 * imatrix hook, expert slabs of 3-D tensors, and bias rows.
 *
 * Every matrix product of the model goes through kiln_fwd_matmul, so this
 * is the one place that knows how to find expert e's matrix (it starts e
 * whole expert matrices into the tensor) and the one place the hook is
 * called from. */
#include "forward_impl.h"

#include "../core/types.h"
#include "../quantize/codec.h"

#include <stdio.h>
#include <stdlib.h>

/* TEMPORARY, until runtime/matmul.c covers every type: dequantize each row
 * and take f32 dot products. Correct in both modes but slow, and not
 * ggml's numbers for quantized weights in KILN_NUM_GGML. */
static int matmul_fallback(uint32_t type, const uint8_t *w, int64_t n_in, int64_t n_out,
                           const float *x, int64_t n, float *y) {
    const kiln_codec *codec = kiln_codec_get(type);
    if (!codec) return -1;
    const uint64_t row_bytes = kiln_type_row_bytes(type, (uint64_t)n_in);
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        float *row = malloc((size_t)n_in * sizeof *row);
        if (!row) failed = 1;
#pragma omp for schedule(static)
        for (int64_t r = 0; r < n_out; r++) {
            if (!row) continue;
            codec->dequantize_row(w + (uint64_t)r * row_bytes, row, n_in);
            for (int64_t t = 0; t < n; t++) y[t * n_out + r] = kiln_vec_dot(row, x + t * n_in, n_in);
        }
        free(row);
    }
    return failed ? -1 : 0;
}

int kiln_fwd_matmul(kiln_ctx *c, const kiln_tensor *w, int expert, const float *x, int64_t n,
                    float *y, kiln_err *err) {
    const int64_t n_in = w->ne[0], n_out = w->ne[1];
    const uint8_t *data = w->data;
    if (expert >= 0) data += (uint64_t)expert * kiln_type_row_bytes(w->type, (uint64_t)n_in) * (uint64_t)n_out;
    if (c->p.hook && (w != c->m->output || c->p.hook_output)) {
        char name[160];
        snprintf(name, sizeof name, "%.*s", (int)w->name.len, w->name.ptr);
        c->p.hook(c->p.hook_user, name, expert, x, n, n_in);
    }
    if (!y || n == 0) return 0;
    if (kiln_matmul(w->type, data, n_in, n_out, x, n, y, c->p.mode) == 0) return 0;
    if (matmul_fallback(w->type, data, n_in, n_out, x, n, y) == 0) return 0;
    return kiln_fail(err, NULL, NULL, -1, "%.*s: no matrix product for type %s", (int)w->name.len,
                     w->name.ptr, kiln_type_name(w->type));
}

void kiln_fwd_bias(float *y, const kiln_tensor *b, int64_t n, int64_t w) {
    if (!b) return;
    const float *bv = (const float *)b->data;
    for (int64_t t = 0; t < n; t++) kiln_vec_add(y + t * w, bv, w);
}
