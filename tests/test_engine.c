/* The engine's state reuse (DESIGN 4-6, 8) through the public API, on the
 * oracle's tiny model pair: what each turn reuses, takes from the embedding
 * cache and encodes, and that every reusing turn generates the same tokens
 * and top log-probabilities as a cold engine with all caches off; and that
 * a model with recurrent layers (the oracle's tiny qwen35 pair) resumes a
 * state (live, RAM, parked, a checkpoint file after a restart) only at a
 * snapshot of its recurrent state; and the KV pool under it: switches
 * between conversations copy no KV but the rows they share, a shared
 * prefix's blocks exist once, eviction takes unused chains from their ends
 * and never the running sequence, and admission refuses what the pool
 * cannot hold, changing nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>

#include "pinhole.h"
#include "state/seq_state.h"
#include "test.h"
#include "test_files.h"
#include "test_util.h"

#define LLM        PH_ORACLE_DIR "/models/tiny-f16.gguf"
#define MMPROJ     PH_ORACLE_DIR "/models/tiny-f16-mmproj.gguf"
#define LLM_Q35    PH_ORACLE_DIR "/qwen35/models/tiny.gguf"
#define MMPROJ_Q35 PH_ORACLE_DIR "/qwen35/models/tiny-mmproj.gguf"
#define NGEN       6
#define NTOP       5

static char idcache[64];
/* the model pair of the engines made below (test_recurrent changes it) */
static const char *llm = LLM, *mmproj = MMPROJ;

typedef struct result {
    int32_t tok[NGEN];
    float top[NGEN][NTOP];
    int32_t top_id[NGEN][NTOP];
    int n;
    ph_turn_report r;
    char text[256]; /* the answer's content */
    size_t text_len;
} result;

static int collect(void *ud, const ph_gen_event *ev) {
    result *res = ud;
    if (ev->kind == PH_DELTA_CONTENT && ev->text && ev->len < sizeof res->text - res->text_len) {
        memcpy(res->text + res->text_len, ev->text, ev->len);
        res->text_len += ev->len;
        res->text[res->text_len] = 0;
    }
    if (ev->token < 0 || res->n >= NGEN) return 0;
    res->tok[res->n] = ev->token;
    for (int i = 0; i < ev->n_top && i < NTOP; i++) {
        res->top[res->n][i] = ev->top_logprobs[i];
        res->top_id[res->n][i] = ev->top_ids[i];
    }
    res->n++;
    return 0;
}

#define RAM_ON ((size_t)256 << 20)

static int32_t n_ctx = 2048; /* the context of the engines the tests make (a test may raise it) */
static int n_slots;          /* and their slots (0: the default, --parallel's 4; the tests of parking: 1) */

/* The defaults, with the tiny model pair (model: the LLM file). */
static ph_engine_params params(const char *model) {
    ph_engine_params p;
    ph_engine_params_default(&p);
    p.model_path = model;
    p.mmproj_path = mmproj;
    p.n_ctx = n_ctx;
    p.n_threads = 2;
    p.id_cache_dir = idcache;
    if (n_slots) p.n_parallel = n_slots;
    return p;
}

static ph_engine *engine_ram(bool warm, int entries, size_t bytes, const char *dir, double idle, size_t ram) {
    ph_engine_params p = params(llm);
    p.reuse = warm;
    p.picture_cache_entries = warm ? entries : 0;
    p.picture_cache_bytes = bytes;
    p.picture_cache_dir = warm ? dir : NULL;
    p.vision_idle_s = idle;
    p.ram_cache_bytes = ram;
    ph_err err = {0};
    ph_engine *e = ph_engine_new(&p, &err);
    if (!e) fprintf(stderr, "engine: %s\n", err.msg);
    return e;
}

static ph_engine *engine(bool warm, int entries, size_t bytes, const char *dir, double idle) {
    return engine_ram(warm, entries, bytes, dir, idle, RAM_ON);
}

/* A conversation written compactly: each message is a role letter (s, u,
 * a) and its parts; a part "@N" is picture N of pics. */
typedef struct conv {
    ph_chat_msg msgs[48];
    ph_chat_part parts[64];
    size_t n_msgs, n_parts;
} conv;

static void msg(conv *c, char role, const char *const *parts, size_t n, ph_picture **pics) {
    ph_chat_msg *m = &c->msgs[c->n_msgs++];
    m->role = role == 's' ? PH_ROLE_SYSTEM : role == 'a' ? PH_ROLE_ASSISTANT : PH_ROLE_USER;
    m->parts = &c->parts[c->n_parts];
    m->n_parts = n;
    for (size_t i = 0; i < n; i++) {
        ph_chat_part *p = &c->parts[c->n_parts++];
        memset(p, 0, sizeof *p);
        if (parts[i][0] == '@') p->picture = pics[atoi(parts[i] + 1)];
        else p->text = parts[i], p->len = strlen(parts[i]);
    }
}

/* A turn, auxiliary or not, in an isolation domain (NULL: the default). */
static result turn_in(ph_engine *e, const conv *c, bool auxiliary, const uint8_t *domain) {
    result res = {0};
    ph_gen_params g;
    ph_gen_params_default(&g);
    g.auxiliary = auxiliary;
    if (domain) memcpy(g.domain, domain, sizeof g.domain);
    g.max_tokens = NGEN;
    g.top_logprobs = NTOP;
    ph_err err = {0};
    if (ph_engine_chat(e, c->msgs, c->n_msgs, &g, collect, &res, &res.r, &err)) {
        fprintf(stderr, "turn failed: %s\n", err.msg);
        res.n = -1;
    }
    return res;
}

static result turn_as(ph_engine *e, const conv *c, bool auxiliary) { return turn_in(e, c, auxiliary, NULL); }
static result turn(ph_engine *e, const conv *c) { return turn_as(e, c, false); }

/* The warm turn must match a cold engine's answer to the same request. */
static void same_as_cold(const conv *c, const result *warm, const char *what) {
    ph_engine *cold = engine(false, 0, 0, NULL, 0);
    result r = turn(cold, c);
    CHECKF(r.n == warm->n && r.n > 0, "%s: %d tokens warm, %d cold", what, warm->n, r.n);
    double worst = 0;
    for (int i = 0; i < r.n && i < warm->n; i++) {
        CHECKF(r.tok[i] == warm->tok[i], "%s: token %d: warm %d cold %d", what, i, warm->tok[i], r.tok[i]);
        for (int k = 0; k < NTOP; k++) {
            CHECKF(r.top_id[i][k] == warm->top_id[i][k] || fabsf(r.top[i][k] - warm->top[i][k]) < 1e-3f,
                   "%s: step %d top %d id %d vs %d", what, i, k, warm->top_id[i][k], r.top_id[i][k]);
            double d = fabs((double)r.top[i][k] - warm->top[i][k]);
            if (d > worst) worst = d;
        }
    }
    CHECKF(worst < 2e-2, "%s: top log-probabilities differ by %g from a cold run", what, worst);
    printf("  %-34s same tokens as a cold run, worst top-logprob difference %.2g\n", what, worst);
    ph_engine_free(cold);
}

static ph_picture *pic(file f) {
    ph_err err = {0};
    ph_picture *im = ph_picture_new(f.p, f.n, "test picture", &err);
    if (!im) fprintf(stderr, "picture: %s\n", err.msg);
    return im;
}

/* The tokens of text for the model that the tests use now (llm). */
static int32_t count_tokens(ph_engine *e, const char *text) {
    (void)e;
    static ph_model *m;
    static const char *path;
    if (m && path != llm) {
        ph_model_free(m);
        m = NULL;
    }
    if (!m) m = ph_model_load(path = llm, 1, NULL);
    ph_tokens t = {0};
    ph_tokenize(m, text, strlen(text), true, &t, NULL);
    int32_t n = (int32_t)t.n;
    ph_tokens_free(&t);
    return n;
}

static void test_resent_picture(file a) {
    ph_engine *e = engine(true, 32, 128u << 20, NULL, 0);
    ph_picture *pics[1] = {pic(a)};
    conv c = {0};
    msg(&c, 'u', (const char *[]){"@0", "What is in this picture?"}, 2, pics);
    result prev = turn(e, &c);
    CHECK(prev.r.pics_encoded == 1 && prev.r.n_reused == 0);
    for (int t = 2; t <= 4; t++) {
        msg(&c, 'a', (const char *[]){"It is a picture."}, 1, pics);
        msg(&c, 'u', (const char *[]){t == 3 ? "And the colours?" : "Tell me more."}, 1, pics);
        result r = turn(e, &c);
        CHECKF(r.r.pics_encoded == 0 && r.r.pics_from_kv == 1, "turn %d: encoded %d, from kv %d", t, r.r.pics_encoded,
               r.r.pics_from_kv);
        CHECKF(r.r.n_reused >= prev.r.n_prompt, "turn %d reused %d of the previous prompt's %d", t, r.r.n_reused,
               prev.r.n_prompt);
        if (t == 4) same_as_cold(&c, &r, "picture re-sent on 4 turns");
        prev = r;
    }
    ph_engine_stats st;
    ph_engine_get_stats(e, &st);
    CHECKF(st.pictures_encoded == 1, "a picture re-sent on 4 turns was encoded %llu times",
           (unsigned long long)st.pictures_encoded);
    ph_picture_free(pics[0]);
    ph_engine_free(e);
}

static void test_edit(file a) {
    ph_engine *e = engine(true, 32, 128u << 20, NULL, 0);
    ph_picture *pics[1] = {pic(a)};
    conv c = {0};
    msg(&c, 's', (const char *[]){"You describe pictures."}, 1, pics);
    msg(&c, 'u', (const char *[]){"First question about cats.", "@0"}, 2, pics);
    msg(&c, 'a', (const char *[]){"An answer."}, 1, pics);
    msg(&c, 'u', (const char *[]){"Second question."}, 1, pics);
    turn(e, &c);
    /* edit the first user message's text: only what comes before it is kept */
    c.parts[1].text = "Edited question about dogs.";
    c.parts[1].len = strlen(c.parts[1].text);
    result r = turn(e, &c);
    int32_t before = count_tokens(e, "<|im_start|>system\nYou describe pictures.<|im_end|>\n<|im_start|>user\n");
    CHECKF(r.r.n_reused == before, "edited earlier message: reused %d, the prefix before the edit has %d",
           r.r.n_reused, before);
    CHECKF(r.r.pics_from_kv == 0 && r.r.pics_from_cache == 1 && r.r.pics_encoded == 0,
           "picture after the edit: kv %d cache %d encoded %d", r.r.pics_from_kv, r.r.pics_from_cache,
           r.r.pics_encoded);
    same_as_cold(&c, &r, "edited earlier message");
    ph_picture_free(pics[0]);
    ph_engine_free(e);
}

