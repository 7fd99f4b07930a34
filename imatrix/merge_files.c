/* imatrix/merge_files.c - reading several importance matrices into one
 * (see merge_files.h). */
#include "merge_files.h"

#include <stdio.h>

kiln_imatrix *kiln_imatrix_read_all(const char *const *paths, int n, uint32_t chunk_size, kiln_err *err) {
    kiln_imatrix *all = NULL;
    for (int i = 0; i < n; i++) {
        kiln_imatrix *im = kiln_imatrix_read(paths[i], err);
        if (!im) goto fail;
        if (chunk_size) kiln_imatrix_set_chunk_size(im, chunk_size);
        if (!all) {
            all = im;
            continue;
        }
        int rc = kiln_imatrix_merge(all, im, err);
        kiln_imatrix_free(im);
        if (rc < 0) {
            /* merge errors name the entry; say which file brought it */
            kiln_err inner = err ? *err : (kiln_err){{0}};
            kiln_fail(err, paths[i], NULL, -1, "cannot be merged: %s", inner.msg);
            goto fail;
        }
    }
    if (!all) kiln_fail(err, NULL, NULL, -1, "no imatrix file given");
    return all;
fail:
    kiln_imatrix_free(all);
    return NULL;
}
