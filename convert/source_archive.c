/* convert/source_archive.c - models read straight out of an archive with
 * libarchive (tar, tar.gz, tar.zst, zip, ...), never unpacked to disk.
 *
 * Opening makes one pass over the archive: it lists the entries, keeps the
 * contents of small files (at most 64 MiB each) and the header of every
 * .safetensors entry, and picks the model root (the shallowest folder with
 * a config.json). Tensor bytes are then read by streaming forward through
 * the entries. Ranges the caller declared with cv_archive_want_later() are
 * copied to an unlinked spool file as the stream passes them; a read that
 * needs bytes the stream has passed and did not keep reopens the archive.
 * See source.h. */
#include "source.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SMALL_LIMIT (64ull << 20)
#define SCRATCH (1u << 20)

typedef struct spool_range {
    uint32_t file;
    uint64_t off, n, spool_off;
    bool saved, released;
} spool_range;

typedef struct arc_state {
    struct archive *a;
    int64_t cur_member; /* entry whose header was read last, -1 before any */
    uint64_t cur_pos;   /* data bytes of that entry consumed */
    spool_range *sp;
    size_t n_sp, cap_sp;
    FILE *spool;
    uint64_t spool_end;
    uint8_t *scratch;
} arc_state;

static int arc_fail(cv_source *s, struct archive *a, kiln_err *err) {
    return kiln_fail(err, s->path, NULL, -1, "archive: %s",
                     a && archive_error_string(a) ? archive_error_string(a) : "read error");
}

static int arc_reopen(cv_source *s, kiln_err *err) {
    arc_state *st = s->priv;
    if (st->a) archive_read_free(st->a);
    st->a = archive_read_new();
    st->cur_member = -1;
    st->cur_pos = 0;
    if (!st->a) return kiln_fail(err, s->path, NULL, -1, "out of memory");
    archive_read_support_filter_all(st->a);
    archive_read_support_format_all(st->a);
    if (archive_read_open_filename(st->a, s->path, 1 << 20) != ARCHIVE_OK) return arc_fail(s, st->a, err);
    return 0;
}

/* Reads exactly n bytes of the current entry (fewer only at its end). */
static int64_t read_data(struct archive *a, void *dst, uint64_t n) {
    uint64_t got = 0;
    while (got < n) {
        la_ssize_t r = archive_read_data(a, (uint8_t *)dst + got, n - got);
        if (r < 0) return -1;
        if (r == 0) break;
        got += (uint64_t)r;
    }
    return (int64_t)got;
}

/* Strips "./" prefixes so that paths compare as written. */
static const char *clean_path(const char *p) {
    while (p[0] == '.' && p[1] == '/') p += 2;
    while (*p == '/') p++;
    return p;
}

typedef struct scan_entry {
    char *path;
    uint64_t size;
    int64_t member;
    char *data;
    uint64_t data_len;
} scan_entry;

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* Keeps what the model root's files need: small files whole, the prefix
 * and header of safetensors files. */
static int scan_data(struct archive *a, scan_entry *e) {
    if (ends_with(e->path, ".safetensors")) {
        uint8_t pre[8];
        if (e->size < 8 || read_data(a, pre, 8) != 8) return 0;
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = (n << 8) | pre[i];
        if (n > e->size - 8 || n > (100u << 20)) return 0; /* reported when parsed */
        if (!(e->data = malloc(8 + n))) return -1;
        memcpy(e->data, pre, 8);
        if (read_data(a, e->data + 8, n) != (int64_t)n) return -1;
        e->data_len = 8 + n;
        return 0;
    }
    if (e->size > SMALL_LIMIT) return 0;
    if (!(e->data = malloc(e->size + 1))) return -1;
    if (read_data(a, e->data, e->size) != (int64_t)e->size) return -1;
    e->data_len = e->size;
    return 0;
}

