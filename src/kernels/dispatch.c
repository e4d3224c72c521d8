/* CPU detection, the PINHOLE_ISA override, the kernel tables, and the public
 * entry points that go through them. Compiled without SIMD flags: it only
 * calls into dot_avx2.c / dot_avx512.c / packed_avxvnni.c after checking the
 * CPU. */
#include <cpuid.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "kernels/kernels_impl.h"

static const int weight_types[] = {PH_TYPE_F32,  PH_TYPE_F16,  PH_TYPE_BF16, PH_TYPE_Q8_0,
                                   PH_TYPE_Q4_0, PH_TYPE_Q4_K, PH_TYPE_Q5_K, PH_TYPE_Q6_K};
#define N_WEIGHT_TYPES (int)(sizeof weight_types / sizeof weight_types[0])

static kernel_table tables[3];
/* The AVX2 table without packed_avxvnni.c's kernels, installed by
 * PINHOLE_ISA=avx2-novnni: what a CPU with AVX2 but no AVX-VNNI runs, so that
 * its path can be tested and measured on a CPU that has more. Where the CPU
 * has no AVX-VNNI it equals tables[PH_ISA_AVX2]. */
static kernel_table avx2_novnni;
static int cpu_has[3];
static _Atomic(const kernel_table *) current;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

#define AVX2_NOVNNI "avx2-novnni"

const char *isa_name(isa_level isa) {
    switch (isa) {
    case PH_ISA_SCALAR: return "scalar";
    case PH_ISA_AVX2: return "avx2";
    case PH_ISA_AVX512: return "avx512";
    }
    return "?";
}

void fill_ref(kernel_table *t) {
    t->isa = PH_ISA_SCALAR;
    t->dot[PH_TYPE_F32] = dot_f32_ref;
    t->dot[PH_TYPE_F16] = dot_f16_ref;
    t->dot[PH_TYPE_BF16] = dot_bf16_ref;
    t->dot[PH_TYPE_Q8_0] = dot_q8_0_ref;
    t->dot[PH_TYPE_Q4_0] = dot_q4_0_ref;
    t->dot[PH_TYPE_Q4_K] = dot_q4_K_ref;
    t->dot[PH_TYPE_Q5_K] = dot_q5_K_ref;
    t->dot[PH_TYPE_Q6_K] = dot_q6_K_ref;
    t->act[PH_TYPE_F16] = act_f16_ref;
    t->act[PH_TYPE_BF16] = act_bf16_ref;
    t->act[PH_TYPE_Q8_0] = act_q8_0_ref;
    t->act[PH_TYPE_Q8_K] = act_q8_K_ref;
    for (int k = 0; k < N_WEIGHT_TYPES; k++) {
        int w = weight_types[k], dt = type_get(w)->dot_type;
        t->mm[w] = (mm_plan){dt == PH_TYPE_F32 ? NULL : t->act[dt], dt, t->dot[w], NULL, 1, 1};
    }
}

/* ---- self-test ----------------------------------------------------------------- */

/* A small known-answer check of a SIMD table against the reference before it
 * is installed: a CPU feature bug or a miscompiled kernel then costs speed,
 * not wrong answers. Deterministic data; a few microseconds. */
