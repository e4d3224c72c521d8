/* Token sampling: penalties over the tokens accepted so far and logit
 * biases, then greedy, or temperature with top-k, top-p and min-p filters,
 * from a seeded generator; over the whole vocabulary or over an allowed set.
 *
 * The penalties and biases touch few tokens, so they are kept sparse: each
 * call computes the adjusted logits of the touched tokens ("overrides",
 * sorted by id) and the chain reads a view: the caller's logits, with the
 * overrides standing in for theirs, restricted to an allowed set or not.
 * With no override and no allowed set, the view is the logits themselves
 * and every step is the one it always was. */
#include <math.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>

#include "pinhole.h"

typedef struct {
    float p; /* unnormalized probability (a logit while candidates are gathered) */
    int32_t id;
} cand;

typedef struct {
    int32_t id;
    int32_t count; /* occurrences in the window */
} seen_tok;

struct ph_sampler {
    ph_sampler_params p; /* p.logit_bias points to bias below */
    uint64_t rng;
    cand *c; /* candidates, grown to n_vocab on first use */
    int32_t *top_ids;
    float *top_vals;
    int32_t cap;
    /* logit biases: sorted by id, one entry per id, ids >= 0, non-zero */
    ph_logit_bias *bias;
    int32_t n_bias;
    /* penalties */
    bool penalize;  /* some penalty is on: accepted tokens are recorded */
    int32_t window; /* penalty_last_n, 0: all (no ring then) */
    int32_t *ring;  /* the last tokens, oldest at ring_head once full */
    int32_t ring_len, ring_cap, ring_head;
    seen_tok *seen; /* distinct tokens of the window, sorted by id */
    int32_t n_seen, seen_cap;
    cand *ovr; /* adjusted logits of this call: n_seen + n_bias at most */
    int32_t ovr_cap;
};

ph_sampler_params ph_sampler_defaults(void) {
    ph_sampler_params p = {.temperature = 0.0f,
                           .top_k = 0,
                           .top_p = 1.0f,
                           .min_p = 0.0f,
                           .seed = 0,
                           .repetition_penalty = 1.0f,
                           .frequency_penalty = 0.0f,
                           .presence_penalty = 0.0f,
                           .penalty_last_n = 64};
    return p;
}

static int cmp_bias_id(const void *a, const void *b) {
    int32_t x = ((const ph_logit_bias *)a)->id, y = ((const ph_logit_bias *)b)->id;
    return x < y ? -1 : x > y;
}

static bool rep_on(float r) { return r > 0.0f && r != 1.0f; }

/* Room for the overrides of a call: every seen token and every bias. */
static bool ovr_reserve(ph_sampler *s, int32_t need) {
    if (need <= s->ovr_cap) return true;
    int32_t cap = s->ovr_cap ? s->ovr_cap : 16;
    while (cap < need) cap *= 2;
    cand *o = realloc(s->ovr, (size_t)cap * sizeof *o);
    if (!o) return false;
    s->ovr = o;
    s->ovr_cap = cap;
    return true;
}

ph_sampler *ph_sampler_new(const ph_sampler_params *p) {
    ph_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->rng = p->seed ^ 0x9E3779B97F4A7C15ull;
    s->penalize = rep_on(p->repetition_penalty) || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f;
    s->window = p->penalty_last_n > 0 ? p->penalty_last_n : 0;
    /* the biases: copied, sorted, one per id (repeats add up), no-ops dropped */
    size_t nb = p->logit_bias ? p->n_logit_bias : 0;
    if (nb > (size_t)INT32_MAX) nb = (size_t)INT32_MAX;
    if (nb) {
        s->bias = malloc(nb * sizeof *s->bias);
        if (!s->bias) {
            free(s);
            return NULL;
        }
        int32_t k = 0;
        for (size_t i = 0; i < nb; i++)
            if (p->logit_bias[i].id >= 0 && !isnan(p->logit_bias[i].bias)) s->bias[k++] = p->logit_bias[i];
        qsort(s->bias, (size_t)k, sizeof *s->bias, cmp_bias_id);
        int32_t u = 0;
        for (int32_t i = 0; i < k; i++) {
            if (u > 0 && s->bias[u - 1].id == s->bias[i].id) s->bias[u - 1].bias += s->bias[i].bias;
            else s->bias[u++] = s->bias[i];
        }
        s->n_bias = 0;
        for (int32_t i = 0; i < u; i++)
            if (s->bias[i].bias != 0.0f && !isnan(s->bias[i].bias)) s->bias[s->n_bias++] = s->bias[i];
        if (!ovr_reserve(s, s->n_bias)) {
            free(s->bias);
            free(s);
            return NULL;
        }
    }
    s->p.logit_bias = s->bias;
    s->p.n_logit_bias = (size_t)s->n_bias;
    return s;
}

