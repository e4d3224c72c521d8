/* The matcher: a byte-level pushdown automaton over a compiled schema
 * (json_constraint_impl.h), and the vocabulary index that makes masking a
 * whole vocabulary cheap.
 *
 * A matcher state is a set of threads (alternatives). A thread is small
 * (48 bytes): the container it is in (inline), a link to the containers
 * around it (a persistent stack: entries in an arena, shared between
 * threads, appended and never changed, so copying a thread is copying 48
 * bytes), and the lexer state of what it is reading (a key, a string, a
 * number, a literal...). Trial steps (token checks, masks) append to the
 * arena past the committed entries and roll back; committed entries are
 * compacted now and then.
 *
 * Masking walks a byte trie of the token texts depth-first, stepping the
 * thread set one byte per trie edge and skipping dead subtrees. Inside a
 * string, where nearly every token is allowed, two precomputed classes do
 * most of the work: "plain" tokens (only whole UTF-8 characters other than
 * '"', '\' and controls) leave a string state unchanged, so they are all
 * allowed at once (a bitset; by character count when a maxLength is near),
 * and the other tokens are checked from their first non-plain byte on (a
 * trie of those tails). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "text/json_constraint_impl.h"

#define JC_ROOT JC_NONE /* container of the top-level value */

enum {
    M_PREFIX,       /* pos: bytes of the prefix matched */
    M_VAL,          /* node: the value to read next; ws */
    M_KEYSTART,     /* after '{' (F_CANCLOSE) or ',': ws, then a key (or '}') */
    M_KEYREQ,       /* node: index of the required property whose key is read; pos: bytes matched */
    M_KEYLIT,       /* pos: key trie node (optional properties) */
    M_KEYSTR,       /* a key not among the properties (string lexer); aux: key trie node or JC_NONE */
    M_COLON,        /* node: the value after the colon; ws */
    M_AFTER_MEMBER, /* ws, then ',' or '}' */
    M_ARROPEN,      /* after '[': ws, then an item or ']' */
    M_AFTER_ITEM,   /* ws, then ',' or ']' */
    M_STR,          /* node: K_STR; pos: characters (saturated), esc, utf, val (\u digits); with a pattern:
                       aux: DFA state, val: the code point's bits so far, val2: a \u high surrogate */
    M_LIT,          /* pos: literal trie node */
    M_NUM,          /* node: K_NUM; esc: phase; pos: integer digits, aux: fraction/exponent digits,
                       val/val2: integer and fraction digits (bounded numbers only); F_NEG */
    M_XLIT,         /* xml calls: aux: the literal (XL_*), pos: its bytes matched; node: what follows it */
    M_XNAME,        /* xml: pos: the tool name's node in the root object's key trie */
    M_XBODY,        /* xml: in the arguments (fnode): '<' of the next parameter or of </function> */
    M_XKEYREQ,      /* xml: node: index of the required parameter whose name is read; pos: bytes of its key */
    M_XKEYLIT,      /* xml: pos: key trie node (optional parameters) */
    M_XKEYSTR,      /* xml: a parameter not among the properties; aux: key trie node or JC_NONE; pos: length */
    M_XRAW,         /* xml: node: K_STR, a raw text value; as M_STR, but esc: how much of "</parameter>" the
                       text ends with */
    M_XRAWLIT,      /* xml: pos: literal trie node: a raw text value among string literals */
    M_AFTER_ROOT,   /* ws (outer), then the suffix */
    M_SUFFIX,       /* pos: bytes of the suffix matched */
    M_END,
};
enum { WS_NONE = 0xFF, WS_LAST = 3 + JC_WS_INDENT };
/* The literals of an xml call (chat_format.h):
 * <function=NAME>\n (<parameter=KEY>\nVALUE\n</parameter>\n)* </function> */
enum { XL_FUNC, XL_ARGS, XL_PARAM, XL_JSON, XL_RAW, XL_PCLOSE, XL_EFUNC };
static const char *const XLIT[] = {"<function=", "\n", "<parameter=", "\n", "\n", "\n</parameter>\n", "</function>"};
static const char XTAG[] = "</parameter>"; /* a raw value never holds it: the first one closes the value */
enum { XKEY_MAX = 256 };                   /* the answer parser's limit on a name */
enum { F_CANCLOSE = 1, F_NEG = 2 };
enum { NP_MINUS = 1, NP_ZERO, NP_INT, NP_DOT, NP_FRAC, NP_E, NP_ESIGN, NP_EXP };

typedef struct jc_thread {
    uint32_t up;     /* arena entry of the enclosing containers (0: none) */
    uint32_t fnode;  /* the container this thread is in (JC_ROOT: top level) */
    uint32_t fcount; /* object: next property index (n: extra keys); array: items begun */
    uint32_t node, pos, aux;
    uint64_t val, val2;
    uint8_t mode, depth, ws, esc, utf, flags, pad0, pad1;
} jc_thread;

typedef struct jc_entry {
    uint32_t fnode, fcount, up;
} jc_entry;

/* A byte trie over token texts, nodes in preorder: node i's subtree is
 * [i, end[i]), its first child is i + 1; lab[i] is the byte into it; the
 * tokens whose text ends at i are ids[tok[i] .. tok[i + 1]). */
typedef struct jc_trie {
    uint32_t n, maxlen;
    uint8_t *lab;
    uint32_t *end, *tok;
    int32_t *ids;
} jc_trie;

struct jc_vocab {
    int32_t n_vocab;
    uint32_t *off; /* text of id: text[off[id] .. off[id + 1]) */
    uint8_t *text;
    uint32_t max_len;
    uint64_t *plain;   /* bitset of plain tokens */
    int32_t *by_chars; /* plain tokens by character count */
    uint32_t *bc_off;  /* tokens of k characters: by_chars[bc_off[k] .. bc_off[k + 1]) */
    uint32_t bc_max;
    jc_trie all, tail, nonplain;
};

enum { HASH_SIZE = 2 * JC_MAX_THREADS, HASH_FROM = 8 };

/* Scratch of a matcher: the arena, the DFS levels of a mask, the table that
 * deduplicates a step's outputs once they are many. */
typedef struct jc_work {
    jc_entry *e;
    uint32_t n, cap;
    jc_thread *lv; /* the threads of the DFS levels, packed */
    size_t lv_cap;
    uint32_t *lv_off, *lv_cnt, *lv_cur, *lv_child, *lv_mark;
    size_t n_levels;
    uint32_t hstamp;
    uint32_t hs[HASH_SIZE];
    uint16_t hi[HASH_SIZE];
    jc_thread a[JC_MAX_THREADS], b[JC_MAX_THREADS];
    jc_thread g[3][JC_MAX_THREADS];
} jc_work;

struct jc_matcher {
    const jc_schema *s;
    char *prefix, *suffix;
    uint32_t plen, slen;
    bool outer_ws;
    bool xml; /* an xml call: the root object's keys are tool names, their values the arguments */
    int n;
    uint32_t n_commit; /* arena entries [1, n_commit) are used by th */
    jc_thread th[JC_MAX_THREADS];
    jc_work *w;
};

typedef struct sctx {
    const jc_matcher *m;
    const jc_schema *s;
    jc_work *w;
    jc_thread *out;
    int n;
    bool hashed; /* outputs are in w's hash table */
} sctx;

/* ---- helpers ---------------------------------------------------------------- */
static const jc_i128 P10[33] = {(jc_i128)1LL,
                                (jc_i128)10LL,
                                (jc_i128)100LL,
                                (jc_i128)1000LL,
                                (jc_i128)10000LL,
                                (jc_i128)100000LL,
                                (jc_i128)1000000LL,
                                (jc_i128)10000000LL,
                                (jc_i128)100000000LL,
                                (jc_i128)1000000000LL,
                                (jc_i128)10000000000LL,
                                (jc_i128)100000000000LL,
                                (jc_i128)1000000000000LL,
                                (jc_i128)10000000000000LL,
                                (jc_i128)100000000000000LL,
                                (jc_i128)1000000000000000LL,
                                (jc_i128)10000000000000000LL,
                                (jc_i128)100000000000000000LL,
                                (jc_i128)1000000000000000000LL,
                                (jc_i128)1000000000000000000LL * 10LL,
                                (jc_i128)1000000000000000000LL * 100LL,
                                (jc_i128)1000000000000000000LL * 1000LL,
                                (jc_i128)1000000000000000000LL * 10000LL,
                                (jc_i128)1000000000000000000LL * 100000LL,
                                (jc_i128)1000000000000000000LL * 1000000LL,
                                (jc_i128)1000000000000000000LL * 10000000LL,
                                (jc_i128)1000000000000000000LL * 100000000LL,
                                (jc_i128)1000000000000000000LL * 1000000000LL,
                                (jc_i128)1000000000000000000LL * 10000000000LL,
                                (jc_i128)1000000000000000000LL * 100000000000LL,
                                (jc_i128)1000000000000000000LL * 1000000000000LL,
                                (jc_i128)1000000000000000000LL * 10000000000000LL,
                                (jc_i128)1000000000000000000LL * 100000000000000LL};

