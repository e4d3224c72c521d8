#include "kernels/attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* The scalar tiles, for T columns (the wide and the narrow ones alike). */
static void ref_f16_to_f32(const f16_bits *src, float *dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = fp16_to_f32(src[i]);
}

static void ref_qk(const float *k, int nk, const float *qt, int d, float scale, float *st, int T) {
    for (int j = 0; j < nk; j++)
        for (int i = 0; i < T; i++) {
            float s = 0.0f;
            for (int t = 0; t < d; t++) s += k[j * d + t] * qt[t * T + i];
            st[j * T + i] = s * scale;
        }
}

static void ref_softmax(float *st, int nk, float *M, float *L, float *ms, int T) {
    for (int i = 0; i < T; i++) {
        float m = M[i];
        for (int j = 0; j < nk; j++) m = st[j * T + i] > m ? st[j * T + i] : m;
        float sum = 0.0f;
        for (int j = 0; j < nk; j++) {
            float *p = &st[j * T + i];
            *p = *p == -INFINITY ? 0.0f : expf(*p - m);
            sum += *p;
        }
        ms[i] = M[i] == m ? 1.0f : expf(M[i] - m);
        L[i] = L[i] * ms[i] + sum;
        M[i] = m;
    }
}

static void ref_pv(const float *p, int nk, const float *v, int d, const float *ms, float *o, int T, int nc) {
    for (int i = 0; i < nc; i++)
        for (int t = 0; t < d; t++) {
            float acc = o[i * d + t] * ms[i];
            for (int j = 0; j < nk; j++) acc += p[j * T + i] * v[j * d + t];
            o[i * d + t] = acc;
        }
}

static void ref_qk_tile(const float *k, int nk, const float *qt, int d, float scale, float *st) {
    ref_qk(k, nk, qt, d, scale, st, PH_ATTN_TILE_Q);
}
static void ref_softmax_tile(float *st, int nk, float *M, float *L, float *ms) {
    ref_softmax(st, nk, M, L, ms, PH_ATTN_TILE_Q);
}
static void ref_pv_tile(const float *p, int nk, const float *v, int d, const float *ms, float *o) {
    ref_pv(p, nk, v, d, ms, o, PH_ATTN_TILE_Q, PH_ATTN_TILE_Q);
}
static void ref_qk_narrow(const float *k, int nk, const float *qt, int d, float scale, float *st, int nc) {
    (void)nc; /* all columns: as cheap here */
    ref_qk(k, nk, qt, d, scale, st, PH_ATTN_TILE_N);
}
static void ref_softmax_narrow(float *st, int nk, float *M, float *L, float *ms) {
    ref_softmax(st, nk, M, L, ms, PH_ATTN_TILE_N);
}
static void ref_pv_narrow(const float *p, int nk, const float *v, int d, const float *ms, float *o, int nc) {
    ref_pv(p, nk, v, d, ms, o, PH_ATTN_TILE_N, nc);
}

const attn_kernels attn_kernels_ref = {ref_f16_to_f32, ref_qk_tile,        ref_softmax_tile, ref_pv_tile,
                                       ref_qk_narrow,  ref_softmax_narrow, ref_pv_narrow};

/* ---- 64 rows or more: tiles of one head's rows ---------------------------- */

/* Query tiles per task: each tile of K and V is widened to f32 once for
 * this many query tiles. */
#define ATTN_GROUP 4

/* Per-thread buffers of the tiled path. */
typedef struct tiled_work {
    float *kf, *vf;                                        /* [TK][d] a tile of keys / values as f32 */
    float *st;                                             /* [TK][TQ] scores, then probabilities */
    float *qt[ATTN_GROUP];                                 /* [d][TQ] a query tile, transposed */
    float *o[ATTN_GROUP];                                  /* [TQ][d] running sums of p * v */
    float *M[ATTN_GROUP], *L[ATTN_GROUP], *ms[ATTN_GROUP]; /* [TQ] */
} tiled_work;

/* One task: query head h, query rows [q0, q1) (at most ATTN_GROUP tiles)
 * against every visible cell, PH_ATTN_TILE_KV cells at a time. */
