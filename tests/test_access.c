/* The server's access checks (src/server/access): Host names against DNS
 * rebinding, CORS origins, the JSON Content-Type, and the API key compared
 * over its full length. */
#include <string.h>

#include "server/access.h"
#include "test.h"

static void test_hosts(void) {
    const char *none[1] = {NULL};
    /* loopback names, with or without a port */
    const char *ok[] = {"localhost", "localhost:8080", "LOCALHOST:1", "127.0.0.1", "127.0.0.1:8080", "127.255.1.2:99",
                        "[::1]", "[::1]:8080", "[::ffff:127.0.0.1]:80"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        CHECKF(access_host_allowed(ok[i], "127.0.0.1", none, 0), "%s", ok[i]);
    const char *bad[] = {"", "evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.evil.example",
                         "10.0.0.1", "[fe80::1]:80", "[::1", "localhost:", "localhost:80a", "localhost:123456",
                         "::1", "0.0.0.0", "localhost:80:80", "[::1]x"};
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

static void test_keys(void) {
    const char *k = "sk-0123456789abcdef";
    CHECK(access_key_equal(k, k));
    CHECK(access_key_equal("sk-0123456789abcdef", k));
    CHECK(!access_key_equal("sk-0123456789abcdeX", k)); /* same length */
    CHECK(!access_key_equal("Xk-0123456789abcdef", k));
    CHECK(!access_key_equal("sk-0123456789abcde", k));  /* a prefix */
    CHECK(!access_key_equal("sk-0123456789abcdef0", k)); /* longer */
    CHECK(!access_key_equal("", k));
    CHECK(!access_key_equal(NULL, k));
    /* a longer given key that matches the key over the key's length */
    CHECK(!access_key_equal("sk-0123456789abcdef\x01", k));
    CHECK(access_key_ok(k, NULL, k));
    CHECK(access_key_ok(NULL, "Bearer sk-0123456789abcdef", k));
    CHECK(access_key_ok(NULL, "bearer sk-0123456789abcdef", k));
    CHECK(access_key_ok("wrong", "Bearer sk-0123456789abcdef", k));
    CHECK(access_key_ok(k, "Bearer wrong", k));
    CHECK(!access_key_ok(NULL, "sk-0123456789abcdef", k)); /* no scheme */
    CHECK(!access_key_ok(NULL, "Basic sk-0123456789abcdef", k));
    CHECK(!access_key_ok("wrong", "Bearer wrong", k));
    CHECK(!access_key_ok(NULL, NULL, k));
    CHECK(access_key_problem("sk-x") == NULL);
    CHECK(access_key_problem("") != NULL);
    CHECK(access_key_problem(NULL) != NULL);
    CHECK(access_key_problem("a\tb") != NULL);
    CHECK(access_key_problem(" sk") != NULL);
    CHECK(access_key_problem("sk ") != NULL);
}

int main(void) {
    test_hosts();
    test_origins();
    test_content_type();
    test_keys();
    TEST_END();
}
