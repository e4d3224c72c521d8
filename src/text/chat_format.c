/* ChatML for Qwen3-VL, Qwen3 and Qwen3.5 (docs/chat-format.md, ChatML and
 * Tool families): each turn is
 *   <|im_start|>{role}\n{content}<|im_end|>\n
 * a picture part is <|vision_start|>(rows)<|vision_end|> in place (in user
 * messages and tool results), and the generation prompt is
 * <|im_start|>assistant\n (followed by <think>\n for the thinking variants,
 * or by an empty <think>\n\n</think>\n\n when thinking is switched off). No
 * system turn unless one is given; a system message is rendered where it
 * stands (the first one goes into the tools block when there are tools).
 * Tool results (consecutive tool messages) share one user turn of
 * <tool_response> blocks. What differs between tool families (the system
 * block with the tools, assistant turns with their calls, trimming) is in
 * the family table at the end.
 *
 * The rendered text between pictures is tokenized in one run, as llama.cpp
 * does with the rendered template, but only the template's own markers are
 * control tokens: the client's text (message contents, reasoning, tool
 * calls, tool results, the tools' declarations) is plain text, where
 * <|im_end|> or <|image_pad|> is the characters it is written with
 * (docs/chat-format.md, Special tokens in messages). A conversation whose
 * text holds no control token's text gets the tokens llama.cpp gives it.
 *
 * Choices where the templates leave room:
 * - Hermes arguments: ph_tool_call.arguments is the client's JSON text; it
 *   is printed re-serialised with tojson (", " / ": ", key order kept, no
 *   ASCII escaping), as llama.cpp does after parsing it, so the history has
 *   the same bytes whether the client sent compact or spaced JSON. Text
 *   that is not JSON is printed as it is; empty arguments print {}.
 * - XML arguments: an object's members become <parameter=...> blocks;
 *   arguments that are not a JSON object give no parameters.
 * - An assistant turn's content keeps only what follows </think>: the
 *   reasoning goes back only where the template renders it (Qwen3 style,
 *   turns after the last real user query). */
#include "text/chat_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/grow.h"
#include "text/prompt.h"
#include "text/tokenizer.h"
#include "text/tool_json.h"

/* ---- detection ----------------------------------------------------------- */

/* Whether every marker (alternatives separated by '|') occurs in t; the
 * number of markers, or -1 if one is missing. */
static int markers_found(const char *const *markers, const char *t, size_t len) {
    int n = 0;
    for (; *markers; markers++, n++) {
        const char *alt = *markers;
        bool hit = false;
        while (!hit) {
            const char *bar = strchr(alt, '|');
            size_t l = bar ? (size_t)(bar - alt) : strlen(alt);
            hit = memmem(t, len, alt, l) != NULL;
            if (!bar) break;
            alt = bar + 1;
        }
        if (!hit) return -1;
    }
    return n;
}

static bool has(const char *t, size_t len, const char *s) { return t && memmem(t, len, s, strlen(s)); }

chat_fmt chat_format_detect(const char *t, size_t len, const char *arch) {
    chat_fmt f = {.name = "chatml"};
    if (t) {
        /* the thinking variants open the answer with <think> in the
         * generation prompt; the jinja source writes it with an escaped or
         * a literal newline (Qwen3.5 in a statement of its own) */
        static const char *const marks[] = {"assistant\\n<think>\\n", "assistant\n<think>\n", "'<think>\\n'"};
        for (size_t i = 0; i < sizeof marks / sizeof *marks; i++)
            if (has(t, len, marks[i])) {
                f.name = "chatml-think";
                f.think = true;
            }
        f.thinking_switch = has(t, len, "enable_thinking");
        f.reasoning_history = has(t, len, "reasoning_content");
        /* the family whose markers are all there; the most specific wins */
        int best = 0;
        for (size_t i = 0; i < chat_n_families; i++) {
            int n = markers_found(chat_families[i].markers, t, len);
            if (n > best) {
                best = n;
                f.family = &chat_families[i];
                f.family_from_template = true;
            }
        }
    }
    for (size_t i = 0; !f.family && arch && i < chat_n_families; i++)
        for (const char *const *a = chat_families[i].archs; *a; a++)
            if (!strcmp(*a, arch)) f.family = &chat_families[i];
    if (!f.family) f.family = &chat_families[0];
    return f;
}

