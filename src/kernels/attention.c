#include "kernels/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

/* Query rows handled together against one pass over the KV cells: each cell
 * is converted from f16 once per block, not once per query. */
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

const ph_attn_kernels ph_attn_kernels_ref = {ref_f16_to_f32, ref_dot, ref_scale_add};

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

void ph_attention(ph_pool *pool, const ph_attn_args *a) {
    attn_job job;
    job.a = a;
    job.k = ph_kernels_isa() >= PH_ISA_AVX2 ? &ph_attn_kernels_avx2 : &ph_attn_kernels_ref;
    job.n_qblocks = (a->n_q + ATTN_QBLOCK - 1) / ATTN_QBLOCK;
    job.n_tasks = job.n_qblocks * a->n_head_kv;
    ph_pool_run(pool, attn_worker, &job);
}
