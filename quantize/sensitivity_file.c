/* quantize/sensitivity_file.c - reading and writing "kiln-sensitivity/1"
 * files (format in sensitivity_file.h). The reader is strict: every line
 * is checked and the first fault is reported with its line number and
 * field, since a silently skipped row would make the allocator believe a
 * tensor has fewer choices than it has. */
#include "sensitivity_file.h"

#include "../core/escape.h"
#include "../core/fileio.h"
#include "../golden/fingerprint.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "# kiln-sensitivity/1"
#define COLUMNS "tensor\ttype\tbytes\tdkld"
#define MAX_FIELDS 8

void kiln_sensitivity_free(kiln_sensitivity *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n_rows; i++) free(s->rows[i].tensor);
    free(s->rows);
    memset(s, 0, sizeof *s);
}

/* ---- writing ------------------------------------------------------------ */

static bool has_separator(const char *v) {
    return strpbrk(v, "\t\r\n") != NULL;
}

int kiln_sensitivity_write(const char *path, const kiln_sensitivity *s, kiln_err *err) {
    const char *fields[] = {s->arch, s->layout_xxh64, s->text, s->imatrix};
    const char *names[] = {"arch", "layout_xxh64", "text", "imatrix"};
    for (size_t i = 0; i < 4; i++)
        if (has_separator(fields[i]) || !fields[i][0])
            return kiln_fail(err, path, names[i], -1, "empty or holds a tab or newline: '%s'",
                             kiln_esc(fields[i]).s);
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m) return kiln_fail(err, path, NULL, -1, "out of memory");
    fprintf(m, MAGIC "\n");
    fprintf(m, "# arch\t%s\tlayout_xxh64\t%s\tn_tensors\t%lld\n", s->arch, s->layout_xxh64,
            (long long)s->n_tensors);
    fprintf(m, "# text\t%s\tn_tokens\t%lld\timatrix\t%s\n", s->text, (long long)s->n_tokens,
            s->imatrix);
    fprintf(m, COLUMNS "\n");
    for (size_t i = 0; i < s->n_rows; i++) {
        const kiln_sens_row *r = &s->rows[i];
        const char *tn = kiln_type_name((uint32_t)r->type);
        if (!r->tensor || !r->tensor[0] || has_separator(r->tensor) || !tn || !isfinite(r->dkld)) {
            fclose(m);
            free(text);
            return kiln_fail(err, path, r->tensor ? kiln_esc(r->tensor).s : "row", -1,
                             "cannot be written: empty or tabbed name, unknown type or non-finite dkld");
        }
        fprintf(m, "%s\t%s\t%llu\t%.9e\n", r->tensor, tn, (unsigned long long)r->bytes, r->dkld);
    }
    if (fclose(m) != 0) {
        free(text);
        return kiln_fail(err, path, NULL, -1, "out of memory");
    }
    int rc = kiln_write_file_atomic(path, text, len, err);
    free(text);
    return rc;
}

/* ---- reading ------------------------------------------------------------ */

/* Splits `line` in place at tabs; returns the field count (at most max;
 * more fields than that count as max + 1, so callers can refuse them). */
static int split_tabs(char *line, char **f, int max) {
    int n = 0;
    for (char *p = line;;) {
        if (n == max) return max + 1;
        f[n++] = p;
        char *t = strchr(p, '\t');
        if (!t) return n;
        *t = '\0';
        p = t + 1;
    }
}

/* "FILE: FIELD at line N: ..." (the line takes the offset's place). */
static int line_fail(kiln_err *err, const char *path, const char *field, size_t line,
                     const char *what, const char *value) {
    char where[128];
    snprintf(where, sizeof where, "%s at line %zu", field, line);
    if (value) return kiln_fail(err, path, where, -1, "%s: '%s'", what, kiln_esc(value).s);
    return kiln_fail(err, path, where, -1, "%s", what);
}

static int parse_i64(const char *v, int64_t *out) {
    if (!*v || *v == '+' || *v == ' ') return -1;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end) return -1;
    *out = x;
    return 0;
}

static int parse_u64(const char *v, uint64_t *out) {
    if (!*v || *v < '0' || *v > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || *end) return -1;
    *out = x;
    return 0;
}

static int copy_field(char *dst, size_t cap, const char *v, const char *path, const char *field,
                      size_t line, kiln_err *err) {
    if (!*v) return line_fail(err, path, field, line, "empty", NULL);
    if (strlen(v) >= cap) return line_fail(err, path, field, line, "too long", v);
    strcpy(dst, v);
    return 0;
}

