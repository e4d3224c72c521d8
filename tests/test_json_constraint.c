/* The JSON-schema constraint (src/text/json_constraint.h): what each
 * keyword lets through, refusals, that masks agree with token checks and
 * with feeding (synthetic vocabulary and the real Qwen one), and that random
 * generation under the mask always gives JSON that parses and validates
 * (checked by a small validator written here, independent of the matcher).
 * Also prints jc_matcher_mask timings per state with the real vocabulary. */
#include <jansson.h>
#include <locale.h>
#include <math.h>
#include <regex.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/strbuf.h"
#include "gguf/gguf.h"
#include "test.h"
#include "text/json_constraint.h"
#include "text/regex.h"
#include "text/tokenizer.h"

#define VOCAB_GGUF PH_ORACLE_DIR "/models/tiny-f16.gguf"

static bool under_valgrind(void) {
    const char *p = getenv("LD_PRELOAD");
    return (p && (strstr(p, "valgrind") || strstr(p, "vgpreload"))) || getenv("JC_TEST_QUICK");
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- schemas used below ---------------------------------------------------- */
static const char *TOOLS =
    "{\"anyOf\":["
    "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"get_weather\"},\"arguments\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\",\"description\":\"City name\"},\"unit\":{\"enum\":[\"celsius\","
    "\"fahrenheit\"]}},\"required\":[\"city\"]}},\"required\":[\"name\",\"arguments\"]},"
    "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"search\"},\"arguments\":{\"type\":\"object\","
    "\"properties\":{\"query\":{\"type\":\"string\"},\"limit\":{\"type\":\"integer\"},\"filters\":{\"type\":"
    "\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":3}},\"required\":[\"query\"]}},\"required\":[\"name\","
    "\"arguments\"]}]}";
static const char *OBJECT = "{\"type\":\"object\"}";
static const char *TREE =
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"},\"label\":{\"type\":"
    "[\"string\",\"null\"],\"maxLength\":8},\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"},"
    "\"maxItems\":3}},\"required\":[\"value\"]}},\"$ref\":\"#/$defs/node\"}";
static const char *MIXED =
    "{\"type\":\"object\",\"title\":\"x\",\"properties\":{\"flag\":{\"type\":\"boolean\"},\"nothing\":{\"type\":"
    "\"null\"},\"color\":{\"enum\":[\"red\",\"green\",\"grey\",7,null]},\"score\":{\"type\":\"number\",\"minimum\":0,"
    "\"maximum\":1},\"level\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120},\"tags\":{\"type\":\"array\","
    "\"items\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":4},\"minItems\":1,\"maxItems\":4},\"pair\":{"
    "\"prefixItems\":[{\"type\":\"string\"},{\"const\":{\"k\":[1,2]}}],\"items\":false},\"any\":{},\"opt\":{"
    "\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":2}]}},\"required\":[\"flag\",\"nothing\","
    "\"color\",\"score\",\"level\",\"tags\",\"pair\"],\"additionalProperties\":{\"type\":\"integer\"}}";

static const char *BOUNDED =
    "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"minLength\":3,\"maxLength\":5},\"n\":{"
    "\"type\":\"number\",\"exclusiveMinimum\":-2.5,\"maximum\":2.5},\"i\":{\"type\":\"integer\",\"minimum\":10,"
    "\"maximum\":12},\"e\":{\"type\":\"array\",\"items\":{\"enum\":[1,12,123,\"a\",[1]]},\"minItems\":2},\"u\":{"
    "\"type\":[\"number\",\"integer\"],\"minimum\":0}},\"required\":[\"s\",\"n\",\"i\",\"e\"]}";

/* ---- helpers ----------------------------------------------------------------- */
static jc_schema *compile_ok(const char *json) {
    ph_err e = {0};
    jc_schema *s = jc_schema_compile(json, strlen(json), &e);
    CHECKF(s != NULL, "%s: %s", json, e.msg);
    return s;
}

/* 1: accepted and complete, 0: accepted but not complete, -1: refused */
static int run(const char *schema, const char *prefix, const char *suffix, bool ows, const char *text, size_t len) {
    jc_schema *s = compile_ok(schema);
    if (!s) return -2;
    jc_matcher *m = jc_matcher_new(s, prefix, suffix, ows, NULL);
    int r = 0;
    /* in pieces of random size, to cross every boundary */
    for (size_t i = 0; i < len && r == 0;) {
        size_t k = 1 + rnd() % 4;
        if (k > len - i) k = len - i;
        r = jc_matcher_feed(m, text + i, k);
        i += k;
    }
    const int out = r ? -1 : jc_matcher_can_end(m) ? 1 : 0;
    jc_matcher_free(m);
    jc_schema_free(s);
    return out;
}

#define RUN1(schema, text)                run(schema, NULL, NULL, false, text, strlen(text))
#define ACCEPT(schema, text)              CHECKF(RUN1(schema, text) == 1, "accept %s", text)
#define PARTIAL(schema, text)             CHECKF(RUN1(schema, text) == 0, "partial %s", text)
#define RUNS(schema, pre, suf, ows, text) run(schema, pre, suf, ows, text, strlen(text))
#define REJECT(schema, text)              CHECKF(RUN1(schema, text) == -1, "reject %s", text)

static void refused(const char *schema, const char *kw, const char *path) {
    ph_err e = {0};
    jc_schema *s = jc_schema_compile(schema, strlen(schema), &e);
    CHECKF(!s && e.code == PH_ERR_INPUT && strstr(e.msg, kw) && (!path || strstr(e.msg, path)), "%s -> %s", schema,
           s ? "compiled" : e.msg);
    jc_schema_free(s);
    memset(&e, 0, sizeof e);
    CHECK(ph_schema_check(schema, strlen(schema), &e) == -1 && e.code == PH_ERR_INPUT);
}

/* ---- POSIX regular expressions: the independent engine for patterns ---------------- */
/* Whether the POSIX ERE ere matches somewhere in s (UTF-8), in a UTF-8
 * locale when there is one. -1: no UTF-8 locale and s is not ASCII (the
 * byte-wise match could be wrong). */
static int ere_match(const char *ere, const char *s) {
    const char *old = setlocale(LC_CTYPE, NULL);
    char saved[64];
    snprintf(saved, sizeof saved, "%s", old ? old : "C");
    const bool utf8 = setlocale(LC_CTYPE, "C.UTF-8") || setlocale(LC_CTYPE, "en_US.UTF-8");
    int r = -1;
    bool ascii = true;
    for (const char *p = s; *p; p++) ascii = ascii && (unsigned char)*p < 0x80;
    if (utf8 || ascii) {
        regex_t re;
        const int rc = regcomp(&re, ere, REG_EXTENDED | REG_NOSUB);
        CHECKF(rc == 0, "regcomp %s", ere);
        if (rc == 0) {
            r = regexec(&re, s, 0, NULL, 0) == 0;
            regfree(&re);
        }
    }
    setlocale(LC_CTYPE, saved);
    return r;
}

/* ---- an independent validator (JSON Schema semantics) ------------------------------ */
static json_t *resolve(json_t *root, const char *ref) {
    if (strcmp(ref, "#") == 0) return root;
    if (strncmp(ref, "#/", 2)) return NULL;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", ref + 2);
    json_t *at = root;
    for (char *save = NULL, *seg = strtok_r(buf, "/", &save); seg && at; seg = strtok_r(NULL, "/", &save))
        at = json_object_get(at, seg);
    return at;
}

static bool same_value(json_t *a, json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    if (json_typeof(a) != json_typeof(b)) return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!same_value(json_array_get(a, i), json_array_get(b, i))) return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return false;
        const char *k;
        json_t *x;
        json_object_foreach(a, k, x) {
            json_t *y = json_object_get(b, k);
            if (!y || !same_value(x, y)) return false;
        }
        return true;
    }
    return json_equal(a, b);
}

static size_t cps(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static bool has_type(json_t *v, const char *t) {
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    return false;
}

static bool valid(json_t *root, json_t *sc, json_t *v) {
    if (json_is_true(sc)) return true;
    if (json_is_false(sc)) return false;
    json_t *x;
    if ((x = json_object_get(sc, "$ref")) && !valid(root, resolve(root, json_string_value(x)), v)) return false;
    const char *combs[] = {"anyOf", "oneOf"}; /* oneOf as anyOf, like the matcher */
    for (int c = 0; c < 2; c++)
        if ((x = json_object_get(sc, combs[c]))) {
            bool any = false;
            for (size_t i = 0; i < json_array_size(x) && !any; i++) any = valid(root, json_array_get(x, i), v);
            if (!any) return false;
        }
    if ((x = json_object_get(sc, "allOf")))
        for (size_t i = 0; i < json_array_size(x); i++)
            if (!valid(root, json_array_get(x, i), v)) return false;
    if ((x = json_object_get(sc, "const")) && !same_value(x, v)) return false;
    if ((x = json_object_get(sc, "enum"))) {
        bool any = false;
        for (size_t i = 0; i < json_array_size(x) && !any; i++) any = same_value(json_array_get(x, i), v);
        if (!any) return false;
    }
    if ((x = json_object_get(sc, "type"))) {
        bool any = false;
        if (json_is_string(x)) any = has_type(v, json_string_value(x));
        for (size_t i = 0; json_is_array(x) && i < json_array_size(x); i++)
            any = any || has_type(v, json_string_value(json_array_get(x, i)));
        if (!any) return false;
    }
    if (json_is_object(v)) {
        json_t *props = json_object_get(sc, "properties"), *req = json_object_get(sc, "required");
        json_t *addl = json_object_get(sc, "additionalProperties");
        for (size_t i = 0; i < json_array_size(req); i++)
            if (!json_object_get(v, json_string_value(json_array_get(req, i)))) return false;
        const char *k;
        json_t *y;
        json_object_foreach(v, k, y) {
            json_t *ps = props ? json_object_get(props, k) : NULL;
            if (ps) {
                if (!valid(root, ps, y)) return false;
            } else if (addl && !valid(root, addl, y)) {
                return false;
            }
        }
    }
    if (json_is_array(v)) {
        json_t *items = json_object_get(sc, "items"), *prefix = json_object_get(sc, "prefixItems");
        const size_t n = json_array_size(v);
        if ((x = json_object_get(sc, "minItems")) && n < (size_t)json_integer_value(x)) return false;
        if ((x = json_object_get(sc, "maxItems")) && n > (size_t)json_integer_value(x)) return false;
        for (size_t i = 0; i < n; i++) {
            json_t *is = prefix && i < json_array_size(prefix) ? json_array_get(prefix, i) : items;
            if (is && !valid(root, is, json_array_get(v, i))) return false;
        }
    }
    if (json_is_string(v)) {
        const size_t n = cps(json_string_value(v));
        /* patterns: the test schemas give an ERE version as x-ere */
        if ((x = json_object_get(sc, "x-ere")) && ere_match(json_string_value(x), json_string_value(v)) == 0)
            return false;
        if ((x = json_object_get(sc, "minLength")) && n < (size_t)json_integer_value(x)) return false;
        if ((x = json_object_get(sc, "maxLength")) && n > (size_t)json_integer_value(x)) return false;
    }
    if (json_is_number(v)) {
        const double d = json_number_value(v);
        if ((x = json_object_get(sc, "minimum")) && d < json_number_value(x)) return false;
        if ((x = json_object_get(sc, "maximum")) && d > json_number_value(x)) return false;
        if ((x = json_object_get(sc, "exclusiveMinimum")) && d <= json_number_value(x)) return false;
        if ((x = json_object_get(sc, "exclusiveMaximum")) && d >= json_number_value(x)) return false;
    }
    return true;
}

/* Parses text (the output between prefix and suffix) and validates it. */
static bool output_valid(const char *schema, const char *text, size_t len) {
    json_error_t je;
    json_t *sc = json_loads(schema, 0, NULL);
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY, &je);
    const bool ok = sc && v && valid(sc, sc, v);
    if (!v) fprintf(stderr, "output does not parse: %s: %.*s\n", je.text, (int)len, text);
    else if (!ok) fprintf(stderr, "output not valid: %.*s\n", (int)len, text);
    json_decref(v);
    json_decref(sc);
    return ok;
}

