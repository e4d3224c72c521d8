/* Several requests at once in one engine (issue 26), on the oracle's tiny
 * Qwen3-VL and Qwen3.5 model pairs: threads calling ph_engine_chat at once
 * on different conversations (text, and with pictures) get each the tokens
 * and top log-probabilities, bit for bit, of the same request run alone on
 * a fresh engine; their rows were evaluated together (steps with more than
 * one sequence); a long prefix sent by three requests at once ends with
 * its full blocks once in the pool; a request cancelled midway leaves the
 * others' answers as they are alone; a stream goes on getting tokens while
 * another request's picture encodes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pinhole.h"
#include "test.h"
#include "test_files.h"

#define NGEN 8
#define NTOP 5
#define NREQ 4

static char idcache[64];
static const char *llm, *mmproj;
static size_t pool_bytes; /* the engines' KV pool (0: the default) */

typedef struct result {
    int32_t tok[NGEN];
    float top[NGEN][NTOP];
    int32_t top_id[NGEN][NTOP];
    int n;
    int cancel_after; /* > 0: the callback cancels after this many tokens */
    ph_turn_report r;
    int rc;
} result;

static int collect(void *ud, const ph_gen_event *ev) {
    result *res = ud;
    if (ev->token < 0 || res->n >= NGEN) return 0;
    res->tok[res->n] = ev->token;
    for (int i = 0; i < NTOP; i++) {
        res->top[res->n][i] = i < ev->n_top ? ev->top_logprobs[i] : 0;
        res->top_id[res->n][i] = i < ev->n_top ? ev->top_ids[i] : -1;
    }
    res->n++;
    return res->cancel_after > 0 && res->n >= res->cancel_after;
}

/* A conversation: a system text, and a user message of a picture (or
 * none) and a question. */
typedef struct conv {
    ph_chat_msg msgs[2];
    ph_chat_part parts[3];
    size_t n_msgs;
} conv;

static void conv_make(conv *c, const char *sys, ph_picture *pic, const char *question) {
    memset(c, 0, sizeof *c);
    c->parts[0] = (ph_chat_part){.text = sys, .len = strlen(sys)};
    c->msgs[0] = (ph_chat_msg){.role = PH_ROLE_SYSTEM, .parts = &c->parts[0], .n_parts = 1};
    size_t k = 1;
    if (pic) c->parts[k++] = (ph_chat_part){.picture = pic};
    c->parts[k++] = (ph_chat_part){.text = question, .len = strlen(question)};
    c->msgs[1] = (ph_chat_msg){.role = PH_ROLE_USER, .parts = &c->parts[1], .n_parts = k - 1};
    c->n_msgs = 2;
}

static ph_engine *engine_ctx(int n_parallel, int32_t batch_tokens, int32_t n_ctx) {
    ph_engine_params p;
    ph_engine_params_default(&p);
    p.model_path = llm;
    p.mmproj_path = mmproj;
    p.n_ctx = n_ctx;
    p.n_threads = 2;
    p.id_cache_dir = idcache;
    p.n_parallel = n_parallel;
    p.batch_tokens = batch_tokens;
    p.ram_cache_bytes = (size_t)64 << 20;
    p.kv_pool_bytes = pool_bytes;
    ph_err err = {0};
    ph_engine *e = ph_engine_new(&p, &err);
    if (!e) fprintf(stderr, "engine: %s\n", err.msg);
    return e;
}

static ph_engine *engine_new(int n_parallel, int32_t batch_tokens) {
    return engine_ctx(n_parallel, batch_tokens, 2048);
}

static void run_one(ph_engine *e, const conv *c, result *res) {
    ph_gen_params g;
    ph_gen_params_default(&g);
    g.max_tokens = NGEN;
    g.top_logprobs = NTOP;
    g.sampler.temperature = 0;
    ph_err err = {0};
    res->rc = ph_engine_chat(e, c->msgs, c->n_msgs, &g, collect, res, &res->r, &err);
    if (res->rc) fprintf(stderr, "turn failed: %s\n", err.msg);
}

/* A long answer: every token and its log-probability. */
typedef struct long_answer {
    int32_t tok[400];
    float lp[400];
    int n;
    ph_turn_report r;
    int rc;
} long_answer;

