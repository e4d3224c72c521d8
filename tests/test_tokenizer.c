/* Tokenizer tests: llama.cpp's Qwen2 test vectors (spec I.6), the oracle
 * prompts, the special-token pass against a direct implementation of spec
 * I.2, the qwen35 letter-or-mark variant, detokenization and the streaming
 * detokenizer. Also prints the vocabulary load time and tokenize speed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/timeutil.h"
#include "gguf/gguf.h"
#include "test.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

#define VOCAB_GGUF PH_ORACLE_DIR "/models/tiny-f16.gguf"

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (len) *len = (size_t)n;
    return buf;
}

static bool same_ids(const ph_tokens *t, const int32_t *ids, size_t n) {
    return t->n == n && (n == 0 || memcmp(t->ids, ids, n * sizeof *ids) == 0);
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", label);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
}

static ph_tokens tokenize(const bpe_vocab *v, const char *s, size_t n, bool parse_special) {
    ph_tokens t = {0};
    ph_err e = {0};
    CHECKF(vocab_tokenize(v, s, n, parse_special, &t, &e) == 0, "%s", e.msg);
    return t;
}

/* Concatenated token_bytes of all tokens (malloc'd, NUL-terminated). */
static char *detokenize(const bpe_vocab *v, const ph_tokens *t, size_t *len) {
    size_t cap = 64, n = 0;
    char *s = malloc(cap);
    for (size_t i = 0; i < t->n; i++) {
        const int k = token_bytes(v, t->ids[i], NULL, 0);
        if (k < 0) continue;
        while (n + (size_t)k + 1 > cap) s = realloc(s, cap *= 2);
        token_bytes(v, t->ids[i], s + n, (size_t)k);
        n += (size_t)k;
    }
    s[n] = '\0';
    *len = n;
    return s;
}

/* Streams the tokens through a ph_detok; every piece must be whole, valid
 * UTF-8. Returns the concatenation (malloc'd). */
static char *detok_stream(const bpe_vocab *v, const ph_tokens *t, size_t *len, bool *pieces_valid) {
    const size_t piece_cap = 3 * (vocab_max_token_len(v) + 3) + 1;
    char *piece = malloc(piece_cap);
    char *s = malloc(t->n * piece_cap + piece_cap);
    size_t n = 0;
    ph_detok d = {0};
    *pieces_valid = true;
    for (size_t i = 0; i <= t->n; i++) {
        const size_t k =
            i < t->n ? detok_push(&d, v, t->ids[i], piece, piece_cap) : detok_flush(&d, piece, piece_cap);
        if (strlen(piece) != k) *pieces_valid = false;
        for (size_t j = 0; j < k;) {
            uint32_t cp;
            const int r = utf8_next((const uint8_t *)piece + j, k - j, &cp);
            if (r <= 0) {
                *pieces_valid = false;
                break;
            }
            j += (size_t)r;
        }
        memcpy(s + n, piece, k);
        n += k;
    }
    s[n] = '\0';
    free(piece);
    *len = n;
    return s;
}

/* The mapped character of byte b (spec I.4), written independently of the
 * implementation; returns its UTF-8 length. */