/* ---- keyword tests ------------------------------------------------------------------- */
static void test_keywords(void) {
    /* tool calls with prefix and suffix */
    const char *pre = "\n", *suf = "\n</tool_call>";
    struct {
        const char *text;
        int want;
    } calls[] = {
        {"\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", 1},
        {"\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
         1},
        {"\n{\"name\":\"search\",\"arguments\":{\"query\":\"x\",\"limit\":-5,\"filters\":[\"a\",\"b\",\"c\"]}}\n</"
         "tool_call>",
         1},
        {"\n{\"name\":\"search\",\"arguments\":{\"query\":\"x\",\"filters\":[]}}\n</tool_call>", 1},
        {"\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool", 0},
        {"\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", 0},
        {"\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"celsius\", \"city\": \"Paris\"}}", -1},
        {"\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"country\": \"FR\"}}", -1},
        {"\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"kelvin\"}}", -1},
        {"\n{\"name\": \"get_time\"", -1},
        {"\n{\"arguments\": {}, \"name\": \"search\"}", -1},
        {"\n{\"name\":\"search\",\"arguments\":{\"query\":\"x\",\"filters\":[\"a\",\"b\",\"c\",\"d\"]}}", -1},
        {"\n{\"name\":\"search\",\"arguments\":{\"query\":\"x\",\"limit\":1.5}}", -1},
        {"\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>x", -1},
        {"{\"name\"", -1},
    };
    for (size_t i = 0; i < sizeof calls / sizeof *calls; i++)
        CHECKF(run(TOOLS, pre, suf, false, calls[i].text, strlen(calls[i].text)) == calls[i].want, "tool call %zu",
               i);
    CHECK(RUNS(TOOLS, "<tool_call>\n", suf, false,
               "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"\"}}\n</tool_call>") == 1);

    /* json_object mode, outer whitespace, free values */
    CHECK(RUNS(OBJECT, NULL, NULL, true, " {\"a\": [1, 2.5e-3, {\"b\": null}], \"c\": true} ") == 1);
    CHECK(RUNS(OBJECT, NULL, NULL, true, "\n\n  {}\n\t") == 1);
    CHECK(RUNS(OBJECT, NULL, NULL, true, "{} \n") == -1);
    CHECK(RUNS(OBJECT, NULL, NULL, false, " {}") == -1);
    REJECT(OBJECT, "[1]");
    REJECT(OBJECT, "\"x\"");
    REJECT(OBJECT, "{\"a\": 01}");
    REJECT(OBJECT, "{\"a\": 1.}");
    REJECT(OBJECT, "{\"a\": .5}");
    REJECT(OBJECT, "{\"a\": +1}");
    REJECT(OBJECT, "{\"a\": tru}");
    REJECT(OBJECT, "{\"a\": True}");
    REJECT(OBJECT, "{\"a\" 1}");
    REJECT(OBJECT, "{\"a\": 1,}");
    REJECT(OBJECT, "{a: 1}");
    ACCEPT(OBJECT, "{\"a\":{\"a\":{},\"b\":[[],[null]]},\"a\":false}");
    /* strings: escapes and UTF-8 */
    ACCEPT(OBJECT, "{\"\\\"\\\\\\/\\b\\f\\n\\r\\t\": \"\\u00e9\\uD83D\\uDE00\\u20AC\"}");
    ACCEPT(OBJECT, "{\"k\": \"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xed\x9f\xbf\xf4\x8f\xbf\xbf\"}");
    REJECT(OBJECT, "{\"k\": \"\\ud83d\"");
    REJECT(OBJECT, "{\"k\": \"\\ud83d\\u0041");
    REJECT(OBJECT, "{\"k\": \"\\ude00");
    REJECT(OBJECT, "{\"k\": \"\\u0000");
    REJECT(OBJECT, "{\"k\": \"\\x\"");
    REJECT(OBJECT, "{\"k\": \"\\u12G");
    REJECT(OBJECT, "{\"k\": \"\x01\"}");
    REJECT(OBJECT, "{\"k\": \"\n\"}");
    REJECT(OBJECT, "{\"k\": \"\xc3\x28\"}");
    REJECT(OBJECT, "{\"k\": \"\xc0\xaf\"}");
    REJECT(OBJECT, "{\"k\": \"\xe0\x80\xaf\"}");
    REJECT(OBJECT, "{\"k\": \"\xed\xa0\x80\"}");
    REJECT(OBJECT, "{\"k\": \"\xf4\x90\x80\x80\"}");
    REJECT(OBJECT, "{\"k\": \"\xf5\"}");
    REJECT(OBJECT, "{\"k\": \"\x80\"}");
    REJECT(OBJECT, "{\"k\": \"\xc3\"}");
    /* whitespace bounds */
    ACCEPT(OBJECT, "{ \"a\" : 1 , \"b\" : [ 1 , 2 ] }");
    ACCEPT(OBJECT, "{\n\n  \"a\":1\n}");
    ACCEPT(OBJECT, "{\n\t\t\"a\":1}");
    REJECT(OBJECT, "{  \"a\": 1}");
    REJECT(OBJECT, "{\n\n\n\"a\": 1}");
    REJECT(OBJECT, "{\t\"a\": 1}");
    REJECT(OBJECT, "{\r\n\"a\": 1}");
    REJECT(OBJECT, "{ \n\"a\": 1}");
    char buf[256];
    snprintf(buf, sizeof buf, "{\n%20s\"a\": 1}", "");
    ACCEPT(OBJECT, buf);
    snprintf(buf, sizeof buf, "{\n%21s\"a\": 1}", "");
    REJECT(OBJECT, buf);

    /* numbers */
    const char *num = "{\"type\":\"number\"}", *integer = "{\"type\":\"integer\"}";
    ACCEPT(num, "0");
    ACCEPT(num, "-0");
    ACCEPT(num, "12.5");
    ACCEPT(num, "1e5");
    ACCEPT(num, "1E+05");
    ACCEPT(num, "-0.5e-10");
    ACCEPT(num, "1234567890123456");
    ACCEPT(num, "0.1234567890123456");
    REJECT(num, "12345678901234567");
    REJECT(num, "0.12345678901234567");
    REJECT(num, "1e123");
    REJECT(num, "01");
    PARTIAL(num, "-");
    PARTIAL(num, "1.");
    PARTIAL(num, "1e");
    PARTIAL(num, "1e-");
    REJECT(num, "1e-+");
    ACCEPT(integer, "-12");
    REJECT(integer, "1.0");
    REJECT(integer, "1e3");
    {
        jc_schema *s = compile_ok(num);
        jc_matcher *m = jc_matcher_new(s, NULL, NULL, false, NULL);
        CHECK(jc_matcher_feed(m, "12", 2) == 0 && jc_matcher_can_end(m) && !jc_matcher_finished(m));
        CHECK(jc_matcher_feed(m, "e99", 3) == 0 && jc_matcher_can_end(m) && jc_matcher_finished(m));
        jc_matcher_free(m);
        jc_schema_free(s);
    }
    const char *r1 = "{\"type\":\"integer\",\"minimum\":1,\"maximum\":100}";
    ACCEPT(r1, "1");
    ACCEPT(r1, "50");
    ACCEPT(r1, "100");
    REJECT(r1, "0");
    REJECT(r1, "101");
    REJECT(r1, "-1");
    REJECT(r1, "1000");
    const char *r2 = "{\"type\":\"integer\",\"minimum\":-10,\"exclusiveMaximum\":-4}";
    ACCEPT(r2, "-7");
    ACCEPT(r2, "-10");
    ACCEPT(r2, "-5");
    REJECT(r2, "-4");
    REJECT(r2, "-11");
    REJECT(r2, "5");
    REJECT(r2, "0");
    const char *r3 = "{\"type\":\"number\",\"minimum\":0.5,\"maximum\":1}";
    ACCEPT(r3, "0.5");
    ACCEPT(r3, "0.75");
    ACCEPT(r3, "1");
    ACCEPT(r3, "1.0000");
    PARTIAL(r3, "0");
    PARTIAL(r3, "0.");
    REJECT(r3, "0.4");
    REJECT(r3, "1.01");
    REJECT(r3, "2");
    REJECT(r3, "5e-1");
    REJECT(r3, "-0.5");
    const char *r4 = "{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":1e-3}";
    ACCEPT(r4, "0.001");
    ACCEPT(r4, "0.0000000000000001");
    PARTIAL(r4, "0.000");
    REJECT(r4, "0.0011");
    REJECT(r4, "0.0020");
    PARTIAL(r4, "0");
    refused("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no value", "$");
    refused("{\"type\":\"integer\",\"minimum\":0.2,\"maximum\":0.8}", "no value", "$");

    /* strings */
    const char *str = "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}";
    ACCEPT(str, "\"ab\"");
    ACCEPT(str, "\"abc\"");
    ACCEPT(str, "\"\xc3\xa9\xf0\x9f\x98\x80\"");
    ACCEPT(str, "\"a\\n\"");
    ACCEPT(str, "\"\\ud83d\\ude00\\u00e9\"");
    REJECT(str, "\"a\"");
    REJECT(str, "\"abcd\"");
    REJECT(str, "\"\\ud83d\\ude00\"");

    /* enum, const, boolean, null */
    const char *en = "{\"enum\":[\"red\",\"green\",1,12,null,{\"a\":[1,2]},true]}";
    ACCEPT(en, "\"red\"");
    ACCEPT(en, "\"green\"");
    ACCEPT(en, "1");
    ACCEPT(en, "12");
    ACCEPT(en, "null");
    ACCEPT(en, "true");
    ACCEPT(en, "{\"a\": [1, 2]}");
    ACCEPT(en, "{\"a\":[1,2]}");
    REJECT(en, "{\"a\": [1,2]}");
    REJECT(en, "\"blue\"");
    REJECT(en, "\"re\"");
    REJECT(en, "2");
    REJECT(en, "123");
    REJECT(en, "false");
    ACCEPT("{\"type\":\"string\",\"enum\":[\"a\",1]}", "\"a\"");
    REJECT("{\"type\":\"string\",\"enum\":[\"a\",1]}", "1");
    ACCEPT("{\"const\":\"x\"}", "\"x\"");
    REJECT("{\"const\":\"x\"}", "\"y\"");
    ACCEPT("{\"const\":2.5}", "2.5");
    ACCEPT("{\"enum\":[\"a\\\"b\", \"\\u00e9\\n\"]}", "\"a\\\"b\"");
    ACCEPT("{\"enum\":[\"a\\\"b\", \"\\u00e9\\n\"]}", "\"\xc3\xa9\\n\"");
    ACCEPT("{\"type\":\"boolean\"}", "false");
    REJECT("{\"type\":\"boolean\"}", "null");
    PARTIAL("{\"type\":\"boolean\"}", "tru");
    ACCEPT("{\"type\":\"null\"}", "null");
    refused("{\"type\":\"string\",\"enum\":[1,2]}", "no value", "$");

    /* arrays */
    const char *arr = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}";
    ACCEPT(arr, "[1]");
    ACCEPT(arr, "[1, 2]");
    ACCEPT(arr, "[ 1 ]");
    REJECT(arr, "[]");
    REJECT(arr, "[1,2,3]");
    REJECT(arr, "[\"a\"]");
    const char *tup = "{\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}";
    ACCEPT(tup, "[\"a\", 1]");
    ACCEPT(tup, "[\"a\"]");
    ACCEPT(tup, "[]");
    REJECT(tup, "[1]");
    REJECT(tup, "[\"a\", 1, 2]");
    const char *nest = "{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}}}";
    ACCEPT(nest, "[[true], [], [false, true]]");
    REJECT(nest, "[[true], 1]");

    /* objects: order, required, optional, additionalProperties */
    const char *ord =
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"},"
        "\"c\":{\"type\":\"integer\"}},\"required\":[\"c\",\"a\"]}";
    ACCEPT(ord, "{\"a\": 1, \"c\": 3}");
    ACCEPT(ord, "{\"a\": 1, \"c\": 3, \"b\": 2}");
    REJECT(ord, "{\"c\": 3, \"a\": 1}");
    REJECT(ord, "{\"a\": 1, \"b\": 2, \"c\": 3}");
    REJECT(ord, "{\"a\": 1}");
    REJECT(ord, "{\"a\": 1, \"c\": 3, \"d\": 4}");
    const char *opt =
        "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"},\"xy\":{\"type\":\"integer\"},"
        "\"y\":{\"type\":\"integer\"}}}";
    ACCEPT(opt, "{}");
    ACCEPT(opt, "{\"xy\": 1}");
    ACCEPT(opt, "{\"x\": 1, \"y\": 2}");
    ACCEPT(opt, "{\"x\": 1, \"xy\": 1, \"y\": 2}");
    REJECT(opt, "{\"y\": 2, \"x\": 1}");
    REJECT(opt, "{\"xy\": 1, \"x\": 2}");
    REJECT(opt, "{\"x\": 1,}");
    const char *add = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{"
                      "\"type\":\"string\"}}";
    ACCEPT(add, "{\"a\": 1, \"b\": \"x\"}");
    ACCEPT(add, "{\"b\": \"x\", \"ab\": \"y\"}");
    ACCEPT(add, "{\"a\": 1, \"\": \"\"}");
    REJECT(add, "{\"b\": \"x\", \"a\": 1}");
    REJECT(add, "{\"a\": 1, \"b\": 2}");
    REJECT(add, "{\"a\": 1, \"a\": \"x\"}");
    ACCEPT("{\"type\":\"object\",\"additionalProperties\":false}", "{}");
    REJECT("{\"type\":\"object\",\"additionalProperties\":false}", "{\"a\": 1}");
    ACCEPT("{\"type\":\"object\",\"required\":[\"x\"]}", "{\"x\": [1], \"y\": 2}");
    REJECT("{\"type\":\"object\",\"required\":[\"x\"]}", "{}");
    REJECT("{\"type\":\"object\",\"required\":[\"x\"]}", "{\"y\": 2}");
    const char *req_add =
        "{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"x\"],\"additionalProperties\":"
        "{\"type\":\"integer\"}}";
    ACCEPT(req_add, "{\"x\": 1}");
    REJECT(req_add, "{\"x\": \"1\"}");
    refused("{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"],\"additionalProperties\":false}", "no value",
            NULL);
    ACCEPT("{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"]}", "{\"x\": []}");
    ACCEPT("{\"enum\":[\"a\\u0000\",\"b\"]}", "\"a\\u0000\""); /* NUL in a string is a character */
    ACCEPT(
        "{\"type\":\"object\",\"properties\":{\"k\\\"\\u00e9\":{\"type\":\"null\"}},\"required\":[\"k\\\"\\u00e9\"]}",
        "{\"k\\\"\xc3\xa9\": null}");

    /* choices */
    const char *tl = "{\"type\":[\"string\",\"null\"],\"maxLength\":2}";
    ACCEPT(tl, "\"ab\"");
    ACCEPT(tl, "null");
    REJECT(tl, "\"abc\"");
    const char *any = "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}";
    ACCEPT(any, "12");
    ACCEPT(any, "\"a\"");
    REJECT(any, "\"ab\"");
    REJECT(any, "1.5");
    ACCEPT("{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"boolean\"}]}", "true");
    ACCEPT("{\"allOf\":[{\"type\":\"integer\"}],\"description\":\"d\"}", "3");
    REJECT("{\"allOf\":[{\"type\":\"integer\"}],\"description\":\"d\"}", "\"3\"");
    const char *objs =
        "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":["
        "\"a\"]},{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]}]}";
    ACCEPT(objs, "{\"a\": 1}");
    ACCEPT(objs, "{\"a\": \"1\"}");
    REJECT(objs, "{\"a\": null}");
    ACCEPT("true", "[{\"x\": null}]");
    ACCEPT("{}", "-1.5e7");
    ACCEPT("{\"description\":\"any\",\"x-extension\":{\"a\":1},\"nullable\":true}", "\"s\"");

    /* $ref, recursion, depth */
    ACCEPT(TREE, "{\"value\": 1, \"children\": [{\"value\": 2}, {\"value\": 3, \"label\": null, \"children\": []}]}");
    REJECT(TREE, "{\"value\": 1, \"children\": [{\"label\": \"x\"}]}");
    ACCEPT("{\"definitions\":{\"n\":{\"type\":\"integer\"}},\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/"
           "n\"}}",
           "[1, 2]");
    ACCEPT("{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}", "[[], [[]]]");
    ACCEPT("{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", "null");
    refused("{\"$defs\":{\"a\":{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#/$defs/"
            "a\"}},\"required\":[\"x\"]}},"
            "\"$ref\":\"#/$defs/a\"}",
            "no value", NULL);
    refused("{\"$ref\":\"#\"}", "no value", NULL);
    const char *deep = "{\"type\":\"array\"}";
    char d[200];
    memset(d, '[', 32);
    memset(d + 32, ']', 32);
    d[64] = '\0';
    ACCEPT(deep, d);
    memset(d, '[', 33);
    d[33] = '\0';
    REJECT(deep, d);
    /* near the depth cap, a free value can only be a scalar */
    memset(d, '[', 32);
    strcpy(d + 32, "{");
    REJECT(deep, d);
    memset(d, '[', 32);
    strcpy(d + 32, "\"x\"");
    PARTIAL(deep, d);

    /* prefix, suffix, can_end, finished */
    {
        jc_schema *s = compile_ok("{\"type\":\"boolean\"}");
        jc_matcher *m = jc_matcher_new(s, "<tool_call>\n", "\n</tool_call>", false, NULL);
        CHECK(!jc_matcher_can_end(m) && jc_matcher_feed(m, "<tool_call>", 11) == 0 && !jc_matcher_can_end(m));
        CHECK(jc_matcher_feed(m, "\ntrue", 5) == 0 && !jc_matcher_can_end(m));
        CHECK(jc_matcher_feed(m, "\n</tool_call>x", 14) == -1); /* refused whole: nothing consumed */
        CHECK(jc_matcher_feed(m, "\n</tool_call>", 13) == 0 && jc_matcher_can_end(m) && jc_matcher_finished(m));
        jc_matcher_free(m);
        m = jc_matcher_new(s, NULL, NULL, true, NULL);
        CHECK(jc_matcher_feed(m, "false", 5) == 0 && jc_matcher_can_end(m) && !jc_matcher_finished(m));
        snprintf(buf, sizeof buf, "\n\n%20s", "");
        CHECK(jc_matcher_feed(m, buf, strlen(buf)) == 0 && jc_matcher_can_end(m) && jc_matcher_finished(m));
        jc_matcher_free(m);
        m = jc_matcher_new(s, NULL, NULL, false, NULL);
        CHECK(jc_matcher_feed(m, "true", 4) == 0 && jc_matcher_finished(m));
        jc_matcher_free(m);
        jc_schema_free(s);
    }
}

