/* GIF through giflib: the first frame only, painted on the logical screen.
 * Pixels outside the frame get the screen's background colour (black when
 * there is no global colour table); the transparent index, if any, shows
 * its palette colour, since alpha is dropped everywhere. A frame that
 * reaches past the screen grows the canvas (as Pillow does). */
#include <gif_lib.h>
#include <stdlib.h>
#include <string.h>

#include "image/image_internal.h"

typedef struct gif_src {
    const uint8_t *d;
    size_t n, pos;
} gif_src;

static int gif_read(GifFileType *g, GifByteType *buf, int len) {
    gif_src *s = g->UserData;
    size_t k = len > 0 ? (size_t)len : 0;
    if (k > s->n - s->pos) k = s->n - s->pos;
    memcpy(buf, s->d + s->pos, k);
    s->pos += k;
    return (int)k;
}

static int gif_fail(const char *label, int code, ph_err *err) {
    const char *why = GifErrorString(code);
    return img_err(err, label, "GIF data is truncated or corrupt (%s)", why ? why : "unknown error");
}

/* Reads extension records up to the first image descriptor. */
static int gif_find_image(GifFileType *g) {
    for (;;) {
        GifRecordType type;
        if (DGifGetRecordType(g, &type) == GIF_ERROR) return -1;
        if (type == IMAGE_DESC_RECORD_TYPE) return DGifGetImageDesc(g) == GIF_ERROR ? -1 : 0;
        if (type != EXTENSION_RECORD_TYPE) return 1; /* the trailer: no image at all */
        int code;
        GifByteType *ext;
        if (DGifGetExtension(g, &code, &ext) == GIF_ERROR) return -1;
        while (ext)
            if (DGifGetExtensionNext(g, &ext) == GIF_ERROR) return -1;
    }
}

static void gif_colour(const ColorMapObject *map, unsigned idx, uint8_t *px) {
    if (!map) { /* no colour table anywhere: a grey ramp */
        px[0] = px[1] = px[2] = (uint8_t)idx;
    } else if (idx < (unsigned)map->ColorCount) {
        px[0] = map->Colors[idx].Red;
        px[1] = map->Colors[idx].Green;
        px[2] = map->Colors[idx].Blue;
    } else {
        px[0] = px[1] = px[2] = 0;
    }
}

int decode_gif(const uint8_t *d, size_t n, const image_limits *lim, const char *label, bool pixels, img_decoded *out,
               ph_err *err) {
    gif_src src = {d, n, 0};
    int errnum = 0, rc = -1;
    GifFileType *g = DGifOpen(&src, gif_read, &errnum);
    if (!g) return gif_fail(label, errnum, err);
    uint8_t *rgb = NULL, *line = NULL;

    /* The screen first; an empty one is allowed (the frame sizes the canvas). */
    if (g->SWidth > 0 && g->SHeight > 0 &&
        img_check_size(label, "GIF", (uint64_t)g->SWidth, (uint64_t)g->SHeight, lim, err) != 0)
        goto done;
    int found = gif_find_image(g);
    if (found < 0) {
        gif_fail(label, g->Error, err);
        goto done;
    }
    if (found > 0) {
        img_err(err, label, "GIF has no image");
        goto done;
    }
    const GifImageDesc *fr = &g->Image;
    if (fr->Width <= 0 || fr->Height <= 0) {
        img_err(err, label, "GIF's first frame is empty (%dx%d)", fr->Width, fr->Height);
        goto done;
    }
    uint64_t cw = (uint64_t)fr->Left + (uint64_t)fr->Width, ch = (uint64_t)fr->Top + (uint64_t)fr->Height;
    if (cw < (uint64_t)g->SWidth) cw = (uint64_t)g->SWidth;
    if (ch < (uint64_t)g->SHeight) ch = (uint64_t)g->SHeight;
    if (img_check_size(label, "GIF", cw, ch, lim, err) != 0) goto done;
    int w = (int)cw, h = (int)ch;
    out->w = w;
    out->h = h;
    out->orientation = 1;
    if (!pixels) {
        rc = 0;
        goto done;
    }
    rgb = img_alloc(label, w, h, 3, err);
    if (!rgb) goto done;
    line = malloc((size_t)fr->Width);
    if (!line) {
        img_err(err, label, "out of memory decoding the GIF");
        goto done;
    }
    uint8_t bg[3] = {0, 0, 0};
    if (g->SColorMap) gif_colour(g->SColorMap, (unsigned)g->SBackGroundColor, bg);
    for (size_t i = 0; i < (size_t)w * h; i++) memcpy(rgb + 3 * i, bg, 3);

    const ColorMapObject *map = fr->ColorMap ? fr->ColorMap : g->SColorMap;
    /* Interlaced frames store rows in four passes: every 8th row from 0,
     * every 8th from 4, every 4th from 2, every 2nd from 1. */
    static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    const int passes = fr->Interlace ? 4 : 1;
    for (int pass = 0; pass < passes; pass++) {
        const int y0 = fr->Interlace ? start[pass] : 0, dy = fr->Interlace ? step[pass] : 1;
        for (int y = y0; y < fr->Height; y += dy) {
            if (DGifGetLine(g, line, fr->Width) == GIF_ERROR) {
                gif_fail(label, g->Error, err);
                goto done;
            }
            uint8_t *row = rgb + ((size_t)(fr->Top + y) * w + (size_t)fr->Left) * 3;
            for (int x = 0; x < fr->Width; x++) gif_colour(map, line[x], row + 3 * x);
        }
    }
    out->rgb = rgb;
    rgb = NULL;
    rc = 0;
done:
    free(rgb);
    free(line);
    DGifCloseFile(g, &errnum);
    return rc;
}
