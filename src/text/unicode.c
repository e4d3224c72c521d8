#include "text/unicode.h"

unsigned cp_flags_slow(uint32_t cp) {
    /* The last entry whose start is <= cp (entry 0 starts at PH_UNICODE_DIRECT). */
    size_t lo = 0, hi = unicode_n_ranges;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if ((unicode_ranges[mid] >> 8) <= cp) lo = mid;
        else hi = mid;
    }
    return unicode_ranges[lo] & 0xff;
}

size_t utf8_decode_lenient(const uint8_t *s, size_t n, uint32_t *cp) {
    const uint8_t b = s[0];
    size_t len;
    uint32_t v;
    if (b < 0x80) {
        *cp = b;
        return 1;
    } else if (b < 0xC0) {
        len = 0; /* a continuation byte cannot start a character */
    } else if (b < 0xE0) {
        len = 2, v = b & 0x1F;
    } else if (b < 0xF0) {
        len = 3, v = b & 0x0F;
    } else if (b < 0xF8) {
        len = 4, v = b & 0x07;
    } else {
        len = 0;
    }
    if (len == 0 || len > n) goto invalid;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) goto invalid;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v > 0x10FFFF) goto invalid;
    *cp = v;
    return len;
invalid:
    *cp = 0xFFFD;
    return 1;
}

int utf8_next(const uint8_t *s, size_t n, uint32_t *cp) {
    const uint8_t b = s[0];
    int need;                     /* continuation bytes */
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the first continuation byte */
    uint32_t v;
    if (b < 0x80) {
        *cp = b;
        return 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
        need = 1, v = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2, v = b & 0x0F;
        if (b == 0xE0) lo = 0xA0;      /* no overlong forms */
        else if (b == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3, v = b & 0x07;
        if (b == 0xF0) lo = 0x90;
        else if (b == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        return -1;
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) return 0;
        const uint8_t c = s[i];
        if (c < (i == 1 ? lo : 0x80) || c > (i == 1 ? hi : 0xBF)) return -i;
        v = v << 6 | (c & 0x3F);
    }
    *cp = v;
    return need + 1;
}

int utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}
