/* Tools: the templates' tojson, family detection on the real templates,
 * byte-exact renderings of ../shared/spec/templates/tool-renderings.txt and
 * of the other literals in ../shared/spec/tools.md (1.2, 1.3, 1.5), the
 * same renderings as tokens, and the answer parser on the spec's vectors
 * (section 5) fed whole, a byte at a time and in random pieces. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llm.h"
#include "chat_format_of.h"
#include "test.h"
#include "text/chat_format.h"
#include "text/output_parser.h"
#include "text/tool_json.h"

#define LLM  PH_ORACLE_DIR "/models/tiny-f16.gguf"
#define SPEC PH_ORACLE_DIR "/../spec/templates/"

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    if (p) p[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return p;
}

/* ---- tojson ------------------------------------------------------------------ */

static void check_float(double v, const char *want) {
    strbuf t = {0};
    tojson_float(&t, v);
    CHECKF(t.n && !strcmp(t.p, want), "%.17g -> '%s', want '%s'", v, t.p ? t.p : "", want);
    strbuf_free(&t);
}

static void check_tojson(const char *in, const char *want) {
    strbuf t = {0};
    int rc = tojson_text(&t, in, strlen(in));
    CHECKF(rc == 0 && t.n && !strcmp(t.p, want), "tojson(%s) -> '%s', want '%s'", in, t.p ? t.p : "", want);
    strbuf_free(&t);
}

static void test_tojson(void) {
    check_float(0.1, "0.1");
    check_float(1.0, "1.0");
    check_float(-2.5, "-2.5");
    check_float(100.0, "100.0");
    check_float(1e-07, "1e-07");
    check_float(1e-05, "1e-05");
    check_float(0.0001, "0.0001");
    check_float(1e15, "1000000000000000.0");
    check_float(1e16, "1e+16");
    check_float(1.5e300, "1.5e+300");
    check_float(123.456, "123.456");
    check_float(0.30000000000000004, "0.30000000000000004");
    check_float(-0.0, "-0.0");
    check_float(5e-324, "5e-324");
    check_float(1.7976931348623157e308, "1.7976931348623157e+308");
    check_tojson("{\"b\":1,\"a\":[1.0,2.50,-0,1E2,true,false,null]}",
                 "{\"b\": 1, \"a\": [1.0, 2.5, 0, 100.0, true, false, null]}");
    check_tojson("{\"k\":\"caf\\u00e9 \\u65e5\\n\\t\\\"\\\\/\\u001f\\u007f\"}",
                 "{\"k\": \"caf\xc3\xa9 \xe6\x97\xa5\\n\\t\\\"\\\\/\\u001f\x7f\"}");
    check_tojson("{\"z\":1,\"a\":2,\"z\":3}", "{\"z\": 3, \"a\": 2}"); /* as a Python dict */
    check_tojson("  [ ]  ", "[]");
    check_tojson("{}", "{}");
    strbuf t = {0};
    CHECK(tojson_text(&t, "{\"a\":", 5) == -1 && t.n == 0);
    CHECK(tojson_text(&t, "123456789012345678901234", 24) == -1);
    pystr_value(&t, json_true());
    CHECK(!strcmp(t.p, "True"));
    strbuf_free(&t);
    ph_tool tool = {.name = "f"};
    CHECK(
        tool_json_render(&t, &tool, NULL) == 0 &&
        !strcmp(
            t.p,
            "{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"\", \"parameters\": {}}}"));
    strbuf_free(&t);
    ph_err err = {0};
    tool.parameters = "{nope";
    CHECK(tool_json_render(&t, &tool, &err) == -1 && err.code == PH_ERR_INPUT);
    strbuf_free(&t);
}

/* ---- detection ------------------------------------------------------------------ */

static chat_fmt fmt_from(const char *file, const char *arch) {
    char path[512];
    snprintf(path, sizeof path, SPEC "%s", file);
    size_t n = 0;
    char *t = read_all(path, &n);
    CHECKF(t != NULL, "cannot read %s", path);
    chat_fmt f = chat_format_detect(t, n, arch);
    free(t);
    return f;
}

static void test_detect(const ph_model *m) {
    chat_fmt vl = fmt_from("Qwen3-VL-Instruct.jinja", "qwen3vl");
    CHECK(!strcmp(chat_format_family(&vl)->name, "hermes") && vl.family_from_template);
    CHECK(!vl.think && !vl.thinking_switch && !vl.reasoning_history);
    chat_fmt q3 = fmt_from("Qwen3.jinja", "qwen3");
    CHECK(!strcmp(chat_format_family(&q3)->name, "hermes") && q3.family_from_template);
    CHECK(!q3.think && q3.thinking_switch && q3.reasoning_history);
    chat_fmt q35 = fmt_from("Qwen3.5.jinja", "qwen35");
    CHECK(!strcmp(chat_format_family(&q35)->name, "xml") && q35.family_from_template);
    CHECK(q35.think && q35.thinking_switch && q35.reasoning_history);
    /* a template without tool markup: the architecture decides */
    const char *plain = "{% for message in messages %}<|im_start|>{{ message.role }}{% endfor %}";
    chat_fmt a = chat_format_detect(plain, strlen(plain), "qwen35");
    CHECK(!strcmp(chat_format_family(&a)->name, "xml") && !a.family_from_template);
    a = chat_format_detect(plain, strlen(plain), "qwen3");
    CHECK(!strcmp(chat_format_family(&a)->name, "hermes") && !a.family_from_template);
    a = chat_format_detect(NULL, 0, "llama");
    CHECK(!strcmp(chat_format_family(&a)->name, "hermes"));
    /* the test model's template is plain ChatML; it is a qwen3vl */
    chat_fmt t = format_of(m);
    CHECK(!strcmp(chat_format_family(&t)->name, "hermes") && !t.family_from_template && !t.think);
}

