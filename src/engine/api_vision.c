/* The public picture functions of pinhole.h: decoding, the vision tower
 * attached to an LLM, and evaluating a picture into a session. */
#include <stdlib.h>
#include <string.h>

#include "base/timeutil.h"
#include "image/image.h"
#include "engine/session.h"
#include "model/vision.h"

struct ph_picture {
    ph_image img;
};

/* The public handle pairs the tower with the LLM it feeds. */
struct ph_mmproj {
    ph_vision *tower;
    ph_model *m;
    ph_prep_params prep;
};

static ph_picture *wrap(ph_image *img) {
    ph_picture *p = malloc(sizeof *p);
    if (!p) {
        ph_image_free(img);
        return NULL;
    }
    p->img = *img;
    return p;
}

ph_picture *ph_picture_decode(const void *data, size_t len, const char *label, ph_err *e) {
    ph_image_limits lim;
    ph_image_limits_default(&lim);
    ph_image img;
    if (ph_image_decode(data, len, &lim, label, &img, e)) return NULL;
    ph_picture *p = wrap(&img);
    if (!p) ph_err_set(e, "out of memory");
    return p;
}

ph_picture *ph_picture_load(const char *path, ph_err *e) {
    ph_image_limits lim;
    ph_image_limits_default(&lim);
    ph_image img;
    if (ph_image_load_file(path, &lim, &img, e)) return NULL;
    ph_picture *p = wrap(&img);
    if (!p) ph_err_set(e, "out of memory");
    return p;
}

void ph_picture_free(ph_picture *p) {
    if (!p) return;
    ph_image_free(&p->img);
    free(p);
}

void ph_picture_size(const ph_picture *p, int *w, int *h) {
    *w = p->img.w;
    *h = p->img.h;
}

ph_mmproj *ph_mmproj_open(ph_model *m, const char *path, ph_err *e) {
    if (m->hp.rope.mode != PH_ROPE_IMROPE) {
        ph_err_set(e, "%s models do not take pictures", m->arch_name);
        return NULL;
    }
    ph_mmproj *h = calloc(1, sizeof *h);
    if (!h) {
        ph_err_set(e, "out of memory");
        return NULL;
    }
    h->m = m;
    h->tower = ph_vision_load(path, m->pool, e);
    if (!h->tower) {
        free(h);
        return NULL;
    }
    const ph_vision_info *vi = ph_vision_get_info(h->tower);
    if (vi->out_width != m->hp.n_embd_inp) {
        ph_err_set(e, "%s produces rows of %d floats but the LLM takes %d: they are not a pair", path,
                   vi->out_width, m->hp.n_embd_inp);
        ph_vision_free(h->tower);
        free(h);
        return NULL;
    }
    ph_vision_prep_params(h->tower, &h->prep);
    return h;
}

void ph_mmproj_close(ph_mmproj *h) {
    if (!h) return;
    ph_vision_free(h->tower);
    free(h);
}

int ph_mmproj_set_budget(ph_mmproj *h, int min_tokens, int max_tokens, ph_err *e) {
    if (min_tokens < 1 || max_tokens < min_tokens || max_tokens > 65536)
        return ph_err_set(e, "picture token budget %d..%d is not usable", min_tokens, max_tokens);
    h->prep.min_tokens = min_tokens;
    h->prep.max_tokens = max_tokens;
    return 0;
}

int ph_session_eval_picture(ph_session *s, ph_mmproj *h, const ph_picture *pic, ph_picture_chunk *chunk,
                            float **rows_out, ph_err *e) {
    if (h->m != s->m) return ph_err_set(e, "the vision tower belongs to another model");
    ph_prep prep;
    if (ph_image_preprocess(&pic->img, &h->prep, &prep, e)) return -1;
    const int width = ph_vision_get_info(h->tower)->out_width;
    const size_t n = (size_t)prep.grid_x * (size_t)prep.grid_y;
    float *rows = malloc(n * (size_t)width * sizeof(float));
    if (!rows) {
        ph_prep_free(&prep);
        return ph_err_set(e, "out of memory for %zu picture rows", n);
    }
    double t0 = ph_now_s();
    int rc = ph_vision_encode(h->tower, &prep, rows, e);
    double t1 = ph_now_s();
    if (rc == 0) rc = session_eval_image_rows(s, rows, prep.grid_x, prep.grid_y, false, e);
    if (rc == 0 && chunk) {
        chunk->n_tokens = (int32_t)n;
        chunk->grid_x = prep.grid_x;
        chunk->grid_y = prep.grid_y;
        chunk->n_pos = prep.grid_x > prep.grid_y ? prep.grid_x : prep.grid_y;
        chunk->embd_width = width;
        chunk->encode_s = t1 - t0;
    }
    ph_prep_free(&prep);
    if (rc == 0 && rows_out) *rows_out = rows;
    else free(rows);
    return rc;
}