/* anyOf over n tools named tool_0..tool_{n-1}, each taking {"x": integer}. */
static char *many_tools(int n) {
    size_t cap = (size_t)n * 200 + 32, len = 0;
    char *s = malloc(cap);
    len += (size_t)snprintf(s + len, cap - len, "{\"anyOf\":[");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(
            s + len, cap - len,
            "%s{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"tool_%d\"},\"arguments\":{"
            "\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"]}},"
            "\"required\":[\"name\",\"arguments\"]}",
            i ? "," : "", i);
    snprintf(s + len, cap - len, "]}");
    return s;
}

static void test_state(void) {
    /* 128 tools (the most OpenAI allows): every one can be called */
    char *tools = many_tools(128);
    for (int i = 0; i < 128; i += 127) {
        char call[128];
        snprintf(call, sizeof call, "\n{\"name\": \"tool_%d\", \"arguments\": {\"x\": 1}}\n</tool_call>", i);
        CHECKF(RUNS(tools, "\n", "\n</tool_call>", false, call) == 1, "%s", call);
    }
    CHECK(RUNS(tools, "\n", "\n</tool_call>", false, "\n{\"name\": \"tool_128\"") == -1);
    free(tools);

    /* a long output: the arena is compacted on the way, the state stays right */
    jc_schema *s = compile_ok("{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
                              "\"array\",\"items\":{\"type\":\"integer\"}}},\"required\":[\"a\"]}}");
    jc_matcher *m = jc_matcher_new(s, NULL, NULL, false, NULL);
    bool ok = jc_matcher_feed(m, "[", 1) == 0;
    for (int i = 0; i < 3000 && ok; i++) {
        const char *item = i ? ",{\"a\":[1,2]}" : "{\"a\":[1,2]}";
        ok = jc_matcher_feed(m, item, strlen(item)) == 0;
    }
    CHECK(ok && !jc_matcher_can_end(m));
    CHECK(jc_matcher_feed(m, ",{\"b\"", 5) == -1);
    jc_matcher *c = jc_matcher_clone(m);
    CHECK(c && jc_matcher_feed(m, "]", 1) == 0 && jc_matcher_finished(m));
    CHECK(c && !jc_matcher_can_end(c) && jc_matcher_feed(c, ",{\"a\":[]}]", 10) == 0 && jc_matcher_finished(c));
    jc_matcher_free(c);
    jc_matcher_free(m);
    jc_schema_free(s);
}

static void test_refusals(void) {
    refused("{\"type\":\"object\",\"properties\":{\"zip\":{\"type\":\"string\",\"pattern\":\"(?<=a)[0-9]+$\"}}}",
            "'pattern' at $.properties.zip: the look-behind", "$.properties.zip");
    refused("{\"patternProperties\":{}}", "'patternProperties'", "$");
    refused("{\"not\":{}}", "'not'", "$");
    /* a NUL in a schema's string is a character like any other (no message naming a library flag) */
    ACCEPT("{\"const\":\"a\\u0000b\"}", "\"a\\u0000b\"");
    REJECT("{\"const\":\"a\\u0000b\"}", "\"a\"");
    refused("{\"if\":{},\"then\":{}}", "'if'", "$");
    refused("{\"type\":\"number\",\"multipleOf\":2}", "'multipleOf'", "$");
    refused("{\"type\":\"array\",\"items\":{\"uniqueItems\":true}}", "'uniqueItems'", "$.items");
    refused("{\"type\":\"object\",\"minProperties\":1}", "'minProperties'", "$");
    refused("{\"propertyNames\":{}}", "'propertyNames'", "$");
    refused("{\"dependentRequired\":{}}", "'dependentRequired'", "$");
    refused("{\"anyOf\":[{\"type\":\"string\"},{\"contains\":{}}]}", "'contains'", "$.anyOf[1]");
    refused("{\"$defs\":{\"x\":{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}},\"$ref\":\"#/$defs/x\"}",
            "back-reference", "'pattern' at $.$defs.x");
    refused("{\"type\":\"strin\"}", "unknown type 'strin'", "$");
    refused("{\"type\":[\"string\",\"date\"]}", "unknown type 'date'", "$");
    refused("{\"$ref\":\"https://example.com/s.json\"}", "'$ref'", "$");
    refused("{\"$ref\":\"#/$defs/missing\"}", "'$ref'", "$");
    refused("{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":3}]}", "'allOf'", "$");
    refused("{\"type\":\"string\",\"anyOf\":[{\"maxLength\":3}]}", "'anyOf'", "$");
    refused("{\"type\":\"number\",\"exclusiveMinimum\":true,\"minimum\":0}", "'exclusiveMinimum'", "$");
    refused("{\"type\":\"array\",\"minItems\":-1}", "'minItems'", "$");
    refused("{\"type\":\"object\",\"required\":\"a\"}", "'required'", "$");
    refused("{\"type\":", "not valid JSON", NULL);
    refused("[1]", "not an object", "$");
    ph_err e = {0};
    CHECK(ph_schema_check(TOOLS, strlen(TOOLS), &e) == 0);
    CHECK(ph_schema_check(MIXED, strlen(MIXED), &e) == 0);
    CHECK(ph_schema_check("{}", 2, &e) == 0);
}

/* ---- regular expressions (text/regex.h) --------------------------------------------- */
/* The NFA (set simulation) and the DFA must both give want. */
static void rx_check(const char *re, const char *s, size_t len, bool want) {
    char err[256] = "";
    rx *r = rx_compile(re, strlen(re), err, sizeof err);
    rx_dfa *d = r ? rx_determinize(r, err, sizeof err) : NULL;
    CHECKF(r && d, "/%s/: %s", re, err);
    if (r && d) {
        const bool a = rx_match(r, s, len), b = rx_dfa_match(d, s, len);
        CHECKF(a == want && b == want, "/%s/ on '%.*s': nfa %d dfa %d, want %d", re, (int)len, s, a, b, want);
    }
    rx_dfa_free(d);
    rx_free(r);
}
#define RX_YES(re, s) rx_check(re, s, strlen(s), true)
#define RX_NO(re, s)  rx_check(re, s, strlen(s), false)

static void rx_refused(const char *re, const char *text) {
    char err[256] = "";
    rx *r = rx_compile(re, strlen(re), err, sizeof err);
    CHECKF(!r && strstr(err, text), "/%s/ -> %s (want '%s')", re, r ? "compiled" : err, text);
    rx_free(r);
}

