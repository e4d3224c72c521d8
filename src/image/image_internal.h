/* Shared by the files of src/image; not part of its API. Each decoder
 * checks the picture's declared size against the limits before it
 * allocates the pixels, and reports every failure as one line that starts
 * with the picture's label. */
#ifndef PH_IMAGE_INTERNAL_H
#define PH_IMAGE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "image/image.h"

/* What a decoder hands back: the size as stored in the file, the EXIF
 * orientation it found (1..8) and, when the pixels were asked for, the RGB8
 * pixels as stored (no orientation applied yet; NULL otherwise). */
typedef struct img_decoded {
    int w, h;
    uint8_t *rgb;
    int orientation;
} img_decoded;

/* err_set with "label: " in front. Returns -1. */
int img_err(ph_err *err, const char *label, const char *fmt, ...) PH_PRINTF(3, 4);

/* Checks a declared size against the limits, naming the format ("PNG") in
 * the error. Returns 0 when the picture may be decoded. */
int img_check_size(const char *label, const char *format, uint64_t w, uint64_t h, const image_limits *lim,
                   ph_err *err);

/* malloc of w * h * channels bytes, with an "out of memory" error. */
uint8_t *img_alloc(const char *label, int w, int h, int channels, ph_err *err);

/* The decoders. Each reads the header (size, orientation) and checks it
 * against the limits, then decodes the pixels only when `pixels` is true:
 * a file refused from its header gets the same error either way. */
int decode_png(const uint8_t *d, size_t n, const image_limits *lim, const char *label, bool pixels, img_decoded *out,
               ph_err *err);
int decode_jpeg(const uint8_t *d, size_t n, const image_limits *lim, const char *label, bool pixels, img_decoded *out,
                ph_err *err);
int decode_webp(const uint8_t *d, size_t n, const image_limits *lim, const char *label, bool pixels, img_decoded *out,
                ph_err *err);
int decode_gif(const uint8_t *d, size_t n, const image_limits *lim, const char *label, bool pixels, img_decoded *out,
               ph_err *err);

/* The Orientation tag (0x0112) of IFD0 in an EXIF block, which may start
 * with "Exif\0\0" or directly with the TIFF header. 1 when the block has
 * none or it is out of range. */
int exif_orientation(const uint8_t *exif, size_t n);

/* Whether an EXIF orientation turns the picture a quarter (5..8): its
 * displayed width is its stored height. */
bool orientation_turns(int orientation);

/* Turns stored pixels into displayed ones for an EXIF orientation (1..8):
 * replaces img->rgb (and swaps w and h for 5..8). Returns -1 only when out
 * of memory, leaving img unchanged. */
int orient(img_decoded *img, int orientation);

/* Fills img->bytes_id from the file bytes and img->image_id from img's
 * size and pixels (docs/state-cache.md, Identity). Returns -1 if OpenSSL fails. */
int image_fingerprint(const void *data, size_t len, image_rgb *img);

#endif
