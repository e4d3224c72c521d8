/* The engine: a model, its encoder, one live sequence and the caches
 * around it. Each turn is planned (docs/state-cache.md, Reuse rules: what is reused from the live
 * KV, what comes from the embedding cache, what is encoded and prefilled),
 * then run: prefill, sample, stream. */
#include "engine/engine.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/bigbuf.h"
#include "base/log.h"
#include "base/sha256.h"
#include "base/strbuf.h"
#include "base/test_hook.h"
#include "base/timeutil.h"
#include "state/file_id.h"
#include "engine/constrain.h"
#include "text/output_parser.h"

void ph_engine_params_default(ph_engine_params *p) {
    memset(p, 0, sizeof *p);
    p->reuse = true;
    p->picture_cache_entries = 32;
    p->picture_cache_bytes = (size_t)128 << 20;
    p->ram_cache_bytes = (size_t)2 << 30;
    p->picture_cache_disk_bytes = (uint64_t)4 << 30;
    p->conversation_cache_bytes = (size_t)2 << 30;
    p->kv_disk_bytes = (uint64_t)16 << 30;
    p->shared_tier_timeout_ms = 200;
    p->shared_tier_queue_bytes = (uint64_t)256 << 20;
    p->checkpoint_every = 4096;
    p->n_parallel = 4;
    p->batch_tokens = 512;
}

void ph_gen_params_default(ph_gen_params *g) {
    memset(g, 0, sizeof *g);
    g->sampler = ph_sampler_defaults();
    g->logprobs = true;
    g->parallel_tool_calls = true;
    g->thinking = -1;
    g->thinking_budget = -1;
}

/* The KV blocks of n rows. */
static int32_t blocks_for(int32_t n) { return (n + KV_BLOCK_ROWS - 1) / KV_BLOCK_ROWS; }

static void progress(const ph_engine_params *p, const char *what, double f) {
    if (p->progress) p->progress(p->progress_ud, what, f);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (ms > 0 && nanosleep(&ts, &ts) != 0) {}
}

/* A loading step whose progress is the bytes of a file hashed: from lo to
 * hi, reported at each whole percent. */
typedef struct load_step {
    const ph_engine_params *p;
    const char *what;
    double lo, hi;
    int pct;
} load_step;

static void on_hashed(void *ud, uint64_t done, uint64_t total) {
    load_step *st = ud;
    const double f = st->lo + (st->hi - st->lo) * (total ? (double)done / (double)total : 1.0);
    if ((int)(f * 100) > st->pct) {
        st->pct = (int)(f * 100);
        progress(st->p, st->what, f);
    }
}

/* The file's id (its SHA-256, or the memo's), the step what going from lo
 * to hi of the loading while it is hashed. */
static int file_identity(const ph_engine_params *p, const char *path, const char *what, double lo, double hi,
                         uint8_t id[32], ph_err *err) {
    char buf[4096];
    const char *dir = p->id_cache_dir ? p->id_cache_dir : default_cache_dir(buf, sizeof buf);
    load_step st = {p, what, lo, hi, (int)(lo * 100)};
    const file_id_progress prog = {on_hashed, &st};
    progress(p, what, lo);
    bool memo = false;
    return file_id_of(path, dir, id, &memo, &prog, err);
}

ph_engine *ph_engine_new(const ph_engine_params *p, ph_err *err) {
    ph_engine *e = calloc(1, sizeof *e);
    if (!e) {
        err_set(err, "out of memory");
        return NULL;
    }
    e->reuse = p->reuse;
    e->parked.tail = -1; /* no point parked */
    uint8_t enc_id[32];
    if (file_identity(p, p->model_path, "identifying the model file", 0.0, 0.1, e->model_id, err) ||
        (p->mmproj_path && file_identity(p, p->mmproj_path, "identifying the vision file", 0.1, 0.2, enc_id, err)))
        goto fail;
    progress(p, "loading the model", 0.2);
    sleep_ms(test_hook_ms("PINHOLE_TEST_LOAD_DELAY_MS"));
    e->test_step_delay_ms = test_hook_ms("PINHOLE_TEST_PREFILL_DELAY_MS");
    e->test_slice_delay_ms = test_hook_ms("PINHOLE_TEST_SLICE_DELAY_MS");
    if (!(e->m = ph_model_load(p->model_path, p->n_threads, err))) goto fail;
    /* A recurrent layer's state (qwen35) is what all of a sequence's rows
     * left behind: the live state and a resume point of the RAM tier can be cut back only
     * to a row after which a snapshot of it was taken (state/kv_cache.h;
     * plan_reuse), and so can the disk tier, which stores the state at each
     * of them and at a checkpoint's end as a resume point (state/disk_tier.h). */
    const bool recurrent = e->m->hp.n_rec_layer > 0;
    if (p->mmproj_path) {
        progress(p, "loading the vision encoder", 0.6);
        if (encoder_open(&e->enc, p->mmproj_path, e->m, p->vision_idle_s, enc_id, err) ||
            encoder_set_budget(&e->enc, p->picture_min_tokens, p->picture_max_tokens, err))
            goto fail;
        e->has_vision = true;
    }
    progress(p, "allocating the context", 0.9);
    if (p->n_ctx > 0) {
        e->ctx = (ph_ctx_choice){.n_ctx = p->n_ctx,
                                 .n_ctx_train = e->m->hp.n_ctx_train,
                                 .given = true,
                                 .mem_available = -1,
                                 .row_bytes = kv_cache_row_bytes(&e->m->hp)};
        snprintf(e->ctx.why, sizeof e->ctx.why, "as asked");
    } else {
        ph_model_default_ctx(e->m, &e->ctx);
    }
    /* the KV pool (docs/state-cache.md, Blocks and the pool): one context's
     * blocks, and the RAM tier's beyond them */
    const size_t kv_row = kv_cache_row_bytes(&e->m->hp);
    const size_t pool_bytes = p->kv_pool_bytes ? p->kv_pool_bytes
                                               : (size_t)blocks_for(e->ctx.n_ctx) * kv_pool_stride(kv_row) +
                                                     (e->reuse ? p->ram_cache_bytes : 0);
    if (kv_pool_init(&e->pool, pool_bytes, kv_row, 2 * e->m->hp.n_attn_layer, err)) goto fail;
    e->pool_ready = true;
    /* the slots: a session each (their blocks from the one pool), and the
     * provenance of its KV */
    e->n_parallel = p->n_parallel > 0 ? p->n_parallel : 1;
    if (!(e->slots = calloc((size_t)e->n_parallel, sizeof *e->slots))) {
        err_set(err, "out of memory");
        goto fail;
    }
    e->n_slots = e->n_parallel;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->slot_freed, NULL);
    pthread_cond_init(&e->changed, NULL);
    e->mu_ready = true;
    for (int i = 0; i < e->n_slots; i++) {
        slot *si = &e->slots[i];
        si->e = e;
        if (!(si->names = malloc((size_t)blocks_for(e->ctx.n_ctx) * KV_NAME_LEN))) {
            err_set(err, "out of memory");
            goto fail;
        }
        if (!(si->s = session_new_in(e->m, e->ctx.n_ctx, &e->pool, err)) ||
            seq_init(&si->live, ph_session_n_ctx(si->s), err))
            goto fail;
    }
    slot *sl = &e->slots[0];
    /* one picture takes at most half the context, leaving the other half
     * to the conversation around it */
    if (e->has_vision) prep_cap_tokens(&e->enc.prep, e->ctx.n_ctx / 2);
    /* one token through every weight, so that the first request does not
     * wait for the mapped model file to be paged in (a server resuming a
     * conversation from disk answers that request in about a second) */
    progress(p, "warming up", 0.92);
    const int32_t warm = 0;
    if (ph_session_eval_tokens(sl->s, &warm, 1, err)) goto fail;
    ph_session_reset(sl->s);
    /* and the pages of the blocks the pool hands out first, up to a
     * context's or 128 MiB: a page's first write costs more than a copy into
     * it (on a virtual machine several times more), which a first long
     * prompt or a conversation resumed from disk would pay otherwise */
    const int32_t first = (int32_t)(((size_t)128 << 20) / e->pool.stride);
    (void)kv_pool_populate(&e->pool, 0, first < blocks_for(e->ctx.n_ctx) ? first : blocks_for(e->ctx.n_ctx));
    /* from now on every row goes through the batcher (one step: at most
     * batch_tokens rows, the session's chunk by default, so that a prompt
     * evaluated alone is cut as before) */
    const int32_t bt = p->batch_tokens > 0 ? p->batch_tokens : 512;
    if (!(e->bat = batcher_new(e->m, bt < e->n_parallel ? e->n_parallel : bt, e->n_parallel, err))) goto fail;
    for (int i = 0; i < e->n_slots; i++) {
        e->slots[i].s->bat = e->bat;
        e->slots[i].s->lock = &e->mu;
        memcpy(e->slots[i].live.model_id, e->model_id, 32);
    }
    /* everything the KV bytes depend on (a checkpoint made otherwise is never loaded) */
    const llm_hparams *hp = &e->m->hp;
    snprintf(e->format_tag, sizeof e->format_tag, "kv=f16;arch=%s;L=%d;hkv=%d;hd=%d;rope=%d:%g:%d,%d,%d,%d;isa=%s;v2",
             e->m->arch_name, hp->n_layer, hp->n_head_kv, hp->head_dim, (int)hp->rope.mode,
             (double)hp->rope.freq_base, hp->rope.sections[0], hp->rope.sections[1], hp->rope.sections[2],
             hp->rope.sections[3], ph_cpu_isa());
    if (recurrent) { /* and with recurrent layers, what their states are */
        const size_t n = strlen(e->format_tag);
        snprintf(e->format_tag + n, sizeof e->format_tag - n, ";rec=%d:%d:%d:%d:%d", hp->n_rec_layer, hp->conv_k,
                 hp->conv_dim, hp->ssm_hv, hp->ssm_d);
    }
    for (int i = 0; i < e->n_slots; i++)
        snprintf(e->slots[i].live.format, sizeof e->slots[i].live.format, "%s", e->format_tag);
    size_t tlen;
    const char *tmpl = llm_chat_template(e->m, &tlen);
    e->fmt = chat_format_detect(tmpl, tlen, e->m->arch_name);
    ram_tier_init(&e->ram, &e->pool, e->reuse ? p->ram_cache_bytes : 0);
    e->park_budget = e->reuse ? p->conversation_cache_bytes : 0;
    if (!(e->cache = embed_cache_new(p->picture_cache_entries, p->picture_cache_bytes, p->picture_cache_dir, err)))
        goto fail;
    embed_cache_set_disk_budget(e->cache, p->picture_cache_disk_bytes);
    if (p->kv_disk_dir) {
        progress(p, "opening the checkpoint folder", 0.95);
        if (!(e->disk = disk_tier_open(p->kv_disk_dir, p->kv_disk_bytes, err))) goto fail;
    }
    if (p->shared_tier) {
        if (!(e->shared = shared_tier_open(p->shared_tier, p->shared_tier_password, p->shared_tier_timeout_ms,
                                           p->shared_tier_queue_bytes, err)))
            goto fail;
        embed_cache_set_shared(e->cache, e->shared);
        if (e->disk) disk_tier_set_shared(e->disk, e->shared);
    }
    e->checkpoint_every = p->checkpoint_every > 0 ? p->checkpoint_every : 0;
    progress(p, "ready", 1.0);
    return e;
