/* POST /v1/chat/completions (OpenAI Chat Completions). */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "server/server_internal.h"

static int role_of(const char *r, ph_role *out) {
    if (!strcmp(r, "system") || !strcmp(r, "developer")) *out = PH_ROLE_SYSTEM;
    else if (!strcmp(r, "user")) *out = PH_ROLE_USER;
    else if (!strcmp(r, "assistant")) *out = PH_ROLE_ASSISTANT;
    else return -1;
    return 0;
}

static int parse_content(job *j, json_t *content, size_t mi, ph_err *err) {
    if (json_is_string(content)) return job_add_text(j, json_string_value(content), json_string_length(content), err);
    if (json_is_null(content) || !content) return 0; /* an assistant turn with only tool calls */
    if (!json_is_array(content))
        return ph_err_setc(err, PH_ERR_INPUT, "messages[%zu].content must be a string or an array of parts", mi);
    size_t pi;
    json_t *part;
    json_array_foreach(content, pi, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!json_is_object(part) || !type)
            return ph_err_setc(err, PH_ERR_INPUT, "messages[%zu].content[%zu] must be an object with a 'type'", mi, pi);
        if (!strcmp(type, "text")) {
            json_t *t = json_object_get(part, "text");
            if (!json_is_string(t))
                return ph_err_setc(err, PH_ERR_INPUT, "messages[%zu].content[%zu].text must be a string", mi, pi);
            if (job_add_text(j, json_string_value(t), json_string_length(t), err)) return -1;
        } else if (!strcmp(type, "image_url")) {
            json_t *iu = json_object_get(part, "image_url");
            const char *url = json_is_string(iu) ? json_string_value(iu) : json_string_value(json_object_get(iu, "url"));
            if (!url)
                return ph_err_setc(err, PH_ERR_INPUT, "messages[%zu].content[%zu].image_url.url must be a string", mi,
                                   pi);
            if (job_add_image_url(j, url, err)) return -1;
        } else {
            return ph_err_setc(err, PH_ERR_INPUT, "messages[%zu].content[%zu]: part type '%s' is not supported "
                                                  "(text and image_url are)", mi, pi, type);
        }
    }
    return 0;
}

static int parse(job *j, ph_err *err) {
    json_t *root = j->root;
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs)) return ph_err_setc(err, PH_ERR_INPUT, "'messages' must be an array");
    size_t mi;
    json_t *m;
    json_array_foreach(msgs, mi, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        ph_role r;
        if (!json_is_object(m) || !role)
            return ph_err_setc(err, PH_ERR_INPUT, "messages[%zu] must be an object with a 'role'", mi);
        if (role_of(role, &r))
            return ph_err_setc(err, PH_ERR_INPUT, "messages[%zu].role '%s' is not supported (system, developer, "
                                                  "user, assistant)", mi, role);
        json_t *content = json_object_get(m, "content");
        if (r != PH_ROLE_ASSISTANT && !json_is_string(content) && !json_is_array(content))
            return ph_err_setc(err, PH_ERR_INPUT, "messages[%zu].content must be a string or an array of parts", mi);
        if (job_begin_msg(j, r, err) || parse_content(j, content, mi, err)) return -1;
    }
    if (job_finish_msgs(j, err)) return -1;
    double temp = j->gen.sampler.temperature, top_p = j->gen.sampler.top_p; /* the server's defaults */
    int64_t max_tokens = j->gen.max_tokens, seed = -1, top_lp = 0;
    bool logprobs = false;
    if (get_number(root, "temperature", 0, 2, &temp, err) || get_number(root, "top_p", 0, 1, &top_p, err) ||
        get_int(root, "max_tokens", 1, INT32_MAX, &max_tokens, err) ||
        get_int(root, "max_completion_tokens", 1, INT32_MAX, &max_tokens, err) ||
        get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, err) || get_bool(root, "stream", &j->stream, err) ||
        get_bool(root, "logprobs", &logprobs, err) || get_int(root, "top_logprobs", 0, 20, &top_lp, err) ||
        job_set_stop(j, json_object_get(root, "stop"), "stop", err))
        return -1;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return ph_err_setc(err, PH_ERR_INPUT, "'stream_options' must be an object");
        if (get_bool(so, "include_usage", &j->include_usage, err)) return -1;
    }
    json_t *n = json_object_get(root, "n");
    if (n && !json_is_null(n) && !(json_is_integer(n) && json_integer_value(n) == 1))
        return ph_err_setc(err, PH_ERR_INPUT, "'n' must be 1: this server makes one answer per request");
    j->gen.sampler.temperature = (float)temp;
    j->gen.sampler.top_p = (float)top_p;
    j->gen.sampler.seed = seed >= 0 ? (uint64_t)seed : random_seed();
    j->gen.max_tokens = (int32_t)max_tokens;
    j->logprobs = logprobs;
    j->gen.top_logprobs = logprobs ? (int32_t)top_lp : 0;
    make_id(j->id, sizeof j->id, "chatcmpl-");
    return 0;
}

