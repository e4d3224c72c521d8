/* Scalar f16 / bf16 conversions (docs/numerics.md, F16 and BF16), written on the bit patterns so
 * they do not depend on compiler flags or the FPU rounding mode. */
#include <string.h>

#include "kernels/kernels_impl.h"

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float fp16_to_f32(f16_bits h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in f32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / NaN */
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* Shifts m right by s with round-to-nearest-even on the dropped bits. */
static inline uint32_t shift_rne(uint32_t m, unsigned s) {
    uint32_t q = m >> s;
    uint32_t rem = m & ((1u << s) - 1);
    uint32_t half = 1u << (s - 1);
    if (rem > half || (rem == half && (q & 1))) q++;
    return q;
}

f16_bits f32_to_fp16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return sign | 0x7e00;  /* NaN (sign kept, as F16C does) */
    if (u >= 0x47800000u) return sign | 0x7c00; /* >= 65536 (or inf): inf */
    if (u >= 0x38800000u) {
        /* normal half: rebias the exponent, round the 13 dropped bits; a
         * carry out of the mantissa bumps the exponent (up to inf) correctly */
        return sign | (uint16_t)shift_rne(u - 0x38000000u, 13);
    }
    if (u <= 0x33000000u) return sign; /* <= 2^-25: rounds to zero (2^-25 is a tie to even 0) */
    /* subnormal half: value = m * 2^(e-150), in units of 2^-24 that is m >> (126-e) */
    uint32_t e = u >> 23;
    uint32_t m = (u & 0x7fffffu) | 0x800000u;
    return sign | (uint16_t)shift_rne(m, 126 - e);
}

float bfp16_to_f32(bf16_bits h) { return bits_f32((uint32_t)h << 16); }

bf16_bits f32_to_bfp16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_bits)((u >> 16) | 0x40); /* quiet NaN */
    return (bf16_bits)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

void act_f16_ref(const float *src, void *dst, int64_t n) {
    f16_bits *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = f32_to_fp16(src[i]);
}

void act_bf16_ref(const float *src, void *dst, int64_t n) {
    bf16_bits *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = f32_to_bfp16(src[i]);
}
