/* The command line as a user and outside tooling meet it: `pinhole run
 * --json --force-tokens` output compared with the oracle (text and
 * pictures, including the picture rows; Qwen3-VL and Qwen3.5), `run -p`
 * against --raw with the ChatML it renders, `pinhole chat` driven through a
 * pipe and a terminal (commands, transcript, summary lines, tab
 * completion), `pinhole info`'s units, and clear refusals. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pty.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
            CHECKF(json_equal(json_object_get(a, keys[k]), json_object_get(b, keys[k])), "%s/%s chunk %zu %s", model,
                   id, i, keys[k]);
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
    const double enc = json_number_value(json_object_get(pic, "encode_s")),
                 ttft = json_number_value(json_object_get(pic, "ttft_s"));
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
    CHECKF(bytes > 0.4 * (double)st.st_size && bytes < 0.5 * (double)st.st_size,
           "decode reads %.0f bytes of a %lld-byte file", bytes, (long long)st.st_size);
    const double gbs = json_number_value(json_object_get(js, "decode_gbs")),
                 tps = json_number_value(json_object_get(js, "decode_tps"));
    CHECKF(fabs(gbs - tps * bytes / 1e9) <= 0.006 + 1e-3 * gbs, "decode %g GB/s for %g tok/s", gbs, tps);
    json_decref(ref);
    json_decref(js);
}

/* Runs `pinhole ARGS`, its stdin from the file in_path (NULL: none); stdout
 * in *out, stderr in *err; the exit status. */
static int run_pinhole(const char *args, const char *in_path, char **out, char **err) {
    char efile[] = "/tmp/pinhole-test-errXXXXXX";
    close(mkstemp(efile));
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s %s <%s 2>%s", PH_PINHOLE_BIN, args, in_path ? in_path : "/dev/null", efile);
    int rc = t_run(cmd, out);
    snprintf(cmd, sizeof cmd, "cat %s", efile);
    t_run(cmd, err);
    unlink(efile);
    return rc;
}

/* A prompt -p makes, through --print-prompt: the shell keeps its trailing
 * newline (the prompt goes on as "$P" in later commands). */
static char *print_prompt(const char *args) {
    char cmd[8192], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s run %s --print-prompt 2>/dev/null", PH_PINHOLE_BIN, args);
    int rc = t_run(cmd, &out);
    CHECKF(rc == 0, "pinhole run %s --print-prompt: exit %d", args, rc);
    return out;
}

/* run -p: the prompt is the template's ChatML (system message, pictures
 * before the text, generation prompt; a thinking template's <think>
 * opener), and the answer is what --raw gives for that prompt, ending in a
 * newline, with a summary line on stderr. */
