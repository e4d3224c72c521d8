/* Token sampling: greedy, or temperature with top-k, top-p and min-p
 * filters, from a seeded generator. */
#include <math.h>
#include <stdlib.h>
#include <stdbool.h>

#include "pinhole.h"

typedef struct {
    float p;  /* unnormalized probability */
    int32_t id;
} cand;

struct ph_sampler {
    ph_sampler_params p;
    uint64_t rng;
    cand *c;      /* candidates, grown to n_vocab on first use */
    int32_t *top_ids;
    float *top_vals;
    int32_t cap;
};

ph_sampler_params ph_sampler_defaults(void) {
    ph_sampler_params p = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 0};
    return p;
}

ph_sampler *ph_sampler_new(const ph_sampler_params *p) {
    ph_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->rng = p->seed ^ 0x9E3779B97F4A7C15ull;
    return s;
}

void ph_sampler_free(ph_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->top_ids);
    free(s->top_vals);
    free(s);
}

/* splitmix64: small, fast, good enough for sampling. */
static uint64_t next_u64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int cmp_desc(const void *a, const void *b) {
    float pa = ((const cand *)a)->p, pb = ((const cand *)b)->p;
    return pa < pb ? 1 : pa > pb ? -1 : 0;
}

int32_t ph_sampler_sample(ph_sampler *s, const float *logits, int32_t n) {
    const ph_sampler_params *p = &s->p;
    if (p->temperature <= 0.0f || p->top_k == 1) return argmax(logits, n);
    if (s->cap < n) {
        cand *c = realloc(s->c, (size_t)n * sizeof *c);
        if (c) s->c = c;
        int32_t *ti = realloc(s->top_ids, (size_t)n * sizeof *ti);
        if (ti) s->top_ids = ti;
        float *tv = realloc(s->top_vals, (size_t)n * sizeof *tv);
        if (tv) s->top_vals = tv;
        if (!c || !ti || !tv) return argmax(logits, n); /* no memory: degrade to greedy */
        s->cap = n;
    }
    /* candidates: the top k (sorted), or every token (unsorted) */
    int32_t m;
    bool sorted;
    if (p->top_k > 0 && p->top_k < n) {
        ph_logits_top(logits, n, p->top_k, s->top_ids, s->top_vals);
        m = p->top_k;
        for (int32_t i = 0; i < m; i++) s->c[i] = (cand){s->top_vals[i], s->top_ids[i]};
        sorted = true;
    } else {
        m = n;
        for (int32_t i = 0; i < m; i++) s->c[i] = (cand){logits[i], i};
        sorted = false;
    }
    /* probabilities relative to the most likely token (which gets 1) */
    float mx = s->c[0].p;
    for (int32_t i = 1; i < m; i++)
        if (s->c[i].p > mx) mx = s->c[i].p;
    const float inv_t = 1.0f / p->temperature;
    for (int32_t i = 0; i < m; i++) s->c[i].p = expf((s->c[i].p - mx) * inv_t);
    if (p->min_p > 0.0f) { /* min-p: keep tokens at least min_p as likely as the top one */
        int32_t keep = 0;
        for (int32_t i = 0; i < m; i++)
            if (s->c[i].p >= p->min_p) s->c[keep++] = s->c[i];
        m = keep;
    }
    double sum = 0.0;
    for (int32_t i = 0; i < m; i++) sum += s->c[i].p;
    if (p->top_p < 1.0f) { /* top-p: the smallest most-likely prefix reaching top_p */
        if (!sorted) qsort(s->c, (size_t)m, sizeof *s->c, cmp_desc);
        double acc = 0.0, target = p->top_p * sum;
        int32_t keep = 0;
        while (keep < m) {
            acc += s->c[keep++].p;
            if (acc >= target) break;
        }
        m = keep;
        sum = acc;
    }
    double r = (double)(next_u64(&s->rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
    for (int32_t i = 0; i < m; i++) {
        r -= s->c[i].p;
        if (r < 0.0) return s->c[i].id;
    }
    return s->c[m - 1].id;
}

double ph_logits_lse(const float *x, int32_t n) {
    float mx = x[0];
    for (int32_t i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    return mx + log(sum);
}

void ph_logits_top(const float *x, int32_t n, int32_t k, int32_t *ids, float *vals) {
    /* insertion into a sorted list of k: O(n k) worst, O(n) typical */
    int32_t have = 0;
    for (int32_t i = 0; i < n; i++) {
        float v = x[i];
        if (have == k && v <= vals[k - 1]) continue;
        int32_t j = have < k ? have++ : k - 1;
        while (j > 0 && vals[j - 1] < v) {
            vals[j] = vals[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        vals[j] = v;
        ids[j] = i;
    }
}