static void test_other_picture_same_size(void) {
    file p1 = make_png(64, 64, 1), p2 = make_png(64, 64, 2);
    ph_engine *e = engine(true, 32, 128u << 20, NULL, 0);
    ph_picture *pics[2] = {pic(p1), pic(p2)};
    conv c = {0};
    msg(&c, 'u', (const char *[]){"Look:", "@0", "What is it?"}, 3, pics);
    turn(e, &c);
    c.parts[1].picture = pics[1];
    result r = turn(e, &c);
    int32_t before = count_tokens(e, "<|im_start|>user\nLook:<|vision_start|>");
    CHECKF(r.r.pics_encoded == 1 && r.r.pics_from_kv == 0, "other picture of the same size: encoded %d, kv %d",
           r.r.pics_encoded, r.r.pics_from_kv);
    CHECKF(r.r.n_reused == before, "other picture: reused %d rows, expected the %d before it", r.r.n_reused, before);
    same_as_cold(&c, &r, "other picture, same size and place");
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);
    ph_engine_free(e);
    free(p1.p);
    free(p2.p);
}

static void test_append_picture(file a, file b) {
    ph_engine *e = engine(true, 32, 128u << 20, NULL, 0);
    ph_picture *pics[2] = {pic(a), pic(b)};
    conv c = {0};
    msg(&c, 'u', (const char *[]){"@0", "Describe."}, 2, pics);
    result r1 = turn(e, &c);
    msg(&c, 'a', (const char *[]){"Fine."}, 1, pics);
    msg(&c, 'u', (const char *[]){"And this one?", "@1"}, 2, pics);
    result r = turn(e, &c);
    CHECKF(r.r.n_reused >= r1.r.n_prompt, "new picture after the history: reused %d, history %d", r.r.n_reused,
           r1.r.n_prompt);
    CHECKF(r.r.pics_from_kv == 1 && r.r.pics_encoded == 1, "appended picture: kv %d encoded %d", r.r.pics_from_kv,
           r.r.pics_encoded);
    same_as_cold(&c, &r, "picture appended after history");
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);
    ph_engine_free(e);
}

static void test_twice_in_one_message(file a) {
    ph_engine *e = engine(true, 32, 128u << 20, NULL, 0);
    ph_picture *pics[2] = {pic(a), pic(a)}; /* the same bytes sent twice */
    conv c = {0};
    msg(&c, 'u', (const char *[]){"@0", "and", "@1", "Same?"}, 4, pics);
    result r = turn(e, &c);
    CHECKF(r.r.pics_encoded == 1 && r.r.pics_from_cache == 1, "same picture twice: encoded %d, cache %d",
           r.r.pics_encoded, r.r.pics_from_cache);
    same_as_cold(&c, &r, "same picture twice in a message");
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);
    ph_engine_free(e);
}

static void test_eviction(file a, file b, file g) {
    /* by count: one entry; A, B, A encodes A twice (the RAM tier is off: a
     * checkpoint of the first conversation would serve the third) */
    ph_engine *e = engine_ram(true, 1, 128u << 20, NULL, 0, 0);
    ph_picture *pics[3] = {pic(a), pic(b), pic(g)};
    for (int k = 0; k < 3; k++) {
        conv c = {0};
        msg(&c, 'u', (const char *[]){k == 1 ? "@1" : "@0", k == 2 ? "Again (new conversation)." : "Describe."}, 2,
            pics);
        turn(e, &c);
    }
    ph_engine_stats st;
    ph_engine_get_stats(e, &st);
    CHECKF(st.pictures_encoded == 3 && st.picture_cache_evictions == 2, "count bound 1: encoded %llu, evictions %llu",
           (unsigned long long)st.pictures_encoded, (unsigned long long)st.picture_cache_evictions);
    ph_engine_free(e);
    /* by bytes: room for either picture's rows but not for both */
    e = engine_ram(true, 32, 20000, NULL, 0, 0);
    for (int k = 0; k < 3; k++) {
        conv c = {0};
        msg(&c, 'u', (const char *[]){k == 1 ? "@1" : "@2", k == 2 ? "Again." : "Describe."}, 2, pics);
        turn(e, &c);
    }
    ph_engine_get_stats(e, &st);
    CHECKF(st.picture_cache_bytes <= 20000, "byte bound: %llu bytes held",
           (unsigned long long)st.picture_cache_bytes);
    CHECKF(st.pictures_encoded == 3 && st.picture_cache_evictions >= 1, "byte bound: encoded %llu, evictions %llu",
           (unsigned long long)st.pictures_encoded, (unsigned long long)st.picture_cache_evictions);
    for (int k = 0; k < 3; k++) ph_picture_free(pics[k]);
    ph_engine_free(e);
}

static void test_elastic(file a, file b) {
    ph_engine *e = engine(true, 32, 128u << 20, NULL, 0.2);
    ph_picture *pics[2] = {pic(a), pic(b)};
    ph_engine_stats st;
    ph_engine_get_stats(e, &st);
    CHECK(!st.encoder_loaded);
    conv c = {0};
    msg(&c, 'u', (const char *[]){"@0", "Describe."}, 2, pics);
    result r = turn(e, &c);
    CHECK(r.r.encoder_loaded && r.r.pics_encoded == 1);
    usleep(300000);
    ph_engine_tick(e);
    ph_engine_get_stats(e, &st);
    CHECKF(!st.encoder_loaded && st.encoder_unloads == 1 && st.encoder_loads == 1,
           "after idle: loaded %d loads %llu unloads %llu", st.encoder_loaded, (unsigned long long)st.encoder_loads,
           (unsigned long long)st.encoder_unloads);
    /* a new conversation with the cached picture: the encoder stays unloaded */
    conv c2 = {0};
    msg(&c2, 'u', (const char *[]){"Another chat.", "@0"}, 2, pics);
    r = turn(e, &c2);
    ph_engine_get_stats(e, &st);
    CHECKF(!r.r.encoder_loaded && st.encoder_loads == 1 && r.r.pics_from_cache == 1 && !st.encoder_loaded,
           "all pictures cached: loads %llu", (unsigned long long)st.encoder_loads);
    same_as_cold(&c2, &r, "cached picture, encoder unloaded");
    /* one new picture: loaded once */
    msg(&c2, 'a', (const char *[]){"Yes."}, 1, pics);
    msg(&c2, 'u', (const char *[]){"@1", "@0", "Compare."}, 3, pics);
    r = turn(e, &c2);
    ph_engine_get_stats(e, &st);
    CHECKF(r.r.encoder_loaded && st.encoder_loads == 2 && r.r.pics_encoded == 1,
           "one new picture: loads %llu encoded %d", (unsigned long long)st.encoder_loads, r.r.pics_encoded);
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);
    ph_engine_free(e);
}

/* A conversation about picture p: the first question, then k-1 more turns
 * with a fixed answer in between. */
static void chat_about(conv *c, ph_picture **pics, int p, int k) {
    memset(c, 0, sizeof *c);
    msg(c, 'u', (const char *[]){p ? "@1" : "@0", "What is in this picture?"}, 2, pics);
    for (int i = 1; i < k; i++) {
        msg(c, 'a', (const char *[]){"It is a picture."}, 1, pics);
        msg(c, 'u', (const char *[]){i == 1 ? "And the colours?" : "Tell me more."}, 1, pics);
    }
}

/* DESIGN 7: two conversations interleaved (A1 B1 A2 B2). Each displaces
 * the other from the live state; the RAM tier brings it back, so A2 and B2
 * evaluate only their new tokens and encode nothing. */
static void test_interleaved(file a, file b) {
    ph_engine *e = engine(true, 32, 128u << 20, NULL, 0);
    ph_picture *pics[2] = {pic(a), pic(b)};
    conv a1, b1, a2, b2;
    chat_about(&a1, pics, 0, 1);
    chat_about(&b1, pics, 1, 1);
    chat_about(&a2, pics, 0, 2);
    chat_about(&b2, pics, 1, 2);
    result ra1 = turn(e, &a1), rb1 = turn(e, &b1);
    CHECKF(rb1.r.n_from_ram == 0 && rb1.r.pics_encoded == 1, "B1: from ram %d, encoded %d", rb1.r.n_from_ram,
           rb1.r.pics_encoded);
    ph_engine_stats st;
    ph_engine_get_stats(e, &st);
    CHECKF(st.ram_cache_saves == 1 && st.ram_cache_entries == 1 && st.ram_cache_bytes > 0,
           "B1 displaced A: saves %llu entries %llu", (unsigned long long)st.ram_cache_saves,
           (unsigned long long)st.ram_cache_entries);
    result ra2 = turn(e, &a2);
    CHECKF(ra2.r.n_from_ram >= ra1.r.n_prompt && ra2.r.n_reused == ra2.r.n_from_ram,
           "A2 resumes A1 from RAM: from ram %d, reused %d, A1's prompt %d", ra2.r.n_from_ram, ra2.r.n_reused,
           ra1.r.n_prompt);
    CHECKF(ra2.r.pics_from_kv == 1 && ra2.r.pics_encoded == 0 && ra2.r.pics_from_cache == 0,
           "A2's picture: kv %d encoded %d cache %d", ra2.r.pics_from_kv, ra2.r.pics_encoded, ra2.r.pics_from_cache);
    CHECKF(ra2.r.n_prefilled == ra2.r.n_prompt - ra1.r.n_prompt, "A2 prefilled %d rows, its new ones are %d",
           ra2.r.n_prefilled, ra2.r.n_prompt - ra1.r.n_prompt);
    same_as_cold(&a2, &ra2, "interleaved A2 (from a RAM checkpoint)");
    result rb2 = turn(e, &b2);
    CHECKF(rb2.r.n_from_ram >= rb1.r.n_prompt && rb2.r.pics_from_kv == 1 && rb2.r.pics_encoded == 0,
           "B2 resumes B1 from RAM: from ram %d, B1's prompt %d, kv %d, encoded %d", rb2.r.n_from_ram, rb1.r.n_prompt,
           rb2.r.pics_from_kv, rb2.r.pics_encoded);
    same_as_cold(&b2, &rb2, "interleaved B2 (from a RAM checkpoint)");
    ph_engine_get_stats(e, &st);
    CHECKF(st.ram_cache_hits == 2 && st.pictures_encoded == 2, "ram hits %llu, encoded %llu",
           (unsigned long long)st.ram_cache_hits, (unsigned long long)st.pictures_encoded);
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);
    ph_engine_free(e);
}