static int table_ok(const kernel_table *t, const kernel_table *ref) {
    enum { N = 512, NR = 4 };
    static float xf[NR][N], wf[2][N];
    static _Alignas(64) uint8_t wq[2][N * 4], xq[NR][N * 4], xr[N * 4];
    uint32_t s = 12345;
    for (int r = 0; r < NR; r++)
        for (int i = 0; i < N; i++) {
            s = s * 1664525u + 1013904223u;
            xf[r][i] = (float)((int32_t)s >> 8) * 0x1p-23f;
        }
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < N; i++) {
            s = s * 1664525u + 1013904223u;
            wf[r][i] = (float)((int32_t)s >> 8) * 0x1p-23f;
        }
    for (int k = 0; k < N_WEIGHT_TYPES; k++) {
        int w = weight_types[k], dt = type_get(w)->dot_type;
        size_t xb = type_row_bytes(dt, N);
        for (int r = 0; r < 2; r++) quantize_weight_row(w, wf[r], wq[r], N);
        for (int r = 0; r < NR; r++) {
            if (dt == PH_TYPE_F32) {
                memcpy(xq[r], xf[r], xb);
            } else {
                t->act[dt](xf[r], xq[r], N);
                ref->act[dt](xf[r], xr, N);
                if (memcmp(xq[r], xr, xb) != 0) return 0; /* conversions must be exact */
            }
        }
        float want[NR][2];
        double mag = 0;
        for (int r = 0; r < NR; r++)
            for (int o = 0; o < 2; o++) {
                want[r][o] = ref->dot[w](N, wq[o], xq[r]);
                mag += fabs(want[r][o]);
            }
        float tol = (float)(1e-4 * (mag + 1));
        if (fabsf(t->dot[w](N, wq[0], xq[0]) - want[0][0]) > tol) return 0;
        const mm_plan *p = &t->mm[w];
        if (p->tile) {
            /* the plan's own activation format, from the same rows */
            static _Alignas(64) uint8_t xp[NR][N * 4];
            size_t pb = type_row_bytes(p->act_type, N);
            for (int r = 0; r < NR; r++) {
                if (p->act) p->act(xf[r], xp[r], N);
                else memcpy(xp[r], xf[r], pb);
            }
            float got[NR][2];
            p->tile(N, wq[0], sizeof wq[0], xp[0], sizeof xp[0], &got[0][0], 2);
            for (int r = 0; r < p->mx; r++)
                for (int o = 0; o < p->mw; o++)
                    if (fabsf(got[r][o] - want[r][o]) > tol) return 0;
        }
        const pk_plan *pk = &t->pk[w];
        if (pk->tile) {
            /* packed kernels: the reference bit for bit (quantized) or to rounding */
            static _Alignas(64) uint8_t wp[PH_PK_Q8_0_BYTES * N / 32 * 2], xp[NR][N * 4];
            pk_pack(NULL, w, wq[0], sizeof wq[0], N, 2, wp);
            for (int r = 0; r < NR; r++) {
                if (pk->act) {
                    pk->act(xf[r], xp[r], N);
                } else {
                    ref->act[dt](xf[r], xp[r], N);
                    pk_act_extras(w, xp[r], N);
                }
            }
            if (pk_act_bytes(w, N) > sizeof xp[0]) return 0;
            float got[NR][2];
            pk->tile(N, wp, xp[0], sizeof xp[0], NR < pk->mx ? NR : pk->mx, &got[0][0], 2, 2);
            for (int r = 0; r < NR && r < pk->mx; r++)
                for (int o = 0; o < 2; o++)
                    if (w == PH_TYPE_F16 ? fabsf(got[r][o] - want[r][o]) > tol : got[r][o] != want[r][o]) return 0;
        }
    }
    return 1;
}

/* F16C from CPUID leaf 1 (clang's __builtin_cpu_supports does not know it;
 * the AVX2 test below already covers the OS saving the ymm state). */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

/* AVX-VNNI (VPDPBUSD on ymm): CPUID leaf 7, sub-leaf 1, EAX. */
static int has_avxvnni(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & bit_AVXVNNI);
}

