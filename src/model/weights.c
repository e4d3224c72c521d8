#include "model/weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *shape_str(const gguf_tensor *t, char *buf, size_t n) {
    int len = snprintf(buf, n, "[%lld", (long long)t->ne[0]);
    for (uint32_t d = 1; d < t->n_dims && len > 0 && (size_t)len < n; d++)
        len += snprintf(buf + len, n - (size_t)len, ", %lld", (long long)t->ne[d]);
    if (len > 0 && (size_t)len < n) snprintf(buf + len, n - (size_t)len, "]");
    return buf;
}

const gguf_tensor *weights_find(weight_set *w, const char *name, const int64_t ne[4], ph_err *err) {
    const gguf_tensor *t = gguf_find_tensor(w->f, name);
    if (!t) {
        err_set(err, "tensor '%s' is missing", name);
        return NULL;
    }
    if (t->ne[0] != ne[0] || t->ne[1] != ne[1] || t->ne[2] != ne[2] || t->ne[3] != ne[3]) {
        char got[96];
        err_set(err, "tensor '%s' has shape %s, expected [%lld, %lld, %lld, %lld]", name,
                shape_str(t, got, sizeof got), (long long)ne[0], (long long)ne[1], (long long)ne[2],
                (long long)ne[3]);
        return NULL;
    }
    return t;
}

int weights_mat(weight_set *w, const char *name, int64_t n_in, int64_t n_out, bool required, wmat *out, ph_err *err) {
    if (!required && !gguf_find_tensor(w->f, name)) return 1;
    const int64_t ne[4] = {n_in, n_out, 1, 1};
    const gguf_tensor *t = weights_find(w, name, ne, err);
    if (!t) return -1;
    const type_info *ti = type_get(t->type);
    if (!ti->known || t->type == PH_TYPE_Q8_K)
        return err_set(err, "tensor '%s' has type %s, which pinhole cannot multiply", name, ti->name);
    if ((uintptr_t)t->data % 4) /* only a file with general.alignment < 4 can do this */
        return err_set(err, "tensor '%s' is not 4-byte aligned in the file; pinhole needs aligned tensors", name);
    *out = (wmat){t->type, n_in, n_out, t->data, type_row_bytes(t->type, n_in), NULL};
    return 0;
}

void *weights_alloc(weight_set *w, size_t bytes, ph_err *err) {
    void **grown = realloc(w->owned, (size_t)(w->n_owned + 1) * sizeof *grown);
    if (!grown) {
        err_set(err, "out of memory");
        return NULL;
    }
    w->owned = grown;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0) p = NULL;
    if (!p) {
        err_set(err, "out of memory (%zu bytes for weights)", bytes);
        return NULL;
    }
    w->owned[w->n_owned++] = p;
    return p;
}

int weights_pack(weight_set *w, tpool *pool, wmat *m, bool drop_original, ph_err *err) {
    size_t bytes = mat_pack_size(m);
    if (!bytes) return 0;
    void *p = weights_alloc(w, bytes, err);
    if (!p) return -1;
    mat_pack(pool, m, p);
    const uint8_t *d = m->data;
    if (drop_original && w->f->mapped && d >= w->f->base &&
        d + m->row_bytes * (size_t)m->n_out <= w->f->base + w->f->size) {
        /* the mapping's pages of this matrix are no longer read: give them back
         * (the file stays mapped; a later read would fault them in again) */
        uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)m->data;
        uintptr_t lo = (a + pg - 1) / pg * pg, hi = (a + m->row_bytes * (size_t)m->n_out) / pg * pg;
        if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    }
    return 0;
}

const float *weights_f32(weight_set *w, const gguf_tensor *t, int64_t n, ph_err *err) {
    float *buf = weights_alloc(w, (size_t)n * sizeof(float), err);
    if (buf) dequant_row(t->type, t->data, buf, n);
    return buf;
}

int weights_vec(weight_set *w, const char *name, int64_t n, const float **out, ph_err *err) {
    const int64_t ne[4] = {n, 1, 1, 1};
    const gguf_tensor *t = weights_find(w, name, ne, err);
    if (!t) return -1;
    if (t->type == PH_TYPE_F32 && (uintptr_t)t->data % sizeof(float) == 0) {
        *out = t->data; /* used in place */
        return 0;
    }
    return (*out = weights_f32(w, t, n, err)) ? 0 : -1;
}

void weights_free(weight_set *w) {
    for (int i = 0; i < w->n_owned; i++) free(w->owned[i]);
    free(w->owned);
    w->owned = NULL;
    w->n_owned = 0;
}

int weights_meta_u32(const gguf_file *f, const char *arch, const char *suffix, uint32_t *out, bool required,
                     ph_err *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (gguf_get_u32(f, key, out) == 0) return 0;
    if (!required) return 1;
    if (gguf_find_kv(f, key)) return err_set(err, "metadata key '%s' has the wrong type", key);
    return err_set(err, "metadata key '%s' is missing", key);
}
