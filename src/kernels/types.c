/* The type table (docs/numerics.md, Tensor types). Every ggml id below PH_TYPE_COUNT gets its name
 * so error messages can say what a file holds; sizes are filled in for the
 * types whose block layout is known, and known == 1 only for what pinhole computes with. */
#include "kernels/types.h"

#define T(id_, name_, known_, be_, bb_, dot_)                                                                        \
    [id_] = {.name = name_, .known = known_, .block_elems = be_, .block_bytes = bb_, .dot_type = dot_}

static const type_info type_table[PH_TYPE_COUNT] = {
    T(0, "f32", 1, 1, 4, PH_TYPE_F32),
    T(1, "f16", 1, 1, 2, PH_TYPE_F16),
    T(2, "q4_0", 1, 32, 18, PH_TYPE_Q8_0),
    T(3, "q4_1", 0, 32, 20, PH_TYPE_F32),
    T(6, "q5_0", 0, 32, 22, PH_TYPE_F32),
    T(7, "q5_1", 0, 32, 24, PH_TYPE_F32),
    T(8, "q8_0", 1, 32, 34, PH_TYPE_Q8_0),
    T(9, "q8_1", 0, 32, 36, PH_TYPE_F32),
    T(10, "q2_K", 0, 256, 84, PH_TYPE_F32),
    T(11, "q3_K", 0, 256, 110, PH_TYPE_F32),
    T(12, "q4_K", 1, 256, 144, PH_TYPE_Q8_K),
    T(13, "q5_K", 1, 256, 176, PH_TYPE_Q8_K),
    T(14, "q6_K", 1, 256, 210, PH_TYPE_Q8_K),
    /* Activation-only: sized so type_row_bytes works, but not loadable. */
    T(15, "q8_K", 0, 256, 292, PH_TYPE_Q8_K),
    T(16, "iq2_xxs", 0, 0, 0, PH_TYPE_F32),
    T(17, "iq2_xs", 0, 0, 0, PH_TYPE_F32),
    T(18, "iq3_xxs", 0, 0, 0, PH_TYPE_F32),
    T(19, "iq1_s", 0, 0, 0, PH_TYPE_F32),
    T(20, "iq4_nl", 0, 32, 18, PH_TYPE_F32),
    T(21, "iq3_s", 0, 0, 0, PH_TYPE_F32),
    T(22, "iq2_s", 0, 0, 0, PH_TYPE_F32),
    T(23, "iq4_xs", 0, 256, 136, PH_TYPE_F32),
    T(24, "i8", 0, 1, 1, PH_TYPE_F32),
    T(25, "i16", 0, 1, 2, PH_TYPE_F32),
    T(26, "i32", 0, 1, 4, PH_TYPE_F32),
    T(27, "i64", 0, 1, 8, PH_TYPE_F32),
    T(28, "f64", 0, 1, 8, PH_TYPE_F32),
    T(29, "iq1_m", 0, 0, 0, PH_TYPE_F32),
    T(30, "bf16", 1, 1, 2, PH_TYPE_BF16),
    T(34, "tq1_0", 0, 0, 0, PH_TYPE_F32),
    T(35, "tq2_0", 0, 0, 0, PH_TYPE_F32),
    T(39, "mxfp4", 0, 0, 0, PH_TYPE_F32),
};

static const type_info unknown_type = {
    .name = "unknown", .known = 0, .block_elems = 0, .block_bytes = 0, .dot_type = PH_TYPE_F32};

const type_info *type_get(int type) {
    if (type < 0 || type >= PH_TYPE_COUNT || !type_table[type].name) return &unknown_type;
    return &type_table[type];
}
