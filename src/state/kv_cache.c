/* The KV cache of one sequence: a table of KV blocks from a pool. */
#include "state/kv_cache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "state/kv_block.h"

static int32_t blocks_for(int32_t n) { return (n + KV_BLOCK_ROWS - 1) / KV_BLOCK_ROWS; }

/* Puts block id at the table's entry b. */
static void set_block(kv_cache *c, int32_t b, int32_t id) {
    c->ids[b] = id;
    c->rows.blocks[b] = id < 0 ? NULL : kv_pool_data(c->pool, id);
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

int kv_cache_init_cells(kv_cache *c, int32_t n_layer, size_t row_bytes, int32_t n_ctx, kv_pool *pool) {
    memset(c, 0, sizeof *c);
    c->n_layer = n_layer;
    c->row_bytes = row_bytes;
    c->rows.n_ctx = n_ctx;
    c->rows.block_rows = KV_BLOCK_ROWS;
    const int32_t nb = blocks_for(n_ctx);
    c->rows.blocks = calloc((size_t)nb, sizeof *c->rows.blocks);
    c->ids = malloc((size_t)nb * sizeof *c->ids);
    const size_t row = 2 * (size_t)n_layer * row_bytes;
    if (c->rows.blocks && c->ids && !pool && (c->own = malloc(sizeof *c->own)) &&
        kv_pool_init(c->own, (size_t)nb * kv_pool_stride(row), row, 2 * n_layer, NULL) == 0)
        pool = c->own;
    else if (c->own) {
        free(c->own);
        c->own = NULL;
    }
    if (!pool || !c->rows.blocks || !c->ids) {
        kv_cache_free(c);
        return -1;
    }
    c->pool = pool;
    for (int32_t i = 0; i < nb; i++) c->ids[i] = -1;
    return 0;
}

int kv_cache_init(kv_cache *c, const ph_model *m, int32_t n_ctx, kv_pool *pool, ph_err *err) {
    if (kv_cache_init_cells(c, m->hp.n_attn_layer, cell_bytes(&m->hp), n_ctx, pool) == 0 &&
        init_recurrent(c, &m->hp) == 0)
        return 0;
    kv_cache_free(c);
    return err_set(err, "out of memory for a context of %d tokens", n_ctx);
}

uint8_t *kv_cache_cells(const kv_cache *c, int32_t row, int32_t l, int kind) {
    const int32_t b = row / KV_BLOCK_ROWS, r = row % KV_BLOCK_ROWS;
    return c->rows.blocks[b] + ((size_t)(2 * l + kind) * KV_BLOCK_ROWS + (size_t)r) * c->row_bytes;
}

void kv_cache_free(kv_cache *c) {
    if (c->pool) kv_cache_drop_blocks(c, 0);
    if (c->own) {
        kv_pool_free(c->own);
        free(c->own);
    }
    free(c->ids);
    free(c->rows.blocks);
    free(c->rows.conv);
    free(c->rows.ssm);
    free(c->recurrent);
    for (int i = 0; i < KV_SNAPSHOTS; i++) free(c->snap[i]);
    memset(c, 0, sizeof *c);
}

/* Whether writing from row n_rows on needs the block of that row copied
 * first (it is held, part of it in use, and not the cache's alone). */
static bool needs_copy(const kv_cache *c) {
    const int32_t b = c->rows.n_rows / KV_BLOCK_ROWS;
    return b < c->n_held && !kv_pool_writable(c->pool, c->ids[b]);
}

int32_t kv_cache_blocks_needed(const kv_cache *c, int32_t n) {
    if (n > c->rows.n_ctx) n = c->rows.n_ctx;
    if (n <= c->rows.n_rows) return 0;
    const int32_t more = blocks_for(n) - c->n_held;
    return (more > 0 ? more : 0) + needs_copy(c);
}

int kv_cache_reserve(kv_cache *c, int32_t n, ph_err *err) {
    if (n > c->rows.n_ctx) n = c->rows.n_ctx;
    const int32_t need = kv_cache_blocks_needed(c, n);
    if (need == 0) return 0;
    const int32_t have = kv_pool_available(c->pool);
    if (have < need)
        return err_set(err,
                       "the KV pool has room for %d more blocks of %.2f MiB (%d rows each) but %d rows need %d: "
                       "%.1f MiB more (start the server with a larger --kv-pool-mib)",
                       have, (double)c->pool->block_bytes / (1 << 20), KV_BLOCK_ROWS, n - c->rows.n_rows, need,
                       (double)(need - have) * (double)c->pool->block_bytes / (1 << 20));
    if (needs_copy(c)) { /* cannot fail: the blocks were counted */
        const int32_t b = c->rows.n_rows / KV_BLOCK_ROWS;
        set_block(c, b, kv_pool_cow(c->pool, c->ids[b], c->rows.n_rows % KV_BLOCK_ROWS));
    }
    while (c->n_held < blocks_for(n)) {
        set_block(c, c->n_held, kv_pool_alloc(c->pool));
        c->n_held++;
    }
    return 0;
}

void kv_cache_push_block(kv_cache *c, int32_t id) {
    set_block(c, c->n_held, id);
    c->n_held++;
}

void kv_cache_drop_blocks(kv_cache *c, int32_t b) {
    if (b < 0) b = 0;
    while (c->n_held > b) {
        c->n_held--;
        kv_pool_unref(c->pool, c->ids[c->n_held]);
        set_block(c, c->n_held, -1);
    }
    if (c->rows.n_rows > b * KV_BLOCK_ROWS) c->rows.n_rows = b * KV_BLOCK_ROWS;
}

void kv_cache_set_rows(kv_cache *c, int32_t n) { c->rows.n_rows = n; }

void kv_cache_replace_block(kv_cache *c, int32_t b, int32_t id) { set_block(c, b, id); }

void kv_cache_truncate(kv_cache *c, int32_t n) {
    if (n < 0) n = 0;
    const int32_t had = c->rows.n_rows;
    if (c->n_held > blocks_for(n)) kv_cache_drop_blocks(c, blocks_for(n));
    if (n >= had) return;
    c->rows.n_rows = n;
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
