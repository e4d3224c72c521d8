/* Regular expressions → automata over code points (regex.h).
 *
 * The pattern is parsed to a small syntax tree (sets of code-point ranges,
 * concatenations, alternations, repetitions), built into a Thompson NFA
 * with epsilon moves (bounded: counted repetitions are copies), which is
 * then made epsilon-free over its labelled targets, its parallel
 * transitions merged, and trimmed. Products and subset constructions work
 * on that form. */
#include "text/regex.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/grow.h"

#define NONE UINT32_MAX
enum {
    MAX_TSTATES = 8 * RX_MAX_STATES, /* Thompson states (with the epsilon glue) */
    MAX_TRANS = 1 << 20,             /* transitions of an epsilon-free NFA */
    MAX_CLASSES = 4096,              /* code-point classes of a DFA */
    MAX_CELLS = 1 << 21,             /* DFA table cells */
    MAX_DEPTH = 64,                  /* group nesting */
    MAX_COUNT = 100000,              /* a {n,m} number (bigger ones are refused by the state cap anyway) */
    CP_END = 0x110000,
};
#define MAX_WORK (1ull << 27) /* subset construction steps */

/* ---- code-point range sets ------------------------------------------------------ */
typedef struct rr {
    uint32_t lo, hi; /* inclusive */
} rr;

typedef struct rvec {
    rr *p;
    size_t n, cap;
    bool oom;
} rvec;

static void rv_add(rvec *v, uint32_t lo, uint32_t hi) {
    if (v->oom || lo > hi) return;
    rr *p = grow_array(v->p, &v->cap, v->n, sizeof *p, 8);
    if (!p) {
        v->oom = true;
        return;
    }
    v->p = p;
    v->p[v->n++] = (rr){lo, hi};
}

static int cmp_rr(const void *a, const void *b) {
    const rr *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges overlapping or adjacent ranges. */
static void rv_norm(rvec *v) {
    if (v->n < 2) return;
    qsort(v->p, v->n, sizeof *v->p, cmp_rr);
    size_t k = 0;
    for (size_t i = 1; i < v->n; i++) {
        if (v->p[i].lo <= v->p[k].hi + 1) {
            if (v->p[i].hi > v->p[k].hi) v->p[k].hi = v->p[i].hi;
        } else {
            v->p[++k] = v->p[i];
        }
    }
    v->n = k + 1;
}

/* The complement within [0, 0x10FFFF] of a normalised set. */
static void rv_negate(rvec *v) {
    rvec o = {0};
    uint32_t at = 0;
    for (size_t i = 0; i < v->n; i++) {
        if (v->p[i].lo > at) rv_add(&o, at, v->p[i].lo - 1);
        at = v->p[i].hi + 1;
    }
    if (at < CP_END) rv_add(&o, at, CP_END - 1);
    if (o.oom) v->oom = true;
    free(v->p);
    v->p = o.p;
    v->n = o.n;
    v->cap = o.cap;
}

/* out += a ∩ b (both normalised); returns whether anything was added. */
static bool rr_inter(const rr *a, size_t na, const rr *b, size_t nb, rvec *out) {
    size_t i = 0, j = 0;
    bool any = false;
    while (i < na && j < nb) {
        const uint32_t lo = a[i].lo > b[j].lo ? a[i].lo : b[j].lo, hi = a[i].hi < b[j].hi ? a[i].hi : b[j].hi;
        if (lo <= hi) {
            rv_add(out, lo, hi);
            any = true;
        }
        if (a[i].hi < b[j].hi) i++;
        else j++;
    }
    return any;
}

static const rr SIGMA[2] = {{1, 0xD7FF}, {0xE000, 0x10FFFF}}; /* the alphabet */

static bool rr_has(const rr *r, uint32_t n, uint32_t cp) {
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        const uint32_t mid = (lo + hi) / 2;
        if (r[mid].hi < cp) lo = mid + 1;
        else if (r[mid].lo > cp) hi = mid;
        else return true;
    }
    return false;
}

static bool rr_is_sigma(const rr *r, uint32_t n) {
    return n == 2 && r[0].lo == SIGMA[0].lo && r[0].hi == SIGMA[0].hi && r[1].lo == SIGMA[1].lo &&
           r[1].hi == SIGMA[1].hi;
}

/* ---- errors ------------------------------------------------------------------------ */
typedef struct rerr {
    char *msg;
    size_t cap;
    bool failed;
} rerr;

__attribute__((format(printf, 2, 3))) static void fail(rerr *e, const char *fmt, ...) {
    if (e->failed) return;
    e->failed = true;
    if (!e->msg || !e->cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, e->cap, fmt, ap);
    va_end(ap);
}

static void fail_oom(rerr *e) { fail(e, "out of memory compiling the pattern"); }

/* ---- syntax tree --------------------------------------------------------------------- */
enum { A_EMPTY, A_SET, A_CAT, A_ALT, A_REP };

typedef struct anode {
    uint8_t op;
    uint32_t a, n;     /* A_SET: ranges sets[a..a+n); A_CAT, A_ALT: kids[a..a+n); A_REP: a = the child */
    uint32_t min, max; /* A_REP; max RX_INF: unbounded */
} anode;

typedef struct rp {
    const uint8_t *s;
    size_t len, i;
    rerr *e;
    anode *nd;
    size_t n_nd, cap_nd;
    uint32_t *kids;
    size_t n_kids, cap_kids;
    rr *sets;
    size_t n_sets, cap_sets;
    int depth;
} rp;

typedef struct u32vec {
    uint32_t *p;
    size_t n, cap;
    bool oom;
} u32vec;

static void u32_push(u32vec *v, uint32_t x) {
    if (v->oom) return;
    uint32_t *p = grow_array(v->p, &v->cap, v->n, sizeof *p, 8);
    if (!p) {
        v->oom = true;
        return;
    }
    v->p = p;
    v->p[v->n++] = x;
}

static uint32_t new_anode(rp *p, uint8_t op, uint32_t a, uint32_t n) {
    if (p->e->failed) return NONE;
    anode *q = grow_array(p->nd, &p->cap_nd, p->n_nd, sizeof *q, 32);
    if (!q) return fail_oom(p->e), NONE;
    p->nd = q;
    p->nd[p->n_nd] = (anode){op, a, n, 0, 0};
    return (uint32_t)p->n_nd++;
}

/* A set node from v (normalised here and cut to the alphabet). */
static uint32_t set_node(rp *p, rvec *v) {
    if (v->oom) return fail_oom(p->e), NONE;
    rv_norm(v);
    rvec cut = {0};
    rr_inter(v->p, v->n, SIGMA, 2, &cut);
    const uint32_t off = (uint32_t)p->n_sets;
    for (size_t i = 0; i < cut.n && !cut.oom; i++) {
        rr *q = grow_array(p->sets, &p->cap_sets, p->n_sets, sizeof *q, 32);
        if (!q) {
            cut.oom = true;
            break;
        }
        p->sets = q;
        p->sets[p->n_sets++] = cut.p[i];
    }
    const bool oom = cut.oom;
    const uint32_t n = (uint32_t)cut.n;
    free(cut.p);
    if (oom) return fail_oom(p->e), NONE;
    return new_anode(p, A_SET, off, n);
}

static uint32_t list_node(rp *p, uint8_t op, const u32vec *items) {
    if (items->oom) return fail_oom(p->e), NONE;
    if (items->n == 0) return new_anode(p, A_EMPTY, 0, 0);
    if (items->n == 1) return items->p[0];
    const uint32_t off = (uint32_t)p->n_kids;
    for (size_t i = 0; i < items->n; i++) {
        uint32_t *q = grow_array(p->kids, &p->cap_kids, p->n_kids, sizeof *q, 32);
        if (!q) return fail_oom(p->e), NONE;
        p->kids = q;
        p->kids[p->n_kids++] = items->p[i];
    }
    return new_anode(p, op, off, (uint32_t)items->n);
}

