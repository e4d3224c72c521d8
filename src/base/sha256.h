/* SHA-256 through libcrypto's EVP interface (SHA-NI accelerated where the
 * CPU has it), and lowercase hex. Every identity in pinhole (docs/state-cache.md,
 * Identity) is one of these digests. */
#ifndef PH_BASE_SHA256_H
#define PH_BASE_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PH_SHA256_LEN 32

/* One-shot digest of n bytes. libcrypto fails here only when it cannot
 * allocate a few hundred bytes; a digest that silently is not one would
 * poison every cache keyed by it, so that failure aborts the process with a
 * message instead of returning. */
void sha256_digest(const void *p, size_t n, uint8_t out[PH_SHA256_LEN]);

/* Incremental digest: init, any number of updates, then final (which also
 * frees the context). A context abandoned half way must be given to
 * sha256_discard. */
typedef struct sha256_ctx {
    void *md;   /* EVP_MD_CTX * */
    int failed; /* an update failed: final reports it */
} sha256_ctx;

/* Returns 0, or -1 if libcrypto cannot set up a context (out of memory). */
int sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *p, size_t n);
/* Writes the digest and frees the context. Returns 0, or -1 if an update or
 * the final step failed inside libcrypto (out is then zeroed). */
int sha256_final(sha256_ctx *c, uint8_t out[PH_SHA256_LEN]);
/* Frees a context without producing a digest; safe on a finalized one. */
void sha256_discard(sha256_ctx *c);

/* Lowercase hex of n bytes into out, which holds 2n + 1 chars (NUL-ended). */
void hex_encode(const uint8_t *p, size_t n, char *out);
/* The n bytes written as 2n lowercase hex chars at s, into out; false (out
 * partly written) if any of them is not a lowercase hex digit. */
bool hex_decode(const char *s, size_t n, uint8_t *out);

#endif
