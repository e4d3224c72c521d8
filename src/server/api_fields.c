/* What the three adapters share beyond the conversation: tools and tool
 * calls, tool_choice, response formats, thinking switches, the sampling
 * fields, and the table of fields each API accepts (none dropped silently). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/grow.h"
#include "server/api.h"

char *job_own(job *j, char *s) {
    if (!s) return NULL;
    char **o = grow_array(j->owned, &j->cap_owned, j->n_owned, sizeof *o, 8);
    if (!o) {
        free(s);
        return NULL;
    }
    j->owned = o;
    j->owned[j->n_owned++] = s;
    return s;
}

void job_set_reasoning(job *j, const char *text, size_t len) {
    if (!j->n_msgs) return;
    j->msgs[j->n_msgs - 1].reasoning = text;
    j->msgs[j->n_msgs - 1].reasoning_len = len;
}

int job_add_call(job *j, const char *id, json_t *name, const char *args, size_t len, const char *where,
                 const char *name_at, ph_err *err) {
    if (!j->n_msgs || j->msgs[j->n_msgs - 1].role != PH_ROLE_ASSISTANT)
        return err_setp(err, where, "%s: a tool call must be part of an assistant turn", where);
    if (!json_is_string(name) || !json_string_length(name))
        return err_setp(err, name_at, "%s: the call has no function name", where);
    if (strlen(json_string_value(name)) != json_string_length(name))
        return err_setp(err, name_at, "%s: the call's function name holds \\u0000", where);
    /* the arguments are taken as they are, JSON or not: a call cut off by
     * max_tokens ('{"city":') is history pinhole answered, rendered back as
     * the model wrote it */
    ph_tool_call *c = grow_array(j->calls, &j->cap_calls, j->n_calls, sizeof *c, 8);
    if (!c) return err_set(err, "out of memory");
    j->calls = c;
    j->calls[j->n_calls++] =
        (ph_tool_call){.id = id, .name = json_string_value(name), .arguments = args, .arguments_len = len};
    return 0;
}

/* Whether s[0..n) is a tool name as OpenAI and Anthropic take it: 1 to
 * TOOL_NAME_MAX of [A-Za-z0-9_-]. */