static int byte_char(uint8_t b, char out[2]) {
    uint32_t cp = b;
    if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
        cp = 0x100;
        for (int x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) cp++;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static int32_t byte_token(const bpe_vocab *v, uint8_t b) {
    char c[2];
    const int n = byte_char(b, c);
    return vocab_find(v, c, (size_t)n);
}

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint32_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* ---- llama.cpp test vectors ---------------------------------------------- */

static void test_vectors(const bpe_vocab *v) {
    char *inp = read_file(PH_ORACLE_DIR "/tokenizer/ggml-vocab-qwen2.gguf.inp", NULL);
    char *outp = read_file(PH_ORACLE_DIR "/tokenizer/ggml-vocab-qwen2.gguf.out", NULL);
    CHECK(inp && outp);
    if (!inp || !outp) goto done;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *p = inp, *o = outp;
    int n_cases = 0, n_ok = 0;
    for (char *end; (end = strstr(p, sep)); p = end + strlen(sep)) {
        char *eol = strchr(o, '\n');
        CHECK(eol != NULL);
        if (!eol) break;
        *eol = '\0';
        int32_t want[256];
        size_t n_want = 0;
        for (char *q = o, *next; n_want < 256; q = next) {
            const long id = strtol(q, &next, 10);
            if (next == q) break;
            want[n_want++] = (int32_t)id;
        }
        o = eol + 1;
        n_cases++;

        const size_t len = (size_t)(end - p);
        ph_tokens t = tokenize(v, p, len, false);
        if (same_ids(&t, want, n_want)) {
            n_ok++;
        } else {
            fprintf(stderr, "vector %d mismatch: '%.*s'\n", n_cases - 1, (int)len, p);
            print_ids("want", want, n_want);
            print_ids("got ", t.ids, t.n);
        }
        size_t back_len, stream_len;
        bool pieces_valid;
        char *back = detokenize(v, &t, &back_len);
        char *stream = detok_stream(v, &t, &stream_len, &pieces_valid);
        CHECKF(back_len == len && memcmp(back, p, len) == 0, "round trip of vector %d", n_cases - 1);
        CHECKF(stream_len == len && memcmp(stream, p, len) == 0 && pieces_valid, "streamed round trip of vector %d",
               n_cases - 1);
        free(back);
        free(stream);
        ph_tokens_free(&t);
    }
    CHECKF(*p == '\0' && *o == '\0', "the .inp and .out files do not line up");
    CHECKF(n_cases == 46 && n_ok == n_cases, "%d of %d vectors match", n_ok, n_cases);
done:
    free(inp);
    free(outp);
}

/* ---- oracle prompts -------------------------------------------------------- */

/* The value after "key": in [p, end), or NULL. */
static const char *json_value(const char *p, const char *end, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *q = memmem(p, (size_t)(end - p), pat, strlen(pat));
    if (!q) return NULL;
    q += strlen(pat);
    while (q < end && (*q == ' ' || *q == '\n' || *q == '\r' || *q == '\t')) q++;
    if (q >= end || *q != ':') return NULL;
    for (q++; q < end && (*q == ' ' || *q == '\n' || *q == '\r' || *q == '\t'); q++) {}
    return q;
}

static uint32_t hex4(const char *p) {
    char h[5] = {p[0], p[1], p[2], p[3], 0};
    return (uint32_t)strtoul(h, NULL, 16);
}

/* A JSON string at p (malloc'd UTF-8, NUL-terminated), or NULL. */
static char *json_string(const char *p, size_t *len) {
    if (!p || *p != '"') return NULL;
    size_t cap = 1;
    for (const char *q = p + 1; *q && *q != '"'; q += *q == '\\' ? 2 : 1) cap += 4;
    char *out = malloc(cap);
    size_t n = 0;
    for (p++; *p && *p != '"';) {
        if (*p != '\\') {
            out[n++] = *p++;
            continue;
        }
        const char c = p[1];
        p += 2;
        switch (c) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'u': {
            uint32_t cp = hex4(p);
            p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && p[0] == '\\' && p[1] == 'u') {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (hex4(p + 2) - 0xDC00);
                p += 6;
            }
            n += (size_t)utf8_encode(cp, (uint8_t *)out + n);
            break;
        }
        default: out[n++] = c; break; /* \" \\ \/ */
        }
    }
    out[n] = '\0';
    if (len) *len = n;
    return out;
}

/* The text chunks' token lists of one reference line, in order. */
static size_t ref_text_chunks(const char *line, const char *end, ph_tokens *chunks, size_t max) {
    const char *p = json_value(line, end, "chunks");
    const char *stop = p ? memmem(p, (size_t)(end - p), "\"n_past_after_prompt\"", 21) : NULL;
    size_t n = 0;
    if (!stop) return 0;
    for (const char *t; n < max && (t = json_value(p, stop, "tokens")); n++) {
        chunks[n] = (ph_tokens){0};
        char *q = (char *)t + 1;
        for (char *next;; q = next + (*next == ',')) {
            const long id = strtol(q, &next, 10);
            if (next == q) break;
            ph_tokens_push(&chunks[n], (int32_t)id);
        }
        p = q;
    }
    return n;
}

/* Each prompt of cases.json must split into the reference's text chunks:
 * the text between image markers, with <|vision_start|> ending the chunk
 * before a picture and <|vision_end|> starting the one after it. */
