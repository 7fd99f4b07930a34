/* runtime/moe.c - the mixture-of-experts FFN, as llama.cpp's
 * build_moe_ffn computes it:
 *
 *   probs   = softmax(router x)                 over all experts
 *             (gpt-oss: router x + bias, and w below the softmax of
 *             the k chosen logits; its expert biases and swiglu_oai
 *             are in gptoss.c)
 *   experts = the n_expert_used largest probs, largest first
 *   w       = their probs, divided by their sum when the architecture
 *             renormalises (llama/mixtral, qwen3moe; not qwen2moe), the
 *             sum clamped below at 2^-14 as llama.cpp does
 *   out     = sum over slots, in order, of w * down(silu(gate x) * up x)
 *
 * plus, for qwen2moe, a shared SwiGLU expert scaled by
 * sigmoid(gate_inp_shexp . x). Tokens are grouped by expert so each
 * expert's three products run once per batch on exactly the rows routed
 * to it (which is also what the imatrix hook sees). Where the kernels
 * allow (moe_exec.h: KILN_NUM_GGML, no hook, not gpt-oss) every expert of
 * the layer runs in one OpenMP region (moe_exec.c); otherwise, here, one
 * product per expert and matrix, with the same bits. */
#include "forward_impl.h"
#include "moe_exec.h"

#include "../core/types.h"
#include "vecdot.h"

#include <math.h>
#include <string.h>

/* The k largest of v[0..n) (ties go to the lower index) into idx. */
static void top_k(const float *v, int64_t n, int64_t k, int32_t *idx) {
    for (int64_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < (int32_t)n; e++) {
            bool taken = false;
            for (int64_t i = 0; i < j; i++) taken |= idx[i] == e;
            if (!taken && (best < 0 || v[e] > v[best])) best = e;
        }
        idx[j] = best;
    }
}

/* deepseek2's group-limited selection: each group scored by the sum of
 * its two best selection scores, and every expert outside the
 * n_group_used best groups masked to -inf in sel_probs. */
static void mask_groups(const kiln_hparams *hp, float *sel_probs) {
    const int64_t n_grp = hp->n_expert_groups, per = hp->n_expert / n_grp;
    float score[n_grp];
    int32_t best[n_grp], two[2];
    for (int64_t g = 0; g < n_grp; g++) {
        top_k(sel_probs + g * per, per, per < 2 ? per : 2, two);
        score[g] = per < 2 ? sel_probs[g * per] : (float)((double)sel_probs[g * per + two[0]] + (double)sel_probs[g * per + two[1]]);
    }
    top_k(score, n_grp, hp->n_group_used, best);
    for (int64_t g = 0; g < n_grp; g++) {
        bool used = false;
        for (int64_t i = 0; i < hp->n_group_used; i++) used |= best[i] == g;
        for (int64_t e = 0; e < per && !used; e++) sel_probs[g * per + e] = -INFINITY;
    }
}

/* One token's router logits to probabilities (softmax, or deepseek2's
 * sigmoid), the k best experts by those plus the selection bias (NULL:
 * none; deepseek2, which may also limit them to the best groups; sel_buf
 * holds n_expert scores), and their weights, renormalised and scaled as
 * the architecture says. */
