/* JSON schema → the node graph the matcher runs (json_constraint_impl.h).
 *
 * compile() turns each schema object into a node (memoised by its json_t,
 * so $ref cycles become graph cycles); enum/const become literal nodes whose
 * values are filtered by the schema's other keywords. Then: choices are
 * flattened to lists of concrete nodes (literals merged into one trie), the
 * least nesting each node needs to complete is found by a fixed point
 * (JC_INF: no finite value), what cannot complete within JC_MAX_DEPTH is
 * pruned, and the key and literal tries are built. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/grow.h"
#include "base/strbuf.h"
#include "text/json_constraint_impl.h"
#include "text/tool_json.h"

/* ---- canonical serialisation of literal values ----------------------------- */
static void ser_string(strbuf *b, const char *s, size_t len) {
    strbuf_put(b, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)s[i];
        char esc[8];
        switch (c) {
        case '"': strbuf_put(b, "\\\"", 2); break;
        case '\\': strbuf_put(b, "\\\\", 2); break;
        case '\b': strbuf_put(b, "\\b", 2); break;
        case '\f': strbuf_put(b, "\\f", 2); break;
        case '\n': strbuf_put(b, "\\n", 2); break;
        case '\r': strbuf_put(b, "\\r", 2); break;
        case '\t': strbuf_put(b, "\\t", 2); break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                strbuf_put(b, esc, 6);
            } else {
                strbuf_put(b, &s[i], 1);
            }
        }
    }
    strbuf_put(b, "\"", 1);
}

/* The shortest %e precision that reads back as d. */
static int shortest_e(double d, char *out, size_t cap) {
    for (int p = 1; p <= 17; p++) {
        snprintf(out, cap, "%.*e", p - 1, d);
        if (strtod(out, NULL) == d) return p;
    }
    return 17;
}

static void ser_real(strbuf *b, double d) {
    char s[48];
    /* like Python's repr: shortest digits, plain notation for exponents -4..15 */
    const int p = shortest_e(d, s, sizeof s);
    const char *e = strchr(s, 'e');
    const int x = e ? atoi(e + 1) : 0;
    if (x >= -4 && x < 16) {
        snprintf(s, sizeof s, "%.*f", p - 1 - x > 0 ? p - 1 - x : 0, d);
        if (!strchr(s, '.')) strcat(s, ".0");
    }
    strbuf_puts(b, s);
}

/* spaced: ", " and ": " separators (json.dumps); else compact. */
static void ser_value(strbuf *b, const json_t *v, bool spaced) {
    switch (json_typeof(v)) {
    case JSON_NULL: strbuf_puts(b, "null"); break;
    case JSON_TRUE: strbuf_puts(b, "true"); break;
    case JSON_FALSE: strbuf_puts(b, "false"); break;
    case JSON_INTEGER: {
        char s[32];
        snprintf(s, sizeof s, "%lld", (long long)json_integer_value(v));
        strbuf_puts(b, s);
        break;
    }
    case JSON_REAL: ser_real(b, json_real_value(v)); break;
    case JSON_STRING: ser_string(b, json_string_value(v), json_string_length(v)); break;
    case JSON_ARRAY:
        strbuf_put(b, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) strbuf_puts(b, spaced ? ", " : ",");
            ser_value(b, json_array_get(v, i), spaced);
        }
        strbuf_put(b, "]", 1);
        break;
    case JSON_OBJECT: {
        strbuf_put(b, "{", 1);
        const char *k;
        json_t *x;
        size_t i = 0;
        json_object_foreach((json_t *)v, k, x) {
            if (i++) strbuf_puts(b, spaced ? ", " : ",");
            ser_string(b, k, strlen(k));
            strbuf_puts(b, spaced ? ": " : ":");
            ser_value(b, x, spaced);
        }
        strbuf_put(b, "}", 1);
        break;
    }
    }
}

/* ---- compile context ----------------------------------------------------- */
typedef struct memo_ent {
    const json_t *js;
    uint32_t id;
} memo_ent;

typedef struct pend_lit { /* a K_LIT node's values before filtering */
    uint32_t node;
    json_t *values;  /* array, owned */
    uint32_t filter; /* node the values must satisfy, or JC_NONE */
} pend_lit;

typedef struct lit_str { /* one serialised literal of a K_LIT node */
    uint32_t node;
    uint32_t off, len; /* in cc.lits */
} lit_str;

typedef struct bnode { /* trie builder node: edges as a linked list */
    uint32_t first, depth;
    int32_t term, maxj;
} bnode;

typedef struct bedge {
    uint32_t child, next;
    uint8_t byte;
} bedge;

typedef struct cc {
    jc_schema *s;
    size_t cap_nodes, cap_alts, cap_props, cap_bytes;
    json_t *doc;
    ph_err *err;
    bool failed; /* err is set */
    memo_ent *memo;
    size_t n_memo, cap_memo;
    pend_lit *pend;
    size_t n_pend, cap_pend;
    lit_str *ls;
    size_t n_ls, cap_ls;
    strbuf lits;
    json_t **owned; /* schema copies made while compiling */
    size_t n_owned, cap_owned;
    bnode *bn;
    size_t n_bn, cap_bn;
    bedge *be;
    size_t n_be, cap_be;
    size_t cap_rx;
    bool lenient;   /* drop what would be refused (jc_schema_compile_lenient) */
    strbuf dropped; /* what was dropped, ", "-separated */
    int depth;      /* recursion guard */
} cc;

enum { B_NEVER, B_ANY, B_OBJ, B_ARR, B_STR, B_NUM, B_TFN, B_N }; /* built-in nodes */

static int oom(cc *c) {
    if (!c->failed) err_set(c->err, "json schema: out of memory");
    c->failed = true;
    return -1;
}

PH_PRINTF(2, 3) static int refuse(cc *c, const char *fmt, ...) {
    if (!c->failed && c->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err->msg, sizeof c->err->msg, fmt, ap);
        va_end(ap);
        c->err->code = PH_ERR_INPUT;
    }
    c->failed = true;
    return -1;
}

/* Notes a dropped keyword (lenient compile), once. */
PH_PRINTF(2, 3) static void drop(cc *c, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    const size_t n = strlen(line);
    for (const char *at = c->dropped.p; at && (at = strstr(at, line)); at++)
        if ((at == c->dropped.p || at[-1] == ' ') && (at[n] == '\0' || at[n] == ',')) return;
    if (c->dropped.n) strbuf_puts(&c->dropped, ", ");
    strbuf_put(&c->dropped, line, n);
}

static uint32_t new_node(cc *c, uint8_t kind) {
    jc_schema *s = c->s;
    if (s->n_nodes >= 0x7fffff) return refuse(c, "json schema: too large for the constraint"), JC_NONE;
    jc_node *p = grow_array(s->nodes, &c->cap_nodes, s->n_nodes, sizeof *p, 64);
    if (!p) return oom(c), JC_NONE;
    s->nodes = p;
    jc_node *n = &s->nodes[s->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->extra = n->trie = n->max = n->rx = JC_NONE;
    n->mind = JC_INF;
    return s->n_nodes++;
}

/* Appends a list to alts[]; returns its offset. */
static uint32_t add_list(cc *c, const uint32_t *ids, uint32_t n) {
    jc_schema *s = c->s;
    const uint32_t off = s->n_alts;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t *p = grow_array(s->alts, &c->cap_alts, s->n_alts, sizeof *p, 64);
        if (!p) return oom(c), 0;
        s->alts = p;
        s->alts[s->n_alts++] = ids[i];
    }
    return off;
}

