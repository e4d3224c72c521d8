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

void ph_image_limits_default(ph_image_limits *l) {
    l->max_file_bytes = (size_t)64 << 20;
    l->max_side = 16384;
    l->max_pixels = (uint64_t)64 << 20;
}

int ph_img_err(ph_err *e, const char *label, const char *fmt, ...) {
    if (!e) return -1;
    char msg[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Built by hand, not with snprintf("%s: %s"), whose truncation warning
     * cannot know that cutting an overlong message is intended. */
    size_t nl = strlen(label), nm = strlen(msg), cap = sizeof e->msg - 1;
    if (nl > cap / 2) nl = cap / 2;
    memcpy(e->msg, label, nl);
    memcpy(e->msg + nl, ": ", 2);
    size_t at = nl + 2, take = nm < cap - at ? nm : cap - at;
    memcpy(e->msg + at, msg, take);
    e->msg[at + take] = '\0';
    return -1;
}

int ph_img_check_size(const char *label, const char *format, uint64_t w, uint64_t h, const ph_image_limits *lim,
                      ph_err *e) {
    if (w == 0 || h == 0)
        return ph_img_err(e, label, "%s has an empty size (%llux%llu)", format, (unsigned long long)w,
                          (unsigned long long)h);
    if (w > (uint64_t)lim->max_side || h > (uint64_t)lim->max_side)
        return ph_img_err(e, label, "%s is %llux%llu, more than the %d-pixel side limit", format,
                          (unsigned long long)w, (unsigned long long)h, lim->max_side);
    if (w * h > lim->max_pixels)
        return ph_img_err(e, label, "%s is %llux%llu = %llu pixels, more than the %llu-pixel limit", format,
                          (unsigned long long)w, (unsigned long long)h, (unsigned long long)(w * h),
                          (unsigned long long)lim->max_pixels);
    return 0;
}

uint8_t *ph_img_alloc(const char *label, int w, int h, int channels, ph_err *e) {
    uint8_t *p = malloc((size_t)w * (size_t)h * (size_t)channels);
    if (!p) ph_img_err(e, label, "out of memory for %dx%d pixels", w, h);
    return p;
}

typedef int (*decode_fn)(const uint8_t *, size_t, const ph_image_limits *, const char *, bool, ph_decoded *,
                         ph_err *);

/* The decoder for the magic bytes at the start of d, or NULL with an error
 * that says what the file seems to be. */
static decode_fn sniff(const uint8_t *d, size_t n, const char *label, ph_err *e) {
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (n >= 8 && !memcmp(d, png_sig, 8)) return ph_decode_png;
    if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) return ph_decode_jpeg;
    if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4)) return ph_decode_webp;
    if (n >= 6 && (!memcmp(d, "GIF87a", 6) || !memcmp(d, "GIF89a", 6))) return ph_decode_gif;

    const char *other = NULL;
    if (n >= 2 && d[0] == 'B' && d[1] == 'M') other = "BMP";
    else if (n >= 4 && (!memcmp(d, "II*\0", 4) || !memcmp(d, "MM\0*", 4))) other = "TIFF";
    else if (n >= 12 && !memcmp(d + 4, "ftyp", 4)) other = "HEIF/AVIF";
    if (other) ph_img_err(e, label, "%s pictures are not supported (only PNG, JPEG, WebP and GIF)", other);
    else ph_img_err(e, label, "not a PNG, JPEG, WebP or GIF file (unknown magic bytes)");
    return NULL;
}

/* Checks the file's length, finds its format and runs that decoder: the
 * header alone, or the pixels too. lim NULL: the default limits. */
static int read_picture(const void *data, size_t len, const ph_image_limits *lim, const char *label, bool pixels,
                        ph_decoded *img, ph_err *e) {
    ph_image_limits def;
    if (!lim) {
        ph_image_limits_default(&def);
        lim = &def;
    }
    *img = (ph_decoded){0, 0, NULL, 1};
    if (len == 0) return ph_img_err(e, label, "the file is empty");
    if (len > lim->max_file_bytes)
        return ph_img_err(e, label, "the file is %zu bytes, more than the %zu-byte limit", len, lim->max_file_bytes);
    decode_fn decode = sniff(data, len, label, e);
    if (!decode) return -1;
    return decode(data, len, lim, label, pixels, img, e);
}

int image_probe(const void *data, size_t len, const ph_image_limits *lim, const char *label, int *w, int *h,
                ph_err *e) {
    ph_decoded img;
    if (read_picture(data, len, lim, label ? label : "image", false, &img, e)) return -1;
    const bool turns = orientation_turns(img.orientation);
    *w = turns ? img.h : img.w;
    *h = turns ? img.w : img.h;
    return 0;
}

int ph_image_decode(const void *data, size_t len, const ph_image_limits *lim, const char *label, ph_image *out,
                    ph_err *e) {
    if (!label) label = "image";
    memset(out, 0, sizeof *out);
    ph_decoded img;
    if (read_picture(data, len, lim, label, true, &img, e)) return -1;
    if (ph_orient(&img, img.orientation) != 0) {
        free(img.rgb);
        return ph_img_err(e, label, "out of memory for %dx%d pixels", img.w, img.h);
    }
    out->w = img.w;
    out->h = img.h;
    out->rgb = img.rgb;
    if (ph_image_fingerprint(data, len, out) != 0) {
        ph_image_free(out);
        return ph_img_err(e, label, "cannot compute SHA-256");
    }
    return 0;
}

int image_read_file(const char *path, const ph_image_limits *lim, uint8_t **data, size_t *len, ph_err *e) {
    ph_image_limits def;
    if (!lim) {
        ph_image_limits_default(&def);
        lim = &def;
    }
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return ph_img_err(e, path, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return ph_img_err(e, path, "not a regular file");
    }
    if ((uint64_t)st.st_size > lim->max_file_bytes) {
        fclose(f);
        return ph_img_err(e, path, "the file is %llu bytes, more than the %zu-byte limit",
                          (unsigned long long)st.st_size, lim->max_file_bytes);
    }
    size_t n = (size_t)st.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return ph_img_err(e, path, "out of memory for %zu bytes", n);
    }
    size_t got = fread(buf, 1, n, f);
    int read_err = ferror(f);
    fclose(f);
    if (read_err || got != n) {
        free(buf);
        return ph_img_err(e, path, "read error");
    }
    *data = buf;
    *len = n;
    return 0;
}

int ph_image_load_file(const char *path, const ph_image_limits *lim, ph_image *out, ph_err *e) {
    memset(out, 0, sizeof *out);
    uint8_t *buf;
    size_t n;
    if (image_read_file(path, lim, &buf, &n, e)) return -1;
    ph_image_limits def;
    if (!lim) {
        ph_image_limits_default(&def);
        lim = &def;
    }
    int rc = ph_image_decode(buf, n, lim, path, out, e);
    free(buf);
    return rc;
}

void ph_image_free(ph_image *img) {
    if (!img) return;
    free(img->rgb);
    img->rgb = NULL;
    img->w = img->h = 0;
}
