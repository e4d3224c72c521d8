/* The Qwen3-VL vision tower against the oracle (tests/oracle, or the folder
 * given: `test_vision DIR`): every picture of every case, on all three
 * model pairs and the three Qwen3.5 ones of oracle/qwen35 (no deepstack),
 * decoded, preprocessed and encoded here,
 * then compared with llama.cpp's rows (README tolerances: every row norm
 * within 1%, every value of the first and last rows within 0.03 + 1%, four
 * times that for the JPEG case). Also: malformed mmproj files fail to load
 * with a clear message; an encode in slices (vision_job, encoder_job) gives
 * the whole encode's rows bit for bit, whatever the budgets, two jobs
 * interleaved included. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "image/image.h"
#include "model/llm.h"
#include "model/vision.h"
#include "state/encoder.h"
#include "synth/synth.h"
#include "gguf_variant.h"
#include "oracle.h"
#include "test.h"

static const char *models[] = {"tiny-f16", "mid-q8", "small-q4k", "qwen35/tiny", "qwen35/q8", "qwen35/q4k"};

/* Encodes one picture and compares it with a reference image chunk. */
static void check_picture(vis_tower *v, const char *model, const char *id, const char *img_rel, json_t *chunk,
                          double *model_worst_norm, double *model_worst_val) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", oracle_dir(), img_rel);
    ph_err e = {0};
    image_limits lim;
    image_limits_default(&lim);
    image_rgb img;
    if (image_load_file(path, &lim, &img, &e)) {
        CHECKF(0, "%s/%s: %s: %s", model, id, img_rel, e.msg);
        return;
    }
    prep_params pp;
    vision_prep_params(v, &pp);
    prep_image prep;
    int rc = image_preprocess(&img, &pp, &prep, &e);
    image_free(&img);
    if (rc) {
        CHECKF(0, "%s/%s: preprocess %s: %s", model, id, img_rel, e.msg);
        return;
    }
    const vision_info *in = vision_get_info(v);
    const int gx = (int)json_integer_value(json_object_get(chunk, "grid_x"));
    const int gy = (int)json_integer_value(json_object_get(chunk, "grid_y"));
    const int width = (int)json_integer_value(json_object_get(chunk, "embd_width"));
    CHECKF(prep.grid_x == gx && prep.grid_y == gy, "%s/%s: grid %dx%d, reference %dx%d", model, id, prep.grid_x,
           prep.grid_y, gx, gy);
    CHECKF(in->out_width == width, "%s/%s: row width %d, reference %d", model, id, in->out_width, width);
    if (prep.grid_x != gx || prep.grid_y != gy || in->out_width != width) {
        prep_free(&prep);
        return;
    }

    const int n = gx * gy;
    float *rows = malloc((size_t)n * width * sizeof(float));
    rc = vision_encode(v, &prep, rows, NULL, &e);
    prep_free(&prep);
    CHECKF(rc == 0, "%s/%s: encode: %s", model, id, e.msg);
    if (rc) {
        free(rows);
        return;
    }

    const double mult = strcmp(id, "img_jpeg") == 0 ? 4.0 : 1.0;
    json_t *norms = json_object_get(chunk, "row_norms");
    CHECKF((int)json_array_size(norms) == n, "%s/%s: %zu reference norms for %d rows", model, id,
           json_array_size(norms), n);
    double worst_norm = 0.0, worst_val = 0.0, worst_val_tol = 0.0;
    int bad_norms = 0, bad_vals = 0;
    for (int r = 0; r < n && r < (int)json_array_size(norms); r++) {
        double s = 0.0;
        for (int k = 0; k < width; k++) s += (double)rows[(size_t)r * width + k] * rows[(size_t)r * width + k];
        const double ref = json_number_value(json_array_get(norms, (size_t)r));
        const double rel = fabs(sqrt(s) - ref) / fabs(ref);
        if (rel > worst_norm) worst_norm = rel;
        if (rel > 0.01 * mult) bad_norms++;
    }
    const char *which[2] = {"first_row", "last_row"};
    for (int w = 0; w < 2; w++) {
        json_t *ref = json_object_get(chunk, which[w]);
        const float *mine = rows + (size_t)(w ? n - 1 : 0) * width;
        CHECKF((int)json_array_size(ref) == width, "%s/%s: %s has %zu values", model, id, which[w],
               json_array_size(ref));
        for (int k = 0; k < width && k < (int)json_array_size(ref); k++) {
            const double rv = json_number_value(json_array_get(ref, (size_t)k));
            const double d = fabs(mine[k] - rv), tol = (0.03 + 0.01 * fabs(rv)) * mult;
            if (d > worst_val) worst_val = d;
            if (d / tol > worst_val_tol) worst_val_tol = d / tol;
            if (d > tol) bad_vals++;
        }
    }
    CHECKF(bad_norms == 0, "%s/%s: %d row norms off by more than %g%% (worst %.4f%%)", model, id, bad_norms, mult,
           100 * worst_norm);
    CHECKF(bad_vals == 0, "%s/%s: %d values of the first/last rows off (worst %.5f)", model, id, bad_vals, worst_val);
    printf("  %-10s %-18s %-15s %2dx%-2d worst norm %.4f%%  worst value %.5f (%.0f%% of tolerance)\n", model, id,
           img_rel + 4, gx, gy, 100 * worst_norm, worst_val, 100 * worst_val_tol);
    if (worst_norm > *model_worst_norm) *model_worst_norm = worst_norm;
    if (worst_val > *model_worst_val) *model_worst_val = worst_val;
    free(rows);
}

