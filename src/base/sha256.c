#include "base/sha256.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sha256_digest(const void *p, size_t n, uint8_t out[PH_SHA256_LEN]) {
    if (!EVP_Digest(p, n, out, NULL, EVP_sha256(), NULL)) {
        fprintf(stderr, "pinhole: error: libcrypto could not compute a SHA-256 digest (out of memory?)\n");
        abort();
    }
}

int sha256_init(sha256_ctx *c) {
    c->failed = 0;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    c->md = md;
    if (!md) return -1;
    if (!EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
        EVP_MD_CTX_free(md);
        c->md = NULL;
        return -1;
    }
    return 0;
}

void sha256_update(sha256_ctx *c, const void *p, size_t n) {
    if (c->failed || !c->md || n == 0) return;
    if (!EVP_DigestUpdate((EVP_MD_CTX *)c->md, p, n)) c->failed = 1;
}

int sha256_final(sha256_ctx *c, uint8_t out[PH_SHA256_LEN]) {
    int ok = c->md && !c->failed && EVP_DigestFinal_ex((EVP_MD_CTX *)c->md, out, NULL);
    sha256_discard(c);
    if (!ok) memset(out, 0, PH_SHA256_LEN);
    return ok ? 0 : -1;
}

void sha256_discard(sha256_ctx *c) {
    EVP_MD_CTX_free((EVP_MD_CTX *)c->md); /* NULL is allowed */
    c->md = NULL;
}

static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

bool hex_decode(const char *s, size_t n, uint8_t *out) {
    for (size_t i = 0; i < n; i++) {
        int hi = hex_val(s[2 * i]), lo = hi < 0 ? -1 : hex_val(s[2 * i + 1]);
        if (hi < 0 || lo < 0) return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

void hex_encode(const uint8_t *p, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}
