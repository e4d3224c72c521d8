/* Pictures as received (ph_picture_new): in the caller's thread only
 * fingerprinted (bytes_id) and their headers read, which gives their size
 * (and, with an engine's encoder, their rows); an engine's worker
 * identifies them (image_id: the bytes_id memo of the request's isolation
 * domain, or a decode) when their turn comes, and decodes their pixels
 * only for that or to encode them. (A memo hit in another domain would
 * tell by timing that someone sent the picture.) */
#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"
#include "engine/engine.h"
#include "state/domain.h"

static image_memo_entry *memo_find(ph_engine *e, const uint8_t key[32]) {
    for (int i = 0; i < ENGINE_MEMO; i++)
        if (e->memo[i].used && memcmp(e->memo[i].key, key, 32) == 0) return &e->memo[i];
    return NULL;
}

static void memo_put(ph_engine *e, const uint8_t key[32], const ph_picture *im) {
    image_memo_entry *slot = &e->memo[0];
    for (int i = 0; i < ENGINE_MEMO; i++) {
        if (!e->memo[i].used) {
            slot = &e->memo[i];
            break;
        }
        if (e->memo[i].used < slot->used) slot = &e->memo[i];
    }
    memcpy(slot->key, key, 32);
    memcpy(slot->image_id, im->image_id, 32);
    slot->used = ++e->memo_clock;
}

/* The encoder's input size for a w x h picture (the preprocessing's own
 * geometry) and its merged grid. */
static void picture_geometry(const ph_engine *e, int w, int h, int *tw, int *th, int32_t *grid_x, int32_t *grid_y) {
    const prep_params *p = &e->enc.prep;
    prep_geometry(w, h, p, tw, th);
    const int f = p->patch_size * p->n_merge;
    *grid_x = *tw / f;
    *grid_y = *th / f;
}

ph_picture *ph_picture_new(const void *data, size_t len, const char *label, ph_err *err) {
    ph_picture *im = calloc(1, sizeof *im);
    if (!im) {
        err_set(err, "out of memory");
        return NULL;
    }
    snprintf(im->label, sizeof im->label, "%s", label ? label : "picture");
    image_limits lim;
    image_limits_default(&lim);
    if (image_probe(data, len, &lim, im->label, &im->w, &im->h, err)) {
        err->code = PH_ERR_INPUT;
        free(im);
        return NULL;
    }
    im->bytes = malloc(len ? len : 1);
    if (!im->bytes) {
        free(im);
        err_set(err, "out of memory");
        return NULL;
    }
    memcpy(im->bytes, data, len);
    im->len = len;
    sha256_digest(data, len, im->bytes_id);
    return im;
}

ph_picture *ph_picture_load(const char *path, ph_err *err) {
    uint8_t *data;
    size_t len;
    if (image_read_file(path, NULL, &data, &len, err)) {
        err->code = PH_ERR_INPUT;
        return NULL;
    }
    const char *base = strrchr(path, '/');
    ph_picture *p = ph_picture_new(data, len, base ? base + 1 : path, err);
    free(data);
    return p;
}

void ph_picture_free(ph_picture *im) {
    if (!im) return;
    image_free(&im->img);
    free(im->bytes);
    free(im);
}

void ph_picture_size(const ph_picture *im, int *w, int *h) {
    *w = im->w;
    *h = im->h;
}

int32_t ph_engine_picture_rows(const ph_engine *e, const ph_picture *im) {
    if (!e->has_vision) return 0;
    int tw, th;
    int32_t gx, gy;
    picture_geometry(e, im->w, im->h, &tw, &th, &gx, &gy);
    return gx * gy;
}

int picture_decode(ph_picture *im, ph_err *err) {
    if (im->img.rgb) return 0;
    image_limits lim;
    image_limits_default(&lim);
    if (image_decode(im->bytes, im->len, &lim, im->label, &im->img, err)) {
        err->code = PH_ERR_INPUT;
        return -1;
    }
    /* cannot happen: the same bytes, the same header, the same pixels */
    if (im->img.w != im->w || im->img.h != im->h) {
        err_set(err, "%s: decoded to %dx%d, not the %dx%d of its header", im->label, im->img.w, im->img.h, im->w,
                im->h);
    } else if (im->identified && memcmp(im->img.image_id, im->image_id, 32) != 0) {
        err_set(err, "%s: decoded to other pixels than before", im->label);
    } else {
        return 0;
    }
    image_free(&im->img);
    return -1;
}

void picture_drop_pixels(ph_picture *im) { image_free(&im->img); }

int engine_picture_identify(ph_engine *e, ph_picture *im, const uint8_t domain[32], ph_err *err) {
    if (im->identified) return 0;
    uint8_t key[32];
    memcpy(key, im->bytes_id, 32);
    domain_fold(key, domain);
    pthread_mutex_lock(&e->mu);
    image_memo_entry *hit = memo_find(e, key);
    if (hit) {
        memcpy(im->image_id, hit->image_id, 32);
        hit->used = ++e->memo_clock;
    }
    pthread_mutex_unlock(&e->mu);
    if (!hit) { /* decoded without the lock: the running requests go on meanwhile */
        if (picture_decode(im, err)) return -1;
        memcpy(im->image_id, im->img.image_id, 32);
        pthread_mutex_lock(&e->mu);
        memo_put(e, key, im);
        pthread_mutex_unlock(&e->mu);
    }
    im->identified = true;
    return 0;
}

/* The version of the preprocessing and encoder kernels: bump it when a
 * change alters the rows an encoder produces. */
#define EMBED_KEY_VERSION "pinhole-embed-1"

typedef struct prep_key {
    int32_t w, h, tw, th, patch, merge, min_tokens, max_tokens;
    float mean[3], std[3];
} prep_key;

void engine_embed_key(const ph_engine *e, const ph_picture *im, const uint8_t domain[32], uint8_t key[32],
                      int32_t *grid_x, int32_t *grid_y) {
    const prep_params *p = &e->enc.prep;
    int tw, th;
    picture_geometry(e, im->w, im->h, &tw, &th, grid_x, grid_y);
    /* everything that decides the rows: the encoder file, the pixels, the
     * preprocessing (target size, letterbox, resampler, mean/std, budget)
     * and the kernel set */
    const prep_key prep = {im->w,
                           im->h,
                           tw,
                           th,
                           p->patch_size,
                           p->n_merge,
                           p->min_tokens,
                           p->max_tokens,
                           {p->mean[0], p->mean[1], p->mean[2]},
                           {p->std[0], p->std[1], p->std[2]}};
    struct {
        char version[32];
        uint8_t encoder_id[32], image_id[32];
        prep_key prep;
        char resampler[48];
        char isa[16];
    } in;
    memset(&in, 0, sizeof in);
    snprintf(in.version, sizeof in.version, "%s", EMBED_KEY_VERSION);
    memcpy(in.encoder_id, e->enc.encoder_id, 32);
    memcpy(in.image_id, im->image_id, 32);
    in.prep = prep;
    snprintf(in.resampler, sizeof in.resampler, "%s", "bicubic-pillow/letterbox-center-black");
    snprintf(in.isa, sizeof in.isa, "%s", ph_cpu_isa());
    sha256_digest(&in, sizeof in, key);
    /* and, outside the default domain, the domain: embeddings (in memory
     * and in --image-cache-dir) and the spans that hold them are then that
     * domain's alone */
    domain_fold(key, domain);
}
