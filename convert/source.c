/* convert/source.c - model sources: plain directories and Hugging Face
 * cache folders, and the dispatch to archives (source_archive.c). See
 * source.h for the contract and for the order of the source files. */
#include "source.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_SMALL_FILE (1ull << 30)

typedef struct dir_state {
    int *fds;        /* one per file, opened on first read; -1 until then */
    uint8_t **maps;  /* one per file, mapped on first cv_source_map() */
} dir_state;

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static char *path_join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 2);
    if (!p) return NULL;
    memcpy(p, a, la);
    p[la] = '/';
    memcpy(p + la + 1, b, lb + 1);
    return p;
}

/* Last path component of `p` (after resolving "." and trailing slashes). */
static char *base_name(const char *p) {
    char real[PATH_MAX];
    const char *src = realpath(p, real) ? real : p;
    size_t n = strlen(src);
    while (n > 1 && src[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && src[b - 1] != '/') b--;
    char *out = malloc(n - b + 1);
    if (!out) return NULL;
    memcpy(out, src + b, n - b);
    out[n - b] = 0;
    return out;
}

/* "models--ORG--NAME" -> "NAME"; NULL when `dir` is not named like that. */
static char *cache_model_name(const char *dir) {
    char *b = base_name(dir);
    if (!b) return NULL;
    char *out = NULL;
    if (!strncmp(b, "models--", 8)) {
        const char *last = strstr(b + 8, "--");
        const char *name = b + 8;
        while (last) {
            name = last + 2;
            last = strstr(name, "--");
        }
        out = strdup(name);
    }
    free(b);
    return out;
}

/* In a cache folder, the snapshot refs/main names, else the newest one. */
static char *pick_snapshot(const char *cache, kiln_err *err) {
    char *snaps = path_join(cache, "snapshots");
    char *ref = path_join(cache, "refs/main");
    char *pick = NULL;
    if (!snaps || !ref) goto oom;
    FILE *f = fopen(ref, "r");
    if (f) {
        char hash[256] = {0};
        if (fgets(hash, sizeof hash, f)) {
            hash[strcspn(hash, "\r\n")] = 0;
            char *cand = path_join(snaps, hash);
            if (cand && is_dir(cand)) pick = cand;
            else free(cand);
        }
        fclose(f);
    }
    if (!pick) {
        DIR *d = opendir(snaps);
        struct dirent *e;
        double newest = -1;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char *cand = path_join(snaps, e->d_name);
            struct stat st;
            if (cand && stat(cand, &st) == 0 && S_ISDIR(st.st_mode) &&
                (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9 > newest) {
                newest = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
                free(pick);
                pick = cand;
            } else {
                free(cand);
            }
        }
        if (d) closedir(d);
    }
    if (!pick) kiln_fail(err, cache, "snapshots", -1, "Hugging Face cache folder has no snapshot");
    free(snaps);
    free(ref);
    return pick;
oom:
    free(snaps);
    free(ref);
    kiln_fail(err, cache, NULL, -1, "out of memory");
    return NULL;
}

static int cmp_files(const void *a, const void *b) {
    return strcmp(((const cv_file *)a)->name, ((const cv_file *)b)->name);
}

/* Lists the regular files (following symlinks, as cache snapshots are
 * links into blobs/) of `dir`. */
static int open_dir(cv_source *s, const char *dir, kiln_err *err) {
    DIR *d = opendir(dir);
    if (!d) return kiln_fail(err, dir, NULL, -1, "cannot open directory: %s", strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *p = path_join(dir, e->d_name);
        struct stat st;
        if (!p) {
            rc = kiln_fail(err, dir, NULL, -1, "out of memory");
        } else if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            rc = cv_source_add_file(s, e->d_name, (uint64_t)st.st_size, err);
            if (rc == 0) s->files[s->n_files - 1].path = p, p = NULL;
        }
        free(p);
    }
    closedir(d);
    if (rc) return rc;
    qsort(s->files, s->n_files, sizeof *s->files, cmp_files);
    dir_state *ds = calloc(1, sizeof *ds);
    if (!ds || !(ds->fds = malloc((s->n_files + 1) * sizeof *ds->fds)) ||
        !(ds->maps = calloc(s->n_files + 1, sizeof *ds->maps))) {
        if (ds) free(ds->fds);
        free(ds);
        return kiln_fail(err, dir, NULL, -1, "out of memory");
    }
    for (uint32_t i = 0; i < s->n_files; i++) ds->fds[i] = -1;
    s->priv = ds;
    return 0;
}

