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

typedef struct tiled_job {
    const attn_args *a;
    const attn_kernels *k;
    int64_t n_groups, n_tasks;
    atomic_long next; /* next task to take; each thread starts at task ith */
} tiled_job;

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
static void tiled_task(const tiled_job *job, int h, int64_t q0, int64_t q1, const tiled_work *w) {
    const attn_args *a = job->a;
    const attn_kernels *kk = job->k;
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

static void tiled_worker(void *ctx, int ith, int nth) {
    (void)nth;
    tiled_job *job = ctx;
    const attn_args *a = job->a;
    const size_t d = (size_t)a->head_dim, TQ = PH_ATTN_TILE_Q, TK = PH_ATTN_TILE_KV;
    const size_t per_tile = 2 * d * TQ + 3 * TQ;
    float *buf = NULL;
    if (posix_memalign((void **)&buf, 64, (2 * TK * d + TK * TQ + ATTN_GROUP * per_tile) * sizeof(float)))
        abort(); /* a few hundred KiB; nothing sensible to do without it */
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
    /* head-major, so the threads share one head's K and V in cache */
    const int64_t span = (int64_t)ATTN_GROUP * PH_ATTN_TILE_Q;
    for (long t = ith; t < job->n_tasks; t = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed)) {
        const int h = (int)(t / job->n_groups);
        const int64_t q0 = t % job->n_groups * span;
        tiled_task(job, h, q0, q0 + span < a->n_q ? q0 + span : a->n_q, &w);
    }
    free(buf);
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
typedef struct gqa_job {
    const attn_args *a;
    const attn_kernels *k;
    int64_t n_cols;  /* per KV head */
    int64_t n_wide;  /* wide tiles per KV head */
    int64_t n_tiles; /* tiles per KV head */
    int heads;       /* KV heads per task */
    int64_t n_runs, n_tasks;
    atomic_long next; /* next task to take; each thread starts at task ith */
} gqa_job;

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
static void gqa_task(const gqa_job *job, int g0, int g1, int64_t col0, int nc, bool wide, const gqa_work *w) {
    const attn_args *a = job->a;
    const attn_kernels *kk = job->k;
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

static void gqa_worker(void *ctx, int ith, int nth) {
    (void)nth;
    gqa_job *job = ctx;
    const attn_args *a = job->a;
    const size_t d = (size_t)a->head_dim, TQ = PH_ATTN_TILE_Q, TK = PH_ATTN_TILE_KV, nh = (size_t)job->heads;
    float *buf = NULL;
    if (posix_memalign((void **)&buf, 64,
                       (2 * TK * d + TK * TQ + nh * (2 * d * TQ + 3 * TQ)) * sizeof(float) + TQ * sizeof(int64_t)))
        abort(); /* at most a few MiB; nothing sensible to do without it */
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
    for (long t = ith; t < job->n_tasks; t = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed)) {
        const int g0 = (int)(t / job->n_tiles) * job->heads;
        const int g1 = g0 + job->heads < a->n_head_kv ? g0 + job->heads : a->n_head_kv;
        const int64_t tile = t % job->n_tiles;
        const bool wide = tile < job->n_wide;
        const int64_t col0 =
            wide ? tile * PH_ATTN_TILE_Q : job->n_wide * PH_ATTN_TILE_Q + (tile - job->n_wide) * PH_ATTN_TILE_N;
        const int64_t left = job->n_cols - col0, T = wide ? PH_ATTN_TILE_Q : PH_ATTN_TILE_N;
        gqa_task(job, g0, g1, col0, (int)(left < T ? left : T), wide, &w);
    }
    free(buf);
}

void attn_compute(tpool *pool, const attn_args *a) {
    const attn_kernels *k = kernels_isa() >= PH_ISA_AVX512 ? &attn_kernels_avx512
                            : kernels_isa() >= PH_ISA_AVX2 ? &attn_kernels_avx2
                                                           : &attn_kernels_ref;
    if (a->n_q <= 0) return;
    if (a->n_q >= PH_ATTN_TILE_Q) {
        tiled_job job = {.a = a, .k = k};
        job.n_groups = (a->n_q + ATTN_GROUP * PH_ATTN_TILE_Q - 1) / (ATTN_GROUP * PH_ATTN_TILE_Q);
        job.n_tasks = job.n_groups * a->n_head;
        atomic_init(&job.next, tpool_size(pool));
        tpool_run(pool, tiled_worker, &job);
        return;
    }
    gqa_job job = {.a = a, .k = k};
    job.n_cols = a->n_q * (a->n_head / a->n_head_kv);
    job.n_wide = job.n_cols / PH_ATTN_TILE_Q;
    job.n_tiles = job.n_wide + (job.n_cols % PH_ATTN_TILE_Q + PH_ATTN_TILE_N - 1) / PH_ATTN_TILE_N;
    /* the KV heads in one run per thread where each has a tile to itself,
     * else one head per task (the split changes no result) */
    const int nth = tpool_size(pool);
    job.heads = job.n_tiles < 2 ? (a->n_head_kv + nth - 1) / nth : 1;
    job.n_runs = (a->n_head_kv + job.heads - 1) / job.heads;
    job.n_tasks = job.n_tiles * job.n_runs;
    atomic_init(&job.next, tpool_size(pool));
    tpool_run(pool, gqa_worker, &job);
}
