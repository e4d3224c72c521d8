/* Pictures (src/image): decoding every format and variant, EXIF
 * orientation, limits, the hostile-file corpus (tests/data/images_bad),
 * fingerprints, and the preprocessing of spec F checked against Pillow
 * (golden values computed once with Pillow 9.4) and against the grids of
 * the oracle's references; the header probe against the decode of every
 * file here. JPEG and WebP inputs are made here with libturbojpeg and
 * libwebp. */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <spng.h>
#include <string.h>
#include <time.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <webp/encode.h>

#include "gguf/gguf.h"
#include "image/image.h"
#include "test.h"

/* ---- helpers -------------------------------------------------------------- */

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    /* one byte more, a NUL, so text headers can be parsed with sscanf */
    uint8_t *buf = malloc(sz > 0 ? (size_t)sz + 1 : 1);
    if (buf && fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[sz > 0 ? sz : 0] = 0;
    fclose(f);
    *n = (size_t)sz;
    return buf;
}

/* A binary PPM (P6, maxval 255) as written by tools/make_image_corpus.py. */
static uint8_t *read_ppm(const char *path, int *w, int *h) {
    size_t n;
    uint8_t *buf = read_all(path, &n);
    if (!buf) return NULL;
    int off = 0;
    if (sscanf((const char *)buf, "P6 %d %d 255%n", w, h, &off) != 2 || off <= 0 ||
        (size_t)off + 1 + (size_t)*w * *h * 3 != n) {
        free(buf);
        return NULL;
    }
    uint8_t *rgb = malloc((size_t)*w * *h * 3);
    memcpy(rgb, buf + off + 1, (size_t)*w * *h * 3);
    free(buf);
    return rgb;
}

static void sha256_hex(const void *data, size_t n, char hex[65]) {
    uint8_t md[32];
    EVP_Digest(data, n, md, NULL, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) sprintf(hex + 2 * i, "%02x", md[i]);
}

static void to_hex(const uint8_t *b, int n, char *hex) {
    for (int i = 0; i < n; i++) sprintf(hex + 2 * i, "%02x", b[i]);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int max_diff(const uint8_t *a, const uint8_t *b, size_t n) {
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d > m) m = d;
    }
    return m;
}

static int starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* Decodes from memory with default limits; returns the decode's status. */
static int decode(const void *d, size_t n, const char *label, image_rgb *img, ph_err *err) {
    memset(err, 0, sizeof *err);
    return image_decode(d, n, NULL, label, img, err);
}

/* The header probe against a decode of the same bytes (rc, img, e): a file
 * the decode takes, the probe takes with the same size; a file the probe
 * refuses, the decode refuses with the same message. (The probe may pass a
 * file whose pixels are damaged.) Returns 1 when they agree. */
static int probe_matches(const void *d, size_t n, const image_limits *lim, const char *label, int rc,
                         const image_rgb *img, const ph_err *err) {
    ph_err pe = {0};
    int w = -1, h = -1;
    const int prc = image_probe(d, n, lim, label, &w, &h, &pe);
    const int ok = rc == 0 ? prc == 0 && w == img->w && h == img->h : prc == 0 || !strcmp(pe.msg, err->msg);
    if (!ok)
        fprintf(stderr, "%s (%zu bytes): decode '%s' %dx%d, probe '%s' %dx%d\n", label, n, rc ? err->msg : "ok",
                rc ? 0 : img->w, rc ? 0 : img->h, prc ? pe.msg : "ok", w, h);
    return ok;
}

static int probe_agrees(const void *d, size_t n, const char *label) {
    image_rgb img;
    ph_err e;
    const int rc = decode(d, n, label, &img, &e), ok = probe_matches(d, n, NULL, label, rc, &img, &e);
    image_free(&img);
    return ok;
}

/* ---- smart resize (spec F.2) --------------------------------------------- */

static void test_smart_resize(void) {
    static const int cases[][4] = {
        {1024, 768, 1024, 768},
        {640, 480, 640, 480},
        {1000, 500, 992, 512},
        {4000, 3000, 2336, 1760},
        {50, 50, 96, 96},
        {48, 48, 96, 96},
        {10000, 10, 10016, 32},
        /* 80/32 = 2.5 rounds away from zero (to 3), not to even */
        {80, 80, 96, 96},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int w, h;
        smart_resize(cases[i][0], cases[i][1], 32, 8 * 1024, 4096 * 1024, &w, &h);
        CHECKF(w == cases[i][2] && h == cases[i][3], "%dx%d -> %dx%d, want %dx%d", cases[i][0], cases[i][1], w, h,
               cases[i][2], cases[i][3]);
    }
}

/* ---- the resampler (spec F.3) -------------------------------------------- */

static double cubic(double x) {
    x = fabs(x);
    return x < 1 ? (1.5 * x - 2.5) * x * x + 1 : x < 2 ? (((x - 5) * x + 8) * x - 4) * -0.5 : 0;
}

