/* k_rmsnorm.cu — y = w * (x / sqrt(mean(x^2) + eps)) over rows of `dim`
 * floats: row (t, h) at in + t*in_stride + h*dim (h < n_heads; heads = 1 for
 * the hidden state, n_heads for Qwen3's per-head QK-norm).
 * Short rows (dim < 1024: per-head norms): one warp per row. Long rows (the
 * hidden state): one block of 256 threads per row, so the row is read by many
 * loads in flight instead of one warp's sequential loop. In both, the sum of
 * squares is strided per thread, reduced by a fixed butterfly, then (blocks)
 * warps in order — the arithmetic depends only on dim, never on the batch. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define RN_THREADS 256

/* The block's sum of v: a fixed butterfly per warp, then the warps in
 * order (red: RN_THREADS / 32 floats of shared memory) */
__device__ __forceinline__ float block_sum(float v, float *red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float tot = red[0];
    for (int i = 1; i < RN_THREADS / 32; i++) tot += red[i];
    return tot;
}

__global__ void k_rmsnorm_warp(float *out, int os, const float *in, int is, const float *w, int n, int nh, int dim,
                               float eps) {
    pdl_start();
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

__global__ void __launch_bounds__(RN_THREADS)
k_rmsnorm_block(float *out, int os, const float *in, int is, const float *w, int nh, int dim, float eps) {
    pdl_start();
    int row = blockIdx.x, t = row / nh, h = row % nh, tid = threadIdx.x;
    const float *x = in + (size_t)t * is + (size_t)h * dim;
    float *y = out + (size_t)t * os + (size_t)h * dim;
    __shared__ float red[RN_THREADS / 32];
    float ss = 0.f;
#pragma unroll 4
    for (int j = tid; j < dim; j += RN_THREADS) ss = fmaf(x[j], x[j], ss);
    float tot = block_sum(ss, red);
    float inv = 1.0f / sqrtf(tot / (float)dim + eps);
#pragma unroll 4
    for (int j = tid; j < dim; j += RN_THREADS) y[j] = w[j] * (x[j] * inv);
}

/* The residual add fused in front: x += y, then out = rmsnorm(x) * w, with
 * each thread adding exactly the elements it then squares in the same order
 * as k_rmsnorm_*: the results equal ks_cuda_add followed by ks_cuda_rmsnorm.
 * out may alias y (each element is read before the same thread writes it). */
__global__ void __launch_bounds__(RN_THREADS)
k_add_rmsnorm_block(float *x, const float *y, float *out, const float *w, int dim, float eps) {
    pdl_start();
    int tid = threadIdx.x;
    float *xr = x + (size_t)blockIdx.x * dim, *o = out + (size_t)blockIdx.x * dim;
    const float *yr = y + (size_t)blockIdx.x * dim;
    __shared__ float red[RN_THREADS / 32];
    float ss = 0.f;
#pragma unroll 4
    for (int j = tid; j < dim; j += RN_THREADS) {
        float v = xr[j] + yr[j];
        xr[j] = v;
        ss = fmaf(v, v, ss);
    }
    float tot = block_sum(ss, red);
    float inv = 1.0f / sqrtf(tot / (float)dim + eps);
#pragma unroll 4
    for (int j = tid; j < dim; j += RN_THREADS) o[j] = w[j] * (xr[j] * inv);
}

__global__ void k_add_rmsnorm_warp(float *x, const float *y, float *out, const float *w, int n, int dim, float eps) {
    pdl_start();
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= n) return;
    float *xr = x + (size_t)row * dim, *o = out + (size_t)row * dim;
    const float *yr = y + (size_t)row * dim;
    float ss = 0.f;
    for (int j = lane; j < dim; j += 32) {
        float v = xr[j] + yr[j];
        xr[j] = v;
        ss = fmaf(v, v, ss);
    }
    ss = warp_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int j = lane; j < dim; j += 32) o[j] = w[j] * (xr[j] * inv);
}

extern "C" void ks_cuda_add_rmsnorm(ks_stream s, float *x, const float *y, float *out, const float *w, int n, int dim,
                                    float eps) {
    if (n <= 0) return;
    if (dim >= 1024) ks_launch(k_add_rmsnorm_block, n, RN_THREADS, 0, s, x, y, out, w, dim, eps);
    else ks_launch(k_add_rmsnorm_warp, (n + 7) / 8, 256, 0, s, x, y, out, w, n, dim, eps);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ks_cuda_rmsnorm(ks_stream s, float *out, int out_stride, const float *in, int in_stride,
                                const float *w, int n, int n_heads, int dim, float eps) {
    int rows = n * n_heads;
    if (rows <= 0) return;
    if (dim >= 1024) {
        ks_launch(k_rmsnorm_block, rows, RN_THREADS, 0, s, out, out_stride, in, in_stride, w, n_heads, dim, eps);
    } else {
        int wpb = 8;
        ks_launch(k_rmsnorm_warp, (rows + wpb - 1) / wpb, wpb * 32, 0, s, out, out_stride, in, in_stride, w, n, n_heads, dim,
                                                                  eps);
    }
    CUDA_CHECK_LAUNCH();
}