static void test_regex(void) {
    /* literals, UTF-8, escapes */
    RX_YES("^abc$", "abc");
    RX_NO("^abc$", "abd");
    RX_NO("^abc$", "abcc");
    RX_YES("^\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80$", "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    RX_NO("^\xc3\xa9$", "e");
    RX_YES("^\\.\\\\\\/\\-\\[\\]\\(\\)\\{\\}\\*\\+\\?\\|\\^\\$$", ".\\/-[](){}*+?|^$");
    RX_NO("^\\.$", "a");
    RX_YES("^\\n\\t\\r\\f\\v$", "\n\t\r\f\v");
    RX_YES("^\\x41\\u00e9\\u{1F600}\\uD83D\\uDE00$", "A\xc3\xa9\xf0\x9f\x98\x80\xf0\x9f\x98\x80");
    RX_YES("^\\cJ$", "\n");
    RX_YES("^\\@\\#\\ $", "@# ");
    RX_NO("^\\0$", "");         /* U+0000 is not in the alphabet */
    RX_NO("^\\uD800$", "");     /* nor a lone surrogate */
    RX_YES("^a{,2}$", "a{,2}"); /* not a quantifier: literal */
    RX_YES("^a}]$", "a}]");
    /* . and classes */
    RX_YES("^a.c$", "abc");
    RX_YES("^a.c$", "a\xc3\xa9"
                    "c");
    RX_NO("^a.c$", "a\nc");
    RX_NO("^a.c$", "a\rc");
    RX_NO("^a.c$", "a\xe2\x80\xa8"
                   "c");
    RX_NO("^a.c$", "ac");
    RX_YES("^[a-c]+$", "abcba");
    RX_NO("^[a-c]+$", "abd");
    RX_YES("^[^a-c]$", "d");
    RX_YES("^[^a-c]$", "\n");
    RX_NO("^[^a-c]$", "b");
    RX_YES("^[\\w.-]+$", "a_b.c-9");
    RX_NO("^[\\w.-]+$", "a b");
    RX_YES("^[\\d-z]+$", "1-z");
    RX_NO("^[\\d-z]+$", "y");
    RX_YES("^[a\\-z]$", "-");
    RX_NO("^[a\\-z]$", "b");
    RX_YES("^[-a]$", "-");
    RX_YES("^[a-]$", "-");
    RX_YES("^[\\b]$", "\b");
    RX_YES("^[\\]\\[]+$", "][");
    RX_YES("^[[]$", "[");
    RX_NO("^[]$", "");
    RX_NO("^[]$", "a");
    RX_YES("^[^]$", "\n");
    RX_YES("^[\\u00e0-\\u00ff]$", "\xc3\xa9");
    RX_NO("^[\\u00e0-\\u00ff]$", "\xc4\x80");
    RX_YES("^\\d\\w\\s$", "7_ ");
    RX_NO("^\\d$", "\xd9\xa3"); /* ASCII digits only */
    RX_NO("^\\w$", "\xc3\xa9");
    RX_YES("^\\s$", "\t");
    RX_YES("^\\s$", "\xc2\xa0");
    RX_YES("^\\s$", "\xef\xbb\xbf");
    RX_YES("^\\s$", "\xe3\x80\x80");
    RX_NO("^\\s$", "a");
    RX_YES("^\\D\\W\\S$", "a-x");
    RX_NO("^\\D$", "5");
    RX_NO("^\\W$", "_");
    RX_NO("^\\S$", " ");
    RX_YES("^[\\s\\d]+$", " 1\t2");
    RX_NO("^[^\\d]$", "3");
    /* groups, alternation, quantifiers */
    RX_YES("^(ab|cd)+$", "abcdab");
    RX_NO("^(ab|cd)+$", "abc");
    RX_NO("^(ab|cd)+$", "");
    RX_YES("^(?:ab|cd){2}$", "cdab");
    RX_NO("^(?:ab|cd){2}$", "ab");
    RX_YES("^(?<year>\\d{4})-(?<m>\\d\\d)$", "2024-05");
    RX_YES("^a?b*c+$", "c");
    RX_YES("^a?b*c+$", "abbbcc");
    RX_NO("^a?b*c+$", "aab");
    RX_YES("^a{3}$", "aaa");
    RX_NO("^a{3}$", "aa");
    RX_NO("^a{3}$", "aaaa");
    RX_YES("^a{2,}$", "aaaaaaa");
    RX_NO("^a{2,}$", "a");
    RX_YES("^a{2,4}$", "aaaa");
    RX_NO("^a{2,4}$", "aaaaa");
    RX_YES("^a{0}b$", "b");
    RX_YES("^a*?b+?c??d{1,2}?$", "aabd");
    RX_YES("^(a|)+$", "");
    RX_YES("^(?:)*x$", "x");
    RX_YES("^((a)(b(c)))$", "abc");
    /* anchoring: JSON Schema patterns are unanchored */
    RX_YES("abc", "xxabcxx");
    RX_NO("abc", "xxabxcx");
    RX_YES("^abc", "abcxx");
    RX_NO("^abc", "xabc");
    RX_YES("abc$", "xxabc");
    RX_NO("abc$", "abcx");
    RX_YES("", "anything");
    RX_YES("", "");
    RX_YES("^$", "");
    RX_NO("^$", "a");
    RX_YES("^a$|^b$", "b");
    RX_NO("^a$|^b$", "ab");
    RX_YES("^a|b$", "axx");
    RX_YES("^a|b$", "xxb");
    RX_NO("^a|b$", "xbx");
    RX_YES("a.c", "\nabc\n"); /* the implicit prefix and suffix take newlines too */
    RX_YES("\\d{3}", "ab123cd");
    RX_NO("\\d{3}", "ab12c3d");
    RX_YES("^.*$", "");
    RX_NO("^.*$", "a\nb");
    /* refused constructs */
    rx_refused("(?=a)b", "look-ahead");
    rx_refused("(?!a)b", "look-ahead");
    rx_refused("(?<=a)b", "look-behind (?<=");
    rx_refused("(?<!a)b", "look-behind (?<!");
    rx_refused("(a)\\1", "back-reference \\1");
    rx_refused("(?<n>a)\\k<n>", "back-reference \\k");
    rx_refused("\\bword\\b", "word boundary \\b");
    rx_refused("a\\B", "word boundary \\B");
    rx_refused("a^b", "anchor '^'");
    rx_refused("(^a)", "anchor '^'");
    rx_refused("a$b", "anchor '$'");
    rx_refused("(a$)", "anchor '$'");
    rx_refused("(a", "unbalanced parenthesis");
    rx_refused("a)", "unbalanced parenthesis");
    rx_refused("((a)", "unbalanced parenthesis");
    rx_refused("(?i)abc", "inline flags");
    rx_refused("(?i:abc)", "inline flags");
    rx_refused("\\p{L}", "Unicode property");
    rx_refused("[\\P{L}]", "Unicode property");
    rx_refused("\\q", "unknown escape");
    rx_refused("\\01", "octal");
    rx_refused("[z-a]", "out of order");
    rx_refused("a{3,2}", "out of order");
    rx_refused("*a", "nothing to repeat");
    rx_refused("a**", "nothing to repeat");
    rx_refused("a{2}{3}", "nothing to repeat");
    rx_refused("{2}", "nothing to repeat");
    rx_refused("[abc", "not closed");
    rx_refused("abc\\", "lone '\\'");
    rx_refused("\\x4", "\\x");
    rx_refused("\\u12", "\\u");
    rx_refused("a\xff", "UTF-8");
    /* sizes: counted repetitions are bounded */
    rx_refused("a{5000}", "too large");
    rx_refused("(a{100}){100}", "too large");
    rx_refused("x{1000000}", "too large");
    rx_refused("(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((a)))))))))))))))))))))))))))))))))))"
               "))))))))))))))))))))))))))))))",
               "deeper");
    {
        char err[256];
        rx *r = rx_compile("^\\d{1000}$", 10, err, sizeof err);
        CHECKF(r && rx_n_states(r) == 1001, "%s", r ? "states" : err);
        rx_free(r);
        /* a DFA that would be exponential is refused, not built */
        r = rx_compile("a.{20}b", 7, err, sizeof err);
        rx_dfa *d = r ? rx_determinize(r, err, sizeof err) : NULL;
        CHECKF(r && !d && strstr(err, "too complex"), "%s", err);
        rx_free(r);
    }
    /* the state-set API and remaining lengths */
    {
        char err[256];
        rx *r = rx_compile("^ab{2,4}$", 9, err, sizeof err);
        rx_set a, b;
        rx_start(r, &a);
        CHECK(rx_min_left(r, &a) == 3 && rx_max_left(r, &a) == 5 && !rx_accepts(r, &a));
        CHECK(rx_step(r, &a, 'a', &b) && rx_min_left(r, &b) == 2 && rx_max_left(r, &b) == 4);
        CHECK(!rx_step(r, &b, 'a', &a));
        CHECK(rx_step(r, &b, 'b', &a) && rx_step(r, &a, 'b', &b) && rx_accepts(r, &b) && rx_min_left(r, &b) == 0 &&
              rx_max_left(r, &b) == 2);
        rx_free(r);
        r = rx_compile("^a+b", 4, err, sizeof err);
        rx_start(r, &a);
        CHECK(rx_min_left(r, &a) == 2 && rx_max_left(r, &a) == RX_INF);
        rx_free(r);
        r = rx_compile("^[]", 3, err, sizeof err);
        CHECK(r && rx_empty(r));
        rx_dfa *d = rx_determinize(r, err, sizeof err);
        CHECK(d && d->n_states == 0 && !rx_dfa_match(d, "", 0));
        rx_dfa_free(d);
        rx_free(r);
        /* a state accepting everything collapses the sets (unanchored end) */
        r = rx_compile("ab", 2, err, sizeof err);
        d = rx_determinize(r, err, sizeof err);
        uint32_t st = d->start;
        for (const char *p = "xxab"; *p; p++) st = rx_dfa_next(d, st, (uint8_t)*p);
        CHECK(st != RX_DEAD && (d->flags[st] & RX_UNIVERSAL) && rx_dfa_next(d, st, 0x1F600) == st);
        CHECK(d->n_states <= 4);
        rx_dfa_free(d);
        rx_free(r);
    }
    /* intersections */
    {
        char err[256];
        rx *a = rx_compile("^[a-z0-9]+$", 11, err, sizeof err), *b = rx_compile("[0-9]", 5, err, sizeof err);
        rx *c = rx_intersect(a, b, err, sizeof err);
        CHECK(c && rx_match(c, "ab1", 3) && rx_match(c, "7", 1) && !rx_match(c, "abc", 3) && !rx_match(c, "A1", 2));
        rx_free(c);
        rx_free(b);
        b = rx_compile("^[A-Z]+$", 8, err, sizeof err);
        c = rx_intersect(a, b, err, sizeof err);
        CHECK(c && rx_empty(c));
        rx_free(a);
        rx_free(b);
        rx_free(c);
    }
    /* formats */
    struct {
        const char *format, *yes[8], *no[16];
    } F[] = {
        {"date",
         {"2024-01-31", "1999-12-01", "0000-10-10", "2024-02-29", "2000-02-29", "1996-02-29", "2023-04-30", NULL},
         {"2024-1-31", "2024-13-01", "2024-00-10", "2024-01-32", "2024-01-00", "24-01-01", "2024-01-011",
          "x2024-01-01", "2024/01/01", "", "2023-02-29", "1900-02-29", "2024-02-30", "2024-04-31", "2024-11-31",
          NULL}},
        {"time",
         {"23:59:59Z", "00:00:00+05:30", "12:34:56.789-08:00", NULL},
         {"24:00:00Z", "12:60:00Z", "12:00:61Z", "12:00:00", "12:00Z", "12:00:00+5:30", "12:00:00.Z", "12:00:00z",
          "12:00:00+24:00", "23:59:60Z", NULL}},
        {"date-time",
         {"2024-02-29T23:59:59Z", "1970-01-01T00:00:00.000001+00:00", NULL},
         {"2024-02-29 23:59:59Z", "2024-02-29t23:59:59Z", "2024-02-29T23:59:59", "2024-02-29", "T23:59:59Z", NULL}},
        {"uuid",
         {"123e4567-e89b-12d3-a456-426614174000", "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", NULL},
         {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400",
          "g23e4567-e89b-12d3-a456-426614174000", "{123e4567-e89b-12d3-a456-426614174000}", NULL}},
        {"ipv4",
         {"0.0.0.0", "255.255.255.255", "192.168.1.10", "10.0.99.249", NULL},
         {"256.1.1.1", "1.1.1", "1.1.1.1.1", "01.1.1.1", "1.1.1.00", "1.1.1.-1", "1..1.1", " 1.1.1.1", "300.1.1.1",
          NULL}},
        {"email",
         {"a@b.co", "first.last+tag@sub.example.org", "x_y%z-w@a-b.c-d.info", "A1@B2.CD", NULL},
         {"a@b", "a@b.c", "@b.co", "a@.co", "a.@b.co", ".a@b.co", "a..b@c.co", "a@-b.co", "a@b-.co", "a@b..co",
          "a b@c.co", NULL}},
    };
    for (size_t i = 0; i < sizeof F / sizeof *F; i++) {
        const char *re = rx_format_pattern(F[i].format);
        CHECKF(re != NULL, "format %s", F[i].format);
        if (!re) continue;
        for (int k = 0; F[i].yes[k]; k++) RX_YES(re, F[i].yes[k]);
        for (int k = 0; F[i].no[k]; k++) RX_NO(re, F[i].no[k]);
    }
    CHECK(rx_format_pattern("uri") == NULL && rx_format_pattern("hostname") == NULL);
}

/* ---- patterns and formats in the matcher ------------------------------------------------ */
/* {"type": "string", "pattern": re, "format": fmt, "minLength": mn, "maxLength": mx}
 * (re, fmt NULL and mn, mx < 0: absent). The caller frees. */
static char *str_schema(const char *re, const char *fmt, int mn, int mx) {
    json_t *o = json_pack("{s:s}", "type", "string");
    if (re) json_object_set_new(o, "pattern", json_string(re));
    if (fmt) json_object_set_new(o, "format", json_string(fmt));
    if (mn >= 0) json_object_set_new(o, "minLength", json_integer(mn));
    if (mx >= 0) json_object_set_new(o, "maxLength", json_integer(mx));
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return t;
}

static int prun(const char *re, const char *fmt, int mn, int mx, const char *text) {
    char *sc = str_schema(re, fmt, mn, mx);
    const int r = RUN1(sc, text);
    free(sc);
    return r;
}
#define PAT_OK(re, text)         CHECKF(prun(re, NULL, -1, -1, text) == 1, "/%s/ accept %s", re, text)
#define PAT_NO(re, text)         CHECKF(prun(re, NULL, -1, -1, text) == -1, "/%s/ reject %s", re, text)
#define PAT_PART(re, text)       CHECKF(prun(re, NULL, -1, -1, text) == 0, "/%s/ partial %s", re, text)
#define LEN_OK(re, mn, mx, text) CHECKF(prun(re, NULL, mn, mx, text) == 1, "/%s/ %d..%d accept %s", re, mn, mx, text)
#define LEN_NO(re, mn, mx, text) CHECKF(prun(re, NULL, mn, mx, text) == -1, "/%s/ %d..%d reject %s", re, mn, mx, text)
#define FMT_OK(fmt, text)        CHECKF(prun(NULL, fmt, -1, -1, text) == 1, "%s accept %s", fmt, text)
#define FMT_NO(fmt, text)        CHECKF(prun(NULL, fmt, -1, -1, text) == -1, "%s reject %s", fmt, text)

/* Feeds the characters of s (raw UTF-8) one byte at a time; after each
 * whole character, the closing quote must be taken exactly when the text
 * so far is in the language (the NFA says) and its length is in range. */
static void close_check(const char *re, int mn, int mx, const char *s) {
    char *sc = str_schema(re, NULL, mn, mx);
    jc_schema *js = compile_ok(sc);
    char err[256];
    rx *r = rx_compile(re, strlen(re), err, sizeof err);
    if (!js || !r) {
        CHECKF(false, "close_check /%s/", re);
        free(sc);
        jc_schema_free(js);
        rx_free(r);
        return;
    }
    jc_matcher *m = jc_matcher_new(js, NULL, NULL, false, NULL);
    CHECK(jc_matcher_feed(m, "\"", 1) == 0);
    size_t chars = 0;
    for (size_t i = 0;; i++) {
        if (i == 0 || ((unsigned char)s[i] & 0xC0) != 0x80) { /* a character boundary */
            const bool want = rx_match(r, s, i) && (mn < 0 || chars >= (size_t)mn) && (mx < 0 || chars <= (size_t)mx);
            jc_matcher *c = jc_matcher_clone(m);
            const bool got = jc_matcher_feed(c, "\"", 1) == 0 && jc_matcher_can_end(c);
            CHECKF(got == want, "/%s/ %d..%d: closing after '%.*s': %d, want %d", re, mn, mx, (int)i, s, got, want);
            jc_matcher_free(c);
            chars++;
        }
        if (!s[i]) break;
        if (jc_matcher_feed(m, s + i, 1) != 0) break; /* (what cannot continue to a match is refused) */
    }
    jc_matcher_free(m);
    jc_schema_free(js);
    rx_free(r);
    free(sc);
}

static void test_patterns(void) {
    const char *zip = "^[0-9]{5}(-[0-9]{4})?$";
    PAT_OK(zip, "\"12345\"");
    PAT_OK(zip, "\"12345-6789\"");
    PAT_NO(zip, "\"1234\"");
    PAT_NO(zip, "\"123456\"");
    PAT_NO(zip, "\"12345-678\"");
    PAT_NO(zip, "\"1234a\"");
    PAT_PART(zip, "\"12345-67");
    PAT_NO(zip, "12345");
    /* escapes and raw UTF-8 are the same characters */
    PAT_OK(zip, "\"\\u0031\\u0032345\"");
    PAT_NO(zip, "\"\\u0031\\u00322345\"");
    PAT_NO(zip, "\"\\n");
    PAT_PART(zip, "\"\\u003");
    PAT_NO(zip, "\"\\u004"); /* \u0040-\u004F: no digit */
    PAT_NO(zip, "\"\\u003a");
    PAT_NO(zip, "\"\xc3"); /* no two-byte digit */
    PAT_OK("^a\\nb\\t$", "\"a\\nb\\t\"");
    PAT_OK("^a\\nb\\t$", "\"a\\u000ab\\u0009\"");
    PAT_NO("^a\\nb$", "\"a\\tb\"");
    PAT_OK("^\\u00e9+$", "\"\\u00e9\xc3\xa9\\u00E9\"");
    PAT_NO("^\\u00e9+$", "\"\\u00e8");
    PAT_NO("^\\u00e9+$", "\"\xc4");
    PAT_PART("^\\u00e9+$", "\"\xc3");
    PAT_OK("^\xf0\x9f\x98\x80$", "\"\\ud83d\\ude00\"");
    PAT_OK("^\xf0\x9f\x98\x80$", "\"\xf0\x9f\x98\x80\"");
    PAT_PART("^\xf0\x9f\x98\x80$", "\"\\ud8");
    PAT_NO("^\xf0\x9f\x98\x80$", "\"\\ud9");
    PAT_NO("^\xf0\x9f\x98\x80$", "\"\\ud83e");
    PAT_PART("^\xf0\x9f\x98\x80$", "\"\\ud83d\\ude");
    PAT_NO("^\xf0\x9f\x98\x80$", "\"\\ud83d\\udf");
    PAT_NO("^\xf0\x9f\x98\x80$", "\"\\ud83d\\ude01");
    PAT_NO("^\xf0\x9f\x98\x80$", "\"\xf0\x9f\x98\x81");
    PAT_NO("^\xf0\x9f\x98\x80$", "\"\xf0\x9e");
    PAT_OK("^[^\\\\]*$", "\"ab\"");
    PAT_NO("^[^\\\\]*$", "\"a\\\\");
    PAT_OK("^\"$", "\"\\\"\"");
    PAT_OK("^\"$", "\"\\u0022\"");
    PAT_OK("^/$", "\"\\/\"");
    PAT_OK("^.$", "\"\\u2027\"");
    PAT_NO("^.$", "\"\\u2028");
    PAT_NO("^.$", "\"\\n");
    /* unanchored */
    PAT_OK("ab+c", "\"xx\xc3\xa9 abbbc \\n!\"");
    PAT_NO("ab+c", "\"xx abb c\"");
    PAT_OK("^ab", "\"ab\\n\\u0000\""[0] ? "\"ab\\nz\"" : "");
    /* with minLength / maxLength */
    LEN_OK("^(aa)*$", 3, 5, "\"aaaa\"");
    LEN_NO("^(aa)*$", 3, 5, "\"aa\"");
    LEN_NO("^(aa)*$", 3, 5, "\"aaaaa"); /* no accepted length 5 */
    LEN_NO("^(aa)*$", 3, 5, "\"aaaaaa");
    LEN_OK("^(aa)*$", 5, -1, "\"aaaaaa\"");
    LEN_NO("^(aa)*$", 5, -1, "\"aaaa\"");
    LEN_OK("^(aa)*$", 5, 1000001, "\"aaaaaaaa\""); /* periodic length rows */
    LEN_NO("^(aa)*$", 5, 1000001, "\"aaaa\"");
    LEN_OK("^(aa)*$", 0, 999999, "\"\"");
    LEN_OK(zip, -1, 7, "\"12345\"");
    LEN_NO(zip, -1, 7, "\"12345-");
    LEN_OK(zip, 6, -1, "\"12345-0000\"");
    LEN_NO(zip, 6, -1, "\"12345\"");
    LEN_OK("abc", -1, 4, "\"xabc\"");
    LEN_OK("abc", -1, 4, "\"abcd\"");
    LEN_NO("abc", -1, 4, "\"xx"); /* abc no longer fits */
    LEN_NO("abc", -1, 4, "\"ab\\u00e9");
    LEN_OK("abc", 5, -1, "\"abc\\u00e9\\n\"");
    LEN_NO("abc", 5, -1, "\"abc\"");
    LEN_OK("^\\d+$", 2, 3, "\"\\u0031\\u0032\\u0033\"");
    LEN_NO("^\\d+$", 2, 3, "\"\\u0031\\u0032\\u0033\\");
    LEN_OK("^(ab|cde)+$", 7, 7, "\"abcdeab\"");
    LEN_NO("^(ab|cde)+$", 7, 7, "\"ababab"); /* 6, then nothing of length 1 */
    LEN_OK("^(ab|cde)+$", 7, 7, "\"ababcde\"");
    close_check("^(aa)*$", 3, 9, "aaaaaaaaaaaa");
    close_check(zip, -1, -1, "12345-6789");
    close_check("ab+c", 4, 9, "xabbcbbbc");
    close_check("^(ab|cde)+$", 4, 9, "abcdeabcde");
    close_check("^[\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"
                "a]{1,3}$",
                -1, -1,
                "\xc3\xa9\xf0\x9f\x98\x80\xe2\x82\xac"
                "a");
    close_check("x|^y+$", -1, 5, "yyyyyy");
    /* unsatisfiable: refused as a root, pruned where optional */
    refused("{\"type\":\"string\",\"pattern\":\"[]\"}", "no value", "$");
    refused("{\"type\":\"string\",\"pattern\":\"^a+$\",\"maxLength\":0}", "no value", "$");
    refused("{\"type\":\"string\",\"pattern\":\"^(aa)*$\",\"minLength\":3,\"maxLength\":3}", "no value", "$");
    refused("{\"type\":\"string\",\"pattern\":\"^[0-9]{5}(-[0-9]{4})?$\",\"minLength\":6,\"maxLength\":9}",
            "no value", "$");
    refused("{\"type\":\"string\",\"format\":\"date\",\"maxLength\":9}", "no value", "$");
    refused("{\"type\":\"string\",\"format\":\"ipv4\",\"pattern\":\"^[a-z]\"}", "no value", "$");
    refused("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"\\\\u0000\"}},"
            "\"required\":[\"a\"]}",
            "no value", "$");
    {
        const char *opt =
            "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"[]\"},\"b\":{}}}";
        ACCEPT(opt, "{\"b\": 1}");
        REJECT(opt, "{\"a\"");
    }
    /* refused patterns name keyword, path and construct */
    refused("{\"properties\":{\"zip\":{\"type\":\"string\",\"pattern\":\"(?<!x)\\\\d\"}}}",
            "'pattern' at $.properties.zip: the look-behind (?<! at offset 0 is not supported by the constraint",
            NULL);
    refused("{\"type\":\"string\",\"pattern\":\"\\\\bx\"}", "'pattern' at $: the word boundary", NULL);
    refused("{\"type\":\"string\",\"pattern\":\"a{9999}\"}", "too large", "'pattern' at $");
    refused("{\"type\":\"string\",\"pattern\":\"a.{20}b\"}", "too complex", "'pattern' at $");
    refused("{\"type\":\"string\",\"pattern\":\"(a\"}", "unbalanced", "'pattern' at $");
    refused("{\"type\":\"string\",\"pattern\":5}", "'pattern' at $: it must be a string", NULL);
    refused("{\"type\":\"array\",\"items\":{\"type\":[\"string\",\"null\"],\"pattern\":\"(?=a)\"}}", "look-ahead",
            "'pattern' at $.items");
    /* type inference, enum filtering, formats as annotations */
    ACCEPT("{\"pattern\":\"^a$\"}", "\"a\"");
    REJECT("{\"pattern\":\"^a$\"}", "1");
    ACCEPT("{\"format\":\"date\"}", "\"2024-01-31\"");
    REJECT("{\"format\":\"date\"}", "1");
    ACCEPT("{\"format\":\"uri\"}", "1");
    ACCEPT("{\"type\":\"string\",\"format\":\"uri\"}", "\"not a uri\"");
    ACCEPT("{\"type\":\"integer\",\"format\":\"date\"}", "12");
    ACCEPT("{\"type\":[\"string\",\"null\"],\"format\":\"date\"}", "null");
    REJECT("{\"type\":[\"string\",\"null\"],\"format\":\"date\"}", "\"2024-1-1\"");
    ACCEPT("{\"anyOf\":[{\"type\":\"string\"}],\"format\":\"date\"}", "\"x\""); /* beside a combinator: annotation */
    const char *en = "{\"enum\":[\"ab\",\"a1\",\"cd\"],\"pattern\":\"^[a-z]+$\"}";
    ACCEPT(en, "\"ab\"");
    ACCEPT(en, "\"cd\"");
    REJECT(en, "\"a1\"");
    ACCEPT("{\"enum\":[\"2024-01-01\",\"nope\"],\"format\":\"date\"}", "\"2024-01-01\"");
    REJECT("{\"enum\":[\"2024-01-01\",\"nope\"],\"format\":\"date\"}", "\"nope\"");
    refused("{\"const\":\"ab\",\"pattern\":\"^a$\"}", "no value", "$");
    /* formats in the matcher */
    FMT_OK("date", "\"2024-02-29\"");
    FMT_NO("date", "\"2024-02-30x\"");
    FMT_NO("date", "\"2024-2");
    FMT_OK("time", "\"08:15:00.5+01:00\"");
    FMT_NO("time", "\"08:15\"");
    FMT_OK("date-time", "\"2024-02-29T08:15:00Z\"");
    FMT_OK("date-time", "\"\\u0032024-02-29T08:15:00Z\"");
    FMT_NO("date-time", "\"2024-02-29T08:15:00\"");
    FMT_OK("uuid", "\"123e4567-e89b-12d3-a456-426614174000\"");
    FMT_NO("uuid", "\"123e4567-e89b-12d3-a456-4266141740001");
    FMT_OK("ipv4", "\"192.168.0.1\"");
    FMT_NO("ipv4", "\"192.168.0.256\"");
    FMT_NO("ipv4", "\"192.168.00");
    FMT_OK("email", "\"jane.doe@example.com\"");
    FMT_NO("email", "\"jane..doe@example.com\"");
    FMT_NO("email", "\"jane@example\"");
    /* pattern and format together: the intersection */
    {
        char *sc = str_schema("@example\\.com$", "email", -1, -1);
        ACCEPT(sc, "\"a.b@example.com\"");
        REJECT(sc, "\"a.b@other.com\"");
        REJECT(sc, "\"@example.com\"");
        REJECT(sc, "\"a@b@example.com\"");
        free(sc);
        sc = str_schema("^[a-z]", "email", -1, 6);
        ACCEPT(sc, "\"a@b.co\"");
        REJECT(sc, "\"ab@c.de\"");
        REJECT(sc, "\"1@b.co\"");
        free(sc);
    }
    /* a patterned key's value inside objects and arrays, with ws */
    const char *obj =
        "{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"array\",\"items\":{\"type\":\"string\","
        "\"format\":\"date\"}},\"z\":{\"type\":\"string\",\"pattern\":\"^\\\\d{2}$\"}},\"required\":[\"d\",\"z\"]}";
    ACCEPT(obj, "{\"d\": [\"2024-01-01\", \"1999-12-31\"], \"z\": \"42\"}");
    REJECT(obj, "{\"d\": [\"2024-01-01\", \"1999-12-32\"], \"z\": \"42\"}");
    REJECT(obj, "{\"d\": [], \"z\": \"4\"}");
    ph_err e = {0};
    CHECK(ph_schema_check(obj, strlen(obj), &e) == 0);
}

/* ---- lenient compile (tool schemas) ------------------------------------------------------ */
static int lrun(const jc_schema *s, const char *text) {
    jc_matcher *m = jc_matcher_new(s, NULL, NULL, false, NULL);
    const int r = jc_matcher_feed(m, text, strlen(text)) ? -1 : jc_matcher_can_end(m) ? 1 : 0;
    jc_matcher_free(m);
    return r;
}

static void test_lenient(void) {
    const char *tool =
        "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"pattern\":\"(?<=x)y\",\"maxLength\":4},"
        "\"x\":{\"type\":\"integer\",\"not\":{\"const\":3},\"multipleOf\":2},\"color\":{\"enum\":[\"red\",\"green\"]}"
        ","
        "\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}$\"}},\"required\":[\"id\",\"x\",\"color\",\"code\"],"
        "\"patternProperties\":{\"^a\":{}}}";
    ph_err e = {0};
    char *dropped = (char *)"unset";
    jc_schema *s = jc_schema_compile_lenient(tool, strlen(tool), &dropped, &e);
    CHECKF(s != NULL, "%s", e.msg);
    CHECKF(dropped && strstr(dropped, "'pattern' at $.properties.id (the look-behind (?<=") &&
               strstr(dropped, "'not' at $.properties.x") && strstr(dropped, "'multipleOf' at $.properties.x") &&
               strstr(dropped, "'patternProperties' at $") && !strstr(dropped, "code"),
           "dropped: %s", dropped ? dropped : "(null)");
    if (s) {
        CHECK(lrun(s, "{\"id\": \"abcd\", \"x\": 3, \"color\": \"red\", \"code\": \"FR\"}") == 1);
        CHECK(lrun(s, "{\"id\": \"abcde") == -1);                              /* maxLength stays */
        CHECK(lrun(s, "{\"id\": \"a\", \"x\": 1.5") == -1);                    /* type stays */
        CHECK(lrun(s, "{\"id\": \"a\", \"x\": 1, \"color\": \"blue\"") == -1); /* the sibling's enum stays */
        CHECK(lrun(s, "{\"id\": \"a\", \"x\": 1, \"color\": \"green\", \"code\": \"F1") == -1); /* its pattern too */
    }
    free(dropped);
    jc_schema_free(s);
    /* the strict compile refuses the same schema, naming the first refusal */
    memset(&e, 0, sizeof e);
    s = jc_schema_compile(tool, strlen(tool), &e);
    CHECKF(!s && e.code == PH_ERR_INPUT && strstr(e.msg, "at $"), "%s", e.msg);
    jc_schema_free(s);
    CHECK(ph_schema_check(tool, strlen(tool), &e) == -1);
    /* nothing to drop: NULL */
    dropped = (char *)"unset";
    s = jc_schema_compile_lenient(TOOLS, strlen(TOOLS), &dropped, &e);
    CHECK(s && dropped == NULL);
    jc_schema_free(s);
    /* combinators: siblings and extra entries dropped, the rest kept */
    const char *comb = "{\"anyOf\":[{\"type\":\"string\",\"maxLength\":2},{\"type\":\"null\"}],\"type\":\"string\","
                       "\"allOf\":[{}],\"if\":{},\"then\":{}}";
    s = jc_schema_compile_lenient(comb, strlen(comb), &dropped, &e);
    CHECKF(s && dropped && strstr(dropped, "'type' at $ (beside 'anyOf')") && strstr(dropped, "'allOf' at $") &&
               strstr(dropped, "'if' at $") && strstr(dropped, "'then' at $"),
           "%s", dropped ? dropped : e.msg);
    if (s) {
        CHECK(lrun(s, "null") == 1);
        CHECK(lrun(s, "\"abc") == -1);
    }
    free(dropped);
    jc_schema_free(s);
    const char *all2 = "{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":3}]}";
    s = jc_schema_compile_lenient(all2, strlen(all2), &dropped, &e);
    CHECK(s && dropped && strstr(dropped, "'allOf' at $ (all but its first schema)") && lrun(s, "1") == 1 &&
          lrun(s, "\"a\"") == -1);
    free(dropped);
    jc_schema_free(s);
    /* unsatisfiable after dropping, or not JSON: NULL with the error */
    const char *unsat = "{\"type\":\"string\",\"pattern\":\"[]\",\"not\":{}}";
    dropped = (char *)"unset";
    memset(&e, 0, sizeof e);
    s = jc_schema_compile_lenient(unsat, strlen(unsat), &dropped, &e);
    CHECKF(!s && dropped == NULL && e.code == PH_ERR_INPUT && strstr(e.msg, "no value"), "%s", e.msg);
    s = jc_schema_compile_lenient("{", 1, &dropped, &e);
    CHECK(!s && dropped == NULL && strstr(e.msg, "not valid JSON"));
    s = jc_schema_compile_lenient("{\"minItems\":-1,\"not\":{}}", 24, NULL, &e);
    CHECK(!s && strstr(e.msg, "'minItems'"));
    /* a pattern too large for its maxLength is dropped, the format kept */
    const char *big = "{\"type\":\"string\",\"format\":\"ipv4\",\"pattern\":\"(?!x)\"}";
    s = jc_schema_compile_lenient(big, strlen(big), &dropped, &e);
    CHECK(s && dropped && strstr(dropped, "'pattern' at $ (the look-ahead") && lrun(s, "\"1.2.3.4\"") == 1 &&
          lrun(s, "\"1.2.3.x") == -1);
    free(dropped);
    jc_schema_free(s);
}

