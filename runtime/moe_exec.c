/* runtime/moe_exec.c - the routed experts of one MoE layer in one OpenMP
 * region.
 *
 * Why: at the fixtures' size (mixtral: n_embd 256, 4 experts, top-2) one
 * expert product is a few microseconds of work, and running each expert's
 * up, gate and down as a product of its own opened 3 x k regions a token
 * per layer, each with its barriers: decode paid more for waking the team
 * than for the products. llama.cpp's mul_mat_id runs all the experts of a
 * matrix in one op. Here the whole layer is one region:
 *
 *   A  every routed row's input converted to up's and gate's vec_dot_type
 *      (one token: by each thread into its own buffer, no barrier), and
 *      packed for the panels when its expert takes them
 *   B  up and gate of every expert on its rows          - barrier
 *   C  SwiGLU of every row, converted for down          - barrier
 *   D  down of every expert on its rows                 - barrier
 *   E  each token's slots weighted and summed in slot order
 *
 * B and D call the table's kernels (kernels.c) for each expert in turn:
 * they share their rows among the team with orphaned `omp for ... nowait`
 * loops, so one expert's rows follow another's with no barrier between.
 * The kernels are those matmul.c takes for a MoE expert (ggml's
 * mul_mat_id: float weights by ggml_vec_dot for every row and token, never
 * tinyBLAS; repacked k-quants in the gemv order), and each output depends
 * only on its row and token, so the bits are those of moe.c's per-expert
 * products. Quantized experts take the direct kernels for a few tokens
 * and the panels for more, as matmul.c does; a row's input is converted
 * (and packed for the panels) once for both up and gate where their types
 * agree, where separate products converted it for each.
 *
 * Counted (uprobes on libgomp, bench_runtime -t 2 -s tg -r 1: 33 decode
 * tokens of the 4-layer mixtral fixtures): OpenMP regions a token 49 -> 29,
 * and on Q4_K_M (with kiln_direct_rows4's loop made `nowait`) barrier
 * calls 164 -> 58 a token; a pp512 call 144 -> 56 regions. Measured idle
 * (bench_runtime -t 2 -r 20 and llama-bench in turns, best of 3 rounds,
 * kiln t/s / llama.cpp t/s, before -> after): mixtral-f32 pp512 0.81 ->
 * 0.94, tg32 0.87 -> 0.94; mixtral-Q4_K_M pp512 0.97 -> 1.07, tg32 0.86 ->
 * 1.15. */
#include "moe_exec.h"

#include "kernels.h"
#include "par.h"

#include "../core/types.h"

#include <omp.h>
#include <string.h>

/* One expert matrix (up, gate or down) as the region runs it. */
typedef struct moe_mat {
    const kiln_tensor *t;
    uint32_t type;
    const kiln_qtype *qt;     /* quantized weights; NULL for F32 / F16 / BF16 */
    int64_t n_in, n_out, row_bytes, slab_bytes;
    int64_t act_row;          /* bytes of one input row in the vec_dot_type */
    kiln_fkernel fk;          /* float weights: the vec_dot kernel */
    const kiln_kernels *k;
    kiln_korder order;        /* quantized weights: kiln_expert_order's, */
    kiln_qrow_fn direct;      /* the direct kernels (kiln_takes_direct) */
    kiln_qrows_fn rows;
    kiln_qpanel_fn panel;     /* or the panels */
    int64_t panel_bytes;
    size_t scratch;           /* bytes of fk's per-thread scratch */
} moe_mat;

/* Plans t's products: false when no kernel of the table runs them inside
 * the region. */
static bool plan(moe_mat *p, const kiln_tensor *t) {
    const kiln_kernels *k = t ? kiln_kernels_get(t->type) : NULL;
    if (!k) return false;
    const kiln_isa_kernels *ik = &k->isa[kiln_isa_now()];
    *p = (moe_mat){.t = t, .type = t->type, .n_in = t->ne[0], .n_out = t->ne[1], .k = k};
    p->row_bytes = (int64_t)kiln_type_row_bytes(t->type, (uint64_t)p->n_in);
    p->slab_bytes = p->row_bytes * p->n_out;
    if (!k->qt.block) {
        p->fk = ik->vec;
        p->act_row = p->n_in * (int64_t)sizeof(float);
        p->scratch = p->fk.scratch ? kiln_lines((size_t)p->fk.scratch(p->type, p->n_in) * sizeof(float)) : 0;
        return p->fk.run != NULL;
    }
    p->qt = &k->qt;
    if (p->n_in % p->qt->block) return false;
    p->order = kiln_expert_order(k, p->n_out);
    p->direct = ik->direct[p->order];
    p->rows = kiln_rows_kernel(k, p->order, p->n_in);
    p->panel = ik->panel[p->order];
    p->panel_bytes = p->panel ? kiln_panel_bytes(p->qt, p->n_in) : 0;
    p->act_row = p->n_in / p->qt->block * p->qt->act_bytes;
    return p->direct || p->panel; /* neither: the reference rows, matmul.c's */
}