fail:
    ph_engine_free(e);
    return NULL;
}

/* The session's prompt rows, passed on (ud: the slot). */
static void on_rows(void *ud, ph_progress_phase phase, int64_t done, int64_t total) {
    slot *sl = ud;
    if (done) sleep_ms(sl->e->test_step_delay_ms);
    sl->progress(sl->progress_ud, phase, done, total);
}

void ph_engine_set_progress(ph_engine *e, ph_progress_fn fn, void *ud) {
    e->progress = fn; /* a slot takes it with its next request */
    e->progress_ud = ud;
}

/* An encoder step of the request's current picture (ud: its slot). */
static void on_encoder_step(void *ud, int done, int total) {
    slot *sl = ud;
    (void)total;
    if (sl->progress) sl->progress(sl->progress_ud, PH_PROGRESS_ENCODE, sl->enc_done + done, sl->enc_total);
}

void ph_engine_free(ph_engine *e) {
    if (!e) return;
    if (e->disk) { /* the live states too (a clean shutdown), then whatever is queued */
        const double t0 = time_now_s();
        int32_t live = 0;
        disk_tier_stats a, b;
        disk_tier_get_stats(e->disk, &a);
        for (int i = 0; i < e->n_slots; i++) {
            const slot *sl = &e->slots[i];
            if (!sl->s || !sl->live.n_rows) continue;
            live += sl->live.n_rows;
            disk_tier_save(e->disk, &sl->live, sl->live.n_rows, &sl->s->kv, 0, false);
            disk_tier_flush(e->disk); /* each before the next (a save replaces one queued) */
        }
        disk_tier_flush(e->disk);
        disk_tier_get_stats(e->disk, &b);
        PH_INFO("shutdown: the live conversation (%d rows) and what was queued: %" PRIu64
                " block records written (%.1f MiB), %" PRIu64 " not written (no room, or an I/O error), in %.2f s",
                (int)live, b.saves - a.saves, (double)(b.bytes_written - a.bytes_written) / (1 << 20),
                b.skipped - a.skipped, time_now_s() - t0);
        disk_tier_close(e->disk);
    }
    batcher_free(e->bat);
    if (e->mu_ready) {
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->slot_freed);
        pthread_cond_destroy(&e->changed);
    }
    embed_cache_free(e->cache);
    shared_tier_close(e->shared); /* after the disk tier, whose writer queues values for it */
    jc_vocab_free(e->jv);
    if (e->pool_ready) { /* the holds on the pool's blocks, then the pool */
        ram_tier_free(&e->ram);
        ram_point_free(&e->parked, &e->pool);
        for (int i = 0; i < e->n_slots; i++) ph_session_free(e->slots[i].s);
        kv_pool_free(&e->pool);
    }
    for (int i = 0; i < e->n_slots; i++) {
        free(e->slots[i].names);
        free(e->slots[i].shown);
        seq_free(&e->slots[i].live);
    }
    free(e->slots);
    if (e->has_vision) encoder_close(&e->enc);
    ph_model_free(e->m);
    free(e);
}

const ph_model_info *ph_engine_model_info(const ph_engine *e) { return ph_model_get_info(e->m); }
bool ph_engine_has_vision(const ph_engine *e) { return e->has_vision; }
int32_t ph_engine_n_ctx(const ph_engine *e) { return ph_session_n_ctx(e->slots[0].s); }
const ph_ctx_choice *ph_engine_ctx(const ph_engine *e) { return &e->ctx; }
int32_t ph_engine_picture_max_tokens(const ph_engine *e) { return e->has_vision ? e->enc.prep.max_tokens : 0; }

size_t ph_engine_token_bytes(const ph_engine *e, int32_t id, char *out, size_t cap) {
    int n = token_bytes(e->m->vocab, id, out, cap);
    return n < 0 ? 0 : (size_t)n;
}

void ph_engine_get_stats(const ph_engine *e, ph_engine_stats *st) {
    pthread_mutex_t *mu = (pthread_mutex_t *)&e->mu; /* the stats change under it */
    pthread_mutex_lock(mu);
    *st = e->st;
    st->requests_running = (uint64_t)e->running;
    embed_cache_stats cs;
    embed_cache_get_stats(e->cache, &cs);
    st->picture_cache_hits = cs.hits;
    st->picture_cache_misses = cs.misses;
    st->picture_cache_evictions = cs.evictions;
    st->picture_cache_entries = cs.entries;
    st->picture_cache_bytes = cs.bytes;
    st->picture_cache_disk_bytes = cs.disk_bytes;
    st->picture_cache_disk_evictions = cs.disk_evictions;
    st->picture_cache_shared_hits = cs.shared_hits;
    st->encoder_loads = e->enc.loads;
    st->encoder_unloads = e->enc.unloads;
    st->encoder_loaded = e->has_vision && e->enc.tower != NULL;
    st->ram_cache_hits = e->ram.hits;
    st->ram_cache_saves = e->ram.saves;
    st->ram_cache_evictions = e->ram.evictions;
    st->ram_cache_refused = e->ram.refused;
    kv_pool_stats ps;
    kv_pool_get_stats(&e->pool, &ps);
    st->ram_cache_entries = (uint64_t)e->ram.n;
    st->ram_cache_bytes = e->ram.bytes;
    st->kv_blocks_in_use = (uint64_t)ps.in_use;
    st->kv_blocks_cached = (uint64_t)ps.cached;
    st->kv_blocks_pinned = (uint64_t)ps.pinned;
    st->kv_blocks_free = (uint64_t)ps.free;
    st->kv_block_bytes = ps.block_bytes;
    st->kv_pool_bytes = (uint64_t)ps.total * ps.block_bytes;
    st->kv_blocks_evicted = ps.evictions;
    st->kv_bytes_copied = ps.bytes_copied;
    ph_engine_get_disk_stats(e, st);
    pthread_mutex_unlock(mu);
    if (e->bat) {
        batcher_stats bs;
        batcher_get_stats(e->bat, &bs);
        st->batch_steps = bs.steps;
        st->batch_multi_steps = bs.multi_steps;
        st->batch_max_seqs = (uint64_t)bs.max_seqs_step;
        st->batch_prefill_rows = bs.prefill_rows;
        st->batch_decode_rows = bs.decode_rows;
        st->batch_step_s = bs.step_s;
        st->batch_slices = bs.slices;
        memcpy(st->batch_rows_hist, bs.rows_hist, sizeof st->batch_rows_hist);
    }
}

void ph_engine_get_disk_stats(const ph_engine *e, ph_engine_stats *st) {
    if (e->shared) {
        shared_tier_stats ss;
        shared_tier_get_stats(e->shared, &ss);
        st->shared_gets = ss.gets;
        st->shared_found = ss.found;
        st->shared_refused = ss.refused;
        st->shared_errors = ss.errors;
        st->shared_timeouts = ss.timeouts;
        st->shared_skipped = ss.skipped;
        st->shared_queued = ss.queued;
        st->shared_written = ss.written;
        st->shared_dropped = ss.dropped;
        st->shared_bytes_read = ss.bytes_read;
        st->shared_bytes_written = ss.bytes_written;
        st->shared_queue_bytes = ss.queue_bytes;
        st->shared_connected = ss.connected;
    }
    if (!e->disk) return;
    disk_tier_stats ds;
    disk_tier_get_stats(e->disk, &ds);
    st->disk_cache_hits = ds.hits;
    st->disk_cache_misses = ds.misses;
    st->disk_cache_saves = ds.saves;
    st->disk_cache_skipped = ds.skipped;
    st->disk_cache_evictions = ds.evictions;
    st->disk_cache_rejected = ds.rejected;
    st->disk_cache_entries = ds.entries;
    st->disk_cache_bytes = ds.bytes;
    st->disk_cache_queued = ds.queued;
    st->disk_cache_bytes_written = ds.bytes_written;
    st->disk_cache_bytes_read = ds.bytes_read;
    st->disk_cache_write_s = ds.write_s;
    st->disk_cache_read_s = ds.read_s;
    st->disk_cache_shared_records = ds.shared_records;
}

double ph_engine_tick(ph_engine *e) {
    if (!e->has_vision) return -1;
    pthread_mutex_lock(&e->mu);
    /* never while a request may be encoding */
    const double wait = e->running ? 1.0 : encoder_tick(&e->enc, time_now_s());
    pthread_mutex_unlock(&e->mu);
    return wait;
}

/* ---- planning ---------------------------------------------------------------- */

typedef struct turn {
    ph_engine *e;
    slot *sl;              /* the slot it runs in (from the plan on) */
    const uint8_t *domain; /* the request's isolation domain (32 bytes) */
    ph_prompt prompt;
    ph_picture **pics;
    seq_state want;                /* the request's stream as rows */
    const embed_entry **embeds;    /* per picture item: its rows (referenced) */
    int32_t *item_row;             /* per prompt item: its first row */
    int32_t head;                  /* with recurrent layers: the rows up to the answer's opener, or 0 */
    uint8_t (*names)[KV_NAME_LEN]; /* the names of want's full blocks (with the RAM tier), n_names */
    int32_t n_names;
} turn;

/* Frees the pictures' decoded pixels: they are needed only to identify
 * and to encode them. */
static void drop_pixels(turn *t) {
    for (int32_t k = 0; k < t->prompt.n_pictures; k++) picture_drop_pixels(t->pics[k]);
}

