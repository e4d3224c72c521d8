/* Cross-check of mat_mul against llama.cpp's own CPU mul_mat (not part of
 * the library). It dlopens the ggml inside bench/node_modules (the llama.node
 * addon exports ggml's C API), builds the same 2048 x 6144 products in both,
 * and prints the time of each (best of interleaved runs, 1 thread) and the
 * largest difference. Build by hand:
 *   gcc -std=c11 -O2 -D_GNU_SOURCE -Isrc -Iinclude tools/cmp_ggml.c \
 *       BUILD/libpinhole_core.a -ldl -lpthread -lm -o /tmp/cmp_ggml
 * Only ggml's public API is used; the two declarations below mirror ggml.h. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/kernels.h"

struct ggml_init_params {
    size_t mem_size;
    void *mem_buffer;
    bool no_alloc;
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    const char *lib = argc > 1 ? argv[1] : "bench/node_modules/@fugood/node-llama-linux-x64/index.node";
    void *h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "cmp_ggml: %s\n", dlerror());
        return 1;
    }
    void *(*g_init)(struct ggml_init_params) = (void *(*)(struct ggml_init_params))dlsym(h, "ggml_init");
    void *(*g_tensor_2d)(void *, int, long, long) =
        (void *(*)(void *, int, long, long))dlsym(h, "ggml_new_tensor_2d");
    void *(*g_mul_mat)(void *, void *, void *) = (void *(*)(void *, void *, void *))dlsym(h, "ggml_mul_mat");
    void *(*g_new_graph)(void *) = (void *(*)(void *))dlsym(h, "ggml_new_graph");
    void (*g_expand)(void *, void *) = (void (*)(void *, void *))dlsym(h, "ggml_build_forward_expand");
    int (*g_compute)(void *, void *, int) = (int (*)(void *, void *, int))dlsym(h, "ggml_graph_compute_with_ctx");
    void *(*g_data)(void *) = (void *(*)(void *))dlsym(h, "ggml_get_data");
    void (*g_cpu_init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
    void (*g_free)(void *) = (void (*)(void *))dlsym(h, "ggml_free");
    if (!g_init || !g_tensor_2d || !g_mul_mat || !g_new_graph || !g_expand || !g_compute || !g_data || !g_cpu_init ||
        !g_free) {
        fprintf(stderr, "cmp_ggml: %s lacks part of the ggml API\n", lib);
        return 1;
    }
    g_cpu_init();
    kernels_init();
    printf("pinhole isa: %s\n", isa_name(kernels_isa()));

    const int types[] = {PH_TYPE_Q4_K, PH_TYPE_Q6_K, PH_TYPE_Q8_0, PH_TYPE_F16};
    const long n_in = 2048, n_out = 6144;
    for (int k = 0; k < 4; k++) {
        int t = types[k];
        for (long rows = 1; rows <= 512; rows += 511) {
            void *ctx = g_init((struct ggml_init_params){(size_t)1 << 30, NULL, false});
            void *W = g_tensor_2d(ctx, t, n_in, n_out), *X = g_tensor_2d(ctx, PH_TYPE_F32, n_in, rows);
            size_t rb = type_row_bytes(t, n_in);
            float *row = malloc(sizeof(float) * (size_t)n_in), *x = g_data(X);
            for (long o = 0; o < n_out; o++) {
                for (long i = 0; i < n_in; i++) row[i] = (float)((o * 7 + i * 13) % 97) / 97.f - 0.5f;
                quantize_weight_row(t, row, (char *)g_data(W) + o * rb, n_in);
            }
            for (long i = 0; i < n_in * rows; i++) x[i] = (float)(i % 31) / 31.f - 0.5f;
            void *Y = g_mul_mat(ctx, W, X), *gf = g_new_graph(ctx);
            g_expand(gf, Y);
            wmat m = {.type = t, .n_in = n_in, .n_out = n_out, .data = g_data(W), .row_bytes = rb};
            float *yp = malloc(sizeof(float) * (size_t)(n_out * rows));
            double tg = 1e9, tp = 1e9;
            for (int r = 0; r < (rows == 1 ? 200 : 4); r++) { /* interleaved: both see the same machine load */
                double t0 = now();
                g_compute(ctx, gf, 1);
                double t1 = now();
                mat_mul(NULL, &m, x, rows, yp);
                double t2 = now();
                if (t1 - t0 < tg) tg = t1 - t0;
                if (t2 - t1 < tp) tp = t2 - t1;
            }
            const float *yg = g_data(Y);
            double diff = 0, mag = 0;
            for (long i = 0; i < n_out * rows; i++) {
                double e = yg[i] > yp[i] ? yg[i] - yp[i] : yp[i] - yg[i];
                if (e > diff) diff = e;
                if ((yg[i] > 0 ? yg[i] : -yg[i]) > mag) mag = yg[i] > 0 ? yg[i] : -yg[i];
            }
            double flop = 2.0 * (double)(n_in * n_out * rows);
            printf("%-5s %s: ggml %8.1f us %6.1f GFLOP/s | pinhole %8.1f us %6.1f GFLOP/s | x%.2f | max |diff| %.2g "
                   "(max |y| %.2g)\n",
                   type_get(t)->name, rows == 1 ? "decode     " : "prefill 512", tg * 1e6, flop / tg / 1e9, tp * 1e6,
                   flop / tp / 1e9, tg / tp, diff, mag);
            free(row);
            free(yp);
            g_free(ctx);
        }
    }
    return 0;
}
