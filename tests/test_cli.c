/* The command line as a user and outside tooling meet it: `pinhole run
 * --json --force-tokens` output compared with the oracle (text and
 * pictures, including the picture rows; Qwen3-VL and Qwen3.5), and clear
 * refusals. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "oracle.h"
#include "test.h"
#include "test_util.h"

static void check_case(const char *model, const char *id, const char *images) {
    json_t *ref = oracle_ref(model, id);
    CHECKF(ref != NULL, "no reference %s/%s", model, id);
    if (!ref) return;
    /* the prompt goes through a file: it holds newlines and quotes */
    char pfile[] = "/tmp/pinhole-test-promptXXXXXX";
    int fd = mkstemp(pfile);
    FILE *pf = fdopen(fd, "w");
    fputs(json_string_value(json_object_get(ref, "prompt")), pf);
    fclose(pf);
    char forced[4096] = "";
    json_t *gen = json_object_get(ref, "generated");
    for (size_t i = 0; i < json_array_size(gen); i++)
        snprintf(forced + strlen(forced), sizeof forced - strlen(forced), i ? ",%lld" : "%lld",
                 (long long)json_integer_value(json_array_get(gen, i)));
    char cmd[16384], llm[1024], mmproj[1024];
    oracle_path(llm, sizeof llm, model, "models/", ".gguf");
    oracle_path(mmproj, sizeof mmproj, model, "models/", "-mmproj.gguf");
    snprintf(cmd, sizeof cmd,
             "p=\"$(cat %s; printf x)\"; p=\"${p%%x}\"; " /* keeps the prompt's trailing newline */
             "%s run -m %s --mmproj %s %s --raw \"$p\" --json --force-tokens %s -t 2 2>/dev/null",
             pfile, PH_PINHOLE_BIN, llm, mmproj, images, forced);
    char *out = NULL;
    int rc = t_run(cmd, &out);
    unlink(pfile);
    CHECKF(rc == 0, "%s/%s: exit %d", model, id, rc);
    json_error_t jerr;
    json_t *mine = json_loads(out, 0, &jerr);
    CHECKF(mine != NULL, "%s/%s: output is not JSON: %s", model, id, jerr.text);
    free(out);
    if (!mine) {
        json_decref(ref);
        return;
    }
    CHECK(json_integer_value(json_object_get(mine, "n_past_after_prompt")) ==
          json_integer_value(json_object_get(ref, "n_past_after_prompt")));
    CHECK(json_equal(json_object_get(mine, "generated"), gen));
    /* chunks: text ids exact; pictures' shape exact, rows within 1% / 0.03 + 1% */
    json_t *mc = json_object_get(mine, "chunks"), *rc_ = json_object_get(ref, "chunks");
    CHECKF(json_array_size(mc) == json_array_size(rc_), "%s/%s: %zu chunks", model, id, json_array_size(mc));
    for (size_t i = 0; i < json_array_size(mc) && i < json_array_size(rc_); i++) {
        json_t *a = json_array_get(mc, i), *b = json_array_get(rc_, i);
        if (!strcmp(json_string_value(json_object_get(b, "type")), "text")) {
            CHECKF(json_equal(json_object_get(a, "tokens"), json_object_get(b, "tokens")), "%s/%s chunk %zu", model,
                   id, i);
            continue;
        }
        static const char *keys[] = {"n_tokens", "grid_x", "grid_y", "n_pos", "embd_width"};
        for (int k = 0; k < 5; k++)
            CHECKF(json_equal(json_object_get(a, keys[k]), json_object_get(b, keys[k])), "%s/%s chunk %zu %s",
                   model, id, i, keys[k]);
        json_t *an = json_object_get(a, "row_norms"), *bn = json_object_get(b, "row_norms");
        int bad = json_array_size(an) != json_array_size(bn);
        for (size_t r = 0; !bad && r < json_array_size(bn); r++) {
            double x = json_number_value(json_array_get(an, r)), y = json_number_value(json_array_get(bn, r));
            bad = fabs(x - y) > 0.01 * fabs(y);
        }
        static const char *rows[] = {"first_row", "last_row"};
        for (int k = 0; k < 2 && !bad; k++) {
            json_t *ar = json_object_get(a, rows[k]), *br = json_object_get(b, rows[k]);
            bad = json_array_size(ar) != json_array_size(br);
            for (size_t r = 0; !bad && r < json_array_size(br); r++) {
                double x = json_number_value(json_array_get(ar, r)), y = json_number_value(json_array_get(br, r));
                bad = fabs(x - y) > 0.03 + 0.01 * fabs(y);
            }
        }
        CHECKF(!bad, "%s/%s chunk %zu: picture rows differ from the reference", model, id, i);
    }
    /* steps, from the printed top lists */
    json_t *ms = json_object_get(mine, "steps"), *rs = json_object_get(ref, "steps");
    CHECK(json_array_size(ms) == json_array_size(rs));
    double worst = 0.0;
    for (size_t st = 0; st < json_array_size(ms) && st < json_array_size(rs); st++) {
        json_t *top = json_object_get(json_array_get(ms, st), "top");
        int ids[16];
        double vals[16];
        int n = (int)json_array_size(top) < 16 ? (int)json_array_size(top) : 16;
        for (int k = 0; k < n; k++) {
            ids[k] = (int)json_integer_value(json_array_get(json_array_get(top, (size_t)k), 0));
            vals[k] = json_number_value(json_array_get(json_array_get(top, (size_t)k), 1));
        }
        oracle_mine m = {json_number_value(json_object_get(json_array_get(ms, st), "lse")), NULL, ids, vals, n};
        char why[256] = "";
        CHECKF(oracle_compare_step(json_array_get(rs, st), &m, 1.0, &worst, why, sizeof why) == 0,
               "%s/%s step %zu: %s", model, id, st, why);
    }
    printf("%s/%s via the CLI: worst logit difference %.4f\n", model, id, worst);
    json_decref(mine);
    json_decref(ref);
}