static int add_lit(cc *c, uint32_t node, json_t *values, uint32_t filter) {
    pend_lit *p = grow_array(c->pend, &c->cap_pend, c->n_pend, sizeof *p, 16);
    if (!p) {
        json_decref(values);
        return oom(c);
    }
    c->pend = p;
    c->pend[c->n_pend++] = (pend_lit){node, values, filter};
    c->s->nodes[node].kind = K_LIT;
    return 0;
}

/* ---- keywords -------------------------------------------------------------- */
/* Annotations (title, description, default, format...) and keywords that
 * are not JSON Schema vocabulary are ignored: ignoring them only narrows. */
static const char *const REFUSED[] = {"patternProperties",
                                      "not",
                                      "if",
                                      "then",
                                      "else",
                                      "multipleOf",
                                      "uniqueItems",
                                      "minProperties",
                                      "maxProperties",
                                      "dependentRequired",
                                      "dependentSchemas",
                                      "dependencies",
                                      "propertyNames",
                                      "contains",
                                      "minContains",
                                      "maxContains",
                                      "unevaluatedProperties",
                                      "unevaluatedItems",
                                      "additionalItems",
                                      "$dynamicRef",
                                      "$dynamicAnchor",
                                      "$recursiveRef",
                                      "$recursiveAnchor",
                                      NULL};
/* supported keywords that constrain a value (not the combinators) */
static const char *const TYPED[] = {"type",      "properties",       "required",         "additionalProperties",
                                    "items",     "prefixItems",      "minItems",         "maxItems",
                                    "minLength", "maxLength",        "pattern",          "minimum",
                                    "maximum",   "exclusiveMinimum", "exclusiveMaximum", NULL};
static const char *const OBJ_KW[] = {"properties", "required", "additionalProperties", NULL};
static const char *const ARR_KW[] = {"items", "prefixItems", "minItems", "maxItems", NULL};
static const char *const STR_KW[] = {"minLength", "maxLength", "pattern", NULL};
static const char *const NUM_KW[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};

static bool in_list(const char *const *list, const char *k) {
    for (; *list; list++)
        if (!strcmp(*list, k)) return true;
    return false;
}

static bool has_any(const json_t *js, const char *const *list) {
    for (; *list; list++)
        if (json_object_get(js, *list)) return true;
    return false;
}

static void child_path(char *out, size_t cap, const char *path, const char *fmt, const char *a, size_t i) {
    char tail[160];
    snprintf(tail, sizeof tail, fmt, a ? a : "", i);
    snprintf(out, cap, "%s%s", path, tail);
}

enum { PATH_CAP = 320 };

static uint32_t compile(cc *c, json_t *js, const char *path);

/* A non-negative integer keyword (minItems...), capped. */
static int get_count(cc *c, const json_t *js, const char *kw, const char *path, uint32_t *out) {
    const json_t *v = json_object_get(js, kw);
    if (!v) return 0;
    double d = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : -1;
    if (d < 0 || d != floor(d)) return refuse(c, "'%s' at %s must be a non-negative integer", kw, path);
    *out = d >= 4e9 ? 4000000000u : (uint32_t)d;
    return 0;
}

/* ---- numbers: bounds in units of 1e-16 ---------------------------------- */
static jc_i128 pow10i(int k) {
    jc_i128 r = 1;
    while (k-- > 0) r *= 10;
    return r;
}

static jc_i128 num_maxmag(bool integer) { return integer ? (pow10i(16) - 1) * JC_SCALE : pow10i(32) - 1; }

/* v scaled by 1e16, rounded up (round_up) or down, clamped to what a
 * number can be. */
static jc_i128 scaled(const json_t *v, bool round_up, bool integer) {
    const jc_i128 lim = num_maxmag(integer) + 1;
    jc_i128 x;
    if (json_is_integer(v)) {
        x = (jc_i128)json_integer_value(v) * JC_SCALE;
    } else {
        const double d = json_real_value(v);
        char s[48];
        const int p = shortest_e(d, s, sizeof s);
        const bool neg = s[0] == '-';
        uint64_t m = 0;
        const char *q = s + neg;
        for (; *q && *q != 'e'; q++)
            if (*q >= '0' && *q <= '9') m = m * 10 + (uint64_t)(*q - '0');
        const int e = *q == 'e' ? atoi(q + 1) : 0;
        const int shift = e - (p - 1) + 16;
        jc_i128 mag;
        bool inexact = false;
        if (m == 0) {
            mag = 0;
        } else if (shift >= 0) {
            mag = shift > 20 ? lim : (jc_i128)m * pow10i(shift);
        } else if (-shift > 19) {
            mag = 0;
            inexact = true;
        } else {
            const jc_i128 div = pow10i(-shift);
            mag = (jc_i128)m / div;
            inexact = (jc_i128)m % div != 0;
        }
        if (!neg) x = mag + (inexact && round_up);
        else x = -(mag + (inexact && !round_up));
    }
    if (x > lim) x = lim;
    if (x < -lim) x = -lim;
    return x;
}