static int collect_long(void *ud, const ph_gen_event *ev) {
    long_answer *a = ud;
    if (ev->token >= 0 && a->n < 400) a->tok[a->n] = ev->token, a->lp[a->n++] = ev->logprob;
    return 0;
}

static void run_long(ph_engine *e, const conv *c, long_answer *a);

/* A request of a thread of its own: into res, or a long answer into lng. */
typedef struct job {
    ph_engine *e;
    const conv *c;
    result *res;
    long_answer *lng;
    pthread_barrier_t *start;
} job;

static void *job_main(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->start);
    if (j->lng) run_long(j->e, j->c, j->lng);
    else run_one(j->e, j->c, j->res);
    return NULL;
}

/* Runs n requests at once on e (cs[i] into rs[i], or into lng[i] when lng
 * is not NULL), each on a thread of its own. */
static void run_jobs(ph_engine *e, const conv *cs, result *rs, long_answer *lng, int n) {
    pthread_t th[NREQ];
    job jobs[NREQ];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        jobs[i] = (job){e, &cs[i], rs ? &rs[i] : NULL, lng ? &lng[i] : NULL, &start};
        pthread_create(&th[i], NULL, job_main, &jobs[i]);
    }
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
}

static void run_together(ph_engine *e, const conv *cs, result *rs, int n) { run_jobs(e, cs, rs, NULL, n); }

/* Whether a (batched) is b (alone) bit for bit, for the first n tokens. */
static bool same_bits(const result *a, const result *b, int n, const char *what) {
    if (a->rc || b->rc || a->n < n || b->n < n) {
        fprintf(stderr, "%s: rc %d/%d, %d and %d tokens\n", what, a->rc, b->rc, a->n, b->n);
        return false;
    }
    for (int i = 0; i < n; i++) {
        if (a->tok[i] != b->tok[i] || memcmp(a->top_id[i], b->top_id[i], sizeof a->top_id[i]) ||
            memcmp(a->top[i], b->top[i], sizeof a->top[i])) {
            fprintf(stderr, "%s: token %d: %d vs %d alone (top logprob %.9g vs %.9g)\n", what, i, a->tok[i],
                    b->tok[i], (double)a->top[i][0], (double)b->top[i][0]);
            return false;
        }
    }
    return true;
}

static const char *long_system(void) {
    static char s[4096];
    s[0] = 0;
    for (int i = 0; i < 30; i++) strcat(s, "You look at pictures carefully and describe them well. ");
    return s;
}

