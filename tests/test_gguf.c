/* GGUF reader and writer: round trips through the writer, typed getters,
 * writer argument errors, the malformed-file corpus (tests/data/gguf_bad),
 * the oracle models, and truncated copies of them. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "kernels/types.h"
#include "test.h"

static char tmpdir[] = "/tmp/test_gguf.XXXXXX";

static char *read_file(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    *size = (size_t)n;
    return buf;
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- writer -> reader round trip ------------------------------------------ */

/* Tensor i's byte k. */
static uint8_t pattern(uint64_t i, uint64_t k) { return (uint8_t)(i * 31 + k * 7 + (k >> 8)); }

static int fill_pattern(void *ctx, uint64_t i, void *buf, uint64_t nbytes) {
    (void)ctx;
    for (uint64_t k = 0; k < nbytes; k++) ((uint8_t *)buf)[k] = pattern(i, k);
    return 0;
}

static int fill_fail(void *ctx, uint64_t i, void *buf, uint64_t nbytes) {
    (void)ctx, (void)buf, (void)nbytes;
    return i == 1 ? -1 : 0;
}

/* A kv as a reader would return it, for gguf_writer_copy_kv. */
static gguf_kv mk_kv(const char *key, gguf_vtype t) {
    gguf_kv kv;
    memset(&kv, 0, sizeof kv);
    kv.key.ptr = key;
    kv.key.len = strlen(key);
    kv.type = t;
    return kv;
}

typedef struct tdesc {
    const char *name;
    int type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t nbytes;
} tdesc;

static const tdesc round_tensors[] = {
    {"w.f32", PH_TYPE_F32, 2, {5, 3}, 60},
    {"w.f16", PH_TYPE_F16, 3, {8, 2, 3}, 96},
    {"w.empty", PH_TYPE_F32, 2, {0, 4}, 0},
    {"w.q8_0", PH_TYPE_Q8_0, 2, {64, 2}, 2 * 2 * 34},
    {"blk.0.attn_q.weight", PH_TYPE_Q4_K, 4, {256, 3, 1, 2}, 6 * 144},
};
#define N_ROUND (sizeof round_tensors / sizeof round_tensors[0])

static const uint8_t a_u8[] = {0, 1, 255};
static const int8_t a_i8[] = {-128, 0, 127};
static const uint16_t a_u16[] = {0, 65535};
static const int16_t a_i16[] = {-32768, 32767, -1};
static const uint32_t a_u32[] = {0, 4000000000u};
static const int32_t a_i32[] = {-2147483647 - 1, 7};
static const float a_f32[] = {1.5f, -0.0f, 3.25e-8f};
static const uint8_t a_bool[] = {1, 0, 1, 1};
static const uint64_t a_u64[] = {UINT64_MAX, 1};
static const int64_t a_i64[] = {INT64_MIN, INT64_MAX};
static const double a_f64[] = {0.1, -1e300};
static const char *const a_str[] = {"hello", "", "wörld", "<|im_start|>"};

