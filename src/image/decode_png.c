/* PNG through libspng: every bit depth and colour type, interlaced or not,
 * decoded to RGB8. spng's RGB8 conversion drops alpha (tRNS is not
 * applied), maps palettes, scales low-bit grey and reduces 16-bit samples
 * to their high byte (docs/numerics.md, Picture decoding; tests/test_image.c holds
 * it to that). Gamma and colour chunks are ignored, as in stb_image. */
#include <spng.h>
#include <stdlib.h>
#include <string.h>

#include "image/image_internal.h"

/* Memory spng may spend on ancillary chunks (text, ICC profile, EXIF),
 * compressed text included: a zTXt bomb stops here. spng's chunk size
 * limit bounds what one compressed ancillary chunk may inflate to (not the
 * pixel data, whose chunks are read as they come) and may not exceed the
 * cache limit: both are this one limit, whatever the file's size (the file
 * itself is bounded by image_limits.max_file_bytes). spng also keeps at
 * most SPNG_CHUNK_COUNT_LIMIT (1000) such chunks. */
#define PNG_ANCILLARY_LIMIT ((size_t)8 << 20)

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The error of spng's r, and ctx freed. */
static int png_fail(const char *label, spng_ctx *ctx, int r, ph_err *err) {
    int chunks = 0;
    if (r == SPNG_ECHUNK_LIMITS && spng_get_option(ctx, SPNG_CHUNK_COUNT_LIMIT, &chunks)) chunks = 0;
    spng_ctx_free(ctx);
    if (r == SPNG_IO_EOF || r == SPNG_EOF || r == SPNG_EIDAT_TOO_SHORT)
        return img_err(err, label, "PNG data is truncated");
    if (r == SPNG_ECHUNK_LIMITS)
        return img_err(err, label,
                       "PNG metadata (text, ICC profile, EXIF and other ancillary chunks) is over its limits: "
                       "%zu bytes (%zu MiB) in all, %d chunks",
                       PNG_ANCILLARY_LIMIT, PNG_ANCILLARY_LIMIT >> 20, chunks);
    if (r == SPNG_EMEM) return img_err(err, label, "out of memory decoding the PNG");
    return img_err(err, label, "PNG is corrupt: %s", spng_strerror(r));
}

/* The orientation of the first eXIf chunk, wherever it is (spng would read
 * one after the pixel data only once they are decoded): a walk over the
 * chunk headers. 1 when there is none. */
static int png_orientation(const uint8_t *d, size_t n) {
    size_t p = 8;
    while (n - p >= 12) {
        const size_t len = be32(d + p);
        if (len > n - p - 12 || !memcmp(d + p + 4, "IEND", 4)) break;
        if (!memcmp(d + p + 4, "eXIf", 4)) return exif_orientation(d + p + 8, len);
        p += 12 + len;
    }
    return 1;
}

int decode_png(const uint8_t *d, size_t n, const image_limits *lim, const char *label, bool pixels, img_decoded *out,
               ph_err *err) {
    /* The size, read here first so that a huge declared size gets the
     * limit's message rather than spng's. IHDR must be the first chunk. */
    if (n >= 24 && !memcmp(d + 12, "IHDR", 4) &&
        img_check_size(label, "PNG", be32(d + 16), be32(d + 20), lim, err) != 0)
        return -1;

    spng_ctx *ctx = spng_ctx_new(0);
    if (!ctx) return img_err(err, label, "out of memory decoding the PNG");
    int r = spng_set_png_buffer(ctx, d, n);
    if (!r) r = spng_set_image_limits(ctx, (uint32_t)lim->max_side, (uint32_t)lim->max_side);
    if (!r) r = spng_set_chunk_limits(ctx, PNG_ANCILLARY_LIMIT, PNG_ANCILLARY_LIMIT);
    struct spng_ihdr ihdr;
    if (!r) r = spng_get_ihdr(ctx, &ihdr);
    if (r) return png_fail(label, ctx, r, err);
    if (img_check_size(label, "PNG", ihdr.width, ihdr.height, lim, err) != 0) {
        spng_ctx_free(ctx);
        return -1;
    }
    int w = (int)ihdr.width, h = (int)ihdr.height;
    size_t need = 0;
    r = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &need);
    if (!r && need != (size_t)w * h * 3) r = SPNG_EINTERNAL;
    if (r) return png_fail(label, ctx, r, err);
    out->w = w;
    out->h = h;
    out->orientation = png_orientation(d, n);
    if (!pixels) {
        spng_ctx_free(ctx);
        return 0;
    }
    uint8_t *rgb = img_alloc(label, w, h, 3, err);
    if (!rgb) {
        spng_ctx_free(ctx);
        return -1;
    }
    r = spng_decode_image(ctx, rgb, need, SPNG_FMT_RGB8, 0);
    if (r) {
        free(rgb);
        return png_fail(label, ctx, r, err);
    }
    spng_ctx_free(ctx);
    out->rgb = rgb;
    return 0;
}