/* A checkpoint never serves another picture: conversation X with picture 1
 * is displaced, then the same text with picture 2 (same size, same place)
 * reuses only the rows before the picture. */
static void test_ram_other_picture(void) {
    file p1 = make_png(64, 64, 3), p2 = make_png(64, 64, 4);
    ph_engine *e = engine(true, 32, 128u << 20, NULL, 0);
    ph_picture *pics[2] = {pic(p1), pic(p2)};
    conv x = {0}, y = {0}, z = {0};
    msg(&x, 'u', (const char *[]){"Look:", "@0", "What is it?"}, 3, pics);
    msg(&y, 'u', (const char *[]){"Something else entirely."}, 1, pics);
    msg(&z, 'u', (const char *[]){"Look:", "@1", "What is it?"}, 3, pics);
    turn(e, &x);
    turn(e, &y);
    result r = turn(e, &z);
    int32_t before = count_tokens(e, "<|im_start|>user\nLook:<|vision_start|>");
    CHECKF(r.r.n_reused == before && r.r.pics_from_kv == 0 && r.r.pics_encoded == 1,
           "other picture after a checkpoint: reused %d (the %d before it), kv %d, encoded %d", r.r.n_reused, before,
           r.r.pics_from_kv, r.r.pics_encoded);
    same_as_cold(&z, &r, "checkpoint of another picture");
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);
    ph_engine_free(e);
    free(p1.p);
    free(p2.p);
}

/* The RAM tier's byte budget: the least recently used checkpoint goes;
 * with no budget nothing is kept. */
static void test_ram_budget(file a, file b, file g) {
    ph_engine *e = engine(true, 32, 128u << 20, NULL, 0);
    ph_picture *pics[3] = {pic(a), pic(b), pic(g)};
    conv a1, b1, a2, b2, c1;
    chat_about(&a1, pics, 0, 1);
    chat_about(&b1, pics, 1, 1);
    turn(e, &a1);
    turn(e, &b1);
    ph_engine_stats st;
    ph_engine_get_stats(e, &st);
    const uint64_t one = st.ram_cache_bytes; /* A1's checkpoint */
    for (int k = 0; k < 3; k++) ph_picture_free(pics[k]);
    ph_engine_free(e);
    /* room for one checkpoint (B1's, with the third picture, is about as big) */
    e = engine_ram(true, 32, 128u << 20, NULL, 0, one * 3 / 2);
    for (int k = 0; k < 3; k++) pics[k] = pic(k == 0 ? a : k == 1 ? b : g);
    chat_about(&a1, pics, 0, 1);
    chat_about(&b1, pics, 1, 1);
    chat_about(&a2, pics, 0, 2);
    chat_about(&b2, pics, 1, 2);
    memset(&c1, 0, sizeof c1);
    msg(&c1, 'u', (const char *[]){"@2", "What is in this picture?"}, 2, pics);
    turn(e, &a1);
    result rb1 = turn(e, &b1); /* parks A1 */
    turn(e, &c1);              /* parks B1, which pushes A1 out */
    ph_engine_get_stats(e, &st);
    CHECKF(st.ram_cache_entries == 1 && st.ram_cache_evictions == 1 && st.ram_cache_bytes <= one * 3 / 2,
           "budget for one: entries %llu, evictions %llu, bytes %llu", (unsigned long long)st.ram_cache_entries,
           (unsigned long long)st.ram_cache_evictions, (unsigned long long)st.ram_cache_bytes);
    result r = turn(e, &b2);
    CHECKF(r.r.n_from_ram >= rb1.r.n_prompt, "B2 resumes from RAM: %d of %d", r.r.n_from_ram, rb1.r.n_prompt);
    r = turn(e, &a2);
    CHECKF(r.r.n_from_ram == 0 && r.r.pics_from_kv == 0 && r.r.pics_from_cache == 1,
           "A2 after its checkpoint was evicted: from ram %d, kv %d, cache %d", r.r.n_from_ram, r.r.pics_from_kv,
           r.r.pics_from_cache);
    same_as_cold(&a2, &r, "evicted checkpoint, prefilled again");
    for (int k = 0; k < 3; k++) ph_picture_free(pics[k]);
    ph_engine_free(e);
    /* no budget: nothing is saved */
    e = engine_ram(true, 32, 128u << 20, NULL, 0, 0);
    pics[0] = pic(a), pics[1] = pic(b);
    chat_about(&a1, pics, 0, 1);
    chat_about(&b1, pics, 1, 1);
    chat_about(&a2, pics, 0, 2);
    turn(e, &a1);
    turn(e, &b1);
    r = turn(e, &a2);
    ph_engine_get_stats(e, &st);
    CHECKF(st.ram_cache_saves == 0 && r.r.n_from_ram == 0 && r.n > 0, "--cache-ram-mib 0: saves %llu",
           (unsigned long long)st.ram_cache_saves);
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);
    ph_engine_free(e);
}

/* DESIGN 7, auxiliary requests, with several slots: an agent's side calls
 * between two turns of its main conversation run in other slots, so the
 * main conversation stays live in its own (nothing parked, nothing
 * evicted) and its next turn reuses all of it. The RAM tier is off. */
static void test_auxiliary_slots(file a, file b) {
    ph_engine *e = engine_ram(true, 32, 128u << 20, NULL, 0, 0);
    ph_picture *pics[2] = {pic(a), pic(b)};
    conv p1, p2, x1 = {0}, x2 = {0};
    chat_about(&p1, pics, 0, 1);
    chat_about(&p2, pics, 0, 2);
    msg(&x1, 's', (const char *[]){"You write titles."}, 1, pics);
    msg(&x1, 'u', (const char *[]){"A title for a chat about a picture."}, 1, pics);
    msg(&x2, 'u', (const char *[]){"Summarize:", "@1"}, 2, pics);
    result rp1 = turn(e, &p1);
    result r = turn_as(e, &x1, true);
    CHECKF(!r.r.parked && r.n > 0, "a side call beside the main conversation's slot: parked %d", r.r.parked);
    r = turn_as(e, &x2, true);
    CHECK(!r.r.parked && r.r.pics_encoded == 1);
    result rp2 = turn(e, &p2);
    CHECKF(!rp2.r.from_parked && rp2.r.n_reused >= rp1.r.n_prompt && rp2.r.n_from_ram == 0 &&
               rp2.r.pics_from_kv == 1 && rp2.r.pics_encoded == 0,
           "the main conversation after two side calls: %d rows reused of P1's %d (%d from RAM), picture from the KV "
           "%d",
           rp2.r.n_reused, rp1.r.n_prompt, rp2.r.n_from_ram, rp2.r.pics_from_kv);
    same_as_cold(&p2, &rp2, "main conversation after 2 side calls in other slots");
    ph_engine_stats st;
    ph_engine_get_stats(e, &st);
    CHECKF(st.conversations_parked == 0, "parked %llu", (unsigned long long)st.conversations_parked);
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);
    ph_engine_free(e);
}

/* DESIGN 7, auxiliary requests, with one slot (--parallel 1): an agent's
 * side calls between two turns of its main conversation. The first parks
 * the main conversation; the others never displace it; the next main turn
 * restores it. The RAM tier is off here, so only the parked slot can bring
 * it back. */
