/* golden/golden_file.c - loading golden files of either format, and the
 * prompt and text files the golden and perplexity tools read (see
 * golden_file.h). */
#include "golden_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logits_file.h"

void kiln_golden_free(kiln_golden *g) {
    if (!g) return;
    kiln_logit_set_free(&g->set);
    json_decref(g->meta);
    memset(g, 0, sizeof *g);
}

const json_t *kiln_golden_model(const kiln_golden *g) {
    return g->meta ? json_object_get(g->meta, "model") : NULL;
}

/* A KILNLOGT golden file: every record must hold whole prompts. */
static int load_kiln(const char *path, kiln_golden *g, kiln_err *err) {
    kiln_lgf_header h;
    kiln_lgf_reader *r = kiln_lgf_open(path, &h, err);
    if (!r) return -1;
    int rc = 0;
    if (strcmp(kiln_lgf_kind(&h), KILN_GOLDEN_KIND))
        rc = kiln_fail(err, path, "kind", -1, "is \"%s\", not a golden file", kiln_lgf_kind(&h));
    g->set.n_vocab = h.n_vocab;
    kiln_lgf_record rec;
    int got;
    while (!rc && (got = kiln_lgf_next(r, &rec, err)) != 0) {
        if (got < 0) {
            rc = -1;
            break;
        }
        if (rec.row0 != 0 || rec.n_rows != rec.n_ids || rec.n_ids == 0) {
            rc = kiln_fail(err, path, "record", -1, "prompt %u does not hold a row for each of its tokens",
                           g->set.n_seqs);
            break;
        }
        int32_t *ids = malloc((size_t)rec.n_ids * sizeof *ids);
        float *rows = malloc((size_t)rec.n_rows * h.n_vocab * sizeof *rows);
        if (!ids || !rows || kiln_logit_set_add(&g->set, rec.n_ids, ids, rows, err)) {
            free(ids);
            free(rows);
            rc = kiln_fail(err, path, NULL, -1, "out of memory");
            break;
        }
        memcpy(ids, rec.ids, (size_t)rec.n_ids * sizeof *ids);
        memcpy(rows, rec.rows, (size_t)rec.n_rows * h.n_vocab * sizeof *rows);
    }
    kiln_lgf_close(r);
    if (!rc) {
        g->meta = h.meta;
        h.meta = NULL;
    }
    kiln_lgf_header_free(&h);
    return rc;
}

int kiln_golden_load(const char *path, kiln_golden *g, kiln_err *err) {
    memset(g, 0, sizeof *g);
    FILE *f = fopen(path, "rb");
    if (!f) return kiln_fail(err, path, NULL, -1, "cannot open: %s", strerror(errno));
    char magic[8] = {0};
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    int rc;
    if (got >= 4 && !memcmp(magic, KILN_KLGT_MAGIC, 4)) {
        g->format = "klgt";
        rc = kiln_klgt_read(path, &g->set, err);
    } else if (got == 8 && !memcmp(magic, KILN_LGF_MAGIC, 8)) {
        g->format = "kiln";
        rc = load_kiln(path, g, err);
    } else {
        rc = kiln_fail(err, path, "magic", 0, "neither a kiln golden file nor a KLGT logits file");
    }
    if (!rc && g->set.n_seqs == 0) rc = kiln_fail(err, path, NULL, -1, "holds no prompts");
    if (rc) kiln_golden_free(g);
    return rc;
}

void kiln_golden_free_prompts(char **lines, size_t n) {
    for (size_t i = 0; i < n; i++) free(lines[i]);
    free(lines);
}

int kiln_golden_read_prompts(const char *path, size_t max, char ***lines, size_t *n, kiln_err *err) {
    *lines = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return kiln_fail(err, path, NULL, -1, "cannot open: %s", strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    while ((max == 0 || *n < max) && (len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        char **p = realloc(*lines, (*n + 1) * sizeof *p);
        char *copy = strdup(line);
        if (p) *lines = p;
        if (!p || !copy) {
            free(copy);
            rc = kiln_fail(err, path, NULL, -1, "out of memory");
            break;
        }
        (*lines)[(*n)++] = copy;
    }
    if (!rc && ferror(f)) rc = kiln_fail(err, path, NULL, -1, "read error: %s", strerror(errno));
    if (!rc && *n == 0) rc = kiln_fail(err, path, NULL, -1, "holds no prompt (one per non-empty line)");
    free(line);
    fclose(f);
    if (rc) {
        kiln_golden_free_prompts(*lines, *n);
        *lines = NULL;
        *n = 0;
    }
    return rc;
}