static void add_all_values(gguf_writer *w) {
    gguf_writer_set_str(w, "general.architecture", "qwen3vl");
    gguf_writer_set_u32(w, "v.u32", 4000000000u);
    gguf_writer_set_i32(w, "v.i32", -12345);
    gguf_writer_set_f32(w, "v.f32", 0.15625f);
    gguf_writer_set_bool(w, "v.bool", true);
    gguf_writer_set_str(w, "v.str.empty", "");
    gguf_kv kv = mk_kv("v.u8", GGUF_UINT8);
    kv.v.u = 200;
    gguf_writer_copy_kv(w, &kv);
    kv = mk_kv("v.i8", GGUF_INT8);
    kv.v.i = -100;
    gguf_writer_copy_kv(w, &kv);
    kv = mk_kv("v.u16", GGUF_UINT16);
    kv.v.u = 65000;
    gguf_writer_copy_kv(w, &kv);
    kv = mk_kv("v.i16", GGUF_INT16);
    kv.v.i = -30000;
    gguf_writer_copy_kv(w, &kv);
    kv = mk_kv("v.u64", GGUF_UINT64);
    kv.v.u = UINT64_MAX - 5;
    gguf_writer_copy_kv(w, &kv);
    kv = mk_kv("v.i64", GGUF_INT64);
    kv.v.i = INT64_MIN + 3;
    gguf_writer_copy_kv(w, &kv);
    kv = mk_kv("v.f64", GGUF_FLOAT64);
    kv.v.f = -2.5e-300;
    gguf_writer_copy_kv(w, &kv);
    gguf_writer_set_arr(w, "a.u8", GGUF_UINT8, a_u8, 3);
    gguf_writer_set_arr(w, "a.i8", GGUF_INT8, a_i8, 3);
    gguf_writer_set_arr(w, "a.u16", GGUF_UINT16, a_u16, 2);
    gguf_writer_set_arr(w, "a.i16", GGUF_INT16, a_i16, 3);
    gguf_writer_set_arr(w, "a.u32", GGUF_UINT32, a_u32, 2);
    gguf_writer_set_arr(w, "a.i32", GGUF_INT32, a_i32, 2);
    gguf_writer_set_arr(w, "a.f32", GGUF_FLOAT32, a_f32, 3);
    gguf_writer_set_arr(w, "a.bool", GGUF_BOOL, a_bool, 4);
    gguf_writer_set_arr(w, "a.u64", GGUF_UINT64, a_u64, 2);
    gguf_writer_set_arr(w, "a.i64", GGUF_INT64, a_i64, 2);
    gguf_writer_set_arr(w, "a.f64", GGUF_FLOAT64, a_f64, 2);
    gguf_writer_set_arr(w, "a.str", GGUF_STRING, a_str, 4);
    gguf_writer_set_arr(w, "a.empty", GGUF_INT32, NULL, 0);
    gguf_writer_set_arr(w, "a.str.empty", GGUF_STRING, NULL, 0);
    /* Setting a key again replaces its value in place. */
    gguf_writer_set_i32(w, "v.replaced", 1);
    gguf_writer_set_str(w, "v.replaced", "second");
}