/* ---- vocabularies ------------------------------------------------------------------ */
typedef struct synth_vocab {
    char **s;
    size_t *len;
    int n;
} synth_vocab;

static size_t synth_text(void *ud, int32_t id, char *buf, size_t cap) {
    const synth_vocab *v = ud;
    if ((size_t)v->len[id] <= cap) memcpy(buf, v->s[id], v->len[id]);
    return v->len[id];
}

static void synth_add(synth_vocab *v, const char *s, size_t len) {
    v->s[v->n] = malloc(len + 1);
    memcpy(v->s[v->n], s, len);
    v->s[v->n][len] = '\0';
    v->len[v->n++] = len;
}

/* Single bytes, JSON fragments, schema words, whitespace runs, escapes,
 * UTF-8 pieces and random strings over a JSON-heavy alphabet. */
static synth_vocab make_synth(int n_random) {
    static const char *frag[] = {
        "{", "}", "[", "]", ",", ":", "\"", "{\"", "\"}", "\":", "\": \"", "\", \"", "\"},", "\"}}", "\"]", "\"],",
        "},{", "}]", "]}", "[[", "]]", "{}", "[]", "true", "false", "null", "tr", "ue", "fal", "se", "nu", "ll", " ",
        "  ", "\n", "\n\n", "\n  ", "\t", "    ", " \"", " {", " [", ", ", ": ", "\"name", "name", "arguments",
        "\"arguments\": {", "get_weather", "\"get_weather\"", "search", "city", "\"city\": \"", "unit", "celsius",
        "fahrenheit", "query", "limit", "filters", "\"limit\": ", "-", "12", "3.14", ".5", "e+", "E-", "1e5", "-0",
        "\\", "\\n", "\\\"", "\\u", "\\u00e9", "\\ud83d", "\\ude00", "\\uD8", "00", "\xc3\xa9", "\xf0\x9f\x98\x80",
        "\xf0\x9f", "\x98\x80", "\xc3", "\xa9", "\xe2\x82", "\xac", "\xed\xa0\x80", "</tool_call>", "<tool_call>",
        "\n</tool_call>", "</", "tool_call>", ">", "\"value\": ", "children", "label", "flag", "color", "red", "grey",
        "score", "0.5", "level", "tags", "pair", "\"k\"", "opt", "nothing", "any", "value", "\"}\n", "\"\n", "\")",
        "abc", "hello world", "\\\\", "a\"", "b\",", "1,", "2]", "7}", "null,", "true}", "\"\"", "\" \"", "x\\",
        /* xml calls */
        "<function=", "<parameter=", "</parameter>", "\n</parameter>\n", ">\n", ">\n<", "</function>", "\n<", "</"};
    synth_vocab v = {0};
    const int cap = 256 + (int)(sizeof frag / sizeof *frag) + n_random + 8;
    v.s = calloc((size_t)cap, sizeof *v.s);
    v.len = calloc((size_t)cap, sizeof *v.len);
    for (int b = 0; b < 256; b++) {
        const char c = (char)b;
        synth_add(&v, &c, 1);
    }
    for (size_t i = 0; i < sizeof frag / sizeof *frag; i++) synth_add(&v, frag[i], strlen(frag[i]));
    synth_add(&v, "", 0); /* a control token: never allowed */
    static const char alpha[] =
        "{}[]\":, \n\t-.0123456789eE+truefalsn\\/uabcdxyz\xc3\xa9\xf0\x9f\x98\x80\xed\xa0\xe0";
    for (int i = 0; i < n_random; i++) {
        char s[12];
        const int len = 1 + (int)(rnd() % 8);
        for (int k = 0; k < len; k++) s[k] = alpha[rnd() % (sizeof alpha - 1)];
        synth_add(&v, s, (size_t)len);
    }
    return v;
}

