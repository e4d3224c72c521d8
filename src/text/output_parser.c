/* The answer parser (see output_parser.h): a byte-at-a-time state machine.
 * The text states (start, reasoning, content, after a call) hold back a
 * partial tag; the call state keeps the call's text from <tool_call> on and
 * reads it with the family's call syntax. A call that breaks gives the
 * text it cannot account for back to be read again as content (after
 * "<tool_call>" when its name had not come out), so text is never lost and
 * a second <tool_call> inside a broken one is still seen. */
#include "text/output_parser.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

enum { P_START, P_REASON, P_CONTENT, P_CALL, P_AFTER_CALL };
/* hermes: {"name": "NAME", "arguments": ARGS} */
enum { J_OPEN, J_KEY0, J_KEYC, J_KEY, J_COLON, J_VAL0, J_NAME, J_ARGS, J_SKIP, J_NEXT, J_TAIL };
/* xml: <function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function> */
enum { X_OPEN, X_FNAME, X_BODY, X_PNAME, X_PVAL0, X_PVAL, X_TAIL };

#define NONE ((size_t)-1)

static const char T_THINK[] = "<think>", T_ETHINK[] = "</think>", T_CALL[] = "<tool_call>",
                  T_ECALL[] = "</tool_call>", T_FUNC[] = "<function=", T_EFUNC[] = "</function>",
                  T_PARAM[] = "<parameter=", T_EPARAM[] = "</parameter>", T_NEPARAM[] = "\n</parameter>";
#define CALL_LEN (sizeof T_CALL - 1)

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* ---- JSON scanning ---------------------------------------------------------- */