static void test_resampler(void) {
    uint8_t src[13 * 7 * 3], dst[26 * 20 * 3];
    for (int y = 0; y < 7; y++)
        for (int x = 0; x < 13; x++)
            for (int c = 0; c < 3; c++)
                src[(y * 13 + x) * 3 + c] = (uint8_t)((x * 53 + y * 97 + c * 31 + x * y * 13) % 256);

    /* Same size: a copy. */
    CHECK(resize_bicubic(src, 13, 7, dst, 13, 7) == 0 && !memcmp(src, dst, sizeof src));

    /* A constant picture stays constant, down and up, in either direction. */
    uint8_t flat[8 * 6 * 3];
    for (int i = 0; i < 8 * 6; i++) flat[3 * i] = 17, flat[3 * i + 1] = 200, flat[3 * i + 2] = 255;
    static const int sizes[][2] = {{4, 3}, {16, 12}, {5, 7}, {8, 2}, {1, 1}};
    for (int s = 0; s < 5; s++) {
        int dw = sizes[s][0], dh = sizes[s][1], ok = resize_bicubic(flat, 8, 6, dst, dw, dh) == 0;
        for (int i = 0; ok && i < dw * dh; i++)
            ok = dst[3 * i] == 17 && dst[3 * i + 1] == 200 && dst[3 * i + 2] == 255;
        CHECKF(ok, "constant 8x6 -> %dx%d changed", dw, dh);
    }

    /* 4 -> 2 pixels in one row, worked out here from the formulas of F.3. */
    const uint8_t row[4][3] = {{10, 0, 255}, {200, 50, 0}, {30, 255, 128}, {250, 100, 7}};
    uint8_t out[2][3];
    CHECK(resize_bicubic(&row[0][0], 4, 1, &out[0][0], 2, 1) == 0);
    for (int o = 0; o < 2; o++) {
        const double scale = 2.0, support = 4.0, center = (o + 0.5) * scale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        xmin = xmin < 0 ? 0 : xmin;
        xmax = xmax > 4 ? 4 : xmax;
        double wsum = 0, w[8];
        for (int x = xmin; x < xmax; x++) wsum += w[x - xmin] = cubic((x - center + 0.5) / scale);
        for (int c = 0; c < 3; c++) {
            int32_t acc = 1 << 21;
            for (int x = xmin; x < xmax; x++) {
                double v = w[x - xmin] / wsum * 4194304.0;
                acc += row[x][c] * (int32_t)(v < 0 ? v - 0.5 : v + 0.5);
            }
            acc >>= 22;
            int want = acc < 0 ? 0 : acc > 255 ? 255 : acc;
            CHECKF(out[o][c] == want, "4->2 pixel %d channel %d: %d, want %d", o, c, out[o][c], want);
        }
    }

    /* Pillow 9.4's Image.resize(size, BICUBIC) of the 13x7 picture above. */
    static const struct {
        int w, h;
        const char *hex;
    } pillow[] = {
        {5, 11,
         "2b4e7695b77a486d7c99bc7a4b6f8060608884917d6c677d98a28f6565809a79937862859b61809581a183627e6f835e9d6f9a9e"
         "608592857c7688715f8f56a47e8f96628878827f6a91807195739189768c6489577d9c61809f9770807d8d9ea565767296774c"
         "7299ac5d737796b19d6e8175956c5f678ba66b4e82a79b6a83ac53708ba15d7d8f8c4a8cae6a81a87c7e6273a750727fa44e92"
         "b0489cc14fa65e5aa0486c"},
        {13, 3,
         "4f6f57587f9e9e4d6d6d8cabb49c595a7998994f6e7058777796bdbfde9b9b4a323a5b7a7a99b87589617f577e9cb0587695bc"
         "936b92a5587f9d6a899b749b4d6c45577ea5c3d6af1b36557392b195446ba68f4c87a75692b16d729ab984a3609b85a46f9653"
         "8fae96611e3d7999c0c511306c8baa"},
        {4, 2, "73797c8e7485857c887181839087668b918b7c7f787b6782"},
        {3, 20,
         "577d7a70967a6b907b5d7b7b73917c6e8d7d6b75807b86817982847f6d8785768788748c8b6b888f6b8b8f708d89728298678b"
         "8b7c81837d789e6889828c747f86739d68887892757f8e6f9169896c8c88809370846b8a60839c839077836f875b7f9e8a8389"
         "8e767f5c8191907797977d7a6082829576938f8283677c7e987d8077859a72708098876c668aa87e648294925f6f94968a5b7b"
         "8d9f5586a17197546f87a84e98aa56a04f6785ab4b9ead4ca34d64"},
        {1, 1, "827e80"},
    };
    for (size_t i = 0; i < sizeof pillow / sizeof pillow[0]; i++) {
        char hex[26 * 20 * 6 + 1];
        int n = pillow[i].w * pillow[i].h * 3;
        CHECK(resize_bicubic(src, 13, 7, dst, pillow[i].w, pillow[i].h) == 0);
        to_hex(dst, n, hex);
        CHECKF(!strcmp(hex, pillow[i].hex), "13x7 -> %dx%d differs from Pillow:\n got %s\nwant %s", pillow[i].w,
               pillow[i].h, hex, pillow[i].hex);
    }
    /* 26x7 (width only) by its SHA-256, to keep the table short. */
    char hex[65];
    CHECK(resize_bicubic(src, 13, 7, dst, 26, 7) == 0);
    sha256_hex(dst, 26 * 7 * 3, hex);
    CHECKF(!strcmp(hex, "99aea339202b2ef3071f0f583d101469b8166e66013707745d5388479d973f6c"), "13x7 -> 26x7: %s", hex);

    CHECK(resize_bicubic(src, 13, 7, dst, 0, 7) == -1);
}

/* ---- the oracle pictures -------------------------------------------------- */

/* Pillow 9.4 decoded each picture to RGB (its image_id here) and resized it
 * to the letterbox's inner size nw x nh with BICUBIC (the SHA-256 of that);
 * tw x th is the encoder size from smart resize with 16 x 2 and 8..4096. */
static const struct {
    const char *name;
    int w, h;
    const char *image_id;
    int tw, th, nw, nh;
    const char *resized;
} oracle_pics[] = {
    {"grad.png", 200, 150, "6f91d31c6e35efaa171e4085cc21ef75baa8a389348b7340e06f600aced20d52", 192, 160, 192, 144,
     "7c4e24f7c2b0469cf9ee39ea028e2f61d6f10c56ea3abef354e0fea29633fcc9"},
    {"grad16.png", 200, 150, "ff268eaada3e9942b9627202665bd35afce95abf9e577bf356c8332de2532ca5", 192, 160, 192, 144,
     "739fd183839fe5ac3f30e76928b88a767209cfa0ed0042e0fc0c6359b573436b"},
    {"gray.png", 256, 256, "0de315a25eb40f37db25185144ca12b2ee7f8e19d2789fa923b2464341e474a3", 256, 256, 256, 256,
     "077ae359f534c455732b130a8fd942d3ab93d8679bf0ba00cb7bebbc3c14493a"},
    {"alpha.png", 300, 200, "6847b0e825112f1f31d7f185a8bb029cec5081aa897e12bed2aaf1e0420c000a", 288, 192, 288, 192,
     "a88d7cef39e0d2cb5fba200494cddf40b6efe1b009f7bdc1a7f956f087704958"},
    {"small.png", 24, 24, "19fa5d020be256c605b907ffe4a67aad2442fbb59899dcfbe5afd1464507c2db", 96, 96, 96, 96,
     "8426db67cab749d953f63f481631df6e6d4caa3372864c6e3821457523e6135b"},
    {"large.png", 1400, 1000, "7df8ec71abaa2e484334686cf209ec31f607fd502bb865384daa9d8bb4b347bc", 1408, 992, 1389,
     992, "a5ecf3d4d371ad8bca08965a2a0203c258471dcd1e3a9a358fa7acd6f019f1f4"},
    {"tall.png", 120, 500, "cde93b73b4f0efb724801cf59e2b633aff05b229933aa41a0a38c1b12b09ee70", 128, 512, 123, 512,
     "305ececd125ec0fad7f3b82c9640b7eec9c068d78eafbd48f1fb9f136861d0e6"},
    {"wide.png", 640, 160, "70591b305d5f7ddf976c3fc6fe0cfbdde024374de812f8f1f2666e0b3be9b531", 640, 160, 640, 160,
     "97476c08debe0a2358d4563b72c66a44e7daa28276ab209a1b384737d14b94b3"},
    /* JPEG: Pillow used the same libjpeg-turbo with the same settings, so
     * even this matches bit for bit on Debian 12. */
    {"photo.jpg", 320, 240, "4a5d22fd63c4884da778386f79c859a17ec83f22681902b78f250c943ea97cf3", 320, 256, 320, 240,
     "1b642958e5feeef9107225cbceaee656e63e2b7c5950417a3f3f5f8083f72094"},
};

