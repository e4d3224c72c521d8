/* The vision tower of an mmproj GGUF (projector qwen3vl_merger; docs/numerics.md,
 * The Qwen3-VL vision tower):
 * patch embedding, learned positions, transformer blocks with 2D rope,
 * deepstack features and the 2x2 merger. */
#ifndef PH_MODEL_VISION_H
#define PH_MODEL_VISION_H

#include <stdint.h>

#include "base/error.h"
#include "base/threadpool.h"
#include "image/image.h"

typedef struct vis_tower vis_tower;

typedef struct vision_info {
    int n_embd, n_layer, n_head, n_ff, patch_size, n_merge;
    int n_deepstack;
    int proj_dim;  /* LLM width P */
    int out_width; /* P * (1 + n_deepstack) */
    float eps;
} vision_info;

/* pool is borrowed (the LLM's); it must outlive the vision tower. */
vis_tower *vision_load(const char *path, tpool *pool, ph_err *err);
/* The tower's metadata and shapes only (its info; no weights loaded): for
 * vision_get_info and vision_free alone. */
vis_tower *vision_probe(const char *path, ph_err *err);
/* Whether the tower of path (its info) makes rows of the width the LLM
 * takes (llm_width floats: n_embd_inp): 0, or -1 with e naming both. */
int vision_check_width(const vision_info *vi, const char *path, int32_t llm_width, ph_err *err);
void vision_free(vis_tower *v);
const vision_info *vision_get_info(const vis_tower *v);
/* The preprocessing parameters this tower wants (mean/std from the file,
 * patch size, merge, default token budget 8..4096). */
void vision_prep_params(const vis_tower *v, prep_params *p);

/* Encodes a preprocessed picture: grid_x * grid_y rows of out_width floats,
 * row-major over the merged grid, [main | deepstack 0 | deepstack 1 ...]
 * (docs/numerics.md, Output rows). rows must hold grid_x * grid_y * out_width floats. */
typedef struct vision_progress {
    void (*fn)(void *ud, int done, int total); /* after each step: each layer, then the merger */
    void *ud;
} vision_progress;

/* prog may be NULL. */
int vision_encode(vis_tower *v, const prep_image *img, float *rows, const vision_progress *prog, ph_err *err);

#endif