const chat_family *chat_format_family(const chat_fmt *f) { return f->family ? f->family : &chat_families[0]; }

bool chat_format_opens_think(const chat_fmt *f, const chat_render_opts *o) {
    return strcmp(chat_format_opener(f, o), "<think>\n") == 0;
}

const char *chat_format_opener(const chat_fmt *f, const chat_render_opts *o) {
    if (o && o->thinking == 0 && f->thinking_switch) return "<think>\n\n</think>\n\n";
    return f->think ? "<think>\n" : "";
}

/* ---- the render context ------------------------------------------------- */

typedef struct chat_render {
    const chat_fmt *f;
    const chat_family *fam;
    const bpe_vocab *v; /* NULL: text only */
    ph_prompt *out;
    ph_picture **pics;
    size_t n_pics;
    strbuf buf;        /* the text since the last picture (all of it when text only) */
    vocab_span *plain; /* the client's text in buf: no control tokens there */
    size_t n_plain, cap_plain;
    size_t plain_from; /* where the client's text being written began */
    bool plain_oom;
    const char *picture_text; /* text only: what a picture is written as */
    ph_err *err;
} chat_render;

static void puts_(chat_render *r, const char *s) { strbuf_puts(&r->buf, s); }
static void put(chat_render *r, const char *s, size_t n) { strbuf_put(&r->buf, s, n); }

/* The client's text (messages, reasoning, tool calls, tools) is written
 * between plain_begin and plain_end: a control token's text there is plain
 * text (docs/chat-format.md, Special tokens in messages); only the markers
 * the template writes are control tokens. */
static void plain_begin(chat_render *r) { r->plain_from = r->buf.n; }

static void plain_end(chat_render *r) {
    if (!r->v || r->buf.n <= r->plain_from) return;
    if (r->n_plain && r->plain[r->n_plain - 1].end == r->plain_from) { /* it goes on */
        r->plain[r->n_plain - 1].end = r->buf.n;
        return;
    }
    vocab_span *g = grow_array(r->plain, &r->cap_plain, r->n_plain, sizeof *g, 16);
    if (!g) {
        r->plain_oom = true;
        return;
    }
    r->plain = g;
    r->plain[r->n_plain++] = (vocab_span){r->plain_from, r->buf.n};
}

/* The client's text s[0..n), plain. */
static void put_plain(chat_render *r, const char *s, size_t n) {
    plain_begin(r);
    put(r, s, n);
    plain_end(r);
}

static int oom(chat_render *r) { return err_set(r->err, "out of memory rendering the conversation"); }

/* Tokenizes the pending text into a text item. */
static int flush_text(chat_render *r) {
    if (r->buf.oom || r->plain_oom) return oom(r);
    if (!r->v || r->buf.n == 0) return 0;
    ph_prompt_item *it = prompt_new_item(r->out);
    if (!it) return oom(r);
    if (vocab_tokenize_spans(r->v, r->buf.p, r->buf.n, r->plain, r->n_plain, &it->tokens, r->err)) return -1;
    r->buf.n = 0;
    r->n_plain = 0;
    return 0;
}

