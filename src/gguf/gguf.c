/* GGUF reader (docs/numerics.md, GGUF container). The whole file is validated at open: every
 * count, length, dimension and offset is checked against the bytes that are
 * actually there, with overflow-checked arithmetic, before anything is
 * allocated or dereferenced. After a successful open every pointer in the
 * result (strings, arrays, tensor data) lies inside the mapping. */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf_internal.h"
#include "kernels/types.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pinhole reads GGUF (little-endian) data in place and needs a little-endian host"
#endif

#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_NAME          64 /* tensor names are < 64 bytes (ggml's GGML_MAX_NAME) */
#define GGUF_MAX_DIMS          4
/* The smallest encodings: a kv is a key (8-byte length + >= 1 byte), a type
 * (4) and a value (>= 1); a tensor info is a name (8 + >= 1), n_dims (4, may
 * be 0), a type (4) and an offset (8). Counts are checked against these
 * before anything is allocated. */
#define GGUF_MIN_KV_BYTES      14u
#define GGUF_MIN_TENSOR_BYTES  25u
/* Keeps index arithmetic in uint32 (the hash index stores index + 1). */
#define GGUF_MAX_COUNT         (UINT64_C(1) << 30)

/* ---- shared helpers (also used by the writer) ----------------------------- */

size_t gguf_vtype_size(gguf_vtype t) {
    switch (t) {
    case GGUF_UINT8:
    case GGUF_INT8:
    case GGUF_BOOL: return 1;
    case GGUF_UINT16:
    case GGUF_INT16: return 2;
    case GGUF_UINT32:
    case GGUF_INT32:
    case GGUF_FLOAT32: return 4;
    case GGUF_UINT64:
    case GGUF_INT64:
    case GGUF_FLOAT64: return 8;
    default: return 0; /* STRING, ARRAY, unknown */
    }
}

int gguf_tensor_nbytes(int type, uint32_t n_dims, const int64_t *ne, uint64_t *nbytes, const char **why) {
    if (n_dims > GGUF_MAX_DIMS) {
        *why = "has more than 4 dimensions";
        return -1;
    }
    const type_info *ti = type_get(type);
    if (!ti->known || ti->block_elems <= 0 || ti->block_bytes <= 0) {
        *why = "has a type pinhole does not support";
        return -1;
    }
    /* Every dimension and the product of the nonzero ones must fit in int64,
     * so that consumers can multiply any subset of them safely. */
    uint64_t elems = 1;
    for (uint32_t j = 0; j < n_dims; j++) {
        if (ne[j] < 0) {
            *why = "has a negative dimension";
            return -1;
        }
        if (ne[j] > 0 && __builtin_mul_overflow(elems, (uint64_t)ne[j], &elems)) elems = UINT64_MAX;
        if (elems > (uint64_t)INT64_MAX) {
            *why = "has too many elements (the count overflows)";
            return -1;
        }
    }
    int64_t ne0 = n_dims > 0 ? ne[0] : 1;
    if (ne0 % ti->block_elems != 0) {
        *why = "has ne[0] that is not a multiple of its type's block size";
        return -1;
    }
    uint64_t n = (uint64_t)(ne0 / ti->block_elems);
    int over = __builtin_mul_overflow(n, (uint64_t)ti->block_bytes, &n);
    for (uint32_t j = 1; j < n_dims; j++) over |= __builtin_mul_overflow(n, (uint64_t)ne[j], &n);
    if (over) {
        *why = "is too large (its byte size overflows)";
        return -1;
    }
    *nbytes = n;
    return 0;
}

/* ---- the cursor ------------------------------------------------------------ */

typedef struct rd {
    const uint8_t *p;
    uint64_t size, pos;
    const char *name; /* the path or "<memory>", for messages */
    ph_err *err;
} rd;

static int fail(rd *r, const char *fmt, ...) PH_PRINTF(2, 3);
static int fail(rd *r, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set(r->err, "gguf: %s: %s", r->name, msg);
    return -1;
}

