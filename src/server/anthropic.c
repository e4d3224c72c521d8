/* POST /v1/messages (Anthropic Messages). */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "server/api.h"

/* A content block of a message (or of a tool result): text or a picture. */
static int add_block(job *j, json_t *b, const char *type, const char *path, ph_err *err) {
    if (!strcmp(type, "text")) return job_add_text_field(j, b, "text", path, err);
    if (!strcmp(type, "image")) {
        json_t *src = json_object_get(b, "source");
        const char *st = json_string_value(json_object_get(src, "type"));
        char at[160], field[176];
        api_path(at, sizeof at, "%s.source", path);
        if (!json_is_object(src) || !st) return err_setp(err, at, "%s must be an object with a 'type'", at);
        if (!strcmp(st, "base64")) {
            json_t *data = json_object_get(src, "data");
            if (!json_is_string(data))
                return err_setp(err, api_path(field, sizeof field, "%s.data", at), "%s.data must be a string", at);
            return job_add_image_b64(j, json_string_value(json_object_get(src, "media_type")),
                                     json_string_value(data), json_string_length(data), at, err);
        }
        if (!strcmp(st, "url")) {
            json_t *url = json_object_get(src, "url");
            api_path(field, sizeof field, "%s.url", at);
            return job_add_image_url(j, json_is_string(url) ? json_string_value(url) : "",
                                     json_is_string(url) ? json_string_length(url) : 0, field, err);
        }
        return err_setp(
            err, api_path(field, sizeof field, "%s.type", at),
            "%s: image source type '%s' is not supported; only data: URIs and base64 sources are accepted", path, st);
    }
    char at[160];
    return err_setp(err, api_path(at, sizeof at, "%s.type", path),
                    "%s: block type '%s' is not supported here (text, image, and in turns thinking, tool_use, "
                    "tool_result)",
                    path, type);
}

/* A block of an assistant turn: thinking (its reasoning), tool_use (a call), or text. */
static int add_assistant_block(job *j, json_t *b, const char *type, const char *path, ph_err *err) {
    if (!strcmp(type, "thinking")) {
        json_t *t = json_object_get(b, "thinking");
        if (json_is_string(t)) job_set_reasoning(j, json_string_value(t), json_string_length(t));
        return 0;
    }
    if (!strcmp(type, "redacted_thinking")) return 0; /* opaque: nothing to render */
    if (!strcmp(type, "tool_use")) {
        json_t *input = json_object_get(b, "input");
        char at[160];
        if (!json_is_object(input))
            return err_setp(err, api_path(at, sizeof at, "%s.input", path), "%s.input must be an object", path);
        char *args = job_own(j, json_dumps(input, JSON_COMPACT));
        if (!args) return err_set(err, "out of memory");
        return job_add_call(j, json_string_value(json_object_get(b, "id")), json_object_get(b, "name"), args,
                            strlen(args), path, api_path(at, sizeof at, "%s.name", path), err);
    }
    return add_block(j, b, type, path, err);
}

/* A block of a user turn other than its tool results (added before it). */
static int add_user_block(job *j, json_t *b, const char *type, const char *path, ph_err *err) {
    return strcmp(type, "tool_result") ? add_block(j, b, type, path, err) : 0;
}

static const char *block_type(json_t *b) { return json_string_value(json_object_get(b, "type")); }

/* A user turn: its tool_result blocks become tool messages (in their order,
 * first), the rest of its blocks a user message after them. */
static int add_user(job *j, json_t *c, const char *path, ph_err *err) {
    size_t bi, n_other = 0;
    json_t *b;
    if (json_is_array(c)) {
        json_array_foreach(c, bi, b) {
            const char *type = block_type(b);
            if (!type || strcmp(type, "tool_result")) {
                n_other++;
                continue;
            }
            if (job_begin_msg(j, PH_ROLE_TOOL, err)) return -1;
            if (json_is_true(json_object_get(b, "is_error")) && job_add_text(j, "Error: ", 7, err)) return -1;
            json_t *rc = json_object_get(b, "content");
            char at[128];
            snprintf(at, sizeof at, "%s[%zu].content", path, bi);
            if (rc && !json_is_null(rc) && job_add_content(j, rc, at, "blocks", add_block, err)) return -1;
        }
        if (!n_other) return 0;
    }
    if (job_begin_msg(j, PH_ROLE_USER, err)) return -1;
    return job_add_content(j, c, path, "blocks", add_user_block, err);
}