static void run_model(tpool *pool, const char *model) {
    char path[1024];
    oracle_path(path, sizeof path, model, "models/", "-mmproj.gguf");
    ph_err e = {0};
    vis_tower *v = vision_load(path, pool, &e);
    CHECKF(v != NULL, "%s: %s", model, e.msg);
    if (!v) return;

    oracle_path(path, sizeof path, model, "ref-", ".jsonl");
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f) {
        vision_free(v);
        return;
    }
    char *line = NULL;
    size_t cap = 0;
    int n_pictures = 0;
    double worst_norm = 0.0, worst_val = 0.0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t jerr;
        json_t *c = json_loads(line, 0, &jerr);
        CHECKF(c != NULL, "%s: bad JSON line: %s", path, jerr.text);
        if (!c) continue;
        const char *id = json_string_value(json_object_get(c, "id"));
        json_t *images = json_object_get(c, "images"), *chunks = json_object_get(c, "chunks");
        size_t next_image = 0, i;
        json_t *chunk;
        json_array_foreach(chunks, i, chunk) {
            if (strcmp(json_string_value(json_object_get(chunk, "type")), "image") != 0) continue;
            const char *img = json_string_value(json_array_get(images, next_image++));
            CHECKF(img != NULL, "%s/%s: more image chunks than pictures", model, id);
            if (!img) break;
            check_picture(v, model, id, img, chunk, &worst_norm, &worst_val);
            n_pictures++;
        }
        json_decref(c);
    }
    free(line);
    fclose(f);
    CHECKF(n_pictures > 0, "%s: no pictures in the reference", model);
    printf("%s: %d pictures, worst row norm error %.4f%%, worst first/last row value difference %.5f\n", model,
           n_pictures, 100 * worst_norm, worst_val);
    vision_free(v);
}

/* ---- malformed files ------------------------------------------------------ */

