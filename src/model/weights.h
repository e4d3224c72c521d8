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

typedef struct weight_set {
    const gguf_file *f;
    void **owned;
    int n_owned;
} weight_set;

/* Finds `name` with exactly the shape ne[0..3] (missing dims 1). NULL with
 * e set when it is absent or shaped otherwise. */
const gguf_tensor *weights_find(weight_set *w, const char *name, const int64_t ne[4], ph_err *err);
/* A matrix of n_out rows of n_in elements for mat_mul. Returns 0, -1 on
 * error, or 1 when it is absent and not required. */
int weights_mat(weight_set *w, const char *name, int64_t n_in, int64_t n_out, bool required, wmat *out, ph_err *err);
/* Repacks m for the kernels in use when they have a packed form of its type
 * (see mat_pack; on the pool's threads) into memory owned here; drop_original releases the
 * mapping's pages of the matrix (for matrices read only through m). */
int weights_pack(weight_set *w, tpool *pool, wmat *m, bool drop_original, ph_err *err);
/* A 1-D weight of n elements as F32. */
int weights_vec(weight_set *w, const char *name, int64_t n, const float **out, ph_err *err);
/* The first n elements of t, converted to F32 into an owned buffer. */
const float *weights_f32(weight_set *w, const gguf_tensor *t, int64_t n, ph_err *err);
/* A buffer freed with the weights. */
void *weights_alloc(weight_set *w, size_t bytes, ph_err *err);
void weights_free(weight_set *w);

/* The u32 metadata value `<arch>.<suffix>`: 0; 1 when it is not required
 * and absent (or of another type); -1 with err set when required and absent
 * or of another type. */
int weights_meta_u32(const gguf_file *f, const char *arch, const char *suffix, uint32_t *out, bool required,
                     ph_err *err);

#endif