static void check_all_values(const gguf_file *f) {
    uint32_t u32;
    int64_t i64;
    float f32;
    bool b;
    gguf_str s;
    CHECK(f->version == 3);
    CHECK(f->n_kv == 28);
    CHECK(gguf_get_str(f, "general.architecture", &s) == 0 && gguf_str_eq(s, "qwen3vl"));
    CHECK(gguf_get_u32(f, "v.u32", &u32) == 0 && u32 == 4000000000u);
    CHECK(gguf_get_i64(f, "v.i32", &i64) == 0 && i64 == -12345);
    CHECK(gguf_get_f32(f, "v.f32", &f32) == 0 && f32 == 0.15625f);
    CHECK(gguf_get_bool(f, "v.bool", &b) == 0 && b);
    CHECK(gguf_get_str(f, "v.str.empty", &s) == 0 && s.len == 0);
    CHECK(gguf_get_u32(f, "v.u8", &u32) == 0 && u32 == 200);
    CHECK(gguf_get_i64(f, "v.i8", &i64) == 0 && i64 == -100);
    CHECK(gguf_get_u32(f, "v.u16", &u32) == 0 && u32 == 65000);
    CHECK(gguf_get_i64(f, "v.i16", &i64) == 0 && i64 == -30000);
    CHECK(gguf_find_kv(f, "v.u64") && gguf_find_kv(f, "v.u64")->v.u == UINT64_MAX - 5);
    CHECK(gguf_get_i64(f, "v.i64", &i64) == 0 && i64 == INT64_MIN + 3);
    CHECK(gguf_find_kv(f, "v.f64") && gguf_find_kv(f, "v.f64")->v.f == -2.5e-300);
    CHECK(gguf_get_str(f, "v.replaced", &s) == 0 && gguf_str_eq(s, "second"));

    /* Integer arrays through gguf_arr_i64, element by element. */
    struct {
        const char *key;
        gguf_vtype t;
        uint64_t n;
        int64_t v[4];
    } ia[] = {
        {"a.u8", GGUF_UINT8, 3, {0, 1, 255}},
        {"a.i8", GGUF_INT8, 3, {-128, 0, 127}},
        {"a.u16", GGUF_UINT16, 2, {0, 65535}},
        {"a.i16", GGUF_INT16, 3, {-32768, 32767, -1}},
        {"a.u32", GGUF_UINT32, 2, {0, 4000000000}},
        {"a.i32", GGUF_INT32, 2, {INT32_MIN, 7}},
        {"a.i64", GGUF_INT64, 2, {INT64_MIN, INT64_MAX}},
    };
    for (size_t k = 0; k < sizeof ia / sizeof ia[0]; k++) {
        const gguf_kv *kv = gguf_find_kv(f, ia[k].key);
        CHECKF(kv && kv->type == GGUF_ARRAY && kv->v.arr.type == ia[k].t && kv->v.arr.n == ia[k].n, "%s", ia[k].key);
        for (uint64_t i = 0; kv && i < ia[k].n; i++)
            CHECKF(gguf_arr_i64(kv, i, &i64) == 0 && i64 == ia[k].v[i], "%s[%d]", ia[k].key, (int)i);
        CHECK(gguf_arr_i64(kv, ia[k].n, &i64) == -1);
    }
    const gguf_kv *kv = gguf_find_kv(f, "a.u64");
    CHECK(kv && kv->v.arr.n == 2);
    CHECK(gguf_arr_i64(kv, 0, &i64) == -1); /* UINT64_MAX does not fit */
    CHECK(gguf_arr_i64(kv, 1, &i64) == 0 && i64 == 1);
    kv = gguf_find_kv(f, "a.f32");
    CHECK(kv && kv->v.arr.n == 3);
    for (uint64_t i = 0; i < 3; i++) CHECK(gguf_arr_f32(kv, i, &f32) == 0 && memcmp(&f32, &a_f32[i], 4) == 0);
    CHECK(gguf_arr_i64(kv, 0, &i64) == -1);
    kv = gguf_find_kv(f, "a.f64");
    CHECK(gguf_arr_f32(kv, 0, &f32) == 0 && f32 == (float)0.1);
    CHECK(kv && memcmp(kv->v.arr.data + 8, &a_f64[1], 8) == 0);
    kv = gguf_find_kv(f, "a.bool");
    CHECK(kv && kv->v.arr.type == GGUF_BOOL && kv->v.arr.n == 4 && memcmp(kv->v.arr.data, a_bool, 4) == 0);
    kv = gguf_find_kv(f, "a.str");
    CHECK(kv && kv->v.arr.type == GGUF_STRING && kv->v.arr.n == 4 && kv->v.arr.strs);
    for (uint64_t i = 0; kv && i < 4; i++) CHECK(gguf_str_eq(kv->v.arr.strs[i], a_str[i]));
    kv = gguf_find_kv(f, "a.empty");
    CHECK(kv && kv->v.arr.type == GGUF_INT32 && kv->v.arr.n == 0 && gguf_arr_i64(kv, 0, &i64) == -1);
    kv = gguf_find_kv(f, "a.str.empty");
    CHECK(kv && kv->v.arr.type == GGUF_STRING && kv->v.arr.n == 0);
}

static void check_tensors(const gguf_file *f, uint32_t align) {
    CHECK(f->alignment == align);
    CHECK(f->data_offset % align == 0);
    CHECK(f->n_tensors == N_ROUND);
    for (size_t i = 0; i < N_ROUND && i < f->n_tensors; i++) {
        const tdesc *d = &round_tensors[i];
        const gguf_tensor *t = gguf_find_tensor(f, d->name);
        CHECKF(t == &f->tensors[i], "%s", d->name);
        if (!t) continue;
        CHECK(t->type == d->type && t->n_dims == d->n_dims && t->nbytes == d->nbytes);
        for (uint32_t j = 0; j < 4; j++) CHECK(t->ne[j] == (j < d->n_dims ? d->ne[j] : 1));
        CHECK(t->offset % align == 0);
        CHECK((const uint8_t *)t->data == f->base + f->data_offset + t->offset);
        int same = 1;
        for (uint64_t k = 0; k < t->nbytes; k++) same &= ((const uint8_t *)t->data)[k] == pattern(i, k);
        CHECKF(same, "data of %s", d->name);
    }
    CHECK(gguf_find_tensor(f, "missing") == NULL);
    CHECK(gguf_find_tensor(f, "") == NULL);
    CHECK(gguf_find_tensor(f, "w.f3") == NULL);
}