/* ---- renderings ------------------------------------------------------------------ */

/* tool-renderings.txt: sections "######## NAME", lines LABEL: "C-escaped". */
typedef struct spec_set {
    char *label[16], *text[16];
    int n;
} spec_set;

static char *unescape(const char *s, size_t n) {
    char *o = malloc(n + 1), *q = o;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n) {
            char c = s[++i];
            *q++ = c == 'n' ? '\n' : c == 't' ? '\t' : c;
        } else {
            *q++ = s[i];
        }
    }
    *q = '\0';
    return o;
}

static spec_set spec_section(const char *all, const char *name) {
    spec_set s = {0};
    char head[64];
    snprintf(head, sizeof head, "######## %s\n", name);
    const char *p = strstr(all, head);
    if (!p) return s;
    p += strlen(head);
    while (*p && strncmp(p, "########", 8) && s.n < 16) {
        const char *eol = strchr(p, '\n');
        if (!eol) eol = p + strlen(p);
        const char *sep = strstr(p, ": \"");
        if (sep && sep < eol && eol[-1] == '"') {
            s.label[s.n] = strndup(p, (size_t)(sep - p));
            s.text[s.n] = unescape(sep + 3, (size_t)(eol - 1 - (sep + 3)));
            s.n++;
        }
        p = *eol ? eol + 1 : eol;
    }
    return s;
}

static const char *spec_get(const spec_set *s, const char *label) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->label[i], label)) return s->text[i];
    CHECKF(0, "no '%s' in tool-renderings.txt", label);
    return "";
}

static void spec_free(spec_set *s) {
    for (int i = 0; i < s->n; i++) {
        free(s->label[i]);
        free(s->text[i]);
    }
}

