/* runtime/deepseek4_ffn.c - DeepSeek-V4's FFN as llama.cpp's
 * build_moe_ffn and build_ffn compute it for arch deepseek4:
 *
 *   probs   = sqrt(softplus(router x))                   all experts
 *   experts = tid2eid[token] in the first hash_layer_count blocks, else
 *             the n_expert_used largest probs + bias, largest first
 *   w       = their probs / their sum (sum clamped below at 2^-14),
 *             times expert_weights_scale
 *   expert  = down(silu(min(gate x, L)) * clamp(up x, -L, L))
 *   out     = sum over slots, in order, of w * expert
 *             + the shared expert, clamped the same way (its own L)
 *
 * Tokens are grouped by expert so each expert's products run once per
 * batch on the rows routed to it, as ggml_mul_mat_id does. */
#include "deepseek4.h"

#include "forward_impl.h"

#include "../core/types.h"

#include <math.h>
#include <string.h>

/* ggml's softplus: x past 20, else log(1 + e^x) */
static float softplus(float x) {
    return x > 20.0f ? x : logf(1.0f + expf(x));
}

/* The k largest of v[0..n) (ties to the lower index), largest first. */
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

/* One token's selection and weights from its router logits (overwritten
 * with the probabilities). hash: the token's expert ids, else NULL. */
static void route(const kiln_hparams *hp, float *probs, const float *bias, const int32_t *hash, int32_t *sel,
                  float *w) {
    const int64_t n_exp = hp->n_expert, k = hp->n_expert_used;
    for (int64_t e = 0; e < n_exp; e++) probs[e] = sqrtf(softplus(probs[e]));
    if (hash) {
        memcpy(sel, hash, (size_t)k * sizeof *sel);
    } else {
        float biased[n_exp];
        for (int64_t e = 0; e < n_exp; e++) biased[e] = probs[e] + bias[e];
        top_k(biased, n_exp, k, sel);
    }
    for (int64_t j = 0; j < k; j++) w[j] = probs[sel[j]];
    if (hp->expert_weights_norm) {
        double sum = 0.0; /* ggml_sum_rows: in double, rounded to float */
        for (int64_t j = 0; j < k; j++) sum += (double)w[j];
        float s = (float)sum;
        if (s < 6.103515625e-5f) s = 6.103515625e-5f;
        for (int64_t j = 0; j < k; j++) w[j] = w[j] / s;
    }
    if (hp->expert_weights_scale != 0.0f && hp->expert_weights_scale != 1.0f)
        for (int64_t j = 0; j < k; j++) w[j] *= hp->expert_weights_scale;
}

/* silu(min(g, L)) * clamp(u, -L, L) over m rows of f, into g (no clamp
 * when L <= 1e-6, as llama.cpp). */
static void clamped_swiglu(kiln_ctx *c, float *g, float *u, int64_t m, int64_t f, float limit) {
    if (limit > 1e-6f)
        for (int64_t i = 0; i < m * f; i++) {
            u[i] = fmaxf(fminf(u[i], limit), -limit);
            g[i] = fminf(g[i], limit);
        }
    kiln_swiglu(g, u, g, m, f, c->p.mode);
}

/* Expert e on the m (token, slot) pairs in c->rows; weighted outputs to c->slot_out. */
static int run_expert(kiln_ctx *c, const kiln_ds4_layer *L, int e, const float *x, int64_t m, kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const int64_t d = hp->n_embd, f = hp->n_ff_exp, k = hp->n_expert_used;
    for (int64_t i = 0; i < m; i++) memcpy(c->ex_in + i * d, x + (c->rows[i] / k) * d, (size_t)d * sizeof(float));
    if (kiln_fwd_matmul(c, L->up_exps, e, c->ex_in, m, c->ff_b, err) < 0 ||
        kiln_fwd_matmul(c, L->gate_exps, e, c->ex_in, m, c->ff_a, err) < 0)
        return -1;
    clamped_swiglu(c, c->ff_a, c->ff_b, m, f, L->swiglu_clamp_exp);
    if (kiln_fwd_matmul(c, L->down_exps, e, c->ff_a, m, c->ex_out, err) < 0) return -1;
    for (int64_t i = 0; i < m; i++) {
        const float wt = c->sel_w[c->rows[i]];
        const float *src = c->ex_out + i * d;
        float *dst = c->slot_out + (int64_t)c->rows[i] * d;
        for (int64_t j = 0; j < d; j++) dst[j] = src[j] * wt;
    }
    return 0;
}

/* ggml_mul_mat_id multiplies float experts by vec_dot for every (row,
 * token), which kiln_fwd_matmul's dense order is not: refused (but in
 * --exact mode). */
static int check_expert_type(const kiln_tensor *w, kiln_err *err) {
    if (w->type == KILN_F32 || w->type == KILN_F16 || w->type == KILN_BF16)
        return kiln_fail(err, NULL, NULL, -1, "%.*s: float experts (%s) are not supported for deepseek4",
                         (int)w->name.len, w->name.ptr, kiln_type_name(w->type));
    return 0;
}

int kiln_ds4_ffn(kiln_ctx *c, int64_t il, const int32_t *tokens, const float *x, int64_t n, float *out,
                 kiln_err *err) {
    const kiln_hparams *hp = &c->m->hp;
    const kiln_ds4_layer *L = &c->m->ds4->layers[il];
    const int64_t d = hp->n_embd, n_exp = hp->n_expert, k = hp->n_expert_used, fs = hp->n_ff_shexp;
    if (c->p.mode != KILN_NUM_EXACT && /* --exact has no ggml order to follow */
        (check_expert_type(L->up_exps, err) < 0 || check_expert_type(L->gate_exps, err) < 0 ||
         check_expert_type(L->down_exps, err) < 0))
        return -1;
    if (kiln_ds4_matmul(c, L->ffn_gate_inp, x, n, c->router, err) < 0) return -1;
    const float *bias = L->exp_probs_b ? (const float *)L->exp_probs_b->data : NULL;
    const int32_t *hash = L->tid2eid ? (const int32_t *)L->tid2eid->data : NULL;
    for (int64_t t = 0; t < n; t++)
        route(hp, c->router + t * n_exp, bias, hash ? hash + (int64_t)tokens[t] * k : NULL, c->sel + t * k,
              c->sel_w + t * k);
    for (int e = 0; e < (int)n_exp; e++) {
        int64_t m = kiln_moe_rows_of(c->sel, n * k, e, c->rows);
        if (m > 0 && run_expert(c, L, e, x, m, err) < 0) return -1;
    }
    kiln_moe_sum_slots(c->slot_out, n, k, d, out);
    /* the shared expert, then ffn_out = moe_out + shexp */
    if (kiln_ds4_matmul(c, L->up_shexp, x, n, c->ff_b, err) < 0 ||
        kiln_ds4_matmul(c, L->gate_shexp, x, n, c->ff_a, err) < 0)
        return -1;
    clamped_swiglu(c, c->ff_a, c->ff_b, n, fs, L->swiglu_clamp_shexp);
    if (kiln_ds4_matmul(c, L->down_shexp, c->ff_a, n, c->ex_out, err) < 0) return -1;
    kiln_vec_add(out, c->ex_out, n * d);
    return 0;
}