static void add_round_tensors(gguf_writer *w) {
    for (size_t i = 0; i < N_ROUND; i++)
        gguf_writer_add_tensor(w, round_tensors[i].name, round_tensors[i].type, round_tensors[i].n_dims,
                               round_tensors[i].ne);
}

/* Copies every tensor's bytes from a reader. */
static int fill_from(void *ctx, uint64_t i, void *buf, uint64_t nbytes) {
    const gguf_file *src = ctx;
    if (i >= src->n_tensors || src->tensors[i].nbytes != nbytes) return -1;
    memcpy(buf, src->tensors[i].data, nbytes);
    return 0;
}

/* Writes a copy of src (all kvs, all tensors) to path. */
static int copy_file(const gguf_file *src, const char *path, ph_err *err) {
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < src->n_kv; i++) gguf_writer_copy_kv(w, &src->kv[i]);
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
    }
    int rc = gguf_writer_write(w, path, fill_from, (void *)src, err);
    gguf_writer_free(w);
    return rc;
}

static int files_equal(const char *a, const char *b) {
    size_t na, nb;
    char *pa = read_file(a, &na), *pb = read_file(b, &nb);
    int eq = pa && pb && na == nb && memcmp(pa, pb, na) == 0;
    free(pa);
    free(pb);
    return eq;
}

static void test_round_trip(void) {
    char path[256], path2[256], tmp[300];
    snprintf(path, sizeof path, "%s/round.gguf", tmpdir);
    snprintf(path2, sizeof path2, "%s/round2.gguf", tmpdir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ph_err e = {0};

    gguf_writer *w = gguf_writer_new();
    CHECK(w != NULL);
    add_all_values(w);
    add_round_tensors(w);
    CHECKF(gguf_writer_write(w, path, fill_pattern, NULL, &e) == 0, "%s", e.msg);
    gguf_writer_free(w);
    CHECK(!file_exists(tmp));

    gguf_file *f = gguf_open(path, &e);
    CHECKF(f != NULL, "%s", e.msg);
    if (!f) return;
    CHECK(f->mapped == 1);
    check_all_values(f);
    check_tensors(f, 32);

    /* Reading it back through copy_kv gives the same bytes. */
    CHECKF(copy_file(f, path2, &e) == 0, "%s", e.msg);
    CHECK(files_equal(path, path2));

    /* And the memory reader sees the same file. */
    size_t n;
    char *buf = read_file(path, &n);
    gguf_file *m = gguf_open_mem(buf, n, &e);
    CHECKF(m != NULL, "%s", e.msg);
    if (m) {
        CHECK(m->mapped == 0 && m->size == f->size && m->data_offset == f->data_offset);
        check_all_values(m);
        check_tensors(m, 32);
        gguf_close(m);
    }
    free(buf);
    gguf_close(f);
    unlink(path);
    unlink(path2);
}

static void test_alignment(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/align.gguf", tmpdir);
    ph_err e = {0};
    gguf_writer *w = gguf_writer_new();
    add_all_values(w);
    gguf_writer_set_u32(w, "general.alignment", 256);
    add_round_tensors(w);
    CHECKF(gguf_writer_write(w, path, fill_pattern, NULL, &e) == 0, "%s", e.msg);
    gguf_writer_free(w);
    gguf_file *f = gguf_open(path, &e);
    CHECKF(f != NULL, "%s", e.msg);
    if (f) {
        check_tensors(f, 256);
        gguf_close(f);
    }

    /* A file with no tensors and no data. */
    w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "none");
    CHECKF(gguf_writer_write(w, path, NULL, NULL, &e) == 0, "%s", e.msg);
    gguf_writer_free(w);
    f = gguf_open(path, &e);
    CHECKF(f != NULL, "%s", e.msg);
    if (f) {
        CHECK(f->n_tensors == 0 && f->n_kv == 1 && gguf_find_tensor(f, "x") == NULL);
        gguf_close(f);
    }
    unlink(path);
}