static void route(const kiln_hparams *hp, kiln_numeric_mode mode, float *probs, const float *bias, float *sel_buf,
                  int32_t *sel, float *w) {
    const int64_t n_exp = hp->n_expert, k = hp->n_expert_used;
    if (hp->expert_gating_sigmoid) /* ggml_sigmoid: 1 / (1 + e^-x) (not kiln_sigmoid's silu(x) / x) */
        for (int64_t e = 0; e < n_exp; e++)
            probs[e] = mode == KILN_NUM_EXACT ? (float)(1.0 / (1.0 + exp(-(double)probs[e]))) : 1.0f / (1.0f + expf(-probs[e]));
    else if (!hp->expert_softmax_weight)
        kiln_softmax(probs, n_exp, 1.0f, mode);
    const float *sel_probs = probs;
    if (bias || hp->n_expert_groups > 1) {
        for (int64_t e = 0; e < n_exp; e++) sel_buf[e] = bias ? probs[e] + bias[e] : probs[e];
        if (hp->n_expert_groups > 1) mask_groups(hp, sel_buf);
        sel_probs = sel_buf;
    }
    top_k(sel_probs, n_exp, k, sel);
    for (int64_t j = 0; j < k; j++) w[j] = probs[sel[j]];
    if (hp->expert_softmax_weight) kiln_softmax(w, k, 1.0f, mode); /* gpt-oss: over the k logits */
    if (hp->expert_weights_norm) {
        double sum = 0.0; /* as ggml_sum_rows: in double, rounded to float */
        for (int64_t j = 0; j < k; j++) sum += (double)w[j];
        float s = (float)sum;
        if (s < 6.103515625e-5f) s = 6.103515625e-5f;
        for (int64_t j = 0; j < k; j++) w[j] = w[j] / s;
    }
    if (hp->expert_weights_scale != 0.0f && hp->expert_weights_scale != 1.0f) /* deepseek2 */
        for (int64_t j = 0; j < k; j++) w[j] *= hp->expert_weights_scale;
}

/* y = expert e's slab of w times the m rows of x, as ggml_mul_mat_id
 * computes it: F32 / F16 / BF16 weights in KILN_NUM_GGML mode by the
 * type's ggml_vec_dot for every (row, token), never by tinyBLAS as a
 * dense product of as many rows would be; everything else as
 * kiln_fwd_matmul. */
static int expert_matmul(kiln_ctx *c, const kiln_tensor *w, int e, const float *x, int64_t m, float *y,
                         kiln_err *err) {
    const uint32_t t = w->type;
    if (c->p.mode != KILN_NUM_GGML || (t != KILN_F32 && t != KILN_F16 && t != KILN_BF16))
        return kiln_fwd_matmul(c, w, e, x, m, y, err);
    if (kiln_fwd_matmul(c, w, e, x, m, NULL, err) < 0) return -1; /* the hook alone */
    const int64_t n_in = w->ne[0], n_out = w->ne[1];
    const uint8_t *slab = w->data + (uint64_t)e * kiln_type_row_bytes(t, (uint64_t)n_in) * (uint64_t)n_out;
    const float *xa = x;
    if (t != KILN_F32) { /* ggml's vec_dot_type: the activations in the weight's precision */
        for (int64_t i = 0; i < m; i++) kiln_act_round(t, x + i * n_in, c->ex_round + i * n_in, n_in);
        xa = c->ex_round;
    }
    if (kiln_fgemm_ggml(t, slab, n_in, n_out, xa, m, y, true) == 0) {
        kiln_fwd_observe(c, w, e, y, m);
        return 0;
    }
    return kiln_fail(err, NULL, NULL, -1, "%.*s: expert product failed (out of memory)", (int)w->name.len,
                     w->name.ptr);
}

/* Runs expert e on the `m` (token, slot) pairs in c->rows and stores each
 * weighted output in c->slot_out. */
static int run_expert(kiln_ctx *c, const kiln_layer *L, int e, const float *x, int64_t m, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t d = hp->n_embd, f = hp->n_ff_exp, k = hp->n_expert_used;
    for (int64_t i = 0; i < m; i++) memcpy(c->ex_in + i * d, x + (c->rows[i] / k) * d, (size_t)d * sizeof(float));
    if (expert_matmul(c, L->ffn_up_exps, e, c->ex_in, m, c->ff_b, err) < 0 ||
        expert_matmul(c, L->ffn_gate_exps, e, c->ex_in, m, c->ff_a, err) < 0)
        return -1;
    kiln_expert_bias(c->ff_b, L->ffn_up_exps_b, e, m, f); /* gpt-oss's biases */
    kiln_expert_bias(c->ff_a, L->ffn_gate_exps_b, e, m, f);
    if (hp->arch == KILN_ARCH_GPTOSS) kiln_swiglu_oai(c->ff_a, c->ff_b, c->ff_a, m * f, c->p.mode);
    else kiln_swiglu(c->ff_a, c->ff_b, c->ff_a, m, f, c->p.mode);
    if (expert_matmul(c, L->ffn_down_exps, e, c->ff_a, m, c->ex_out, err) < 0) return -1;
    kiln_expert_bias(c->ex_out, L->ffn_down_exps_b, e, m, d);
    for (int64_t i = 0; i < m; i++) {
        const float wt = c->sel_w[c->rows[i]];
        const float *src = c->ex_out + i * d;
        float *dst = c->slot_out + (int64_t)c->rows[i] * d;
        for (int64_t j = 0; j < d; j++) dst[j] = src[j] * wt;
    }
    return 0;
}