static void test_model(const char *name, ph_picture *p0, ph_picture *p1) {
    printf("%s\n", name);
    conv cs[NREQ];
    conv_make(&cs[0], "You are terse.", NULL, "Name three colours.");
    conv_make(&cs[1], "You describe pictures.", p0, "What is in this picture?");
    conv_make(&cs[2], long_system(), NULL, "Tell me a short story about a lighthouse keeper and the sea.");
    conv_make(&cs[3], "You describe pictures.", p1, "Which colours do you see?");
    result alone[NREQ] = {0};
    for (int i = 0; i < NREQ; i++) {
        ph_engine *e = engine_new(NREQ, 512);
        CHECK(e != NULL);
        if (!e) return;
        run_one(e, &cs[i], &alone[i]);
        CHECKF(alone[i].rc == 0 && alone[i].n == NGEN, "alone %d: rc %d, %d tokens", i, alone[i].rc, alone[i].n);
        ph_engine_free(e);
    }

    /* four at once; a small batch limit cuts the long prompt across steps */
    const int32_t limits[2] = {512, 48};
    for (int l = 0; l < 2; l++) {
        ph_engine *e = engine_new(NREQ, limits[l]);
        CHECK(e != NULL);
        if (!e) return;
        result rs[NREQ] = {0};
        run_together(e, cs, rs, NREQ);
        for (int i = 0; i < NREQ; i++) {
            char what[96];
            snprintf(what, sizeof what, "%s, batch of %d rows, request %d", name, limits[l], i);
            CHECKF(same_bits(&rs[i], &alone[i], NGEN, what), "%s: not as alone", what);
        }
        ph_engine_stats st;
        ph_engine_get_stats(e, &st);
        CHECKF(st.batch_multi_steps > 0 && st.batch_max_seqs >= 2,
               "%s: steps with several sequences: %llu of %llu (at most %llu at once)", name,
               (unsigned long long)st.batch_multi_steps, (unsigned long long)st.batch_steps,
               (unsigned long long)st.batch_max_seqs);
        CHECKF(st.requests_running == 0, "%s: %llu requests still running", name,
               (unsigned long long)st.requests_running);
        printf("  batch of %3d rows: %llu steps, %llu with several sequences (at most %llu), %llu prompt rows, "
               "%llu decoded, %llu encodes between steps: every answer as alone\n",
               limits[l], (unsigned long long)st.batch_steps, (unsigned long long)st.batch_multi_steps,
               (unsigned long long)st.batch_max_seqs, (unsigned long long)st.batch_prefill_rows,
               (unsigned long long)st.batch_decode_rows, (unsigned long long)st.batch_slices);
        ph_engine_free(e);
    }

    /* one cancelled after two tokens: the others answer as alone */
    {
        ph_engine *e = engine_new(NREQ, 512);
        CHECK(e != NULL);
        if (!e) return;
        result rs[NREQ] = {0};
        rs[2].cancel_after = 2;
        run_together(e, cs, rs, NREQ);
        for (int i = 0; i < NREQ; i++) {
            char what[96];
            snprintf(what, sizeof what, "%s, one cancelled, request %d", name, i);
            if (i == 2)
                CHECKF(rs[i].rc == 0 && rs[i].r.finish == PH_FINISH_CANCELLED && rs[i].n == 2 &&
                           same_bits(&rs[i], &alone[i], 2, what),
                       "%s: finish %d after %d tokens", what, (int)rs[i].r.finish, rs[i].n);
            else CHECKF(same_bits(&rs[i], &alone[i], NGEN, what), "%s: not as alone", what);
        }
        /* and the engine goes on: the cancelled one again, now alone in it */
        result again = {0};
        run_one(e, &cs[2], &again);
        CHECKF(same_bits(&again, &alone[2], NGEN, "after the cancel"), "%s: the cancelled request again", name);
        printf("  one request cancelled after 2 tokens: the others as alone\n");
        ph_engine_free(e);
    }

    /* a long prefix sent by three at once: its full blocks once in the pool */
    {
        conv sh[3];
        const char *qs[3] = {"First question.", "Second question, a little longer.", "Third."};
        for (int i = 0; i < 3; i++) conv_make(&sh[i], long_system(), NULL, qs[i]);
        result solo[3] = {0};
        for (int i = 0; i < 3; i++) {
            ph_engine *e = engine_new(3, 512);
            run_one(e, &sh[i], &solo[i]);
            ph_engine_free(e);
        }
        ph_engine *e = engine_new(3, 512);
        CHECK(e != NULL);
        if (!e) return;
        ph_engine_stats st0, st;
        ph_engine_get_stats(e, &st0);
        result rs[3] = {0};
        run_together(e, sh, rs, 3);
        ph_engine_get_stats(e, &st);
        int32_t least = rs[0].r.n_prompt;
        uint64_t apart = 0;
        for (int i = 0; i < 3; i++) {
            char what[64];
            snprintf(what, sizeof what, "%s, shared prefix %d", name, i);
            CHECKF(same_bits(&rs[i], &solo[i], NGEN, what), "%s: not as alone", what);
            if (rs[i].r.n_prompt < least) least = rs[i].r.n_prompt;
            apart += (uint64_t)(rs[i].r.n_prompt + NGEN + 63) / 64;
        }
        /* the prefix's full blocks (at least the first least / 64 - 1) once, not three times */
        const uint64_t shared = (uint64_t)(least / 64 > 0 ? least / 64 - 1 : 0);
        const uint64_t kept = st.kv_blocks_in_use + st.kv_blocks_cached + st.kv_blocks_pinned;
        CHECKF(shared >= 3 && kept + 2 * shared <= apart,
               "%s: %llu blocks kept for three requests of %llu blocks apart, sharing %llu", name,
               (unsigned long long)kept, (unsigned long long)apart, (unsigned long long)shared);
        printf("  a %d-row prefix sent by three at once: %llu blocks kept (%llu apart)\n", least,
               (unsigned long long)kept, (unsigned long long)apart);
        ph_engine_free(e);
    }
}

