/* GGUF writer (version 3, little-endian; docs/numerics.md, GGUF container). Keys and values are
 * serialized as they are set; tensor infos are kept; gguf_writer_write lays
 * out the offsets and streams each tensor's bytes from a callback into
 * path.tmp, which is fsynced and renamed over path.
 *
 * The setters return nothing: the first error (bad argument, out of memory)
 * is remembered and reported by gguf_writer_write. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/atomic_file.h"
#include "base/strbuf.h"
#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"

#define GGUF_WRITE_VERSION     3u
#define GGUF_DEFAULT_ALIGNMENT 32u

static void put_u32(strbuf *b, uint32_t v) { strbuf_put(b, &v, 4); }
static void put_u64(strbuf *b, uint64_t v) { strbuf_put(b, &v, 8); }
static void put_str(strbuf *b, const char *s, uint64_t len) {
    put_u64(b, len);
    strbuf_put(b, s, (size_t)len);
}

typedef struct wkv {
    char *key;
    size_t key_len;
    gguf_vtype type;
    strbuf val; /* the serialized value (without key and type) */
} wkv;

typedef struct wtensor {
    char name[64];
    int type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t nbytes, offset;
} wtensor;

struct gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    int failed;
    ph_err err; /* the first error */
};

static void wfail(gguf_writer *w, const char *fmt, ...) PH_PRINTF(2, 3);
static void wfail(gguf_writer *w, const char *fmt, ...) {
    if (w->failed) return;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set(&w->err, "gguf writer: %s", msg);
    w->failed = 1;
}

/* Grows *arr (of elements of size el) to hold at least n + 1. */
static int reserve(void **arr, size_t *cap, size_t n, size_t el) {
    if (n < *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, nc * el);
    if (!p) return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

gguf_writer *gguf_writer_new(void) { return calloc(1, sizeof(gguf_writer)); }

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val.p);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

/* Stores (or replaces) key with the serialized value `val`, taking ownership
 * of its buffer. */
static void set_value(gguf_writer *w, const char *key, size_t key_len, gguf_vtype type, strbuf *val) {
    if (!key || key_len == 0) wfail(w, "empty key");
    else if (memchr(key, 0, key_len)) wfail(w, "key '%s' contains a NUL byte", key);
    else if (val->oom) wfail(w, "out of memory for the value of key '%.*s'", (int)(key_len > 64 ? 64 : key_len), key);
    if (w->failed) {
        free(val->p);
        return;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        wkv *kv = &w->kv[i];
        if (kv->key_len == key_len && memcmp(kv->key, key, key_len) == 0) {
            free(kv->val.p);
            kv->type = type;
            kv->val = *val;
            return;
        }
    }
    char *k = malloc(key_len + 1);
    if (!k || reserve((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof(wkv))) {
        free(k);
        free(val->p);
        wfail(w, "out of memory for key '%.*s'", (int)(key_len > 64 ? 64 : key_len), key);
        return;
    }
    memcpy(k, key, key_len);
    k[key_len] = '\0';
    w->kv[w->n_kv++] = (wkv){k, key_len, type, *val};
}

static void set_scalar(gguf_writer *w, const char *key, gguf_vtype t, const void *v, size_t n) {
    strbuf b = {0};
    strbuf_put(&b, v, n);
    set_value(w, key, key ? strlen(key) : 0, t, &b);
}

void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) { set_scalar(w, key, GGUF_UINT32, &v, 4); }
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) { set_scalar(w, key, GGUF_INT32, &v, 4); }
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v) { set_scalar(w, key, GGUF_FLOAT32, &v, 4); }

void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    set_scalar(w, key, GGUF_BOOL, &b, 1);
}

void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
    if (!v) {
        wfail(w, "NULL string value for key '%s'", key ? key : "(null)");
        return;
    }
    strbuf b = {0};
    put_str(&b, v, strlen(v));
    set_value(w, key, key ? strlen(key) : 0, GGUF_STRING, &b);
}

/* Serializes an array header and its elements: strings from strs[] (or,
 * when strs is NULL, from the NUL-terminated cstrs[]); anything else from
 * the packed bytes at data. */
