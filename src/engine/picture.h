/* Pictures as received (ph_picture of pinhole.h), for the engine's files
 * and the session-level picture path (api_vision.c). */
#ifndef PH_ENGINE_PICTURE_H
#define PH_ENGINE_PICTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "image/image.h"
#include "pinhole.h"

struct ph_picture {
    uint8_t bytes_id[32], image_id[32];
    bool identified; /* image_id is known (an engine's bytes_id memo, or a decode) */
    int w, h;        /* as displayed, from the header */
    image_rgb img;   /* decoded pixels (rgb NULL unless needed now) */
    void *bytes;     /* the file as received, kept to decode later */
    size_t len;
    char label[32];
};

/* Decodes the picture's pixels into p->img if only its bytes are held
 * (PH_ERR_INPUT when the bytes do not decode, or decode to other pixels
 * than before). */
int picture_decode(ph_picture *p, ph_err *err);
/* Frees the decoded pixels (the bytes stay). */
void picture_drop_pixels(ph_picture *p);

#endif
