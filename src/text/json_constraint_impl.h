/* The compiled form of a JSON schema, shared by the compiler
 * (json_constraint.c) and the matcher (json_matcher.c). Nothing outside
 * these two files uses it. */
#ifndef PH_TEXT_JSON_CONSTRAINT_IMPL_H
#define PH_TEXT_JSON_CONSTRAINT_IMPL_H

#include "text/json_constraint.h"

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
    jc_i128 lo, hi;       /* K_NUM bounded: scaled bounds */
} jc_node;

typedef struct jc_prop {
    uint32_t key_off, key_len; /* the key as JSON text, quotes included, in bytes[] */
    uint32_t node;
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
    uint32_t root;
};

static inline uint32_t jc_tchild(const jc_schema *s, uint32_t node, uint8_t b) {
    const jc_tnode *t = &s->tn[node];
    const jc_tedge *e = s->te + t->edge_off;
    for (uint32_t i = 0; i < t->n_edges; i++)
        if (e[i].byte == b) return e[i].child;
    return JC_NONE;
}

#endif
