/* Sequence provenance and prefix matching (docs/state-cache.md, Provenance, Reuse rules). */
#include "state/seq_state.h"

#include <stdlib.h>
#include <string.h>

int seq_init(seq_state *s, int32_t cap, ph_err *err) {
    memset(s, 0, sizeof *s);
    s->tok = malloc((size_t)cap * sizeof *s->tok);
    s->pos_after = malloc((size_t)cap * sizeof *s->pos_after);
    if (!s->tok || !s->pos_after) {
        seq_free(s);
        return err_set(err, "out of memory for a sequence of %d rows", cap);
    }
    s->cap = cap;
    return 0;
}

void seq_free(seq_state *s) {
    free(s->tok);
    free(s->pos_after);
    free(s->spans);
    memset(s, 0, sizeof *s);
}

void seq_clear(seq_state *s) {
    s->n_rows = 0;
    s->n_spans = 0;
}

int seq_push_token(seq_state *s, int32_t id, int32_t pos, ph_err *err) {
    if (s->n_rows >= s->cap) return err_set(err, "sequence full (%d rows)", s->cap);
    s->tok[s->n_rows] = id;
    s->pos_after[s->n_rows] = pos + 1;
    s->n_rows++;
    return 0;
}

int seq_push_span(seq_state *s, const seq_span *sp, int32_t pos, ph_err *err) {
    if (sp->n_tokens <= 0 || s->n_rows + sp->n_tokens > s->cap)
        return err_set(err, "sequence full (%d rows)", s->cap);
    if (s->n_spans == s->spans_cap) {
        int32_t cap = s->spans_cap ? s->spans_cap * 2 : 8;
        seq_span *n = realloc(s->spans, (size_t)cap * sizeof *n);
        if (!n) return err_set(err, "out of memory");
        s->spans = n;
        s->spans_cap = cap;
    }
    seq_span *d = &s->spans[s->n_spans++];
    *d = *sp;
    d->start = s->n_rows;
    /* every row of a picture has t = pos; the text after it continues at
     * pos + n_pos, which is what a prefix ending after the span resumes at */
    for (int32_t i = 0; i < sp->n_tokens; i++) {
        s->tok[s->n_rows + i] = SEQ_ROW_PICTURE;
        s->pos_after[s->n_rows + i] = pos + sp->n_pos;
    }
    s->n_rows += sp->n_tokens;
    return 0;
}

void seq_truncate(seq_state *s, int32_t n) {
    if (n >= s->n_rows) return;
    s->n_rows = n < 0 ? 0 : n;
    while (s->n_spans && s->spans[s->n_spans - 1].start >= s->n_rows) s->n_spans--;
}

int seq_copy(seq_state *dst, const seq_state *src, int32_t n, ph_err *err) {
    if (n > src->n_rows) n = src->n_rows;
    if (n > dst->cap) return err_set(err, "sequence full (%d rows)", dst->cap);
    int32_t ns = 0;
    while (ns < src->n_spans && src->spans[ns].start < n) ns++;
    if (ns > dst->spans_cap) {
        seq_span *sp = realloc(dst->spans, (size_t)ns * sizeof *sp);
        if (!sp) return err_set(err, "out of memory");
        dst->spans = sp;
        dst->spans_cap = ns;
    }
    memcpy(dst->model_id, src->model_id, sizeof dst->model_id);
    memcpy(dst->format, src->format, sizeof dst->format);
    memcpy(dst->domain, src->domain, sizeof dst->domain);
    memcpy(dst->tok, src->tok, (size_t)n * sizeof *dst->tok);
    memcpy(dst->pos_after, src->pos_after, (size_t)n * sizeof *dst->pos_after);
    if (ns) memcpy(dst->spans, src->spans, (size_t)ns * sizeof *dst->spans);
    dst->n_rows = n;
    dst->n_spans = ns;
    return 0;
}

int32_t seq_pos_at(const seq_state *s, int32_t n) { return n <= 0 ? 0 : s->pos_after[n - 1]; }

/* The span that holds row r (rows are picture rows), or NULL. */
static const seq_span *span_at(const seq_state *s, int32_t r) {
    int32_t lo = 0, hi = s->n_spans - 1;
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;
        const seq_span *sp = &s->spans[mid];
        if (r < sp->start) hi = mid - 1;
        else if (r >= sp->start + sp->n_tokens) lo = mid + 1;
        else return sp;
    }
    return NULL;
}

int32_t seq_back_off(const seq_state *s, int32_t n) {
    if (n <= 0 || n >= s->n_rows) return n <= 0 ? 0 : n;
    const seq_span *sp = span_at(s, n);
    return sp && sp->start < n ? sp->start : n;
}

int32_t seq_common_prefix(const seq_state *a, const seq_state *b) {
    if (memcmp(a->domain, b->domain, sizeof a->domain) != 0) return 0;
    const int32_t n = a->n_rows < b->n_rows ? a->n_rows : b->n_rows;
    int32_t r = 0;
    while (r < n) {
        if (a->tok[r] != SEQ_ROW_PICTURE || b->tok[r] != SEQ_ROW_PICTURE) {
            if (a->tok[r] != b->tok[r]) break;
            r++;
            continue;
        }
        const seq_span *x = span_at(a, r), *y = span_at(b, r);
        if (!x || !y || x->start != r || y->start != r || x->n_tokens != y->n_tokens || x->grid_x != y->grid_x ||
            x->grid_y != y->grid_y || memcmp(x->embed_key, y->embed_key, 32) != 0 || r + x->n_tokens > n)
            break; /* another picture, or one that a frontier cuts */
        r += x->n_tokens;
    }
    /* a prefix that ends inside a span (of either side) backs off to its start */
    int32_t ra = seq_back_off(a, r), rb = seq_back_off(b, r);
    return ra < rb ? ra : rb;
}

bool seq_complete(const seq_state *s, int32_t n) {
    for (int32_t i = 0; i < s->n_spans; i++) {
        const seq_span *sp = &s->spans[i];
        if (sp->start >= n) break;
        if (sp->start + sp->n_tokens > n || !sp->has_cond) return false;
    }
    return true;
}

bool seq_span_cond(const seq_state *s, const seq_span *sp, uint8_t cond[32]) {
    return seq_spans_cond(s->spans, s->n_spans, sp, cond);
}

bool seq_spans_cond(const seq_span *spans, int32_t n, const seq_span *sp, uint8_t cond[32]) {
    for (int32_t k = 0; k < n; k++) {
        const seq_span *q = &spans[k];
        if (q->start == sp->start && q->has_cond && q->grid_x == sp->grid_x && q->grid_y == sp->grid_y &&
            !memcmp(q->embed_key, sp->embed_key, 32)) {
            memcpy(cond, q->cond_hash, 32);
            return true;
        }
    }
    return false;
}
