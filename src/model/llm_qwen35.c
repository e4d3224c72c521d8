/* Qwen3.5's gated delta net layers (docs/numerics.md, Qwen3.5): their settings, weights and
 * the per-token recurrence. The gated attention layers and everything
 * else are llm_qwen3.c's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gdn.h"
#include "model/llm.h"

int llm_qwen35_hparams(ph_model *m, ph_err *err) {
    const gguf_file *f = m->gguf;
    llm_hparams *hp = &m->hp;
    uint32_t kc, inner, d, hv, hk, interval = 4;
    const char *a = m->arch_name;
    if (weights_meta_u32(f, a, "ssm.conv_kernel", &kc, true, err) ||
        weights_meta_u32(f, a, "ssm.inner_size", &inner, true, err) ||
        weights_meta_u32(f, a, "ssm.state_size", &d, true, err) ||
        weights_meta_u32(f, a, "ssm.time_step_rank", &hv, true, err) ||
        weights_meta_u32(f, a, "ssm.group_count", &hk, true, err))
        return -1;
    if (kc < 1 || kc > 64 || d == 0 || d > 1024 || hv == 0 || hv > 1024 || hk == 0 || hv % hk || inner != hv * d)
        return err_set(err,
                       "the delta net's settings (conv %u, inner %u, state %u, heads %u/%u) are not usable "
                       "(the value head size must equal the key head size)",
                       kc, inner, d, hv, hk);
    hp->conv_k = (int32_t)kc;
    hp->ssm_d = (int32_t)d;
    hp->ssm_hv = (int32_t)hv;
    hp->ssm_hk = (int32_t)hk;
    hp->conv_dim = (int32_t)(2 * hk * d + hv * d);
    /* which layers are recurrent: a per-layer array, else every layer but
     * each interval-th (docs/numerics.md, Qwen3.5 layers); MTP blocks past the trunk never are */
    const gguf_kv *rl = gguf_find_kv(f, "qwen35.attention.recurrent_layers");
    if (!rl) weights_meta_u32(f, a, "full_attention_interval", &interval, false, err);
    if (rl && (rl->type != GGUF_ARRAY || rl->v.arr.n < (uint64_t)hp->n_layer))
        return err_set(err, "'qwen35.attention.recurrent_layers' does not hold a value per layer");
    if (interval == 0) return err_set(err, "'qwen35.full_attention_interval' is 0");
    hp->n_rec_layer = hp->n_attn_layer = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        llm_layer *L = &m->layers[l];
        int64_t v = 0;
        if (rl && rl->v.arr.type == GGUF_BOOL) v = rl->v.arr.data[l]; /* one byte each */
        else if (rl && gguf_arr_i64(rl, (uint64_t)l, &v))
            return err_set(err, "'qwen35.attention.recurrent_layers' holds a value that is not a number");
        L->recurrent = rl ? v != 0 : (uint32_t)(l + 1) % interval != 0;
        L->slot = L->recurrent ? hp->n_rec_layer++ : hp->n_attn_layer++;
    }
    return 0;
}

int llm_qwen35_gdn_load(ph_model *m, int l, ph_err *err) {
    const llm_hparams *hp = &m->hp;
    llm_gdn *g = &m->layers[l].gdn;
    const int64_t E = hp->n_embd, C = hp->conv_dim, K = hp->conv_k, hv = hp->ssm_hv, di = hv * hp->ssm_d;
    char name[96];
#define BLK(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
    if (weights_mat(&m->w, BLK("attn_qkv.weight"), E, C, true, &g->qkv, err) ||
        weights_mat(&m->w, BLK("attn_gate.weight"), E, di, true, &g->z, err) ||
        weights_mat(&m->w, BLK("ssm_beta.weight"), E, hv, true, &g->beta, err) ||
        weights_mat(&m->w, BLK("ssm_alpha.weight"), E, hv, true, &g->alpha, err) ||
        weights_mat(&m->w, BLK("ssm_out.weight"), di, E, true, &g->out, err) ||
        weights_vec(&m->w, BLK("ssm_dt.bias"), hv, &g->dt_bias, err) ||
        weights_vec(&m->w, BLK("ssm_a"), hv, &g->a, err) ||
        weights_vec(&m->w, BLK("ssm_norm.weight"), hp->ssm_d, &g->norm, err))
        return -1;
    const int64_t ne[4] = {K, C, 1, 1};
    const gguf_tensor *t = weights_find(&m->w, BLK("ssm_conv1d.weight"), ne, err);
#undef BLK
    if (!t) return -1;
    const float *w = weights_f32(&m->w, t, K * C, err); /* channel-major: [C][K] */
    float *tw = w ? weights_alloc(&m->w, (size_t)(K * C) * sizeof(float), err) : NULL;
    if (!tw) return -1;
    for (int64_t c = 0; c < C; c++)
        for (int64_t i = 0; i < K; i++) tw[i * C + c] = w[c * K + i];
    g->conv = tw;
    wmat *mats[] = {&g->qkv, &g->z, &g->beta, &g->alpha, &g->out};
    for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
        if (weights_pack(&m->w, m->pool, mats[i], true, err)) return -1;
    return 0;
}

