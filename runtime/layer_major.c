/* runtime/layer_major.c - see layer_major.h. The steps are forward.c's
 * (kiln_fwd_embed, kiln_fwd_positions, kiln_fwd_block, kiln_fwd_head);
 * this file only changes their order and keeps the residual streams of
 * all sequences between layers. */
#include "layer_major.h"

#include "deepseek4.h"
#include "forward_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The residual streams of all sequences, row r = token r of the
 * concatenated sequences: in memory, or in an unlinked scratch file. */
typedef struct act_store {
    float *mem;
    int fd;
    char path[4096];
    uint64_t row_bytes;
} act_store;

static int act_open(act_store *a, uint64_t rows, uint64_t row_bytes, bool spill, const char *dir, kiln_err *err) {
    memset(a, 0, sizeof *a);
    a->fd = -1;
    a->row_bytes = row_bytes;
    if (!spill) {
        a->mem = malloc(rows * row_bytes);
        if (!a->mem)
            return kiln_fail(err, NULL, NULL, -1, "out of memory for %llu bytes of activations (use --max-memory to "
                             "spill them to disk)", (unsigned long long)(rows * row_bytes));
        return 0;
    }
    if (!dir) dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    if (snprintf(a->path, sizeof a->path, "%s/kiln-activations-XXXXXX", dir) >= (int)sizeof a->path)
        return kiln_fail(err, dir, NULL, -1, "scratch folder path too long");
    a->fd = mkstemp(a->path);
    if (a->fd < 0) return kiln_fail(err, a->path, NULL, -1, "cannot create the activation scratch file: %s", strerror(errno));
    unlink(a->path); /* gone when closed, whatever happens */
    return 0;
}

static void act_close(act_store *a) {
    free(a->mem);
    if (a->fd >= 0) close(a->fd);
}

/* Copies rows [row, row + n) between the store and buf. */
static int act_move(act_store *a, uint64_t row, uint64_t n, float *buf, bool save, kiln_err *err) {
    if (a->mem) {
        float *at = (float *)((uint8_t *)a->mem + row * a->row_bytes);
        memcpy(save ? at : buf, save ? buf : at, n * a->row_bytes);
        return 0;
    }
    uint8_t *p = (uint8_t *)buf;
    uint64_t left = n * a->row_bytes, off = row * a->row_bytes;
    while (left) {
        ssize_t done = save ? pwrite(a->fd, p, left, (off_t)off) : pread(a->fd, p, left, (off_t)off);
        if (done < 0 && errno == EINTR) continue;
        if (done <= 0)
            return kiln_fail(err, a->path, NULL, (int64_t)off, "activation scratch file %s failed: %s",
                             save ? "write" : "read", done < 0 ? strerror(errno) : "unexpected end");
        p += done;
        off += (uint64_t)done;
        left -= (uint64_t)done;
    }
    return 0;
}

uint64_t kiln_model_weight_bytes(const kiln_model *m) {
    uint64_t total = 0;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) total += m->gguf->tensors[i].nbytes;
    return total;
}

/* Tensors of block il: those named "blk.IL.*". */
static bool in_layer(const kiln_tensor *t, int64_t il) {
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "blk.%lld.", (long long)il);
    return t->name.len > (uint64_t)n && !memcmp(t->name.ptr, prefix, (size_t)n);
}

static uint64_t layer_bytes(const kiln_model *m, int64_t il) {
    uint64_t total = 0;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++)
        if (in_layer(&m->gguf->tensors[i], il)) total += m->gguf->tensors[i].nbytes;
    return total;
}

/* Lets the pages of block il's weights go: they are not read again in
 * this pass, and under a memory cap they would only push out the next
 * layer's. Pages shared with a neighbouring tensor are simply read again
 * if that tensor needs them. */
