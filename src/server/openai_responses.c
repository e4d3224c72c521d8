/* POST /v1/responses (OpenAI Responses). */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "server/api.h"

static int add_part(job *j, json_t *part, const char *type, const char *path, ph_err *err) {
    if (!strcmp(type, "input_text") || !strcmp(type, "output_text") || !strcmp(type, "text"))
        return job_add_text_field(j, part, "text", path, err);
    if (!strcmp(type, "refusal")) return job_add_text_field(j, part, "refusal", path, err);
    if (!strcmp(type, "input_image")) {
        json_t *iu = json_object_get(part, "image_url"), *u = json_is_object(iu) ? json_object_get(iu, "url") : iu;
        char at[160];
        if (!json_is_string(u)) {
            if (json_object_get(part, "file_id"))
                return err_setp(err, api_path(at, sizeof at, "%s.file_id", path),
                                "%s: file_id pictures are not supported; only data: URIs are accepted", path);
            return err_setp(err, api_path(at, sizeof at, "%s.image_url", path), "%s.image_url must be a string",
                            path);
        }
        api_path(at, sizeof at, "%s.image_url%s", path, json_is_object(iu) ? ".url" : "");
        return job_add_image_url(j, json_string_value(u), json_string_length(u), at, err);
    }
    char at[160];
    return err_setp(err, api_path(at, sizeof at, "%s.type", path),
                    "%s: type '%s' is not supported (input_text, input_image, output_text, refusal are)", path, type);
}

/* input[mi].field: a string or an array of parts */
static int add_parts(job *j, json_t *content, const char *field, size_t mi, ph_err *err) {
    char path[64];
    snprintf(path, sizeof path, "input[%zu].%s", mi, field);
    return job_add_content(j, content, path, "parts", add_part, err);
}

typedef struct input_state {
    bool open;         /* the last message is an assistant turn that function calls join */
    json_t *reasoning; /* a reasoning item's text waiting for its assistant turn */
} input_state;

/* Opens an assistant turn (taking the reasoning that came before it). */
static int begin_assistant(job *j, input_state *st, ph_err *err) {
    if (job_begin_msg(j, PH_ROLE_ASSISTANT, err)) return -1;
    if (st->reasoning) job_set_reasoning(j, json_string_value(st->reasoning), json_string_length(st->reasoning));
    st->reasoning = NULL;
    st->open = true;
    return 0;
}

static int parse_input(job *j, json_t *input, ph_err *err) {
    size_t mi;
    json_t *item;
    input_state st = {0};
    json_array_foreach(input, mi, item) {
        const char *type = json_string_value(json_object_get(item, "type"));
        char at[64], where[64];
        api_path(where, sizeof where, "input[%zu]", mi);
        if (!json_is_object(item)) return err_setp(err, where, "input[%zu] must be an object", mi);
        if (!type || !strcmp(type, "message")) {
            const char *role = json_string_value(json_object_get(item, "role"));
            if (!role) return err_setp(err, where, "input[%zu] must be a message with a 'role'", mi);
            if (!strcmp(role, "assistant")) {
                if (begin_assistant(j, &st, err)) return -1;
            } else {
                ph_role r;
                if (!strcmp(role, "user")) r = PH_ROLE_USER;
                else if (!strcmp(role, "system") || !strcmp(role, "developer")) r = PH_ROLE_SYSTEM;
                else
                    return err_setp(err, api_path(at, sizeof at, "input[%zu].role", mi),
                                    "input[%zu].role '%s' is not supported", mi, role);
                if (job_begin_msg(j, r, err)) return -1;
                st.open = false;
            }
            if (add_parts(j, json_object_get(item, "content"), "content", mi, err)) return -1;
        } else if (!strcmp(type, "function_call")) {
            json_t *args = json_object_get(item, "arguments");
            if (!json_is_string(args))
                return err_setp(err, api_path(at, sizeof at, "input[%zu].arguments", mi),
                                "input[%zu].arguments must be a JSON string", mi);
            if ((!st.open || st.reasoning) && begin_assistant(j, &st, err)) return -1;
            if (job_add_call(j, json_string_value(json_object_get(item, "call_id")), json_object_get(item, "name"),
                             json_string_value(args), json_string_length(args), where,
                             api_path(at, sizeof at, "input[%zu].name", mi), err))
                return -1;
        } else if (!strcmp(type, "function_call_output")) {
            if (job_begin_msg(j, PH_ROLE_TOOL, err) ||
                add_parts(j, json_object_get(item, "output"), "output", mi, err))
                return -1;
            st.open = false;
        } else if (!strcmp(type, "reasoning")) {
            /* its text goes back with the next assistant turn, where the template renders reasoning */
            json_t *c = json_object_get(item, "content");
            if (!json_is_array(c) || !json_array_size(c)) c = json_object_get(item, "summary");
            json_t *t = json_object_get(json_array_get(c, 0), "text");
            st.reasoning = json_is_string(t) ? t : NULL;
            st.open = false;
        } else {
            return err_setp(err, api_path(at, sizeof at, "input[%zu].type", mi),
                            "input[%zu]: item type '%s' is not supported (message, "
                            "function_call, function_call_output, reasoning are)",
                            mi, type);
        }
    }
    return 0;
}