static void turn_free(turn *t) {
    if (t->pics) drop_pixels(t);
    if (t->embeds) {
        pthread_mutex_lock(&t->e->mu);
        for (int32_t i = 0; i < t->prompt.n_pictures; i++)
            if (t->embeds[i]) embed_cache_release(t->e->cache, t->embeds[i]);
        pthread_mutex_unlock(&t->e->mu);
    }
    free(t->embeds);
    free(t->names);
    free(t->item_row);
    free(t->pics);
    seq_free(&t->want);
    ph_prompt_free(&t->prompt);
}

/* The rows of a prompt stream: its tokens and its pictures' rows. */
static size_t prompt_rows(const turn *t) {
    size_t rows = 0;
    for (size_t i = 0; i < t->prompt.n; i++) {
        const ph_prompt_item *it = &t->prompt.items[i];
        rows += it->is_picture ? (size_t)ph_engine_picture_rows(t->e, t->pics[it->picture]) : it->tokens.n;
    }
    return rows;
}

/* Whether the prompt leaves room for an answer in the context; the first
 * picture that does not fit is named. */
static int check_fits(const turn *t, ph_err *err) {
    const int32_t n_ctx = ph_engine_n_ctx(t->e);
    size_t rows = 0;
    for (size_t i = 0; i < t->prompt.n; i++) {
        const ph_prompt_item *it = &t->prompt.items[i];
        const ph_picture *pic = it->is_picture ? t->pics[it->picture] : NULL;
        const int32_t pic_rows = pic ? ph_engine_picture_rows(t->e, pic) : 0;
        rows += pic ? (size_t)pic_rows : it->tokens.n;
        if (pic && rows + 1 > (size_t)n_ctx)
            return err_setc(err, PH_ERR_TOO_LONG,
                            "%s (%d tokens) does not fit: the prompt through it is %zu tokens long but the "
                            "context holds %d (and needs room for the answer)",
                            pic->label, pic_rows, rows, n_ctx);
    }
    if (rows + 1 > (size_t)n_ctx)
        return err_setc(err, PH_ERR_TOO_LONG,
                        "the prompt is %zu tokens long but the context holds %d (and needs room for the answer)",
                        rows, n_ctx);
    return 0;
}

/* Gives each picture its image_id (docs/state-cache.md, Identity): known from an earlier turn
 * or the bytes_id memo, else decoded now (the pixels stay for the
 * encoder until the turn's pictures are resolved). */
static int identify_pictures(turn *t, ph_err *err) {
    for (int32_t k = 0; k < t->prompt.n_pictures; k++)
        if (engine_picture_identify(t->e, t->pics[k], t->domain, err)) return -1;
    return 0;
}

/* Lays the prompt stream out as rows with their positions. */
static int build_want(turn *t, ph_err *err) {
    ph_engine *e = t->e;
    if (seq_init(&t->want, (int32_t)prompt_rows(t), err)) return -1;
    memcpy(t->want.model_id, e->model_id, 32);
    memcpy(t->want.format, e->format_tag, sizeof t->want.format);
    memcpy(t->want.domain, t->domain, sizeof t->want.domain);
    t->item_row = malloc((t->prompt.n + 1) * sizeof *t->item_row);
    t->embeds = calloc((size_t)t->prompt.n_pictures + 1, sizeof *t->embeds);
    if (!t->item_row || !t->embeds) return err_set(err, "out of memory");
    int32_t pos = 0;
    for (size_t i = 0; i < t->prompt.n; i++) {
        const ph_prompt_item *it = &t->prompt.items[i];
        t->item_row[i] = t->want.n_rows;
        if (!it->is_picture) {
            for (size_t j = 0; j < it->tokens.n; j++)
                if (seq_push_token(&t->want, it->tokens.ids[j], pos++, err)) return -1;
            continue;
        }
        const ph_picture *im = t->pics[it->picture];
        seq_span sp = {0};
        engine_embed_key(e, im, t->domain, sp.embed_key, &sp.grid_x, &sp.grid_y);
        memcpy(sp.image_id, im->image_id, 32);
        sp.n_tokens = sp.grid_x * sp.grid_y;
        sp.n_pos = sp.grid_x > sp.grid_y ? sp.grid_x : sp.grid_y;
        if (seq_push_span(&t->want, &sp, pos, err)) return -1;
        pos += sp.n_pos;
    }
    return 0;
}

/* The span of picture item k of the request. */
static const seq_span *want_span(const turn *t, int32_t k) { return &t->want.spans[k]; }

/* A slice of a picture's encode, run by the batcher between two of its
 * steps: the other sequences' rows go on while a picture encodes. A slice
 * is vision_job_steps (each at most VISION_STEP_FLOPS, never past a
 * layer's end: 50-90 ms on two AVX2 cores) until it has taken
 * SLICE_BUDGET_S: the encode gets most of the time, the running answers a
 * token about every SLICE_BUDGET_S plus one step. */
#define SLICE_BUDGET_S 0.5

typedef struct encode_slice {
    slot *sl;
    vision_job *job;
} encode_slice;

static int run_slice(void *ud) {
    encode_slice *x = ud;
    const double t0 = time_now_s();
    int done;
    do {
        done = vision_job_step(x->job, VISION_STEP_FLOPS);
        sleep_ms(x->sl->e->test_slice_delay_ms);
        int layers, total;
        vision_job_progress(x->job, &layers, &total);
        on_encoder_step(x->sl, layers, total);
    } while (done == 0 && time_now_s() - t0 < SLICE_BUDGET_S);
    return done;
}

/* Encodes picture item k and puts its rows into the cache. */
static int encode_picture(turn *t, int32_t k, ph_turn_report *r, ph_err *err) {
    ph_engine *e = t->e;
    const seq_span *sp = want_span(t, k);
    ph_picture *im = t->pics[k];
    prep_image prep;
    if (picture_decode(im, err)) return -1;
    const int prc = image_preprocess(&im->img, &e->enc.prep, &prep, err);
    picture_drop_pixels(im);
    if (prc) return -1;
    const size_t nf = (size_t)prep.grid_x * prep.grid_y * (size_t)e->enc.out_width;
    float *rows = malloc(nf * sizeof *rows);
    if (!rows) {
        prep_free(&prep);
        return err_set(err, "out of memory for %s's rows", im->label);
    }
    double t0 = time_now_s();
    /* the tower stays loaded: ph_engine_tick releases none while a request runs */
    encode_slice x = {t->sl, vision_job_new(e->enc.tower, &prep, rows, err)};
    int rc = x.job ? 0 : -1;
    while (rc == 0 && batcher_run(e->bat, run_slice, &x) == 0) {}
    vision_job_free(x.job);
    t->sl->enc_done += vision_get_info(e->enc.tower)->n_layer + 1;
    r->encode_s += time_now_s() - t0;
    bool geometry_ok = prep.grid_x == sp->grid_x && prep.grid_y == sp->grid_y;
    prep_free(&prep);
    if (rc == 0 && !geometry_ok) rc = err_set(err, "%s: the encoder's grid differs from the plan", im->label);
    if (rc) {
        free(rows);
        return -1;
    }
    uint8_t cond[32];
    embed_rows_hash(rows, nf, cond);
    pthread_mutex_lock(&e->mu);
    e->enc.last_used = time_now_s();
    rc = embed_cache_put(e->cache, sp->embed_key, sp->grid_x, sp->grid_y, e->enc.out_width, rows, cond, &t->embeds[k],
                         err);
    if (rc == 0) e->st.pictures_encoded++;
    pthread_mutex_unlock(&e->mu);
    if (rc) return -1;
    r->pics_encoded++;
    return 0;
}

/* Whether another request is encoding a picture of this embed_key now
 * (e->mu held). */
static bool encoding_elsewhere(const ph_engine *e, const slot *sl, const uint8_t key[32]) {
    for (int i = 0; i < e->n_slots; i++)
        if (&e->slots[i] != sl && e->slots[i].encoding && !memcmp(e->slots[i].enc_key, key, 32)) return true;
    return false;
}

/* Picture item k's rows: those of another request's encode of the same
 * picture when one runs now (waited for; its rows are then in the cache),
 * else encoded here. */
static int await_or_encode(turn *t, int32_t k, ph_turn_report *r, ph_err *err) {
    ph_engine *e = t->e;
    slot *sl = t->sl;
    const uint8_t *key = want_span(t, k)->embed_key;
    pthread_mutex_lock(&e->mu);
    bool waited = false;
    while (encoding_elsewhere(e, sl, key)) {
        waited = true;
        pthread_cond_wait(&e->changed, &e->mu);
    }
    if (waited) e->st.picture_waits++;
    /* looked up again: another request may have put it since resolve_pictures did */
    t->embeds[k] = embed_cache_recheck(e->cache, key);
    if (t->embeds[k]) {
        r->pics_from_cache++;
        pthread_mutex_unlock(&e->mu);
        return 0;
    }
    sl->encoding = true;
    memcpy(sl->enc_key, key, 32);
    pthread_mutex_unlock(&e->mu);
    const int rc = encode_picture(t, k, r, err);
    pthread_mutex_lock(&e->mu);
    sl->encoding = false;
    pthread_cond_broadcast(&e->changed);
    pthread_mutex_unlock(&e->mu);
    return rc;
}

/* Maps the pictures to be prefilled through the embedding cache, then
 * encodes the rest; a picture repeated in the request is looked up and
 * encoded once. */
static int resolve_pictures(turn *t, int32_t keep, ph_turn_report *r, ph_err *err) {
    ph_engine *e = t->e;
    const int32_t n = t->prompt.n_pictures;
    int32_t *same = malloc(((size_t)n + 1) * sizeof *same); /* an earlier item with the same key, or -1 */
    if (!same) return err_set(err, "out of memory");
    int32_t missing = 0;
    pthread_mutex_lock(&e->mu);
    for (int32_t k = 0; k < n; k++) {
        const seq_span *sp = want_span(t, k);
        same[k] = -1;
        if (sp->start < keep) {
            r->pics_from_kv++;
            continue;
        }
        if (t->embeds[k]) continue; /* resolved before (rebuild) */
        for (int32_t j = 0; j < k && same[k] < 0; j++)
            if (want_span(t, j)->start >= keep && !memcmp(want_span(t, j)->embed_key, sp->embed_key, 32)) same[k] = j;
        if (same[k] >= 0) continue;
        t->embeds[k] = embed_cache_get(e->cache, sp->embed_key);
        if (t->embeds[k]) r->pics_from_cache++;
        else missing++;
    }
    int rc = 0;
    if (missing) {
        bool loaded = false;
        rc = encoder_acquire(&e->enc, &loaded, err);
        r->encoder_loaded = loaded;
        pthread_mutex_unlock(&e->mu);
        slot *sl = t->sl;
        if (rc == 0 && sl->progress) {
            sl->enc_done = 0;
            sl->enc_total = (int64_t)missing * (vision_get_info(e->enc.tower)->n_layer + 1);
            sl->progress(sl->progress_ud, PH_PROGRESS_ENCODE, 0, sl->enc_total);
        }
    } else {
        pthread_mutex_unlock(&e->mu);
    }
    for (int32_t k = 0; rc == 0 && k < n; k++)
        if (want_span(t, k)->start >= keep && same[k] < 0 && !t->embeds[k]) rc = await_or_encode(t, k, r, err);
    pthread_mutex_lock(&e->mu);
    for (int32_t k = 0; rc == 0 && k < n; k++)
        if (same[k] >= 0) {
            t->embeds[k] = t->embeds[same[k]];
            embed_cache_retain(e->cache, t->embeds[k]);
            r->pics_from_cache++;
        }
    pthread_mutex_unlock(&e->mu);
    free(same);
    drop_pixels(t); /* those of the pictures that were not encoded */
    return rc;
}