/* Little-endian appenders for hand-built files. */
static size_t put_le(uint8_t *p, size_t at, uint64_t v, int n) {
    for (int k = 0; k < n; k++) p[at + k] = (uint8_t)(v >> (8 * k));
    return at + n;
}

/* gguf_open_mem on files built by hand: version 2, n_dims 0 (a scalar), and
 * a tensor-less file that ends right after its header, without padding. */
static void test_hand_built(void) {
    uint8_t file[68] = {'G', 'G', 'U', 'F'};
    size_t at = put_le(file, 4, 2, 4); /* version 2 */
    at = put_le(file, at, 1, 8);       /* 1 tensor */
    at = put_le(file, at, 0, 8);       /* 0 kv */
    at = put_le(file, at, 1, 8);       /* name length */
    file[at++] = 's';
    at = put_le(file, at, 0, 4); /* n_dims 0 */
    at = put_le(file, at, PH_TYPE_F32, 4);
    at = put_le(file, at, 0, 8); /* offset */
    CHECK(at == 49);             /* data at pad(49, 32) = 64 */
    float v = 2.5f;
    memcpy(file + 64, &v, 4);
    ph_err e = {0};
    gguf_file *f = gguf_open_mem(file, sizeof file, &e);
    CHECKF(f != NULL, "%s", e.msg);
    if (f) {
        CHECK(f->version == 2 && f->n_tensors == 1 && f->data_offset == 64);
        const gguf_tensor *t = gguf_find_tensor(f, "s");
        CHECK(t && t->n_dims == 0 && t->nbytes == 4 && t->ne[0] == 1 && memcmp(t->data, &v, 4) == 0);
        gguf_close(f);
    }
    f = gguf_open_mem(file, sizeof file - 1, &e);
    CHECK(f == NULL && strstr(e.msg, "tensor 's' data [64, 68) lies outside the file (67 bytes)"));

    static const uint8_t bare[24] = {'G', 'G', 'U', 'F', 3};
    f = gguf_open_mem(bare, sizeof bare, &e);
    CHECKF(f != NULL, "%s", e.msg);
    if (f) {
        CHECK(f->n_kv == 0 && f->n_tensors == 0 && f->alignment == 32);
        gguf_close(f);
    }
    f = gguf_open_mem(NULL, 0, &e);
    CHECK(f == NULL && strstr(e.msg, "gguf: <memory>: file is too small"));
}

static void test_getters(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/get.gguf", tmpdir);
    ph_err e = {0};
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_i32(w, "neg", -1);
    gguf_writer_set_i32(w, "pos", 77);
    gguf_writer_set_f32(w, "f", 1.0f);
    gguf_writer_set_bool(w, "b", false);
    gguf_writer_set_str(w, "s", "x");
    gguf_kv kv = mk_kv("big", GGUF_UINT64);
    kv.v.u = (uint64_t)UINT32_MAX + 1;
    gguf_writer_copy_kv(w, &kv);
    kv = mk_kv("huge", GGUF_UINT64);
    kv.v.u = (uint64_t)INT64_MAX + 1;
    gguf_writer_copy_kv(w, &kv);
    kv = mk_kv("i64big", GGUF_INT64);
    kv.v.i = (int64_t)UINT32_MAX + 1;
    gguf_writer_copy_kv(w, &kv);
    CHECKF(gguf_writer_write(w, path, NULL, NULL, &e) == 0, "%s", e.msg);
    gguf_writer_free(w);
    gguf_file *f = gguf_open(path, &e);
    CHECKF(f != NULL, "%s", e.msg);
    if (!f) return;
    uint32_t u;
    int64_t i;
    float x;
    bool b = true;
    gguf_str s;
    CHECK(gguf_get_u32(f, "neg", &u) == -1);
    CHECK(gguf_get_u32(f, "pos", &u) == 0 && u == 77);
    CHECK(gguf_get_u32(f, "big", &u) == -1);
    CHECK(gguf_get_u32(f, "i64big", &u) == -1);
    CHECK(gguf_get_i64(f, "big", &i) == 0 && i == (int64_t)UINT32_MAX + 1);
    CHECK(gguf_get_i64(f, "huge", &i) == -1);
    CHECK(gguf_get_i64(f, "f", &i) == -1);
    CHECK(gguf_get_u32(f, "b", &u) == -1);
    CHECK(gguf_get_f32(f, "pos", &x) == -1);
    CHECK(gguf_get_f32(f, "f", &x) == 0 && x == 1.0f);
    CHECK(gguf_get_bool(f, "pos", &b) == -1);
    CHECK(gguf_get_bool(f, "b", &b) == 0 && !b);
    CHECK(gguf_get_str(f, "pos", &s) == -1);
    CHECK(gguf_get_str(f, "s", &s) == 0 && gguf_str_eq(s, "x") && !gguf_str_eq(s, "xy") && !gguf_str_eq(s, ""));
    CHECK(gguf_get_u32(f, "absent", &u) == -1);
    CHECK(gguf_find_kv(f, "absent") == NULL && gguf_find_kv(f, NULL) == NULL);
    CHECK(gguf_arr_i64(gguf_find_kv(f, "pos"), 0, &i) == -1); /* not an array */
    CHECK(gguf_arr_f32(NULL, 0, &x) == -1);
    CHECK(strcmp(gguf_vtype_name(GGUF_FLOAT64), "FLOAT64") == 0);
    CHECK(strcmp(gguf_vtype_name(GGUF_ARRAY), "ARRAY") == 0);
    CHECK(strcmp(gguf_vtype_name((gguf_vtype)13), "unknown") == 0);
    gguf_close(f);
    unlink(path);
}

