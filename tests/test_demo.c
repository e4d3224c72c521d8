/* `pinhole demo` end to end: it writes a synthetic model and pictures,
 * starts the server, plays its scripted session and stops the server
 * cleanly. Its per-turn rows must show each picture encoded once, a
 * follow-up reusing its conversation's prefix, a conversation displaced by
 * another resuming from a RAM checkpoint, and an old picture in a new
 * conversation served by the embedding cache, and after a restart a
 * conversation resuming from its checkpoint file. */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test.h"

/* A turn's row: "A1   pics prompt reused ram disk cached prefill hit enc ttft_ms what". */
typedef struct row {
    int pics, prompt, reused, ram, disk, cached, prefill, hit, enc;
    int found;
} row;

static row find_row(const char *out, const char *label) {
    row r = {0};
    size_t n = strlen(label);
    for (const char *line = out; line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, label, n) || line[n] != ' ') continue;
        r.found = sscanf(line + n, "%d %d %d %d %d %d %d %d %d", &r.pics, &r.prompt, &r.reused, &r.ram, &r.disk,
                         &r.cached, &r.prefill, &r.hit, &r.enc) == 9;
        break;
    }
    return r;
}

int main(void) {
    FILE *p = popen(PH_PINHOLE_BIN " demo -t 2 2>&1", "r");
    CHECK(p != NULL);
    if (!p) TEST_END();
    size_t cap = 1 << 16, n = 0, got;
    char *out = malloc(cap);
    while ((got = fread(out + n, 1, cap - n - 1, p)) > 0) {
        n += got;
        if (cap - n < 4096) out = realloc(out, cap *= 2);
    }
    out[n] = '\0';
    int st = pclose(p);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "pinhole demo failed (wait status %#x):\n%s", st, out);
    CHECK(strstr(out, "RANDOM weights") != NULL);
    CHECK(strstr(out, "summary:") != NULL);

    static const char *labels[] = {"A1", "A2", "B1", "A3", "B2", "C1", "A4"};
    row rows[7];
    for (int i = 0; i < 7; i++) {
        rows[i] = find_row(out, labels[i]);
        CHECKF(rows[i].found, "no row for turn %s in:\n%s", labels[i], out);
        /* what the API reports as cached is what /metrics counts as reused */
        CHECKF(rows[i].cached == rows[i].reused, "%s: cached %d, reused %d", labels[i], rows[i].cached,
               rows[i].reused);
        CHECKF(rows[i].prompt == rows[i].reused + rows[i].prefill, "%s: prompt %d != reused %d + prefilled %d",
               labels[i], rows[i].prompt, rows[i].reused, rows[i].prefill);
    }
    const row *a1 = &rows[0], *a2 = &rows[1], *b1 = &rows[2], *a3 = &rows[3], *b2 = &rows[4], *c1 = &rows[5];
    /* picture A is encoded on A1 only */
    CHECKF(a1->enc == 1 && a1->hit == 0, "A1: encoded %d, cache hits %d", a1->enc, a1->hit);
    CHECKF(a2->enc == 0, "A2: encoded %d", a2->enc);
    CHECKF(a3->enc == 0, "A3: encoded %d", a3->enc);
    /* B's picture once too */
    CHECKF(b1->enc == 1, "B1: encoded %d", b1->enc);
    CHECKF(b2->enc == 0, "B2: encoded %d", b2->enc);
    /* a follow-up reuses its conversation's prefix: at least all of A1's prompt */
    CHECKF(a2->reused > 0 && a2->reused >= a1->prompt, "A2: reused %d (A1's prompt: %d)", a2->reused, a1->prompt);
    CHECKF(a2->prefill < a2->prompt, "A2: prefilled %d of %d", a2->prefill, a2->prompt);
    CHECKF(a2->ram == 0, "A2 follows A1 in the live state: %d rows from RAM", a2->ram);
    /* B1 displaced A, A3 displaced B: each resumes from a RAM checkpoint */
    CHECKF(a3->ram >= a2->prompt && a3->ram == a3->reused, "A3: %d rows from RAM, reused %d (A2's prompt: %d)",
           a3->ram, a3->reused, a2->prompt);
    CHECKF(b2->ram >= b1->prompt && b2->ram == b2->reused, "B2: %d rows from RAM, reused %d (B1's prompt: %d)",
           b2->ram, b2->reused, b1->prompt);
    CHECKF(a3->hit == 0 && b2->hit == 0, "A3, B2: their pictures are in the restored KV (hits %d, %d)", a3->hit,
           b2->hit);
    /* an old picture in a new conversation: from the embedding cache */
    CHECKF(c1->enc == 0 && c1->hit == 1, "C1: encoded %d, cache hits %d", c1->enc, c1->hit);
    /* C's text comes before the picture: at most the shared system prompt is reused */
    CHECKF(c1->reused < a1->prompt, "C1: reused %d", c1->reused);
    /* after a restart, A resumes from the checkpoint file of its turn 3: nothing encoded */
    const row *a4 = &rows[6];
    CHECKF(a4->disk >= a3->prompt && a4->disk == a4->reused && a4->enc == 0 && a4->hit == 0,
           "A4 after a restart: %d rows from disk, reused %d (A3's prompt: %d), encoded %d, hits %d", a4->disk,
           a4->reused, a3->prompt, a4->enc, a4->hit);
    for (int i = 0; i < 6; i++) CHECKF(rows[i].disk == 0, "%s: %d rows from disk", labels[i], rows[i].disk);
    free(out);
    TEST_END();
}
