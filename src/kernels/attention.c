#include "kernels/attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* Per-cell path (fewer than PH_ATTN_TILE_Q query rows), as llama.cpp's
 * one-row flash attention does it (docs/numerics.md, Attention): q rounded to f16, the running
 * sum of v kept in f16 (rounded after every update), max and sum in f32.
 * Query rows are handled together against one pass over the KV cells, so
 * each cell is converted from f16 once per block, not once per query. */
#define ATTN_QBLOCK 32

static void ref_f16_to_f32(const f16_bits *src, float *dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = fp16_to_f32(src[i]);
}

static float ref_dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static float round_f16(float x) { return fp16_to_f32(f32_to_fp16(x)); }

static void ref_scale_f16(float *acc, float a, int n) {
    for (int i = 0; i < n; i++) acc[i] = round_f16(acc[i] * a);
}

static void ref_mad_f16(float *acc, const float *v, float b, int n) {
    for (int i = 0; i < n; i++) acc[i] = round_f16(fmaf(v[i], b, acc[i]));
}

static void ref_qk_tile(const float *k, int nk, const float *qt, int d, float scale, float *st) {
    for (int j = 0; j < nk; j++)
        for (int i = 0; i < PH_ATTN_TILE_Q; i++) {
            float s = 0.0f;
            for (int t = 0; t < d; t++) s += k[j * d + t] * qt[t * PH_ATTN_TILE_Q + i];
            st[j * PH_ATTN_TILE_Q + i] = s * scale;
        }
}

static void ref_softmax_tile(float *st, int nk, float *M, float *L, float *ms) {
    for (int i = 0; i < PH_ATTN_TILE_Q; i++) {
        float m = M[i];
        for (int j = 0; j < nk; j++) m = st[j * PH_ATTN_TILE_Q + i] > m ? st[j * PH_ATTN_TILE_Q + i] : m;
        float sum = 0.0f;
        for (int j = 0; j < nk; j++) {
            float *p = &st[j * PH_ATTN_TILE_Q + i];
            *p = *p == -INFINITY ? 0.0f : expf(*p - m);
            sum += *p;
        }
        ms[i] = M[i] == m ? 1.0f : expf(M[i] - m);
        L[i] = L[i] * ms[i] + sum;
        M[i] = m;
    }
}

static void ref_pv_tile(const float *p, int nk, const float *v, int d, const float *ms, float *o) {
    for (int i = 0; i < PH_ATTN_TILE_Q; i++)
        for (int t = 0; t < d; t++) {
            float acc = o[i * d + t] * ms[i];
            for (int j = 0; j < nk; j++) acc += p[j * PH_ATTN_TILE_Q + i] * v[j * d + t];
            o[i * d + t] = acc;
        }
}

/* The per-cell pass from the primitives (the reference's, and the
 * definition the fused SIMD versions are checked against). */
static void cells_with(const attn_kernels *kk, const attn_cells *x) {
    const int hd = x->hd;
    for (int64_t c = x->c0; c < x->c1; c++)
        for (int g = 0; g < x->n_g; g++) {
            kk->f16_to_f32(x->k + c * x->stride + (int64_t)g * hd, x->kf, hd);
            int v_ready = 0;
            for (int j = 0; j < x->nq; j++) {
                if (x->causal && c > x->last0 + j / x->group) continue;
                const int64_t jj = (int64_t)g * x->nq + j;
                float s = kk->dot(x->q + jj * hd, x->kf, hd) * x->scale;
                if (!v_ready) {
                    kk->f16_to_f32(x->v + c * x->stride + (int64_t)g * hd, x->vf, hd);
                    v_ready = 1;
                }
                float *o = x->acc + jj * hd;
                float ms = 1.0f, vs = 1.0f;
                if (s > x->M[jj]) {
                    ms = expf(x->M[jj] - s); /* 0 for the first cell */
                    kk->scale_f16(o, ms, hd);
                    x->M[jj] = s;
                } else {
                    vs = expf(s - x->M[jj]);
                }
                kk->mad_f16(o, x->vf, vs, hd);
                x->S[jj] = x->S[jj] * ms + vs;
            }
        }
}