/* A printable rendering of a (possibly binary, possibly huge) string for
 * messages: at most 60 bytes, anything but printable ASCII shown as '?'. */
static const char *show(char buf[72], const char *p, uint64_t len) {
    uint64_t n = len > 60 ? 60 : len;
    for (uint64_t i = 0; i < n; i++) buf[i] = (p[i] >= 0x20 && p[i] < 0x7f) ? p[i] : '?';
    strcpy(buf + n, len > n ? "..." : "");
    return buf;
}

static uint64_t remain(const rd *r) { return r->size - r->pos; }

static int need(rd *r, uint64_t n, const char *what) {
    if (remain(r) < n)
        return fail(r,
                    "file is truncated: %s at offset %" PRIu64 " needs %" PRIu64 " bytes but only %" PRIu64 " remain",
                    what, r->pos, n, remain(r));
    return 0;
}

static int rd_u32(rd *r, uint32_t *v, const char *what) {
    if (need(r, 4, what)) return -1;
    memcpy(v, r->p + r->pos, 4);
    r->pos += 4;
    return 0;
}

static int rd_u64(rd *r, uint64_t *v, const char *what) {
    if (need(r, 8, what)) return -1;
    memcpy(v, r->p + r->pos, 8);
    r->pos += 8;
    return 0;
}

/* Reads a string without reporting; -1 if it does not fit (pos unchanged). */
static int rd_str_quiet(rd *r, gguf_str *s) {
    uint64_t len;
    if (remain(r) < 8) return -1;
    memcpy(&len, r->p + r->pos, 8);
    if (len > remain(r) - 8) return -1;
    s->ptr = (const char *)(r->p + r->pos + 8);
    s->len = len;
    r->pos += 8 + len;
    return 0;
}

/* Reports why the string at the cursor does not fit. */
static int str_error(rd *r, const char *what) {
    uint64_t len;
    if (rd_u64(r, &len, what)) return -1;
    return fail(
        r, "%s at offset %" PRIu64 " has length %" PRIu64 ", past the end of the file (%" PRIu64 " bytes remain)",
        what, r->pos - 8, len, remain(r));
}

static int rd_str(rd *r, gguf_str *s, const char *what) { return rd_str_quiet(r, s) == 0 ? 0 : str_error(r, what); }

/* ---- metadata ---------------------------------------------------------------- */

/* Reads a scalar of fixed-size type t into kv's union. */
static int rd_scalar(rd *r, gguf_vtype t, gguf_kv *kv, const char *key) {
    size_t sz = gguf_vtype_size(t);
    char what[160];
    snprintf(what, sizeof what, "the value of key '%s'", key);
    if (need(r, sz, what)) return -1;
    const uint8_t *p = r->p + r->pos;
    switch (t) {
    case GGUF_UINT8: kv->v.u = p[0]; break;
    case GGUF_BOOL:
        if (p[0] > 1) return fail(r, "key '%s' has BOOL value %u (must be 0 or 1)", key, p[0]);
        kv->v.u = p[0];
        break;
    case GGUF_INT8: kv->v.i = (int8_t)p[0]; break;
    case GGUF_UINT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        kv->v.u = x;
        break;
    }
    case GGUF_INT16: {
        int16_t x;
        memcpy(&x, p, 2);
        kv->v.i = x;
        break;
    }
    case GGUF_UINT32: {
        uint32_t x;
        memcpy(&x, p, 4);
        kv->v.u = x;
        break;
    }
    case GGUF_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        kv->v.i = x;
        break;
    }
    case GGUF_FLOAT32: {
        float x;
        memcpy(&x, p, 4);
        kv->v.f = x;
        break;
    }
    case GGUF_UINT64: memcpy(&kv->v.u, p, 8); break;
    case GGUF_INT64: memcpy(&kv->v.i, p, 8); break;
    case GGUF_FLOAT64: memcpy(&kv->v.f, p, 8); break;
    default: return fail(r, "internal error: %d is not a scalar type", (int)t);
    }
    r->pos += sz;
    return 0;
}