static json_t *usage(const job *j) {
    const ph_turn_report *r = &j->rep;
    return json_pack("{s:i,s:i,s:i,s:{s:i},s:{s:i}}", "prompt_tokens", r->n_prompt, "completion_tokens",
                     r->n_generated, "total_tokens", r->n_prompt + r->n_generated, "prompt_tokens_details",
                     "cached_tokens", r->n_reused, "completion_tokens_details", "reasoning_tokens", 0);
}

static const char *finish_reason(const job *j) { return j->rep.finish == PH_FINISH_LENGTH ? "length" : "stop"; }

static json_t *chunk(const job *j, json_t *delta, json_t *logprobs, const char *finish) {
    json_t *c = json_pack("{s:s,s:s,s:I,s:s,s:s,s:[{s:i,s:o,s:o,s:o}]}", "id", j->id, "object",
                          "chat.completion.chunk", "created", (json_int_t)j->created, "model", j->model_name,
                          "system_fingerprint", "pinhole-" PINHOLE_VERSION, "choices", "index", 0, "delta", delta,
                          "logprobs", logprobs ? logprobs : json_null(), "finish_reason",
                          finish ? json_string(finish) : json_null());
    if (j->include_usage) json_object_set_new(c, "usage", json_null());
    return c;
}

/* One logprobs entry: {token, logprob, bytes, top_logprobs}. */
static json_t *lp_token(job *j, int32_t id, float lp) {
    char buf[512];
    size_t n = ph_engine_token_bytes(srv_engine(j->s), id, buf, sizeof buf);
    if (n > sizeof buf) n = sizeof buf;
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)buf[i]));
    json_t *tok = json_text(buf, n);
    return json_pack("{s:o,s:f,s:o}", "token", tok, "logprob", (double)lp, "bytes", bytes);
}

static json_t *lp_entry(job *j, const ph_gen_event *ev) {
    json_t *e = lp_token(j, ev->token, ev->logprob);
    json_t *top = json_array();
    for (int32_t i = 0; i < ev->n_top; i++) json_array_append_new(top, lp_token(j, ev->top_ids[i], ev->top_logprobs[i]));
    json_object_set_new(e, "top_logprobs", top);
    return e;
}

static void stream_start(job *j) {
    job_sse(j, NULL, chunk(j, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL, NULL));
}

static void stream_event(job *j, const ph_gen_event *ev) {
    json_t *lp = NULL;
    if (j->logprobs && ev->token >= 0) lp = json_pack("{s:[o]}", "content", lp_entry(j, ev));
    if (!ev->len && !lp) return;
    json_t *delta = ev->len ? json_pack("{s:s%}", ev->kind == PH_DELTA_REASONING ? "reasoning_content" : "content",
                                        ev->text, ev->len)
                            : json_object();
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
    json_t *msg = json_pack("{s:s,s:s%,s:n}", "role", "assistant", "content", j->content.p ? j->content.p : "",
                            j->content.n, "refusal");
    if (j->reasoning.n) json_object_set_new(msg, "reasoning_content", json_stringn(j->reasoning.p, j->reasoning.n));
    json_t *lp = j->logprobs ? json_pack("{s:o}", "content", j->lp ? json_incref(j->lp) : json_array()) : json_null();
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:[{s:i,s:o,s:o,s:s}],s:o}", "id", j->id, "object", "chat.completion",
                     "created", (json_int_t)j->created, "model", j->model_name, "system_fingerprint",
                     "pinhole-" PINHOLE_VERSION, "choices", "index", 0, "message", msg, "logprobs", lp,
                     "finish_reason", finish_reason(j), "usage", usage(j));
}

const api_kind api_openai_chat = {
    .endpoint = "chat_completions",
    .parse = parse,
    .stream_start = stream_start,
    .stream_event = stream_event,
    .stream_end = stream_end,
    .stream_error = stream_error,
    .collect = collect_logprobs,
    .result = result,
};