static jc_i128 floor_div(jc_i128 a, jc_i128 b) {
    jc_i128 q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static int compile_number(cc *c, const json_t *js, const char *path, uint32_t id, bool integer) {
    jc_node *n = &c->s->nodes[id];
    n->kind = K_NUM;
    n->integer = integer;
    n->mind = JC_INF;
    jc_i128 lo = -num_maxmag(integer), hi = num_maxmag(integer);
    bool bounded = false;
    for (int k = 0; NUM_KW[k]; k++) {
        const json_t *v = json_object_get(js, NUM_KW[k]);
        if (!v) continue;
        if (!json_is_number(v))
            return refuse(c,
                          "'%s' at %s must be a number (the draft-4 boolean form is not supported by the constraint)",
                          NUM_KW[k], path);
        const bool is_min = k == 0 || k == 2, excl = k >= 2;
        jc_i128 x = scaled(v, is_min, integer);
        if (excl) x += is_min ? 1 : -1;
        if (is_min && x > lo) lo = x;
        if (!is_min && x < hi) hi = x;
        bounded = true;
    }
    if (integer) { /* to whole numbers, inwards */
        lo = -floor_div(-lo, JC_SCALE) * JC_SCALE;
        hi = floor_div(hi, JC_SCALE) * JC_SCALE;
    }
    c->s->nodes[id].bounded = bounded;
    c->s->nodes[id].lo = lo;
    c->s->nodes[id].hi = hi;
    return 0;
}

/* ---- objects and arrays ---------------------------------------------------- */
typedef struct tmp_prop {
    const char *key;
    json_t *schema;
    bool required, declared;
} tmp_prop;

static int compile_object(cc *c, json_t *js, const char *path, uint32_t id) {
    json_t *props = json_object_get(js, "properties");
    json_t *req = json_object_get(js, "required");
    json_t *addl = json_object_get(js, "additionalProperties");
    char sub[PATH_CAP];
    if (props && !json_is_object(props)) return refuse(c, "'properties' at %s must be an object", path);
    if (req && !json_is_array(req)) return refuse(c, "'required' at %s must be an array of strings", path);
    for (size_t i = 0; req && i < json_array_size(req); i++)
        if (!json_is_string(json_array_get(req, i)))
            return refuse(c, "'required' at %s must be an array of strings", path);
    if (addl && !json_is_object(addl) && !json_is_boolean(addl))
        return refuse(c, "'additionalProperties' at %s must be a schema", path);

    const size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
    tmp_prop *tp = calloc(np + nr + 1, sizeof *tp);
    uint32_t *ids = calloc(np + nr + 1, sizeof *ids);
    if (!tp || !ids) {
        free(tp);
        free(ids);
        return oom(c);
    }
    size_t n = 0;
    const char *k;
    json_t *v;
    if (props) {
        json_object_foreach(props, k, v) {
            tp[n].key = k;
            tp[n].schema = v;
            tp[n].declared = true;
            for (size_t i = 0; i < nr; i++)
                if (!strcmp(json_string_value(json_array_get(req, i)), k)) tp[n].required = true;
            n++;
        }
    }
    for (size_t i = 0; i < nr; i++) { /* required names without a properties entry: any value */
        const char *name = json_string_value(json_array_get(req, i));
        bool seen = false;
        for (size_t j = 0; j < n; j++)
            if (!strcmp(tp[j].key, name)) seen = true;
        if (!seen) tp[n++] = (tmp_prop){name, NULL, true, false};
    }
    /* order: required (declared order), then optional */
    tmp_prop *ord = calloc(n + 1, sizeof *ord);
    if (!ord) {
        free(tp);
        free(ids);
        return oom(c);
    }
    size_t m = 0, nreq = 0;
    for (size_t j = 0; j < n; j++)
        if (tp[j].required) ord[m++] = tp[j];
    nreq = m;
    for (size_t j = 0; j < n; j++)
        if (!tp[j].required) ord[m++] = tp[j];
    int rc = 0;
    uint32_t extra = JC_NONE;
    if (!addl) extra = props ? JC_NONE : B_ANY;
    else if (json_is_true(addl)) extra = B_ANY;
    else if (json_is_object(addl)) {
        child_path(sub, sizeof sub, path, ".additionalProperties", NULL, 0);
        extra = compile(c, addl, sub);
        if (extra == JC_NONE) rc = -1;
    }
    for (size_t j = 0; j < n && rc == 0; j++) {
        if (!ord[j].schema) { /* required, not declared: what other keys may hold */
            ids[j] = addl ? (extra == JC_NONE ? B_NEVER : extra) : B_ANY;
            continue;
        }
        child_path(sub, sizeof sub, path, ".properties.%s", ord[j].key, 0);
        ids[j] = compile(c, ord[j].schema, sub);
        if (ids[j] == JC_NONE) rc = -1;
    }
    if (rc == 0) {
        jc_schema *s = c->s;
        const uint32_t off = s->n_props;
        for (size_t j = 0; j < n && rc == 0; j++) {
            jc_prop *p = grow_array(s->props, &c->cap_props, s->n_props, sizeof *p, 32);
            if (!p) {
                rc = oom(c);
                break;
            }
            s->props = p;
            strbuf kb = {0};
            ser_string(&kb, ord[j].key, strlen(ord[j].key));
            const uint32_t koff = s->n_bytes;
            for (size_t i = 0; i < kb.n && !kb.oom; i++) {
                char *q = grow_array(s->bytes, &c->cap_bytes, s->n_bytes, 1, 256);
                if (!q) {
                    kb.oom = true;
                    break;
                }
                s->bytes = q;
                s->bytes[s->n_bytes++] = kb.p[i];
            }
            if (kb.oom) rc = oom(c);
            s->props[s->n_props++] = (jc_prop){koff, (uint32_t)kb.n, ids[j], tool_param_is_string(ord[j].schema)};
            free(kb.p);
        }
        jc_node *nd = &s->nodes[id];
        nd->kind = K_OBJ;
        nd->off = off;
        nd->n = (uint32_t)n;
        nd->nreq = (uint32_t)nreq;
        nd->extra = extra;
    }
    free(tp);
    free(ids);
    free(ord);
    return rc;
}

static int compile_array(cc *c, json_t *js, const char *path, uint32_t id) {
    json_t *items = json_object_get(js, "items");
    json_t *prefix = json_object_get(js, "prefixItems");
    char sub[PATH_CAP];
    uint32_t mn = 0, mx = JC_NONE;
    if (get_count(c, js, "minItems", path, &mn) || get_count(c, js, "maxItems", path, &mx)) return -1;
    if (prefix && !json_is_array(prefix)) return refuse(c, "'prefixItems' at %s must be an array of schemas", path);
    if (items && json_is_array(items)) {
        if (prefix) return refuse(c, "'items' at %s is a list together with 'prefixItems'", path);
        prefix = items; /* draft-4 tuple form; further items: any value */
        items = NULL;
    }
    if (items && !json_is_object(items) && !json_is_boolean(items))
        return refuse(c, "'items' at %s must be a schema", path);
    const size_t np = prefix ? json_array_size(prefix) : 0;
    uint32_t *ids = calloc(np + 1, sizeof *ids);
    if (!ids) return oom(c);
    for (size_t i = 0; i < np; i++) {
        child_path(sub, sizeof sub, path, ".prefixItems[%s%zu]", NULL, i);
        ids[i] = compile(c, json_array_get(prefix, i), sub);
        if (ids[i] == JC_NONE) {
            free(ids);
            return -1;
        }
    }
    uint32_t extra = B_ANY;
    if (items && json_is_false(items)) extra = JC_NONE;
    else if (items && json_is_object(items)) {
        child_path(sub, sizeof sub, path, ".items", NULL, 0);
        extra = compile(c, items, sub);
        if (extra == JC_NONE) {
            free(ids);
            return -1;
        }
    }
    const uint32_t off = add_list(c, ids, (uint32_t)np);
    free(ids);
    if (c->failed) return -1;
    jc_node *nd = &c->s->nodes[id];
    nd->kind = K_ARR;
    nd->off = off;
    nd->n = (uint32_t)np;
    nd->extra = extra;
    nd->min = mn;
    nd->max = mx;
    return 0;
}

/* ---- strings: pattern and format ------------------------------------------------ */
enum { LENS_BITS = 1 << 25, LENS_WORK = 1 << 27 };

static uint64_t level_hash(const uint64_t *w, uint32_t nw) {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < nw; i++) h = (h ^ w[i]) * 1099511628211ull;
    return h ^ h >> 31;
}

/* x->lens for a maxLength of B, if the intervals of the DFA's remaining
 * lengths are not exact. The states that accept after exactly L more code
 * points (level L) follow from level L - 1 (their predecessors), so the
 * levels repeat from some point on: they are computed up to B or to the
 * first repeat. -1: too large (why says so) or out of memory. */