static int rd_array(rd *r, gguf_kv *kv, const char *key) {
    char what[160];
    uint32_t et;
    uint64_t n;
    snprintf(what, sizeof what, "the element type of array '%s'", key);
    if (rd_u32(r, &et, what)) return -1;
    if ((int32_t)et == GGUF_ARRAY)
        return fail(r, "key '%s' is a nested array (arrays of arrays are not supported)", key);
    if ((int32_t)et < 0 || et >= GGUF_VTYPE_COUNT)
        return fail(r, "array '%s' has unknown element type %" PRId32, key, (int32_t)et);
    snprintf(what, sizeof what, "the element count of array '%s'", key);
    if (rd_u64(r, &n, what)) return -1;
    kv->v.arr.type = (gguf_vtype)et;
    kv->v.arr.n = n;
    kv->v.arr.data = r->p + r->pos;

    if (et != GGUF_STRING) {
        uint64_t sz = gguf_vtype_size((gguf_vtype)et);
        if (n > remain(r) / sz)
            return fail(r,
                        "array '%s' claims %" PRIu64 " elements of %" PRIu64
                        " bytes, past the end of the file (%" PRIu64 " bytes remain)",
                        key, n, sz, remain(r));
        if (et == GGUF_BOOL) {
            for (uint64_t i = 0; i < n; i++)
                if (r->p[r->pos + i] > 1)
                    return fail(r, "array '%s' element %" PRIu64 " has BOOL value %u (must be 0 or 1)", key, i,
                                r->p[r->pos + i]);
        }
        r->pos += n * sz;
        return 0;
    }
    /* Each string takes at least its 8-byte length. */
    if (n > remain(r) / 8)
        return fail(r, "array '%s' claims %" PRIu64 " strings, past the end of the file (%" PRIu64 " bytes remain)",
                    key, n, remain(r));
    if (n == 0) return 0;
    kv->v.arr.strs = malloc(n * sizeof(gguf_str));
    if (!kv->v.arr.strs) return fail(r, "out of memory for the %" PRIu64 " strings of array '%s'", n, key);
    for (uint64_t i = 0; i < n; i++) {
        if (rd_str_quiet(r, &kv->v.arr.strs[i]) == 0) continue;
        snprintf(what, sizeof what, "string %" PRIu64 " of array '%s'", i, key);
        return str_error(r, what);
    }
    return 0;
}

static int rd_kv(rd *r, uint64_t idx, gguf_kv *kv) {
    char what[160], key[72];
    snprintf(what, sizeof what, "the key of kv #%" PRIu64, idx);
    if (rd_str(r, &kv->key, what)) return -1;
    if (kv->key.len == 0) return fail(r, "kv #%" PRIu64 " has an empty key", idx);
    if (memchr(kv->key.ptr, 0, kv->key.len))
        return fail(r, "the key of kv #%" PRIu64 " ('%s') contains a NUL byte", idx,
                    show(key, kv->key.ptr, kv->key.len));
    show(key, kv->key.ptr, kv->key.len);
    snprintf(what, sizeof what, "the value type of key '%s'", key);
    uint32_t t;
    if (rd_u32(r, &t, what)) return -1;
    if ((int32_t)t < 0 || t >= GGUF_VTYPE_COUNT)
        return fail(r, "key '%s' has unknown value type %" PRId32, key, (int32_t)t);
    kv->type = (gguf_vtype)t;
    if (t == GGUF_ARRAY) return rd_array(r, kv, key);
    if (t == GGUF_STRING) {
        snprintf(what, sizeof what, "the value of key '%s'", key);
        return rd_str(r, &kv->v.s, what);
    }
    return rd_scalar(r, (gguf_vtype)t, kv, key);
}

/* ---- hash index ------------------------------------------------------------- */
/* Open addressing over a power-of-two table of uint32 slots holding
 * index + 1 (0 = empty), at most half full. Used for the persistent tensor
 * index and, temporarily, to find duplicate keys. */

typedef struct keyref {
    const char *ptr;
    size_t len;
} keyref;
typedef keyref (*key_at_fn)(const void *arr, uint32_t i);