static int put_array(gguf_writer *w, strbuf *b, const char *key, size_t key_len, gguf_vtype t, uint64_t n,
                     const void *data, const gguf_str *strs, const char *const *cstrs) {
    int kl = (int)(key_len > 64 ? 64 : key_len);
    if (t == GGUF_ARRAY || (int)t < 0 || t >= GGUF_VTYPE_COUNT) {
        wfail(w, "array '%.*s' has invalid element type %d", kl, key, (int)t);
        return -1;
    }
    put_u32(b, (uint32_t)t);
    put_u64(b, n);
    if (t == GGUF_STRING) {
        if (n && !strs && !cstrs) {
            wfail(w, "string array '%.*s' has no strings", kl, key);
            return -1;
        }
        for (uint64_t i = 0; i < n; i++) {
            if (strs) {
                put_str(b, strs[i].ptr, strs[i].len);
            } else if (cstrs[i]) {
                put_str(b, cstrs[i], strlen(cstrs[i]));
            } else {
                wfail(w, "string %" PRIu64 " of array '%.*s' is NULL", i, kl, key);
                return -1;
            }
        }
        return 0;
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(n, (uint64_t)gguf_vtype_size(t), &bytes) || bytes > SIZE_MAX) {
        wfail(w, "array '%.*s' of %" PRIu64 " elements is too large", kl, key, n);
        return -1;
    }
    if (bytes && !data) {
        wfail(w, "array '%.*s' has no data", kl, key);
        return -1;
    }
    strbuf_put(b, data, (size_t)bytes);
    return 0;
}

void gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_vtype t, const void *data, uint64_t n) {
    size_t kl = key ? strlen(key) : 0;
    strbuf b = {0};
    const char *const *cstrs = t == GGUF_STRING ? (const char *const *)data : NULL;
    if (put_array(w, &b, key ? key : "", kl, t, n, data, NULL, cstrs)) {
        free(b.p);
        return;
    }
    set_value(w, key, kl, GGUF_ARRAY, &b);
}

void gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv) {
    const char *key = kv->key.ptr ? kv->key.ptr : "";
    size_t kl = kv->key.ptr ? (size_t)kv->key.len : 0;
    strbuf b = {0};
    switch (kv->type) {
    case GGUF_UINT8:
    case GGUF_INT8:
    case GGUF_BOOL: {
        uint8_t x = (uint8_t)kv->v.u;
        strbuf_put(&b, &x, 1);
        break;
    }
    case GGUF_UINT16:
    case GGUF_INT16: {
        uint16_t x = (uint16_t)kv->v.u;
        strbuf_put(&b, &x, 2);
        break;
    }
    case GGUF_UINT32:
    case GGUF_INT32: put_u32(&b, (uint32_t)kv->v.u); break;
    case GGUF_UINT64:
    case GGUF_INT64: put_u64(&b, kv->v.u); break;
    case GGUF_FLOAT32: {
        float x = (float)kv->v.f;
        strbuf_put(&b, &x, 4);
        break;
    }
    case GGUF_FLOAT64: strbuf_put(&b, &kv->v.f, 8); break;
    case GGUF_STRING: put_str(&b, kv->v.s.ptr, kv->v.s.len); break;
    case GGUF_ARRAY:
        if (put_array(w, &b, key, kl, kv->v.arr.type, kv->v.arr.n, kv->v.arr.data, kv->v.arr.strs, NULL)) {
            free(b.p);
            return;
        }
        break;
    default: wfail(w, "key '%.*s' has invalid value type %d", (int)(kl > 64 ? 64 : kl), key, (int)kv->type); return;
    }
    set_value(w, key, kl, kv->type, &b);
}

void gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, uint32_t n_dims, const int64_t *ne) {
    size_t len = name ? strlen(name) : 0;
    if (len == 0 || len >= sizeof w->t[0].name) {
        wfail(w, "tensor name '%s' must be 1 to 63 bytes long", name ? name : "(null)");
        return;
    }
    for (size_t i = 0; i < w->n_t; i++) {
        if (strcmp(w->t[i].name, name) == 0) {
            wfail(w, "duplicate tensor name '%s'", name);
            return;
        }
    }
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    memcpy(t.name, name, len + 1);
    if (n_dims > 4 || (n_dims && !ne)) {
        wfail(w, "tensor '%s' has an invalid shape (%" PRIu32 " dimensions)", name, n_dims);
        return;
    }
    for (uint32_t j = 0; j < n_dims; j++) t.ne[j] = ne[j];
    const char *why;
    if (gguf_tensor_nbytes(type, n_dims, t.ne, &t.nbytes, &why)) {
        wfail(w, "tensor '%s' (type %d) %s", name, type, why);
        return;
    }
    if (reserve((void **)&w->t, &w->cap_t, w->n_t, sizeof(wtensor))) {
        wfail(w, "out of memory for tensor '%s'", name);
        return;
    }
    w->t[w->n_t++] = t;
}