static int str_lens(jc_rx *x, uint32_t B, char *why, size_t cap) {
    const rx_dfa *d = x->dfa;
    const uint32_t n = d->n_states, nc = d->n_classes, nw = (n + 63) / 64;
    if (!n) return 0;
    int rc = -1;
    uint32_t *poff = calloc((size_t)n + 2, sizeof *poff), *pred = NULL, *seen = malloc((size_t)n * sizeof *seen);
    uint64_t *lv = NULL, *rows = NULL;
    uint32_t *ht = NULL;
    size_t cap_lv = 0, hcap = 64, nl = 0, ne = 0;
    if (!poff || !seen) goto oom;
    /* the distinct predecessors of t: pred[poff[t]..poff[t + 1]) (the first pass counts, the second fills) */
    for (int fill = 0; fill < 2; fill++) {
        for (uint32_t i = 0; i < n; i++) seen[i] = JC_NONE;
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t k = 0; k < nc; k++) {
                const uint32_t t = d->next[(size_t)i * nc + k];
                if (t == RX_DEAD || seen[t] == i) continue;
                seen[t] = i;
                if (fill) pred[poff[t + 1]++] = i;
                else poff[t + 2]++, ne++;
            }
        if (fill) break;
        for (uint32_t i = 0; i < n; i++) poff[i + 2] += poff[i + 1];
        if (!(pred = malloc((ne + 1) * sizeof *pred))) goto oom;
    }
    if (!(ht = malloc(hcap * sizeof *ht))) goto oom;
    for (size_t i = 0; i < hcap; i++) ht[i] = JC_NONE;
    uint32_t rlen = 0, per_t = 0, per_p = 0;
    uint64_t work = 0;
    for (uint32_t L = 0;; L++) {
        if (L > B) { /* no repeat up to the bound: rows of B + 1 bits */
            rlen = B + 1;
            break;
        }
        if (((size_t)L + 1) * nw * 64 > LENS_BITS || work > LENS_WORK) {
            snprintf(why, cap, "together with maxLength %u it is too large for the constraint", B);
            goto done;
        }
        uint64_t *g = grow_array(lv, &cap_lv, ((size_t)L + 1) * nw - 1, sizeof *lv, 64);
        if (!g) goto oom;
        lv = g;
        uint64_t *cur = lv + (size_t)L * nw;
        memset(cur, 0, nw * sizeof *cur);
        if (L == 0) {
            for (uint32_t i = 0; i < n; i++)
                if (d->flags[i] & RX_ACCEPT) cur[i / 64] |= 1ull << (i % 64);
        } else {
            const uint64_t *prev = lv + ((size_t)L - 1) * nw;
            for (uint32_t w = 0; w < nw; w++)
                for (uint64_t bits = prev[w]; bits; bits &= bits - 1) {
                    const uint32_t t = w * 64 + (uint32_t)__builtin_ctzll(bits);
                    for (uint32_t k = poff[t]; k < poff[t + 1]; k++) cur[pred[k] / 64] |= 1ull << (pred[k] % 64);
                    work += poff[t + 1] - poff[t];
                }
            work += nw;
        }
        /* a repeat? */
        size_t h = (size_t)level_hash(cur, nw) & (hcap - 1);
        bool rep = false;
        for (; ht[h] != JC_NONE; h = (h + 1) & (hcap - 1))
            if (!memcmp(lv + (size_t)ht[h] * nw, cur, nw * sizeof *cur)) {
                per_t = ht[h];
                per_p = L - ht[h];
                rlen = L;
                rep = true;
                break;
            }
        if (rep) break;
        ht[h] = L;
        if (++nl * 2 > hcap) { /* rehash */
            const size_t nh = hcap * 2;
            uint32_t *t2 = malloc(nh * sizeof *t2);
            if (!t2) goto oom;
            for (size_t i = 0; i < nh; i++) t2[i] = JC_NONE;
            for (size_t i = 0; i < hcap; i++) {
                if (ht[i] == JC_NONE) continue;
                size_t q = (size_t)level_hash(lv + (size_t)ht[i] * nw, nw) & (nh - 1);
                while (t2[q] != JC_NONE) q = (q + 1) & (nh - 1);
                t2[q] = ht[i];
            }
            free(ht);
            ht = t2;
            hcap = nh;
        }
    }
    /* rows; kept only if some state's lengths are not its interval */
    const uint32_t lw = (rlen + 63) / 64;
    if (!(rows = calloc((size_t)n * lw + 1, sizeof *rows))) goto oom;
    for (uint32_t L = 0; L < rlen; L++) {
        const uint64_t *cur = lv + (size_t)L * nw;
        for (uint32_t w = 0; w < nw; w++)
            for (uint64_t bits = cur[w]; bits; bits &= bits - 1) {
                const uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(bits);
                rows[(size_t)i * lw + L / 64] |= 1ull << (L % 64);
            }
    }
    x->lens = rows;
    x->lw = lw;
    x->rlen = rlen;
    x->per_t = per_t;
    x->per_p = per_p;
    bool exact = true;
    const uint32_t top = per_p ? rlen + per_p : rlen; /* one more period decides the rest */
    for (uint32_t i = 0; i < n && exact; i++)
        for (uint32_t L = 0; L < top && L <= B && exact; L++) {
            const bool in = d->min_left[i] <= L && L <= d->max_left[i];
            if (in != jc_rx_lens(x, i, L, L)) exact = false;
        }
    if (exact) {
        free(rows);
        x->lens = NULL;
    }
    rows = NULL;
    rc = 0;
    goto done;
oom:
    snprintf(why, cap, "out of memory");
done:
    free(poff);
    free(pred);
    free(seen);
    free(lv);
    free(rows);
    free(ht);
    return rc;
}

/* A jc_rx of the language r (taken), for a maxLength of max. -1: why says. */
static int str_rx_make(rx *r, uint32_t max, jc_rx *out, char *why, size_t cap) {
    memset(out, 0, sizeof *out);
    out->dfa = rx_determinize(r, why, cap);
    rx_free(r);
    if (!out->dfa) return -1;
    if (max != JC_NONE && str_lens(out, max, why, cap)) {
        rx_dfa_free(out->dfa);
        out->dfa = NULL;
        return -1;
    }
    return 0;
}

static bool known_format(const json_t *js) {
    const json_t *f = json_object_get(js, "format");
    return json_is_string(f) && rx_format_pattern(json_string_value(f));
}

/* pattern and format of string node id (its min and max are set). A
 * pattern outside the regex subset is refused (dropped when lenient); a
 * format the constraint cannot build with the pattern or the maxLength stays
 * an annotation. */
static int compile_str_rx(cc *c, const json_t *js, const char *path, uint32_t id) {
    const json_t *pat = json_object_get(js, "pattern");
    const json_t *fmt = json_object_get(js, "format");
    const char *fre = json_is_string(fmt) ? rx_format_pattern(json_string_value(fmt)) : NULL;
    if (!pat && !fre) return 0;
    const uint32_t max = c->s->nodes[id].max;
    char why[256] = "";
    rx *a = NULL, *b = NULL;
    jc_rx x = {0};
    bool done = false, pat_bad = false;
    if (pat && !json_is_string(pat)) {
        snprintf(why, sizeof why, "it must be a string");
        pat_bad = true;
    } else if (pat) {
        a = rx_compile(json_string_value(pat), json_string_length(pat), why, sizeof why);
        pat_bad = !a;
    }
    if (fre) {
        char fwhy[256];
        if (!(b = rx_compile(fre, strlen(fre), fwhy, sizeof fwhy))) return oom(c); /* (the formats compile) */
    }
    if (a && b) {
        char w2[256];
        rx *ab = rx_intersect(a, b, w2, sizeof w2);
        if (ab && str_rx_make(ab, max, &x, w2, sizeof w2) == 0) done = true;
    }
    if (!done && a) {
        rx *a2 = a;
        a = NULL;
        if (str_rx_make(a2, max, &x, why, sizeof why) == 0) done = true; /* the format stays an annotation */
        else pat_bad = true;
    }
    rx_free(a);
    if (pat_bad) {
        if (!c->lenient) {
            rx_free(b);
            return refuse(c, "'pattern' at %s: %s", path, why);
        }
        drop(c, "'pattern' at %s (%s)", path, why);
    }
    if (!done && b) {
        char w3[256];
        rx *b2 = b;
        b = NULL;
        done = str_rx_make(b2, max, &x, w3, sizeof w3) == 0;
    }
    rx_free(b);
    if (!done) return 0;
    jc_schema *s = c->s;
    jc_rx *p = grow_array(s->rx, &c->cap_rx, s->n_rx, sizeof *p, 8);
    if (!p) {
        rx_dfa_free(x.dfa);
        free(x.lens);
        return oom(c);
    }
    s->rx = p;
    s->rx[s->n_rx] = x;
    s->nodes[id].rx = s->n_rx++;
    return 0;
}

/* Whether string node n takes the UTF-8 text v (length and pattern). */
static bool str_accepts(const jc_schema *s, const jc_node *n, const char *v, size_t len, size_t chars) {
    if (chars < n->min || (n->max != JC_NONE && chars > n->max)) return false;
    if (n->rx == JC_NONE) return true;
    return rx_dfa_match(s->rx[n->rx].dfa, v, len);
}