static keyref kv_key_at(const void *arr, uint32_t i) {
    const gguf_kv *kv = (const gguf_kv *)arr + i;
    return (keyref){kv->key.ptr, (size_t)kv->key.len};
}

static keyref tensor_key_at(const void *arr, uint32_t i) {
    const gguf_tensor *t = (const gguf_tensor *)arr + i;
    return (keyref){t->name, strlen(t->name)};
}

static uint64_t keyhash(const char *p, size_t n) {
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211u;
    return h;
}

static uint32_t index_cap(uint64_t n) {
    uint32_t cap = 16;
    while (cap < 2 * n) cap *= 2; /* n <= GGUF_MAX_COUNT keeps this < 2^32 */
    return cap;
}

/* The slot holding key k, or the empty slot where it would go. */
static uint32_t index_slot(const uint32_t *tab, uint32_t cap, const void *arr, key_at_fn key_at, const char *k,
                           size_t len) {
    uint32_t s = (uint32_t)keyhash(k, len) & (cap - 1);
    for (;;) {
        if (tab[s] == 0) return s;
        keyref o = key_at(arr, tab[s] - 1);
        if (o.len == len && memcmp(o.ptr, k, len) == 0) return s;
        s = (s + 1) & (cap - 1);
    }
}

/* Builds an index of n entries into *tab; returns the index of the first
 * duplicate of an earlier key, n if none, or -1 on allocation failure. */
static int64_t index_build(uint32_t **tab, uint32_t *cap, const void *arr, uint64_t n, key_at_fn key_at) {
    *cap = index_cap(n);
    *tab = calloc(*cap, sizeof(uint32_t));
    if (!*tab) return -1;
    for (uint32_t i = 0; i < n; i++) {
        keyref k = key_at(arr, i);
        uint32_t s = index_slot(*tab, *cap, arr, key_at, k.ptr, k.len);
        if ((*tab)[s] != 0) return i;
        (*tab)[s] = i + 1;
    }
    return (int64_t)n;
}

/* ---- tensors ------------------------------------------------------------------ */

static int rd_tensor(rd *r, uint64_t idx, gguf_tensor *t) {
    char what[160], name[72];
    gguf_str s = {NULL, 0}; /* (gcc -O3 cannot see that rd_str sets it on success) */
    snprintf(what, sizeof what, "the name of tensor #%" PRIu64, idx);
    if (rd_str(r, &s, what)) return -1;
    if (s.len == 0) return fail(r, "tensor #%" PRIu64 " has an empty name", idx);
    show(name, s.ptr, s.len);
    if (s.len >= GGUF_MAX_NAME)
        return fail(r, "the name of tensor #%" PRIu64 " ('%s') is %" PRIu64 " bytes long (at most %d are allowed)",
                    idx, name, s.len, GGUF_MAX_NAME - 1);
    if (memchr(s.ptr, 0, s.len))
        return fail(r, "the name of tensor #%" PRIu64 " ('%s') contains a NUL byte", idx, name);
    memcpy(t->name, s.ptr, s.len);
    t->name[s.len] = '\0';

    snprintf(what, sizeof what, "the dimension count of tensor '%s'", name);
    if (rd_u32(r, &t->n_dims, what)) return -1;
    if (t->n_dims > GGUF_MAX_DIMS)
        return fail(r, "tensor '%s' has %" PRIu32 " dimensions (at most %d are allowed)", name, t->n_dims,
                    GGUF_MAX_DIMS);
    for (int j = 0; j < GGUF_MAX_DIMS; j++) t->ne[j] = 1;
    for (uint32_t j = 0; j < t->n_dims; j++) {
        uint64_t v;
        snprintf(what, sizeof what, "dimension %" PRIu32 " of tensor '%s'", j, name);
        if (rd_u64(r, &v, what)) return -1;
        t->ne[j] = (int64_t)v;
        if (t->ne[j] < 0)
            return fail(r, "tensor '%s' has negative dimension %" PRIu32 " (%" PRId64 ")", name, j, t->ne[j]);
    }
    uint32_t type;
    snprintf(what, sizeof what, "the type of tensor '%s'", name);
    if (rd_u32(r, &type, what)) return -1;
    t->type = (int32_t)type;
    snprintf(what, sizeof what, "the offset of tensor '%s'", name);
    if (rd_u64(r, &t->offset, what)) return -1;

    const type_info *ti = type_get(t->type);
    if (!ti->known)
        return fail(r, "tensor '%s' has type %d (%s), which pinhole does not support", name, t->type, ti->name);
    const char *why;
    if (gguf_tensor_nbytes(t->type, t->n_dims, t->ne, &t->nbytes, &why))
        return fail(r, "tensor '%s' (%s, ne [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]) %s", name, ti->name,
                    t->ne[0], t->ne[1], t->ne[2], t->ne[3], why);
    return 0;
}