static void tiled_task(const attn_args *a, const attn_kernels *kk, int h, int64_t q0, int64_t q1,
                       const tiled_work *w) {
    const int d = a->head_dim, TQ = PH_ATTN_TILE_Q, TK = PH_ATTN_TILE_KV;
    const int g = h / (a->n_head / a->n_head_kv);
    const int nt = (int)((q1 - q0 + TQ - 1) / TQ);

    for (int b = 0; b < nt; b++) {
        const int64_t qb = q0 + (int64_t)b * TQ;
        for (int t = 0; t < d; t++)
            for (int i = 0; i < TQ; i++)
                w->qt[b][t * TQ + i] = qb + i < q1 ? a->q[(qb + i) * a->q_stride + (int64_t)h * d + t] : 0.0f;
        memset(w->o[b], 0, (size_t)TQ * d * sizeof(float));
        for (int i = 0; i < TQ; i++) {
            w->M[b][i] = -INFINITY;
            w->L[b][i] = 0.0f;
        }
    }
    int64_t last = a->causal ? a->first_cell + q1 : a->n_kv; /* cells [0, last) */
    if (last > a->n_kv) last = a->n_kv;
    for (int64_t c0 = 0; c0 < last; c0 += TK) {
        const int nk = (int)(last - c0 < TK ? last - c0 : TK);
        /* the tile lies in one block (attn_args) */
        const int64_t b = c0 / a->block_rows;
        const f16_bits *kt = (const f16_bits *)(a->blocks[b] + a->k_off) + (c0 - b * a->block_rows) * a->kv_stride,
                       *vt = (const f16_bits *)(a->blocks[b] + a->v_off) + (c0 - b * a->block_rows) * a->kv_stride;
        for (int j = 0; j < nk; j++) {
            const int64_t off = j * a->kv_stride + (int64_t)g * d;
            kk->f16_to_f32(kt + off, w->kf + (size_t)j * d, d);
            kk->f16_to_f32(vt + off, w->vf + (size_t)j * d, d);
        }
        for (int b = 0; b < nt; b++) {
            const int64_t qb = q0 + (int64_t)b * TQ;
            /* causal: query row qb + i sees cells up to first_cell + qb + i */
            if (a->causal && c0 > a->first_cell + qb + TQ - 1) continue; /* nothing visible */
            kk->qk_tile(w->kf, nk, w->qt[b], d, a->scale, w->st);
            if (a->causal && c0 + nk - 1 > a->first_cell + qb)
                for (int j = 0; j < nk; j++)
                    for (int i = 0; i < TQ; i++)
                        if (c0 + j > a->first_cell + qb + i) w->st[j * TQ + i] = -INFINITY;
            kk->softmax_tile(w->st, nk, w->M[b], w->L[b], w->ms[b]);
            kk->pv_tile(w->st, nk, w->vf, d, w->ms[b], w->o[b]);
        }
    }
    for (int b = 0; b < nt; b++)
        for (int i = 0; i < TQ && q0 + (int64_t)b * TQ + i < q1; i++) {
            float *out = a->out + (q0 + (int64_t)b * TQ + i) * a->out_stride + (int64_t)h * d;
            const float inv = w->L[b][i] > 0.0f ? 1.0f / w->L[b][i] : 0.0f;
            for (int t = 0; t < d; t++) out[t] = w->o[b][i * d + t] * inv;
        }
}

static size_t tiled_work_bytes(size_t d) {
    const size_t TQ = PH_ATTN_TILE_Q, TK = PH_ATTN_TILE_KV;
    return (2 * TK * d + TK * TQ + ATTN_GROUP * (2 * d * TQ + 3 * TQ)) * sizeof(float);
}

static tiled_work tiled_work_at(float *buf, size_t d) {
    const size_t TQ = PH_ATTN_TILE_Q, TK = PH_ATTN_TILE_KV, per_tile = 2 * d * TQ + 3 * TQ;
    tiled_work w;
    w.kf = buf;
    w.vf = w.kf + TK * d;
    w.st = w.vf + TK * d;
    for (int b = 0; b < ATTN_GROUP; b++) {
        w.qt[b] = w.st + TK * TQ + b * per_tile;
        w.o[b] = w.qt[b] + d * TQ;
        w.M[b] = w.o[b] + TQ * d;
        w.L[b] = w.M[b] + TQ;
        w.ms[b] = w.L[b] + TQ;
    }
    return w;
}

void attn_kv_contiguous(attn_args *a, const uint8_t **table, const void *base, size_t k_off, size_t v_off) {
    table[0] = base;
    a->blocks = table;
    a->block_rows = a->n_kv > 0 ? a->n_kv : 1;
    a->k_off = k_off;
    a->v_off = v_off;
}