static uint32_t thash(const jc_thread *t) {
    uint32_t x[sizeof *t / 4];
    memcpy(x, t, sizeof x);
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < sizeof x / 4; i++) h = (h ^ x[i]) * 16777619u;
    return (h ^ h >> 15) & (HASH_SIZE - 1);
}

static void hash_put(jc_work *w, uint32_t h, int idx) {
    while (w->hs[h] == w->hstamp) h = (h + 1) & (HASH_SIZE - 1);
    w->hs[h] = w->hstamp;
    w->hi[h] = (uint16_t)idx;
}

/* Adds t to the step's outputs unless it is there already or they are full.
 * A few are compared one by one; past HASH_FROM, through a hash table. */
static void emit(sctx *c, const jc_thread *t) {
    if (!c->hashed) {
        for (int i = 0; i < c->n; i++)
            if (!memcmp(&c->out[i], t, sizeof *t)) return;
        c->out[c->n++] = *t;
        if (c->n == HASH_FROM) {
            jc_work *w = c->w;
            if (++w->hstamp == 0) {
                memset(w->hs, 0, sizeof w->hs);
                w->hstamp = 1;
            }
            for (int i = 0; i < c->n; i++) hash_put(w, thash(&c->out[i]), i);
            c->hashed = true;
        }
        return;
    }
    jc_work *w = c->w;
    uint32_t h = thash(t);
    for (; w->hs[h] == w->hstamp; h = (h + 1) & (HASH_SIZE - 1))
        if (!memcmp(&c->out[w->hi[h]], t, sizeof *t)) return;
    if (c->n >= JC_MAX_THREADS) return;
    w->hs[h] = w->hstamp;
    w->hi[h] = (uint16_t)c->n;
    c->out[c->n++] = *t;
}

static bool push(sctx *c, jc_thread *t, uint32_t node) {
    jc_work *w = c->w;
    if (w->n == w->cap) {
        const uint32_t nc = w->cap * 2;
        jc_entry *p = realloc(w->e, (size_t)nc * sizeof *p);
        if (!p) return false;
        w->e = p;
        w->cap = nc;
    }
    w->e[w->n] = (jc_entry){t->fnode, t->fcount, t->up};
    t->up = w->n++;
    t->fnode = node;
    t->fcount = 0;
    t->depth++;
    return true;
}

static void pop(const sctx *c, jc_thread *t) {
    const jc_entry e = c->w->e[t->up];
    t->fnode = e.fnode;
    t->fcount = e.fcount;
    t->up = e.up;
    t->depth--;
}

static void set_mode(jc_thread *t, uint8_t mode) {
    t->mode = mode;
    t->node = t->pos = t->aux = 0;
    t->val = t->val2 = 0;
    t->ws = t->esc = t->utf = t->flags = 0;
}

static inline bool is_ws(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }

/* "" | " " | "\n" "\n"? [ \t]{0,20} */
static bool ws_step(uint8_t *ws, uint8_t b) {
    switch (*ws) {
    case WS_NONE: return false;
    case 0:
        if (b == ' ') *ws = 1;
        else if (b == '\n') *ws = 2;
        else return false;
        return true;
    case 1: return false;
    case 2:
        if (b == '\n') *ws = 3;
        else if (b == ' ' || b == '\t') *ws = 4;
        else return false;
        return true;
    default:
        if ((b != ' ' && b != '\t') || *ws >= WS_LAST) return false;
        *ws = *ws == 3 ? 4 : (uint8_t)(*ws + 1);
        return true;
    }
}

static inline bool fits(const jc_schema *s, const jc_thread *t, uint32_t node) {
    return (int32_t)t->depth + s->nodes[node].mind <= JC_MAX_DEPTH;
}

static inline uint32_t item_node(const jc_schema *s, const jc_node *a, uint32_t i) {
    return i < a->n ? s->alts[a->off + i] : a->extra;
}

static void root_value(const jc_matcher *m, jc_thread *t) {
    if (m->xml) {
        set_mode(t, M_XLIT);
        t->aux = XL_FUNC;
        return;
    }
    set_mode(t, M_VAL);
    t->node = m->s->root;
    t->ws = m->outer_ws ? 0 : WS_NONE;
}

static void after_value(const sctx *c, jc_thread *t) {
    if (t->fnode == JC_ROOT) {
        set_mode(t, M_AFTER_ROOT);
        t->ws = c->m->outer_ws ? 0 : WS_NONE;
        if (!c->m->outer_ws && c->m->slen == 0) set_mode(t, M_END);
        return;
    }
    if (c->m->xml && t->depth == 1) { /* a parameter's JSON value */
        set_mode(t, M_XLIT);
        t->aux = XL_PCLOSE;
        return;
    }
    set_mode(t, c->s->nodes[t->fnode].kind == K_OBJ ? M_AFTER_MEMBER : M_AFTER_ITEM);
}

static void close_container(sctx *c, jc_thread *t) {
    pop(c, t);
    after_value(c, t);
    emit(c, t);
}

/* ---- strings ---------------------------------------------------------------- */
/* UTF-8 lead byte: continuation bytes needed (0: invalid) and the range of
 * the first one (class 0: 80-BF, 1: A0-BF, 2: 80-9F, 3: 90-BF, 4: 80-8F). */
static int utf8_lead(uint8_t b, int *cls) {
    *cls = 0;
    if (b >= 0xC2 && b <= 0xDF) return 1;
    if (b == 0xE0) return *cls = 1, 2;
    if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return 2;
    if (b == 0xED) return *cls = 2, 2;
    if (b == 0xF0) return *cls = 3, 3;
    if (b >= 0xF1 && b <= 0xF3) return 3;
    if (b == 0xF4) return *cls = 4, 3;
    return 0;
}

static const uint8_t CONT_LO[5] = {0x80, 0xA0, 0x80, 0x90, 0x80}, CONT_HI[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};

static int hexval(uint8_t b) {
    if (b >= '0' && b <= '9') return b - '0';
    if (b >= 'a' && b <= 'f') return b - 'a' + 10;
    if (b >= 'A' && b <= 'F') return b - 'A' + 10;
    return -1;
}

/* Patterned strings (x: the node's jc_rx): a character is taken when the
 * DFA goes on with it and some accepted string of an allowed length still
 * follows; inside a multi-byte character or an escape, when some code point
 * it may still become does. t->pos already counts the character. */
static bool rx_take(jc_thread *t, const jc_rx *x, uint32_t cp, uint32_t min, uint32_t max) {
    const uint32_t nx = rx_dfa_next(x->dfa, t->aux, cp);
    if (nx == RX_DEAD || !jc_rx_ok(x, nx, t->pos, min, max)) return false;
    t->aux = nx;
    return true;
}

static bool rx_range(const jc_thread *t, const jc_rx *x, uint32_t lo, uint32_t hi, uint32_t min, uint32_t max) {
    const rx_dfa *d = x->dfa;
    if (lo > hi) return false;
    const uint32_t *row = d->next + (size_t)t->aux * d->n_classes;
    for (uint32_t c = rx_dfa_class(d, lo); c < d->n_classes && d->bound[c] <= hi; c++)
        if (row[c] != RX_DEAD && jc_rx_ok(x, row[c], t->pos, min, max)) return true;
    return false;
}

/* After j (1..3) hex digits v of a \u escape: the code points it may still
 * be, directly or through a high surrogate's pair. */
static bool rx_u_range(const jc_thread *t, const jc_rx *x, uint32_t v, uint32_t j, uint32_t min, uint32_t max) {
    const uint32_t sh = 4 * (4 - j), lo = v << sh, hi = lo | ((1u << sh) - 1);
    if (rx_range(t, x, lo, hi, min, max)) return true; /* (no transitions on surrogates) */
    const uint32_t a = lo > 0xD800 ? lo : 0xD800, b = hi < 0xDBFF ? hi : 0xDBFF;
    return a <= b && rx_range(t, x, 0x10000 + ((a - 0xD800) << 10), 0x10000 + ((b - 0xD800) << 10) + 0x3FF, min, max);
}