/* A command that must fail with a message containing `want` on stderr. */
static void check_refusal(const char *args, const char *want) {
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s %s 2>&1 >/dev/null", PH_PINHOLE_BIN, args);
    int rc = t_run(cmd, &out);
    CHECKF(rc != 0 && strstr(out, want), "'pinhole %s' gave exit %d and '%s', wanted '%s'", args, rc, out, want);
    free(out);
}

/* pinhole bench with a picture: one JSON line whose picture turn is the
 * picture's rows (the oracle's grid for it) inside a prompt of more rows,
 * with an encode time inside the time to first token. */
static void check_bench_picture(void) {
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "%s bench -m %s/models/tiny-f16.gguf --mmproj %s/models/tiny-f16-mmproj.gguf --image %s/img/wide.png "
             "-p 8 -n 4 -r 1 -t 2 2>/dev/null",
             PH_PINHOLE_BIN, PH_ORACLE_DIR, PH_ORACLE_DIR, PH_ORACLE_DIR);
    int rc = t_run(cmd, &out);
    CHECKF(rc == 0, "pinhole bench with a picture: exit %d", rc);
    json_t *js = json_loads(out ? out : "", 0, NULL);
    free(out);
    json_t *pic = json_object_get(js, "picture");
    CHECKF(json_is_object(pic), "pinhole bench printed no picture turn");
    /* wide.png's picture in the oracle (img_two): its n_tokens */
    json_t *ref = oracle_ref("tiny-f16", "img_two");
    int64_t want = -1;
    json_t *chunks = json_object_get(ref, "chunks");
    for (size_t i = 0; i < json_array_size(chunks) && want < 0; i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(chunks, i), "type")), "image"))
            want = json_integer_value(json_object_get(json_array_get(chunks, i), "n_tokens"));
    const int64_t rows = json_integer_value(json_object_get(pic, "rows"));
    CHECKF(rows == want, "bench picture rows %lld, the oracle's %lld", (long long)rows, (long long)want);
    CHECK(json_integer_value(json_object_get(pic, "prompt_rows")) > rows);
    const double enc = json_number_value(json_object_get(pic, "encode_s")), ttft = json_number_value(json_object_get(pic, "ttft_s"));
    CHECKF(enc >= 0 && ttft > 0 && enc <= ttft, "encode %g s, time to first token %g s", enc, ttft);
    CHECK(json_integer_value(json_object_get(pic, "width")) > json_integer_value(json_object_get(pic, "height")));
    /* a decoded token reads every matrix but the embedding table: in this
     * file the output head (18.6 of its 43 MiB, as large as the embedding
     * table) and the small layers; the rate is bytes x tokens/s */
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tiny-f16.gguf", PH_ORACLE_DIR);
    struct stat st;
    CHECK(stat(path, &st) == 0);
    const double bytes = (double)json_integer_value(json_object_get(js, "decode_bytes_per_token"));
    CHECKF(bytes > 0.4 * (double)st.st_size && bytes < 0.5 * (double)st.st_size, "decode reads %.0f bytes of a %lld-byte file",
           bytes, (long long)st.st_size);
    const double gbs = json_number_value(json_object_get(js, "decode_gbs")),
                 tps = json_number_value(json_object_get(js, "decode_tps"));
    CHECKF(fabs(gbs - tps * bytes / 1e9) <= 0.006 + 1e-3 * gbs, "decode %g GB/s for %g tok/s", gbs, tps);
    json_decref(ref);
    json_decref(js);
}