/* ---- fewer rows: tiles of a KV head's queries ----------------------------- */

/* With fewer than PH_ATTN_TILE_Q rows, a tile's columns are the queries of
 * one KV head: column c of head g is row c / group of query head
 * g * group + c % group. Its n_q * group columns go in wide tiles while 64
 * are left, then in narrow ones. A task is one tile's columns for a run of
 * KV heads, which meet the cells tile by tile together: a cell's row holds
 * all heads, so a run of them reads it in one piece (one head alone would
 * read short pieces far apart, slow once the cells are out of cache). */
/* Per-thread buffers, for `heads` KV heads. */
typedef struct gqa_work {
    float *kf, *vf; /* [TK][d] a tile of one head's keys / values as f32 */
    float *st;      /* [TK][TQ] */
    float *qt;      /* per head [d][T] */
    float *o;       /* per head [T][d] */
    float *M, *L, *ms;
    int64_t *lim; /* [TQ] the last cell each column sees */
} gqa_work;

/* KV heads [g0, g1), columns [col0, col0 + nc) of each, in one tile of T =
 * PH_ATTN_TILE_Q (wide) or PH_ATTN_TILE_N columns. */
static void gqa_task(const attn_args *a, const attn_kernels *kk, int g0, int g1, int64_t col0, int nc, bool wide,
                     const gqa_work *w) {
    const int d = a->head_dim, TK = PH_ATTN_TILE_KV, T = wide ? PH_ATTN_TILE_Q : PH_ATTN_TILE_N;
    const int group = a->n_head / a->n_head_kv;
    const size_t qo = (size_t)d * T; /* one head's qt, o */
    int64_t lim_lo = INT64_MAX, lim_hi = -1;
    for (int i = 0; i < nc; i++) {
        w->lim[i] = a->causal ? a->first_cell + (col0 + i) / group : a->n_kv - 1;
        if (w->lim[i] < lim_lo) lim_lo = w->lim[i];
        if (w->lim[i] > lim_hi) lim_hi = w->lim[i];
    }
    for (int g = g0; g < g1; g++) {
        float *qt = w->qt + (g - g0) * qo;
        for (int i = 0; i < T; i++) {
            const int64_t c = col0 + i;
            if (i < nc) {
                const float *q = a->q + c / group * a->q_stride + (int64_t)(g * group + (int)(c % group)) * d;
                for (int t = 0; t < d; t++) qt[t * T + i] = q[t];
            } else {
                for (int t = 0; t < d; t++) qt[t * T + i] = 0.0f;
            }
            w->M[(g - g0) * T + i] = -INFINITY;
            w->L[(g - g0) * T + i] = 0.0f;
        }
    }
    memset(w->o, 0, (size_t)(g1 - g0) * qo * sizeof(float));
    const int64_t last = lim_hi + 1 < a->n_kv ? lim_hi + 1 : a->n_kv; /* cells [0, last) */
    for (int64_t c0 = 0; c0 < last; c0 += TK) {
        const int nk = (int)(last - c0 < TK ? last - c0 : TK);
        const int64_t b = c0 / a->block_rows; /* the tile lies in one block (attn_args) */
        const f16_bits *kt = (const f16_bits *)(a->blocks[b] + a->k_off) + (c0 - b * a->block_rows) * a->kv_stride,
                       *vt = (const f16_bits *)(a->blocks[b] + a->v_off) + (c0 - b * a->block_rows) * a->kv_stride;
        /* the next head's rows (or the next tile's first head's) are asked
         * for as this head's are read: one head's rows are short pieces far
         * apart, which the hardware prefetchers do not follow */
        const int64_t n1 = last - c0 - TK < TK ? last - c0 - TK : TK, b1 = (c0 + TK) / a->block_rows;
        const f16_bits *kn = NULL, *vn = NULL;
        if (n1 > 0) {
            kn = (const f16_bits *)(a->blocks[b1] + a->k_off) + (c0 + TK - b1 * a->block_rows) * a->kv_stride;
            vn = (const f16_bits *)(a->blocks[b1] + a->v_off) + (c0 + TK - b1 * a->block_rows) * a->kv_stride;
        }
        for (int g = g0; g < g1; g++) {
            float *qt = w->qt + (g - g0) * qo, *o = w->o + (g - g0) * qo, *M = w->M + (g - g0) * T,
                  *L = w->L + (g - g0) * T, *ms = w->ms + (g - g0) * T;
            float *kf = w->kf, *vf = w->vf;
            const f16_bits *kp = g + 1 < g1 ? kt + (g + 1) * d
                                 : kn       ? kn + g0 * d
                                            : NULL,
                           *vp = g + 1 < g1 ? vt + (g + 1) * d
                                 : vn       ? vn + g0 * d
                                            : NULL;
            const int np = g + 1 < g1 ? nk : (int)n1;
            for (int j = 0; j < nk; j++) {
                const int64_t off = j * a->kv_stride + (int64_t)g * d;
                if (j < np)
                    for (int t = 0; t < d; t += 32) {
                        __builtin_prefetch(kp + j * a->kv_stride + t);
                        __builtin_prefetch(vp + j * a->kv_stride + t);
                    }
                kk->f16_to_f32(kt + off, kf + (size_t)j * d, d);
                kk->f16_to_f32(vt + off, vf + (size_t)j * d, d);
            }
            if (wide) kk->qk_tile(kf, nk, qt, d, a->scale, w->st);
            else kk->qk_narrow(kf, nk, qt, d, a->scale, w->st, nc);
            if (c0 + nk - 1 > lim_lo) /* some column sees fewer cells */
                for (int j = 0; j < nk; j++)
                    for (int i = 0; i < nc; i++)
                        if (c0 + j > w->lim[i]) w->st[j * T + i] = -INFINITY;
            if (wide) {
                kk->softmax_tile(w->st, nk, M, L, ms);
                kk->pv_tile(w->st, nk, vf, d, ms, o);
            } else {
                kk->softmax_narrow(w->st, nk, M, L, ms);
                kk->pv_narrow(w->st, nk, vf, d, ms, o, nc);
            }
        }
    }
    for (int g = g0; g < g1; g++)
        for (int i = 0; i < nc; i++) {
            const int64_t c = col0 + i;
            const float l = w->L[(g - g0) * T + i], inv = l > 0.0f ? 1.0f / l : 0.0f;
            const float *o = w->o + (g - g0) * qo + (size_t)i * d;
            float *out = a->out + c / group * a->out_stride + (int64_t)(g * group + (int)(c % group)) * d;
            for (int t = 0; t < d; t++) out[t] = o[t] * inv;
        }
}