/* Line 2: "# arch A layout_xxh64 H n_tensors N". */
static int parse_model_line(char *line, kiln_sensitivity *s, const char *path, kiln_err *err) {
    char *f[MAX_FIELDS];
    int n = split_tabs(line, f, MAX_FIELDS);
    if (n != 6 || strcmp(f[0], "# arch") || strcmp(f[2], "layout_xxh64") || strcmp(f[4], "n_tensors"))
        return line_fail(err, path, "header", 2,
                         "expected '# arch\\tA\\tlayout_xxh64\\tH\\tn_tensors\\tN'", NULL);
    if (copy_field(s->arch, sizeof s->arch, f[1], path, "arch", 2, err)) return -1;
    if (strlen(f[3]) != 16 || strspn(f[3], "0123456789abcdef") != 16)
        return line_fail(err, path, "layout_xxh64", 2, "not 16 lower-case hex digits", f[3]);
    memcpy(s->layout_xxh64, f[3], 17);
    if (parse_i64(f[5], &s->n_tensors) || s->n_tensors <= 0)
        return line_fail(err, path, "n_tensors", 2, "not a positive integer", f[5]);
    return 0;
}

/* Line 3: "# text T n_tokens N imatrix I". */
static int parse_calib_line(char *line, kiln_sensitivity *s, const char *path, kiln_err *err) {
    char *f[MAX_FIELDS];
    int n = split_tabs(line, f, MAX_FIELDS);
    if (n != 6 || strcmp(f[0], "# text") || strcmp(f[2], "n_tokens") || strcmp(f[4], "imatrix"))
        return line_fail(err, path, "header", 3,
                         "expected '# text\\tT\\tn_tokens\\tN\\timatrix\\tI'", NULL);
    if (copy_field(s->text, sizeof s->text, f[1], path, "text", 3, err)) return -1;
    if (parse_i64(f[3], &s->n_tokens) || s->n_tokens <= 0)
        return line_fail(err, path, "n_tokens", 3, "not a positive integer", f[3]);
    return copy_field(s->imatrix, sizeof s->imatrix, f[5], path, "imatrix", 3, err);
}

static int parse_row(char *line, size_t lineno, kiln_sens_row *r, const char *path, kiln_err *err) {
    char *f[MAX_FIELDS];
    int n = split_tabs(line, f, MAX_FIELDS);
    if (n != 4) {
        char what[64];
        snprintf(what, sizeof what, "%d fields, expected 4 (tensor, type, bytes, dkld)",
                 n > MAX_FIELDS ? MAX_FIELDS + 1 : n);
        return line_fail(err, path, "row", lineno, what, NULL);
    }
    if (!*f[0]) return line_fail(err, path, "tensor", lineno, "empty", NULL);
    int t = kiln_type_from_name(f[1]);
    if (t < 0) return line_fail(err, path, "type", lineno, "unknown ggml type", f[1]);
    uint64_t bytes;
    if (parse_u64(f[2], &bytes) || bytes == 0)
        return line_fail(err, path, "bytes", lineno, "not a positive integer", f[2]);
    char *end;
    errno = 0;
    double d = strtod(f[3], &end);
    if (!*f[3] || *end || errno == ERANGE || !isfinite(d))
        return line_fail(err, path, "dkld", lineno, "not a finite number", f[3]);
    r->tensor = strdup(f[0]);
    if (!r->tensor) return kiln_fail(err, path, NULL, -1, "out of memory");
    r->type = (kiln_type)t;
    r->bytes = bytes;
    r->dkld = d;
    return 0;
}

/* For the duplicate check: row indices ordered by (tensor, type, index);
 * ctx is the rows. */
