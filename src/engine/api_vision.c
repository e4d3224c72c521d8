/* The session-level picture path of pinhole.h: the vision tower of an
 * mmproj file attached to its LLM (the engine's encoder, always loaded),
 * a picture encoded and evaluated into a session; and model files and
 * their pairs told apart from their metadata. */
#include <stdlib.h>
#include <string.h>

#include "base/timeutil.h"
#include "gguf/gguf.h"
#include "engine/picture.h"
#include "engine/session.h"
#include "state/encoder.h"

struct ph_mmproj {
    vis_encoder enc;
    ph_model *m;
};

ph_mmproj *ph_mmproj_open(ph_model *m, const char *path, ph_err *err) {
    ph_mmproj *h = calloc(1, sizeof *h);
    if (!h) {
        err_set(err, "out of memory");
        return NULL;
    }
    static const uint8_t no_id[32]; /* its rows are never cached */
    if (encoder_open(&h->enc, path, m, 0, no_id, err)) {
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

int ph_mmproj_set_budget(ph_mmproj *h, int min_tokens, int max_tokens, ph_err *err) {
    if (min_tokens < 1 || max_tokens < min_tokens)
        return err_set(err, "picture token budget %d..%d is not usable", min_tokens, max_tokens);
    return encoder_set_budget(&h->enc, min_tokens, max_tokens, err);
}

int ph_session_eval_picture(ph_session *s, ph_mmproj *h, ph_picture *pic, ph_picture_chunk *chunk, float **rows_out,
                            ph_err *err) {
    if (h->m != s->m) return err_set(err, "the vision tower belongs to another model");
    /* the budget as set, as llama.cpp's mtmd takes it (no cap by the
     * context: the engine's turns have that, ph_engine_picture_max_tokens) */
    prep_image prep;
    if (picture_decode(pic, err)) return -1;
    const int prc = image_preprocess(&pic->img, &h->enc.prep, &prep, err);
    picture_drop_pixels(pic);
    if (prc) return -1;
    const int width = h->enc.out_width;
    const size_t n = (size_t)prep.grid_x * (size_t)prep.grid_y;
    float *rows = malloc(n * (size_t)width * sizeof(float));
    if (!rows) {
        prep_free(&prep);
        return err_set(err, "out of memory for %zu picture rows", n);
    }
    double t0 = time_now_s();
    const vision_progress vp = {session_encode_step, s};
    session_encode_step(s, 0, vision_get_info(h->enc.tower)->n_layer + 1);
    int rc = vision_encode(h->enc.tower, &prep, rows, &vp, err);
    double t1 = time_now_s();
    if (rc == 0) rc = session_eval_image_rows(s, rows, prep.grid_x, prep.grid_y, false, err);
    if (rc == 0 && chunk) {
        chunk->n_tokens = (int32_t)n;
        chunk->grid_x = prep.grid_x;
        chunk->grid_y = prep.grid_y;
        chunk->n_pos = prep.grid_x > prep.grid_y ? prep.grid_x : prep.grid_y;
        chunk->embd_width = width;
        chunk->encode_s = t1 - t0;
    }
    prep_free(&prep);
    if (rc == 0 && rows_out) *rows_out = rows;
    else free(rows);
    return rc;
}

ph_file_kind ph_file_probe(const char *path, ph_err *err) {
    gguf_file *f = gguf_open(path, err);
    if (!f) return PH_FILE_OTHER;
    gguf_str arch;
    const bool clip = gguf_get_str(f, "general.architecture", &arch) == 0 && gguf_str_eq(arch, "clip");
    gguf_close(f);
    if (clip) {
        vis_tower *v = vision_probe(path, err);
        vision_free(v);
        return v ? PH_FILE_MMPROJ : PH_FILE_OTHER;
    }
    ph_model *m = llm_probe(path, err);
    ph_model_free(m);
    return m ? PH_FILE_LLM : PH_FILE_OTHER;
}

int ph_file_pair(const char *llm_path, const char *mmproj_path, ph_err *err) {
    ph_model *m = llm_probe(llm_path, err);
    vis_tower *v = m && llm_check_pictures(m, err) == 0 ? vision_probe(mmproj_path, err) : NULL;
    const int rc = v ? vision_check_width(vision_get_info(v), mmproj_path, m->hp.n_embd_inp, err) : -1;
    vision_free(v);
    ph_model_free(m);
    return rc;
}
