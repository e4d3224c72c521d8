/* The answer parser: splits the model's detokenised answer, as it streams,
 * into reasoning, content and tool calls (docs/chat-format.md, Answer
 * parsing). Text is fed as it is released, in pieces of any size; what comes
 * out does not depend on how the text was cut.
 *
 * - Reasoning: the answer starts inside it when the generation prompt
 *   opened <think> (else a leading <think>, after whitespace only, opens
 *   it); </think> ends it, and the whitespace right after it is dropped.
 *   Whether a <tool_call> inside reasoning ends it is the tool family's
 *   (hermes: no, it stays reasoning text; xml: yes).
 * - Content comes out as it arrives, except a suffix that could be the
 *   start of <tool_call>, held until it is told apart: no piece of a real
 *   call's markup reaches content; and trailing whitespace, held until
 *   more text comes: before a call, the separator the template writes
 *   between an assistant's text and its first call (the family's
 *   call_sep) is not content, so the turn sent back renders to the bytes
 *   the model wrote and its KV is reused.
 * - Calls: OUT_CALL (the name) as soon as the name is complete and is a
 *   declared tool's, then OUT_ARGS pieces as the arguments grow, then
 *   OUT_CALL_END at </tool_call>. The pieces of a call, concatenated, are
 *   its arguments:
 *     hermes  the raw bytes of the "arguments" (or "parameters") value as
 *             the model wrote them (never the closing } of the outer
 *             object). A string value holding JSON ("arguments": "{\"a\": 1}")
 *             is held and comes out decoded in one piece when it ends (the
 *             raw string literal if what it holds is not JSON). A call
 *             without arguments gets {}. If "arguments" comes before
 *             "name", the arguments come in one piece after the name.
 *     xml     a JSON object built from the parameters as they stream, with
 *             tojson separators: {"city": "Paris", "n": 3}. A parameter is
 *             a JSON string when the tool's schema types it "string",
 *             otherwise its value is read as JSON (Python True/False/None
 *             accepted) and taken as a string if it is not JSON. String
 *             values stream; other values come out when they end. The
 *             object is closed on a cut-off or a broken call too.
 *   Whitespace between calls and after the last one is dropped; other text
 *   after a call is content. A call that breaks before its name came out
 *   (not the format, an undeclared name, no name, the end first) is
 *   content, the raw text from <tool_call> on. One that breaks after its
 *   name came out is ended there (its arguments as streamed) and the
 *   unparsed rest of it becomes content after it. Cut off in the middle
 *   (out_parser_finish), a call whose name came out keeps its partial
 *   arguments ({"arg for hermes); one whose name did not is dropped (call
 *   markup never reaches content), with the separator before it.
 * - calls are parsed only with parse_calls and at least one tool;
 *   otherwise <tool_call> is plain text (tool_choice none). */
#ifndef PH_TEXT_OUTPUT_PARSER_H
#define PH_TEXT_OUTPUT_PARSER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "pinhole.h"
#include "text/chat_format.h"
#include "text/tool_json.h"

/* The first four are ph_delta_kind's values. */
typedef enum out_kind {
    OUT_CONTENT = PH_DELTA_CONTENT,
    OUT_REASONING = PH_DELTA_REASONING,
    OUT_CALL = PH_DELTA_TOOL_CALL, /* a call begins: text is its name */
    OUT_ARGS = PH_DELTA_TOOL_ARGS, /* a piece of the call's arguments */
    OUT_CALL_END,                  /* the call is complete (text empty) */
} out_kind;

/* A piece: call is the call's index (0, 1, ...) for OUT_CALL, OUT_ARGS and
 * OUT_CALL_END, -1 otherwise. text is valid during the call only. */
typedef void (*out_fn)(void *ud, out_kind kind, int32_t call, const char *text, size_t len);

typedef struct out_parser_cfg {
    const chat_fmt *fmt;  /* the tool family (call syntax, reasoning rules) */
    bool in_reasoning;    /* the generation prompt opened <think> (chat_format_opens_think) */
    bool parse_calls;     /* false: no call is parsed (tool_choice none) */
    const ph_tool *tools; /* the tools a call may name; must outlive the parser */
    size_t n_tools;
} out_parser_cfg;

/* An incremental JSON value scanner (validates as bytes come). */
typedef struct jscan {
    uint8_t st, num, lit_i, u_left;
    bool in_key;
    const char *lit;
    int32_t depth;
    uint64_t stack[8]; /* bit set: object; at most 512 levels */
} jscan;

typedef struct out_parser {
    /* configuration */
    chat_call_syntax syntax;
    bool ends_at_call, calls;
    const char *sep; /* the family's separator between text and a first call */
    const ph_tool *tools;
    size_t n_tools;
    json_t **schemas; /* xml: each tool's parameters (NULL if none) */
    /* where the text is */
    int st;        /* P_* */
    bool skip_ws;  /* drop whitespace (after </think>) */
    char hold[16]; /* a partial tag held back */
    int n_hold;
    strbuf ws; /* leading whitespace held (before a possible <think>) */
    /* the call being read */
    strbuf body;             /* its text from <tool_call> on */
    int cst;                 /* the call's own state (J_* or X_*) */
    bool header_sent;        /* OUT_CALL came out */
    bool call_in_reasoning;  /* it began inside reasoning (xml) */
    int32_t tool;            /* which declared tool it names; -1 before */
    int32_t n_calls;         /* calls whose name came out */
    size_t mark;             /* body bytes accounted for (the rest is content if the call breaks) */
    size_t tok;              /* start of the string / tag / value being read */
    bool key_name, key_args; /* hermes: which key's value comes */
    bool have_name, have_args, args_string, closed;
    size_t args_start, args_end;
    jscan js;
    int n_params;  /* xml */
    bool p_string; /* xml: the parameter's value is a JSON string */
    size_t v_sent; /* xml: value bytes passed on */
    /* the pieces of the current feed, merged by kind */
    strbuf run;
    out_kind run_kind;
    int32_t run_call;
    strbuf tmp;
    strbuf back; /* text the current step gives back to be read again */
    strbuf pb;   /* text given back, read before the rest */
    size_t pb_pos;
    out_fn fn; /* during a feed */
    void *ud;
} out_parser;

int out_parser_init(out_parser *p, const out_parser_cfg *cfg, ph_err *err);
void out_parser_free(out_parser *p);
void out_parser_feed(out_parser *p, const char *text, size_t len, out_fn fn, void *ud);
/* The answer ended: releases what is held (see above). */
void out_parser_finish(out_parser *p, out_fn fn, void *ud);

/* For the sampler's constraints: */
bool out_parser_in_reasoning(const out_parser *p);
/* Whether the parser is inside a call (after <tool_call>, before
 * </tool_call>), and the call's bytes received so far after <tool_call>. */
bool out_parser_in_call(const out_parser *p, const char **body, size_t *len);
/* The declared tool the current call names (index into cfg.tools), or -1
 * while its name is not complete. */
int32_t out_parser_call_tool(const out_parser *p);
/* Calls whose name came out so far. */
int32_t out_parser_n_calls(const out_parser *p);

#endif