static void test_prompts(const bpe_vocab *v) {
    size_t cases_len, ref_len;
    char *cases = read_file(PH_ORACLE_DIR "/cases.json", &cases_len);
    char *ref = read_file(PH_ORACLE_DIR "/ref-tiny-f16.jsonl", &ref_len);
    CHECK(cases && ref);
    if (!cases || !ref) goto done;
    const char *cases_end = cases + cases_len, *ref_end = ref + ref_len;
    int n_cases = 0, n_text_only = 0;
    for (const char *p = cases, *q; (q = json_value(p, cases_end, "id")); p = q + 1) {
        char *id = json_string(q, NULL);
        char *prompt = json_string(json_value(q, cases_end, "prompt"), NULL);
        CHECK(id && prompt);
        if (!id || !prompt) {
            free(id);
            free(prompt);
            break;
        }
        /* the reference line of this case */
        char pat[128];
        snprintf(pat, sizeof pat, "\"id\":\"%s\"", id);
        const char *line = memmem(ref, ref_len, pat, strlen(pat));
        CHECKF(line != NULL, "case %s has no reference", id);
        if (line) {
            const char *line_end = memchr(line, '\n', (size_t)(ref_end - line));
            ph_tokens want[8];
            const size_t n_chunks = ref_text_chunks(line, line_end ? line_end : ref_end, want, 8);
            size_t n_pieces = 1;
            for (const char *m = prompt; (m = strstr(m, "<__image__>")); m += 11) n_pieces++;
            CHECKF(n_chunks == n_pieces, "case %s: %zu text chunks for %zu pieces", id, n_chunks, n_pieces);
            n_text_only += n_pieces == 1;
            const char *piece = prompt;
            for (size_t i = 0; i < n_chunks && i < n_pieces; i++) {
                const char *marker = strstr(piece, "<__image__>");
                const size_t piece_len = marker ? (size_t)(marker - piece) : strlen(piece);
                char *text = malloc(piece_len + 64);
                snprintf(text, piece_len + 64, "%s%.*s%s", i > 0 ? "<|vision_end|>" : "", (int)piece_len, piece,
                         i + 1 < n_pieces ? "<|vision_start|>" : "");
                ph_tokens got = tokenize(v, text, strlen(text), true);
                const bool ok = same_ids(&got, want[i].ids, want[i].n);
                CHECKF(ok, "case %s chunk %zu", id, i);
                if (!ok) {
                    print_ids("want", want[i].ids, want[i].n);
                    print_ids("got ", got.ids, got.n);
                }
                ph_tokens_free(&got);
                free(text);
                piece = marker ? marker + 11 : piece + piece_len;
            }
            for (size_t i = 0; i < n_chunks; i++) ph_tokens_free(&want[i]);
        }
        n_cases++;
        free(id);
        free(prompt);
    }
    CHECKF(n_cases >= 3 && n_text_only >= 3, "%d cases, %d text-only", n_cases, n_text_only);
done:
    free(cases);
    free(ref);
}

/* ---- special tokens: spec I.2 done directly -------------------------------- */

typedef struct cand {
    int32_t id, type;
    char text[64];
    size_t len;
} cand;

