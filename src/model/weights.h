/* Weights read from a GGUF file, shared by the LLM and the vision tower:
 * matrices are used in place in the mapping, shape-checked; vectors
 * (norms, biases) are given as F32, converted into buffers owned here when
 * the file stores them otherwise. */
#ifndef PH_MODEL_WEIGHTS_H
#define PH_MODEL_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"

typedef struct ph_weights {
    const gguf_file *f;
    void **owned;
    int n_owned;
} ph_weights;

/* Finds `name` with exactly the shape ne[0..3] (missing dims 1). NULL with
 * e set when it is absent or shaped otherwise. */
const gguf_tensor *ph_weights_find(ph_weights *w, const char *name, const int64_t ne[4], ph_err *e);
/* A matrix of n_out rows of n_in elements for ph_matmul. Returns 0, -1 on
 * error, or 1 when it is absent and not required. */
int ph_weights_mat(ph_weights *w, const char *name, int64_t n_in, int64_t n_out, bool required, ph_mat *out,
                   ph_err *e);
/* Repacks m for the kernels in use when they have a packed form of its type
 * (see ph_mat_pack; on the pool's threads) into memory owned here; drop_original releases the
 * mapping's pages of the matrix (for matrices read only through m). */
int ph_weights_pack(ph_weights *w, ph_pool *pool, ph_mat *m, bool drop_original, ph_err *e);
/* A 1-D weight of n elements as F32. */
int ph_weights_vec(ph_weights *w, const char *name, int64_t n, const float **out, ph_err *e);
/* The first n elements of t, converted to F32 into an owned buffer. */
const float *ph_weights_f32(ph_weights *w, const gguf_tensor *t, int64_t n, ph_err *e);
/* A buffer freed with the weights. */
void *ph_weights_alloc(ph_weights *w, size_t bytes, ph_err *e);
void ph_weights_free(ph_weights *w);

#endif
