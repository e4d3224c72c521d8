/* POST /v1/responses (OpenAI Responses). */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "server/server_internal.h"

static int add_part(job *j, json_t *part, size_t mi, size_t pi, ph_err *err) {
    const char *type = json_string_value(json_object_get(part, "type"));
    if (!json_is_object(part) || !type)
        return ph_err_setc(err, PH_ERR_INPUT, "input[%zu].content[%zu] must be an object with a 'type'", mi, pi);
    if (!strcmp(type, "input_text") || !strcmp(type, "output_text") || !strcmp(type, "text")) {
        json_t *t = json_object_get(part, "text");
        if (!json_is_string(t))
            return ph_err_setc(err, PH_ERR_INPUT, "input[%zu].content[%zu].text must be a string", mi, pi);
        return job_add_text(j, json_string_value(t), json_string_length(t), err);
    }
    if (!strcmp(type, "input_image")) {
        json_t *u = json_object_get(part, "image_url");
        if (json_is_object(u)) u = json_object_get(u, "url");
        if (!json_is_string(u)) {
            if (json_object_get(part, "file_id"))
                return ph_err_setc(err, PH_ERR_INPUT, "input[%zu].content[%zu]: file_id pictures are not supported; "
                                                      "only data: URIs are accepted", mi, pi);
            return ph_err_setc(err, PH_ERR_INPUT, "input[%zu].content[%zu].image_url must be a string", mi, pi);
        }
        return job_add_image_url(j, json_string_value(u), err);
    }
    return ph_err_setc(err, PH_ERR_INPUT, "input[%zu].content[%zu]: type '%s' is not supported (input_text, "
                                          "input_image, output_text are)", mi, pi, type);
}

static int parse(job *j, ph_err *err) {
    json_t *root = j->root;
    json_t *instr = json_object_get(root, "instructions");
    if (instr && !json_is_null(instr)) {
        if (!json_is_string(instr)) return ph_err_setc(err, PH_ERR_INPUT, "'instructions' must be a string");
        if (job_begin_msg(j, PH_ROLE_SYSTEM, err) ||
            job_add_text(j, json_string_value(instr), json_string_length(instr), err))
            return -1;
    }
    json_t *input = json_object_get(root, "input");
    if (json_is_string(input)) {
        if (job_begin_msg(j, PH_ROLE_USER, err) ||
            job_add_text(j, json_string_value(input), json_string_length(input), err))
            return -1;
    } else if (json_is_array(input)) {
        size_t mi;
        json_t *item;
        json_array_foreach(input, mi, item) {
            const char *type = json_string_value(json_object_get(item, "type"));
            const char *role = json_string_value(json_object_get(item, "role"));
            if (!json_is_object(item) || (type && strcmp(type, "message") != 0) || !role)
                return ph_err_setc(err, PH_ERR_INPUT, "input[%zu] must be a message with a 'role' (item type '%s' "
                                                      "is not supported)", mi, type ? type : "?");
            ph_role r;
            if (!strcmp(role, "user")) r = PH_ROLE_USER;
            else if (!strcmp(role, "assistant")) r = PH_ROLE_ASSISTANT;
            else if (!strcmp(role, "system") || !strcmp(role, "developer")) r = PH_ROLE_SYSTEM;
            else return ph_err_setc(err, PH_ERR_INPUT, "input[%zu].role '%s' is not supported", mi, role);
            if (job_begin_msg(j, r, err)) return -1;
            json_t *content = json_object_get(item, "content");
            if (json_is_string(content)) {
                if (job_add_text(j, json_string_value(content), json_string_length(content), err)) return -1;
            } else if (json_is_array(content)) {
                size_t pi;
                json_t *part;
                json_array_foreach(content, pi, part) if (add_part(j, part, mi, pi, err)) return -1;
            } else {
                return ph_err_setc(err, PH_ERR_INPUT, "input[%zu].content must be a string or an array", mi);
            }
        }
    } else {
        return ph_err_setc(err, PH_ERR_INPUT, "'input' must be a string or an array of messages");
    }
    if (json_object_get(root, "previous_response_id") && !json_is_null(json_object_get(root, "previous_response_id")))
        return ph_err_setc(err, PH_ERR_INPUT, "'previous_response_id' is not supported: send the whole conversation "
                                              "(pinhole reuses its state on its own)");
    if (job_finish_msgs(j, err)) return -1;
    double temp = j->gen.sampler.temperature, top_p = j->gen.sampler.top_p; /* the server's defaults */
    int64_t max_tokens = j->gen.max_tokens, seed = -1;
    if (get_number(root, "temperature", 0, 2, &temp, err) || get_number(root, "top_p", 0, 1, &top_p, err) ||
        get_int(root, "max_output_tokens", 1, INT32_MAX, &max_tokens, err) ||
        get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, err) || /* an extension */
        get_bool(root, "stream", &j->stream, err))
        return -1;
    j->gen.sampler.temperature = (float)temp;
    j->gen.sampler.top_p = (float)top_p;
    j->gen.sampler.seed = seed >= 0 ? (uint64_t)seed : random_seed();
    j->gen.max_tokens = (int32_t)max_tokens;
    make_id(j->id, sizeof j->id, "resp_");
    return 0;
}