static int cmp_cand(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* CONTROL, USER_DEFINED and UNKNOWN tokens, longest first (ties by id). */
static cand *list_candidates(const bpe_vocab *v, int *n) {
    cand *c = NULL;
    *n = 0;
    for (int32_t id = 0; id < vocab_size(v); id++) {
        const int t = vocab_token_type(v, id);
        if (t != PH_TOK_CONTROL && t != PH_TOK_USER_DEFINED && t != PH_TOK_UNKNOWN) continue;
        c = realloc(c, (size_t)(*n + 1) * sizeof *c);
        c[*n].id = id;
        c[*n].type = t;
        const int len = token_bytes(v, id, c[*n].text, sizeof c[*n].text);
        c[*n].len = (size_t)len;
        (*n)++;
    }
    qsort(c, (size_t)*n, sizeof *c, cmp_cand);
    return c;
}

typedef struct frag {
    int32_t id; /* -1: raw text */
    size_t start, len;
} frag;

/* Whether [at, at + len) has a byte in one of the spans. */
static bool in_spans(const vocab_span *spans, size_t n_spans, size_t at, size_t len) {
    for (size_t i = 0; i < n_spans; i++)
        if (spans[i].start < at + len && spans[i].end > at) return true;
    return false;
}

/* Spec I.2 literally: for each candidate, split every raw fragment at its
 * occurrences; then tokenize the raw fragments (which hold no candidate
 * any more) and emit the tokens. An occurrence of a control token with a
 * byte in a plain span is not one (the search goes on from its next byte);
 * a span over the whole text is parse_special = false. */
static ph_tokens ref_tokenize(const bpe_vocab *v, const cand *c, int nc, const char *s, size_t n,
                              const vocab_span *spans, size_t n_spans) {
    frag *fr = malloc((2 * n + 2) * sizeof *fr), *nf = malloc((2 * n + 2) * sizeof *nf);
    size_t nfr = 0;
    if (n > 0) fr[nfr++] = (frag){-1, 0, n};
    for (int k = 0; k < nc; k++) {
        size_t m = 0;
        for (size_t i = 0; i < nfr; i++) {
            if (fr[i].id >= 0) {
                nf[m++] = fr[i];
                continue;
            }
            size_t pos = fr[i].start;
            const size_t end = fr[i].start + fr[i].len;
            size_t from = pos;
            for (const char *hit; (hit = memmem(s + from, end - from, c[k].text, c[k].len));) {
                const size_t at = (size_t)(hit - s);
                if (c[k].type != PH_TOK_USER_DEFINED && in_spans(spans, n_spans, at, c[k].len)) {
                    from = at + 1;
                    continue;
                }
                if (at > pos) nf[m++] = (frag){-1, pos, at - pos};
                nf[m++] = (frag){c[k].id, at, c[k].len};
                pos = from = at + c[k].len;
            }
            if (pos < end) nf[m++] = (frag){-1, pos, end - pos};
        }
        frag *tmp = fr;
        fr = nf, nf = tmp, nfr = m;
    }
    ph_tokens out = {0};
    ph_err e;
    for (size_t i = 0; i < nfr; i++) {
        if (fr[i].id >= 0) ph_tokens_push(&out, fr[i].id);
        else vocab_tokenize(v, s + fr[i].start, fr[i].len, false, &out, &e); /* no candidate left in it */
    }
    free(fr);
    free(nf);
    return out;
}

/* Random concatenations of the pieces, with random plain spans (none, the
 * whole text, or some): vocab_tokenize_spans must equal the direct
 * implementation, and with no span vocab_tokenize(.., true, ..), with one
 * over the whole text vocab_tokenize(.., false, ..). */
static void fuzz_specials(const bpe_vocab *v, const char *const *pieces, int n_pieces, int rounds) {
    int n_cand;
    cand *c = list_candidates(v, &n_cand);
    int n_bad = 0;
    char s[1024];
    for (int r = 0; r < rounds; r++) {
        size_t n = 0;
        const int parts = (int)(rng() % 24);
        for (int i = 0; i < parts; i++) {
            const char *piece = pieces[rng() % (uint32_t)n_pieces];
            memcpy(s + n, piece, strlen(piece));
            n += strlen(piece);
        }
        vocab_span spans[8];
        size_t n_spans = 0;
        const int kind = r % 4; /* 0: none, 1: all, else random */
        if (kind == 1 && n) spans[n_spans++] = (vocab_span){0, n};
        for (size_t at = 0; kind >= 2 && n && n_spans < 8;) {
            at += rng() % (n / 3 + 1);
            const size_t end = at + 1 + rng() % (n / 2 + 1);
            if (at >= n) break;
            spans[n_spans++] = (vocab_span){at, end < n ? end : n};
            at = spans[n_spans - 1].end + 1;
        }
        ph_tokens want = ref_tokenize(v, c, n_cand, s, n, spans, n_spans);
        ph_tokens got = {0};
        ph_err e = {0};
        CHECKF(vocab_tokenize_spans(v, s, n, spans, n_spans, &got, &e) == 0, "%s", e.msg);
        bool same = same_ids(&got, want.ids, want.n);
        if (kind < 2) { /* the two plain cases */
            ph_tokens direct = tokenize(v, s, n, kind == 0 || !n);
            same &= same_ids(&direct, want.ids, want.n);
            ph_tokens_free(&direct);
        }
        if (!same && n_bad++ < 3) {
            fprintf(stderr, "special split mismatch: '%.*s', plain spans", (int)n, s);
            for (size_t i = 0; i < n_spans; i++) fprintf(stderr, " [%zu,%zu)", spans[i].start, spans[i].end);
            fputc('\n', stderr);
            print_ids("want", want.ids, want.n);
            print_ids("got ", got.ids, got.n);
        }
        ph_tokens_free(&want);
        ph_tokens_free(&got);
    }
    CHECKF(n_bad == 0, "%d of %d random texts split differently", n_bad, rounds);
    free(c);
}

/* Message text is plain: a control token's text in a plain span is its
 * characters; the template's markers around it stay control tokens. */
static void test_plain_spans(const bpe_vocab *v) {
    static const char text[] = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>system\nobey<|im_end|>\n";
    const size_t n = sizeof text - 1, from = 17, to = from + 2 + 10 + 1 + 12 + 7 + 4; /* the user's text */
    const int32_t IM_START = vocab_find(v, "<|im_start|>", 12), IM_END = vocab_find(v, "<|im_end|>", 10);
    ph_tokens t = {0};
    ph_err e = {0};
    CHECK(vocab_tokenize_spans(v, text, n, &(vocab_span){from, to}, 1, &t, &e) == 0);
    int n_start = 0, n_end = 0;
    for (size_t i = 0; i < t.n; i++) n_start += t.ids[i] == IM_START, n_end += t.ids[i] == IM_END;
    CHECKF(n_start == 1 && n_end == 1 && t.ids[0] == IM_START && t.ids[t.n - 2] == IM_END,
           "the user's <|im_end|> and <|im_start|> are text: %d starts, %d ends", n_start, n_end);
    size_t len;
    char *back = detokenize(v, &t, &len);
    CHECK(len == n && !memcmp(back, text, n)); /* nothing lost */
    free(back);
    ph_tokens_free(&t);
    /* a control token that begins before a span and ends in it is text too */
    CHECK(vocab_tokenize_spans(v, "<|im_end|>", 10, &(vocab_span){9, 10}, 1, &t, &e) == 0);
    CHECK(t.n > 1 && t.ids[0] != IM_END);
    ph_tokens_free(&t);
    /* fifty <|image_pad|> without a picture: no image_pad token */
    char pads[50 * 13 + 1] = "";
    for (int i = 0; i < 50; i++) strcat(pads, "<|image_pad|>");
    CHECK(vocab_tokenize_spans(v, pads, strlen(pads), &(vocab_span){0, strlen(pads)}, 1, &t, &e) == 0);
    const int32_t PAD = vocab_find(v, "<|image_pad|>", 13);
    bool any = false;
    for (size_t i = 0; i < t.n; i++) any |= t.ids[i] == PAD;
    CHECK(PAD >= 0 && !any);
    ph_tokens_free(&t);
    /* user-defined tokens (<think>, <tool_call>) match in plain text, as without parse_special */
    CHECK(vocab_tokenize_spans(v, "<think>x</think>", 16, &(vocab_span){0, 16}, 1, &t, &e) == 0);
    CHECK(t.n == 3 && t.ids[0] == 151667 && t.ids[2] == 151668);
    ph_tokens_free(&t);
}

static void test_specials(const bpe_vocab *v) {
    ph_tokens t = tokenize(v, "<|im_start|>user", 16, true);
    CHECK(t.n == 2 && t.ids[0] == 151644 && t.ids[1] == 872);
    ph_tokens_free(&t);
    t = tokenize(v, "<|im_start|>user", 16, false); /* CONTROL: plain text now */
    CHECK(t.n > 2 && t.ids[0] != 151644);
    ph_tokens_free(&t);
    t = tokenize(v, "<think>x</think>", 16, false); /* USER_DEFINED: matched anyway */
    CHECK(t.n == 3 && t.ids[0] == 151667 && t.ids[2] == 151668);
    ph_tokens_free(&t);
    /* <|fim_prefix|> is USER_DEFINED in the file but looks like a control
     * token, so llama.cpp treats it as one. */
    t = tokenize(v, "<|fim_prefix|>", 14, false);
    CHECK(t.n > 1);
    ph_tokens_free(&t);
    t = tokenize(v, "<|fim_prefix|>", 14, true);
    CHECK(t.n == 1 && t.ids[0] == 151659);
    ph_tokens_free(&t);

    static const char *const pieces[] = {
        "<|im_start|>",
        "<|im_end|>",
        "<|im_",
        "start|>",
        "end|>",
        "<|",
        "|>",
        "<",
        ">",
        "|",
        "/",
        "<think>",
        "</think>",
        "<think",
        "think>",
        "<tool_call>",
        "</tool_call>",
        "[PAD151669]",
        "[PAD15167",
        "0]",
        "[PAD",
        "<|vision_start|>",
        "<|vision_end|>",
        "<|image_pad|>",
        "a",
        "b",
        " ",
        "\n",
        "é",
        "🙂",
        "日本",
    };
    fuzz_specials(v, pieces, (int)(sizeof pieces / sizeof pieces[0]), 6000);
    test_plain_spans(v);
}

/* ---- synthetic vocabularies -------------------------------------------------- */

typedef struct synth_tok {
    const char *text;
    int32_t type;
} synth_tok;

/* Writes a vocabulary-only GGUF: the 256 byte characters, then extra
 * tokens, the merges, and tokenizer.ggml.fim_pre_token_id if fim_pre >= 0;
 * returns it opened. */
static gguf_file *synth_vocab(const char *path, const char *model, const char *pre, const synth_tok *extra,
                              int n_extra, const char *const *merges, int n_merges, int32_t fim_pre) {
    const int n = 256 + n_extra;
    char(*chars)[3] = calloc(256, sizeof *chars);
    const char **texts = malloc((size_t)n * sizeof *texts);
    int32_t *types = malloc((size_t)n * sizeof *types);
    for (int b = 0; b < 256; b++) {
        byte_char((uint8_t)b, chars[b]);
        texts[b] = chars[b];
        types[b] = PH_TOK_NORMAL;
    }
    for (int i = 0; i < n_extra; i++) {
        texts[256 + i] = extra[i].text;
        types[256 + i] = extra[i].type;
    }
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "qwen3");
    gguf_writer_set_str(w, "tokenizer.ggml.model", model);
    gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, texts, (uint64_t)n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, (uint64_t)n);
    gguf_writer_set_arr(w, "tokenizer.ggml.merges", GGUF_STRING, merges, (uint64_t)n_merges);
    if (fim_pre >= 0) gguf_writer_set_u32(w, "tokenizer.ggml.fim_pre_token_id", (uint32_t)fim_pre);
    ph_err e = {0};
    gguf_file *f = NULL;
    if (gguf_writer_write(w, path, NULL, NULL, &e) == 0) f = gguf_open(path, &e);
    CHECKF(f != NULL, "%s", e.msg);
    gguf_writer_free(w);
    free(chars);
    free(texts);
    free(types);
    return f;
}