static int parse_tools(job *j, json_t *root, ph_err *err) {
    static const tool_shape shape = {.type = "function", .schema = "parameters"};
    if (job_parse_tools(j, root, &shape, err)) return -1;
    return job_parse_openai_tool_choice(j, root, NULL, err);
}

static int parse_text(job *j, json_t *root, ph_err *err) {
    json_t *text = json_object_get(root, "text");
    if (!text || json_is_null(text)) return 0;
    if (!json_is_object(text)) return err_setp(err, "text", "'text' must be an object");
    const char *k;
    json_t *v;
    json_object_foreach(text, k, v) {
        char at[64];
        if (strcmp(k, "format") && strcmp(k, "verbosity"))
            return err_setp(err, api_path(at, sizeof at, "text.%.32s", k),
                            "'text.%.32s' is not supported (format, verbosity are)", k);
    }
    json_t *f = json_object_get(text, "format");
    if (!f || json_is_null(f)) return 0;
    if (!json_is_object(f)) return err_setp(err, "text.format", "'text.format' must be an object");
    return job_set_format(j, json_string_value(json_object_get(f, "type")), json_object_get(f, "schema"),
                          "text.format", err);
}

/* this API's own fields; api_check_fields also takes the ones all three share */
static const field_rule FIELDS[] = {
    {"input", F_USE, NULL},
    {"instructions", F_USE, NULL},
    {"max_output_tokens", F_USE, NULL},
    {"parallel_tool_calls", F_USE, NULL},
    {"text", F_USE, NULL},
    {"reasoning", F_USE, NULL},
    {"thinking_budget", F_USE, NULL},
    {"user", F_IGNORE, NULL},
    {"safety_identifier", F_IGNORE, NULL},
    {"prompt_cache_key", F_IGNORE, NULL},
    {"store", F_IGNORE, NULL},
    {"truncation", F_USE, NULL},
    {"stream_options", F_IGNORE, NULL},
    {"moderation", F_IGNORE, NULL},
    {"prompt_cache_options", F_IGNORE, NULL},
    {"prompt_cache_retention", F_IGNORE, NULL},
    {"context_management", F_IGNORE, NULL},
    {"betas", F_IGNORE, NULL},
    {"include", F_USE, NULL},
    {"previous_response_id", F_REFUSE,
     "send the whole conversation in 'input' (nothing is stored; pinhole "
     "reuses its state on its own)"},
    {"conversation", F_REFUSE, "send the whole conversation in 'input' (nothing is stored)"},
    {"background", F_REFUSE, "background responses are not supported"},
    {"prompt", F_REFUSE, "stored prompts are not supported"},
    {"multi_agent", F_REFUSE, "this server runs no built-in agents"},
    {"max_tool_calls", F_REFUSE, "not supported; use parallel_tool_calls: false for one call"},
    {"top_logprobs", F_REFUSE, "log-probabilities are given by /v1/chat/completions only"},
};