static void add_class(rvec *v, char k) {
    switch (k) {
    case 'd': rv_add(v, '0', '9'); break;
    case 'w':
        rv_add(v, '0', '9');
        rv_add(v, 'A', 'Z');
        rv_add(v, '_', '_');
        rv_add(v, 'a', 'z');
        break;
    case 's': {
        static const rr ws[] = {{0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680},
                                {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) rv_add(v, ws[i].lo, ws[i].hi);
        break;
    }
    default: { /* D W S: the complement */
        rvec t = {0};
        add_class(&t, (char)(k + 32));
        rv_norm(&t);
        rv_negate(&t);
        for (size_t i = 0; i < t.n; i++) rv_add(v, t.p[i].lo, t.p[i].hi);
        if (t.oom) v->oom = true;
        free(t.p);
    }
    }
}

/* Decodes one UTF-8 character at p->i. */
static bool utf8_next(rp *p, uint32_t *cp) {
    const uint8_t *s = p->s + p->i;
    const size_t left = p->len - p->i;
    const uint8_t b = s[0];
    uint32_t c, need;
    if (b < 0x80) {
        *cp = b;
        p->i++;
        return true;
    }
    if (b >= 0xC2 && b <= 0xDF) c = b & 0x1F, need = 1;
    else if (b >= 0xE0 && b <= 0xEF) c = b & 0x0F, need = 2;
    else if (b >= 0xF0 && b <= 0xF4) c = b & 0x07, need = 3;
    else return fail(p->e, "the pattern is not valid UTF-8"), false;
    if (left <= need) return fail(p->e, "the pattern is not valid UTF-8"), false;
    for (uint32_t k = 1; k <= need; k++) {
        if ((s[k] & 0xC0) != 0x80) return fail(p->e, "the pattern is not valid UTF-8"), false;
        c = c << 6 | (s[k] & 0x3F);
    }
    static const uint32_t MIN[4] = {0, 0x80, 0x800, 0x10000};
    if (c < MIN[need] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return fail(p->e, "the pattern is not valid UTF-8"), false;
    *cp = c;
    p->i += need + 1;
    return true;
}

static int hexd(uint8_t b) {
    if (b >= '0' && b <= '9') return b - '0';
    if (b >= 'a' && b <= 'f') return b - 'a' + 10;
    if (b >= 'A' && b <= 'F') return b - 'A' + 10;
    return -1;
}

/* k hex digits at p->i. */
static bool hex_n(rp *p, int k, uint32_t *out) {
    uint32_t v = 0;
    for (int j = 0; j < k; j++) {
        if (p->i >= p->len || hexd(p->s[p->i]) < 0) return false;
        v = v * 16 + (uint32_t)hexd(p->s[p->i++]);
    }
    *out = v;
    return true;
}

/* \u escapes (p->i after the 'u'): XXXX (a surrogate pair joined) or {X...}. */
static bool esc_u(rp *p, uint32_t *cp) {
    const size_t at = p->i - 2;
    if (p->i < p->len && p->s[p->i] == '{') {
        p->i++;
        uint32_t v = 0;
        int nd = 0;
        while (p->i < p->len && hexd(p->s[p->i]) >= 0) {
            v = v * 16 + (uint32_t)hexd(p->s[p->i++]);
            if (v > 0x10FFFF) return fail(p->e, "the escape \\u{...} at offset %zu is beyond U+10FFFF", at), false;
            nd++;
        }
        if (!nd || p->i >= p->len || p->s[p->i] != '}')
            return fail(p->e, "invalid escape \\u{...} at offset %zu", at), false;
        p->i++;
        *cp = v;
        return true;
    }
    uint32_t v;
    if (!hex_n(p, 4, &v)) return fail(p->e, "invalid escape \\u at offset %zu (four hex digits expected)", at), false;
    if (v >= 0xD800 && v <= 0xDBFF && p->i + 6 <= p->len && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
        const size_t save = p->i;
        uint32_t lo;
        p->i += 2;
        if (hex_n(p, 4, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
        else p->i = save;
    }
    *cp = v; /* a lone surrogate matches nothing (it is not in the alphabet) */
    return true;
}

/* One escape (p->i after the backslash). Either *cp is set (returns 1), or
 * a class letter is put in *cls (returns 2); 0: refused. */
static int parse_escape(rp *p, bool in_class, uint32_t *cp, char *cls) {
    const size_t at = p->i - 1;
    if (p->i >= p->len) return fail(p->e, "the pattern ends with a lone '\\'"), 0;
    const uint8_t c = p->s[p->i];
    if (c >= 0x80) return utf8_next(p, cp) ? 1 : 0; /* an escaped non-ASCII character: itself */
    p->i++;
    switch (c) {
    case 'd':
    case 'D':
    case 'w':
    case 'W':
    case 's':
    case 'S': *cls = (char)c; return 2;
    case 'n': *cp = '\n'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    case 'b':
        if (in_class) {
            *cp = 8;
            return 1;
        }
        fail(p->e, "the word boundary \\b (offset %zu) is not supported by the constraint", at);
        return 0;
    case 'B': fail(p->e, "the word boundary \\B (offset %zu) is not supported by the constraint", at); return 0;
    case '0':
        if (p->i < p->len && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
            fail(p->e, "the octal escape \\0%c (offset %zu) is not supported by the constraint", p->s[p->i], at);
            return 0;
        }
        *cp = 0;
        return 1;
    case 'c':
        if (p->i < p->len && ((p->s[p->i] >= 'a' && p->s[p->i] <= 'z') || (p->s[p->i] >= 'A' && p->s[p->i] <= 'Z'))) {
            *cp = p->s[p->i++] % 32u;
            return 1;
        }
        fail(p->e, "invalid escape \\c at offset %zu", at);
        return 0;
    case 'x':
        if (!hex_n(p, 2, cp)) return fail(p->e, "invalid escape \\x at offset %zu (two hex digits expected)", at), 0;
        return 1;
    case 'u': return esc_u(p, cp) ? 1 : 0;
    case 'k': fail(p->e, "the back-reference \\k<...> (offset %zu) is not supported by the constraint", at); return 0;
    case 'p':
    case 'P':
        fail(p->e, "the Unicode property class \\%c{...} (offset %zu) is not supported by the constraint", c, at);
        return 0;
    default:
        if (c >= '1' && c <= '9') {
            fail(p->e, "the back-reference \\%c (offset %zu) is not supported by the constraint", c, at);
            return 0;
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            fail(p->e, "unknown escape \\%c at offset %zu", c, at);
            return 0;
        }
        *cp = c; /* \. \\ \/ \- \[ \] \( \) \{ \} \* \+ \? \| \^ \$ and other punctuation */
        return 1;
    }
}

/* [...] (p->i at the '['). */
static uint32_t parse_class(rp *p) {
    const size_t at = p->i++;
    bool neg = false;
    if (p->i < p->len && p->s[p->i] == '^') {
        neg = true;
        p->i++;
    }
    rvec v = {0};
    for (;;) {
        if (p->i >= p->len) {
            free(v.p);
            fail(p->e, "the character class '[' at offset %zu is not closed", at);
            return NONE;
        }
        if (p->s[p->i] == ']') {
            p->i++;
            break;
        }
        uint32_t a = 0, b = 0;
        char ca = 0, cb = 0;
        int ka;
        if (p->s[p->i] == '\\') {
            p->i++;
            ka = parse_escape(p, true, &a, &ca);
        } else {
            ka = utf8_next(p, &a) ? 1 : 0;
        }
        if (!ka) break;
        if (ka == 2) {
            add_class(&v, ca);
            continue; /* a '-' after a class escape is literal */
        }
        if (p->i + 1 < p->len && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            int kb;
            if (p->s[p->i] == '\\') {
                p->i++;
                kb = parse_escape(p, true, &b, &cb);
            } else {
                kb = utf8_next(p, &b) ? 1 : 0;
            }
            if (!kb) break;
            if (kb == 2) { /* [a-\d]: a, '-' and the class */
                rv_add(&v, a, a);
                rv_add(&v, '-', '-');
                add_class(&v, cb);
                continue;
            }
            if (a > b) {
                free(v.p);
                fail(p->e, "the range in the character class at offset %zu is out of order", at);
                return NONE;
            }
            rv_add(&v, a, b);
        } else {
            rv_add(&v, a, a);
        }
    }
    if (p->e->failed) {
        free(v.p);
        return NONE;
    }
    rv_norm(&v);
    if (neg) rv_negate(&v);
    const uint32_t id = set_node(p, &v);
    free(v.p);
    return id;
}

/* Whether a valid {n}, {n,} or {n,m} starts at i; its numbers. */
static bool quant_at(const rp *p, size_t i, uint32_t *mn, uint32_t *mx, size_t *end) {
    if (i >= p->len || p->s[i] != '{') return false;
    i++;
    uint32_t a = 0, b = 0;
    size_t d = 0;
    while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') {
        if (a <= MAX_COUNT) a = a * 10 + (p->s[i] - '0');
        i++;
        d++;
    }
    if (!d || i >= p->len) return false;
    if (p->s[i] == '}') {
        *mn = *mx = a;
        *end = i + 1;
        return true;
    }
    if (p->s[i] != ',') return false;
    i++;
    d = 0;
    while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9') {
        if (b <= MAX_COUNT) b = b * 10 + (p->s[i] - '0');
        i++;
        d++;
    }
    if (i >= p->len || p->s[i] != '}') return false;
    *mn = a;
    *mx = d ? b : RX_INF;
    *end = i + 1;
    return true;
}

static bool quant_next(const rp *p) {
    uint32_t a, b;
    size_t e;
    return p->i < p->len &&
           (p->s[p->i] == '*' || p->s[p->i] == '+' || p->s[p->i] == '?' || quant_at(p, p->i, &a, &b, &e));
}

static uint32_t parse_alt(rp *p, bool top);

static uint32_t parse_group(rp *p) {
    const size_t at = p->i++;
    if (p->i < p->len && p->s[p->i] == '?') {
        const uint8_t c = p->i + 1 < p->len ? p->s[p->i + 1] : 0, d = p->i + 2 < p->len ? p->s[p->i + 2] : 0;
        if (c == ':') {
            p->i += 2;
        } else if (c == '=' || c == '!') {
            fail(p->e, "the look-ahead (?%c at offset %zu is not supported by the constraint", c, at);
            return NONE;
        } else if (c == '<' && (d == '=' || d == '!')) {
            fail(p->e, "the look-behind (?<%c at offset %zu is not supported by the constraint", d, at);
            return NONE;
        } else if (c == '<') { /* a named group: as a plain one */
            size_t j = p->i + 2, n = 0;
            while (j < p->len && p->s[j] != '>' &&
                   ((p->s[j] >= 'a' && p->s[j] <= 'z') || (p->s[j] >= 'A' && p->s[j] <= 'Z') ||
                    (p->s[j] >= '0' && p->s[j] <= '9') || p->s[j] == '_' || p->s[j] == '$' || p->s[j] >= 0x80))
                j++, n++;
            if (!n || j >= p->len || p->s[j] != '>') {
                fail(p->e, "invalid group name at offset %zu", at);
                return NONE;
            }
            p->i = j + 1;
        } else {
            fail(p->e,
                 "the group (?%c at offset %zu (inline flags, or another kind of group) is not supported by the "
                 "constraint",
                 c ? c : '?', at);
            return NONE;
        }
    }
    if (++p->depth > MAX_DEPTH) {
        fail(p->e, "the pattern nests groups deeper than %d", MAX_DEPTH);
        return NONE;
    }
    const uint32_t x = parse_alt(p, false);
    p->depth--;
    if (x == NONE) return NONE;
    if (p->i >= p->len || p->s[p->i] != ')') {
        fail(p->e, "unbalanced parenthesis: '(' at offset %zu is not closed", at);
        return NONE;
    }
    p->i++;
    return x;
}

static uint32_t parse_atom(rp *p) {
    const uint8_t c = p->s[p->i];
    uint32_t cp = 0;
    rvec v = {0};
    switch (c) {
    case '(': return parse_group(p);
    case '[': return parse_class(p);
    case '.':
        p->i++;
        rv_add(&v, '\n', '\n');
        rv_add(&v, '\r', '\r');
        rv_add(&v, 0x2028, 0x2029);
        rv_norm(&v);
        rv_negate(&v);
        break;
    case '\\': {
        p->i++;
        char cls = 0;
        const int k = parse_escape(p, false, &cp, &cls);
        if (!k) return NONE;
        if (k == 2) add_class(&v, cls);
        else rv_add(&v, cp, cp);
        break;
    }
    case '*':
    case '+':
    case '?': fail(p->e, "nothing to repeat before '%c' at offset %zu", c, p->i); return NONE;
    default: {
        uint32_t a, b;
        size_t e;
        if (c == '{' && quant_at(p, p->i, &a, &b, &e)) {
            fail(p->e, "nothing to repeat before '{' at offset %zu", p->i);
            return NONE;
        }
        if (!utf8_next(p, &cp)) return NONE;
        rv_add(&v, cp, cp);
    }
    }
    const uint32_t id = set_node(p, &v);
    free(v.p);
    return id;
}

static uint32_t parse_quant(rp *p, uint32_t atom) {
    if (p->i >= p->len) return atom;
    uint32_t mn, mx;
    size_t end = p->i + 1;
    const uint8_t c = p->s[p->i];
    if (c == '*') mn = 0, mx = RX_INF;
    else if (c == '+') mn = 1, mx = RX_INF;
    else if (c == '?') mn = 0, mx = 1;
    else if (!quant_at(p, p->i, &mn, &mx, &end)) return atom;
    if (mx != RX_INF && mn > mx) {
        fail(p->e, "the numbers of the quantifier at offset %zu are out of order", p->i);
        return NONE;
    }
    p->i = end;
    if (p->i < p->len && p->s[p->i] == '?') p->i++; /* lazy: the same language */
    if (quant_next(p)) {
        fail(p->e, "nothing to repeat before '%c' at offset %zu", p->s[p->i], p->i);
        return NONE;
    }
    const uint32_t id = new_anode(p, A_REP, atom, 0);
    if (id != NONE) {
        p->nd[id].min = mn;
        p->nd[id].max = mx;
    }
    return id;
}

/* A sequence; at the top level it may start with ^ and end with $. */
static uint32_t parse_seq(rp *p, bool top, bool *anch_start, bool *anch_end) {
    u32vec items = {0};
    if (top && p->i < p->len && p->s[p->i] == '^') {
        p->i++;
        *anch_start = true;
    }
    while (p->i < p->len && !p->e->failed) {
        const uint8_t c = p->s[p->i];
        if (c == '|' || c == ')') break;
        if (c == '^') {
            fail(p->e,
                 "the anchor '^' at offset %zu is not supported by the constraint (only at the start of the pattern "
                 "or "
                 "of a top-level alternative)",
                 p->i);
            break;
        }
        if (c == '$') {
            if (top && (p->i + 1 == p->len || p->s[p->i + 1] == '|')) {
                p->i++;
                *anch_end = true;
                break;
            }
            fail(p->e,
                 "the anchor '$' at offset %zu is not supported by the constraint (only at the end of the pattern or "
                 "of a top-level alternative)",
                 p->i);
            break;
        }
        uint32_t x = parse_atom(p);
        if (x != NONE) x = parse_quant(p, x);
        if (x == NONE) break;
        u32_push(&items, x);
    }
    const uint32_t id = p->e->failed ? NONE : list_node(p, A_CAT, &items);
    free(items.p);
    return id;
}

/* Σ*: what an unanchored end allows. */
static uint32_t any_star(rp *p) {
    rvec v = {0};
    rv_add(&v, 0, CP_END - 1);
    const uint32_t set = set_node(p, &v);
    free(v.p);
    if (set == NONE) return NONE;
    const uint32_t id = new_anode(p, A_REP, set, 0);
    if (id != NONE) {
        p->nd[id].min = 0;
        p->nd[id].max = RX_INF;
    }
    return id;
}

static uint32_t parse_alt(rp *p, bool top) {
    u32vec alts = {0};
    for (;;) {
        bool as = false, ae = false;
        uint32_t x = parse_seq(p, top, &as, &ae);
        if (x == NONE) break;
        if (top && (!as || !ae)) {
            u32vec seq = {0};
            if (!as) u32_push(&seq, any_star(p));
            u32_push(&seq, x);
            if (!ae) u32_push(&seq, any_star(p));
            x = p->e->failed ? NONE : list_node(p, A_CAT, &seq);
            free(seq.p);
            if (x == NONE) break;
        }
        u32_push(&alts, x);
        if (p->i < p->len && p->s[p->i] == '|') {
            p->i++;
            continue;
        }
        break;
    }
    const uint32_t id = p->e->failed ? NONE : list_node(p, A_ALT, &alts);
    free(alts.p);
    return id;
}

/* ---- Thompson construction --------------------------------------------------------- */
typedef struct tstate {
    uint32_t to;     /* the labelled move's target (NONE: none) */
    uint32_t off, n; /* its label: rp.sets[off..off+n) */
} tstate;

typedef struct tb {
    const rp *p;
    rerr *e;
    tstate *st;
    size_t n, cap;
    uint32_t (*eps)[2];
    size_t n_eps, cap_eps;
    size_t n_labelled;
} tb;

typedef struct frag {
    uint32_t s, e;
} frag;

static uint32_t tb_state(tb *b) {
    if (b->e->failed) return NONE;
    if (b->n >= MAX_TSTATES)
        return fail(b->e,
                    "the pattern is too large for the constraint (more than %d automaton states; a large counted "
                    "repetition?)",
                    RX_MAX_STATES),
               NONE;
    tstate *q = grow_array(b->st, &b->cap, b->n, sizeof *q, 64);
    if (!q) return fail_oom(b->e), NONE;
    b->st = q;
    b->st[b->n] = (tstate){NONE, 0, 0};
    return (uint32_t)b->n++;
}

static void tb_eps(tb *b, uint32_t from, uint32_t to) {
    if (b->e->failed) return;
    uint32_t(*q)[2] = grow_array(b->eps, &b->cap_eps, b->n_eps, sizeof *q, 64);
    if (!q) return fail_oom(b->e);
    b->eps = q;
    b->eps[b->n_eps][0] = from;
    b->eps[b->n_eps][1] = to;
    b->n_eps++;
}

static frag build(tb *b, uint32_t id) {
    const frag bad = {NONE, NONE};
    if (b->e->failed) return bad;
    const anode *a = &b->p->nd[id];
    switch (a->op) {
    case A_EMPTY: {
        const uint32_t s = tb_state(b);
        return (frag){s, s};
    }
    case A_SET: {
        const uint32_t s = tb_state(b), e = tb_state(b);
        if (e == NONE) return bad;
        if (a->n) {
            if (++b->n_labelled > RX_MAX_STATES) {
                fail(b->e,
                     "the pattern is too large for the constraint (more than %d automaton states; a large counted "
                     "repetition?)",
                     RX_MAX_STATES);
                return bad;
            }
            b->st[s] = (tstate){e, a->a, a->n};
        }
        return (frag){s, e};
    }
    case A_CAT: {
        frag f = build(b, b->p->kids[a->a]);
        for (uint32_t i = 1; i < a->n && !b->e->failed; i++) {
            const frag g = build(b, b->p->kids[a->a + i]);
            tb_eps(b, f.e, g.s);
            f.e = g.e;
        }
        return b->e->failed ? bad : f;
    }
    case A_ALT: {
        const uint32_t s = tb_state(b), e = tb_state(b);
        for (uint32_t i = 0; i < a->n && !b->e->failed; i++) {
            const frag g = build(b, b->p->kids[a->a + i]);
            tb_eps(b, s, g.s);
            tb_eps(b, g.e, e);
        }
        return b->e->failed ? bad : (frag){s, e};
    }
    case A_REP: {
        const uint32_t min = a->min, max = a->max, kid = a->a;
        const uint32_t s = tb_state(b);
        uint32_t cur = s;
        for (uint32_t i = 0; i < min && !b->e->failed; i++) {
            const frag g = build(b, kid);
            tb_eps(b, cur, g.s);
            cur = g.e;
        }
        if (max == RX_INF) {
            const uint32_t loop = tb_state(b);
            const frag g = build(b, kid);
            tb_eps(b, cur, loop);
            tb_eps(b, loop, g.s);
            tb_eps(b, g.e, loop);
            return b->e->failed ? bad : (frag){s, loop};
        }
        const uint32_t e = tb_state(b);
        for (uint32_t i = min; i < max && !b->e->failed; i++) {
            const frag g = build(b, kid);
            tb_eps(b, cur, g.s);
            tb_eps(b, cur, e);
            cur = g.e;
        }
        tb_eps(b, cur, e);
        return b->e->failed ? bad : (frag){s, e};
    }
    }
    return bad;
}

/* ---- epsilon-free NFAs -------------------------------------------------------------- */
typedef struct rtr {
    uint32_t to, off, n; /* target; label rg[off..off+n) */
} rtr;

struct rx {
    uint32_t n, start;
    uint8_t *acc, *univ;
    uint32_t *toff; /* the transitions of s: tr[toff[s]..toff[s+1]) */
    rtr *tr;
    uint32_t ntr;
    rr *rg;
    uint32_t nrg;
    uint32_t *minl, *maxl;
};

/* An NFA being made: transitions in any order, labels in a pool. */
typedef struct nbt {
    uint32_t from, to, off, n;
} nbt;

typedef struct nb {
    uint32_t n, start;
    uint8_t *acc;
    size_t cap_acc;
    nbt *t;
    size_t nt, cap_t;
    rvec rg;
    rerr *e;
} nb;

static uint32_t nb_state(nb *b, bool acc) {
    if (b->e->failed) return NONE;
    uint8_t *q = grow_array(b->acc, &b->cap_acc, b->n, 1, 64);
    if (!q) return fail_oom(b->e), NONE;
    b->acc = q;
    b->acc[b->n] = acc;
    return b->n++;
}

/* A transition labelled with the ranges added to b->rg since off. */
static void nb_trans(nb *b, uint32_t from, uint32_t to, size_t off) {
    if (b->e->failed) return;
    if (b->rg.oom) return fail_oom(b->e);
    if (b->nt >= MAX_TRANS) return fail(b->e, "the pattern is too complex for the constraint (too many transitions)");
    nbt *q = grow_array(b->t, &b->cap_t, b->nt, sizeof *q, 64);
    if (!q) return fail_oom(b->e);
    b->t = q;
    b->t[b->nt++] = (nbt){from, to, (uint32_t)off, (uint32_t)(b->rg.n - off)};
}

static void nb_free(nb *b) {
    free(b->acc);
    free(b->t);
    free(b->rg.p);
}

static int cmp_nbt(const void *a, const void *b) {
    const nbt *x = a, *y = b;
    if (x->from != y->from) return x->from < y->from ? -1 : 1;
    if (x->to != y->to) return x->to < y->to ? -1 : 1;
    return 0;
}

void rx_free(rx *r) {
    if (!r) return;
    free(r->acc);
    free(r->univ);
    free(r->toff);
    free(r->tr);
    free(r->rg);
    free(r->minl);
    free(r->maxl);
    free(r);
}

/* Shortest and longest remaining lengths to acceptance over a graph in
 * which every state can reach acceptance (off/adj: successors, with
 * repeats allowed). */
static bool graph_lengths(uint32_t n, const uint32_t *off, const uint32_t *adj, const uint8_t *flags, uint8_t accbit,
                          uint32_t *minl, uint32_t *maxl) {
    const uint32_t ne = off[n];
    uint32_t *roff = calloc((size_t)n + 2, sizeof *roff), *radj = malloc(((size_t)ne + 1) * sizeof *radj);
    uint32_t *q = malloc(((size_t)n + 1) * sizeof *q), *deg = malloc(((size_t)n + 1) * sizeof *deg);
    if (!roff || !radj || !q || !deg) {
        free(roff);
        free(radj);
        free(q);
        free(deg);
        return false;
    }
    for (uint32_t k = 0; k < ne; k++) roff[adj[k] + 2]++;
    for (uint32_t s = 0; s < n; s++) roff[s + 2] += roff[s + 1];
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t k = off[s]; k < off[s + 1]; k++) radj[roff[adj[k] + 1]++] = s;
    /* now roff[t]..roff[t+1] are t's predecessors */
    uint32_t h = 0, t = 0;
    for (uint32_t s = 0; s < n; s++) {
        minl[s] = RX_INF;
        if (flags[s] & accbit) {
            minl[s] = 0;
            q[t++] = s;
        }
    }
    while (h < t) {
        const uint32_t u = q[h++];
        for (uint32_t k = roff[u]; k < roff[u + 1]; k++)
            if (minl[radj[k]] == RX_INF) {
                minl[radj[k]] = minl[u] + 1;
                q[t++] = radj[k];
            }
    }
    /* longest: peel states whose successors are all done; what is left reaches a cycle */
    h = t = 0;
    for (uint32_t s = 0; s < n; s++) {
        maxl[s] = RX_INF;
        deg[s] = off[s + 1] - off[s];
        if (!deg[s]) q[t++] = s;
    }
    while (h < t) {
        const uint32_t u = q[h++];
        uint32_t m = 0;
        for (uint32_t k = off[u]; k < off[u + 1]; k++)
            if (maxl[adj[k]] + 1 > m) m = maxl[adj[k]] + 1;
        maxl[u] = m;
        for (uint32_t k = roff[u]; k < roff[u + 1]; k++)
            if (--deg[radj[k]] == 0) q[t++] = radj[k];
    }
    free(roff);
    free(radj);
    free(q);
    free(deg);
    return true;
}

/* Merges parallel transitions, trims, renumbers, and computes lengths. */
static rx *nb_finish(nb *b) {
    rerr *e = b->e;
    rx *r = calloc(1, sizeof *r);
    if (!r) return fail_oom(e), NULL;
    if (e->failed || b->n == 0) return r; /* (failed: freed by the caller) */
    if (b->nt) qsort(b->t, b->nt, sizeof *b->t, cmp_nbt);
    /* merge (from, to) duplicates: their labels' union */
    size_t k = 0;
    for (size_t i = 0; i < b->nt;) {
        size_t j = i + 1;
        while (j < b->nt && b->t[j].from == b->t[i].from && b->t[j].to == b->t[i].to) j++;
        nbt m = b->t[i];
        if (j - i > 1) {
            rvec u = {0};
            for (size_t x = i; x < j; x++)
                for (uint32_t y = 0; y < b->t[x].n; y++)
                    rv_add(&u, b->rg.p[b->t[x].off + y].lo, b->rg.p[b->t[x].off + y].hi);
            rv_norm(&u);
            const size_t off = b->rg.n;
            for (size_t y = 0; y < u.n; y++) rv_add(&b->rg, u.p[y].lo, u.p[y].hi);
            if (u.oom || b->rg.oom) {
                free(u.p);
                fail_oom(e);
                return r;
            }
            m.off = (uint32_t)off;
            m.n = (uint32_t)u.n;
            free(u.p);
        }
        b->t[k++] = m;
        i = j;
    }
    b->nt = k;
    const uint32_t n = b->n;
    uint32_t *off = calloc((size_t)n + 1, sizeof *off), *adj = malloc((b->nt + 1) * sizeof *adj);
    uint8_t *mark = calloc(n, 1);
    uint32_t *q = malloc(((size_t)n + 1) * sizeof *q), *map = malloc(((size_t)n + 1) * sizeof *map);
    uint32_t *roff = calloc((size_t)n + 2, sizeof *roff), *radj = malloc((b->nt + 1) * sizeof *radj);
    if (!off || !adj || !mark || !q || !map || !roff || !radj) {
        fail_oom(e);
        goto done;
    }
    for (size_t i = 0; i < b->nt; i++) {
        off[b->t[i].from + 1]++;
        adj[i] = b->t[i].to;
        roff[b->t[i].to + 2]++;
    }
    for (uint32_t s = 0; s < n; s++) off[s + 1] += off[s];
    for (uint32_t s = 0; s < n; s++) roff[s + 2] += roff[s + 1];
    for (size_t i = 0; i < b->nt; i++) radj[roff[b->t[i].to + 1]++] = b->t[i].from;
    /* forward from the start (bit 1), backward from acceptance (bit 2) */
    uint32_t h = 0, t = 0;
    mark[b->start] |= 1;
    q[t++] = b->start;
    while (h < t) {
        const uint32_t u = q[h++];
        for (uint32_t x = off[u]; x < off[u + 1]; x++)
            if (!(mark[adj[x]] & 1)) {
                mark[adj[x]] |= 1;
                q[t++] = adj[x];
            }
    }
    h = t = 0;
    for (uint32_t s = 0; s < n; s++)
        if (b->acc[s] && (mark[s] & 1)) {
            mark[s] |= 2;
            q[t++] = s;
        }
    while (h < t) {
        const uint32_t u = q[h++];
        for (uint32_t x = roff[u]; x < roff[u + 1]; x++)
            if (mark[radj[x]] == 1) {
                mark[radj[x]] |= 2;
                q[t++] = radj[x];
            }
    }
    if (mark[b->start] != 3) goto done; /* the empty language */
    uint32_t nn = 0;
    for (uint32_t s = 0; s < n; s++) map[s] = mark[s] == 3 ? nn++ : NONE;
    if (nn > RX_MAX_STATES) {
        fail(e, "the pattern is too large for the constraint (more than %d automaton states)", RX_MAX_STATES);
        goto done;
    }
    uint32_t nt = 0, nr = 0;
    for (size_t i = 0; i < b->nt; i++)
        if (map[b->t[i].from] != NONE && map[b->t[i].to] != NONE) {
            nt++;
            nr += b->t[i].n;
        }
    r->acc = calloc(nn, 1);
    r->univ = calloc(nn, 1);
    r->toff = calloc((size_t)nn + 1, sizeof *r->toff);
    r->tr = malloc(((size_t)nt + 1) * sizeof *r->tr);
    r->rg = malloc(((size_t)nr + 1) * sizeof *r->rg);
    r->minl = malloc((size_t)nn * sizeof *r->minl);
    r->maxl = malloc((size_t)nn * sizeof *r->maxl);
    uint32_t *radj2 = malloc(((size_t)nt + 1) * sizeof *radj2);
    if (!r->acc || !r->univ || !r->toff || !r->tr || !r->rg || !r->minl || !r->maxl || !radj2) {
        free(radj2);
        fail_oom(e);
        goto done;
    }
    r->n = nn;
    r->start = map[b->start];
    uint32_t ti = 0, ri = 0;
    for (size_t i = 0; i < b->nt; i++) { /* sorted by from: the new order is too */
        const uint32_t f = map[b->t[i].from], to = map[b->t[i].to];
        if (f == NONE || to == NONE) continue;
        r->toff[f + 1]++;
        r->tr[ti] = (rtr){to, ri, b->t[i].n};
        memcpy(r->rg + ri, b->rg.p + b->t[i].off, b->t[i].n * sizeof *r->rg);
        ri += b->t[i].n;
        radj2[ti] = to;
        ti++;
    }
    r->ntr = nt;
    r->nrg = nr;
    for (uint32_t s = 0; s < nn; s++) r->toff[s + 1] += r->toff[s];
    for (uint32_t s = 0; s < n; s++)
        if (map[s] != NONE) r->acc[map[s]] = b->acc[s];
    /* universal (Σ* from there): accepting with a Σ loop, then, to a fixed point, accepting with a Σ
     * transition to a universal state (the end of an unanchored "ab": after b, Σ leads to the loop) */
    for (uint32_t s = 0; s < nn; s++)
        for (uint32_t x = r->toff[s]; x < r->toff[s + 1]; x++)
            if (r->acc[s] && r->tr[x].to == s && rr_is_sigma(r->rg + r->tr[x].off, r->tr[x].n)) r->univ[s] = 1;
    for (bool more = true; more;) {
        more = false;
        for (uint32_t s = 0; s < nn; s++)
            for (uint32_t x = r->toff[s]; x < r->toff[s + 1] && r->acc[s] && !r->univ[s]; x++)
                if (r->univ[r->tr[x].to] && rr_is_sigma(r->rg + r->tr[x].off, r->tr[x].n)) r->univ[s] = more = true;
    }
    if (!graph_lengths(nn, r->toff, radj2, r->acc, 1, r->minl, r->maxl)) fail_oom(e);
    free(radj2);
done:
    free(off);
    free(adj);
    free(mark);
    free(q);
    free(map);
    free(roff);
    free(radj);
    return r;
}

/* The epsilon-free NFA of a Thompson one: a state per labelled target (and
 * the start), with the moves and acceptance of its epsilon closure. */
static rx *eliminate(tb *b, frag f) {
    rerr *e = b->e;
    nb o = {0};
    o.e = e;
    const size_t n = b->n;
    uint32_t *eoff = calloc(n + 1, sizeof *eoff), *eadj = malloc((b->n_eps + 1) * sizeof *eadj);
    uint32_t *idx = malloc((n + 1) * sizeof *idx), *stamp = calloc(n + 1, sizeof *stamp);
    uint32_t *stack = malloc((n + 1) * sizeof *stack);
    rx *r = NULL;
    if (!eoff || !eadj || !idx || !stamp || !stack) {
        fail_oom(e);
        goto done;
    }
    for (size_t i = 0; i < b->n_eps; i++) eoff[b->eps[i][0] + 1]++;
    for (size_t s = 0; s < n; s++) eoff[s + 1] += eoff[s];
    {
        uint32_t *fill = calloc(n + 1, sizeof *fill);
        if (!fill) {
            fail_oom(e);
            goto done;
        }
        for (size_t i = 0; i < b->n_eps; i++) {
            const uint32_t s = b->eps[i][0];
            eadj[eoff[s] + fill[s]++] = b->eps[i][1];
        }
        free(fill);
    }
    for (size_t s = 0; s < n; s++) idx[s] = NONE;
    idx[f.s] = nb_state(&o, false);
    for (size_t s = 0; s < n; s++)
        if (b->st[s].to != NONE && idx[b->st[s].to] == NONE) idx[b->st[s].to] = nb_state(&o, false);
    if (e->failed) goto done;
    o.start = idx[f.s];
    uint32_t st = 0;
    for (size_t s = 0; s < n && !e->failed; s++) {
        if (idx[s] == NONE) continue;
        const uint32_t me = idx[s];
        st++;
        uint32_t sp = 0;
        stack[sp++] = (uint32_t)s;
        stamp[s] = st;
        while (sp && !e->failed) {
            const uint32_t u = stack[--sp];
            if (u == f.e) o.acc[me] = 1;
            if (b->st[u].to != NONE) {
                const size_t off = o.rg.n;
                for (uint32_t k = 0; k < b->st[u].n; k++)
                    rv_add(&o.rg, b->p->sets[b->st[u].off + k].lo, b->p->sets[b->st[u].off + k].hi);
                nb_trans(&o, me, idx[b->st[u].to], off);
            }
            for (uint32_t k = eoff[u]; k < eoff[u + 1]; k++)
                if (stamp[eadj[k]] != st) {
                    stamp[eadj[k]] = st;
                    stack[sp++] = eadj[k];
                }
        }
    }
    if (!e->failed) r = nb_finish(&o);
done:
    free(eoff);
    free(eadj);
    free(idx);
    free(stamp);
    free(stack);
    nb_free(&o);
    if (e->failed) {
        rx_free(r);
        return NULL;
    }
    return r;
}

rx *rx_compile(const char *src, size_t len, char *err, size_t errcap) {
    rerr e = {err, errcap, false};
    if (err && errcap) err[0] = '\0';
    rp p = {0};
    p.s = (const uint8_t *)src;
    p.len = len;
    p.e = &e;
    uint32_t root = parse_alt(&p, true);
    if (root != NONE && p.i < p.len) { /* parse_alt stops only at a ')' here */
        fail(&e, "unbalanced parenthesis: ')' at offset %zu has no '('", p.i);
        root = NONE;
    }
    rx *r = NULL;
    if (root != NONE && !e.failed) {
        tb b = {0};
        b.p = &p;
        b.e = &e;
        const frag f = build(&b, root);
        if (!e.failed) r = eliminate(&b, f);
        free(b.st);
        free(b.eps);
    }
    free(p.nd);
    free(p.kids);
    free(p.sets);
    if (e.failed) {
        rx_free(r);
        return NULL;
    }
    return r;
}

uint32_t rx_n_states(const rx *r) { return r->n; }
bool rx_empty(const rx *r) { return r->n == 0; }

/* ---- products ------------------------------------------------------------------------------ */
typedef struct pmap {
    uint64_t *key; /* (a << 32 | b) + 1; 0: empty */
    uint32_t *val;
    size_t cap;
} pmap;

static uint32_t pmap_get(const pmap *m, uint64_t k, size_t *slot) {
    size_t h = (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & (m->cap - 1);
    while (m->key[h]) {
        if (m->key[h] == k) return m->val[h];
        h = (h + 1) & (m->cap - 1);
    }
    *slot = h;
    return NONE;
}

rx *rx_intersect(const rx *a, const rx *b, char *err, size_t errcap) {
    rerr e = {err, errcap, false};
    if (err && errcap) err[0] = '\0';
    if (a->n == 0 || b->n == 0) {
        rx *r = calloc(1, sizeof *r);
        if (!r) fail_oom(&e);
        return r;
    }
    nb o = {0};
    o.e = &e;
    pmap m = {0};
    m.cap = 4 * RX_MAX_STATES;
    m.key = calloc(m.cap, sizeof *m.key);
    m.val = malloc(m.cap * sizeof *m.val);
    uint64_t *q = malloc((RX_MAX_STATES + 1) * sizeof *q);
    rx *r = NULL;
    if (!m.key || !m.val || !q) {
        fail_oom(&e);
        goto done;
    }
    size_t slot = 0;
    const uint64_t k0 = ((uint64_t)a->start << 32 | b->start) + 1;
    pmap_get(&m, k0, &slot);
    m.key[slot] = k0;
    m.val[slot] = nb_state(&o, a->acc[a->start] && b->acc[b->start]);
    q[0] = k0 - 1;
    o.start = 0;
    for (uint32_t h = 0; h < o.n && !e.failed; h++) {
        const uint32_t i = (uint32_t)(q[h] >> 32), j = (uint32_t)q[h];
        for (uint32_t x = a->toff[i]; x < a->toff[i + 1] && !e.failed; x++)
            for (uint32_t y = b->toff[j]; y < b->toff[j + 1] && !e.failed; y++) {
                const rtr *ta = &a->tr[x], *tb_ = &b->tr[y];
                const size_t off = o.rg.n;
                if (!rr_inter(a->rg + ta->off, ta->n, b->rg + tb_->off, tb_->n, &o.rg)) continue;
                const uint64_t k = ((uint64_t)ta->to << 32 | tb_->to) + 1;
                uint32_t to = pmap_get(&m, k, &slot);
                if (to == NONE) {
                    if (o.n >= RX_MAX_STATES) {
                        fail(&e,
                             "the pattern and the format together are too large for the constraint (more than %d "
                             "automaton states)",
                             RX_MAX_STATES);
                        break;
                    }
                    to = nb_state(&o, a->acc[ta->to] && b->acc[tb_->to]);
                    if (to == NONE) break;
                    m.key[slot] = k;
                    m.val[slot] = to;
                    q[to] = k - 1;
                }
                nb_trans(&o, h, to, off);
            }
    }
    if (!e.failed) r = nb_finish(&o);
done:
    free(m.key);
    free(m.val);
    free(q);
    nb_free(&o);
    if (e.failed) {
        rx_free(r);
        return NULL;
    }
    return r;
}

/* ---- state sets ------------------------------------------------------------------------------ */
void rx_start(const rx *r, rx_set *set) {
    memset(set, 0, sizeof *set);
    if (r->n) set->w[r->start / 64] |= 1ull << (r->start % 64);
}

bool rx_step(const rx *r, const rx_set *in, uint32_t cp, rx_set *out) {
    rx_set o;
    memset(&o, 0, sizeof o);
    bool any = false;
    for (uint32_t w = 0; w < (r->n + 63) / 64; w++)
        for (uint64_t bits = in->w[w]; bits; bits &= bits - 1) {
            const uint32_t s = w * 64 + (uint32_t)__builtin_ctzll(bits);
            for (uint32_t x = r->toff[s]; x < r->toff[s + 1]; x++)
                if (rr_has(r->rg + r->tr[x].off, r->tr[x].n, cp)) {
                    o.w[r->tr[x].to / 64] |= 1ull << (r->tr[x].to % 64);
                    any = true;
                }
        }
    *out = o;
    return any;
}

bool rx_accepts(const rx *r, const rx_set *set) {
    for (uint32_t s = 0; s < r->n; s++)
        if ((set->w[s / 64] >> (s % 64) & 1) && r->acc[s]) return true;
    return false;
}

uint32_t rx_min_left(const rx *r, const rx_set *set) {
    uint32_t m = RX_INF;
    for (uint32_t s = 0; s < r->n; s++)
        if ((set->w[s / 64] >> (s % 64) & 1) && r->minl[s] < m) m = r->minl[s];
    return m;
}

uint32_t rx_max_left(const rx *r, const rx_set *set) {
    uint32_t m = 0;
    bool any = false;
    for (uint32_t s = 0; s < r->n; s++)
        if (set->w[s / 64] >> (s % 64) & 1) {
            any = true;
            if (r->maxl[s] == RX_INF) return RX_INF;
            if (r->maxl[s] > m) m = r->maxl[s];
        }
    return any ? m : RX_INF;
}

/* The code points of UTF-8 text, one at a time (RX_INF: invalid). */
static uint32_t utf8_cp(const char *s, size_t len, size_t *i) {
    rerr e = {NULL, 0, false};
    rp p = {0};
    p.s = (const uint8_t *)s;
    p.len = len;
    p.i = *i;
    p.e = &e;
    uint32_t cp;
    if (!utf8_next(&p, &cp)) return RX_INF;
    *i = p.i;
    return cp;
}

bool rx_match(const rx *r, const char *s, size_t len) {
    rx_set a;
    rx_start(r, &a);
    if (!r->n) return false;
    for (size_t i = 0; i < len;) {
        const uint32_t cp = utf8_cp(s, len, &i);
        if (cp == RX_INF || !rx_step(r, &a, cp, &a)) return false;
    }
    return rx_accepts(r, &a);
}

/* ---- subset construction ------------------------------------------------------------------- */
static int cmp_u32(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void rx_dfa_free(rx_dfa *d) {
    if (!d) return;
    free(d->bound);
    free(d->next);
    free(d->min_left);
    free(d->max_left);
    free(d->flags);
    free(d);
}

static uint32_t iv_of(const uint32_t *bound, uint32_t n_iv, uint32_t cp) {
    uint32_t lo = 0, hi = n_iv;
    while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (bound[mid] <= cp) lo = mid;
        else hi = mid;
    }
    return lo;
}

static uint64_t set_hash(const uint64_t *w, uint32_t nw) {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < nw; i++) h = (h ^ w[i]) * 1099511628211ull;
    return h ^ h >> 29;
}

rx_dfa *rx_determinize(const rx *r, char *err, size_t errcap) {
    rerr e = {err, errcap, false};
    if (err && errcap) err[0] = '\0';
    rx_dfa *d = calloc(1, sizeof *d);
    if (!d) return fail_oom(&e), NULL;
    /* classes: the intervals between every label's bounds (and the alphabet's) */
    u32vec bv = {0};
    const uint32_t fixed[] = {0, 1, 0xD800, 0xE000, CP_END};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) u32_push(&bv, fixed[i]);
    for (uint32_t i = 0; i < r->nrg; i++) {
        u32_push(&bv, r->rg[i].lo);
        u32_push(&bv, r->rg[i].hi + 1);
    }
    uint32_t *crg = NULL, *cells = NULL, *htab = NULL;
    uint64_t *pool = NULL, *succ = NULL, *univ = NULL;
    uint8_t *flags = NULL;
    size_t cap_pool = 0, cap_cells = 0, cap_flags = 0;
    if (bv.oom) goto oom;
    qsort(bv.p, bv.n, sizeof *bv.p, cmp_u32);
    size_t nb_ = 0;
    for (size_t i = 0; i < bv.n; i++)
        if (!nb_ || bv.p[i] != bv.p[nb_ - 1]) bv.p[nb_++] = bv.p[i];
    const uint32_t n_iv = (uint32_t)nb_ - 1;
    if (n_iv > MAX_CLASSES) {
        fail(&e, "the pattern has too many distinct character ranges for the constraint");
        goto fail;
    }
    d->n_classes = n_iv;
    d->bound = bv.p;
    bv.p = NULL;
    for (uint32_t c = 0; c < 128; c++) d->ascii[c] = (uint16_t)iv_of(d->bound, n_iv, c);
    d->start = RX_DEAD;
    if (r->n == 0) {
        free(bv.p);
        return d;
    }
    /* each label as class intervals */
    crg = malloc(((size_t)r->nrg + 1) * 2 * sizeof *crg);
    const uint32_t nw = (r->n + 63) / 64;
    succ = malloc((size_t)n_iv * nw * sizeof *succ);
    univ = calloc(nw, sizeof *univ);
    const size_t hcap = 4 * RX_MAX_DSTATES;
    htab = malloc(hcap * sizeof *htab);
    if (!crg || !succ || !univ || !htab) goto oom;
    for (uint32_t i = 0; i < r->nrg; i++) {
        crg[2 * i] = iv_of(d->bound, n_iv, r->rg[i].lo);
        crg[2 * i + 1] = iv_of(d->bound, n_iv, r->rg[i].hi);
    }
    /* every universal state has one language, Σ*: a set holding one is the set of the canonical one, a
     * universal state with a Σ loop (so that its DFA state loops too) */
    bool any_univ = false;
    uint32_t canon = NONE;
    for (uint32_t s = 0; s < r->n; s++)
        if (r->univ[s]) {
            univ[s / 64] |= 1ull << (s % 64);
            any_univ = true;
            for (uint32_t x = r->toff[s]; x < r->toff[s + 1] && canon == NONE; x++)
                if (r->tr[x].to == s && rr_is_sigma(r->rg + r->tr[x].off, r->tr[x].n)) canon = s;
        }
    for (size_t i = 0; i < hcap; i++) htab[i] = NONE;
    uint32_t nd = 0;
    uint64_t work = 0;
    /* interns the set in w (collapsed first); NONE: too many */
#define INTERN(w, out)                                                                                               \
    do {                                                                                                             \
        if (any_univ)                                                                                                \
            for (uint32_t x_ = 0; x_ < nw; x_++)                                                                     \
                if ((w)[x_] & univ[x_]) {                                                                            \
                    memset((w), 0, nw * sizeof *(w));                                                                \
                    (w)[canon / 64] = 1ull << (canon % 64);                                                          \
                    break;                                                                                           \
                }                                                                                                    \
        size_t h_ = (size_t)set_hash((w), nw) & (hcap - 1);                                                          \
        (out) = NONE;                                                                                                \
        while (htab[h_] != NONE) {                                                                                   \
            if (!memcmp(pool + (size_t)htab[h_] * nw, (w), nw * sizeof *(w))) {                                      \
                (out) = htab[h_];                                                                                    \
                break;                                                                                               \
            }                                                                                                        \
            h_ = (h_ + 1) & (hcap - 1);                                                                              \
        }                                                                                                            \
        if ((out) == NONE) {                                                                                         \
            if (nd >= RX_MAX_DSTATES || (size_t)(nd + 1) * n_iv > MAX_CELLS) {                                       \
                fail(&e, "the pattern is too complex for the constraint (more than %d deterministic states)",        \
                     nd >= RX_MAX_DSTATES ? RX_MAX_DSTATES : (int)(MAX_CELLS / n_iv));                               \
                goto fail;                                                                                           \
            }                                                                                                        \
            uint64_t *np_ = grow_array(pool, &cap_pool, ((size_t)nd + 1) * nw - 1, sizeof *pool, 64);                \
            if (!np_) goto oom;                                                                                      \
            pool = np_;                                                                                              \
            memcpy(pool + (size_t)nd * nw, (w), nw * sizeof *(w));                                                   \
            htab[h_] = nd;                                                                                           \
            (out) = nd++;                                                                                            \
        }                                                                                                            \
    } while (0)
    {
        uint64_t *w0 = succ; /* scratch for the start set */
        memset(w0, 0, nw * sizeof *w0);
        w0[r->start / 64] |= 1ull << (r->start % 64);
        uint32_t s0;
        INTERN(w0, s0);
        d->start = s0;
    }
    for (uint32_t i = 0; i < nd; i++) {
        memset(succ, 0, (size_t)n_iv * nw * sizeof *succ);
        uint8_t fl = 0;
        for (uint32_t w = 0; w < nw; w++)
            for (uint64_t bits = pool[(size_t)i * nw + w]; bits; bits &= bits - 1) {
                const uint32_t s = w * 64 + (uint32_t)__builtin_ctzll(bits);
                if (r->acc[s]) fl |= RX_ACCEPT;
                for (uint32_t x = r->toff[s]; x < r->toff[s + 1]; x++) {
                    const rtr *t = &r->tr[x];
                    for (uint32_t y = t->off; y < t->off + t->n; y++)
                        for (uint32_t c = crg[2 * y]; c <= crg[2 * y + 1]; c++)
                            succ[(size_t)c * nw + t->to / 64] |= 1ull << (t->to % 64);
                    work += t->n + crg[2 * (t->off + t->n - 1) + 1] - crg[2 * t->off];
                }
            }
        work += (uint64_t)n_iv * nw;
        if (work > MAX_WORK) {
            fail(&e, "the pattern is too complex for the constraint (its deterministic automaton takes too long to "
                     "build)");
            goto fail;
        }
        uint32_t *nc = grow_array(cells, &cap_cells, ((size_t)i + 1) * n_iv - 1, sizeof *cells, 64);
        uint8_t *nf = grow_array(flags, &cap_flags, i, 1, 64);
        if (!nc || !nf) goto oom;
        cells = nc;
        flags = nf;
        flags[i] = fl;
        for (uint32_t c = 0; c < n_iv; c++) {
            uint64_t *w = succ + (size_t)c * nw;
            bool any = false;
            for (uint32_t x = 0; x < nw && !any; x++) any = w[x] != 0;
            uint32_t to = RX_DEAD;
            if (any) INTERN(w, to);
            cells[(size_t)i * n_iv + c] = to;
        }
    }
#undef INTERN
    d->n_states = nd;
    d->next = cells;
    d->flags = flags;
    cells = NULL;
    flags = NULL;
    /* universal: accepting, and every class of the alphabet loops */
    for (uint32_t i = 0; i < nd; i++) {
        if (!(d->flags[i] & RX_ACCEPT)) continue;
        bool all = true;
        for (uint32_t c = 0; c < n_iv && all; c++) {
            const uint32_t lo = d->bound[c];
            const bool in_sigma = lo >= 1 && !(lo >= 0xD800 && lo < 0xE000) && lo < CP_END;
            if (in_sigma && d->next[(size_t)i * n_iv + c] != i) all = false;
        }
        if (all) d->flags[i] |= RX_UNIVERSAL;
    }
    /* lengths over the distinct successors */
    {
        uint32_t *off = calloc((size_t)nd + 1, sizeof *off), *adj = malloc(((size_t)nd * n_iv + 1) * sizeof *adj);
        uint32_t *seen = malloc(((size_t)nd + 1) * sizeof *seen);
        d->min_left = malloc(((size_t)nd + 1) * sizeof *d->min_left);
        d->max_left = malloc(((size_t)nd + 1) * sizeof *d->max_left);
        bool ok = off && adj && seen && d->min_left && d->max_left;
        if (ok) {
            uint32_t k = 0;
            for (uint32_t i = 0; i < nd; i++) seen[i] = NONE;
            for (uint32_t i = 0; i < nd; i++) {
                for (uint32_t c = 0; c < n_iv; c++) {
                    const uint32_t t = d->next[(size_t)i * n_iv + c];
                    if (t != RX_DEAD && seen[t] != i) {
                        seen[t] = i;
                        adj[k++] = t;
                    }
                }
                off[i + 1] = k;
            }
            ok = graph_lengths(nd, off, adj, d->flags, RX_ACCEPT, d->min_left, d->max_left);
        }
        free(off);
        free(adj);
        free(seen);
        if (!ok) goto oom;
    }
    free(crg);
    free(pool);
    free(succ);
    free(univ);
    free(htab);
    return d;
oom:
    fail_oom(&e);
fail:
    free(bv.p);
    free(crg);
    free(cells);
    free(flags);
    free(pool);
    free(succ);
    free(univ);
    free(htab);
    rx_dfa_free(d);
    return NULL;
}

