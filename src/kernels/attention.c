#include "kernels/attention.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* Per-cell path: query rows handled together against one pass over the KV
 * cells: each cell is converted from f16 once per block, not once per query. */
#define ATTN_QBLOCK 32

static void ref_f16_to_f32(const ph_f16 *src, float *dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = ph_f16_to_f32(src[i]);
}

static float ref_dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void ref_scale_add(float *acc, float a, const float *v, float b, int n) {
    for (int i = 0; i < n; i++) acc[i] = acc[i] * a + v[i] * b;
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

const ph_attn_kernels ph_attn_kernels_ref = {ref_f16_to_f32, ref_dot, ref_scale_add,
                                             ref_qk_tile, ref_softmax_tile, ref_pv_tile};

typedef struct {
    const ph_attn_args *a;
    const ph_attn_kernels *k;
    int64_t n_qblocks;
    int64_t n_tasks;
} attn_job;

/* One task: KV head g, query rows [q0, q1), all query heads of g's group. */
static void attn_task(const attn_job *job, int g, int64_t q0, int64_t q1, float *work) {
    const ph_attn_args *a = job->a;
    const ph_attn_kernels *kk = job->k;
    const int hd = a->head_dim;
    const int group = a->n_head / a->n_head_kv;
    const int64_t nq = (q1 - q0) * group;
    float *kf = work, *vf = kf + hd;
    float *acc = vf + hd;          /* [nq][hd] */
    float *M = acc + nq * hd;      /* running max */
    float *S = M + nq;             /* running sum */
    memset(acc, 0, (size_t)(nq * hd) * sizeof(float));
    for (int64_t j = 0; j < nq; j++) {
        M[j] = -INFINITY;
        S[j] = 0.0f;
    }
    int64_t last = a->causal ? a->first_cell + q1 : a->n_kv; /* cells [0, last) */
    if (last > a->n_kv) last = a->n_kv;
    for (int64_t c = 0; c < last; c++) {
        kk->f16_to_f32(a->k + c * a->kv_stride + (int64_t)g * hd, kf, hd);
        int v_ready = 0;
        for (int64_t i = q0; i < q1; i++) {
            if (a->causal && c > a->first_cell + i) continue;
            for (int r = 0; r < group; r++) {
                const int h = g * group + r;
                const int64_t j = (i - q0) * group + r;
                const float *q = a->q + i * a->q_stride + (int64_t)h * hd;
                float s = kk->dot(q, kf, hd) * a->scale;
                if (!v_ready) {
                    kk->f16_to_f32(a->v + c * a->kv_stride + (int64_t)g * hd, vf, hd);
                    v_ready = 1;
                }
                float *o = acc + j * hd;
                if (s > M[j]) {
                    float f = M[j] == -INFINITY ? 0.0f : expf(M[j] - s);
                    kk->scale_add(o, f, vf, 1.0f, hd);
                    S[j] = S[j] * f + 1.0f;
                    M[j] = s;
                } else {
                    float p = expf(s - M[j]);
                    kk->scale_add(o, 1.0f, vf, p, hd);
                    S[j] += p;
                }
            }
        }
    }
    for (int64_t i = q0; i < q1; i++) {
        for (int r = 0; r < group; r++) {
            const int h = g * group + r;
            const int64_t j = (i - q0) * group + r;
            float *out = a->out + i * a->out_stride + (int64_t)h * hd;
            const float inv = S[j] > 0.0f ? 1.0f / S[j] : 0.0f;
            for (int d = 0; d < hd; d++) out[d] = acc[j * hd + d] * inv;
        }
    }
}

static void attn_worker(void *ctx, int ith, int nth) {
    const attn_job *job = ctx;
    const ph_attn_args *a = job->a;
    const int group = a->n_head / a->n_head_kv;
    float *work = malloc(((size_t)2 * a->head_dim + (size_t)ATTN_QBLOCK * group * (a->head_dim + 2)) *
                         sizeof(float));
    if (!work) abort(); /* a few KiB; nothing sensible to do without it */
    long lo, hi;
    ph_split_range((long)job->n_tasks, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        int g = (int)(t % a->n_head_kv);
        int64_t b = t / a->n_head_kv;
        int64_t q0 = b * ATTN_QBLOCK, q1 = q0 + ATTN_QBLOCK;
        if (q1 > a->n_q) q1 = a->n_q;
        attn_task(job, g, q0, q1, work);
    }
    free(work);
}

/* ---- tiled path ----------------------------------------------------------- */

/* Query tiles per task: each tile of K and V is widened to f32 once for
 * this many query tiles. */
#define ATTN_GROUP 4

typedef struct tiled_job {
    const ph_attn_args *a;
    const ph_attn_kernels *k;
    int64_t n_groups, n_tasks;
    atomic_long next; /* next task to take; each thread starts at task ith */
} tiled_job;

/* Per-thread buffers of the tiled path. */
typedef struct tiled_work {
    float *kf, *vf;             /* [TK][d] a tile of keys / values as f32 */
    float *st;                  /* [TK][TQ] scores, then probabilities */
    float *qt[ATTN_GROUP];      /* [d][TQ] a query tile, transposed */
    float *o[ATTN_GROUP];       /* [TQ][d] running sums of p * v */
    float *M[ATTN_GROUP], *L[ATTN_GROUP], *ms[ATTN_GROUP]; /* [TQ] */
} tiled_work;

/* One task: query head h, query rows [q0, q1) (at most ATTN_GROUP tiles)
 * against every visible cell, PH_ATTN_TILE_KV cells at a time. */
static void tiled_task(const tiled_job *job, int h, int64_t q0, int64_t q1, const tiled_work *w) {
    const ph_attn_args *a = job->a;
    const ph_attn_kernels *kk = job->k;
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
        for (int j = 0; j < nk; j++) {
            const int64_t off = (c0 + j) * a->kv_stride + (int64_t)g * d;
            kk->f16_to_f32(a->k + off, w->kf + (size_t)j * d, d);
            kk->f16_to_f32(a->v + off, w->vf + (size_t)j * d, d);
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
    const ph_attn_args *a = job->a;
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

void ph_attention(ph_pool *pool, const ph_attn_args *a) {
    const ph_attn_kernels *k = ph_kernels_isa() >= PH_ISA_AVX2 ? &ph_attn_kernels_avx2 : &ph_attn_kernels_ref;
    if (a->n_q >= PH_ATTN_TILE_Q) {
        tiled_job job = {.a = a, .k = k};
        job.n_groups = (a->n_q + ATTN_GROUP * PH_ATTN_TILE_Q - 1) / (ATTN_GROUP * PH_ATTN_TILE_Q);
        job.n_tasks = job.n_groups * a->n_head;
        atomic_init(&job.next, ph_pool_size(pool));
        ph_pool_run(pool, tiled_worker, &job);
        return;
    }
    attn_job job;
    job.a = a;
    job.k = k;
    job.n_qblocks = (a->n_q + ATTN_QBLOCK - 1) / ATTN_QBLOCK;
    job.n_tasks = job.n_qblocks * a->n_head_kv;
    ph_pool_run(pool, attn_worker, &job);
}