static void test_oracle_pictures(void) {
    prep_params pp = {16, 2, 8, 4096, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}};
    for (size_t i = 0; i < sizeof oracle_pics / sizeof oracle_pics[0]; i++) {
        char path[1024], hex[65];
        snprintf(path, sizeof path, "%s/img/%s", PH_ORACLE_DIR, oracle_pics[i].name);
        image_rgb img;
        ph_err e = {0};
        int rc = image_load_file(path, NULL, &img, &e);
        CHECKF(rc == 0, "%s: %s", path, e.msg);
        if (rc) continue;
        CHECKF(img.w == oracle_pics[i].w && img.h == oracle_pics[i].h, "%s is %dx%d", oracle_pics[i].name, img.w,
               img.h);
        to_hex(img.image_id, 32, hex);
        CHECKF(!strcmp(hex, oracle_pics[i].image_id), "%s: image_id %s differs from Pillow's decode",
               oracle_pics[i].name, hex);

        size_t n;
        uint8_t *bytes = read_all(path, &n);
        char want[65];
        sha256_hex(bytes, n, want);
        to_hex(img.bytes_id, 32, hex);
        CHECKF(!strcmp(hex, want), "%s: bytes_id", oracle_pics[i].name);
        CHECKF(probe_agrees(bytes, n, oracle_pics[i].name), "%s: the probe", oracle_pics[i].name);
        free(bytes);

        const int nw = oracle_pics[i].nw, nh = oracle_pics[i].nh;
        uint8_t *rs = malloc((size_t)nw * nh * 3);
        CHECK(resize_bicubic(img.rgb, img.w, img.h, rs, nw, nh) == 0);
        sha256_hex(rs, (size_t)nw * nh * 3, hex);
        CHECKF(!strcmp(hex, oracle_pics[i].resized), "%s: resized to %dx%d differs from Pillow", oracle_pics[i].name,
               nw, nh);

        /* The whole preprocessing: size, and the resized picture pasted in the
         * middle of a black canvas (which normalizes to -1). */
        prep_image prep;
        rc = image_preprocess(&img, &pp, &prep, &e);
        CHECKF(rc == 0, "%s: %s", oracle_pics[i].name, e.msg);
        if (rc == 0) {
            const int tw = oracle_pics[i].tw, th = oracle_pics[i].th, x0 = (tw - nw) / 2, y0 = (th - nh) / 2;
            CHECKF(prep.w == tw && prep.h == th && prep.grid_x == tw / 32 && prep.grid_y == th / 32,
                   "%s: prep %dx%d grid %dx%d", oracle_pics[i].name, prep.w, prep.h, prep.grid_x, prep.grid_y);
            int bad = 0;
            for (int c = 0; c < 3 && prep.w == tw && prep.h == th; c++)
                for (int y = 0; y < th; y++)
                    for (int x = 0; x < tw; x++) {
                        int in = x >= x0 && x < x0 + nw && y >= y0 && y < y0 + nh;
                        float u = in ? rs[((size_t)(y - y0) * nw + (x - x0)) * 3 + c] : 0.0f;
                        float want_v = (u / 255.0f - 0.5f) / 0.5f;
                        bad += prep.pixels[((size_t)c * th + y) * tw + x] != want_v;
                    }
            CHECKF(bad == 0, "%s: %d normalized values differ", oracle_pics[i].name, bad);
            prep_free(&prep);
        }
        free(rs);
        image_free(&img);
    }
}

/* The preprocessing parameters of an mmproj file (spec E.1, F.1). */
static int mmproj_params(const char *path, prep_params *p) {
    ph_err e;
    gguf_file *f = gguf_open(path, &e);
    if (!f) return -1;
    uint32_t ps = 0, merge = 2;
    int rc = gguf_get_u32(f, "clip.vision.patch_size", &ps);
    gguf_get_u32(f, "clip.vision.spatial_merge_size", &merge); /* optional, default 2 */
    const gguf_kv *mean = gguf_find_kv(f, "clip.vision.image_mean"), *std = gguf_find_kv(f, "clip.vision.image_std");
    for (int c = 0; c < 3 && rc == 0; c++)
        if (!mean || !std || gguf_arr_f32(mean, c, &p->mean[c]) || gguf_arr_f32(std, c, &p->std[c])) rc = -1;
    p->patch_size = (int)ps;
    p->n_merge = (int)merge;
    p->min_tokens = 8;
    p->max_tokens = 4096;
    gguf_close(f);
    return rc;
}

/* Every picture of every case gets the grid llama.cpp used (the image
 * chunks of the references), with each model's own mmproj parameters. */
static void test_oracle_grids(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/cases.json", PH_ORACLE_DIR);
    json_t *cases = json_load_file(path, 0, NULL);
    CHECKF(json_is_array(cases), "cannot read %s", path);
    static const char *models[] = {"tiny-f16", "mid-q8", "small-q4k"};
    int n_checked = 0;
    for (int m = 0; m < 3; m++) {
        prep_params pp;
        snprintf(path, sizeof path, "%s/models/%s-mmproj.gguf", PH_ORACLE_DIR, models[m]);
        CHECKF(mmproj_params(path, &pp) == 0, "cannot read the parameters of %s", path);
        CHECK(pp.patch_size == 16 && pp.n_merge == 2 && pp.mean[0] == 0.5f && pp.std[2] == 0.5f);
        snprintf(path, sizeof path, "%s/ref-%s.jsonl", PH_ORACLE_DIR, models[m]);
        FILE *f = fopen(path, "r");
        CHECKF(f != NULL, "cannot open %s", path);
        if (!f) continue;
        char *line = NULL;
        size_t cap = 0;
        while (getline(&line, &cap, f) > 0) {
            json_t *ref = json_loads(line, 0, NULL);
            const char *id = json_string_value(json_object_get(ref, "id"));
            json_t *images = NULL;
            for (size_t i = 0; id && i < json_array_size(cases); i++)
                if (!strcmp(json_string_value(json_object_get(json_array_get(cases, i), "id")), id))
                    images = json_object_get(json_array_get(cases, i), "images");
            size_t k = 0;
            json_t *chunks = json_object_get(ref, "chunks");
            for (size_t c = 0; c < json_array_size(chunks); c++) {
                json_t *ch = json_array_get(chunks, c);
                if (strcmp(json_string_value(json_object_get(ch, "type")), "image") != 0) continue;
                const char *img_name = json_string_value(json_array_get(images, k++));
                CHECKF(img_name != NULL, "%s: case %s has more image chunks than images", models[m], id);
                if (!img_name) break;
                char ipath[1024];
                snprintf(ipath, sizeof ipath, "%s/%s", PH_ORACLE_DIR, img_name);
                image_rgb img;
                prep_image prep;
                ph_err e = {0};
                int rc = image_load_file(ipath, NULL, &img, &e);
                if (rc == 0) rc = image_preprocess(&img, &pp, &prep, &e);
                CHECKF(rc == 0, "%s: %s", ipath, e.msg);
                if (rc) continue;
                int gx = (int)json_integer_value(json_object_get(ch, "grid_x"));
                int gy = (int)json_integer_value(json_object_get(ch, "grid_y"));
                int nt = (int)json_integer_value(json_object_get(ch, "n_tokens"));
                CHECKF(prep.grid_x == gx && prep.grid_y == gy && prep.grid_x * prep.grid_y == nt,
                       "%s %s %s: grid %dx%d, llama.cpp %dx%d (%d tokens)", models[m], id, img_name, prep.grid_x,
                       prep.grid_y, gx, gy, nt);
                n_checked++;
                prep_free(&prep);
                image_free(&img);
            }
            CHECKF(k == json_array_size(images), "%s %s: %zu image chunks for %zu images", models[m], id, k,
                   json_array_size(images));
            json_decref(ref);
        }
        free(line);
        fclose(f);
    }
    CHECKF(n_checked >= 3 * 12, "only %d pictures checked", n_checked);
    json_decref(cases);
}

