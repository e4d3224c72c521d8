/* Sampling: greedy, temperature, top-k, top-p, min-p and seeds behave as a
 * user expects; the penalties, logit biases and allowed sets do what they
 * say and change nothing when off; the logit summaries (lse, top list) are
 * right. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pinhole.h"
#include "test.h"

/* Samples n times and returns the frequency of each of the 4 tokens. */
static void frequencies(const ph_sampler_params *p, const float *logits, int n, double *freq) {
    ph_sampler *s = ph_sampler_new(p);
    int count[4] = {0};
    for (int i = 0; i < n; i++) count[ph_sampler_sample(s, logits, 4)]++;
    for (int k = 0; k < 4; k++) freq[k] = (double)count[k] / n;
    ph_sampler_free(s);
}

/* Pseudo-random logits in [-8, 8] (steps of 0.01), the same everywhere. */
static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}
static void fill(float *x, int n, uint32_t *st) {
    for (int i = 0; i < n; i++) x[i] = (float)((int)(lcg(st) % 1601u) - 800) / 100.0f;
}

/* The picks of the sampler before penalties, biases and allowed sets came
 * (captured from that implementation): 24 draws over fresh logits of 1000
 * tokens, per configuration. */
static const struct {
    float t;
    int k;
    float tp, mp;
    unsigned seed;
} legacy_cf[] = {{0, 0, 1, 0, 0},         {0.8f, 0, 1, 0, 7},           {1, 40, 1, 0, 11},  {0.7f, 0, 0.9f, 0, 12},
                 {1.2f, 0, 1, 0.05f, 13}, {0.9f, 50, 0.95f, 0.02f, 14}, {1.5f, 1, 1, 0, 15}};
static const int32_t legacy_picks[7][24] = {
    {975, 972, 942, 156, 242, 58,  591, 165, 97,  74,  661, 123,
     778, 745, 977, 589, 510, 748, 151, 103, 753, 130, 878, 451},
    {907, 995, 414, 92,  57, 411, 851, 268, 272, 422, 527, 117,
     477, 917, 295, 375, 70, 346, 835, 914, 536, 564, 919, 351},
    {584, 638, 399, 734, 509, 514, 966, 667, 638, 350, 694, 653,
     693, 96,  895, 924, 420, 399, 568, 49,  693, 414, 964, 876},
    {772, 252, 860, 595, 541, 689, 949, 298, 63,  131, 442, 410,
     434, 860, 424, 374, 521, 82,  346, 233, 956, 607, 86,  605},
    {617, 594, 93,  227, 610, 94,  927, 573, 814, 642, 680, 427,
     321, 635, 807, 327, 100, 181, 553, 863, 917, 616, 120, 562},
    {126, 453, 261, 185, 914, 795, 55,  574, 409, 562, 830, 122,
     125, 46,  803, 38,  273, 1,   631, 547, 409, 293, 341, 116},
    {507, 571, 101, 635, 72,  892, 823, 1,   772, 97,  869, 700,
     32,  546, 578, 136, 495, 202, 471, 445, 379, 572, 73,  137},
};

/* The legacy picks, with the defaults for everything new; `accept` feeds
 * each pick back (a no-op with the penalties off). */
static void test_legacy(bool accept) {
    enum { NV = 1000 };
    static float x[NV];
    for (int c = 0; c < 7; c++) {
        ph_sampler_params p = ph_sampler_defaults();
        p.temperature = legacy_cf[c].t;
        p.top_k = legacy_cf[c].k;
        p.top_p = legacy_cf[c].tp;
        p.min_p = legacy_cf[c].mp;
        p.seed = legacy_cf[c].seed;
        ph_sampler *s = ph_sampler_new(&p);
        uint32_t st = 1000u + (uint32_t)c;
        int same = 0;
        for (int d = 0; d < 24; d++) {
            fill(x, NV, &st);
            const int32_t tok = ph_sampler_sample(s, x, NV);
            same += tok == legacy_picks[c][d];
            if (accept) ph_sampler_accept(s, tok);
        }
        CHECKF(same == 24, "config %d (accept %d): %d of 24 picks as before", c, (int)accept, same);
        ph_sampler_free(s);
    }
}

