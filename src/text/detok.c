/* Streaming detokenizer: token bytes go through a small UTF-8 state machine
 * (ph_detok.pending holds an incomplete character, at most 3 bytes), so the
 * output only ever holds whole characters. */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "text/unicode.h"

static const uint8_t REPLACEMENT[3] = {0xEF, 0xBF, 0xBD}; /* U+FFFD */

/* Output buffer; once a character does not fit, everything after it is
 * dropped too, so the output is never missing a piece in the middle. */
typedef struct sink {
    char *out;
    size_t cap, n;
    bool full;
} sink;

static void put(sink *o, const void *s, size_t k) {
    if (o->full || o->n + k >= o->cap) {
        o->full = true;
        return;
    }
    memcpy(o->out + o->n, s, k);
    o->n += k;
}

static size_t finish(sink *o) {
    if (o->cap > 0) o->out[o->n] = '\0';
    return o->n;
}

/* Adds one byte and emits what is now decided. */
static void feed(ph_detok *d, sink *o, uint8_t byte) {
    d->pending[d->n_pending++] = (char)byte;
    while (d->n_pending > 0) {
        uint32_t cp;
        int k = utf8_next((const uint8_t *)d->pending, (size_t)d->n_pending, &cp);
        if (k == 0) return; /* a valid prefix: wait for more */
        if (k > 0) {
            put(o, d->pending, (size_t)k);
        } else {
            put(o, REPLACEMENT, sizeof REPLACEMENT);
            k = -k;
        }
        d->n_pending -= k;
        memmove(d->pending, d->pending + k, (size_t)d->n_pending);
    }
}

size_t detok_push(ph_detok *d, const bpe_vocab *v, int32_t id, char *out, size_t cap) {
    sink o = {out, cap, 0, false};
    char local[512];
    const int n = token_bytes(v, id, local, sizeof local);
    if (n > 0) {
        char *bytes = local;
        if ((size_t)n > sizeof local) {
            if (!(bytes = malloc((size_t)n))) return finish(&o);
            token_bytes(v, id, bytes, (size_t)n);
        }
        for (int i = 0; i < n; i++) feed(d, &o, (uint8_t)bytes[i]);
        if (bytes != local) free(bytes);
    }
    return finish(&o);
}

size_t detok_flush(ph_detok *d, char *out, size_t cap) {
    sink o = {out, cap, 0, false};
    /* What is pending is a proper prefix of a character: one U+FFFD. */
    if (d->n_pending > 0) put(&o, REPLACEMENT, sizeof REPLACEMENT);
    d->n_pending = 0;
    return finish(&o);
}