/* ---- preprocessing values ------------------------------------------------- */

static void test_preprocess_values(void) {
    prep_params pp = {16, 2, 8, 4096, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}};
    ph_err e = {0};
    prep_image prep;

    /* White 1000x500 -> 992x512: the resized 992x496 sits between 8 black
     * rows at the top and 8 at the bottom. */
    image_rgb white = {1000, 500, malloc(1000 * 500 * 3), {0}, {0}};
    memset(white.rgb, 255, 1000 * 500 * 3);
    CHECK(image_preprocess(&white, &pp, &prep, &e) == 0);
    CHECK(prep.w == 992 && prep.h == 512 && prep.grid_x == 31 && prep.grid_y == 16);
    int bad = 0;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 512; y++)
            for (int x = 0; x < 992; x++)
                bad += prep.pixels[((size_t)c * 512 + y) * 992 + x] != ((y < 8 || y >= 504) ? -1.0f : 1.0f);
    CHECKF(bad == 0, "letterbox of 1000x500: %d values wrong", bad);
    prep_free(&prep);
    free(white.rgb);

    /* Unchanged size: planar output, per-channel mean and std. */
    prep_params p2 = {16, 2, 8, 4096, {0.1f, 0.2f, 0.3f}, {0.5f, 0.25f, 2.0f}};
    image_rgb img = {128, 64, malloc(128 * 64 * 3), {0}, {0}};
    for (int i = 0; i < 128 * 64 * 3; i++) img.rgb[i] = (uint8_t)(i * 7);
    CHECK(image_preprocess(&img, &p2, &prep, &e) == 0);
    CHECK(prep.w == 128 && prep.h == 64 && prep.grid_x == 4 && prep.grid_y == 2);
    bad = 0;
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 128 * 64; i++)
            bad += prep.pixels[c * 128 * 64 + i] != ((float)img.rgb[3 * i + c] / 255.0f - p2.mean[c]) / p2.std[c];
    CHECKF(bad == 0, "normalization: %d values wrong", bad);
    prep_free(&prep);

    /* Token budget: a small maximum shrinks the picture. */
    p2.min_tokens = 1;
    p2.max_tokens = 1;
    CHECK(image_preprocess(&img, &p2, &prep, &e) == 0 && prep.grid_x * prep.grid_y == 1);
    prep_free(&prep);

    p2.std[1] = 0.0f;
    CHECK(image_preprocess(&img, &p2, &prep, &e) == -1 && strstr(e.msg, "std") && prep.pixels == NULL);
    p2.std[1] = 1.0f;
    p2.patch_size = 0;
    CHECK(image_preprocess(&img, &p2, &prep, &e) == -1);
    free(img.rgb);
}

/* ---- the PNG and GIF variants --------------------------------------------- */

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static void test_ok_corpus(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/images_ok", PH_TEST_DATA);
    DIR *d = opendir(dir);
    CHECKF(d != NULL, "cannot open %s", dir);
    if (!d) return;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!ends_with(de->d_name, ".png") && !ends_with(de->d_name, ".gif")) continue;
        char path[1200], ppm[1200];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        snprintf(ppm, sizeof ppm, "%s/%.*s.ppm", dir, (int)strlen(de->d_name) - 4, de->d_name);
        int w, h;
        uint8_t *want = read_ppm(ppm, &w, &h);
        CHECKF(want != NULL, "cannot read %s", ppm);
        image_rgb img;
        ph_err e = {0};
        int rc = image_load_file(path, NULL, &img, &e);
        CHECKF(rc == 0, "%s", e.msg);
        if (rc == 0 && want) {
            CHECKF(img.w == w && img.h == h && !memcmp(img.rgb, want, (size_t)w * h * 3),
                   "%s: decoded %dx%d differs from %s (%dx%d)", de->d_name, img.w, img.h, ppm, w, h);
            n++;
        }
        size_t len;
        uint8_t *bytes = read_all(path, &len);
        CHECKF(bytes && probe_agrees(bytes, len, de->d_name), "%s: the probe", de->d_name);
        free(bytes);
        image_free(&img);
        free(want);
    }
    closedir(d);
    CHECKF(n >= 25, "only %d pictures in %s", n, dir);
}

/* ---- the hostile files ----------------------------------------------------- */

/* The bad files whose header is sound: only a decode finds them wrong. */
static const char *const damaged_pixels[] = {"png_truncated.png",  "png_bad_crc.png",     "png_bad_data.png",
                                             "jpeg_600_scans.jpg", "webp_truncated.webp", "gif_truncated.gif"};

static void test_bad_corpus(void) {
    char dir[600], list[700], line[1024];
    snprintf(dir, sizeof dir, "%s/images_bad", PH_TEST_DATA);
    snprintf(list, sizeof list, "%s/EXPECTED.txt", dir);
    FILE *fp = fopen(list, "r");
    CHECKF(fp != NULL, "cannot open %s", list);
    if (!fp) return;
    char listed[64][64];
    int n_listed = 0;
    double worst = 0;
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        line[strcspn(line, "\n")] = '\0';
        char *tab = strchr(line, '\t');
        CHECKF(tab != NULL && n_listed < 64 && tab - line < 64, "bad EXPECTED.txt line '%s'", line);
        if (!tab || n_listed >= 64 || tab - line >= 64) continue;
        *tab = '\0';
        const char *name = line, *expect = tab + 1;
        strcpy(listed[n_listed++], name);

        char path[1200];
        snprintf(path, sizeof path, "%s/%.63s", dir, name);
        size_t n;
        uint8_t *buf = read_all(path, &n);
        CHECKF(buf != NULL, "cannot read %s", path);
        if (!buf) continue;
        image_rgb img = {0};
        ph_err e = {0};
        double t0 = now_s();
        int rc = decode(buf, n, name, &img, &e);
        double dt = now_s() - t0;
        worst = dt > worst ? dt : worst;
        char prefix[80];
        snprintf(prefix, sizeof prefix, "%.63s: ", name);
        CHECKF(rc == -1 && img.rgb == NULL && starts_with(e.msg, prefix) && strstr(e.msg, expect) &&
                   !strchr(e.msg, '\n'),
               "%s: wanted '%s', got '%s'", name, expect, rc ? e.msg : "(decoded)");
        CHECKF(dt < 0.5, "%s took %.3f s to refuse", name, dt);
        /* The probe refuses the same files with the same message, but for
         * those whose header is sound and whose pixels are not. */
        int w, h;
        ph_err pe = {0};
        const int prc = image_probe(buf, n, NULL, name, &w, &h, &pe);
        int pixels_bad = 0;
        for (size_t k = 0; k < sizeof damaged_pixels / sizeof *damaged_pixels; k++)
            pixels_bad |= !strcmp(name, damaged_pixels[k]);
        CHECKF(pixels_bad ? prc == 0 : prc == -1 && !strcmp(pe.msg, e.msg), "%s: the probe %s", name,
               prc ? pe.msg : "passed");
        image_free(&img);

        /* Through a file: the label is the path. */
        rc = image_load_file(path, NULL, &img, &e);
        CHECKF(rc == -1 && starts_with(e.msg, path) && strstr(e.msg, expect), "%s (file): '%s'", name, e.msg);
        free(buf);
    }
    fclose(fp);
    printf("images_bad: %d files refused, slowest %.1f ms\n", n_listed, worst * 1e3);

    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "EXPECTED.txt")) continue;
        int found = 0;
        for (int i = 0; i < n_listed; i++) found |= !strcmp(listed[i], de->d_name);
        CHECKF(found, "%s/%s is not listed in EXPECTED.txt", dir, de->d_name);
    }
    if (d) closedir(d);
}