/* The greedy pick of logits x after accepting the tokens in seq. */
static int32_t greedy_after(ph_sampler_params p, const float *x, int n, const int32_t *seq, int n_seq) {
    p.temperature = 0.0f;
    ph_sampler *s = ph_sampler_new(&p);
    for (int i = 0; i < n_seq; i++) ph_sampler_accept(s, seq[i]);
    const int32_t tok = ph_sampler_sample(s, x, n);
    ph_sampler_free(s);
    return tok;
}

static void test_penalties(void) {
    const float x[6] = {2.0f, 1.9f, 1.0f, -1.0f, -1.1f, -5.0f};
    const int32_t one[] = {0}, three[] = {0, 0, 0}, two[] = {0, 0};
    ph_sampler_params p = ph_sampler_defaults();
    CHECK(greedy_after(p, x, 6, three, 3) == 0); /* penalties off: accepting changes nothing */

    p.repetition_penalty = 1.2f; /* 2 / 1.2 = 1.67 < 1.9 */
    CHECK(greedy_after(p, x, 6, one, 1) == 1);
    CHECK(greedy_after(p, x, 6, NULL, 0) == 0); /* nothing accepted yet */
    p.repetition_penalty = 1.02f;               /* once per distinct token: 1.96, not 2 / 1.02^3 = 1.88 */
    CHECK(greedy_after(p, x, 6, three, 3) == 0);
    { /* a negative logit is multiplied: -1 * 1.2 = -1.2 < -1.1 */
        const float y[2] = {-1.0f, -1.1f};
        p.repetition_penalty = 1.2f;
        CHECK(greedy_after(p, y, 2, one, 1) == 1);
        p.repetition_penalty = 1.05f; /* -1.05 > -1.1 */
        CHECK(greedy_after(p, y, 2, one, 1) == 0);
    }

    p = ph_sampler_defaults();
    p.frequency_penalty = 0.06f; /* per occurrence: 2 - 0.06 = 1.94 stays, 2 - 0.12 = 1.88 falls */
    CHECK(greedy_after(p, x, 6, one, 1) == 0);
    CHECK(greedy_after(p, x, 6, two, 2) == 1);

    p = ph_sampler_defaults();
    p.presence_penalty = 0.05f; /* once whatever the count: 1.95 */
    CHECK(greedy_after(p, x, 6, three, 3) == 0);
    p.presence_penalty = 0.2f;
    CHECK(greedy_after(p, x, 6, one, 1) == 1);

    { /* the order: repetition before frequency: 2 / 2 - 0.5 = 0.5 < 0.6 (the other
         * way round 0.75 would win) */
        const float y[2] = {2.0f, 0.6f};
        p = ph_sampler_defaults();
        p.repetition_penalty = 2.0f;
        p.frequency_penalty = 0.5f;
        CHECK(greedy_after(p, y, 2, one, 1) == 1);
    }
    { /* an accepted id past n_vocab, or negative, is ignored */
        const int32_t odd[] = {-3, 6, 1000};
        p = ph_sampler_defaults();
        p.presence_penalty = 10.0f;
        CHECK(greedy_after(p, x, 6, odd, 3) == 0);
    }

    /* the window forgets: presence 1 over the last 2 tokens */
    p = ph_sampler_defaults();
    p.presence_penalty = 1.0f;
    p.penalty_last_n = 2;
    {
        const int32_t a[] = {0, 5}, b[] = {0, 5, 4}, c[] = {0, 0, 5}, d[] = {0, 3, 0, 4, 4};
        CHECK(greedy_after(p, x, 6, a, 2) == 1);
        CHECK(greedy_after(p, x, 6, b, 3) == 0); /* 0 left the window */
        CHECK(greedy_after(p, x, 6, c, 3) == 1); /* one of the two 0s is still in */
        CHECK(greedy_after(p, x, 6, d, 5) == 0);
    }
    p.penalty_last_n = 0; /* all: never forgets */
    {
        int32_t seq[300];
        seq[0] = 0;
        for (int i = 1; i < 300; i++) seq[i] = 2 + i % 4;
        CHECK(greedy_after(p, x, 6, seq, 300) == 1);
        p.penalty_last_n = 64;
        CHECK(greedy_after(p, x, 6, seq, 300) == 0);
    }
    { /* counts in the window: frequency 0.04 over the last 4 tokens */
        p = ph_sampler_defaults();
        p.frequency_penalty = 0.04f;
        p.penalty_last_n = 4;
        const int32_t a[] = {0, 0, 0, 5, 0}, b[] = {0, 0, 0, 5, 5, 0};
        CHECK(greedy_after(p, x, 6, a, 5) == 1); /* three 0s: 2 - 0.12 */
        CHECK(greedy_after(p, x, 6, b, 6) == 0); /* two 0s: 2 - 0.08 */
    }
    { /* a long run with a window wrapping many times agrees with a direct count */
        enum { NV = 50, W = 7 };
        float y[NV];
        for (int i = 0; i < NV; i++) y[i] = (float)(NV - i) * 0.01f; /* 0 best, then 1, ... */
        p = ph_sampler_defaults();
        p.presence_penalty = 100.0f;
        p.penalty_last_n = W;
        ph_sampler *s = ph_sampler_new(&p);
        int32_t hist[500];
        uint32_t st = 5;
        int bad = 0;
        for (int i = 0; i < 500; i++) {
            hist[i] = (int32_t)(lcg(&st) % 12u);
            ph_sampler_accept(s, hist[i]);
            int32_t want = -1;
            for (int32_t t = 0; t < NV && want < 0; t++) {
                bool in = false;
                for (int j = i - W + 1; j <= i; j++) in |= j >= 0 && hist[j] == t;
                if (!in) want = t;
            }
            bad += ph_sampler_sample(s, y, NV) != want;
        }
        CHECK(bad == 0);
        ph_sampler_free(s);
    }
}