int64_t kiln_moe_rows_of(const int32_t *sel, int64_t n_slots, int e, int32_t *rows) {
    int64_t m = 0;
    for (int64_t i = 0; i < n_slots; i++)
        if (sel[i] == e) rows[m++] = (int32_t)i;
    return m;
}

void kiln_moe_sum_slots(const float *slot_out, int64_t n, int64_t k, int64_t d, float *out) {
    for (int64_t t = 0; t < n; t++) {
        float *o = out + t * d;
        memcpy(o, slot_out + t * k * d, (size_t)d * sizeof(float));
        for (int64_t j = 1; j < k; j++) kiln_vec_add(o, slot_out + (t * k + j) * d, d);
    }
}

/* qwen2moe: out += sigmoid(gate_inp_shexp . x) * swiglu_ffn_shexp(x). */
static int shared_expert(kiln_ctx *c, const kiln_layer *L, const float *x, int64_t n, float *out,
                         kiln_err *err) {
    const int64_t d = c->m->hp.n_embd;
    if (kiln_fwd_matmul(c, L->ffn_gate_inp_shexp, -1, x, n, c->sh_gate, err) < 0 ||
        kiln_ffn(c, L->ffn_gate_shexp, NULL, L->ffn_up_shexp, NULL, L->ffn_down_shexp, NULL, x, n,
                 c->ex_out, err) < 0)
        return -1;
    for (int64_t t = 0; t < n; t++) {
        const float g = kiln_sigmoid(c->sh_gate[t], c->p.mode);
        for (int64_t j = 0; j < d; j++) out[t * d + j] += c->ex_out[t * d + j] * g;
    }
    return 0;
}

int kiln_moe_block(kiln_ctx *c, int64_t il, const float *x, int64_t n, float *out, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const kiln_layer *L = &c->m->layers[il];
    const int64_t d = hp->n_embd, n_exp = hp->n_expert, k = hp->n_expert_used;
    if (kiln_fwd_matmul(c, L->ffn_gate_inp, -1, x, n, c->router, err) < 0) return -1;
    kiln_fwd_bias(c->router, L->ffn_gate_inp_b, n, n_exp); /* gpt-oss */
    const float *bias = L->exp_probs_b ? (const float *)L->exp_probs_b->data : NULL;
    float sel_buf[n_exp]; /* deepseek2's selection scores */
    for (int64_t t = 0; t < n; t++)
        route(hp, c->p.mode, c->router + t * n_exp, bias, sel_buf, c->sel + t * k, c->sel_w + t * k);
    if (kiln_moe_exec_fits(c, L)) { /* every expert in one region (moe_exec.c) */
        if (kiln_moe_exec(c, L, x, n, out, err) < 0) return -1;
    } else {
        for (int e = 0; e < (int)n_exp; e++) {
            int64_t m = kiln_moe_rows_of(c->sel, n * k, e, c->rows);
            if (m > 0 && run_expert(c, L, e, x, m, err) < 0) return -1;
        }
        kiln_moe_sum_slots(c->slot_out, n, k, d, out);
    }
    if (L->ffn_gate_inp_shexp) return shared_expert(c, L, x, n, out, err);
    return 0;
}
