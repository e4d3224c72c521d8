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

/* prog may be NULL. The whole encode at once: a job (below) run a layer a
 * step until done. */
int vision_encode(vis_tower *v, const prep_image *img, float *rows, const vision_progress *prog, ph_err *err);

/* ---- an encode in slices ---------------------------------------------------
 * A job encodes one picture a slice at a time, so that other work (the
 * LLM's batch steps) can run between two slices (docs/numerics.md, Vision
 * encode in slices). Each pass of a layer (QKV; attention; output
 * projection and MLP; a merger) runs over ranges of its rows; its rows come
 * out bit for bit as the whole encode's, whatever the budgets. */
typedef struct vision_job vision_job;

/* Rows per slice unit: a range of a pass starts at a multiple of this many
 * patch rows (a quarter of it in merged rows) and is a multiple of it long
 * unless it ends the pass (a multiple of mat_mul's 4-row tiles, which sum
 * otherwise than its one-row dots for unpacked matrices). */
#define VISION_SLICE_ROWS 64
/* A step's default budget: about 56 ms of CPU time on the 2B shape's tower
 * (under 50 ms of wall clock on two free cores; docs/numerics.md, Vision
 * encode in slices). */
#define VISION_STEP_FLOPS ((int64_t)4000000000)

/* Starts encoding img into rows (grid_x * grid_y * out_width floats), or
 * into rows of the job's own when rows is NULL. Allocates all the job's
 * buffers (those the whole encode holds: about 7 N x C floats and the FFN's)
 * and the rope table; nothing else. img and rows are borrowed until the job is done or freed. */
vision_job *vision_job_new(vis_tower *v, const prep_image *img, float *rows, ph_err *err);
/* Runs the next slices: ranges of passes adding up to at most budget
 * estimated flops, but at least one slice unit (so one unit's time bounds a
 * step of small budget); a step never goes past the end of a layer.
 * Returns 1 when the encode is done, 0 while work remains. */
int vision_job_step(vision_job *j, int64_t budget);
/* The output rows once done, else NULL (owned by the job when it made them). */
float *vision_job_result(const vision_job *j);
/* Layers finished, out of n_layer + 1 (the final merger counts as one). */
void vision_job_progress(const vision_job *j, int *done, int *total);
/* Frees the job, done or not. */
void vision_job_free(vision_job *j);

#endif