/* ---- generation ------------------------------------------------------------- */

typedef struct gen {
    ph_engine *e;
    const ph_gen_params *g;
    ph_gen_cb cb;
    void *ud;
    out_parser split; /* reasoning, content and tool calls */
    strbuf pend;      /* released text not yet passed on (stop strings) */
    bool stopped;     /* a stop string was found */
    int32_t stop_index;
    bool cancelled;
    ph_gen_event ev; /* the current token's event (logprobs) */
    bool ev_sent;
} gen;

static void on_piece(void *ud, out_kind kind, int32_t call, const char *text, size_t len) {
    gen *g = ud;
    if (g->cancelled || kind == OUT_CALL_END) return;
    ph_gen_event ev = g->ev;
    if (g->ev_sent) { /* further pieces of the same token carry no token data */
        ev.token = -1;
        ev.n_top = 0;
    }
    ev.kind = (ph_delta_kind)kind;
    ev.call_index = call < 0 ? 0 : call;
    ev.text = text;
    ev.len = len;
    g->ev_sent = true;
    if (g->cb && g->cb(g->ud, &ev)) g->cancelled = true;
}

/* The longest suffix of s that is a proper prefix of a stop string. */
static size_t stop_holdback(const gen *g, const char *s, size_t n) {
    size_t best = 0;
    for (size_t k = 0; k < g->g->n_stop; k++) {
        const char *st = g->g->stop[k];
        size_t sl = strlen(st);
        for (size_t l = sl - 1 < n ? sl - 1 : n; l > best; l--)
            if (memcmp(s + n - l, st, l) == 0) {
                best = l;
                break;
            }
    }
    return best;
}

/* Passes released text on, holding back what may be the start of a stop
 * string and cutting at a whole one. */
static int release(gen *g, const char *text, size_t len, bool final) {
    if (g->g->n_stop == 0) {
        out_parser_feed(&g->split, text, len, on_piece, g);
        return 0;
    }
    strbuf *b = &g->pend;
    strbuf_put(b, text, len);
    if (b->oom) return -1;
    size_t cut = b->n;
    for (size_t k = 0; k < g->g->n_stop; k++) {
        const char *st = g->g->stop[k];
        size_t sl = strlen(st);
        if (!sl) continue;
        char *hit = memmem(b->p, b->n, st, sl);
        if (hit && (size_t)(hit - b->p) < cut) {
            cut = (size_t)(hit - b->p);
            g->stop_index = (int32_t)k;
        }
    }
    if (cut < b->n) {
        g->stopped = true;
        out_parser_feed(&g->split, b->p, cut, on_piece, g);
        b->n = 0;
        return 0;
    }
    size_t hold = final ? 0 : stop_holdback(g, b->p, b->n);
    out_parser_feed(&g->split, b->p, b->n - hold, on_piece, g);
    memmove(b->p, b->p + b->n - hold, hold);
    b->n = hold;
    return 0;
}

/* The tokens of a forced answer (ph_gen_params.forced_output). */
static int forced_tokens(const ph_engine *e, const ph_gen_params *gp, ph_tokens *out, ph_err *err) {
    memset(out, 0, sizeof *out);
    if (!gp->forced_output) return 0;
    return ph_tokenize(e->m, gp->forced_output, gp->forced_len, true, out, err);
}

/* Whether a turn's sampling is constrained (and needs the vocabulary's
 * precomputed tables). */
static bool constrained(const ph_gen_params *gp) {
    return gp->format != PH_FORMAT_TEXT || (gp->n_tools && gp->tool_choice != PH_TOOL_NONE);
}

static void save_live(ph_engine *e, slot *sl);
static void publish_live(ph_engine *e, slot *sl);

/* Forgets sl's live state (e->mu held): its rows, its blocks (back to the
 * pool: those published stay there under their names) and what was known
 * of them; the disk writer is done with its cells (the caller saw to it). */
static void forget_live(slot *sl) {
    seq_clear(&sl->live);
    ph_session_reset(sl->s);
    sl->live_prompt = sl->n_named = sl->stable = sl->n_shown = 0;
}

/* Frees blocks for a running answer that needs need more (e->mu held):
 * the live states of slots no request runs in, least recently used
 * first, each kept as a resume point of the RAM tier first (its full
 * blocks stay in the pool under their names, cached until taken). Whether
 * need blocks can be had now. */
static bool reclaim(ph_engine *e, int32_t need) {
    while (need > kv_pool_available(&e->pool)) {
        slot *lru = NULL;
        for (int i = 0; i < e->n_slots; i++) {
            slot *o = &e->slots[i];
            if (!o->busy && o->s->kv.n_held && (!lru || o->used < lru->used)) lru = o;
        }
        if (!lru) return false;
        if (e->disk) disk_tier_release_rows(e->disk, 0); /* the writer may be reading its cells */
        publish_live(e, lru);
        if (e->reuse) save_live(e, lru);
        forget_live(lru);
    }
    return true;
}

/* Whether no request older than sl's runs (e->mu held). */
static bool oldest_running(const ph_engine *e, const slot *sl) {
    for (int i = 0; i < e->n_slots; i++)
        if (e->slots[i].busy && e->slots[i].used < sl->used) return false;
    return true;
}

/* The newest paused answer but sl that still holds its blocks, or NULL;
 * *others: whether a request but sl holds blocks at all (e->mu held). */
static slot *newest_paused(ph_engine *e, const slot *sl, bool *others) {
    slot *v = NULL;
    *others = false;
    for (int i = 0; i < e->n_slots; i++) {
        slot *o = &e->slots[i];
        if (o == sl || !o->busy || !o->s->kv.n_held) continue;
        *others = true;
        if (o->paused && (!v || o->used > v->used)) v = o;
    }
    return v;
}

/* Gives a paused answer's blocks back to the pool (e->mu held): its full
 * blocks published first, so that they stay there under their names until
 * taken; rebuild takes them back, or evaluates their rows again. */
static void give_back(ph_engine *e, slot *sl) {
    if (e->disk) disk_tier_release_rows(e->disk, 0); /* the writer may be reading its cells */
    publish_live(e, sl);
    kv_cache_truncate(&sl->s->kv, 0);
    sl->stable = 0; /* its live rows stay, to be evaluated again, but not their blocks */
    sl->give_back = false;
    sl->dropped = true;
    e->st.requests_dropped++;
    pthread_cond_broadcast(&e->changed);
}

static int rebuild(turn *t, ph_err *err);

/* Room in the pool for the next row of t's answer (docs/server.md,
 * Parallel requests): blocks reclaimed from idle slots; when there are
 * none, an answer that is not the oldest running pauses, its blocks kept,
 * until an older one ends and gives its blocks back. The oldest, short of
 * blocks, has the newest paused answer give its blocks back (they are
 * evaluated again when it resumes: rebuild). 0; 1: the oldest, with
 * nothing left to take (it ends as at the context's end); -1 with err. */
static int room_for(turn *t, ph_err *err) {
    ph_engine *e = t->e;
    slot *sl = t->sl;
    pthread_mutex_lock(&e->mu);
    bool paused = false;
    int rc = 0;
    for (;;) {
        const int32_t n = sl->live.n_rows;
        const int32_t need = sl->dropped ? blocks_for(n + 1) : kv_cache_blocks_needed(&sl->s->kv, n + 1);
        if (reclaim(e, need)) break;
        if (oldest_running(e, sl)) {
            bool others;
            slot *v = newest_paused(e, sl, &others);
            if (v) {
                v->give_back = true;
                pthread_cond_broadcast(&e->changed);
            } else if (!others) {
                rc = 1;
                break;
            }
        } else if (!paused) {
            paused = sl->paused = true;
            e->st.requests_paused++;
            pthread_cond_broadcast(&e->changed); /* an older one may be waiting for a paused one */
        }
        if (sl->give_back) give_back(e, sl);
        pthread_cond_wait(&e->changed, &e->mu);
    }
    sl->paused = sl->give_back = false;
    if (rc == 1 && sl->dropped) { /* it ends here, with nothing to resume on: its rows are forgotten */
        forget_live(sl);
        sl->dropped = false;
    }
    pthread_mutex_unlock(&e->mu);
    if (rc == 0 && sl->dropped) rc = rebuild(t, err);
    return rc;
}