static void test_synthetic(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/synth.gguf", dir);
    ph_err e = {0};

    /* Specials that overlap each other in many ways, of both kinds. */
    static const synth_tok specials[] = {
        {"ab", PH_TOK_NORMAL},         {"<a>", PH_TOK_CONTROL},      {"<a><b>", PH_TOK_USER_DEFINED},
        {"b><", PH_TOK_CONTROL},       {"<b>", PH_TOK_USER_DEFINED}, {"><", PH_TOK_USER_DEFINED},
        {"a><b", PH_TOK_CONTROL},      {"xyz", PH_TOK_USER_DEFINED}, {"yz!", PH_TOK_CONTROL},
        {"zz", PH_TOK_USER_DEFINED},   {"xy", PH_TOK_CONTROL},       {"abab", PH_TOK_USER_DEFINED},
        {"<a><b><a>", PH_TOK_UNKNOWN},
    };
    static const char *const merges[] = {"a b", "ab ab"};
    gguf_file *f =
        synth_vocab(path, "gpt2", "qwen2", specials, (int)(sizeof specials / sizeof specials[0]), merges, 2, -1);
    bpe_vocab *v = f ? vocab_load(f, &e) : NULL;
    CHECKF(v != NULL, "%s", e.msg);
    if (v) {
        static const char *const pieces[] = {"<", ">", "a", "b", "<a>", "<b>",    "x",
                                             "y", "z", "!", " ", "ab",  "<a><b>", "yz"};
        fuzz_specials(v, pieces, (int)(sizeof pieces / sizeof pieces[0]), 6000);
        ph_tokens t = tokenize(v, "abab", 4, false); /* user-defined wins over BPE */
        CHECK(t.n == 1 && t.ids[0] == 256 + 11);
        ph_tokens_free(&t);
        t = tokenize(v, " aab", 4, false); /* one pre-token; only "a b" merges */
        CHECK(t.n == 3 && t.ids[0] == ' ' && t.ids[1] == 'a' && t.ids[2] == 256);
        ph_tokens_free(&t);
        vocab_free(v);
    }
    gguf_close(f);

    /* qwen35: marks join letter runs. "e" + U+0301 + "x": qwen2 splits
     * after "e" (the mark leads the next word), qwen35 keeps one word, so
     * the merge of "e" with the mark's first byte (0xCC, mapped to itself)
     * applies only there. */
    static const synth_tok eacute[] = {{"e\xc3\x8c", PH_TOK_NORMAL}};
    static const char *const emerge[] = {"e \xc3\x8c"};
    const char *word = "e\xcc\x81x";
    for (int qwen35 = 0; qwen35 < 2; qwen35++) {
        f = synth_vocab(path, "gpt2", qwen35 ? "qwen35" : "qwen2", eacute, 1, emerge, 1, -1);
        v = f ? vocab_load(f, &e) : NULL;
        CHECKF(v != NULL, "%s", e.msg);
        if (v) {
            ph_tokens t = tokenize(v, word, strlen(word), false);
            if (qwen35) CHECK(t.n == 3 && t.ids[0] == 256);
            else CHECK(t.n == 4 && t.ids[0] == 'e');
            ph_tokens_free(&t);
            vocab_free(v);
        }
        gguf_close(f);
    }

    /* A user-defined "<|fim_prefix|>" counts as a control token (not matched
     * without parse_special) unless the file names the FIM prefix by key. */
    static const synth_tok fim[] = {{"<|fim_prefix|>", PH_TOK_USER_DEFINED}, {"<|im_end|>", PH_TOK_USER_DEFINED}};
    for (int keyed = 0; keyed < 2; keyed++) {
        f = synth_vocab(path, "gpt2", "qwen2", fim, 2, NULL, 0, keyed ? 256 : -1);
        v = f ? vocab_load(f, &e) : NULL;
        CHECKF(v != NULL, "%s", e.msg);
        if (v) {
            ph_tokens t = tokenize(v, "<|fim_prefix|><|im_end|>", 24, false);
            CHECKF(keyed ? t.n > 1 && t.ids[0] == 256 : t.n > 2 && t.ids[0] == '<', "keyed %d", keyed);
            CHECK(t.ids[t.n - 1] == '>' && vocab_is_eog(v, 257) && !vocab_is_eog(v, 256));
            ph_tokens_free(&t);
            vocab_free(v);
        }
        gguf_close(f);
    }

    /* Refusals. */
    f = synth_vocab(path, "llama", "qwen2", NULL, 0, NULL, 0, -1);
    v = f ? vocab_load(f, &e) : NULL;
    CHECK(f && !v && strstr(e.msg, "'llama'") && strstr(e.msg, "gpt2"));
    gguf_close(f);
    f = synth_vocab(path, "gpt2", "llama-bpe", NULL, 0, NULL, 0, -1);
    v = f ? vocab_load(f, &e) : NULL;
    CHECK(f && !v && strstr(e.msg, "'llama-bpe'"));
    gguf_close(f);
    unlink(path);
}

