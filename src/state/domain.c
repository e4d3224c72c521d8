/* Isolation domains: see domain.h. */
#include "state/domain.h"

#include <string.h>

#include "base/sha256.h"

bool domain_is_default(const uint8_t domain[DOMAIN_LEN]) {
    uint8_t any = 0;
    for (int i = 0; i < DOMAIN_LEN; i++) any |= domain[i];
    return any == 0;
}

void domain_fold(uint8_t key[32], const uint8_t domain[DOMAIN_LEN]) {
    if (domain_is_default(domain)) return;
    uint8_t in[32 + DOMAIN_LEN];
    memcpy(in, key, 32);
    memcpy(in + 32, domain, DOMAIN_LEN);
    sha256_digest(in, sizeof in, key);
}