/* An agent's four sub-agents over one long system prompt and one
 * screenshot, sent at once: the picture is encoded once, and (without
 * recurrent layers, whose state is not in the blocks) the prefix through
 * it is evaluated once: the three others wait for its full blocks and take
 * them, and the rows of the block where they part (a fork: the first's last
 * block, copied when written), so each evaluates only its own question,
 * whether it starts a paragraph after the picture or right after it. Each
 * answer is the same request's alone. */
static void test_siblings(const char *name, ph_picture *pic, bool recurrent) {
    static char sys[16384];
    sys[0] = 0;
    for (int i = 0; i < 200; i++) strcat(sys, "You are a careful agent who reads the code before changing it. ");
    const char *asks[NREQ] = {"list the files.", "name the function.", "suggest a fix.", "write a test."};
    for (int shape = 0; shape < 2; shape++) {
        char qs[NREQ][512];
        for (int i = 0; i < NREQ; i++)
            snprintf(qs[i], sizeof qs[i], "%sSub-agent %d: %s",
                     shape ? ""
                           : "This screenshot shows the failing test run of the project after the last change to the "
                             "parser and the build scripts. Read the log in it line by line, find the first error, "
                             "and keep the names of the files and the functions it mentions. ",
                     i, asks[i]);
        conv cs[NREQ];
        for (int i = 0; i < NREQ; i++) conv_make(&cs[i], sys, pic, qs[i]);
        result alone[NREQ] = {0};
        for (int i = 0; i < NREQ; i++) {
            ph_engine *e = engine_ctx(1, 512, 4096);
            CHECK(e != NULL);
            if (!e) return;
            run_one(e, &cs[i], &alone[i]);
            ph_engine_free(e);
        }
        ph_engine *e = engine_ctx(NREQ, 512, 4096);
        CHECK(e != NULL);
        if (!e) return;
        result rs[NREQ] = {0};
        run_together(e, cs, rs, NREQ);
        ph_engine_stats st;
        ph_engine_get_stats(e, &st);
        int took = 0;
        uint64_t prefilled = 0;
        int32_t most = 0;
        for (int i = 0; i < NREQ; i++) {
            char what[96];
            snprintf(what, sizeof what, "%s, sibling %d", name, i);
            CHECKF(same_bits(&rs[i], &alone[i], NGEN, what), "%s: not as alone", what);
            took += rs[i].r.pics_from_kv == 1 && rs[i].r.n_reused > 2000;
            prefilled += (uint64_t)rs[i].r.n_prefilled;
            if (rs[i].r.n_prompt > most) most = rs[i].r.n_prompt;
        }
        CHECKF(st.pictures_encoded == 1, "%s: four siblings with one picture: %llu encodes", name,
               (unsigned long long)st.pictures_encoded);
        if (!recurrent)
            CHECKF(took == NREQ - 1 && prefilled <= (uint64_t)most + 3 * 16,
                   "%s: %d of the siblings took the prefix and the picture's rows from the first; %llu rows "
                   "evaluated",
                   name, took, (unsigned long long)prefilled);
        printf("  four siblings over a %d-row prompt, %s, sent at once: %llu encode, %llu prompt rows evaluated "
               "(%llu waited for the prefix, %llu forked, %llu waited for the picture)\n",
               rs[0].r.n_prompt, shape ? "the questions right after the picture" : "a paragraph after the picture",
               (unsigned long long)st.pictures_encoded, (unsigned long long)prefilled,
               (unsigned long long)st.prefix_waits, (unsigned long long)st.prompt_tokens_forked,
               (unsigned long long)st.picture_waits);
        ph_engine_free(e);
    }
}

static void run_long(ph_engine *e, const conv *c, long_answer *a) {
    ph_gen_params g;
    ph_gen_params_default(&g);
    g.max_tokens = 280;
    g.sampler.temperature = 0;
    /* the test switch: an answer this long whatever the tiny model says
     * (each token still evaluated; its log-probability the model's) */
    static char text[4096];
    if (!text[0])
        for (int i = 0; i < 60; i++) strcat(text, "the sea is calm and blue ");
    g.forced_output = text;
    g.forced_len = strlen(text);
    ph_err err = {0};
    a->rc = ph_engine_chat(e, c->msgs, c->n_msgs, &g, collect_long, a, &a->r, &err);
    if (a->rc) fprintf(stderr, "long answer: %s\n", err.msg);
}