void attn_cells_with(const attn_kernels *kk, const attn_cells *x) { cells_with(kk, x); }

static void ref_cells(const attn_cells *x) { cells_with(&attn_kernels_ref, x); }

const attn_kernels attn_kernels_ref = {ref_cells,   ref_f16_to_f32, ref_dot,          ref_scale_f16,
                                       ref_mad_f16, ref_qk_tile,    ref_softmax_tile, ref_pv_tile};

typedef struct {
    const attn_args *a;
    const attn_kernels *k;
    int64_t n_qblocks;
    int64_t n_tasks;
} attn_job;

/* Per-thread buffers of the per-cell path, for nq queries. */
typedef struct attn_work {
    float *kf, *vf; /* [hd] one cell */
    float *acc;     /* [nq][hd] running sums of p * v, f16 values */
    float *qf;      /* [nq][hd] the queries rounded to f16 */
    float *M, *S;   /* [nq] running max and sum */
} attn_work;

static attn_work attn_work_at(float *buf, int hd, int64_t nq) {
    attn_work w;
    w.kf = buf;
    w.vf = w.kf + hd;
    w.acc = w.vf + hd;
    w.qf = w.acc + nq * hd;
    w.M = w.qf + nq * hd;
    w.S = w.M + nq;
    return w;
}

static size_t attn_work_floats(int hd, int64_t nq) { return (size_t)(2 * hd + nq * (2 * hd + 2)); }

/* The per-cell pass of KV heads [g0, g1): query rows [q0, q1) (all query
 * heads of each head's group) against the visible cells among [c0, c1).
 * Leaves in w, per query jj = (g - g0) * nq + (i - q0) * group + r (nq =
 * (q1 - q0) * group), the running max M[jj], sum S[jj] and f16 sum of
 * p * v acc[jj]. With several heads, each cell's row is read once, in
 * order through memory. */
static void cell_pass(const attn_args *a, const attn_kernels *kk, int g0, int g1, int64_t q0, int64_t q1, int64_t c0,
                      int64_t c1, const attn_work *w) {
    const int hd = a->head_dim;
    const int group = a->n_head / a->n_head_kv;
    const int64_t nq = (q1 - q0) * group;
    memset(w->acc, 0, (size_t)((g1 - g0) * nq * hd) * sizeof(float));
    for (int g = g0; g < g1; g++)
        for (int64_t i = q0; i < q1; i++)
            for (int r = 0; r < group; r++) {
                const int64_t jj = (g - g0) * nq + (i - q0) * group + r;
                const float *q = a->q + i * a->q_stride + (int64_t)(g * group + r) * hd;
                for (int t = 0; t < hd; t++) w->qf[jj * hd + t] = round_f16(q[t]);
                w->M[jj] = -INFINITY;
                w->S[jj] = 0.0f;
            }
    int64_t last = a->causal ? a->first_cell + q1 : a->n_kv; /* cells [0, last) */
    if (last > a->n_kv) last = a->n_kv;
    if (c1 > last) c1 = last;
    attn_cells x = {.stride = a->kv_stride,
                    .n_g = g1 - g0,
                    .q = w->qf,
                    .nq = (int)nq,
                    .hd = hd,
                    .group = group,
                    .causal = a->causal,
                    .scale = a->scale,
                    .M = w->M,
                    .S = w->S,
                    .acc = w->acc,
                    .kf = w->kf,
                    .vf = w->vf};
    /* one pass per block the cells cross, in cell order: the running max,
     * sum and accumulators carry from one to the next, so the result is
     * that of a single pass; cells are counted from the block's first */
    while (c0 < c1) {
        const int64_t b = c0 / a->block_rows, base = b * a->block_rows;
        const int64_t end = c1 - base < a->block_rows ? c1 : base + a->block_rows;
        x.k = (const f16_bits *)(a->blocks[b] + a->k_off) + (int64_t)g0 * hd;
        x.v = (const f16_bits *)(a->blocks[b] + a->v_off) + (int64_t)g0 * hd;
        x.c0 = c0 - base;
        x.c1 = end - base;
        x.last0 = a->first_cell + q0 - base;
        kk->cells(&x);
        c0 = end;
    }
}

