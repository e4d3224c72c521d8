/* Isolation domains (issue 13): a request runs in one, and saved state is
 * reused only within the domain that made it, so that one client cannot
 * learn another's prompt or pictures from what is reused (cached_tokens,
 * timing).
 *
 * A domain is 32 bytes (the server makes it a SHA-256 of the request's
 * cache_salt and, with several API keys, of its key); all zero is the
 * default domain, the one of every request that names none. A domain is
 * part of the exact conditioning of what is saved (docs/state-cache.md, Isolation domains): a sequence's
 * provenance carries it (seq_state.domain: prefixes of different domains
 * share no row), and the keys that find saved things (embed_key, the disk
 * tier's chained keys, the picture memo) fold it in, so a lookup of one
 * domain never finds another's entry. The default domain folds in nothing:
 * its keys are those made before domains existed, and caches written then
 * stay valid for it. */
#ifndef PH_STATE_DOMAIN_H
#define PH_STATE_DOMAIN_H

#include <stdbool.h>
#include <stdint.h>

#define DOMAIN_LEN 32

bool domain_is_default(const uint8_t domain[DOMAIN_LEN]);
/* Makes key a key of the domain: SHA-256(key, domain); the default domain
 * leaves it as it is. */
void domain_fold(uint8_t key[32], const uint8_t domain[DOMAIN_LEN]);

#endif
