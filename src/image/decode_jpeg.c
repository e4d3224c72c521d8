/* JPEG through libturbojpeg: baseline and progressive, grey, YCbCr, and
 * CMYK/YCCK converted to RGB. A walk over the markers (ours) finds the
 * EXIF block and refuses a file that ends before its end-of-image marker;
 * libjpeg's other warnings (stray bytes, a corrupt Huffman code) leave a
 * usable picture, as in other decoders, and are not errors. */
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "image/image_internal.h"

/* Walks the marker segments after SOI. Returns 1 when an EOI marker is
 * reached, 0 when the data ends first (or a segment length is broken).
 * *exif is set to the payload of the first APP1 "Exif" segment, if any. */
static int jpeg_walk(const uint8_t *d, size_t n, const uint8_t **exif, size_t *exif_len) {
    size_t p = 2;
    while (p < n) {
        if (d[p] != 0xff) { /* stray byte between segments: libjpeg skips these too */
            p++;
            continue;
        }
        while (p < n && d[p] == 0xff) p++; /* fill bytes */
        if (p >= n) return 0;
        uint8_t m = d[p++];
        if (m == 0xd9) return 1;                                          /* EOI */
        if (m == 0x00 || m == 0x01 || (m >= 0xd0 && m <= 0xd8)) continue; /* no length field */
        if (n - p < 2) return 0;
        size_t len = (size_t)d[p] << 8 | d[p + 1];
        if (len < 2 || len > n - p) return 0;
        if (m == 0xe1 && !*exif && len >= 8 && !memcmp(d + p + 2, "Exif\0\0", 6)) {
            *exif = d + p + 2;
            *exif_len = len - 2;
        }
        p += len;
        if (m == 0xda) {
            /* Entropy-coded data runs to the next marker that is neither a
             * stuffed zero (FF 00) nor a restart marker (FF D0..D7). */
            while (p + 1 < n &&
                   !(d[p] == 0xff && d[p + 1] != 0x00 && d[p + 1] != 0xff && (d[p + 1] < 0xd0 || d[p + 1] > 0xd7)))
                p++;
            if (p + 1 >= n) return 0;
        }
    }
    return 0;
}

/* Adobe-style (inverted) CMYK as libjpeg emits it: stored 255 means no
 * ink, so R = C * K / 255 (as libjpeg-turbo's own tools and stb_image do). */
static void cmyk_to_rgb(const uint8_t *cmyk, uint8_t *rgb, size_t npix) {
    for (size_t i = 0; i < npix; i++) {
        unsigned k = cmyk[4 * i + 3];
        for (int c = 0; c < 3; c++) rgb[3 * i + c] = (uint8_t)((cmyk[4 * i + c] * k + 127) / 255);
    }
}

int decode_jpeg(const uint8_t *d, size_t n, const image_limits *lim, const char *label, bool pixels, img_decoded *out,
                ph_err *err) {
    tjhandle tj = tjInitDecompress();
    if (!tj) return img_err(err, label, "out of memory decoding the JPEG");
    int w = 0, h = 0, subsamp, colorspace, rc = -1;
    uint8_t *rgb = NULL, *cmyk = NULL;
    const uint8_t *exif = NULL;
    size_t exif_len = 0;
    if (tjDecompressHeader3(tj, d, (unsigned long)n, &w, &h, &subsamp, &colorspace) != 0) {
        img_err(err, label, "JPEG header is invalid: %s", tjGetErrorStr2(tj));
        goto done;
    }
    if (w <= 0 || h <= 0) { /* libjpeg-turbo accepts a tables-only stream here */
        img_err(err, label, "JPEG header is invalid: it declares no picture (%dx%d)", w, h);
        goto done;
    }
    if (img_check_size(label, "JPEG", (uint64_t)w, (uint64_t)h, lim, err) != 0) goto done;
    if (!jpeg_walk(d, n, &exif, &exif_len)) {
        img_err(err, label, "JPEG data is truncated (it ends before its end-of-image marker)");
        goto done;
    }
    out->w = w;
    out->h = h;
    out->orientation = exif ? exif_orientation(exif, exif_len) : 1;
    if (!pixels) {
        rc = 0;
        goto done;
    }
    rgb = img_alloc(label, w, h, 3, err);
    if (!rgb) goto done;
    /* LIMITSCANS refuses progressive files with an absurd number of scans,
     * each of which would cost a pass over the whole picture. */
    const int flags = TJFLAG_LIMITSCANS;
    int cmyk_src = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
    if (cmyk_src) {
        cmyk = img_alloc(label, w, h, 4, err);
        if (!cmyk) goto done;
    }
    int r = tjDecompress2(tj, d, (unsigned long)n, cmyk_src ? cmyk : rgb, w, 0, h, cmyk_src ? TJPF_CMYK : TJPF_RGB,
                          flags);
    if (r != 0 && tjGetErrorCode(tj) != TJERR_WARNING) {
        img_err(err, label, "JPEG cannot be decoded: %s", tjGetErrorStr2(tj));
        goto done;
    }
    if (cmyk_src) cmyk_to_rgb(cmyk, rgb, (size_t)w * h);
    out->rgb = rgb;
    rgb = NULL;
    rc = 0;
done:
    free(rgb);
    free(cmyk);
    tjDestroy(tj);
    return rc;
}