/* KV heads [g0, g1), query rows [q0, q1), all query heads of each group. */
static void attn_task(const attn_job *job, int g0, int g1, int64_t q0, int64_t q1, const attn_work *w) {
    const attn_args *a = job->a;
    const int hd = a->head_dim;
    const int group = a->n_head / a->n_head_kv;
    const int64_t nq = (q1 - q0) * group;
    cell_pass(a, job->k, g0, g1, q0, q1, 0, a->n_kv, w);
    for (int g = g0; g < g1; g++)
        for (int64_t i = q0; i < q1; i++)
            for (int r = 0; r < group; r++) {
                const int h = g * group + r;
                const int64_t j = (g - g0) * nq + (i - q0) * group + r;
                float *out = a->out + i * a->out_stride + (int64_t)h * hd;
                const float inv = w->S[j] > 0.0f ? 1.0f / w->S[j] : 0.0f;
                for (int d = 0; d < hd; d++) out[d] = w->acc[j * hd + d] * inv;
            }
}

/* Up to this many query rows, a thread's consecutive KV heads go through
 * the cells together (one read of each cell's row); with more, the rows of
 * a block already share each read. */
#define ATTN_ROWS_HEADS_TOGETHER 4

static void attn_worker(void *ctx, int ith, int nth) {
    const attn_job *job = ctx;
    const attn_args *a = job->a;
    const int group = a->n_head / a->n_head_kv;
    const bool together = a->n_q <= ATTN_ROWS_HEADS_TOGETHER;
    const int64_t most = together ? (int64_t)a->n_head_kv * a->n_q * group : (int64_t)ATTN_QBLOCK * group;
    float *buf = malloc(attn_work_floats(a->head_dim, most) * sizeof(float));
    if (!buf) abort(); /* tens of KiB; nothing sensible to do without it */
    const attn_work w = attn_work_at(buf, a->head_dim, most);
    long lo, hi;
    tpool_split_range((long)job->n_tasks, ith, nth, &lo, &hi);
    for (long t = lo; t < hi;) {
        int g = (int)(t % a->n_head_kv);
        int64_t b = t / a->n_head_kv;
        int g1 = g + 1; /* together: the run of this block's heads in [t, hi) */
        if (together)
            while (g1 < a->n_head_kv && t + (g1 - g) < hi) g1++;
        int64_t q0 = b * ATTN_QBLOCK, q1 = q0 + ATTN_QBLOCK;
        if (q1 > a->n_q) q1 = a->n_q;
        attn_task(job, g, g1, q0, q1, &w);
        t += g1 - g;
    }
    free(buf);
}

/* ---- one query row over many cells ------------------------------------------ */

/* With one query row and a KV view of at least ATTN_SPLIT_MIN cells,
 * llama.cpp cuts the view into one chunk per thread; each chunk keeps its own
 * f16 sum of p * v and the chunks are merged in f32 (docs/numerics.md, Attention). Its view is
 * the cells in use rounded up to ATTN_KV_PAD (cells past the last visible
 * one are masked), so the view, not the visible count, sets the chunks. */
#define ATTN_SPLIT_MIN 512
#define ATTN_KV_PAD    256

typedef struct split_job {
    const attn_args *a;
    const attn_kernels *k;
    int64_t chunk; /* cells per chunk */
    float *part;   /* [chunk][n_head][M, S, acc[hd]] */
} split_job;

