/* convert/stlist.h - every tensor of a model's safetensors files, in the
 * order convert_hf_to_gguf.py visits them: shards in sorted file-name
 * order (the ones model.safetensors.index.json names, or every
 * model*.safetensors), and within a shard by tensor name.
 *
 * Only headers are read. Loading checks what a sharded checkpoint can get
 * wrong: the index naming a shard that does not exist, a tensor listed in
 * the index but in no shard (or in another shard than listed), a shard
 * holding a tensor the index does not list, and a name in two shards. */
#ifndef KILN_CONVERT_STLIST_H
#define KILN_CONVERT_STLIST_H

#include "../core/safetensors.h"
#include "../core/strmap.h"
#include "source.h"

typedef struct cv_stlist {
    kiln_st_tensor *t; /* t[i].file is the source file index */
    uint64_t n;
    kiln_strmap index; /* name -> position in t */
} cv_stlist;

int cv_stlist_load(cv_source *s, cv_stlist *l, kiln_err *err);
void cv_stlist_free(cv_stlist *l);

/* Position of tensor `name`, or -1. */
int64_t cv_stlist_find(const cv_stlist *l, const char *name);

#endif
