/* One forward pass over the rows of several sequences (llm_forward_batch):
 * on the oracle's Qwen3-VL and Qwen3.5 models, three sequences of other
 * prompts and depths (one decoding a token a step, one prefilling in
 * chunks, one taking picture-like embedding rows with M-RoPE positions)
 * evaluated together step after step give each sequence the logits, KV
 * bytes and recurrent state it gets run alone through llm_forward with the
 * same chunking; batches that cannot be evaluated are refused with nothing
 * changed. Then the time of 4 sequences decoding alone and batched on the
 * small q4_k model (printed, not asserted). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/llm.h"
#include "pinhole.h"
#include "state/kv_cache.h"
#include "test.h"

#define N_CTX 256
#define CAP   64
#define N_SEQ 3

/* xorshift: the same numbers on every run */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

/* One sequence: run in the batch (kv) and alone (solo, its own scratch),
 * its next position and the rows of its current step. */
typedef struct seq {
    kv_cache kv, solo;
    int32_t next_pos;
    int32_t tokens[CAP];
    float *embd; /* [CAP][n_embd_inp] when the step's rows are a picture's */
    int32_t pos[4 * CAP];
    int64_t n;
    bool want_logits;
} seq;

/* The positions of a step's n rows: text (p, p, p, 0), or a picture of
 * grid_x columns (t = p0, h = p0 + row, w = p0 + col; docs/numerics.md,
 * Positions of picture rows). Moves next_pos on. */
static void set_positions(seq *s, const ph_model *m, int64_t n, int grid_x, int grid_y) {
    const bool mrope = m->hp.rope.mode == PH_ROPE_IMROPE;
    for (int64_t i = 0; i < n; i++) {
        const int32_t p = grid_x ? s->next_pos : s->next_pos + (int32_t)i;
        s->pos[i] = p;
        if (!mrope) continue;
        s->pos[n + i] = grid_x ? p + (int32_t)(i / grid_x) : p;
        s->pos[2 * n + i] = grid_x ? p + (int32_t)(i % grid_x) : p;
        s->pos[3 * n + i] = 0;
    }
    s->next_pos += grid_x ? (grid_x > grid_y ? grid_x : grid_y) : (int32_t)n;
}

/* A step of n text rows (random ids), or of a picture's grid_x * grid_y
 * rows (random floats of n_embd_inp width), for sequence s. */
static void step_text(seq *s, const ph_model *m, int64_t n, bool want_logits) {
    for (int64_t i = 0; i < n; i++) s->tokens[i] = (int32_t)(next_u32() % (uint32_t)m->hp.n_vocab);
    s->n = n;
    s->want_logits = want_logits;
    set_positions(s, m, n, 0, 0);
}

static void step_picture(seq *s, const ph_model *m, int grid_x, int grid_y, bool want_logits) {
    const int64_t n = (int64_t)grid_x * grid_y;
    for (int64_t i = 0; i < n * m->hp.n_embd_inp; i++) s->embd[i] = (float)(next_u32() % 2001) / 1000.0f - 1.0f;
    s->n = -n; /* marks the rows as the picture's: n is set when the segment is made */
    s->want_logits = want_logits;
    set_positions(s, m, n, grid_x, grid_y);
}

static llm_seg segment_of(seq *s, kv_cache *kv) {
    const bool picture = s->n < 0;
    return (llm_seg){.kv = &kv->rows,
                     .tokens = picture ? NULL : s->tokens,
                     .embd = picture ? s->embd : NULL,
                     .n = picture ? -s->n : s->n,
                     .pos = s->pos,
                     .want_logits = s->want_logits};
}

/* Whether two caches hold the same bytes in the rows in use: every
 * attention layer's K and V cells, and the recurrent state. */
static bool same_state(const kv_cache *a, const kv_cache *b) {
    if (a->rows.n_rows != b->rows.n_rows || a->recurrent_floats != b->recurrent_floats) return false;
    for (int32_t r = 0; r < a->rows.n_rows; r++)
        for (int32_t l = 0; l < a->n_layer; l++)
            for (int kind = 0; kind < 2; kind++)
                if (memcmp(kv_cache_cells(a, r, l, kind), kv_cache_cells(b, r, l, kind), a->row_bytes)) return false;
    return !a->recurrent_floats || memcmp(a->recurrent, b->recurrent, a->recurrent_floats * sizeof(float)) == 0;
}

