/* What the HTTP layer and the API adapters share: a job (one request on
 * its way through the worker), output buffers, and the adapter table. */
#ifndef PH_SERVER_API_H
#define PH_SERVER_API_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/error.h"
#include "base/strbuf.h"
#include "pinhole.h"

struct MHD_Connection;

typedef struct srv srv;
typedef struct job job;

/* Who asked for what: a request as its log lines name it. */
typedef struct req_ident {
    char id[65];     /* X-Request-Id: the client's when sane, else 16 random hex digits */
    char client[48]; /* the client's address */
    char method[16];
    char path[200];
    double t0; /* when its head arrived (time_now_s) */
} req_ident;

/* A tool call in the answer: its ids in the API's shape, name, arguments. */
typedef struct out_call {
    char id[40];      /* call_... / toolu_... / fc_... */
    char call_id[40]; /* responses: call_... */
    strbuf name, args;
} out_call;

typedef struct api_kind {
    const char *endpoint;    /* metrics label: chat_completions, responses, messages */
    bool anthropic;          /* error shape */
    const char *call_prefix; /* the ids of tool calls in the answer: call_, toolu_, fc_ */
    /* Fills the job from j->root; on failure err says why (code PH_ERR_INPUT). */
    int (*parse)(job *j, ph_err *err);
    /* Streaming: the opening events, one per generated piece, the closing
     * events, and an error after the stream began. */
    void (*stream_start)(job *j);
    void (*stream_event)(job *j, const ph_gen_event *ev);
    void (*stream_end)(job *j);
    void (*stream_error)(job *j, const char *msg);
    /* Not streamed: called for each generated piece (may be NULL). */
    void (*collect)(job *j, const ph_gen_event *ev);
    /* The whole answer (not streamed). */
    json_t *(*result)(job *j);
} api_kind;

extern const api_kind api_openai_chat, api_openai_responses, api_anthropic_messages;

struct job {
    srv *s; /* the server's own (server.c) */
    ph_engine *e;
    bool allow_forced;  /* --allow-forced-output: the body field "forced_output" is accepted */
    bool strict_fields; /* --strict-fields: a field in no list is refused */
    /* the request's fields in none of its API's lists, accepted and ignored
     * (names point into root; at most API_MAX_IGNORED, n_unknown counts all) */
    const char *ignored[16];
    size_t n_ignored, n_unknown;
    const api_kind *api;
    json_t *root; /* the request body; message texts point into it */
    const char *model_name;
    /* the conversation */
    ph_chat_msg *msgs;
    size_t n_msgs, cap_msgs;
    ph_chat_part *parts;
    size_t n_parts, cap_parts;
    size_t *msg_first; /* first part of each message */
    size_t *msg_calls; /* first tool call (calls) of each message */
    ph_picture **images;
    size_t n_images, cap_images;
    int max_images;
    uint64_t pixels;      /* its pictures' pixels and rows, from their headers (0 for a count */
    int64_t picture_rows; /* or without an encoder: nothing is decoded) */
    ph_gen_params gen;
    /* tools (the schema texts are owned) and the calls of history turns */
    ph_tool *tools;
    size_t n_tools, cap_tools;
    ph_tool_call *calls;
    size_t n_calls, cap_calls;
    char **owned; /* strings made while parsing, freed with the job */
    size_t n_owned, cap_owned;
    bool count_only; /* POST /v1/messages/count_tokens: render and count, no turn */
    const char **stop;
    bool stream, include_usage, logprobs;
    char id[40], item_id[40];
    int64_t created;
    /* the answer (written by the worker) */
    strbuf content, reasoning;
    out_call *out_calls; /* the calls in the answer */
    size_t n_out_calls;
    int32_t n_counted; /* count_only: the prompt's rows */
    json_t *lp;        /* logprobs entries (chat completions) */
    ph_turn_report rep;
    ph_err err;
    bool failed;
    /* adapter streaming state */
    int seq;           /* responses: sequence_number */
    int n_blocks;      /* blocks/items opened so far */
    int open_kind;     /* -1 none, else ph_delta_kind of the open block */
    int32_t open_call; /* the call of an open PH_DELTA_TOOL_CALL block */
    /* the channel between the worker and the connection (all under mu):
     * while the connection waits for the job (its answer, or more stream
     * bytes), it is suspended, and whatever it waits for resumes it */
    pthread_mutex_t mu;
    strbuf out; /* stream bytes not yet sent */
    bool done, cancelled;
    bool timed_out;              /* past --request-timeout-s (cancelled too) */
    struct MHD_Connection *conn; /* the client's connection */
    int fd;                      /* its socket (looked at while suspended) */
    bool suspended;              /* conn is suspended, waiting for the job */
    bool streaming;              /* the stream's response has begun */
    bool ping;                   /* the stream owes the client a keep-alive comment */
    double t_suspended;
    int refs;
    double t_queued;
    req_ident req; /* its log lines */
};

