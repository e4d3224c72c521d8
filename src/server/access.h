/* Who may talk to the server (issue 13): the Host check against DNS
 * rebinding, the CORS origin list, the JSON Content-Type of API bodies,
 * the API keys, compared in constant time, and the isolation domain a
 * request runs in. Pure functions of strings, so that they can be tested
 * without a socket. */
#ifndef PH_SERVER_ACCESS_H
#define PH_SERVER_ACCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* The credential headers of a request: each one's (first) value, NULL when
 * absent, and how many times it came. */
typedef struct access_creds {
    const char *x_api_key, *authorization;
    int n_x_api_key, n_authorization;
} access_creds;

/* Why a request's credentials are refused whatever the keys are, or NULL:
 * a credential header given twice, or both headers given with credentials
 * that differ (x-api-key: K and Authorization: Bearer K must carry the same
 * K; any other Authorization beside x-api-key differs). The comparison is
 * between the client's own strings: no key is read. */
const char *access_creds_problem(const access_creds *c);

/* Which of the n keys the request's headers carry (x-api-key: KEY, or
 * Authorization: Bearer KEY, the scheme case-insensitive): its index, or
 * -1 for none (or for credentials access_creds_problem refuses). The key
 * given is compared with every key, with no early exit, and the index is
 * picked without a branch on which key matched: the time depends on the
 * keys' lengths only. The keys must differ from each other. */
int access_key_index(const access_creds *c, const char *const *keys, size_t n);

/* A request target (as sent, before percent-decoding) in absolute form
 * (http://HOST[:PORT]/PATH, the scheme case-insensitive: RFC 9112, 3.2.2)
 * is split: its authority is written to authority (cap bytes) and *path_at
 * is where its path begins (its length from the start; the target decoded
 * has the same prefix, since an authority with '%' is refused). Returns 1
 * for that form, 0 for any other (authority "", *path_at 0), -1 for an
 * absolute form that is not sound (no host, userinfo, '%' in the
 * authority, longer than cap). */
int access_target_split(const char *target, char *authority, size_t cap, size_t *path_at);

/* Checks an API key's text: not empty, no control characters, no
 * leading or trailing blanks (HTTP trims them from header values, so such
 * a key could never match). Returns NULL when good, else why not. */
const char *access_key_problem(const char *key);

/* Isolation domains (state/domain.h: saved state and picture embeddings
 * are reused only within the domain that made them). A key's domain, used
 * when a server has several keys (each key then its own domain): SHA-256
 * of a label and the key's SHA-256. */
void access_key_domain(const char *key, uint8_t out[32]);
/* A request's domain from its key's domain (NULL: keys are not isolated)
 * and its cache_salt (NULL: none): all zero, the default domain, when it
 * has neither; else SHA-256 of a label, the key's domain (or 32 zero
 * bytes) and the salt's SHA-256. */
void access_domain(const uint8_t *key_domain, const char *salt, size_t salt_len, uint8_t out[32]);

#endif