static void test_bias(void) {
    const float x[6] = {2.0f, 1.9f, 1.0f, -1.0f, -1.1f, -5.0f};
    ph_logit_bias *lb = malloc(4 * sizeof *lb);
    lb[0] = (ph_logit_bias){0, -INFINITY};
    lb[1] = (ph_logit_bias){-7, 50.0f};   /* out of range: ignored */
    lb[2] = (ph_logit_bias){6, 50.0f};    /* n_vocab: ignored */
    lb[3] = (ph_logit_bias){1000, 50.0f}; /* ignored */
    ph_sampler_params p = ph_sampler_defaults();
    p.logit_bias = lb;
    p.n_logit_bias = 4;
    ph_sampler *g = ph_sampler_new(&p);
    p.temperature = 1.0f;
    p.seed = 3;
    ph_sampler *t = ph_sampler_new(&p);
    memset(lb, 0x55, 4 * sizeof *lb); /* the sampler has its own copy */
    free(lb);
    CHECK(ph_sampler_sample(g, x, 6) == 1); /* 0 banned */
    int hits0 = 0;
    for (int i = 0; i < 20000; i++) hits0 += ph_sampler_sample(t, x, 6) == 0;
    CHECK(hits0 == 0);
    ph_sampler_free(g);
    ph_sampler_free(t);

    /* +large forces; repeats of an id add up */
    const ph_logit_bias force[] = {{4, 30.0f}, {2, 1.0f}, {4, 30.0f}};
    p = ph_sampler_defaults();
    p.logit_bias = force;
    p.n_logit_bias = 3;
    p.temperature = 1.0f;
    p.seed = 9;
    t = ph_sampler_new(&p);
    int hits4 = 0;
    for (int i = 0; i < 20000; i++) hits4 += ph_sampler_sample(t, x, 6) == 4;
    CHECK(hits4 == 20000);
    ph_sampler_free(t);
    p.temperature = 0.0f;
    p.n_logit_bias = 1; /* -1.1 + 30 */
    g = ph_sampler_new(&p);
    CHECK(ph_sampler_sample(g, x, 6) == 4);
    ph_sampler_free(g);

    /* the bias comes after the penalties: 0 is penalized (2 / 2 = 1) then
     * raised by 0.95 (1.95 > 1.9); the other way round it would be 1.475 */
    const ph_logit_bias up[] = {{0, 0.95f}};
    p = ph_sampler_defaults();
    p.repetition_penalty = 2.0f;
    p.logit_bias = up;
    p.n_logit_bias = 1;
    const int32_t one[] = {0};
    CHECK(greedy_after(p, x, 6, one, 1) == 0);

    /* everything banned: the biases are ignored rather than no token */
    const ph_logit_bias all[] = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY},
                                 {3, -INFINITY}, {4, -INFINITY}, {5, -INFINITY}};
    p = ph_sampler_defaults();
    p.logit_bias = all;
    p.n_logit_bias = 6;
    p.temperature = 1.0f;
    t = ph_sampler_new(&p);
    const int32_t tok = ph_sampler_sample(t, x, 6);
    CHECK(tok >= 0 && tok < 6);
    ph_sampler_free(t);
}

