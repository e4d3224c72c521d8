/* The KV cache of one sequence: a table of KV blocks, checkpoint copies. */
#include "state/kv_cache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/bigbuf.h"
#include "state/kv_block.h"

/* One block: KV_BLOCK_ROWS rows of every layer's K and V cells. */
static size_t block_bytes(const kv_cache *c) { return (size_t)KV_BLOCK_ROWS * 2 * (size_t)c->n_layer * c->row_bytes; }

static int32_t blocks_for(int32_t n) { return (n + KV_BLOCK_ROWS - 1) / KV_BLOCK_ROWS; }

/* Points the block table into the mapping. */
static void point(kv_cache *c) {
    for (int32_t b = 0; b < blocks_for(c->rows.n_ctx); b++)
        c->rows.blocks[b] = (uint8_t *)c->map + b * block_bytes(c);
}

/* Back to the state of an empty sequence (no snapshots). */
static void clear_recurrent(kv_cache *c) {
    if (c->recurrent) memset(c->recurrent, 0, c->recurrent_floats * sizeof(float));
    c->n_snap = 0;
}

/* The recurrent layers' state: per layer its convolution's rows, then its
 * delta net matrices (llm_kv). */
static int init_recurrent(kv_cache *c, const llm_hparams *hp) {
    const int n = hp->n_rec_layer;
    if (n == 0) return 0;
    const size_t conv = (size_t)(hp->conv_k - 1) * (size_t)hp->conv_dim,
                 ssm = (size_t)hp->ssm_hv * (size_t)hp->ssm_d * (size_t)hp->ssm_d;
    c->recurrent_floats = (size_t)n * (conv + ssm);
    c->recurrent = calloc(c->recurrent_floats, sizeof(float));
    c->rows.conv = calloc((size_t)n, sizeof *c->rows.conv);
    c->rows.ssm = calloc((size_t)n, sizeof *c->rows.ssm);
    if (!c->recurrent || !c->rows.conv || !c->rows.ssm) return -1;
    for (int l = 0; l < n; l++) {
        c->rows.conv[l] = c->recurrent + (size_t)l * (conv + ssm);
        c->rows.ssm[l] = c->rows.conv[l] + conv;
    }
    return 0;
}

/* One K (or V) cell of a layer. */
static size_t cell_bytes(const llm_hparams *hp) {
    return (size_t)hp->n_head_kv * (size_t)hp->head_dim * sizeof(f16_bits);
}

size_t kv_cache_row_bytes(const llm_hparams *hp) { return 2 * (size_t)hp->n_attn_layer * cell_bytes(hp); }

int kv_cache_init_cells(kv_cache *c, int32_t n_layer, size_t row_bytes, int32_t n_ctx) {
    memset(c, 0, sizeof *c);
    c->n_layer = n_layer;
    c->row_bytes = row_bytes;
    c->rows.n_ctx = n_ctx;
    c->rows.block_rows = KV_BLOCK_ROWS;
    c->rows.blocks = calloc((size_t)blocks_for(n_ctx), sizeof *c->rows.blocks);
    c->map_bytes = (size_t)blocks_for(n_ctx) * block_bytes(c);
    if (c->rows.blocks && (c->map = big_alloc(c->map_bytes))) {
        point(c);
        return 0;
    }
    kv_cache_free(c);
    return -1;
}

int kv_cache_init(kv_cache *c, const ph_model *m, int32_t n_ctx, ph_err *err) {
    if (kv_cache_init_cells(c, m->hp.n_attn_layer, cell_bytes(&m->hp), n_ctx) == 0 && init_recurrent(c, &m->hp) == 0)
        return 0;
    kv_cache_free(c);
    return err_set(err, "out of memory for a context of %d tokens", n_ctx);
}

uint8_t *kv_cache_cells(const kv_cache *c, int32_t row, int32_t l, int kind) {
    const int32_t b = row / KV_BLOCK_ROWS, r = row % KV_BLOCK_ROWS;
    return c->rows.blocks[b] + ((size_t)(2 * l + kind) * KV_BLOCK_ROWS + (size_t)r) * c->row_bytes;
}

void kv_cache_free(kv_cache *c) {
    big_free(c->map, c->map_bytes);
    free(c->rows.blocks);
    free(c->rows.conv);
    free(c->rows.ssm);
    free(c->recurrent);
    for (int i = 0; i < KV_SNAPSHOTS; i++) free(c->snap[i]);
    memset(c, 0, sizeof *c);
}

void *kv_cache_swap_map(kv_cache *c, void *fresh) {
    void *old = c->map;
    c->map = fresh;
    c->rows.n_rows = 0;
    clear_recurrent(c);
    point(c);
    return old;
}

void kv_cache_adopt_map(kv_cache *c, void *map, int32_t n) {
    big_free(kv_cache_swap_map(c, map), c->map_bytes);
    c->rows.n_rows = n;
}

/* Gives back the whole pages of [lo, hi) (a hint: an error keeps them). */
static void give_back(uintptr_t lo, uintptr_t hi) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    lo = (lo + pg - 1) / pg * pg;
    hi = hi / pg * pg;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void kv_cache_trim_map(const kv_cache *c, void *map, int32_t n) {
    if (n < 0) n = 0;
    const uintptr_t base = (uintptr_t)map, part = (size_t)KV_BLOCK_ROWS * c->row_bytes;
    const int32_t full = n / KV_BLOCK_ROWS, r = n % KV_BLOCK_ROWS;
    if (r) /* the block of row n: each part's cells past row r */
        for (int i = 0; i < 2 * c->n_layer; i++) {
            const uintptr_t p = base + full * block_bytes(c) + (size_t)i * part;
            give_back(p + (size_t)r * c->row_bytes, p + part);
        }
    give_back(base + (size_t)(full + (r > 0)) * block_bytes(c), base + c->map_bytes);
}