static int parse(job *j, ph_err *err) {
    json_t *root = j->root;
    if (api_check_fields(j, FIELDS, sizeof FIELDS / sizeof *FIELDS, "the Responses API", err)) return -1;
    json_t *tr = json_object_get(root, "truncation");
    if (tr && !json_is_null(tr) && !(json_is_string(tr) && !strcmp(json_string_value(tr), "disabled")))
        return err_setp(err, "truncation",
                        "'truncation' may only be \"disabled\": a conversation that does not "
                        "fit is refused, never cut");
    /* reasoning.encrypted_content (sent by agents that keep no state on the server): the reasoning items
     * already carry their text, and are taken back as they are */
    json_t *inc = json_object_get(root, "include");
    if (inc && !json_is_null(inc) && !json_is_array(inc))
        return err_setp(err, "include", "'include' must be an array");
    size_t ii;
    json_t *iv;
    json_array_foreach(inc, ii, iv) {
        const char *v = json_string_value(iv);
        char at[64];
        if (!v || strcmp(v, "reasoning.encrypted_content"))
            return err_setp(err, api_path(at, sizeof at, "include[%zu]", ii),
                            "'include[%zu]' (%.64s) is not supported: only \"reasoning.encrypted_content\" is (the "
                            "reasoning items carry their text)",
                            ii, v ? v : "not a string");
    }
    json_t *instr = json_object_get(root, "instructions");
    if (instr && !json_is_null(instr)) {
        if (!json_is_string(instr)) return err_setp(err, "instructions", "'instructions' must be a string");
        if (job_begin_msg(j, PH_ROLE_SYSTEM, err) ||
            job_add_text(j, json_string_value(instr), json_string_length(instr), err))
            return -1;
    }
    if (parse_tools(j, root, err)) return -1;
    json_t *input = json_object_get(root, "input");
    if (json_is_string(input)) {
        if (job_begin_msg(j, PH_ROLE_USER, err) ||
            job_add_text(j, json_string_value(input), json_string_length(input), err))
            return -1;
    } else if (json_is_array(input) && json_array_size(input)) {
        if (parse_input(j, input, err)) return -1;
    } else if (json_is_array(input)) {
        return err_setp(err, "input", "'input' is empty: a response needs at least one input item");
    } else {
        return err_setp(err, "input", "'input' must be a string or an array of items");
    }
    if (job_finish_msgs(j, "input", "input item", err)) return -1;
    int64_t max_tokens = j->gen.max_tokens, budget = -1;
    json_t *rs = json_object_get(root, "reasoning");
    if (rs && !json_is_null(rs) && !json_is_object(rs))
        return err_setp(err, "reasoning", "'reasoning' must be an object");
    if (job_sampling(j, 2, err) || api_get_int(root, "max_output_tokens", 1, INT32_MAX, &max_tokens, err) ||
        api_get_bool(root, "stream", &j->stream, err) ||
        api_get_bool(root, "parallel_tool_calls", &j->gen.parallel_tool_calls, err) || parse_text(j, root, err) ||
        job_set_effort(j, json_object_get(rs, "effort"), "reasoning.effort", err) ||
        api_get_int(root, "thinking_budget", 0, INT32_MAX, &budget, err))
        return -1;
    j->gen.max_tokens = (int32_t)max_tokens;
    j->gen.thinking_budget = (int32_t)budget;
    api_make_id(j->id, sizeof j->id, "resp_");
    return 0;
}

static json_t *usage(const job *j) {
    const ph_turn_report *r = &j->rep;
    return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", r->n_prompt, "input_tokens_details",
                     "cached_tokens", r->n_reused, "output_tokens", r->n_generated, "output_tokens_details",
                     "reasoning_tokens", r->n_reasoning, "total_tokens", r->n_prompt + r->n_generated);
}

/* An output item: reasoning, message or function call, in progress or done. */
static json_t *item(const job *j, ph_delta_kind kind, int idx, int32_t call, bool done) {
    if (kind == PH_DELTA_TOOL_CALL) {
        const out_call *oc = &j->out_calls[call];
        return json_pack("{s:s,s:s,s:s,s:o,s:o,s:s}", "type", "function_call", "id", oc->id, "call_id", oc->call_id,
                         "name", api_utf8_string(oc->name.p ? oc->name.p : "", oc->name.n), "arguments",
                         done ? api_utf8_string(oc->args.p ? oc->args.p : "", oc->args.n) : json_string(""), "status",
                         done ? "completed" : "in_progress");
    }
    char id[64];
    snprintf(id, sizeof id, "%s_%d", j->item_id, idx);
    const strbuf *b = kind == PH_DELTA_REASONING ? &j->reasoning : &j->content;
    json_t *content = json_array();
    if (done)
        json_array_append_new(
            content,
            kind == PH_DELTA_REASONING
                ? json_pack("{s:s,s:o}", "type", "reasoning_text", "text", api_utf8_string(b->p ? b->p : "", b->n))
                : json_pack("{s:s,s:o,s:[],s:[]}", "type", "output_text", "text",
                            api_utf8_string(b->p ? b->p : "", b->n), "annotations", "logprobs"));
    if (kind == PH_DELTA_REASONING)
        return json_pack("{s:s,s:s,s:[],s:o,s:s}", "type", "reasoning", "id", id, "summary", "content", content,
                         "status", done ? "completed" : "in_progress");
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id", id, "status",
                     done ? "completed" : "in_progress", "role", "assistant", "content", content);
}