/* Appends stream bytes (worker side) and wakes the connection. */
void job_emit(job *j, const char *s, size_t n);
/* An SSE event: "event: NAME\n" (if name) and "data: JSON\n\n". Steals v. */
void job_sse(job *j, const char *name, json_t *v);

/* Building the conversation (parsers). */
int job_begin_msg(job *j, ph_role role, ph_err *err);
int job_add_text(job *j, const char *text, size_t len, ph_err *err);
/* The string field key of a content part added as text (refused unless a
 * string, naming path.key). */
int job_add_text_field(job *j, json_t *part, const char *key, const char *path, ph_err *err);
/* One part of a message's content: an object whose 'type' is type; path
 * names it in error messages ("messages[0].content[1]"). */
typedef int (*job_part_fn)(job *j, json_t *part, const char *type, const char *path, ph_err *err);
/* A message's content (the field at path): a string is its text, an array
 * holds parts, each an object with a 'type' given to add_part; anything
 * else is refused ("PATH must be a string or an array of PARTS"). */
int job_add_content(job *j, json_t *content, const char *path, const char *parts, job_part_fn add_part, ph_err *err);
/* A picture given as a URL string: only base64 data: URIs of a picture
 * type the decoders read (image/png, image/jpeg, image/webp, image/gif;
 * case-insensitive, parameters allowed) are accepted. where names the field
 * in error messages ("messages[0].content[1].image_url.url"). */
int job_add_image_url(job *j, const char *url, size_t len, const char *where, ph_err *err);
/* A picture given as base64 (len bytes; Anthropic's source), media_type
 * checked as above; where names the source object
 * ("messages[0].content[1].source"). */
int job_add_image_b64(job *j, const char *media_type, const char *b64, size_t len, const char *where, ph_err *err);
/* Ends the conversation; none: refused, naming field ("messages", "input")
 * and what it needs at least one of ("message", "input item"). */
int job_finish_msgs(job *j, const char *field, const char *items, ph_err *err);
/* The last message's reasoning (an assistant turn of the history). */
void job_set_reasoning(job *j, const char *text, size_t len);
/* A call of the last message (an assistant turn): name a non-empty string
 * (name_at: its path), args its arguments as they came back (any text:
 * what the model wrote, JSON or cut off; rendered as it is when it is not
 * a JSON object). where names the call in errors. */
int job_add_call(job *j, const char *id, json_t *name, const char *args, size_t len, const char *where,
                 const char *name_at, ph_err *err);
/* Keeps a malloc'd string until the job ends; returns it (NULL: out of memory, s freed). */
char *job_own(job *j, char *s);
/* Adds a declared tool from its declaration decl: "name" (1 to 64 of
 * [A-Za-z0-9_-], as OpenAI and Anthropic take them), "description" (may
 * be absent), and its JSON schema object in schema_key (may be absent).
 * where names decl in errors ("tools[0].function"). */
int job_add_tool(job *j, json_t *decl, const char *schema_key, const char *where, ph_err *err);
/* How an API declares a function tool: each element of "tools" has "type"
 * `type` (or none, when type_optional), and its name, description and JSON
 * schema (the member `schema`) are members of `holder` (NULL: of the tool
 * itself). */
typedef struct tool_shape {
    const char *type;
    bool type_optional;
    const char *holder;
    const char *schema;
} tool_shape;
/* The request's "tools" (absent or null: none), each through job_add_tool. */
int job_parse_tools(job *j, json_t *root, const tool_shape *shape, ph_err *err);
/* After the tools: checks tool_choice's name (a JSON string, for
 * PH_TOOL_NAMED) against them and fills the tool fields of j->gen. */
int job_set_tool_choice(job *j, ph_tool_choice choice, json_t *name, const char *where, ph_err *err);
/* OpenAI's "tool_choice" (absent or null: auto): "auto", "none",
 * "required", or {"type": "function", ...} with the tool's name in
 * `holder`.name (NULL: name). */
