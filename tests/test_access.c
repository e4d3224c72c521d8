/* The server's access checks (src/server/access): Host names against DNS
 * rebinding, CORS origins, the JSON Content-Type, the API keys compared
 * over their full length, and the isolation domains of keys and salts. */
#include <stdio.h>
#include <string.h>

#include "server/access.h"
#include "test.h"

static void test_hosts(void) {
    const char *none[1] = {NULL};
    /* loopback names, with or without a port */
    const char *ok[] = {"localhost", "localhost:8080", "LOCALHOST:1",
                        "127.0.0.1", "127.0.0.1:8080", "127.255.1.2:99",
                        "[::1]",     "[::1]:8080",     "[::ffff:127.0.0.1]:80"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        CHECKF(access_host_allowed(ok[i], "127.0.0.1", none, 0), "%s", ok[i]);
    const char *bad[] = {"",
                         "evil.example",
                         "evil.example:8080",
                         "localhost.evil.example",
                         "127.0.0.1.evil.example",
                         "10.0.0.1",
                         "[fe80::1]:80",
                         "[::1",
                         "localhost:",
                         "localhost:80a",
                         "localhost:123456",
                         "::1",
                         "0.0.0.0",
                         "localhost:80:80",
                         "[::1]x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECKF(!access_host_allowed(bad[i], "127.0.0.1", none, 0), "%s", bad[i]);
    CHECK(!access_host_allowed(NULL, "127.0.0.1", none, 0));
    /* the bound address */
    CHECK(access_host_allowed("192.168.1.5:8080", "192.168.1.5", none, 0));
    CHECK(access_host_allowed("0.0.0.0:8080", "0.0.0.0", none, 0));
    CHECK(!access_host_allowed("192.168.1.6:8080", "192.168.1.5", none, 0));
    /* --allow-host: a name (any port) or name:port (that one); * any */
    const char *allow[] = {"box.lan", "pinhole.example:9000", "[fe80::1]"};
    CHECK(access_host_allowed("box.lan", "127.0.0.1", allow, 3));
    CHECK(access_host_allowed("Box.LAN:1234", "127.0.0.1", allow, 3));
    CHECK(access_host_allowed("pinhole.example:9000", "127.0.0.1", allow, 3));
    CHECK(!access_host_allowed("pinhole.example:9001", "127.0.0.1", allow, 3));
    CHECK(!access_host_allowed("pinhole.example", "127.0.0.1", allow, 3));
    CHECK(access_host_allowed("[fe80::1]:80", "127.0.0.1", allow, 3));
    CHECK(!access_host_allowed("box.lan.evil.example", "127.0.0.1", allow, 3));
    const char *any[] = {"*"};
    CHECK(access_host_allowed("evil.example", "127.0.0.1", any, 1));
}

static void test_origins(void) {
    const char *list[] = {"http://localhost:3000", "https://app.example"};
    CHECK(access_origin_allowed("http://localhost:3000", list, 2));
    CHECK(access_origin_allowed("https://APP.example", list, 2));
    CHECK(!access_origin_allowed("http://localhost:3001", list, 2));
    CHECK(!access_origin_allowed("https://app.example.evil", list, 2));
    CHECK(!access_origin_allowed(NULL, list, 2));
    CHECK(!access_origin_allowed("null", list, 2));
    const char *any[] = {"*"};
    CHECK(access_origin_allowed("http://evil.example", any, 1));
    CHECK(!access_origin_allowed("http://evil.example", list, 0));
    CHECK(access_origin_valid("*"));
    CHECK(access_origin_valid("http://localhost:3000"));
    CHECK(access_origin_valid("vscode-webview://abc"));
    CHECK(!access_origin_valid("http://localhost:3000/"));
    CHECK(!access_origin_valid("localhost:3000"));
    CHECK(!access_origin_valid("null"));
    CHECK(!access_origin_valid("http://"));
    CHECK(!access_origin_valid("://x"));
    CHECK(!access_origin_valid("http://*.example"));
}

static void test_content_type(void) {
    CHECK(access_is_json("application/json"));
    CHECK(access_is_json("Application/JSON; charset=utf-8"));
    CHECK(access_is_json(" application/json ;charset=UTF-8"));
    CHECK(!access_is_json(NULL));
    CHECK(!access_is_json(""));
    CHECK(!access_is_json("text/plain"));
    CHECK(!access_is_json("text/plain; x=application/json"));
    CHECK(!access_is_json("application/jsonp"));
    CHECK(!access_is_json("application/json-seq"));
    CHECK(!access_is_json("application/x-www-form-urlencoded"));
    CHECK(!access_is_json("multipart/form-data; boundary=x"));
}

/* access_key_index with each header given once (NULL: absent). */
static int key_of(const char *x_api_key, const char *authorization, const char *const *keys, size_t n) {
    const access_creds c = {.x_api_key = x_api_key,
                            .authorization = authorization,
                            .n_x_api_key = x_api_key != NULL,
                            .n_authorization = authorization != NULL};
    return access_key_index(&c, keys, n);
}

static void test_keys(void) {
    const char *k = "sk-0123456789abcdef";
    CHECK(access_key_equal(k, k));
    CHECK(access_key_equal("sk-0123456789abcdef", k));
    CHECK(!access_key_equal("sk-0123456789abcdeX", k)); /* same length */
    CHECK(!access_key_equal("Xk-0123456789abcdef", k));
    CHECK(!access_key_equal("sk-0123456789abcde", k));   /* a prefix */
    CHECK(!access_key_equal("sk-0123456789abcdef0", k)); /* longer */
    CHECK(!access_key_equal("", k));
    CHECK(!access_key_equal(NULL, k));
    /* a longer given key that matches the key over the key's length */
    CHECK(!access_key_equal("sk-0123456789abcdef\x01", k));
    const char *one[] = {k};
    CHECK(key_of(k, NULL, one, 1) == 0);
    CHECK(key_of(NULL, "Bearer sk-0123456789abcdef", one, 1) == 0);
    CHECK(key_of(NULL, "bearer sk-0123456789abcdef", one, 1) == 0);
    CHECK(key_of(k, "Bearer sk-0123456789abcdef", one, 1) == 0); /* the same key in both */
    CHECK(key_of(NULL, "sk-0123456789abcdef", one, 1) == -1);    /* no scheme */
    CHECK(key_of(NULL, "Basic sk-0123456789abcdef", one, 1) == -1);
    CHECK(key_of("wrong", "Bearer wrong", one, 1) == -1);
    CHECK(key_of(NULL, NULL, one, 1) == -1);
    CHECK(key_of(k, NULL, one, 0) == -1);
    /* two credentials that differ are refused, whichever of them is valid */
    CHECK(key_of("wrong", "Bearer sk-0123456789abcdef", one, 1) == -1);
    CHECK(key_of(k, "Bearer wrong", one, 1) == -1);
    CHECK(key_of(k, "Basic dXNlcjpwYXNz", one, 1) == -1);
    CHECK(key_of(k, "Bearer sk-0123456789abcdef ", one, 1) == -1); /* not the same bytes */
    /* a credential header given twice is refused, even with the valid key twice */
    access_creds twice = {.authorization = "Bearer sk-0123456789abcdef", .n_authorization = 2};
    CHECK(access_key_index(&twice, one, 1) == -1);
    CHECK(access_creds_problem(&twice) != NULL);
    twice = (access_creds){.x_api_key = k, .n_x_api_key = 2};
    CHECK(access_key_index(&twice, one, 1) == -1);
    CHECK(access_creds_problem(&twice) != NULL);
    access_creds fine = {
        .x_api_key = k, .n_x_api_key = 1, .authorization = "Bearer sk-0123456789abcdef", .n_authorization = 1};
    CHECK(access_creds_problem(&fine) == NULL);
    /* several keys: the index of the one given, by either header */
    const char *three[] = {"sk-alice-0001", "sk-bob-0002", "sk-carol-000003"};
    for (int i = 0; i < 3; i++) {
        char bearer[64];
        snprintf(bearer, sizeof bearer, "Bearer %s", three[i]);
        CHECKF(key_of(three[i], NULL, three, 3) == i, "key %d by x-api-key", i);
        CHECKF(key_of(NULL, bearer, three, 3) == i, "key %d by Authorization", i);
        CHECKF(key_of(three[i], bearer, three, 3) == i, "key %d by both", i);
        CHECKF(key_of("wrong", bearer, three, 3) == -1, "key %d with a wrong x-api-key", i);
    }
    CHECK(key_of("sk-alice-000", NULL, three, 3) == -1);                  /* a prefix */
    CHECK(key_of("sk-bob-00020", NULL, three, 3) == -1);                  /* longer */
    CHECK(key_of("sk-alice-0001", "Bearer sk-bob-0002", three, 3) == -1); /* two keys at once */
    CHECK(access_key_problem("sk-x") == NULL);
    CHECK(access_key_problem("") != NULL);
    CHECK(access_key_problem(NULL) != NULL);
    CHECK(access_key_problem("a\tb") != NULL);
    CHECK(access_key_problem(" sk") != NULL);
    CHECK(access_key_problem("sk ") != NULL);
}

/* Request targets in absolute form (RFC 9112, 3.2.2). */
static void test_targets(void) {
    char a[64];
    size_t at;
    CHECK(access_target_split("/health", a, sizeof a, &at) == 0 && !a[0] && at == 0);
    CHECK(access_target_split("*", a, sizeof a, &at) == 0);
    CHECK(access_target_split("http://127.0.0.1:8080/health", a, sizeof a, &at) == 1);
    CHECK(!strcmp(a, "127.0.0.1:8080") && at == strlen("http://127.0.0.1:8080"));
    CHECK(access_target_split("HTTPS://LocalHost/v1/models?x=1", a, sizeof a, &at) == 1);
    CHECK(!strcmp(a, "LocalHost") && at == strlen("HTTPS://LocalHost"));
    CHECK(access_target_split("http://[::1]:80", a, sizeof a, &at) == 1 && !strcmp(a, "[::1]:80") && at == 15);
    CHECK(access_target_split("http:///health", a, sizeof a, &at) == -1);         /* no host */
    CHECK(access_target_split("http://user@localhost/", a, sizeof a, &at) == -1); /* userinfo */
    CHECK(access_target_split("http://local%68ost/", a, sizeof a, &at) == -1);    /* escaped */
    char longer[100];
    snprintf(longer, sizeof longer, "http://%070d/", 0);
    CHECK(access_target_split(longer, a, sizeof a, &at) == -1);
    CHECK(access_target_split("ftp://localhost/", a, sizeof a, &at) == 0);
}

static bool is_zero(const uint8_t d[32]) {
    static const uint8_t zero[32];
    return !memcmp(d, zero, 32);
}

static void test_domains(void) {
    uint8_t ka[32], kb[32], d[8][32];
    access_key_domain("sk-alice-0001", ka);
    access_key_domain("sk-bob-0002", kb);
    CHECK(!is_zero(ka) && memcmp(ka, kb, 32));
    uint8_t again[32];
    access_key_domain("sk-alice-0001", again);
    CHECK(!memcmp(ka, again, 32)); /* a restart finds a key's state again */
    access_domain(NULL, NULL, 0, d[0]);
    CHECK(is_zero(d[0])); /* neither: the default domain */
    access_domain(NULL, "s1", 2, d[1]);
    access_domain(NULL, "s2", 2, d[2]);
    access_domain(ka, NULL, 0, d[3]);
    access_domain(kb, NULL, 0, d[4]);
    access_domain(ka, "s1", 2, d[5]);
    access_domain(kb, "s1", 2, d[6]);
    access_domain(NULL, "s1\0", 3, d[7]); /* every byte of the salt counts */
    for (int i = 1; i < 8; i++) {
        CHECKF(!is_zero(d[i]), "domain %d is the default one", i);
        for (int j = 1; j < i; j++) CHECKF(memcmp(d[i], d[j], 32), "domains %d and %d are the same", i, j);
    }
    access_domain(ka, "s1", 2, again);
    CHECK(!memcmp(d[5], again, 32));
}

int main(void) {
    test_hosts();
    test_origins();
    test_content_type();
    test_keys();
    test_targets();
    test_domains();
    TEST_END();
}
