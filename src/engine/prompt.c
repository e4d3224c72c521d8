/* Prompt streams: text runs and pictures in order. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "pinhole.h"
#include "text/prompt.h"

/* The text item to append tokens to: the last item if it is text. */
static ph_prompt_item *text_item(ph_prompt *p) {
    if (p->n && !p->items[p->n - 1].is_picture) return &p->items[p->n - 1];
    return prompt_new_item(p);
}

static int add_text(const ph_model *m, ph_prompt *p, const char *text, size_t len, ph_err *err) {
    if (len == 0) return 0;
    ph_prompt_item *it = text_item(p);
    if (!it) return err_set(err, "out of memory");
    return ph_tokenize(m, text, len, true, &it->tokens, err);
}

int ph_prompt_from_raw(const ph_model *m, const char *raw, const char *marker, ph_prompt *out, ph_err *err) {
    memset(out, 0, sizeof *out);
    const int32_t bos = ph_model_bos(m);
    if (bos >= 0) {
        ph_prompt_item *it = prompt_new_item(out);
        if (!it || ph_tokens_push(&it->tokens, bos)) goto oom;
    }
    const size_t mlen = marker ? strlen(marker) : 0;
    const char *at = raw;
    for (;;) {
        const char *hit = mlen ? strstr(at, marker) : NULL;
        size_t len = hit ? (size_t)(hit - at) : strlen(at);
        if (add_text(m, out, at, len, err)) goto fail;
        if (!hit) break;
        /* <|vision_start|> picture <|vision_end|>, as llama.cpp's mtmd does */
        static const char vs[] = "<|vision_start|>", ve[] = "<|vision_end|>";
        if (ph_token_lookup(m, vs) < 0 || ph_token_lookup(m, ve) < 0) {
            err_set(err, "the model's vocabulary has no %s / %s tokens: it does not take pictures", vs, ve);
            goto fail;
        }
        if (add_text(m, out, vs, sizeof vs - 1, err)) goto fail;
        ph_prompt_item *it = prompt_new_item(out);
        if (!it) goto oom;
        it->is_picture = true;
        it->picture = out->n_pictures++;
        if (add_text(m, out, ve, sizeof ve - 1, err)) goto fail;
        at = hit + mlen;
    }
    return 0;
oom:
    err_set(err, "out of memory");
fail:
    ph_prompt_free(out);
    return -1;
}