/* The system text: the 'system' field, then every role "system" entry of
 * messages, in one system message where the template puts system text. */
static int add_system(job *j, json_t *root, json_t *msgs, ph_err *err) {
    json_t *sys = json_object_get(root, "system");
    bool any = sys && !json_is_null(sys);
    if (any && !json_is_string(sys) && !json_is_array(sys))
        return err_setp(err, "system", "'system' must be a string or an array of text blocks");
    size_t mi;
    json_t *m;
    json_array_foreach(msgs, mi, m) any |= json_is_object(m) && json_is_string(json_object_get(m, "role")) &&
                                           !strcmp(json_string_value(json_object_get(m, "role")), "system");
    if (!any) return 0;
    if (job_begin_msg(j, PH_ROLE_SYSTEM, err)) return -1;
    bool first = true;
    if (sys && !json_is_null(sys)) {
        if (job_add_content(j, sys, "system", "text blocks", add_block, err)) return -1;
        first = false;
    }
    json_array_foreach(msgs, mi, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role || strcmp(role, "system")) continue;
        if (!first && job_add_text(j, "\n\n", 2, err)) return -1;
        char path[64];
        snprintf(path, sizeof path, "messages[%zu].content", mi);
        if (job_add_content(j, json_object_get(m, "content"), path, "blocks", add_block, err)) return -1;
        first = false;
    }
    return 0;
}

static int parse_tools(job *j, json_t *root, ph_err *err) {
    static const tool_shape shape = {.type = "custom", .type_optional = true, .schema = "input_schema"};
    if (job_parse_tools(j, root, &shape, err)) return -1;
    json_t *tc = json_object_get(root, "tool_choice");
    if (!tc || json_is_null(tc)) return 0;
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || !type)
        return err_setp(err, "tool_choice", "'tool_choice' must be an object with a 'type' (auto, any, tool, none)");
    bool one = false;
    if (api_get_bool(tc, "tool_choice.disable_parallel_tool_use", &one, err)) return -1;
    if (one) j->gen.parallel_tool_calls = false;
    if (!strcmp(type, "auto")) return job_set_tool_choice(j, PH_TOOL_AUTO, NULL, "tool_choice", err);
    if (!strcmp(type, "none")) return job_set_tool_choice(j, PH_TOOL_NONE, NULL, "tool_choice", err);
    if (!strcmp(type, "any")) return job_set_tool_choice(j, PH_TOOL_REQUIRED, NULL, "tool_choice", err);
    if (!strcmp(type, "tool"))
        return job_set_tool_choice(j, PH_TOOL_NAMED, json_object_get(tc, "name"), "tool_choice", err);
    return err_setp(err, "tool_choice.type", "'tool_choice.type' must be auto, any, tool or none, not '%s'", type);
}

/* thinking: {"type": "enabled", "budget_tokens": N} | {"type": "disabled"} | {"type": "adaptive"}. */
static int parse_thinking(job *j, json_t *root, ph_err *err) {
    json_t *t = json_object_get(root, "thinking");
    if (!t || json_is_null(t)) return 0;
    const char *type = json_string_value(json_object_get(t, "type"));
    if (!json_is_object(t) || !type)
        return err_setp(err, "thinking", "'thinking' must be an object with a 'type' (enabled, disabled, adaptive)");
    int64_t budget = -1;
    if (!strcmp(type, "enabled") && api_get_int(t, "thinking.budget_tokens", 0, INT32_MAX, &budget, err)) return -1;
    j->gen.thinking_budget = (int32_t)budget;
    if (!strcmp(type, "enabled")) j->gen.thinking = 1;
    else if (!strcmp(type, "disabled")) j->gen.thinking = 0;
    else if (!strcmp(type, "adaptive")) j->gen.thinking = -1; /* the model's own default */
    else
        return err_setp(err, "thinking.type", "'thinking.type' must be enabled, disabled or adaptive, not '%s'",
                        type);
    return 0;
}

