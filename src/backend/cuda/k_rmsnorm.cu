/* k_rmsnorm.cu — y = w * (x / sqrt(mean(x^2) + eps)) over rows of `dim`
 * floats: row (t, h) at in + t*in_stride + h*dim (h < n_heads; heads = 1 for
 * the hidden state, n_heads for Qwen3's per-head QK-norm). One warp per row;
 * the sum of squares is lane-strided then reduced by a fixed butterfly. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

__global__ void k_rmsnorm(float *out, int os, const float *in, int is, const float *w, int n, int nh, int dim,
                          float eps) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= n * nh) return;
    int t = row / nh, h = row % nh;
    const float *x = in + (size_t)t * is + (size_t)h * dim;
    float *y = out + (size_t)t * os + (size_t)h * dim;
    float ss = 0.f;
    for (int j = lane; j < dim; j += 32) ss = fmaf(x[j], x[j], ss);
    ss = warp_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    __syncwarp();
    for (int j = lane; j < dim; j += 32) y[j] = w[j] * (x[j] * inv);
}

extern "C" void ks_cuda_rmsnorm(ks_stream s, float *out, int out_stride, const float *in, int in_stride,
                                const float *w, int n, int n_heads, int dim, float eps) {
    int rows = n * n_heads, wpb = 8;
    k_rmsnorm<<<(rows + wpb - 1) / wpb, wpb * 32, 0, s>>>(out, out_stride, in, in_stride, w, n, n_heads, dim, eps);
    CUDA_CHECK_LAUNCH();
}