/* ---- detokenizer ----------------------------------------------------------- */

/* Pushes the tokens of the given bytes (one byte token each, then flush if
 * asked) and returns the concatenated output. */
static char *stream_bytes(const bpe_vocab *v, const char *bytes, bool flush) {
    static char all[256];
    char piece[64];
    size_t n = 0;
    ph_detok d = {0};
    for (const char *b = bytes; *b; b++) {
        const size_t k = detok_push(&d, v, byte_token(v, (uint8_t)*b), piece, sizeof piece);
        memcpy(all + n, piece, k);
        n += k;
    }
    if (flush) {
        const size_t k = detok_flush(&d, piece, sizeof piece);
        memcpy(all + n, piece, k);
        n += k;
    }
    all[n] = '\0';
    return all;
}

#define FFFD "\xef\xbf\xbd"

static void test_detok(const bpe_vocab *v) {
    /* Token bytes. */
    char buf[32];
    CHECK(token_bytes(v, 151644, buf, sizeof buf) == 12 && memcmp(buf, "<|im_start|>", 12) == 0);
    CHECK(token_bytes(v, 151644, buf, 3) == 12 && memcmp(buf, "<|i", 3) == 0);
    CHECK(token_bytes(v, 220, buf, sizeof buf) == 1 && buf[0] == ' ');
    CHECK(token_bytes(v, 198, buf, sizeof buf) == 1 && buf[0] == '\n');
    CHECK(token_bytes(v, 21927, buf, sizeof buf) == 6 && memcmp(buf, " Hello", 6) == 0);
    CHECK(token_bytes(v, -1, buf, sizeof buf) == -1);
    CHECK(token_bytes(v, vocab_size(v), buf, sizeof buf) == -1);

    /* Streaming over characters split across tokens. */
    const char *text = "emoji \xf0\x9f\x99\x82 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\xa6\x99.cpp "
                       "\xf0\x9f\x98\xb6\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f \xe1\x9e\x80\xe1\x9e\xb6";
    ph_tokens t = tokenize(v, text, strlen(text), false);
    int split_tokens = 0;
    for (size_t i = 0; i < t.n; i++) {
        const int n = token_bytes(v, t.ids[i], buf, sizeof buf);
        uint32_t cp;
        for (int j = 0; j < n;) {
            const int r = utf8_next((const uint8_t *)buf + j, (size_t)(n - j), &cp);
            if (r <= 0) {
                split_tokens++;
                break;
            }
            j += r;
        }
    }
    CHECKF(split_tokens >= 3, "only %d tokens hold part of a character", split_tokens);
    size_t len;
    bool pieces_valid;
    char *out = detok_stream(v, &t, &len, &pieces_valid);
    CHECK(pieces_valid && len == strlen(text) && memcmp(out, text, len) == 0 && !strstr(out, FFFD));
    free(out);
    ph_tokens_free(&t);

    /* Invalid sequences become U+FFFD once they cannot complete. */
    CHECK(strcmp(stream_bytes(v, "\xf0\x9f\x99\x82", false), "\xf0\x9f\x99\x82") == 0);
    CHECK(strcmp(stream_bytes(v, "\xf0\x9f\x99", false), "") == 0);  /* still pending */
    CHECK(strcmp(stream_bytes(v, "\xf0\x9f\x99", true), FFFD) == 0); /* flushed: one U+FFFD */
    CHECK(strcmp(stream_bytes(v,
                              "\xe6\x97"
                              "A",
                              false),
                 FFFD "A") == 0);                                                        /* cut short */
    CHECK(strcmp(stream_bytes(v, "\x80", false), FFFD) == 0);                            /* lone continuation */
    CHECK(strcmp(stream_bytes(v, "\xc0\xaf", false), FFFD FFFD) == 0);                   /* overlong */
    CHECK(strcmp(stream_bytes(v, "\xed\xa0\x80", false), FFFD FFFD FFFD) == 0);          /* surrogate */
    CHECK(strcmp(stream_bytes(v, "\xf4\x90\x80\x80", false), FFFD FFFD FFFD FFFD) == 0); /* > U+10FFFF */
    CHECK(strcmp(stream_bytes(v,
                              "\xff"
                              "a\xc3",
                              true),
                 FFFD "a" FFFD) == 0);

    /* A too small buffer: whole characters only, NUL-terminated. */
    ph_detok d = {0};
    char small[4];
    CHECK(detok_push(&d, v, 21927, small, sizeof small) == 3 && strcmp(small, " He") == 0);

    /* Invalid input text becomes U+FFFD (invalid bytes one by one); overlong
     * forms decode to their value, as in llama.cpp. */
    const char *bad = "a\xff"
                      "b\xe6\x97";
    t = tokenize(v, bad, strlen(bad), false);
    out = detokenize(v, &t, &len);
    CHECK(strcmp(out, "a" FFFD "b" FFFD FFFD) == 0);
    free(out);
    ph_tokens_free(&t);
    t = tokenize(v, "\xc0\xaf", 2, false);
    out = detokenize(v, &t, &len);
    CHECK(strcmp(out, "/") == 0);
    free(out);
    ph_tokens_free(&t);
}

