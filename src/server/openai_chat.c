/* POST /v1/chat/completions (OpenAI Chat Completions). */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "server/api.h"

static int role_of(const char *r, ph_role *out) {
    if (!strcmp(r, "system") || !strcmp(r, "developer")) *out = PH_ROLE_SYSTEM;
    else if (!strcmp(r, "user")) *out = PH_ROLE_USER;
    else if (!strcmp(r, "assistant")) *out = PH_ROLE_ASSISTANT;
    else if (!strcmp(r, "tool")) *out = PH_ROLE_TOOL;
    else return -1;
    return 0;
}

static int add_part(job *j, json_t *part, const char *type, const char *path, ph_err *err) {
    if (!strcmp(type, "text")) return job_add_text_field(j, part, "text", path, err);
    if (!strcmp(type, "refusal")) return job_add_text_field(j, part, "refusal", path, err);
    if (!strcmp(type, "image_url")) {
        json_t *iu = json_object_get(part, "image_url");
        json_t *url = json_is_string(iu) ? iu : json_object_get(iu, "url");
        char at[160];
        api_path(at, sizeof at, "%s.image_url%s", path, json_is_string(iu) ? "" : ".url");
        if (!json_is_string(url)) return err_setp(err, at, "%s.image_url.url must be a string", path);
        return job_add_image_url(j, json_string_value(url), json_string_length(url), at, err);
    }
    char at[160];
    return err_setp(err, api_path(at, sizeof at, "%s.type", path),
                    "%s: part type '%s' is not supported (text, image_url, refusal are)", path, type);
}

static int parse_content(job *j, json_t *content, size_t mi, ph_err *err) {
    if (!content || json_is_null(content)) return 0; /* an assistant turn with only tool calls */
    char path[64];
    snprintf(path, sizeof path, "messages[%zu].content", mi);
    return job_add_content(j, content, path, "parts", add_part, err);
}

/* An assistant turn's tool_calls: [{id, type: "function", function: {name, arguments: "<json>"}}]. */
static int parse_calls(job *j, json_t *calls, size_t mi, ph_err *err) {
    if (!calls || json_is_null(calls)) return 0;
    char where[64], at[96];
    if (!json_is_array(calls))
        return err_setp(err, api_path(where, sizeof where, "messages[%zu].tool_calls", mi),
                        "messages[%zu].tool_calls must be an array", mi);
    size_t ci;
    json_t *c;
    json_array_foreach(calls, ci, c) {
        api_path(where, sizeof where, "messages[%zu].tool_calls[%zu]", mi, ci);
        json_t *fn = json_object_get(c, "function");
        const char *type = json_string_value(json_object_get(c, "type"));
        if (!json_is_object(fn) || (type && strcmp(type, "function")))
            return err_setp(err, where, "%s must be a function call with a 'function' object", where);
        json_t *args = json_object_get(fn, "arguments");
        const char *text;
        size_t len;
        if (json_is_string(args)) {
            text = json_string_value(args);
            len = json_string_length(args);
        } else if (json_is_object(args)) { /* some clients send the object itself */
            if (!(text = job_own(j, json_dumps(args, JSON_COMPACT)))) return err_set(err, "out of memory");
            len = strlen(text);
        } else {
            return err_setp(err, api_path(at, sizeof at, "%s.function.arguments", where),
                            "%s.function.arguments must be a JSON string", where);
        }
        if (job_add_call(j, json_string_value(json_object_get(c, "id")), json_object_get(fn, "name"), text, len,
                         where, api_path(at, sizeof at, "%s.function.name", where), err))
            return -1;
    }
    return 0;
}

static int parse_tools(job *j, json_t *root, ph_err *err) {
    static const tool_shape shape = {.type = "function", .holder = "function", .schema = "parameters"};
    if (job_parse_tools(j, root, &shape, err)) return -1;
    return job_parse_openai_tool_choice(j, root, "function", err);
}

static int parse_format(job *j, json_t *root, ph_err *err) {
    json_t *rf = json_object_get(root, "response_format");
    if (!rf || json_is_null(rf)) return 0;
    if (!json_is_object(rf)) return err_setp(err, "response_format", "'response_format' must be an object");
    json_t *js = json_object_get(rf, "json_schema");
    return job_set_format(j, json_string_value(json_object_get(rf, "type")), json_object_get(js, "schema"),
                          "response_format", err);
}

