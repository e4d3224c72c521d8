/* Finding the files to run, as a user meets it: `-m MODEL.gguf` takes the
 * vision file beside it that pairs with it (the oracle's tiny, mid and
 * small pairs have LLMs and towers of different widths), refuses two that
 * pair, ignores one that does not, runs text only when none does (and
 * says so); `-m DIR` takes a folder holding one pair; --no-mmproj.
 * Folders of symbolic links to the oracle's files, made in /tmp. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "test_util.h"

static char root[] = "/tmp/pinhole-model-findXXXXXX";

/* A folder root/name holding links named as given (pairs of LINK, TARGET
 * relative to the oracle's folder), NULL-ended. */
static void folder(const char *name, ...) {
    char path[1024], link[1200], target[1200];
    snprintf(path, sizeof path, "%s/%s", root, name);
    CHECKF(mkdir(path, 0700) == 0, "mkdir %s", path);
    va_list ap;
    va_start(ap, name);
    const char *l;
    while ((l = va_arg(ap, const char *)) != NULL) {
        const char *t = va_arg(ap, const char *);
        snprintf(link, sizeof link, "%s/%s", path, l);
        snprintf(target, sizeof target, "%s/%s", PH_ORACLE_DIR, t);
        CHECKF(symlink(target, link) == 0, "symlink %s", link);
    }
    va_end(ap);
}

/* Runs `pinhole ARGS` (in root) with stdin from /dev/null: its exit status
 * and stdout + stderr in *out. */
static int pinhole(char **out, const char *fmt, ...) {
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd %s && %s %s -t 1 </dev/null 2>&1", root, PH_PINHOLE_BIN, args);
    return t_run(cmd, out);
}

/* The run must end with status rc and its output hold each string given
 * (NULL-ended). */
static void expect(const char *what, int rc, int want_rc, char *out, ...) {
    CHECKF(rc == want_rc, "%s: exit %d, wanted %d; output:\n%s", what, rc, want_rc, out);
    va_list ap;
    va_start(ap, out);
    const char *s;
    while ((s = va_arg(ap, const char *)) != NULL)
        CHECKF(strstr(out, s) != NULL, "%s: no '%s' in:\n%s", what, s, out);
    va_end(ap);
    free(out);
}

#define PICTURE "--raw '<__image__>What is it?' -n 1 --image " PH_ORACLE_DIR "/img/grad.png"

