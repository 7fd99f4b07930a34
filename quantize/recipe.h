/* quantize/recipe.h - quantization recipes: per-tensor-class type choices
 * kept in a text file, as antirez's ds4 quantizer offers them on its command
 * line (routed experts w1/w2/w3, shared experts, attention projections, the
 * dense FFN, output, embeddings), for any GGUF model.
 *
 * A recipe is one rule per line, first match wins:
 *
 *     # comment (from '#' at the start of a field to the end of the line)
 *     CLASS            [layers=SPEC]  TYPE
 *     /REGEX/          [layers=SPEC]  TYPE
 *
 * CLASS is a name from kiln_recipe_classes (the one table, printed by
 * `kiln quantize --list-classes`); /REGEX/ is a PCRE2 pattern searched in
 * the GGUF tensor name, as --tensor-type takes it. SPEC is a set of block
 * numbers, "37-42" or "0,3,10-12": only tensors of those blocks (blk.N.)
 * match. TYPE is any type kiln quantizes to (Q4_K, IQ2_XXS, Q8_0, F16...).
 *
 * A recipe is not a second rule engine: each rule is expanded into one
 * --tensor-type REGEX=TYPE override (quantize/policy.h), appended after the
 * command line's own, so the policy's first-match order decides. Rules
 * only name types; what is not matched gets the target preset's choice,
 * and tensors the policy never quantizes (norms, 1-D) are never touched.
 *
 * Every error names FILE:LINE and the bad field, and the whole file is
 * checked before anything is quantized. */
#ifndef KILN_QUANTIZE_RECIPE_H
#define KILN_QUANTIZE_RECIPE_H

#include <stdint.h>

#include "../core/error.h"
#include "policy.h"

/* A tensor class: the name a recipe uses and the GGUF names it covers. */
typedef struct kiln_recipe_class {
    const char *name;  /* "experts.routed" */
    const char *regex; /* PCRE2 over the whole name; a class of blocks starts "^blk\.\d+\." */
    const char *what;  /* for people: what the class is, in llama.cpp and ds4 terms */
} kiln_recipe_class;

/* The classes, ending with a {NULL} row. */
extern const kiln_recipe_class kiln_recipe_classes[];

/* The class named `name`, or NULL. */
const kiln_recipe_class *kiln_recipe_class_find(const char *name);

/* Expands one rule into the override regex it stands for. `subject` is a
 * class name or "/REGEX/", `layers` the SPEC after "layers=" or NULL.
 * Returns a malloc'd pattern, or NULL with a message whose FILE part is
 * `where` ("x.recipe:5") and whose FIELD is "class", "regex" or "layers". */
char *kiln_recipe_rule_regex(const char *subject, const char *layers, const char *where, kiln_err *err);

/* Reads the recipe at `path` and appends one override per rule, in file
 * order, to *ov (realloc'd; *n updated; the caller frees each with
 * kiln_override_free, then *ov). Returns the number of rules appended, or
 * -1 with a "FILE:LINE: FIELD: ..." message; on error nothing is appended
 * (*ov may have been reallocated, *n is unchanged). */
int kiln_recipe_load(const char *path, kiln_type_override **ov, uint32_t *n, kiln_err *err);

#endif