static int generate(turn *t, const ph_gen_params *gp, constraint *con, const ph_tokens *forced, ph_gen_cb cb,
                    void *ud, ph_turn_report *r, double t_start, ph_err *err) {
    ph_engine *e = t->e;
    slot *sl = t->sl;
    const int32_t n_vocab = e->m->hp.n_vocab;
    gen g = {.e = e, .g = gp, .cb = cb, .ud = ud, .stop_index = -1};
    const chat_render_opts ro = {.thinking = gp->thinking};
    const out_parser_cfg pc = {.fmt = &e->fmt,
                               .in_reasoning = chat_format_opens_think(&e->fmt, &ro),
                               .parse_calls = gp->tool_choice != PH_TOOL_NONE && gp->format == PH_FORMAT_TEXT,
                               .tools = gp->tools,
                               .n_tools = gp->n_tools};
    ph_sampler *smp = ph_sampler_new(&gp->sampler);
    const size_t piece_cap = 3 * (vocab_max_token_len(e->m->vocab) + 3) + 1;
    char *piece = malloc(piece_cap);
    int rc = 0;
    if (!smp || !piece) rc = err_set(err, "out of memory");
    else if (out_parser_init(&g.split, &pc, err)) rc = -1;
    if (rc) {
        free(piece);
        ph_sampler_free(smp);
        return -1;
    }
    int32_t top_ids[20];
    float top_vals[20];
    const int32_t n_top = gp->top_logprobs < 0 ? 0 : gp->top_logprobs > 20 ? 20 : gp->top_logprobs;
    ph_detok dt = {0};
    r->finish = PH_FINISH_LENGTH;
    const int32_t n_ctx = ph_session_n_ctx(sl->s);
    double t_first = 0;
    bool in_call = false;
    ph_tokens think_end = {0}; /* the end of the reasoning, forced at the thinking budget */
    size_t think_end_at = 0;   /* how much of it is written */
    bool budget_spent = false;
    for (;;) {
        if (gp->max_tokens > 0 && r->n_generated >= gp->max_tokens) break;
        if (ph_session_n_rows(sl->s) >= n_ctx) break;
        const float *logits = ph_session_logits(sl->s);
        const bool reasoning = out_parser_in_reasoning(&g.split);
        if (gp->thinking_budget >= 0 && !budget_spent && reasoning && r->n_reasoning >= gp->thinking_budget) {
            budget_spent = true;
            if ((rc = ph_tokenize(e->m, "\n</think>\n\n", 11, true, &think_end, err)) != 0) break;
        }
        const bool forcing = think_end_at < think_end.n;
        int32_t tok;
        if (forcing) tok = think_end.ids[think_end_at++];
        else if (gp->forced_output) /* the test switch: the given text, then the end */
            tok = (size_t)r->n_generated < forced->n ? forced->ids[r->n_generated] : -1;
        else tok = constraint_sample(con, smp, logits);
        if (r->n_generated == 0) {
            t_first = time_now_s();
            r->ttft_s = t_first - t_start;
        }
        if (tok < 0 || ph_token_is_eog(e->m, tok)) {
            r->finish = PH_FINISH_STOP;
            break;
        }
        r->n_generated++;
        if (reasoning && !forcing) r->n_reasoning++;
        ph_sampler_accept(smp, tok);
        const bool call_done = constraint_accept(con, tok);
        g.ev = (ph_gen_event){.token = tok};
        if (gp->logprobs || n_top) {
            const double lse = ph_logits_lse(logits, n_vocab);
            g.ev.logprob = (float)((double)logits[tok] - lse);
            if (n_top) {
                ph_logits_top(logits, n_vocab, n_top, top_ids, top_vals);
                for (int32_t i = 0; i < n_top; i++) top_vals[i] = (float)((double)top_vals[i] - lse);
                g.ev.n_top = n_top;
                g.ev.top_ids = top_ids;
                g.ev.top_logprobs = top_vals;
            }
        }
        g.ev_sent = false;
        size_t n = ph_detok_token(&dt, e->m, tok, piece, piece_cap);
        if (release(&g, piece, n, false)) {
            rc = err_set(err, "out of memory");
            break;
        }
        if (!g.ev_sent && !g.cancelled)
            on_piece(&g, out_parser_in_reasoning(&g.split) ? OUT_REASONING : OUT_CONTENT, -1, "", 0);
        if (g.cancelled) {
            r->finish = PH_FINISH_CANCELLED;
            break;
        }
        if (g.stopped || call_done) { /* a stop string; the one call allowed is complete */
            r->finish = PH_FINISH_STOP;
            break;
        }
        /* where the answer is now decides what the next token may be */
        if (!out_parser_in_reasoning(&g.split)) constraint_content(con);
        const char *body;
        size_t body_len;
        const bool now_in_call = out_parser_in_call(&g.split, &body, &body_len);
        if (now_in_call && !in_call) constraint_call_open(con, body, body_len);
        in_call = now_in_call;
        if (gp->max_tokens > 0 && r->n_generated >= gp->max_tokens) break; /* no need to evaluate it */
        if (kv_cache_blocks_needed(&sl->s->kv, ph_session_n_rows(sl->s) + 1)) {
            const int room = room_for(t, err);
            if (room < 0) {
                rc = -1;
                break;
            }
            if (room) break; /* the pool is full: as at the context's end */
        }
        int32_t pos = ph_session_next_pos(sl->s);
        if ((rc = ph_session_eval_tokens(sl->s, &tok, 1, err)) != 0) break;
        if ((rc = seq_push_token(&sl->live, tok, pos, err)) != 0) break;
    }
    if (rc == 0 && r->finish == PH_FINISH_LENGTH && constraint_after_call(con))
        r->finish = PH_FINISH_STOP; /* the limit fell right after a complete call: the call ended the turn */
    if (rc == 0 && !g.cancelled && !g.stopped) {
        size_t n = ph_detok_finish(&dt, piece, piece_cap);
        g.ev = (ph_gen_event){.token = -1};
        g.ev_sent = true;
        if (release(&g, piece, n, true)) rc = err_set(err, "out of memory");
    }
    if (rc == 0 && !g.cancelled) {
        g.ev = (ph_gen_event){.token = -1};
        g.ev_sent = true;
        out_parser_finish(&g.split, on_piece, &g);
        if (g.cancelled) r->finish = PH_FINISH_CANCELLED;
    }
    r->stop_index = g.stopped ? g.stop_index : -1;
    r->n_tool_calls = out_parser_n_calls(&g.split);
    if (con->check_s > 0)
        PH_DEBUG("constraint: %d masks, %.2f ms each; %.3f ms per token in all", con->n_masked,
                 con->n_masked ? con->mask_s * 1e3 / con->n_masked : 0.0,
                 r->n_generated ? con->check_s * 1e3 / r->n_generated : 0.0);
    out_parser_free(&g.split);
    r->decode_s = t_first > 0 ? time_now_s() - t_first : 0;
    pthread_mutex_lock(&e->mu);
    e->st.tokens_generated += (uint64_t)r->n_generated;
    pthread_mutex_unlock(&e->mu);
    strbuf_free(&g.pend);
    ph_tokens_free(&think_end);
    free(piece);
    ph_sampler_free(smp);
    return rc;
}

/* ---- a turn -------------------------------------------------------------------- */

/* A checkpoint in the middle of a long prompt waits this long for the one
 * that extends it (the next, or the prompt's): fewer records. */
#define CHECKPOINT_GRACE_S 5.0

/* The fewest prompt rows whose loss keeps the live state as a resume
 * point of the RAM tier (fewer: a thinking model's answer opener, which
 * every turn evaluates again anyway). */
#define PARK_MIN_LOST 16

/* Queues a checkpoint of the live state on disk, written after delay_s
 * (the writer thread writes it while the turn goes on); keep: written even
 * when the next one extends it (disk_tier_save). */
static void checkpoint(ph_engine *e, slot *sl, double delay_s, bool keep) {
    if (!e->disk) return;
    pthread_mutex_lock(&e->mu);
    disk_tier_save(e->disk, &sl->live, sl->live.n_rows, &sl->s->kv, delay_s, keep);
    pthread_mutex_unlock(&e->mu);
}

/* Takes a snapshot of the recurrent layers' state after the live rows,
 * where a later turn may resume (none without recurrent layers or reuse). */
static void snapshot(ph_engine *e, slot *sl) {
    if (e->reuse) kv_cache_snapshot(&sl->s->kv);
}

/* Publishes the live full blocks not named yet under their names
 * (docs/state-cache.md, Blocks and the pool): from then on they are found
 * by name, by this conversation once it is displaced and by any other that
 * shares them. A block whose name another block has already (the same rows
 * computed twice) is given up for that one, the disk writer first done
 * reading it. Nothing without reuse. */
static void publish_live(ph_engine *e, slot *sl) {
    if (!e->reuse) return;
    kv_cache *kv = &sl->s->kv;
    const int32_t was = sl->n_named;
    while (sl->n_named < sl->live.n_rows / KV_BLOCK_ROWS) {
        const int32_t i = sl->n_named;
        uint8_t prev[KV_NAME_LEN];
        if (i) memcpy(prev, sl->names[i - 1], KV_NAME_LEN);
        else kv_block_root(&sl->live, prev);
        if (!kv_block_name(&sl->live, i, prev, false, sl->names[i])) break;
        kv_block_info info;
        kv_pool_get_block(&e->pool, kv->ids[i], &info);
        if (!info.named) { /* a block found by name has that name already */
            if (e->disk && kv_pool_contains(&e->pool, sl->names[i]))
                disk_tier_release_rows(e->disk, i * KV_BLOCK_ROWS);
            const int32_t id = kv_pool_publish(&e->pool, kv->ids[i], sl->names[i], prev);
            if (id != kv->ids[i]) kv_cache_replace_block(kv, i, id);
        }
        sl->n_named++;
    }
    /* the rows evaluated so far, and their pictures with their cond_hash,
     * for the requests that take these rows while this one runs (known_cond,
     * forkable): the live state's first rows do not change until the next
     * plan or a reset, both under e->mu; its spans may move (realloc'd) */
    const int32_t n = sl->live.n_spans;
    if (n > sl->cap_shown) {
        seq_span *p = realloc(sl->shown, (size_t)n * sizeof *p);
        if (p) sl->shown = p, sl->cap_shown = n;
    }
    const bool shown = n <= sl->cap_shown;
    sl->n_shown = shown ? n : 0;
    if (n && shown) memcpy(sl->shown, sl->live.spans, (size_t)n * sizeof *sl->shown);
    sl->stable = shown ? sl->live.n_rows : 0;
    if (sl->n_named != was) pthread_cond_broadcast(&e->changed);
}

/* Publishes the full blocks evaluated so far, for the requests waiting
 * for them (await_shared). */
static void publish_rows(ph_engine *e, slot *sl) {
    if (!e->reuse) return;
    pthread_mutex_lock(&e->mu);
    publish_live(e, sl);
    pthread_mutex_unlock(&e->mu);
}

/* Evaluates the request's rows from keep on, recording their provenance;
 * with a disk tier or recurrent layers, checkpoints every checkpoint_every
 * rows on the way. With recurrent layers, snapshots of their state are
 * taken there, after each picture (a conversation that changes after it
 * resumes there) and after the answer's header (t->head: the conversation
 * re-sent with the answer and a new question resumes there). */
