/* quantize/budget.h - choosing one type per tensor so that the file fits a
 * size budget and the estimated damage is smallest.
 *
 * The problem is a multiple-choice knapsack: item i (a tensor) takes
 * exactly one of its choices (type, bytes, dkld); the sum of bytes must not
 * pass the budget; the sum of dkld (the sensitivity file's estimates, taken
 * as additive) is minimized. kiln_budget_solve() solves it in three steps:
 *
 *   1. Lagrangian relaxation: on each item's lower convex hull of
 *      (bytes, dkld), every item starts at its smallest choice and hull
 *      upgrades are taken in order of dkld saved per byte, skipping an item
 *      once its next upgrade no longer fits (the LP optimum, rounded down);
 *   2. a greedy fill of the bytes left with the single switch (any choice,
 *      hull or not) that saves the most dkld, repeated while one fits;
 *   3. a depth-first branch and bound over the items with the LP bound,
 *      started from that solution, which makes it exact unless it runs
 *      out of its node allowance (then the best solution found is kept,
 *      and the result says so).
 * Every order and tie is explicit (bytes, then dkld, then the caller's
 * choice order, then item index), so the same input gives the same plan.
 *
 * kiln_budget_solve() knows nothing of models. kiln_budget_apply() is
 * the bridge quantize_model.c calls: it turns a sensitivity file and a
 * planned model into items (tensor sizes padded as the GGUF writer pads
 * them, rows checked against the model's shapes), solves, and writes the
 * picks into the plan. */
#ifndef KILN_QUANTIZE_BUDGET_H
#define KILN_QUANTIZE_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"

typedef struct kiln_budget_choice {
    uint32_t type;   /* the caller's label (a ggml type id) */
    uint64_t bytes;  /* cost of this choice */
    double dkld;     /* estimated damage of this choice */
} kiln_budget_choice;

typedef struct kiln_budget_item {
    const kiln_budget_choice *choices;
    size_t n_choices; /* at least 1 */
} kiln_budget_item;

typedef struct kiln_budget_result {
    uint64_t bytes;      /* sum of the picked choices' bytes */
    uint64_t min_bytes;  /* the smallest achievable sum (every item's smallest choice) */
    double dkld;         /* sum of the picked choices' dkld */
    double lower_bound;  /* LP bound: no pick can have a smaller dkld sum */
    bool exact;          /* the search finished: the picks are optimal */
    uint64_t nodes;      /* branch-and-bound nodes visited */
} kiln_budget_result;

/* Node allowance of the branch and bound (deterministic, not a timer). */
#define KILN_BUDGET_MAX_NODES 2000000

/* Picks one choice per item: pick[i] indexes items[i].choices. Fails with
 * "budget N bytes is below the smallest achievable, M bytes" when even the
 * smallest choices do not fit (res->min_bytes is then still set), or on a
 * bad item (no choices, non-finite dkld). max_nodes 0 means
 * KILN_BUDGET_MAX_NODES. Returns 0 or -1. */
int kiln_budget_solve(const kiln_budget_item *items, size_t n_items, uint64_t budget, uint64_t max_nodes,
                      size_t *pick, kiln_budget_result *res, kiln_err *err);

/* Allocates types for `r`, a plan of `o->sensitivity`'s model in which
 * every tensor keeps its type (target COPY), within o->target_size bytes
 * or o->target_bpw x r->n_elements / 8 bytes for the whole file.
 * `file_bytes` is the size of the file of that plan as the writer lays
 * it out (metadata with the budget keys included), `alignment` its data
 * alignment. Every tensor with rows gets one of their types (why
 * KILN_WHY_BUDGET, dkld set); the others keep theirs. Fills
 * r->budget_bytes, file_bytes, estimated_kld, kld_lower_bound,
 * budget_exact and ftype (the _M preset, or first preset, of the type
 * holding the most weights). Rows of types that need an imatrix are left
 * out when none is given; *left_out counts them (for a warning). Fails, naming the sensitivity file
 * and line-free field, on a row for a tensor the model lacks or llama.cpp
 * does not quantize, a row whose type does not fit the row length or
 * whose bytes differ from the model's, a type kiln cannot write, or a
 * budget under the smallest file (saying its size). Returns 0 or -1. */
struct kiln_quant_opts;
struct kiln_quant_report;
int kiln_budget_apply(const struct kiln_quant_opts *o, struct kiln_quant_report *r, uint64_t file_bytes,
                      uint64_t alignment, uint64_t *left_out, kiln_err *err);


#endif
