/* convert/write_pipe.c - the writer thread of convert (see write_pipe.h).
 *
 * Two buffers take turns: the caller fills buf[fill]; when it is full (or
 * flushed) it is marked ready and the thread writes it while the caller
 * fills the other one. One mutex and one condition variable guard the
 * state; the data itself is only touched by one side at a time. */
#include "write_pipe.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct cv_write_pipe {
    cv_sink sink;
    void *user;
    uint64_t cap;      /* the buffers' size as made */
    uint8_t *buf[2];
    uint64_t bcap[2];  /* each buffer's size: cap, or a given buffer's */
    uint64_t len[2];
    bool ready[2];   /* handed to the thread, not yet written */
    int fill;        /* the buffer the caller fills */
    int next;        /* the buffer the thread writes next */
    bool stop, failed;
    kiln_err err;    /* the real sink's first error */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool started;
};

static void *writer_main(void *arg) {
    cv_write_pipe *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->ready[p->next] && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        if (!p->ready[p->next]) break; /* stopped with nothing left */
        int b = p->next;
        bool ok = !p->failed && !p->stop; /* a stopped pipe drops what is left */
        pthread_mutex_unlock(&p->mu);
        kiln_err e = {0};
        int rc = ok ? p->sink(p->user, p->buf[b], p->len[b], &e) : 0;
        pthread_mutex_lock(&p->mu);
        if (rc < 0 && !p->failed) {
            p->failed = true;
            p->err = e;
        }
        p->len[b] = 0;
        p->ready[b] = false;
        p->next = 1 - b;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

cv_write_pipe *cv_write_pipe_new(cv_sink sink, void *user, uint64_t buf_bytes, kiln_err *err) {
    cv_write_pipe *p = calloc(1, sizeof *p);
    if (!p) {
        kiln_fail(err, NULL, NULL, -1, "out of memory");
        return NULL;
    }
    p->sink = sink, p->user = user, p->cap = buf_bytes ? buf_bytes : 1;
    p->buf[0] = malloc(p->cap);
    p->buf[1] = malloc(p->cap);
    p->bcap[0] = p->bcap[1] = p->cap;
    if (!p->buf[0] || !p->buf[1]) {
        kiln_fail(err, NULL, NULL, -1, "out of memory (2 x %llu bytes of write buffers)", (unsigned long long)p->cap);
        cv_write_pipe_free(p);
        return NULL;
    }
    if (pthread_mutex_init(&p->mu, NULL) != 0) goto fail_mu;
    if (pthread_cond_init(&p->cv, NULL) != 0) goto fail_cv;
    if (pthread_create(&p->thread, NULL, writer_main, p) != 0) goto fail_thread;
    p->started = true;
    return p;
fail_thread:
    pthread_cond_destroy(&p->cv);
fail_cv:
    pthread_mutex_destroy(&p->mu);
fail_mu:
    free(p->buf[0]);
    free(p->buf[1]);
    free(p);
    kiln_fail(err, NULL, NULL, -1, "cannot start the writer thread");
    return NULL;
}

/* Hands buf[fill] to the thread and waits until the other one is free.
 * Called with the mutex held. */
static void hand_off(cv_write_pipe *p) {
    p->ready[p->fill] = true;
    p->fill = 1 - p->fill;
    pthread_cond_broadcast(&p->cv);
    while (p->ready[p->fill]) pthread_cond_wait(&p->cv, &p->mu);
}

static int pipe_error(cv_write_pipe *p, kiln_err *err) {
    *err = p->err;
    return -1;
}

int cv_write_pipe_put(void *pipe, const void *data, uint64_t n, kiln_err *err) {
    cv_write_pipe *p = pipe;
    const uint8_t *src = data;
    while (n > 0) {
        int b = p->fill; /* only the caller changes fill: no lock to read it */
        uint64_t k = p->bcap[b] - p->len[b] < n ? p->bcap[b] - p->len[b] : n;
        memcpy(p->buf[b] + p->len[b], src, k);
        p->len[b] += k;
        src += k;
        n -= k;
        if (p->len[b] == p->bcap[b]) {
            pthread_mutex_lock(&p->mu);
            hand_off(p);
            bool failed = p->failed;
            pthread_mutex_unlock(&p->mu);
            if (failed) return pipe_error(p, err);
        }
    }
    return 0;
}

int cv_write_pipe_give(void *pipe, uint8_t **buf, uint64_t *cap, uint64_t n, kiln_err *err) {
    cv_write_pipe *p = pipe;
    /* a small piece is cheaper copied than written alone; a small buffer
     * would make the pipe's later puts hand off small pieces */
    if (n < p->cap / 16 || *cap < p->cap / 2) return cv_write_pipe_put(p, *buf, n, err);
    pthread_mutex_lock(&p->mu);
    if (p->len[p->fill] > 0) hand_off(p); /* what was put before goes first */
    int b = p->fill; /* free: hand_off waited for it */
    uint8_t *mine = p->buf[b];
    uint64_t mine_cap = p->bcap[b];
    p->buf[b] = *buf, p->bcap[b] = *cap, p->len[b] = n;
    *buf = mine, *cap = mine_cap;
    hand_off(p);
    bool failed = p->failed;
    pthread_mutex_unlock(&p->mu);
    return failed ? pipe_error(p, err) : 0;
}

int cv_write_pipe_flush(cv_write_pipe *p, kiln_err *err) {
    pthread_mutex_lock(&p->mu);
    if (p->len[p->fill] > 0) hand_off(p);
    while (p->ready[0] || p->ready[1]) pthread_cond_wait(&p->cv, &p->mu);
    bool failed = p->failed;
    pthread_mutex_unlock(&p->mu);
    return failed ? pipe_error(p, err) : 0;
}

void cv_write_pipe_free(cv_write_pipe *p) {
    if (!p) return;
    if (p->started) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
    }
    free(p->buf[0]);
    free(p->buf[1]);
    free(p);
}