#define TOOL_NAME_MAX 64
static bool tool_name_ok(const char *s, size_t n) {
    if (n < 1 || n > TOOL_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

int job_add_tool(job *j, json_t *decl, const char *schema_key, const char *where, ph_err *err) {
    json_t *name = json_object_get(decl, "name"), *description = json_object_get(decl, "description");
    json_t *parameters = json_object_get(decl, schema_key);
    char at[160];
    api_path(at, sizeof at, "%s.name", where);
    if (!json_is_string(name) || !json_string_length(name))
        return err_setp(err, at, "%s.name must be a non-empty string", where);
    const char *n = json_string_value(name);
    const size_t nl = json_string_length(name);
    if (!tool_name_ok(n, nl))
        return err_setp(err, at,
                        "%s.name '%.64s%s' is not a tool name: 1 to %d letters, digits, '_' or '-' (%zu bytes here)",
                        where, n, nl > 64 ? "..." : "", TOOL_NAME_MAX, nl);
    for (size_t i = 0; i < j->n_tools; i++)
        if (!strcmp(j->tools[i].name, n)) return err_setp(err, at, "%s: the tool '%s' is declared twice", where, n);
    api_path(at, sizeof at, "%s.description", where);
    if (description && !json_is_null(description) && !json_is_string(description))
        return err_setp(err, at, "%s.description must be a string", where);
    if (json_is_string(description) && strlen(json_string_value(description)) != json_string_length(description))
        return err_setp(err, at, "%s.description holds \\u0000, which a tool's description may not", where);
    if (parameters && !json_is_null(parameters) && !json_is_object(parameters))
        return err_setp(err, api_path(at, sizeof at, "%s.%s", where, schema_key),
                        "%s.%s: the parameters schema must be an object", where, schema_key);
    char *params = NULL;
    if (parameters && json_is_object(parameters) &&
        !(params = job_own(j, json_dumps(parameters, JSON_COMPACT | JSON_ENCODE_ANY))))
        return err_set(err, "out of memory");
    ph_tool *t = grow_array(j->tools, &j->cap_tools, j->n_tools, sizeof *t, 8);
    if (!t) return err_set(err, "out of memory");
    j->tools = t;
    j->tools[j->n_tools++] =
        (ph_tool){.name = n, .description = json_string_value(description), .parameters = params};
    j->gen.tools = j->tools;
    j->gen.n_tools = j->n_tools;
    return 0;
}

int job_parse_tools(job *j, json_t *root, const tool_shape *shape, ph_err *err) {
    json_t *tools = json_object_get(root, "tools");
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return err_setp(err, "tools", "'tools' must be an array");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        json_t *decl = shape->holder ? json_object_get(t, shape->holder) : t;
        char where[96];
        if ((type ? strcmp(type, shape->type) != 0 : !shape->type_optional) || !json_is_object(decl))
            return err_setp(err, api_path(where, sizeof where, "tools[%zu]", i),
                            "tools[%zu]: only tools of type '%s'%s%s%s are supported (this server has no built-in "
                            "tools), not %s%s%s",
                            i, shape->type, shape->holder ? " with a '" : "", shape->holder ? shape->holder : "",
                            shape->holder ? "' object" : "", type ? "'" : "a tool without a type", type ? type : "",
                            type ? "'" : "");
        api_path(where, sizeof where, "tools[%zu]%s%s", i, shape->holder ? "." : "",
                 shape->holder ? shape->holder : "");
        if (job_add_tool(j, decl, shape->schema, where, err)) return -1;
    }
    return 0;
}

int job_parse_openai_tool_choice(job *j, json_t *root, const char *holder, ph_err *err) {
    json_t *tc = json_object_get(root, "tool_choice");
    if (!tc || json_is_null(tc)) return 0;
    const char *s = json_string_value(tc);
    if (s && !strcmp(s, "auto")) return job_set_tool_choice(j, PH_TOOL_AUTO, NULL, "tool_choice", err);
    if (s && !strcmp(s, "none")) return job_set_tool_choice(j, PH_TOOL_NONE, NULL, "tool_choice", err);
    if (s && !strcmp(s, "required")) return job_set_tool_choice(j, PH_TOOL_REQUIRED, NULL, "tool_choice", err);
    const char *type = json_string_value(json_object_get(tc, "type"));
    json_t *name = json_object_get(holder ? json_object_get(tc, holder) : tc, "name");
    if (type && !strcmp(type, "function") && json_is_string(name))
        return job_set_tool_choice(j, PH_TOOL_NAMED, name, "tool_choice", err);
    return err_setp(
        err, "tool_choice",
        "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", %s%s%s\"name\": ...%s}",
        holder ? "\"" : "", holder ? holder : "", holder ? "\": {" : "", holder ? "}" : "");
}

int job_set_tool_choice(job *j, ph_tool_choice choice, json_t *name, const char *where, ph_err *err) {
    if ((choice == PH_TOOL_REQUIRED || choice == PH_TOOL_NAMED) && j->n_tools == 0)
        return err_setp(err, where, "'%s' asks for a tool call but the request declares no tools", where);
    if (choice == PH_TOOL_NAMED) {
        const char *n = json_is_string(name) ? json_string_value(name) : "";
        const size_t nl = json_is_string(name) ? json_string_length(name) : 0;
        size_t i = 0;
        while (i < j->n_tools && (strlen(j->tools[i].name) != nl || memcmp(j->tools[i].name, n, nl))) i++;
        if (i == j->n_tools)
            return err_setp(err, where, "'%s' names the tool '%.64s', which the request does not declare", where, n);
        j->gen.tool_name = j->tools[i].name;
    }
    j->gen.tool_choice = choice;
    return 0;
}

int job_set_format(job *j, const char *type, json_t *schema, const char *where, ph_err *err) {
    if (!type) return err_setp(err, where, "'%s' must have a 'type'", where);
    if (!strcmp(type, "text")) {
        j->gen.format = PH_FORMAT_TEXT;
        return 0;
    }
    if (!strcmp(type, "json_object")) {
        j->gen.format = PH_FORMAT_JSON_OBJECT;
        return 0;
    }
    if (strcmp(type, "json_schema") != 0)
        return err_setp(err, where, "'%s': type '%s' is not supported (text, json_object, json_schema)", where, type);
    if (!json_is_object(schema) && !json_is_true(schema))
        return err_setp(err, where, "'%s' of type json_schema needs a schema object", where);
    char *text = job_own(j, json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY));
    if (!text) return err_set(err, "out of memory");
    ph_err se = {0};
    if (ph_schema_check(text, strlen(text), &se)) return err_setp(err, where, "'%s': %s", where, se.msg);
    j->gen.format = PH_FORMAT_JSON_SCHEMA;
    j->gen.response_schema = text;
    return 0;
}