static void check_malformed(tpool *pool) {
    char src[1024], dir[] = "/tmp/ph_test_vision_XXXXXX", dst[1100];
    snprintf(src, sizeof src, "%s/models/tiny-f16-mmproj.gguf", oracle_dir());
    CHECK(mkdtemp(dir) != NULL);
    snprintf(dst, sizeof dst, "%s/bad-mmproj.gguf", dir);
    static const struct {
        variant v;
        const char *expect;
    } cases[] = {
        {{.drop_tensor = "v.blk.1.ffn_up.bias", .bool_value = -1}, "'v.blk.1.ffn_up.bias' is missing"},
        {{.drop_tensor = "v.deepstack.0.fc2.weight", .bool_value = -1}, "'v.deepstack.0.fc2.weight' is missing"},
        {{.drop_tensor = "mm.2.weight", .bool_value = -1}, "'mm.2.weight' is missing"},
        {{.reshape_tensor = "v.blk.0.attn_qkv.weight", .bool_value = -1}, "'v.blk.0.attn_qkv.weight' has shape"},
        {{.reshape_tensor = "v.position_embd.weight", .bool_value = -1}, "not a square grid"},
        {{.key = "clip.projector_type", .str_value = "mlp"}, "projector type 'mlp' is not supported"},
        {{.key = "clip.has_vision_encoder", .bool_value = 0}, "no vision encoder"},
        {{.key = "clip.vision.block_count", .bool_value = -1}, "'clip.vision.block_count' is missing"},
        {{.key = "general.architecture", .str_value = "qwen3vl"}, "is not an mmproj"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECKF(write_variant(src, dst, &cases[i].v) == 0, "cannot write variant %zu", i);
        ph_err e = {0};
        vis_tower *v = vision_load(dst, pool, &e);
        CHECKF(v == NULL && strstr(e.msg, cases[i].expect), "variant %zu: expected \"%s\", got \"%s\"", i,
               cases[i].expect, v ? "(loaded)" : e.msg);
        vision_free(v);
    }
    unlink(dst);
    rmdir(dir);

    /* the LLM file is not an mmproj */
    snprintf(src, sizeof src, "%s/models/tiny-f16.gguf", oracle_dir());
    ph_err e = {0};
    vis_tower *v = vision_load(src, pool, &e);
    CHECKF(v == NULL && strstr(e.msg, "is not an mmproj"), "LLM as mmproj: %s", v ? "(loaded)" : e.msg);
    vision_free(v);
}

/* Pictures the tower cannot take are refused, not encoded. */
static void check_bad_input(tpool *pool) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tiny-f16-mmproj.gguf", oracle_dir());
    ph_err e = {0};
    vis_tower *v = vision_load(path, pool, &e);
    CHECKF(v != NULL, "%s", e.msg);
    if (!v) return;
    float pixels[3 * 64 * 48] = {0}, rows[64 * 128];
    prep_image bad_size = {48, 48, 1, 1, pixels};
    CHECK(vision_encode(v, &bad_size, rows, NULL, &e) == -1 && strstr(e.msg, "multiple of 32"));
    prep_image bad_grid = {64, 32, 1, 1, pixels};
    CHECK(vision_encode(v, &bad_grid, rows, NULL, &e) == -1 && strstr(e.msg, "grid"));
    prep_image ok = {64, 32, 2, 1, pixels};
    CHECK(vision_encode(v, &ok, rows, NULL, &e) == 0);
    vision_free(v);
}

/* ---- encoding in slices ------------------------------------------------------ */

/* A w x h picture of pseudo-random preprocessed values (f: pixels per
 * merged token along a side). */
