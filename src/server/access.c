/* Who may talk to the server: see access.h. */
#include "server/access.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/sha256.h"

/* Splits a Host value into its name (brackets kept for IPv6) and checks
 * that what follows is nothing or ":PORT". Returns false when malformed. */
static bool split_host(const char *host, char *name, size_t cap, bool *has_port) {
    const char *end;
    if (host[0] == '[') {
        const char *rb = strchr(host, ']');
        if (!rb) return false;
        end = rb + 1;
    } else {
        end = strchr(host, ':');
        if (!end) end = host + strlen(host);
    }
    size_t n = (size_t)(end - host);
    if (n == 0 || n >= cap) return false;
    memcpy(name, host, n);
    name[n] = '\0';
    *has_port = *end == ':';
    if (!*end) return true;
    if (*end != ':') return false;
    size_t digits = 0;
    for (const char *p = end + 1; *p; p++, digits++)
        if (*p < '0' || *p > '9') return false;
    return digits >= 1 && digits <= 5;
}

static bool is_loopback(const char *name) {
    if (!strcasecmp(name, "localhost")) return true;
    if (name[0] == '[') {
        char v6[64];
        size_t n = strlen(name);
        if (n < 3 || n - 2 >= sizeof v6 || name[n - 1] != ']') return false;
        memcpy(v6, name + 1, n - 2);
        v6[n - 2] = '\0';
        struct in6_addr a;
        if (inet_pton(AF_INET6, v6, &a) != 1) return false;
        if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
        return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
    }
    struct in_addr a;
    return inet_pton(AF_INET, name, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

bool access_host_allowed(const char *host, const char *bound, const char *const *allowed, size_t n_allowed) {
    if (!host || !*host) return false;
    for (size_t i = 0; i < n_allowed; i++)
        if (!strcmp(allowed[i], "*")) return true;
    char name[256];
    bool has_port;
    if (!split_host(host, name, sizeof name, &has_port)) return false;
    if (is_loopback(name)) return true;
    if (bound) {
        struct in_addr a, b;
        if (inet_pton(AF_INET, name, &a) == 1 && inet_pton(AF_INET, bound, &b) == 1) {
            if (a.s_addr == b.s_addr) return true;
        } else if (!strcasecmp(name, bound)) {
            return true;
        }
    }
    for (size_t i = 0; i < n_allowed; i++) {
        char aname[256];
        bool aport;
        if (!split_host(allowed[i], aname, sizeof aname, &aport)) continue;
        if (aport ? !strcasecmp(allowed[i], host) : !strcasecmp(aname, name)) return true;
    }
    return false;
}

bool access_origin_allowed(const char *origin, const char *const *list, size_t n) {
    if (!origin || !*origin) return false;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i], "*") || !strcasecmp(list[i], origin)) return true;
    return false;
}