/* A continuation byte of a multi-byte character. 0 refused, 1 taken. */
static int utf_cont(jc_thread *t, uint8_t b, uint32_t min, uint32_t max, const jc_rx *x) {
    const int rem = t->utf & 3, cls = t->utf >> 2;
    if (b < CONT_LO[cls] || b > CONT_HI[cls]) return 0;
    t->utf = (uint8_t)(rem - 1);
    if (x) {
        t->val = t->val << 6 | (b & 0x3F);
        if (rem == 1) {
            const uint32_t cp = (uint32_t)t->val;
            t->val = 0;
            return rx_take(t, x, cp, min, max);
        }
        const uint32_t sh = 6 * (uint32_t)(rem - 1), lo = (uint32_t)t->val << sh;
        return rx_range(t, x, lo, lo | ((1u << sh) - 1), min, max);
    }
    return 1;
}

/* The first byte of a character: counts it, begins a multi-byte one, or
 * (escapes: a JSON string) an escape at '\'. 0 refused, 1 taken. */
static int char_begin(jc_thread *t, uint8_t b, uint32_t min, uint32_t max, const jc_rx *x, bool escapes) {
    if (max != JC_NONE && t->pos >= max) return 0;
    const bool esc = escapes && b == '\\';
    int cls = 0, need = 0;
    if (esc) t->esc = 1;
    else if (b >= 0x80) {
        if (!(need = utf8_lead(b, &cls))) return 0;
        t->utf = (uint8_t)(need | cls << 2);
    }
    const uint32_t sat = max != JC_NONE ? max : min;
    if (t->pos < sat) t->pos++;
    if (x) {
        if (esc) return rx_range(t, x, 1, 0x10FFFF, min, max); /* \u can write any */
        if (b < 0x80) return rx_take(t, x, b, min, max);
        static const uint32_t LEAST[4] = {0, 0x80, 0x800, 0x10000};
        const uint32_t v = b & (0x3Fu >> need), sh = 6 * (uint32_t)need;
        t->val = v;
        const uint32_t lo = v << sh;
        return rx_range(t, x, lo < LEAST[need] ? LEAST[need] : lo, lo | ((1u << sh) - 1), min, max);
    }
    return 1;
}

/* One byte of a raw text value (xml calls): any text but NUL and XTAG. 0
 * refused, 1 taken. */
static int raw_byte(jc_thread *t, uint8_t b, uint32_t min, uint32_t max, const jc_rx *x) {
    if (b == 0) return 0;
    t->esc = b == (uint8_t)XTAG[t->esc] ? (uint8_t)(t->esc + 1) : b == '<' ? 1 : 0;
    if (t->esc == sizeof XTAG - 1) return 0;
    return t->utf ? utf_cont(t, b, min, max, x) : char_begin(t, b, min, max, x, false);
}

/* One byte inside a string: 0 refused, 1 taken, 2 the closing quote. x: the
 * pattern, or NULL. */
static int str_byte(jc_thread *t, uint8_t b, uint32_t min, uint32_t max, const jc_rx *x) {
    if (t->utf) return utf_cont(t, b, min, max, x);
    int h;
    switch (t->esc) {
    case 0:
        if (b == '"') return t->pos >= min && (!x || (x->dfa->flags[t->aux] & RX_ACCEPT)) ? 2 : 0;
        if (b < 0x20) return 0;
        return char_begin(t, b, min, max, x, true);
    case 1:
        if (b == 'u') {
            t->esc = 2;
            t->val = 0;
            return 1;
        }
        if (!strchr("\"\\/bfnrt", b) || !b) return 0;
        t->esc = 0;
        if (x) {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            return rx_take(t, x, (uint8_t)to[strchr(from, b) - from], min, max);
        }
        return 1;
    case 2:
    case 3:
    case 4:
    case 5:
        if ((h = hexval(b)) < 0) return 0;
        t->val = t->val * 16 + (uint64_t)h;
        if (t->esc == 3 && t->val >= 0xDC && t->val <= 0xDF) return 0; /* a lone low surrogate */
        if (t->esc < 5) {
            t->esc++;
            return !x || rx_u_range(t, x, (uint32_t)t->val, (uint32_t)t->esc - 2, min, max);
        }
        if (t->val == 0) return 0; /* \u0000: jansson refuses it */
        const uint32_t u = (uint32_t)t->val;
        t->esc = (u >= 0xD800 && u <= 0xDBFF) ? 6 : 0;
        t->val = 0;
        if (!x) return 1;
        if (t->esc == 0) return rx_take(t, x, u, min, max);
        t->val2 = u;
        return rx_range(t, x, 0x10000 + ((u - 0xD800) << 10), 0x10000 + ((u - 0xD800) << 10) + 0x3FF, min, max);
    case 6: return b == '\\' ? (t->esc = 7, 1) : 0;
    case 7: return b == 'u' ? (t->esc = 8, 1) : 0;
    default: /* 8..11: the low surrogate DC00-DFFF */
        if ((h = hexval(b)) < 0) return 0;
        if (t->esc == 8 && h != 0xD) return 0;
        if (t->esc == 9 && h < 0xC) return 0;
        const uint32_t j = (uint32_t)t->esc - 7; /* low digits read */
        t->esc = t->esc == 11 ? 0 : (uint8_t)(t->esc + 1);
        if (!x) return 1;
        t->val = t->val * 16 + (uint64_t)h;
        const uint32_t base = 0x10000 + (((uint32_t)t->val2 - 0xD800) << 10);
        if (j == 4) {
            const uint32_t cp = base + ((uint32_t)t->val - 0xDC00);
            t->val = t->val2 = 0;
            return rx_take(t, x, cp, min, max);
        }
        const uint32_t sh = 4 * (4 - j), lo = (uint32_t)t->val << sh, hi = lo | ((1u << sh) - 1);
        return rx_range(t, x, base + ((lo > 0xDC00 ? lo : 0xDC00) - 0xDC00), base + (hi - 0xDC00), min, max);
    }
}

/* ---- numbers ---------------------------------------------------------------- */
static jc_i128 maxmag(const jc_node *n) { return n->integer ? (P10[16] - 1) * JC_SCALE : P10[32] - 1; }

static bool hits(const jc_node *n, bool neg, jc_i128 a, jc_i128 b) {
    const jc_i128 lo = neg ? -b : a, hi = neg ? -a : b;
    return !(hi < n->lo || lo > n->hi);
}

/* Whether some completion of the number read so far is within bounds. */
static bool num_feasible(const jc_node *n, const jc_thread *t) {
    const bool neg = t->flags & F_NEG;
    switch (t->esc) {
    case NP_MINUS: return hits(n, true, 0, maxmag(n));
    case NP_ZERO: return hits(n, neg, 0, n->integer ? 0 : JC_SCALE - 1);
    case NP_INT:
        for (uint32_t j = 0; t->pos + j <= JC_INT_DIGITS; j++) {
            const jc_i128 v = (jc_i128)t->val * P10[j];
            const jc_i128 a = v * JC_SCALE,
                          b = n->integer ? (v + P10[j] - 1) * JC_SCALE : (v + P10[j]) * JC_SCALE - 1;
            if (hits(n, neg, a, b)) return true;
        }
        return false;
    case NP_DOT: return hits(n, neg, (jc_i128)t->val * JC_SCALE, (jc_i128)t->val * JC_SCALE + JC_SCALE - 1);
    case NP_FRAC: {
        const jc_i128 unit = P10[JC_FRAC_DIGITS - t->aux];
        const jc_i128 a = (jc_i128)t->val * JC_SCALE + (jc_i128)t->val2 * unit;
        return hits(n, neg, a, a + unit - 1);
    }
    default: return true;
    }
}

static bool num_complete(const jc_node *n, const jc_thread *t) {
    if (t->esc != NP_ZERO && t->esc != NP_INT && t->esc != NP_FRAC && t->esc != NP_EXP) return false;
    if (!n->bounded) return true;
    jc_i128 x = (jc_i128)t->val * JC_SCALE;
    if (t->esc == NP_FRAC) x += (jc_i128)t->val2 * P10[JC_FRAC_DIGITS - t->aux];
    if (t->flags & F_NEG) x = -x;
    return x >= n->lo && x <= n->hi;
}

