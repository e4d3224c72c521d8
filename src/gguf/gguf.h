/* GGUF reader (memory-mapped; every count, length, offset and dimension is
 * checked against the file size and for overflow before use) and writer.
 * Layout facts: docs/numerics.md, GGUF container. */
#ifndef PH_GGUF_GGUF_H
#define PH_GGUF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum gguf_vtype {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
    GGUF_VTYPE_COUNT = 13
} gguf_vtype;

typedef struct gguf_str {
    const char *ptr; /* points into the mapping; NOT NUL-terminated */
    uint64_t len;
} gguf_str;

typedef struct gguf_kv {
    gguf_str key;
    gguf_vtype type;
    union {
        uint64_t u; /* UINT8..UINT64, BOOL */
        int64_t i;  /* INT8..INT64 (sign-extended) */
        double f;   /* FLOAT32, FLOAT64 */
        gguf_str s; /* STRING */
        struct {
            gguf_vtype type; /* element type (never ARRAY) */
            uint64_t n;
            const uint8_t *data; /* first element in the mapping */
            gguf_str *strs;      /* for STRING arrays: n entries (owned) */
        } arr;
    } v;
} gguf_kv;

typedef struct gguf_tensor {
    char name[64]; /* NUL-terminated, < 64 bytes */
    uint32_t n_dims;
    int64_t ne[4];   /* missing dims are 1 */
    int type;        /* tensor_type id */
    uint64_t offset; /* relative to the data section */
    uint64_t nbytes;
    const void *data; /* into the mapping */
} gguf_tensor;

typedef struct gguf_file {
    uint32_t version;
    uint64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    uint32_t alignment;
    uint64_t data_offset;
    const uint8_t *base; /* the mapping (or the caller's buffer) */
    size_t size;
    int mapped; /* 1 if base is our mmap */
    /* private: hash index of tensor names */
    uint32_t *tindex;
    uint32_t tindex_cap;
} gguf_file;

/* Opens and validates a file. On error returns NULL and e names the problem
 * ("gguf: <path>: tensor 'x' data [a, b) lies outside the file (size n)"). */
gguf_file *gguf_open(const char *path, ph_err *err);
/* Same over a caller-owned buffer that must outlive the result (fuzzing, tests). */
gguf_file *gguf_open_mem(const void *data, size_t size, ph_err *err);
void gguf_close(gguf_file *f);

/* Lookups: NULL / -1 when absent. */
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters. Return 0 on success; -1 if absent or of a type that cannot
 * represent the value exactly (integers of any width are accepted when the
 * value fits; floats accept FLOAT32/FLOAT64). */
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
int gguf_get_f32(const gguf_file *f, const char *key, float *out);
int gguf_get_bool(const gguf_file *f, const char *key, bool *out);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* Integer array element i as int64 (any integer element type). */
int gguf_arr_i64(const gguf_kv *kv, uint64_t i, int64_t *out);
int gguf_arr_f32(const gguf_kv *kv, uint64_t i, float *out);

/* 1 if the string equals the NUL-terminated s. */
int gguf_str_eq(gguf_str a, const char *s);
const char *gguf_vtype_name(gguf_vtype t);

/* ---- writer ------------------------------------------------------------- */
/* Builds a file in memory-light fashion: metadata and tensor infos are kept,
 * tensor data is streamed in order by gguf_writer_write(). */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* Array of n elements of type t; for GGUF_STRING, data is `const char *const *`;
 * otherwise the packed little-endian elements. */
void gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_vtype t, const void *data, uint64_t n);
/* Copies a key/value (any type, arrays included) from a reader. */
void gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv);
/* Declares a tensor; data is supplied later (in declaration order) through
 * the callback given to gguf_writer_write. */
void gguf_writer_add_tensor(gguf_writer *w, const char *name, int type, uint32_t n_dims, const int64_t *ne);
/* Writes the file: header, metadata, tensor infos, then for each tensor i
 * calls fill(ctx, i, buf, nbytes) to produce its bytes. Writes to path.tmp,
 * fsyncs and renames. Returns 0 or -1 with e set. */
typedef int (*gguf_fill_fn)(void *ctx, uint64_t i, void *buf, uint64_t nbytes);
int gguf_writer_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *ctx, ph_err *err);

#endif