static void test_auxiliary(file a, file b) {
    ph_engine *e = engine_ram(true, 32, 128u << 20, NULL, 0, 0);
    ph_picture *pics[2] = {pic(a), pic(b)};
    conv p1, p2, x1 = {0}, x2 = {0}, x3 = {0}, q1 = {0};
    chat_about(&p1, pics, 0, 1);
    chat_about(&p2, pics, 0, 2);
    msg(&x1, 's', (const char *[]){"You write titles."}, 1, pics);
    msg(&x1, 'u', (const char *[]){"A title for a chat about a picture."}, 1, pics);
    msg(&x2, 'u', (const char *[]){"Is this safe to run: ls -la?"}, 1, pics);
    msg(&x3, 'u', (const char *[]){"Summarize:", "@1"}, 2, pics);
    msg(&q1, 's', (const char *[]){"You write titles."}, 1, pics);
    msg(&q1, 'u', (const char *[]){"A new main conversation, more like the side call than the parked one."}, 1, pics);
    result rp1 = turn(e, &p1);
    result r = turn_as(e, &x1, true);
    CHECKF(r.r.parked && !r.r.from_parked, "the first side call parks the conversation: parked %d", r.r.parked);
    r = turn_as(e, &x2, true);
    CHECK(!r.r.parked && r.n > 0);
    r = turn_as(e, &x3, true);
    CHECK(!r.r.parked && r.r.pics_encoded == 1);
    result rp2 = turn(e, &p2);
    CHECKF(rp2.r.from_parked && rp2.r.n_from_ram >= rp1.r.n_prompt && rp2.r.n_reused == rp2.r.n_from_ram,
           "the main conversation comes back: parked %d, %d rows of P1's %d", rp2.r.from_parked, rp2.r.n_from_ram,
           rp1.r.n_prompt);
    CHECKF(rp2.r.pics_from_kv == 1 && rp2.r.pics_encoded == 0 && rp2.r.pics_from_cache == 0,
           "P2's picture: kv %d encoded %d cache %d", rp2.r.pics_from_kv, rp2.r.pics_encoded, rp2.r.pics_from_cache);
    same_as_cold(&p2, &rp2, "main conversation after 3 side calls");
    ph_engine_stats st;
    ph_engine_get_stats(e, &st);
    CHECKF(st.conversations_parked == 1 && st.conversations_restored == 1 && st.conversations_dropped == 0 &&
               st.ram_cache_saves == 0,
           "parked %llu restored %llu dropped %llu", (unsigned long long)st.conversations_parked,
           (unsigned long long)st.conversations_restored, (unsigned long long)st.conversations_dropped);
    /* a side call, then a main request that is another conversation, closer
     * to the side call than to the parked one: the parked one is dropped */
    turn_as(e, &x1, true);
    r = turn(e, &q1);
    ph_engine_get_stats(e, &st);
    CHECKF(!r.r.from_parked && st.conversations_parked == 2 && st.conversations_dropped == 1,
           "parked %llu dropped %llu", (unsigned long long)st.conversations_parked,
           (unsigned long long)st.conversations_dropped);
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);
    ph_engine_free(e);
    /* the same calls without the flag, with the RAM tier off: the main
     * conversation is read again */
    e = engine_ram(true, 32, 128u << 20, NULL, 0, 0);
    pics[0] = pic(a), pics[1] = pic(b);
    chat_about(&p1, pics, 0, 1);
    chat_about(&p2, pics, 0, 2);
    turn(e, &p1);
    turn(e, &x1);
    r = turn(e, &p2);
    CHECKF(r.r.n_from_ram == 0 && r.r.pics_from_kv == 0, "without the flag: from ram %d", r.r.n_from_ram);
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);
    ph_engine_free(e);
}

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (de->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

static void test_disk(file a) {
    char dir[] = "/tmp/ph-embd-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    ph_engine *e = engine(true, 32, 128u << 20, dir, 0);
    ph_picture *im = pic(a);
    ph_picture *pics[1] = {im};
    conv c = {0};
    msg(&c, 'u', (const char *[]){"@0", "Describe."}, 2, pics);
    result r = turn(e, &c);
    CHECK(r.r.pics_encoded == 1);
    ph_picture_free(im);
    ph_engine_free(e);
    CHECKF(count_files(dir) == 1, "%d files in the cache folder", count_files(dir));
    /* a restart: the picture comes from disk */
    e = engine(true, 32, 128u << 20, dir, 0);
    c.parts[0].picture = im = pic(a);
    r = turn(e, &c);
    CHECKF(r.r.pics_encoded == 0 && r.r.pics_from_cache == 1, "after a restart: encoded %d, cache %d",
           r.r.pics_encoded, r.r.pics_from_cache);
    same_as_cold(&c, &r, "embedding from disk after restart");
    ph_picture_free(im);
    ph_engine_free(e);
    /* a damaged entry is refused, removed, and the picture encoded again */
    DIR *d = opendir(dir);
    struct dirent *de;
    char path[512] = "";
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    closedir(d);
    struct stat sb;
    stat(path, &sb);
    CHECK(truncate(path, sb.st_size / 2) == 0);
    e = engine(true, 32, 128u << 20, dir, 0);
    c.parts[0].picture = im = pic(a);
    r = turn(e, &c);
    CHECKF(r.r.pics_encoded == 1 && r.r.pics_from_cache == 0, "truncated entry: encoded %d, cache %d",
           r.r.pics_encoded, r.r.pics_from_cache);
    same_as_cold(&c, &r, "truncated cache file refused");
    ph_picture_free(im);
    ph_engine_free(e);
    /* the re-encoded entry was written again; corrupt one byte of its rows */
    CHECK(t_flip_byte_from_end(path, 5) == 0);
    e = engine(true, 32, 128u << 20, dir, 0);
    c.parts[0].picture = im = pic(a);
    r = turn(e, &c);
    CHECKF(r.r.pics_encoded == 1, "corrupted entry: encoded %d", r.r.pics_encoded);
    ph_picture_free(im);
    ph_engine_free(e);
    unlink(path);
    rmdir(dir);
}

static ph_engine *engine_kv(const char *model, const char *dir) {
    ph_engine_params p = params(model);
    p.picture_cache_entries = 0; /* pictures come from the checkpoint or the encoder */
    p.kv_disk_dir = dir;
    ph_err err = {0};
    ph_engine *e = ph_engine_new(&p, &err);
    if (!e) fprintf(stderr, "engine: %s\n", err.msg);
    return e;
}

/* A copy of the model file with another name inside (another model_id,
 * the same shapes). */
static void other_model_file(const char *to) {
    file f = read_file(LLM);
    uint8_t *p = memmem(f.p, f.n, "general.name", 12);
    CHECK(p != NULL);
    if (p) p[12 + 4 + 8] ^= 0x20; /* the first letter of its value (after type and length) */
    FILE *o = fopen(to, "wb");
    CHECK(o && fwrite(f.p, 1, f.n, o) == f.n);
    if (o) fclose(o);
    free(f.p);
}

/* The disk tier through the engine: a conversation resumes from a
 * checkpoint file after a restart, nothing encoded, only its new rows
 * evaluated, the same answer as a cold engine; never past another picture,
 * never for another model. */
static void test_kv_disk(void) {
    char dir[] = "/tmp/ph-kv-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    file p1 = make_png(96, 64, 1), p2 = make_png(96, 64, 2);
    ph_engine *e = engine_kv(LLM, dir);
    ph_picture *pics[2] = {pic(p1), pic(p2)};
    conv c = {0};
    msg(&c, 's', (const char *[]){"You are a careful assistant who describes pictures in detail."}, 1, pics);
    msg(&c, 'u', (const char *[]){"Here is my photo:", "@0", "What is in this picture?"}, 3, pics);
    result r1 = turn(e, &c);
    CHECK(r1.r.pics_encoded == 1 && r1.r.n_from_disk == 0);
    msg(&c, 'a', (const char *[]){"It is a picture."}, 1, pics);
    msg(&c, 'u', (const char *[]){"Tell me more."}, 1, pics);
    result r2 = turn(e, &c);
    CHECK(r2.r.pics_encoded == 0 && r2.r.n_from_disk == 0);
    ph_engine_free(e); /* a clean shutdown */
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);

    e = engine_kv(LLM, dir);
    c.parts[2].picture = pics[0] = pic(p1);
    pics[1] = pic(p2);
    msg(&c, 'a', (const char *[]){"It has colours."}, 1, pics);
    msg(&c, 'u', (const char *[]){"And the colours?"}, 1, pics);
    result r3 = turn(e, &c);
    CHECKF(r3.r.n_from_disk >= r2.r.n_prompt && r3.r.pics_encoded == 0 && r3.r.pics_from_kv == 1,
           "after a restart: %d rows from disk (turn 2's prompt had %d), %d encoded", r3.r.n_from_disk, r2.r.n_prompt,
           r3.r.pics_encoded);
    CHECKF(r3.r.n_prefilled == r3.r.n_prompt - r3.r.n_from_disk, "prefilled %d of %d, %d from disk", r3.r.n_prefilled,
           r3.r.n_prompt, r3.r.n_from_disk);
    same_as_cold(&c, &r3, "turn 3 from disk after a restart");
    ph_engine_stats st;
    ph_engine_get_stats(e, &st);
    CHECK(st.disk_cache_hits == 1 && st.disk_cache_tokens_restored == (uint64_t)r3.r.n_from_disk);
    ph_engine_free(e);
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);

    /* another picture of the same size in the same place: nothing past it */
    e = engine_kv(LLM, dir);
    pics[0] = pic(p1);
    pics[1] = pic(p2);
    c.parts[2].picture = pics[1];
    int32_t before = count_tokens(e, "<|im_start|>system\nYou are a careful assistant who describes pictures in "
                                     "detail.<|im_end|>\n<|im_start|>user\nHere is my photo:<|vision_start|>");
    result r4 = turn(e, &c);
    CHECKF(r4.r.n_from_disk <= before && r4.r.pics_encoded == 1,
           "other picture: %d rows from disk (%d before it), "
           "%d encoded",
           r4.r.n_from_disk, before, r4.r.pics_encoded);
    same_as_cold(&c, &r4, "other picture after a restart");
    ph_engine_free(e);
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);

    /* the picture gone from the conversation */
    e = engine_kv(LLM, dir);
    conv g = {0};
    msg(&g, 's', (const char *[]){"You are a careful assistant who describes pictures in detail."}, 1, pics);
    msg(&g, 'u', (const char *[]){"Here is my photo:", "What is in this picture?"}, 2, pics);
    msg(&g, 'a', (const char *[]){"It is a picture."}, 1, pics);
    msg(&g, 'u', (const char *[]){"Tell me more."}, 1, pics);
    result r6 = turn(e, &g);
    CHECKF(r6.r.n_from_disk <= before, "picture gone: %d rows from disk", r6.r.n_from_disk);
    same_as_cold(&g, &r6, "picture gone after a restart");
    ph_engine_free(e);

    /* the picture moved to a later message: the files above share its text, never its picture */
    e = engine_kv(LLM, dir);
    pics[0] = pic(p1);
    conv m = {0};
    msg(&m, 's', (const char *[]){"You are a careful assistant who describes pictures in detail."}, 1, pics);
    msg(&m, 'u', (const char *[]){"Here is my photo:", "What is in this picture?"}, 2, pics);
    msg(&m, 'a', (const char *[]){"It is a picture."}, 1, pics);
    msg(&m, 'u', (const char *[]){"@0", "Tell me more."}, 2, pics);
    result r5 = turn(e, &m);
    CHECKF(r5.r.pics_from_kv == 0 && r5.r.pics_encoded == 1,
           "picture moved: %d rows from disk, %d pictures with them, "
           "%d encoded",
           r5.r.n_from_disk, r5.r.pics_from_kv, r5.r.pics_encoded);
    same_as_cold(&m, &r5, "picture moved after a restart");
    ph_engine_free(e);
    ph_picture_free(pics[0]);

    /* text only, and another model file with the same shapes */
    e = engine_kv(LLM, dir);
    conv t = {0};
    msg(&t, 's',
        (const char *[]){"You are a storyteller. Your stories are long, calm and full of small details "
                         "about the sea, the weather, the light and the animals that live by the shore."},
        1, pics);
    msg(&t, 'u',
        (const char *[]){"Please write a long story about a lighthouse keeper who finds a message in a "
                         "bottle, with many details about the sea, the weather and the keeper's cat. The "
                         "story should take place over one whole winter, from the first storm to the "
                         "first warm day of spring."},
        1, pics);
    result t1 = turn(e, &t);
    msg(&t, 'a', (const char *[]){"Once upon a time."}, 1, pics);
    msg(&t, 'u', (const char *[]){"Go on."}, 1, pics);
    ph_engine_free(e);
    char other[sizeof dir + 16];
    snprintf(other, sizeof other, "%s.gguf", dir);
    other_model_file(other);
    e = engine_kv(other, dir);
    result t2 = turn(e, &t);
    CHECKF(t2.r.n_from_disk == 0, "another model file: %d rows from disk", t2.r.n_from_disk);
    ph_engine_free(e);
    e = engine_kv(LLM, dir);
    t2 = turn(e, &t);
    CHECKF(t1.r.n_prompt > 64 && t2.r.n_from_disk >= t1.r.n_prompt, "text only: %d rows from disk of %d",
           t2.r.n_from_disk, t1.r.n_prompt);
    same_as_cold(&t, &t2, "text-only conversation from disk");
    ph_engine_free(e);
    unlink(other);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    free(p1.p);
    free(p2.p);
}

