/* Picture decoding: limits, format sniffing, dispatch to the decoder of
 * each format (the header alone for a probe), EXIF orientation and
 * fingerprints (docs/numerics.md, Picture decoding). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "image/image_internal.h"

void image_limits_default(image_limits *l) {
    l->max_file_bytes = (size_t)64 << 20;
    l->max_side = 16384;
    l->max_pixels = (uint64_t)64 << 20;
}

int img_err(ph_err *err, const char *label, const char *fmt, ...) {
    if (!err) return -1;
    char msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Built by hand, not with snprintf("%s: %s"), whose truncation warning
     * cannot know that cutting an overlong message is intended. */
    size_t nl = strlen(label), nm = strlen(msg), cap = sizeof err->msg - 1;
    if (nl > cap / 2) nl = cap / 2;
    memcpy(err->msg, label, nl);
    memcpy(err->msg + nl, ": ", 2);
    size_t at = nl + 2, take = nm < cap - at ? nm : cap - at;
    memcpy(err->msg + at, msg, take);
    err->msg[at + take] = '\0';
    return -1;
}

int img_check_size(const char *label, const char *format, uint64_t w, uint64_t h, const image_limits *lim,
                   ph_err *err) {
    if (w == 0 || h == 0)
        return img_err(err, label, "%s has an empty size (%llux%llu)", format, (unsigned long long)w,
                       (unsigned long long)h);
    if (w > (uint64_t)lim->max_side || h > (uint64_t)lim->max_side)
        return img_err(err, label, "%s is %llux%llu, more than the %d-pixel side limit", format,
                       (unsigned long long)w, (unsigned long long)h, lim->max_side);
    if (w * h > lim->max_pixels)
        return img_err(err, label, "%s is %llux%llu = %llu pixels, more than the %llu-pixel limit", format,
                       (unsigned long long)w, (unsigned long long)h, (unsigned long long)(w * h),
                       (unsigned long long)lim->max_pixels);
    return 0;
}

uint8_t *img_alloc(const char *label, int w, int h, int channels, ph_err *err) {
    uint8_t *p = malloc((size_t)w * (size_t)h * (size_t)channels);
    if (!p) img_err(err, label, "out of memory for %dx%d pixels", w, h);
    return p;
}

typedef int (*decode_fn)(const uint8_t *, size_t, const image_limits *, const char *, bool, img_decoded *, ph_err *);

/* The decoder for the magic bytes at the start of d, or NULL with an error
 * that says what the file seems to be. */
static decode_fn sniff(const uint8_t *d, size_t n, const char *label, ph_err *err) {
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n >= 8 && !memcmp(d, png_sig, 8)) return decode_png;
    if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) return decode_jpeg;
    if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4)) return decode_webp;
    if (n >= 6 && (!memcmp(d, "GIF87a", 6) || !memcmp(d, "GIF89a", 6))) return decode_gif;

    const char *other = NULL;
    if (n >= 2 && d[0] == 'B' && d[1] == 'M') other = "BMP";
    else if (n >= 4 && (!memcmp(d, "II*\0", 4) || !memcmp(d, "MM\0*", 4))) other = "TIFF";
    else if (n >= 12 && !memcmp(d + 4, "ftyp", 4)) other = "HEIF/AVIF";
    if (other) img_err(err, label, "%s pictures are not supported (only PNG, JPEG, WebP and GIF)", other);
    else img_err(err, label, "not a PNG, JPEG, WebP or GIF file (unknown magic bytes)");
    return NULL;
}

/* Checks the file's length, finds its format and runs that decoder: the
 * header alone, or the pixels too. lim NULL: the default limits. */
static int read_picture(const void *data, size_t len, const image_limits *lim, const char *label, bool pixels,
                        img_decoded *img, ph_err *err) {
    image_limits def;
    if (!lim) {
        image_limits_default(&def);
        lim = &def;
    }
    *img = (img_decoded){0, 0, NULL, 1};
    if (len == 0) return img_err(err, label, "the file is empty");
    if (len > lim->max_file_bytes)
        return img_err(err, label, "the file is %zu bytes, more than the %zu-byte limit", len, lim->max_file_bytes);
    decode_fn decode = sniff(data, len, label, err);
    if (!decode) return -1;
    return decode(data, len, lim, label, pixels, img, err);
}

int image_probe(const void *data, size_t len, const image_limits *lim, const char *label, int *w, int *h,
                ph_err *err) {
    img_decoded img;
    if (read_picture(data, len, lim, label ? label : "image", false, &img, err)) return -1;
    const bool turns = orientation_turns(img.orientation);
    *w = turns ? img.h : img.w;
    *h = turns ? img.w : img.h;
    return 0;
}

int image_decode(const void *data, size_t len, const image_limits *lim, const char *label, image_rgb *out,
                 ph_err *err) {
    if (!label) label = "image";
    memset(out, 0, sizeof *out);
    img_decoded img;
    if (read_picture(data, len, lim, label, true, &img, err)) return -1;
    if (orient(&img, img.orientation) != 0) {
        free(img.rgb);
        return img_err(err, label, "out of memory for %dx%d pixels", img.w, img.h);
    }
    out->w = img.w;
    out->h = img.h;
    out->rgb = img.rgb;
    if (image_fingerprint(data, len, out) != 0) {
        image_free(out);
        return img_err(err, label, "cannot compute SHA-256");
    }
    return 0;
}

int image_read_file(const char *path, const image_limits *lim, uint8_t **data, size_t *len, ph_err *err) {
    image_limits def;
    if (!lim) {
        image_limits_default(&def);
        lim = &def;
    }
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return img_err(err, path, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return img_err(err, path, "not a regular file");
    }
    if ((uint64_t)st.st_size > lim->max_file_bytes) {
        fclose(f);
        return img_err(err, path, "the file is %llu bytes, more than the %zu-byte limit",
                       (unsigned long long)st.st_size, lim->max_file_bytes);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return img_err(err, path, "out of memory for %zu bytes", n);
    }
    size_t got = fread(buf, 1, n, f);
    int read_err = ferror(f);
    fclose(f);
    if (read_err || got != n) {
        free(buf);
        return img_err(err, path, "read error");
    }
    *data = buf;
    *len = n;
    return 0;
}

int image_load_file(const char *path, const image_limits *lim, image_rgb *out, ph_err *err) {
    memset(out, 0, sizeof *out);
    uint8_t *buf;
    size_t n;
    if (image_read_file(path, lim, &buf, &n, err)) return -1;
    image_limits def;
    if (!lim) {
        image_limits_default(&def);
        lim = &def;
    }
    int rc = image_decode(buf, n, lim, path, out, err);
    free(buf);
    return rc;
}

void image_free(image_rgb *img) {
    if (!img) return;
    free(img->rgb);
    img->rgb = NULL;
    img->w = img->h = 0;
}