static const ph_tool weather = {
    .name = "get_weather",
    .description = "Get current weather for a city",
    .parameters = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"description\":\"City name\"},"
                  "\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":[\"city\"]}",
};

#define TXT(s)                                                                                                       \
    { .text = (s), .len = sizeof(s) - 1 }
#define ARGS(s) .arguments = (s), .arguments_len = sizeof(s) - 1

static const ph_chat_part p_sys[] = {TXT("You are a helpful assistant.")};
static const ph_chat_part p_user[] = {TXT("Weather in Paris and Tokyo?")};
static const ph_chat_part p_check[] = {TXT("Let me check.")};
static const ph_chat_part p_t18[] = {TXT("{\"temp\": 18}")};
static const ph_chat_part p_t25[] = {TXT("{\"temp\": 25}")};
static const ph_chat_part p_more[] = {TXT("Thanks. And Rome?")};
/* the client sends compact JSON; the history prints it with tojson */
static const ph_tool_call two_calls[] = {
    {.id = "a", .name = "get_weather", ARGS("{\"city\":\"Paris\"}")},
    {.id = "b", .name = "get_weather", ARGS("{\"city\": \"Tokyo\",\"unit\":\"celsius\"}")}};

#define SYS                                                                                                          \
    { .role = PH_ROLE_SYSTEM, .parts = p_sys, .n_parts = 1 }
#define USER                                                                                                         \
    { .role = PH_ROLE_USER, .parts = p_user, .n_parts = 1 }
#define CALLS(content, nc)                                                                                           \
    { .role = PH_ROLE_ASSISTANT, .parts = content, .n_parts = nc, .tool_calls = two_calls, .n_tool_calls = 2 }
#define TOOL(p)                                                                                                      \
    { .role = PH_ROLE_TOOL, .parts = p, .n_parts = 1 }

static char *cat(const char *const *parts, size_t n) {
    size_t len = 0;
    for (size_t i = 0; i < n; i++) len += strlen(parts[i]);
    char *s = malloc(len + 1);
    s[0] = '\0';
    for (size_t i = 0; i < n; i++) strcat(s, parts[i]);
    return s;
}

/* Renders as text and compares; then as tokens against the tokens of the
 * expected text (pictures: the picture items in their places). */
static void expect_render(const char *what, const chat_fmt *f, const ph_model *m, const ph_chat_msg *msgs, size_t n,
                          size_t n_tools, int thinking, const char *want) {
    const chat_render_opts o = {.thinking = thinking};
    char *text = NULL;
    size_t len = 0;
    ph_err err = {0};
    int rc = chat_format_render_text(f, msgs, n, &weather, n_tools, &o, NULL, &text, &len, &err);
    CHECKF(rc == 0, "%s: %s", what, err.msg);
    bool same = text && len == strlen(want) && !memcmp(text, want, len);
    if (!same && text) {
        size_t i = 0;
        while (i < len && want[i] && text[i] == want[i]) i++;
        fprintf(stderr, "%s: differs at byte %zu\n got: %s\nwant: %s\n", what, i, text + i, want + i);
    }
    CHECKF(same, "%s: rendered text", what);
    free(text);
    if (!m) return;
    ph_prompt p;
    ph_picture **pics = NULL;
    rc = chat_format_render(f, m->vocab, msgs, n, &weather, n_tools, &o, &p, &pics, &err);
    CHECKF(rc == 0, "%s: %s", what, err.msg);
    if (rc) return;
    /* the expected token stream: BOS, then text split at each picture */
    ph_tokens want_t = {0}, got_t = {0};
    if (ph_model_bos(m) >= 0) ph_tokens_push(&want_t, ph_model_bos(m));
    const char *pad = "<|image_pad|>";
    const char *s = want;
    int32_t k = 0;
    for (;;) {
        const char *hit = strstr(s, pad);
        size_t l = hit ? (size_t)(hit - s) : strlen(s);
        ph_tokenize(m, s, l, true, &want_t, NULL);
        if (!hit) break;
        ph_tokens_push(&want_t, -1000 - k++);
        s = hit + strlen(pad);
    }
    for (size_t i = 0; i < p.n; i++) {
        if (p.items[i].is_picture) ph_tokens_push(&got_t, -1000 - p.items[i].picture);
        for (size_t j = 0; j < p.items[i].tokens.n; j++) ph_tokens_push(&got_t, p.items[i].tokens.ids[j]);
    }
    CHECKF(want_t.n == got_t.n && !memcmp(want_t.ids, got_t.ids, want_t.n * sizeof *want_t.ids),
           "%s: tokens (%zu vs %zu)", what, got_t.n, want_t.n);
    CHECKF(p.n_pictures == k, "%s: %d pictures, want %d", what, p.n_pictures, k);
    ph_tokens_free(&want_t);
    ph_tokens_free(&got_t);
    ph_prompt_free(&p);
    free(pics);
}

static void test_spec_renderings(const ph_model *m, const char *section, const chat_fmt *f) {
    char *all = read_all(SPEC "tool-renderings.txt", NULL);
    CHECK(all != NULL);
    if (!all) return;
    spec_set s = spec_section(all, section);
    CHECKF(s.n == 8, "%s: %d renderings", section, s.n);
    char what[128];
    /* system + tools, user, assistant with two calls, two results */
    {
        const ph_chat_msg msgs[] = {SYS, USER, CALLS(NULL, 0), TOOL(p_t18), TOOL(p_t25)};
        const char *parts[] = {spec_get(&s, "SYSTEM+TOOLS"), spec_get(&s, "USER"),
                               spec_get(&s, "ASSISTANT 2 calls (empty content)"), spec_get(&s, "TOOL RESULTS x2"),
                               spec_get(&s, "GEN PROMPT")};
        char *want = cat(parts, 5);
        snprintf(what, sizeof what, "%s: system, calls, 2 results", section);
        expect_render(what, f, m, msgs, 5, 1, -1, want);
        free(want);
    }
    /* no system message, content before the calls, one result */
    {
        const ph_chat_msg msgs[] = {USER, CALLS(p_check, 1), TOOL(p_t18)};
        const char *parts[] = {spec_get(&s, "SYSTEM+TOOLS (no system msg)"), spec_get(&s, "USER"),
                               spec_get(&s, "ASSISTANT 2 calls (content \"Let me check.\")"),
                               spec_get(&s, "TOOL RESULT x1"), spec_get(&s, "GEN PROMPT")};
        char *want = cat(parts, 5);
        snprintf(what, sizeof what, "%s: content and calls, 1 result", section);
        expect_render(what, f, m, msgs, 3, 1, -1, want);
        free(want);
    }
    spec_free(&s);
    free(all);
}

#define GW_PARIS "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
#define GW_TOKYO                                                                                                     \
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Tokyo\", \"unit\": "                       \
    "\"celsius\"}}\n</tool_call>"
#define X_PARIS                                                                                                      \
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
#define X_TOKYO                                                                                                      \
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nTokyo\n</parameter>\n<parameter=unit>\ncelsius\n</"      \
    "parameter>\n</function>\n</tool_call>"
#define U    "<|im_start|>user\nWeather in Paris and Tokyo?<|im_end|>\n"
#define R1   "<|im_start|>user\n<tool_response>\n{\"temp\": 18}\n</tool_response><|im_end|>\n"
#define MORE "<|im_start|>user\nThanks. And Rome?<|im_end|>\n"

/* The literals of tools.md 1.2, 1.3 and 1.5 that the file does not hold. */
static void test_more_renderings(const ph_model *m, const chat_fmt *vl, const chat_fmt *q3, const chat_fmt *q35) {
    static const char reason[] = "I should call the tool twice.";
    ph_chat_msg thought = CALLS(p_check, 1);
    thought.reasoning = reason;
    thought.reasoning_len = sizeof reason - 1;
    { /* Qwen3: reasoning of a turn after the last query goes back */
        const ph_chat_msg msgs[] = {USER, thought, TOOL(p_t18)};
        expect_render(
            "qwen3 reasoning after the query", q3, NULL, msgs, 3, 0, -1,
            U "<|im_start|>assistant\n<think>\nI should call the tool twice.\n</think>\n\nLet me check.\n" GW_PARIS
              "\n" GW_TOKYO "<|im_end|>\n" R1 "<|im_start|>assistant\n");
        /* ... not once a new query follows */
        const ph_chat_msg later[] = {
            USER, thought, TOOL(p_t18), {.role = PH_ROLE_USER, .parts = p_more, .n_parts = 1}};
        expect_render("qwen3 reasoning before the query", q3, NULL, later, 4, 0, 0,
                      U "<|im_start|>assistant\nLet me check.\n" GW_PARIS "\n" GW_TOKYO "<|im_end|>\n" R1 MORE
                        "<|im_start|>assistant\n<think>\n\n</think>\n\n");
        /* Qwen3-VL-Instruct renders no reasoning; thinking cannot be switched */
        expect_render("qwen3vl reasoning", vl, NULL, msgs, 3, 0, 0,
                      U "<|im_start|>assistant\nLet me check.\n" GW_PARIS "\n" GW_TOKYO "<|im_end|>\n" R1
                        "<|im_start|>assistant\n");
    }
    { /* reasoning inside the content (no reasoning field) */
        static const ph_chat_part inline_think[] = {TXT("<think>\nhm\n</think>\n\nLet me check.")};
        const ph_chat_msg msgs[] = {USER, CALLS(inline_think, 1)};
        expect_render("qwen3 reasoning in the content", q3, NULL, msgs, 2, 0, -1,
                      U "<|im_start|>assistant\n<think>\nhm\n</think>\n\nLet me check.\n" GW_PARIS "\n" GW_TOKYO
                        "<|im_end|>\n<|im_start|>assistant\n");
        expect_render("qwen3vl reasoning in the content", vl, NULL, msgs, 2, 0, -1,
                      U "<|im_start|>assistant\nLet me check.\n" GW_PARIS "\n" GW_TOKYO
                        "<|im_end|>\n<|im_start|>assistant\n");
    }
    { /* Qwen3.5 */
        const ph_chat_msg msgs[] = {USER, thought, TOOL(p_t18)};
        expect_render(
            "qwen35 reasoning after the query", q35, NULL, msgs, 3, 0, -1,
            U "<|im_start|>assistant\n<think>\nI should call the tool twice.\n</think>\n\nLet me check.\n\n" X_PARIS
              "\n" X_TOKYO "<|im_end|>\n" R1 "<|im_start|>assistant\n<think>\n");
        const ph_chat_msg later[] = {
            USER, thought, TOOL(p_t18), {.role = PH_ROLE_USER, .parts = p_more, .n_parts = 1}};
        expect_render("qwen35 before the query, thinking off", q35, NULL, later, 4, 0, 0,
                      U "<|im_start|>assistant\nLet me check.\n\n" X_PARIS "\n" X_TOKYO "<|im_end|>\n" R1 MORE
                        "<|im_start|>assistant\n<think>\n\n</think>\n\n");
        /* contents are trimmed; the system text comes after the tools */
        static const ph_chat_part sp_sys[] = {TXT("  Be brief. \n")}, sp_user[] = {TXT("\n Hi \n")},
                                  sp_ws[] = {TXT(" \n ")};
        const ph_chat_msg trimmed[] = {{.role = PH_ROLE_SYSTEM, .parts = sp_sys, .n_parts = 1},
                                       {.role = PH_ROLE_USER, .parts = sp_user, .n_parts = 1}};
        expect_render("qwen35 trimmed", q35, NULL, trimmed, 2, 0, -1,
                      "<|im_start|>system\nBe "
                      "brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
        const ph_chat_msg blank_sys[] = {{.role = PH_ROLE_SYSTEM, .parts = sp_ws, .n_parts = 1},
                                         {.role = PH_ROLE_USER, .parts = sp_user, .n_parts = 1}};
        char *text = NULL;
        size_t len;
        CHECK(chat_format_render_text(q35, blank_sys, 2, &weather, 1, NULL, NULL, &text, &len, NULL) == 0 &&
              strstr(text, "</IMPORTANT><|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"));
        free(text);
        /* argument values: Python str() for scalars, tojson for the rest */
        static const ph_tool_call vals[] = {
            {.name = "f", ARGS("{\"n\":3,\"b\":true,\"x\":null,\"o\":{\"k\":[1,\"a\"]},\"s\":\"multi\\nline\"}")}};
        const ph_chat_msg v[] = {USER, {.role = PH_ROLE_ASSISTANT, .tool_calls = vals, .n_tool_calls = 1}};
        expect_render("qwen35 argument values", q35, NULL, v, 2, 0, -1,
                      U
                      "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=f>\n<parameter=n>\n3\n</"
                      "parameter>\n"
                      "<parameter=b>\nTrue\n</parameter>\n<parameter=x>\nNone\n</parameter>\n<parameter=o>\n{\"k\": "
                      "[1, \"a\"]}\n</parameter>\n<parameter=s>\nmulti\nline\n</parameter>\n</function>\n</tool_call>"
                      "<|im_end|>\n<|im_start|>assistant\n<think>\n");
    }
    { /* pictures inside tool results (1.5), in place, numbered with the user's */
        ph_picture *pic = (ph_picture *)(uintptr_t)0x1000; /* only its address is used */
        const ph_chat_part look[] = {TXT("Look: "), {.picture = pic}},
                           shot[] = {TXT("Screenshot:"), {.picture = pic}};
        const ph_chat_msg msgs[] = {{.role = PH_ROLE_USER, .parts = look, .n_parts = 2},
                                    {.role = PH_ROLE_ASSISTANT, .tool_calls = two_calls, .n_tool_calls = 2},
                                    TOOL(p_t18),
                                    {.role = PH_ROLE_TOOL, .parts = shot, .n_parts = 2}};
        const char *tail =
            "<|im_start|>user\n<tool_response>\n{\"temp\": 18}\n</tool_response>\n<tool_response>\nScreenshot:"
            "<|vision_start|><|image_pad|><|vision_end|>\n</tool_response><|im_end|>\n";
        char want[1024];
        snprintf(want, sizeof want,
                 "<|im_start|>user\nLook: <|vision_start|><|image_pad|><|vision_end|><|im_end|>\n"
                 "<|im_start|>assistant\n" GW_PARIS "\n" GW_TOKYO "<|im_end|>\n%s<|im_start|>assistant\n",
                 tail);
        expect_render("qwen3vl picture in a tool result", vl, m, msgs, 4, 0, -1, want);
        snprintf(want, sizeof want,
                 "<|im_start|>user\nLook: <|vision_start|><|image_pad|><|vision_end|><|im_end|>\n"
                 "<|im_start|>assistant\n<think>\n\n</think>\n\n" X_PARIS "\n" X_TOKYO "<|im_end|>\n%s"
                 "<|im_start|>assistant\n<think>\n",
                 tail);
        expect_render("qwen35 picture in a tool result", q35, m, msgs, 4, 0, -1, want);
        /* the pictures list follows message order */
        ph_prompt p;
        ph_picture **pics = NULL;
        CHECK(chat_format_render(vl, m->vocab, msgs, 4, NULL, 0, NULL, &p, &pics, NULL) == 0 && p.n_pictures == 2 &&
              pics[0] == pic && pics[1] == pic);
        ph_prompt_free(&p);
        free(pics);
        /* still refused in system and assistant turns */
        ph_err err = {0};
        const ph_chat_msg bad[] = {{.role = PH_ROLE_SYSTEM, .parts = shot, .n_parts = 2}, USER};
        CHECK(chat_format_render(vl, m->vocab, bad, 2, &weather, 1, NULL, &p, &pics, &err) == -1 &&
              err.code == PH_ERR_INPUT);
    }
    { /* arguments that are not JSON go back as they are; none is {} */
        static const ph_tool_call odd[] = {{.name = "get_weather", ARGS("{city: Paris}")}, {.name = "get_weather"}};
        const ph_chat_msg msgs[] = {USER, {.role = PH_ROLE_ASSISTANT, .tool_calls = odd, .n_tool_calls = 2}};
        expect_render(
            "hermes odd arguments", vl, NULL, msgs, 2, 0, -1,
            U "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {city: Paris}}\n"
              "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call><|im_end|>\n"
              "<|im_start|>assistant\n");
    }
    { /* a call cut off by max_tokens goes back as the model wrote it (the parser's arguments of
       * '<tool_call>\n{"name": "get_weather", "arguments": {"city":'); a NUL in a string is \u0000 */
        static const ph_tool_call cut[] = {{.name = "get_weather", ARGS("{\"city\":")},
                                           {.name = "get_weather", ARGS("{\"city\":\"a\\u0000b\"}")}};
        const ph_chat_msg msgs[] = {USER, {.role = PH_ROLE_ASSISTANT, .tool_calls = cut, .n_tool_calls = 2}};
        expect_render("hermes cut-off arguments", vl, m, msgs, 2, 0, -1,
                      U "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":}\n"
                        "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                        "\"a\\u0000b\"}}\n</tool_call><|im_end|>\n<|im_start|>assistant\n");
        /* xml: the parameters of an object; text that is not one gives none */
        const ph_chat_msg one[] = {USER, {.role = PH_ROLE_ASSISTANT, .tool_calls = cut, .n_tool_calls = 1}};
        expect_render(
            "xml cut-off arguments", q35, m, one, 2, 0, -1,
            U "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=get_weather>\n</function>\n"
              "</tool_call><|im_end|>\n<|im_start|>assistant\n<think>\n");
    }
}

/* ---- the answer parser ------------------------------------------------------------ */

static const ph_tool ptools[] = {
    {.name = "special_function",
     .parameters = "{\"type\":\"object\",\"properties\":{\"arg1\":{\"type\":\"integer\"}}}"},
    {.name = "get_weather",
     .parameters = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
                   "\"unit\":{\"type\":[\"string\",\"null\"]}}}"},
    {.name = "python", .parameters = "{\"type\":\"object\",\"properties\":{\"code\":{\"type\":\"string\"}}}"},
    {.name = "list_files"},
    {.name = "f",
     .parameters = "{\"type\":\"object\",\"properties\":{\"flag\":{\"type\":\"boolean\"},"
                   "\"o\":{\"type\":\"object\"},\"n\":{\"type\":\"number\"}}}"},
};

typedef struct pcase {
    const char *what;
    bool xml, in_reasoning, no_calls;
    const char *text;
    const char *reasoning, *content;
    int n_calls;
    const char *names[3], *args[3];
} pcase;

typedef struct pout {
    strbuf reasoning, content;
    strbuf args[4];
    const char *names[4];
    bool ended[4];
    int n_calls;
    bool bad; /* a piece out of order */
    bool tool_in_content;
    const char *body_err;
} pout;

static void on_out(void *ud, out_kind k, int32_t call, const char *t, size_t n) {
    pout *o = ud;
    switch (k) {
    case OUT_CONTENT:
        strbuf_put(&o->content, t, n);
        if (memmem(t, n, "<tool_", 6)) o->tool_in_content = true;
        if (call != -1) o->bad = true;
        break;
    case OUT_REASONING: strbuf_put(&o->reasoning, t, n); break;
    case OUT_CALL:
        if (call != o->n_calls || call >= 4 || (call > 0 && !o->ended[call - 1])) {
            o->bad = true;
            break;
        }
        o->names[o->n_calls++] = t; /* the parser passes the tool's own name */
        break;
    case OUT_ARGS:
        if (call != o->n_calls - 1 || o->ended[call]) o->bad = true;
        else strbuf_put(&o->args[call], t, n);
        break;
    case OUT_CALL_END:
        if (call != o->n_calls - 1 || o->ended[call]) o->bad = true;
        else o->ended[call] = true;
        break;
    }
}

static uint64_t rng = 12345;
static size_t rnd(size_t n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (size_t)(rng >> 33) % n;
}

static const char *s_or(const strbuf *t) { return t->n ? t->p : ""; }

/* mode 0: whole; 1: a byte at a time; 2+: random pieces */
static void run_case(const pcase *c, int mode) {
    chat_fmt f = chat_format_detect(NULL, 0, c->xml ? "qwen35" : "qwen3vl");
    out_parser p;
    out_parser_cfg cfg = {.fmt = &f,
                          .in_reasoning = c->in_reasoning,
                          .parse_calls = !c->no_calls,
                          .tools = ptools,
                          .n_tools = sizeof ptools / sizeof *ptools};
    CHECK(out_parser_init(&p, &cfg, NULL) == 0);
    pout o = {0};
    size_t n = strlen(c->text);
    for (size_t i = 0; i < n;) {
        size_t step = mode == 0 ? n : mode == 1 ? 1 : 1 + rnd(8);
        if (step > n - i) step = n - i;
        out_parser_feed(&p, c->text + i, step, on_out, &o);
        i += step;
        /* what the parser says of a call: the text after <tool_call> */
        const char *body;
        size_t bl;
        if (out_parser_in_call(&p, &body, &bl)) {
            const char *open = NULL;
            for (const char *q = c->text; (q = strstr(q, "<tool_call>")) && (size_t)(q - c->text) + 11 <= i; q++)
                open = q;
            if (!open || bl != (size_t)(c->text + i - open) - 11 || memcmp(body, open + 11, bl))
                o.body_err = "call body";
        }
    }
    out_parser_finish(&p, on_out, &o);
    int32_t n_calls = out_parser_n_calls(&p);
    out_parser_free(&p);
    const char *how = mode == 0 ? "whole" : mode == 1 ? "bytes" : "pieces";
    CHECKF(!strcmp(s_or(&o.reasoning), c->reasoning), "%s (%s): reasoning '%s'", c->what, how, s_or(&o.reasoning));
    CHECKF(!strcmp(s_or(&o.content), c->content), "%s (%s): content '%s'", c->what, how, s_or(&o.content));
    CHECKF(o.n_calls == c->n_calls && n_calls == c->n_calls && !o.bad, "%s (%s): %d calls%s", c->what, how, o.n_calls,
           o.bad ? ", out of order" : "");
    CHECKF(!o.body_err, "%s (%s): %s", c->what, how, o.body_err);
    if (c->n_calls && !strstr(c->content, "<tool_"))
        CHECKF(!o.tool_in_content, "%s (%s): <tool_ in content", c->what, how);
    for (int i = 0; i < o.n_calls && i < c->n_calls; i++) {
        CHECKF(!strcmp(o.names[i], c->names[i]), "%s (%s): call %d is %s", c->what, how, i, o.names[i]);
        CHECKF(!strcmp(s_or(&o.args[i]), c->args[i]), "%s (%s): call %d arguments '%s'", c->what, how, i,
               s_or(&o.args[i]));
        CHECKF(o.ended[i], "%s (%s): call %d not ended", c->what, how, i);
    }
    strbuf_free(&o.reasoning);
    strbuf_free(&o.content);
    for (int i = 0; i < 4; i++) strbuf_free(&o.args[i]);
}

#define SF "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}\n</tool_call>"

static const pcase cases[] = {
    /* hermes (tools.md 5.2) */
    {"single", .text = SF, .content = "", .reasoning = "", .n_calls = 1, {"special_function"}, {"{\"arg1\": 1}"}},
    {"parallel",
     .text = SF "\n" GW_TOKYO,
     .content = "",
     .reasoning = "",
     .n_calls = 2,
     {"special_function", "get_weather"},
     {"{\"arg1\": 1}", "{\"city\": \"Tokyo\", \"unit\": \"celsius\"}"}},
    {"content then call",
     .text = "Hello, world!\nWhat's up?" SF,
     .content = "Hello, world!\nWhat's up?",
     .reasoning = "",
     .n_calls = 1,
     {"special_function"},
     {"{\"arg1\": 1}"}},
    {"cut off",
     .text = "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"special_function"},
     {"{\"arg"}},
    /* call markup never reaches content: a call cut before its name came out is dropped, with the
     * separator before it */
    {"cut off before the name", .text = "Hi <tool_call>\n{\"name\": \"special_fu", .content = "Hi ", .reasoning = ""},
    {"cut off after the name's key", .text = "Hi\n<tool_call>\n{\"name\":", .content = "Hi", .reasoning = ""},
    {"cut off after the tag", .text = "\n<tool_call>", .content = "", .reasoning = ""},
    {"cut off before the name, arguments first", .text = "<tool_call>\n{\"arguments\": {\"n\": 2}", .content = "",
     .reasoning = ""},
    {"cut off in the tag", .text = "Hi <tool_ca", .content = "Hi <tool_ca", .reasoning = ""},
    {"cut off at the closing tag",
     .text = "<tool_call>\n{\"name\": \"list_files\", \"arguments\": {}}\n</tool_",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"list_files"},
     {"{}"}},
    {"call inside reasoning stays reasoning", .in_reasoning = true, .text = "maybe " SF " no</think>\n\nDone.",
     .reasoning = "maybe " SF " no", .content = "Done."},
    {"call after reasoning",
     .in_reasoning = true,
     .text = "I will call it.\n</think>\n\n" SF,
     .reasoning = "I will call it.\n",
     .content = "",
     .n_calls = 1,
     {"special_function"},
     {"{\"arg1\": 1}"}},
    {"leading think then call",
     .text = "\n<think>\nhm\n</think>\n\n" SF,
     .reasoning = "\nhm\n",
     .content = "",
     .n_calls = 1,
     {"special_function"},
     {"{\"arg1\": 1}"}},
    {"not json", .text = "<tool_call>\nnot json\n</tool_call>", .content = "<tool_call>\nnot json\n</tool_call>",
     .reasoning = ""},
    {"unknown tool", .text = "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
     .content = "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>", .reasoning = ""},
    {"no name", .text = "<tool_call>\n{\"arguments\": {\"a\": 1}}\n</tool_call>",
     .content = "<tool_call>\n{\"arguments\": {\"a\": 1}}\n</tool_call>", .reasoning = ""},
    {"parameters, raw spacing kept",
     .text = "<tool_call>{\"name\":\"f\",\"parameters\":{ \"n\" :1.50e3,\"o\":[] }}</tool_call>",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"f"},
     {"{ \"n\" :1.50e3,\"o\":[] }"}},
    {"string arguments",
     .text = "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"n\\\": 1}\"}\n</tool_call>",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"f"},
     {"{\"n\": 1}"}},
    {"arguments before the name",
     .text = "<tool_call>\n{\"arguments\": {\"n\": 2}, \"name\": \"f\"}\n</tool_call>",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"f"},
     {"{\"n\": 2}"}},
    {"number arguments",
     .text = "<tool_call>{\"name\": \"f\", \"arguments\": 12}</tool_call>",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"f"},
     {"12"}},
    {"no arguments",
     .text = "<tool_call>\n{\"name\": \"list_files\"}\n</tool_call>",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"list_files"},
     {"{}"}},
    {"text after calls",
     .text = SF "\n\nAnything else?",
     .content = "Anything else?",
     .reasoning = "",
     .n_calls = 1,
     {"special_function"},
     {"{\"arg1\": 1}"}},
    {"broken after the name",
     .text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 1 x}\n</tool_call>",
     .content = "x}\n</tool_call>",
     .reasoning = "",
     .n_calls = 1,
     {"f"},
     {"{\"n\": 1 "}},
    {"junk after the object",
     .text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}} !</tool_call>",
     .content = "!</tool_call>",
     .reasoning = "",
     .n_calls = 1,
     {"f"},
     {"{}"}},
    {"missing closing tag, next call",
     .text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n" SF,
     .content = "",
     .reasoning = "",
     .n_calls = 2,
     {"f", "special_function"},
     {"{}", "{\"arg1\": 1}"}},
    {"a call inside a broken one",
     .text = "<tool_call>\n{\"name\": <tool_call>" SF,
     .content = "<tool_call>\n{\"name\": <tool_call>",
     .reasoning = "",
     .n_calls = 1,
     {"special_function"},
     {"{\"arg1\": 1}"}},
    {"tool_choice none", .no_calls = true, .text = "Hi " SF, .content = "Hi " SF, .reasoning = ""},
    {"brackets in strings",
     .text = "<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"x = {'}': \\\"]\\\"}\"}}\n</tool_call>",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"python"},
     {"{\"code\": \"x = {'}': \\\"]\\\"}\"}"}},
    {"less-than in content", .text = "a < b and <tool> <tool_calls", .content = "a < b and <tool> <tool_calls",
     .reasoning = ""},
    {"plain think", .text = "Plain <think> text", .content = "Plain <think> text", .reasoning = ""},
    /* the template's separator between text and a first call is not content
     * (sent back, the turn renders to the bytes the model wrote); other
     * whitespace is */
    {"separator before a call",
     .text = "Let me check.\n" SF,
     .content = "Let me check.",
     .reasoning = "",
     .n_calls = 1,
     {"special_function"},
     {"{\"arg1\": 1}"}},
    {"more than the separator",
     .text = "Let me check. \n\n" SF,
     .content = "Let me check. \n",
     .reasoning = "",
     .n_calls = 1,
     {"special_function"},
     {"{\"arg1\": 1}"}},
    {"trailing whitespace kept", .text = "Done.\n\n", .content = "Done.\n\n", .reasoning = ""},
    {"separator before a broken call", .text = "Hi\n<tool_call>\nnot json\n</tool_call>",
     .content = "Hi\n<tool_call>\nnot json\n</tool_call>", .reasoning = ""},
    {"xml separator",
     .xml = true,
     .text = "Let me check.\n\n" X_PARIS,
     .content = "Let me check.",
     .reasoning = "",
     .n_calls = 1,
     {"get_weather"},
     {"{\"city\": \"Paris\"}"}},
    /* xml (tools.md 2.3, 5.3) */
    {"xml single",
     .xml = true,
     .text = "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"special_function"},
     {"{\"arg1\": 1}"}},
    {"xml parallel",
     .xml = true,
     .text = X_PARIS "\n" X_TOKYO,
     .content = "",
     .reasoning = "",
     .n_calls = 2,
     {"get_weather", "get_weather"},
     {"{\"city\": \"Paris\"}", "{\"city\": \"Tokyo\", \"unit\": \"celsius\"}"}},
    {"xml multi-line code",
     .xml = true,
     .text = "<tool_call>\n<function=python>\n<parameter=code>\ndef f():\n    return "
             "\"</param\"\n</parameter>\n</function>\n</tool_call>",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"python"},
     {"{\"code\": \"def f():\\n    return \\\"</param\\\"\"}"}},
    {"xml value ending in a newline",
     .xml = true,
     .text = "<tool_call>\n<function=python>\n<parameter=code>\n#include\n\n</parameter>\n</function>\n</tool_call>",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"python"},
     {"{\"code\": \"#include\\n\"}"}},
    {"xml no arguments",
     .xml = true,
     .text = "<tool_call>\n<function=list_files>\n</function>\n</tool_call>",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"list_files"},
     {"{}"}},
    {"xml values",
     .xml = true,
     .text = "<tool_call>\n<function=f>\n<parameter=flag>\nTrue\n</parameter>\n<parameter=o>\n{\"k\":[1,\"a\"]}\n"
             "</parameter>\n<parameter=n>\n2.50\n</parameter>\n<parameter=z>\nhello\n</parameter>\n</function>\n</"
             "tool_call>",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"f"},
     {"{\"flag\": true, \"o\": {\"k\": [1, \"a\"]}, \"n\": 2.5, \"z\": \"hello\"}"}},
    {"xml call without </think>",
     .xml = true,
     .in_reasoning = true,
     .text = "I need the weather.\n" X_PARIS,
     .reasoning = "I need the weather.\n",
     .content = "",
     .n_calls = 1,
     {"get_weather"},
     {"{\"city\": \"Paris\"}"}},
    {"xml content before the call",
     .xml = true,
     .in_reasoning = true,
     .text = "Thinking.\n</think>\n\nLet me inspect the current "
             "directory.\n<tool_call>\n<function=list_files>\n</function>\n</tool_call>",
     .reasoning = "Thinking.\n",
     .content = "Let me inspect the current directory.\n",
     .n_calls = 1,
     {"list_files"},
     {"{}"}},
    {"xml cut off",
     .xml = true,
     .text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"get_weather"},
     {"{\"city\": \"Par\"}"}},
    {"xml cut off at the value's end",
     .xml = true,
     .text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</param",
     .content = "",
     .reasoning = "",
     .n_calls = 1,
     {"get_weather"},
     {"{\"city\": \"Paris\"}"}},
    {"xml cut off in the name", .xml = true, .text = "Checking.\n\n<tool_call>\n<function=get_wea",
     .content = "Checking.", .reasoning = ""},
    {"xml cut off in the name, in reasoning", .xml = true, .in_reasoning = true,
     .text = "Hmm <tool_call>\n<function=get", .content = "", .reasoning = "Hmm "},
    {"xml unknown tool", .xml = true, .text = "<tool_call>\n<function=nope>\n</function>\n</tool_call>",
     .content = "<tool_call>\n<function=nope>\n</function>\n</tool_call>", .reasoning = ""},
    {"xml not a call, in reasoning", .xml = true, .in_reasoning = true, .text = "a <tool_call> b</think>c",
     .reasoning = "a <tool_call> b", .content = "c"},
    {"xml broken after the name",
     .xml = true,
     .text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\noops\n</function>\n</"
             "tool_call>",
     .content = "oops\n</function>\n</tool_call>",
     .reasoning = "",
     .n_calls = 1,
     {"get_weather"},
     {"{\"city\": \"Paris\"}"}},
};