/* Each misuse of the writer makes gguf_writer_write fail with a message
 * containing `expect`, without creating the file. */
static void expect_write_error(gguf_writer *w, gguf_fill_fn fill, const char *expect) {
    char path[256], tmp[300];
    snprintf(path, sizeof path, "%s/bad.gguf", tmpdir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ph_err e = {0};
    CHECKF(gguf_writer_write(w, path, fill, NULL, &e) == -1 && strstr(e.msg, expect), "wanted '%s', got '%s'", expect,
           e.msg);
    CHECK(!file_exists(path) && !file_exists(tmp));
    gguf_writer_free(w);
}

static void test_writer_errors(void) {
    static const int64_t ne[2] = {33, 2};
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_i32(w, "general.alignment", 64);
    expect_write_error(w, NULL, "general.alignment has type INT32");
    w = gguf_writer_new();
    gguf_writer_set_u32(w, "general.alignment", 48);
    expect_write_error(w, NULL, "nonzero power of two");
    w = gguf_writer_new();
    gguf_writer_add_tensor(w, "t", PH_TYPE_F32, 2, ne);
    gguf_writer_add_tensor(w, "t", PH_TYPE_F32, 2, ne);
    expect_write_error(w, fill_pattern, "duplicate tensor name 't'");
    w = gguf_writer_new();
    gguf_writer_add_tensor(w, "q", PH_TYPE_Q8_0, 2, ne);
    expect_write_error(w, fill_pattern, "multiple of");
    w = gguf_writer_new();
    gguf_writer_add_tensor(w, "q", 99, 2, ne);
    expect_write_error(w, fill_pattern, "does not support");
    w = gguf_writer_new();
    gguf_writer_add_tensor(w, "0123456789012345678901234567890123456789012345678901234567890123", PH_TYPE_F32, 2, ne);
    expect_write_error(w, fill_pattern, "1 to 63 bytes");
    w = gguf_writer_new();
    gguf_writer_add_tensor(w, "t", PH_TYPE_F32, 5, ne);
    expect_write_error(w, fill_pattern, "invalid shape");
    w = gguf_writer_new();
    gguf_writer_set_u32(w, "", 1);
    expect_write_error(w, NULL, "empty key");
    w = gguf_writer_new();
    gguf_writer_set_arr(w, "a", GGUF_ARRAY, NULL, 0);
    expect_write_error(w, NULL, "invalid element type");
    w = gguf_writer_new();
    static const char *const strs[] = {"a", NULL};
    gguf_writer_set_arr(w, "a", GGUF_STRING, strs, 2);
    expect_write_error(w, NULL, "string 1 of array 'a' is NULL");
    w = gguf_writer_new();
    gguf_writer_set_str(w, "a", NULL);
    expect_write_error(w, NULL, "NULL string");
    w = gguf_writer_new();
    gguf_writer_add_tensor(w, "t", PH_TYPE_F32, 2, ne);
    expect_write_error(w, NULL, "no fill callback");
    w = gguf_writer_new();
    gguf_writer_add_tensor(w, "t0", PH_TYPE_F32, 2, ne);
    gguf_writer_add_tensor(w, "t1", PH_TYPE_F32, 2, ne);
    expect_write_error(w, fill_fail, "tensor 't1' could not be produced");

    ph_err e = {0};
    w = gguf_writer_new();
    CHECK(gguf_writer_write(w, "/nonexistent-dir/x.gguf", NULL, NULL, &e) == -1 && strstr(e.msg, "cannot create"));
    gguf_writer_free(w);
    gguf_writer_free(NULL);
}

/* ---- malformed files ----------------------------------------------------------- */

static void test_corpus(void) {
    char dir[256], list[300], line[256];
    snprintf(dir, sizeof dir, "%s/gguf_bad", PH_TEST_DATA);
    snprintf(list, sizeof list, "%s/EXPECTED.txt", dir);
    FILE *fp = fopen(list, "r");
    CHECKF(fp != NULL, "cannot open %s", list);
    if (!fp) return;
    char listed[128][64];
    int n_listed = 0;
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        line[strcspn(line, "\n")] = '\0';
        char *tab = strchr(line, '\t');
        CHECKF(tab != NULL, "bad EXPECTED.txt line '%s'", line);
        if (!tab) continue;
        *tab = '\0';
        const char *name = line, *expect = tab + 1;
        CHECKF(strlen(name) < sizeof listed[0] && n_listed < 128, "EXPECTED.txt: '%s'", name);
        if (strlen(name) < sizeof listed[0] && n_listed < 128) strcpy(listed[n_listed++], name);

        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        ph_err e = {0};
        gguf_file *f = gguf_open(path, &e);
        char prefix[620];
        snprintf(prefix, sizeof prefix, "gguf: %s: ", path);
        CHECKF(f == NULL && strncmp(e.msg, prefix, strlen(prefix)) == 0 && strstr(e.msg, expect),
               "%s: wanted '%s', got '%s'", name, expect, f ? "(opened)" : e.msg);
        gguf_close(f);

        /* The memory reader, over a buffer of exactly the file's size. */
        size_t size;
        char *buf = read_file(path, &size);
        CHECKF(buf != NULL, "cannot read %s", path);
        memset(&e, 0, sizeof e);
        f = gguf_open_mem(buf, size, &e);
        CHECKF(f == NULL && strncmp(e.msg, "gguf: <memory>: ", 16) == 0 && strstr(e.msg, expect),
               "%s (memory): wanted '%s', got '%s'", name, expect, f ? "(opened)" : e.msg);
        gguf_close(f);
        free(buf);
    }
    fclose(fp);
    CHECK(n_listed >= 40);

    /* Every file of the folder is listed. */
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.' || strcmp(de->d_name, "EXPECTED.txt") == 0) continue;
        int found = 0;
        for (int i = 0; i < n_listed; i++) found |= strcmp(listed[i], de->d_name) == 0;
        CHECKF(found, "%s is not listed in EXPECTED.txt", de->d_name);
    }
    if (d) closedir(d);

    ph_err e = {0};
    CHECK(gguf_open(dir, &e) == NULL && strstr(e.msg, "not a regular file"));
    CHECK(gguf_open("/nonexistent/x.gguf", &e) == NULL && strstr(e.msg, "gguf: /nonexistent/x.gguf: cannot open"));
}

