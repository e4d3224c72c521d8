/* ChatML for Qwen3-VL (spec G): each turn is
 *   <|im_start|>{role}\n{content}<|im_end|>\n
 * a picture part is <|vision_start|>(rows)<|vision_end|> in place, and the
 * generation prompt is <|im_start|>assistant\n (followed by <think>\n for
 * the thinking variants). No system turn unless one is given. The rendered
 * text between pictures is tokenized with special tokens parsed, as
 * llama.cpp does with the rendered template, so the same conversation gives
 * the same tokens in both. */
#include "text/chat_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/prompt.h"
#include "gguf/gguf.h"
#include "model/llm.h"

ph_chat_format chat_format_for(const ph_model *m) {
    ph_chat_format f = {.name = "chatml", .think = false};
    gguf_str t;
    if (gguf_get_str(m->gguf, "tokenizer.chat_template", &t) == 0) {
        /* the thinking variants open the answer with <think> in the
         * generation prompt; the jinja source writes it with an escaped or
         * a literal newline */
        static const char *const marks[] = {"assistant\\n<think>\\n", "assistant\n<think>\n"};
        for (size_t i = 0; i < sizeof marks / sizeof *marks; i++)
            if (memmem(t.ptr, t.len, marks[i], strlen(marks[i]))) {
                f.name = "chatml-think";
                f.think = true;
            }
    }
    return f;
}

typedef struct render {
    const ph_model *m;
    ph_prompt *out;
    char *buf; /* the text since the last picture */
    size_t len, cap;
    int failed;
} render;

static void put(render *r, const char *s, size_t n) {
    if (r->failed) return;
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 256;
        while (cap < r->len + n + 1) cap *= 2;
        char *b = realloc(r->buf, cap);
        if (!b) {
            r->failed = 1;
            return;
        }
        r->buf = b;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, s, n);
    r->len += n;
    r->buf[r->len] = '\0';
}

static void puts_(render *r, const char *s) { put(r, s, strlen(s)); }

/* Tokenizes the pending text into a text item. */
static int flush_text(render *r, ph_err *e) {
    if (r->failed) return ph_err_set(e, "out of memory rendering the conversation");
    if (r->len == 0) return 0;
    ph_prompt_item *it = prompt_new_item(r->out);
    if (!it) return ph_err_set(e, "out of memory rendering the conversation");
    if (ph_tokenize(r->m, r->buf, r->len, true, &it->tokens, e)) return -1;
    r->len = 0;
    return 0;
}

/* An assistant turn in the history keeps its content only: reasoning
 * (<think> ... </think>) is not sent back, as the Qwen templates do. */
static void put_assistant_text(render *r, const char *s, size_t n) {
    const char *end = memmem(s, n, "</think>", 8);
    if (end) {
        n -= (size_t)(end + 8 - s);
        s = end + 8;
        while (n && (*s == '\n' || *s == ' ')) s++, n--;
    }
    put(r, s, n);
}

static const char *role_name(ph_role role) {
    switch (role) {
    case PH_ROLE_SYSTEM: return "system";
    case PH_ROLE_USER: return "user";
    case PH_ROLE_ASSISTANT: return "assistant";
    case PH_ROLE_TOOL: return "tool";
    }
    return "user";
}

