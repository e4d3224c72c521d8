#include "state/encoder.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/timeutil.h"

int encoder_open(vis_encoder *enc, const char *path, const ph_model *m, double idle_s, const uint8_t encoder_id[32],
                 ph_err *err) {
    memset(enc, 0, sizeof *enc);
    if (llm_check_pictures(m, err)) return -1;
    tpool *pool = m->pool;
    const int32_t llm_width = m->hp.n_embd_inp;
    enc->path = strdup(path);
    if (!enc->path) return err_set(err, "out of memory");
    enc->pool = pool;
    enc->idle_s = idle_s;
    memcpy(enc->encoder_id, encoder_id, 32);
    enc->tower = vision_load(path, pool, err);
    if (!enc->tower) {
        encoder_close(enc);
        return -1;
    }
    const vision_info *vi = vision_get_info(enc->tower);
    if (vision_check_width(vi, path, llm_width, err)) {
        encoder_close(enc);
        return -1;
    }
    enc->out_width = vi->out_width;
    vision_prep_params(enc->tower, &enc->prep);
    if (idle_s > 0) { /* elastic: checked, now released until a picture needs it */
        vision_free(enc->tower);
        enc->tower = NULL;
    }
    enc->last_used = time_now_s();
    return 0;
}

int encoder_set_budget(vis_encoder *enc, int min_tokens, int max_tokens, ph_err *err) {
    const int lo = min_tokens ? min_tokens : enc->prep.min_tokens,
              hi = max_tokens ? max_tokens : enc->prep.max_tokens;
    if (lo < 1 || hi < lo || hi > 65536) return err_set(err, "picture token budget %d..%d is not usable", lo, hi);
    enc->prep.min_tokens = lo;
    enc->prep.max_tokens = hi;
    return 0;
}

void encoder_close(vis_encoder *enc) {
    vision_free(enc->tower);
    free(enc->path);
    memset(enc, 0, sizeof *enc);
}

int encoder_acquire(vis_encoder *enc, bool *loaded, ph_err *err) {
    *loaded = false;
    enc->last_used = time_now_s();
    if (enc->tower) return 0;
    enc->tower = vision_load(enc->path, enc->pool, err);
    if (!enc->tower) return err_prefix(err, "loading the vision encoder");
    enc->loads++;
    *loaded = true;
    PH_INFO("vision encoder loaded (%s)", enc->path);
    return 0;
}

double encoder_tick(vis_encoder *enc, double now) {
    if (!enc->tower || enc->idle_s <= 0) return -1;
    if (enc->jobs > 0) return enc->idle_s; /* in use: look again later */
    double left = enc->last_used + enc->idle_s - now;
    if (left > 0) return left;
    vision_free(enc->tower);
    enc->tower = NULL;
    enc->unloads++;
    PH_INFO("vision encoder released after %g s idle", enc->idle_s);
    return -1;
}

vision_job *encoder_job_new(vis_encoder *enc, const prep_image *img, float *rows, bool *loaded, ph_err *err) {
    if (encoder_acquire(enc, loaded, err)) return NULL;
    vision_job *j = vision_job_new(enc->tower, img, rows, err);
    if (j) enc->jobs++;
    return j;
}

int encoder_job_step(vis_encoder *enc, vision_job *j, int64_t budget) {
    const int done = vision_job_step(j, budget);
    enc->last_used = time_now_s();
    return done;
}

void encoder_job_free(vis_encoder *enc, vision_job *j) {
    if (!j) return;
    vision_job_free(j);
    enc->jobs--;
    enc->last_used = time_now_s();
}