static bool num_byte(const jc_node *n, jc_thread *t, uint8_t b) {
    const bool digit = b >= '0' && b <= '9';
    const uint64_t d = digit ? (uint64_t)(b - '0') : 0;
    const bool track = n->bounded;
    switch (t->esc) {
    case NP_MINUS:
        if (!digit) return false;
        t->esc = d ? NP_INT : NP_ZERO;
        t->pos = 1;
        if (track) t->val = d;
        break;
    case NP_ZERO:
    case NP_INT:
        if (digit) {
            if (t->esc == NP_ZERO || t->pos >= JC_INT_DIGITS) return false;
            t->pos++;
            if (track) t->val = t->val * 10 + d;
            break;
        }
        if (n->integer) return false;
        if (b == '.') {
            t->esc = NP_DOT;
            break;
        }
        if ((b == 'e' || b == 'E') && !track) {
            t->esc = NP_E;
            t->pos = 0;
            break;
        }
        return false;
    case NP_DOT:
        if (!digit) return false;
        t->esc = NP_FRAC;
        t->aux = 1;
        if (track) t->val2 = d;
        break;
    case NP_FRAC:
        if (digit) {
            if (t->aux >= JC_FRAC_DIGITS) return false;
            t->aux++;
            if (track) t->val2 = t->val2 * 10 + d;
            break;
        }
        if ((b == 'e' || b == 'E') && !track) {
            t->esc = NP_E;
            t->pos = t->aux = 0;
            break;
        }
        return false;
    case NP_E:
        if (b == '+' || b == '-') {
            t->esc = NP_ESIGN;
            break;
        }
        if (!digit) return false;
        t->esc = NP_EXP;
        t->aux = 1;
        break;
    case NP_ESIGN:
        if (!digit) return false;
        t->esc = NP_EXP;
        t->aux = 1;
        break;
    case NP_EXP:
        if (!digit || t->aux >= JC_EXP_DIGITS) return false;
        t->aux++;
        break;
    default: return false;
    }
    return !track || num_feasible(n, t);
}

/* ---- objects ------------------------------------------------------------------ */
/* Whether key trie node tn leads to a key the object can take now. */
static bool key_alive(const sctx *c, const jc_thread *t, uint32_t tn) {
    const jc_schema *s = c->s;
    const jc_node *o = &s->nodes[t->fnode];
    const uint32_t i = t->fcount;
    if (s->tn[tn].maxj < (int32_t)i) return false;
    if ((int32_t)t->depth + o->max_opt_mind <= JC_MAX_DEPTH) return true;
    const uint32_t d = s->tn[tn].depth; /* near the depth cap: only the keys whose value still fits */
    for (uint32_t j = i; j < o->n; j++) {
        const jc_prop *p = &s->props[o->off + j];
        if (!fits(s, t, p->node) || p->key_len < d) continue;
        uint32_t at = o->trie;
        for (uint32_t k = 0; k < d && at != JC_NONE; k++) at = jc_tchild(s, at, (uint8_t)s->bytes[p->key_off + k]);
        if (at == tn) return true;
    }
    return false;
}

static bool key_possible(const sctx *c, const jc_thread *t) {
    const jc_schema *s = c->s;
    const jc_node *o = &s->nodes[t->fnode];
    if (t->fcount < o->nreq) return true;
    for (uint32_t j = t->fcount; j < o->n; j++)
        if (fits(s, t, s->props[o->off + j].node)) return true;
    return o->extra != JC_NONE && fits(s, t, o->extra);
}

/* The opening quote of a key (xml: after "<parameter="): a required
 * property's key, an optional one's, or one the schema does not declare. */
static void start_key(sctx *c, const jc_thread *t0, bool xml) {
    const jc_schema *s = c->s;
    const jc_node *o = &s->nodes[t0->fnode];
    const uint32_t i = t0->fcount;
    jc_thread t = *t0;
    if (i < o->nreq) {
        set_mode(&t, xml ? M_XKEYREQ : M_KEYREQ);
        t.node = i;
        t.pos = 1;
        emit(c, &t);
        return;
    }
    const uint32_t r = o->trie != JC_NONE ? jc_tchild(s, o->trie, '"') : JC_NONE;
    if (r != JC_NONE && i < o->n && key_alive(c, t0, r)) {
        set_mode(&t, xml ? M_XKEYLIT : M_KEYLIT);
        t.pos = r;
        emit(c, &t);
    }
    if (o->extra != JC_NONE && fits(s, t0, o->extra)) {
        t = *t0;
        set_mode(&t, xml ? M_XKEYSTR : M_KEYSTR);
        t.aux = r;
        emit(c, &t);
    }
}

static void to_colon(sctx *c, jc_thread *t, uint32_t next, uint32_t value) {
    set_mode(t, M_COLON);
    t->fcount = next;
    t->node = value;
    emit(c, t);
}

/* ---- values --------------------------------------------------------------------- */
static void lit_settle(const sctx *c, jc_thread *t) {
    const jc_tnode *tn = &c->s->tn[t->pos];
    if (tn->term >= 0 && tn->n_edges == 0) after_value(c, t);
}

/* The first byte b of a value of concrete node id. */
static void start_value(sctx *c, const jc_thread *t0, uint32_t id, uint8_t b) {
    const jc_schema *s = c->s;
    const jc_node *n = &s->nodes[id];
    jc_thread t = *t0;
    switch (n->kind) {
    case K_OBJ:
    case K_ARR:
        if (b != (n->kind == K_OBJ ? '{' : '[') || !fits(s, &t, id)) return;
        set_mode(&t, n->kind == K_OBJ ? M_KEYSTART : M_ARROPEN);
        if (!push(c, &t, id)) return;
        if (n->kind == K_OBJ) t.flags = F_CANCLOSE;
        emit(c, &t);
        return;
    case K_STR:
        if (b != '"') return;
        set_mode(&t, M_STR);
        t.node = id;
        if (n->rx != JC_NONE) t.aux = s->rx[n->rx].dfa->start;
        emit(c, &t);
        return;
    case K_NUM:
        set_mode(&t, M_NUM);
        t.node = id;
        if (b == '-') {
            t.esc = NP_MINUS;
            t.flags = F_NEG;
        } else if (b >= '0' && b <= '9') {
            t.esc = b == '0' ? NP_ZERO : NP_INT;
            t.pos = 1;
            if (n->bounded) t.val = (uint64_t)(b - '0');
        } else {
            return;
        }
        if (n->bounded && !num_feasible(n, &t)) return;
        emit(c, &t);
        return;
    case K_LIT: {
        const uint32_t ch = jc_tchild(s, n->trie, b);
        if (ch == JC_NONE) return;
        set_mode(&t, M_LIT);
        t.pos = ch;
        lit_settle(c, &t);
        emit(c, &t);
        return;
    }
    default: return;
    }
}

static void dispatch(sctx *c, const jc_thread *t, uint32_t node, uint8_t b) {
    const jc_schema *s = c->s;
    const jc_node *n = &s->nodes[node];
    if (n->kind != K_ALT) {
        start_value(c, t, node, b);
        return;
    }
    for (uint32_t i = 0; i < n->n; i++) start_value(c, t, s->alts[n->off + i], b);
}

/* ---- xml calls ---------------------------------------------------------------------- */
/* After a parameter's name and its '>': the "\n" and then its value, raw
 * text or JSON. next: the object's next property index. */
static void xml_to_value(sctx *c, jc_thread *t, uint32_t next, uint32_t value, bool raw) {
    set_mode(t, M_XLIT);
    t->aux = raw ? XL_RAW : XL_JSON;
    t->fcount = next;
    t->node = value;
    emit(c, t);
}

/* A raw text value of node id (its string alternatives). */
static void xml_raw_value(sctx *c, const jc_thread *t0, uint32_t id) {
    const jc_schema *s = c->s;
    const jc_node *n = &s->nodes[id];
    jc_thread t = *t0;
    if (n->kind == K_ALT) {
        for (uint32_t i = 0; i < n->n; i++) xml_raw_value(c, t0, s->alts[n->off + i]);
    } else if (n->kind == K_STR) {
        set_mode(&t, M_XRAW);
        t.node = id;
        if (n->rx != JC_NONE) t.aux = s->rx[n->rx].dfa->start;
        emit(c, &t);
    } else if (n->kind == K_LIT) {
        const uint32_t q = jc_tchild(s, n->trie, '"');
        if (q == JC_NONE) return;
        set_mode(&t, M_XRAWLIT);
        t.pos = q;
        emit(c, &t);
    }
}

/* A raw value may end here: the closing tag's first byte ('\n'). */
static void xml_raw_close(sctx *c, const jc_thread *t0) {
    jc_thread t = *t0;
    set_mode(&t, M_XLIT);
    t.aux = XL_PCLOSE;
    t.pos = 1;
    emit(c, &t);
}