/* ---- JPEG and WebP, made here ---------------------------------------------- */

/* A TIFF block with one IFD0 entry, Orientation = o (little-endian). */
static size_t exif_block(uint8_t *b, int o) {
    static const uint8_t t[] = {'E',  'x',  'i', 'f', 0, 0, 'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0,
                                0x12, 0x01, 3,   0,   1, 0, 0,   0,   0,  0, 0, 0, 0, 0, 0, 0};
    memcpy(b, t, sizeof t);
    b[6 + 18] = (uint8_t)o; /* the SHORT value of the entry */
    return sizeof t;
}

/* A JPEG of pixels in format pf, with an EXIF APP1 segment for orientation
 * o (none when o == 0). Returns a malloc'd buffer. */
static uint8_t *make_jpeg(const uint8_t *px, int w, int h, int pf, int subsamp, int flags, int o, size_t *n) {
    tjhandle tj = tjInitCompress();
    unsigned char *jpg = NULL;
    unsigned long jn = 0;
    int rc = tjCompress2(tj, px, w, 0, h, pf, &jpg, &jn, subsamp, 95, flags);
    tjDestroy(tj);
    if (rc) return NULL;
    uint8_t app1[64];
    size_t an = o ? exif_block(app1, o) : 0;
    size_t seg = o ? an + 4 : 0;
    uint8_t *out = malloc(jn + seg);
    memcpy(out, jpg, 2); /* SOI */
    if (o) {
        out[2] = 0xff, out[3] = 0xe1, out[4] = (uint8_t)((an + 2) >> 8), out[5] = (uint8_t)(an + 2);
        memcpy(out + 6, app1, an);
    }
    memcpy(out + 2 + seg, jpg + 2, jn - 2);
    tjFree(jpg);
    *n = jn + seg;
    return out;
}

/* The orientation turned into operations on the stored picture:
 * m = mirror left-right, r = turn 90 degrees clockwise. */
static const char *const orient_ops[9] = {"", "", "m", "rr", "rrm", "mrrr", "r", "mr", "rrr"};

static uint8_t *apply_ops(const uint8_t *src, int w, int h, const char *ops, int *ow, int *oh) {
    uint8_t *cur = malloc((size_t)w * h * 3);
    memcpy(cur, src, (size_t)w * h * 3);
    for (; *ops; ops++) {
        uint8_t *nx = malloc((size_t)w * h * 3);
        int nw = *ops == 'r' ? h : w, nh = *ops == 'r' ? w : h;
        for (int y = 0; y < nh; y++)
            for (int x = 0; x < nw; x++) {
                int sx = *ops == 'm' ? w - 1 - x : y, sy = *ops == 'm' ? y : h - 1 - x;
                memcpy(nx + ((size_t)y * nw + x) * 3, cur + ((size_t)sy * w + sx) * 3, 3);
            }
        free(cur);
        cur = nx;
        w = nw;
        h = nh;
    }
    *ow = w;
    *oh = h;
    return cur;
}

/* Six 8x8 blocks of distinct colours in 2 columns and 3 rows. */
static void block_picture(uint8_t *px) {
    static const uint8_t colours[6][3] = {{255, 0, 0},   {0, 255, 0},   {0, 0, 255},
                                          {255, 255, 0}, {0, 255, 255}, {255, 0, 255}};
    for (int y = 0; y < 24; y++)
        for (int x = 0; x < 16; x++) memcpy(px + (y * 16 + x) * 3, colours[(y / 8) * 2 + x / 8], 3);
}

static void test_jpeg(void) {
    /* A smooth colour picture, 4:2:0, baseline and progressive. */
    enum { W = 48, H = 40 };
    uint8_t px[W * H * 3], grey[W * H];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            px[(y * W + x) * 3] = (uint8_t)(x * 5), px[(y * W + x) * 3 + 1] = (uint8_t)(y * 6),
                             px[(y * W + x) * 3 + 2] = (uint8_t)(128 + x - y);
            grey[y * W + x] = (uint8_t)(x * 2 + y * 3);
        }
    static const struct {
        const char *what;
        int subsamp, flags;
    } kinds[] = {{"4:2:0", TJSAMP_420, 0}, {"4:4:4", TJSAMP_444, 0}, {"progressive", TJSAMP_420, TJFLAG_PROGRESSIVE}};
    for (int k = 0; k < 3; k++) {
        size_t n;
        uint8_t *jpg = make_jpeg(px, W, H, TJPF_RGB, kinds[k].subsamp, kinds[k].flags, 0, &n);
        image_rgb img;
        ph_err e;
        int rc = decode(jpg, n, "jpeg", &img, &e);
        CHECKF(rc == 0 && img.w == W && img.h == H, "%s JPEG: %s", kinds[k].what, e.msg);
        if (rc == 0)
            CHECKF(max_diff(img.rgb, px, sizeof px) <= 12, "%s JPEG: off by %d", kinds[k].what,
                   max_diff(img.rgb, px, sizeof px));
        image_free(&img);

        /* Data after the end-of-image marker is ignored; a cut file is not. */
        uint8_t *more = malloc(n + 5);
        memcpy(more, jpg, n);
        memcpy(more + n, "trail", 5);
        CHECK(decode(more, n + 5, "jpeg", &img, &e) == 0);
        image_free(&img);
        CHECK(decode(jpg, n - 2, "jpeg", &img, &e) == -1 && strstr(e.msg, "truncated"));
        free(more);
        free(jpg);
    }

    /* Grey. */
    size_t n;
    uint8_t *jpg = make_jpeg(grey, W, H, TJPF_GRAY, TJSAMP_GRAY, 0, 0, &n);
    image_rgb img;
    ph_err e;
    int rc = decode(jpg, n, "grey", &img, &e), worst = 0, same = 1;
    CHECKF(rc == 0, "grey JPEG: %s", e.msg);
    for (int i = 0; rc == 0 && i < W * H; i++) {
        same &= img.rgb[3 * i] == img.rgb[3 * i + 1] && img.rgb[3 * i] == img.rgb[3 * i + 2];
        int d = abs(img.rgb[3 * i] - grey[i]);
        worst = d > worst ? d : worst;
    }
    CHECKF(rc == 0 && same && worst <= 4, "grey JPEG: off by %d", worst);
    image_free(&img);
    free(jpg);

    /* CMYK (stored as YCCK): flat blocks of known inks, Adobe-inverted. */
    uint8_t cmyk[16 * 16 * 4];
    static const uint8_t inks[4][4] = {
        {255, 0, 255, 255}, {0, 255, 255, 255}, {255, 255, 0, 255}, {255, 255, 255, 128}};
    for (int y = 0; y < 16; y++)
        for (int x = 0; x < 16; x++) memcpy(cmyk + (y * 16 + x) * 4, inks[(y / 8) * 2 + x / 8], 4);
    jpg = make_jpeg(cmyk, 16, 16, TJPF_CMYK, TJSAMP_444, 0, 0, &n);
    rc = decode(jpg, n, "cmyk", &img, &e);
    CHECKF(rc == 0 && img.w == 16 && img.h == 16, "CMYK JPEG: %s", e.msg);
    for (int b = 0; rc == 0 && b < 4; b++) {
        const uint8_t *p = img.rgb + (((b / 2) * 8 + 4) * 16 + (b % 2) * 8 + 4) * 3;
        for (int c = 0; c < 3; c++) {
            int want = inks[b][c] * inks[b][3] / 255;
            CHECKF(abs(p[c] - want) <= 6, "CMYK block %d channel %d: %d, want %d", b, c, p[c], want);
        }
    }
    image_free(&img);
    free(jpg);

    /* EXIF orientation 1..8 (and no EXIF at all). */
    uint8_t blocks[16 * 24 * 3];
    block_picture(blocks);
    for (int o = 0; o <= 8; o++) {
        jpg = make_jpeg(blocks, 16, 24, TJPF_RGB, TJSAMP_444, 0, o, &n);
        int ew, eh;
        uint8_t *want = apply_ops(blocks, 16, 24, orient_ops[o], &ew, &eh);
        rc = decode(jpg, n, "exif", &img, &e);
        CHECKF(rc == 0 && img.w == ew && img.h == eh, "orientation %d: %s (%dx%d)", o, e.msg, img.w, img.h);
        int wrong = 0;
        for (int by = 4; rc == 0 && by < eh; by += 8) /* the centre of each block */
            for (int bx = 4; bx < ew; bx += 8)
                wrong += max_diff(img.rgb + (by * ew + bx) * 3, want + (by * ew + bx) * 3, 3) > 16;
        CHECKF(wrong == 0, "orientation %d: %d blocks in the wrong place", o, wrong);
        CHECKF(probe_agrees(jpg, n, "exif"), "orientation %d: the probe", o);
        image_free(&img);
        free(want);
        free(jpg);
    }
}