/* x / max(|x|, eps), the sum of squares in double (docs/numerics.md, Gated delta net) */
static void l2norm(float *x, int n, float eps) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (int i = 0; i < n; i++) x[i] *= scale;
}

/* The delta rule over the n rows of n_seg segments, one unit of work per
 * segment and value head (g * hv + h), a thread taking units [lo, hi):
 * the units are independent, so the numbers are the same however they
 * are split among threads. */
typedef struct gdn_job {
    const llm_hparams *hp;
    const llm_gdn *g;
    const gdn_kernels *kk;
    const llm_seg *segs;
    int n_seg, slot;
    const float *mix, *z, *beta, *alpha;
    float *o;
} gdn_job;

static void gdn_heads(void *ctx, int ith, int nth) {
    const gdn_job *jb = ctx;
    const llm_hparams *hp = jb->hp;
    const llm_gdn *g = jb->g;
    const int hk = hp->ssm_hk, hv = hp->ssm_hv, d = hp->ssm_d, C = hp->conv_dim;
    const int64_t di = (int64_t)hv * d;
    const float scale = 1.0f / sqrtf((float)d);
    long lo, hi;
    tpool_split_range((long)jb->n_seg * hv, ith, nth, &lo, &hi);
    int64_t off = 0; /* the first row of segment sg */
    int sg = 0;
    for (long w = lo; w < hi; w++) {
        for (; sg < w / hv; sg++) off += jb->segs[sg].n;
        /* value heads take key heads in turn (docs/numerics.md, Gated delta net) */
        const int h = (int)(w % hv), j = h % hk;
        float *S = jb->segs[sg].kv->ssm[jb->slot] + (size_t)h * d * d;
        for (int64_t i = off; i < off + jb->segs[sg].n; i++) {
            const float *u = jb->mix + i * C;
            const float b = 1.0f / (1.0f + expf(-jb->beta[i * hv + h]));
            const float x = jb->alpha[i * hv + h] + g->dt_bias[h];
            const float sp = x > 20.0f ? x : logf(1.0f + expf(x)); /* softplus */
            float *oh = jb->o + i * di + (int64_t)h * d;
            jb->kk->step(S, u + j * d, u + (hk + j) * d, u + 2 * hk * d + h * d, expf(sp * g->a[h]), b, scale, oh, d,
                         d);
            rms_norm(oh, oh, g->norm, d, hp->rms_eps);
            act_swiglu(oh, jb->z + i * di + (int64_t)h * d, oh, d); /* times silu(z) */
        }
    }
}

void llm_qwen35_gdn(const ph_model *m, const llm_layer *L, const llm_seg *segs, int n_seg, llm_scratch *s,
                    int64_t n) {
    const llm_hparams *hp = &m->hp;
    const llm_gdn *g = &L->gdn;
    const int hk = hp->ssm_hk, hv = hp->ssm_hv, d = hp->ssm_d, C = hp->conv_dim;
    gdn_job jb = {hp, g, gdn_kernels_get(), segs, n_seg, L->slot, s->q, s->kx, s->gate, s->gate + n * hv, s->att};
    mat_mul(m->pool, &g->qkv, s->h, n, s->q);
    mat_mul(m->pool, &g->z, s->h, n, s->kx);
    mat_mul(m->pool, &g->beta, s->h, n, s->gate);
    mat_mul(m->pool, &g->alpha, s->h, n, s->gate + n * hv);
    for (int64_t k = 0, i = 0; k < n_seg; k++) {
        float *conv = segs[k].kv->conv[L->slot];
        for (int64_t end = i + segs[k].n; i < end; i++) {
            float *u = s->q + i * C;
            jb.kk->conv(conv, g->conv, u, u, C, C, hp->conv_k);
            for (int c = 0; c < C; c++) u[c] = u[c] / (1.0f + expf(-u[c]));     /* silu */
            for (int j = 0; j < 2 * hk; j++) l2norm(u + j * d, d, hp->rms_eps); /* q heads, then k heads */
        }
    }
    tpool_run(m->pool, gdn_heads, &jb);
    mat_mul(m->pool, &g->out, s->att, n, s->h);
}
