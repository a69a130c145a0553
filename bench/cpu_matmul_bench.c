/* cpu_matmul_bench.c — the CPU backend's matmul alone, on tinycoder's
 * matrices (6 layers of q|k|v 768x512, o 512x512, gate|up 3072x512, down
 * 512x1536, and the 8192x512 lm_head; bf16 random weights, 44 MB, each its
 * own buffer as in the model), for N tokens per call:
 *   build/cpu_matmul_bench [N] [THREADS] [ITERS]
 * Prints ms per forward's worth of matmuls, GFLOP/s and the weight read
 * rate. KESTREL_CPU_ISA=avx2|scalar picks the kernels as in the server. Not
 * a test: compare runs of one machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "backend/backend.h"

#define LAYERS 6
#define N_MATS (LAYERS * 4 + 1)

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 16, threads = argc > 2 ? atoi(argv[2]) : 2;
    int iters = argc > 3 ? atoi(argv[3]) : 50;
    if (n < 1 || n > 512 || threads < 1 || iters < 1) {
        fprintf(stderr, "usage: cpu_matmul_bench [N 1..512] [THREADS] [ITERS]\n");
        return 2;
    }
    static const int64_t shapes[4][2] = {{768, 512}, {512, 512}, {3072, 512}, {512, 1536}};
    backend *be;
    if (backend_cpu_new(&be, threads) != 0) return 1;
    bk_weight w[N_MATS];
    uint16_t *data[N_MATS];
    double flops = 0, bytes = 0;
    unsigned seed = 1;
    for (int m = 0; m < N_MATS; m++) {
        int64_t rows = m < LAYERS * 4 ? shapes[m % 4][0] : 8192, cols = m < LAYERS * 4 ? shapes[m % 4][1] : 512;
        data[m] = malloc((size_t)(rows * cols) * 2);
        for (int64_t i = 0; i < rows * cols; i++) {
            seed = seed * 1103515245u + 12345u;
            data[m][i] = (uint16_t)(0x3c00 + ((seed >> 16) & 0x3ff)); /* bf16 in [2^-7, 2^-6) */
        }
        st_tensor t = {.name = "w", .dtype = DTYPE_BF16, .n_dims = 2, .shape = {rows, cols},
                       .n_elems = rows * cols, .data = data[m], .nbytes = (size_t)(rows * cols) * 2};
        const st_tensor *parts[1] = {&t};
        if (be->ops->weight_init(be, &w[m], parts, 1) != 0) return 1;
        flops += 2.0 * (double)(rows * cols) * n;
        bytes += 2.0 * (double)(rows * cols);
    }
    float *x = be->ops->buf_alloc(be, (size_t)n * 1536 * sizeof(float));
    float *out = be->ops->buf_alloc(be, (size_t)n * 8192 * sizeof(float));
    for (int i = 0; i < n * 1536; i++) x[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        for (int it = 0; it < iters; it++)
            for (int m = 0; m < N_MATS; m++) be->ops->matmul(be, out, x, &w[m], NULL, n);
        double dt = (now_s() - t0) / iters;
        printf("N %d, %d threads: %.3f ms per forward, %.1f GFLOP/s, weights %.1f GB/s\n", n, threads, dt * 1e3,
               flops / dt / 1e9, bytes / dt / 1e9);
    }
    for (int m = 0; m < N_MATS; m++) be->ops->weight_release(be, &w[m]), free(data[m]);
    be->ops->buf_free(be, x);
    be->ops->buf_free(be, out);
    backend_free(be);
    return 0;
}
