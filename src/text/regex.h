/* Regular expressions for JSON Schema `pattern` (and the string formats the
 * constraint knows), compiled to automata over code points, for the
 * sampling constraint (json_constraint.c, json_matcher.c).
 *
 * The subset of ECMAScript (262) syntax JSON Schema users write:
 * - literal characters (UTF-8, one code point each); escapes \. \\ \/ \-
 *   \[ \] \( \) \{ \} \* \+ \? \| \^ \$ and any other punctuation, \n \t \r
 *   \f \v \0 (not before a digit), \cX, \xHH, \uXXXX (surrogate pairs
 *   joined), \u{X...};
 * - `.`: any code point except the line terminators \n \r U+2028 U+2029
 *   (as ECMAScript); classes [...] and [^...] with ranges; \d \w (ASCII)
 *   \s (ECMAScript white space and line terminators) \D \W \S, inside and
 *   outside classes; [\b] is U+0008;
 * - groups (...), (?:...), (?<name>...) (capturing makes no difference
 *   to what matches), alternation |, quantifiers ? * + {n} {n,} {n,m} and
 *   their lazy forms (same language); a '{' that starts no quantifier, and
 *   a lone '}' or ']', are literal (ECMAScript Annex B);
 * - anchors: ^ at the start and $ at the end of the pattern or of one of
 *   its top-level alternatives. The search is unanchored, as JSON Schema
 *   reads `pattern`: without ^ anything may come before, without $
 *   anything after.
 * Refused with a message naming the construct: look-ahead, look-behind,
 * back-references (\1, \k<n>), \b \B, anchors elsewhere, inline flags and
 * other (? groups, \p{...} \P{...}, unknown letter escapes, unbalanced
 * parentheses, ranges out of order, nothing to repeat, and patterns that
 * need more than RX_MAX_STATES automaton states (large counted
 * repetitions) or nest deeper than 64 groups.
 *
 * The alphabet is what a JSON string can hold as jansson reads it: code
 * points U+0001..U+10FFFF except the surrogates U+D800..U+DFFF (U+0000 is
 * never matched).
 *
 * An rx is an epsilon-free NFA over that alphabet, transitions labelled by
 * code-point range sets, trimmed (every state is reachable and can reach
 * acceptance; the empty language is an rx of no states), with each state's
 * shortest and longest remaining length to acceptance. An rx_dfa is its
 * subset construction (over classes of code points that no transition
 * tells apart), also with remaining lengths; a set that contains a state
 * accepting everything from there on collapses to it. Both are immutable. */
#ifndef PH_TEXT_REGEX_H
#define PH_TEXT_REGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    RX_MAX_STATES = 4096,  /* NFA states after epsilon removal (and of a product) */
    RX_MAX_DSTATES = 4096, /* DFA states */
    RX_SET_WORDS = RX_MAX_STATES / 64,
};
#define RX_INF  UINT32_MAX /* a remaining length with no bound */
#define RX_DEAD UINT32_MAX /* no DFA state */

typedef struct rx rx;

/* Compiles src (len bytes of UTF-8). NULL: refused or out of memory, with a
 * sentence in err (e.g. "look-behind (?<= is not supported by the
 * constraint", "unbalanced parenthesis: '(' at offset 3 is not closed"). */
rx *rx_compile(const char *src, size_t len, char *err, size_t errcap);
/* The intersection of two languages (product automaton, trimmed). */
rx *rx_intersect(const rx *a, const rx *b, char *err, size_t errcap);
void rx_free(rx *r);
uint32_t rx_n_states(const rx *r);
bool rx_empty(const rx *r); /* no string matches */
/* Whether the whole string (UTF-8) is in the language (for a pattern: the
 * pattern matches somewhere in it, as JSON Schema means). */
bool rx_match(const rx *r, const char *s, size_t len);

/* NFA state sets: a fixed bitset (RX_MAX_STATES bits, 512 bytes). */
typedef struct rx_set {
    uint64_t w[RX_SET_WORDS];
} rx_set;
void rx_start(const rx *r, rx_set *set); /* empty for the empty language */
/* out = the states reached from in on cp; false when none. */
bool rx_step(const rx *r, const rx_set *in, uint32_t cp, rx_set *out);
bool rx_accepts(const rx *r, const rx_set *set);
/* Shortest / longest number of code points that can still lead to
 * acceptance (RX_INF: none for an empty set / no bound). */
uint32_t rx_min_left(const rx *r, const rx_set *set);
uint32_t rx_max_left(const rx *r, const rx_set *set);

/* The regular expression of a JSON Schema string format the constraint
 * checks: date, time, date-time, uuid, ipv4, email (NULL: another format,
 * an annotation). */
const char *rx_format_pattern(const char *format);

/* ---- deterministic automata ---------------------------------------------------- */
enum { RX_ACCEPT = 1, RX_UNIVERSAL = 2 /* accepting, every code point of the alphabet loops */ };

typedef struct rx_dfa {
    uint32_t n_states; /* 0: the empty language */
    uint32_t n_classes;
    uint32_t start;      /* RX_DEAD when n_states is 0 */
    uint32_t *bound;     /* class c holds code points [bound[c], bound[c + 1]); bound[n_classes] = 0x110000 */
    uint16_t ascii[128]; /* the class of each ASCII code point */
    uint32_t *next;      /* [state * n_classes + class]: the next state or RX_DEAD */
    uint32_t *min_left;  /* per state: shortest remaining length to acceptance */
    uint32_t *max_left;  /* per state: longest, RX_INF: unbounded */
    uint8_t *flags;      /* per state: RX_ACCEPT, RX_UNIVERSAL */
} rx_dfa;

/* NULL: too many states (err says so) or out of memory. */
rx_dfa *rx_determinize(const rx *r, char *err, size_t errcap);
void rx_dfa_free(rx_dfa *d);
bool rx_dfa_match(const rx_dfa *d, const char *s, size_t len);

static inline uint32_t rx_dfa_class(const rx_dfa *d, uint32_t cp) {
    if (cp < 128) return d->ascii[cp];
    uint32_t lo = 0, hi = d->n_classes; /* the last class whose bound <= cp */
    while (hi - lo > 1) {
        const uint32_t mid = (lo + hi) / 2;
        if (d->bound[mid] <= cp) lo = mid;
        else hi = mid;
    }
    return lo;
}

static inline uint32_t rx_dfa_next(const rx_dfa *d, uint32_t state, uint32_t cp) {
    if (cp > 0x10FFFF) return RX_DEAD;
    return d->next[(size_t)state * d->n_classes + rx_dfa_class(d, cp)];
}

#endif