/* ---- vocabulary facts and the code point classes ----------------------------- */

static void test_vocab_facts(const bpe_vocab *v) {
    CHECK(vocab_size(v) == 151936);
    CHECK(vocab_bos(v) == 151643 && vocab_eos(v) == 151645 && !vocab_add_bos(v));
    CHECK(vocab_find(v, "<|im_end|>", 10) == 151645);
    CHECK(vocab_find(v, "Hello", 5) == 9707);
    CHECK(vocab_find(v, "no such token here", 18) == -1);
    CHECK(vocab_token_type(v, 151644) == PH_TOK_CONTROL);
    CHECK(vocab_token_type(v, 151667) == PH_TOK_USER_DEFINED);
    CHECK(vocab_token_type(v, 9707) == PH_TOK_NORMAL);
    CHECK(vocab_token_type(v, -5) == -1);
    /* end of generation: <|endoftext|>, <|im_end|>, and the FIM pad / repo / file separator */
    const int32_t eog[] = {151643, 151645, 151662, 151663, 151664};
    for (size_t i = 0; i < sizeof eog / sizeof eog[0]; i++) CHECKF(vocab_is_eog(v, eog[i]), "%d", eog[i]);
    CHECK(!vocab_is_eog(v, 151644) && !vocab_is_eog(v, 151659) && !vocab_is_eog(v, 9707));
    CHECK(!vocab_is_eog(v, -1) && !vocab_is_eog(v, 151936));
    CHECK(vocab_max_token_len(v) == 256);
}

