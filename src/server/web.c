/* The web chat page: see web.h. */
#include "server/web.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "base/sha256.h"

/* cmake/embed.cmake's array of src/server/web/chat.html */
extern const unsigned char web_chat_html[];
extern const size_t web_chat_html_len;

/* The next <tag ...> at or after p that is not inside an HTML comment, or
 * NULL. */
static const char *next_tag(const char *p, const char *open) {
    for (;;) {
        const char *t = strstr(p, open), *c = strstr(p, "<!--");
        if (!t || !c || t < c) return t;
        const char *e = strstr(c + 4, "-->");
        if (!e) return NULL;
        p = e + 3;
    }
}

/* Appends " 'sha256-BASE64'" for the text of each <tag ...>...</tag> of the
 * page to out (at *n, of cap). */
static int hash_elements(const char *page, const char *tag, char *out, size_t cap, size_t *n, ph_err *err) {
    char open[16], close[16];
    snprintf(open, sizeof open, "<%s", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    for (const char *p = next_tag(page, open); p; p = next_tag(p, open)) {
        const char *body = strchr(p, '>');
        const char *end = body ? strstr(body, close) : NULL;
        if (!end) return err_set(err, "the web page has an unclosed <%s>", tag);
        body++;
        uint8_t d[PH_SHA256_LEN];
        sha256_digest(body, (size_t)(end - body), d);
        unsigned char b64[4 * ((PH_SHA256_LEN + 2) / 3) + 1];
        EVP_EncodeBlock(b64, d, PH_SHA256_LEN);
        int k = snprintf(out + *n, cap - *n, " 'sha256-%s'", b64);
        if (k < 0 || (size_t)k >= cap - *n) return err_set(err, "the web page has too many <%s> elements", tag);
        *n += (size_t)k;
        p = end + strlen(close);
    }
    return 0;
}

int web_page_init(web_page *p, ph_err *err) {
    memset(p, 0, sizeof *p);
    p->body = (const char *)web_chat_html;
    p->len = web_chat_html_len;
    /* Nothing but the page's own script and style runs (an injected
     * <script> or style attribute would not), it talks to this server only,
     * shows pictures only from data: URLs (the ones the user attaches),
     * and no other site may frame it or take its forms. */
    char *c = p->csp;
    const size_t cap = sizeof p->csp;
    size_t n = (size_t)snprintf(c, cap, "default-src 'none'; script-src");
    if (hash_elements(p->body, "script", c, cap, &n, err)) return -1;
    n += (size_t)snprintf(c + n, cap - n, "; style-src");
    if (hash_elements(p->body, "style", c, cap, &n, err)) return -1;
    int k = snprintf(c + n, cap - n,
                     "; img-src data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
                     "frame-ancestors 'none'");
    if (k < 0 || (size_t)k >= cap - n) return err_set(err, "the web page's policy is too long");
    uint8_t d[PH_SHA256_LEN];
    sha256_digest(p->body, p->len, d);
    char hex[2 * PH_SHA256_LEN + 1];
    hex_encode(d, PH_SHA256_LEN, hex);
    snprintf(p->etag, sizeof p->etag, "\"%.16s\"", hex);
    return 0;
}

bool web_etag_matches(const web_page *p, const char *inm) {
    if (!inm) return false;
    const size_t tl = strlen(p->etag);
    for (const char *s = inm; *s;) {
        while (*s == ' ' || *s == '\t' || *s == ',') s++;
        if (*s == '*') return true;
        if (!strncmp(s, "W/", 2)) s += 2;
        if (!strncmp(s, p->etag, tl) && (!s[tl] || strchr(" \t,", s[tl]))) return true;
        while (*s && *s != ',') s++;
    }
    return false;
}
