/* mat_mul: convert the activation rows once, then dot products.
 *
 * Decode (one row): the output rows are dealt out in chunks through an atomic
 * counter, so a thread that gets less CPU time simply takes fewer chunks.
 *
 * Prefill (many rows): the work is cut into tiles of bo weight rows x bx
 * activation rows. Inside a tile, each group of mx activation rows (a few KB,
 * held in L1) meets every weight row of the tile (bo rows, sized to stay in
 * L2) through the plan's mw x mx tile kernel, so the weights come from memory
 * about once per bx rows rather than once per row.
 *
 * Packed matrices (mat_pack) go the same two ways with groups of 16
 * weight rows as the unit: the plan's tile takes one group and up to mx
 * activation rows, and decode is that tile with one row. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels_impl.h"

#define PH_MM_W_TILE_BYTES      (128 * 1024) /* weight rows per tile: about this many bytes */
#define PH_MM_X_TILE_ROWS       256          /* activation rows per tile (at most) */
#define PH_MM_CHUNKS_PER_THREAD 16           /* decode: chunks per thread, for balance */

typedef struct mm_ctx {
    const mm_plan *p;
    const pk_plan *pk; /* packed matrix: its plan (p is then unused) */
    size_t gb;         /* packed: bytes of one group of 16 weight rows */
    const wmat *w;
    const float *x;
    int64_t n_rows;
    uint8_t *xbuf;     /* converted rows, xb bytes apart (NULL: x is used as is) */
    const uint8_t *xq; /* the rows the dots read: xbuf or x */
    size_t xb;
    float *y;
    int64_t chunk;        /* decode: rows per chunk */
    int64_t bo, bx, n_ob; /* prefill: tile shape, tiles along the outputs */
    int64_t n_items;      /* chunks or tiles */
    atomic_long next;     /* next item to take (a late thread's share goes to the others) */
} mm_ctx;

static void convert_row(const mm_ctx *c, int64_t r) {
    const wmat *w = c->w;
    if (c->pk && c->pk->act) {
        c->pk->act(c->x + r * w->n_in, c->xbuf + r * c->xb, w->n_in);
    } else if (c->pk) {
        kern_table()->act[type_get(w->type)->dot_type](c->x + r * w->n_in, c->xbuf + r * c->xb, w->n_in);
        pk_act_extras(w->type, c->xbuf + r * c->xb, w->n_in);
    } else {
        c->p->act(c->x + r * w->n_in, c->xbuf + r * c->xb, w->n_in);
    }
}

static void convert_rows(void *vctx, int ith, int nth) {
    mm_ctx *c = vctx;
    long lo, hi;
    tpool_split_range((long)c->n_rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) convert_row(c, r);
}

static long take(mm_ctx *c) { return atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed); }

/* Packed: activation rows r0..r1 times weight rows o0..o1 (o0 a multiple of mw). */
static void packed_block(const mm_ctx *c, int64_t o0, int64_t o1, int64_t r0, int64_t r1) {
    const wmat *w = c->w;
    const pk_plan *pk = c->pk;
    const uint8_t *wp = w->packed;
    const size_t ldy = (size_t)w->n_out;
    for (int64_t r = r0; r < r1; r += pk->mx) {
        int nr = (int)(r1 - r < pk->mx ? r1 - r : pk->mx);
        for (int64_t o = o0; o < o1; o += pk->mw)
            pk->tile(w->n_in, wp + (size_t)(o / PH_PK_ROWS) * c->gb, c->xq + r * c->xb, c->xb, nr, c->y + r * ldy + o,
                     ldy, (int)(o1 - o < pk->mw ? o1 - o : pk->mw));
    }
}

static void decode_rows(void *vctx, int ith, int nth) {
    (void)ith, (void)nth;
    mm_ctx *c = vctx;
    const wmat *w = c->w;
    const uint8_t *wd = w->data;
    for (long it = take(c); it < c->n_items; it = take(c)) {
        int64_t o0 = it * c->chunk, o1 = o0 + c->chunk < w->n_out ? o0 + c->chunk : w->n_out;
        if (c->pk) packed_block(c, o0, o1, 0, 1);
        else
            for (int64_t o = o0; o < o1; o++) c->y[o] = c->p->dot(w->n_in, wd + o * w->row_bytes, c->xq);
    }
}

