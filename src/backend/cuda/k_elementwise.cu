/* k_elementwise.cu — the small element-wise ops:
 *   embed:   out[t, :] = table[ids[t], :]          (bf16/f16/f32 -> f32)
 *   silu_mul: out[t, j] = silu(gu[t, j]) * gu[t, dim + j],  silu(g) = g / (1 + exp(-g))
 *   add:     x += y
 *   gather:  out[i, :] = in[idx[i], :]
 *   kv_store: kc[slot[t], :] = bf16(k[t, :]), vc[slot[t], :] = bf16(v[t, :])
 *             (rows of kv_dim; round to nearest even) */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

template <typename W>
__device__ __forceinline__ float to_f(W v) { return (float)v; }
template <>
__device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }

template <typename W>
__global__ void k_embed(float *out, const W *table, const int32_t *ids, int n, int dim) {
    pdl_start();
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)n * dim) return;
    int t = (int)(i / dim), j = (int)(i % dim);
    out[i] = to_f(table[(size_t)ids[t] * dim + j]);
}

__global__ void k_silu_mul(float *out, const float *gu, int n, int dim) {
    pdl_start();
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)n * dim) return;
    int t = (int)(i / dim), j = (int)(i % dim);
    float g = gu[(size_t)t * 2 * dim + j], u = gu[(size_t)t * 2 * dim + dim + j];
    out[i] = silu_mul_f(g, u);
}

__global__ void k_add(float *x, const float *y, long long n) {
    pdl_start();
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

__global__ void k_gather(float *out, const float *in, const int32_t *idx, int n, int dim) {
    pdl_start();
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)n * dim) return;
    int r = (int)(i / dim), j = (int)(i % dim);
    out[i] = in[(size_t)idx[r] * dim + j];
}

__global__ void k_kv_store(__nv_bfloat16 *kc, __nv_bfloat16 *vc, const float *k, const float *v, int stride, const int32_t *slots,
                           int n, int kv_dim) {
    pdl_start();
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)n * kv_dim) return;
    int t = (int)(i / kv_dim), j = (int)(i % kv_dim);
    size_t dst = (size_t)slots[t] * kv_dim + j;
    kc[dst] = __float2bfloat16_rn(k[(size_t)t * stride + j]);
    vc[dst] = __float2bfloat16_rn(v[(size_t)t * stride + j]);
}

static unsigned blocks(long long n) { return (unsigned)((n + 255) / 256); }

extern "C" void ks_cuda_embed(ks_stream s, float *out, const void *table, int wtype, const int32_t *ids, int n,
                              int dim) {
    long long tot = (long long)n * dim;
    if (wtype == 2) ks_launch(k_embed<__nv_bfloat16>, blocks(tot), 256, 0, s, out, (const __nv_bfloat16 *)table, ids, n, dim);
    else if (wtype == 1) ks_launch(k_embed<__half>, blocks(tot), 256, 0, s, out, (const __half *)table, ids, n, dim);
    else ks_launch(k_embed<float>, blocks(tot), 256, 0, s, out, (const float *)table, ids, n, dim);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ks_cuda_silu_mul(ks_stream s, float *out, const float *gu, int n, int dim) {
    ks_launch(k_silu_mul, blocks((long long)n * dim), 256, 0, s, out, gu, n, dim);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ks_cuda_add(ks_stream s, float *x, const float *y, long long n) {
    ks_launch(k_add, blocks(n), 256, 0, s, x, y, n);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ks_cuda_gather_rows(ks_stream s, float *out, const float *in, const int32_t *idx, int n, int dim) {
    ks_launch(k_gather, blocks((long long)n * dim), 256, 0, s, out, in, idx, n, dim);
    CUDA_CHECK_LAUNCH();
}

extern "C" void ks_cuda_kv_store(ks_stream s, void *kc, void *vc, const float *k, const float *v, int src_stride,
                                 const int32_t *slots, int n, int kv_dim) {
    ks_launch(k_kv_store, blocks((long long)n * kv_dim), 256, 0, s, (__nv_bfloat16 *)kc, (__nv_bfloat16 *)vc, k, v,
              src_stride, slots, n, kv_dim);
    CUDA_CHECK_LAUNCH();
}
