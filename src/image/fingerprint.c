/* Fingerprints of a picture (DESIGN section 4), with OpenSSL's SHA-256:
 * bytes_id over the file bytes as received; image_id over the width and
 * height (uint32 little-endian each) and then the w * h * 3 RGB8 bytes. */
#include <openssl/evp.h>

#include "image/image_internal.h"

int ph_image_fingerprint(const void *data, size_t len, ph_image *img) {
    const uint32_t w = (uint32_t)img->w, h = (uint32_t)img->h;
    const uint8_t dims[8] = {(uint8_t)w,         (uint8_t)(w >> 8), (uint8_t)(w >> 16), (uint8_t)(w >> 24),
                             (uint8_t)h,         (uint8_t)(h >> 8), (uint8_t)(h >> 16), (uint8_t)(h >> 24)};
    if (!EVP_Digest(data, len, img->bytes_id, NULL, EVP_sha256(), NULL)) return -1;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) return -1;
    int ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) && EVP_DigestUpdate(ctx, dims, sizeof dims) &&
             EVP_DigestUpdate(ctx, img->rgb, (size_t)w * h * 3) && EVP_DigestFinal_ex(ctx, img->image_id, NULL);
    EVP_MD_CTX_free(ctx);
    return ok ? 0 : -1;
}