static void prefill_tiles(void *vctx, int ith, int nth) {
    (void)ith, (void)nth;
    mm_ctx *c = vctx;
    const wmat *w = c->w;
    const mm_plan *p = c->p;
    const uint8_t *wd = w->data;
    const size_t rb = w->row_bytes, ldy = (size_t)w->n_out;
    for (long it = take(c); it < c->n_items; it = take(c)) {
        int64_t o0 = (it % c->n_ob) * c->bo, r0 = (it / c->n_ob) * c->bx;
        int64_t o1 = o0 + c->bo < w->n_out ? o0 + c->bo : w->n_out;
        int64_t r1 = r0 + c->bx < c->n_rows ? r0 + c->bx : c->n_rows;
        if (c->pk) {
            packed_block(c, o0, o1, r0, r1);
            continue;
        }
        for (int64_t r = r0; r < r1; r += p->mx) {
            int64_t nr = r1 - r < p->mx ? r1 - r : p->mx;
            const uint8_t *xr = c->xq + r * c->xb;
            float *yr = c->y + r * ldy;
            for (int64_t o = o0; o < o1; o += p->mw) {
                int64_t no = o1 - o < p->mw ? o1 - o : p->mw;
                if (p->tile && nr == p->mx && no == p->mw) {
                    p->tile(w->n_in, wd + o * rb, rb, xr, c->xb, yr + o, ldy);
                    continue;
                }
                for (int64_t i = 0; i < nr; i++)
                    for (int64_t j = 0; j < no; j++)
                        yr[i * ldy + o + j] = p->dot(w->n_in, wd + (o + j) * rb, xr + i * c->xb);
            }
        }
    }
}

static int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

void mat_mul(tpool *pool, const wmat *w, const float *x, int64_t n_rows, float *y) {
    if (n_rows <= 0 || w->n_out <= 0) return;
    const type_info *ti = type_get(w->type);
    const kernel_table *kt = kern_table();
    if (w->type < 0 || w->type >= PH_TYPE_COUNT || !kt->mm[w->type].dot || w->n_in % ti->block_elems) {
        fprintf(stderr, "pinhole: mat_mul: cannot multiply a %s matrix with rows of %lld\n", ti->name,
                (long long)w->n_in);
        abort();
    }
    int nth = tpool_size(pool);
    mm_ctx c = {.p = &kt->mm[w->type], .w = w, .x = x, .n_rows = n_rows, .y = y};
    atomic_init(&c.next, 0);
    if (w->packed && kt->pk[w->type].tile) {
        c.pk = &kt->pk[w->type];
        c.gb = (size_t)(w->n_in / ti->block_elems) * pk_block_bytes(w->type);
    }

    if (c.pk || c.p->act) {
        void *buf;
        c.xb = round_up(
            c.pk ? (int64_t)pk_act_bytes(w->type, w->n_in) : (int64_t)type_row_bytes(c.p->act_type, w->n_in), 64);
        if (posix_memalign(&buf, 64, c.xb * (size_t)n_rows) != 0) {
            fprintf(stderr, "pinhole: mat_mul: out of memory for %lld activation rows\n", (long long)n_rows);
            abort();
        }
        c.xbuf = buf;
        c.xq = buf;
        if (n_rows == 1) convert_row(&c, 0);
        else tpool_run(pool, convert_rows, &c);
    } else {
        c.xq = (const uint8_t *)x;
        c.xb = (size_t)w->n_in * sizeof(float);
    }

    if (n_rows == 1) {
        int64_t want = (int64_t)nth * PH_MM_CHUNKS_PER_THREAD;
        c.chunk = (w->n_out + want - 1) / want;
        if (c.chunk < 16) c.chunk = 16;
        if (c.pk) c.chunk = round_up(c.chunk, c.pk->mw);
        c.n_items = (w->n_out + c.chunk - 1) / c.chunk;
        tpool_run(pool, decode_rows, &c);
    } else {
        int64_t mw = c.pk ? c.pk->mw : c.p->mw;
        int64_t bo = (PH_MM_W_TILE_BYTES / (int64_t)w->row_bytes) / mw * mw;
        if (bo < mw) bo = mw;
        /* enough tiles along the outputs for the threads to balance */
        int64_t bal = round_up((w->n_out + 8 * nth - 1) / (8 * nth), mw);
        if (bo > bal) bo = bal;
        c.bo = bo;
        c.bx = n_rows < PH_MM_X_TILE_ROWS ? n_rows : PH_MM_X_TILE_ROWS;
        c.n_ob = (w->n_out + bo - 1) / bo;
        c.n_items = c.n_ob * ((n_rows + c.bx - 1) / c.bx);
        tpool_run(pool, prefill_tiles, &c);
    }
    free(c.xbuf);
}

/* (here, beside the kernels in use: pack.c only lays out blocks and knows no table) */
size_t mat_pack_size(const wmat *m) {
    size_t bb = pk_block_bytes(m->type);
    if (!bb || !kern_table()->pk[m->type].tile || m->n_in % type_get(m->type)->block_elems) return 0;
    int64_t groups = (m->n_out + PH_PK_ROWS - 1) / PH_PK_ROWS;
    return (size_t)groups * (size_t)(m->n_in / type_get(m->type)->block_elems) * bb;
}