static void check_run_prompt(void) {
    char base[2048], args[4096];
    snprintf(base, sizeof base, "-m %s/models/tiny-f16.gguf --mmproj %s/models/tiny-f16-mmproj.gguf -t 2",
             PH_ORACLE_DIR, PH_ORACLE_DIR);
    snprintf(args, sizeof args, "%s --image %s/img/wide.png --system 'Be brief.' -p 'What is in the picture?'", base,
             PH_ORACLE_DIR);
    char *p = print_prompt(args);
    const char *want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n<__image__>What is in the "
                       "picture?<|im_end|>\n<|im_start|>assistant\n";
    CHECKF(!strcmp(p, want), "run -p rendered '%s'", p);
    char pfile[] = "/tmp/pinhole-test-promptXXXXXX";
    FILE *pf = fdopen(mkstemp(pfile), "w");
    fputs(p, pf);
    fclose(pf);
    free(p);
    /* the same prompt through --raw, and through -p */
    char cmd[8192], *raw = NULL, *mine = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd,
             "p=\"$(cat %s; printf x)\"; p=\"${p%%x}\"; "
             "%s run %s --image %s/img/wide.png --raw \"$p\" -n 8 2>/dev/null",
             pfile, PH_PINHOLE_BIN, base, PH_ORACLE_DIR);
    CHECK(t_run(cmd, &raw) == 0);
    unlink(pfile);
    snprintf(cmd, sizeof cmd, "run %s -n 8", args);
    CHECK(run_pinhole(cmd, NULL, &mine, &err) == 0);
    size_t n = strlen(mine);
    CHECKF(n > 1 && mine[n - 1] == '\n', "run -p's answer does not end with a newline: '%s'", mine);
    CHECKF(!strcmp(raw, mine), "run -p answered '%s', --raw '%s'", mine, raw);
    int tokens = 0, rows = 0, reused = -1, prefilled = 0, enc = 0;
    const char *sum = strstr(err, "[8 tokens, ");
    CHECKF(sum && sscanf(sum,
                         "[%d tokens, %*f tok/s, first token after %*f s, cut at the token limit; prompt %d "
                         "rows: %d reused, %d prefilled; pictures: %d encoded",
                         &tokens, &rows, &reused, &prefilled, &enc) == 5,
           "run -p's summary: '%s'", err);
    CHECKF(tokens == 8 && reused == 0 && prefilled == rows && rows > 20 && enc == 1, "run -p's summary: '%s'", err);
    free(raw);
    free(mine);
    free(err);

    /* a thinking template (Qwen3.5): the answer opens <think>, or is told
     * not to think; the reasoning is hidden when stdout is not a terminal
     * and shown between <think> lines with --reasoning show */
    snprintf(base, sizeof base, "-m %s/qwen35/models/tiny.gguf -t 2 -p Why?", PH_ORACLE_DIR);
    p = print_prompt(base);
    CHECKF(!strcmp(p, "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n<think>\n"), "qwen35 -p: '%s'", p);
    free(p);
    snprintf(args, sizeof args, "%s --thinking off", base);
    p = print_prompt(args);
    CHECKF(!strcmp(p, "<|im_start|>user\nWhy?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"),
           "qwen35 -p --thinking off: '%s'", p);
    free(p);
    snprintf(args, sizeof args, "run %s -n 6", base);
    CHECK(run_pinhole(args, NULL, &mine, &err) == 0);
    CHECKF(!strcmp(mine, "\n"), "hidden reasoning printed '%s'", mine);
    free(mine);
    free(err);
    snprintf(args, sizeof args, "run %s -n 6 --reasoning show", base);
    CHECK(run_pinhole(args, NULL, &mine, &err) == 0);
    n = strlen(mine);
    CHECKF(!strncmp(mine, "<think>\n", 8) && n > 20 && !strcmp(mine + n - 9, "</think>\n"), "shown reasoning: '%s'",
           mine);
    free(mine);
    free(err);
}

/* pinhole chat with its stdin from a pipe: /help, a picture and two turns
 * (the second reusing the first's rows and picture), the transcript /save
 * writes, a summary line per answer. */