/* The request's settings as the response echoes them. */
static json_t *echo(const job *j, const char *key, json_t *dflt) {
    json_t *v = json_object_get(j->root, key);
    if (!v || json_is_null(v)) return dflt;
    json_decref(dflt);
    return json_incref(v);
}

static json_t *response(job *j, const char *status) {
    json_t *out = json_array();
    bool final = !strcmp(status, "completed") || !strcmp(status, "incomplete");
    if (final) {
        int idx = 0;
        if (j->reasoning.n) json_array_append_new(out, item(j, PH_DELTA_REASONING, idx++, -1, true));
        if (j->content.n || !j->n_out_calls) json_array_append_new(out, item(j, PH_DELTA_CONTENT, idx++, -1, true));
        for (size_t i = 0; i < j->n_out_calls; i++)
            json_array_append_new(out, item(j, PH_DELTA_TOOL_CALL, idx++, (int32_t)i, true));
    }
    json_t *text = json_pack("{s:{s:s}}", "format", "type", "text");
    json_t *fmt = json_object_get(json_object_get(j->root, "text"), "format");
    if (json_is_object(fmt)) json_object_set(text, "format", fmt);
    json_t *r = json_pack(
        "{s:s,s:s,s:I,s:s,s:n,s:n,s:s,s:o,s:b,s:n,s:f,s:f,s:o,s:o,s:o,s:s,s:{},s:o}", "id", j->id, "object",
        "response", "created_at", (json_int_t)j->created, "status", status, "error", "incomplete_details", "model",
        j->model_name, "output", out, "parallel_tool_calls", j->gen.parallel_tool_calls, "previous_response_id",
        "temperature", (double)j->gen.sampler.temperature, "top_p", (double)j->gen.sampler.top_p, "text", text,
        "tool_choice", echo(j, "tool_choice", json_string("auto")), "tools", echo(j, "tools", json_array()),
        "truncation", "disabled", "metadata", "usage", final ? usage(j) : json_null());
    if (!strcmp(status, "incomplete"))
        json_object_set_new(r, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    json_object_set_new(r, "max_output_tokens",
                        j->gen.max_tokens > 0 ? json_integer(j->gen.max_tokens) : json_null());
    return r;
}

static const char *final_status(const job *j) {
    return j->rep.finish == PH_FINISH_LENGTH ? "incomplete" : "completed";
}

static void event(job *j, const char *type, json_t *body) {
    json_object_set_new(body, "type", json_string(type));
    json_object_set_new(body, "sequence_number", json_integer(j->seq++));
    job_sse(j, type, body);
}

static void open_item(job *j, ph_delta_kind kind, int32_t call) {
    int idx = j->n_blocks++;
    j->open_kind = (int)kind;
    j->open_call = call;
    event(j, "response.output_item.added",
          json_pack("{s:i,s:o}", "output_index", idx, "item", item(j, kind, idx, call, false)));
    if (kind == PH_DELTA_CONTENT) {
        char id[64];
        snprintf(id, sizeof id, "%s_%d", j->item_id, idx);
        event(j, "response.content_part.added",
              json_pack("{s:s,s:i,s:i,s:{s:s,s:s,s:[],s:[]}}", "item_id", id, "output_index", idx, "content_index", 0,
                        "part", "type", "output_text", "text", "", "annotations", "logprobs"));
    }
}

static void close_item(job *j) {
    if (j->open_kind < 0) return;
    int idx = j->n_blocks - 1;
    ph_delta_kind kind = (ph_delta_kind)j->open_kind;
    char id[64];
    snprintf(id, sizeof id, "%s_%d", j->item_id, idx);
    if (kind == PH_DELTA_CONTENT) {
        json_t *text = api_utf8_string(j->content.p ? j->content.p : "", j->content.n);
        event(j, "response.output_text.done",
              json_pack("{s:s,s:i,s:i,s:O,s:[]}", "item_id", id, "output_index", idx, "content_index", 0, "text",
                        text, "logprobs"));
        event(j, "response.content_part.done",
              json_pack("{s:s,s:i,s:i,s:{s:s,s:o,s:[],s:[]}}", "item_id", id, "output_index", idx, "content_index", 0,
                        "part", "type", "output_text", "text", text, "annotations", "logprobs"));
    } else if (kind == PH_DELTA_REASONING) {
        event(j, "response.reasoning_text.done",
              json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", idx, "content_index", 0, "text",
                        api_utf8_string(j->reasoning.p ? j->reasoning.p : "", j->reasoning.n)));
    } else {
        const out_call *oc = &j->out_calls[j->open_call];
        event(j, "response.function_call_arguments.done",
              json_pack("{s:s,s:i,s:o}", "item_id", oc->id, "output_index", idx, "arguments",
                        api_utf8_string(oc->args.p ? oc->args.p : "", oc->args.n)));
    }
    event(j, "response.output_item.done",
          json_pack("{s:i,s:o}", "output_index", idx, "item", item(j, kind, idx, j->open_call, true)));
    j->open_kind = -1;
}

