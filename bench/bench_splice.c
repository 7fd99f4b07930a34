/* bench/bench_splice.c - the model generator behind bench/bench_splice.sh.
 *
 *   bench_splice gen SRC.gguf DST.gguf LAYERS EXPERTS ROWS_MULT
 *
 * Grows a fixture MoE GGUF (llama.cpp's Mixtral fixture) into a model big
 * enough to time: LAYERS blocks (block l repeats fixture block l mod n),
 * EXPERTS experts (expert e repeats fixture expert e mod n) and expert
 * matrices ROWS_MULT times taller (rows repeated). Every byte is a copy of
 * fixture data, so the tensors stay valid blocks of their types; the
 * result is only meant to be spliced and copied, not run. Written through
 * the core writer, so it is a well-formed GGUF.
 *
 * Run with no arguments (as bench/run.sh does with every bench binary) it
 * only says where the splice figures come from. */
#include "../core/gguf.h"
#include "../splice/splice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct grow {
    const kiln_gguf *g;
    int64_t layers, experts, rows;
    uint64_t fix_layers, fix_experts;
} grow;

/* The name and shape of fixture tensor t repeated as block `layer`. */
static void grown(const grow *gr, const kiln_tensor *t, int64_t layer, char *name, size_t cap, int64_t *ne) {
    char *orig = kiln_str_dup(t->name);
    const char *rest = strchr(orig + 4, '.');
    snprintf(name, cap, "blk.%lld%s", (long long)layer, rest ? rest : "");
    free(orig);
    memcpy(ne, t->ne, sizeof t->ne);
    if (kiln_splice_is_expert_tensor(name)) {
        ne[1] *= gr->rows;
        ne[2] = gr->experts;
    } else if (kiln_splice_is_expert_indexed(name)) {
        ne[t->n_dims - 1] = gr->experts;
    }
}

static int emit(kiln_gguf_writer *w, const grow *gr, const kiln_tensor *t, const char *name, kiln_err *err) {
    if (!kiln_splice_is_expert_indexed(name)) return kiln_writer_write(w, t->data, t->nbytes, err);
    uint64_t slab = t->nbytes / gr->fix_experts;
    int reps = kiln_splice_is_expert_tensor(name) ? (int)gr->rows : 1;
    for (int64_t e = 0; e < gr->experts; e++)
        for (int r = 0; r < reps; r++)
            if (kiln_writer_write(w, t->data + (uint64_t)(e % (int64_t)gr->fix_experts) * slab, slab, err) < 0) return -1;
    return 0;
}

/* Walks the output tensors in order: pass 0 declares them, pass 1 writes
 * their bytes. */
static int each_tensor(kiln_gguf_writer *w, const grow *gr, int pass, kiln_err *err) {
    const kiln_gguf *g = gr->g;
    char name[512];
    int64_t ne[KILN_GGUF_MAX_DIMS];
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const kiln_tensor *t = &g->tensors[i];
        char *n = kiln_str_dup(t->name);
        int64_t l = kiln_tensor_layer(n);
        free(n);
        if (l >= 0) continue;
        memcpy(name, t->name.ptr, t->name.len);
        name[t->name.len] = 0;
        int rc = pass == 0 ? kiln_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, err)
                           : kiln_writer_write(w, t->data, t->nbytes, err);
        if (rc < 0) return -1;
    }
    for (int64_t l = 0; l < gr->layers; l++)
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const kiln_tensor *t = &g->tensors[i];
            char *n = kiln_str_dup(t->name);
            int64_t fl = kiln_tensor_layer(n);
            free(n);
            if (fl != l % (int64_t)gr->fix_layers) continue;
            grown(gr, t, l, name, sizeof name, ne);
            int rc = pass == 0 ? kiln_writer_add_tensor(w, name, t->type, t->n_dims, ne, err) : emit(w, gr, t, name, err);
            if (rc < 0) return -1;
        }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 1) {
        printf("(model generator for bench/bench_splice.sh; the splice figures are printed by that script)\n");
        return 0;
    }
    if (argc != 7 || strcmp(argv[1], "gen")) {
        fprintf(stderr, "usage: bench_splice gen SRC.gguf DST.gguf LAYERS EXPERTS ROWS_MULT\n");
        return 2;
    }
    kiln_err err = {{0}};
    kiln_gguf *g = kiln_gguf_open(argv[2], &err);
    if (!g) {
        fprintf(stderr, "bench_splice: %s\n", err.msg);
        return 1;
    }
    grow gr = {.g = g, .layers = atoll(argv[4]), .experts = atoll(argv[5]), .rows = atoll(argv[6])};
    if (!kiln_gguf_get_u64(g, "llama.block_count", &gr.fix_layers) ||
        !kiln_gguf_get_u64(g, "llama.expert_count", &gr.fix_experts) || gr.layers < 1 || gr.experts < 1 || gr.rows < 1) {
        fprintf(stderr, "bench_splice: %s is not a llama-architecture MoE, or bad sizes\n", argv[2]);
        kiln_gguf_close(g);
        return 1;
    }
    kiln_write_opts wo = {.force = true, .alignment = g->alignment};
    kiln_gguf_writer *w = kiln_writer_new(argv[3], &wo, &err);
    int rc = w ? 0 : -1;
    if (rc == 0) rc = kiln_writer_copy_kv(w, g, &err);
    if (rc == 0) rc = kiln_writer_set_u32(w, "llama.block_count", (uint32_t)gr.layers, &err);
    if (rc == 0) rc = kiln_writer_set_u32(w, "llama.expert_count", (uint32_t)gr.experts, &err);
    if (rc == 0) rc = each_tensor(w, &gr, 0, &err);
    if (rc == 0) rc = kiln_writer_begin(w, &err);
    if (rc == 0) rc = each_tensor(w, &gr, 1, &err);
    if (rc == 0) rc = kiln_writer_finish(w, &err);
    else kiln_writer_abort(w);
    kiln_gguf_close(g);
    if (rc < 0) {
        fprintf(stderr, "bench_splice: %s\n", err.msg);
        return 1;
    }
    return 0;
}