static prep_image random_picture(int w, int h, int f, uint32_t seed) {
    prep_image p = {w, h, w / f, h / f, malloc(sizeof(float) * 3 * (size_t)w * h)};
    for (int i = 0; i < 3 * w * h; i++) {
        seed = seed * 1664525u + 1013904223u;
        p.pixels[i] = (float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f;
    }
    return p;
}

/* Steps j to the end with budget; the number of steps, or -1 when the
 * result or the progress misbehaves on the way. */
static int run_job(vision_job *j, int64_t budget) {
    int steps = 0, last = 0, done, total;
    do {
        if (vision_job_result(j)) return -1; /* not before done */
        done = vision_job_step(j, budget);
        steps++;
        int n;
        vision_job_progress(j, &n, &total);
        if (n < last || n > total || (done && n != total)) return -1;
        last = n;
    } while (!done);
    return vision_job_result(j) ? steps : -1;
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void check_slices(tpool *pool, const char *model, const char *path) {
    ph_err e = {0};
    vis_tower *v = vision_load(path, pool, &e);
    CHECKF(v != NULL, "%s: %s", model, e.msg);
    if (!v) return;
    const vision_info *in = vision_get_info(v);
    const int64_t C = in->n_embd;
    /* one slice unit a step; odd sizes (a few units of one pass, a unit and
     * a bit of another); a layer a step */
    const int64_t budgets[] = {1, 6 * C * C * VISION_SLICE_ROWS * 3 + 12345, 41 * C * C * VISION_SLICE_ROWS + 7,
                               INT64_MAX};
    /* fewer patches than an attention tile; non-square grids whose merged
     * rows are no multiple of 4; more patches than one FFN pass takes */
    static const int sizes[][2] = {{64, 32}, {224, 160}, {96, 288}, {640, 448}};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    prep_image img[NS];
    float *want[NS];
    size_t bytes[NS];
    for (int s = 0; s < NS; s++) {
        img[s] = random_picture(sizes[s][0], sizes[s][1], 2 * in->patch_size, 77u + (uint32_t)s);
        bytes[s] = (size_t)img[s].grid_x * img[s].grid_y * in->out_width * sizeof(float);
        want[s] = malloc(bytes[s]);
        CHECKF(vision_encode(v, &img[s], want[s], NULL, &e) == 0, "%s: encode: %s", model, e.msg);
    }
    for (int s = 0; s < NS; s++)
        for (size_t bi = 0; bi < sizeof budgets / sizeof budgets[0]; bi++) {
            vision_job *j = vision_job_new(v, &img[s], NULL, &e);
            CHECKF(j != NULL, "%s: job: %s", model, e.msg);
            if (!j) continue;
            const int steps = run_job(j, budgets[bi]);
            const int64_t N = (int64_t)(img[s].w / in->patch_size) * (img[s].h / in->patch_size), M = N / 4;
            /* budget 1: one unit a step, through every pass */
            const int64_t expect = budgets[bi] == 1 ? cdiv(N, VISION_SLICE_ROWS) * (1 + 3 * (int64_t)in->n_layer) +
                                                          cdiv(M, VISION_SLICE_ROWS / 4) * (1 + in->n_deepstack)
                                   : budgets[bi] == INT64_MAX ? in->n_layer + 1
                                                              : -1;
            CHECKF(steps > 0 && (expect < 0 || steps == expect), "%s %dx%d budget %lld: %d steps, expected %lld",
                   model, img[s].w, img[s].h, (long long)budgets[bi], steps, (long long)expect);
            const float *got = vision_job_result(j);
            CHECKF(got && memcmp(got, want[s], bytes[s]) == 0,
                   "%s %dx%d budget %lld: rows differ from the whole encode", model, img[s].w, img[s].h,
                   (long long)budgets[bi]);
            vision_job_free(j);
        }

    /* two jobs interleaved step by step, into the caller's rows */
    float *r1 = malloc(bytes[1]), *r3 = malloc(bytes[3]);
    vision_job *a = vision_job_new(v, &img[1], r1, &e), *b = vision_job_new(v, &img[3], r3, &e);
    CHECK(a && b);
    if (a && b) {
        int da = 0, db = 0;
        while (!da || !db) {
            if (!da) da = vision_job_step(a, budgets[1]);
            if (!db) db = vision_job_step(b, 1);
        }
        CHECK(vision_job_result(a) == r1 && vision_job_result(b) == r3);
        CHECKF(memcmp(r1, want[1], bytes[1]) == 0 && memcmp(r3, want[3], bytes[3]) == 0,
               "%s: interleaved jobs differ from the whole encodes", model);
    }
    vision_job_free(a);
    vision_job_free(b);
    free(r1);
    free(r3);

    /* freed half way, or before any step: nothing leaks (the sanitizer build) */
    vision_job *h = vision_job_new(v, &img[3], NULL, &e);
    CHECK(h != NULL);
    for (int k = 0; h && k < 7; k++) CHECK(vision_job_step(h, budgets[1]) == 0);
    vision_job_free(h);
    vision_job_free(vision_job_new(v, &img[2], NULL, &e));
    prep_image bad = img[0];
    bad.grid_x = 1;
    CHECK(vision_job_new(v, &bad, NULL, &e) == NULL && strstr(e.msg, "grid"));

    for (int s = 0; s < NS; s++) {
        prep_free(&img[s]);
        free(want[s]);
    }
    printf("%s: encodes in slices equal the whole encode\n", model);
    vision_free(v);
}

/* The encoder's jobs: an elastic tower is loaded for a job and stays loaded
 * while it runs, however idle. */
static void check_encoder_job(tpool *pool) {
    char llm[1024], mmproj[1024];
    snprintf(llm, sizeof llm, "%s/models/tiny-f16.gguf", oracle_dir());
    snprintf(mmproj, sizeof mmproj, "%s/models/tiny-f16-mmproj.gguf", oracle_dir());
    ph_err e = {0};
    ph_model *m = llm_probe(llm, &e);
    CHECKF(m != NULL, "%s", e.msg);
    if (!m) return;
    m->pool = pool; /* borrowed for encoder_open; not the model's to free */
    vis_encoder enc;
    const uint8_t id[32] = {0};
    int rc = encoder_open(&enc, mmproj, m, 60.0, id, &e);
    m->pool = NULL;
    ph_model_free(m);
    CHECKF(rc == 0, "%s", e.msg);
    if (rc) return;
    CHECK(enc.tower == NULL); /* elastic: released until a picture needs it */
    prep_image img = random_picture(224, 160, 32, 5u);
    const size_t n = (size_t)img.grid_x * img.grid_y * enc.out_width;
    float *want = malloc(n * sizeof *want);
    bool loaded = false;
    vision_job *j = encoder_job_new(&enc, &img, NULL, &loaded, &e);
    CHECKF(j != NULL && loaded && enc.tower, "%s", e.msg);
    if (j) {
        CHECK(encoder_job_step(&enc, j, 1) == 0);
        encoder_tick(&enc, enc.last_used + 1e6);
        CHECK(enc.tower != NULL && enc.unloads == 0); /* in use */
        while (!encoder_job_step(&enc, j, 1)) encoder_tick(&enc, enc.last_used + 1e6);
        CHECK(vision_encode(enc.tower, &img, want, NULL, &e) == 0);
        CHECK(memcmp(vision_job_result(j), want, n * sizeof *want) == 0);
        encoder_job_free(&enc, j);
    }
    encoder_tick(&enc, enc.last_used + 1e6);
    CHECK(enc.tower == NULL && enc.unloads == 1 && enc.jobs == 0);
    free(want);
    prep_free(&img);
    encoder_close(&enc);
}

int main(int argc, char **argv) {
    oracle_use(argc, argv);
    tpool *pool = tpool_create(2);
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) run_model(pool, models[i]);
    check_malformed(pool);
    check_bad_input(pool);
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char path[1024];
        oracle_path(path, sizeof path, models[i], "models/", "-mmproj.gguf");
        check_slices(pool, models[i], path);
    }
    /* an F32 tower: no packed kernels, so mat_mul's 4-row tiles, whose sums
     * differ from its one-row dots; only aligned slices keep the rows */
    char dir[] = "/tmp/ph_test_vision_f32_XXXXXX", out[1100], path[1200];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(out, sizeof out, "%s/t", dir);
    const synth_params sp = {
        .shape = "oracle-tiny", .type = "f16", .vision_type = "f32", .out = out, .seed = 3, .n_threads = 2};
    ph_err e = {0};
    CHECKF(synth_write(&sp, &e) == 0, "synth: %s", e.msg);
    snprintf(path, sizeof path, "%s-mmproj.gguf", out);
    check_slices(pool, "f32 tower", path);
    unlink(path);
    snprintf(path, sizeof path, "%s.gguf", out);
    unlink(path);
    rmdir(dir);
    check_encoder_job(pool);
    tpool_free(pool);
    TEST_END();
}