int main(void) {
    CHECK(mkdtemp(root) != NULL);
    /* one pair, and two vision files of other widths beside it */
    folder("one", "tiny-f16.gguf", "models/tiny-f16.gguf", "tiny-f16-mmproj.gguf", "models/tiny-f16-mmproj.gguf",
           "mid-q8-mmproj.gguf", "models/mid-q8-mmproj.gguf", "mmproj-small.gguf", "models/small-q4k-mmproj.gguf",
           NULL);
    /* two vision files that pair */
    folder("two", "tiny-f16.gguf", "models/tiny-f16.gguf", "tiny-f16-mmproj.gguf", "models/tiny-f16-mmproj.gguf",
           "mmproj-again.gguf", "models/tiny-f16-mmproj.gguf", NULL);
    /* none that pairs; none at all; two LLMs; no LLM */
    folder("other", "tiny-f16.gguf", "models/tiny-f16.gguf", "mid-q8-mmproj.gguf", "models/mid-q8-mmproj.gguf", NULL);
    folder("alone", "tiny-f16.gguf", "models/tiny-f16.gguf", NULL);
    folder("llms", "tiny-f16.gguf", "models/tiny-f16.gguf", "mid-q8.gguf", "models/mid-q8.gguf",
           "tiny-f16-mmproj.gguf", "models/tiny-f16-mmproj.gguf", NULL);
    folder("towers", "tiny-f16-mmproj.gguf", "models/tiny-f16-mmproj.gguf", NULL);
    char *out;
    int rc;

    /* -m FILE: the one that pairs is used, the others said not to be */
    rc = pinhole(&out, "run -m one/tiny-f16.gguf " PICTURE);
    expect("one pair beside it", rc, 0, out,
           "pinhole: model one/tiny-f16.gguf, vision one/tiny-f16-mmproj.gguf (found beside the model; pictures on)",
           "one/mid-q8-mmproj.gguf produces rows of 384 floats but the LLM takes 128: they are not a pair (not used)",
           "one/mmproj-small.gguf produces rows of 768 floats", NULL);
    /* -m DIR: the folder's LLM and its pair */
    rc = pinhole(&out, "run -m one " PICTURE);
    expect("-m DIR", rc, 0, out,
           "pinhole: model one/tiny-f16.gguf, vision one/tiny-f16-mmproj.gguf (found in the folder; pictures on)",
           NULL);
    /* chat names the model as serve and /v1/models do: by its file */
    rc = pinhole(&out, "chat -m one/");
    expect("chat -m DIR/", rc, 0, out,
           "pinhole: model one/tiny-f16.gguf, vision one/tiny-f16-mmproj.gguf (found "
           "in the folder; pictures on)",
           "pinhole: tiny-f16 (qwen3vl), context", "pictures up to 2048 tokens",
           "pinhole chat: /help lists the commands", NULL);

    /* two that pair: refused, both listed, whether -m names the file or the folder */
    rc = pinhole(&out, "run -m two/tiny-f16.gguf " PICTURE);
    expect("two pairs", rc, 2, out,
           "pinhole run: 2 vision files pair with two/tiny-f16.gguf:", "  two/mmproj-again.gguf\n",
           "  two/tiny-f16-mmproj.gguf\n", "--mmproj FILE", NULL);
    rc = pinhole(&out, "serve -m two --port 0");
    expect("two pairs in a folder", rc, 2, out,
           "pinhole serve: 2 vision files pair with two/tiny-f16.gguf:", "  two/mmproj-again.gguf\n",
           "  two/tiny-f16-mmproj.gguf\n", NULL);
    /* ... unless one is named */
    rc = pinhole(&out, "run -m two --mmproj two/mmproj-again.gguf " PICTURE);
    expect("two pairs, one named", rc, 0, out, "vision two/mmproj-again.gguf (pictures on)", NULL);

    /* none that pairs, or none at all: text only, and said so */
    rc = pinhole(&out, "chat -m other/tiny-f16.gguf");
    expect("none pairs", rc, 0, out, "other/mid-q8-mmproj.gguf produces rows of 384 floats",
           "pinhole: model other/tiny-f16.gguf, no vision file (text only: none of the vision files beside it "
           "(*mmproj*.gguf) pairs with it)",
           "context 4096 (trained; ", NULL);
    rc = pinhole(&out, "run -m other/tiny-f16.gguf " PICTURE);
    expect("none pairs, a picture", rc, 1, out, "pictures need a vision file (none of the vision files", NULL);
    rc = pinhole(&out, "chat -m alone/tiny-f16.gguf");
    expect("none beside it", rc, 0, out, "no vision file (text only: no vision file beside it (*mmproj*.gguf))",
           NULL);
    rc = pinhole(&out, "chat -m one --no-mmproj");
    expect("--no-mmproj", rc, 0, out, "pinhole: model one/tiny-f16.gguf, no vision file (text only: --no-mmproj)",
           NULL);

    /* folders that do not hold one pair, and bad arguments */
    rc = pinhole(&out, "run -m llms " PICTURE);
    expect("two LLMs", rc, 2, out, "pinhole run: llms holds 2 LLM files:", "  llms/mid-q8.gguf\n",
           "  llms/tiny-f16.gguf\n", "-m FILE", NULL);
    rc = pinhole(&out, "chat -m towers");
    expect("no LLM", rc, 2, out, "pinhole chat: towers holds no LLM GGUF file that pinhole runs",
           "  towers/tiny-f16-mmproj.gguf\n", NULL);
    rc = pinhole(&out, "chat -m one --no-mmproj --mmproj one/tiny-f16-mmproj.gguf");
    expect("both", rc, 2, out, "give --mmproj FILE or --no-mmproj, not both", NULL);
    rc = pinhole(&out, "bench -m one/missing.gguf");
    expect("missing", rc, 2, out, "pinhole bench: -m one/missing.gguf: No such file or directory", NULL);

    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    TEST_END();
}