void kv_cache_truncate(kv_cache *c, int32_t n) {
    if (n >= c->rows.n_rows) return;
    c->rows.n_rows = n < 0 ? 0 : n;
    if (c->rows.n_rows == 0) {
        clear_recurrent(c);
        return;
    }
    while (c->n_snap && c->snap_rows[c->n_snap - 1] > n) c->n_snap--;
    if (c->recurrent && c->n_snap) memcpy(c->recurrent, c->snap[c->n_snap - 1], c->recurrent_floats * sizeof(float));
}

int32_t kv_rows_at_most(const int32_t *rows, int n, int32_t x) {
    while (n && rows[n - 1] > x) n--;
    return n ? rows[n - 1] : 0;
}

int32_t kv_cache_cut_point(const kv_cache *c, int32_t n) {
    if (!c->recurrent || n >= c->rows.n_rows) return n < c->rows.n_rows ? n : c->rows.n_rows;
    return kv_rows_at_most(c->snap_rows, c->n_snap, n);
}

/* Adds state (the one after row n) as the latest snapshot, the earliest
 * dropped when KV_SNAPSHOTS are kept; nothing when memory is short. */
static void add_snapshot(kv_cache *c, const float *state, int32_t n) {
    if (c->n_snap == KV_SNAPSHOTS) { /* the earliest one's copy is reused for this one */
        float *first = c->snap[0];
        memmove(c->snap, c->snap + 1, (KV_SNAPSHOTS - 1) * sizeof *c->snap);
        memmove(c->snap_rows, c->snap_rows + 1, (KV_SNAPSHOTS - 1) * sizeof *c->snap_rows);
        c->snap[--c->n_snap] = first;
    }
    float **s = &c->snap[c->n_snap];
    if (!*s && !(*s = malloc(c->recurrent_floats * sizeof(float)))) return;
    memcpy(*s, state, c->recurrent_floats * sizeof(float));
    c->snap_rows[c->n_snap++] = n;
}

void kv_cache_snapshot(kv_cache *c) {
    const int32_t n = c->rows.n_rows;
    if (c->recurrent && n > 0 && !(c->n_snap && c->snap_rows[c->n_snap - 1] == n)) add_snapshot(c, c->recurrent, n);
}

int kv_cache_recurrent_points(const kv_cache *c, int32_t rows[KV_SNAPSHOTS + 1]) {
    if (!c->recurrent) return 0;
    memcpy(rows, c->snap_rows, (size_t)c->n_snap * sizeof *rows);
    const bool frontier = !(c->n_snap && c->snap_rows[c->n_snap - 1] == c->rows.n_rows);
    if (frontier) rows[c->n_snap] = c->rows.n_rows;
    return c->n_snap + frontier;
}

void kv_cache_save_recurrent(const kv_cache *c, float *dst) {
    int32_t rows[KV_SNAPSHOTS + 1];
    const int n = kv_cache_recurrent_points(c, rows);
    for (int i = 0; i < n; i++)
        memcpy(dst + (size_t)i * c->recurrent_floats, i < c->n_snap ? c->snap[i] : c->recurrent,
               c->recurrent_floats * sizeof(float));
}

void kv_cache_load_recurrent(kv_cache *c, const float *src, const int32_t *rows, int n_points, int32_t n) {
    int at = n_points - 1;
    while (at > 0 && rows[at] != n) at--;
    c->n_snap = 0;
    for (int i = at + 1 > KV_SNAPSHOTS ? at + 1 - KV_SNAPSHOTS : 0; i <= at; i++)
        add_snapshot(c, src + (size_t)i * c->recurrent_floats, rows[i]);
    memcpy(c->recurrent, src + (size_t)at * c->recurrent_floats, c->recurrent_floats * sizeof(float));
}

size_t kv_cache_bytes(const kv_cache *c, int32_t n) { return (size_t)blocks_for(n) * block_bytes(c); }

/* The first n rows of src to dst, both in the block layout: whole blocks,
 * then the rows of the last one part by part (the pages past them left
 * untouched, so not backed in dst). */
static void copy_rows(const kv_cache *c, uint8_t *dst, const uint8_t *src, int32_t n) {
    const int32_t full = n / KV_BLOCK_ROWS, r = n % KV_BLOCK_ROWS;
    const size_t at = (size_t)full * block_bytes(c), part = (size_t)KV_BLOCK_ROWS * c->row_bytes;
    memcpy(dst, src, at);
    if (r)
        for (int i = 0; i < 2 * c->n_layer; i++)
            memcpy(dst + at + (size_t)i * part, src + at + (size_t)i * part, (size_t)r * c->row_bytes);
}

void kv_cache_save(const kv_cache *c, int32_t n, void *dst) { copy_rows(c, dst, c->map, n); }

void kv_cache_load(kv_cache *c, const void *src, int32_t n) {
    copy_rows(c, c->map, src, n);
    c->rows.n_rows = n;
}