/* output_config: {"effort": ..., "format": {"type": "json_schema", "schema": ...}}. */
static int parse_output_config(job *j, json_t *root, ph_err *err) {
    static const char *const keys[] = {"output_config", "output_format"};
    for (size_t i = 0; i < 2; i++) {
        json_t *oc = json_object_get(root, keys[i]);
        if (!oc || json_is_null(oc)) continue;
        if (!json_is_object(oc)) return err_setp(err, keys[i], "'%s' must be an object", keys[i]);
        json_t *f = i == 0 ? json_object_get(oc, "format") : oc;
        if (i == 0) {
            const char *k;
            json_t *v;
            json_object_foreach(oc, k, v) {
                char at[64];
                if (strcmp(k, "format") && strcmp(k, "effort"))
                    return err_setp(err, api_path(at, sizeof at, "output_config.%.32s", k),
                                    "'output_config.%.32s' is not supported (effort, format are)", k);
            }
            json_t *effort = json_object_get(oc, "effort");
            if (effort && !json_is_null(effort) && !json_is_string(effort))
                return err_setp(err, "output_config.effort", "'output_config.effort' must be a string");
        }
        if (f && !json_is_null(f)) {
            if (!json_is_object(f))
                return err_setp(err, i == 0 ? "output_config.format" : keys[i],
                                "the output format must be an object");
            if (job_set_format(j, json_string_value(json_object_get(f, "type")), json_object_get(f, "schema"),
                               keys[i], err))
                return -1;
        }
    }
    return 0;
}

/* this API's own fields; api_check_fields also takes the ones all three share */
static const field_rule FIELDS[] = {
    {"messages", F_USE, NULL},
    {"system", F_USE, NULL},
    {"max_tokens", F_USE, NULL},
    {"stop_sequences", F_USE, NULL},
    {"thinking", F_USE, NULL},
    {"output_config", F_USE, NULL},
    {"output_format", F_USE, NULL},
    {"context_management", F_IGNORE, NULL},
    {"inference_geo", F_IGNORE, NULL},
    {"cache_control", F_IGNORE, NULL},
    {"diagnostics", F_IGNORE, NULL},
    {"speed", F_IGNORE, NULL},
    {"user_profile_id", F_IGNORE, NULL},
    {"workspace_id", F_IGNORE, NULL},
    {"billing_policy", F_IGNORE, NULL},
    {"fallback_credit_token", F_IGNORE, NULL},
    {"fallbacks", F_IGNORE, NULL},
    {"compaction", F_IGNORE, NULL},
    {"thread", F_IGNORE, NULL},
    {"betas", F_IGNORE, NULL},
    {"container", F_REFUSE, "this server runs no code containers"},
    {"mcp_servers", F_REFUSE, "this server connects to no MCP servers; declare the tools in 'tools'"},
};