cv_source *cv_source_open(const char *path, kiln_err *err) {
    cv_source *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        kiln_fail(err, path, NULL, -1, "out of memory");
        return NULL;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        kiln_fail(err, path, NULL, -1, "cannot open: %s", strerror(errno));
        cv_source_close(s);
        return NULL;
    }
    int rc;
    if (S_ISDIR(st.st_mode)) {
        char *snaps = path_join(path, "snapshots");
        char *dir = NULL;
        if (snaps && is_dir(snaps)) {
            dir = pick_snapshot(path, err);
            s->name = cache_model_name(path);
        } else {
            dir = strdup(path);
            /* a snapshot given directly: name it after its cache folder */
            char *up1 = path_join(path, ".."), *up2 = path_join(path, "../..");
            char *pb = up1 ? base_name(up1) : NULL;
            if (up2 && pb && !strcmp(pb, "snapshots")) s->name = cache_model_name(up2);
            free(up1);
            free(up2);
            free(pb);
        }
        free(snaps);
        if (!dir) {
            cv_source_close(s);
            return NULL;
        }
        if (!s->name) s->name = base_name(dir);
        rc = open_dir(s, dir, err);
        free(dir);
    } else {
        s->is_archive = true;
        rc = cv_archive_open(s, err);
    }
    if (rc == 0 && !s->name) rc = kiln_fail(err, path, NULL, -1, "out of memory");
    if (rc == 0 && cv_source_find(s, "config.json") < 0)
        rc = kiln_fail(err, path, "config.json", -1, "not a Hugging Face model: no config.json%s",
                       s->is_archive ? " in the archive" : "");
    if (rc) {
        cv_source_close(s);
        return NULL;
    }
    return s;
}

void cv_source_close(cv_source *s) {
    if (!s) return;
    if (s->is_archive) {
        cv_archive_close(s);
    } else if (s->priv) {
        dir_state *ds = s->priv;
        for (uint32_t i = 0; i < s->n_files; i++) {
            if (ds->fds[i] >= 0) close(ds->fds[i]);
            if (ds->maps[i]) munmap(ds->maps[i], s->files[i].size);
        }
        free(ds->fds);
        free(ds->maps);
        free(ds);
    }
    for (uint32_t i = 0; i < s->n_files; i++) {
        free(s->files[i].name);
        free(s->files[i].path);
        free(s->files[i].data);
    }
    free(s->files);
    free(s->path);
    free(s->name);
    free(s);
}

static int dir_fd(cv_source *s, uint32_t file, kiln_err *err) {
    dir_state *ds = s->priv;
    if (ds->fds[file] < 0) {
        ds->fds[file] = open(s->files[file].path, O_RDONLY | O_CLOEXEC);
        if (ds->fds[file] < 0)
            return kiln_fail(err, s->files[file].path, NULL, -1, "cannot open: %s", strerror(errno));
    }
    return ds->fds[file];
}