/* A literal of an xml call is complete: what follows it. */
static void xml_lit_done(sctx *c, jc_thread *t) {
    const jc_schema *s = c->s;
    const uint32_t node = t->node;
    switch (t->aux) {
    case XL_FUNC: {
        const jc_node *root = &s->nodes[s->root];
        const uint32_t q = root->trie != JC_NONE ? jc_tchild(s, root->trie, '"') : JC_NONE;
        if (q == JC_NONE) return;
        set_mode(t, M_XNAME);
        t->pos = q;
        emit(c, t);
        return;
    }
    case XL_ARGS: { /* the arguments: an object (each object alternative) */
        const jc_node *n = &s->nodes[node];
        const uint32_t k = n->kind == K_ALT ? n->n : 1;
        for (uint32_t i = 0; i < k; i++) {
            const uint32_t o = n->kind == K_ALT ? s->alts[n->off + i] : node;
            if (s->nodes[o].kind != K_OBJ) continue;
            jc_thread u = *t;
            set_mode(&u, M_XBODY);
            if (push(c, &u, o)) emit(c, &u);
        }
        return;
    }
    case XL_PARAM: start_key(c, t, true); return;
    case XL_JSON:
        set_mode(t, M_VAL);
        t->node = node;
        t->ws = WS_NONE;
        emit(c, t);
        return;
    case XL_RAW: xml_raw_value(c, t, node); return;
    case XL_PCLOSE:
        set_mode(t, M_XBODY);
        emit(c, t);
        return;
    default: close_container(c, t); return; /* XL_EFUNC */
    }
}

static void xml_step(sctx *c, jc_thread *t, uint8_t b) {
    const jc_schema *s = c->s;
    switch (t->mode) {
    case M_XLIT: {
        const char *l = XLIT[t->aux];
        if (b != (uint8_t)l[t->pos]) return;
        if (l[++t->pos]) emit(c, t);
        else xml_lit_done(c, t);
        return;
    }
    case M_XNAME: {
        if (b == '>') {
            const uint32_t q = jc_tchild(s, t->pos, '"');
            if (q == JC_NONE || s->tn[q].term < 0) return;
            const jc_node *root = &s->nodes[s->root];
            const uint32_t args = s->props[root->off + (uint32_t)s->tn[q].term].node;
            set_mode(t, M_XLIT);
            t->aux = XL_ARGS;
            t->node = args;
            emit(c, t);
            return;
        }
        const uint32_t ch = b == '"' ? JC_NONE : jc_tchild(s, t->pos, b);
        if (ch == JC_NONE) return;
        t->pos = ch;
        emit(c, t);
        return;
    }
    case M_XBODY: {
        if (b != '<') return;
        jc_thread u = *t;
        if (key_possible(c, t)) {
            set_mode(&u, M_XLIT);
            u.aux = XL_PARAM;
            u.pos = 1;
            emit(c, &u);
        }
        if (t->fcount >= s->nodes[t->fnode].nreq) {
            u = *t;
            set_mode(&u, M_XLIT);
            u.aux = XL_EFUNC;
            u.pos = 1;
            emit(c, &u);
        }
        return;
    }
    case M_XKEYREQ: {
        const jc_prop *p = &s->props[s->nodes[t->fnode].off + t->node];
        if (t->pos == p->key_len - 1) { /* where the JSON key closes its quote */
            if (b == '>') xml_to_value(c, t, t->node + 1, p->node, p->raw);
            return;
        }
        if (b != (uint8_t)s->bytes[p->key_off + t->pos]) return;
        t->pos++;
        emit(c, t);
        return;
    }
    case M_XKEYLIT: {
        const uint32_t ch = b == '"' ? JC_NONE : jc_tchild(s, t->pos, b == '>' ? '"' : b);
        if (ch == JC_NONE || !key_alive(c, t, ch)) return;
        if (b != '>') {
            t->pos = ch;
            emit(c, t);
            return;
        }
        const int32_t j = s->tn[ch].term;
        if (j < 0) return;
        const jc_prop *p = &s->props[s->nodes[t->fnode].off + (uint32_t)j];
        xml_to_value(c, t, (uint32_t)j + 1, p->node, p->raw);
        return;
    }
    case M_XKEYSTR: {
        const jc_node *o = &s->nodes[t->fnode];
        if (b == '>') {
            if (!t->pos) return;
            if (t->aux != JC_NONE) { /* spelled as a declared key: not an extra one */
                const uint32_t q = jc_tchild(s, t->aux, '"');
                if (q != JC_NONE && s->tn[q].term >= 0) return;
            }
            xml_to_value(c, t, o->n, o->extra, false); /* an undeclared parameter's value is read as JSON */
            return;
        }
        if (b == '\n' || b == '<' || b == '"' || b == 0 || t->pos >= XKEY_MAX) return;
        if (t->aux != JC_NONE) t->aux = jc_tchild(s, t->aux, b);
        t->pos++;
        emit(c, t);
        return;
    }
    case M_XRAW: {
        const jc_node *n = &s->nodes[t->node];
        const jc_rx *x = n->rx == JC_NONE ? NULL : &s->rx[n->rx];
        if (b == '\n' && !t->utf && t->pos >= n->min && (!x || (x->dfa->flags[t->aux] & RX_ACCEPT)))
            xml_raw_close(c, t);
        if (raw_byte(t, b, n->min, n->max, x)) emit(c, t);
        return;
    }
    case M_XRAWLIT: {
        if (b == '\n') {
            const uint32_t q = jc_tchild(s, t->pos, '"');
            if (q != JC_NONE && s->tn[q].term >= 0) xml_raw_close(c, t);
            return;
        }
        const uint32_t ch = b == '"' || b == '\\' ? JC_NONE : jc_tchild(s, t->pos, b);
        if (ch == JC_NONE) return;
        t->pos = ch;
        emit(c, t);
        return;
    }
    default: return;
    }
}