static void set_bit(uint64_t *w, int32_t i) { w[i / 64] |= UINT64_C(1) << (i % 64); }
static bool has_bit(const uint64_t *w, int32_t i) { return (w[i / 64] >> (i % 64)) & 1; }

static void test_allowed(void) {
    enum { NV = 300, NW = (NV + 63) / 64 };
    static float x[NV];
    uint64_t allowed[NW];
    uint32_t st = 77;
    int bad = 0, none = 0;
    for (int round = 0; round < 400; round++) {
        fill(x, NV, &st);
        memset(allowed, 0, sizeof allowed);
        const int n_allowed = (int)(lcg(&st) % 6u); /* 0 to 5 tokens; some rounds none */
        for (int i = 0; i < n_allowed; i++) set_bit(allowed, (int32_t)(lcg(&st) % NV));
        allowed[NW - 1] |= ~UINT64_C(0) << (NV % 64); /* bits past n_vocab mean nothing */
        ph_sampler_params p = ph_sampler_defaults();
        p.seed = (uint64_t)round;
        p.temperature = (float)(round % 4) * 0.5f; /* greedy too */
        p.top_k = round % 3 == 0 ? 2 : 0;
        p.top_p = round % 5 == 0 ? 0.5f : 1.0f;
        p.min_p = round % 7 == 0 ? 0.1f : 0.0f;
        p.presence_penalty = 1.0f;
        ph_sampler *s = ph_sampler_new(&p);
        for (int d = 0; d < 20; d++) {
            const int32_t tok = ph_sampler_sample_allowed(s, x, NV, allowed);
            if (tok < 0) {
                none++;
                bad += n_allowed != 0;
            } else {
                bad += tok >= NV || !has_bit(allowed, tok);
                ph_sampler_accept(s, tok);
            }
        }
        ph_sampler_free(s);
    }
    CHECK(bad == 0);
    CHECK(none > 0);

    /* greedy among the allowed, seeing the adjusted logits */
    for (int i = 0; i < NV; i++) x[i] = (float)i * 0.01f; /* higher id, higher logit */
    memset(allowed, 0, sizeof allowed);
    set_bit(allowed, 10);
    set_bit(allowed, 150);
    set_bit(allowed, 151);
    ph_sampler_params p = ph_sampler_defaults();
    ph_sampler *s = ph_sampler_new(&p);
    CHECK(ph_sampler_sample_allowed(s, x, NV, allowed) == 151);
    CHECK(ph_sampler_sample(s, x, NV) == NV - 1);
    ph_sampler_free(s);
    const ph_logit_bias lb[] = {{151, -INFINITY}, {10, 1.5f}, {299, 100.0f}};
    p.logit_bias = lb;
    p.n_logit_bias = 1;
    s = ph_sampler_new(&p);
    CHECK(ph_sampler_sample_allowed(s, x, NV, allowed) == 150);
    ph_sampler_free(s);
    p.n_logit_bias = 3;
    s = ph_sampler_new(&p);
    CHECK(ph_sampler_sample_allowed(s, x, NV, allowed) == 10);
    ph_sampler_free(s);
    p.presence_penalty = 2.0f;
    p.temperature = 1.0f;
    s = ph_sampler_new(&p);
    ph_sampler_accept(s, 10);
    int hit150 = 0;
    for (int i = 0; i < 1000; i++) hit150 += ph_sampler_sample_allowed(s, x, NV, allowed) == 150;
    CHECK(hit150 > 800); /* 1.5 against 0.1 + 1.5 - 2: 87% */

    /* none allowed; the only one allowed banned */
    memset(allowed, 0, sizeof allowed);
    CHECK(ph_sampler_sample_allowed(s, x, NV, allowed) == -1);
    set_bit(allowed, 151);
    CHECK(ph_sampler_sample_allowed(s, x, NV, allowed) == -1);
    ph_sampler_free(s);

    /* the distribution: temperature 1 over 4 allowed tokens of 200, with
     * penalties and biases on some of them and on others; the frequencies
     * follow exp(adjusted logit) */
    enum { NV2 = 200, N = 60000 };
    static float y[NV2];
    for (int i = 0; i < NV2; i++) y[i] = 3.0f; /* the others would dominate */
    const int32_t ids[4] = {3, 70, 130, 199};
    const float lg[4] = {0.0f, 1.0f, -0.5f, 0.7f};
    uint64_t al[(NV2 + 63) / 64] = {0};
    for (int k = 0; k < 4; k++) {
        y[ids[k]] = lg[k];
        set_bit(al, ids[k]);
    }
    const ph_logit_bias other[] = {{5, 10.0f}, {71, -2.0f}, {130, 0.3f}};
    p = ph_sampler_defaults();
    p.temperature = 1.0f;
    p.seed = 2024;
    p.frequency_penalty = 0.5f;
    p.logit_bias = other;
    p.n_logit_bias = 3;
    s = ph_sampler_new(&p);
    ph_sampler_accept(s, 5);
    ph_sampler_accept(s, 70); /* 1 - 0.5 */
    ph_sampler_accept(s, 100);
    int count[4] = {0}, stray = 0;
    for (int i = 0; i < N; i++) {
        const int32_t tok = ph_sampler_sample_allowed(s, y, NV2, al);
        int k = 0;
        while (k < 4 && ids[k] != tok) k++;
        if (k == 4) stray++;
        else count[k]++;
    }
    ph_sampler_free(s);
    const double adj[4] = {0.0, 0.5, -0.2, 0.7};
    double z = 0;
    for (int k = 0; k < 4; k++) z += exp(adj[k]);
    bool near = stray == 0;
    for (int k = 0; k < 4; k++) near &= fabs((double)count[k] / N - exp(adj[k]) / z) < 0.01;
    CHECKF(near, "allowed at temperature 1: %.3f %.3f %.3f %.3f (want %.3f %.3f %.3f %.3f), %d stray",
           (double)count[0] / N, (double)count[1] / N, (double)count[2] / N, (double)count[3] / N, exp(adj[0]) / z,
           exp(adj[1]) / z, exp(adj[2]) / z, exp(adj[3]) / z, stray);

    /* every token allowed: the same picks as ph_sampler_sample */
    uint64_t every[(1000 + 63) / 64];
    memset(every, 0xff, sizeof every);
    static float v[1000];
    p = ph_sampler_defaults();
    p.temperature = 0.8f;
    p.top_k = 100;
    p.seed = 5;
    ph_sampler *a = ph_sampler_new(&p), *b = ph_sampler_new(&p);
    int differ = 0;
    st = 9;
    for (int i = 0; i < 200; i++) {
        fill(v, 1000, &st);
        differ += ph_sampler_sample(a, v, 1000) != ph_sampler_sample_allowed(b, v, 1000, every);
    }
    CHECK(differ == 0);
    ph_sampler_free(a);
    ph_sampler_free(b);
}

