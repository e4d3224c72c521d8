/* libFuzzer target for the sampling constraint's schema compiler, regex
 * compiler and matcher (text/json_constraint.h, text/regex.h): schemas and
 * patterns come from clients (response_format, tools). The input is
 * "SCHEMA\0TEXT": the schema is compiled strictly and leniently, its pattern
 * form (the whole schema text as a pattern) compiled, matched and
 * determinized, and TEXT fed to a JSON matcher (whole and byte by byte,
 * which must agree) and, for an object schema, to an xml call matcher. ASan
 * and UBSan watch the rest. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/json_constraint.h"
#include "text/regex.h"

/* Feeds text whole and byte by byte; both must take the same prefix. */
static void feed_both(jc_matcher *whole, jc_matcher *bytes, const char *text, size_t n) {
    const int a = jc_matcher_feed(whole, text, n);
    size_t k = 0;
    while (k < n && jc_matcher_feed(bytes, text + k, 1) == 0) k++;
    if ((a == 0) != (k == n)) abort();
    if (a == 0 && jc_matcher_can_end(whole) != jc_matcher_can_end(bytes)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t slen = nul ? (size_t)(nul - data) : size;
    const char *schema = (const char *)data, *text = nul ? (const char *)nul + 1 : "";
    const size_t tlen = nul ? size - slen - 1 : 0;

    char err[256];
    rx *r = rx_compile(schema, slen, err, sizeof err);
    if (r) {
        rx_dfa *d = rx_determinize(r, err, sizeof err);
        const bool m = rx_match(r, text, tlen);
        if (d && rx_dfa_match(d, text, tlen) != m) abort(); /* the DFA is the NFA's language */
        rx_dfa_free(d);
        rx_free(r);
    }

    ph_err e = {0};
    jc_schema *s = jc_schema_compile(schema, slen, &e);
    char *dropped = NULL;
    jc_schema *l = jc_schema_compile_lenient(schema, slen, &dropped, &e);
    free(dropped);
    if (s && !l) abort(); /* what compiles strictly compiles leniently */
    if (s) {
        jc_matcher *a = jc_matcher_new(s, NULL, NULL, true, NULL), *b = jc_matcher_new(s, NULL, NULL, true, NULL);
        if (a && b) feed_both(a, b, text, tlen);
        jc_matcher_free(a);
        jc_matcher_free(b);
    }
    if (l) {
        jc_matcher *a = jc_matcher_new_xml(l, "\n", "\n</tool_call>", NULL);
        jc_matcher *b = a ? jc_matcher_new_xml(l, "\n", "\n</tool_call>", NULL) : NULL;
        if (a && b) feed_both(a, b, text, tlen);
        jc_matcher_free(a);
        jc_matcher_free(b);
    }
    jc_schema_free(s);
    jc_schema_free(l);
    return 0;
}
