/* splice/imatrix_gguf.c - GGUF importance matrices (see imatrix_gguf.h). */
#include "imatrix_gguf.h"

#include "../core/types.h"

#include <stdio.h>
#include <string.h>

int kiln_splice_imatrix_open(kiln_splice_imatrix *m, const char *path, kiln_err *err) {
    m->g = kiln_gguf_open(path, err);
    if (!m->g) return -1;
    kiln_str type;
    if (!kiln_gguf_get_str(m->g, "general.type", &type) || !kiln_str_eq(type, "imatrix")) {
        kiln_splice_imatrix_close(m);
        return kiln_fail(err, path, "general.type", -1,
                         "not an importance matrix (llama-imatrix's GGUF output has general.type = imatrix)");
    }
    return 0;
}

void kiln_splice_imatrix_close(kiln_splice_imatrix *m) {
    kiln_gguf_close(m->g);
    m->g = NULL;
}

int kiln_splice_imatrix_find(const kiln_splice_imatrix *m, const char *name,
                             kiln_splice_imatrix_entry *e, kiln_err *err) {
    char key[1024];
    if (snprintf(key, sizeof key, "%s.in_sum2", name) >= (int)sizeof key)
        return kiln_fail(err, m->g->path, name, -1, "tensor name too long");
    const kiln_tensor *s = kiln_gguf_find_tensor(m->g, key);
    snprintf(key, sizeof key, "%s.counts", name);
    const kiln_tensor *c = kiln_gguf_find_tensor(m->g, key);
    if (!s && !c) return 0;
    if (!s || !c)
        return kiln_fail(err, m->g->path, name, -1, "has %s but not %s", s ? "in_sum2" : "counts",
                         s ? "counts" : "in_sum2");
    if (s->type != KILN_F32 || c->type != KILN_F32)
        return kiln_fail(err, m->g->path, key, -1, "in_sum2 and counts must be F32");
    int64_t n_mat = s->ne[1] * s->ne[2] * s->ne[3];
    if (c->ne[0] != 1 || c->nelements != n_mat)
        return kiln_fail(err, m->g->path, key, -1, "counts holds %lld values for %lld matrices",
                         (long long)c->nelements, (long long)n_mat);
    *e = (kiln_splice_imatrix_entry){.sums = s, .counts = c, .ne0 = s->ne[0], .n_mat = n_mat};
    return 1;
}

bool kiln_splice_imatrix_weights(const kiln_splice_imatrix_entry *e, int64_t mat, float *w) {
    float count;
    /* Tensor data is only as aligned as the file's alignment, so read
     * through memcpy rather than casting. */
    memcpy(&count, e->counts->data + 4 * mat, 4);
    if (!(count > 0)) {
        for (int64_t j = 0; j < e->ne0; j++) w[j] = 1.0f;
        return false;
    }
    memcpy(w, e->sums->data + 4 * (uint64_t)(mat * e->ne0), 4 * (size_t)e->ne0);
    for (int64_t j = 0; j < e->ne0; j++) w[j] /= count;
    return true;
}
