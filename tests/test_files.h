/* Files the C tests share: a file read whole, a PNG made in memory. */
#ifndef PH_TESTS_TEST_FILES_H
#define PH_TESTS_TEST_FILES_H

#include <spng.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct file {
    void *p;
    size_t n;
} file;

/* The bytes of path (f.p malloc'd; f.n 0 when it cannot be read). */
static inline file read_file(const char *path) {
    file f = {0};
    FILE *fp = fopen(path, "rb");
    if (!fp) return f;
    fseek(fp, 0, SEEK_END);
    f.n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f.p = malloc(f.n);
    if (!f.p || fread(f.p, 1, f.n, fp) != f.n) f.n = 0;
    fclose(fp);
    return f;
}

/* A w x h PNG whose pixels depend on seed (f.p malloc'd; NULL on failure). */
static inline file make_png(int w, int h, int seed) {
    file f = {0};
    uint8_t *px = malloc((size_t)w * h * 3);
    if (!px) return f;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = px + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(x * 3 + seed * 40);
            p[1] = (uint8_t)(y * 5 + seed * 17);
            p[2] = (uint8_t)((x ^ y) + seed * 90);
        }
    spng_ctx *c = spng_ctx_new(SPNG_CTX_ENCODER);
    struct spng_ihdr ih = {
        .width = (uint32_t)w, .height = (uint32_t)h, .bit_depth = 8, .color_type = SPNG_COLOR_TYPE_TRUECOLOR};
    spng_set_option(c, SPNG_ENCODE_TO_BUFFER, 1);
    spng_set_ihdr(c, &ih);
    int rc = spng_encode_image(c, px, (size_t)w * h * 3, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    if (rc == 0) f.p = spng_get_png_buffer(c, &f.n, &rc);
    spng_ctx_free(c);
    free(px);
    return f;
}

#endif
