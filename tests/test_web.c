/* The web chat page's headers (src/server/web): the page compiled in whole,
 * a Content-Security-Policy that names one hash for its script and one for
 * its style and nothing inline besides, and the ETag's revalidation. (The
 * browser test, tests/api/webchat.test.mjs, sees the hashes let the page
 * run in chromium.) */
#include <string.h>

#include "server/web.h"
#include "test.h"

static size_t count(const char *s, const char *what) {
    size_t n = 0;
    for (const char *p = strstr(s, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

static void test_page(const web_page *p) {
    CHECK(p->len > 1000);
    CHECK(strlen(p->body) == p->len); /* no NUL inside, one after */
    CHECK(!strncmp(p->body, "<!doctype html>", 15));
    CHECK(strstr(p->body, "</html>") != NULL);
    CHECK(!strstr(p->body, "http://") && !strstr(p->body, "https://")); /* no external asset */
    CHECKF(!strncmp(p->csp, "default-src 'none'; script-src 'sha256-", 39), "%s", p->csp);
    CHECKF(count(p->csp, "'sha256-") == 2, "%s", p->csp);
    CHECKF(strstr(p->csp, "; style-src 'sha256-") != NULL, "%s", p->csp);
    CHECK(strstr(p->csp, "connect-src 'self'") && strstr(p->csp, "frame-ancestors 'none'"));
    CHECK(!strstr(p->csp, "unsafe"));
    /* each hash is 32 bytes of base64: 43 characters and one '=' */
    for (const char *h = strstr(p->csp, "'sha256-"); h; h = strstr(h + 1, "'sha256-")) {
        const char *end = strchr(h + 8, '\'');
        CHECKF(end && end - (h + 8) == 44 && end[-1] == '=', "%.60s", h);
    }
    CHECKF(strlen(p->etag) == 18 && p->etag[0] == '"' && p->etag[17] == '"', "%s", p->etag);
}

static void test_etag(const web_page *p) {
    char list[96], weak[64], longer[64], shorter[64];
    snprintf(list, sizeof list, "\"0123456789abcdef\", %s", p->etag);
    snprintf(weak, sizeof weak, "W/%s", p->etag);
    snprintf(longer, sizeof longer, "%sx", p->etag);
    snprintf(shorter, sizeof shorter, "%.17s", p->etag); /* the closing quote missing */
    CHECK(web_etag_matches(p, p->etag));
    CHECK(web_etag_matches(p, list));
    CHECK(web_etag_matches(p, weak));
    CHECK(web_etag_matches(p, "*"));
    CHECK(!web_etag_matches(p, NULL));
    CHECK(!web_etag_matches(p, ""));
    CHECK(!web_etag_matches(p, "\"0123456789abcdef\""));
    CHECK(!web_etag_matches(p, longer));
    CHECK(!web_etag_matches(p, shorter));
}

int main(void) {
    web_page p;
    ph_err err = {0};
    CHECKF(web_page_init(&p, &err) == 0, "%s", err.msg);
    test_page(&p);
    test_etag(&p);
    TEST_END();
}