static int put_picture(chat_render *r, ph_picture *im) {
    r->pics[r->n_pics++] = im;
    if (!r->v) { /* text only */
        puts_(r, r->picture_text);
        return 0;
    }
    puts_(r, "<|vision_start|>");
    if (flush_text(r)) return -1;
    ph_prompt_item *it = prompt_new_item(r->out);
    if (!it) return oom(r);
    it->is_picture = true;
    it->picture = (int32_t)r->n_pics - 1;
    r->out->n_pictures++;
    puts_(r, "<|vision_end|>");
    return 0;
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

/* ---- whitespace as Python's str.strip() sees it ------------------------ */

/* The length of the whitespace character at the start of s[0..n), or 0. */
static size_t ws_front(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    if (!n) return 0;
    if (u[0] == ' ' || (u[0] >= 0x09 && u[0] <= 0x0d) || (u[0] >= 0x1c && u[0] <= 0x1f)) return 1;
    if (n >= 2 && u[0] == 0xc2 && (u[1] == 0x85 || u[1] == 0xa0)) return 2;
    if (n < 3) return 0;
    if (u[0] == 0xe1 && u[1] == 0x9a && u[2] == 0x80) return 3; /* U+1680 */
    if (u[0] == 0xe2 && u[1] == 0x80 &&
        ((u[2] >= 0x80 && u[2] <= 0x8a) || u[2] == 0xa8 || u[2] == 0xa9 || u[2] == 0xaf))
        return 3;                                               /* U+2000-200A, 2028, 2029, 202F */
    if (u[0] == 0xe2 && u[1] == 0x81 && u[2] == 0x9f) return 3; /* U+205F */
    if (u[0] == 0xe3 && u[1] == 0x80 && u[2] == 0x80) return 3; /* U+3000 */
    return 0;
}

/* The length of the whitespace character that ends s[0..n), or 0. */
static size_t ws_back(const char *s, size_t n) {
    for (size_t l = 1; l <= 3 && l <= n; l++)
        if (ws_front(s + n - l, l) == l) return l;
    return 0;
}

static size_t skip_ws(const char *s, size_t n) {
    size_t i = 0, l;
    while ((l = ws_front(s + i, n - i)) > 0) i += l;
    return i;
}

static size_t trim_end(const char *s, size_t n) {
    size_t l;
    while ((l = ws_back(s, n)) > 0) n -= l;
    return n;
}

/* s[0..*n) trimmed (Jinja |trim). */
static const char *trim(const char *s, size_t *n) {
    size_t i = skip_ws(s, *n);
    *n = trim_end(s + i, *n - i);
    return s + i;
}

/* Python str.strip('\n') family. */
static const char *lstrip_nl(const char *s, size_t *n) {
    while (*n && *s == '\n') s++, (*n)--;
    return s;
}
static size_t rstrip_nl(const char *s, size_t n) {
    while (n && s[n - 1] == '\n') n--;
    return n;
}

/* ---- contents -------------------------------------------------------------- */

/* The text parts of a system or assistant message, concatenated (trimmed
 * when the family trims); a picture there is refused. */
static int content_text(chat_render *r, const ph_chat_msg *m, size_t idx, strbuf *out) {
    for (size_t j = 0; j < m->n_parts; j++) {
        if (m->parts[j].picture)
            return err_setc(r->err, PH_ERR_INPUT,
                            "pictures are only accepted in user and tool messages (message %zu is %s)", idx + 1,
                            role_name(m->role));
        strbuf_put(out, m->parts[j].text, m->parts[j].len);
    }
    if (out->oom) return oom(r);
    if (r->fam->trim && out->n) {
        size_t n = out->n;
        const char *s = trim(out->p, &n);
        memmove(out->p, s, n);
        out->n = n;
        out->p[n] = '\0';
    }
    return 0;
}

/* A user message's or a tool result's parts, pictures in place; trimmed at
 * its edges when the family trims. */
static int put_parts(chat_render *r, const ph_chat_msg *m) {
    size_t first = 0, first_off = 0, last = m->n_parts, last_end = 0;
    if (r->fam->trim) {
        /* the first and the last character that is not whitespace */
        for (; first < m->n_parts; first++) {
            const ph_chat_part *p = &m->parts[first];
            first_off = 0;
            if (p->picture) break;
            first_off = skip_ws(p->text, p->len);
            if (first_off < p->len) break;
        }
        while (last > first) {
            const ph_chat_part *p = &m->parts[last - 1];
            if (p->picture) {
                last_end = 0;
                break;
            }
            size_t from = last - 1 == first ? first_off : 0;
            last_end = from + trim_end(p->text + from, p->len - from);
            if (last_end > from) break;
            last--;
        }
    }
    for (size_t j = first; j < last; j++) {
        const ph_chat_part *p = &m->parts[j];
        if (p->picture) {
            if (put_picture(r, p->picture)) return -1;
            continue;
        }
        size_t from = j == first ? first_off : 0;
        size_t to = r->fam->trim && j == last - 1 ? last_end : p->len;
        if (to > from) put_plain(r, p->text + from, to - from);
    }
    return 0;
}

/* The text of a user message, to tell a real query from tool results a
 * client sent as a user message. */
static bool is_tool_response_text(const chat_render *r, const ph_chat_msg *m) {
    strbuf t = {0};
    for (size_t j = 0; j < m->n_parts; j++)
        if (m->parts[j].picture) strbuf_puts(&t, "<|vision_start|><|image_pad|><|vision_end|>");
        else strbuf_put(&t, m->parts[j].text, m->parts[j].len);
    size_t n = t.n;
    const char *s = t.p ? t.p : "";
    if (r->fam->trim) s = trim(s, &n);
    static const char open[] = "<tool_response>", close[] = "</tool_response>";
    bool yes = n >= strlen(open) && !memcmp(s, open, strlen(open)) && n >= strlen(close) &&
               !memcmp(s + n - strlen(close), close, strlen(close));
    strbuf_free(&t);
    return yes;
}

/* Splits an assistant content at </think> as the templates do:
 * reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
 * content   = content.split('</think>')[-1].lstrip('\n')
 * Returns false when there is no </think>. */
static bool split_think(const char *s, size_t n, const char **reason, size_t *reason_len, const char **content,
                        size_t *content_len) {
    const char *first = memmem(s, n, "</think>", 8);
    if (!first) return false;
    const char *last = first;
    for (const char *p; (p = memmem(last + 8, n - (size_t)(last + 8 - s), "</think>", 8)) != NULL;) last = p;
    size_t rl = rstrip_nl(s, (size_t)(first - s));
    const char *rs = s;
    for (const char *p; (p = memmem(rs, rl - (size_t)(rs - s), "<think>", 7)) != NULL;) rs = p + 7;
    rl -= (size_t)(rs - s);
    *reason = lstrip_nl(rs, &rl);
    *reason_len = rl;
    size_t cl = n - (size_t)(last + 8 - s);
    *content = lstrip_nl(last + 8, &cl);
    *content_len = cl;
    return true;
}

/* ---- the conversation ------------------------------------------------------ */

static int render_all(chat_render *r, const ph_chat_msg *msgs, size_t n_msgs, const ph_tool *tools, size_t n_tools,
                      const chat_render_opts *o) {
    const chat_family *fam = r->fam;
    if (n_msgs == 0) return err_setc(r->err, PH_ERR_INPUT, "the conversation has no messages");
    size_t start = 0;
    if (n_tools) {
        const ph_chat_msg *sys = msgs[0].role == PH_ROLE_SYSTEM ? &msgs[0] : NULL;
        if (fam->system_with_tools(r, sys, tools, n_tools)) return -1;
        start = sys != NULL;
    }
    /* the last real user query: assistant turns after it are this turn's
     * agent steps (reasoning is rendered back for them) */
    size_t last_query = n_msgs - 1;
    for (size_t i = n_msgs; i-- > 0;)
        if (msgs[i].role == PH_ROLE_USER && !is_tool_response_text(r, &msgs[i])) {
            last_query = i;
            break;
        }
    for (size_t i = start; i < n_msgs; i++) {
        const ph_chat_msg *m = &msgs[i];
        switch (m->role) {
        case PH_ROLE_SYSTEM: {
            strbuf t = {0};
            int rc = content_text(r, m, i, &t);
            if (!rc) {
                puts_(r, "<|im_start|>system\n");
                if (t.n) put_plain(r, t.p, t.n);
                puts_(r, "<|im_end|>\n");
            }
            strbuf_free(&t);
            if (rc) return -1;
            break;
        }
        case PH_ROLE_USER:
            puts_(r, "<|im_start|>user\n");
            if (put_parts(r, m)) return -1;
            puts_(r, "<|im_end|>\n");
            break;
        case PH_ROLE_ASSISTANT:
            for (size_t j = 0; j < m->n_parts; j++)
                if (m->parts[j].picture)
                    return err_setc(r->err, PH_ERR_INPUT,
                                    "pictures are only accepted in user and tool messages (message %zu is %s)", i + 1,
                                    role_name(m->role));
            if (fam->assistant(r, m, i > last_query, i + 1 == n_msgs)) return -1;
            break;
        case PH_ROLE_TOOL:
            /* a run of results shares one user turn */
            if (i == 0 || msgs[i - 1].role != PH_ROLE_TOOL) puts_(r, "<|im_start|>user");
            puts_(r, "\n<tool_response>\n");
            if (put_parts(r, m)) return -1;
            puts_(r, "\n</tool_response>");
            if (i + 1 == n_msgs || msgs[i + 1].role != PH_ROLE_TOOL) puts_(r, "<|im_end|>\n");
            break;
        }
    }
    puts_(r, "<|im_start|>assistant\n");
    puts_(r, chat_format_opener(r->f, o));
    return r->buf.oom ? oom(r) : 0;
}

static size_t count_pictures(const ph_chat_msg *msgs, size_t n_msgs) {
    size_t n = 0;
    for (size_t i = 0; i < n_msgs; i++)
        for (size_t j = 0; j < msgs[i].n_parts; j++) n += msgs[i].parts[j].picture != NULL;
    return n;
}

int chat_format_render(const chat_fmt *f, const bpe_vocab *v, const ph_chat_msg *msgs, size_t n_msgs,
                       const ph_tool *tools, size_t n_tools, const chat_render_opts *o, ph_prompt *out,
                       ph_picture ***pictures, ph_err *err) {
    memset(out, 0, sizeof *out);
    *pictures = NULL;
    chat_render r = {.f = f, .fam = chat_format_family(f), .v = v, .out = out, .err = err};
    size_t n_pic = count_pictures(msgs, n_msgs);
    if (n_pic && !(r.pics = calloc(n_pic, sizeof *r.pics))) return err_set(err, "out of memory");
    if (vocab_add_bos(v) && vocab_bos(v) >= 0) {
        ph_prompt_item *it = prompt_new_item(out);
        if (!it || ph_tokens_push(&it->tokens, vocab_bos(v))) {
            oom(&r);
            goto fail;
        }
    }
    if (render_all(&r, msgs, n_msgs, tools, n_tools, o) || flush_text(&r)) goto fail;
    strbuf_free(&r.buf);
    free(r.plain);
    *pictures = r.pics;
    return 0;
fail:
    strbuf_free(&r.buf);
    free(r.plain);
    free(r.pics);
    ph_prompt_free(out);
    return -1;
}

int chat_format_render_text(const chat_fmt *f, const ph_chat_msg *msgs, size_t n_msgs, const ph_tool *tools,
                            size_t n_tools, const chat_render_opts *o, const char *picture, char **text, size_t *len,
                            ph_err *err) {
    *text = NULL;
    *len = 0;
    chat_render r = {.f = f,
                     .fam = chat_format_family(f),
                     .err = err,
                     .picture_text = picture ? picture : "<|vision_start|><|image_pad|><|vision_end|>"};
    size_t n_pic = count_pictures(msgs, n_msgs);
    if (n_pic && !(r.pics = calloc(n_pic, sizeof *r.pics))) return err_set(err, "out of memory");
    int rc = render_all(&r, msgs, n_msgs, tools, n_tools, o);
    free(r.pics);
    if (rc) {
        strbuf_free(&r.buf);
        return -1;
    }
    *text = r.buf.p;
    *len = r.buf.n;
    return 0;
}

/* ---- family: hermes (Qwen3, Qwen3-VL; docs/chat-format.md, hermes) -------- */

static int tools_list(chat_render *r, const ph_tool *tools, size_t n_tools) {
    for (size_t i = 0; i < n_tools; i++) {
        puts_(r, "\n");
        plain_begin(r);
        if (tool_json_render(&r->buf, &tools[i], r->err)) return -1;
        plain_end(r);
    }
    return 0;
}

static int hermes_system(chat_render *r, const ph_chat_msg *sys, const ph_tool *tools, size_t n_tools) {
    puts_(r, "<|im_start|>system\n");
    if (sys) {
        strbuf t = {0};
        int rc = content_text(r, sys, 0, &t);
        if (t.n) put_plain(r, t.p, t.n);
        strbuf_free(&t);
        if (rc) return -1;
        puts_(r, "\n\n");
    }
    puts_(r, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
             "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    if (tools_list(r, tools, n_tools)) return -1;
    puts_(r, "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
             "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
             "<args-json-object>}\n</tool_call><|im_end|>\n");
    return 0;
}

static int hermes_assistant(chat_render *r, const ph_chat_msg *m, bool after_query, bool is_last) {
    strbuf t = {0};
    if (content_text(r, m, 0, &t)) {
        strbuf_free(&t);
        return -1;
    }
    const char *content = t.p ? t.p : "", *reason = "";
    size_t content_len = t.n, reason_len = 0;
    if (r->f->reasoning_history) {
        /* Qwen3: reasoning_content, else what the content holds before </think> */
        if (m->reasoning) {
            reason = m->reasoning;
            reason_len = m->reasoning_len;
        } else {
            split_think(t.p ? t.p : "", t.n, &reason, &reason_len, &content, &content_len);
        }
    } else {
        /* Qwen3-VL-Instruct renders no reasoning: the content goes back
         * without it */
        const char *end = t.p ? memmem(t.p, t.n, "</think>", 8) : NULL;
        if (end) {
            content = end + 8;
            content_len = t.n - (size_t)(content - t.p);
            while (content_len && (*content == '\n' || *content == ' ')) content++, content_len--;
        }
    }
    puts_(r, "<|im_start|>assistant\n");
    size_t shown_len = content_len; /* the content as the call separator sees it */
    if (r->f->reasoning_history && after_query && (is_last || reason_len)) {
        reason = lstrip_nl(reason, &reason_len);
        reason_len = rstrip_nl(reason, reason_len);
        puts_(r, "<think>\n");
        put_plain(r, reason, reason_len);
        puts_(r, "\n</think>\n\n");
        size_t l = content_len;
        const char *c = lstrip_nl(content, &l);
        put_plain(r, c, l);
    } else {
        put_plain(r, content, content_len);
    }
    for (size_t j = 0; j < m->n_tool_calls; j++) {
        const ph_tool_call *c = &m->tool_calls[j];
        if (j > 0 || shown_len) puts_(r, "\n");
        puts_(r, "<tool_call>\n{\"name\": \"");
        if (c->name) put_plain(r, c->name, strlen(c->name));
        puts_(r, "\", \"arguments\": ");
        plain_begin(r);
        if (!c->arguments || !c->arguments_len) puts_(r, "{}");
        else if (tojson_text(&r->buf, c->arguments, c->arguments_len)) put(r, c->arguments, c->arguments_len);
        plain_end(r);
        puts_(r, "}\n</tool_call>");
    }
    puts_(r, "<|im_end|>\n");
    strbuf_free(&t);
    return 0;
}

/* ---- family: xml (Qwen3.5; docs/chat-format.md, xml) ------------------------ */

static int xml_system(chat_render *r, const ph_chat_msg *sys, const ph_tool *tools, size_t n_tools) {
    puts_(r, "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>");
    if (tools_list(r, tools, n_tools)) return -1;
    puts_(r, "\n</tools>");
    puts_(r, "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
             "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
             "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
             "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
             "- Function calls MUST follow the specified format: an inner <function=...></function> block must be "
             "nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may "
             "provide optional reasoning for your function call in natural language BEFORE the function call, but "
             "NOT after\n- If there is no function call available, answer the question like normal with your "
             "current knowledge and do not tell the user about function calls\n</IMPORTANT>");
    if (sys) {
        strbuf t = {0};
        int rc = content_text(r, sys, 0, &t);
        if (t.n) {
            puts_(r, "\n\n");
            put_plain(r, t.p, t.n);
        }
        strbuf_free(&t);
        if (rc) return -1;
    }
    puts_(r, "<|im_end|>\n");
    return 0;
}

static void xml_call(chat_render *r, const ph_tool_call *c) {
    puts_(r, "<function=");
    if (c->name) put_plain(r, c->name, strlen(c->name));
    puts_(r, ">\n");
    json_t *args = c->arguments && c->arguments_len ? tool_json_parse(c->arguments, c->arguments_len) : NULL;
    if (json_is_object(args)) {
        const char *k;
        size_t kl;
        json_t *v;
        json_object_keylen_foreach(args, k, kl, v) {
            puts_(r, "<parameter=");
            put_plain(r, k, kl);
            puts_(r, ">\n");
            plain_begin(r);
            pystr_value(&r->buf, v);
            plain_end(r);
            puts_(r, "\n</parameter>\n");
        }
    }
    json_decref(args);
    puts_(r, "</function>\n</tool_call>");
}

static int xml_assistant(chat_render *r, const ph_chat_msg *m, bool after_query, bool is_last) {
    (void)is_last;
    strbuf t = {0};
    if (content_text(r, m, 0, &t)) {
        strbuf_free(&t);
        return -1;
    }
    const char *content = t.p ? t.p : "", *reason = "";
    size_t content_len = t.n, reason_len = 0;
    if (m->reasoning) {
        reason = m->reasoning;
        reason_len = m->reasoning_len;
    } else {
        split_think(content, content_len, &reason, &reason_len, &content, &content_len);
    }
    reason = trim(reason, &reason_len);
    puts_(r, "<|im_start|>assistant\n");
    if (r->f->reasoning_history && after_query) {
        puts_(r, "<think>\n");
        put_plain(r, reason, reason_len);
        puts_(r, "\n</think>\n\n");
    }
    put_plain(r, content, content_len);
    size_t tl = content_len;
    trim(content, &tl);
    for (size_t j = 0; j < m->n_tool_calls; j++) {
        puts_(r, j == 0 ? (tl ? "\n\n<tool_call>\n" : "<tool_call>\n") : "\n<tool_call>\n");
        xml_call(r, &m->tool_calls[j]);
    }
    puts_(r, "<|im_end|>\n");
    strbuf_free(&t);
    return 0;
}

/* ---- the table ------------------------------------------------------------- */

const chat_family chat_families[] = {
    {
        .name = "hermes",
        /* the jinja source writes "arguments" in a single-quoted or an
         * escaped double-quoted string */
        .markers = {"<tool_call>", "\"arguments\"|\\\"arguments\\\"", NULL},
        .archs = {"qwen3vl", "qwen3", NULL},
        .calls = CHAT_CALLS_JSON,
        .reasoning_ends_at_call = false,
        .call_sep = "\n",
        .trim = false,
        .system_with_tools = hermes_system,
        .assistant = hermes_assistant,
    },
    {
        .name = "xml",
        .markers = {"<tool_call>", "<function=", "<parameter=", NULL},
        .archs = {"qwen35", NULL},
        .calls = CHAT_CALLS_XML,
        .reasoning_ends_at_call = true,
        .call_sep = "\n\n",
        .trim = true,
        .system_with_tools = xml_system,
        .assistant = xml_assistant,
    },
};
const size_t chat_n_families = sizeof chat_families / sizeof *chat_families;