/* Isolation domains: a request of another domain reuses nothing of the
 * live state, the RAM tier, a parked conversation, the embedding cache or
 * a checkpoint file (its picture is encoded again) and answers as a cold
 * engine does; the requests of one domain reuse as before, a restart
 * included. */
/* Bytes of the block store's segment files under dir (append-only: with
 * nothing evicted or compacted, what was written there). */
static uint64_t segment_bytes(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/blocks", dir);
    DIR *d = opendir(path);
    uint64_t n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strncmp(de->d_name, "seg-", 4) != 0) continue;
        struct stat sb;
        snprintf(path, sizeof path, "%s/blocks/%s", dir, de->d_name);
        if (stat(path, &sb) == 0) n += (uint64_t)sb.st_size;
    }
    if (d) closedir(d);
    return n;
}

/* A 20-turn picture conversation with the disk tier, the engine restarted
 * before every turn, each answer sent back as the client got it: each turn
 * resumes from disk (the picture not encoded again, the rows of the
 * previous prompt from disk) with a cold run's answer, and the folder took
 * at most 1.3x the final conversation's KV in writes (each row once, with
 * the records' headers and provenance). */
static void test_kv_disk_every_turn(void) {
    char dir[] = "/tmp/ph-kv-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    file f = make_png(96, 64, 3);
    conv c = {0};
    msg(&c, 's', (const char *[]){"You are a careful assistant who describes pictures in detail."}, 1, NULL);
    ph_picture *pics[1] = {NULL};
    msg(&c, 'u', (const char *[]){"@0", "What is in this picture?"}, 2, pics);
    ph_chat_part *slot = &c.parts[1];
    int32_t prev_prompt = 0, rows = 0;
    uint64_t row_bytes = 0;
    int bad = 0;
    char text[20][2][256];
    for (int t = 0; t < 20; t++) {
        if (t > 0) {
            snprintf(text[t][1], sizeof text[t][1], "What about the part at step %d?", t);
            msg(&c, 'a', (const char *[]){text[t][0]}, 1, NULL);
            msg(&c, 'u', (const char *[]){text[t][1]}, 1, NULL);
        }
        ph_engine *e = engine_kv(LLM, dir); /* a restart before every turn */
        slot->picture = pic(f);
        result r = turn(e, &c);
        if (t > 0 && (r.r.n_from_disk < prev_prompt || r.r.pics_encoded != 0)) {
            CHECKF(0, "turn %d after a restart: %d rows from disk (the previous prompt had %d), %d encoded", t + 1,
                   r.r.n_from_disk, prev_prompt, r.r.pics_encoded);
            bad++;
        }
        char what[64];
        snprintf(what, sizeof what, "disk, restarted, turn %d", t + 1);
        same_as_cold(&c, &r, what);
        ph_engine_stats st;
        ph_engine_get_stats(e, &st);
        row_bytes = st.kv_block_bytes / 64;
        if (t < 19) memcpy(text[t + 1][0], r.text, r.text_len + 1); /* the answer, sent back next turn */
        prev_prompt = r.r.n_prompt;
        rows = r.r.n_prompt;
        ph_engine_free(e); /* a clean shutdown: the writes done */
        ph_picture_free(slot->picture);
        slot->picture = NULL;
    }
    const uint64_t kv = (uint64_t)rows * row_bytes, written = segment_bytes(dir);
    CHECKF(bad == 0 && written > 0 && written <= kv * 13 / 10,
           "20 turns wrote %llu bytes for a final KV of %llu (%d rows)", (unsigned long long)written,
           (unsigned long long)kv, rows);
    printf("  disk: 20 turns, restarted before each: %llu bytes written for a final KV of %llu (%.3fx)\n",
           (unsigned long long)written, (unsigned long long)kv, kv ? (double)written / (double)kv : 0.0);
    free(f.p);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
}

static void test_domains(file a) {
    uint8_t dom_b[32], dom_c[32];
    memset(dom_b, 0xb, sizeof dom_b);
    memset(dom_c, 0xc, sizeof dom_c);
    char dir[] = "/tmp/ph-dom-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    ph_engine_params p = params(LLM);
    p.ram_cache_bytes = RAM_ON;
    p.kv_disk_dir = dir;
    p.picture_cache_dir = dir;
    ph_err err = {0};
    ph_engine *e = ph_engine_new(&p, &err);
    CHECKF(e != NULL, "engine: %s", err.msg);
    ph_picture *pa[1] = {pic(a)}, *pb[1] = {pic(a)};
    const char *const q[] = {"@0", "What is in this picture? Tell me everything you see."};
    conv ca = {0}, cb = {0};
    msg(&ca, 'u', q, 2, pa);
    msg(&cb, 'u', q, 2, pb);
    result r = turn(e, &ca);
    CHECK(r.r.pics_encoded == 1);
    r = turn_in(e, &cb, false, dom_b);
    CHECKF(r.r.n_reused == 0 && r.r.pics_encoded == 1 && r.r.pics_from_cache == 0,
           "another domain: reused %d, encoded %d, from the cache %d", r.r.n_reused, r.r.pics_encoded,
           r.r.pics_from_cache);
    same_as_cold(&cb, &r, "the same request in another domain");
    r = turn(e, &ca); /* back from the RAM tier, in its own domain */
    CHECKF(r.r.n_from_ram > 0 && r.r.pics_encoded == 0, "its own domain: %d rows from RAM, encoded %d",
           r.r.n_from_ram, r.r.pics_encoded);
    r = turn_in(e, &ca, true, dom_c); /* an auxiliary request of a third domain parks the default one's... */
    CHECKF(r.r.parked && r.r.n_reused == 0 && r.r.pics_encoded == 1, "auxiliary: parked %d, reused %d, encoded %d",
           r.r.parked, r.r.n_reused, r.r.pics_encoded);
    r = turn_in(e, &ca, false, dom_c); /* ...which a primary request of that domain does not restore */
    CHECKF(!r.r.from_parked && r.r.n_from_ram == 0, "parked: restored %d, %d rows from RAM", r.r.from_parked,
           r.r.n_from_ram);
    ph_engine_free(e); /* a clean shutdown: the live state is saved too */
    ph_picture_free(pa[0]);
    ph_picture_free(pb[0]);
    /* a restart: the checkpoint files and embeddings are found again by their own domain only */
    e = ph_engine_new(&p, &err);
    CHECKF(e != NULL, "engine: %s", err.msg);
    uint8_t dom_d[32];
    memset(dom_d, 0xd, sizeof dom_d);
    cb.parts[0].picture = pb[0] = pic(a);
    r = turn_in(e, &cb, false, dom_d);
    CHECKF(r.r.n_from_disk == 0 && r.r.pics_encoded == 1,
           "a fourth domain after a restart: %d rows from disk, "
           "encoded %d",
           r.r.n_from_disk, r.r.pics_encoded);
    ph_picture_free(pb[0]);
    cb.parts[0].picture = pb[0] = pic(a);
    r = turn_in(e, &cb, false, dom_b);
    CHECKF(r.r.n_from_disk > 0 && r.r.pics_encoded == 0,
           "its own domain after a restart: %d rows from disk, "
           "encoded %d",
           r.r.n_from_disk, r.r.pics_encoded);
    same_as_cold(&cb, &r, "a domain's checkpoint after a restart");
    ph_engine_free(e);
    ph_picture_free(pb[0]);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* DESIGN 6.1 at the level of sequences: a prefix never ends inside a span. */
static void test_back_off(void) {
    seq_state a, b;
    seq_init(&a, 64, NULL);
    seq_init(&b, 64, NULL);
    seq_span sp = {.n_tokens = 12, .grid_x = 4, .grid_y = 3, .n_pos = 4};
    memset(sp.embed_key, 7, 32);
    for (int i = 0; i < 5; i++) {
        seq_push_token(&a, 100 + i, i, NULL);
        seq_push_token(&b, 100 + i, i, NULL);
    }
    seq_push_span(&a, &sp, 5, NULL);
    seq_push_span(&b, &sp, 5, NULL);
    seq_push_token(&a, 1, 9, NULL);
    seq_push_token(&b, 1, 9, NULL);
    CHECK(seq_common_prefix(&a, &b) == 18);
    /* b's state ends inside the picture (a span cut by the frontier) */
    b.n_rows = 11;
    CHECKF(seq_common_prefix(&a, &b) == 5, "cut span: prefix %d, expected the span's start 5",
           seq_common_prefix(&a, &b));
    CHECK(!seq_complete(&b, 11));
    /* a span with another key at the same place */
    b.n_rows = 18;
    b.spans[0].embed_key[0] = 8;
    CHECK(seq_common_prefix(&a, &b) == 5);
    /* same key but another grid */
    b.spans[0].embed_key[0] = 7;
    b.spans[0].grid_x = 3;
    b.spans[0].grid_y = 4;
    CHECK(seq_common_prefix(&a, &b) == 5);
    CHECK(seq_back_off(&a, 9) == 5 && seq_back_off(&a, 17) == 17 && seq_back_off(&a, 5) == 5);
    CHECK(seq_pos_at(&a, 17) == 9 && seq_pos_at(&a, 18) == 10);
    seq_free(&a);
    seq_free(&b);
}

/* A picture as received is its header only (DESIGN 8): a file whose
 * pixels are damaged is taken, counted from its header, and refused by the
 * turn that decodes it; the engine goes on. */
static void test_header_only(file good) {
    ph_engine *e = engine(true, 32, 128u << 20, NULL, 0);
    file bad = read_file(PH_TEST_DATA "/images_bad/png_bad_data.png");
    ph_err err = {0};
    ph_picture *pics[2] = {ph_picture_new(bad.p, bad.n, "picture 1", &err), pic(good)};
    CHECKF(pics[0] && pics[1], "a damaged picture with a sound header: %s", err.msg);
    if (!pics[0] || !pics[1]) goto out;
    conv c = {0};
    msg(&c, 'u', (const char *[]){"@0", "Describe."}, 2, pics);
    ph_gen_params g;
    ph_gen_params_default(&g);
    int32_t rows = 0, text = count_tokens(e, "<|im_start|>user\n<|vision_start|><|vision_end|>Describe.<|im_end|>\n"
                                             "<|im_start|>assistant\n");
    CHECKF(ph_engine_count(e, c.msgs, c.n_msgs, &g, &rows, &err) == 0 && ph_engine_picture_rows(e, pics[0]) > 0 &&
               rows == text + ph_engine_picture_rows(e, pics[0]),
           "counted without decoding: %d rows, %d of text and %d of the picture (%s)", rows, text,
           ph_engine_picture_rows(e, pics[0]), err.msg);
    ph_turn_report rep;
    err = (ph_err){0};
    CHECKF(ph_engine_chat(e, c.msgs, c.n_msgs, &g, NULL, NULL, &rep, &err) == -1 && err.code == PH_ERR_INPUT &&
               strstr(err.msg, "picture 1: PNG is corrupt"),
           "the turn that decodes it: '%s' (code %d)", err.msg, err.code);
    c.parts[0].picture = pics[1];
    result r = turn(e, &c);
    CHECKF(r.n > 0 && r.r.pics_encoded == 1, "the next turn: %d tokens, %d encoded", r.n, r.r.pics_encoded);
    same_as_cold(&c, &r, "a picture after a damaged one");
    /* a header that is wrong is refused at once */
    file huge = read_file(PH_TEST_DATA "/images_bad/png_100000x100000.png");
    err = (ph_err){0};
    CHECKF(!ph_picture_new(huge.p, huge.n, "picture 2", &err) && err.code == PH_ERR_INPUT &&
               strstr(err.msg, "picture 2: PNG is 100000x100000"),
           "a wrong header: '%s'", err.msg);
    free(huge.p);
out:
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);
    free(bad.p);
    ph_engine_free(e);
}