int job_parse_openai_tool_choice(job *j, json_t *root, const char *holder, ph_err *err);
/* A response format: "text", "json_object" or "json_schema" with schema. */
int job_set_format(job *j, const char *type, json_t *schema, const char *where, ph_err *err);
/* Thinking switched by an effort word (none, minimal: off; low, medium,
 * high, xhigh, max: on). */
int job_set_effort(job *j, json_t *v, const char *where, ph_err *err);
/* The sampling fields every API takes (extensions where the API has none):
 * temperature (max temp_max), top_p, top_k, min_p, seed, presence_penalty,
 * frequency_penalty, repetition_penalty, logit_bias, forced_output. */
int job_sampling(job *j, double temp_max, ph_err *err);

/* The fields a request may have: each is used by the adapter, accepted and
 * ignored by design (documented), or refused with a reason unless it is
 * null or one of the values that ask for nothing. Any other field (newer
 * than this server, or a client's own) is accepted and ignored visibly:
 * named in j->ignored, which the server logs, counts and names in the
 * X-Pinhole-Ignored-Fields header; with j->strict_fields it is refused. */
typedef enum field_how { F_USE, F_IGNORE, F_REFUSE } field_how;
typedef struct field_rule {
    const char *name;
    field_how how;
    const char *why; /* F_REFUSE: the reason shown */
} field_rule;
/* Checks root's fields against an API's own rules and the ones all three
 * APIs share (api_fields.c: model, stream, sampling, tools, cache_salt, ...). */
int api_check_fields(job *j, const field_rule *rules, size_t n, const char *where, ph_err *err);
/* The value of the X-Pinhole-Ignored-Fields header for j's ignored fields
 * (", "-separated, each name cut to 64 bytes, bytes outside printable ASCII
 * as '?', "..." when there were more), in buf; false: none ignored. */
bool api_ignored_header(const job *j, char *buf, size_t cap);

/* Collecting the answer's calls (server.c's event handler). */
out_call *job_out_call(job *j, int32_t index, const char *id_prefix);
/* The stop strings: a string or an array of strings (or null). */
int job_set_stop(job *j, json_t *v, const char *field, ph_err *err);
/* Reads common fields with type and range checks. absent: leaves *out.
 * path names the field in errors (and in err->param); the member read is
 * its last component ("thinking.budget_tokens": root's "budget_tokens"). */
int api_get_number(json_t *root, const char *path, double lo, double hi, double *out, ph_err *err);
int api_get_int(json_t *root, const char *path, int64_t lo, int64_t hi, int64_t *out, ph_err *err);
int api_get_bool(json_t *root, const char *path, bool *out, ph_err *err);
/* A field's path written into buf (printf-like); returns buf. */
const char *api_path(char *buf, size_t cap, const char *fmt, ...) PH_PRINTF(3, 4);

/* The request body read as JSON: an object (NUL allowed in its strings, a
 * repeated key refused). NULL: msg (cap bytes) says why in this server's
 * words. */
json_t *api_parse_body(const char *body, size_t len, char *msg, size_t cap);

/* A JSON string of n bytes; invalid UTF-8 becomes U+FFFD. */
json_t *api_utf8_string(const char *s, size_t n);

/* Error bodies in each API's shape. */
json_t *openai_error_body(int status, const char *msg);
json_t *anthropic_error_body(int status, const char *msg);
/* OpenAI's shape with error.param and error.code set (NULL: null). */
json_t *openai_error_body_code(int status, const char *msg, const char *param, const char *code);
/* An error body in the API's shape; param is the field at fault (OpenAI's
 * error.param; NULL or "": null; Anthropic's shape has none). */
json_t *api_error_body(bool anthropic, int status, const char *msg, const char *param);
int api_status_for(const ph_err *err);

void api_make_id(char *out, size_t cap, const char *prefix);

/* Whether a request id a client sent (X-Request-Id) is used as it is: 1
 * to 64 of [A-Za-z0-9._-] (else the server makes one: api_make_id's 16
 * first hex digits). */
bool api_request_id_sane(const char *id);

/* The sampling seed of a request that names none: from getrandom(2), or, if
 * that fails, the clock's nanoseconds mixed with a counter. */
uint64_t api_random_seed(void);

#endif