static void free_synth(synth_vocab *v) {
    for (int i = 0; i < v->n; i++) free(v->s[i]);
    free(v->s);
    free(v->len);
}

typedef struct real_vocab {
    bpe_vocab *v;
    gguf_file *f;
} real_vocab;

static size_t real_text(void *ud, int32_t id, char *buf, size_t cap) {
    const real_vocab *r = ud;
    if (vocab_token_type(r->v, id) == PH_TOK_CONTROL) return 0;
    const int n = token_bytes(r->v, id, buf, cap);
    return n < 0 ? 0 : (size_t)n;
}

/* ---- mask consistency, random generation ------------------------------------------ */
typedef struct gen {
    char *out;
    size_t n, cap;
    int tokens;
} gen;

static void gen_put(gen *g, const char *s, size_t n) {
    if (g->n + n + 1 > g->cap) {
        g->cap = (g->n + n + 1) * 2;
        g->out = realloc(g->out, g->cap);
    }
    memcpy(g->out + g->n, s, n);
    g->n += n;
    g->out[g->n] = '\0';
}

/* A rough scanner of JSON text, for the closing preference late in a
 * generation: open containers plus an open string. */
typedef struct scan {
    int depth;
    bool in_str, esc;
} scan;

static void scan_bytes(scan *sc, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (sc->in_str) {
            if (sc->esc) sc->esc = false;
            else if (c == '\\') sc->esc = true;
            else if (c == '"') sc->in_str = false;
        } else if (c == '"') {
            sc->in_str = true;
        } else if (c == '{' || c == '[') {
            sc->depth++;
        } else if (c == '}' || c == ']') {
            sc->depth--;
        }
    }
}