static json_t *usage(const job *j) {
    const ph_turn_report *r = &j->rep;
    return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", r->n_prompt, "input_tokens_details",
                     "cached_tokens", r->n_reused, "output_tokens", r->n_generated, "output_tokens_details",
                     "reasoning_tokens", 0, "total_tokens", r->n_prompt + r->n_generated);
}

/* An output item: reasoning or message, in progress or done. */
static json_t *item(const job *j, ph_delta_kind kind, int idx, bool done) {
    char id[64];
    snprintf(id, sizeof id, "%s_%d", j->item_id, idx);
    const strbuf *b = kind == PH_DELTA_REASONING ? &j->reasoning : &j->content;
    json_t *content = json_array();
    if (done)
        json_array_append_new(content, kind == PH_DELTA_REASONING
                                           ? json_pack("{s:s,s:o}", "type", "reasoning_text", "text",
                                                       json_stringn(b->p ? b->p : "", b->n))
                                           : json_pack("{s:s,s:o,s:[],s:[]}", "type", "output_text", "text",
                                                       json_stringn(b->p ? b->p : "", b->n), "annotations",
                                                       "logprobs"));
    if (kind == PH_DELTA_REASONING)
        return json_pack("{s:s,s:s,s:[],s:o,s:s}", "type", "reasoning", "id", id, "summary", "content", content,
                         "status", done ? "completed" : "in_progress");
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id", id, "status",
                     done ? "completed" : "in_progress", "role", "assistant", "content", content);
}

static json_t *response(job *j, const char *status) {
    json_t *out = json_array();
    bool final = !strcmp(status, "completed") || !strcmp(status, "incomplete");
    if (final) {
        int idx = 0;
        if (j->reasoning.n) json_array_append_new(out, item(j, PH_DELTA_REASONING, idx++, true));
        json_array_append_new(out, item(j, PH_DELTA_CONTENT, idx, true));
    }
    json_t *r = json_pack("{s:s,s:s,s:I,s:s,s:n,s:n,s:s,s:o,s:b,s:n,s:f,s:f,s:{s:{s:s}},s:s,s:[],s:s,s:{},s:o}",
                          "id", j->id, "object", "response", "created_at", (json_int_t)j->created, "status", status,
                          "error", "incomplete_details", "model", j->model_name, "output", out,
                          "parallel_tool_calls", 0, "previous_response_id", "temperature",
                          (double)j->gen.sampler.temperature, "top_p", (double)j->gen.sampler.top_p, "text",
                          "format", "type", "text", "tool_choice", "none", "tools", "truncation", "disabled",
                          "metadata", "usage", final ? usage(j) : json_null());
    if (!strcmp(status, "incomplete"))
        json_object_set_new(r, "incomplete_details", json_pack("{s:s}", "reason", "max_output_tokens"));
    json_object_set_new(r, "max_output_tokens",
                        j->gen.max_tokens > 0 ? json_integer(j->gen.max_tokens) : json_null());
    return r;
}

