/* Who may talk to the server (issue 13): the Host check against DNS
 * rebinding, the CORS origin list, the JSON Content-Type of API bodies and
 * the API key, compared in constant time. Pure functions of strings, so
 * that they can be tested without a socket. */
#ifndef PH_SERVER_ACCESS_H
#define PH_SERVER_ACCESS_H

#include <stdbool.h>
#include <stddef.h>

/* Whether a Host header value may reach this server: a loopback name
 * (localhost, 127.x.x.x, [::1], [::ffff:127.x.x.x]) or bound (the --host
 * address), with or without a port, or a name in allowed (--allow-host:
 * compared with the name, or with the whole value when the entry has a
 * port; "*" allows any). An empty value is not allowed. */
bool access_host_allowed(const char *host, const char *bound, const char *const *allowed, size_t n_allowed);

/* Whether origin (an Origin header value) is in the --cors-origin list
 * ("*" matches any origin). */
bool access_origin_allowed(const char *origin, const char *const *list, size_t n);

/* Whether s is a valid --cors-origin value: "*", or scheme://host[:port]
 * without a path (as browsers send Origin). */
bool access_origin_valid(const char *s);

/* Whether a Content-Type value is application/json, with or without
 * parameters ("application/json; charset=utf-8"); case-insensitive. */
bool access_is_json(const char *content_type);

/* Whether given equals key, in time that depends only on the lengths: the
 * bytes are compared over the key's full length with an accumulated XOR,
 * a different length does not end the comparison early. NULL given: false. */
bool access_key_equal(const char *given, const char *key);

/* Whether the request's headers carry key: x-api-key: KEY, or
 * Authorization: Bearer KEY (the scheme case-insensitive). Both are
 * checked. */
bool access_key_ok(const char *x_api_key, const char *authorization, const char *key);

/* Checks an API key's text: not empty, no control characters, no
 * leading or trailing blanks (HTTP trims them from header values, so such
 * a key could never match). Returns NULL when good, else why not. */
const char *access_key_problem(const char *key);

#endif