static void split_worker(void *ctx, int ith, int nth) {
    (void)nth;
    const split_job *job = ctx;
    const attn_args *a = job->a;
    const int hd = a->head_dim;
    float *buf = malloc(attn_work_floats(hd, a->n_head) * sizeof(float));
    if (!buf) abort(); /* a few tens of KiB; nothing sensible to do without it */
    const attn_work w = attn_work_at(buf, hd, a->n_head);
    /* every head at once: the query of head h is h = g * group + r */
    cell_pass(a, job->k, 0, a->n_head_kv, 0, 1, ith * job->chunk, (ith + 1) * job->chunk, &w);
    for (int h = 0; h < a->n_head; h++) {
        float *p = job->part + ((size_t)ith * a->n_head + (size_t)h) * (size_t)(hd + 2);
        p[0] = w.M[h];
        p[1] = w.S[h];
        memcpy(p + 2, w.acc + (size_t)h * hd, (size_t)hd * sizeof(float));
    }
    free(buf);
}

static void split_attention(tpool *pool, const attn_args *a, const attn_kernels *k, int64_t n_view) {
    const int nth = tpool_size(pool), hd = a->head_dim;
    split_job job = {.a = a, .k = k, .chunk = (n_view + nth - 1) / nth};
    job.part = malloc((size_t)nth * a->n_head * (size_t)(hd + 2) * sizeof(float));
    if (!job.part) abort(); /* a few KiB per thread */
    tpool_run(pool, split_worker, &job);
    for (int h = 0; h < a->n_head; h++) {
        float M = -INFINITY, S = 0.0f, *out = a->out + (int64_t)h * hd;
        for (int c = 0; c < nth; c++) M = fmaxf(M, job.part[((size_t)c * a->n_head + h) * (size_t)(hd + 2)]);
        memset(out, 0, (size_t)hd * sizeof(float));
        for (int c = 0; c < nth; c++) {
            const float *p = job.part + ((size_t)c * a->n_head + h) * (size_t)(hd + 2);
            if (p[0] == -INFINITY) continue; /* no visible cell in this chunk */
            const float f = expf(p[0] - M);
            S += p[1] * f;
            for (int t = 0; t < hd; t++) out[t] += p[2 + t] * f;
        }
        const float inv = S > 0.0f ? 1.0f / S : 0.0f;
        for (int t = 0; t < hd; t++) out[t] *= inv;
    }
    free(job.part);
}

/* ---- tiled path ----------------------------------------------------------- */

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

void attn_compute(tpool *pool, const attn_args *a) {
    const attn_kernels *k = kernels_isa() >= PH_ISA_AVX512 ? &attn_kernels_avx512
                            : kernels_isa() >= PH_ISA_AVX2 ? &attn_kernels_avx2
                                                           : &attn_kernels_ref;
    if (a->prompt || a->n_q >= PH_ATTN_TILE_Q) {
        tiled_job job = {.a = a, .k = k};
        job.n_groups = (a->n_q + ATTN_GROUP * PH_ATTN_TILE_Q - 1) / (ATTN_GROUP * PH_ATTN_TILE_Q);
        job.n_tasks = job.n_groups * a->n_head;
        atomic_init(&job.next, tpool_size(pool));
        tpool_run(pool, tiled_worker, &job);
        return;
    }
    if (a->n_q == 1) {
        const int64_t visible = a->causal && a->first_cell + 1 < a->n_kv ? a->first_cell + 1 : a->n_kv;
        const int64_t n_view = (visible + ATTN_KV_PAD - 1) / ATTN_KV_PAD * ATTN_KV_PAD;
        if (n_view >= ATTN_SPLIT_MIN) {
            split_attention(pool, a, k, n_view);
            return;
        }
    }
    attn_job job;
    job.a = a;
    job.k = k;
    job.n_qblocks = (a->n_q + ATTN_QBLOCK - 1) / ATTN_QBLOCK;
    job.n_tasks = job.n_qblocks * a->n_head_kv;
    tpool_run(pool, attn_worker, &job);
}