/* True when an expert's product of m tokens takes the panels, as in
 * matmul.c. */
static bool panels_for(const moe_mat *p, int64_t m) {
    return p->qt && p->panel && !kiln_takes_direct(p->k, p->order, m);
}

/* Where one matrix's inputs lie: a converted row of act_row bytes for each
 * routed row and, for the panels, the packed layout of the same rows. */
typedef struct moe_in {
    uint8_t *act;
    uint8_t *u;
    float *d;
    int16_t *bs;
} moe_in;

/* Row i of x in p's vec_dot_type (what matmul.c makes of it), and packed
 * for the panels when `pack`. */
static void to_act(const moe_mat *p, const float *x, const moe_in *in, int64_t i, bool pack) {
    void *act = in->act + i * p->act_row;
    if (!p->qt) {
        kiln_act_round(p->type, x, act, p->n_in);
        return;
    }
    kiln_act_row(p->qt, x, act, p->n_in);
    if (pack) {
        const int64_t nb = p->n_in / p->qt->block;
        kiln_pact_pack(p->qt, act, p->n_in, in->u + i * p->n_in, in->d + i * nb,
                       in->bs ? in->bs + i * (p->n_in / 16) : NULL);
    }
}

/* Expert e's product of p on its m input rows, rows r0.. of `in` (r0 = 0
 * and m = 1 for one token's own row), into y (m rows of n_out): its rows
 * shared by the team, no barrier at the end. */
static void expert_product(const moe_mat *p, int e, const moe_in *in, int64_t r0, int64_t m, float *y,
                           uint8_t *mine) {
    const uint8_t *w = p->t->data + (uint64_t)e * (uint64_t)p->slab_bytes;
    const uint8_t *act = in->act + r0 * p->act_row;
    if (!p->qt) {
        p->fk.run(p->type, w, p->row_bytes, (const float *)act, p->n_in, p->n_out, m, y,
                  p->scratch ? (float *)mine : NULL);
    } else if (!panels_for(p, m)) {
        kiln_direct_rows4(p->rows, p->direct, p->qt, w, p->n_in, p->n_out, act, m, y);
    } else {
        const int64_t nb = p->n_in / p->qt->block;
        const kiln_pact A = {in->u + r0 * p->n_in, in->d + r0 * nb, in->bs ? in->bs + r0 * (p->n_in / 16) : NULL,
                             p->n_in, nb};
#pragma omp for schedule(static) nowait
        for (int64_t b = 0; b < p->n_out; b += KILN_PANEL) {
            const int nr = p->n_out - b < KILN_PANEL ? (int)(p->n_out - b) : KILN_PANEL;
            kiln_panel_pack(p->qt, w, p->n_in, p->n_out, b, mine);
            p->panel(mine, &A, 0, m, y + b, p->n_out, nr);
        }
    }
}

/* The layer's three matrices. */
typedef struct moe_plan {
    moe_mat up, gate, down;
} moe_plan;

static bool plan_layer(const kiln_ctx *c, const kiln_layer *L, moe_plan *pl) {
    const kiln_hparams *hp = &c->m->hp;
    if (c->p.mode != KILN_NUM_GGML || c->p.hook || c->p.output_hook || hp->arch == KILN_ARCH_GPTOSS ||
        L->ffn_up_exps_b || L->ffn_gate_exps_b || L->ffn_down_exps_b || hp->n_expert <= 0 ||
        hp->n_expert_used <= 0)
        return false;
    return plan(&pl->up, L->ffn_up_exps) && plan(&pl->gate, L->ffn_gate_exps) && plan(&pl->down, L->ffn_down_exps) &&
           pl->gate.n_in == pl->up.n_in && pl->gate.n_out == pl->up.n_out && pl->down.n_in == pl->up.n_out &&
           pl->down.n_out == pl->up.n_in && pl->up.n_in == hp->n_embd;
}

bool kiln_moe_exec_fits(const kiln_ctx *c, const kiln_layer *L) {
    moe_plan pl;
    return plan_layer(c, L, &pl);
}