static void check_chat_pipe(void) {
    char dir[] = "/tmp/pinhole-test-chatXXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char in[4096], save[4200], args[4096];
    snprintf(in, sizeof in, "%s/in", dir);
    snprintf(save, sizeof save, "%s/talk.json", dir);
    FILE *f = fopen(in, "w");
    fprintf(f, "/help\n/image %s/img/wide.png\nWhat is this?\n/save %s\nAnd now?\n/quit\n", PH_ORACLE_DIR, save);
    fclose(f);
    snprintf(args, sizeof args,
             "chat -m %s/models/tiny-f16.gguf --mmproj %s/models/tiny-f16-mmproj.gguf -t 2 -n 6 --system 'Be brief.'",
             PH_ORACLE_DIR, PH_ORACLE_DIR);
    char *out = NULL, *err = NULL;
    CHECK(run_pinhole(args, in, &out, &err) == 0);
    static const char *const help[] = {"/image PATH", "/save FILE", "/reset", "/help", "/quit"};
    for (int i = 0; i < 5; i++) CHECKF(strstr(err, help[i]) != NULL, "/help does not list %s: '%s'", help[i], err);
    /* two summary lines: the second turn reuses the first (its picture too) */
    int tok[2] = {0}, rows[2] = {0}, reused[2] = {-1, -1}, pre[2] = {0}, enc[2] = {-1, -1}, cache[2] = {0},
        kept[2] = {-1, -1};
    const char *at = err;
    for (int t = 0; t < 2; t++) {
        at = strstr(at, "\n[6 tokens, ");
        CHECKF(at && sscanf(at,
                            "\n[%d tokens, %*f tok/s, first token after %*f s, cut at the token limit; prompt %d "
                            "rows: %d reused, %d prefilled; pictures: %d encoded, %d from cache, %d reused]",
                            &tok[t], &rows[t], &reused[t], &pre[t], &enc[t], &cache[t], &kept[t]) == 7,
               "chat summary %d in '%s'", t + 1, err);
        if (at) at++;
    }
    CHECKF(reused[0] == 0 && pre[0] == rows[0] && enc[0] == 1 && kept[0] == 0, "first turn: '%s'", err);
    CHECKF(reused[1] > rows[0] && pre[1] == rows[1] - reused[1] && enc[1] == 0 && kept[1] == 1, "second turn: '%s'",
           err);
    /* the transcript after the first turn: the answer as printed */
    json_t *js = json_load_file(save, 0, NULL);
    json_t *msgs = json_object_get(js, "messages");
    CHECKF(json_array_size(msgs) == 3, "the transcript has %zu messages", json_array_size(msgs));
    json_t *sys = json_array_get(msgs, 0), *user = json_array_get(msgs, 1), *bot = json_array_get(msgs, 2);
    CHECK(!strcmp(json_string_value(json_object_get(sys, "role")), "system") &&
          !strcmp(json_string_value(json_object_get(sys, "content")), "Be brief."));
    char pic[2048];
    snprintf(pic, sizeof pic, "%s/img/wide.png", PH_ORACLE_DIR);
    CHECK(!strcmp(json_string_value(json_object_get(user, "role")), "user") &&
          !strcmp(json_string_value(json_object_get(user, "content")), "What is this?") &&
          json_array_size(json_object_get(user, "images")) == 1 &&
          !strcmp(json_string_value(json_array_get(json_object_get(user, "images"), 0)), pic));
    const char *said = json_string_value(json_object_get(bot, "content"));
    CHECKF(said && *said && !strcmp(json_string_value(json_object_get(bot, "role")), "assistant") &&
               !strncmp(out, said, strlen(said)) && out[strlen(said)] == '\n',
           "the transcript's answer '%s', printed '%s'", said ? said : "", out);
    json_decref(js);
    free(out);
    free(err);
    unlink(in);
    unlink(save);
    rmdir(dir);
}

/* Reads what the terminal shows until it holds want (or 60 s pass); the
 * text read so far is in buf. */
static bool pty_wait(int fd, char *buf, size_t cap, size_t *n, const char *want) {
    for (int i = 0; i < 600 && !strstr(buf, want); i++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t r = read(fd, buf + *n, cap - *n - 1);
        if (r <= 0) return false;
        *n += (size_t)r;
        buf[*n] = '\0';
    }
    return strstr(buf, want) != NULL;
}

/* pinhole chat on a terminal: Tab completes a command's name and the path
 * after /image. */
