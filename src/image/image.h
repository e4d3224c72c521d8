/* Pictures: safe decoding (PNG, JPEG, WebP, GIF first frame) with limits
 * checked before any large allocation, EXIF orientation, fingerprints, and
 * the preprocessing of a vision family (docs/numerics.md, Picture decoding and Picture preprocessing). */
#ifndef PH_IMAGE_IMAGE_H
#define PH_IMAGE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef struct image_limits {
    size_t max_file_bytes; /* default 64 MiB */
    int max_side;          /* default 16384 pixels */
    uint64_t max_pixels;   /* default 64 megapixels */
} image_limits;

void image_limits_default(image_limits *l);

typedef struct image_rgb {
    int w, h;
    uint8_t *rgb;         /* w * h * 3, row-major, orientation applied, alpha dropped */
    uint8_t bytes_id[32]; /* SHA-256 of the file bytes as received */
    uint8_t image_id[32]; /* SHA-256 over width, height and the RGB8 pixels */
} image_rgb;

/* Decodes a picture from memory. The format is sniffed from magic bytes
 * only. `label` names the picture in errors ("image 2", a file name).
 * On failure nothing is allocated and e says why in one line. */
int image_decode(const void *data, size_t len, const image_limits *lim, const char *label, image_rgb *out,
                 ph_err *err);
/* What a decode would say of the file's header, without decoding the
 * pixels: the displayed size (EXIF orientation applied), after the same
 * checks (length, format, limits) and with the same error for a header
 * that is wrong. A file whose pixels are damaged passes; its decode fails. */
int image_probe(const void *data, size_t len, const image_limits *lim, const char *label, int *w, int *h,
                ph_err *err);
int image_load_file(const char *path, const image_limits *lim, image_rgb *out, ph_err *err);
/* Reads a picture file's bytes (a regular file within lim's file size; lim
 * NULL: the defaults) into *data (malloc'd). */
int image_read_file(const char *path, const image_limits *lim, uint8_t **data, size_t *len, ph_err *err);
void image_free(image_rgb *img);

/* Preprocessing for qwen3vl_merger (docs/numerics.md, Picture preprocessing): smart resize to a multiple of
 * patch_size * n_merge within the token budget, Pillow-compatible bicubic
 * resampling, letterboxing, normalization to planar CHW float. */
typedef struct prep_params {
    int patch_size; /* 16 */
    int n_merge;    /* 2 */
    int min_tokens; /* merged tokens; default 8 */
    int max_tokens; /* default 4096 */
    float mean[3], std[3];
} prep_params;

typedef struct prep_image {
    int w, h;           /* the encoder's input size */
    int grid_x, grid_y; /* merged tokens across and down: w / (patch * merge) ... */
    float *pixels;      /* planar: [3][h][w], normalized */
} prep_image;

/* The encoder's input size for a w x h picture (no pixels needed); the
 * merged grid is tw / (patch * merge) by th / (patch * merge). */
void prep_geometry(int w, int h, const prep_params *p, int *tw, int *th);
/* Caps the token budget at most merged tokens (at least 1): a picture then
 * takes at most that many, the least lowered to it if above. */
void prep_cap_tokens(prep_params *p, int most);
int image_preprocess(const image_rgb *img, const prep_params *p, prep_image *out, ph_err *err);
void prep_free(prep_image *p);

/* Steps of the above, exposed for tests. */
void smart_resize(int w, int h, int factor, int64_t min_pixels, int64_t max_pixels, int *out_w, int *out_h);
/* Pillow-compatible separable bicubic resize of RGB8 (docs/numerics.md, Resampling). */
int resize_bicubic(const uint8_t *src, int sw, int sh, uint8_t *dst, int dw, int dh);

#endif