/* ---- writing ------------------------------------------------------------------ */

/* The alignment to use: general.alignment if set (must be a UINT32 power of two). */
static int writer_alignment(gguf_writer *w, uint32_t *align) {
    *align = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0) continue;
        if (w->kv[i].type != GGUF_UINT32) {
            wfail(w, "general.alignment has type %s (it must be UINT32)", gguf_vtype_name(w->kv[i].type));
            return -1;
        }
        uint32_t a;
        memcpy(&a, w->kv[i].val.p, 4);
        if (a == 0 || (a & (a - 1)) != 0) {
            wfail(w, "general.alignment is %" PRIu32 " (it must be a nonzero power of two)", a);
            return -1;
        }
        *align = a;
    }
    return 0;
}

static uint64_t pad_len(uint64_t x, uint32_t a) { return (a - x % a) % a; }

static int write_all(FILE *fp, const void *p, size_t n) { return fwrite(p, 1, n, fp) == n ? 0 : -1; }

static int write_zeros(FILE *fp, uint64_t n) {
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (write_all(fp, zeros, k)) return -1;
        n -= k;
    }
    return 0;
}

int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *ctx, ph_err *err) {
    uint32_t align;
    if (w->failed || writer_alignment(w, &align)) {
        if (err) *err = w->err;
        return -1;
    }

    /* Offsets and the largest tensor (the size of the fill buffer). */
    uint64_t off = 0, max_bytes = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        if (__builtin_add_overflow(off, w->t[i].nbytes, &off) ||
            __builtin_add_overflow(off, pad_len(off, align), &off))
            return err_set(err, "gguf: %s: the tensor data is too large", path);
        if (w->t[i].nbytes > max_bytes) max_bytes = w->t[i].nbytes;
    }
    if (max_bytes && !fill) return err_set(err, "gguf: %s: no fill callback for the tensor data", path);
    if (max_bytes > SIZE_MAX) return err_set(err, "gguf: %s: a tensor is too large for memory", path);

    strbuf h = {0};
    strbuf_put(&h, "GGUF", 4);
    put_u32(&h, GGUF_WRITE_VERSION);
    put_u64(&h, w->n_t);
    put_u64(&h, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(&h, w->kv[i].key, w->kv[i].key_len);
        put_u32(&h, (uint32_t)w->kv[i].type);
        strbuf_put(&h, w->kv[i].val.p, w->kv[i].val.n);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(&h, t->name, strlen(t->name));
        put_u32(&h, t->n_dims);
        for (uint32_t j = 0; j < t->n_dims; j++) put_u64(&h, (uint64_t)t->ne[j]);
        put_u32(&h, (uint32_t)t->type);
        put_u64(&h, t->offset);
    }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    void *buf = max_bytes ? malloc((size_t)max_bytes) : NULL;
    if (h.oom || !tmp || (max_bytes && !buf)) {
        free(h.p);
        free(tmp);
        free(buf);
        return err_set(err, "gguf: %s: out of memory", path);
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);

    int rc = -1;
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        err_set(err, "gguf: %s: cannot create: %s", tmp, strerror(errno));
        goto out;
    }
    if (write_all(fp, h.p, h.n) || write_zeros(fp, pad_len(h.n, align))) goto io_error;
    for (size_t i = 0; i < w->n_t; i++) {
        size_t n = (size_t)w->t[i].nbytes;
        if (n == 0) continue;
        memset(buf, 0, n);
        if (fill(ctx, i, buf, n) != 0) {
            err_set(err, "gguf: %s: the data of tensor '%s' could not be produced", path, w->t[i].name);
            goto fail;
        }
        if (write_all(fp, buf, n) || write_zeros(fp, pad_len(n, align))) goto io_error;
    }
    if (fflush(fp) != 0 || fsync(fileno(fp)) != 0) goto io_error;
    int cerr = fclose(fp);
    fp = NULL;
    if (cerr != 0) goto io_error;
    if (rename(tmp, path) != 0) {
        err_set(err, "gguf: %s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        goto fail;
    }
    fsync_parent_dir(path); /* best effort: some filesystems refuse to sync folders */
    rc = 0;
    goto out;

io_error:
    err_set(err, "gguf: %s: write failed: %s", tmp, strerror(errno));
fail:
    if (fp) fclose(fp);
    unlink(tmp);
out:
    free(h.p);
    free(tmp);
    free(buf);
    return rc;
}
