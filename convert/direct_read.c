/* convert/direct_read.c - direct reads with one range read ahead (see
 * direct_read.h).
 *
 * Two slots take turns: the one last handed out (the caller is using it)
 * and the other, which the thread fills with the range asked for next.
 * Offsets and lengths are widened to whole blocks, as O_DIRECT needs; the
 * caller's bytes sit inside. One mutex and one condition variable guard
 * the slots' states; a slot's buffer is only touched by whoever holds it
 * (the thread while its read is queued or running, the caller after). */
#include "direct_read.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ALIGN 4096u /* every logical block size in use divides it */

typedef enum { SLOT_EMPTY, SLOT_QUEUED, SLOT_READING, SLOT_DONE } slot_state;

typedef struct slot {
    uint8_t *buf;
    uint64_t cap;
    uint32_t file;
    uint64_t start, len; /* the aligned range asked for */
    uint64_t got;        /* bytes read (less than len only at the end of the file) */
    slot_state state;
    int error;           /* errno of a failed read, 0 */
} slot;

struct cv_direct {
    uint32_t n_files;
    int *fds;          /* O_DIRECT descriptors; -1 not opened, -2 refused */
    slot slots[2];
    int current;       /* the slot handed out last, or -1 */
    bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
};

/* Reads s->len bytes at s->start of fd into s->buf (short at the end of
 * the file). 0 or an errno. */
