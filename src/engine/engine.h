/* The engine's internals shared by its files (engine.c: lifecycle and
 * turns; pictures.c: pictures as received, their identity, the bytes_id
 * memo, embed keys). */
#ifndef PH_ENGINE_ENGINE_H
#define PH_ENGINE_ENGINE_H

#include <pthread.h>

#include "engine/batcher.h"
#include "image/image.h"
#include "engine/picture.h"
#include "engine/session.h"
#include "pinhole.h"
#include "state/disk_tier.h"
#include "state/shared_tier.h"
#include "state/embed_cache.h"
#include "state/encoder.h"
#include "state/ram_tier.h"
#include "state/seq_state.h"
#include "text/chat_format.h"
#include "text/json_constraint.h"

#define ENGINE_MEMO 256

typedef struct image_memo_entry {
    uint8_t key[32]; /* bytes_id, with the isolation domain folded in */
    uint8_t image_id[32];
    uint64_t used;
} image_memo_entry;

/* A slot: one request at a time runs in it, on its session (the KV
 * blocks of one sequence, from the engine's pool) and its live state. */
typedef struct slot {
    ph_session *s;
    seq_state live;                /* provenance of the session's KV */
    int32_t live_prompt;           /* rows of the live state's last prompt */
    uint8_t (*names)[KV_NAME_LEN]; /* the names of the live full blocks published, in row order */
    int32_t n_named;               /* how many (publish_live) */
    bool live_is_aux;              /* an auxiliary request made the live state */
    bool busy;                     /* a request runs in it */
    uint64_t used;                 /* when it was last taken (the engine's clock) */
    struct ph_engine *e;
    ph_progress_fn progress; /* the running request's progress (its own, or the engine's) */
    void *progress_ud;
    int64_t enc_done, enc_total; /* the request's encoder steps (PH_PROGRESS_ENCODE) */
    /* Read by other requests under e->mu (its request writes live without it): */
    const uint8_t (*claim)[KV_NAME_LEN]; /* while its prompt is evaluated: the names of its full blocks */
    int32_t n_claim;                     /* (a request that shares them waits for them: await_shared) */
    int32_t stable;                      /* its live rows evaluated so far (they change only under e->mu) */
    seq_span *shown;                     /* the pictures of its live state, with their cond_hash */
    int32_t n_shown, cap_shown;
    bool paused;         /* its answer waits for blocks of the pool (room_for) */
    bool give_back;      /* asked to give its blocks back while paused */
    bool dropped;        /* it gave them back: its live rows are evaluated again when it resumes */
    bool encoding;       /* a picture of embed_key enc_key is being encoded for it */
    uint8_t enc_key[32]; /* (a request with the same picture waits for it: resolve_pictures) */
} slot;

struct ph_engine {
    ph_model *m;
    batcher *bat;       /* evaluates the slots' rows together, and runs the picture encodes */
    pthread_mutex_t mu; /* the pool, the tiers, the caches, the slots' bookkeeping and the stats */
    pthread_cond_t slot_freed;
    pthread_cond_t changed; /* blocks published, a claim given up, an encode done */
    bool mu_ready;
    int n_parallel;
    slot *slots; /* n_slots (n_parallel) of them */
    int n_slots;
    uint64_t slot_clock;
    int running;       /* requests in a slot now */
    ph_ctx_choice ctx; /* how the session's context size was chosen */
    kv_pool pool;      /* every KV block: the slots', the RAM tier's, a parked one's */
    bool pool_ready;
    ram_tier ram;     /* resume points of displaced sequences */
    ram_point parked; /* the primary conversation, parked for auxiliary requests */
    bool has_parked;
    size_t park_budget;
    chat_fmt fmt;
    uint8_t model_id[32];
    bool has_vision;
    vis_encoder enc;
    embed_store *cache;
    disk_tier *disk;     /* the disk tier's block records (NULL: none) */
    shared_tier *shared; /* the shared tier (NULL: none) */
    int32_t checkpoint_every;
    bool reuse;
    char format_tag[128];
    /* bytes_id -> image_id memo, per isolation domain (under mu) */
    image_memo_entry memo[ENGINE_MEMO];
    uint64_t memo_clock;
    ph_engine_stats st;
    jc_vocab *jv;            /* the constraint's tables over the vocabulary, built on first use */
    ph_progress_fn progress; /* ph_engine_set_progress */
    void *progress_ud;
    int test_step_delay_ms;  /* PINHOLE_TEST_PREFILL_DELAY_MS: a test's slow prefill */
    int test_slice_delay_ms; /* PINHOLE_TEST_SLICE_DELAY_MS: a test's slow slices of a picture's encode */
};

/* The embed_key of a picture of w x h with this encoder (docs/state-cache.md, Identity) in an
 * isolation domain (state/domain.h), and its merged grid. */
void engine_embed_key(const ph_engine *e, const ph_picture *im, const uint8_t domain[32], uint8_t key[32],
                      int32_t *grid_x, int32_t *grid_y);
/* Makes the picture's image_id known: from the bytes_id memo of the
 * request's isolation domain, else by decoding it (the pixels are then
 * kept in im->img). Takes e->mu for the memo only: the decode runs
 * without it. */
int engine_picture_identify(ph_engine *e, ph_picture *im, const uint8_t domain[32], ph_err *err);

#endif