/* x rounded up to a multiple of the power of two a; -1 on overflow. */
static int pad_to(uint64_t x, uint32_t a, uint64_t *out) {
    uint64_t m = (uint64_t)a - 1;
    if (x > UINT64_MAX - m) return -1;
    *out = (x + m) & ~m;
    return 0;
}

/* ---- open ------------------------------------------------------------------------ */

static int parse(gguf_file *f, const char *name, ph_err *err) {
    rd r = {f->base, f->size, 0, name, err};

    if (f->size < 4 || memcmp(f->base, "GGUF", 4) != 0) {
        if (f->size < 4) return fail(&r, "file is too small to be a GGUF file (%zu bytes)", f->size);
        char m[72];
        return fail(&r, "bad magic '%s' (not a GGUF file)", show(m, (const char *)f->base, 4));
    }
    r.pos = 4;
    if (rd_u32(&r, &f->version, "the version")) return -1;
    if (f->version == 0 || f->version == 1 || f->version > 3) {
        if (f->version != 0 && (f->version & 0xffffu) == 0)
            return fail(&r,
                        "version field 0x%08" PRIx32
                        " suggests the wrong endianness (only little-endian files are supported)",
                        f->version);
        return fail(&r, "unsupported version %" PRIu32 " (versions 2 and 3 are supported)", f->version);
    }
    uint64_t nt, nk;
    if (rd_u64(&r, &nt, "the tensor count") || rd_u64(&r, &nk, "the key/value count")) return -1;
    if ((int64_t)nt < 0) return fail(&r, "tensor count %" PRId64 " is negative", (int64_t)nt);
    if ((int64_t)nk < 0) return fail(&r, "key/value count %" PRId64 " is negative", (int64_t)nk);
    uint64_t rem = remain(&r);
    if (nk > GGUF_MAX_COUNT || nt > GGUF_MAX_COUNT || nk > rem / GGUF_MIN_KV_BYTES ||
        nt > (rem - nk * GGUF_MIN_KV_BYTES) / GGUF_MIN_TENSOR_BYTES)
        return fail(&r,
                    "the header's counts (%" PRIu64 " tensors, %" PRIu64
                    " key/value pairs) cannot fit in the %" PRIu64 " bytes that follow",
                    nt, nk, rem);

    /* Allocations are bounded by the checks above (a few times the file size). */
    f->n_kv = nk;
    f->kv = calloc(nk ? nk : 1, sizeof(gguf_kv));
    f->n_tensors = nt;
    f->tensors = calloc(nt ? nt : 1, sizeof(gguf_tensor));
    if (!f->kv || !f->tensors)
        return fail(&r, "out of memory for %" PRIu64 " key/value pairs and %" PRIu64 " tensors", nk, nt);

    for (uint64_t i = 0; i < nk; i++)
        if (rd_kv(&r, i, &f->kv[i])) return -1;

    uint32_t *ktab, kcap;
    int64_t dup = index_build(&ktab, &kcap, f->kv, nk, kv_key_at);
    free(ktab);
    if (dup < 0) return fail(&r, "out of memory for the key index");
    if ((uint64_t)dup < nk) {
        char k[72];
        return fail(&r, "duplicate key '%s' (kv #%" PRId64 ")", show(k, f->kv[dup].key.ptr, f->kv[dup].key.len), dup);
    }

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = gguf_find_kv(f, "general.alignment");
    if (al) {
        if (al->type != GGUF_UINT32)
            return fail(&r, "general.alignment has type %s (it must be UINT32)", gguf_vtype_name(al->type));
        if (al->v.u == 0 || (al->v.u & (al->v.u - 1)) != 0)
            return fail(&r, "general.alignment is %" PRIu64 " (it must be a nonzero power of two)", al->v.u);
        f->alignment = (uint32_t)al->v.u;
    }

    for (uint64_t i = 0; i < nt; i++)
        if (rd_tensor(&r, i, &f->tensors[i])) return -1;

    dup = index_build(&f->tindex, &f->tindex_cap, f->tensors, nt, tensor_key_at);
    if (dup < 0) return fail(&r, "out of memory for the tensor index");
    if ((uint64_t)dup < nt)
        return fail(&r, "duplicate tensor name '%s' (tensor #%" PRId64 ")", f->tensors[dup].name, dup);

    /* The data section starts at the next multiple of the alignment (which may
     * lie past the end of a file without tensor data). Tensors are packed in
     * order, each starting at the previous one's padded end (docs/numerics.md, GGUF container). */
    if (pad_to(r.pos, f->alignment, &f->data_offset)) return fail(&r, "the data offset overflows");
    uint64_t expect = 0;
    for (uint64_t i = 0; i < nt; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset != expect)
            return fail(&r,
                        "tensor '%s' has offset %" PRIu64 ", expected %" PRIu64
                        " (tensors must be stored in order, each padded to %" PRIu32 " bytes)",
                        t->name, t->offset, expect, f->alignment);
        /* data_offset and offset are each at most size + alignment here, so
         * only adding nbytes can overflow. */
        uint64_t start = f->data_offset + t->offset, end;
        if (__builtin_add_overflow(start, t->nbytes, &end))
            return fail(
                &r, "tensor '%s' data of %" PRIu64 " bytes at offset %" PRIu64 " lies outside the file (%zu bytes)",
                t->name, t->nbytes, start, f->size);
        if (end > f->size)
            return fail(&r, "tensor '%s' data [%" PRIu64 ", %" PRIu64 ") lies outside the file (%zu bytes)", t->name,
                        start, end, f->size);
        t->data = f->base + start;
        /* end <= size, so padding it cannot overflow. */
        pad_to(t->offset + t->nbytes, f->alignment, &expect);
    }
    return 0;
}

