/* The compiled form of a JSON schema, shared by the compiler
 * (json_constraint.c) and the matcher (json_matcher.c). Nothing outside
 * these two files uses it. */
#ifndef PH_TEXT_JSON_CONSTRAINT_IMPL_H
#define PH_TEXT_JSON_CONSTRAINT_IMPL_H

#include "text/json_constraint.h"
#include "text/regex.h"

#define JC_NONE UINT32_MAX
#define JC_INF  0x3fffffff /* min depth of a node with no finite value */

/* Number bounds are integers in units of 1e-16 (JC_SCALE); the largest
 * magnitude a number can have is 1e16 - 1e-16. */
__extension__ typedef __int128 jc_i128;
#define JC_SCALE ((jc_i128)10000000000000000LL) /* 1e16 */
enum { JC_INT_DIGITS = 16, JC_FRAC_DIGITS = 16, JC_EXP_DIGITS = 2, JC_WS_INDENT = 20 };

/* Node kinds. K_ALT is a choice (anyOf, type lists, $ref, allOf of one):
 * after compilation its list holds only concrete nodes (OBJ, ARR, STR, NUM,
 * LIT), at most one LIT (literals are merged into one trie). */
enum { K_NEVER, K_ALT, K_OBJ, K_ARR, K_STR, K_NUM, K_LIT };

typedef struct jc_node {
    uint8_t kind;
    uint8_t integer;      /* K_NUM: integers only */
    uint8_t bounded;      /* K_NUM: lo/hi apply (and no exponent) */
    int32_t mind;         /* containers needed to complete a value (0 for scalars), JC_INF: none */
    uint32_t off, n;      /* K_ALT: alts[off..off+n); K_OBJ: props[off..off+n); K_ARR: prefix items in alts[] */
    uint32_t nreq;        /* K_OBJ: props[off..off+nreq) are required */
    uint32_t extra;       /* K_OBJ: additionalProperties node; K_ARR: items node (JC_NONE: none) */
    uint32_t trie;        /* K_OBJ: key trie root (JC_NONE: no props); K_LIT: literal trie root */
    uint32_t min, max;    /* K_ARR: items; K_STR: characters (max JC_NONE: unbounded) */
    int32_t max_opt_mind; /* K_OBJ: largest mind of an optional property (0 if none) */
    uint32_t rx;          /* K_STR: its pattern/format automaton, rx[] index (JC_NONE: none) */
    jc_i128 lo, hi;       /* K_NUM bounded: scaled bounds */
} jc_node;

typedef struct jc_prop {
    uint32_t key_off, key_len; /* the key as JSON text, quotes included, in bytes[] */
    uint32_t node;
    bool raw; /* its schema says "string" (tool_param_is_string): an xml call writes the value as raw text */
} jc_prop;

/* Trie nodes (literal values, object keys): edges sorted by byte. term:
 * the node ends a literal (for key tries: the property index), else -1.
 * maxj: key tries: the largest property index below. */
typedef struct jc_tnode {
    uint32_t edge_off, n_edges;
    int32_t term, maxj;
    uint32_t depth;
} jc_tnode;

typedef struct jc_tedge {
    uint32_t child;
    uint8_t byte;
} jc_tedge;

/* A string's pattern and/or format: a DFA over code points (regex.h), and,
 * when the string has a maxLength and the lengths of the accepted
 * completions from some state do not form the interval [min_left,
 * max_left], those lengths exactly: row d (lw words) has bit L set when a
 * completion of L code points from state d is accepted, for L < rlen; when
 * per_p > 0 the rows repeat from there: L >= rlen reads bit
 * per_t + (L - per_t) % per_p (rlen = per_t + per_p). */
typedef struct jc_rx {
    rx_dfa *dfa;
    uint64_t *lens; /* NULL: the intervals are exact */
    uint32_t lw, rlen, per_t, per_p;
} jc_rx;

struct jc_schema {
    jc_node *nodes;
    uint32_t n_nodes;
    uint32_t *alts;
    uint32_t n_alts;
    jc_prop *props;
    uint32_t n_props;
    char *bytes;
    uint32_t n_bytes;
    jc_tnode *tn;
    uint32_t n_tn;
    jc_tedge *te;
    uint32_t n_te;
    jc_rx *rx;
    uint32_t n_rx;
    uint32_t root;
};

static inline uint32_t jc_tchild(const jc_schema *s, uint32_t node, uint8_t b) {
    const jc_tnode *t = &s->tn[node];
    const jc_tedge *e = s->te + t->edge_off;
    for (uint32_t i = 0; i < t->n_edges; i++)
        if (e[i].byte == b) return e[i].child;
    return JC_NONE;
}

/* Whether bits lo..hi (lo <= hi) of row has one set. */
static inline bool jc_bits_any(const uint64_t *row, uint32_t lo, uint32_t hi) {
    for (uint32_t w = lo / 64; w <= hi / 64; w++) {
        uint64_t bits = row[w];
        if (w == lo / 64) bits &= ~0ull << (lo % 64);
        if (w == hi / 64) bits &= (2ull << (hi % 64)) - 1;
        if (bits) return true;
    }
    return false;
}

/* Whether an accepted completion from state d has a length in [lo, hi]. */
static inline bool jc_rx_lens(const jc_rx *x, uint32_t d, uint32_t lo, uint32_t hi) {
    const uint64_t *row = x->lens + (size_t)d * x->lw;
    const uint32_t r = x->rlen, t = x->per_t, p = x->per_p;
    if (lo < r && jc_bits_any(row, lo, hi < r ? hi : r - 1)) return true;
    if (hi < r || !p) return false;
    const uint32_t a = lo > r ? lo : r;
    if (hi - a + 1 >= p) return jc_bits_any(row, t, r - 1);
    const uint32_t ra = t + (a - t) % p, rb = t + (hi - t) % p;
    return ra <= rb ? jc_bits_any(row, ra, rb) : jc_bits_any(row, ra, r - 1) || jc_bits_any(row, t, rb);
}

/* Whether a string in state d of x after k characters (counted as the
 * matcher counts them: exact up to max, or saturated at min when max is
 * JC_NONE) can still end accepted with a length in [min, max]. */
static inline bool jc_rx_ok(const jc_rx *x, uint32_t d, uint32_t k, uint32_t min, uint32_t max) {
    const rx_dfa *a = x->dfa;
    const uint32_t lo = min > k ? min - k : 0;
    if (lo > a->max_left[d]) return false;
    if (max == JC_NONE) return true;
    if (k > max) return false;
    const uint32_t hi = max - k;
    if (a->min_left[d] > hi || lo > hi) return false;
    return !x->lens || jc_rx_lens(x, d, lo, hi);
}

#endif
