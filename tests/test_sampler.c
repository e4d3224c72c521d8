/* Sampling: greedy, temperature, top-k, top-p, min-p and seeds behave as a
 * user expects, and the logit summaries (lse, top list) are right. */
#include <math.h>
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
    CHECKF(fabs(f[0] - 0.25 / 0.365) < 0.015 && fabs(f[1] - 0.09 / 0.365) < 0.015, "temperature 0.5: %.3f %.3f",
           f[0], f[1]);

    p.temperature = 1.0f;
    p.top_k = 2; /* renormalized over the two best: .625, .375 */
    frequencies(&p, logits, N, f);
    CHECKF(f[2] == 0 && f[3] == 0 && fabs(f[0] - 0.625) < 0.015, "top-k 2: %.3f %.3f %.3f", f[0], f[1], f[2]);

    p.top_k = 0;
    p.top_p = 0.7f; /* the smallest prefix reaching 0.7 is {0.5, 0.3} */
    frequencies(&p, shuffled, N, f);
    CHECKF(f[0] == 0 && f[2] == 0 && fabs(f[1] - 0.625) < 0.015, "top-p 0.7: %.3f %.3f %.3f %.3f", f[0], f[1],
           f[2], f[3]);

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
    TEST_END();
}