/* A matrix's input buffers laid out from *at in the shared part: R rows
 * converted, and packed when `pack` (offsets; made pointers once the
 * arena is had). */
typedef struct in_layout {
    size_t act, u, d, bs;
} in_layout;

static in_layout lay_in(const moe_mat *p, int64_t R, bool pack, size_t *at) {
    in_layout l = {*at, 0, 0, 0};
    *at += kiln_lines((size_t)(R * p->act_row));
    if (pack) {
        const int64_t nb = p->n_in / p->qt->block;
        l.u = *at;
        l.d = l.u + kiln_lines((size_t)(R * p->n_in));
        l.bs = l.d + kiln_lines((size_t)(R * nb) * sizeof(float));
        *at = l.bs + (p->qt->act_type == KILN_Q8_K ? kiln_lines((size_t)(R * (p->n_in / 16)) * sizeof(int16_t)) : 0);
    }
    return l;
}

static moe_in in_at(uint8_t *buf, in_layout l, bool pack, const moe_mat *p) {
    moe_in in = {buf + l.act, NULL, NULL, NULL};
    if (pack) {
        in.u = buf + l.u;
        in.d = (float *)(buf + l.d);
        in.bs = p->qt->act_type == KILN_Q8_K ? (int16_t *)(buf + l.bs) : NULL;
    }
    return in;
}