static int open_after(const scan *sc, const char *s, size_t n) {
    scan t = *sc;
    scan_bytes(&t, s, n);
    return t.depth + t.in_str;
}

typedef size_t (*text_fn)(void *ud, int32_t id, char *buf, size_t cap);

/* Checks mask == token_ok for every token, and token_ok == feeding a copy
 * (all tokens when full, else a sample). */
static void check_mask(const jc_matcher *m, const jc_vocab *v, text_fn text, void *ud, bool feed_all,
                       const char *what) {
    const int32_t n = jc_vocab_size(v);
    uint64_t *mask = calloc(((size_t)n + 63) / 64 + 1, sizeof *mask);
    const int32_t count = jc_matcher_mask(m, v, mask);
    int32_t bad = 0, bad_feed = 0, counted = 0;
    char buf[1024];
    for (int32_t id = 0; id < n; id++) {
        const bool bit = mask[id >> 6] >> (id & 63) & 1, ok = jc_matcher_token_ok(m, v, id);
        counted += bit;
        if (bit != ok && bad++ < 3) {
            size_t len = text(ud, id, buf, sizeof buf);
            fprintf(stderr, "%s: token %d '%.*s' mask %d token_ok %d\n", what, id, (int)len, buf, bit, ok);
        }
        if (feed_all || rnd() % 16 == 0) {
            const size_t len = text(ud, id, buf, sizeof buf);
            jc_matcher *c = jc_matcher_clone(m);
            const bool fed = len > 0 && len <= sizeof buf && jc_matcher_feed(c, buf, len) == 0;
            if (fed != ok && bad_feed++ < 3)
                fprintf(stderr, "%s: token %d '%.*s' token_ok %d feed %d\n", what, id, (int)len, buf, ok, fed);
            jc_matcher_free(c);
        }
    }
    CHECKF(bad == 0 && bad_feed == 0 && count == counted, "%s: %d mask/token_ok and %d token_ok/feed disagreements",
           what, bad, bad_feed);
    free(mask);
}

/* Generates one output by sampling uniformly among allowed tokens (late
 * on, preferring tokens that close). Returns the text (caller frees). */
static char *generate(const jc_schema *s, const jc_vocab *v, text_fn text, void *ud, const char *prefix,
                      const char *suffix, bool ows, int check_every, const char *what, int *n_tokens) {
    jc_matcher *m = jc_matcher_new(s, prefix, suffix, ows, NULL);
    const int32_t n = jc_vocab_size(v);
    uint64_t *mask = calloc(((size_t)n + 63) / 64 + 1, sizeof *mask);
    int32_t *cand = malloc((size_t)n * sizeof *cand);
    gen g = {0};
    scan sc = {0, false, false};
    gen_put(&g, "", 0);
    char buf[1024];
    bool ok = true;
    for (int step = 0; step < 4000; step++) {
        if (jc_matcher_can_end(m) && (jc_matcher_finished(m) || rnd() % 4 == 0)) break;
        if (check_every && step % check_every == check_every - 1) check_mask(m, v, text, ud, false, what);
        const int32_t count = jc_matcher_mask(m, v, mask);
        if (count == 0) {
            ok = false;
            fprintf(stderr, "%s: no token allowed after '%s'\n", what, g.out);
            break;
        }
        int32_t nc = 0, best = -1000000;
        for (int32_t id = 0; id < n; id++) {
            if (!(mask[id >> 6] >> (id & 63) & 1)) continue;
            if (step < 60) {
                cand[nc++] = id;
                continue;
            }
            const size_t len = text(ud, id, buf, sizeof buf);
            const int score = -open_after(&sc, buf, len < sizeof buf ? len : sizeof buf);
            if (score > best) {
                best = score;
                nc = 0;
            }
            if (score == best) cand[nc++] = id;
        }
        const int32_t id = cand[rnd() % (uint64_t)nc];
        const size_t len = text(ud, id, buf, sizeof buf);
        if (!jc_matcher_token_ok(m, v, id) || jc_matcher_feed(m, buf, len) != 0) {
            ok = false;
            fprintf(stderr, "%s: masked token %d '%.*s' refused after '%s'\n", what, id, (int)len, buf, g.out);
            break;
        }
        gen_put(&g, buf, len);
        scan_bytes(&sc, buf, len);
        g.tokens++;
    }
    if (!jc_matcher_can_end(m)) {
        fprintf(stderr, "%s: did not end: '%s'\n", what, g.out);
        ok = false;
    }
    CHECK(ok);
    *n_tokens = g.tokens;
    jc_matcher_free(m);
    free(mask);
    free(cand);
    if (!ok) {
        free(g.out);
        return NULL;
    }
    return g.out;
}

typedef struct gcase {
    const char *name, *schema, *prefix, *suffix;
    bool ows;
} gcase;

static const gcase CASES[] = {
    {"tools", NULL, "\n", "\n</tool_call>", false},
    {"tools-forced", NULL, "<tool_call>\n", "\n</tool_call>", false},
    {"json_object", NULL, NULL, NULL, true},
    {"tree", NULL, NULL, NULL, true},
    {"mixed", NULL, NULL, NULL, false},
    {"bounded", NULL, NULL, NULL, false},
};

static const char *case_schema(size_t i) {
    const char *s[] = {TOOLS, TOOLS, OBJECT, TREE, MIXED, BOUNDED};
    return s[i];
}

/* Generates seeds outputs per case; each must parse and validate. */
static void run_generation(const jc_vocab *v, text_fn text, void *ud, int seeds, int check_every, const char *vname) {
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        const gcase *gc = &CASES[c];
        const char *schema = case_schema(c);
        jc_schema *s = compile_ok(schema);
        if (!s) continue;
        int total = 0, good = 0;
        char what[64];
        snprintf(what, sizeof what, "%s/%s", vname, gc->name);
        for (int seed = 0; seed < seeds; seed++) {
            int nt = 0;
            char *out = generate(s, v, text, ud, gc->prefix, gc->suffix, gc->ows, check_every, what, &nt);
            if (!out) continue;
            total += nt;
            const size_t pl = gc->prefix ? strlen(gc->prefix) : 0, sl = gc->suffix ? strlen(gc->suffix) : 0;
            const size_t n = strlen(out);
            bool framed = n >= pl + sl && !memcmp(out, gc->prefix ? gc->prefix : "", pl) &&
                          !memcmp(out + n - sl, gc->suffix ? gc->suffix : "", sl);
            CHECKF(framed, "%s: framing of '%s'", what, out);
            if (framed && output_valid(schema, out + pl, n - pl - sl)) good++;
            else CHECKF(false, "%s: invalid output '%s'", what, out);
            if (seed == 0) printf("  %s sample: %s\n", what, out);
            free(out);
        }
        printf("  %s: %d/%d outputs valid, %.1f tokens each\n", what, good, seeds, seeds ? (double)total / seeds : 0);
        jc_schema_free(s);
    }
}

/* Walks random valid prefixes under each schema with the synthetic
 * vocabulary and checks masks at every step, feeding every token. */
static void test_synthetic(bool quick) {
    synth_vocab sv = make_synth(quick ? 1000 : 2500);
    ph_err e = {0};
    jc_vocab *v = jc_vocab_new(sv.n, synth_text, &sv, &e);
    CHECKF(v != NULL, "%s", e.msg);
    if (!v) return;
    /* a fresh matcher over every schema, every token */
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        jc_schema *s = compile_ok(case_schema(c));
        jc_matcher *m = jc_matcher_new(s, CASES[c].prefix, CASES[c].suffix, CASES[c].ows, NULL);
        check_mask(m, v, synth_text, &sv, true, "synthetic/start");
        jc_matcher_free(m);
        jc_schema_free(s);
    }
    run_generation(v, synth_text, &sv, quick ? 3 : 12, quick ? 5 : 2, "synthetic");
    jc_vocab_free(v);
    free_synth(&sv);
}

/* ---- xml calls (the Qwen3.5 family) --------------------------------------------------- */
static const char *XTOOLS =
    "{\"type\":\"object\",\"properties\":{\"get_weather\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
    "\"string\",\"maxLength\":10},\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]},\"days\":{"
    "\"type\":\"integer\",\"minimum\":1,\"maximum\":9},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\","
    "\"maxLength\":3},\"maxItems\":2},\"note\":{\"type\":[\"string\",\"null\"],\"maxLength\":12},\"id\":{\"type\":"
    "\"string\",\"pattern\":\"^[A-Z]{2}-[0-9]{1,3}$\"}},\"required\":[\"city\"]},\"ping\":{\"type\":\"object\"}},"
    "\"additionalProperties\":false}";

/* 1: accepted and complete, 0: accepted so far, -1: refused (fed one byte at a time) */
static int xrun(const char *schema, const char *prefix, const char *suffix, const char *text) {
    jc_schema *s = compile_ok(schema);
    if (!s) return -2;
    jc_matcher *m = jc_matcher_new_xml(s, prefix, suffix, NULL);
    int r = 0;
    for (size_t i = 0; text[i] && r == 0; i++) r = jc_matcher_feed(m, text + i, 1);
    const int out = r ? -1 : jc_matcher_can_end(m) ? 1 : 0;
    jc_matcher_free(m);
    jc_schema_free(s);
    return out;
}
#define X_OK(text)   CHECKF(xrun(XTOOLS, NULL, NULL, text) == 1, "xml accept %s", text)
#define X_PART(text) CHECKF(xrun(XTOOLS, NULL, NULL, text) == 0, "xml partial %s", text)
#define X_NO(text)   CHECKF(xrun(XTOOLS, NULL, NULL, text) == -1, "xml reject %s", text)
#define XP(k, v)     "<parameter=" k ">\n" v "\n</parameter>\n"

/* An xml call read back independently: the arguments as a JSON object
 * (string parameters raw, the others JSON), or NULL. */
static json_t *xml_args(json_t *tools, const char *text, const char **name) {
    const char *p = text;
    if (strncmp(p, "<function=", 10)) return NULL;
    p += 10;
    const char *e = strstr(p, ">\n");
    if (!e) return NULL;
    static char nm[64];
    snprintf(nm, sizeof nm, "%.*s", (int)(e - p), p);
    *name = nm;
    json_t *props = json_object_get(json_object_get(json_object_get(tools, "properties"), nm), "properties");
    json_t *args = json_object();
    for (p = e + 2; !strncmp(p, "<parameter=", 11);) {
        p += 11;
        const char *k = strstr(p, ">\n"), *v = k ? strstr(k + 2, "\n</parameter>\n") : NULL;
        if (!v) break;
        char key[300];
        snprintf(key, sizeof key, "%.*s", (int)(k - p), p);
        const json_t *ps = json_object_get(props, key);
        json_t *type = json_object_get(ps, "type");
        const bool raw = json_is_string(type)
                             ? !strcmp(json_string_value(type), "string")
                             : json_is_array(type) && !strcmp(json_string_value(json_array_get(type, 0)), "string");
        json_t *val = raw ? json_stringn(k + 2, (size_t)(v - k - 2))
                          : json_loadb(k + 2, (size_t)(v - k - 2), JSON_DECODE_ANY, NULL);
        if (!val) break;
        json_object_set_new(args, key, val);
        p = v + 14;
    }
    if (strcmp(p, "</function>")) {
        json_decref(args);
        return NULL;
    }
    return args;
}

