/* EXIF orientation: reading the tag with libexif, and applying it to the
 * decoded pixels so that image_id covers the picture as displayed. */
#include <libexif/exif-data.h>
#include <stdlib.h>
#include <string.h>

#include "image/image_internal.h"

/* EXIF blocks past this size are not parsed (APP1 caps JPEG's at 64 KiB;
 * PNG and WebP carry the same kind of block). */
#define EXIF_MAX_BYTES ((size_t)1 << 20)

int exif_orientation(const uint8_t *exif, size_t n) {
    static const uint8_t hdr[6] = {'E', 'x', 'i', 'f', 0, 0};
    if (!exif || n < 8 || n > EXIF_MAX_BYTES) return 1;
    /* libexif wants the "Exif\0\0" header that PNG's eXIf and usually
     * WebP's EXIF chunk leave out. */
    uint8_t *buf = NULL;
    if (memcmp(exif, hdr, 6) != 0) {
        buf = malloc(n + 6);
        if (!buf) return 1;
        memcpy(buf, hdr, 6);
        memcpy(buf + 6, exif, n);
        exif = buf;
        n += 6;
    }
    int orientation = 1;
    ExifData *ed = exif_data_new();
    if (ed) {
        /* No "fixing" of the block to the specification: we only read. */
        exif_data_unset_option(ed, EXIF_DATA_OPTION_FOLLOW_SPECIFICATION);
        exif_data_load_data(ed, exif, (unsigned int)n);
        ExifEntry *en = exif_content_get_entry(ed->ifd[EXIF_IFD_0], EXIF_TAG_ORIENTATION);
        if (en && en->format == EXIF_FORMAT_SHORT && en->components >= 1 && en->data && en->size >= 2) {
            int v = exif_get_short(en->data, exif_data_get_byte_order(ed));
            if (v >= 1 && v <= 8) orientation = v;
        }
        exif_data_unref(ed);
    }
    free(buf);
    return orientation;
}

bool orientation_turns(int orientation) { return orientation >= 5 && orientation <= 8; }

int orient(img_decoded *img, int orientation) {
    if (orientation < 2 || orientation > 8) return 0;
    const int sw = img->w, sh = img->h;
    const bool swap = orientation_turns(orientation);
    const int dw = swap ? sh : sw, dh = swap ? sw : sh;
    uint8_t *dst = malloc((size_t)sw * sh * 3);
    if (!dst) return -1;
    /* For each displayed pixel (x, y), the stored pixel (sx, sy):
     * 2 mirror left-right, 3 turn 180, 4 mirror top-bottom, 5 transpose,
     * 6 turn 90 clockwise, 7 transverse, 8 turn 90 anticlockwise. */
    for (int y = 0; y < dh; y++) {
        uint8_t *row = dst + (size_t)y * dw * 3;
        for (int x = 0; x < dw; x++) {
            int sx, sy;
            switch (orientation) {
            case 2: sx = sw - 1 - x, sy = y; break;
            case 3: sx = sw - 1 - x, sy = sh - 1 - y; break;
            case 4: sx = x, sy = sh - 1 - y; break;
            case 5: sx = y, sy = x; break;
            case 6: sx = y, sy = sh - 1 - x; break;
            case 7: sx = sw - 1 - y, sy = sh - 1 - x; break;
            default: sx = sw - 1 - y, sy = x; break; /* 8 */
            }
            memcpy(row + 3 * x, img->rgb + ((size_t)sy * sw + sx) * 3, 3);
        }
    }
    free(img->rgb);
    img->rgb = dst;
    img->w = dw;
    img->h = dh;
    return 0;
}
