/* libFuzzer target for the picture decoders: decodes the input with small
 * limits, then reads every pixel and preprocesses the result with a small
 * token budget, so ASan flags any buffer the decoders or the resampler got
 * wrong. A refusal must be one line that names the picture. The header
 * probe must agree: the size of every picture decoded, the message of
 * every refusal it makes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    image_limits lim = {1 << 20, 2048, 1 << 20};
    image_rgb img;
    ph_err e, pe;
    memset(&e, 0, sizeof e);
    memset(&pe, 0, sizeof pe);
    int pw = 0, ph = 0;
    const int probed = image_probe(data, size, &lim, "fuzz", &pw, &ph, &pe);
    if (image_decode(data, size, &lim, "fuzz", &img, &e) != 0) {
        if (img.rgb || !memchr(e.msg, 0, sizeof e.msg) || strncmp(e.msg, "fuzz: ", 6) != 0 || strchr(e.msg, '\n'))
            abort();
        if (probed != 0 && strcmp(pe.msg, e.msg) != 0) abort();
        return 0;
    }
    if (probed != 0 || pw != img.w || ph != img.h) abort();
    if (img.w <= 0 || img.h <= 0 || img.w > lim.max_side || img.h > lim.max_side) abort();
    uint64_t h = 0;
    for (size_t i = 0; i < (size_t)img.w * img.h * 3; i++) h = h * 31 + img.rgb[i];

    prep_params pp = {16, 2, 1, 16, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}};
    prep_image prep;
    if (image_preprocess(&img, &pp, &prep, &e) != 0) abort();
    if (prep.w != prep.grid_x * 32 || prep.h != prep.grid_y * 32) abort();
    for (size_t i = 0; i < (size_t)prep.w * prep.h * 3; i++) h += prep.pixels[i] >= -1.0f && prep.pixels[i] <= 1.0f;
    sink = h;
    prep_free(&prep);
    image_free(&img);
    return 0;
}