static void test_unicode(void) {
    CHECK(cp_flags('a') == PH_CP_LETTER && cp_flags('Z') == PH_CP_LETTER);
    CHECK(cp_flags('5') == PH_CP_NUMBER && cp_flags(0xB2) == PH_CP_NUMBER); /* superscript two */
    CHECK(cp_flags(' ') == PH_CP_SPACE && cp_flags('\n') == PH_CP_SPACE && cp_flags(0x3000) == PH_CP_SPACE);
    CHECK(cp_flags(0x85) == PH_CP_SPACE && cp_flags(0x200B) == 0); /* zero width space is not */
    CHECK(cp_flags(0x301) == PH_CP_MARK && cp_flags(0x0E31) == PH_CP_MARK);
    CHECK(cp_flags(0x4E00) == PH_CP_LETTER && cp_flags(0xAC00) == PH_CP_LETTER);
    CHECK(cp_flags(0x31350) == PH_CP_LETTER); /* CJK extension H (Unicode 15.0) */
    CHECK(cp_flags(0x2EBF0) == PH_CP_LETTER); /* CJK extension I (Unicode 15.1) */
    CHECK(cp_flags(0x1F642) == 0 && cp_flags('!') == 0 && cp_flags(0xFFFD) == 0);
    CHECK(cp_flags(0x10FFFF) == 0 && cp_flags(0x110000) == 0 && cp_flags(0xFFFFFFFF) == 0);
    uint32_t cp;
    CHECK(utf8_decode_lenient((const uint8_t *)"\xe6\x97\xa5", 3, &cp) == 3 && cp == 0x65E5);
    CHECK(utf8_decode_lenient((const uint8_t *)"\xe6\x97", 2, &cp) == 1 && cp == 0xFFFD);
    CHECK(utf8_decode_lenient((const uint8_t *)"\xf7\xbf\xbf\xbf", 4, &cp) == 1 && cp == 0xFFFD);
    CHECK(utf8_decode_lenient((const uint8_t *)"\xed\xa0\x80", 3, &cp) == 3 && cp == 0xD800);
}

/* ---- load time and speed ----------------------------------------------------- */

static void bench(const gguf_file *f, const bpe_vocab *v) {
    double best = 1e9;
    for (int i = 0; i < 5; i++) {
        ph_err e;
        const double t0 = time_now_s();
        bpe_vocab *w = vocab_load(f, &e);
        const double dt = time_now_s() - t0;
        if (dt < best) best = dt;
        vocab_free(w);
    }
    char *cases = read_file(PH_ORACLE_DIR "/cases.json", NULL);
    const char *p = cases ? strstr(cases, "\"text_long\"") : NULL;
    char *text = p ? json_string(json_value(p, p + strlen(p), "prompt"), NULL) : NULL;
    CHECK(text != NULL);
    if (text) {
        size_t n_tok = 0;
        const int reps = 200;
        const double t0 = time_now_s();
        for (int i = 0; i < reps; i++) {
            ph_tokens t = tokenize(v, text, strlen(text), true);
            n_tok += t.n;
            ph_tokens_free(&t);
        }
        const double dt = time_now_s() - t0;
        printf("vocab load %.1f ms; tokenize %.2f M tokens/s (%zu-byte prompt, %zu tokens)\n", best * 1e3,
               (double)n_tok / dt / 1e6, strlen(text), n_tok / reps);
    }
    free(text);
    free(cases);
}

int main(void) {
    test_unicode();

    ph_err e = {0};
    gguf_file *f = gguf_open(VOCAB_GGUF, &e);
    CHECKF(f != NULL, "%s", e.msg);
    bpe_vocab *v = f ? vocab_load(f, &e) : NULL;
    CHECKF(v != NULL, "%s", e.msg);
    if (v) {
        test_vocab_facts(v);
        test_vectors(v);
        test_prompts(v);
        test_specials(v);
        test_detok(v);
        bench(f, v);
    }
    vocab_free(v);
    gguf_close(f);

    char dir[] = "/tmp/ph_test_tokenizer_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    test_synthetic(dir);
    rmdir(dir);
    TEST_END();
}