/* Whether string node n has a value at all. */
static bool str_feasible(const jc_schema *s, const jc_node *n) {
    if (n->max != JC_NONE && n->min > n->max) return false;
    if (n->rx == JC_NONE) return true;
    const jc_rx *x = &s->rx[n->rx];
    return x->dfa->n_states && jc_rx_ok(x, x->dfa->start, 0, n->min, n->max);
}

/* ---- types ----------------------------------------------------------------- */
enum { T_OBJ = 1, T_ARR = 2, T_STR = 4, T_NUM = 8, T_INT = 16, T_BOOL = 32, T_NULL = 64 };

static int type_bit(const char *t) {
    static const char *const names[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(t, names[i])) return 1 << i;
    return 0;
}

/* Fills node id from the type keywords of js (no combinators, no enum). */
static int compile_typed(cc *c, json_t *js, const char *path, uint32_t id) {
    const json_t *type = json_object_get(js, "type");
    int types = 0;
    if (type) {
        if (json_is_string(type)) {
            if (!(types = type_bit(json_string_value(type))))
                return refuse(c, "unknown type '%s' at %s", json_string_value(type), path);
        } else if (json_is_array(type)) {
            for (size_t i = 0; i < json_array_size(type); i++) {
                const json_t *t = json_array_get(type, i);
                const int b = json_is_string(t) ? type_bit(json_string_value(t)) : 0;
                if (!b)
                    return refuse(c, "unknown type '%s' at %s", json_is_string(t) ? json_string_value(t) : "?", path);
                types |= b;
            }
            if (!types) {
                c->s->nodes[id].kind = K_NEVER;
                return 0;
            }
        } else {
            return refuse(c, "'type' at %s must be a string or a list of strings", path);
        }
    } else {
        if (has_any(js, OBJ_KW)) types |= T_OBJ;
        if (has_any(js, ARR_KW)) types |= T_ARR;
        if (has_any(js, STR_KW) || known_format(js)) types |= T_STR;
        if (has_any(js, NUM_KW)) types |= T_NUM;
        if (!types) { /* any value */
            c->s->nodes[id].kind = K_ALT;
            c->s->nodes[id].off = add_list(c, (const uint32_t[]){B_ANY}, 1);
            c->s->nodes[id].n = 1;
            return c->failed ? -1 : 0;
        }
    }
    if ((types & T_NUM) && (types & T_INT) && !has_any(js, NUM_KW)) types &= ~T_INT; /* integers are numbers */
    uint32_t alts[8];
    uint32_t na = 0;
    const bool single = (types & (types - 1)) == 0;
    for (int bit = 1; bit <= T_NULL; bit <<= 1) {
        if (!(types & bit)) continue;
        uint32_t x = single ? id : new_node(c, K_NEVER);
        if (x == JC_NONE) return -1;
        int rc = 0;
        switch (bit) {
        case T_OBJ: rc = compile_object(c, js, path, x); break;
        case T_ARR: rc = compile_array(c, js, path, x); break;
        case T_STR: {
            uint32_t mn = 0, mx = JC_NONE;
            rc = get_count(c, js, "minLength", path, &mn) || get_count(c, js, "maxLength", path, &mx) ? -1 : 0;
            c->s->nodes[x].kind = K_STR;
            c->s->nodes[x].min = mn;
            c->s->nodes[x].max = mx;
            if (rc == 0) rc = compile_str_rx(c, js, path, x);
            break;
        }
        case T_NUM: rc = compile_number(c, js, path, x, false); break;
        case T_INT: rc = compile_number(c, js, path, x, true); break;
        case T_BOOL: {
            json_t *v = json_pack("[bb]", 1, 0);
            rc = v ? add_lit(c, x, v, JC_NONE) : oom(c);
            break;
        }
        case T_NULL: {
            json_t *v = json_pack("[n]");
            rc = v ? add_lit(c, x, v, JC_NONE) : oom(c);
            break;
        }
        }
        if (rc) return -1;
        alts[na++] = x;
    }
    if (!single) {
        c->s->nodes[id].kind = K_ALT;
        c->s->nodes[id].off = add_list(c, alts, na);
        c->s->nodes[id].n = na;
    }
    return c->failed ? -1 : 0;
}

/* Resolves a local JSON pointer ("#", "#/$defs/x"); writes its path. */
static json_t *resolve_ref(cc *c, const char *ref, char *path, size_t cap) {
    if (ref[0] != '#') return NULL;
    json_t *at = c->doc;
    snprintf(path, cap, "$");
    const char *p = ref + 1;
    if (*p && *p != '/') return NULL;
    while (*p == '/') {
        p++;
        char seg[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = *++p == '0' ? '~' : '/';
            if (n + 1 < sizeof seg) seg[n++] = ch;
        }
        seg[n] = '\0';
        if (json_is_object(at)) {
            at = json_object_get(at, seg);
        } else if (json_is_array(at)) {
            char *end;
            const unsigned long i = strtoul(seg, &end, 10);
            at = (*seg && !*end) ? json_array_get(at, i) : NULL;
        } else {
            at = NULL;
        }
        if (!at) return NULL;
        const size_t l = strlen(path);
        snprintf(path + l, cap - l, ".%s", seg);
    }
    return at;
}