/* A WebP in the extended format (VP8X) with an EXIF chunk for orientation o,
 * around a lossless bitstream. */
static uint8_t *webp_with_exif(const uint8_t *px, int w, int h, int o, size_t *n) {
    uint8_t *ll = NULL;
    size_t ln = WebPEncodeLosslessRGB(px, w, h, w * 3, &ll);
    uint8_t ex[64];
    size_t en = exif_block(ex, o) - 6; /* WebP's EXIF chunk holds the TIFF block alone */
    size_t body = 4 + 18 + (ln - 12) + 8 + en + (en & 1);
    uint8_t *b = calloc(8 + body, 1);
    size_t p = 0;
    memcpy(b, "RIFF", 4);
    b[4] = (uint8_t)body, b[5] = (uint8_t)(body >> 8), b[6] = (uint8_t)(body >> 16);
    memcpy(b + 8, "WEBPVP8X", 8);
    b[16] = 10;   /* chunk size */
    b[20] = 0x08; /* flags: EXIF */
    b[24] = (uint8_t)(w - 1), b[25] = (uint8_t)((w - 1) >> 8);
    b[27] = (uint8_t)(h - 1), b[28] = (uint8_t)((h - 1) >> 8);
    p = 30;
    memcpy(b + p, ll + 12, ln - 12); /* the VP8L chunk */
    p += ln - 12;
    memcpy(b + p, "EXIF", 4);
    b[p + 4] = (uint8_t)en;
    memcpy(b + p + 8, ex + 6, en);
    WebPFree(ll);
    *n = 8 + body;
    return b;
}

static void test_webp(void) {
    enum { W = 37, H = 21 };
    uint8_t px[W * H * 3];
    for (int i = 0; i < W * H * 3; i++) px[i] = (uint8_t)(i * 13 + (i / 97) * 7);
    uint8_t *out = NULL;
    size_t n = WebPEncodeLosslessRGB(px, W, H, W * 3, &out);
    image_rgb img;
    ph_err e;
    int rc = decode(out, n, "webp", &img, &e);
    CHECKF(rc == 0 && img.w == W && img.h == H && !memcmp(img.rgb, px, sizeof px), "lossless WebP: %s", e.msg);
    image_free(&img);
    WebPFree(out);

    for (int i = 0; i < W * H; i++)
        px[3 * i] = (uint8_t)(i % W * 6), px[3 * i + 1] = (uint8_t)(i / W * 10), px[3 * i + 2] = 90;
    n = WebPEncodeRGB(px, W, H, W * 3, 95, &out);
    rc = decode(out, n, "webp", &img, &e);
    CHECKF(rc == 0 && img.w == W && img.h == H, "lossy WebP: %s", e.msg);
    if (rc == 0)
        CHECKF(max_diff(img.rgb, px, sizeof px) <= 40, "lossy WebP: off by %d", max_diff(img.rgb, px, sizeof px));
    image_free(&img);
    WebPFree(out);

    uint8_t blocks[16 * 24 * 3];
    block_picture(blocks);
    for (int o = 1; o <= 8; o++) {
        uint8_t *b = webp_with_exif(blocks, 16, 24, o, &n);
        int ew, eh;
        uint8_t *want = apply_ops(blocks, 16, 24, orient_ops[o], &ew, &eh);
        rc = decode(b, n, "webp-exif", &img, &e);
        CHECKF(rc == 0 && img.w == ew && img.h == eh && !memcmp(img.rgb, want, (size_t)ew * eh * 3),
               "WebP orientation %d: %s", o, rc ? e.msg : "wrong pixels");
        CHECKF(probe_agrees(b, n, "webp-exif"), "WebP orientation %d: the probe", o);
        image_free(&img);
        free(want);
        free(b);
    }
}

/* ---- fingerprints and limits ----------------------------------------------- */

static void test_fingerprint(void) {
    /* image_id = SHA-256(le32 w, le32 h, RGB): a vector from Python's hashlib. */
    const uint8_t px[6] = {1, 2, 3, 4, 5, 6};
    uint8_t *webp = NULL;
    size_t n = WebPEncodeLosslessRGB(px, 2, 1, 6, &webp);
    image_rgb img;
    ph_err e;
    char hex[65], want[65];
    CHECK(decode(webp, n, "fp", &img, &e) == 0);
    to_hex(img.image_id, 32, hex);
    CHECKF(!strcmp(hex, "f25af82c68d29a6c012779bae23ccc6e5640b399d8b0e0b4eddb25ea7f2a61dd"), "image_id %s", hex);
    sha256_hex(webp, n, want);
    to_hex(img.bytes_id, 32, hex);
    CHECK(!strcmp(hex, want));
    image_free(&img);
    WebPFree(webp);

    /* The same pixels in another file: same image_id, another bytes_id. */
    char path[600];
    snprintf(path, sizeof path, "%s/images_ok/gif_basic.gif", PH_TEST_DATA);
    image_rgb gif, again;
    CHECK(image_load_file(path, NULL, &gif, &e) == 0);
    n = WebPEncodeLosslessRGB(gif.rgb, gif.w, gif.h, gif.w * 3, &webp);
    CHECK(decode(webp, n, "fp", &again, &e) == 0);
    CHECK(!memcmp(gif.image_id, again.image_id, 32) && memcmp(gif.bytes_id, again.bytes_id, 32));
    image_free(&gif);
    image_free(&again);
    WebPFree(webp);
}