int chat_format_render(const ph_chat_format *f, const ph_model *m, const ph_chat_msg *msgs, size_t n_msgs,
                       ph_prompt *out, ph_image_in ***pictures, ph_err *e) {
    memset(out, 0, sizeof *out);
    *pictures = NULL;
    if (n_msgs == 0) return ph_err_setc(e, PH_ERR_INPUT, "the conversation has no messages");
    size_t n_pic = 0;
    for (size_t i = 0; i < n_msgs; i++)
        for (size_t j = 0; j < msgs[i].n_parts; j++) n_pic += msgs[i].parts[j].image != NULL;
    ph_image_in **pics = n_pic ? calloc(n_pic, sizeof *pics) : NULL;
    if (n_pic && !pics) return ph_err_set(e, "out of memory");
    render r = {.m = m, .out = out};
    int32_t bos = ph_model_bos(m);
    if (bos >= 0) {
        ph_prompt_item *it = prompt_new_item(out);
        if (!it || ph_tokens_push(&it->tokens, bos)) goto oom;
    }
    size_t k = 0;
    for (size_t i = 0; i < n_msgs; i++) {
        const ph_chat_msg *msg = &msgs[i];
        puts_(&r, "<|im_start|>");
        puts_(&r, role_name(msg->role));
        puts_(&r, "\n");
        for (size_t j = 0; j < msg->n_parts; j++) {
            const ph_chat_part *part = &msg->parts[j];
            if (part->image) {
                if (msg->role != PH_ROLE_USER) {
                    ph_err_setc(e, PH_ERR_INPUT, "pictures are only accepted in user messages (message %zu is %s)",
                                i + 1, role_name(msg->role));
                    goto fail;
                }
                puts_(&r, "<|vision_start|>");
                if (flush_text(&r, e)) goto fail;
                ph_prompt_item *it = prompt_new_item(out);
                if (!it) goto oom;
                it->is_picture = true;
                it->picture = (int32_t)k;
                pics[k++] = part->image;
                out->n_pictures++;
                puts_(&r, "<|vision_end|>");
            } else if (msg->role == PH_ROLE_ASSISTANT) {
                put_assistant_text(&r, part->text, part->len);
            } else {
                put(&r, part->text, part->len);
            }
        }
        puts_(&r, "<|im_end|>\n");
    }
    puts_(&r, "<|im_start|>assistant\n");
    if (f->think) puts_(&r, "<think>\n");
    if (flush_text(&r, e)) goto fail;
    free(r.buf);
    *pictures = pics;
    return 0;
oom:
    ph_err_set(e, "out of memory rendering the conversation");
fail:
    free(r.buf);
    free(pics);
    ph_prompt_free(out);
    return -1;
}

/* ---- answer splitting ----------------------------------------------------- */

void chat_splitter_init(chat_splitter *s, const ph_chat_format *f) {
    memset(s, 0, sizeof *s);
    s->in_think = f->think;
    s->at_start = true;
}

static void emit(chat_splitter *s, const char *t, size_t n, chat_piece_fn fn, void *ud) {
    if (!s->in_think && s->skip_ws) {
        while (n && (*t == '\n' || *t == ' ' || *t == '\r')) t++, n--;
        if (!n) return;
        s->skip_ws = false;
    }
    if (n) fn(ud, s->in_think ? PH_DELTA_REASONING : PH_DELTA_CONTENT, t, n);
}

/* Whether text[0..n) could be the beginning of tag. */
static bool tag_prefix(const char *text, size_t n, const char *tag) {
    size_t tl = strlen(tag);
    return n < tl && memcmp(text, tag, n) == 0;
}

void chat_splitter_feed(chat_splitter *s, const char *text, size_t len, chat_piece_fn fn, void *ud) {
    /* work on held-back bytes + new text */
    char stackbuf[256];
    size_t total = (size_t)s->n_hold + len;
    char *buf = total <= sizeof stackbuf ? stackbuf : malloc(total);
    if (!buf) { /* cannot hold back: release as is */
        emit(s, text, len, fn, ud);
        return;
    }
    memcpy(buf, s->hold, (size_t)s->n_hold);
    memcpy(buf + s->n_hold, text, len);
    s->n_hold = 0;
    size_t i = 0, from = 0;
    while (i < total) {
        const char *tag = s->in_think ? "</think>" : "<think>";
        size_t tl = strlen(tag);
        if (buf[i] != '<') {
            if (s->at_start && !s->in_think && buf[i] != '\n' && buf[i] != ' ') s->at_start = false;
            i++;
            continue;
        }
        /* only a leading <think> opens reasoning */
        bool opening_ok = s->in_think || s->at_start;
        if (opening_ok && total - i >= tl && memcmp(buf + i, tag, tl) == 0) {
            emit(s, buf + from, i - from, fn, ud);
            s->in_think = !s->in_think;
            s->at_start = false;
            if (!s->in_think) s->skip_ws = true;
            i += tl;
            from = i;
            continue;
        }
        if (opening_ok && tag_prefix(buf + i, total - i, tag)) {
            /* maybe a tag split across tokens: hold it back */
            emit(s, buf + from, i - from, fn, ud);
            s->n_hold = (int)(total - i);
            memcpy(s->hold, buf + i, (size_t)s->n_hold);
            from = i = total;
            break;
        }
        if (!s->in_think) s->at_start = false;
        i++;
    }
    emit(s, buf + from, i - from, fn, ud);
    if (buf != stackbuf) free(buf);
}

void chat_splitter_finish(chat_splitter *s, chat_piece_fn fn, void *ud) {
    int n = s->n_hold;
    s->n_hold = 0;
    emit(s, s->hold, (size_t)n, fn, ud);
}