static void test_parser(void) {
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int mode = 0; mode < 8; mode++) run_case(&cases[i], mode);
}

/* Everything the parser said, as one string. */
static void record(void *ud, out_kind k, int32_t call, const char *t, size_t n) {
    strbuf *o = ud;
    char head[32];
    snprintf(head, sizeof head, "|%d:%d:", (int)k, (int)call);
    strbuf_puts(o, head);
    strbuf_put(o, t, n);
}

/* Merges consecutive pieces of the same kind and call. */
static void normalise(const strbuf *in, strbuf *out) {
    const char *p = in->p, *end = in->p + in->n;
    char last[32] = "";
    while (p && p < end) {
        const char *h = p, *c2 = strchr(strchr(p + 1, ':') + 1, ':') + 1;
        const char *next = c2;
        while (next < end && *next != '|') next++;
        char head[32];
        snprintf(head, sizeof head, "%.*s", (int)(c2 - h), h);
        bool merge = !strcmp(head, last) && strncmp(head, "|2:", 3) && strncmp(head, "|4:", 3);
        if (!merge) strbuf_puts(out, head);
        strbuf_put(out, c2, (size_t)(next - c2));
        snprintf(last, sizeof last, "%s", head);
        p = next;
    }
}

/* Random answers built from the markup's pieces: the parser says the same
 * whichever way they are cut. */