static int parse(job *j, ph_err *err) {
    json_t *root = j->root;
    if (api_check_fields(j, FIELDS, sizeof FIELDS / sizeof *FIELDS, "the Messages API", err)) return -1;
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs)) return err_setp(err, "messages", "'messages' must be an array");
    if (parse_tools(j, root, err) || add_system(j, root, msgs, err)) return -1;
    size_t mi;
    json_t *m;
    json_array_foreach(msgs, mi, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        char path[64];
        if (!json_is_object(m) || !role)
            return err_setp(err, api_path(path, sizeof path, "messages[%zu]", mi),
                            "messages[%zu] must be an object with a 'role'", mi);
        json_t *c = json_object_get(m, "content");
        api_path(path, sizeof path, "messages[%zu].content", mi);
        if (!strcmp(role, "system")) continue; /* in the system message */
        if (!strcmp(role, "user")) {
            if (add_user(j, c, path, err)) return -1;
        } else if (!strcmp(role, "assistant")) {
            if (job_begin_msg(j, PH_ROLE_ASSISTANT, err) ||
                job_add_content(j, c, path, "blocks", add_assistant_block, err))
                return -1;
        } else {
            return err_setp(err, api_path(path, sizeof path, "messages[%zu].role", mi),
                            "messages[%zu].role '%s' is not supported (user, assistant, system)", mi, role);
        }
    }
    if (job_finish_msgs(j, "messages", "message", err)) return -1;
    json_t *mt = json_object_get(root, "max_tokens");
    if (!mt && !j->count_only) return err_setp(err, "max_tokens", "'max_tokens' is required");
    int64_t max_tokens = j->gen.max_tokens;
    if (job_sampling(j, 1, err) || api_get_int(root, "max_tokens", 1, INT32_MAX, &max_tokens, err) ||
        api_get_bool(root, "stream", &j->stream, err) || parse_thinking(j, root, err) ||
        parse_output_config(j, root, err) ||
        job_set_stop(j, json_object_get(root, "stop_sequences"), "stop_sequences", err))
        return -1;
    json_t *ss = json_object_get(root, "stop_sequences");
    if (ss && !json_is_null(ss) && !json_is_array(ss))
        return err_setp(err, "stop_sequences", "'stop_sequences' must be an array of strings");
    j->gen.max_tokens = (int32_t)max_tokens;
    if (j->count_only) j->stream = false;
    api_make_id(j->id, sizeof j->id, "msg_");
    return 0;
}

/* Anthropic counts cache reads apart from input_tokens. */
static json_t *usage(const job *j, bool start) {
    const ph_turn_report *r = &j->rep;
    return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", r->n_prompt - r->n_reused, "cache_creation_input_tokens", 0,
                     "cache_read_input_tokens", r->n_reused, "output_tokens", start ? 0 : r->n_generated);
}

static json_t *stop_reason(const job *j) {
    if (j->rep.finish == PH_FINISH_LENGTH) return json_string("max_tokens");
    if (j->rep.stop_index >= 0) return json_string("stop_sequence");
    if (j->n_out_calls) return json_string("tool_use");
    return json_string("end_turn");
}

static json_t *stop_seq(const job *j) {
    return j->rep.stop_index >= 0 && j->rep.finish == PH_FINISH_STOP ? json_string(j->stop[j->rep.stop_index])
                                                                     : json_null();
}

static json_t *message(const job *j, json_t *content, bool start) {
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:o}", "id", j->id, "type", "message", "role", "assistant",
                     "model", j->model_name, "content", content, "stop_reason", start ? json_null() : stop_reason(j),
                     "stop_sequence", start ? json_null() : stop_seq(j), "usage", usage(j, start));
}

static void ev(job *j, const char *type, json_t *body) {
    json_object_set_new(body, "type", json_string(type));
    job_sse(j, type, body);
}

static void close_block(job *j) {
    if (j->open_kind < 0) return;
    if (j->open_kind == (int)PH_DELTA_REASONING)
        ev(j, "content_block_delta",
           json_pack("{s:i,s:{s:s,s:s}}", "index", j->n_blocks - 1, "delta", "type", "signature_delta", "signature",
                     ""));
    ev(j, "content_block_stop", json_pack("{s:i}", "index", j->n_blocks - 1));
    j->open_kind = -1;
}

