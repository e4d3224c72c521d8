/* A JSON-schema constraint on sampling: what a model may write is a JSON
 * value valid against a schema, between fixed literal texts (a prefix and a
 * suffix). Used for response_format (json_object, json_schema) and for tool
 * calls (the Hermes `<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`).
 *
 * The schema is compiled once (jc_schema: immutable, any number of threads
 * may share it). The vocabulary is indexed once per model (jc_vocab: byte
 * tries over the token texts and precomputed token classes; immutable,
 * shareable). A matcher (jc_matcher) is a character-level pushdown
 * automaton over one output; it keeps a small set of alternative states
 * (anyOf, type lists, number/literal ambiguities), at most JC_MAX_THREADS
 * (enough for an anyOf of 128 tools); an alternative that would go beyond
 * it is dropped, which only narrows what may be written. A matcher is used by one thread at a time (it has scratch
 * space); it refers to its schema, which must outlive it.
 *
 * The subset (ph_schema_check in pinhole.h refuses anything else with
 * PH_ERR_INPUT, naming the keyword and its JSON path):
 * - type: object, array, string, number, integer, boolean, null, or a list
 *   of them. No type: the types whose keywords appear (properties → object,
 *   items → array, minLength/pattern or a format below → string, minimum
 *   → number), or any value.
 * - object: properties, required, additionalProperties. Keys come in a fixed
 *   order: required ones in their properties order (required names without a
 *   properties entry after them, any value), then the optional ones in
 *   declared order, each skippable. additionalProperties absent or false:
 *   no other keys, except that an object with no properties and no
 *   additionalProperties takes any keys (json_object); true or a schema:
 *   other keys after the declared ones, not spelled as a declared key.
 * - array: items (a schema, true/false, or a list = prefixItems), prefixItems,
 *   minItems, maxItems.
 * - string: minLength, maxLength (characters = code points). Any UTF-8
 *   (validated, also across tokens) except '"', '\' and control characters;
 *   escapes \" \\ \/ \b \f \n \r \t \uXXXX (surrogates only in pairs, no
 *   \u0000, as jansson wants).
 *   pattern: the ECMAScript subset of text/regex.h (classes, groups,
 *   alternation, counted repetition, ^ and $ at the ends; no look-around,
 *   back-references or \b), unanchored as JSON Schema reads it, matched on
 *   the decoded characters (raw UTF-8 and escapes alike). format: date
 *   (YYYY-MM-DD, a calendar date: each month's days, February 29 in leap
 *   years), time (RFC 3339: HH:MM:SS with seconds 00-59, optional
 *   fraction, Z or +-HH:MM), date-time (date "T" time), uuid
 *   (8-4-4-4-12 hex), ipv4 (dotted quad, 0-255, no leading zeros), email
 *   (dot-atoms of [A-Za-z0-9_%+-] @ hyphenated labels, one dot at least, a
 *   top-level domain of 2+ letters); other formats are annotations. Both
 *   together: the intersection (if it cannot be built, the pattern alone).
 *   Pattern/format and the lengths are compiled into one DFA per string
 *   (at most RX_MAX_DSTATES states; beyond, or past RX_MAX_STATES NFA
 *   states, the pattern is refused as too large), with each state's
 *   possible remaining lengths, so that a character is taken only if some
 *   accepted string of an allowed length can still follow, and the closing
 *   quote only in an accepting state. A matcher thread holds the DFA state
 *   (4 bytes). Inside a patterned string only tokens the DFA accepts pass
 *   (the "plain token" shortcut of the mask holds only in a state that
 *   accepts every continuation, e.g. after an unanchored pattern matched).
 * - number: -?(0|[1-9][0-9]{0,15})(\.[0-9]{1,16})?([eE][+-]?[0-9]{1,2})?
 *   (two exponent digits: no double overflows); integer: -?(0|[1-9][0-9]{0,15}).
 *   minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, not the
 *   draft-4 booleans) are supported for both; a bounded number has no
 *   exponent, and bounds are exact to 1e-16 (rounded inwards).
 * - boolean, null, const and enum (any JSON values; matched in their
 *   canonical serialisation, json.dumps style with ", " and ": " or compact,
 *   values not allowed by the schema's other keywords, pattern and format
 *   included, are dropped).
 * - anyOf, oneOf (as anyOf), allOf with one entry, local $ref (any "#/..."
 *   JSON pointer, e.g. #/$defs/x, #/definitions/x, #; recursion allowed),
 *   $defs/definitions. anyOf/oneOf/allOf/$ref take no constraining sibling
 *   keywords.
 * - Annotations are ignored (title, description, $schema, $id, $comment,
 *   examples, default, the formats not listed above, readOnly, writeOnly,
 *   deprecated, contentMediaType, contentEncoding, $anchor, ...), and so
 *   are keywords that are not JSON Schema vocabulary (x-..., nullable):
 *   ignoring them only narrows. Known validation keywords outside the
 *   subset (patternProperties, not, if/then/else, multipleOf, uniqueItems,
 *   min/maxProperties, dependentRequired, propertyNames, contains, ...) and
 *   patterns outside the regex subset are refused
 *   (jc_schema_compile_lenient drops them instead).
 * - Whitespace between tokens of the value (after { [ , : and before } ] ,):
 *   "" | " " | "\n" "\n"? [ \t]{0,20}, as llama.cpp allows; the same
 *   around the value when outer_ws.
 * - Nesting: at most JC_MAX_DEPTH containers (free-form values deeper get
 *   only scalars). A schema none of whose values fits (unsatisfiable, or
 *   recursive without an end) is refused.
 * Every state of a matcher can reach a complete output. */