int main(void) {
    /* probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1 */
    const float logits[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
    const float shuffled[4] = {logits[2], logits[0], logits[3], logits[1]};
    double f[4];
    const int N = 40000;

    ph_sampler_params p = ph_sampler_defaults();
    ph_sampler *g = ph_sampler_new(&p);
    CHECK(ph_sampler_sample(g, logits, 4) == 0);
    CHECK(ph_sampler_sample(g, shuffled, 4) == 1); /* greedy = argmax wherever it is */
    ph_sampler_free(g);

    p.temperature = 1.0f;
    p.seed = 42;
    frequencies(&p, logits, N, f);
    CHECKF(fabs(f[0] - 0.5) < 0.015 && fabs(f[1] - 0.3) < 0.015 && fabs(f[2] - 0.15) < 0.015 &&
               fabs(f[3] - 0.05) < 0.01,
           "temperature 1: %.3f %.3f %.3f %.3f", f[0], f[1], f[2], f[3]);

    p.temperature = 0.5f; /* sharper: p^2 normalized = .25,.09,.0225,.0025 / .365 */
    frequencies(&p, logits, N, f);
    CHECKF(fabs(f[0] - 0.25 / 0.365) < 0.015 && fabs(f[1] - 0.09 / 0.365) < 0.015, "temperature 0.5: %.3f %.3f", f[0],
           f[1]);

    p.temperature = 1.0f;
    p.top_k = 2; /* renormalized over the two best: .625, .375 */
    frequencies(&p, logits, N, f);
    CHECKF(f[2] == 0 && f[3] == 0 && fabs(f[0] - 0.625) < 0.015, "top-k 2: %.3f %.3f %.3f", f[0], f[1], f[2]);

    p.top_k = 0;
    p.top_p = 0.7f; /* the smallest prefix reaching 0.7 is {0.5, 0.3} */
    frequencies(&p, shuffled, N, f);
    CHECKF(f[0] == 0 && f[2] == 0 && fabs(f[1] - 0.625) < 0.015, "top-p 0.7: %.3f %.3f %.3f %.3f", f[0], f[1], f[2],
           f[3]);

    p.top_p = 1.0f;
    p.min_p = 0.4f; /* keeps tokens at least 0.4 x 0.5 = 0.2 likely: {0.5, 0.3} */
    frequencies(&p, logits, N, f);
    CHECKF(f[2] == 0 && f[3] == 0 && fabs(f[0] - 0.625) < 0.015, "min-p 0.4: %.3f %.3f", f[0], f[1]);

    p.min_p = 0.0f;
    p.top_k = 1; /* top-k 1 is greedy whatever the temperature */
    frequencies(&p, shuffled, 1000, f);
    CHECK(f[1] == 1.0);

    /* the same seed gives the same sequence; another seed another one */
    p.top_k = 0;
    int a[64], b[64], c[64];
    ph_sampler *s1 = ph_sampler_new(&p), *s2 = ph_sampler_new(&p);
    p.seed = 43;
    ph_sampler *s3 = ph_sampler_new(&p);
    for (int i = 0; i < 64; i++) {
        a[i] = ph_sampler_sample(s1, logits, 4);
        b[i] = ph_sampler_sample(s2, logits, 4);
        c[i] = ph_sampler_sample(s3, logits, 4);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK(memcmp(a, c, sizeof a) != 0);
    ph_sampler_free(s1);
    ph_sampler_free(s2);
    ph_sampler_free(s3);

    /* lse and the top list */
    const float x[6] = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 2.0f};
    double want = log(exp(1.0) + 2 * exp(3.0) + exp(-2.0) + exp(0.5) + exp(2.0));
    CHECK(fabs(ph_logits_lse(x, 6) - want) < 1e-9);
    int32_t ids[3];
    float vals[3];
    ph_logits_top(x, 6, 3, ids, vals);
    CHECK(vals[0] == 3.0f && vals[1] == 3.0f && vals[2] == 2.0f && ids[2] == 5);
    CHECK((ids[0] == 1 && ids[1] == 3) || (ids[0] == 3 && ids[1] == 1));

    test_legacy(false);
    test_legacy(true);
    test_penalties();
    test_bias();
    test_allowed();
    TEST_END();
}