gguf_file *gguf_open_mem(const void *data, size_t size, ph_err *err) {
    if (!data && size) {
        err_set(err, "gguf: <memory>: NULL buffer of %zu bytes", size);
        return NULL;
    }
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        err_set(err, "gguf: <memory>: out of memory");
        return NULL;
    }
    f->base = data ? data : (const uint8_t *)"";
    f->size = size;
    if (parse(f, "<memory>", err)) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

gguf_file *gguf_open(const char *path, ph_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err_set(err, "gguf: %s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        err_set(err, "gguf: %s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        err_set(err, "gguf: %s: not a regular file", path);
        close(fd);
        return NULL;
    }
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        err_set(err, "gguf: %s: out of memory", path);
        close(fd);
        return NULL;
    }
    f->size = (size_t)st.st_size;
    if (f->size == 0) {
        f->base = (const uint8_t *)""; /* mmap refuses length 0; parse reports the size */
    } else {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            err_set(err, "gguf: %s: cannot map %zu bytes: %s", path, f->size, strerror(errno));
            close(fd);
            free(f);
            return NULL;
        }
        f->base = m;
        f->mapped = 1;
    }
    close(fd);
    if (parse(f, path, err)) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->kv) {
        for (uint64_t i = 0; i < f->n_kv; i++)
            if (f->kv[i].type == GGUF_ARRAY && f->kv[i].v.arr.type == GGUF_STRING) free(f->kv[i].v.arr.strs);
        free(f->kv);
    }
    free(f->tensors);
    free(f->tindex);
    if (f->mapped) munmap((void *)f->base, f->size);
    free(f);
}