enum {
    JS_VALUE,
    JS_STR,
    JS_STR_ESC,
    JS_STR_U,
    JS_NUM,
    JS_LIT,
    JS_AFTER,
    JS_KEY0,
    JS_KEYC,
    JS_COLON,
    JS_ARR0,
    JS_DONE
};
enum { JR_MORE, JR_END, JR_END_BEFORE, JR_ERR };
enum { N_MINUS = 1, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

static void jscan_init(jscan *s) { memset(s, 0, sizeof *s); }

static int num_next(int st, char c) {
    bool d = c >= '0' && c <= '9', e = c == 'e' || c == 'E';
    switch (st) {
    case N_MINUS: return c == '0' ? N_ZERO : d ? N_INT : -1;
    case N_ZERO: return c == '.' ? N_DOT : e ? N_E : -1;
    case N_INT: return d ? N_INT : c == '.' ? N_DOT : e ? N_E : -1;
    case N_DOT: return d ? N_FRAC : -1;
    case N_FRAC: return d ? N_FRAC : e ? N_E : -1;
    case N_E: return c == '+' || c == '-' ? N_ESIGN : d ? N_EXP : -1;
    case N_ESIGN:
    case N_EXP: return d ? N_EXP : -1;
    }
    return -1;
}

static bool top_is_object(const jscan *s) {
    int32_t d = s->depth - 1;
    return (s->stack[d / 64] >> (d % 64)) & 1;
}

static bool push(jscan *s, bool object) {
    if (s->depth >= 512) return false;
    int32_t d = s->depth++;
    if (object) s->stack[d / 64] |= (uint64_t)1 << (d % 64);
    else s->stack[d / 64] &= ~((uint64_t)1 << (d % 64));
    return true;
}

static int value_done(jscan *s) {
    if (s->depth == 0) {
        s->st = JS_DONE;
        return JR_END;
    }
    s->st = JS_AFTER;
    return JR_MORE;
}

/* Reads one byte of a JSON value: JR_MORE (taken, the value goes on),
 * JR_END (taken, the value is complete), JR_END_BEFORE (the value was
 * complete before c, e.g. a number; c not taken), JR_ERR (c cannot come). */
static int jscan_byte(jscan *s, char ch) {
    unsigned char c = (unsigned char)ch;
    switch (s->st) {
    case JS_ARR0:
        if (is_ws(ch)) return JR_MORE;
        if (c == ']') {
            s->depth--;
            return value_done(s);
        }
        s->st = JS_VALUE;
        /* fall through */
    case JS_VALUE:
        if (is_ws(ch)) return JR_MORE;
        switch (c) {
        case '{':
            if (!push(s, true)) return JR_ERR;
            s->st = JS_KEY0;
            return JR_MORE;
        case '[':
            if (!push(s, false)) return JR_ERR;
            s->st = JS_ARR0;
            return JR_MORE;
        case '"':
            s->st = JS_STR;
            s->in_key = false;
            return JR_MORE;
        case '-':
            s->num = N_MINUS;
            s->st = JS_NUM;
            return JR_MORE;
        case 't': s->lit = "true"; break;
        case 'f': s->lit = "false"; break;
        case 'n': s->lit = "null"; break;
        default:
            if (c >= '0' && c <= '9') {
                s->num = c == '0' ? N_ZERO : N_INT;
                s->st = JS_NUM;
                return JR_MORE;
            }
            return JR_ERR;
        }
        s->lit_i = 1;
        s->st = JS_LIT;
        return JR_MORE;
    case JS_LIT:
        if (ch != s->lit[s->lit_i]) return JR_ERR;
        if (!s->lit[++s->lit_i]) return value_done(s);
        return JR_MORE;
    case JS_STR:
        if (c == '"') {
            if (s->in_key) {
                s->in_key = false;
                s->st = JS_COLON;
                return JR_MORE;
            }
            return value_done(s);
        }
        if (c == '\\') s->st = JS_STR_ESC;
        else if (c < 0x20) return JR_ERR;
        return JR_MORE;
    case JS_STR_ESC:
        if (c == 'u') {
            s->u_left = 4;
            s->st = JS_STR_U;
        } else if (c && strchr("\"\\/bfnrt", c)) {
            s->st = JS_STR;
        } else {
            return JR_ERR;
        }
        return JR_MORE;
    case JS_STR_U:
        if (!isxdigit(c)) return JR_ERR;
        if (--s->u_left == 0) s->st = JS_STR;
        return JR_MORE;
    case JS_NUM: {
        int next = num_next(s->num, ch);
        if (next > 0) {
            s->num = (uint8_t)next;
            return JR_MORE;
        }
        if (s->num != N_ZERO && s->num != N_INT && s->num != N_FRAC && s->num != N_EXP) return JR_ERR;
        if (s->depth == 0) {
            s->st = JS_DONE;
            return JR_END_BEFORE;
        }
        s->st = JS_AFTER;
        return jscan_byte(s, ch);
    }
    case JS_AFTER:
        if (is_ws(ch)) return JR_MORE;
        if (c == ',') {
            s->st = top_is_object(s) ? JS_KEYC : JS_VALUE;
            return JR_MORE;
        }
        if (c == (top_is_object(s) ? '}' : ']')) {
            s->depth--;
            return value_done(s);
        }
        return JR_ERR;
    case JS_KEY0:
    case JS_KEYC:
        if (is_ws(ch)) return JR_MORE;
        if (c == '"') {
            s->st = JS_STR;
            s->in_key = true;
            return JR_MORE;
        }
        if (c == '}' && s->st == JS_KEY0) {
            s->depth--;
            return value_done(s);
        }
        return JR_ERR;
    case JS_COLON:
        if (is_ws(ch)) return JR_MORE;
        if (c != ':') return JR_ERR;
        s->st = JS_VALUE;
        return JR_MORE;
    case JS_DONE: return JR_END_BEFORE;
    }
    return JR_ERR;
}

/* ---- output ---------------------------------------------------------------- */

static void flush(out_parser *p) {
    if (p->run.n) p->fn(p->ud, p->run_kind, p->run_call, p->run.p, p->run.n);
    p->run.n = 0;
}

static void emit(out_parser *p, out_kind k, const char *s, size_t n) {
    if (!n) return;
    int32_t call = k == OUT_ARGS ? p->n_calls - 1 : -1;
    if (p->run.n && (k != p->run_kind || call != p->run_call)) flush(p);
    p->run_kind = k;
    p->run_call = call;
    strbuf_put(&p->run, s, n);
    if (p->run.oom) { /* pass it on unmerged */
        p->run.oom = false;
        flush(p);
        p->fn(p->ud, k, call, s, n);
    }
}

static void emits(out_parser *p, out_kind k, const char *s) { emit(p, k, s, strlen(s)); }

static void emit_txt(out_parser *p, out_kind k, strbuf *t) {
    if (t->n) emit(p, k, t->p, t->n);
    t->n = 0;
}

/* Gives text back to be read again before the rest. */
static void give_back(out_parser *p, const char *s, size_t n) { strbuf_put(&p->back, s, n); }

/* ---- tags in text ------------------------------------------------------------ */

/* c extends the held partial tag: returns the tag it completes, NULL while
 * it is still partial (c held), or "" when it cannot be any of tags (c not
 * held). */
static const char *hold_step(out_parser *p, char c, const char *a, const char *b) {
    const char *tags[2] = {a, b};
    bool prefix = false;
    for (int i = 0; i < 2; i++) {
        const char *t = tags[i];
        if (!t || strlen(t) <= (size_t)p->n_hold || memcmp(t, p->hold, (size_t)p->n_hold) || t[p->n_hold] != c)
            continue;
        if (!t[p->n_hold + 1]) {
            p->n_hold = 0;
            return t;
        }
        prefix = true;
    }
    if (!prefix) return "";
    p->hold[p->n_hold++] = c;
    return NULL;
}

static void hold_start(out_parser *p, char c) {
    p->hold[0] = c;
    p->n_hold = 1;
}

static void emit_hold(out_parser *p, out_kind k) {
    emit(p, k, p->hold, (size_t)p->n_hold);
    p->n_hold = 0;
}

/* ---- calls ------------------------------------------------------------------- */

/* A call opens after content: the held whitespace is content but for the
 * template's separator at its end, which waits with the call (dropped when
 * its name comes out, given back if it breaks first). */
static void keep_separator(out_parser *p) {
    const size_t k = strlen(p->sep);
    if (p->ws.n < k || memcmp(p->ws.p + p->ws.n - k, p->sep, k) != 0) {
        emit_txt(p, OUT_CONTENT, &p->ws);
        return;
    }
    if (p->ws.n > k) emit(p, OUT_CONTENT, p->ws.p, p->ws.n - k);
    memmove(p->ws.p, p->ws.p + p->ws.n - k, k);
    p->ws.n = k;
}

static void begin_call(out_parser *p) {
    p->call_in_reasoning = p->st == P_REASON;
    p->st = P_CALL;
    p->body.n = 0;
    strbuf_puts(&p->body, T_CALL);
    p->cst = p->syntax == CHAT_CALLS_JSON ? J_OPEN : X_OPEN;
    p->header_sent = p->have_name = p->have_args = p->args_string = p->closed = false;
    p->key_name = p->key_args = false;
    p->tool = -1;
    p->mark = CALL_LEN;
    p->tok = NONE;
    p->n_params = 0;
}

static void append(out_parser *p, char c) { strbuf_putc(&p->body, c); }

static int32_t find_tool(const out_parser *p, const char *name, size_t n) {
    for (size_t i = 0; i < p->n_tools; i++)
        if (p->tools[i].name && strlen(p->tools[i].name) == n && !memcmp(p->tools[i].name, name, n))
            return (int32_t)i;
    return -1;
}

static void send_header(out_parser *p) {
    flush(p);
    const char *name = p->tools[p->tool].name;
    p->fn(p->ud, OUT_CALL, p->n_calls, name, strlen(name));
    p->n_calls++;
    p->header_sent = true;
    p->ws.n = 0;
}

static void send_end(out_parser *p) {
    flush(p);
    p->fn(p->ud, OUT_CALL_END, p->n_calls - 1, "", 0);
}

/* The call cannot be read on. Before its name came out, it is content:
 * "<tool_call>" now and the rest read again. After, it ends here and what
 * it did not account for is read again as content. */
static void call_broken(out_parser *p) {
    if (!p->header_sent) { /* text of the reasoning or content it interrupted */
        emit_txt(p, OUT_CONTENT, &p->ws);
        emits(p, p->call_in_reasoning ? OUT_REASONING : OUT_CONTENT, T_CALL);
        if (p->body.n > CALL_LEN) give_back(p, p->body.p + CALL_LEN, p->body.n - CALL_LEN);
        p->st = p->call_in_reasoning ? P_REASON : P_CONTENT;
        p->skip_ws = false;
        return;
    }
    if (p->syntax == CHAT_CALLS_XML && !p->closed) emits(p, OUT_ARGS, "}");
    send_end(p);
    if (p->body.n > p->mark) give_back(p, p->body.p + p->mark, p->body.n - p->mark);
    p->st = p->closed ? P_AFTER_CALL : P_CONTENT;
    p->skip_ws = false;
}

static void call_done(out_parser *p) {
    send_end(p);
    p->st = P_AFTER_CALL;
}

/* The closing tag after a call (ws, then lit); returns whether c was taken. */
static bool tail_step(out_parser *p, char c) {
    if (p->tok == NONE) {
        if (is_ws(c)) {
            append(p, c);
            return true;
        }
        if (c != '<') {
            call_broken(p);
            return false;
        }
        p->tok = p->body.n;
    }
    size_t have = p->body.n - p->tok;
    if (T_ECALL[have] != c) {
        call_broken(p);
        return false;
    }
    append(p, c);
    if (!T_ECALL[have + 1]) call_done(p);
    return true;
}

/* A JSON string token in the body, decoded; NULL if it is not one. */
static json_t *decode_string(out_parser *p, size_t from) {
    json_t *v = tool_json_parse(p->body.p + from, p->body.n - from);
    if (v && !json_is_string(v)) {
        json_decref(v);
        v = NULL;
    }
    return v;
}

static bool key_is(json_t *k, const char *s) {
    return json_string_length(k) == strlen(s) && !memcmp(json_string_value(k), s, strlen(s));
}

/* hermes: the arguments, when they are complete and the name is out */
static void send_args_whole(out_parser *p) {
    const char *a = p->body.p + p->args_start;
    size_t n = p->args_end - p->args_start;
    if (p->args_string) {
        json_t *s = tool_json_parse(a, n);
        json_t *inner = s ? tool_json_parse(json_string_value(s), json_string_length(s)) : NULL;
        if (inner) emit(p, OUT_ARGS, json_string_value(s), json_string_length(s));
        else emit(p, OUT_ARGS, a, n);
        json_decref(inner);
        json_decref(s);
    } else {
        emit(p, OUT_ARGS, a, n);
    }
}

static void args_end(out_parser *p) {
    p->have_args = true;
    p->args_end = p->body.n;
    if (p->header_sent) {
        if (p->args_string) send_args_whole(p);
        p->mark = p->body.n;
    }
    p->cst = J_NEXT;
}

static bool close_object(out_parser *p) {
    if (!p->have_name) {
        call_broken(p);
        return true;
    }
    if (!p->have_args) emits(p, OUT_ARGS, "{}");
    p->closed = true;
    p->mark = p->body.n;
    p->cst = J_TAIL;
    p->tok = NONE;
    return true;
}

static bool json_step(out_parser *p, char c) {
    switch (p->cst) {
    case J_OPEN:
        if (is_ws(c)) break;
        if (c != '{') goto broken;
        p->cst = J_KEY0;
        break;
    case J_KEY0:
    case J_KEYC:
        if (is_ws(c)) break;
        if (c == '}' && p->cst == J_KEY0) {
            append(p, c);
            return close_object(p);
        }
        if (c != '"') goto broken;
        p->tok = p->body.n;
        jscan_init(&p->js);
        p->js.st = JS_STR;
        p->cst = J_KEY;
        break;
    case J_KEY:
    case J_NAME: {
        int r = jscan_byte(&p->js, c);
        if (r == JR_ERR) goto broken;
        append(p, c);
        if (r != JR_END) return true;
        json_t *s = decode_string(p, p->tok);
        if (!s) {
            call_broken(p);
            return true;
        }
        if (p->cst == J_KEY) {
            p->key_name = key_is(s, "name");
            p->key_args = key_is(s, "arguments") || key_is(s, "parameters");
            p->cst = J_COLON;
        } else {
            p->tool = find_tool(p, json_string_value(s), json_string_length(s));
            p->have_name = true;
            if (p->tool >= 0) {
                send_header(p);
                if (p->have_args) send_args_whole(p);
                p->mark = p->body.n;
                p->cst = J_NEXT;
            }
        }
        json_decref(s);
        if (p->have_name && p->tool < 0) call_broken(p); /* not a declared tool */
        return true;
    }
    case J_COLON:
        if (is_ws(c)) break;
        if (c != ':') goto broken;
        p->cst = J_VAL0;
        break;
    case J_VAL0:
        if (is_ws(c)) break;
        jscan_init(&p->js);
        if (p->key_name && !p->have_name) {
            if (c != '"') goto broken;
            p->tok = p->body.n;
            p->cst = J_NAME;
        } else if (p->key_args && !p->have_args) {
            p->args_start = p->body.n;
            p->args_string = c == '"';
            p->cst = J_ARGS;
        } else {
            p->cst = J_SKIP;
        }
        return false;
    case J_ARGS:
    case J_SKIP: {
        int r = jscan_byte(&p->js, c);
        if (r == JR_ERR) goto broken;
        if (r == JR_END_BEFORE) {
            if (p->cst == J_ARGS) args_end(p);
            else p->cst = J_NEXT;
            return false;
        }
        append(p, c);
        if (p->cst == J_ARGS && p->header_sent && !p->args_string) {
            emit(p, OUT_ARGS, &c, 1);
            p->mark = p->body.n;
        }
        if (r == JR_END) {
            if (p->cst == J_ARGS) args_end(p);
            else p->cst = J_NEXT;
        }
        return true;
    }
    case J_NEXT:
        if (is_ws(c)) break;
        if (c == ',') {
            p->cst = J_KEYC;
            break;
        }
        if (c != '}') goto broken;
        append(p, c);
        return close_object(p);
    case J_TAIL: return tail_step(p, c);
    }
    append(p, c);
    return true;
broken:
    call_broken(p);
    return false;
}

/* xml: whether the parameter's schema says "string" */
static bool param_is_string(const out_parser *p, const char *name, size_t n) {
    json_t *schema = p->schemas && p->tool >= 0 ? p->schemas[p->tool] : NULL;
    return tool_param_is_string(json_object_getn(json_object_get(schema, "properties"), name, n));
}

/* xml: a non-string value as JSON (Python literals accepted), else a string */
static void send_value(out_parser *p, const char *v, size_t n) {
    size_t a = 0, b = n;
    while (a < b && is_ws(v[a])) a++;
    while (b > a && is_ws(v[b - 1])) b--;
    static const char *const py[][2] = {{"True", "true"}, {"False", "false"}, {"None", "null"}};
    for (size_t i = 0; i < 3; i++)
        if (b - a == strlen(py[i][0]) && !memcmp(v + a, py[i][0], b - a)) {
            emits(p, OUT_ARGS, py[i][1]);
            return;
        }
    p->tmp.n = 0;
    json_t *j = b > a ? tool_json_parse(v + a, b - a) : NULL;
    if (j) tojson_value(&p->tmp, j);
    else tojson_string(&p->tmp, v, n);
    json_decref(j);
    emit_txt(p, OUT_ARGS, &p->tmp);
}

/* The longest end of s[0..n) that could begin a parameter's closing tag. */
static size_t value_holdback(const char *s, size_t n) {
    for (size_t l = sizeof T_NEPARAM - 2; l > 0; l--) {
        if (l > n) continue;
        if (!memcmp(s + n - l, T_NEPARAM, l) || (l < sizeof T_EPARAM - 1 && !memcmp(s + n - l, T_EPARAM, l)))
            return l;
    }
    return 0;
}

/* A literal after optional whitespace: one of a or b (b may be NULL).
 * Returns the literal completed, NULL while partial (c taken), or "" if c
 * cannot come (not taken). */
static const char *lit_step(out_parser *p, char c, const char *a, const char *b) {
    if (p->tok == NONE) {
        if (is_ws(c)) {
            append(p, c);
            return NULL;
        }
        p->tok = p->body.n;
    }
    size_t have = p->body.n - p->tok;
    const char *lits[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        const char *l = lits[i];
        if (!l || strlen(l) <= have || memcmp(l, p->body.p + p->tok, have) || l[have] != c) continue;
        append(p, c);
        if (!l[have + 1]) {
            p->tok = NONE;
            return l;
        }
        return NULL;
    }
    if (have == 0) p->tok = NONE;
    return "";
}

static bool xml_step(out_parser *p, char c) {
    switch (p->cst) {
    case X_OPEN: {
        const char *l = lit_step(p, c, T_FUNC, NULL);
        if (l && !*l) goto broken;
        if (l) {
            p->cst = X_FNAME;
            p->tok = p->body.n;
        }
        return true;
    }
    case X_FNAME:
        if (c == '>') {
            p->tool = find_tool(p, p->body.p + p->tok, p->body.n - p->tok);
            if (p->tool < 0) goto broken;
            append(p, c);
            send_header(p);
            emits(p, OUT_ARGS, "{");
            p->mark = p->body.n;
            p->cst = X_BODY;
            p->tok = NONE;
            return true;
        }
        if (c == '\n' || c == '<' || p->body.n - p->tok > 256) goto broken;
        break;
    case X_BODY: {
        const char *l = lit_step(p, c, T_PARAM, T_EFUNC);
        if (l && !*l) goto broken;
        if (l == T_PARAM) {
            p->cst = X_PNAME;
            p->tok = p->body.n;
        } else if (l == T_EFUNC) {
            emits(p, OUT_ARGS, "}");
            p->closed = true;
            p->mark = p->body.n;
            p->cst = X_TAIL;
        } else if (p->tok == NONE) {
            p->mark = p->body.n; /* whitespace */
        }
        return true;
    }
    case X_PNAME:
        if (c == '>') {
            const char *name = p->body.p + p->tok;
            size_t n = p->body.n - p->tok;
            p->p_string = param_is_string(p, name, n);
            p->tmp.n = 0;
            if (p->n_params++) strbuf_puts(&p->tmp, ", ");
            tojson_string(&p->tmp, name, n);
            strbuf_puts(&p->tmp, ": ");
            if (p->p_string) strbuf_putc(&p->tmp, '"');
            emit_txt(p, OUT_ARGS, &p->tmp);
            append(p, c);
            p->mark = p->body.n;
            p->cst = X_PVAL0;
            return true;
        }
        if (c == '\n' || c == '<' || p->body.n - p->tok > 256) goto broken;
        break;
    case X_PVAL0:
        p->cst = X_PVAL;
        if (c == '\n') {
            append(p, c);
            p->tok = p->v_sent = p->body.n;
            return true;
        }
        p->tok = p->v_sent = p->body.n;
        return false;
    case X_PVAL: {
        append(p, c);
        const char *v = p->body.p + p->tok;
        size_t n = p->body.n - p->tok, end = NONE;
        if (n >= sizeof T_NEPARAM - 1 && !memcmp(v + n - (sizeof T_NEPARAM - 1), T_NEPARAM, sizeof T_NEPARAM - 1))
            end = n - (sizeof T_NEPARAM - 1);
        else if (n >= sizeof T_EPARAM - 1 && !memcmp(v + n - (sizeof T_EPARAM - 1), T_EPARAM, sizeof T_EPARAM - 1))
            end = n - (sizeof T_EPARAM - 1);
        size_t upto = end != NONE ? end : n - value_holdback(v, n);
        if (p->p_string) {
            size_t from = p->v_sent - p->tok;
            if (upto > from) {
                p->tmp.n = 0;
                tojson_escape(&p->tmp, v + from, upto - from);
                emit_txt(p, OUT_ARGS, &p->tmp);
                p->v_sent = p->tok + upto;
            }
            if (end != NONE) emits(p, OUT_ARGS, "\"");
        } else if (end != NONE) {
            send_value(p, v, end);
        }
        if (end != NONE) {
            p->mark = p->body.n;
            p->cst = X_BODY;
            p->tok = NONE;
        }
        return true;
    }
    case X_TAIL: return tail_step(p, c);
    }
    append(p, c);
    return true;
broken:
    call_broken(p);
    return false;
}

/* The answer ended inside a call whose name came out: it keeps what it has. */
static void call_cut(out_parser *p) {
    if (p->syntax == CHAT_CALLS_JSON) {
        if (p->cst == J_ARGS && p->args_string)
            emit(p, OUT_ARGS, p->body.p + p->args_start, p->body.n - p->args_start);
        send_end(p);
        /* what follows the arguments, unless it is only whitespace or the
         * closing tag's beginning */
        size_t i = p->mark;
        while (i < p->body.n && is_ws(p->body.p[i])) i++;
        if (!p->closed && i < p->body.n) give_back(p, p->body.p + p->mark, p->body.n - p->mark);
    } else {
        if (p->cst == X_PVAL0 || p->cst == X_PVAL) {
            if (p->cst == X_PVAL0) p->tok = p->v_sent = p->body.n;
            const char *v = p->body.p + p->tok;
            size_t n = p->body.n - p->tok;
            n -= value_holdback(v, n);
            if (p->p_string) {
                size_t from = p->v_sent - p->tok;
                p->tmp.n = 0;
                if (n > from) tojson_escape(&p->tmp, v + from, n - from);
                strbuf_putc(&p->tmp, '"');
                emit_txt(p, OUT_ARGS, &p->tmp);
            } else {
                send_value(p, v, n);
            }
        }
        if (!p->closed) emits(p, OUT_ARGS, "}");
        send_end(p);
    }
    p->st = p->closed ? P_AFTER_CALL : P_CONTENT;
}

/* The answer ended inside a call whose name had not come out: what it
 * wrote is call markup, which reaches neither content nor reasoning; it
 * is dropped, with the separator that waits with it. */
static void call_cut_unnamed(out_parser *p) {
    p->ws.n = 0;
    p->body.n = 0;
    p->st = p->call_in_reasoning ? P_REASON : P_CONTENT;
    p->skip_ws = false;
}

/* ---- the text states ----------------------------------------------------------- */

static bool step(out_parser *p, char c) {
    const char *t;
    switch (p->st) {
    case P_START: /* only whitespace so far: a <think> here opens reasoning */
        if (p->n_hold) {
            t = hold_step(p, c, T_THINK, p->calls ? T_CALL : NULL);
            if (!t) return true;
            if (t == T_THINK) {
                p->ws.n = 0;
                p->st = P_REASON;
                return true;
            }
            if (t == T_CALL) {
                begin_call(p); /* the whitespace waits for the call's name */
                return true;
            }
            emit_txt(p, OUT_CONTENT, &p->ws);
            emit_hold(p, OUT_CONTENT);
            p->st = P_CONTENT;
            return false;
        }
        if (is_ws(c)) {
            strbuf_putc(&p->ws, c);
            return true;
        }
        if (c == '<') {
            hold_start(p, c);
            return true;
        }
        emit_txt(p, OUT_CONTENT, &p->ws);
        p->st = P_CONTENT;
        return false;
    case P_REASON:
        if (p->n_hold) {
            t = hold_step(p, c, T_ETHINK, p->ends_at_call && p->calls ? T_CALL : NULL);
            if (!t) return true;
            if (t == T_ETHINK) {
                p->st = P_CONTENT;
                p->skip_ws = true;
                return true;
            }
            if (t == T_CALL) {
                begin_call(p);
                return true;
            }
            emit_hold(p, OUT_REASONING);
            return false;
        }
        if (c == '<') hold_start(p, c);
        else emit(p, OUT_REASONING, &c, 1);
        return true;
    case P_CONTENT:
        if (p->n_hold) {
            t = hold_step(p, c, T_CALL, NULL);
            if (!t) return true;
            if (t == T_CALL) {
                keep_separator(p);
                begin_call(p);
                return true;
            }
            emit_txt(p, OUT_CONTENT, &p->ws);
            emit_hold(p, OUT_CONTENT);
            return false;
        }
        if (p->skip_ws && is_ws(c)) return true;
        p->skip_ws = false;
        if (p->calls && is_ws(c)) { /* perhaps the separator before a call */
            strbuf_putc(&p->ws, c);
        } else if (c == '<' && p->calls) {
            hold_start(p, c);
        } else {
            emit_txt(p, OUT_CONTENT, &p->ws);
            emit(p, OUT_CONTENT, &c, 1);
        }
        return true;
    case P_AFTER_CALL: /* whitespace between calls is dropped */
        if (p->n_hold) {
            t = hold_step(p, c, T_CALL, NULL);
            if (!t) return true;
            if (t == T_CALL) {
                begin_call(p);
                return true;
            }
            emit_hold(p, OUT_CONTENT);
            p->st = P_CONTENT;
            return false;
        }
        if (is_ws(c)) return true;
        if (c == '<') {
            hold_start(p, c);
            return true;
        }
        p->st = P_CONTENT;
        return false;
    case P_CALL:
        if (p->body.oom) { /* out of memory: the call cannot be kept */
            p->body.oom = false;
            call_broken(p);
            return false;
        }
        return p->syntax == CHAT_CALLS_JSON ? json_step(p, c) : xml_step(p, c);
    }
    return true;
}

/* Reads text given back first, then s. */
static void run(out_parser *p, const char *s, size_t n) {
    size_t i = 0;
    for (;;) {
        bool from_pb = p->pb_pos < p->pb.n;
        if (!from_pb) {
            p->pb.n = p->pb_pos = 0;
            if (i >= n) break;
        }
        char c = from_pb ? p->pb.p[p->pb_pos] : s[i];
        if (step(p, c)) {
            if (from_pb) p->pb_pos++;
            else i++;
        }
        if (p->back.n) { /* before whatever comes next */
            if (p->pb.n > p->pb_pos) strbuf_put(&p->back, p->pb.p + p->pb_pos, p->pb.n - p->pb_pos);
            strbuf t = p->pb;
            p->pb = p->back;
            p->back = t;
            p->back.n = 0;
            p->pb_pos = 0;
            if (p->pb.oom) { /* cannot keep it: drop what was given back */
                p->pb.oom = false;
                p->pb.n = 0;
            }
        }
    }
}

/* ---- the interface --------------------------------------------------------------- */

int out_parser_init(out_parser *p, const out_parser_cfg *cfg, ph_err *err) {
    memset(p, 0, sizeof *p);
    const chat_family *fam = chat_format_family(cfg->fmt);
    p->syntax = fam->calls;
    p->ends_at_call = fam->reasoning_ends_at_call;
    p->sep = fam->call_sep ? fam->call_sep : "";
    p->calls = cfg->parse_calls && cfg->n_tools > 0;
    p->tools = cfg->tools;
    p->n_tools = cfg->n_tools;
    p->st = cfg->in_reasoning ? P_REASON : P_START;
    if (p->calls && p->syntax == CHAT_CALLS_XML) {
        if (!(p->schemas = calloc(p->n_tools, sizeof *p->schemas))) return err_set(err, "out of memory");
        for (size_t i = 0; i < p->n_tools; i++)
            if (p->tools[i].parameters)
                p->schemas[i] = tool_json_parse(p->tools[i].parameters, strlen(p->tools[i].parameters));
    }
    return 0;
}

void out_parser_free(out_parser *p) {
    if (p->schemas)
        for (size_t i = 0; i < p->n_tools; i++) json_decref(p->schemas[i]);
    free(p->schemas);
    strbuf_free(&p->ws);
    strbuf_free(&p->body);
    strbuf_free(&p->run);
    strbuf_free(&p->tmp);
    strbuf_free(&p->back);
    strbuf_free(&p->pb);
    memset(p, 0, sizeof *p);
}

void out_parser_feed(out_parser *p, const char *text, size_t len, out_fn fn, void *ud) {
    p->fn = fn;
    p->ud = ud;
    run(p, text, len);
    flush(p);
}

void out_parser_finish(out_parser *p, out_fn fn, void *ud) {
    p->fn = fn;
    p->ud = ud;
    for (;;) {
        run(p, NULL, 0);
        if (p->st != P_CALL) break;
        if (p->header_sent) call_cut(p);
        else call_cut_unnamed(p);
        /* what was given back is read as content */
        if (p->back.n) {
            strbuf t = p->pb;
            p->pb = p->back;
            p->back = t;
            p->back.n = 0;
            p->pb_pos = 0;
        }
    }
    switch (p->st) {
    case P_START:                                     /* fall through */
    case P_CONTENT: emit_txt(p, OUT_CONTENT, &p->ws); /* fall through */
    case P_AFTER_CALL: emit_hold(p, OUT_CONTENT); break;
    case P_REASON: emit_hold(p, OUT_REASONING); break;
    }
    p->n_hold = 0;
    flush(p);
}

bool out_parser_in_reasoning(const out_parser *p) { return p->st == P_REASON; }

bool out_parser_in_call(const out_parser *p, const char **body, size_t *len) {
    if (p->st != P_CALL) return false;
    if (body) *body = p->body.p + CALL_LEN;
    if (len) *len = p->body.n - CALL_LEN;
    return true;
}

int32_t out_parser_call_tool(const out_parser *p) { return p->st == P_CALL && p->header_sent ? p->tool : -1; }

int32_t out_parser_n_calls(const out_parser *p) { return p->n_calls; }