static int prefill(turn *t, int32_t keep, ph_err *err) {
    ph_engine *e = t->e;
    slot *sl = t->sl;
    const seq_state *w = &t->want;
    const int32_t every = e->disk || sl->s->kv.recurrent ? e->checkpoint_every : 0;
    int32_t r = keep, span = 0, mark = every ? (keep / every + 1) * every : INT32_MAX;
    while (span < w->n_spans && w->spans[span].start < keep) span++;
    while (r < w->n_rows) {
        if (r >= mark) {
            checkpoint(e, sl, CHECKPOINT_GRACE_S, false);
            snapshot(e, sl);
            mark = (r / every + 1) * every;
        }
        if (w->tok[r] != SEQ_ROW_PICTURE) {
            const int32_t stop = t->head > r && t->head < mark ? t->head : mark;
            int32_t end = r;
            while (end < w->n_rows && end < stop && w->tok[end] != SEQ_ROW_PICTURE) end++;
            int32_t pos = ph_session_next_pos(sl->s);
            if (session_eval_prompt(sl->s, w->tok + r, (size_t)(end - r), err)) return -1;
            for (int32_t i = r; i < end; i++)
                if (seq_push_token(&sl->live, w->tok[i], pos + (i - r), err)) return -1;
            r = end;
            if (r == t->head) snapshot(e, sl);
            publish_rows(e, sl);
            continue;
        }
        const seq_span *sp = &w->spans[span];
        const embed_entry *em = t->embeds[span];
        int32_t pos = ph_session_next_pos(sl->s);
        if (session_eval_image_rows(sl->s, em->rows, sp->grid_x, sp->grid_y, sp->start + sp->n_tokens == w->n_rows,
                                    err))
            return -1;
        seq_span rec = *sp;
        memcpy(rec.cond_hash, em->cond_hash, 32);
        rec.has_cond = true;
        if (seq_push_span(&sl->live, &rec, pos, err)) return -1;
        snapshot(e, sl);
        publish_rows(e, sl);
        r += sp->n_tokens;
        span++;
    }
    return 0;
}

/* Keeps the live state as a resume point of the RAM tier (when it is
 * complete and not held there already): its full blocks stay in the pool
 * under their names, the point holds its last, partial block and its
 * recurrent states. Nothing is copied but those states. */
static void save_live(ph_engine *e, slot *sl) {
    ram_point p;
    const int rc = ram_point_make(&p, &e->pool, &sl->live, &sl->s->kv, false);
    if (rc < 0) e->ram.refused++;
    if (rc == 0 && !ram_tier_add(&e->ram, &p)) ram_point_free(&p, &e->pool);
}

/* A prefix worth keeping for want: never all of it (the last prompt row is
 * evaluated again for its logits). */
static int32_t usable(const seq_state *want, int32_t n) {
    return n >= want->n_rows ? seq_back_off(want, want->n_rows - 1) : n;
}

/* Parks the live state, made by a primary request, for the auxiliary
 * requests that follow (docs/state-cache.md, Parking): a point that pins
 * all its blocks, so that nothing the side calls do evicts them. false when
 * it cannot: incomplete state, more than the budget, memory short, or the
 * side call would not find the need blocks it takes in the pool beside
 * them. */
static bool park_primary(ph_engine *e, slot *sl, int32_t need) {
    const kv_cache *kv = &sl->s->kv;
    if ((size_t)kv->n_held * e->pool.block_bytes > e->park_budget || need > kv_pool_available(&e->pool) ||
        ram_point_make(&e->parked, &e->pool, &sl->live, kv, true))
        return false;
    e->has_parked = true;
    e->st.conversations_parked++;
    return true;
}

/* The cond_hash of a picture of want as the live state, the parked
 * conversation or a resume point holds it. */
static bool known_cond(const ph_engine *e, const slot *sl, const seq_span *sp, uint8_t cond[32]) {
    if (seq_span_cond(&sl->live, sp, cond) || (e->has_parked && seq_span_cond(&e->parked.seq, sp, cond)) ||
        ram_tier_cond(&e->ram, sp, cond))
        return true;
    /* another slot's: its live state when no request runs in it (a running
     * one changes it without e->mu), else its published blocks' pictures */
    for (int i = 0; i < e->n_slots; i++) {
        const slot *o = &e->slots[i];
        if (o->busy ? seq_spans_cond(o->shown, o->n_shown, sp, cond) : seq_span_cond(&o->live, sp, cond)) return true;
    }
    return false;
}

/* The most of want's first n rows (found in the pool by name) whose
 * pictures' cond_hash is known (docs/state-cache.md, Reuse rules, 2: a kept
 * picture keeps the cond_hash it was evaluated with; a block's name does
 * not hold it): a picture without one ends them. With set, those pictures
 * of want get it. */
static int32_t known_rows(const ph_engine *e, const slot *sl, seq_state *want, int32_t n, bool set) {
    n = seq_back_off(want, n);
    for (int32_t k = 0; k < want->n_spans && want->spans[k].start < n; k++) {
        seq_span *sp = &want->spans[k];
        uint8_t cond[32];
        if (!known_cond(e, sl, sp, cond)) return sp->start;
        if (set) {
            memcpy(sp->cond_hash, cond, 32);
            sp->has_cond = true;
        }
    }
    return n;
}

/* Makes the live table the blocks of rows [0, n): its own before row
 * keep's block, then the parked point's (p->pinned), p's tail block, or
 * the pool's found by name (names: the request's). p's tail is moved to
 * the live table when p is used up (*used_up: the live state holds all p
 * could give), else shared with it (copied when the live state writes into
 * it: kv_pool_cow). */
static void take_blocks(ph_engine *e, slot *sl, ram_point *p, const uint8_t (*names)[KV_NAME_LEN], int32_t keep,
                        int32_t n, bool *used_up) {
    kv_cache *kv = &sl->s->kv;
    kv_cache_drop_blocks(kv, keep / KV_BLOCK_ROWS);
    for (int32_t b = keep / KV_BLOCK_ROWS; b < blocks_for(n); b++) {
        int32_t id;
        if (p && b < p->n_pinned) {
            kv_pool_ref(&e->pool, id = p->pinned[b]);
        } else if (p && p->tail >= 0 && b == p->seq.n_rows / KV_BLOCK_ROWS) {
            id = p->tail;
            if (*used_up) p->tail = -1;
            else kv_pool_ref(&e->pool, id);
        } else {
            id = kv_pool_find(&e->pool, names[b]);
        }
        kv_cache_push_block(kv, id);
    }
    kv_cache_set_rows(kv, n);
}

/* Keeps the live state's first n rows (a row it can resume at). */
static void keep_live(slot *sl, int32_t n) {
    seq_truncate(&sl->live, n);
    session_truncate(sl->s, n, seq_pos_at(&sl->live, n));
    if (sl->n_named > n / KV_BLOCK_ROWS) sl->n_named = n / KV_BLOCK_ROWS;
}

/* Evaluates the live rows of t's paused answer again after it gave its
 * blocks back (room_for): the leading full blocks that the pool still
 * holds by name are taken back, the prompt's rows after them evaluated as
 * prefill does (its pictures' rows from the embedding cache, encoded again
 * if it lost them), then the answer's tokens: the same KV bytes as before
 * (a row's numbers do not depend on how the rows were cut, nor on the rows
 * beside them). With recurrent layers, whose state is not in the blocks,
 * every row. */
static int rebuild(turn *t, ph_err *err) {
    ph_engine *e = t->e;
    slot *sl = t->sl;
    seq_state was = {0};
    if (seq_init(&was, sl->live.n_rows, err) || seq_copy(&was, &sl->live, sl->live.n_rows, err)) {
        seq_free(&was);
        return -1;
    }
    pthread_mutex_lock(&e->mu);
    int32_t run = 0;
    if (!sl->s->kv.recurrent)
        while (run < sl->n_named && kv_pool_contains(&e->pool, sl->names[run])) run++;
    bool used_up = true;
    take_blocks(e, sl, NULL, (const uint8_t(*)[KV_NAME_LEN])sl->names, 0, run * KV_BLOCK_ROWS, &used_up);
    sl->dropped = false;
    pthread_mutex_unlock(&e->mu);
    const int32_t keep = run * KV_BLOCK_ROWS, prompt = t->want.n_rows;
    keep_live(sl, keep);
    ph_turn_report r = {0};
    int rc = 0;
    if (keep < prompt && (resolve_pictures(t, keep, &r, err) || prefill(t, keep, err))) rc = -1;
    const int32_t from = keep > prompt ? keep : prompt, pos = ph_session_next_pos(sl->s);
    if (rc == 0 && from < was.n_rows)
        rc = session_eval_prompt(sl->s, was.tok + from, (size_t)(was.n_rows - from), err);
    for (int32_t i = from; rc == 0 && i < was.n_rows; i++)
        rc = seq_push_token(&sl->live, was.tok[i], pos + (i - from), err);
    seq_free(&was);
    return rc;
}

/* The rows of want that another running request's evaluated rows share
 * (e->mu held): o's first o->stable live rows (tokens by id, pictures by
 * their embed_key and grid, from o->shown, with a cond_hash), never
 * cutting a picture; none of another isolation domain. */
static int32_t forkable(const slot *o, const seq_state *want) {
    if (memcmp(o->live.domain, want->domain, sizeof want->domain)) return 0;
    const int32_t n = o->stable < want->n_rows ? o->stable : want->n_rows;
    int32_t r = 0, k = 0;
    while (r < n) {
        const int32_t a = o->live.tok[r], b = want->tok[r];
        if (a != b) break;
        if (a != SEQ_ROW_PICTURE) {
            r++;
            continue;
        }
        while (k < want->n_spans && want->spans[k].start < r) k++;
        const seq_span *y = k < want->n_spans && want->spans[k].start == r ? &want->spans[k] : NULL, *x = NULL;
        for (int32_t i = 0; i < o->n_shown && !x; i++)
            if (o->shown[i].start == r) x = &o->shown[i];
        if (!x || !y || !x->has_cond || x->n_tokens != y->n_tokens || x->grid_x != y->grid_x ||
            x->grid_y != y->grid_y || memcmp(x->embed_key, y->embed_key, 32) || r + x->n_tokens > n)
            break;
        r += x->n_tokens;
    }
    return seq_back_off(want, r);
}

/* Makes sl's table o's blocks of rows [keep, n) (e->mu held), each held by
 * one more reference: o's full blocks shared, its last one copied when
 * either writes into it (kv_pool_cow); want's pictures there take the
 * cond_hash o evaluated them with. */