/* The pool runs out mid-answer: two answers that need more blocks together
 * than the pool has (each fits alone; one has a picture). The newer one pauses; the older,
 * short of blocks, has it give its blocks back; once the older ends, the
 * newer takes back what the pool still holds, evaluates the rest again and
 * goes on. Both answers are whole and bit for bit as alone. */
static void test_pool_runs_out(ph_picture *pic) {
    ph_engine *probe = engine_new(1, 512);
    CHECK(probe != NULL);
    if (!probe) return;
    ph_engine_stats st;
    ph_engine_get_stats(probe, &st);
    ph_engine_free(probe);
    pool_bytes = 7 * (size_t)st.kv_block_bytes; /* 448 rows; each answer takes 5 blocks */
    conv cs[2];
    conv_make(&cs[0], "You are terse.", NULL, "Say something about the sea.");
    conv_make(&cs[1], "You are a poet.", pic, "Write about the sea, please.");
    long_answer alone[2] = {0}, both[2] = {0};
    for (int i = 0; i < 2; i++) {
        ph_engine *e = engine_new(1, 512);
        CHECK(e != NULL);
        if (!e) return;
        run_long(e, &cs[i], &alone[i]);
        ph_engine_free(e);
    }
    ph_engine *e = engine_new(2, 512);
    CHECK(e != NULL);
    if (e) {
        ph_engine_get_stats(e, &st);
        CHECKF(st.kv_blocks_free + st.kv_blocks_cached + st.kv_blocks_in_use == 7, "a pool of %llu blocks",
               (unsigned long long)(st.kv_blocks_free + st.kv_blocks_cached + st.kv_blocks_in_use));
        run_jobs(e, cs, NULL, both, 2);
        ph_engine_get_stats(e, &st);
        for (int i = 0; i < 2; i++) {
            CHECKF(alone[i].rc == 0 && both[i].rc == 0 && alone[i].n == 280 && both[i].n == alone[i].n &&
                       !memcmp(both[i].tok, alone[i].tok, sizeof alone[i].tok) &&
                       !memcmp(both[i].lp, alone[i].lp, sizeof alone[i].lp) && both[i].r.finish == alone[i].r.finish,
                   "answer %d with the pool short: %d tokens (alone %d), not bit for bit as alone", i, both[i].n,
                   alone[i].n);
        }
        /* 10 blocks in 7: the newer pauses, and gives its blocks back for the older to finish */
        CHECKF(st.requests_paused >= 1 && st.requests_dropped >= 1,
               "answers paused: %llu, gave their blocks back: %llu", (unsigned long long)st.requests_paused,
               (unsigned long long)st.requests_dropped);
        printf(
            "  two answers of 5 blocks in a pool of 7: %llu paused until the other ended (%llu gave its blocks back "
            "and evaluated its rows again); both as alone\n",
            (unsigned long long)st.requests_paused, (unsigned long long)st.requests_dropped);
        ph_engine_free(e);
    }
    pool_bytes = 0;
}

/* A stream that notes, at each of its tokens, how many slices of other
 * work (picture encodes) the batcher has run; after its first token it
 * lets the picture request start and goes on once its encode has. */
typedef struct ticker {
    ph_engine *e;
    uint64_t slices[64];
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool go;
} ticker;

static int tick(void *ud, const ph_gen_event *ev) {
    ticker *t = ud;
    if (ev->token < 0 || t->n >= 64) return 0;
    ph_engine_stats st;
    ph_engine_get_stats(t->e, &st);
    t->slices[t->n++] = st.batch_slices;
    if (t->n > 1) return 0;
    pthread_mutex_lock(&t->mu);
    t->go = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    /* the next token once the picture's first slice has run (else this
     * tiny model's stream could end before the encode begins) */
    for (int ms = 0; ms < 10000 && st.batch_slices == t->slices[0]; ms++) {
        usleep(1000);
        ph_engine_get_stats(t->e, &st);
    }
    return 0;
}