/* ---- one byte ---------------------------------------------------------------------- */
static void step(sctx *c, const jc_thread *in, uint8_t b) {
    const jc_schema *s = c->s;
    const jc_matcher *m = c->m;
    jc_thread t = *in;
    switch (t.mode) {
    case M_PREFIX:
        if (b != (uint8_t)m->prefix[t.pos]) return;
        if (++t.pos == m->plen) root_value(m, &t);
        emit(c, &t);
        return;
    case M_VAL:
        if (is_ws(b)) {
            if (ws_step(&t.ws, b)) emit(c, &t);
            return;
        }
        dispatch(c, &t, t.node, b);
        return;
    case M_KEYSTART:
        if (is_ws(b)) {
            if (ws_step(&t.ws, b)) emit(c, &t);
        } else if (b == '}') {
            if ((t.flags & F_CANCLOSE) && s->nodes[t.fnode].nreq == 0) close_container(c, &t);
        } else if (b == '"') {
            start_key(c, &t, false);
        }
        return;
    case M_KEYREQ: {
        const jc_prop *p = &s->props[s->nodes[t.fnode].off + t.node];
        if (b != (uint8_t)s->bytes[p->key_off + t.pos]) return;
        if (++t.pos < p->key_len) emit(c, &t);
        else to_colon(c, &t, t.node + 1, p->node);
        return;
    }
    case M_KEYLIT: {
        const uint32_t ch = jc_tchild(s, t.pos, b);
        if (ch == JC_NONE || !key_alive(c, &t, ch)) return;
        const int32_t j = s->tn[ch].term;
        if (j < 0) {
            t.pos = ch;
            emit(c, &t);
        } else {
            to_colon(c, &t, (uint32_t)j + 1, s->props[s->nodes[t.fnode].off + (uint32_t)j].node);
        }
        return;
    }
    case M_KEYSTR: {
        const uint32_t at = t.aux;
        const int r = str_byte(&t, b, 0, JC_NONE, NULL);
        if (r == 0) return;
        if (r == 2) {
            if (at != JC_NONE) { /* spelled as a declared key: not an extra one */
                const uint32_t q = jc_tchild(s, at, '"');
                if (q != JC_NONE && s->tn[q].term >= 0) return;
            }
            const jc_node *o = &s->nodes[t.fnode];
            to_colon(c, &t, o->n, o->extra);
            return;
        }
        if (at != JC_NONE) t.aux = jc_tchild(s, at, b);
        emit(c, &t);
        return;
    }
    case M_COLON:
        if (is_ws(b)) {
            if (ws_step(&t.ws, b)) emit(c, &t);
        } else if (b == ':') {
            const uint32_t v = t.node;
            set_mode(&t, M_VAL);
            t.node = v;
            emit(c, &t);
        }
        return;
    case M_AFTER_MEMBER:
        if (is_ws(b)) {
            if (ws_step(&t.ws, b)) emit(c, &t);
        } else if (b == ',') {
            if (key_possible(c, &t)) {
                set_mode(&t, M_KEYSTART);
                emit(c, &t);
            }
        } else if (b == '}') {
            if (t.fcount >= s->nodes[t.fnode].nreq) close_container(c, &t);
        }
        return;
    case M_ARROPEN: {
        if (is_ws(b)) {
            if (ws_step(&t.ws, b)) emit(c, &t);
            return;
        }
        const jc_node *a = &s->nodes[t.fnode];
        if (b == ']') {
            if (a->min == 0) close_container(c, &t);
            return;
        }
        const uint32_t it = item_node(s, a, 0);
        if (it == JC_NONE || a->max == 0 || !fits(s, &t, it)) return;
        t.fcount = 1;
        dispatch(c, &t, it, b);
        return;
    }
    case M_AFTER_ITEM: {
        if (is_ws(b)) {
            if (ws_step(&t.ws, b)) emit(c, &t);
            return;
        }
        const jc_node *a = &s->nodes[t.fnode];
        if (b == ',') {
            const uint32_t i = t.fcount, it = item_node(s, a, i);
            if (it == JC_NONE || (a->max != JC_NONE && i >= a->max) || !fits(s, &t, it)) return;
            set_mode(&t, M_VAL);
            t.fcount = i + 1;
            t.node = it;
            emit(c, &t);
        } else if (b == ']') {
            if (t.fcount >= a->min) close_container(c, &t);
        }
        return;
    }
    case M_STR: {
        const jc_node *n = &s->nodes[t.node];
        const int r = str_byte(&t, b, n->min, n->max, n->rx == JC_NONE ? NULL : &s->rx[n->rx]);
        if (r == 2) after_value(c, &t);
        if (r) emit(c, &t);
        return;
    }
    case M_LIT: {
        const uint32_t ch = jc_tchild(s, t.pos, b);
        if (ch != JC_NONE) {
            jc_thread u = t;
            u.pos = ch;
            lit_settle(c, &u);
            emit(c, &u);
        }
        if (s->tn[t.pos].term >= 0) { /* complete here, b goes to what follows */
            after_value(c, &t);
            step(c, &t, b);
        }
        return;
    }
    case M_NUM: {
        const jc_node *n = &s->nodes[t.node];
        jc_thread u = t;
        if (num_byte(n, &u, b)) emit(c, &u);
        if (num_complete(n, &t)) {
            after_value(c, &t);
            step(c, &t, b);
        }
        return;
    }
    case M_AFTER_ROOT:
        if (is_ws(b) && t.ws != WS_NONE) {
            jc_thread u = t;
            if (ws_step(&u.ws, b)) emit(c, &u);
        }
        if (m->slen && b == (uint8_t)m->suffix[0]) {
            set_mode(&t, M_SUFFIX);
            t.pos = 1;
            if (t.pos == m->slen) set_mode(&t, M_END);
            emit(c, &t);
        }
        return;
    case M_SUFFIX:
        if (b != (uint8_t)m->suffix[t.pos]) return;
        if (++t.pos == m->slen) set_mode(&t, M_END);
        emit(c, &t);
        return;
    case M_XLIT:
    case M_XNAME:
    case M_XBODY:
    case M_XKEYREQ:
    case M_XKEYLIT:
    case M_XKEYSTR:
    case M_XRAW:
    case M_XRAWLIT: xml_step(c, &t, b); return;
    default: return;
    }
}

static int step_set(const jc_matcher *m, jc_work *w, const jc_thread *in, int n, uint8_t b, jc_thread *out) {
    sctx c = {m, m->s, w, out, 0, false};
    for (int i = 0; i < n; i++) step(&c, &in[i], b);
    return c.n;
}

/* Feeds bytes to the committed threads into w->a / w->b; returns the
 * resulting count (0: refused) and where the threads are. The arena is left
 * with the trial entries (the caller commits or rolls back). */
static int run_bytes(const jc_matcher *m, const uint8_t *p, size_t len, jc_thread **where) {
    jc_work *w = m->w;
    const jc_thread *src = m->th;
    jc_thread *dst = w->a;
    int n = m->n;
    for (size_t i = 0; i < len; i++) {
        n = step_set(m, w, src, n, p[i], dst);
        if (!n) return 0;
        src = dst;
        dst = dst == w->a ? w->b : w->a;
    }
    *where = (jc_thread *)src;
    return n;
}

/* ---- matcher ------------------------------------------------------------------------ */
static jc_work *work_new(void) {
    jc_work *w = malloc(sizeof *w);
    if (!w) return NULL;
    memset(w, 0, offsetof(jc_work, a)); /* the thread buffers need no zeroing */
    w->cap = 256;
    w->n = 1;
    if (!(w->e = calloc(w->cap, sizeof *w->e))) {
        free(w);
        return NULL;
    }
    return w;
}

static void work_free(jc_work *w) {
    if (!w) return;
    free(w->e);
    free(w->lv);
    free(w->lv_off);
    free(w->lv_cnt);
    free(w->lv_cur);
    free(w->lv_child);
    free(w->lv_mark);
    free(w);
}

static jc_matcher *matcher_new(const jc_schema *s, const char *prefix, const char *suffix, bool outer_ws, bool xml,
                               ph_err *err) {
    if (!s) {
        err_set(err, "json constraint: no schema");
        return NULL;
    }
    if (xml && s->nodes[s->root].kind != K_OBJ) {
        err_set(err, "json constraint: the tools of an xml call must be an object's properties");
        return NULL;
    }
    jc_matcher *m = calloc(1, sizeof *m);
    if (!m || !(m->prefix = strdup(prefix ? prefix : "")) || !(m->suffix = strdup(suffix ? suffix : "")) ||
        !(m->w = work_new())) {
        jc_matcher_free(m);
        err_set(err, "json constraint: out of memory");
        return NULL;
    }
    m->s = s;
    m->plen = (uint32_t)strlen(m->prefix);
    m->slen = (uint32_t)strlen(m->suffix);
    m->outer_ws = outer_ws;
    m->xml = xml;
    jc_thread t;
    memset(&t, 0, sizeof t);
    t.fnode = JC_ROOT;
    if (m->plen) set_mode(&t, M_PREFIX);
    else root_value(m, &t);
    m->th[0] = t;
    m->n = 1;
    m->n_commit = 1;
    return m;
}

jc_matcher *jc_matcher_new(const jc_schema *s, const char *prefix, const char *suffix, bool outer_ws, ph_err *err) {
    return matcher_new(s, prefix, suffix, outer_ws, false, err);
}

jc_matcher *jc_matcher_new_xml(const jc_schema *s, const char *prefix, const char *suffix, ph_err *err) {
    return matcher_new(s, prefix, suffix, false, true, err);
}

void jc_matcher_free(jc_matcher *m) {
    if (!m) return;
    free(m->prefix);
    free(m->suffix);
    work_free(m->w);
    free(m);
}

jc_matcher *jc_matcher_clone(const jc_matcher *m) {
    jc_matcher *c = malloc(sizeof *c);
    if (!c) return NULL;
    *c = *m;
    c->prefix = strdup(m->prefix);
    c->suffix = strdup(m->suffix);
    c->w = work_new();
    jc_entry *e = c->w ? realloc(c->w->e, (size_t)(m->n_commit + 256) * sizeof *e) : NULL;
    if (!c->prefix || !c->suffix || !e) {
        if (c->w && e) c->w->e = e;
        jc_matcher_free(c);
        return NULL;
    }
    c->w->e = e;
    c->w->cap = m->n_commit + 256;
    memcpy(e, m->w->e, (size_t)m->n_commit * sizeof *e);
    c->w->n = m->n_commit;
    return c;
}

static uint32_t remap(const jc_entry *old, jc_entry *ne, uint32_t *map, uint32_t *nn, uint32_t i) {
    if (i == 0) return 0;
    if (map[i]) return map[i];
    const uint32_t up = remap(old, ne, map, nn, old[i].up);
    const uint32_t k = (*nn)++;
    ne[k] = (jc_entry){old[i].fnode, old[i].fcount, up};
    return map[i] = k;
}