int job_set_effort(job *j, json_t *v, const char *where, ph_err *err) {
    if (!v || json_is_null(v)) return 0;
    static const char *const off[] = {"none", "minimal"}, *const on[] = {"low", "medium", "high", "xhigh", "max"};
    const char *s = json_string_value(v);
    for (size_t i = 0; s && i < sizeof off / sizeof *off; i++)
        if (!strcmp(s, off[i])) {
            j->gen.thinking = 0;
            return 0;
        }
    for (size_t i = 0; s && i < sizeof on / sizeof *on; i++)
        if (!strcmp(s, on[i])) {
            j->gen.thinking = 1;
            return 0;
        }
    return err_setp(err, where, "'%s' must be one of none, minimal, low, medium, high, xhigh, max", where);
}

/* "logit_bias": {"token id": bias (-100..100)}. */
static int logit_bias(job *j, json_t *v, ph_err *err) {
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v)) return err_setp(err, "logit_bias", "'logit_bias' must be an object of token id: bias");
    size_t n = json_object_size(v);
    if (n > 1024) return err_setp(err, "logit_bias", "'logit_bias' has %zu entries; at most 1024", n);
    ph_logit_bias *b = n ? calloc(n, sizeof *b) : NULL;
    if (n && !(b = (ph_logit_bias *)job_own(j, (char *)b))) return err_set(err, "out of memory");
    const int32_t n_vocab = ph_engine_model_info(j->e)->n_vocab;
    const char *key;
    json_t *val;
    size_t k = 0;
    json_object_foreach(v, key, val) {
        char *end;
        long id = strtol(key, &end, 10);
        if (!*key || *end || id < 0 || id >= n_vocab)
            return err_setp(err, "logit_bias", "'logit_bias': '%.32s' is not a token id of this model (0 to %d)", key,
                            n_vocab - 1);
        if (!json_is_number(val) || !(json_number_value(val) >= -100 && json_number_value(val) <= 100))
            return err_setp(err, "logit_bias",
                            "'logit_bias': the bias of token %ld must be a number from -100 to 100", id);
        double d = json_number_value(val);
        b[k++] = (ph_logit_bias){.id = (int32_t)id, .bias = d <= -100 ? -INFINITY : (float)d};
    }
    j->gen.sampler.logit_bias = b;
    j->gen.sampler.n_logit_bias = k;
    return 0;
}

int job_sampling(job *j, double temp_max, ph_err *err) {
    json_t *root = j->root;
    double temp = j->gen.sampler.temperature, top_p = j->gen.sampler.top_p; /* the server's defaults */
    double min_p = j->gen.sampler.min_p, pres = 0, freq = 0, rep = 1;
    int64_t top_k = j->gen.sampler.top_k, seed = -1;
    if (api_get_number(root, "temperature", 0, temp_max, &temp, err) ||
        api_get_number(root, "top_p", 0, 1, &top_p, err) || api_get_int(root, "top_k", 0, INT32_MAX, &top_k, err) ||
        api_get_number(root, "min_p", 0, 1, &min_p, err) ||
        api_get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, err) ||
        api_get_number(root, "presence_penalty", -2, 2, &pres, err) ||
        api_get_number(root, "frequency_penalty", -2, 2, &freq, err) ||
        api_get_number(root, "repetition_penalty", 0.01, 10, &rep, err) ||
        logit_bias(j, json_object_get(root, "logit_bias"), err))
        return -1;
    j->gen.sampler.temperature = (float)temp;
    j->gen.sampler.top_p = (float)top_p;
    j->gen.sampler.top_k = (int32_t)top_k;
    j->gen.sampler.min_p = (float)min_p;
    j->gen.sampler.presence_penalty = (float)pres;
    j->gen.sampler.frequency_penalty = (float)freq;
    j->gen.sampler.repetition_penalty = (float)rep;
    j->gen.sampler.seed = seed >= 0 ? (uint64_t)seed : api_random_seed();
    json_t *fo = json_object_get(root, "forced_output");
    if (fo && !json_is_null(fo)) {
        if (!j->allow_forced)
            return err_setp(err, "forced_output",
                            "'forced_output' is a test switch: start the server with "
                            "--allow-forced-output to use it");
        if (!json_is_string(fo)) return err_setp(err, "forced_output", "'forced_output' must be a string");
        j->gen.forced_output = json_string_value(fo);
        j->gen.forced_len = json_string_length(fo);
    }
    return 0;
}

