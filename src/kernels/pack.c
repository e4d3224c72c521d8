/* Repacking of weight matrices into 16-row groups (layouts in kernels_impl.h)
 * and the extras that the packed kernels read after an activation row. Plain
 * C: it runs once per matrix at load, and per activation row before a
 * product (a few adds per block). */
#include <string.h>

#include "kernels/kernels_impl.h"

size_t ph_pk_block_bytes(int type) {
    switch (type) {
    case PH_TYPE_F16: return PH_PK_ROWS * sizeof(ph_f16);
    case PH_TYPE_Q8_0: return PH_PK_Q8_0_BYTES;
    case PH_TYPE_Q4_0: return PH_PK_Q4_0_BYTES;
    case PH_TYPE_Q4_K: return PH_PK_Q4_K_BYTES;
    case PH_TYPE_Q5_K: return PH_PK_Q5_K_BYTES;
    case PH_TYPE_Q6_K: return PH_PK_Q6_K_BYTES;
    default: return 0;
    }
}

typedef struct { float d; int32_t c128; } pk_q8_0_extra;

size_t ph_pk_act_bytes(int type, int64_t n) {
    if (type == PH_TYPE_F16) return (size_t)n * sizeof(float);
    int dt = ph_type_get(type)->dot_type;
    size_t base = ph_row_bytes(dt, n);
    if (dt == PH_TYPE_Q8_0) return base + (size_t)(n / PH_QK8_0) * sizeof(pk_q8_0_extra);
    return base + (size_t)(n / PH_QK_K) * 8 * sizeof(int16_t);
}