/* ---- the header probe -------------------------------------------------------- */

/* The shortest prefix of d that the probe takes (n + 1: none), checking
 * that every shorter one is refused as a decode refuses it. */
static size_t probe_first_pass(const uint8_t *d, size_t n, const char *label) {
    for (size_t len = 0; len <= n; len++) {
        int w, h;
        if (image_probe(d, len, NULL, label, &w, &h, NULL) == 0) return len;
        CHECKF(probe_agrees(d, len, label), "%s cut to %zu bytes: the probe", label, len);
    }
    return n + 1;
}

/* A file's chunks after its signature: the eXIf chunk moved after IDAT. */
static size_t png_exif_last(const uint8_t *d, size_t n, uint8_t *out) {
    size_t p = 8, k = 8, exif = 0, exif_len = 0;
    memcpy(out, d, 8);
    while (p + 12 <= n) {
        const size_t len = (size_t)d[p] << 24 | (size_t)d[p + 1] << 16 | (size_t)d[p + 2] << 8 | d[p + 3];
        if (!memcmp(d + p + 4, "eXIf", 4)) {
            exif = p;
            exif_len = 12 + len;
        } else {
            if (!memcmp(d + p + 4, "IEND", 4) && exif_len) {
                memcpy(out + k, d + exif, exif_len);
                k += exif_len;
            }
            memcpy(out + k, d + p, 12 + len);
            k += 12 + len;
        }
        p += 12 + len;
    }
    return k;
}

static void test_probe(void) {
    /* The probe reads a header and no more: a PNG cut right after its IHDR
     * data (signature, chunk header, 13 bytes) already gives its size, a
     * GIF cut after its first frame's descriptor, a WebP after its VP8L
     * header; a JPEG needs its end-of-image marker (the walk over its
     * segments that finds the EXIF block refuses a cut file). */
    char path[1024];
    snprintf(path, sizeof path, "%s/img/grad.png", PH_ORACLE_DIR);
    size_t n;
    uint8_t *png = read_all(path, &n);
    int w = 0, h = 0;
    CHECK(png && probe_first_pass(png, n, "grad.png") == 29 &&
          image_probe(png, 29, NULL, "grad.png", &w, &h, NULL) == 0 && w == 200 && h == 150);
    free(png);

    uint8_t blocks[16 * 24 * 3];
    block_picture(blocks);
    uint8_t *jpg = make_jpeg(blocks, 16, 24, TJPF_RGB, TJSAMP_420, 0, 6, &n); /* turned: 24x16 */
    CHECK(jpg && probe_first_pass(jpg, n, "jpeg") == n && image_probe(jpg, n, NULL, "jpeg", &w, &h, NULL) == 0 &&
          w == 24 && h == 16);
    free(jpg);

    snprintf(path, sizeof path, "%s/images_ok/gif_frame_offset.gif", PH_TEST_DATA);
    uint8_t *gif = read_all(path, &n);
    size_t first = gif ? probe_first_pass(gif, n, "gif") : 0;
    CHECKF(first > 13 && first < n, "GIF: the probe first passes at %zu of %zu bytes", first, n);
    free(gif);

    uint8_t px[37 * 21 * 3] = {0}, *webp = NULL;
    n = WebPEncodeLosslessRGB(px, 37, 21, 37 * 3, &webp);
    first = probe_first_pass(webp, n, "webp");
    CHECKF(first == 25 && image_probe(webp, first, NULL, "webp", &w, &h, NULL) == 0 && w == 37 && h == 21,
           "WebP: the probe first passes at %zu of %zu bytes", first, n);
    WebPFree(webp);

    /* An eXIf chunk after the pixel data turns the picture too. */
    snprintf(path, sizeof path, "%s/images_ok/exif6.png", PH_TEST_DATA);
    uint8_t *exif6 = read_all(path, &n), *moved = malloc(n);
    CHECK(exif6 && png_exif_last(exif6, n, moved) == n && memcmp(exif6, moved, n) != 0);
    image_rgb img;
    ph_err e;
    CHECKF(decode(moved, n, "exif-last", &img, &e) == 0 && img.w < img.h && probe_agrees(moved, n, "exif-last"),
           "eXIf after IDAT: %s (%dx%d)", e.msg, img.w, img.h);
    image_free(&img);
    free(moved);
    free(exif6);
}

static void test_limits(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/img/grad.png", PH_ORACLE_DIR);
    size_t n;
    uint8_t *buf = read_all(path, &n);
    image_limits lim;
    image_limits_default(&lim);
    CHECK(lim.max_file_bytes == 64u << 20 && lim.max_side == 16384 && lim.max_pixels == 64u << 20);
    image_rgb img;
    ph_err e = {0};

    lim.max_side = 199;
    CHECK(image_decode(buf, n, &lim, "image 2", &img, &e) == -1 &&
          !strcmp(e.msg, "image 2: PNG is 200x150, more than the 199-pixel side limit"));
    image_limits_default(&lim);
    lim.max_pixels = 29999;
    CHECK(image_decode(buf, n, &lim, "image 2", &img, &e) == -1 &&
          !strcmp(e.msg, "image 2: PNG is 200x150 = 30000 pixels, more than the 29999-pixel limit"));
    lim.max_pixels = 30000;
    CHECK(image_decode(buf, n, &lim, "image 2", &img, &e) == 0);
    image_free(&img);
    image_limits_default(&lim);
    lim.max_file_bytes = 100;
    CHECK(image_decode(buf, n, &lim, NULL, &img, &e) == -1 && strstr(e.msg, "image: the file is ") &&
          strstr(e.msg, "more than the 100-byte limit"));
    CHECK(image_load_file(path, &lim, &img, &e) == -1 && strstr(e.msg, "more than the 100-byte limit"));
    free(buf);

    CHECK(image_load_file("/nonexistent/x.png", NULL, &img, &e) == -1 && strstr(e.msg, "cannot open"));
    CHECK(image_load_file(PH_TEST_DATA, NULL, &img, &e) == -1 && strstr(e.msg, "not a regular file"));
}

/* ---- large PNGs and their metadata limit ------------------------------------- */

/* An RGB8 PNG of px made with libspng, unfiltered and uncompressed (level
 * 0: noise does not compress anyway, and it is quick); with text_len, a
 * zTXt chunk of that many bytes of 'a' (which compress to little). */