/* ---- the oracle models --------------------------------------------------------- */

static const char *const models[] = {"tiny-f16", "mid-q8", "small-q4k"};

/* Opens every prefix length in `lens` of the file's bytes (copied into an
 * exactly-sized buffer, so any over-read is caught by ASan). Prefixes that
 * cut tensor data must be refused; ones that only drop trailing padding are
 * fine. */
static void check_prefix(const char *name, const char *bytes, size_t len, uint64_t need) {
    char *buf = malloc(len ? len : 1);
    memcpy(buf, bytes, len);
    ph_err e = {0};
    gguf_file *f = gguf_open_mem(buf, len, &e);
    if (len < need)
        CHECKF(f == NULL && strncmp(e.msg, "gguf: <memory>: ", 16) == 0, "%s cut to %zu bytes was accepted", name,
               len);
    else CHECKF(f != NULL, "%s cut to %zu bytes (needs %llu): %s", name, len, (unsigned long long)need, e.msg);
    gguf_close(f);
    free(buf);
}

static void test_truncation(const char *name, const char *path, const gguf_file *full) {
    size_t size;
    char *bytes = read_file(path, &size);
    CHECK(bytes != NULL && size == full->size);
    if (!bytes) return;
    uint64_t need = full->data_offset;
    for (uint64_t i = 0; i < full->n_tensors; i++) {
        const gguf_tensor *t = &full->tensors[i];
        if (full->data_offset + t->offset + t->nbytes > need) need = full->data_offset + t->offset + t->nbytes;
    }
    /* The metadata region: every 7th length when it is small, else ~150 lengths. */
    uint64_t hdr = full->data_offset, step = hdr <= 64 * 1024 ? 7 : hdr / 150;
    int n = 0;
    for (uint64_t len = 0; len < hdr; len += step, n++) check_prefix(name, bytes, (size_t)len, need);
    /* Around the start of the data and a few points inside it. */
    for (uint64_t d = 0; d < 4; d++) check_prefix(name, bytes, (size_t)(hdr - d), need);
    for (int k = 1; k <= 8; k++) check_prefix(name, bytes, (size_t)(hdr + (need - hdr) * k / 9), need);
    check_prefix(name, bytes, (size_t)need - 1, need);
    check_prefix(name, bytes, (size_t)need, need);
    CHECK(n > 100);
    free(bytes);
}