static void test_xml(bool quick) {
    X_OK("<function=get_weather>\n" XP("city", "Paris") "</function>");
    X_OK("<function=get_weather>\n" XP("city", "") "</function>");
    X_OK("<function=get_weather>\n" XP("city", "Pa\"r\\is") XP("unit", "celsius") XP("days", "3")
             XP("tags", "[\"a\", \"bc\"]") XP("note", "multi\nline") XP("id", "AB-12") "</function>");
    X_OK("<function=get_weather>\n" XP("city", "a\n") XP("note", "</param") "</function>");
    X_OK("<function=ping>\n</function>");
    X_OK("<function=ping>\n" XP("anything", "{\"a\": [1, null]}") "</function>");
    X_NO("<function=get_wether>");
    X_NO("<function=get_weather>\n</function>");                    /* city is required */
    X_NO("<function=get_weather>\n" XP("unit", "celsius"));         /* required ones first */
    X_NO("<function=get_weather>\n" XP("city", "Amsterdam-Noord")); /* maxLength 10 */
    X_NO("<function=get_weather>\n" XP("city", "x") XP("unit", "kelvin"));
    X_NO("<function=get_weather>\n" XP("city", "x") XP("days", "0"));
    X_NO("<function=get_weather>\n" XP("city", "x") XP("days", "\"3\""));
    X_NO("<function=get_weather>\n" XP("city", "x") XP("id", "A-1"));
    X_NO("<function=get_weather>\n" XP("city", "x") XP("other", "1")); /* additionalProperties: none declared */
    X_NO("<function=get_weather>\n<parameter=city>\na</parameter>");   /* the tag inside a raw value */
    X_NO("<function=get_weather>\n" XP("city", "x") "</function> ");
    X_NO("<function=ping>\n" XP("x", "not json") "</function>");
    X_PART("<function=get_weather>\n<parameter=city>\nPar");
    X_PART("<function=get_weather>\n" XP("city", "x") "<parameter=unit>\ncel");
    X_NO("<function=get_weather>\n" XP("city", "x") XP("unit", "cel"));
    /* as the engine frames a call: after <tool_call>, then the next one or the end */
    CHECK(xrun(XTOOLS, "\n", "\n</tool_call>", "\n<function=ping>\n</function>\n</tool_call>") == 1);
    CHECK(xrun(XTOOLS, "\n<tool_call>\n", "\n</tool_call>",
               "\n<tool_call>\n<function=ping>\n</function>\n</tool_call>") == 1);
    CHECK(xrun(XTOOLS, "\n<tool_call>\n", "\n</tool_call>", "\nSome text") == -1);
    CHECK(xrun(XTOOLS, "\n", "\n</tool_call>", "\n{\"name\": \"ping\"") == -1); /* not the JSON syntax */
    {
        ph_err e = {0};
        jc_schema *s = compile_ok("{\"type\":\"string\"}");
        CHECK(jc_matcher_new_xml(s, NULL, NULL, &e) == NULL && strstr(e.msg, "object"));
        jc_schema_free(s);
    }
    /* masks agree with token checks and feeding; sampled calls read back valid */
    synth_vocab sv = make_synth(quick ? 500 : 1500);
    ph_err e = {0};
    jc_vocab *v = jc_vocab_new(sv.n, synth_text, &sv, &e);
    jc_schema *s = compile_ok(XTOOLS);
    json_t *tools = json_loads(XTOOLS, 0, NULL);
    const int32_t n = jc_vocab_size(v);
    uint64_t *mask = calloc(((size_t)n + 63) / 64 + 1, sizeof *mask);
    int valid_calls = 0;
    const int seeds = quick ? 3 : 25;
    for (int seed = 0; seed < seeds; seed++) {
        jc_matcher *m = jc_matcher_new_xml(s, NULL, NULL, NULL);
        strbuf out = {0};
        char buf[1024];
        for (int step = 0; step < 400 && !jc_matcher_finished(m); step++) {
            if (step % (quick ? 7 : 3) == 0) check_mask(m, v, synth_text, &sv, false, "xml");
            const int32_t count = jc_matcher_mask(m, v, mask);
            CHECKF(count > 0, "xml: no token allowed after '%s'", out.p);
            if (!count) break;
            int32_t pick = (int32_t)(rnd() % (uint64_t)count), id = 0;
            for (;; id++)
                if ((mask[id >> 6] >> (id & 63) & 1) && pick-- == 0) break;
            const size_t len = synth_text(&sv, id, buf, sizeof buf);
            CHECK(jc_matcher_feed(m, buf, len) == 0);
            strbuf_put(&out, buf, len);
        }
        if (jc_matcher_finished(m)) {
            const char *name = NULL;
            json_t *args = xml_args(tools, out.p, &name);
            json_t *sc = name ? json_object_get(json_object_get(tools, "properties"), name) : NULL;
            CHECKF(args && sc && valid(sc, sc, args), "xml: sampled call %s reads back valid", out.p);
            valid_calls += args != NULL;
            json_decref(args);
        }
        free(out.p);
        jc_matcher_free(m);
    }
    CHECKF(valid_calls >= seeds / 2, "xml: %d of %d sampled calls complete", valid_calls, seeds);
    free(mask);
    json_decref(tools);
    jc_schema_free(s);
    jc_vocab_free(v);
    free_synth(&sv);
}

/* ---- the real vocabulary: consistency, generation, timings ------------------------------ */
static double time_mask(const jc_matcher *m, const jc_vocab *v, int reps, int32_t *count) {
    uint64_t *mask = calloc(((size_t)jc_vocab_size(v) + 63) / 64 + 1, sizeof *mask);
    jc_matcher_mask(m, v, mask); /* warm */
    const double t0 = now_s();
    for (int i = 0; i < reps; i++) *count = jc_matcher_mask(m, v, mask);
    const double dt = (now_s() - t0) / reps;
    free(mask);
    return dt;
}

typedef struct tstate {
    const char *name, *schema, *prefix, *suffix, *fed;
    bool ows;
} tstate;

static void test_real(bool quick) {
    ph_err e = {0};
    real_vocab rv = {0};
    rv.f = gguf_open(VOCAB_GGUF, &e);
    rv.v = rv.f ? vocab_load(rv.f, &e) : NULL;
    CHECKF(rv.v != NULL, "%s: %s", VOCAB_GGUF, e.msg);
    if (!rv.v) {
        gguf_close(rv.f);
        return;
    }
    const double t0 = now_s();
    jc_vocab *v = jc_vocab_new(vocab_size(rv.v), real_text, &rv, &e);
    CHECKF(v != NULL, "%s", e.msg);
    printf("real vocabulary: %d tokens, indexed in %.0f ms\n", vocab_size(rv.v), (now_s() - t0) * 1e3);
    if (!v) goto done;
    {
        /* <tool_call> keeps its text; <|im_end|> has none */
        const int32_t tc = vocab_find(rv.v, "<tool_call>", 11), im = vocab_find(rv.v, "<|im_end|>", 10);
        jc_schema *s = compile_ok(TOOLS);
        jc_matcher *m = jc_matcher_new(s, "<tool_call>\n", "\n</tool_call>", false, NULL);
        CHECK(tc >= 0 && jc_matcher_token_ok(m, v, tc));
        CHECK(im >= 0 && !jc_matcher_token_ok(m, v, im));
        jc_matcher_free(m);
        jc_schema_free(s);
    }
    static const tstate states[] = {
        {"start of a tool call (\"\\n\" then '{')", NULL, "\n", "\n</tool_call>", "", false},
        {"expecting a key (required)", NULL, "\n", "\n</tool_call>", "\n{", false},
        {"tool name (enum of consts)", NULL, "\n", "\n</tool_call>", "\n{\"name\": \"", false},
        {"expecting a value (string)", NULL, "\n", "\n</tool_call>",
         "\n{\"name\": \"get_weather\", \"arguments\": {\"city\":", false},
        {"free string interior", NULL, "\n", "\n</tool_call>",
         "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par", false},
        {"after a string value (, or })", NULL, "\n", "\n</tool_call>",
         "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"", false},
        {"expecting an optional key", NULL, "\n", "\n</tool_call>",
         "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", ", false},
        {"enum value", NULL, "\n", "\n</tool_call>",
         "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c", false},
        {"inside an integer", NULL, "\n", "\n</tool_call>",
         "\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\", \"limit\": 1", false},
        {"after the value (suffix)", NULL, "\n", "\n</tool_call>",
         "\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}", false},
        {"json_object: free key", "O", NULL, NULL, "{\"ab", true},
        {"json_object: any value", "O", NULL, NULL, "{\"ab\": ", true},
        {"json_object: string with pending UTF-8", "O", NULL, NULL, "{\"ab\": \"x\xe4", true},
        {"json_object: after an escape", "O", NULL, NULL, "{\"ab\": \"x\\", true},
        {"string with maxLength 8 (3 used)", "T", NULL, NULL, "{\"value\": 1, \"label\": \"abc", true},
        {"string with minLength 1 (0 used)", "M", NULL, NULL,
         "{\"flag\": true, \"nothing\": null, \"color\": \"red\", \"score\": 0.5, \"level\": 3, \"tags\": [\"",
         false},
        {"number with bounds (0..1)", "M", NULL, NULL,
         "{\"flag\": true, \"nothing\": null, \"color\": \"red\", \"score\": 0.", false},
        {"128 tools: after '{'", "128", "\n", "\n</tool_call>", "\n{", false},
        {"128 tools: the name", "128", "\n", "\n</tool_call>", "\n{\"name\": \"tool_1", false},
        {"extra key with declared ones (additionalProperties)", "M", NULL, NULL,
         "{\"flag\": true, \"nothing\": null, \"color\": \"red\", \"score\": 0.5, \"level\": 3, \"tags\": [\"a\"], "
         "\"pair\": [\"x\", {\"k\": [1, 2]}], \"sc",
         false},
    };
    printf("jc_matcher_mask times (real vocabulary, %d tokens):\n", jc_vocab_size(v));
    for (size_t i = 0; i < sizeof states / sizeof *states; i++) {
        const tstate *st = &states[i];
        char *many = st->schema && *st->schema == '1' ? many_tools(128) : NULL;
        const char *schema = many                 ? many
                             : !st->schema        ? TOOLS
                             : *st->schema == 'O' ? OBJECT
                             : *st->schema == 'T' ? TREE
                                                  : MIXED;
        jc_schema *s = compile_ok(schema);
        free(many);
        jc_matcher *m = jc_matcher_new(s, st->prefix, st->suffix, st->ows, NULL);
        CHECKF(jc_matcher_feed(m, st->fed, strlen(st->fed)) == 0, "feed %s", st->fed);
        int32_t count = 0;
        const double dt = time_mask(m, v, quick ? 1 : 40, &count);
        printf("  %-52s %8.1f us  (%d allowed)\n", st->name, dt * 1e6, count);
        if (!quick || i % 4 == 0) check_mask(m, v, real_text, &rv, false, st->name);
        jc_matcher_free(m);
        jc_schema_free(s);
    }
    {
        /* token_ok over the whole vocabulary, in a string and after a value */
        jc_schema *s = compile_ok(TOOLS);
        jc_matcher *m = jc_matcher_new(s, "\n", "\n</tool_call>", false, NULL);
        const char *fed[2] = {"\n{\"name\": \"search\", \"arguments\": {\"query\": \"ab", "\"}"};
        for (int k = 0; k < 2; k++) {
            CHECK(jc_matcher_feed(m, fed[k], strlen(fed[k])) == 0);
            int32_t n_ok = 0;
            const double t1 = now_s();
            for (int32_t id = 0; id < jc_vocab_size(v); id++) n_ok += jc_matcher_token_ok(m, v, id);
            printf("  jc_matcher_token_ok %-33s %8.3f us  (%d allowed)\n", k ? "after a string value" : "in a string",
                   (now_s() - t1) * 1e6 / jc_vocab_size(v), n_ok);
        }
        jc_matcher_free(m);
        jc_schema_free(s);
    }
    run_generation(v, real_text, &rv, quick ? 2 : 25, 0, "real");
done:
    jc_vocab_free(v);
    vocab_free(rv.v);
    gguf_close(rv.f);
}

int main(void) {
    const bool quick = under_valgrind();
    test_keywords();
    test_refusals();
    test_state();
    test_regex();
    test_patterns();
    test_lenient();
    test_synthetic(quick);
    test_xml(quick);
    test_real(quick);
    TEST_END();
}