static void check_chat_completion(void) {
    char model[1024], mmproj[1024];
    snprintf(model, sizeof model, "%s/models/tiny-f16.gguf", PH_ORACLE_DIR);
    snprintf(mmproj, sizeof mmproj, "%s/models/tiny-f16-mmproj.gguf", PH_ORACLE_DIR);
    int fd;
    pid_t pid = forkpty(&fd, NULL, NULL, NULL);
    if (pid == 0) {
        execl(PH_PINHOLE_BIN, "pinhole", "chat", "-m", model, "--mmproj", mmproj, "-t", "2", (char *)NULL);
        _exit(127);
    }
    CHECK(pid > 0);
    if (pid < 0) return;
    static char buf[1 << 16];
    size_t n = 0;
    buf[0] = '\0';
    CHECKF(pty_wait(fd, buf, sizeof buf, &n, "> "), "no prompt: '%s'", buf);
    /* "/he" + Tab is /help; "wi" + Tab in the pictures' folder is wide.png */
    CHECK(write(fd, "/he\t\n", 5) == 5);
    CHECKF(pty_wait(fd, buf, sizeof buf, &n, "list these commands"), "'/he' + Tab: '%s'", buf);
    char line[1200];
    snprintf(line, sizeof line, "/image %s/img/wi\t\n", PH_ORACLE_DIR);
    CHECK(write(fd, line, strlen(line)) == (ssize_t)strlen(line));
    snprintf(line, sizeof line, "[picture %s/img/wide.png goes with your next message]", PH_ORACLE_DIR);
    CHECKF(pty_wait(fd, buf, sizeof buf, &n, line), "'/image .../wi' + Tab: '%s'", buf);
    CHECK(write(fd, "/quit\n", 6) == 6);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(fd);
}

