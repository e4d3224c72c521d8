/* libFuzzer target for the answer parser (text/output_parser.h): the
 * input's first byte picks the family, whether the answer starts inside
 * reasoning and the piece size; the rest is the answer, fed whole and in
 * pieces. Aborts if the two disagree (after merging pieces of one kind) or
 * if a call's pieces come out of order; ASan watches the rest. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/output_parser.h"

static const ph_tool tools[] = {
    {.name = "f", .parameters = "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\"}}}"},
    {.name = "get_weather"},
};

typedef struct rec {
    strbuf all;
    int last_kind;
    int32_t last_call, n_calls;
    int open; /* a call began and has not ended */
} rec;

static void on_out(void *ud, out_kind k, int32_t call, const char *t, size_t n) {
    rec *r = ud;
    if (k == OUT_CALL) {
        if (r->open || call != r->n_calls) abort();
        r->open = 1;
        r->n_calls++;
    } else if (k == OUT_ARGS || k == OUT_CALL_END) {
        if (!r->open || call != r->n_calls - 1) abort();
        if (k == OUT_CALL_END) r->open = 0;
    } else if (r->open) {
        abort(); /* content or reasoning inside a call */
    }
    bool merge = (int)k == r->last_kind && call == r->last_call && k != OUT_CALL && k != OUT_CALL_END;
    if (!merge) {
        char head[32];
        int l = snprintf(head, sizeof head, "%c%d:%d:", 0, (int)k, (int)call);
        strbuf_put(&r->all, head, (size_t)l);
    }
    strbuf_put(&r->all, t, n);
    r->last_kind = (int)k;
    r->last_call = call;
}

static void parse(const chat_fmt *f, bool reasoning, const uint8_t *d, size_t n, size_t piece, rec *r) {
    out_parser p;
    out_parser_cfg cfg = {.fmt = f, .in_reasoning = reasoning, .parse_calls = true, .tools = tools, .n_tools = 2};
    if (out_parser_init(&p, &cfg, NULL)) abort();
    *r = (rec){.last_kind = -1};
    for (size_t i = 0; i < n; i += piece)
        out_parser_feed(&p, (const char *)d + i, n - i < piece ? n - i : piece, on_out, r);
    out_parser_finish(&p, on_out, r);
    if (r->open) abort();
    out_parser_free(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t sel = data[0];
    chat_fmt f = chat_format_detect(NULL, 0, sel & 1 ? "qwen35" : "qwen3vl");
    bool reasoning = sel & 2;
    size_t piece = 1 + (sel >> 2) % 7;
    rec whole, cut;
    parse(&f, reasoning, data + 1, size - 1, size, &whole);
    parse(&f, reasoning, data + 1, size - 1, piece, &cut);
    if (whole.all.n != cut.all.n || (whole.all.n && memcmp(whole.all.p, cut.all.p, whole.all.n))) abort();
    strbuf_free(&whole.all);
    strbuf_free(&cut.all);
    return 0;
}
