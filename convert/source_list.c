/* convert/source_list.c - the flat file list every kind of source fills
 * and every reader searches (source.h).
 *
 * A leaf of the source files: source.c (directories) and source_archive.c
 * (archives) both add their entries here, so the archive kind never calls
 * back into source.c, which dispatches to it. */
#include "source.h"

#include <stdlib.h>
#include <string.h>

int cv_source_add_file(cv_source *s, const char *name, uint64_t size, kiln_err *err) {
    cv_file *f = realloc(s->files, (s->n_files + 1) * sizeof *f);
    if (!f) return kiln_fail(err, s->path, NULL, -1, "out of memory");
    s->files = f;
    f = &s->files[s->n_files];
    memset(f, 0, sizeof *f);
    f->member = -1;
    f->size = size;
    if (!(f->name = strdup(name))) return kiln_fail(err, s->path, NULL, -1, "out of memory");
    s->n_files++;
    return 0;
}

int cv_source_find(const cv_source *s, const char *name) {
    for (uint32_t i = 0; i < s->n_files; i++)
        if (!strcmp(s->files[i].name, name)) return (int)i;
    return -1;
}