/* A model with recurrent layers (qwen35): the live state, a RAM checkpoint
 * or the parked conversation is cut back only to a row after which a
 * snapshot of its recurrent state was taken (a picture's end, the end of a
 * prompt's header, every checkpoint_every rows) or to its end, the nearest
 * one at or before the end of what a request shares with it; a checkpoint
 * file likewise, after a restart. Every warm turn equals a cold one. */
static void test_recurrent(file a, file b) {
    llm = LLM_Q35;
    mmproj = MMPROJ_Q35;
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/ph-q35-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    ph_engine_params p = params(llm);
    p.kv_disk_dir = dir;
    ph_err err = {0};
    ph_engine *e = ph_engine_new(&p, &err);
    CHECKF(e != NULL, "qwen35 engine: %s", err.msg);
    if (!e) goto out;
    ph_picture *pics[2] = {pic(a), pic(b)};
    conv c1, c2, c3, b1, b2, x = {0};
    chat_about(&c1, pics, 0, 1);
    chat_about(&c2, pics, 0, 2);
    chat_about(&b1, pics, 1, 1);
    chat_about(&b2, pics, 1, 2);
    msg(&x, 'u', (const char *[]){"A side question."}, 1, pics);
    /* the prompt's rows after the picture, and the answer's opener (a
     * thinking template's history does not have it) */
    const int32_t tail = count_tokens(e, "<|vision_end|>What is in this picture?<|im_end|>\n"
                                         "<|im_start|>assistant\n<think>\n"),
                  opener = count_tokens(e, "<think>\n");
    result r1 = turn(e, &c1);
    CHECK(r1.n > 0 && r1.r.n_reused == 0);
    const int32_t pic_end = r1.r.n_prompt - tail;
    /* the history re-sent with a new question: from the end of the last
     * prompt, less the opener */
    result r2 = turn(e, &c2);
    CHECKF(r2.r.n_reused == r1.r.n_prompt - opener && r2.r.pics_from_kv == 1 && r2.r.pics_encoded == 0,
           "second turn: %d rows reused, the first prompt has %d (%d of them the opener); picture from kv %d",
           r2.r.n_reused, r1.r.n_prompt, opener, r2.r.pics_from_kv);
    same_as_cold(&c2, &r2, "qwen35: second turn");
    /* the same request again: from the same row of its own prompt */
    result again = turn(e, &c2);
    const int32_t c2_head = r2.r.n_prompt - opener;
    CHECKF(again.r.n_reused == c2_head, "the same request again: %d rows reused of %d", again.r.n_reused,
           again.r.n_prompt);
    same_as_cold(&c2, &again, "qwen35: the same request again");
    /* the question after the picture edited: from the picture's end, not
     * from the end of what the two share (the conversation before the edit
     * goes to the RAM tier) */
    chat_about(&c3, pics, 0, 2);
    c3.parts[1].text = "What is this?";
    c3.parts[1].len = strlen(c3.parts[1].text);
    result r3 = turn(e, &c3);
    CHECKF(r3.r.n_reused == pic_end && r3.r.pics_from_kv == 1 && r3.r.n_prefilled == r3.r.n_prompt - pic_end &&
               r3.r.n_from_ram == 0,
           "edit after the picture: %d rows reused, %d prefilled of %d; the picture ends at row %d", r3.r.n_reused,
           r3.r.n_prefilled, r3.r.n_prompt, pic_end);
    same_as_cold(&c3, &r3, "qwen35: edit after the picture");
    /* back to the first question: from its RAM checkpoint, at the snapshot
     * before its opener (the checkpoint shares one row more) */
    r2 = turn(e, &c2);
    CHECKF(r2.r.n_reused == c2_head && r2.r.n_from_ram == c2_head,
           "back to the first question: %d rows reused, %d "
           "from ram, expected %d",
           r2.r.n_reused, r2.r.n_from_ram, c2_head);
    same_as_cold(&c2, &r2, "qwen35: back from a RAM checkpoint");
    /* a side call: the conversation parked, the side call cold (it shares a
     * few rows, with no snapshot after them); then the conversation back */
    result rx = turn_as(e, &x, true);
    CHECKF(rx.n > 0 && rx.r.parked && rx.r.n_reused == 0 && rx.r.n_prefilled == rx.r.n_prompt,
           "side call: parked %d, %d rows reused", rx.r.parked, rx.r.n_reused);
    same_as_cold(&x, &rx, "qwen35: side call");
    r2 = turn(e, &c2);
    CHECKF(r2.r.n_reused == c2_head && r2.r.from_parked, "after a side call: %d rows reused, from parked %d",
           r2.r.n_reused, r2.r.from_parked);
    same_as_cold(&c2, &r2, "qwen35: after a side call");
    /* two conversations interleaved: each resumes from the RAM tier */
    result rb1 = turn(e, &b1), ra2 = turn(e, &c2), rb2 = turn(e, &b2);
    CHECKF(rb1.r.n_reused == 0 && ra2.r.n_from_ram == c2_head, "A again after B1: %d from ram, expected %d",
           ra2.r.n_from_ram, c2_head);
    CHECKF(rb2.r.n_from_ram == rb1.r.n_prompt - opener && rb2.r.n_reused == rb2.r.n_from_ram &&
               rb2.r.pics_encoded == 0,
           "B2: %d from ram, B1's prompt has %d rows", rb2.r.n_from_ram, rb1.r.n_prompt);
    same_as_cold(&c2, &ra2, "qwen35: interleaved A (from RAM)");
    same_as_cold(&b2, &rb2, "qwen35: interleaved B2 (from RAM)");
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);
    ph_engine_free(e); /* a clean shutdown */
    char blocks[600];
    snprintf(blocks, sizeof blocks, "%s/blocks", dir);
    CHECKF(count_files(blocks) > 1, "%d files in the block store", count_files(blocks)); /* segments, index */
    /* a restart: the first conversation resumes from its file, at the
     * snapshot before its opener */
    e = ph_engine_new(&p, &err);
    CHECKF(e != NULL, "qwen35 engine again: %s", err.msg);
    if (e) {
        pics[0] = pic(a);
        pics[1] = pic(b);
        chat_about(&c2, pics, 0, 2);
        r2 = turn(e, &c2);
        CHECKF(r2.r.n_reused == c2_head && r2.r.n_from_disk == c2_head && r2.r.pics_encoded == 0 &&
                   r2.r.n_prefilled == r2.r.n_prompt - c2_head,
               "after a restart: %d rows reused, %d from disk, expected %d; %d encoded", r2.r.n_reused,
               r2.r.n_from_disk, c2_head, r2.r.pics_encoded);
        same_as_cold(&c2, &r2, "qwen35: from a checkpoint file after a restart");
        ph_engine_stats st;
        ph_engine_get_stats(e, &st);
        CHECKF(st.disk_cache_hits == 1 && st.disk_cache_tokens_restored == (uint64_t)c2_head &&
                   st.disk_cache_rejected == 0,
               "disk stats: %llu hits, %llu rows restored, %llu rejected", (unsigned long long)st.disk_cache_hits,
               (unsigned long long)st.disk_cache_tokens_restored, (unsigned long long)st.disk_cache_rejected);
        ph_picture_free(pics[0]);
        ph_picture_free(pics[1]);
        ph_engine_free(e);
    }
