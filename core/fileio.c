/* core/fileio.c - atomic output files (see fileio.h). */
#include "fileio.h"

#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define OUT_BUF (4u << 20)

int kiln_check_output(const char *path, const char *const *inputs, int n_inputs, bool force,
                      kiln_err *err) {
    struct stat out;
    if (stat(path, &out) != 0) {
        for (int i = 0; i < n_inputs; i++)
            if (inputs[i] && !strcmp(inputs[i], path))
                return kiln_fail(err, path, NULL, -1, "output is also an input; refusing to overwrite it");
        return 0;
    }
    for (int i = 0; i < n_inputs; i++) {
        struct stat in;
        if (inputs[i] && stat(inputs[i], &in) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino)
            return kiln_fail(err, path, NULL, -1, "output is the input %s; refusing to overwrite it", inputs[i]);
    }
    if (!force) return kiln_fail(err, path, NULL, -1, "output exists; use --force to overwrite it");
    return 0;
}

int kiln_out_open(kiln_outfile *f, const char *path, kiln_err *err) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = strdup(path);
    f->tmp_path = malloc(strlen(path) + 5);
    f->buf = malloc(OUT_BUF);
    f->buf_cap = OUT_BUF;
    if (!f->path || !f->tmp_path || !f->buf) {
        kiln_out_discard(f);
        return kiln_fail(err, path, NULL, -1, "out of memory");
    }
    sprintf(f->tmp_path, "%s.tmp", path);
    f->fd = open(f->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        int rc = kiln_fail(err, f->tmp_path, NULL, -1, "cannot create: %s", strerror(errno));
        free(f->path);
        free(f->tmp_path);
        free(f->buf);
        memset(f, 0, sizeof *f);
        f->fd = -1;
        return rc;
    }
    return 0;
}

/* Every WRITEBACK_STEP bytes of a buffered file, the kernel is asked to
 * start writing them to disk, so the fsync at the end overlaps with our
 * work instead of waiting for the whole file. */
#define WRITEBACK_STEP (64u << 20)

/* Direct mode: the buffer's size and alignment, and the unit of every
 * direct write's length and file offset (4096 covers every logical block
 * size in use; the device's own may be smaller). */
#define DIRECT_BUF (8u << 20)
#define DIRECT_ALIGN 4096u

/* Leaves direct mode: the rest of the file goes through the page cache. */
static int stop_direct(kiln_outfile *f, kiln_err *err) {
    int fl = fcntl(f->fd, F_GETFL);
    if (fl < 0 || fcntl(f->fd, F_SETFL, fl & ~O_DIRECT) < 0)
        return kiln_fail(err, f->tmp_path, NULL, -1, "cannot leave direct I/O: %s", strerror(errno));
    f->direct = false;
    f->synced = f->pos - f->buf_len; /* nothing before this is dirty in the page cache */
    return 0;
}

/* Writes n bytes at file position file_pos. */
static int write_all(kiln_outfile *f, const unsigned char *p, uint64_t n, uint64_t file_pos, kiln_err *err) {
    uint64_t done = 0;
    while (done < n) {
        ssize_t w = write(f->fd, p + done, n - done);
        if (w < 0) {
            if (errno == EINTR) continue;
            /* a direct write this device will not take: the page cache will */
            if (errno == EINVAL && f->direct) {
                if (stop_direct(f, err) < 0) return -1;
                continue;
            }
            return kiln_fail(err, f->tmp_path, NULL, (int64_t)(file_pos + done), "write failed: %s", strerror(errno));
        }
        done += (uint64_t)w;
    }
    uint64_t end = file_pos + n;
    if (!f->direct && end - f->synced >= WRITEBACK_STEP) {
        sync_file_range(f->fd, (off64_t)f->synced, (off64_t)(end - f->synced), SYNC_FILE_RANGE_WRITE);
        f->synced = end;
    }
    return 0;
}

/* Writes the buffer out. In direct mode a length that is not whole blocks
 * (the file's end, or a hole next) ends the mode: the whole blocks are
 * written direct, the rest through the page cache. */
static int flush_buf(kiln_outfile *f, kiln_err *err) {
    uint64_t start = f->pos - f->buf_len, head = f->buf_len;
    if (f->direct && head % DIRECT_ALIGN) head -= head % DIRECT_ALIGN;
    int rc = write_all(f, f->buf, head, start, err);
    if (rc == 0 && head < f->buf_len) {
        rc = stop_direct(f, err);
        if (rc == 0) rc = write_all(f, f->buf + head, f->buf_len - head, start + head, err);
    }
    f->buf_len = 0;
    return rc;
}

int kiln_out_direct(kiln_outfile *f, kiln_err *err) {
    if (f->pos) return kiln_fail(err, f->tmp_path, NULL, -1, "direct I/O asked for after %llu bytes were written",
                                 (unsigned long long)f->pos);
    if (f->direct) return 1;
    int fl = fcntl(f->fd, F_GETFL);
    if (fl < 0 || fcntl(f->fd, F_SETFL, fl | O_DIRECT) < 0) return 0; /* not on this filesystem */
    void *buf;
    if (posix_memalign(&buf, DIRECT_ALIGN, DIRECT_BUF) != 0) {
        (void)fcntl(f->fd, F_SETFL, fl);
        return kiln_fail(err, f->tmp_path, NULL, -1, "out of memory");
    }
    free(f->buf);
    f->buf = buf;
    f->buf_cap = DIRECT_BUF;
    f->direct = true;
    return 1;
}