/* Keeps only the arena entries the threads use. */
static void compact(jc_matcher *m) {
    jc_work *w = m->w;
    uint32_t *map = calloc(m->n_commit, sizeof *map);
    jc_entry *ne = malloc((size_t)w->cap * sizeof *ne);
    if (!map || !ne) {
        free(map);
        free(ne);
        return;
    }
    uint32_t nn = 1;
    memset(&ne[0], 0, sizeof ne[0]);
    for (int i = 0; i < m->n; i++) m->th[i].up = remap(w->e, ne, map, &nn, m->th[i].up);
    free(w->e);
    free(map);
    w->e = ne;
    w->n = m->n_commit = nn;
}

int jc_matcher_feed(jc_matcher *m, const char *bytes, size_t n) {
    jc_thread *res = NULL;
    m->w->n = m->n_commit;
    const int k = run_bytes(m, (const uint8_t *)bytes, n, &res);
    if (!k && n) {
        m->w->n = m->n_commit;
        return -1;
    }
    if (n) {
        memcpy(m->th, res, (size_t)k * sizeof *res);
        m->n = k;
    }
    m->n_commit = m->w->n;
    if (m->n_commit > 4096) compact(m);
    return 0;
}

static bool thread_can_end(const jc_matcher *m, const jc_thread *t) {
    switch (t->mode) {
    case M_END: return true;
    case M_AFTER_ROOT: return m->slen == 0;
    case M_LIT: return t->fnode == JC_ROOT && m->slen == 0 && m->s->tn[t->pos].term >= 0;
    case M_NUM: return t->fnode == JC_ROOT && m->slen == 0 && num_complete(&m->s->nodes[t->node], t);
    default: return false;
    }
}

bool jc_matcher_can_end(const jc_matcher *m) {
    for (int i = 0; i < m->n; i++)
        if (thread_can_end(m, &m->th[i])) return true;
    return false;
}

bool jc_matcher_finished(const jc_matcher *m) {
    if (!jc_matcher_can_end(m)) return false;
    for (int b = 0; b < 256; b++) {
        m->w->n = m->n_commit;
        const int k = step_set(m, m->w, m->th, m->n, (uint8_t)b, m->w->a);
        if (k) {
            m->w->n = m->n_commit;
            return false;
        }
    }
    m->w->n = m->n_commit;
    return true;
}

/* ---- masks --------------------------------------------------------------------------- */
/* A patterned string's state that every character keeps (and accepts). */
static inline bool rx_settled(const jc_schema *s, const jc_node *n, const jc_thread *t) {
    return n->rx == JC_NONE || (s->rx[n->rx].dfa->flags[t->aux] & RX_UNIVERSAL);
}

/* A string state that any plain token leaves unchanged: no escape or
 * character pending, no count that matters, no key spelling tracked, no
 * pattern that still tells characters apart. */
static bool free_string(const jc_matcher *m, const jc_thread *t) {
    if (t->esc || t->utf) return false;
    if (t->mode == M_KEYSTR) return t->aux == JC_NONE;
    if (t->mode != M_STR) return false;
    const jc_node *n = &m->s->nodes[t->node];
    return n->max == JC_NONE && t->pos >= n->min && rx_settled(m->s, n, t);
}

/* A string state with nothing pending, where the count may matter. */
static bool clean_string(const jc_matcher *m, const jc_thread *t) {
    if (t->esc || t->utf) return false;
    if (t->mode == M_KEYSTR) return true;
    return t->mode == M_STR && rx_settled(m->s, &m->s->nodes[t->node], t);
}

bool jc_matcher_token_ok(const jc_matcher *m, const jc_vocab *v, int32_t id) {
    if (id < 0 || id >= v->n_vocab) return false;
    const uint32_t len = v->off[id + 1] - v->off[id];
    if (!len) return false;
    if (v->plain[id >> 6] >> (id & 63) & 1)
        for (int i = 0; i < m->n; i++)
            if (free_string(m, &m->th[i])) return true;
    jc_thread *res;
    m->w->n = m->n_commit;
    const int k = run_bytes(m, v->text + v->off[id], len, &res);
    m->w->n = m->n_commit;
    return k > 0;
}

static bool ensure_levels(jc_work *w, size_t levels) {
    if (w->n_levels >= levels) return true;
    uint32_t **arr[5] = {&w->lv_off, &w->lv_cnt, &w->lv_cur, &w->lv_child, &w->lv_mark};
    for (int i = 0; i < 5; i++) {
        uint32_t *p = realloc(*arr[i], levels * sizeof *p);
        if (!p) return false;
        *arr[i] = p;
    }
    w->n_levels = levels;
    return true;
}

/* Room for a level of JC_MAX_THREADS at offset off. */
static bool ensure_lv(jc_work *w, size_t off) {
    if (off + JC_MAX_THREADS <= w->lv_cap) return true;
    size_t cap = w->lv_cap ? w->lv_cap : 8 * JC_MAX_THREADS;
    while (cap < off + JC_MAX_THREADS) cap *= 2;
    jc_thread *p = realloc(w->lv, cap * sizeof *p);
    if (!p) return false;
    w->lv = p;
    w->lv_cap = cap;
    return true;
}

/* Marks every token of trie tr whose text the threads accept. The threads
 * of each level along the path are packed one after the other. */
static void dfs(const jc_matcher *m, const jc_trie *tr, const jc_thread *start, int n, uint64_t *allowed) {
    jc_work *w = m->w;
    if (!tr->n || !ensure_levels(w, tr->maxlen + 2) || !ensure_lv(w, 0)) return;
    memcpy(w->lv, start, (size_t)n * sizeof *w->lv);
    w->n = m->n_commit;
    w->lv_off[0] = 0;
    w->lv_cnt[0] = (uint32_t)n;
    w->lv_cur[0] = 0;
    w->lv_child[0] = 1;
    w->lv_mark[0] = w->n;
    const uint8_t *lab = tr->lab;
    const uint32_t *end = tr->end, *tok = tr->tok;
    int L = 0;
    while (L >= 0) {
        const uint32_t c = w->lv_child[L];
        if (c >= end[w->lv_cur[L]]) {
            L--;
            continue;
        }
        w->lv_child[L] = end[c];
        w->n = w->lv_mark[L];
        const size_t next = (size_t)w->lv_off[L] + w->lv_cnt[L];
        if (!ensure_lv(w, next)) break;
        const int k = step_set(m, w, w->lv + w->lv_off[L], (int)w->lv_cnt[L], lab[c], w->lv + next);
        if (!k) continue;
        for (uint32_t q = tok[c]; q < tok[c + 1]; q++) {
            const int32_t id = tr->ids[q];
            allowed[id >> 6] |= 1ull << (id & 63);
        }
        if (c + 1 < end[c]) {
            L++;
            w->lv_off[L] = (uint32_t)next;
            w->lv_cnt[L] = (uint32_t)k;
            w->lv_cur[L] = c;
            w->lv_child[L] = c + 1;
            w->lv_mark[L] = w->n;
        }
    }
    w->n = m->n_commit;
}

int32_t jc_matcher_mask(const jc_matcher *m, const jc_vocab *v, uint64_t *allowed) {
    const size_t words = ((size_t)v->n_vocab + 63) / 64;
    jc_work *w = m->w;
    int ng[3] = {0, 0, 0};
    for (int i = 0; i < m->n; i++) {
        const jc_thread *t = &m->th[i];
        const int g = free_string(m, t) ? 0 : clean_string(m, t) ? 1 : 2;
        w->g[g][ng[g]++] = *t;
    }
    if (ng[0]) { /* free strings: all plain tokens, and the others from their first non-plain byte */
        memcpy(allowed, v->plain, words * sizeof *allowed);
        dfs(m, &v->tail, w->g[0], ng[0], allowed);
    } else {
        memset(allowed, 0, words * sizeof *allowed);
    }
    if (ng[1]) { /* counted strings: plain tokens that fit, the others walked whole */
        uint32_t room = 0;
        for (int i = 0; i < ng[1]; i++) {
            const jc_thread *t = &w->g[1][i];
            const uint32_t max = t->mode == M_STR ? m->s->nodes[t->node].max : JC_NONE;
            const uint32_t r = max == JC_NONE ? UINT32_MAX : max - t->pos;
            if (r > room) room = r;
        }
        if (room >= v->bc_max) {
            for (size_t i = 0; i < words; i++) allowed[i] |= v->plain[i];
        } else {
            for (uint32_t q = 0; q < v->bc_off[room + 1]; q++) {
                const int32_t id = v->by_chars[q];
                allowed[id >> 6] |= 1ull << (id & 63);
            }
        }
        dfs(m, &v->nonplain, w->g[1], ng[1], allowed);
    }
    if (ng[2]) dfs(m, &v->all, w->g[2], ng[2], allowed);
    int32_t count = 0;
    for (size_t i = 0; i < words; i++) count += __builtin_popcountll(allowed[i]);
    return count;
}