static void open_block(job *j, ph_delta_kind kind, int32_t call) {
    json_t *b;
    if (kind == PH_DELTA_TOOL_CALL) {
        const out_call *oc = &j->out_calls[call];
        b = json_pack("{s:s,s:s,s:o,s:{}}", "type", "tool_use", "id", oc->id, "name",
                      api_utf8_string(oc->name.p ? oc->name.p : "", oc->name.n), "input");
    } else if (kind == PH_DELTA_REASONING) {
        b = json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "");
    } else {
        b = json_pack("{s:s,s:s}", "type", "text", "text", "");
    }
    ev(j, "content_block_start", json_pack("{s:i,s:o}", "index", j->n_blocks, "content_block", b));
    j->n_blocks++;
    j->open_kind = (int)kind;
    j->open_call = call;
}

static void stream_start(job *j) {
    j->open_kind = -1;
    ev(j, "message_start", json_pack("{s:o}", "message", message(j, json_array(), true)));
    ev(j, "ping", json_object());
}

static void stream_event(job *j, const ph_gen_event *e) {
    if (e->kind == PH_DELTA_TOOL_CALL) {
        close_block(j);
        open_block(j, PH_DELTA_TOOL_CALL, e->call_index);
        return;
    }
    if (!e->len) return;
    json_t *d;
    if (e->kind == PH_DELTA_TOOL_ARGS) {
        if (j->open_kind != (int)PH_DELTA_TOOL_CALL || j->open_call != e->call_index) return; /* cannot happen */
        d = json_pack("{s:s,s:o}", "type", "input_json_delta", "partial_json", api_utf8_string(e->text, e->len));
    } else {
        if (j->open_kind != (int)e->kind) {
            close_block(j);
            open_block(j, e->kind, -1);
        }
        d = e->kind == PH_DELTA_REASONING
                ? json_pack("{s:s,s:o}", "type", "thinking_delta", "thinking", api_utf8_string(e->text, e->len))
                : json_pack("{s:s,s:o}", "type", "text_delta", "text", api_utf8_string(e->text, e->len));
    }
    ev(j, "content_block_delta", json_pack("{s:i,s:o}", "index", j->n_blocks - 1, "delta", d));
}

static void stream_end(job *j) {
    /* an answer without calls always has a text block, even an empty one */
    if (!j->n_out_calls && j->open_kind != (int)PH_DELTA_CONTENT) {
        close_block(j);
        open_block(j, PH_DELTA_CONTENT, -1);
    }
    close_block(j);
    ev(j, "message_delta",
       json_pack("{s:{s:o,s:o},s:o}", "delta", "stop_reason", stop_reason(j), "stop_sequence", stop_seq(j), "usage",
                 usage(j, false)));
    ev(j, "message_stop", json_object());
}

static void stream_error(job *j, const char *msg) { job_sse(j, "error", anthropic_error_body(500, msg)); }

static json_t *result(job *j) {
    json_t *content = json_array();
    if (j->reasoning.n)
        json_array_append_new(content, json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking",
                                                 api_utf8_string(j->reasoning.p, j->reasoning.n), "signature", ""));
    if (j->content.n || !j->n_out_calls)
        json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text",
                                                 api_utf8_string(j->content.p ? j->content.p : "", j->content.n)));
    for (size_t i = 0; i < j->n_out_calls; i++) {
        const out_call *oc = &j->out_calls[i];
        /* the arguments of a call cut short by max_tokens do not parse: {} */
        json_t *input = json_loadb(oc->args.p ? oc->args.p : "", oc->args.n, JSON_ALLOW_NUL, NULL);
        if (!json_is_object(input)) {
            json_decref(input);
            input = json_object();
        }
        json_array_append_new(content,
                              json_pack("{s:s,s:s,s:o,s:o}", "type", "tool_use", "id", oc->id, "name",
                                        api_utf8_string(oc->name.p ? oc->name.p : "", oc->name.n), "input", input));
    }
    return message(j, content, false);
}

const api_kind api_anthropic_messages = {
    .endpoint = "messages",
    .anthropic = true,
    .call_prefix = "toolu_",
    .parse = parse,
    .stream_start = stream_start,
    .stream_event = stream_event,
    .stream_end = stream_end,
    .stream_error = stream_error,
    .result = result,
};
