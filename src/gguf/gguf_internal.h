/* Helpers shared by the GGUF reader and writer (not part of the API). */
#ifndef PH_GGUF_GGUF_INTERNAL_H
#define PH_GGUF_GGUF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

/* Bytes of one value of a fixed-size type; 0 for STRING, ARRAY and unknown. */
size_t gguf_vtype_size(gguf_vtype t);

/* Validates a tensor's type and shape (n_dims <= 4, ne >= 0, element count
 * and byte size without overflow, ne[0] a multiple of the block size) and
 * computes its byte size. On failure returns -1 and sets *why to a phrase
 * that completes "tensor 'x' ...". */
int gguf_tensor_nbytes(int type, uint32_t n_dims, const int64_t *ne, uint64_t *nbytes, const char **why);

#endif
