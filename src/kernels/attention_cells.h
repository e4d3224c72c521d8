/* The per-cell pass's loop (attn_cells), written once for the SIMD
 * files: each defines dot_f16row(q, k_row, n), scale_f16row(acc, a, n) and
 * mad_f16row(acc, v_row, b, n) with its own instructions, then includes this
 * file with ATTN_CELLS_NAME set to the function to define. The K and V rows
 * are read as they are (no widened copies) and nothing is called through
 * pointers. */
#ifndef ATTN_CELLS_NAME
#error "define ATTN_CELLS_NAME before including attention_cells.h"
#endif

void ATTN_CELLS_NAME(const attn_cells *x) {
    const int hd = x->hd;
    for (int64_t c = x->c0; c < x->c1; c++)
        for (int g = 0; g < x->n_g; g++) {
            const f16_bits *k = x->k + c * x->stride + (int64_t)g * hd, *v = x->v + c * x->stride + (int64_t)g * hd;
            for (int j = 0; j < x->nq; j++) {
                if (x->causal && c > x->last0 + j / x->group) continue;
                const int64_t jj = (int64_t)g * x->nq + j;
                const float s = dot_f16row(x->q + jj * hd, k, hd) * x->scale;
                float *o = x->acc + jj * hd;
                float ms = 1.0f, vs = 1.0f;
                if (s > x->M[jj]) {
                    ms = expf(x->M[jj] - s); /* 0 for the first cell */
                    scale_f16row(o, ms, hd);
                    x->M[jj] = s;
                } else {
                    vs = expf(s - x->M[jj]);
                }
                mad_f16row(o, v, vs, hd);
                x->S[jj] = x->S[jj] * ms + vs;
            }
        }
}

#undef ATTN_CELLS_NAME
