/* POST /v1/messages (Anthropic Messages). */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "server/server_internal.h"

static int add_block(job *j, json_t *b, const char *where, size_t mi, size_t bi, ph_err *err) {
    const char *type = json_string_value(json_object_get(b, "type"));
    if (!json_is_object(b) || !type)
        return ph_err_setc(err, PH_ERR_INPUT, "%s[%zu].content[%zu] must be an object with a 'type'", where, mi, bi);
    if (!strcmp(type, "text")) {
        json_t *t = json_object_get(b, "text");
        if (!json_is_string(t))
            return ph_err_setc(err, PH_ERR_INPUT, "%s[%zu].content[%zu].text must be a string", where, mi, bi);
        return job_add_text(j, json_string_value(t), json_string_length(t), err);
    }
    if (!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking")) return 0; /* not sent back to the model */
    if (!strcmp(type, "image")) {
        json_t *src = json_object_get(b, "source");
        const char *st = json_string_value(json_object_get(src, "type"));
        if (!json_is_object(src) || !st)
            return ph_err_setc(err, PH_ERR_INPUT, "%s[%zu].content[%zu].source must be an object with a 'type'", where,
                               mi, bi);
        if (!strcmp(st, "base64")) {
            const char *data = json_string_value(json_object_get(src, "data"));
            if (!data)
                return ph_err_setc(err, PH_ERR_INPUT, "%s[%zu].content[%zu].source.data must be a string", where, mi,
                                   bi);
            return job_add_image_b64(j, json_string_value(json_object_get(src, "media_type")), data, err);
        }
        if (!strcmp(st, "url")) {
            const char *url = json_string_value(json_object_get(src, "url"));
            return job_add_image_url(j, url ? url : "", err);
        }
        return ph_err_setc(err, PH_ERR_INPUT, "%s[%zu].content[%zu]: image source type '%s' is not supported; only "
                                              "data: URIs and base64 sources are accepted", where, mi, bi, st);
    }
    return ph_err_setc(err, PH_ERR_INPUT, "%s[%zu].content[%zu]: block type '%s' is not supported (text, image)",
                       where, mi, bi, type);
}

static int add_content(job *j, json_t *c, const char *where, size_t mi, ph_err *err) {
    if (json_is_string(c)) return job_add_text(j, json_string_value(c), json_string_length(c), err);
    if (!json_is_array(c))
        return ph_err_setc(err, PH_ERR_INPUT, "%s[%zu].content must be a string or an array of blocks", where, mi);
    size_t bi;
    json_t *b;
    json_array_foreach(c, bi, b) if (add_block(j, b, where, mi, bi, err)) return -1;
    return 0;
}

static int parse(job *j, ph_err *err) {
    json_t *root = j->root;
    json_t *sys = json_object_get(root, "system");
    if (sys && !json_is_null(sys)) {
        if (!json_is_string(sys) && !json_is_array(sys))
            return ph_err_setc(err, PH_ERR_INPUT, "'system' must be a string or an array of text blocks");
        if (job_begin_msg(j, PH_ROLE_SYSTEM, err) || add_content(j, sys, "system", 0, err)) return -1;
    }
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs)) return ph_err_setc(err, PH_ERR_INPUT, "'messages' must be an array");
    size_t mi;
    json_t *m;
    json_array_foreach(msgs, mi, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role)
            return ph_err_setc(err, PH_ERR_INPUT, "messages[%zu] must be an object with a 'role'", mi);
        ph_role r;
        if (!strcmp(role, "user")) r = PH_ROLE_USER;
        else if (!strcmp(role, "assistant")) r = PH_ROLE_ASSISTANT;
        else return ph_err_setc(err, PH_ERR_INPUT, "messages[%zu].role '%s' is not supported (user, assistant)", mi, role);
        if (job_begin_msg(j, r, err) || add_content(j, json_object_get(m, "content"), "messages", mi, err)) return -1;
    }
    if (job_finish_msgs(j, err)) return -1;
    json_t *mt = json_object_get(root, "max_tokens");
    if (!mt) return ph_err_setc(err, PH_ERR_INPUT, "'max_tokens' is required");
    double temp = j->gen.sampler.temperature, top_p = j->gen.sampler.top_p; /* the server's defaults */
    int64_t max_tokens = j->gen.max_tokens, top_k = j->gen.sampler.top_k, seed = -1;
    if (get_int(root, "max_tokens", 1, INT32_MAX, &max_tokens, err) || get_number(root, "temperature", 0, 1, &temp, err) ||
        get_number(root, "top_p", 0, 1, &top_p, err) || get_int(root, "top_k", 0, INT32_MAX, &top_k, err) ||
        get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, err) || /* an extension */
        get_bool(root, "stream", &j->stream, err) ||
        job_set_stop(j, json_object_get(root, "stop_sequences"), "stop_sequences", err))
        return -1;
    json_t *ss = json_object_get(root, "stop_sequences");
    if (ss && !json_is_null(ss) && !json_is_array(ss))
        return ph_err_setc(err, PH_ERR_INPUT, "'stop_sequences' must be an array of strings");
    j->gen.sampler.temperature = (float)temp;
    j->gen.sampler.top_p = (float)top_p;
    j->gen.sampler.top_k = (int32_t)top_k;
    j->gen.sampler.seed = seed >= 0 ? (uint64_t)seed : random_seed();
    j->gen.max_tokens = (int32_t)max_tokens;
    make_id(j->id, sizeof j->id, "msg_");
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
    return json_string("end_turn");
}