static uint32_t compile(cc *c, json_t *js, const char *path) {
    if (c->failed) return JC_NONE;
    if (json_is_true(js)) return B_ANY;
    if (json_is_false(js)) return B_NEVER;
    if (!json_is_object(js)) return refuse(c, "the schema at %s is not an object or a boolean", path), JC_NONE;
    for (size_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].js == js) return c->memo[i].id;
    if (++c->depth > 200) return refuse(c, "the schema at %s is nested too deeply", path), JC_NONE;
    const uint32_t id = new_node(c, K_NEVER);
    memo_ent *me = id == JC_NONE ? NULL : grow_array(c->memo, &c->cap_memo, c->n_memo, sizeof *me, 32);
    if (!me) {
        if (id != JC_NONE) oom(c);
        return JC_NONE;
    }
    c->memo = me;
    c->memo[c->n_memo++] = (memo_ent){js, id};

    const char *k;
    json_t *v;
    const char *comb = NULL;
    int rc = 0;
    json_object_foreach(js, k, v) {
        if (in_list(REFUSED, k)) {
            if (c->lenient) {
                drop(c, "'%s' at %s", k, path);
                continue;
            }
            rc = refuse(c, "'%s' at %s is not supported by the constraint", k, path);
            break;
        }
        if (!strcmp(k, "$ref") || !strcmp(k, "anyOf") || !strcmp(k, "oneOf") || !strcmp(k, "allOf")) {
            if (comb) {
                if (c->lenient) { /* the first one stays */
                    drop(c, "'%s' at %s (beside '%s')", k, path, comb);
                    continue;
                }
                rc = refuse(c, "'%s' at %s together with '%s' is not supported by the constraint", k, path, comb);
                break;
            }
            comb = k;
        }
    }
    const json_t *cst = json_object_get(js, "const"), *en = json_object_get(js, "enum");
    if (rc == 0 && en && !json_is_array(en)) rc = refuse(c, "'enum' at %s must be an array", path);
    if (rc == 0 && (cst || en)) {
        /* literals, filtered by everything else in the schema */
        json_t *vals = json_array();
        if (!vals) rc = oom(c);
        for (size_t i = 0; rc == 0 && i < (en ? json_array_size(en) : 1); i++) {
            json_t *x = en ? json_array_get(en, i) : (json_t *)cst;
            if (en && cst && !json_equal(x, (json_t *)cst)) continue;
            json_array_append(vals, x);
        }
        uint32_t filter = JC_NONE;
        if (rc == 0 && (comb || has_any(js, TYPED) || known_format(js))) {
            json_t *rest = json_copy(js);
            json_t **ow = rest ? grow_array(c->owned, &c->cap_owned, c->n_owned, sizeof *ow, 8) : NULL;
            if (!ow) {
                json_decref(rest);
                rc = oom(c);
            } else {
                c->owned = ow;
                c->owned[c->n_owned++] = rest; /* lives until the end: the memo holds its address */
                json_object_del(rest, "enum");
                json_object_del(rest, "const");
                filter = compile(c, rest, path);
                if (filter == JC_NONE) rc = -1;
            }
        }
        if (rc == 0) rc = add_lit(c, id, vals, filter);
        else json_decref(vals);
    } else if (rc == 0 && comb) {
        for (int i = 0; TYPED[i] && rc == 0; i++)
            if (json_object_get(js, TYPED[i])) {
                if (c->lenient) drop(c, "'%s' at %s (beside '%s')", TYPED[i], path, comb);
                else
                    rc = refuse(c, "'%s' at %s together with '%s' is not supported by the constraint", comb, path,
                                TYPED[i]);
            }
        json_t *list = json_object_get(js, comb);
        char sub[PATH_CAP];
        if (rc == 0 && !strcmp(comb, "$ref")) {
            char tpath[PATH_CAP];
            json_t *target =
                json_is_string(list) ? resolve_ref(c, json_string_value(list), tpath, sizeof tpath) : NULL;
            if (!json_is_string(list) || json_string_value(list)[0] != '#')
                rc = refuse(c, "'$ref' at %s: only local references (#/...) are supported by the constraint", path);
            else if (!target)
                rc = refuse(c, "'$ref' at %s: '%s' does not lead to a schema", path, json_string_value(list));
            else {
                uint32_t t = compile(c, target, tpath);
                if (t == JC_NONE) rc = -1;
                else {
                    c->s->nodes[id].kind = K_ALT;
                    c->s->nodes[id].off = add_list(c, &t, 1);
                    c->s->nodes[id].n = 1;
                }
            }
        } else if (rc == 0) {
            size_t n = json_is_array(list) ? json_array_size(list) : 0;
            if (!n) rc = refuse(c, "'%s' at %s must be a non-empty array of schemas", comb, path);
            else if (!strcmp(comb, "allOf") && n > 1 && c->lenient) {
                drop(c, "'allOf' at %s (all but its first schema)", path);
                n = 1;
            } else if (!strcmp(comb, "allOf") && n > 1)
                rc = refuse(c, "'allOf' at %s with more than one schema is not supported by the constraint", path);
            uint32_t *ids = rc ? NULL : calloc(n, sizeof *ids);
            if (rc == 0 && !ids) rc = oom(c);
            for (size_t i = 0; rc == 0 && i < n; i++) {
                child_path(sub, sizeof sub, path, ".%s", comb, 0);
                const size_t l = strlen(sub);
                snprintf(sub + l, sizeof sub - l, "[%zu]", i);
                ids[i] = compile(c, json_array_get(list, i), sub);
                if (ids[i] == JC_NONE) rc = -1;
            }
            if (rc == 0) {
                const uint32_t off = add_list(c, ids, (uint32_t)n);
                c->s->nodes[id].kind = K_ALT;
                c->s->nodes[id].off = off;
                c->s->nodes[id].n = (uint32_t)n;
            }
            free(ids);
        }
    } else if (rc == 0) {
        rc = compile_typed(c, js, path, id);
    }
    c->depth--;
    return rc || c->failed ? JC_NONE : id;
}

/* ---- literal filtering ------------------------------------------------------ */
static bool num_equal(const json_t *a, const json_t *b) {
    if (json_is_integer(a) && json_is_integer(b)) return json_integer_value(a) == json_integer_value(b);
    return json_number_value(a) == json_number_value(b);
}

static bool value_equal(const json_t *a, const json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return num_equal(a, b);
    if (json_typeof(a) != json_typeof(b)) return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!value_equal(json_array_get(a, i), json_array_get(b, i))) return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return false;
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)a, k, x) {
            const json_t *y = json_object_get(b, k);
            if (!y || !value_equal(x, y)) return false;
        }
        return true;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

static size_t utf8_chars(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) k++;
    return k;
}

static bool accepts(const cc *c, uint32_t id, const json_t *v, int guard) {
    if (guard > 64) return false;
    const jc_schema *s = c->s;
    const jc_node *n = &s->nodes[id];
    switch (n->kind) {
    case K_NEVER: return false;
    case K_ALT:
        for (uint32_t i = 0; i < n->n; i++)
            if (accepts(c, s->alts[n->off + i], v, guard + 1)) return true;
        return false;
    case K_OBJ: {
        if (!json_is_object(v)) return false;
        const char *k;
        json_t *x;
        uint32_t found = 0; /* required keys present */
        json_object_foreach((json_t *)v, k, x) {
            strbuf kb = {0};
            ser_string(&kb, k, strlen(k));
            uint32_t node = n->extra;
            for (uint32_t i = 0; i < n->n; i++) {
                const jc_prop *p = &s->props[n->off + i];
                if (p->key_len == kb.n && !memcmp(s->bytes + p->key_off, kb.p, kb.n)) {
                    node = p->node;
                    found += i < n->nreq;
                }
            }
            free(kb.p);
            if (node == JC_NONE || !accepts(c, node, x, 0)) return false;
        }
        return found == n->nreq;
    }
    case K_ARR: {
        if (!json_is_array(v)) return false;
        const size_t len = json_array_size(v);
        if (len < n->min || (n->max != JC_NONE && len > n->max)) return false;
        for (size_t i = 0; i < len; i++) {
            const uint32_t node = i < n->n ? s->alts[n->off + i] : n->extra;
            if (node == JC_NONE || !accepts(c, node, json_array_get(v, i), 0)) return false;
        }
        return true;
    }
    case K_STR: {
        if (!json_is_string(v)) return false;
        const size_t k = utf8_chars(json_string_value(v), json_string_length(v));
        return str_accepts(s, n, json_string_value(v), json_string_length(v), k);
    }
    case K_NUM: {
        if (!json_is_number(v)) return false;
        if (n->integer && json_is_real(v) && json_real_value(v) != floor(json_real_value(v))) return false;
        if (!n->bounded) return true;
        const jc_i128 lo = scaled(v, true, n->integer), hi = scaled(v, false, n->integer);
        return lo >= n->lo && hi <= n->hi && lo == hi;
    }
    case K_LIT:
        for (size_t i = 0; i < c->n_pend; i++) {
            const pend_lit *p = &c->pend[i];
            if (p->node != id) continue;
            for (size_t j = 0; j < json_array_size(p->values); j++)
                if (value_equal(json_array_get(p->values, j), v))
                    return p->filter == JC_NONE || accepts(c, p->filter, v, guard + 1);
            return false;
        }
        return false;
    }
    return false;
}

/* (duplicates are harmless: the trie merges them) */
static int add_lit_str(cc *c, uint32_t node, const char *p, size_t len) {
    lit_str *q = grow_array(c->ls, &c->cap_ls, c->n_ls, sizeof *q, 32);
    if (!q) return oom(c);
    c->ls = q;
    const size_t off = c->lits.n;
    strbuf_put(&c->lits, p, len);
    if (c->lits.oom) return oom(c);
    c->ls[c->n_ls++] = (lit_str){node, (uint32_t)off, (uint32_t)len};
    return 0;
}

