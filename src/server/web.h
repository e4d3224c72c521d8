/* The web chat page served at GET / (src/server/web/chat.html, compiled
 * into the binary by cmake/embed.cmake) and the headers it goes out with:
 * a Content-Security-Policy that lets only the page's own inline script
 * and style run (by their SHA-256, computed here from the bytes served)
 * and only talk to this server, and an ETag for revalidation. */
#ifndef PH_SERVER_WEB_H
#define PH_SERVER_WEB_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"

typedef struct web_page {
    const char *body; /* the page's bytes (NUL-ended) */
    size_t len;
    char csp[1024]; /* the Content-Security-Policy header's value */
    char etag[24];  /* "\"" + 16 hex digits of the page's SHA-256 + "\"" */
} web_page;

/* Fills p for the compiled-in page. Fails (PH_ERR_INTERNAL) only for a
 * page that was built wrong: an unclosed <script> or <style>, or more
 * of them than the policy has room for. */
int web_page_init(web_page *p, ph_err *err);

/* Whether an If-None-Match header value names the page's ETag (a list of
 * tags, weak ones too, or "*"). */
bool web_etag_matches(const web_page *p, const char *if_none_match);

#endif