void ph_pk_act_extras(int type, void *row, int64_t n) {
    if (type == PH_TYPE_F16) return;
    if (ph_type_get(type)->dot_type == PH_TYPE_Q8_0) {
        const ph_block_q8_0 *b = row;
        pk_q8_0_extra *e = (pk_q8_0_extra *)(b + n / PH_QK8_0);
        for (int64_t i = 0; i < n / PH_QK8_0; i++) {
            int s = 0;
            for (int j = 0; j < PH_QK8_0; j++) s += b[i].qs[j];
            e[i] = (pk_q8_0_extra){ph_f16_to_f32(b[i].d), 128 * s};
        }
    } else {
        const ph_block_q8_K *b = row;
        int16_t *e = (int16_t *)(b + n / PH_QK_K);
        for (int64_t i = 0; i < n / PH_QK_K; i++)
            for (int j = 0; j < 8; j++) e[8 * i + j] = (int16_t)(b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
    }
}

/* One group block from the 16 source blocks src[l] (NULL: a padding row). */

static void pack_f16(const void *const *src, uint8_t *dst) {
    for (int l = 0; l < PH_PK_ROWS; l++) {
        ph_f16 h = 0;
        if (src[l]) memcpy(&h, src[l], sizeof h);
        memcpy(dst + 2 * l, &h, sizeof h);
    }
}

static void pack_q8_0(const void *const *src, uint8_t *dst) {
    ph_f16 *d = (ph_f16 *)dst;
    uint8_t *q = dst + 32;
    for (int l = 0; l < PH_PK_ROWS; l++) {
        const ph_block_q8_0 *b = src[l];
        d[l] = b ? b->d : 0;
        for (int s = 0; s < 8; s++)
            for (int k = 0; k < 4; k++) q[64 * s + 4 * l + k] = b ? (uint8_t)(b->qs[4 * s + k] ^ 0x80) : 0x80;
    }
}

static void pack_q4_0(const void *const *src, uint8_t *dst) {
    ph_f16 *d = (ph_f16 *)dst;
    uint8_t *q = dst + 32;
    for (int l = 0; l < PH_PK_ROWS; l++) {
        const ph_block_q4_0 *b = src[l];
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

/* Q4_K and Q5_K (Q5 = 1): the Q4_K part, and for Q5_K the fifth bits. */
static void pack_k4(const void *const *src, uint8_t *dst, const int Q5) {
    ph_f16 *d = (ph_f16 *)dst, *dmin = d + 16;
    uint8_t *sc = dst + 64, *mn = dst + 192, *q = dst + 320, *qh = dst + PH_PK_Q4_K_BYTES;
    for (int l = 0; l < PH_PK_ROWS; l++) {
        const uint8_t *blk = src[l];
        uint8_t s[8] = {0}, m[8] = {0}, u[PH_QK_K] = {0};
        ph_f16 bd = 0, bdmin = 0;
        if (blk) {
            const uint8_t *scales = Q5 ? ((const ph_block_q5_K *)blk)->scales : ((const ph_block_q4_K *)blk)->scales;
            const uint8_t *qs = Q5 ? ((const ph_block_q5_K *)blk)->qs : ((const ph_block_q4_K *)blk)->qs;
            bd = Q5 ? ((const ph_block_q5_K *)blk)->d : ((const ph_block_q4_K *)blk)->d;
            bdmin = Q5 ? ((const ph_block_q5_K *)blk)->dmin : ((const ph_block_q4_K *)blk)->dmin;
            ph_k4_scales_ref(scales, s, m);
            for (int c = 0; c < 4; c++)
                for (int i = 0; i < 32; i++) {
                    uint8_t h = Q5 ? ((const ph_block_q5_K *)blk)->qh[i] : 0;
                    u[64 * c + i] = (uint8_t)((qs[32 * c + i] & 15) | ((h >> (2 * c)) & 1) << 4);
                    u[64 * c + 32 + i] = (uint8_t)((qs[32 * c + i] >> 4) | ((h >> (2 * c + 1)) & 1) << 4);
                }
        }
        d[l] = bd;
        dmin[l] = bdmin;
        for (int j = 0; j < 8; j++) sc[16 * j + l] = s[j];
        for (int j = 0; j < 8; j++) mn[32 * (j / 2) + 2 * l + j % 2] = m[j];
        for (int j = 0; j < 8; j++)
            for (int k = 0; k < 4; k++) {
                uint8_t hb = 0;
                for (int v = 0; v < 4; v++) {
                    const uint8_t *e = u + 32 * j + 8 * v + k;
                    q[64 * (4 * j + v) + 4 * l + k] = (uint8_t)((e[0] & 15) | (e[4] & 15) << 4);
                    hb |= (uint8_t)((e[0] >> 4) << (2 * v) | (e[4] >> 4) << (2 * v + 1));
                }
                if (Q5) qh[64 * j + 4 * l + k] = hb;
            }
    }
}

static void pack_q4_K(const void *const *src, uint8_t *dst) { pack_k4(src, dst, 0); }
static void pack_q5_K(const void *const *src, uint8_t *dst) { pack_k4(src, dst, 1); }

static void pack_q6_K(const void *const *src, uint8_t *dst) {
    ph_f16 *d = (ph_f16 *)dst;
    int8_t *sc = (int8_t *)(dst + 32);
    uint8_t *ql = dst + 288, *qh = dst + 288 + 2048;
    for (int l = 0; l < PH_PK_ROWS; l++) {
        const ph_block_q6_K *b = src[l];
        uint8_t u[PH_QK_K] = {0};
        d[l] = b ? b->d : 0;
        if (b)
            for (int h = 0; h < 2; h++) {
                const uint8_t *L = b->ql + 64 * h, *H = b->qh + 32 * h;
                uint8_t *uu = u + 128 * h;
                for (int i = 0; i < 32; i++) {
                    uu[i] = (uint8_t)((L[i] & 15) | (H[i] & 3) << 4);
                    uu[i + 32] = (uint8_t)((L[i + 32] & 15) | ((H[i] >> 2) & 3) << 4);
                    uu[i + 64] = (uint8_t)((L[i] >> 4) | ((H[i] >> 4) & 3) << 4);
                    uu[i + 96] = (uint8_t)((L[i + 32] >> 4) | ((H[i] >> 6) & 3) << 4);
                }
            }
        for (int k = 0; k < 16; k++) sc[32 * (k / 2) + 2 * l + k % 2] = b ? b->scales[k] : 0;
        for (int k = 0; k < 16; k++)
            for (int i = 0; i < 4; i++) {
                const uint8_t *e = u + 16 * k + i;
                ql[64 * (2 * k) + 4 * l + i] = (uint8_t)((e[0] & 15) | (e[4] & 15) << 4);
                ql[64 * (2 * k + 1) + 4 * l + i] = (uint8_t)((e[8] & 15) | (e[12] & 15) << 4);
                qh[64 * k + 4 * l + i] = (uint8_t)(e[0] >> 4 | (e[4] >> 4) << 2 | (e[8] >> 4) << 4 | (e[12] >> 4) << 6);
            }
    }
}

size_t ph_mat_pack_size(const ph_mat *m) {
    size_t bb = ph_pk_block_bytes(m->type);
    if (!bb || !ph_kt()->pk[m->type].tile || m->n_in % ph_type_get(m->type)->block_elems) return 0;
    int64_t groups = (m->n_out + PH_PK_ROWS - 1) / PH_PK_ROWS;
    return (size_t)groups * (size_t)(m->n_in / ph_type_get(m->type)->block_elems) * bb;
}

void ph_pk_pack(int type, const void *data, size_t row_bytes, int64_t n_in, int64_t n_out, void *dst) {
    const ph_type_info *ti = ph_type_get(type);
    size_t bb = ph_pk_block_bytes(type);
    int64_t nb = n_in / ti->block_elems;
    void (*pack)(const void *const *, uint8_t *) = type == PH_TYPE_F16    ? pack_f16
                                                   : type == PH_TYPE_Q8_0 ? pack_q8_0
                                                   : type == PH_TYPE_Q4_0 ? pack_q4_0
                                                   : type == PH_TYPE_Q4_K ? pack_q4_K
                                                   : type == PH_TYPE_Q5_K ? pack_q5_K
                                                                          : pack_q6_K;
    uint8_t *out = dst;
    for (int64_t o0 = 0; o0 < n_out; o0 += PH_PK_ROWS)
        for (int64_t i = 0; i < nb; i++, out += bb) {
            const void *src[PH_PK_ROWS];
            for (int l = 0; l < PH_PK_ROWS; l++)
                src[l] = o0 + l < n_out
                             ? (const uint8_t *)data + (size_t)(o0 + l) * row_bytes + (size_t)i * ti->block_bytes
                             : NULL;
            pack(src, out);
        }
}

void ph_mat_pack(ph_mat *m, void *dst) {
    ph_pk_pack(m->type, m->data, m->row_bytes, m->n_in, m->n_out, dst);
    m->packed = dst;
}
