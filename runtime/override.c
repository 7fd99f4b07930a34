/* runtime/override.c - a model view in which single weights can be swapped
 * for another version of themselves (another type, other bytes), so that
 * a tool can evaluate "this model, but with blk.3.ffn_down quantized to
 * Q2_K" without writing a file (kiln quantize --analyze).
 *
 * A view is a shallow copy of a loaded kiln_model with its own tensor
 * table (the top-level pointers and the per-layer kiln_layer structs); the
 * mapping, the tokenizer and the hyper-parameters stay the base model's.
 * The forward pass reads weights only through those pointers, so the
 * normal path pays nothing for this. What it does not do: check that the
 * replacement has the original's shape (the caller builds it from the
 * original), or keep the replacement's bytes alive (the caller owns them). */
#include "model.h"

#include <stdlib.h>
#include <string.h>

/* kiln_layer is nothing but tensor pointers: swapping walks it as an array,
 * so a field added to it later is covered without a change here. */
_Static_assert(sizeof(kiln_layer) % sizeof(const kiln_tensor *) == 0, "kiln_layer holds only tensor pointers");

kiln_model *kiln_model_view(const kiln_model *m, kiln_err *err) {
    kiln_model *v = malloc(sizeof *v);
    kiln_layer *layers = malloc((size_t)(m->hp.n_layer > 0 ? m->hp.n_layer : 1) * sizeof *layers);
    if (!v || !layers) {
        free(v);
        free(layers);
        kiln_fail(err, NULL, NULL, -1, "out of memory for a model view");
        return NULL;
    }
    *v = *m;
    memcpy(layers, m->layers, (size_t)m->hp.n_layer * sizeof *layers);
    v->layers = layers;
    return v;
}

static int64_t swap_slot(const kiln_tensor **slot, const kiln_tensor *from, const kiln_tensor *to) {
    if (*slot != from) return 0;
    *slot = to;
    return 1;
}

int64_t kiln_model_view_swap(kiln_model *v, const kiln_tensor *from, const kiln_tensor *to) {
    if (!from || !to) return 0;
    int64_t n = swap_slot(&v->tok_embd, from, to) + swap_slot(&v->output, from, to);
    const size_t per_layer = sizeof(kiln_layer) / sizeof(const kiln_tensor *);
    for (int64_t il = 0; il < v->hp.n_layer; il++) {
        const kiln_tensor **slots = (const kiln_tensor **)(void *)&v->layers[il];
        for (size_t k = 0; k < per_layer; k++) n += swap_slot(&slots[k], from, to);
    }
    return n;
}

void kiln_model_view_free(kiln_model *v) {
    if (!v) return;
    free(v->layers);
    free(v);
}