int kiln_out_write(kiln_outfile *f, const void *data, uint64_t n, kiln_err *err) {
    const unsigned char *p = data;
    while (n > 0) {
        if (f->buf_len == 0 && n >= f->buf_cap && !f->direct) {
            /* Large writes skip the buffer: one copy (the kernel's), straight
             * from the caller's memory, often a mapped input file. */
            uint64_t k = n / f->buf_cap * f->buf_cap;
            f->pos += k;
            if (write_all(f, p, k, f->pos - k, err) < 0) return -1;
            p += k;
            n -= k;
            continue;
        }
        uint64_t room = f->buf_cap - f->buf_len;
        uint64_t k = n < room ? n : room;
        memcpy(f->buf + f->buf_len, p, k);
        f->buf_len += k;
        f->pos += k;
        p += k;
        n -= k;
        if (f->buf_len == f->buf_cap && flush_buf(f, err) < 0) return -1;
    }
    return 0;
}

int kiln_out_pad(kiln_outfile *f, uint64_t alignment, kiln_err *err) {
    static const unsigned char zeros[64];
    uint64_t pad = (alignment - f->pos % alignment) % alignment;
    while (pad > 0) {
        uint64_t k = pad < sizeof zeros ? pad : sizeof zeros;
        if (kiln_out_write(f, zeros, k, err) < 0) return -1;
        pad -= k;
    }
    return 0;
}

int kiln_out_skip(kiln_outfile *f, uint64_t n, kiln_err *err) {
    if (!n) return 0;
    if (flush_buf(f, err) < 0) return -1;
    f->pos += n;
    /* the file is extended at once, so a hole at its end counts in its size */
    if (lseek(f->fd, (off_t)f->pos, SEEK_SET) < 0 || ftruncate(f->fd, (off_t)f->pos) != 0)
        return kiln_fail(err, f->tmp_path, NULL, (int64_t)(f->pos - n), "cannot skip %llu bytes: %s",
                         (unsigned long long)n, strerror(errno));
    f->synced = f->pos;
    /* direct writes from here would start off a block boundary */
    if (f->direct && f->pos % DIRECT_ALIGN) return stop_direct(f, err);
    return 0;
}

int kiln_out_close(kiln_outfile *f, kiln_err *err) {
    if (f->fd < 0) return 0;
    if (flush_buf(f, err) < 0) return -1;
    if (fsync(f->fd) != 0) return kiln_fail(err, f->tmp_path, NULL, -1, "fsync failed: %s", strerror(errno));
    int rc = close(f->fd);
    f->fd = -1;
    if (rc != 0) return kiln_fail(err, f->tmp_path, NULL, -1, "close failed: %s", strerror(errno));
    free(f->buf);
    f->buf = NULL;
    return 0;
}

static void fsync_dir_of(const char *path) {
    char *copy = strdup(path);
    if (!copy) return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd); /* best effort: some filesystems refuse directory fsync */
        close(fd);
    }
    free(copy);
}

int kiln_out_commit(kiln_outfile *f, kiln_err *err) {
    if (kiln_out_close(f, err) < 0) return -1;
    if (rename(f->tmp_path, f->path) != 0)
        return kiln_fail(err, f->path, NULL, -1, "cannot rename %s into place: %s", f->tmp_path, strerror(errno));
    fsync_dir_of(f->path);
    return 0;
}

void kiln_out_discard(kiln_outfile *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->tmp_path) unlink(f->tmp_path);
    kiln_out_free(f);
}

void kiln_out_free(kiln_outfile *f) {
    free(f->path);
    free(f->tmp_path);
    free(f->buf);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

int kiln_write_file_atomic(const char *path, const void *data, uint64_t n, kiln_err *err) {
    kiln_outfile f;
    if (kiln_out_open(&f, path, err) < 0) return -1;
    if (kiln_out_write(&f, data, n, err) < 0 || kiln_out_commit(&f, err) < 0) {
        kiln_out_discard(&f);
        return -1;
    }
    kiln_out_free(&f);
    return 0;
}

int kiln_write_json_atomic(const char *path, const json_t *root, size_t flags, kiln_err *err) {
    char *s = root ? json_dumps(root, flags) : NULL;
    if (!s) return kiln_fail(err, path, NULL, -1, "cannot build the JSON");
    size_t n = strlen(s);
    char *t = realloc(s, n + 2);
    if (!t) {
        free(s);
        return kiln_fail(err, path, NULL, -1, "out of memory");
    }
    t[n] = '\n';
    t[n + 1] = 0;
    int rc = kiln_write_file_atomic(path, t, n + 1, err);
    free(t);
    return rc;
}

/* ---- reading a whole input -------------------------------------------- */

char *kiln_read_text(const char *path, size_t *len, kiln_err *err) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        kiln_fail(err, path, NULL, -1, "cannot open: %s", strerror(errno));
        return NULL;
    }
    /* Read in growing chunks rather than by the file's size: standard input
     * and pipes have none. */
    char *buf = NULL;
    size_t n = 0, cap = 0;
    bool failed = false;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            char *b = realloc(buf, cap = (n + 65536 + 1) * 2);
            if (!b) {
                failed = kiln_fail(err, path, NULL, -1, "out of memory");
                break;
            }
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) failed = kiln_fail(err, path, NULL, (int64_t)n, "read error: %s", strerror(errno));
            break;
        }
    }
    if (f != stdin) fclose(f);
    if (failed) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}