/* Values of a refused field that ask for nothing. */
static bool asks_nothing(json_t *v) {
    return json_is_null(v) || json_is_false(v) || (json_is_array(v) && json_array_size(v) == 0) ||
           (json_is_object(v) && json_object_size(v) == 0);
}

/* The fields all three APIs take alike: the model, streaming, sampling, tools,
 * pinhole's own (cache_salt, auxiliary, forced_output) and what they ignore. */
static const field_rule COMMON_FIELDS[] = {
    {"auxiliary", F_USE, NULL},
    {"cache_salt", F_USE, NULL},
    {"forced_output", F_USE, NULL},
    {"frequency_penalty", F_USE, NULL},
    {"logit_bias", F_USE, NULL},
    {"metadata", F_IGNORE, NULL},
    {"min_p", F_USE, NULL},
    {"model", F_USE, NULL},
    {"presence_penalty", F_USE, NULL},
    {"repetition_penalty", F_USE, NULL},
    {"seed", F_USE, NULL},
    {"service_tier", F_IGNORE, NULL},
    {"stream", F_USE, NULL},
    {"temperature", F_USE, NULL},
    {"tool_choice", F_USE, NULL},
    {"tools", F_USE, NULL},
    {"top_k", F_USE, NULL},
    {"top_p", F_USE, NULL},
};

int api_check_fields(job *j, const field_rule *rules, size_t n, const char *where, ph_err *err) {
    const char *key;
    json_t *v;
    json_object_foreach(j->root, key, v) {
        const field_rule *r = NULL;
        for (size_t i = 0; !r && i < n; i++)
            if (!strcmp(rules[i].name, key)) r = &rules[i];
        for (size_t i = 0; !r && i < sizeof COMMON_FIELDS / sizeof *COMMON_FIELDS; i++)
            if (!strcmp(COMMON_FIELDS[i].name, key)) r = &COMMON_FIELDS[i];
        if (!r && j->strict_fields)
            return err_setp(err, key,
                            "the field '%.64s' is not known to %s here (the server runs with --strict-fields, "
                            "which refuses the fields it would otherwise ignore; see docs/api-fields.md)",
                            key, where);
        if (!r) {
            if (j->n_ignored < sizeof j->ignored / sizeof *j->ignored) j->ignored[j->n_ignored++] = key;
            j->n_unknown++;
            continue;
        }
        if (r->how == F_REFUSE && !asks_nothing(v))
            return err_setp(err, key, "the field '%s' is not supported: %s", key, r->why);
    }
    return 0;
}

bool api_ignored_header(const job *j, char *buf, size_t cap) {
    if (!j->n_ignored || cap < 16) return false;
    size_t o = 0, i = 0;
    for (; i < j->n_ignored; i++) {
        const size_t len = strnlen(j->ignored[i], 64);
        if (o + (i ? 2 : 0) + len + 6 > cap) break; /* room for ", ..." and the NUL */
        if (i) {
            memcpy(buf + o, ", ", 2);
            o += 2;
        }
        for (size_t k = 0; k < len; k++) {
            const char c = j->ignored[i][k];
            buf[o++] = c >= '!' && c <= '~' && c != ',' ? c : '?';
        }
    }
    if (i < j->n_unknown) {
        memcpy(buf + o, i ? ", ..." : "...", i ? 5 : 3);
        o += i ? 5 : 3;
    }
    buf[o] = 0;
    return true;
}

out_call *job_out_call(job *j, int32_t index, const char *id_prefix) {
    if (index < 0) return NULL;
    if ((size_t)index < j->n_out_calls) return &j->out_calls[index];
    if ((size_t)index != j->n_out_calls) return NULL;
    out_call *c = realloc(j->out_calls, (j->n_out_calls + 1) * sizeof *c);
    if (!c) return NULL;
    j->out_calls = c;
    c = &j->out_calls[j->n_out_calls++];
    memset(c, 0, sizeof *c);
    api_make_id(c->id, sizeof c->id, id_prefix);
    api_make_id(c->call_id, sizeof c->call_id, "call_");
    return c;
}