/* this API's own fields; api_check_fields also takes the ones all three share */
static const field_rule FIELDS[] = {
    {"messages", F_USE, NULL},
    {"stream_options", F_USE, NULL},
    {"max_tokens", F_USE, NULL},
    {"max_completion_tokens", F_USE, NULL},
    {"stop", F_USE, NULL},
    {"n", F_USE, NULL},
    {"logprobs", F_USE, NULL},
    {"top_logprobs", F_USE, NULL},
    {"parallel_tool_calls", F_USE, NULL},
    {"response_format", F_USE, NULL},
    {"reasoning_effort", F_USE, NULL},
    {"thinking_budget", F_USE, NULL},
    {"user", F_IGNORE, NULL},
    {"safety_identifier", F_IGNORE, NULL},
    {"prompt_cache_key", F_IGNORE, NULL},
    {"verbosity", F_IGNORE, NULL},
    {"moderation", F_IGNORE, NULL},
    {"prompt_cache_options", F_IGNORE, NULL},
    {"prompt_cache_retention", F_IGNORE, NULL},
    {"store", F_REFUSE, "nothing is stored: completions cannot be retrieved later"},
    {"modalities", F_USE, NULL},
    {"audio", F_REFUSE, "this server answers with text only"},
    {"prediction", F_REFUSE, "predicted outputs are not supported"},
    {"web_search_options", F_REFUSE, "this server has no web search"},
    {"functions", F_REFUSE, "use 'tools' (the deprecated 'functions' form is not supported)"},
    {"function_call", F_REFUSE, "use 'tool_choice' (the deprecated 'function_call' form is not supported)"},
};

static int parse(job *j, ph_err *err) {
    json_t *root = j->root;
    if (api_check_fields(j, FIELDS, sizeof FIELDS / sizeof *FIELDS, "Chat Completions", err)) return -1;
    json_t *mod = json_object_get(root, "modalities");
    if (mod && !json_is_null(mod)) {
        bool ok = json_is_array(mod);
        size_t i;
        json_t *x;
        json_array_foreach(mod, i, x) ok &= json_is_string(x) && !strcmp(json_string_value(x), "text");
        if (!ok)
            return err_setp(err, "modalities", "'modalities' may only be [\"text\"]: this server answers with text");
    }
    if (parse_tools(j, root, err)) return -1;
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs)) return err_setp(err, "messages", "'messages' must be an array");
    size_t mi;
    json_t *m;
    json_array_foreach(msgs, mi, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        ph_role r;
        char at[64];
        if (!json_is_object(m) || !role)
            return err_setp(err, api_path(at, sizeof at, "messages[%zu]", mi),
                            "messages[%zu] must be an object with a 'role'", mi);
        if (role_of(role, &r))
            return err_setp(err, api_path(at, sizeof at, "messages[%zu].role", mi),
                            "messages[%zu].role '%s' is not supported (system, developer, "
                            "user, assistant, tool)",
                            mi, role);
        json_t *content = json_object_get(m, "content");
        if (r != PH_ROLE_ASSISTANT && !json_is_string(content) && !json_is_array(content))
            return err_setp(err, api_path(at, sizeof at, "messages[%zu].content", mi),
                            "messages[%zu].content must be a string or an array of parts", mi);
        if (job_begin_msg(j, r, err) || parse_content(j, content, mi, err)) return -1;
        if (r == PH_ROLE_ASSISTANT) {
            json_t *rc = json_object_get(m, "reasoning_content");
            if (json_is_string(rc)) job_set_reasoning(j, json_string_value(rc), json_string_length(rc));
            if (parse_calls(j, json_object_get(m, "tool_calls"), mi, err)) return -1;
        }
    }
    if (job_finish_msgs(j, "messages", "message", err)) return -1;
    int64_t max_tokens = j->gen.max_tokens, top_lp = 0, budget = -1;
    bool logprobs = false;
    if (job_sampling(j, 2, err) || api_get_int(root, "max_tokens", 1, INT32_MAX, &max_tokens, err) ||
        api_get_int(root, "max_completion_tokens", 1, INT32_MAX, &max_tokens, err) ||
        api_get_bool(root, "stream", &j->stream, err) || api_get_bool(root, "logprobs", &logprobs, err) ||
        api_get_int(root, "top_logprobs", 0, 20, &top_lp, err) ||
        api_get_bool(root, "parallel_tool_calls", &j->gen.parallel_tool_calls, err) || parse_format(j, root, err) ||
        job_set_effort(j, json_object_get(root, "reasoning_effort"), "reasoning_effort", err) ||
        api_get_int(root, "thinking_budget", 0, INT32_MAX, &budget, err) ||
        job_set_stop(j, json_object_get(root, "stop"), "stop", err))
        return -1;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return err_setp(err, "stream_options", "'stream_options' must be an object");
        const char *k;
        json_t *v;
        json_object_foreach(so, k, v) {
            char at[64];
            if (strcmp(k, "include_usage") && strcmp(k, "include_obfuscation"))
                return err_setp(err, api_path(at, sizeof at, "stream_options.%.32s", k),
                                "'stream_options.%.32s' is not supported (include_usage is)", k);
        }
        if (api_get_bool(so, "stream_options.include_usage", &j->include_usage, err)) return -1;
    }
    json_t *n = json_object_get(root, "n");
    if (n && !json_is_null(n) && !(json_is_number(n) && json_number_value(n) == 1)) /* 1 or 1.0 */
        return err_setp(err, "n", "'n' must be 1: this server makes one answer per request");
    j->gen.max_tokens = (int32_t)max_tokens;
    j->gen.thinking_budget = (int32_t)budget;
    j->logprobs = logprobs;
    j->gen.logprobs = logprobs;
    j->gen.top_logprobs = logprobs ? (int32_t)top_lp : 0;
    api_make_id(j->id, sizeof j->id, "chatcmpl-");
    return 0;
}