/* pinhole info: sizes in human units, parameters in K/M/B. */
static void check_info(void) {
    static const struct {
        const char *file, *want[3];
    } cases[] = {
        {"models/tiny-f16-mmproj.gguf", {"(264.62 KiB)", "parameters: 124320 (124.32 K)\n", "224.00 KiB"}},
        {"models/small-q4k-mmproj.gguf", {"(3.95 MiB)", "parameters: 1984640 (1.98 M)\n", "3.62 MiB"}},
        {"models/tiny-f16.gguf", {"(43.03 MiB)", "parameters: 19595808 (19.60 M)\n", "37.38 MiB"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char cmd[2048], *out = NULL;
        snprintf(cmd, sizeof cmd, "%s info %s/%s", PH_PINHOLE_BIN, PH_ORACLE_DIR, cases[i].file);
        CHECK(t_run(cmd, &out) == 0);
        for (int k = 0; k < 3; k++)
            CHECKF(strstr(out, cases[i].want[k]), "info %s lacks '%s'", cases[i].file, cases[i].want[k]);
        CHECKF(!strstr(out, "0.00 "), "info %s prints a zero size: '%s'", cases[i].file, out);
        free(out);
    }
}

/* pinhole run with stderr on a terminal (a pseudo-terminal from script(1))
 * draws a progress line while its picture is encoded and its long prompt
 * prefilled, erasing it when done; with stderr a pipe it writes none. */
static void check_progress_line(void) {
    CHECKF(system("command -v script >/dev/null 2>&1") == 0, "script(1) (util-linux) is needed for this test");
    char pfile[] = "/tmp/pinhole-test-promptXXXXXX";
    FILE *pf = fdopen(mkstemp(pfile), "w");
    fputs("<__image__>", pf);
    for (int i = 0; i < 150; i++) fputs("the river runs to the sea ", pf);
    fclose(pf);
    char run[4096], cmd[8192], *out = NULL;
    snprintf(run, sizeof run,
             "%s run -m %s/models/tiny-f16.gguf --mmproj %s/models/tiny-f16-mmproj.gguf --image %s/img/wide.png "
             "--raw \"$(cat %s)\" -n 1 -t 2",
             PH_PINHOLE_BIN, PH_ORACLE_DIR, PH_ORACLE_DIR, PH_ORACLE_DIR, pfile);
    /* on a terminal: stdout dropped, stderr on the pseudo-terminal that script copies out */
    snprintf(cmd, sizeof cmd, "script -qec '%s >/dev/null' /dev/null", run);
    int rc = t_run(cmd, &out);
    CHECKF(rc == 0 && strstr(out, "\r\033[Kpinhole: encoding pictures: 0/") &&
               strstr(out, "\r\033[Kpinhole: prefilling the prompt: 0/") && strstr(out, " rows (0%)"),
           "on a terminal: exit %d, no progress line in '%s'", rc, out ? out : "");
    free(out);
    out = NULL;
    /* a pipe: not a byte of it */
    snprintf(cmd, sizeof cmd, "%s 2>&1 >/dev/null", run);
    rc = t_run(cmd, &out);
    CHECKF(rc == 0 && !strstr(out, "encoding pictures") && !strstr(out, "prefilling") && !strchr(out, '\r'),
           "stderr a pipe: exit %d, '%s'", rc, out ? out : "");
    free(out);
    unlink(pfile);
}

/* pinhole --help names every command's main forms, run -p among them */
static void check_help(void) {
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s --help", PH_PINHOLE_BIN);
    const int rc = t_run(cmd, &out);
    CHECKF(rc == 0 && strstr(out, "run -m LLM.gguf -p TEXT") && strstr(out, "run -m LLM.gguf --raw TEXT") &&
               strstr(out, "serve -m LLM.gguf"),
           "pinhole --help: exit %d, '%s'", rc, out);
    free(out);
}

int main(void) {
    char images[2048];
    check_help();
    check_info();
    check_run_prompt();
    check_chat_pipe();
    check_chat_completion();
    check_progress_line();
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
    snprintf(args, sizeof args,
             "run -m %s/models/tiny-f16.gguf --no-mmproj --raw '<__image__>hi' --image %s/img/grad.png",
             PH_ORACLE_DIR, PH_ORACLE_DIR);
    check_refusal(args, "pictures need a vision file (--no-mmproj): --mmproj");
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
    snprintf(args, sizeof args, "bench -m %s/models/tiny-f16.gguf --no-mmproj --image %s/img/grad.png", PH_ORACLE_DIR,
             PH_ORACLE_DIR);
    check_refusal(args, "--image needs a vision file (--no-mmproj)");
    snprintf(args, sizeof args, "bench -m %s/models/tiny-f16.gguf --mmproj %s/models/tiny-f16-mmproj.gguf",
             PH_ORACLE_DIR, PH_ORACLE_DIR);
    check_refusal(args, "--mmproj goes with --image");
    /* an unknown option is named as unknown whatever follows it */
    static const char *const cmds[] = {"run", "chat", "serve", "bench", "pull", "demo", "synth"};
    for (size_t k = 0; k < sizeof cmds / sizeof *cmds; k++) {
        char want[128];
        snprintf(want, sizeof want, "pinhole %s: unknown option '--bogus'", cmds[k]);
        snprintf(args, sizeof args, "%s --bogus", cmds[k]);
        check_refusal(args, want);
        snprintf(args, sizeof args, "%s --bogus 1", cmds[k]);
        check_refusal(args, want);
    }
    check_refusal("chat --model", "pinhole chat: --model needs a value");
    /* -p or --raw, and the flags that go with only one of them */
    static const struct {
        const char *args, *want;
    } run_refusals[] = {
        {"-p hi --raw hi", "either -p TEXT or --raw PROMPT"},
        {"-p hi --json", "--json goes with --raw"},
        {"-p hi --force-tokens 1,2", "--force-tokens goes with --raw"},
        {"--raw hi --system x", "--system goes with -p"},
        {"--raw hi --print-prompt", "--print-prompt goes with -p"},
        {"-p hi --reasoning maybe", "not auto, show or hide"},
        {"-p hi --thinking yes", "not auto, on or off"},
    };
    for (size_t i = 0; i < sizeof run_refusals / sizeof *run_refusals; i++) {
        snprintf(args, sizeof args, "run -m %s/models/tiny-f16.gguf %s", PH_ORACLE_DIR, run_refusals[i].args);
        check_refusal(args, run_refusals[i].want);
    }
    snprintf(args, sizeof args, "run -m %s/models/tiny-f16.gguf --no-mmproj -p hi --image %s/img/grad.png",
             PH_ORACLE_DIR, PH_ORACLE_DIR);
    check_refusal(args, "pictures need a vision file (--no-mmproj): --mmproj");
    TEST_END();
}
