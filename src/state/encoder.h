/* The vision encoder as a resource (docs/state-cache.md, Elastic encoder): always loaded, or elastic
 * (loaded when a picture has to be encoded, released after an idle time).
 * Its preprocessing parameters and identity are known without the weights,
 * so embedding-cache lookups work while it is unloaded. */
#ifndef PH_STATE_ENCODER_H
#define PH_STATE_ENCODER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/threadpool.h"
#include "image/image.h"
#include "model/llm.h"
#include "model/vision.h"

typedef struct vis_encoder {
    char *path;
    tpool *pool;
    vis_tower *tower; /* NULL while unloaded */
    prep_params prep;
    int32_t out_width;
    uint8_t encoder_id[32];
    double idle_s; /* > 0: elastic */
    double last_used;
    uint64_t loads, unloads; /* on-demand loads and idle releases */
    int jobs;                /* encodes in slices under way: the tower stays loaded */
} vis_encoder;

/* Opens the tower of the mmproj file at path for the LLM m once, to check
 * that m takes pictures and that the two are a pair (the tower's rows as
 * wide as m's input) and to read its parameters; keeps it loaded unless
 * idle_s > 0. */
int encoder_open(vis_encoder *enc, const char *path, const ph_model *m, double idle_s, const uint8_t encoder_id[32],
                 ph_err *err);
/* Sets the picture token budget in merged tokens (0: keep the file's). */
int encoder_set_budget(vis_encoder *enc, int min_tokens, int max_tokens, ph_err *err);
void encoder_close(vis_encoder *enc);
/* Makes sure the tower is loaded; *loaded tells whether this call loaded it. */
int encoder_acquire(vis_encoder *enc, bool *loaded, ph_err *err);
/* Releases an elastic tower idle for idle_s (never while a job is under
 * way); returns seconds until the next check is due, or -1 when nothing is
 * pending. */
double encoder_tick(vis_encoder *enc, double now);

/* A picture encoded in slices (vision_job_new; rows may be NULL): loads the
 * tower if needed (*loaded says so) and keeps it loaded until the job is
 * freed (before encoder_close). */
vision_job *encoder_job_new(vis_encoder *enc, const prep_image *img, float *rows, bool *loaded, ph_err *err);
/* vision_job_step, counting as use of the tower. */
int encoder_job_step(vis_encoder *enc, vision_job *j, int64_t budget);
/* Frees the job (done or not; NULL is fine). */
void encoder_job_free(vis_encoder *enc, vision_job *j);

#endif