static const char *final_status(const job *j) { return j->rep.finish == PH_FINISH_LENGTH ? "incomplete" : "completed"; }

static void event(job *j, const char *type, json_t *body) {
    json_object_set_new(body, "type", json_string(type));
    json_object_set_new(body, "sequence_number", json_integer(j->seq++));
    job_sse(j, type, body);
}

static void open_item(job *j, ph_delta_kind kind) {
    int idx = j->n_blocks++;
    j->open_kind = (int)kind;
    char id[64];
    snprintf(id, sizeof id, "%s_%d", j->item_id, idx);
    event(j, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", idx, "item", item(j, kind, idx, false)));
    if (kind == PH_DELTA_CONTENT)
        event(j, "response.content_part.added",
              json_pack("{s:s,s:i,s:i,s:{s:s,s:s,s:[],s:[]}}", "item_id", id, "output_index", idx, "content_index", 0,
                        "part", "type", "output_text", "text", "", "annotations", "logprobs"));
}

static void close_item(job *j) {
    if (j->open_kind < 0) return;
    int idx = j->n_blocks - 1;
    ph_delta_kind kind = (ph_delta_kind)j->open_kind;
    char id[64];
    snprintf(id, sizeof id, "%s_%d", j->item_id, idx);
    if (kind == PH_DELTA_CONTENT) {
        json_t *text = json_stringn(j->content.p ? j->content.p : "", j->content.n);
        event(j, "response.output_text.done", json_pack("{s:s,s:i,s:i,s:O,s:[]}", "item_id", id, "output_index", idx,
                                                        "content_index", 0, "text", text, "logprobs"));
        event(j, "response.content_part.done",
              json_pack("{s:s,s:i,s:i,s:{s:s,s:o,s:[],s:[]}}", "item_id", id, "output_index", idx, "content_index", 0,
                        "part", "type", "output_text", "text", text, "annotations", "logprobs"));
    } else {
        event(j, "response.reasoning_text.done",
              json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", idx, "content_index", 0, "text",
                        json_stringn(j->reasoning.p ? j->reasoning.p : "", j->reasoning.n)));
    }
    event(j, "response.output_item.done", json_pack("{s:i,s:o}", "output_index", idx, "item", item(j, kind, idx, true)));
    j->open_kind = -1;
}

static void stream_start(job *j) {
    j->open_kind = -1;
    make_id(j->item_id, sizeof j->item_id, "msg_");
    event(j, "response.created", json_pack("{s:o}", "response", response(j, "in_progress")));
    event(j, "response.in_progress", json_pack("{s:o}", "response", response(j, "in_progress")));
}

static void stream_event(job *j, const ph_gen_event *ev) {
    if (!ev->len) return;
    if (j->open_kind != (int)ev->kind) {
        close_item(j);
        open_item(j, ev->kind);
    }
    int idx = j->n_blocks - 1;
    char id[64];
    snprintf(id, sizeof id, "%s_%d", j->item_id, idx);
    if (ev->kind == PH_DELTA_CONTENT)
        event(j, "response.output_text.delta", json_pack("{s:s,s:i,s:i,s:s%,s:[]}", "item_id", id, "output_index", idx,
                                                         "content_index", 0, "delta", ev->text, ev->len, "logprobs"));
    else
        event(j, "response.reasoning_text.delta", json_pack("{s:s,s:i,s:i,s:s%}", "item_id", id, "output_index", idx,
                                                            "content_index", 0, "delta", ev->text, ev->len));
}

static void stream_end(job *j) {
    if (j->open_kind != (int)PH_DELTA_CONTENT) { /* always end with a message, even an empty one */
        close_item(j);
        open_item(j, PH_DELTA_CONTENT);
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
    make_id(j->item_id, sizeof j->item_id, "msg_");
    return response(j, final_status(j));
}

const api_kind api_openai_responses = {
    .endpoint = "responses",
    .parse = parse,
    .stream_start = stream_start,
    .stream_event = stream_event,
    .stream_end = stream_end,
    .stream_error = stream_error,
    .result = result,
};