static void take_forked(ph_engine *e, slot *sl, const slot *o, seq_state *want, int32_t keep, int32_t n) {
    kv_cache *kv = &sl->s->kv;
    kv_cache_drop_blocks(kv, keep / KV_BLOCK_ROWS);
    for (int32_t b = keep / KV_BLOCK_ROWS; b < blocks_for(n); b++) {
        kv_pool_ref(&e->pool, o->s->kv.ids[b]);
        kv_cache_push_block(kv, o->s->kv.ids[b]);
    }
    kv_cache_set_rows(kv, n);
    for (int32_t k = 0; k < want->n_spans && want->spans[k].start < n; k++) {
        seq_span *sp = &want->spans[k];
        sp->has_cond = seq_spans_cond(o->shown, o->n_shown, sp, sp->cond_hash);
    }
}

/* The plan (docs/state-cache.md, The plan of a turn): the longest common
 * prefix of the request with the live state, the parked primary
 * conversation (for a primary request), a resume point of the RAM tier or
 * the pool's cached blocks found by name, or the disk tier. The live state
 * is kept as a resume point before a restore replaces it, or before rows
 * of its last prompt are dropped (another conversation, or an edit): then
 * the conversation it holds can come back without a prefill. Dropping only
 * the answer of the last turn (a client that re-sends the conversation
 * with the answer rendered otherwise) saves nothing. No KV is copied: the
 * live table takes the blocks (a resume point's last block moved to it, a
 * shared block copied only when a row is written into it). The disk tier's
 * records are checked on the way in: one that fails leaves the rows before
 * it (none: the prompt is evaluated from the start). Returns the rows
 * kept; the session and the live provenance hold exactly those. Nothing of
 * another isolation domain is ever a match (seq_common_prefix, and the
 * block names). */
static int32_t plan_reuse(ph_engine *e, slot *sl, turn *t, bool aux, ph_turn_report *r) {
    kv_cache *kv = &sl->s->kv;
    seq_state *want = &t->want;
    const uint8_t(*names)[KV_NAME_LEN] = (const uint8_t(*)[KV_NAME_LEN])t->names;
    /* with recurrent layers, the most that is kept is a snapshot's rows */
    int32_t keep = e->reuse ? kv_cache_cut_point(kv, usable(want, seq_common_prefix(&sl->live, want))) : 0;
    const int32_t most = usable(want, want->n_rows);
    /* the request's full blocks that the pool holds, from the first */
    int32_t run = 0;
    while (run < t->n_names && kv_pool_contains(&e->pool, names[run])) run++;
    run *= KV_BLOCK_ROWS;
    bool pinned = false;
    if (aux && !sl->live_is_aux && !e->has_parked && keep < sl->live.n_rows)
        pinned = r->parked = park_primary(e, sl, blocks_for(want->n_rows + 1) - keep / KV_BLOCK_ROWS);
    ram_point c = {.tail = -1};
    int32_t best = keep;
    enum { FROM_LIVE, FROM_POINT, FROM_POOL, FROM_SLOT, FROM_DISK } from = FROM_LIVE;
    const bool had_parked = !aux && e->has_parked;
    if (had_parked) { /* the primary conversation is back, or has moved on */
        int32_t n = ram_point_cut(&e->parked, usable(want, seq_common_prefix(&e->parked.seq, want)));
        if (n > best) {
            c = e->parked;
            best = n;
            r->from_parked = true;
            from = FROM_POINT;
        } else {
            ram_point_free(&e->parked, &e->pool);
        }
        memset(&e->parked, 0, sizeof e->parked);
        e->parked.tail = -1;
        e->has_parked = false;
    }
    int32_t from_ram = 0;
    const int32_t ck = names && best < most ? ram_tier_find(&e->ram, want, most, run, &from_ram) : -1;
    const int32_t from_pool =
        names && !kv->recurrent && best < most ? known_rows(e, sl, want, run < most ? run : most, false) : 0;
    /* another running request's rows (a fork: its last, partial block too) */
    int32_t from_slot = 0;
    const slot *fork = NULL;
    for (int i = 0; names && !kv->recurrent && best < most && i < e->n_slots; i++) {
        const slot *o = &e->slots[i];
        if (o == sl || !o->busy || !o->stable) continue;
        int32_t m = forkable(o, want);
        if (m > most) m = seq_back_off(want, most);
        if (m > from_slot) from_slot = m, fork = o;
    }
    int32_t beat = from_ram > from_pool ? from_ram : from_pool;
    if (from_slot > beat) beat = from_slot;
    disk_match dm = {0};
    int32_t from_disk = 0;
    if (e->disk && e->reuse && best < most && beat < most &&
        disk_tier_find(e->disk, want, best > beat ? best : beat, &dm))
        from_disk = disk_match_cut(&dm, usable(want, dm.prefix));
    if (from_disk > best && from_disk > beat) {
        ram_point_free(&c, &e->pool); /* a parked conversation that the disk beats */
        best = from_disk;
        r->from_parked = false;
        from = FROM_DISK;
    } else {
        disk_match_free(&dm);
        if (from_slot > best && from_slot > from_ram && from_slot > from_pool) {
            ram_point_free(&c, &e->pool); /* a parked conversation that a running request beats */
            best = from_slot;
            r->from_parked = false;
            from = FROM_SLOT;
        } else if (ck >= 0 && from_ram > best && from_ram >= from_pool) {
            ram_point_free(&c, &e->pool); /* a parked conversation that a resume point beats */
            ram_tier_take(&e->ram, ck, &c);
            best = from_ram;
            r->from_parked = false;
            from = FROM_POINT;
        } else if (from_pool > best) {
            ram_point_free(&c, &e->pool);
            e->ram.hits++;
            best = from_pool;
            r->from_parked = false;
            from = FROM_POOL;
        }
    }
    if (had_parked) {
        if (r->from_parked) e->st.conversations_restored++;
        else e->st.conversations_dropped++;
    }
    /* the disk writer may still be reading cells that change or move now:
     * the rows past keep, and the block of row keep (copied before a row
     * is written into it when it is named or shared, and then given back) */
    if (e->disk) disk_tier_release_rows(e->disk, best > keep ? 0 : keep / KV_BLOCK_ROWS * KV_BLOCK_ROWS);
    /* the live state is about to lose rows of its prompt (a just-parked
     * primary conversation is held already); rows that a restore replaces
     * need not stay. A few lost rows (a thinking model's answer opener,
     * which every turn resumes before) are not worth a point. */
    if (!pinned && e->reuse && (best > keep || keep + PARK_MIN_LOST < sl->live_prompt)) save_live(e, sl);
    if (from == FROM_DISK) {
        /* the rows that check out: all of them, or those before a record
         * that failed (refused, logged and counted by the tier) */
        seq_clear(&sl->live);
        sl->n_named = 0;
        const int32_t got = disk_tier_load(e->disk, &dm, kv, best);
        if (got > 0) {
            seq_copy(&sl->live, &dm.seq, got, NULL); /* live.cap is the context size */
            sl->s->next_pos = seq_pos_at(&dm.seq, got);
            keep = got;
            r->n_from_disk = got;
        } else {
            PH_WARN("the disk cache's records for this prompt failed their checks; the prompt is evaluated from the "
                    "start");
            ph_session_reset(sl->s);
            keep = 0;
        }
        disk_match_free(&dm);
    } else if (best > keep) {
        /* A point whose rows past the prefix are few (typically the answer,
         * which the client sends back in its own words) is used up; one with
         * more is kept for them (a parked one is taken whole) */
        bool used_up = from != FROM_POINT || r->from_parked || c.seq.n_rows - best <= best / 8;
        if (from == FROM_POOL) known_rows(e, sl, want, best, true);
        const seq_state *src = from == FROM_POOL || from == FROM_SLOT ? want : &c.seq;
        if (from == FROM_SLOT) take_forked(e, sl, fork, want, keep, best);
        else take_blocks(e, sl, from == FROM_POINT ? &c : NULL, names, keep, best, &used_up);
        seq_copy(&sl->live, src, best, NULL);
        sl->s->next_pos = seq_pos_at(src, best);
        if (c.rec) kv_cache_load_recurrent(kv, c.rec, c.rec_rows, c.n_rec, best);
        if (used_up) ram_point_free(&c, &e->pool); /* the live state holds what it could give */
        else ram_tier_return(&e->ram, &c);
        sl->n_named = 0;
        if (from == FROM_SLOT) e->st.prompt_tokens_forked += (uint64_t)(best - keep);
        else r->n_from_ram = best;
        keep = best;
    } else {
        keep_live(sl, keep);
    }
    sl->live_prompt = keep;
    sl->live_is_aux = aux;
    memcpy(sl->live.domain, want->domain, sizeof sl->live.domain); /* what is kept is of its domain already */
    /* a kept picture keeps the cond_hash it was evaluated with (docs/state-cache.md, Reuse rules) */
    for (int32_t i = 0; i < want->n_spans && want->spans[i].start < keep; i++) {
        memcpy(want->spans[i].cond_hash, sl->live.spans[i].cond_hash, 32);
        want->spans[i].has_cond = sl->live.spans[i].has_cond;
    }
    publish_live(e, sl);
    return keep;
}

/* With recurrent layers, t->head: the prompt's rows before the answer's
 * opener (chat_format_opener), the last row that the conversation re-sent
 * with this turn's answer shares. */
static int find_head(turn *t, const chat_render_opts *ro, ph_err *err) {
    ph_engine *e = t->e;
    if (e->m->hp.n_rec_layer == 0) return 0;
    const char *op = chat_format_opener(&e->fmt, ro);
    ph_tokens k = {0};
    if (ph_tokenize(e->m, op, strlen(op), true, &k, err)) return -1;
    t->head = t->want.n_rows - (int32_t)k.n;
    ph_tokens_free(&k);
    return 0;
}

/* Renders a turn's prompt stream; pictures need the vision encoder. */
static int render(turn *t, const ph_chat_msg *msgs, size_t n_msgs, const ph_gen_params *gp, ph_err *err) {
    ph_engine *e = t->e;
    const chat_render_opts ro = {.thinking = gp->thinking};
    if (chat_format_render(&e->fmt, e->m->vocab, msgs, n_msgs, gp->tools, gp->n_tools, &ro, &t->prompt, &t->pics,
                           err))
        return -1;
    if (t->prompt.n_pictures && !e->has_vision)
        return err_setc(err, PH_ERR_NO_VISION,
                        "this server has no vision encoder (start it with --mmproj) and cannot read pictures");
    return 0;
}