static void release_layer(const kiln_model *m, int64_t il) {
    const long page = sysconf(_SC_PAGESIZE);
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const kiln_tensor *t = &m->gguf->tensors[i];
        if (!in_layer(t, il) || !t->data || !t->nbytes) continue;
        uintptr_t from = (uintptr_t)t->data / (uintptr_t)page * (uintptr_t)page;
        uintptr_t to = (uintptr_t)t->data + t->nbytes;
        madvise((void *)from, to - from, MADV_DONTNEED); /* advice only: a failure costs memory, not results */
    }
}

/* Reads a "Key:   N kB" line of /proc/meminfo. */
static uint64_t meminfo_bytes(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, klen) && line[klen] == ':' && sscanf(line + klen + 1, "%llu", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* Reads one number from a file; false when absent or not a number
 * (cgroup v2 writes "max" for no limit). */
static bool read_u64(const char *path, unsigned long long *v) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fscanf(f, "%llu", v) == 1;
    fclose(f);
    return ok;
}

/* The room left in this process's memory cgroup: its limit minus its
 * usage, 0 when it has no limit. The cgroup is the one /proc/self/cgroup
 * names: "N:memory:/path" under cgroup v1's memory hierarchy, "0::/path"
 * under v2. */
static uint64_t cgroup_room(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[4096], limit_path[4200] = "", usage_path[4200] = "";
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = 0;
        const char *ctrl = c1 + 1, *path = c2 + 1;
        if (!strcmp(ctrl, "memory")) {
            snprintf(limit_path, sizeof limit_path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", path);
            snprintf(usage_path, sizeof usage_path, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", path);
            break;
        }
        if (!*ctrl && !*limit_path) {
            snprintf(limit_path, sizeof limit_path, "/sys/fs/cgroup%s/memory.max", path);
            snprintf(usage_path, sizeof usage_path, "/sys/fs/cgroup%s/memory.current", path);
        }
    }
    fclose(f);
    unsigned long long limit, usage = 0;
    if (!*limit_path || !read_u64(limit_path, &limit) || limit >= (1ull << 60)) return 0;
    if (!read_u64(usage_path, &usage)) usage = 0;
    return limit > usage ? (uint64_t)(limit - usage) : 1;
}

uint64_t kiln_memory_available(void) {
    uint64_t avail = meminfo_bytes("MemAvailable"), room = cgroup_room();
    if (!avail) return room;
    return room && room < avail ? room : avail;
}

/* One layer (il >= 0), the embeddings (il == -1) or the head (il ==
 * n_layer) over every batch of every sequence. ds4: deepseek4's hc
 * streams per token (n_batch rows of them), whose steps are its own
 * (deepseek4.c); NULL for the other models, whose rows are c->x. */
static int pass(kiln_ctx *c, const kiln_lm_params *p, act_store *a, const int32_t *tokens, int64_t n_seqs,
                int64_t il, float *logits, float *ds4, kiln_err *err) {
    float *x = ds4 ? ds4 : c->x;
    const int64_t n_tok = c->n_ctx, n_layer = c->m->hp.n_layer, n_vocab = c->m->hp.n_vocab;
    const int64_t outer = p->n_batch > 0 && p->n_batch < n_tok ? p->n_batch : n_tok;
    for (int64_t s = 0; s < n_seqs; s++) {
        if (p->on_seq) p->on_seq(p->user, s);
        /* kiln_eval's cuts: calls of `outer` tokens, each in pieces of at
         * most the context's n_batch */
        for (int64_t i = 0, call_end = 0; i < n_tok;) {
            if (i == call_end) call_end = i + outer < n_tok ? i + outer : n_tok;
            const int64_t len = call_end - i < c->n_batch ? call_end - i : c->n_batch;
            const uint64_t row = (uint64_t)(s * n_tok + i);
            c->n_past = i;
            const int32_t *tok = tokens + s * n_tok + i;
            if (il < 0) {
                if (ds4) kiln_ds4_embed(c, tok, len, x);
                else kiln_fwd_embed(c, tok, len);
            } else {
                if (act_move(a, row, (uint64_t)len, x, false, err) < 0) return -1;
                if (il == n_layer) {
                    float *out = logits ? logits + i * n_vocab : NULL;
                    if ((ds4 ? kiln_ds4_head(c, x, len, out, err) : kiln_fwd_head(c, len, out, err)) < 0) return -1;
                    i += len;
                    continue;
                }
                if (ds4) {
                    if (kiln_ds4_block(c, il, tok, x, len, err) < 0) return -1;
                } else {
                    kiln_fwd_positions(c, len);
                    if (kiln_fwd_block(c, il, len, logits != NULL, err) < 0) return -1;
                }
            }
            if (act_move(a, row, (uint64_t)len, x, true, err) < 0) return -1;
            i += len;
        }
        if (il == n_layer && logits && p->on_logits(p->user, s, logits, err) < 0) return -1;
    }
    return 0;
}

int kiln_eval_layer_major(const kiln_model *m, const kiln_lm_params *p, const int32_t *tokens, int64_t n_seqs,
                          kiln_lm_stats *stats, kiln_err *err) {
    const kiln_hparams *hp = &m->hp;
    if (p->ctx.n_ctx <= 0) return kiln_fail(err, NULL, "n_ctx", -1, "layer-major evaluation needs a sequence length");
    for (int64_t i = 0; i < n_seqs * p->ctx.n_ctx; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab)
            return kiln_fail(err, NULL, "tokens", i, "id %d is not in the vocabulary of %lld", (int)tokens[i],
                             (long long)hp->n_vocab);
    /* deepseek4 carries hc streams per token between layers */
    const int64_t streams = hp->arch == KILN_ARCH_DEEPSEEK4 ? m->ds4->hc : 1;
    const uint64_t row_bytes = (uint64_t)(streams * hp->n_embd) * sizeof(float);
    const uint64_t act_bytes = (uint64_t)(n_seqs * p->ctx.n_ctx) * row_bytes;
    /* In memory unless the activations, the largest layer and the head
     * together would pass the cap. */
    uint64_t biggest = 0;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        uint64_t b = layer_bytes(m, il);
        if (b > biggest) biggest = b;
    }
    const uint64_t head = m->output ? m->output->nbytes : 0;
    const bool spill = p->max_memory && act_bytes + biggest + head > p->max_memory;
    if (stats) *stats = (kiln_lm_stats){act_bytes, spill};

    kiln_ctx *c = kiln_ctx_new(m, &p->ctx, err);
    if (!c) return -1;
    act_store a;
    float *logits = NULL, *ds4 = NULL;
    int rc = act_open(&a, (uint64_t)(n_seqs * p->ctx.n_ctx), row_bytes, spill, p->scratch_dir, err);
    if (rc == 0 && streams > 1 && !(ds4 = malloc((size_t)c->n_batch * row_bytes)))
        rc = kiln_fail(err, NULL, NULL, -1, "out of memory for the streams of %lld tokens", (long long)c->n_batch);
    /* zeroed: the rows below ctx.logits_from are never written */
    if (rc == 0 && p->on_logits && !(logits = calloc((size_t)(c->n_ctx * hp->n_vocab), sizeof *logits)))
        rc = kiln_fail(err, NULL, NULL, -1, "out of memory for the logits");
    const bool head_wanted = logits || (p->ctx.hook && p->ctx.hook_output);
    for (int64_t il = -1; rc == 0 && il <= hp->n_layer - !head_wanted; il++) {
        rc = pass(c, p, &a, tokens, n_seqs, il, logits, ds4, err);
        if (rc == 0 && il >= 0 && il < hp->n_layer) {
            if (p->max_memory) release_layer(m, il);
            if (p->on_layer) p->on_layer(p->user, il, hp->n_layer);
        }
    }
    free(logits);
    free(ds4);
    act_close(&a); /* act_open leaves it closable even when it fails */
    kiln_ctx_free(c);
    return rc;
}
