/* Code point classes and UTF-8 helpers for the tokenizer (docs/numerics.md, Pre-tokenizer, Byte map). */
#ifndef PH_TEXT_UNICODE_H
#define PH_TEXT_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Classes used by the pre-tokenizer: general category L*, N*, M*, and the
 * whitespace set of docs/numerics.md, Pre-tokenizer. */
enum { PH_CP_LETTER = 1, PH_CP_NUMBER = 2, PH_CP_MARK = 4, PH_CP_SPACE = 8 };

/* Generated tables (unicode_data.c, by tools/gen_unicode_data.py): flags of
 * U+0000..U+07FF directly; above that sorted (start << 8 | flags) entries,
 * each running up to the next start, ending with a U+110000 sentinel. */
#define PH_UNICODE_DIRECT 0x800
extern const uint8_t unicode_flags_direct[PH_UNICODE_DIRECT];
extern const uint32_t unicode_ranges[];
extern const size_t unicode_n_ranges;

unsigned cp_flags_slow(uint32_t cp);

/* PH_CP_* flags of a code point; 0 for none and for cp > U+10FFFF. */
static inline unsigned cp_flags(uint32_t cp) {
    return cp < PH_UNICODE_DIRECT ? unicode_flags_direct[cp] : cp_flags_slow(cp);
}

/* Lowercases ASCII letters only. That is exact for the contraction rule
 * ('s 't 're 've 'm 'll 'd): the generator checks that no other code point
 * lowercases to one of those letters. */
static inline uint32_t cp_lower_ascii(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + ('a' - 'A') : cp; }

/* Decodes one code point from s[0..n), n >= 1, as llama.cpp does before
 * pre-tokenizing: only the byte structure is checked (a lead byte and enough
 * continuation bytes), so overlong forms and surrogates decode to their
 * value. Anything else decodes to U+FFFD and consumes one byte; so does a
 * 4-byte form above U+10FFFF (where llama.cpp throws). Returns the number of
 * bytes consumed. */
size_t utf8_decode_lenient(const uint8_t *s, size_t n, uint32_t *cp);

/* Strict decoding step for output (Unicode's "maximal subpart" practice):
 * returns k > 0 if s[0..k) is a well-formed character (*cp set), 0 if
 * s[0..n) is a proper prefix of one (more bytes needed), or -k if s[0..k) is
 * an ill-formed sequence to be replaced by one U+FFFD. n >= 1. */
int utf8_next(const uint8_t *s, size_t n, uint32_t *cp);

/* Writes cp (<= U+10FFFF; surrogates are encoded like any other value) as
 * UTF-8 and returns its length (1-4). */
int utf8_encode(uint32_t cp, uint8_t out[4]);

#endif
