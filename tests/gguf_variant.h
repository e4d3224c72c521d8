/* Variants of the oracle's GGUF files for the tests' refusals and
 * equivalences: a copy with one change. Header-only: each test that needs
 * it includes it. */
#ifndef PH_TESTS_GGUF_VARIANT_H
#define PH_TESTS_GGUF_VARIANT_H

#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

/* A copy of a good GGUF file with a change: a tensor dropped, a tensor
 * reshaped, a metadata key replaced or removed, an array key added. */
typedef struct variant {
    const char *drop_tensor;
    const char *reshape_tensor; /* its ne[1] grows by one */
    const char *key;            /* replaced (or removed when value is NULL) */
    const char *str_value;
    int bool_value;      /* for key when str_value is NULL: 0/1, -1 = remove */
    const char *arr_key; /* an array added (replaced): arr_n values of arr_type at arr_data */
    gguf_vtype arr_type;
    const void *arr_data;
    uint64_t arr_n;
} variant;

typedef struct copy_ctx {
    const gguf_file *src;
    const char **names; /* tensors written, in order */
} copy_ctx;

static inline int fill_tensor(void *vctx, uint64_t i, void *buf, uint64_t nbytes) {
    const copy_ctx *c = vctx;
    const gguf_tensor *t = gguf_find_tensor(c->src, c->names[i]);
    memset(buf, 0, nbytes);
    memcpy(buf, t->data, t->nbytes < nbytes ? t->nbytes : nbytes);
    return 0;
}

static inline int write_variant(const char *src_path, const char *dst_path, const variant *var) {
    ph_err e;
    gguf_file *src = gguf_open(src_path, &e);
    if (!src) return -1;
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const gguf_kv *kv = &src->kv[i];
        if ((var->key && gguf_str_eq(kv->key, var->key)) || (var->arr_key && gguf_str_eq(kv->key, var->arr_key)))
            continue;
        gguf_writer_copy_kv(w, kv);
    }
    if (var->key && var->str_value) gguf_writer_set_str(w, var->key, var->str_value);
    else if (var->key && var->bool_value >= 0) gguf_writer_set_bool(w, var->key, var->bool_value != 0);
    if (var->arr_key) gguf_writer_set_arr(w, var->arr_key, var->arr_type, var->arr_data, var->arr_n);
    copy_ctx c = {src, calloc(src->n_tensors, sizeof(char *))};
    uint64_t n = 0;
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        if (var->drop_tensor && !strcmp(t->name, var->drop_tensor)) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (var->reshape_tensor && !strcmp(t->name, var->reshape_tensor)) ne[1]++;
        gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne);
        c.names[n++] = t->name;
    }
    int rc = gguf_writer_write(w, dst_path, fill_tensor, &c, &e);
    gguf_writer_free(w);
    free(c.names);
    gguf_close(src);
    return rc;
}

#endif