void ph_sampler_free(ph_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->top_ids);
    free(s->top_vals);
    free(s->bias);
    free(s->ring);
    free(s->seen);
    free(s->ovr);
    free(s);
}

/* ---- the window of accepted tokens ------------------------------------------ */

/* Index of id in seen, or of where it would go. */
static int32_t seen_find(const ph_sampler *s, int32_t id) {
    int32_t lo = 0, hi = s->n_seen;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (s->seen[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static bool seen_add(ph_sampler *s, int32_t id) {
    int32_t i = seen_find(s, id);
    if (i < s->n_seen && s->seen[i].id == id) {
        s->seen[i].count++;
        return true;
    }
    if (!ovr_reserve(s, s->n_seen + 1 + s->n_bias)) return false;
    if (s->n_seen == s->seen_cap) {
        int32_t cap = s->seen_cap ? 2 * s->seen_cap : 16;
        seen_tok *t = realloc(s->seen, (size_t)cap * sizeof *t);
        if (!t) return false;
        s->seen = t;
        s->seen_cap = cap;
    }
    memmove(s->seen + i + 1, s->seen + i, (size_t)(s->n_seen - i) * sizeof *s->seen);
    s->seen[i] = (seen_tok){id, 1};
    s->n_seen++;
    return true;
}

static void seen_remove(ph_sampler *s, int32_t id) {
    int32_t i = seen_find(s, id);
    if (i == s->n_seen || s->seen[i].id != id) return;
    if (--s->seen[i].count > 0) return;
    memmove(s->seen + i, s->seen + i + 1, (size_t)(s->n_seen - i - 1) * sizeof *s->seen);
    s->n_seen--;
}

void ph_sampler_accept(ph_sampler *s, int32_t id) {
    if (!s->penalize || id < 0) return;
    if (s->window == 0) { /* all tokens: only the counts */
        seen_add(s, id);
        return;
    }
    if (s->ring_len == s->window) { /* full: the oldest leaves */
        const int32_t old = s->ring[s->ring_head];
        if (!seen_add(s, id)) return;
        seen_remove(s, old);
        s->ring[s->ring_head] = id;
        s->ring_head = (s->ring_head + 1) % s->window;
        return;
    }
    if (s->ring_len == s->ring_cap) {
        int32_t cap = s->ring_cap ? 2 * s->ring_cap : 16;
        if (cap > s->window) cap = s->window;
        int32_t *r = realloc(s->ring, (size_t)cap * sizeof *r);
        if (!r) return;
        s->ring = r;
        s->ring_cap = cap;
    }
    if (!seen_add(s, id)) return;
    s->ring[s->ring_len++] = id;
}

/* ---- the view the chain reads --------------------------------------------------- */

typedef struct {
    const float *x;          /* the caller's logits */
    int32_t n;               /* n_vocab */
    const uint64_t *allowed; /* NULL: every token */
    int32_t m;               /* candidates at most: n, or the allowed count */
    const cand *ovr;         /* adjusted logits, sorted by id; they replace x's */
    int32_t n_ovr;
} view;

/* The adjusted logits of the seen and the biased tokens below n, merged by id
 * (llama.cpp's penalties: repetition once per distinct token, then
 * frequency and presence; then the bias). */
static int32_t make_overrides(ph_sampler *s, const float *x, int32_t n) {
    const ph_sampler_params *p = &s->p;
    const bool rep = rep_on(p->repetition_penalty);
    const int32_t ns = s->penalize ? s->n_seen : 0;
    int32_t i = 0, j = 0, k = 0;
    for (;;) {
        const int32_t a = i < ns ? s->seen[i].id : INT32_MAX;
        const int32_t b = j < s->n_bias ? s->bias[j].id : INT32_MAX;
        const int32_t id = a < b ? a : b;
        if (id >= n) break; /* both sorted: nothing further is in range */
        float l = x[id];
        if (id == a) {
            const int32_t count = s->seen[i++].count;
            if (rep) l = l > 0.0f ? l / p->repetition_penalty : l * p->repetition_penalty;
            l -= (float)count * p->frequency_penalty + (float)(count > 0) * p->presence_penalty;
        }
        if (id == b) l += s->bias[j++].bias;
        s->ovr[k++] = (cand){l, id};
    }
    return k;
}

static view make_view(ph_sampler *s, const float *x, int32_t n, const uint64_t *allowed) {
    view v = {.x = x, .n = n, .allowed = allowed, .m = n, .ovr = s->ovr};
    if ((s->penalize && s->n_seen) || s->n_bias) v.n_ovr = make_overrides(s, x, n);
    if (allowed) { /* the bits past n_vocab do not count */
        v.m = 0;
        for (int32_t w = 0; w < n / 64; w++) v.m += __builtin_popcountll(allowed[w]);
        if (n % 64) v.m += __builtin_popcountll(allowed[n / 64] & ((UINT64_C(1) << (n % 64)) - 1));
    }
    return v;
}

/* What the chain does with the candidates as the view hands them out, in id
 * order: keep the best, keep the k best (sorted), or gather them all. */
typedef enum { TAKE_BEST, TAKE_TOP, TAKE_ALL } take_mode;

typedef struct {
    take_mode mode;
    int32_t have; /* TAKE_BEST: 0 or 1; TAKE_TOP: filled; TAKE_ALL: gathered */
    int32_t best;
    float best_v;
    int32_t k;
    int32_t *ids;
    float *vals;
    cand *c;
} taker;

/* Insertion into a sorted list of k: a later equal value goes after. */
static inline void top_push(int32_t *ids, float *vals, int32_t *have, int32_t k, int32_t id, float v) {
    if (*have == k && v <= vals[k - 1]) return;
    int32_t j = *have < k ? (*have)++ : k - 1;
    while (j > 0 && vals[j - 1] < v) {
        vals[j] = vals[j - 1];
        ids[j] = ids[j - 1];
        j--;
    }
    vals[j] = v;
    ids[j] = id;
}

static inline void take_one(taker *t, int32_t id, float v) {
    switch (t->mode) {
    case TAKE_BEST:
        if (!t->have || v > t->best_v) {
            t->have = 1;
            t->best = id;
            t->best_v = v;
        }
        break;
    case TAKE_TOP: top_push(t->ids, t->vals, &t->have, t->k, id, v); break;
    case TAKE_ALL: t->c[t->have++] = (cand){v, id}; break;
    }
}

/* The tokens a..b-1, with the caller's logits. */
static void take_run(taker *t, const float *x, int32_t a, int32_t b) {
    if (a >= b) return;
    switch (t->mode) {
    case TAKE_BEST:
        if (!t->have) {
            t->have = 1;
            t->best = a;
            t->best_v = x[a++];
        }
        for (int32_t i = a; i < b; i++)
            if (x[i] > t->best_v) {
                t->best = i;
                t->best_v = x[i];
            }
        break;
    case TAKE_TOP:
        for (int32_t i = a; i < b; i++) top_push(t->ids, t->vals, &t->have, t->k, i, x[i]);
        break;
    case TAKE_ALL:
        for (int32_t i = a; i < b; i++) t->c[t->have++] = (cand){x[i], i};
        break;
    }
}

/* Hands the view's candidates to t in id order. A token whose adjusted
 * logit is -inf (banned) or that is not allowed is no candidate. */
static void view_take(const view *v, taker *t) {
    if (!v->allowed) { /* runs of the caller's logits between the overrides */
        int32_t a = 0;
        for (int32_t j = 0; j < v->n_ovr; j++) {
            take_run(t, v->x, a, v->ovr[j].id);
            if (v->ovr[j].p != -INFINITY) take_one(t, v->ovr[j].id, v->ovr[j].p);
            a = v->ovr[j].id + 1;
        }
        take_run(t, v->x, a, v->n);
        return;
    }
    const int32_t n_words = (v->n + 63) / 64;
    int32_t j = 0;
    for (int32_t w = 0; w < n_words; w++) {
        uint64_t bits = v->allowed[w];
        if (!bits) continue;
        if (w == n_words - 1 && v->n % 64) bits &= (UINT64_C(1) << (v->n % 64)) - 1;
        while (bits) {
            const int32_t id = w * 64 + __builtin_ctzll(bits);
            bits &= bits - 1;
            while (j < v->n_ovr && v->ovr[j].id < id) j++;
            if (j < v->n_ovr && v->ovr[j].id == id) {
                if (v->ovr[j].p != -INFINITY) take_one(t, id, v->ovr[j].p);
            } else {
                take_one(t, id, v->x[id]);
            }
        }
    }
}

static int32_t view_best(const view *v) {
    taker t = {.mode = TAKE_BEST, .best = -1};
    view_take(v, &t);
    return t.best;
}

/* ---- the chain -------------------------------------------------------------------- */

/* splitmix64: small, fast, good enough for sampling. */
static uint64_t next_u64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int cmp_desc(const void *a, const void *b) {
    float pa = ((const cand *)a)->p, pb = ((const cand *)b)->p;
    return pa < pb ? 1 : pa > pb ? -1 : 0;
}

/* Greedy, or top-k, temperature, min-p, top-p and a draw; -1 if the view
 * has no candidate. */
static int32_t sample_view(ph_sampler *s, const view *v) {
    const ph_sampler_params *p = &s->p;
    if (p->temperature <= 0.0f || p->top_k == 1) return view_best(v);
    const int32_t n = v->n;
    if (s->cap < n) {
        cand *c = realloc(s->c, (size_t)n * sizeof *c);
        if (c) s->c = c;
        int32_t *ti = realloc(s->top_ids, (size_t)n * sizeof *ti);
        if (ti) s->top_ids = ti;
        float *tv = realloc(s->top_vals, (size_t)n * sizeof *tv);
        if (tv) s->top_vals = tv;
        if (!c || !ti || !tv) return view_best(v); /* no memory: degrade to greedy */
        s->cap = n;
    }
    /* candidates: the top k (sorted), or every one (unsorted) */
    int32_t m;
    bool sorted;
    if (p->top_k > 0 && p->top_k < v->m) {
        taker t = {.mode = TAKE_TOP, .k = p->top_k, .ids = s->top_ids, .vals = s->top_vals};
        view_take(v, &t);
        m = t.have;
        for (int32_t i = 0; i < m; i++) s->c[i] = (cand){s->top_vals[i], s->top_ids[i]};
        sorted = true;
    } else {
        taker t = {.mode = TAKE_ALL, .c = s->c};
        view_take(v, &t);
        m = t.have;
        sorted = false;
    }
    if (m == 0) return -1;
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

int32_t ph_sampler_sample(ph_sampler *s, const float *logits, int32_t n) {
    const view v = make_view(s, logits, n, NULL);
    const int32_t id = sample_view(s, &v);
    if (id >= 0) return id;
    /* the biases ban every token: they are ignored */
    const view raw = {.x = logits, .n = n, .m = n};
    return view_best(&raw);
}

int32_t ph_sampler_sample_allowed(ph_sampler *s, const float *logits, int32_t n, const uint64_t *allowed) {
    const view v = make_view(s, logits, n, allowed);
    return v.m ? sample_view(s, &v) : -1;
}

/* ---- logit summaries ------------------------------------------------------------------ */

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
    if (k <= 0) return;
    for (int32_t i = 0; i < n; i++) top_push(ids, vals, &have, k, i, x[i]);
}
