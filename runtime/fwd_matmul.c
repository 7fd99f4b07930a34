/* runtime/fwd_matmul.c - how the forward pass multiplies by a weight: the
 * imatrix hook, the output observer, expert slabs of 3-D tensors, and bias
 * rows.
 *
 * Every matrix product of the model goes through kiln_fwd_matmul, so this
 * is the one place that knows how to find expert e's matrix (it starts e
 * whole expert matrices into the tensor) and the one place the hooks are
 * called from (moe.c's own expert kernel calls kiln_fwd_observe too).
 * Products of one input go through kiln_fwd_matmul_group, one OpenMP
 * region for all of them. */
#include "forward_impl.h"

#include "../core/types.h"

#include <stdio.h>

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
    if ((expert >= 0 ? kiln_matmul_expert : kiln_matmul)(w->type, data, n_in, n_out, x, n, y, c->p.mode) == 0) {
        kiln_fwd_observe(c, w, expert, y, n);
        return 0;
    }
    return kiln_fail(err, NULL, NULL, -1, "%.*s: matrix product failed (type %s unsupported, or out of memory)",
                     (int)w->name.len, w->name.ptr, kiln_type_name(w->type));
}

int kiln_fwd_matmul_group(kiln_ctx *c, const kiln_tensor *const *w, float *const *y, int n_w, const float *x,
                          int64_t n, kiln_err *err) {
    if (c->p.hook || c->p.output_hook || n_w > KILN_MM_GROUP_MAX) {
        for (int i = 0; i < n_w; i++)
            if (kiln_fwd_matmul(c, w[i], -1, x, n, y[i], err) < 0) return -1;
        return 0;
    }
    kiln_mm mm[KILN_MM_GROUP_MAX];
    for (int i = 0; i < n_w; i++) {
        if (w[i]->ne[0] != w[0]->ne[0])
            return kiln_fail(err, NULL, NULL, -1, "%.*s: %lld inputs where %.*s has %lld", (int)w[i]->name.len,
                             w[i]->name.ptr, (long long)w[i]->ne[0], (int)w[0]->name.len, w[0]->name.ptr,
                             (long long)w[0]->ne[0]);
        mm[i] = (kiln_mm){w[i]->type, w[i]->data, w[i]->ne[1], y[i]};
    }
    int bad = -1;
    if (kiln_matmul_group(mm, n_w, w[0]->ne[0], x, n, c->p.mode, &bad) == 0) return 0;
    if (bad < 0) return kiln_fail(err, NULL, NULL, -1, "%.*s: matrix product failed (out of memory)",
                                  (int)w[0]->name.len, w[0]->name.ptr);
    return kiln_fail(err, NULL, NULL, -1, "%.*s: matrix product failed (type %s unsupported, or out of memory)",
                     (int)w[bad]->name.len, w[bad]->name.ptr, kiln_type_name(w[bad]->type));
}

void kiln_fwd_observe(kiln_ctx *c, const kiln_tensor *w, int expert, const float *y, int64_t n) {
    if (!c->p.output_hook || n == 0) return;
    char name[160];
    snprintf(name, sizeof name, "%.*s", (int)w->name.len, w->name.ptr);
    c->p.output_hook(c->p.observer_user, name, expert, expert >= 0 ? c->rows : NULL, y, n, w->ne[1]);
}

void kiln_fwd_bias(float *y, const kiln_tensor *b, int64_t n, int64_t w) {
    if (!b) return;
    const float *bv = (const float *)b->data;
    for (int64_t t = 0; t < n; t++) kiln_vec_add(y + t * w, bv, w);
}