static int filter_literals(cc *c) {
    for (size_t i = 0; i < c->n_pend; i++) {
        const pend_lit *p = &c->pend[i];
        for (size_t j = 0; j < json_array_size(p->values); j++) {
            const json_t *v = json_array_get(p->values, j);
            if (p->filter != JC_NONE && !accepts(c, p->filter, v, 0)) continue;
            for (int spaced = 1; spaced >= 0; spaced--) {
                strbuf b = {0};
                ser_value(&b, v, spaced);
                const int rc = b.oom ? oom(c) : add_lit_str(c, p->node, b.p, b.n);
                free(b.p);
                if (rc) return -1;
            }
        }
    }
    return 0;
}

/* ---- flattening choices ---------------------------------------------------- */
typedef struct flat {
    uint32_t *list;
    size_t n, cap;
    uint32_t *lits;
    size_t n_lits, cap_lits;
    uint32_t *seen; /* stamp per node */
    uint32_t stamp;
} flat;

static int flat_visit(cc *c, flat *f, uint32_t id) {
    if (f->seen[id] == f->stamp) return 0;
    f->seen[id] = f->stamp;
    const jc_node *n = &c->s->nodes[id];
    if (n->kind == K_NEVER) return 0;
    if (n->kind == K_ALT) {
        for (uint32_t i = 0; i < n->n; i++)
            if (flat_visit(c, f, c->s->alts[n->off + i])) return -1;
        return 0;
    }
    uint32_t **arr = n->kind == K_LIT ? &f->lits : &f->list;
    size_t *cnt = n->kind == K_LIT ? &f->n_lits : &f->n, *cap = n->kind == K_LIT ? &f->cap_lits : &f->cap;
    uint32_t *p = grow_array(*arr, cap, *cnt, sizeof *p, 8);
    if (!p) return oom(c);
    *arr = p;
    p[(*cnt)++] = id;
    return 0;
}

static int flatten(cc *c) {
    jc_schema *s = c->s;
    const uint32_t n0 = s->n_nodes;
    flat f = {0};
    /* room for the merged literal nodes made below (one per choice at most) */
    f.seen = calloc(2 * (size_t)n0 + 1, sizeof *f.seen);
    if (!f.seen) return oom(c);
    int rc = 0;
    for (uint32_t id = 0; id < n0 && rc == 0; id++) {
        if (s->nodes[id].kind != K_ALT) continue;
        f.stamp++;
        f.n = f.n_lits = 0;
        if ((rc = flat_visit(c, &f, id))) break;
        uint32_t lit = JC_NONE;
        if (f.n_lits == 1) lit = f.lits[0];
        else if (f.n_lits > 1) { /* one trie for all the literal alternatives */
            if ((lit = new_node(c, K_LIT)) == JC_NONE) {
                rc = -1;
                break;
            }
            for (size_t i = 0; i < f.n_lits && rc == 0; i++)
                for (size_t j = 0, nls = c->n_ls; j < nls && rc == 0; j++)
                    if (c->ls[j].node == f.lits[i]) {
                        /* copy out first: add_lit_str may move c->lits */
                        const lit_str l = c->ls[j];
                        char *tmp = malloc(l.len + 1);
                        if (!tmp) {
                            rc = oom(c);
                            break;
                        }
                        memcpy(tmp, c->lits.p + l.off, l.len);
                        rc = add_lit_str(c, lit, tmp, l.len);
                        free(tmp);
                    }
        }
        if (rc) break;
        if (lit != JC_NONE) {
            uint32_t *p = grow_array(f.list, &f.cap, f.n, sizeof *p, 8);
            if (!p) {
                rc = oom(c);
                break;
            }
            f.list = p;
            f.list[f.n++] = lit;
        }
        const uint32_t off = add_list(c, f.list, (uint32_t)f.n);
        if (c->failed) {
            rc = -1;
            break;
        }
        s->nodes[id].off = off;
        s->nodes[id].n = (uint32_t)f.n;
    }
    free(f.list);
    free(f.lits);
    free(f.seen);
    return rc;
}

/* ---- nesting needed, pruning -------------------------------------------- */
static int32_t max32(int32_t a, int32_t b) { return a > b ? a : b; }

static int min_depths(cc *c) {
    jc_schema *s = c->s;
    bool *has = calloc(s->n_nodes + 1, sizeof *has); /* literal nodes with values */
    if (!has) return oom(c);
    for (size_t i = 0; i < c->n_ls; i++) has[c->ls[i].node] = true;
    for (uint32_t id = 0; id < s->n_nodes; id++) {
        jc_node *n = &s->nodes[id];
        n->mind = JC_INF;
        if (n->kind == K_STR) n->mind = str_feasible(s, n) ? 0 : JC_INF;
        if (n->kind == K_NUM) n->mind = (!n->bounded || n->lo <= n->hi) ? 0 : JC_INF;
        if (n->kind == K_LIT) n->mind = has[id] ? 0 : JC_INF;
    }
    free(has);
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t id = 0; id < s->n_nodes; id++) {
            jc_node *n = &s->nodes[id];
            int32_t d = n->mind;
            if (n->kind == K_ALT) {
                for (uint32_t i = 0; i < n->n; i++) {
                    const int32_t x = s->nodes[s->alts[n->off + i]].mind;
                    if (x < d) d = x;
                }
            } else if (n->kind == K_OBJ) {
                int32_t m = 0;
                for (uint32_t i = 0; i < n->nreq; i++) m = max32(m, s->nodes[s->props[n->off + i].node].mind);
                d = m >= JC_INF ? JC_INF : m + 1;
            } else if (n->kind == K_ARR) {
                int32_t m = 0;
                if (n->max != JC_NONE && n->min > n->max) m = JC_INF;
                for (uint32_t i = 0; i < n->min && m < JC_INF; i++) {
                    const uint32_t it = i < n->n ? s->alts[n->off + i] : n->extra;
                    m = max32(m, it == JC_NONE ? JC_INF : s->nodes[it].mind);
                    if (i >= n->n) break; /* the rest are all n->extra */
                }
                d = m >= JC_INF ? JC_INF : m + 1;
            }
            if (d > JC_INF) d = JC_INF;
            if (d < n->mind) {
                n->mind = d;
                changed = true;
            }
        }
    }
    /* what needs more than the cap is as good as nothing */
    for (uint32_t id = 0; id < s->n_nodes; id++)
        if (s->nodes[id].mind > JC_MAX_DEPTH) s->nodes[id].mind = JC_INF;
    return 0;
}

static void prune(cc *c) {
    jc_schema *s = c->s;
    for (uint32_t id = 0; id < s->n_nodes; id++) {
        jc_node *n = &s->nodes[id];
        if (n->kind == K_ALT) {
            uint32_t k = 0;
            for (uint32_t i = 0; i < n->n; i++)
                if (s->nodes[s->alts[n->off + i]].mind < JC_INF) s->alts[n->off + k++] = s->alts[n->off + i];
            n->n = k;
        } else if (n->kind == K_OBJ) {
            uint32_t k = n->nreq;
            for (uint32_t i = n->nreq; i < n->n; i++)
                if (s->nodes[s->props[n->off + i].node].mind < JC_INF) s->props[n->off + k++] = s->props[n->off + i];
            n->n = k;
            if (n->extra != JC_NONE && s->nodes[n->extra].mind >= JC_INF) n->extra = JC_NONE;
            n->max_opt_mind = 0;
            for (uint32_t i = n->nreq; i < n->n; i++)
                n->max_opt_mind = max32(n->max_opt_mind, s->nodes[s->props[n->off + i].node].mind);
        } else if (n->kind == K_ARR) {
            if (n->extra != JC_NONE && s->nodes[n->extra].mind >= JC_INF) n->extra = JC_NONE;
        }
    }
}