static uint8_t *make_png(const uint8_t *px, int w, int h, size_t text_len, size_t *n) {
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    struct spng_ihdr ihdr = {
        .width = (uint32_t)w, .height = (uint32_t)h, .bit_depth = 8, .color_type = SPNG_COLOR_TYPE_TRUECOLOR};
    char *text = text_len ? malloc(text_len + 1) : NULL;
    struct spng_text ztxt = {.keyword = "Comment", .type = SPNG_ZTXT, .length = text_len, .text = text};
    int r = ctx && (text || !text_len) ? 0 : SPNG_EMEM;
    if (text) {
        memset(text, 'a', text_len);
        text[text_len] = '\0';
        if (!r) r = spng_set_text(ctx, &ztxt, 1);
    }
    if (!r) r = spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
    if (!r) r = spng_set_option(ctx, SPNG_FILTER_CHOICE, SPNG_DISABLE_FILTERING);
    if (!r) r = spng_set_option(ctx, SPNG_IMG_COMPRESSION_LEVEL, 0);
    if (!r) r = spng_set_ihdr(ctx, &ihdr);
    if (!r) r = spng_encode_image(ctx, px, (size_t)w * h * 3, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
    uint8_t *out = r ? NULL : spng_get_png_buffer(ctx, n, &r);
    spng_ctx_free(ctx);
    free(text);
    return out;
}

/* A PNG of any size up to the file limit decodes (spng's chunk limit is
 * not the file's size); a PNG whose metadata is over its limit is refused
 * naming the limit and its value. */
static void test_large_png(void) {
    const int side = 1800;
    const size_t px_n = (size_t)side * side * 3;
    uint8_t *px = malloc(px_n);
    uint32_t x = 2463534242u; /* xorshift noise: it does not compress */
    for (size_t i = 0; i < px_n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        px[i] = (uint8_t)(x >> 24);
    }
    size_t n = 0;
    uint8_t *png = make_png(px, side, side, 0, &n);
    CHECKF(png && n > (9u << 20) && n < (64u << 20), "a %zu-byte PNG", n);
    image_rgb img = {0};
    ph_err e = {0};
    int rc = png ? decode(png, n, "big.png", &img, &e) : -1;
    CHECKF(rc == 0 && img.w == side && img.h == side && !memcmp(img.rgb, px, px_n), "%zu-byte PNG: %s", n,
           rc ? e.msg : "other pixels");
    CHECK(png && probe_agrees(png, n, "big.png"));
    image_free(&img);
    /* and from a file, as `pinhole run --image` reads it */
    char path[] = "/tmp/ph_big_png_XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0 && png && write(fd, png, n) == (ssize_t)n);
    if (fd >= 0) close(fd);
    rc = image_load_file(path, NULL, &img, &e);
    CHECKF(rc == 0 && img.w == side && img.h == side, "%s: %s", path, rc ? e.msg : "ok");
    image_free(&img);
    unlink(path);
    free(png);
    free(px);

    /* metadata: a zTXt that inflates to 1 MiB (more than the file) is
     * fine; one that inflates past 8 MiB is refused, naming the limit */
    uint8_t blocks[16 * 24 * 3];
    block_picture(blocks);
    png = make_png(blocks, 16, 24, (size_t)1 << 20, &n);
    rc = png ? decode(png, n, "text.png", &img, &e) : -1;
    CHECKF(rc == 0 && img.w == 16 && img.h == 24, "1 MiB of zTXt in %zu bytes: %s", n, rc ? e.msg : "ok");
    image_free(&img);
    free(png);
    png = make_png(blocks, 16, 24, (size_t)9 << 20, &n);
    rc = png ? decode(png, n, "bomb.png", &img, &e) : 0;
    CHECKF(rc == -1 && strstr(e.msg, "bomb.png: PNG metadata") && strstr(e.msg, "8388608 bytes (8 MiB)"),
           "9 MiB of zTXt in %zu bytes: %s", n, rc ? e.msg : "decoded");
    CHECK(png && probe_agrees(png, n, "bomb.png"));
    free(png);
}

/* ---- damaged copies of good files ------------------------------------------ */

static uint32_t rng_state = 12345;
static uint32_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

/* Every outcome must be clean: a picture, or one labelled line; and the
 * probe agrees. */
static int damaged_ok(const uint8_t *d, size_t n, const image_limits *lim, double *worst) {
    image_rgb img;
    ph_err e = {0};
    double t0 = now_s();
    int rc = image_decode(d, n, lim, "damaged", &img, &e), ok;
    double dt = now_s() - t0;
    if (dt > *worst) *worst = dt;
    if (rc == 0) ok = img.w > 0 && img.h > 0 && img.rgb != NULL;
    else ok = img.rgb == NULL && starts_with(e.msg, "damaged: ") && !strchr(e.msg, '\n');
    ok = ok && probe_matches(d, n, lim, "damaged", rc, &img, &e);
    image_free(&img);
    return ok;
}

static void test_damaged(void) {
    image_limits lim;
    image_limits_default(&lim);
    lim.max_pixels = 4u << 20; /* keep damaged headers from asking for much */
    char path[1024];
    static const char *seeds[] = {"oracle:grad.png", "oracle:small.png", "oracle:photo.jpg",
                                  "data:gif_interlaced.gif", "data:interlaced_rgb8_9x11.png"};
    size_t n_seeds = sizeof seeds / sizeof seeds[0];
    uint8_t blocks[16 * 24 * 3];
    block_picture(blocks);
    double worst = 0;
    for (size_t s = 0; s < n_seeds + 2; s++) {
        size_t n;
        uint8_t *buf;
        if (s < n_seeds) {
            const char *name = strchr(seeds[s], ':') + 1;
            if (seeds[s][0] == 'o') snprintf(path, sizeof path, "%s/img/%s", PH_ORACLE_DIR, name);
            else snprintf(path, sizeof path, "%s/images_ok/%s", PH_TEST_DATA, name);
            buf = read_all(path, &n);
        } else if (s == n_seeds) {
            buf = make_jpeg(blocks, 16, 24, TJPF_RGB, TJSAMP_420, TJFLAG_PROGRESSIVE, 6, &n);
        } else {
            buf = webp_with_exif(blocks, 16, 24, 3, &n);
        }
        CHECKF(buf != NULL, "seed %zu", s);
        if (!buf) continue;
        int bad = 0;
        /* Truncations (every length for small files). */
        size_t step = n / 400 + 1;
        for (size_t len = 0; len < n; len += step) bad += !damaged_ok(buf, len, &lim, &worst);
        /* Random damage: a few bytes changed, skipping the magic. */
        uint8_t *copy = malloc(n);
        for (int t = 0; t < 400; t++) {
            memcpy(copy, buf, n);
            int k = 1 + (int)(rng() % 4);
            for (int j = 0; j < k; j++) copy[8 + rng() % (n - 8)] ^= (uint8_t)(1 + rng() % 255);
            bad += !damaged_ok(copy, n, &lim, &worst);
        }
        CHECKF(bad == 0, "seed %zu: %d damaged copies handled badly", s, bad);
        free(copy);
        free(buf);
    }
    CHECKF(worst < 0.5, "a damaged file took %.3f s", worst);
}

int main(void) {
    test_smart_resize();
    test_resampler();
    test_oracle_pictures();
    test_oracle_grids();
    test_preprocess_values();
    test_ok_corpus();
    test_bad_corpus();
    test_jpeg();
    test_webp();
    test_fingerprint();
    test_probe();
    test_limits();
    test_large_png();
    test_damaged();
    TEST_END();
}