static json_t *stop_seq(const job *j) {
    return j->rep.stop_index >= 0 && j->rep.finish == PH_FINISH_STOP ? json_string(j->stop[j->rep.stop_index])
                                                                     : json_null();
}

static json_t *message(const job *j, json_t *content, bool start) {
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:o}", "id", j->id, "type", "message", "role", "assistant", "model",
                     j->model_name, "content", content, "stop_reason", start ? json_null() : stop_reason(j),
                     "stop_sequence", start ? json_null() : stop_seq(j), "usage", usage(j, start));
}

static void ev(job *j, const char *type, json_t *body) {
    json_object_set_new(body, "type", json_string(type));
    job_sse(j, type, body);
}

static void close_block(job *j) {
    if (j->open_kind < 0) return;
    if (j->open_kind == (int)PH_DELTA_REASONING)
        ev(j, "content_block_delta", json_pack("{s:i,s:{s:s,s:s}}", "index", j->n_blocks - 1, "delta", "type",
                                               "signature_delta", "signature", ""));
    ev(j, "content_block_stop", json_pack("{s:i}", "index", j->n_blocks - 1));
    j->open_kind = -1;
}

static void open_block(job *j, ph_delta_kind kind) {
    json_t *b = kind == PH_DELTA_REASONING ? json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "")
                                           : json_pack("{s:s,s:s}", "type", "text", "text", "");
    ev(j, "content_block_start", json_pack("{s:i,s:o}", "index", j->n_blocks, "content_block", b));
    j->n_blocks++;
    j->open_kind = (int)kind;
}

static void stream_start(job *j) {
    j->open_kind = -1;
    ev(j, "message_start", json_pack("{s:o}", "message", message(j, json_array(), true)));
    ev(j, "ping", json_object());
}

static void stream_event(job *j, const ph_gen_event *e) {
    if (!e->len) return;
    if (j->open_kind != (int)e->kind) {
        close_block(j);
        open_block(j, e->kind);
    }
    json_t *d = e->kind == PH_DELTA_REASONING
                    ? json_pack("{s:s,s:s%}", "type", "thinking_delta", "thinking", e->text, e->len)
                    : json_pack("{s:s,s:s%}", "type", "text_delta", "text", e->text, e->len);
    ev(j, "content_block_delta", json_pack("{s:i,s:o}", "index", j->n_blocks - 1, "delta", d));
}

static void stream_end(job *j) {
    if (j->open_kind != (int)PH_DELTA_CONTENT) {
        close_block(j);
        open_block(j, PH_DELTA_CONTENT);
    }
    close_block(j);
    ev(j, "message_delta", json_pack("{s:{s:o,s:o},s:o}", "delta", "stop_reason", stop_reason(j), "stop_sequence",
                                     stop_seq(j), "usage", usage(j, false)));
    ev(j, "message_stop", json_object());
}

static void stream_error(job *j, const char *msg) { job_sse(j, "error", anthropic_error_body(500, msg)); }

static json_t *result(job *j) {
    json_t *content = json_array();
    if (j->reasoning.n)
        json_array_append_new(content, json_pack("{s:s,s:s%,s:s}", "type", "thinking", "thinking", j->reasoning.p,
                                                 j->reasoning.n, "signature", ""));
    json_array_append_new(content, json_pack("{s:s,s:s%}", "type", "text", "text", j->content.p ? j->content.p : "",
                                             j->content.n));
    return message(j, content, false);
}

const api_kind api_anthropic_messages = {
    .endpoint = "messages",
    .anthropic = true,
    .parse = parse,
    .stream_start = stream_start,
    .stream_event = stream_event,
    .stream_end = stream_end,
    .stream_error = stream_error,
    .result = result,
};
