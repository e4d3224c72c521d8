/* Chat formats: how a conversation (with its tools, tool calls and tool
 * results) becomes the model's prompt stream. Qwen models use ChatML with
 * pictures wrapped in <|vision_start|> ... <|vision_end|> where they
 * appear; how tools are shown, and how calls are written, depends on the
 * tool family (docs/chat-format.md, Tool families):
 *   hermes  Qwen3, Qwen3-VL: calls are <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>
 *   xml     Qwen3.5:         calls are <tool_call>\n<function=NAME>\n<parameter=P>\nV\n</parameter>\n...
 * The families are rows of one table (chat_families); the answer parser
 * (text/output_parser.h) reads the same rows. */
#ifndef PH_TEXT_CHAT_FORMAT_H
#define PH_TEXT_CHAT_FORMAT_H

#include <stdbool.h>

#include "pinhole.h"
#include "text/tokenizer.h"

/* How the model writes a call inside <tool_call> ... </tool_call>. */
typedef enum chat_call_syntax {
    CHAT_CALLS_JSON, /* {"name": "NAME", "arguments": {...}} */
    CHAT_CALLS_XML,  /* <function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function> */
} chat_call_syntax;

struct chat_render;
struct chat_fmt;

/* A tool family: what the template looks like, how it renders the parts
 * that differ, how calls in the answer are parsed. */
typedef struct chat_family {
    const char *name;       /* "hermes", "xml" */
    const char *markers[4]; /* the template has all of these (NULL-terminated) */
    const char *archs[4];   /* else: the architectures that use it (NULL-terminated) */
    chat_call_syntax calls;
    bool reasoning_ends_at_call; /* a <tool_call> inside reasoning ends it (else it stays reasoning text) */
    const char *call_sep;        /* what the template writes between an assistant's text and its first call */
    bool trim;                   /* message contents are trimmed (Jinja |trim) */
    /* the system turn with the tools, given the first message if it is a system one */
    int (*system_with_tools)(struct chat_render *r, const ph_chat_msg *sys, const ph_tool *tools, size_t n_tools);
    /* an assistant turn; after_query: it comes after the last real user message */
    int (*assistant)(struct chat_render *r, const ph_chat_msg *m, bool after_query, bool is_last);
} chat_family;

extern const chat_family chat_families[];
extern const size_t chat_n_families;

typedef struct chat_fmt {
    const char *name;          /* "chatml", "chatml-think" */
    bool think;                /* the generation prompt opens <think> (the answer starts inside reasoning) */
    const chat_family *family; /* tool family; NULL: the first row (hermes) */
    bool family_from_template; /* the template's tool markup chose it (else the architecture did) */
    bool thinking_switch;      /* the template reads enable_thinking */
    bool reasoning_history;    /* the template renders reasoning_content back (turns after the last user query) */
} chat_fmt;

/* Picks the format from a template's text (the model's
 * tokenizer.chat_template) and, when the template has no tool markup, an
 * architecture name (general.architecture); either may be NULL. */
chat_fmt chat_format_detect(const char *tmpl, size_t len, const char *arch);
const chat_family *chat_format_family(const chat_fmt *f);

typedef struct chat_render_opts {
    int thinking; /* -1: the template's default; 0: off; 1: on (where the template can switch) */
} chat_render_opts;

/* Whether the generation prompt leaves the answer inside <think>. */
bool chat_format_opens_think(const chat_fmt *f, const chat_render_opts *o);
/* What the generation prompt puts after the assistant's header
 * (<|im_start|>assistant\n): the opening of its reasoning, or "". The
 * conversation re-sent with the answer renders the header, but not this
 * (a thinking model's history keeps no reasoning before the last query). */
const char *chat_format_opener(const chat_fmt *f, const chat_render_opts *o);

/* Renders messages, tools (may be 0) and the generation prompt into a
 * prompt stream tokenized with v (BOS first where v adds one): runs of
 * tokens and pictures. The i-th picture item refers to the i-th picture
 * part in message order (user and tool messages); *pictures (malloc'd)
 * lists them. o may be NULL (defaults). Errors are
 * PH_ERR_INPUT (an empty conversation, a picture in a system or assistant
 * turn, a tool without a name or with parameters that are not JSON). */
int chat_format_render(const chat_fmt *f, const bpe_vocab *v, const ph_chat_msg *msgs, size_t n_msgs,
                       const ph_tool *tools, size_t n_tools, const chat_render_opts *o, ph_prompt *out,
                       ph_picture ***pictures, ph_err *err);

/* The same rendering as text (no BOS): a picture is written as picture,
 * or when that is NULL as <|vision_start|><|image_pad|><|vision_end|>, as
 * the HF templates write it. *text is malloc'd and NUL-terminated. */
int chat_format_render_text(const chat_fmt *f, const ph_chat_msg *msgs, size_t n_msgs, const ph_tool *tools,
                            size_t n_tools, const chat_render_opts *o, const char *picture, char **text, size_t *len,
                            ph_err *err);

#endif
