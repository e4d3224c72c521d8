/* libFuzzer target for the GGUF reader: parses the input with
 * gguf_open_mem, then reads every byte the result points at (keys, values,
 * array elements, tensor data) and looks each key and tensor up again, so
 * ASan flags any pointer the reader let out of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static volatile uint64_t sink;

static uint64_t touch(const void *p, uint64_t n) {
    uint64_t h = n;
    for (uint64_t i = 0; i < n; i++) h = h * 31 + ((const uint8_t *)p)[i];
    return h;
}

static uint64_t touch_kv(const gguf_file *f, const gguf_kv *kv) {
    uint64_t h = touch(kv->key.ptr, kv->key.len);
    /* Keys are NUL-free, so a NUL-terminated copy must find this very kv. */
    char *key = malloc(kv->key.len + 1);
    if (key) {
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = '\0';
        if (gguf_find_kv(f, key) != kv) abort();
        uint32_t u;
        int64_t i;
        float x;
        bool b;
        gguf_str s;
        h += (uint64_t)gguf_get_u32(f, key, &u) + (uint64_t)gguf_get_i64(f, key, &i) +
             (uint64_t)gguf_get_f32(f, key, &x) + (uint64_t)gguf_get_bool(f, key, &b) +
             (uint64_t)gguf_get_str(f, key, &s);
        free(key);
    }
    switch (kv->type) {
    case GGUF_STRING: return h + touch(kv->v.s.ptr, kv->v.s.len);
    case GGUF_ARRAY:
        if (kv->v.arr.type == GGUF_STRING) {
            for (uint64_t i = 0; i < kv->v.arr.n; i++) h += touch(kv->v.arr.strs[i].ptr, kv->v.arr.strs[i].len);
        } else {
            for (uint64_t i = 0; i < kv->v.arr.n; i++) {
                int64_t v;
                float x;
                if (gguf_arr_i64(kv, i, &v) == 0) h += (uint64_t)v;
                if (gguf_arr_f32(kv, i, &x) == 0) h += (uint64_t)(x == x);
            }
            if (kv->v.arr.type == GGUF_BOOL) h += touch(kv->v.arr.data, kv->v.arr.n);
        }
        return h;
    default: return h + kv->v.u;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ph_err e;
    gguf_file *f = gguf_open_mem(data, size, &e);
    if (!f) {
        if (!memchr(e.msg, 0, sizeof e.msg) || strncmp(e.msg, "gguf: <memory>: ", 16) != 0) abort();
        return 0;
    }
    uint64_t h = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) h += touch_kv(f, &f->kv[i]);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (gguf_find_tensor(f, t->name) != t) abort();
        h += touch(t->name, strlen(t->name)) + touch(t->data, t->nbytes);
    }
    sink = h;
    gguf_close(f);
    return 0;
}