int ph_engine_count(ph_engine *e, const ph_chat_msg *msgs, size_t n_msgs, const ph_gen_params *gp, int32_t *n_rows,
                    ph_err *err) {
    turn t = {.e = e, .domain = gp->domain};
    int rc = render(&t, msgs, n_msgs, gp, err);
    *n_rows = rc ? 0 : (int32_t)prompt_rows(&t);
    turn_free(&t);
    return rc;
}

int ph_engine_render(const ph_engine *e, const ph_chat_msg *msgs, size_t n_msgs, const ph_gen_params *gp,
                     const char *marker, char **text, size_t *len, ph_err *err) {
    const chat_render_opts ro = {.thinking = gp->thinking};
    return chat_format_render_text(&e->fmt, msgs, n_msgs, gp->tools, gp->n_tools, &ro, marker, text, len, err);
}

/* Admission (docs/state-cache.md, Blocks and the pool): a request whose
 * rows the pool cannot hold, whatever it reuses and evicts, is refused
 * before any work, naming the sizes. The live blocks count as available
 * (kept, or given back to the pool), but for its last one (kept by a
 * resume point). */
static int admit(ph_engine *e, const slot *sl, const seq_state *want, ph_err *err) {
    const int32_t need = blocks_for(want->n_rows + 1), held = sl->s->kv.n_held,
                  have = kv_pool_available(&e->pool) + (held ? held - 1 : 0);
    if (need <= have) return 0;
    kv_pool_stats ps;
    kv_pool_get_stats(&e->pool, &ps);
    return err_setc(err, PH_ERR_TOO_LONG,
                    "the prompt (%d tokens) needs %d KV blocks of %.2f MiB but the KV pool (%d blocks, %.0f MiB; %d "
                    "pinned by a parked conversation) can give %d: start the server with a larger --kv-pool-mib",
                    want->n_rows, need, (double)ps.block_bytes / (1 << 20), ps.total,
                    (double)ps.total * (double)ps.block_bytes / (1 << 20), ps.pinned, have);
}

/* Shared prefixes computed once (docs/server.md, Parallel requests): while
 * another running request evaluates blocks that this one's prompt starts
 * with too (the same names: the same rows, pictures and domain) and that
 * neither the pool nor this slot's live state holds, waits for them to be
 * published (e->mu held); the plan then takes them from the pool. A
 * request waits only for one that planned before it, so no two wait for
 * each other. Nothing with recurrent layers: their state at a block's end
 * is not in the block. */
static void await_shared(ph_engine *e, slot *sl, const turn *t) {
    if (!t->n_names || sl->s->kv.recurrent) return;
    const int32_t own = usable(&t->want, seq_common_prefix(&sl->live, &t->want)) / KV_BLOCK_ROWS;
    bool waited = false;
    for (;;) {
        int32_t have = 0, coming = 0;
        while (have < t->n_names && kv_pool_contains(&e->pool, t->names[have])) have++;
        for (int i = 0; i < e->n_slots; i++) {
            const slot *o = &e->slots[i];
            int32_t m = 0;
            while (m < o->n_claim && m < t->n_names && !memcmp(o->claim[m], t->names[m], KV_NAME_LEN)) m++;
            if (o != sl && m > coming) coming = m;
        }
        if (coming <= have || coming <= own) break;
        waited = true;
        pthread_cond_wait(&e->changed, &e->mu);
    }
    if (waited) e->st.prefix_waits++;
}

/* Gives up a slot's claim (e->mu held): its request evaluated them, or
 * failed. */
static void drop_claim(ph_engine *e, slot *sl) {
    if (!sl->n_claim) return;
    sl->claim = NULL;
    sl->n_claim = 0;
    pthread_cond_broadcast(&e->changed);
}

/* The slot for a request (e->mu held; waits for one to be free): the free
 * one whose live state shares the longest usable prefix with want, else the
 * one least recently used. An auxiliary request leaves a primary
 * conversation's slot alone while another is free (its blocks stay held
 * there, never evicted for it); with one slot it takes it and parks the
 * primary conversation (plan_reuse). */
static slot *take_slot(ph_engine *e, const seq_state *want, const ph_gen_params *gp) {
    const bool aux = gp->auxiliary;
    for (;;) {
        slot *best = NULL, *lru = NULL;
        int32_t best_n = 0;
        bool any_other = false;
        for (int i = 0; i < e->n_slots; i++) {
            const slot *sl = &e->slots[i];
            any_other |= !sl->busy && (!sl->live.n_rows || sl->live_is_aux);
        }
        for (int i = 0; i < e->n_slots; i++) {
            slot *sl = &e->slots[i];
            if (sl->busy) continue;
            if (aux && any_other && sl->live.n_rows && !sl->live_is_aux) continue;
            const int32_t n = e->reuse ? usable(want, seq_common_prefix(&sl->live, want)) : 0;
            if (n > best_n) best = sl, best_n = n;
            if (!lru || sl->used < lru->used) lru = sl;
        }
        slot *sl = best ? best : lru;
        if (sl) {
            sl->busy = true;
            sl->paused = sl->give_back = sl->dropped = false;
            sl->used = ++e->slot_clock;
            e->running++;
            sl->progress = gp->progress ? gp->progress : e->progress;
            sl->progress_ud = gp->progress ? gp->progress_ud : e->progress_ud;
            ph_session_set_progress(sl->s, sl->progress ? on_rows : NULL, sl);
            return sl;
        }
        pthread_cond_wait(&e->slot_freed, &e->mu);
    }
}

static void give_slot(ph_engine *e, slot *sl) {
    pthread_mutex_lock(&e->mu);
    drop_claim(e, sl);
    sl->busy = false;
    e->running--;
    pthread_cond_signal(&e->slot_freed);
    pthread_cond_broadcast(&e->changed); /* a paused answer may reclaim its blocks, or be the oldest now */
    pthread_mutex_unlock(&e->mu);
}

int ph_engine_chat(ph_engine *e, const ph_chat_msg *msgs, size_t n_msgs, const ph_gen_params *gp, ph_gen_cb cb,
                   void *ud, ph_turn_report *r, ph_err *err) {
    memset(r, 0, sizeof *r);
    const double t0 = time_now_s();
    turn t = {.e = e, .domain = gp->domain};
    constraint con = {.call_token = -1};
    ph_tokens forced = {0};
    slot *sl = NULL;
    int rc = render(&t, msgs, n_msgs, gp, err);
    r->n_pictures = t.prompt.n_pictures;
    if (rc) goto out;
    /* what the answer may be, settled before any work */
    pthread_mutex_lock(&e->mu);
    if (constrained(gp) && !e->jv && !(e->jv = jc_vocab_new(e->m->hp.n_vocab, constraint_token_text, e->m, err)))
        rc = -1;
    pthread_mutex_unlock(&e->mu);
    if (rc) goto out;
    const chat_render_opts ro = {.thinking = gp->thinking};
    if ((rc = constraint_init(&con, e->m, e->jv, gp, chat_format_opens_think(&e->fmt, &ro),
                              chat_format_family(&e->fmt)->calls == CHAT_CALLS_XML, err)) != 0 ||
        (rc = forced_tokens(e, gp, &forced, err)) != 0)
        goto out;
    if ((rc = check_fits(&t, err)) != 0) goto out;
    rc = identify_pictures(&t, err);
    if (rc || (rc = build_want(&t, err)) != 0 || (rc = find_head(&t, &ro, err)) != 0) goto out;
    r->n_prompt = t.want.n_rows;
    if (e->reuse && e->ram.budget) { /* the names the pool knows blocks by */
        if (!(t.names = malloc(((size_t)t.want.n_rows / KV_BLOCK_ROWS + 1) * KV_NAME_LEN))) {
            rc = err_set(err, "out of memory");
            goto out;
        }
        t.n_names = kv_block_names(&t.want, t.want.n_rows, true, t.names);
    }

    /* a slot, and the plan, under the engine's lock */
    pthread_mutex_lock(&e->mu);
    t.sl = sl = take_slot(e, &t.want, gp);
    if ((rc = admit(e, sl, &t.want, err)) != 0) {
        pthread_mutex_unlock(&e->mu);
        goto out;
    }
    await_shared(e, sl, &t);
    const double tp = time_now_s();
    int32_t keep = plan_reuse(e, sl, &t, gp->auxiliary, r);
    r->checkpoint_s = time_now_s() - tp;
    sl->claim = (const uint8_t(*)[KV_NAME_LEN])t.names; /* the rows it evaluates now, for the others */
    sl->n_claim = t.n_names;
    r->n_reused = keep;
    r->n_prefilled = t.want.n_rows - keep;
    pthread_mutex_unlock(&e->mu);

    if ((rc = resolve_pictures(&t, keep, r, err)) != 0) goto out;
    const double t1 = time_now_s();
    session_progress_span(sl->s, r->n_prefilled);
    rc = prefill(&t, keep, err);
    session_progress_span(sl->s, 0);
    if (rc) {
        err->code = PH_ERR_INTERNAL;
        goto reset;
    }
    r->prefill_s = time_now_s() - t1;
    pthread_mutex_lock(&e->mu);
    publish_live(e, sl);
    drop_claim(e, sl);
    sl->live_prompt = sl->live.n_rows;
    e->st.prompt_tokens_reused += (uint64_t)r->n_reused;
    e->st.prompt_tokens_prefilled += (uint64_t)r->n_prefilled;
    e->st.prompt_tokens_from_ram += (uint64_t)r->n_from_ram;
    e->st.disk_cache_tokens_restored += (uint64_t)r->n_from_disk;
    pthread_mutex_unlock(&e->mu);
    /* the prompt's end, kept: the next turn resumes there whatever the
     * client makes of the answer (a thinking model's history drops its
     * reasoning; a client may render the answer otherwise) */
    checkpoint(e, sl, 0, true);
    if ((rc = generate(&t, gp, &con, &forced, cb, ud, r, t0, err)) != 0) goto reset;
    pthread_mutex_lock(&e->mu);
    publish_live(e, sl);
    pthread_mutex_unlock(&e->mu);
    checkpoint(e, sl, 0, false); /* the turn */
    goto out;
reset:
    /* the KV may hold part of this turn: forget it rather than keep state
     * whose provenance is not exactly known (its blocks go back to the pool
     * once the disk writer is done reading them) */
    pthread_mutex_lock(&e->mu);
    if (e->disk) disk_tier_release_rows(e->disk, 0);
    forget_live(sl);
    pthread_mutex_unlock(&e->mu);
out:
    if (sl) give_slot(e, sl);
    constraint_free(&con);
    ph_tokens_free(&forced);
    turn_free(&t);
    return rc;
}