static void *stream_main(void *arg) {
    ticker *t = arg;
    conv c;
    conv_make(&c, "You are a storyteller.", NULL, "Tell me a long story about the sea.");
    ph_gen_params g;
    ph_gen_params_default(&g);
    g.max_tokens = 64;
    ph_err err = {0};
    ph_turn_report r;
    if (ph_engine_chat(t->e, c.msgs, c.n_msgs, &g, tick, t, &r, &err)) fprintf(stderr, "stream: %s\n", err.msg);
    pthread_mutex_lock(&t->mu);
    t->go = true; /* however it ended */
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* A picture sent while another request streams: its encode runs in
 * slices between the batch steps, so the stream gets tokens between them
 * (it sees the count of slices run grow token by token, not jump once;
 * the slices slowed down by a test hook, as a big picture's are). */
static void test_picture_beside_stream(ph_picture *pic) {
    setenv("PINHOLE_TEST_SLICE_DELAY_MS", "600", 1); /* each piece of the encode a slice (over its 0.5 s) */
    ph_engine *e = engine_new(2, 512);
    unsetenv("PINHOLE_TEST_SLICE_DELAY_MS");
    CHECK(e != NULL);
    if (!e) return;
    ticker t = {.e = e};
    pthread_mutex_init(&t.mu, NULL);
    pthread_cond_init(&t.cv, NULL);
    pthread_t th;
    pthread_create(&th, NULL, stream_main, &t);
    pthread_mutex_lock(&t.mu);
    while (!t.go) pthread_cond_wait(&t.cv, &t.mu);
    pthread_mutex_unlock(&t.mu);
    conv c;
    conv_make(&c, "You describe pictures.", pic, "What is in this picture?");
    result res = {0};
    run_one(e, &c, &res);
    pthread_join(th, NULL);
    ph_engine_stats st;
    ph_engine_get_stats(e, &st);
    int seen = 0;
    for (int i = 1; i < t.n; i++) seen += t.slices[i] != t.slices[i - 1];
    CHECKF(res.rc == 0 && res.r.pics_encoded == 1 && t.n > 8, "picture: rc %d, %d encoded; stream: %d tokens", res.rc,
           res.r.pics_encoded, t.n);
    /* a stream stalled for the whole encode would see the count change once */
    CHECKF(seen >= 2 && st.batch_slices >= 3,
           "the stream saw the slices run grow at %d of its tokens (%llu slices in all)", seen,
           (unsigned long long)st.batch_slices);
    printf("  a picture encoded in %llu slices beside a stream, which got tokens between %d of them\n",
           (unsigned long long)st.batch_slices, seen);
    pthread_mutex_destroy(&t.mu);
    pthread_cond_destroy(&t.cv);
    ph_engine_free(e);
}

int main(void) {
    snprintf(idcache, sizeof idcache, "/tmp/ph-ids-XXXXXX");
    if (!mkdtemp(idcache)) return 1;
    file a = make_png(40, 32, 1), b = make_png(56, 28, 2);
    CHECK(a.n && b.n);
    ph_err err = {0};
    ph_picture *pa = ph_picture_new(a.p, a.n, "picture a", &err), *pb = ph_picture_new(b.p, b.n, "picture b", &err);
    CHECK(pa && pb);
    llm = PH_ORACLE_DIR "/models/tiny-f16.gguf";
    mmproj = PH_ORACLE_DIR "/models/tiny-f16-mmproj.gguf";
    test_model("qwen3vl (tiny-f16)", pa, pb);
    test_siblings("qwen3vl (tiny-f16)", pa, false);
    test_pool_runs_out(pa);
    test_picture_beside_stream(pa);
    llm = PH_ORACLE_DIR "/qwen35/models/tiny.gguf";
    mmproj = PH_ORACLE_DIR "/qwen35/models/tiny-mmproj.gguf";
    test_model("qwen35 (tiny)", pa, pb);
    test_siblings("qwen35 (tiny)", pa, true);
    ph_picture_free(pa);
    ph_picture_free(pb);
    free(a.p);
    free(b.p);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", idcache);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", idcache);
    TEST_END();
}
