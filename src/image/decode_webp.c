/* WebP through libwebp: lossy and lossless still pictures to RGB8 (alpha
 * dropped: the stored colours, not composited). An EXIF chunk of the
 * extended format carries the orientation. Animations are refused. */
#include <stdlib.h>
#include <string.h>
#include <webp/decode.h>

#include "image/image_internal.h"

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The EXIF chunk's orientation, walking the RIFF chunks after "WEBP". */
static int webp_orientation(const uint8_t *d, size_t n) {
    size_t p = 12;
    while (n - p >= 8) {
        size_t size = le32(d + p + 4);
        if (size > n - p - 8) break;
        if (!memcmp(d + p, "EXIF", 4)) return exif_orientation(d + p + 8, size);
        p += 8 + size + (size & 1);
        if (p > n) break;
    }
    return 1;
}

static int webp_fail(const char *label, VP8StatusCode st, ph_err *err) {
    switch (st) {
    case VP8_STATUS_NOT_ENOUGH_DATA: return img_err(err, label, "WebP data is truncated");
    case VP8_STATUS_OUT_OF_MEMORY: return img_err(err, label, "out of memory decoding the WebP");
    case VP8_STATUS_UNSUPPORTED_FEATURE: return img_err(err, label, "WebP uses a feature libwebp does not support");
    default: return img_err(err, label, "WebP is corrupt (libwebp status %d)", (int)st);
    }
}

int decode_webp(const uint8_t *d, size_t n, const image_limits *lim, const char *label, bool pixels, img_decoded *out,
                ph_err *err) {
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg)) return img_err(err, label, "libwebp version mismatch");
    VP8StatusCode st = WebPGetFeatures(d, n, &cfg.input);
    if (st != VP8_STATUS_OK) return webp_fail(label, st, err);
    if (img_check_size(label, "WebP", (uint64_t)cfg.input.width, (uint64_t)cfg.input.height, lim, err) != 0)
        return -1;
    if (cfg.input.has_animation) return img_err(err, label, "animated WebP is not supported");
    int w = cfg.input.width, h = cfg.input.height;
    out->w = w;
    out->h = h;
    out->orientation = webp_orientation(d, n);
    if (!pixels) return 0;
    uint8_t *rgb = img_alloc(label, w, h, 3, err);
    if (!rgb) return -1;
    cfg.output.colorspace = MODE_RGB;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = rgb;
    cfg.output.u.RGBA.stride = w * 3;
    cfg.output.u.RGBA.size = (size_t)w * h * 3;
    st = WebPDecode(d, n, &cfg);
    WebPFreeDecBuffer(&cfg.output);
    if (st != VP8_STATUS_OK) {
        free(rgb);
        return webp_fail(label, st, err);
    }
    out->rgb = rgb;
    return 0;
}
