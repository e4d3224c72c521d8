/* The session-level picture path of pinhole.h: the vision tower of an
 * mmproj file attached to its LLM (the engine's encoder, always loaded),
 * and a picture encoded and evaluated into a session. */
#include <stdlib.h>
#include <string.h>

#include "base/timeutil.h"
#include "engine/picture.h"
#include "engine/session.h"
#include "state/encoder.h"

struct ph_mmproj {
    ph_encoder enc;
    ph_model *m;
};

ph_mmproj *ph_mmproj_open(ph_model *m, const char *path, ph_err *e) {
    ph_mmproj *h = calloc(1, sizeof *h);
    if (!h) {
        ph_err_set(e, "out of memory");
        return NULL;
    }
    static const uint8_t no_id[32]; /* its rows are never cached */
    if (encoder_open(&h->enc, path, m, 0, no_id, e)) {
        free(h);
        return NULL;
    }
    h->m = m;
    return h;
}

void ph_mmproj_close(ph_mmproj *h) {
    if (!h) return;
    encoder_close(&h->enc);
    free(h);
}

int ph_mmproj_set_budget(ph_mmproj *h, int min_tokens, int max_tokens, ph_err *e) {
    if (min_tokens < 1 || max_tokens < min_tokens)
        return ph_err_set(e, "picture token budget %d..%d is not usable", min_tokens, max_tokens);
    return encoder_set_budget(&h->enc, min_tokens, max_tokens, e);
}

int ph_session_eval_picture(ph_session *s, ph_mmproj *h, ph_picture *pic, ph_picture_chunk *chunk, float **rows_out,
                            ph_err *e) {
    if (h->m != s->m) return ph_err_set(e, "the vision tower belongs to another model");
    ph_prep prep;
    if (picture_decode(pic, e)) return -1;
    const int prc = ph_image_preprocess(&pic->img, &h->enc.prep, &prep, e);
    picture_drop_pixels(pic);
    if (prc) return -1;
    const int width = h->enc.out_width;
    const size_t n = (size_t)prep.grid_x * (size_t)prep.grid_y;
    float *rows = malloc(n * (size_t)width * sizeof(float));
    if (!rows) {
        ph_prep_free(&prep);
        return ph_err_set(e, "out of memory for %zu picture rows", n);
    }
    double t0 = ph_now_s();
    int rc = ph_vision_encode(h->enc.tower, &prep, rows, e);
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
