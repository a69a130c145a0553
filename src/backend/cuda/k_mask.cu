/* k_mask.cu — a constraint's masks on logits rows (backend op mask_rows):
 * every id whose bit is clear becomes -inf. Each thread takes one 32-bit
 * word of one row's mask (a grid of rows x slices of MASK_THREADS words)
 * and writes only the ids it clears: a mask that allows most of the
 * vocabulary (free text, a free string) writes little. */
#include <math.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#ifndef MASK_THREADS
#define MASK_THREADS 256
#endif

__global__ void __launch_bounds__(MASK_THREADS)
    k_mask_rows(float *logits, int cols, const int32_t *rows, const uint32_t *bits, int slices) {
    pdl_start(); /* the logits are the kernels' before */
    int words = (cols + 31) / 32, k = blockIdx.x / slices, w = (blockIdx.x % slices) * MASK_THREADS + threadIdx.x;
    if (w >= words) return;
    uint32_t b = bits[(size_t)k * words + w];
    if (b == 0xffffffffu) return;
    float *row = logits + (size_t)rows[k] * cols;
    for (int i = 0; i < 32 && w * 32 + i < cols; i++)
        if (!(b >> i & 1u)) row[w * 32 + i] = -INFINITY;
}

extern "C" void ks_cuda_mask_rows(ks_stream s, float *logits, int cols, const int32_t *rows, const uint32_t *bits,
                                  int n) {
    if (n <= 0) return;
    int slices = ((cols + 31) / 32 + MASK_THREADS - 1) / MASK_THREADS;
    ks_launch(k_mask_rows, dim3(n * slices), MASK_THREADS, 0, s, logits, cols, rows, bits, slices);
}