int kiln_moe_exec(kiln_ctx *c, const kiln_layer *L, const float *x, int64_t n, float *out, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t n_exp = hp->n_expert, k = hp->n_expert_used, d = hp->n_embd, R = n * k;
    moe_plan pl;
    if (!plan_layer(c, L, &pl)) return kiln_fail(err, NULL, NULL, -1, "MoE layer: no one-region plan");
    const moe_mat *up = &pl.up, *gate = &pl.gate, *down = &pl.down;
    const int64_t f = up->n_out;
    int64_t count[n_exp];
    memset(count, 0, sizeof count);
    for (int64_t s = 0; s < R; s++) {
        if (c->sel[s] < 0 || c->sel[s] >= n_exp)
            return kiln_fail(err, NULL, NULL, -1, "MoE layer: routed to expert %d of %lld", (int)c->sel[s],
                             (long long)n_exp);
        count[c->sel[s]]++;
    }
    bool pack_up = false, pack_gate = false, pack_down = false;
    for (int64_t e = 0; e < n_exp; e++) {
        pack_up |= count[e] && panels_for(up, count[e]);
        pack_gate |= count[e] && panels_for(gate, count[e]);
        pack_down |= count[e] && panels_for(down, count[e]);
    }
    /* gate reads up's converted (and packed) rows when it converts the
     * same way; one token (no panels): each thread converts its input
     * itself, without a barrier */
    const bool share = gate->type == up->type;
    const bool own = n == 1 && !pack_up && !pack_gate;
    const bool pack_ug = pack_up || (share && pack_gate);

    /* one piece of the arena: the routing by expert, then the rows */
    size_t at = kiln_lines((size_t)(n_exp + 1) * sizeof(int64_t));
    const size_t gs_at = at;
    at += kiln_lines((size_t)R * sizeof(int32_t));
    const size_t where_at = at;
    at += kiln_lines((size_t)R * sizeof(int32_t));
    in_layout lu = {0}, lg = {0};
    if (!own) {
        lu = lay_in(up, R, pack_ug, &at);
        lg = share ? lu : lay_in(gate, R, pack_gate, &at);
    }
    const size_t yu_at = at;
    at += kiln_lines((size_t)(R * f) * sizeof(float));
    const size_t yg_at = at;
    at += kiln_lines((size_t)(R * f) * sizeof(float));
    /* F32 down reads the SwiGLU rows in place */
    const in_layout ld = down->type == KILN_F32 ? (in_layout){yg_at, 0, 0, 0} : lay_in(down, R, pack_down, &at);
    const size_t yd_at = at;
    at += kiln_lines((size_t)(R * d) * sizeof(float));
    const size_t shared = at;
    /* per thread: the float kernels' scratch or a weight panel, then (one
     * token) the converted input rows */
    size_t work = up->scratch;
    const size_t each[] = {gate->scratch, down->scratch, kiln_lines((size_t)up->panel_bytes),
                           kiln_lines((size_t)gate->panel_bytes), kiln_lines((size_t)down->panel_bytes)};
    for (int i = 0; i < 5; i++)
        if (each[i] > work) work = each[i];
    const size_t own_u = work, own_g = own_u + (own ? kiln_lines((size_t)up->act_row) : 0);
    const size_t per_thread = own_g + (own && !share ? kiln_lines((size_t)gate->act_row) : 0);
    uint8_t *buf = kiln_kernel_arena(shared + (size_t)omp_get_max_threads() * per_thread);
    if (!buf) return kiln_fail(err, NULL, NULL, -1, "MoE layer: out of memory");

    /* rows grouped by expert, ascending, slots in order within one (as
     * moe.c gathers them); where[s]: the row of slot s */
    int64_t *off = (int64_t *)buf;
    int32_t *gs = (int32_t *)(buf + gs_at), *where = (int32_t *)(buf + where_at);
    off[0] = 0;
    for (int64_t e = 0; e < n_exp; e++) off[e + 1] = off[e] + count[e];
    for (int64_t e = 0; e < n_exp; e++) count[e] = off[e];
    for (int64_t s = 0; s < R; s++) {
        where[s] = (int32_t)count[c->sel[s]]++;
        gs[where[s]] = (int32_t)s;
    }

    float *yu = (float *)(buf + yu_at), *yg = (float *)(buf + yg_at), *yd = (float *)(buf + yd_at);
    const moe_in din = in_at(buf, ld, pack_down, down);
    const double macs = (double)R * (double)d * (double)f * 3.0;
#pragma omp parallel if (up->qt || gate->qt || down->qt || kiln_par_worth(macs))
    {
        uint8_t *mine = buf + shared + (size_t)omp_get_thread_num() * per_thread;
        /* A: the inputs in up's (and gate's) vec_dot_type */
        moe_in uin, gin;
        if (own) {
            uin = (moe_in){mine + own_u, NULL, NULL, NULL};
            gin = share ? uin : (moe_in){mine + own_g, NULL, NULL, NULL};
            to_act(up, x, &uin, 0, false);
            if (!share) to_act(gate, x, &gin, 0, false);
        } else {
            uin = in_at(buf, lu, pack_ug, up);
            gin = share ? uin : in_at(buf, lg, pack_gate, gate);
#pragma omp for schedule(static)
            for (int64_t i = 0; i < R; i++) {
                const float *xi = x + gs[i] / k * d;
                const int64_t m = off[c->sel[gs[i]] + 1] - off[c->sel[gs[i]]];
                to_act(up, xi, &uin, i, panels_for(up, m) || (share && panels_for(gate, m)));
                if (!share) to_act(gate, xi, &gin, i, panels_for(gate, m));
            }
        }
        /* B: up and gate of every expert */
        for (int64_t e = 0; e < n_exp; e++) {
            const int64_t m = off[e + 1] - off[e];
            if (m == 0) continue;
            const int64_t r0 = own ? 0 : off[e];
            expert_product(up, (int)e, &uin, r0, m, yu + off[e] * f, mine);
            expert_product(gate, (int)e, &gin, r0, m, yg + off[e] * f, mine);
        }
#pragma omp barrier
        /* C: SwiGLU into gate's rows, converted for down (F32: read in
         * place); the loop's end is the barrier */
#pragma omp for schedule(static)
        for (int64_t i = 0; i < R; i++) {
            kiln_swiglu(yg + i * f, yu + i * f, yg + i * f, 1, f, KILN_NUM_GGML);
            const int64_t m = off[c->sel[gs[i]] + 1] - off[c->sel[gs[i]]];
            if (down->type != KILN_F32) to_act(down, yg + i * f, &din, i, panels_for(down, m));
        }
        /* D: down of every expert */
        for (int64_t e = 0; e < n_exp; e++) {
            const int64_t m = off[e + 1] - off[e];
            if (m) expert_product(down, (int)e, &din, off[e], m, yd + off[e] * d, mine);
        }
#pragma omp barrier
        /* E: each token's slots, weighted, summed in slot order (as
         * kiln_moe_sum_slots adds moe.c's weighted slot outputs) */
#pragma omp for schedule(static) nowait
        for (int64_t t = 0; t < n; t++) {
            float *o = out + t * d;
            for (int64_t j = 0; j < k; j++) {
                const float wt = c->sel_w[t * k + j];
                const float *src = yd + (int64_t)where[t * k + j] * d;
                if (j == 0)
                    for (int64_t i = 0; i < d; i++) o[i] = src[i] * wt;
                else
                    for (int64_t i = 0; i < d; i++) o[i] += src[i] * wt;
            }
        }
    }
    return 0;
}
