/* Sequence state provenance (docs/state-cache.md, Provenance) and prefix matching (Reuse rules).
 *
 * A sequence is a list of rows: text tokens, and picture spans whose rows
 * came from one picture's embedding. The live KV's provenance says exactly
 * what produced each of its rows: the token id, or the span it belongs to
 * with the picture's image_id, embed_key and cond_hash (the hash of the
 * rows actually put into the context). A request's prompt stream has the
 * same shape (without cond_hash until its pictures are resolved), so the
 * two compare item by item. Both carry the isolation domain they belong to
 * (state/domain.h): rows of different domains are never common. */
#ifndef PH_STATE_SEQ_STATE_H
#define PH_STATE_SEQ_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "state/domain.h"

typedef struct seq_span {
    int32_t start;    /* first row */
    int32_t n_tokens; /* rows: grid_x * grid_y */
    int32_t grid_x, grid_y;
    int32_t n_pos; /* positions it advances */
    uint8_t image_id[32];
    uint8_t embed_key[32];
    uint8_t cond_hash[32];
    bool has_cond; /* cond_hash is known */
} seq_span;

#define SEQ_ROW_PICTURE (-1)

typedef struct seq_state {
    uint8_t model_id[32];
    char format[128];           /* state-format tag: what the KV bytes depend on */
    uint8_t domain[DOMAIN_LEN]; /* the isolation domain that made it (all zero: the default) */
    int32_t n_rows, cap;
    int32_t *tok;       /* per row: token id, or SEQ_ROW_PICTURE */
    int32_t *pos_after; /* per row: the next position after it */
    seq_span *spans;
    int32_t n_spans, spans_cap;
} seq_state;

int seq_init(seq_state *s, int32_t cap, ph_err *err);
void seq_free(seq_state *s);
void seq_clear(seq_state *s);
/* Appends a token row / a whole picture span (pos: position of the row, or
 * of the picture's first row). The caller keeps rows and KV in step. */
int seq_push_token(seq_state *s, int32_t id, int32_t pos, ph_err *err);
int seq_push_span(seq_state *s, const seq_span *sp, int32_t pos, ph_err *err);
/* Keeps the first n rows (n must not cut a span). */
void seq_truncate(seq_state *s, int32_t n);
/* Makes dst the first n rows of src (n must not cut a span; dst->cap >=
 * n), provenance and identity included. */
int seq_copy(seq_state *dst, const seq_state *src, int32_t n, ph_err *err);
/* The position after the first n rows. */
int32_t seq_pos_at(const seq_state *s, int32_t n);

/* The length of the common prefix of a and b (rows): tokens equal by id,
 * spans equal by embed_key and grid; a difference inside a span backs off
 * to its start (docs/state-cache.md, Reuse rules). States of different isolation domains have
 * none. */
int32_t seq_common_prefix(const seq_state *a, const seq_state *b);
/* Backs n off to the start of a span it would cut. */
int32_t seq_back_off(const seq_state *s, int32_t n);
/* The cond_hash s holds for a picture span like sp (the same start,
 * embed_key and grid): true with it in cond. */
bool seq_span_cond(const seq_state *s, const seq_span *sp, uint8_t cond[32]);
/* The same, among n spans. */
bool seq_spans_cond(const seq_span *spans, int32_t n, const seq_span *sp, uint8_t cond[32]);
/* Whether every span of the first n rows is whole and has a cond_hash
 * (docs/state-cache.md, Reuse rules: only such state may be saved). */
bool seq_complete(const seq_state *s, int32_t n);

#endif