/* ---- vocabulary ------------------------------------------------------------------------ */
typedef struct tstr {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
} tstr;

static int cmp_tstr(const void *a, const void *b) {
    const tstr *x = a, *y = b;
    const uint32_t n = x->len < y->len ? x->len : y->len;
    const int c = memcmp(x->p, y->p, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void trie_free(jc_trie *t) {
    free(t->lab);
    free(t->end);
    free(t->tok);
    free(t->ids);
    memset(t, 0, sizeof *t);
}

static int trie_build(jc_trie *tr, tstr *list, size_t n) {
    memset(tr, 0, sizeof *tr);
    qsort(list, n, sizeof *list, cmp_tstr);
    size_t cap = 1, maxlen = 0;
    for (size_t i = 0; i < n; i++) {
        cap += list[i].len;
        if (list[i].len > maxlen) maxlen = list[i].len;
    }
    tr->lab = malloc(cap);
    tr->end = malloc(cap * sizeof *tr->end);
    tr->tok = malloc((cap + 1) * sizeof *tr->tok);
    tr->ids = malloc((n + 1) * sizeof *tr->ids);
    uint32_t *path = malloc((maxlen + 1) * sizeof *path);
    if (!tr->lab || !tr->end || !tr->tok || !tr->ids || !path) {
        free(path);
        trie_free(tr);
        return -1;
    }
    uint32_t nodes = 1, depth = 0;
    path[0] = 0;
    tr->lab[0] = 0;
    tr->tok[0] = 0;
    for (size_t k = 0; k < n; k++) {
        const tstr *s = &list[k];
        uint32_t l = 0;
        if (k) {
            const tstr *p = &list[k - 1];
            const uint32_t lim = depth < s->len ? depth : s->len;
            while (l < lim && p->p[l] == s->p[l]) l++;
        }
        while (depth > l) tr->end[path[depth--]] = nodes;
        while (depth < s->len) {
            const uint32_t x = nodes++;
            tr->lab[x] = s->p[depth];
            tr->tok[x] = (uint32_t)k;
            path[++depth] = x;
        }
        tr->ids[k] = s->id;
    }
    while (depth > 0) tr->end[path[depth--]] = nodes;
    tr->end[0] = nodes;
    tr->tok[nodes] = (uint32_t)n;
    tr->n = nodes;
    tr->maxlen = (uint32_t)maxlen;
    free(path);
    return 0;
}

/* Bytes of the longest prefix made of whole characters a string takes as
 * they are; *chars: how many characters. */
static uint32_t plain_prefix(const uint8_t *p, uint32_t len, uint32_t *chars) {
    uint32_t i = 0, k = 0;
    while (i < len) {
        const uint8_t b = p[i];
        if (b == '"' || b == '\\' || b < 0x20) break;
        if (b < 0x80) {
            i++;
            k++;
            continue;
        }
        int cls;
        const int need = utf8_lead(b, &cls);
        if (!need || i + (uint32_t)need >= len) break;
        bool ok = true;
        for (int j = 1; j <= need; j++) {
            const uint8_t c = p[i + (uint32_t)j];
            if (c < (j == 1 ? CONT_LO[cls] : 0x80) || c > (j == 1 ? CONT_HI[cls] : 0xBF)) ok = false;
        }
        if (!ok) break;
        i += (uint32_t)need + 1;
        k++;
    }
    *chars = k;
    return i;
}

jc_vocab *jc_vocab_new(int32_t n_vocab, size_t (*text)(void *ud, int32_t id, char *buf, size_t cap), void *ud,
                       ph_err *err) {
    jc_vocab *v = calloc(1, sizeof *v);
    size_t cap = 1 << 20, used = 0, bcap = 512;
    char *buf = malloc(bcap);
    uint32_t *chars = NULL, *plen = NULL;
    tstr *list = NULL;
    if (!v || n_vocab < 0 || !buf) goto oom;
    v->n_vocab = n_vocab;
    v->off = malloc(((size_t)n_vocab + 1) * sizeof *v->off);
    v->text = malloc(cap);
    v->plain = calloc(((size_t)n_vocab + 63) / 64 + 1, sizeof *v->plain);
    chars = calloc((size_t)n_vocab + 1, sizeof *chars);
    plen = calloc((size_t)n_vocab + 1, sizeof *plen);
    list = malloc(((size_t)n_vocab + 1) * sizeof *list);
    if (!v->off || !v->text || !v->plain || !chars || !plen || !list) goto oom;
    for (int32_t id = 0; id < n_vocab; id++) {
        size_t len = text(ud, id, buf, bcap);
        if (len > bcap) {
            char *nb = realloc(buf, len);
            if (!nb) goto oom;
            buf = nb;
            bcap = len;
            len = text(ud, id, buf, bcap);
        }
        if (len > 0xffff) len = 0; /* not a real token */
        while (used + len > cap) {
            uint8_t *nt = realloc(v->text, cap * 2);
            if (!nt) goto oom;
            v->text = nt;
            cap *= 2;
        }
        v->off[id] = (uint32_t)used;
        memcpy(v->text + used, buf, len);
        used += len;
        if (len > v->max_len) v->max_len = (uint32_t)len;
    }
    v->off[n_vocab] = (uint32_t)used;
    /* classes */
    uint32_t max_chars = 0;
    size_t n_all = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        const uint32_t len = v->off[id + 1] - v->off[id];
        if (!len) continue;
        plen[id] = plain_prefix(v->text + v->off[id], len, &chars[id]);
        if (plen[id] == len) {
            v->plain[id >> 6] |= 1ull << (id & 63);
            if (chars[id] > max_chars) max_chars = chars[id];
        }
        list[n_all++] = (tstr){v->text + v->off[id], len, id};
    }
    if (trie_build(&v->all, list, n_all)) goto oom;
    size_t n_np = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        const uint32_t len = v->off[id + 1] - v->off[id];
        if (len && plen[id] < len) list[n_np++] = (tstr){v->text + v->off[id] + plen[id], len - plen[id], id};
    }
    if (trie_build(&v->tail, list, n_np)) goto oom;
    n_np = 0;
    for (int32_t id = 0; id < n_vocab; id++) {
        const uint32_t len = v->off[id + 1] - v->off[id];
        if (len && plen[id] < len) list[n_np++] = (tstr){v->text + v->off[id], len, id};
    }
    if (trie_build(&v->nonplain, list, n_np)) goto oom;
    /* plain tokens by character count */
    v->bc_max = max_chars;
    v->bc_off = calloc((size_t)max_chars + 2, sizeof *v->bc_off);
    v->by_chars = malloc(((size_t)n_vocab + 1) * sizeof *v->by_chars);
    if (!v->bc_off || !v->by_chars) goto oom;
    for (int32_t id = 0; id < n_vocab; id++)
        if (v->plain[id >> 6] >> (id & 63) & 1) v->bc_off[chars[id] + 1]++;
    for (uint32_t k = 1; k <= max_chars + 1; k++) v->bc_off[k] += v->bc_off[k - 1];
    uint32_t *fill = calloc((size_t)max_chars + 1, sizeof *fill);
    if (!fill) goto oom;
    for (int32_t id = 0; id < n_vocab; id++)
        if (v->plain[id >> 6] >> (id & 63) & 1) v->by_chars[v->bc_off[chars[id]] + fill[chars[id]]++] = id;
    free(fill);
    free(buf);
    free(chars);
    free(plen);
    free(list);
    return v;
oom:
    free(buf);
    free(chars);
    free(plen);
    free(list);
    jc_vocab_free(v);
    err_set(err, "json constraint: out of memory indexing the vocabulary");
    return NULL;
}

void jc_vocab_free(jc_vocab *v) {
    if (!v) return;
    free(v->off);
    free(v->text);
    free(v->plain);
    free(v->by_chars);
    free(v->bc_off);
    trie_free(&v->all);
    trie_free(&v->tail);
    trie_free(&v->nonplain);
    free(v);
}

int32_t jc_vocab_size(const jc_vocab *v) { return v->n_vocab; }

const char *jc_vocab_text(const jc_vocab *v, int32_t id, size_t *len) {
    if (id < 0 || id >= v->n_vocab) {
        *len = 0;
        return "";
    }
    *len = v->off[id + 1] - v->off[id];
    return (const char *)v->text + v->off[id];
}