static size_t gqa_work_bytes(size_t d, size_t nh) {
    const size_t TQ = PH_ATTN_TILE_Q, TK = PH_ATTN_TILE_KV;
    return (2 * TK * d + TK * TQ + nh * (2 * d * TQ + 3 * TQ)) * sizeof(float) + TQ * sizeof(int64_t);
}

static gqa_work gqa_work_at(float *buf, size_t d, size_t nh) {
    const size_t TQ = PH_ATTN_TILE_Q, TK = PH_ATTN_TILE_KV;
    gqa_work w;
    w.kf = buf;
    w.vf = w.kf + TK * d;
    w.st = w.vf + TK * d;
    w.qt = w.st + TK * TQ;
    w.o = w.qt + nh * d * TQ;
    w.M = w.o + nh * TQ * d;
    w.L = w.M + nh * TQ;
    w.ms = w.L + nh * TQ;
    w.lim = (int64_t *)(w.ms + nh * TQ);
    return w;
}

/* ---- a batch of calls: one pool job -------------------------------------- */

/* One call's tasks, numbered [first, first + n_tasks) in the batch. Tiled:
 * a task is a head's group of query tiles (head-major, so the threads
 * share one head's K and V in cache); else a run of KV heads times one
 * tile of their columns. */
typedef struct attn_part {
    const attn_args *a;
    bool tiled;
    int64_t n_groups;                /* tiled: groups of query tiles per head */
    int64_t n_cols, n_wide, n_tiles; /* per KV head: columns, wide tiles, tiles */
    int heads;                       /* KV heads per task */
    int64_t first, n_tasks;
} attn_part;

typedef struct attn_job {
    const attn_kernels *k;
    const attn_part *parts;
    int n_parts;
    int64_t n_tasks;
    size_t buf_bytes; /* per thread: the largest part's buffers */
    atomic_long next; /* next task to take; each thread starts at task ith */
} attn_job;