int cv_archive_open(cv_source *s, kiln_err *err) {
    arc_state *st = calloc(1, sizeof *st);
    if (!st || !(st->scratch = malloc(SCRATCH))) {
        free(st);
        return kiln_fail(err, s->path, NULL, -1, "out of memory");
    }
    s->priv = st;
    if (arc_reopen(s, err) < 0)
        return kiln_fail(err, s->path, NULL, -1, "not a model directory, Hugging Face cache folder or readable archive (%s)",
                         st->a && archive_error_string(st->a) ? archive_error_string(st->a) : "unknown format");
    scan_entry *ents = NULL;
    size_t n = 0;
    int rc = 0;
    struct archive_entry *ae;
    int r;
    int64_t member = 0;
    for (; (r = archive_read_next_header(st->a, &ae)) == ARCHIVE_OK; member++) {
        if (archive_entry_filetype(ae) != AE_IFREG) continue;
        scan_entry *ne = realloc(ents, (n + 1) * sizeof *ents);
        if (!ne) {
            rc = kiln_fail(err, s->path, NULL, -1, "out of memory");
            break;
        }
        ents = ne;
        scan_entry *e = &ents[n++];
        memset(e, 0, sizeof *e);
        e->path = strdup(clean_path(archive_entry_pathname(ae)));
        e->size = archive_entry_size_is_set(ae) ? (uint64_t)archive_entry_size(ae) : 0;
        e->member = member;
        if (!e->path || scan_data(st->a, e) < 0) {
            rc = e->path ? arc_fail(s, st->a, err) : kiln_fail(err, s->path, NULL, -1, "out of memory");
            break;
        }
    }
    if (rc == 0 && r != ARCHIVE_EOF && member == 0)
        rc = kiln_fail(err, s->path, NULL, -1, "not a model directory, Hugging Face cache folder or readable archive (%s)",
                       archive_error_string(st->a) ? archive_error_string(st->a) : "unknown format");
    else if (rc == 0 && r != ARCHIVE_EOF)
        rc = arc_fail(s, st->a, err);
    /* the scan left the archive at its end: data reads start afresh */
    archive_read_free(st->a);
    st->a = NULL;
    /* the model root: the shallowest folder holding config.json */
    const char *root = NULL;
    size_t root_len = 0;
    int best_depth = 1 << 30;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const char *p = ents[i].path;
        if (strcmp(p, "config.json") && !ends_with(p, "/config.json")) continue;
        int depth = 0;
        for (const char *q = p; *q; q++) depth += *q == '/';
        if (depth < best_depth) best_depth = depth, root = p, root_len = strlen(p) - strlen("config.json");
    }
    for (size_t i = 0; rc == 0 && root && i < n; i++) {
        const char *p = ents[i].path;
        if (strncmp(p, root, root_len) || strchr(p + root_len, '/')) continue;
        if ((rc = cv_source_add_file(s, p + root_len, ents[i].size, err)) < 0) break;
        cv_file *f = &s->files[s->n_files - 1];
        f->member = ents[i].member;
        f->data = ents[i].data;
        f->data_len = ents[i].data_len;
        ents[i].data = NULL;
    }
    /* the name: the root folder, else the archive's file name */
    if (rc == 0 && root && root_len > 1) {
        size_t b = root_len - 1;
        while (b > 0 && root[b - 1] != '/') b--;
        s->name = strndup(root + b, root_len - 1 - b);
    } else if (rc == 0) {
        const char *b = strrchr(s->path, '/');
        b = b ? b + 1 : s->path;
        char *nm = strdup(b);
        static const char *const ext[] = {".tar.gz", ".tar.zst", ".tar.xz", ".tar.bz2", ".tgz", ".tzst",
                                          ".tar", ".zip", NULL};
        for (int i = 0; nm && ext[i]; i++)
            if (ends_with(nm, ext[i])) {
                nm[strlen(nm) - strlen(ext[i])] = 0;
                break;
            }
        s->name = nm;
    }
    for (size_t i = 0; i < n; i++) {
        free(ents[i].path);
        free(ents[i].data);
    }
    free(ents);
    return rc;
}

void cv_archive_close(cv_source *s) {
    arc_state *st = s->priv;
    if (!st) return;
    if (st->a) archive_read_free(st->a);
    if (st->spool) fclose(st->spool);
    free(st->sp);
    free(st->scratch);
    free(st);
    s->priv = NULL;
}

int cv_archive_want_later(cv_source *s, uint32_t file, uint64_t off, uint64_t n) {
    arc_state *st = s->priv;
    if (st->n_sp == st->cap_sp) {
        size_t cap = st->cap_sp ? st->cap_sp * 2 : 64;
        spool_range *sp = realloc(st->sp, cap * sizeof *sp);
        if (!sp) return -1;
        st->sp = sp;
        st->cap_sp = cap;
    }
    st->sp[st->n_sp++] = (spool_range){.file = file, .off = off, .n = n};
    return 0;
}

void cv_archive_done(cv_source *s, uint32_t file, uint64_t off, uint64_t n) {
    arc_state *st = s->priv;
    for (size_t i = 0; i < st->n_sp; i++) {
        spool_range *r = &st->sp[i];
        if (r->file != file || r->released || off > r->off || off + n < r->off + r->n) continue;
        r->released = true;
        if (r->saved && st->spool)
            (void)fallocate(fileno(st->spool), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)r->spool_off,
                            (off_t)r->n);
    }
}

