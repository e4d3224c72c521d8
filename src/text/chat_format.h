/* Chat formats: how a conversation becomes the model's prompt stream, and
 * how the model's answer splits into reasoning and content. Each model
 * family has one; Qwen3-VL uses ChatML with pictures wrapped in
 * <|vision_start|> ... <|vision_end|> where they appear. */
#ifndef PH_TEXT_CHAT_FORMAT_H
#define PH_TEXT_CHAT_FORMAT_H

#include <stdbool.h>

#include "pinhole.h"

typedef struct ph_chat_format {
    const char *name;  /* "chatml", "chatml-think" */
    bool think;        /* the answer starts inside <think> ... </think> */
} ph_chat_format;

/* Picks the format from the model's metadata (tokenizer.chat_template). */
ph_chat_format chat_format_for(const ph_model *m);

/* Renders messages and the generation prompt into a prompt stream: runs of
 * tokens and pictures. The i-th picture item refers to the i-th picture
 * part in message order; *pictures (malloc'd) lists them. Errors are
 * PH_ERR_INPUT (an empty conversation, a picture in an assistant turn). */
int chat_format_render(const ph_chat_format *f, const ph_model *m, const ph_chat_msg *msgs, size_t n_msgs,
                       ph_prompt *out, ph_image_in ***pictures, ph_err *e);

/* Splits the answer as it streams: text inside <think> ... </think> is
 * reasoning, the rest content. Feed released text; it comes back in pieces
 * with their kind. */
typedef struct chat_splitter {
    bool in_think;     /* currently inside reasoning */
    bool at_start;     /* nothing released yet (a leading <think> opens reasoning) */
    bool skip_ws;      /* drop whitespace right after </think> */
    char hold[16];     /* a partial tag held back */
    int n_hold;
} chat_splitter;

void chat_splitter_init(chat_splitter *s, const ph_chat_format *f);
typedef void (*chat_piece_fn)(void *ud, ph_delta_kind kind, const char *text, size_t len);
void chat_splitter_feed(chat_splitter *s, const char *text, size_t len, chat_piece_fn fn, void *ud);
void chat_splitter_finish(chat_splitter *s, chat_piece_fn fn, void *ud);

#endif
