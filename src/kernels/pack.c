/* Repacking of weight matrices into 16-row groups (layouts in kernels_impl.h)
 * and the extras that the packed kernels read after an activation row. Plain
 * C: it runs once per matrix at load, and per activation row before a
 * product (a few adds per block). */
#include <string.h>

#include "kernels/kernels_impl.h"

size_t pk_block_bytes(int type) {
    switch (type) {
    case PH_TYPE_F16: return PH_PK_ROWS * sizeof(f16_bits);
    case PH_TYPE_Q8_0: return PH_PK_Q8_0_BYTES;
    case PH_TYPE_Q4_0: return PH_PK_Q4_0_BYTES;
    case PH_TYPE_Q4_K: return PH_PK_Q4_K_BYTES;
    case PH_TYPE_Q5_K: return PH_PK_Q5_K_BYTES;
    case PH_TYPE_Q6_K: return PH_PK_Q6_K_BYTES;
    default: return 0;
    }
}

typedef struct {
    float d;
    int32_t c128;
} pk_q8_0_extra;

size_t pk_act_bytes(int type, int64_t n) {
    if (type == PH_TYPE_F16) return (size_t)n * sizeof(float);
    int dt = type_get(type)->dot_type;
    size_t base = PH_PK_EXTRAS_AT(type_row_bytes(dt, n));
    if (dt == PH_TYPE_Q8_0) return base + (size_t)(n / PH_QK8_0) * sizeof(pk_q8_0_extra);
    return base + (size_t)(n / PH_QK_K) * 8 * sizeof(int16_t);
}