static void test_parser_random(void) {
    static const char *const bits[] = {"<tool_call>",
                                       "</tool_call>",
                                       "<tool_",
                                       "\n",
                                       "\n",
                                       " ",
                                       "{",
                                       "}",
                                       "[",
                                       "]",
                                       "\"name\"",
                                       "\"arguments\"",
                                       ": ",
                                       ", ",
                                       "\"special_function\"",
                                       "\"f\"",
                                       "\"x\"",
                                       "1",
                                       "2.5",
                                       "true",
                                       "\"a\\\"b\"",
                                       "<think>",
                                       "</think>",
                                       "hello",
                                       "<",
                                       "<function=",
                                       "get_weather>",
                                       "</function>",
                                       "<parameter=",
                                       "city>",
                                       "Paris",
                                       "</parameter>",
                                       "\n</parameter>\n",
                                       "list_files>",
                                       "\"parameters\"",
                                       "é"};
    const size_t nb = sizeof bits / sizeof *bits;
    int bad = 0;
    for (int iter = 0; iter < 2000 && bad < 5; iter++) {
        strbuf text = {0};
        size_t k = 1 + rnd(40);
        for (size_t i = 0; i < k; i++) strbuf_puts(&text, bits[rnd(nb)]);
        bool xml = iter & 1, reasoning = (iter >> 1) & 1;
        chat_fmt f = chat_format_detect(NULL, 0, xml ? "qwen35" : "qwen3vl");
        out_parser_cfg cfg = {.fmt = &f,
                              .in_reasoning = reasoning,
                              .parse_calls = true,
                              .tools = ptools,
                              .n_tools = sizeof ptools / sizeof *ptools};
        strbuf got[3] = {{0}}, norm[3] = {{0}};
        for (int mode = 0; mode < 3; mode++) {
            out_parser p;
            out_parser_init(&p, &cfg, NULL);
            for (size_t i = 0; i < text.n;) {
                size_t step = mode == 0 ? text.n : mode == 1 ? 1 : 1 + rnd(6);
                if (step > text.n - i) step = text.n - i;
                out_parser_feed(&p, text.p + i, step, record, &got[mode]);
                i += step;
            }
            out_parser_finish(&p, record, &got[mode]);
            out_parser_free(&p);
            normalise(&got[mode], &norm[mode]);
        }
        bool same =
            norm[0].n == norm[1].n && norm[0].n == norm[2].n &&
            (!norm[0].n || (!memcmp(norm[0].p, norm[1].p, norm[0].n) && !memcmp(norm[0].p, norm[2].p, norm[0].n)));
        if (!same) {
            bad++;
            fprintf(stderr, "input: %s\nwhole: %s\nbytes: %s\npieces: %s\n", text.p, norm[0].p, norm[1].p, norm[2].p);
        }
        CHECKF(same, "random answer %d: the same whichever way it is cut", iter);
        for (int mode = 0; mode < 3; mode++) {
            strbuf_free(&got[mode]);
            strbuf_free(&norm[mode]);
        }
        strbuf_free(&text);
    }
}

int main(void) {
    test_tojson();
    ph_model *m = ph_model_load(LLM, 1, NULL);
    CHECK(m != NULL);
    if (!m) TEST_END();
    test_detect(m);
    chat_fmt vl = fmt_from("Qwen3-VL-Instruct.jinja", "qwen3vl");
    chat_fmt q3 = fmt_from("Qwen3.jinja", "qwen3");
    chat_fmt q35 = fmt_from("Qwen3.5.jinja", "qwen35");
    test_spec_renderings(m, "qwen3vl", &vl);
    test_spec_renderings(m, "qwen3", &q3);
    test_spec_renderings(m, "qwen35", &q35);
    test_more_renderings(m, &vl, &q3, &q35);
    test_parser();
    test_parser_random();
    ph_model_free(m);
    TEST_END();
}
