/* Preprocessing for qwen3vl_merger (docs/numerics.md, Picture preprocessing): smart resize to a multiple of
 * patch * merge within the token budget, letterboxing with a Pillow-
 * compatible bicubic resampler, and normalization to planar CHW float.
 * Every rounding point follows llama.cpp, so the same picture gives the
 * same encoder input bit for bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "image/image_internal.h"

/* ---- smart resize (docs/numerics.md, Smart resize) --------------------- */

/* llama.cpp rounds in float, with C's round (ties away from zero). */
static int round_by(float x, int f) { return (int)roundf(x / (float)f) * f; }
static int floor_by(float x, int f) { return (int)floorf(x / (float)f) * f; }
static int ceil_by(float x, int f) { return (int)ceilf(x / (float)f) * f; }
static int max_i(int a, int b) { return a > b ? a : b; }

void smart_resize(int w, int h, int factor, int64_t min_pixels, int64_t max_pixels, int *out_w, int *out_h) {
    const int f = factor;
    const int64_t area = (int64_t)w * h;
    int wb = max_i(f, round_by((float)w, f)), hb = max_i(f, round_by((float)h, f));
    if ((int64_t)wb * hb > max_pixels) {
        const float beta = sqrtf((float)area / (float)max_pixels);
        hb = max_i(f, floor_by((float)h / beta, f));
        wb = max_i(f, floor_by((float)w / beta, f));
    } else if ((int64_t)wb * hb < min_pixels) {
        const float beta = sqrtf((float)min_pixels / (float)area);
        hb = ceil_by((float)h * beta, f);
        wb = ceil_by((float)w * beta, f);
    }
    *out_w = wb;
    *out_h = hb;
}

/* ---- bicubic resampling (docs/numerics.md, Resampling) ----------------- */

#define PRECISION_BITS 22 /* 32 bits - 8 for the pixel - 2 for the sign and headroom */

/* Keys' cubic with a = -0.5 (Pillow's choice), support 2. */
static double bicubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

/* The taps of one pass: output o reads count[o] inputs from first[o], with
 * fixed-point weights k[o * ksize ...]. */
typedef struct taps {
    int ksize;
    int *first, *count;
    int32_t *k;
} taps;

static void taps_free(taps *t) {
    free(t->first);
    free(t->count);
    free(t->k);
}

static int taps_make(int in, int out, taps *t) {
    const double scale = (double)in / out;
    const double fs = scale > 1.0 ? scale : 1.0;
    const double support = 2.0 * fs, ss = 1.0 / fs;
    t->ksize = (int)ceil(support) * 2 + 1;
    t->first = malloc(sizeof(int) * (size_t)out);
    t->count = malloc(sizeof(int) * (size_t)out);
    t->k = calloc((size_t)out * t->ksize, sizeof(int32_t));
    double *w = malloc(sizeof(double) * (size_t)t->ksize);
    if (!t->first || !t->count || !t->k || !w) {
        free(w);
        taps_free(t);
        return -1;
    }
    for (int o = 0; o < out; o++) {
        const double center = (o + 0.5) * scale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in) xmax = in;
        const int n = xmax - xmin;
        double sum = 0.0;
        for (int i = 0; i < n; i++) {
            w[i] = bicubic((i + xmin - center + 0.5) * ss);
            sum += w[i];
        }
        int32_t *k = t->k + (size_t)o * t->ksize;
        for (int i = 0; i < n; i++) {
            const double v = (sum != 0.0 ? w[i] / sum : w[i]) * (1 << PRECISION_BITS);
            k[i] = (int32_t)(v < 0.0 ? v - 0.5 : v + 0.5); /* rounds half away from zero */
        }
        t->first[o] = xmin;
        t->count[o] = n;
    }
    free(w);
    return 0;
}

static uint8_t clip8(int32_t acc) {
    acc >>= PRECISION_BITS;
    return (uint8_t)(acc < 0 ? 0 : acc > 255 ? 255 : acc);
}

/* Resamples each row of an RGB8 picture from sw to dw pixels. */
static void pass_horizontal(const uint8_t *src, int sw, int h, uint8_t *dst, int dw, const taps *t) {
    for (int y = 0; y < h; y++) {
        const uint8_t *row = src + (size_t)y * sw * 3;
        uint8_t *out = dst + (size_t)y * dw * 3;
        for (int o = 0; o < dw; o++) {
            const int32_t *k = t->k + (size_t)o * t->ksize;
            const uint8_t *p = row + (size_t)t->first[o] * 3;
            int32_t r = 1 << (PRECISION_BITS - 1), g = r, b = r;
            for (int i = 0; i < t->count[o]; i++) {
                r += p[3 * i] * k[i];
                g += p[3 * i + 1] * k[i];
                b += p[3 * i + 2] * k[i];
            }
            out[3 * o] = clip8(r);
            out[3 * o + 1] = clip8(g);
            out[3 * o + 2] = clip8(b);
        }
    }
}

/* Resamples each column from sh to dh pixels. The sums are exact integers,
 * so adding tap by tap across a whole row gives Pillow's results. */
static void pass_vertical(const uint8_t *src, int w, uint8_t *dst, int dh, const taps *t, int32_t *acc) {
    const size_t n = (size_t)w * 3;
    for (int o = 0; o < dh; o++) {
        const int32_t *k = t->k + (size_t)o * t->ksize;
        for (size_t j = 0; j < n; j++) acc[j] = 1 << (PRECISION_BITS - 1);
        for (int i = 0; i < t->count[o]; i++) {
            const uint8_t *row = src + (size_t)(t->first[o] + i) * n;
            for (size_t j = 0; j < n; j++) acc[j] += row[j] * k[i];
        }
        uint8_t *out = dst + (size_t)o * n;
        for (size_t j = 0; j < n; j++) out[j] = clip8(acc[j]);
    }
}