out:;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    llm = LLM;
    mmproj = MMPROJ;
}

/* With recurrent layers, a long prompt has a snapshot every
 * checkpoint_every rows too: an edit late in it resumes at the last such
 * row before the edit, not at the edit. */
static void test_recurrent_every(void) {
    llm = LLM_Q35;
    mmproj = MMPROJ_Q35;
    ph_engine_params p = params(llm);
    p.checkpoint_every = 8;
    ph_err err = {0};
    ph_engine *e = ph_engine_new(&p, &err);
    CHECKF(e != NULL, "qwen35 engine: %s", err.msg);
    if (e) {
        static const char first[] = "one two three four five six seven eight nine ten eleven twelve thirteen "
                                    "fourteen fifteen sixteen seventeen eighteen nineteen";
        char text[sizeof first + 16];
        snprintf(text, sizeof text, "%s twenty", first);
        conv c = {0};
        msg(&c, 'u', (const char *[]){text}, 1, NULL);
        result r1 = turn(e, &c);
        snprintf(text, sizeof text, "%s thirty", first);
        c.parts[0].len = strlen(text);
        result r2 = turn(e, &c);
        char shared[sizeof first + 32];
        snprintf(shared, sizeof shared, "<|im_start|>user\n%s", first);
        const int32_t n = count_tokens(e, shared);
        CHECKF(r1.n > 0 && r2.r.n_reused == n / 8 * 8 && n >= 16 && r2.r.n_prefilled == r2.r.n_prompt - n / 8 * 8,
               "edit after row %d: %d rows reused, %d prefilled of %d", n, r2.r.n_reused, r2.r.n_prefilled,
               r2.r.n_prompt);
        same_as_cold(&c, &r2, "qwen35: edit late in a long prompt");
        ph_engine_free(e);
    }
    llm = LLM;
    mmproj = MMPROJ;
}

/* ---- progress ------------------------------------------------------------------ */

typedef struct prog_log {
    int n[2]; /* calls per phase */
    int64_t first[2], last[2], total[2];
    bool monotone[2], same_total[2];
    bool encode_after_prefill;
} prog_log;

static void on_prog(void *ud, ph_progress_phase phase, int64_t done, int64_t total) {
    prog_log *l = ud;
    const int k = phase == PH_PROGRESS_ENCODE ? 0 : 1;
    if (k == 0 && l->n[1]) l->encode_after_prefill = true;
    if (l->n[k] == 0) {
        l->first[k] = done;
        l->total[k] = total;
        l->monotone[k] = l->same_total[k] = true;
    } else {
        l->monotone[k] = l->monotone[k] && done >= l->last[k];
        l->same_total[k] = l->same_total[k] && total == l->total[k];
    }
    l->last[k] = done;
    l->n[k]++;
}

/* One phase's calls: from 0, never down, ending at its total (want > 0:
 * that total); at least min_calls of them. */
static void check_phase(const prog_log *l, int k, int64_t want, int min_calls, const char *what) {
    CHECKF(l->n[k] >= min_calls, "%s: %d calls", what, l->n[k]);
    if (!l->n[k]) return;
    CHECKF(l->first[k] == 0 && l->monotone[k] && l->same_total[k], "%s: first %lld, monotone %d, same total %d", what,
           (long long)l->first[k], l->monotone[k], l->same_total[k]);
    CHECKF(l->last[k] == l->total[k], "%s: ends at %lld of %lld", what, (long long)l->last[k],
           (long long)l->total[k]);
    if (want > 0)
        CHECKF(l->total[k] == want, "%s: total %lld, want %lld", what, (long long)l->total[k], (long long)want);
}

/* ph_engine_set_progress: a picture prompt reports the encoder's steps,
 * then the prefill's rows; a long prompt its rows chunk by chunk; a
 * picture from the cache nothing of the encoder; and a session its own
 * evaluations. */
static void test_progress(file a) {
    ph_engine *e = engine(true, 8, (size_t)64 << 20, NULL, 0);
    prog_log l = {0};
    ph_engine_set_progress(e, on_prog, &l);
    ph_picture *pics[1] = {pic(a)};
    conv c = {0};
    msg(&c, 'u', (const char *[]){"@0", "What is in it?"}, 2, pics);
    result r = turn(e, &c);
    CHECK(r.n > 0 && r.r.pics_encoded == 1);
    check_phase(&l, 0, 0, 3, "picture: encode");
    check_phase(&l, 1, r.r.n_prefilled, 2, "picture: prefill");
    CHECK(!l.encode_after_prefill);
    printf("  progress: a picture prompt: %d encoder calls (%lld steps), %d prefill calls (%lld rows)\n", l.n[0],
           (long long)l.total[0], l.n[1], (long long)l.total[1]);

    /* the same picture again, in a new conversation: from the cache */
    memset(&l, 0, sizeof l);
    conv c2 = {0};
    msg(&c2, 'u', (const char *[]){"Another question.", "@0"}, 2, pics);
    r = turn(e, &c2);
    CHECK(r.n > 0 && r.r.pics_encoded == 0 && r.r.pics_from_cache == 1);
    CHECKF(l.n[0] == 0, "a cached picture: %d encoder calls", l.n[0]);
    check_phase(&l, 1, r.r.n_prefilled, 2, "cached picture: prefill");

    /* a long prompt: its rows in chunks of at most 512 */
    memset(&l, 0, sizeof l);
    static char text[20000];
    text[0] = '\0';
    for (int i = 0; i < 300; i++) strcat(text, "the river runs to the sea ");
    conv c3 = {0};
    msg(&c3, 'u', (const char *[]){text}, 1, pics);
    r = turn(e, &c3);
    CHECK(r.n > 0 && r.r.n_prefilled > 1024);
    check_phase(&l, 1, r.r.n_prefilled, (int)(r.r.n_prefilled / 512) + 2, "long prompt: prefill");
    CHECK(l.n[0] == 0);
    printf("  progress: a long prompt: %d prefill calls over %lld rows\n", l.n[1], (long long)l.total[1]);

    /* unset: no more calls */
    ph_engine_set_progress(e, NULL, NULL);
    memset(&l, 0, sizeof l);
    r = turn(e, &c);
    CHECK(r.n > 0 && l.n[0] == 0 && l.n[1] == 0);
    ph_picture_free(pics[0]);
    ph_engine_free(e);

    /* a session's own evaluations: each reported from 0 to its rows */
    ph_model *m = ph_model_load(llm, 2, NULL);
    ph_session *s = m ? ph_session_new(m, 2048, NULL) : NULL;
    CHECK(s != NULL);
    if (!s) return;
    ph_tokens t = {0};
    ph_tokenize(m, text, strlen(text), false, &t, NULL);
    memset(&l, 0, sizeof l);
    ph_session_set_progress(s, on_prog, &l);
    CHECK(ph_session_eval_tokens(s, t.ids, 1200, NULL) == 0);
    check_phase(&l, 1, 1200, 4, "session: prefill");
    memset(&l, 0, sizeof l);
    CHECK(ph_session_eval_tokens(s, t.ids, 1, NULL) == 0); /* a decoded token: not a prompt */
    CHECK(l.n[1] == 0);
    ph_tokens_free(&t);
    ph_session_free(s);
    ph_model_free(m);
}

/* ---- the KV pool (docs/state-cache.md, Blocks and the pool) ---------------- */

static void pool_stats(ph_engine *e, ph_engine_stats *st) { ph_engine_get_stats(e, st); }

/* Blocks held or findable: in use, cached and pinned. */
static uint64_t blocks_kept(const ph_engine_stats *st) {
    return st->kv_blocks_in_use + st->kv_blocks_cached + st->kv_blocks_pinned;
}

static int32_t blocks_of(int32_t rows) { return (rows + 63) / 64; }

/* Interleaved A1 B1 A2 B2 A3: each conversation comes back from the pool
 * (its full blocks by name, its last block moved from its resume point)
 * with no KV copied, and each warm turn answers as a cold run. (B1, new,
 * copies the few rows it shares with A at their start: the block holding
 * them is A's too.) */
static void test_pool_interleaved(file a, file b) {
    ph_engine *e = engine(true, 32, 128u << 20, NULL, 0);
    ph_picture *pics[2] = {pic(a), pic(b)};
    conv a1, b1, a2, b2, a3;
    chat_about(&a1, pics, 0, 1);
    chat_about(&b1, pics, 1, 1);
    chat_about(&a2, pics, 0, 2);
    chat_about(&b2, pics, 1, 2);
    chat_about(&a3, pics, 0, 3);
    ph_engine_stats st;
    turn(e, &a1);
    turn(e, &b1);
    pool_stats(e, &st);
    const uint64_t row_bytes = st.kv_block_bytes / 64;
    /* B1, a new conversation, kept the rows it shares with A (their opener)
     * in a block A's resume point holds too: those, copied */
    const int32_t shared = count_tokens(e, "<|im_start|>user\n<|vision_start|>");
    CHECKF(st.kv_bytes_copied <= (uint64_t)shared * row_bytes, "B1 copied %llu KV bytes",
           (unsigned long long)st.kv_bytes_copied);
    uint64_t copied = st.kv_bytes_copied, resumed_copies = 0;
    const conv *warm[3] = {&a2, &b2, &a3};
    const char *names[3] = {"pool: interleaved A2", "pool: interleaved B2", "pool: interleaved A3"};
    for (int i = 0; i < 3; i++) {
        result r = turn(e, warm[i]);
        pool_stats(e, &st);
        CHECKF(r.r.n_from_ram > 0 && r.r.pics_encoded == 0, "%s: from ram %d, encoded %d", names[i], r.r.n_from_ram,
               r.r.pics_encoded);
        /* a conversation comes back without a copy */
        CHECKF(st.kv_bytes_copied == copied, "%s: %llu KV bytes copied", names[i],
               (unsigned long long)(st.kv_bytes_copied - copied));
        resumed_copies += st.kv_bytes_copied - copied;
        copied = st.kv_bytes_copied;
        same_as_cold(warm[i], &r, names[i]);
    }
    printf(
        "  pool: interleaved A1 B1 A2 B2 A3: %llu KV bytes copied in all (%llu on the warm turns; a row is %llu)\n",
        (unsigned long long)st.kv_bytes_copied, (unsigned long long)resumed_copies, (unsigned long long)row_bytes);
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);
    ph_engine_free(e);
}