static void part_task(const attn_part *p, const attn_kernels *k, int64_t t, void *buf) {
    const attn_args *a = p->a;
    const size_t d = (size_t)a->head_dim;
    if (p->tiled) {
        const tiled_work w = tiled_work_at(buf, d);
        const int h = (int)(t / p->n_groups);
        const int64_t span = (int64_t)ATTN_GROUP * PH_ATTN_TILE_Q, q0 = t % p->n_groups * span;
        tiled_task(a, k, h, q0, q0 + span < a->n_q ? q0 + span : a->n_q, &w);
        return;
    }
    const gqa_work w = gqa_work_at(buf, d, (size_t)p->heads);
    const int g0 = (int)(t / p->n_tiles) * p->heads;
    const int g1 = g0 + p->heads < a->n_head_kv ? g0 + p->heads : a->n_head_kv;
    const int64_t tile = t % p->n_tiles;
    const bool wide = tile < p->n_wide;
    const int64_t col0 =
        wide ? tile * PH_ATTN_TILE_Q : p->n_wide * PH_ATTN_TILE_Q + (tile - p->n_wide) * PH_ATTN_TILE_N;
    const int64_t left = p->n_cols - col0, T = wide ? PH_ATTN_TILE_Q : PH_ATTN_TILE_N;
    gqa_task(a, k, g0, g1, col0, (int)(left < T ? left : T), wide, &w);
}

static void attn_worker(void *ctx, int ith, int nth) {
    (void)nth;
    attn_job *job = ctx;
    void *buf = NULL;
    if (posix_memalign(&buf, 64, job->buf_bytes)) abort(); /* at most a few MiB; nothing sensible to do without it */
    int p = 0;                                             /* a thread's tasks only grow: its part never goes back */
    for (long t = ith; t < job->n_tasks; t = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed)) {
        while (t >= job->parts[p].first + job->parts[p].n_tasks) p++;
        part_task(&job->parts[p], job->k, t - job->parts[p].first, buf);
    }
    free(buf);
}

void attn_compute_n(tpool *pool, const attn_args *a, int n) {
    const attn_kernels *k = kernels_isa() >= PH_ISA_AVX512 ? &attn_kernels_avx512
                            : kernels_isa() >= PH_ISA_AVX2 ? &attn_kernels_avx2
                                                           : &attn_kernels_ref;
    const int nth = tpool_size(pool);
    for (int c0 = 0; c0 < n; c0 += PH_ATTN_BATCH) {
        attn_part parts[PH_ATTN_BATCH];
        attn_job job = {.k = k, .parts = parts};
        for (int i = c0; i < n && i < c0 + PH_ATTN_BATCH; i++) {
            const attn_args *ai = &a[i];
            if (ai->n_q <= 0) continue;
            attn_part *p = &parts[job.n_parts++];
            *p = (attn_part){.a = ai, .tiled = ai->n_q >= PH_ATTN_TILE_Q, .first = job.n_tasks};
            size_t bytes;
            if (p->tiled) {
                p->n_groups = (ai->n_q + ATTN_GROUP * PH_ATTN_TILE_Q - 1) / (ATTN_GROUP * PH_ATTN_TILE_Q);
                p->n_tasks = p->n_groups * ai->n_head;
                bytes = tiled_work_bytes((size_t)ai->head_dim);
            } else {
                p->n_cols = ai->n_q * (ai->n_head / ai->n_head_kv);
                p->n_wide = p->n_cols / PH_ATTN_TILE_Q;
                p->n_tiles = p->n_wide + (p->n_cols % PH_ATTN_TILE_Q + PH_ATTN_TILE_N - 1) / PH_ATTN_TILE_N;
                /* the KV heads in one run per thread where each has a tile to
                 * itself, else one head per task (the split changes no result) */
                p->heads = p->n_tiles < 2 ? (ai->n_head_kv + nth - 1) / nth : 1;
                p->n_tasks = p->n_tiles * ((ai->n_head_kv + p->heads - 1) / p->heads);
                bytes = gqa_work_bytes((size_t)ai->head_dim, (size_t)p->heads);
            }
            if (bytes > job.buf_bytes) job.buf_bytes = bytes;
            job.n_tasks += p->n_tasks;
        }
        if (!job.n_tasks) continue;
        atomic_init(&job.next, nth);
        tpool_run(pool, attn_worker, &job);
    }
}

void attn_compute(tpool *pool, const attn_args *a) { attn_compute_n(pool, a, 1); }