static int cmp_row_index(const void *a, const void *b, void *ctx) {
    const kiln_sens_row *rows = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    int c = strcmp(rows[i].tensor, rows[j].tensor);
    if (c) return c;
    if (rows[i].type != rows[j].type) return rows[i].type < rows[j].type ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* Fails on the first (tensor, type) that repeats, naming both lines.
 * row_line[i] is the file line of row i. */
static int check_unique(const kiln_sensitivity *s, const size_t *row_line, const char *path,
                        kiln_err *err) {
    if (s->n_rows < 2) return 0;
    size_t *idx = malloc(s->n_rows * sizeof *idx);
    if (!idx) return kiln_fail(err, path, NULL, -1, "out of memory");
    for (size_t i = 0; i < s->n_rows; i++) idx[i] = i;
    qsort_r(idx, s->n_rows, sizeof *idx, cmp_row_index, s->rows);
    size_t dup = SIZE_MAX, first = 0;
    for (size_t k = 1; k < s->n_rows; k++) {
        const kiln_sens_row *a = &s->rows[idx[k - 1]], *b = &s->rows[idx[k]];
        if (a->type == b->type && !strcmp(a->tensor, b->tensor) && (dup == SIZE_MAX || idx[k] < dup)) {
            dup = idx[k];
            first = idx[k - 1];
        }
    }
    free(idx);
    if (dup == SIZE_MAX) return 0;
    char what[1024];
    snprintf(what, sizeof what, "%s %s already given at line %zu", kiln_esc(s->rows[dup].tensor).s,
             kiln_type_name((uint32_t)s->rows[dup].type), row_line[first]);
    return line_fail(err, path, "row", row_line[dup], what, NULL);
}

int kiln_sensitivity_read(const char *path, kiln_sensitivity *s, kiln_err *err) {
    memset(s, 0, sizeof *s);
    size_t len;
    char *text = kiln_read_text(path, &len, err);
    if (!text) return -1;
    if (memchr(text, '\0', len)) {
        free(text);
        return kiln_fail(err, path, NULL, -1, "not a text file (holds a NUL byte)");
    }
    size_t *row_line = NULL, cap = 0;
    int rc = -1;
    size_t lineno = 0;
    char *p = text;
    while (*p) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        char *line = p;
        p = nl ? nl + 1 : p + strlen(p);
        lineno++;
        size_t ll = strlen(line);
        if (ll && line[ll - 1] == '\r') line[--ll] = '\0';
        if (lineno == 1) {
            if (strcmp(line, MAGIC)) {
                line_fail(err, path, "magic", 1, "not a kiln-sensitivity/1 file: first line", line);
                goto out;
            }
        } else if (lineno == 2) {
            if (parse_model_line(line, s, path, err)) goto out;
        } else if (lineno == 3) {
            if (parse_calib_line(line, s, path, err)) goto out;
        } else if (lineno == 4) {
            if (strcmp(line, COLUMNS)) {
                line_fail(err, path, "columns", 4, "expected 'tensor\\ttype\\tbytes\\tdkld'", NULL);
                goto out;
            }
        } else {
            if (!*line && !*p) break; /* the final newline */
            if (s->n_rows == cap) {
                size_t nc = cap ? cap * 2 : 256;
                kiln_sens_row *nr = realloc(s->rows, nc * sizeof *nr);
                size_t *nl2 = realloc(row_line, nc * sizeof *nl2);
                if (nr) s->rows = nr;
                if (nl2) row_line = nl2;
                if (!nr || !nl2) {
                    kiln_fail(err, path, NULL, -1, "out of memory");
                    goto out;
                }
                cap = nc;
            }
            if (parse_row(line, lineno, &s->rows[s->n_rows], path, err)) goto out;
            row_line[s->n_rows++] = lineno;
        }
    }
    if (lineno < 4) {
        static const char *missing[] = {"magic", "header", "header", "columns"};
        line_fail(err, path, missing[lineno], lineno + 1, "missing: the file ends early", NULL);
        goto out;
    }
    if (s->n_rows == 0) {
        line_fail(err, path, "row", 5, "no rows", NULL);
        goto out;
    }
    rc = check_unique(s, row_line, path, err);
out:
    free(row_line);
    free(text);
    return rc;
}

/* ---- matching a model ----------------------------------------------------- */

int kiln_sensitivity_matches(const kiln_sensitivity *s, const char *path, const kiln_gguf *g,
                             kiln_err *err) {
    json_t *fp = kiln_fingerprint(g, err);
    if (!fp) return -1;
    const char *arch = json_string_value(json_object_get(fp, "arch"));
    const char *layout = json_string_value(json_object_get(fp, "layout_xxh64"));
    int rc = 0;
    if (!arch || !layout || strcmp(arch, s->arch) || strcmp(layout, s->layout_xxh64) ||
        (int64_t)g->n_tensors != s->n_tensors) {
        const char *base = strrchr(g->path, '/');
        rc = kiln_fail(err, path, NULL, -1,
                       "sensitivity file is for another model (it has arch %s, layout %s, %lld "
                       "tensors; %s has %s, %s, %llu)",
                       kiln_esc(s->arch).s, s->layout_xxh64, (long long)s->n_tensors,
                       kiln_esc(base ? base + 1 : g->path).s, kiln_esc(arch ? arch : "?").s,
                       layout ? layout : "?", (unsigned long long)g->n_tensors);
    }
    json_decref(fp);
    return rc;
}