bool rx_dfa_match(const rx_dfa *d, const char *s, size_t len) {
    uint32_t st = d->start;
    for (size_t i = 0; i < len && st != RX_DEAD;) {
        const uint32_t cp = utf8_cp(s, len, &i);
        if (cp == RX_INF) return false;
        st = rx_dfa_next(d, st, cp);
    }
    return st != RX_DEAD && (d->flags[st] & RX_ACCEPT);
}

/* ---- formats ----------------------------------------------------------------------------------- */
/* A calendar date (RFC 3339 full-date): the days of each month, February 29 in leap years only (divisible by
 * 4, centuries by 400) */
#define RX_LEAP "([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)"
#define RX_DATE                                                                                                      \
    "([0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-"  \
    "8]))"                                                                                                           \
    "|" RX_LEAP "-02-29)"
/* seconds 00-59: a leap second (60) is valid only at 23:59 UTC, which a pattern cannot tell with an offset */
#define RX_TIME  "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
#define RX_OCTET "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
#define RX_HEX   "[0-9A-Fa-f]"

static const struct {
    const char *name, *re;
} FORMATS[] = {
    {"date", "^" RX_DATE "$"},
    {"time", "^" RX_TIME "$"},
    {"date-time", "^" RX_DATE "T" RX_TIME "$"},
    {"uuid", "^" RX_HEX "{8}-" RX_HEX "{4}-" RX_HEX "{4}-" RX_HEX "{4}-" RX_HEX "{12}$"},
    {"ipv4", "^" RX_OCTET "(\\." RX_OCTET "){3}$"},
    /* dot-atoms of [A-Za-z0-9_%+-] (no leading, trailing or double dot), '@', labels of
     * [A-Za-z0-9-] not starting or ending with '-', at least one dot, a top-level domain of
     * 2+ letters */
    {"email", "^[A-Za-z0-9_%+-]+(\\.[A-Za-z0-9_%+-]+)*@([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\\.)+[A-Za-z]{2,}$"},
};

const char *rx_format_pattern(const char *format) {
    for (size_t i = 0; i < sizeof FORMATS / sizeof *FORMATS; i++)
        if (!strcmp(FORMATS[i].name, format)) return FORMATS[i].re;
    return NULL;
}
