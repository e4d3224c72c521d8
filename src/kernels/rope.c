#include "kernels/rope.h"

#include <math.h>

/* Which position component drives pair p under IMROPE (docs/numerics.md, IMROPE). */
static int imrope_component(const int *s, int p) {
    int S = s[0] + s[1] + s[2] + s[3];
    int sector = S > 0 ? p % S : 0;
    if (sector % 3 == 1 && sector < 3 * s[1]) return 1;
    if (sector % 3 == 2 && sector < 3 * s[2]) return 2;
    if (sector % 3 == 0 && sector < 3 * s[0]) return 0;
    return 3;
}

void rope_table(const rope_params *r, const int32_t *pos, int64_t n, float *cs) {
    const int half = r->n_dims / 2;
    /* ggml's vision rope is called with n_dims = head/2 yet rotates the whole
     * head; its frequencies follow that smaller n_dims (docs/numerics.md, Vision rope). */
    const int freq_dims = r->mode == PH_ROPE_VISION ? r->n_dims / 2 : r->n_dims;
    const float theta_scale = powf(r->freq_base, -2.0f / (float)freq_dims);
    for (int64_t i = 0; i < n; i++) {
        float *row = cs + i * r->n_dims;
        if (r->mode == PH_ROPE_NEOX) {
            float theta = (float)pos[i];
            for (int p = 0; p < half; p++) {
                row[2 * p] = cosf(theta);
                row[2 * p + 1] = sinf(theta);
                theta *= theta_scale;
            }
        } else if (r->mode == PH_ROPE_IMROPE) {
            /* All four running thetas advance every pair; the sector picks one. */
            float th[4];
            for (int c = 0; c < 4; c++) th[c] = (float)pos[c * n + i];
            for (int p = 0; p < half; p++) {
                float theta = th[imrope_component(r->sections, p)];
                row[2 * p] = cosf(theta);
                row[2 * p + 1] = sinf(theta);
                for (int c = 0; c < 4; c++) th[c] *= theta_scale;
            }
        } else { /* VISION: first half by row, second half by column, theta restarts */
            const int quarter = r->sections[0];
            float t_row = (float)pos[i], t_col = (float)pos[n + i];
            for (int p = 0; p < half; p++) {
                if (p == quarter) t_col = (float)pos[n + i];
                float theta = p < quarter ? t_row : t_col;
                row[2 * p] = cosf(theta);
                row[2 * p + 1] = sinf(theta);
                if (p < quarter) t_row *= theta_scale;
                else t_col *= theta_scale;
            }
        }
    }
}

void rope_apply(float *x, int n_dims, const float *cs_row) {
    const int half = n_dims / 2;
    for (int p = 0; p < half; p++) {
        float c = cs_row[2 * p], s = cs_row[2 * p + 1];
        float a = x[p], b = x[p + half];
        x[p] = a * c - b * s;
        x[p + half] = a * s + b * c;
    }
}