#ifndef PH_TEXT_JSON_CONSTRAINT_H
#define PH_TEXT_JSON_CONSTRAINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pinhole.h"

enum { JC_MAX_DEPTH = 32, JC_MAX_THREADS = 256 };

typedef struct jc_schema jc_schema; /* compiled schema, immutable, shareable */
/* Compiles JSON schema text. Refuses (PH_ERR_INPUT, message names the
 * keyword and its JSON path, e.g. "'not' at $.properties.zip is not
 * supported by the constraint", "'pattern' at $.properties.zip: the
 * look-behind (?<= at offset 0 is not supported by the constraint")
 * anything outside the subset. */
jc_schema *jc_schema_compile(const char *json, size_t len, ph_err *err);
/* The same for tool schemas, where a constraint on part of the value beats
 * none: each keyword jc_schema_compile would refuse (a keyword outside the
 * subset, a pattern outside the regex subset or too large, a second
 * combinator or typed keywords beside one, allOf's schemas after the first)
 * is dropped from its (sub)schema only, which only widens what is allowed
 * there; everything else still constrains. *dropped: NULL if nothing was
 * dropped, else a malloc'd list (the caller frees), e.g. "'pattern' at
 * $.properties.id (the look-behind (?<= at offset 0 is not supported by
 * the constraint), 'not' at $.properties.x". Other errors (not JSON,
 * malformed keywords, unsatisfiable) as jc_schema_compile; dropped may be
 * NULL. */
jc_schema *jc_schema_compile_lenient(const char *json, size_t len, char **dropped, ph_err *err);
void jc_schema_free(jc_schema *s);

typedef struct jc_vocab jc_vocab; /* per-model precompute over the vocabulary, built once */
/* text(ud, id, buf, cap) returns the token's bytes as the detokenizer would
 * output them (may exceed cap: then call again bigger); a token with no text
 * (length 0) is never allowed under a constraint. */
jc_vocab *jc_vocab_new(int32_t n_vocab, size_t (*text)(void *ud, int32_t id, char *buf, size_t cap), void *ud,
                       ph_err *err);
void jc_vocab_free(jc_vocab *v);
int32_t jc_vocab_size(const jc_vocab *v);
/* Token id's text as the vocabulary holds it (length 0: never allowed under
 * a constraint); valid while v lives. */
const char *jc_vocab_text(const jc_vocab *v, int32_t id, size_t *len);

typedef struct jc_matcher jc_matcher;
/* A matcher for: prefix literal, then (ws?) value (ws?) if outer_ws else
 * value, then suffix literal. prefix/suffix may be NULL. */
jc_matcher *jc_matcher_new(const jc_schema *s, const char *prefix, const char *suffix, bool outer_ws, ph_err *err);
/* A matcher for a tool call in the xml family (chat_format.h): s is an
 * object whose properties are the tools (name: arguments schema); the
 * matcher takes prefix, then
 *   <function=NAME>\n (<parameter=KEY>\nVALUE\n</parameter>\n)* </function>
 * then suffix. Parameters come in the order an object's keys do (required
 * ones first); a parameter whose schema says "string" (tool_param_is_string)
 * has raw text for its value (any text without "</parameter>", valid
 * against the string's schema: lengths, pattern, enum), any other a JSON
 * value valid against its schema, as the answer parser reads them. */
jc_matcher *jc_matcher_new_xml(const jc_schema *s, const char *prefix, const char *suffix, ph_err *err);
void jc_matcher_free(jc_matcher *m);
/* An independent copy in the same state (NULL: out of memory). */
jc_matcher *jc_matcher_clone(const jc_matcher *m);
/* Consumes bytes if all of them can continue valid output: 0, else -1 and
 * the state is unchanged. */
int jc_matcher_feed(jc_matcher *m, const char *bytes, size_t n);
/* Whether what was fed is a complete output (the suffix consumed, or for
 * outer_ws, the value complete and only optional whitespace could follow). */
bool jc_matcher_can_end(const jc_matcher *m);
/* Whether nothing more can be fed (complete and no byte can extend it). */
bool jc_matcher_finished(const jc_matcher *m);
/* Whether token id's whole text can be fed now (fast: this is called for
 * the sampled token first). */
bool jc_matcher_token_ok(const jc_matcher *m, const jc_vocab *v, int32_t id);
/* Sets bit id (word id/64, bit id%64) of allowed for every token whose whole
 * text can be fed now; clears the others ((n_vocab + 63) / 64 words).
 * Returns how many are allowed. */
int32_t jc_matcher_mask(const jc_matcher *m, const jc_vocab *v, uint64_t *allowed);

#endif