bool access_origin_valid(const char *s) {
    if (!strcmp(s, "*")) return true;
    const char *sep = strstr(s, "://");
    if (!sep || sep == s) return false;
    for (const char *p = s; p < sep; p++) {
        char c = *p;
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        bool ok = alpha || (p > s && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'));
        if (!ok) return false;
    }
    const char *h = sep + 3;
    if (!*h) return false;
    for (const char *p = h; *p; p++)
        if (*p == '/' || *p == '?' || *p == '#' || *p == '*' || (unsigned char)*p <= ' ' || *p == 0x7f) return false;
    return true;
}

bool access_is_json(const char *ct) {
    if (!ct) return false;
    while (*ct == ' ' || *ct == '\t') ct++;
    static const char want[] = "application/json";
    if (strncasecmp(ct, want, sizeof want - 1)) return false;
    const char *p = ct + sizeof want - 1;
    while (*p == ' ' || *p == '\t') p++;
    return *p == '\0' || *p == ';';
}

bool access_key_equal(const char *given, const char *key) {
    if (!given || !key) return false;
    /* the lengths are the client's own and the server's fixed one: the
     * loop's length and the branch on i < gl depend on no secret byte */
    size_t gl = strlen(given), kl = strlen(key);
    unsigned acc = 0;
    for (size_t i = 0; i < kl; i++) {
        unsigned char g = i < gl ? (unsigned char)given[i] : 0;
        acc |= (unsigned)(g ^ (unsigned char)key[i]);
    }
    size_t diff = gl ^ kl;
    return (acc | (unsigned)(diff != 0)) == 0;
}

/* The index of the key equal to given, or -1: every key compared, the
 * index picked with masks (keys differ, so at most one matches). */
static int key_index(const char *given, const char *const *keys, size_t n) {
    unsigned found = 0; /* index + 1 */
    for (size_t i = 0; i < n; i++) {
        unsigned mask = 0u - (unsigned)access_key_equal(given, keys[i]);
        found |= mask & (unsigned)(i + 1);
    }
    return (int)found - 1;
}

/* The key an Authorization value carries ("Bearer KEY"), or NULL. */
static const char *bearer_of(const char *authorization) {
    if (!authorization || strncasecmp(authorization, "Bearer ", 7)) return NULL;
    const char *b = authorization + 7;
    while (*b == ' ') b++;
    return b;
}

const char *access_creds_problem(const access_creds *c) {
    if (c->n_x_api_key > 1) return "the request has more than one x-api-key header: send the key once";
    if (c->n_authorization > 1) return "the request has more than one Authorization header: send the key once";
    if (c->x_api_key && c->authorization) {
        const char *b = bearer_of(c->authorization);
        if (!b || strcmp(b, c->x_api_key))
            return "the request's x-api-key and Authorization headers carry different credentials: send one key "
                   "(or the same key in both)";
    }
    return NULL;
}

int access_key_index(const access_creds *c, const char *const *keys, size_t n) {
    if (access_creds_problem(c)) return -1;
    return key_index(c->x_api_key ? c->x_api_key : bearer_of(c->authorization), keys, n);
}

int access_target_split(const char *target, char *authority, size_t cap, size_t *path_at) {
    authority[0] = '\0';
    *path_at = 0;
    size_t scheme;
    if (!strncasecmp(target, "http://", 7)) scheme = 7;
    else if (!strncasecmp(target, "https://", 8)) scheme = 8;
    else return 0;
    const char *a = target + scheme;
    size_t n = strcspn(a, "/?#");
    if (n == 0 || n >= cap || memchr(a, '@', n) || memchr(a, '%', n)) return -1;
    memcpy(authority, a, n);
    authority[n] = '\0';
    *path_at = scheme + n;
    return 1;
}

const char *access_key_problem(const char *key) {
    if (!key || !*key) return "the key is empty";
    for (const char *p = key; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return "the key has a control character (a tab or a second line?)";
    size_t n = strlen(key);
    if (key[0] == ' ' || key[n - 1] == ' ')
        return "the key starts or ends with a space (HTTP drops those from headers)";
    return NULL;
}

/* The digests below hash a fixed-size record: a label, then digests (so
 * that no length can shift one field into the next). */
void access_key_domain(const char *key, uint8_t out[32]) {
    struct {
        char label[24];
        uint8_t key[32];
    } in;
    memset(&in, 0, sizeof in);
    snprintf(in.label, sizeof in.label, "%s", "pinhole key domain 1");
    sha256_digest(key, strlen(key), in.key);
    sha256_digest(&in, sizeof in, out);
}

void access_domain(const uint8_t *key_domain, const char *salt, size_t salt_len, uint8_t out[32]) {
    memset(out, 0, 32);
    if (!key_domain && !salt) return;
    struct {
        char label[24];
        uint8_t key_domain[32];
        uint8_t salted;
        uint8_t salt[32];
    } in;
    memset(&in, 0, sizeof in);
    snprintf(in.label, sizeof in.label, "%s", "pinhole domain 1");
    if (key_domain) memcpy(in.key_domain, key_domain, 32);
    if (salt) {
        in.salted = 1;
        sha256_digest(salt, salt_len, in.salt);
    }
    sha256_digest(&in, sizeof in, out);
}