static void detect(void) {
    __builtin_cpu_init();
    cpu_has[PH_ISA_SCALAR] = 1;
    cpu_has[PH_ISA_AVX2] = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c() &&
                           __builtin_cpu_supports("bmi2");
    cpu_has[PH_ISA_AVX512] = cpu_has[PH_ISA_AVX2] && __builtin_cpu_supports("avx512f") &&
                             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");

    fill_ref(&tables[PH_ISA_SCALAR]);
    if (cpu_has[PH_ISA_AVX2]) {
        tables[PH_ISA_AVX2] = tables[PH_ISA_SCALAR];
        fill_avx2(&tables[PH_ISA_AVX2]);
        if (!table_ok(&tables[PH_ISA_AVX2], &tables[PH_ISA_SCALAR])) {
            PH_WARN("kernels: the avx2 kernels failed their self-test; using scalar code");
            cpu_has[PH_ISA_AVX2] = cpu_has[PH_ISA_AVX512] = 0;
        } else {
            avx2_novnni = tables[PH_ISA_AVX2];
            if (has_avxvnni()) {
                kernel_table t = tables[PH_ISA_AVX2];
                fill_packed_avxvnni(&t);
                if (table_ok(&t, &tables[PH_ISA_SCALAR])) tables[PH_ISA_AVX2] = t;
                else PH_WARN("kernels: the avx-vnni packed kernels failed their self-test; using avx2's");
            }
        }
    }
    if (cpu_has[PH_ISA_AVX512]) {
        tables[PH_ISA_AVX512] = tables[PH_ISA_AVX2];
        fill_avx512(&tables[PH_ISA_AVX512]);
        if (!table_ok(&tables[PH_ISA_AVX512], &tables[PH_ISA_SCALAR])) {
            PH_WARN("kernels: the avx512 kernels failed their self-test; using avx2");
            cpu_has[PH_ISA_AVX512] = 0;
        }
    }

    isa_level isa = cpu_has[PH_ISA_AVX512] ? PH_ISA_AVX512 : cpu_has[PH_ISA_AVX2] ? PH_ISA_AVX2 : PH_ISA_SCALAR;
    const char *env = getenv("PINHOLE_ISA");
    if (env && *env) {
        int want = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(env, isa_name((isa_level)i)) == 0) want = i;
        if (strcmp(env, AVX2_NOVNNI) == 0) want = PH_ISA_AVX2;
        if (want < 0)
            PH_WARN("PINHOLE_ISA=%s is not one of scalar, avx2, " AVX2_NOVNNI ", avx512; using %s", env,
                    isa_name(isa));
        else if (!cpu_has[want]) PH_WARN("PINHOLE_ISA=%s: this CPU cannot run it; using %s", env, isa_name(isa));
        else if (want == PH_ISA_AVX2 && strcmp(env, AVX2_NOVNNI) == 0) {
            atomic_store(&current, &avx2_novnni);
            return;
        } else isa = (isa_level)want;
    }
    atomic_store(&current, &tables[isa]);
}

void kernels_init(void) { pthread_once(&init_once, detect); }

const kernel_table *kern_table(void) {
    const kernel_table *t = atomic_load_explicit(&current, memory_order_acquire);
    if (!t) {
        kernels_init();
        t = atomic_load_explicit(&current, memory_order_acquire);
    }
    return t;
}

isa_level kernels_isa(void) { return kern_table()->isa; }

const char *kernels_name(void) {
    const kernel_table *t = kern_table();
    return t == &avx2_novnni ? AVX2_NOVNNI : isa_name(t->isa);
}

int kernels_cpu_has(isa_level isa) {
    kernels_init();
    return (int)isa >= 0 && (int)isa < 3 && cpu_has[isa];
}

int kernels_force(isa_level isa) {
    if (!kernels_cpu_has(isa)) return -1;
    atomic_store(&current, &tables[isa]);
    return 0;
}

void kernels_use(const kernel_table *t) {
    kernels_init();
    atomic_store(&current, t);
}

static _Noreturn void bad_type(const char *fn, int type) {
    fprintf(stderr, "pinhole: %s: unsupported type %d (%s)\n", fn, type, type_get(type)->name);
    abort();
}

float vec_dot(int wtype, int64_t n, const void *w, const void *x) {
    dot_fn f = (wtype >= 0 && wtype < PH_TYPE_COUNT) ? kern_table()->dot[wtype] : NULL;
    if (!f) bad_type("vec_dot", wtype);
    return f(n, w, x);
}

void quantize_act_row(int dot_type, const float *src, void *dst, int64_t n) {
    if (dot_type == PH_TYPE_F32) {
        memmove(dst, src, (size_t)n * sizeof(float));
        return;
    }
    act_fn f = (dot_type >= 0 && dot_type < PH_TYPE_COUNT) ? kern_table()->act[dot_type] : NULL;
    if (!f) bad_type("quantize_act_row", dot_type);
    f(src, dst, n);
}