/* pinhole's own account of the turn, beside the API's fields: where the
 * reused rows came from, what became of the pictures, the times (ms). */
static json_t *usage_pinhole(const ph_turn_report *r) {
    return json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:f,s:f,s:f,s:f}", "reused_tokens", r->n_reused,
                     "from_ram_tokens", r->n_from_ram, "from_disk_tokens", r->n_from_disk, "prefilled_tokens",
                     r->n_prefilled, "pictures", r->n_pictures, "pictures_in_kv", r->pics_from_kv,
                     "pictures_from_cache", r->pics_from_cache, "pictures_encoded", r->pics_encoded, "encode_ms",
                     r->encode_s * 1e3, "prefill_ms", r->prefill_s * 1e3, "ttft_ms", r->ttft_s * 1e3, "decode_ms",
                     r->decode_s * 1e3);
}

static json_t *usage(const job *j) {
    const ph_turn_report *r = &j->rep;
    return json_pack("{s:i,s:i,s:i,s:{s:i},s:{s:i},s:o}", "prompt_tokens", r->n_prompt, "completion_tokens",
                     r->n_generated, "total_tokens", r->n_prompt + r->n_generated, "prompt_tokens_details",
                     "cached_tokens", r->n_reused, "completion_tokens_details", "reasoning_tokens", r->n_reasoning,
                     "pinhole", usage_pinhole(r));
}

static const char *finish_reason(const job *j) {
    if (j->rep.finish == PH_FINISH_LENGTH) return "length";
    return j->n_out_calls ? "tool_calls" : "stop";
}

static json_t *chunk(const job *j, json_t *delta, json_t *logprobs, const char *finish) {
    json_t *c =
        json_pack("{s:s,s:s,s:I,s:s,s:s,s:[{s:i,s:o,s:o,s:o}]}", "id", j->id, "object", "chat.completion.chunk",
                  "created", (json_int_t)j->created, "model", j->model_name, "system_fingerprint",
                  "pinhole-" PINHOLE_VERSION, "choices", "index", 0, "delta", delta, "logprobs",
                  logprobs ? logprobs : json_null(), "finish_reason", finish ? json_string(finish) : json_null());
    if (j->include_usage) json_object_set_new(c, "usage", json_null());
    return c;
}

/* One logprobs entry: {token, logprob, bytes, top_logprobs}. */
static json_t *lp_token(job *j, int32_t id, float lp) {
    char buf[512];
    size_t n = ph_engine_token_bytes(j->e, id, buf, sizeof buf);
    if (n > sizeof buf) n = sizeof buf;
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)buf[i]));
    json_t *tok = api_utf8_string(buf, n);
    return json_pack("{s:o,s:f,s:o}", "token", tok, "logprob", (double)lp, "bytes", bytes);
}

static json_t *lp_entry(job *j, const ph_gen_event *ev) {
    json_t *e = lp_token(j, ev->token, ev->logprob);
    json_t *top = json_array();
    for (int32_t i = 0; i < ev->n_top; i++)
        json_array_append_new(top, lp_token(j, ev->top_ids[i], ev->top_logprobs[i]));
    json_object_set_new(e, "top_logprobs", top);
    return e;
}

static void stream_start(job *j) {
    job_sse(j, NULL, chunk(j, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL, NULL));
}