int main(void) {
    char images[2048];
    check_bench_picture();
    check_case("tiny-f16", "text_hello", "");
    snprintf(images, sizeof images, "--image %s/img/wide.png --image %s/img/tall.png", PH_ORACLE_DIR, PH_ORACLE_DIR);
    check_case("tiny-f16", "img_two", images);
    snprintf(images, sizeof images, "--image %s/img/photo.jpg", PH_ORACLE_DIR);
    check_case("mid-q8", "img_jpeg", images);
    /* Qwen3.5: two turns, a picture in the first (its rows through the recurrent layers) */
    snprintf(images, sizeof images, "--image %s/img/wide.png", PH_ORACLE_DIR);
    check_case("qwen35/q8", "gdn_turns_image", images);

    char args[4096];
    snprintf(args, sizeof args, "info %s/gguf_bad/EXPECTED.txt", PH_TEST_DATA);
    check_refusal(args, "not a GGUF file");
    snprintf(args, sizeof args, "run -m %s/models/tiny-f16-mmproj.gguf --raw hi", PH_ORACLE_DIR);
    check_refusal(args, "mmproj");
    snprintf(args, sizeof args, "run -m %s/models/tiny-f16.gguf --raw '<__image__>hi'", PH_ORACLE_DIR);
    check_refusal(args, "1 <__image__> markers but 0 --image");
    snprintf(args, sizeof args, "run -m %s/models/tiny-f16.gguf --raw '<__image__>hi' --image %s/img/grad.png",
             PH_ORACLE_DIR, PH_ORACLE_DIR);
    check_refusal(args, "--mmproj");
    snprintf(args, sizeof args,
             "run -m %s/models/tiny-f16.gguf --mmproj %s/models/tiny-f16-mmproj.gguf --raw '<__image__>hi' "
             "--image %s/gguf_bad/EXPECTED.txt",
             PH_ORACLE_DIR, PH_ORACLE_DIR, PH_TEST_DATA);
    check_refusal(args, "EXPECTED.txt");
    snprintf(args, sizeof args, "run -m %s/models/tiny-f16.gguf --raw hi -n abc", PH_ORACLE_DIR);
    check_refusal(args, "not a whole number");
    snprintf(args, sizeof args, "run -m %s/models/tiny-f16.gguf --mmproj %s/models/mid-q8-mmproj.gguf --raw hi",
             PH_ORACLE_DIR, PH_ORACLE_DIR);
    check_refusal(args, "not a pair");
    snprintf(args, sizeof args, "bench -m %s/models/tiny-f16.gguf --image %s/img/grad.png", PH_ORACLE_DIR, PH_ORACLE_DIR);
    check_refusal(args, "--mmproj and --image go together");
    TEST_END();
}
