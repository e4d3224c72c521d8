/* The end of every packed-kernel file (packed_avx2.c, packed_avxvnni.c,
 * packed_avx512.c), after its tiles q8_0_tile, q4_0_tile, q6_K_tile and
 * k4_tile (Q4_K and Q5_K), each (n, wg, x, xb, y, ldy, no, NR): the table's
 * entry points, one per weight type, each compiled for every number of
 * activation rows up to MX, and fill_quantized, which puts them in a kernel
 * table. A template: include it once, last. */

INLINE void q4_K_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                      const int NR) {
    k4_tile(n, wg, x, xb, y, ldy, no, NR, 0);
}
INLINE void q5_K_tile(int64_t n, const uint8_t *wg, const uint8_t *x, size_t xb, float *y, size_t ldy, int no,
                      const int NR) {
    k4_tile(n, wg, x, xb, y, ldy, no, NR, 1);
}

#define TILE(T)                                                                                                      \
    static void tile_##T(int64_t n, const void *wg, const void *x, size_t xb, int nr, float *y, size_t ldy,          \
                         int no) {                                                                                   \
        switch (nr) {                                                                                                \
        case 1: T##_tile(n, wg, x, xb, y, ldy, no, 1); break;                                                        \
        case 2: T##_tile(n, wg, x, xb, y, ldy, no, 2); break;                                                        \
        case 3: T##_tile(n, wg, x, xb, y, ldy, no, 3); break;                                                        \
        case 4: T##_tile(n, wg, x, xb, y, ldy, no, 4); break;                                                        \
        case 5: T##_tile(n, wg, x, xb, y, ldy, no, 5); break;                                                        \
        default: T##_tile(n, wg, x, xb, y, ldy, no, MX); break;                                                      \
        }                                                                                                            \
    }

TILE(q8_0)
TILE(q4_0)
TILE(q4_K)
TILE(q5_K)
TILE(q6_K)

/* The quantized types' entries of a kernel table (F16's is the file's own). */
static void fill_quantized(kernel_table *t) {
    t->pk[PH_TYPE_Q8_0] = (pk_plan){tile_q8_0, MX, PH_PK_ROWS, NULL};
    t->pk[PH_TYPE_Q4_0] = (pk_plan){tile_q4_0, MX, PH_PK_ROWS, NULL};
    t->pk[PH_TYPE_Q4_K] = (pk_plan){tile_q4_K, MX, PH_PK_ROWS, NULL};
    t->pk[PH_TYPE_Q5_K] = (pk_plan){tile_q5_K, MX, PH_PK_ROWS, NULL};
    t->pk[PH_TYPE_Q6_K] = (pk_plan){tile_q6_K, MX, PH_PK_ROWS, NULL};
}