/* ---- lookups and getters ---------------------------------------------------- */

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    if (!key) return NULL;
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kv[i].key, key)) return &f->kv[i];
    return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!name || !f->tindex) return NULL;
    uint32_t s = index_slot(f->tindex, f->tindex_cap, f->tensors, tensor_key_at, name, strlen(name));
    return f->tindex[s] ? &f->tensors[f->tindex[s] - 1] : NULL;
}

static int is_unsigned(gguf_vtype t) {
    return t == GGUF_UINT8 || t == GGUF_UINT16 || t == GGUF_UINT32 || t == GGUF_UINT64;
}

static int is_signed(gguf_vtype t) { return t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64; }

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return -1;
    if (is_unsigned(kv->type) && kv->v.u <= UINT32_MAX) *out = (uint32_t)kv->v.u;
    else if (is_signed(kv->type) && kv->v.i >= 0 && kv->v.i <= (int64_t)UINT32_MAX) *out = (uint32_t)kv->v.i;
    else return -1;
    return 0;
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return -1;
    if (is_unsigned(kv->type) && kv->v.u <= (uint64_t)INT64_MAX) *out = (int64_t)kv->v.u;
    else if (is_signed(kv->type)) *out = kv->v.i;
    else return -1;
    return 0;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || (kv->type != GGUF_FLOAT32 && kv->type != GGUF_FLOAT64)) return -1;
    *out = (float)kv->v.f;
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_BOOL) return -1;
    *out = kv->v.u != 0;
    return 0;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->type != GGUF_STRING) return -1;
    *out = kv->v.s;
    return 0;
}

int gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out) {
    if (!kv || kv->type != GGUF_ARRAY || i >= kv->v.arr.n) return -1;
    const uint8_t *p = kv->v.arr.data + i * gguf_vtype_size(kv->v.arr.type);
    switch (kv->v.arr.type) {
    case GGUF_UINT8: *out = p[0]; return 0;
    case GGUF_INT8: *out = (int8_t)p[0]; return 0;
    case GGUF_UINT16: {
        uint16_t x;
        memcpy(&x, p, 2);
        *out = x;
        return 0;
    }
    case GGUF_INT16: {
        int16_t x;
        memcpy(&x, p, 2);
        *out = x;
        return 0;
    }
    case GGUF_UINT32: {
        uint32_t x;
        memcpy(&x, p, 4);
        *out = x;
        return 0;
    }
    case GGUF_INT32: {
        int32_t x;
        memcpy(&x, p, 4);
        *out = x;
        return 0;
    }
    case GGUF_INT64: memcpy(out, p, 8); return 0;
    case GGUF_UINT64: {
        uint64_t x;
        memcpy(&x, p, 8);
        if (x > (uint64_t)INT64_MAX) return -1;
        *out = (int64_t)x;
        return 0;
    }
    default: return -1;
    }
}

int gguf_arr_f32(const gguf_kv *kv, uint64_t i, float *out) {
    if (!kv || kv->type != GGUF_ARRAY || i >= kv->v.arr.n) return -1;
    if (kv->v.arr.type == GGUF_FLOAT32) {
        memcpy(out, kv->v.arr.data + i * 4, 4);
        return 0;
    }
    if (kv->v.arr.type == GGUF_FLOAT64) {
        double d;
        memcpy(&d, kv->v.arr.data + i * 8, 8);
        *out = (float)d;
        return 0;
    }
    return -1;
}

int gguf_str_eq(gguf_str a, const char *s) {
    size_t n = strlen(s);
    return a.len == n && memcmp(a.ptr, s, n) == 0;
}

const char *gguf_vtype_name(gguf_vtype t) {
    static const char *const names[GGUF_VTYPE_COUNT] = {
        "UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",   "FLOAT32",
        "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64",
    };
    return ((int)t >= 0 && (int)t < GGUF_VTYPE_COUNT) ? names[t] : "unknown";
}
