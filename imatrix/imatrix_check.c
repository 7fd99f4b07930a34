/* imatrix/imatrix_check.c - an importance matrix against the model it is
 * meant for (see imatrix_check.h). */
#include "imatrix_check.h"

int64_t kiln_imatrix_row_groups(const kiln_imatrix_entry *e, const int64_t *ne, uint32_t n_dims) {
    if (n_dims > 2 || e->n_mat != 1 || ne[0] <= 0 || e->n <= ne[0] || e->n % ne[0]) return 1;
    const int64_t groups = e->n / ne[0];
    return ne[1] % groups == 0 ? groups : 1;
}

int kiln_imatrix_check_entry(const kiln_imatrix_entry *e, const char *im_path, const char *model_path,
                             const int64_t *ne, uint32_t n_dims, kiln_err *err) {
    if (!ne)
        return kiln_fail(err, im_path, e->name, -1, "%s has no such weight: this imatrix is for another model",
                         model_path);
    int64_t n_exp = n_dims >= 3 ? ne[2] : 1;
    bool fits = (e->n == ne[0] && (e->n_mat == n_exp || e->n_mat == 1)) || (e->n_mat == 1 && e->n == ne[0] * n_exp) ||
                kiln_imatrix_row_groups(e, ne, n_dims) > 1;
    if (!fits)
        return kiln_fail(err, im_path, e->name, -1,
                         "statistics for %lld columns x %lld matrices, but the weight in %s has rows of %lld "
                         "and %lld expert(s): this imatrix is for another model",
                         (long long)e->n, (long long)e->n_mat, model_path, (long long)ne[0], (long long)n_exp);
    return 0;
}

int kiln_imatrix_check_model(const kiln_imatrix *im, const char *im_path, const kiln_gguf *model, kiln_err *err) {
    for (uint64_t i = 0; i < im->n_entries; i++) {
        const kiln_imatrix_entry *e = &im->entries[i];
        const kiln_tensor *t = kiln_gguf_find_tensor(model, e->name);
        if (kiln_imatrix_check_entry(e, im_path, model->path, t ? t->ne : NULL, t ? t->n_dims : 0, err) < 0)
            return -1;
    }
    return 0;
}