void pk_act_extras(int type, void *row, int64_t n) {
    if (type == PH_TYPE_F16) return;
    if (type_get(type)->dot_type == PH_TYPE_Q8_0) {
        const block_q8_0 *b = row;
        pk_q8_0_extra *e = (pk_q8_0_extra *)((uint8_t *)row + PH_PK_EXTRAS_AT(type_row_bytes(PH_TYPE_Q8_0, n)));
        for (int64_t i = 0; i < n / PH_QK8_0; i++) {
            int s = 0;
            for (int j = 0; j < PH_QK8_0; j++) s += b[i].qs[j];
            e[i] = (pk_q8_0_extra){fp16_to_f32(b[i].d), 128 * s};
        }
    } else {
        const block_q8_K *b = row;
        int16_t *e = (int16_t *)((uint8_t *)row + PH_PK_EXTRAS_AT(type_row_bytes(PH_TYPE_Q8_K, n)));
        for (int64_t i = 0; i < n / PH_QK_K; i++)
            for (int j = 0; j < 8; j++) e[8 * i + j] = (int16_t)(b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
    }
}

/* One group block from the 16 source blocks src[l] (NULL: a padding row). */

static inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static void pack_f16(const void *const *src, uint8_t *dst) {
    for (int l = 0; l < PH_PK_ROWS; l++) {
        f16_bits h = 0;
        if (src[l]) memcpy(&h, src[l], sizeof h);
        memcpy(dst + 2 * l, &h, sizeof h);
    }
}

static void pack_q8_0(const void *const *src, uint8_t *dst) {
    f16_bits *d = (f16_bits *)dst;
    uint8_t *q = dst + 32;
    for (int l = 0; l < PH_PK_ROWS; l++) {
        const block_q8_0 *b = src[l];
        d[l] = b ? b->d : 0;
        for (int s = 0; s < 8; s++)
            wr32(q + 64 * s + 4 * l, b ? rd32((const uint8_t *)b->qs + 4 * s) ^ 0x80808080u : 0x80808080u);
    }
}

static void pack_q4_0(const void *const *src, uint8_t *dst) {
    f16_bits *d = (f16_bits *)dst;
    uint8_t *q = dst + 32;
    for (int l = 0; l < PH_PK_ROWS; l++) {
        const block_q4_0 *b = src[l];
        uint8_t u[PH_QK4_0];
        for (int i = 0; i < 16; i++) {
            u[i] = b ? b->qs[i] & 15 : 8;
            u[i + 16] = b ? b->qs[i] >> 4 : 8;
        }
        d[l] = b ? b->d : 0;
        for (int v = 0; v < 4; v++)
            for (int k = 0; k < 4; k++) q[64 * v + 4 * l + k] = (uint8_t)(u[8 * v + k] | u[8 * v + 4 + k] << 4);
    }
}

/* Q4_K and Q5_K (Q5 = 1): the Q4_K part, and for Q5_K the fifth bits. Four
 * inputs at a time as 32-bit words: sub-block j = 2c + h is the low (h = 0)
 * or high nibbles of qs[32c .. 32c+31], and fifth bit j of qh[0 .. 31]. */
static inline __attribute__((always_inline)) void pack_k4(const void *const *src, uint8_t *dst, const int Q5) {
    f16_bits *d = (f16_bits *)dst, *dmin = d + 16;
    uint8_t *sc = dst + 64, *mn = dst + 192, *q = dst + 320;
    const int qstride = Q5 ? 320 : 256; /* a sub-block's nibbles, then (Q5_K) its fifth bits */
    for (int l = 0; l < PH_PK_ROWS; l++) {
        const uint8_t *blk = src[l];
        uint8_t s[8] = {0}, m[8] = {0};
        if (!blk) {
            d[l] = dmin[l] = 0;
            for (int j = 0; j < 8; j++) {
                sc[16 * j + l] = 0;
                mn[32 * (j / 2) + 2 * l + j % 2] = 0;
                for (int v = 0; v < 4; v++) wr32(q + qstride * j + 64 * v + 4 * l, 0);
                if (Q5) wr32(q + qstride * j + 256 + 4 * l, 0);
            }
            continue;
        }
        const block_q5_K *b5 = (const block_q5_K *)blk;
        const block_q4_K *b4 = (const block_q4_K *)blk;
        const uint8_t *qs = Q5 ? b5->qs : b4->qs;
        d[l] = Q5 ? b5->d : b4->d;
        dmin[l] = Q5 ? b5->dmin : b4->dmin;
        k4_scales_ref(Q5 ? b5->scales : b4->scales, s, m);
        for (int j = 0; j < 8; j++) {
            sc[16 * j + l] = s[j];
            mn[32 * (j / 2) + 2 * l + j % 2] = m[j];
            const uint8_t *qc = qs + 32 * (j / 2);
            uint32_t hb = 0;
            for (int v = 0; v < 4; v++) {
                uint32_t w0 = rd32(qc + 8 * v), w1 = rd32(qc + 8 * v + 4);
                uint32_t out = j % 2 ? ((w0 >> 4) & 0x0f0f0f0fu) | (w1 & 0xf0f0f0f0u)
                                     : (w0 & 0x0f0f0f0fu) | (w1 & 0x0f0f0f0fu) << 4;
                wr32(q + qstride * j + 64 * v + 4 * l, out);
                if (Q5)
                    hb |= ((rd32(b5->qh + 8 * v) >> j) & 0x01010101u) << (2 * v) |
                          ((rd32(b5->qh + 8 * v + 4) >> j) & 0x01010101u) << (2 * v + 1);
            }
            if (Q5) wr32(q + qstride * j + 256 + 4 * l, hb);
        }
    }
}

static void pack_q4_K(const void *const *src, uint8_t *dst) { pack_k4(src, dst, 0); }
static void pack_q5_K(const void *const *src, uint8_t *dst) { pack_k4(src, dst, 1); }

/* Q6_K, four inputs at a time: sub-block k's inputs 16k + i are q's
 * (k >> 3) half, quarter qq = (k & 7) >> 1, offset 16 (k & 1) + i: low bits
 * in the nibble qq >> 1 of ql[64 h + 32 (qq & 1) + ...], high bits 2 qq of
 * qh[32 h + ...]. */
static void pack_q6_K(const void *const *src, uint8_t *dst) {
    f16_bits *d = (f16_bits *)dst;
    int8_t *sc = (int8_t *)(dst + 32);
    uint8_t *ql = dst + 288, *qh = dst + 288 + 128;
    for (int l = 0; l < PH_PK_ROWS; l++) {
        const block_q6_K *b = src[l];
        d[l] = b ? b->d : 0;
        for (int k = 0; k < 16; k++) {
            sc[32 * (k / 2) + 2 * l + k % 2] = b ? b->scales[k] : 0;
            if (!b) {
                wr32(ql + 192 * k + 4 * l, 0);
                wr32(ql + 192 * k + 64 + 4 * l, 0);
                wr32(qh + 192 * k + 4 * l, 0);
                continue;
            }
            const int h = k >> 3, qq = (k & 7) >> 1, lb = 16 * (k & 1);
            const uint8_t *L = b->ql + 64 * h + 32 * (qq & 1) + lb, *H = b->qh + 32 * h + lb;
            const unsigned sh = 4u * (unsigned)(qq >> 1);
            for (int v = 0; v < 2; v++)
                wr32(ql + 192 * k + 64 * v + 4 * l,
                     ((rd32(L + 8 * v) >> sh) & 0x0f0f0f0fu) | ((rd32(L + 8 * v + 4) >> sh) & 0x0f0f0f0fu) << 4);
            uint32_t hb = 0;
            for (int t = 0; t < 4; t++) hb |= ((rd32(H + 4 * t) >> (2 * qq)) & 0x03030303u) << (2 * t);
            wr32(qh + 192 * k + 4 * l, hb);
        }
    }
}

typedef struct pack_job {
    int type;
    const uint8_t *data;
    size_t row_bytes;
    int64_t n_in, n_out;
    uint8_t *dst;
} pack_job;

static void pack_groups(void *ctx, int ith, int nth) {
    const pack_job *j = ctx;
    const type_info *ti = type_get(j->type);
    const size_t bb = pk_block_bytes(j->type);
    const int64_t nb = j->n_in / ti->block_elems;
    void (*pack)(const void *const *, uint8_t *) = j->type == PH_TYPE_F16    ? pack_f16
                                                   : j->type == PH_TYPE_Q8_0 ? pack_q8_0
                                                   : j->type == PH_TYPE_Q4_0 ? pack_q4_0
                                                   : j->type == PH_TYPE_Q4_K ? pack_q4_K
                                                   : j->type == PH_TYPE_Q5_K ? pack_q5_K
                                                                             : pack_q6_K;
    long g0, g1;
    tpool_split_range((long)((j->n_out + PH_PK_ROWS - 1) / PH_PK_ROWS), ith, nth, &g0, &g1);
    for (long g = g0; g < g1; g++) {
        uint8_t *out = j->dst + (size_t)g * (size_t)nb * bb;
        const int64_t o0 = (int64_t)g * PH_PK_ROWS;
        for (int64_t i = 0; i < nb; i++, out += bb) {
            const void *src[PH_PK_ROWS];
            for (int l = 0; l < PH_PK_ROWS; l++)
                src[l] = o0 + l < j->n_out ? j->data + (size_t)(o0 + l) * j->row_bytes + (size_t)i * ti->block_bytes
                                           : NULL;
            pack(src, out);
        }
    }
}

void pk_pack(tpool *pool, int type, const void *data, size_t row_bytes, int64_t n_in, int64_t n_out, void *dst) {
    pack_job j = {type, data, row_bytes, n_in, n_out, dst};
    tpool_run(pool, pack_groups, &j);
}

void mat_pack(tpool *pool, wmat *m, void *dst) {
    pk_pack(pool, m->type, m->data, m->row_bytes, m->n_in, m->n_out, dst);
    m->packed = dst;
}