int cv_source_pread(cv_source *s, uint32_t file, void *dst, uint64_t n, uint64_t off, kiln_err *err) {
    if (file >= s->n_files) return kiln_fail(err, s->path, NULL, -1, "no file #%u", file);
    if (off + n > s->files[file].size || off + n < off)
        return kiln_fail(err, s->files[file].name, NULL, (int64_t)off, "read of %llu bytes past the end of the file",
                         (unsigned long long)n);
    if (s->is_archive) return cv_archive_pread(s, file, dst, n, off, err);
    int fd = dir_fd(s, file, err);
    if (fd < 0) return -1;
    uint8_t *p = dst;
    while (n > 0) {
        ssize_t r = pread(fd, p, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return kiln_fail(err, s->files[file].path, NULL, (int64_t)off, "read failed: %s",
                             r < 0 ? strerror(errno) : "unexpected end of file");
        p += r;
        off += (uint64_t)r;
        n -= (uint64_t)r;
    }
    return 0;
}

int cv_source_read_all(cv_source *s, const char *name, char **buf, size_t *len, kiln_err *err) {
    int i = cv_source_find(s, name);
    if (i < 0) return 0;
    cv_file *f = &s->files[i];
    if (f->size > MAX_SMALL_FILE) return kiln_fail(err, name, NULL, -1, "file is too large (%llu bytes)",
                                                   (unsigned long long)f->size);
    char *b = malloc(f->size + 1);
    if (!b) return kiln_fail(err, name, NULL, -1, "out of memory");
    if (s->is_archive && f->data && f->data_len == f->size) {
        memcpy(b, f->data, f->size);
    } else if (cv_source_pread(s, (uint32_t)i, b, f->size, 0, err) < 0) {
        free(b);
        return -1;
    }
    b[f->size] = 0;
    *buf = b;
    if (len) *len = f->size;
    return 1;
}

int cv_source_st_header(cv_source *s, uint32_t file, char **json, uint64_t *len, kiln_err *err) {
    cv_file *f = &s->files[file];
    uint8_t pre[8];
    if (f->size < 8) return kiln_fail(err, f->name, "header length", 0, "file is shorter than 8 bytes");
    if (s->is_archive && f->data && f->data_len >= 8) memcpy(pre, f->data, 8);
    else if (cv_source_pread(s, file, pre, 8, 0, err) < 0) return -1;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | pre[i];
    if (n > f->size - 8 || n > (100u << 20))
        return kiln_fail(err, f->name, "header length", 0, "header length %llu does not fit the file (%llu bytes)",
                         (unsigned long long)n, (unsigned long long)f->size);
    char *b = malloc(n + 1);
    if (!b) return kiln_fail(err, f->name, NULL, -1, "out of memory");
    if (s->is_archive && f->data && f->data_len >= 8 + n) {
        memcpy(b, f->data + 8, n);
    } else if (cv_source_pread(s, file, b, n, 8, err) < 0) {
        free(b);
        return -1;
    }
    b[n] = 0;
    *json = b;
    *len = n;
    return 0;
}

int cv_source_map(cv_source *s, uint32_t file, const uint8_t **base, kiln_err *err) {
    if (s->is_archive) return 1;
    dir_state *ds = s->priv;
    if (!ds->maps[file]) {
        int fd = dir_fd(s, file, err);
        if (fd < 0) return -1;
        if (!s->files[file].size) return 1;
        void *m = mmap(NULL, s->files[file].size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) return 1; /* pread still works */
        madvise(m, s->files[file].size, MADV_SEQUENTIAL);
        ds->maps[file] = m;
    }
    *base = ds->maps[file];
    return 0;
}

void cv_source_unmap_hint(cv_source *s, uint32_t file, uint64_t off, uint64_t n) {
    if (s->is_archive) return;
    dir_state *ds = s->priv;
    if (!ds->maps[file]) return;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t lo = (off + page - 1) / page * page, hi = (off + n) / page * page;
    if (hi > lo) madvise(ds->maps[file] + lo, hi - lo, MADV_DONTNEED);
}

bool cv_source_cached(cv_source *s, uint32_t file, uint64_t off, uint64_t n) {
    const uint8_t *base;
    kiln_err ignored;
    if (n == 0 || cv_source_map(s, file, &base, &ignored) != 0) return false;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), lo = off / page * page, hi = off + n;
    uint64_t pages = (hi - lo + page - 1) / page, resident = 0;
    unsigned char *vec = malloc(pages);
    if (!vec) return false;
    if (mincore((void *)(base + lo), hi - lo, vec) == 0)
        for (uint64_t i = 0; i < pages; i++) resident += vec[i] & 1;
    free(vec);
    return resident * 2 >= pages;
}

int cv_source_want_later(cv_source *s, uint32_t file, uint64_t off, uint64_t n) {
    return s->is_archive ? cv_archive_want_later(s, file, off, n) : 0;
}

void cv_source_done(cv_source *s, uint32_t file, uint64_t off, uint64_t n) {
    if (s->is_archive) cv_archive_done(s, file, off, n);
}
