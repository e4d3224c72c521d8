/* A turn's sampling constraint (constrain.h). */
#include "engine/constrain.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "model/llm.h"
#include "text/tokenizer.h"

size_t constraint_token_text(void *model, int32_t id, char *buf, size_t cap) {
    const ph_model *m = model;
    if (vocab_token_type(m->vocab, id) == PH_TOK_CONTROL) return 0;
    int n = token_bytes(m->vocab, id, buf, cap);
    return n > 0 ? (size_t)n : 0;
}

/* A tool's arguments schema: a keyword the constraint cannot hold loses only its own constraint
 * (jc_schema_compile_lenient), a schema it cannot read at all leaves any object. */
static json_t *tool_params(const ph_tool *t) {
    json_t *params = NULL;
    if (t->parameters) {
        ph_err e = {0};
        char *dropped = NULL;
        jc_schema *s = jc_schema_compile_lenient(t->parameters, strlen(t->parameters), &dropped, &e);
        if (s) {
            jc_schema_free(s);
            params = json_loads(t->parameters, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
            if (dropped) PH_WARN("the arguments of tool '%s' are constrained without %s", t->name, dropped);
            free(dropped);
        } else {
            PH_WARN("the arguments of tool '%s' are constrained to any object: %s", t->name, e.msg);
        }
    }
    return params ? params : json_pack("{s:s}", "type", "object");
}

/* The calls a turn may make. Hermes (JSON calls): {"anyOf": [{"type": "object", "properties": {"name":
 * {"const": NAME}, "arguments": SCHEMA}, "required": [...]}, ...]}; xml: {"type": "object", "properties":
 * {NAME: SCHEMA, ...}} (jc_matcher_new_xml). */
static jc_schema *calls_schema(const ph_gen_params *g, bool xml, ph_err *err) {
    json_t *alts = json_array(), *byname = json_object();
    for (size_t i = 0; i < g->n_tools; i++) {
        const ph_tool *t = &g->tools[i];
        if (g->tool_choice == PH_TOOL_NAMED && strcmp(t->name, g->tool_name)) continue;
        if (xml) json_object_set_new(byname, t->name, tool_params(t));
        else
            json_array_append_new(alts, json_pack("{s:s,s:{s:{s:s},s:o},s:[s,s]}", "type", "object", "properties",
                                                  "name", "const", t->name, "arguments", tool_params(t), "required",
                                                  "name", "arguments"));
    }
    json_t *root = xml ? json_pack("{s:s,s:O,s:b}", "type", "object", "properties", byname, "additionalProperties", 0)
                   : json_array_size(alts) == 1 ? json_incref(json_array_get(alts, 0))
                                                : json_pack("{s:O}", "anyOf", alts);
    json_decref(alts);
    json_decref(byname);
    char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!text) {
        err_set(err, "out of memory");
        return NULL;
    }
    jc_schema *s = jc_schema_compile_lenient(text, strlen(text), NULL, err); /* (what tool_params logged) */
    free(text);
    return s;
}

static bool call_pending(const constraint *c) {
    return c->call && c->n_calls == 0 &&
           (c->g->tool_choice == PH_TOOL_REQUIRED || c->g->tool_choice == PH_TOOL_NAMED);
}

int constraint_init(constraint *c, const ph_model *m, const jc_vocab *v, const ph_gen_params *g,
                    bool starts_in_reasoning, bool xml_calls, ph_err *err) {
    memset(c, 0, sizeof *c);
    c->g = g;
    c->xml = xml_calls;
    c->m = m;
    c->v = v;
    c->n_vocab = m->hp.n_vocab;
    c->call_token = ph_token_lookup(m, "<tool_call>");
    if (g->format != PH_FORMAT_TEXT) { /* the format wins: calls are not parsed */
        static const char any_object[] = "{\"type\":\"object\"}";
        const char *s = g->format == PH_FORMAT_JSON_SCHEMA ? g->response_schema : any_object;
        if (!s) return err_setc(err, PH_ERR_INPUT, "a json_schema response format needs a schema");
        if (!(c->format = jc_schema_compile(s, strlen(s), err))) return -1;
    } else if (g->n_tools && g->tool_choice != PH_TOOL_NONE) {
        if (!(c->call = calls_schema(g, xml_calls, err))) return -1;
    }
    c->text_cap = 256;
    c->allowed = malloc(((size_t)c->n_vocab + 63) / 64 * sizeof *c->allowed);
    c->text = malloc(c->text_cap);
    for (int32_t i = 0; i < c->n_vocab && c->n_eog < (int32_t)(sizeof c->eog / sizeof *c->eog); i++)
        if (ph_token_is_eog(m, i)) c->eog[c->n_eog++] = i;
    if (!c->allowed || !c->text) {
        constraint_free(c);
        return err_set(err, "out of memory");
    }
    if (!starts_in_reasoning) constraint_content(c);
    return 0;
}