static int read_slot(int fd, slot *s) {
    s->got = 0;
    while (s->got < s->len) {
        ssize_t r = pread(fd, s->buf + s->got, s->len - s->got, (off_t)(s->start + s->got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno;
        if (r == 0) break;
        s->got += (uint64_t)r;
        if (s->got % ALIGN) break; /* a short read is the end of the file */
    }
    return 0;
}

static void *reader_main(void *arg) {
    cv_direct *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        int k = d->slots[0].state == SLOT_QUEUED ? 0 : d->slots[1].state == SLOT_QUEUED ? 1 : -1;
        if (k < 0) {
            if (d->stop) break;
            pthread_cond_wait(&d->cv, &d->mu);
            continue;
        }
        slot *s = &d->slots[k];
        s->state = SLOT_READING;
        int fd = d->fds[s->file];
        pthread_mutex_unlock(&d->mu);
        int e = read_slot(fd, s);
        pthread_mutex_lock(&d->mu);
        s->error = e;
        s->state = SLOT_DONE;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

cv_direct *cv_direct_new(uint32_t n_files) {
    cv_direct *d = calloc(1, sizeof *d);
    if (!d || !(d->fds = malloc((n_files + 1) * sizeof *d->fds))) {
        free(d);
        return NULL;
    }
    d->n_files = n_files;
    for (uint32_t i = 0; i < n_files; i++) d->fds[i] = -1;
    d->current = -1;
    if (pthread_mutex_init(&d->mu, NULL) != 0) goto fail_mu;
    if (pthread_cond_init(&d->cv, NULL) != 0) goto fail_cv;
    if (pthread_create(&d->thread, NULL, reader_main, d) != 0) goto fail_thread;
    return d;
fail_thread:
    pthread_cond_destroy(&d->cv);
fail_cv:
    pthread_mutex_destroy(&d->mu);
fail_mu:
    free(d->fds);
    free(d);
    return NULL;
}

void cv_direct_free(cv_direct *d) {
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    for (int k = 0; k < 2; k++)
        if (d->slots[k].state == SLOT_QUEUED) d->slots[k].state = SLOT_EMPTY;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    for (uint32_t i = 0; i < d->n_files; i++)
        if (d->fds[i] >= 0) close(d->fds[i]);
    for (int k = 0; k < 2; k++) free(d->slots[k].buf);
    free(d->fds);
    free(d);
}

/* Waits until slot k is neither queued nor being read. Mutex held. */
static void settle(cv_direct *d, int k) {
    while (d->slots[k].state == SLOT_QUEUED || d->slots[k].state == SLOT_READING) pthread_cond_wait(&d->cv, &d->mu);
}

/* Sets slot k (settled, not handed out) to the blocks covering
 * [off, off + n) of file; 0 or -1 when out of memory. */
static int aim(slot *s, uint32_t file, uint64_t off, uint64_t n) {
    uint64_t start = off / ALIGN * ALIGN, len = (off + n + ALIGN - 1) / ALIGN * ALIGN - start;
    if (len > s->cap) {
        void *b;
        if (posix_memalign(&b, ALIGN, len) != 0) return -1;
        free(s->buf);
        s->buf = b;
        s->cap = len;
    }
    s->file = file, s->start = start, s->len = len, s->got = 0, s->error = 0;
    return 0;
}

static bool holds(const slot *s, uint32_t file, uint64_t off, uint64_t n) {
    return s->state != SLOT_EMPTY && s->file == file && s->start <= off && off + n <= s->start + s->len;
}

/* Opens file for direct reads when not yet done: 0; 1 when its
 * filesystem has no O_DIRECT; -1 with err. */
static int open_direct(cv_direct *d, uint32_t file, const char *path, kiln_err *err) {
    if (file >= d->n_files) return kiln_fail(err, path, NULL, -1, "no file #%u", file);
    if (d->fds[file] == -2) return 1;
    if (d->fds[file] >= 0) return 0;
    int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0) {
        if (errno != EINVAL) return kiln_fail(err, path, NULL, -1, "cannot open: %s", strerror(errno));
        d->fds[file] = -2;
        return 1;
    }
    d->fds[file] = fd;
    return 0;
}

int cv_direct_read(cv_direct *d, uint32_t file, const char *path, uint64_t off, uint64_t n,
                   const cv_direct_next *next, const uint8_t **p, kiln_err *err) {
    int orc = open_direct(d, file, path, err);
    if (orc != 0) return orc;
    /* the read-ahead's file too, here on the caller's thread; a file that
     * cannot be had is just not read ahead (its own read will say why) */
    kiln_err ignored;
    bool ahead = next && next->n && open_direct(d, next->file, next->path, &ignored) == 0;
    pthread_mutex_lock(&d->mu);
    int k = -1;
    for (int j = 0; j < 2; j++)
        if (j != d->current && holds(&d->slots[j], file, off, n)) k = j;
    if (k >= 0) {
        settle(d, k); /* read ahead: wait for it */
    } else {
        /* not what was read ahead: read it here, into the slot not handed out */
        k = d->current == 0 ? 1 : 0;
        settle(d, k);
        if (aim(&d->slots[k], file, off, n) < 0) {
            d->slots[k].state = SLOT_EMPTY;
            pthread_mutex_unlock(&d->mu);
            return kiln_fail(err, path, NULL, (int64_t)off, "out of memory (%llu bytes of read buffer)",
                             (unsigned long long)n);
        }
        d->slots[k].state = SLOT_READING;
        pthread_mutex_unlock(&d->mu);
        int e = read_slot(d->fds[file], &d->slots[k]);
        pthread_mutex_lock(&d->mu);
        d->slots[k].error = e;
        d->slots[k].state = SLOT_DONE;
    }
    slot *s = &d->slots[k];
    int rc = 0;
    if (s->error) rc = kiln_fail(err, path, NULL, (int64_t)off, "read failed: %s", strerror(s->error));
    else if (s->start + s->got < off + n) rc = kiln_fail(err, path, NULL, (int64_t)off, "read failed: unexpected end of file");
    if (rc < 0) {
        s->state = SLOT_EMPTY;
        d->current = -1;
        pthread_mutex_unlock(&d->mu);
        return -1;
    }
    *p = s->buf + (off - s->start);
    d->current = k;
    /* the other slot reads what comes next, unless it holds it already */
    slot *o = &d->slots[1 - k];
    if (ahead && !holds(o, next->file, next->off, next->n)) {
        settle(d, 1 - k);
        if (aim(o, next->file, next->off, next->n) == 0) {
            o->state = SLOT_QUEUED;
            pthread_cond_broadcast(&d->cv);
        } else {
            o->state = SLOT_EMPTY; /* no memory for read-ahead: it is read when asked for */
        }
    }
    pthread_mutex_unlock(&d->mu);
    return 0;
}
