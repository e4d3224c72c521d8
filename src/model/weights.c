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

const gguf_tensor *ph_weights_find(ph_weights *w, const char *name, const int64_t ne[4], ph_err *e) {
    const gguf_tensor *t = gguf_find_tensor(w->f, name);
    if (!t) {
        ph_err_set(e, "tensor '%s' is missing", name);
        return NULL;
    }
    if (t->ne[0] != ne[0] || t->ne[1] != ne[1] || t->ne[2] != ne[2] || t->ne[3] != ne[3]) {
        char got[96];
        ph_err_set(e, "tensor '%s' has shape %s, expected [%lld, %lld, %lld, %lld]", name,
                   shape_str(t, got, sizeof got), (long long)ne[0], (long long)ne[1], (long long)ne[2],
                   (long long)ne[3]);
        return NULL;
    }
    return t;
}

int ph_weights_mat(ph_weights *w, const char *name, int64_t n_in, int64_t n_out, bool required, ph_mat *out,
                   ph_err *e) {
    if (!required && !gguf_find_tensor(w->f, name)) return 1;
    const int64_t ne[4] = {n_in, n_out, 1, 1};
    const gguf_tensor *t = ph_weights_find(w, name, ne, e);
    if (!t) return -1;
    const ph_type_info *ti = ph_type_get(t->type);
    if (!ti->known || t->type == PH_TYPE_Q8_K)
        return ph_err_set(e, "tensor '%s' has type %s, which pinhole cannot multiply", name, ti->name);
    if ((uintptr_t)t->data % 4) /* only a file with general.alignment < 4 can do this */
        return ph_err_set(e, "tensor '%s' is not 4-byte aligned in the file; pinhole needs aligned tensors", name);
    *out = (ph_mat){t->type, n_in, n_out, t->data, ph_row_bytes(t->type, n_in), NULL};
    return 0;
}

void *ph_weights_alloc(ph_weights *w, size_t bytes, ph_err *e) {
    void **grown = realloc(w->owned, (size_t)(w->n_owned + 1) * sizeof *grown);
    if (!grown) {
        ph_err_set(e, "out of memory");
        return NULL;
    }
    w->owned = grown;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0) p = NULL;
    if (!p) {
        ph_err_set(e, "out of memory (%zu bytes for weights)", bytes);
        return NULL;
    }
    w->owned[w->n_owned++] = p;
    return p;
}

int ph_weights_pack(ph_weights *w, ph_pool *pool, ph_mat *m, bool drop_original, ph_err *e) {
    size_t bytes = ph_mat_pack_size(m);
    if (!bytes) return 0;
    void *p = ph_weights_alloc(w, bytes, e);
    if (!p) return -1;
    ph_mat_pack(pool, m, p);
    const uint8_t *d = m->data;
    if (drop_original && w->f->mapped && d >= w->f->base && d + m->row_bytes * (size_t)m->n_out <= w->f->base + w->f->size) {
        /* the mapping's pages of this matrix are no longer read: give them back
         * (the file stays mapped; a later read would fault them in again) */
        uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)m->data;
        uintptr_t lo = (a + pg - 1) / pg * pg, hi = (a + m->row_bytes * (size_t)m->n_out) / pg * pg;
        if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    }
    return 0;
}

const float *ph_weights_f32(ph_weights *w, const gguf_tensor *t, int64_t n, ph_err *e) {
    float *buf = ph_weights_alloc(w, (size_t)n * sizeof(float), e);
    if (buf) ph_dequant_row(t->type, t->data, buf, n);
    return buf;
}

int ph_weights_vec(ph_weights *w, const char *name, int64_t n, const float **out, ph_err *e) {
    const int64_t ne[4] = {n, 1, 1, 1};
    const gguf_tensor *t = ph_weights_find(w, name, ne, e);
    if (!t) return -1;
    if (t->type == PH_TYPE_F32 && (uintptr_t)t->data % sizeof(float) == 0) {
        *out = t->data; /* used in place */
        return 0;
    }
    return (*out = ph_weights_f32(w, t, n, e)) ? 0 : -1;
}

void ph_weights_free(ph_weights *w) {
    for (int i = 0; i < w->n_owned; i++) free(w->owned[i]);
    free(w->owned);
    w->owned = NULL;
    w->n_owned = 0;
}