/* A system prompt of reps sentences (about 10 tokens each); variants 0
 * and 1 differ from the first token. */
static const char *long_text(int variant, int reps) {
    static char buf[2][16384];
    char *s = buf[variant & 1];
    s[0] = 0;
    for (int i = 0; i < reps; i++)
        strcat(s, variant ? "Answer briefly and mention every colour you see in it. "
                          : "You look at pictures carefully and describe them well. ");
    return s;
}

/* A system prompt of several blocks. */
static const char *long_system(int variant) { return long_text(variant, 40); }

/* Two conversations that share a 2k-token prefix, then different
 * pictures: the prefix's full blocks exist once in the pool, and both
 * answer as cold runs (tokens and top-5 logprobs); the first comes back
 * from the pool after the second. */
static void test_pool_shared_prefix(file a, file b) {
    n_ctx = 4096;
    ph_engine *e = engine(true, 32, 128u << 20, NULL, 0);
    ph_picture *pics[2] = {pic(a), pic(b)};
    conv x = {0}, y = {0}, x2 = {0};
    const char *sys = long_text(0, 200);
    msg(&x, 's', (const char *[]){sys}, 1, pics);
    msg(&x, 'u', (const char *[]){"@0", "What is in this picture?"}, 2, pics);
    msg(&y, 's', (const char *[]){sys}, 1, pics);
    msg(&y, 'u', (const char *[]){"@1", "What is in this picture?"}, 2, pics);
    x2 = x;
    x2.n_msgs = 0, x2.n_parts = 0;
    msg(&x2, 's', (const char *[]){sys}, 1, pics);
    msg(&x2, 'u', (const char *[]){"@0", "What is in this picture?"}, 2, pics);
    msg(&x2, 'a', (const char *[]){"It is a picture."}, 1, pics);
    msg(&x2, 'u', (const char *[]){"And the colours?"}, 1, pics);
    result rx = turn(e, &x), ry = turn(e, &y);
    const int32_t prefix = count_tokens(e, "<|im_start|>system\n") + count_tokens(e, sys) +
                           count_tokens(e, "<|im_end|>\n<|im_start|>user\n<|vision_start|>");
    CHECKF(prefix >= 2000 && ry.r.n_reused >= prefix - 2 && ry.r.pics_encoded == 1,
           "shared prefix: %d rows reused of about %d, encoded %d", ry.r.n_reused, prefix, ry.r.pics_encoded);
    ph_engine_stats st;
    pool_stats(e, &st);
    const int32_t once = ry.r.n_reused / 64; /* full blocks of the shared prefix */
    const uint64_t apart = (uint64_t)blocks_of(rx.r.n_prompt) + (uint64_t)blocks_of(ry.r.n_prompt);
    CHECKF(blocks_kept(&st) + (uint64_t)once <= apart + 2,
           "shared prefix: %llu blocks kept for %llu apart, %d shared", (unsigned long long)blocks_kept(&st),
           (unsigned long long)apart, once);
    same_as_cold(&x, &rx, "pool: shared prefix, picture 1");
    same_as_cold(&y, &ry, "pool: shared prefix, picture 2");
    result r2 = turn(e, &x2);
    CHECKF(r2.r.n_from_ram >= rx.r.n_prompt && r2.r.pics_from_kv == 1 && r2.r.pics_encoded == 0,
           "the first conversation back: from ram %d of %d, kv %d", r2.r.n_from_ram, rx.r.n_prompt,
           r2.r.pics_from_kv);
    same_as_cold(&x2, &r2, "pool: shared prefix, first one back");
    printf("  pool: a %d-token prefix shared by two conversations: %d full blocks once\n", prefix, once);
    ph_picture_free(pics[0]);
    ph_picture_free(pics[1]);
    ph_engine_free(e);
    n_ctx = 2048;
}

/* Eviction under a small pool: the chains no sequence uses go from their
 * ends (the first conversation's prefix is still found), the running
 * sequence is never touched (its answer is a cold run's), and a request
 * that the pool cannot hold is refused before any work, changing nothing. */
static void test_pool_eviction(void) {
    ph_engine *e = engine(true, 32, 128u << 20, NULL, 0);
    ph_engine_stats st;
    pool_stats(e, &st);
    const size_t stride = (st.kv_block_bytes + 4095) / 4096 * 4096;
    ph_engine_free(e);
    ph_engine_params p = params(llm);
    p.kv_pool_bytes = 18 * stride; /* 18 blocks: 1152 rows */
    ph_err err = {0};
    e = ph_engine_new(&p, &err);
    CHECKF(e != NULL, "engine: %s", err.msg);
    if (!e) return;
    pool_stats(e, &st);
    CHECKF(st.kv_blocks_free >= 18 && st.kv_blocks_free < 20, "a pool of %llu blocks",
           (unsigned long long)st.kv_blocks_free);
    const uint64_t total = st.kv_blocks_free;
    conv x = {0}, y = {0}, z = {0}, big = {0};
    msg(&x, 's', (const char *[]){long_system(0)}, 1, NULL);
    msg(&x, 'u', (const char *[]){"First question."}, 1, NULL);
    msg(&y, 's', (const char *[]){long_system(1)}, 1, NULL);
    msg(&y, 'u', (const char *[]){"Second question."}, 1, NULL);
    msg(&z, 'u', (const char *[]){long_system(1), "Third question."}, 2, NULL);
    result rx = turn(e, &x);
    turn(e, &y);
    result rz = turn(e, &z); /* needs some of the blocks X's chain holds (7 each, the last ones held) */
    pool_stats(e, &st);
    CHECKF(rz.n > 0 && st.kv_blocks_evicted > 0, "a full pool evicts: %llu evicted, %d tokens",
           (unsigned long long)st.kv_blocks_evicted, rz.n);
    same_as_cold(&z, &rz, "pool: the running sequence under eviction");
    result rx2 = turn(e, &x); /* what is left of X: a prefix of it, whole blocks */
    CHECKF(rx2.r.n_reused > 0 && rx2.r.n_reused < rx.r.n_prompt && rx2.r.n_reused % 64 == 0,
           "X after eviction: %d rows reused of %d (its chain shrank from its end)", rx2.r.n_reused, rx.r.n_prompt);
    same_as_cold(&x, &rx2, "pool: after eviction");
    /* a prompt longer than the pool: refused before any work */
    msg(&big, 'u', (const char *[]){long_system(0), long_system(1), long_system(0)}, 3, NULL);
    ph_engine_stats before, after;
    pool_stats(e, &before);
    ph_gen_params g;
    ph_gen_params_default(&g);
    g.max_tokens = NGEN;
    ph_turn_report rep;
    err = (ph_err){0};
    const int rc = ph_engine_chat(e, big.msgs, big.n_msgs, &g, NULL, NULL, &rep, &err);
    pool_stats(e, &after);
    CHECKF(rc != 0 && err.code == PH_ERR_TOO_LONG && strstr(err.msg, "KV pool"), "refused: rc %d, %s", rc, err.msg);
    CHECK(after.kv_blocks_in_use == before.kv_blocks_in_use && after.kv_blocks_cached == before.kv_blocks_cached &&
          after.kv_blocks_free == before.kv_blocks_free && after.kv_blocks_evicted == before.kv_blocks_evicted &&
          blocks_kept(&after) + after.kv_blocks_free == total);
    result rx3 = turn(e, &x); /* the live state is X's still */
    CHECKF(rx3.r.n_reused >= rx.r.n_prompt - 1, "after the refusal: %d rows reused of %d", rx3.r.n_reused,
           rx.r.n_prompt);
    ph_engine_free(e);
}

int main(void) {
    snprintf(idcache, sizeof idcache, "/tmp/ph-ids-XXXXXX");
    if (!mkdtemp(idcache)) return 1;
    file a = read_file(PH_ORACLE_DIR "/img/gray.png"), b = read_file(PH_ORACLE_DIR "/img/grad.png"),
         s = read_file(PH_ORACLE_DIR "/img/small.png");
    CHECK(a.n && b.n && s.n);
    test_back_off();
    test_progress(a);
    test_resent_picture(a);
    test_edit(a);
    test_other_picture_same_size();
    test_append_picture(s, b);
    test_twice_in_one_message(b);
    test_header_only(a);
    test_eviction(a, b, s);
    test_elastic(s, b);
    test_interleaved(a, b);
    test_ram_other_picture();
    test_ram_budget(a, b, s);
    test_pool_interleaved(a, b);
    test_pool_shared_prefix(a, b);
    test_pool_eviction();
    test_auxiliary_slots(a, b);
    n_slots = 1; /* parking, and the RAM tier's points of one slot's displaced conversations */
    test_auxiliary(a, b);
    n_slots = 0;
    test_disk(b);
    test_kv_disk();
    test_kv_disk_every_turn();
    n_slots = 1;
    test_domains(a);
    test_recurrent(a, b);
    n_slots = 0;
    test_recurrent_every();
    free(a.p);
    free(b.p);
    free(s.p);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", idcache);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", idcache);
    TEST_END();
}