/* Copies the part of [pos, pos+len) of `file` that a pending spool range
 * wants into the spool file. */
static int save_spools(cv_source *s, uint32_t file, uint64_t pos, const uint8_t *data, uint64_t len,
                       kiln_err *err) {
    arc_state *st = s->priv;
    for (size_t i = 0; i < st->n_sp; i++) {
        spool_range *r = &st->sp[i];
        if (r->file != file || r->saved || r->released) continue;
        uint64_t lo = pos > r->off ? pos : r->off, hi = pos + len < r->off + r->n ? pos + len : r->off + r->n;
        if (lo >= hi) continue;
        if (!st->spool) {
            st->spool = tmpfile();
            if (!st->spool) return kiln_fail(err, s->path, "spool", -1, "cannot create a temporary file: %s",
                                             strerror(errno));
        }
        if (lo == r->off) r->spool_off = st->spool_end, st->spool_end += r->n;
        if (pwrite(fileno(st->spool), data + (lo - pos), hi - lo, (off_t)(r->spool_off + (lo - r->off))) !=
            (ssize_t)(hi - lo))
            return kiln_fail(err, s->path, "spool", -1, "cannot write the spool file: %s", strerror(errno));
        if (hi == r->off + r->n) r->saved = true;
    }
    return 0;
}

/* Streams the current entry (file `file`) from cur_pos up to `upto`,
 * copying what lies at or after `dst_off` into dst. */
static int stream_to(cv_source *s, uint32_t file, uint64_t upto, uint8_t *dst, uint64_t dst_off, kiln_err *err) {
    arc_state *st = s->priv;
    while (st->cur_pos < upto) {
        uint64_t want = upto - st->cur_pos;
        uint8_t *buf;
        if (dst && st->cur_pos >= dst_off) {
            buf = dst + (st->cur_pos - dst_off);
        } else {
            buf = st->scratch;
            if (dst && dst_off - st->cur_pos < want) want = dst_off - st->cur_pos;
            if (want > SCRATCH) want = SCRATCH;
        }
        la_ssize_t r = archive_read_data(st->a, buf, want);
        if (r < 0) return arc_fail(s, st->a, err);
        if (r == 0)
            return kiln_fail(err, s->files[file].name, NULL, (int64_t)st->cur_pos, "archive entry ends early");
        if (save_spools(s, file, st->cur_pos, buf, (uint64_t)r, err) < 0) return -1;
        st->cur_pos += (uint64_t)r;
    }
    return 0;
}

static int64_t file_of_member(const cv_source *s, int64_t member) {
    for (uint32_t i = 0; i < s->n_files; i++)
        if (s->files[i].member == member) return i;
    return -1;
}

static bool has_pending(const arc_state *st, int64_t file, uint64_t from) {
    for (size_t i = 0; i < st->n_sp; i++)
        if ((int64_t)st->sp[i].file == file && !st->sp[i].saved && !st->sp[i].released &&
            st->sp[i].off + st->sp[i].n > from)
            return true;
    return false;
}

int cv_archive_pread(cv_source *s, uint32_t file, void *dst, uint64_t n, uint64_t off, kiln_err *err) {
    arc_state *st = s->priv;
    for (size_t i = 0; i < st->n_sp; i++) {
        spool_range *r = &st->sp[i];
        if (r->file == file && r->saved && !r->released && off >= r->off && off + n <= r->off + r->n) {
            if (pread(fileno(st->spool), dst, n, (off_t)(r->spool_off + off - r->off)) != (ssize_t)n)
                return kiln_fail(err, s->path, "spool", -1, "cannot read the spool file: %s", strerror(errno));
            return 0;
        }
    }
    int64_t m = s->files[file].member;
    if (!st->a || st->cur_member > m || (st->cur_member == m && st->cur_pos > off))
        if (arc_reopen(s, err) < 0) return -1;
    while (st->cur_member < m) {
        int64_t cf = st->cur_member >= 0 ? file_of_member(s, st->cur_member) : -1;
        if (cf >= 0 && has_pending(st, cf, st->cur_pos) &&
            stream_to(s, (uint32_t)cf, s->files[cf].size, NULL, 0, err) < 0)
            return -1;
        struct archive_entry *ae;
        int r = archive_read_next_header(st->a, &ae);
        if (r == ARCHIVE_EOF)
            return kiln_fail(err, s->path, s->files[file].name, -1, "archive ended before this entry");
        if (r != ARCHIVE_OK) return arc_fail(s, st->a, err);
        st->cur_member++;
        st->cur_pos = 0;
    }
    if (stream_to(s, file, off, NULL, 0, err) < 0) return -1;
    return stream_to(s, file, off + n, dst, off, err);
}