static void test_oracle(void) {
    char path[600], path2[600];
    snprintf(path, sizeof path, "%s/models", PH_ORACLE_DIR);
    CHECKF(file_exists(path), "%s not found: the oracle models are part of the test data", path);
    if (!file_exists(path)) return;
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        for (int mm = 0; mm < 2; mm++) {
            snprintf(path, sizeof path, "%s/models/%s%s.gguf", PH_ORACLE_DIR, models[m], mm ? "-mmproj" : "");
            ph_err e = {0};
            gguf_file *f = gguf_open(path, &e);
            CHECKF(f != NULL, "%s", e.msg);
            if (!f) continue;
            gguf_str arch;
            CHECKF(gguf_get_str(f, "general.architecture", &arch) == 0 && gguf_str_eq(arch, mm ? "clip" : "qwen3vl"),
                   "%s", path);
            CHECK(f->n_tensors > 0 && f->version == 3);
            int ok = 1;
            for (uint64_t i = 0; i < f->n_tensors; i++) {
                const gguf_tensor *t = &f->tensors[i];
                ok &= gguf_find_tensor(f, t->name) == t;
                ok &= (const uint8_t *)t->data >= f->base && t->nbytes <= f->size &&
                      (const uint8_t *)t->data + t->nbytes <= f->base + f->size;
            }
            CHECKF(ok, "tensor lookups and bounds in %s", path);
            if (!mm) {
                const gguf_kv *tok = gguf_find_kv(f, "tokenizer.ggml.tokens");
                CHECK(tok && tok->type == GGUF_ARRAY && tok->v.arr.type == GGUF_STRING && tok->v.arr.n == 151936);
            }
            /* The writer reproduces llama.cpp's files byte for byte (checked on
             * the smaller ones to keep the test's disk traffic down). */
            if (mm || m == 0) {
                snprintf(path2, sizeof path2, "%s/copy.gguf", tmpdir);
                CHECKF(copy_file(f, path2, &e) == 0, "%s", e.msg);
                CHECKF(files_equal(path, path2), "copy of %s differs", path);
                unlink(path2);
            }

            snprintf(path2, sizeof path2, "%s%s", models[m], mm ? "-mmproj" : "");
            test_truncation(path2, path, f);
            gguf_close(f);
        }
    }
}

int main(void) {
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_alignment();
    test_hand_built();
    test_getters();
    test_writer_errors();
    test_corpus();
    test_oracle();
    rmdir(tmpdir);
    TEST_END();
}
