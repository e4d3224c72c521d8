/* Fingerprints of a picture (docs/state-cache.md, Identity), with SHA-256 (base/sha256):
 * bytes_id over the file bytes as received; image_id over the width and
 * height (uint32 little-endian each) and then the w * h * 3 RGB8 bytes. */
#include "base/sha256.h"
#include "image/image_internal.h"

int image_fingerprint(const void *data, size_t len, image_rgb *img) {
    const uint32_t w = (uint32_t)img->w, h = (uint32_t)img->h;
    const uint8_t dims[8] = {(uint8_t)w, (uint8_t)(w >> 8), (uint8_t)(w >> 16), (uint8_t)(w >> 24),
                             (uint8_t)h, (uint8_t)(h >> 8), (uint8_t)(h >> 16), (uint8_t)(h >> 24)};
    /* Both through the incremental interface, so a libcrypto failure is
     * returned as -1 rather than fatal (see base/sha256.h). */
    sha256_ctx ctx;
    if (sha256_init(&ctx) != 0) return -1;
    sha256_update(&ctx, data, len);
    if (sha256_final(&ctx, img->bytes_id) != 0) return -1;
    if (sha256_init(&ctx) != 0) return -1;
    sha256_update(&ctx, dims, sizeof dims);
    sha256_update(&ctx, img->rgb, (size_t)w * h * 3);
    return sha256_final(&ctx, img->image_id);
}