/* A call's delta: its first carries id, type and name (arguments ""), later
 * ones argument pieces. */
static json_t *call_delta(job *j, const ph_gen_event *ev) {
    const out_call *oc = &j->out_calls[ev->call_index];
    json_t *c = ev->kind == PH_DELTA_TOOL_CALL
                    ? json_pack("{s:i,s:s,s:s,s:{s:s%,s:s}}", "index", ev->call_index, "id", oc->id, "type",
                                "function", "function", "name", ev->text, ev->len, "arguments", "")
                    : json_pack("{s:i,s:{s:o}}", "index", ev->call_index, "function", "arguments",
                                api_utf8_string(ev->text, ev->len));
    return json_pack("{s:[o]}", "tool_calls", c);
}

static void stream_event(job *j, const ph_gen_event *ev) {
    json_t *lp = NULL;
    if (j->logprobs && ev->token >= 0) lp = json_pack("{s:[o]}", "content", lp_entry(j, ev));
    if (!ev->len && !lp && ev->kind != PH_DELTA_TOOL_CALL) return;
    json_t *delta;
    if (ev->kind == PH_DELTA_TOOL_CALL || (ev->kind == PH_DELTA_TOOL_ARGS && ev->len)) delta = call_delta(j, ev);
    else if (ev->len && ev->kind != PH_DELTA_TOOL_ARGS)
        delta = json_pack("{s:o}", ev->kind == PH_DELTA_REASONING ? "reasoning_content" : "content",
                          api_utf8_string(ev->text, ev->len));
    else delta = json_object();
    job_sse(j, NULL, chunk(j, delta, lp, NULL));
}

static void stream_end(job *j) {
    job_sse(j, NULL, chunk(j, json_object(), NULL, finish_reason(j)));
    if (j->include_usage) {
        json_t *c = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[],s:o}", "id", j->id, "object", "chat.completion.chunk",
                              "created", (json_int_t)j->created, "model", j->model_name, "system_fingerprint",
                              "pinhole-" PINHOLE_VERSION, "choices", "usage", usage(j));
        job_sse(j, NULL, c);
    }
    job_emit(j, "data: [DONE]\n\n", 14);
}

static void stream_error(job *j, const char *msg) {
    job_sse(j, NULL, openai_error_body(500, msg));
    job_emit(j, "data: [DONE]\n\n", 14);
}

static void collect_logprobs(job *j, const ph_gen_event *ev) {
    if (!j->lp) j->lp = json_array();
    json_array_append_new(j->lp, lp_entry(j, ev));
}

static json_t *result(job *j) {
    /* content is null for an answer made only of calls */
    json_t *msg =
        json_pack("{s:s,s:o,s:n}", "role", "assistant", "content",
                  j->n_out_calls && !j->content.n ? json_null()
                                                  : api_utf8_string(j->content.p ? j->content.p : "", j->content.n),
                  "refusal");
    if (j->reasoning.n)
        json_object_set_new(msg, "reasoning_content", api_utf8_string(j->reasoning.p, j->reasoning.n));
    if (j->n_out_calls) {
        json_t *calls = json_array();
        for (size_t i = 0; i < j->n_out_calls; i++) {
            const out_call *oc = &j->out_calls[i];
            json_array_append_new(calls,
                                  json_pack("{s:s,s:s,s:{s:o,s:o}}", "id", oc->id, "type", "function", "function",
                                            "name", api_utf8_string(oc->name.p ? oc->name.p : "", oc->name.n),
                                            "arguments", api_utf8_string(oc->args.p ? oc->args.p : "", oc->args.n)));
        }
        json_object_set_new(msg, "tool_calls", calls);
    }
    json_t *lp = j->logprobs ? json_pack("{s:o}", "content", j->lp ? json_incref(j->lp) : json_array()) : json_null();
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:[{s:i,s:o,s:o,s:s}],s:o}", "id", j->id, "object", "chat.completion",
                     "created", (json_int_t)j->created, "model", j->model_name, "system_fingerprint",
                     "pinhole-" PINHOLE_VERSION, "choices", "index", 0, "message", msg, "logprobs", lp,
                     "finish_reason", finish_reason(j), "usage", usage(j));
}

const api_kind api_openai_chat = {
    .endpoint = "chat_completions",
    .call_prefix = "call_",
    .parse = parse,
    .stream_start = stream_start,
    .stream_event = stream_event,
    .stream_end = stream_end,
    .stream_error = stream_error,
    .collect = collect_logprobs,
    .result = result,
};