int resize_bicubic(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh) {
    if (!src || !dst || sw <= 0 || sh <= 0 || dw <= 0 || dh <= 0) return -1;
    if (sw == dw && sh == dh) {
        memcpy(dst, src, (size_t)sw * sh * 3);
        return 0;
    }
    /* Horizontal first (into a uint8 intermediate when both change), then
     * vertical; a dimension that does not change gets no pass. */
    const uint8_t *cur = src;
    uint8_t *mid = NULL;
    if (sw != dw) {
        taps t;
        if (sh != dh && !(mid = malloc((size_t)dw * sh * 3))) return -1;
        if (taps_make(sw, dw, &t) != 0) {
            free(mid);
            return -1;
        }
        pass_horizontal(src, sw, sh, mid ? mid : dst, dw, &t);
        taps_free(&t);
        cur = mid;
    }
    if (sh != dh) {
        taps t;
        int32_t *acc = malloc(sizeof(int32_t) * (size_t)dw * 3);
        if (!acc || taps_make(sh, dh, &t) != 0) {
            free(acc);
            free(mid);
            return -1;
        }
        pass_vertical(cur, dw, dst, dh, &t, acc);
        taps_free(&t);
        free(acc);
    }
    free(mid);
    return 0;
}

/* ---- the whole preprocessing (docs/numerics.md, Picture preprocessing) -- */

void prep_geometry(int w, int h, const prep_params *p, int *tw, int *th) {
    const int f = p->patch_size * p->n_merge;
    const int64_t f2 = (int64_t)f * f;
    smart_resize(w, h, f, p->min_tokens * f2, p->max_tokens * f2, tw, th);
}

int image_preprocess(const image_rgb *img, const prep_params *p, prep_image *out, ph_err *err) {
    memset(out, 0, sizeof *out);
    /* Bounds that keep every float -> int conversion of the smart resize in range. */
    const int max_side = 1 << 20, max_tokens = 1 << 20;
    if (!img || !img->rgb || img->w <= 0 || img->h <= 0 || img->w > max_side || img->h > max_side)
        return err_set(err, "preprocess: no picture, or one larger than %d pixels a side", max_side);
    if (p->patch_size <= 0 || p->n_merge <= 0 || p->patch_size > 1024 || p->n_merge > 64)
        return err_set(err, "preprocess: bad patch size %d or merge %d", p->patch_size, p->n_merge);
    if (p->min_tokens < 0 || p->max_tokens < 1 || p->min_tokens > p->max_tokens || p->max_tokens > max_tokens)
        return err_set(err, "preprocess: bad token budget %d..%d", p->min_tokens, p->max_tokens);
    for (int c = 0; c < 3; c++)
        if (!(p->std[c] != 0.0f) || !isfinite(p->std[c]) || !isfinite(p->mean[c]))
            return err_set(err, "preprocess: bad mean/std for channel %d", c);

    const int f = p->patch_size * p->n_merge;
    int tw, th;
    prep_geometry(img->w, img->h, p, &tw, &th);
    if (tw <= 0 || th <= 0 || (int64_t)tw * th > ((int64_t)1 << 28))
        return err_set(err, "preprocess: the encoder size %dx%d is out of range", tw, th);

    /* The picture at the encoder's size, letterboxed (PAD_CEIL, black). */
    const uint8_t *rgb = img->rgb;
    uint8_t *canvas = NULL;
    if (tw != img->w || th != img->h) {
        const float s = fminf((float)tw / (float)img->w, (float)th / (float)img->h);
        int nw = (int)ceilf((float)img->w * s), nh = (int)ceilf((float)img->h * s);
        if (nw > tw) nw = tw;
        if (nh > th) nh = th;
        canvas = calloc((size_t)tw * th, 3);
        uint8_t *fit = malloc((size_t)nw * nh * 3);
        if (!canvas || !fit || resize_bicubic(img->rgb, img->w, img->h, fit, nw, nh) != 0) {
            free(canvas);
            free(fit);
            return err_set(err, "preprocess: out of memory resizing %dx%d to %dx%d", img->w, img->h, nw, nh);
        }
        const int x0 = (tw - nw) / 2, y0 = (th - nh) / 2;
        for (int y = 0; y < nh; y++)
            memcpy(canvas + ((size_t)(y0 + y) * tw + x0) * 3, fit + (size_t)y * nw * 3, (size_t)nw * 3);
        free(fit);
        rgb = canvas;
    }

    /* Normalization (docs/numerics.md, Normalization): in float, as llama.cpp does it. */
    const size_t plane = (size_t)tw * th;
    out->pixels = malloc(sizeof(float) * plane * 3);
    if (!out->pixels) {
        free(canvas);
        return err_set(err, "preprocess: out of memory for %dx%d floats", tw, th);
    }
    for (int c = 0; c < 3; c++) {
        float lut[256];
        for (int v = 0; v < 256; v++) lut[v] = ((float)v / 255.0f - p->mean[c]) / p->std[c];
        float *dst = out->pixels + (size_t)c * plane;
        for (size_t i = 0; i < plane; i++) dst[i] = lut[rgb[3 * i + c]];
    }
    free(canvas);
    out->w = tw;
    out->h = th;
    out->grid_x = tw / f;
    out->grid_y = th / f;
    return 0;
}

void prep_free(prep_image *p) {
    if (!p) return;
    free(p->pixels);
    p->pixels = NULL;
}

void prep_cap_tokens(prep_params *p, int most) {
    if (most < 1) most = 1;
    if (p->max_tokens > most) p->max_tokens = most;
    if (p->min_tokens > p->max_tokens) p->min_tokens = p->max_tokens;
}
