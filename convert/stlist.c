/* convert/stlist.c - listing a model's tensors across its safetensors
 * shards and checking the index against them (see stlist.h). */
#include "stlist.h"

#include <stdlib.h>
#include <string.h>

#include "json.h"

#define INDEX_NAME "model.safetensors.index.json"

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const kiln_st_tensor *)a)->name, ((const kiln_st_tensor *)b)->name);
}

static bool is_part_name(const char *n) {
    size_t len = strlen(n);
    return !strncmp(n, "model", 5) && len > 12 && !strcmp(n + len - 12, ".safetensors");
}

/* The shard names: from the index's weight_map when there is one. Returns
 * a malloc'd array of borrowed strings (from `s` or from `index`). */
static int part_names(cv_source *s, json_t *wmap, const char ***out, size_t *n_out, kiln_err *err) {
    size_t cap = wmap ? json_object_size(wmap) : s->n_files, n = 0;
    const char **names = malloc((cap + 1) * sizeof *names);
    if (!names) return kiln_fail(err, s->path, NULL, -1, "out of memory");
    if (wmap) {
        const char *key;
        json_t *v;
        json_object_foreach(wmap, key, v) {
            const char *p = cv_json_str(v);
            if (!p) {
                free(names);
                return kiln_fail(err, INDEX_NAME, "weight_map", -1, "entry '%s' is not a file name", key);
            }
            bool seen = false;
            for (size_t i = 0; i < n && !seen; i++) seen = !strcmp(names[i], p);
            if (!seen) names[n++] = p;
        }
    } else {
        for (uint32_t i = 0; i < s->n_files; i++)
            if (is_part_name(s->files[i].name)) names[n++] = s->files[i].name;
    }
    qsort(names, n, sizeof *names, cmp_str);
    *out = names;
    *n_out = n;
    return 0;
}

static int load_part(cv_source *s, const char *part, cv_stlist *l, kiln_err *err) {
    int fi = cv_source_find(s, part);
    if (fi < 0)
        return kiln_fail(err, INDEX_NAME, "weight_map", -1, "names shard '%s', which is missing from %s", part,
                         s->path);
    char *json = NULL;
    uint64_t len = 0;
    if (cv_source_st_header(s, (uint32_t)fi, &json, &len, err) < 0) return -1;
    uint64_t first = l->n;
    int rc = kiln_st_parse_header(json, len, s->files[fi].size, part, (uint32_t)fi, &l->t, &l->n, err);
    free(json);
    if (rc < 0) return -1;
    qsort(l->t + first, l->n - first, sizeof *l->t, cmp_tensor_name);
    return 0;
}

static int check_index(cv_source *s, json_t *wmap, cv_stlist *l, kiln_err *err) {
    const char *key;
    json_t *v;
    json_object_foreach(wmap, key, v) {
        int64_t i = cv_stlist_find(l, key);
        if (i < 0)
            return kiln_fail(err, INDEX_NAME, "weight_map", -1,
                             "tensor '%s' is listed in shard '%s' but no shard holds it", key, cv_json_str(v));
        const char *where = s->files[l->t[i].file].name;
        if (strcmp(where, cv_json_str(v)))
            return kiln_fail(err, INDEX_NAME, "weight_map", -1, "tensor '%s' is listed in shard '%s' but is in '%s'",
                             key, cv_json_str(v), where);
    }
    for (uint64_t i = 0; i < l->n; i++)
        if (!cv_json_get(wmap, l->t[i].name))
            return kiln_fail(err, s->files[l->t[i].file].name, l->t[i].name, -1,
                             "tensor is missing from " INDEX_NAME);
    return 0;
}

int cv_stlist_load(cv_source *s, cv_stlist *l, kiln_err *err) {
    memset(l, 0, sizeof *l);
    json_t *index = NULL, *wmap = NULL;
    char *text = NULL;
    size_t len = 0;
    int got = cv_source_read_all(s, INDEX_NAME, &text, &len, err);
    if (got < 0) return -1;
    if (got) {
        index = cv_json_parse(text, len, INDEX_NAME, err);
        free(text);
        if (!index) return -1;
        wmap = cv_json_get(index, "weight_map");
        if (!json_is_object(wmap)) {
            json_decref(index);
            return kiln_fail(err, INDEX_NAME, "weight_map", -1, "missing or not an object");
        }
    }
    const char **parts = NULL;
    size_t n_parts = 0;
    int rc = part_names(s, wmap, &parts, &n_parts, err);
    if (rc == 0 && n_parts == 0)
        rc = kiln_fail(err, s->path, NULL, -1, "no model*.safetensors files (only safetensors checkpoints are supported)");
    for (size_t i = 0; rc == 0 && i < n_parts; i++) rc = load_part(s, parts[i], l, err);
    if (rc == 0 && kiln_strmap_init(&l->index, l->n) < 0) rc = kiln_fail(err, s->path, NULL, -1, "out of memory");
    for (uint64_t i = 0; rc == 0 && i < l->n; i++) {
        int put = kiln_strmap_put(&l->index, l->t[i].name, strlen(l->t[i].name), i, NULL);
        if (put == 0)
            rc = kiln_fail(err, s->files[l->t[i].file].name, l->t[i].name, -1, "tensor name appears in two shards");
        else if (put < 0)
            rc = kiln_fail(err, s->path, NULL, -1, "out of memory");
    }
    if (rc == 0 && wmap) rc = check_index(s, wmap, l, err);
    free(parts);
    json_decref(index);
    if (rc) cv_stlist_free(l);
    return rc;
}

void cv_stlist_free(cv_stlist *l) {
    for (uint64_t i = 0; i < l->n; i++) free(l->t[i].name);
    free(l->t);
    kiln_strmap_free(&l->index);
    memset(l, 0, sizeof *l);
}

int64_t cv_stlist_find(const cv_stlist *l, const char *name) {
    uint64_t v;
    if (!l->index.cap || !kiln_strmap_get(&l->index, name, strlen(name), &v)) return -1;
    return (int64_t)v;
}