static void stream_start(job *j) {
    j->open_kind = -1;
    api_make_id(j->item_id, sizeof j->item_id, "msg_");
    event(j, "response.created", json_pack("{s:o}", "response", response(j, "in_progress")));
    event(j, "response.in_progress", json_pack("{s:o}", "response", response(j, "in_progress")));
}

static void stream_event(job *j, const ph_gen_event *ev) {
    if (ev->kind == PH_DELTA_TOOL_CALL) {
        close_item(j);
        open_item(j, PH_DELTA_TOOL_CALL, ev->call_index);
        return;
    }
    if (!ev->len) return;
    int idx = j->n_blocks - 1;
    if (ev->kind == PH_DELTA_TOOL_ARGS) {
        if (j->open_kind != (int)PH_DELTA_TOOL_CALL || j->open_call != ev->call_index) return; /* cannot happen */
        event(j, "response.function_call_arguments.delta",
              json_pack("{s:s,s:i,s:o}", "item_id", j->out_calls[ev->call_index].id, "output_index", idx, "delta",
                        api_utf8_string(ev->text, ev->len)));
        return;
    }
    if (j->open_kind != (int)ev->kind) {
        close_item(j);
        open_item(j, ev->kind, -1);
        idx = j->n_blocks - 1;
    }
    char id[64];
    snprintf(id, sizeof id, "%s_%d", j->item_id, idx);
    if (ev->kind == PH_DELTA_CONTENT)
        event(j, "response.output_text.delta",
              json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", id, "output_index", idx, "content_index", 0, "delta",
                        api_utf8_string(ev->text, ev->len), "logprobs"));
    else
        event(j, "response.reasoning_text.delta",
              json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", idx, "content_index", 0, "delta",
                        api_utf8_string(ev->text, ev->len)));
}

static void stream_end(job *j) {
    /* an answer without calls always ends with a message, even an empty one */
    if (!j->n_out_calls && j->open_kind != (int)PH_DELTA_CONTENT) {
        close_item(j);
        open_item(j, PH_DELTA_CONTENT, -1);
    }
    close_item(j);
    const char *st = final_status(j);
    event(j, !strcmp(st, "completed") ? "response.completed" : "response.incomplete",
          json_pack("{s:o}", "response", response(j, st)));
}

static void stream_error(job *j, const char *msg) {
    json_t *r = response(j, "failed");
    json_object_set_new(r, "error", json_pack("{s:s,s:s}", "code", "server_error", "message", msg));
    event(j, "response.failed", json_pack("{s:o}", "response", r));
}

static json_t *result(job *j) {
    api_make_id(j->item_id, sizeof j->item_id, "msg_");
    return response(j, final_status(j));
}

const api_kind api_openai_responses = {
    .endpoint = "responses",
    .call_prefix = "fc_",
    .parse = parse,
    .stream_start = stream_start,
    .stream_event = stream_event,
    .stream_end = stream_end,
    .stream_error = stream_error,
    .result = result,
};