/* ---- tries ---------------------------------------------------------------- */
static uint32_t tb_node(cc *c, uint32_t depth) {
    bnode *p = grow_array(c->bn, &c->cap_bn, c->n_bn, sizeof *p, 64);
    if (!p) return oom(c), JC_NONE;
    c->bn = p;
    c->bn[c->n_bn] = (bnode){JC_NONE, depth, -1, -1};
    return (uint32_t)c->n_bn++;
}

static int tb_insert(cc *c, uint32_t root, const char *str, size_t len, int32_t term) {
    uint32_t at = root;
    if (c->bn[at].maxj < term) c->bn[at].maxj = term;
    for (size_t i = 0; i < len; i++) {
        const uint8_t b = (uint8_t)str[i];
        uint32_t e = c->bn[at].first, next = JC_NONE;
        for (; e != JC_NONE; e = c->be[e].next)
            if (c->be[e].byte == b) {
                next = c->be[e].child;
                break;
            }
        if (next == JC_NONE) {
            if ((next = tb_node(c, c->bn[at].depth + 1)) == JC_NONE) return -1;
            bedge *p = grow_array(c->be, &c->cap_be, c->n_be, sizeof *p, 64);
            if (!p) return oom(c);
            c->be = p;
            c->be[c->n_be] = (bedge){next, c->bn[at].first, b};
            c->bn[at].first = (uint32_t)c->n_be++;
        }
        at = next;
        if (c->bn[at].maxj < term) c->bn[at].maxj = term;
    }
    if (c->bn[at].term < 0) c->bn[at].term = term;
    return 0;
}

static int cmp_edge(const void *a, const void *b) {
    return (int)((const jc_tedge *)a)->byte - (int)((const jc_tedge *)b)->byte;
}

static int build_tries(cc *c) {
    jc_schema *s = c->s;
    for (uint32_t id = 0; id < s->n_nodes; id++) {
        jc_node *n = &s->nodes[id];
        if (n->kind == K_LIT) {
            if ((n->trie = tb_node(c, 0)) == JC_NONE) return -1;
        } else if (n->kind == K_OBJ && n->n > 0) {
            if ((n->trie = tb_node(c, 0)) == JC_NONE) return -1;
            for (uint32_t i = 0; i < n->n; i++) {
                const jc_prop *p = &s->props[n->off + i];
                if (tb_insert(c, n->trie, s->bytes + p->key_off, p->key_len, (int32_t)i)) return -1;
            }
        }
    }
    for (size_t i = 0; i < c->n_ls; i++) {
        const lit_str *l = &c->ls[i];
        if (tb_insert(c, s->nodes[l->node].trie, c->lits.p + l->off, l->len, 0)) return -1;
    }
    s->tn = calloc(c->n_bn + 1, sizeof *s->tn);
    s->te = calloc(c->n_be + 1, sizeof *s->te);
    if (!s->tn || !s->te) return oom(c);
    uint32_t ne = 0;
    for (size_t i = 0; i < c->n_bn; i++) {
        const uint32_t off = ne;
        for (uint32_t e = c->bn[i].first; e != JC_NONE; e = c->be[e].next)
            s->te[ne++] = (jc_tedge){c->be[e].child, c->be[e].byte};
        qsort(s->te + off, ne - off, sizeof *s->te, cmp_edge);
        s->tn[i] = (jc_tnode){off, ne - off, c->bn[i].term, c->bn[i].maxj, c->bn[i].depth};
    }
    s->n_tn = (uint32_t)c->n_bn;
    s->n_te = ne;
    return 0;
}

/* ---- entry points ------------------------------------------------------------- */
static int builtins(cc *c) {
    for (int i = 0; i < B_N; i++)
        if (new_node(c, K_NEVER) == JC_NONE) return -1;
    jc_node *nd = c->s->nodes;
    const uint32_t any[] = {B_OBJ, B_ARR, B_STR, B_NUM, B_TFN};
    nd[B_ANY].kind = K_ALT;
    nd[B_ANY].off = add_list(c, any, 5);
    nd[B_ANY].n = 5;
    nd = c->s->nodes;
    nd[B_OBJ].kind = K_OBJ;
    nd[B_OBJ].extra = B_ANY;
    nd[B_ARR].kind = K_ARR;
    nd[B_ARR].extra = B_ANY;
    nd[B_STR].kind = K_STR;
    nd[B_NUM].kind = K_NUM;
    json_t *tfn = json_pack("[bbn]", 1, 0);
    return c->failed ? -1 : tfn ? add_lit(c, B_TFN, tfn, JC_NONE) : oom(c);
}

static jc_schema *compile_text(const char *json, size_t len, bool lenient, char **dropped, ph_err *err) {
    if (dropped) *dropped = NULL;
    json_error_t je;
    json_t *doc = json_loadb(json, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!doc) {
        err_setc(err, PH_ERR_INPUT, "the schema is not valid JSON: %s (line %d, column %d)", je.text, je.line,
                 je.column);
        return NULL;
    }
    cc c = {0};
    c.err = err;
    c.doc = doc;
    c.lenient = lenient;
    c.s = calloc(1, sizeof *c.s);
    if (!c.s) {
        json_decref(doc);
        err_set(err, "json schema: out of memory");
        return NULL;
    }
    int rc = builtins(&c);
    if (rc == 0) {
        c.s->root = compile(&c, doc, "$");
        rc = c.s->root == JC_NONE ? -1 : 0;
    }
    if (rc == 0) rc = filter_literals(&c);
    if (rc == 0) rc = flatten(&c);
    if (rc == 0) rc = min_depths(&c);
    if (rc == 0) {
        prune(&c);
        if (c.s->nodes[c.s->root].mind >= JC_INF)
            rc = refuse(&c,
                        "no value of the schema at $ can be written: it is unsatisfiable, or recursive without "
                        "end, or nests deeper than %d",
                        JC_MAX_DEPTH);
    }
    if (rc == 0) rc = build_tries(&c);
    for (size_t i = 0; i < c.n_pend; i++) json_decref(c.pend[i].values);
    free(c.pend);
    for (size_t i = 0; i < c.n_owned; i++) json_decref(c.owned[i]);
    free(c.owned);
    free(c.memo);
    free(c.ls);
    free(c.lits.p);
    free(c.bn);
    free(c.be);
    json_decref(doc);
    if (rc == 0 && c.dropped.oom) rc = oom(&c);
    if (rc) {
        free(c.dropped.p);
        jc_schema_free(c.s);
        return NULL;
    }
    if (dropped) *dropped = c.dropped.n ? c.dropped.p : NULL;
    if (!dropped || !c.dropped.n) free(c.dropped.p);
    return c.s;
}

jc_schema *jc_schema_compile(const char *json, size_t len, ph_err *err) {
    return compile_text(json, len, false, NULL, err);
}

jc_schema *jc_schema_compile_lenient(const char *json, size_t len, char **dropped, ph_err *err) {
    return compile_text(json, len, true, dropped, err);
}

void jc_schema_free(jc_schema *s) {
    if (!s) return;
    free(s->nodes);
    free(s->alts);
    free(s->props);
    free(s->bytes);
    free(s->tn);
    free(s->te);
    for (uint32_t i = 0; i < s->n_rx; i++) {
        rx_dfa_free(s->rx[i].dfa);
        free(s->rx[i].lens);
    }
    free(s->rx);
    free(s);
}

int ph_schema_check(const char *schema, size_t len, ph_err *err) {
    jc_schema *s = jc_schema_compile(schema, len, err);
    if (!s) return -1;
    jc_schema_free(s);
    return 0;
}