void constraint_free(constraint *c) {
    jc_matcher_free(c->active);
    jc_schema_free(c->call);
    jc_schema_free(c->format);
    free(c->allowed);
    free(c->text);
    memset(c, 0, sizeof *c);
    c->call_token = -1;
}

static void activate(constraint *c, const jc_schema *s, const char *prefix, const char *suffix, bool outer_ws,
                     bool is_call) {
    ph_err e = {0};
    c->active = is_call && c->xml ? jc_matcher_new_xml(s, prefix, suffix, &e)
                                  : jc_matcher_new(s, prefix, suffix, outer_ws, &e);
    c->active_is_call = is_call;
    if (!c->active) PH_WARN("the answer goes on unconstrained: %s", e.msg);
}

void constraint_content(constraint *c) {
    if (c->in_content) return;
    c->in_content = true;
    if (c->active) return;
    if (c->format && !c->format_done) {
        c->format_done = true;
        activate(c, c->format, NULL, NULL, true, false);
    } else if (call_pending(c)) {
        activate(c, c->call, "<tool_call>\n", "\n</tool_call>", false, true);
    }
}

void constraint_call_open(constraint *c, const char *body, size_t len) {
    if (!c->call || c->active) return;
    activate(c, c->call, "\n", "\n</tool_call>", false, true);
    if (c->active && len && jc_matcher_feed(c->active, body, len)) { /* written outside the frame already */
        jc_matcher_free(c->active);
        c->active = NULL;
    }
}

/* The text of token id in c->text (grown as needed). */
static size_t token_text(constraint *c, int32_t id) {
    size_t n = constraint_token_text((void *)c->m, id, c->text, c->text_cap);
    if (n > c->text_cap) {
        char *t = realloc(c->text, n);
        if (!t) return 0;
        c->text = t;
        c->text_cap = n;
        n = constraint_token_text((void *)c->m, id, c->text, c->text_cap);
    }
    return n;
}

static void set_bit(uint64_t *bits, int32_t id, bool on) {
    if (on) bits[id >> 6] |= 1ull << (id & 63);
    else bits[id >> 6] &= ~(1ull << (id & 63));
}

/* Whether the end of the answer is allowed now. */
static bool end_ok(const constraint *c) {
    if (call_pending(c)) return false;
    return !c->active || c->next_call || jc_matcher_can_end(c->active);
}

static bool call_banned(const constraint *c) {
    return c->call_token >= 0 && (c->g->tool_choice == PH_TOOL_NONE || c->g->format != PH_FORMAT_TEXT ||
                                  (!c->g->parallel_tool_calls && c->n_calls > 0));
}

static bool allowed_now(constraint *c, int32_t tok) {
    if (ph_token_is_eog(c->m, tok)) return end_ok(c);
    if (c->active) return jc_matcher_token_ok(c->active, c->v, tok);
    return !(tok == c->call_token && call_banned(c));
}

int32_t constraint_sample(constraint *c, ph_sampler *smp, const float *logits) {
    int32_t tok = ph_sampler_sample(smp, logits, c->n_vocab);
    const double t0 = time_now_s();
    if (allowed_now(c, tok)) {
        c->check_s += time_now_s() - t0;
        return tok;
    }
    const size_t words = ((size_t)c->n_vocab + 63) / 64;
    if (c->active) {
        jc_matcher_mask(c->active, c->v, c->allowed);
    } else {
        memset(c->allowed, 0xff, words * sizeof *c->allowed);
        if (c->n_vocab % 64) c->allowed[words - 1] = (1ull << (c->n_vocab % 64)) - 1;
        if (call_banned(c)) set_bit(c->allowed, c->call_token, false);
    }
    /* the end-of-generation tokens: allowed exactly when the answer may end */
    const bool eog = end_ok(c);
    for (int32_t i = 0; i < c->n_eog; i++) set_bit(c->allowed, c->eog[i], eog);
    tok = ph_sampler_sample_allowed(smp, logits, c->n_vocab, c->allowed);
    const double dt = time_now_s() - t0;
    c->mask_s += dt;
    c->check_s += dt;
    c->n_masked++;
    return tok;
}

bool constraint_accept(constraint *c, int32_t tok) {
    if (!c->active || ph_token_is_eog(c->m, tok)) return false;
    const double t0 = time_now_s();
    size_t n = token_text(c, tok);
    const int rc = jc_matcher_feed(c->active, c->text, n);
    c->check_s += time_now_s() - t0;
    if (rc) { /* a forced token outside the constraint */
        jc_matcher_free(c->active);
        c->active = NULL;
        return false;
    }
    if (n) c->next_call = false;
    if (!c->active_is_call || !jc_matcher_finished(c->active)) return false;
    jc_matcher_free(c->active);
    c->active = NULL;
    c->n_calls++;
    if (!c->g->parallel_tool_calls) return true;
    /* a call ends the turn: what may follow is another call (the template
     * puts a newline between calls) or the end */
    activate(c, c->call, "\n<tool_call>\n", "\n</tool_call>", false, true);
    c->next_call = c->active != NULL;
    return false;
}

bool constraint_after_call(const constraint *c) { return c->next_call; }