/* The plan of the three sequences, step by step: rows of text (> 0), a
 * picture (-1: 4 x 3 rows) or nothing (0); the last row's logits are
 * wanted for a step of one row, the last chunk of a prompt and a picture
 * followed by nothing. Sequence 0 decodes a row a step from a short
 * prompt, 1 prefills a longer prompt in chunks (one chunk straddling a
 * block of 64 rows) then decodes, 2 starts later with a picture. */
#define N_STEP 9
static const int plan[N_STEP][N_SEQ] = {
    {3, 20, 0}, {1, 20, 0}, {1, 30, 2}, {1, 1, -1}, {1, 1, 5}, {1, 40, 1}, {0, 1, 1}, {1, 1, 1}, {1, 1, 0},
};

static void check_model(const char *path) {
    ph_err e = {0};
    ph_model *m = ph_model_load(path, 2, &e);
    CHECKF(m != NULL, "%s: %s", path, e.msg);
    if (!m) return;
    const int64_t V = m->hp.n_vocab;
    llm_scratch sb, ss;
    CHECK(llm_scratch_init(&sb, m, CAP, N_SEQ, &e) == 0);
    CHECK(llm_scratch_init(&ss, m, CAP, 1, &e) == 0);
    seq q[N_SEQ];
    memset(q, 0, sizeof q);
    for (int i = 0; i < N_SEQ; i++) {
        CHECK(kv_cache_init(&q[i].kv, m, N_CTX, NULL, &e) == 0);
        CHECK(kv_cache_init(&q[i].solo, m, N_CTX, NULL, &e) == 0);
        q[i].embd = malloc((size_t)CAP * (size_t)m->hp.n_embd_inp * sizeof(float));
    }
    const bool pictures = m->hp.rope.mode == PH_ROPE_IMROPE;
    int n_logits_checked = 0;
    for (int t = 0; t < N_STEP; t++) {
        llm_seg segs[N_SEQ];
        int who[N_SEQ], n_seg = 0;
        for (int i = 0; i < N_SEQ; i++) {
            const int a = plan[t][i];
            if (a == 0) continue;
            const bool last_chunk = t + 1 == N_STEP || plan[t + 1][i] <= 1;
            if (a < 0 && pictures) step_picture(&q[i], m, 4, 3, t + 1 == N_STEP || plan[t + 1][i] == 0);
            else step_text(&q[i], m, a < 0 ? 12 : a, a == 1 || last_chunk);
            const llm_seg sg = segment_of(&q[i], &q[i].kv);
            CHECK(kv_cache_reserve(&q[i].kv, q[i].kv.rows.n_rows + (int32_t)sg.n, &e) == 0);
            who[n_seg] = i;
            segs[n_seg++] = sg;
        }
        CHECKF(llm_forward_batch(m, segs, n_seg, &sb, &e) == 0, "step %d: %s", t, e.msg);
        for (int k = 0, j = 0; k < n_seg; k++) {
            seq *s = &q[who[k]];
            llm_seg one = segment_of(s, &s->solo);
            CHECK(kv_cache_reserve(&s->solo, s->solo.rows.n_rows + (int32_t)one.n, &e) == 0);
            /* alone: the same rows through llm_forward */
            CHECKF(llm_forward(m, &s->solo.rows, &ss, one.tokens, one.embd, one.n, one.pos, one.want_logits,
                               &e) == 0,
                   "step %d alone: %s", t, e.msg);
            CHECKF(same_state(&s->kv, &s->solo), "%s step %d sequence %d: other KV or recurrent state in the batch",
                   path, t, who[k]);
            if (!one.want_logits) {
                CHECK(segs[k].logits == NULL);
                continue;
            }
            CHECK(segs[k].logits == sb.logits + j++ * V);
            CHECKF(segs[k].logits && memcmp(segs[k].logits, ss.logits, (size_t)V * sizeof(float)) == 0,
                   "%s step %d sequence %d: other logits in the batch", path, t, who[k]);
            n_logits_checked++;
        }
    }
    CHECK(n_logits_checked >= 15);

    /* refusals, nothing changed: two segments of one sequence, more rows
     * than the scratch holds, more logits than it holds, a bad token */
    const int32_t before = q[0].kv.rows.n_rows;
    step_text(&q[0], m, 1, true);
    step_text(&q[1], m, 1, true);
    llm_seg bad[4] = {segment_of(&q[0], &q[0].kv), segment_of(&q[0], &q[0].kv)};
    CHECK(llm_forward_batch(m, bad, 2, &sb, &e) == -1 && strstr(e.msg, "one sequence"));
    bad[1] = segment_of(&q[1], &q[1].kv);
    bad[1].n = CAP;
    CHECK(llm_forward_batch(m, bad, 2, &sb, &e) == -1 && strstr(e.msg, "rows"));
    llm_seg four[4];
    kv_cache extra;
    CHECK(kv_cache_init(&extra, m, N_CTX, NULL, &e) == 0 && kv_cache_reserve(&extra, 1, &e) == 0);
    for (int i = 0; i < N_SEQ; i++) four[i] = segment_of(&q[0], &q[i].kv);
    four[3] = segment_of(&q[0], &extra);
    CHECK(llm_forward_batch(m, four, 4, &sb, &e) == -1 && strstr(e.msg, "logits"));
    q[1].tokens[0] = (int32_t)V;
    bad[1] = segment_of(&q[1], &q[1].kv);
    CHECK(llm_forward_batch(m, bad, 2, &sb, &e) == -1 && strstr(e.msg, "vocabulary"));
    CHECK(q[0].kv.rows.n_rows == before && same_state(&q[0].kv, &q[0].solo) && same_state(&q[1].kv, &q[1].solo));
    kv_cache_free(&extra);

    for (int i = 0; i < N_SEQ; i++) {
        kv_cache_free(&q[i].kv);
        kv_cache_free(&q[i].solo);
        free(q[i].embd);
    }
    llm_scratch_free(&sb);
    llm_scratch_free(&ss);
    ph_model_free(m);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 4 sequences after a 32-token prompt each, decoding n_dec rows: one
 * llm_forward per sequence and row, then one batch of 4 rows per step.
 * Printed only. */
static void time_decode(const char *path, int n_dec) {
    ph_err e = {0};
    ph_model *m = ph_model_load(path, 2, &e);
    CHECKF(m != NULL, "%s: %s", path, e.msg);
    if (!m) return;
    enum { NS = 4, NW = 2 }; /* ways: alone, batched */
    llm_scratch sb, ss;
    CHECK(llm_scratch_init(&sb, m, CAP, NS, &e) == 0 && llm_scratch_init(&ss, m, CAP, 1, &e) == 0);
    seq q[NS];
    kv_cache kv[NW][NS];
    memset(q, 0, sizeof q);
    for (int i = 0; i < NS; i++) {
        step_text(&q[i], m, 32, false);
        for (int w = 0; w < NW; w++) {
            CHECK(kv_cache_init(&kv[w][i], m, N_CTX, NULL, &e) == 0 && kv_cache_reserve(&kv[w][i], 32, &e) == 0);
            CHECK(llm_forward(m, &kv[w][i].rows, &ss, q[i].tokens, NULL, 32, q[i].pos, false, &e) == 0);
        }
    }
    double took[NW] = {0};
    for (int t = 0; t < n_dec; t++) {
        llm_seg segs[NS];
        for (int i = 0; i < NS; i++) {
            step_text(&q[i], m, 1, true);
            for (int w = 0; w < NW; w++) CHECK(kv_cache_reserve(&kv[w][i], kv[w][i].rows.n_rows + 1, &e) == 0);
            segs[i] = segment_of(&q[i], &kv[NW - 1][i]);
        }
        for (int w = 0; w < NW; w++) {
            double t0 = now_s();
            if (w == NW - 1) CHECK(llm_forward_batch(m, segs, NS, &sb, &e) == 0);
            else
                for (int i = 0; i < NS; i++)
                    CHECK(llm_forward(m, &kv[w][i].rows, &ss, q[i].tokens, NULL, 1, q[i].pos, true, &e) == 0);
            took[w] += now_s() - t0;
        }
    }
    printf("%s: %d steps of %d decode rows, ms a step: alone %.2f, batched %.2f\n", path, n_dec, NS,
           1e3 * took[0] / n_dec, 1e3 * took[1] / n_dec);
    for (int w = 0; w < NW; w++)
        for (int i = 0; i < NS; i++) kv_cache_free(&kv[w][i]);
    llm_scratch_free(&sb);
    llm_scratch_free(&ss);
    ph_model_free(m);
}

int main(int argc, char **argv) {
    const char *nd = getenv("PH_BATCH_STEPS"); /* decode steps timed (default 16) */
    const int n_dec = nd && atoi(nd) > 0 ? atoi(nd) : 16;
    check_model(PH_ORACLE_DIR "/models/tiny-f16.gguf");
    check_model(PH_ORACLE_DIR "/qwen35/models/tiny.gguf");
    /* argument "short": the checks alone (valgrind) */
    if (argc < 2 || strcmp(argv[1], "short") != 0) {
        check_model(PH_ORACLE_DIR "/models/small-q4k.gguf");
        time_decode(PH_ORACLE_DIR "/models/small-q4k.gguf", n_dec);
    }
    TEST_END();
}
