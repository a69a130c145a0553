/* cuda_common.cuh — shared helpers of the CUDA backend: CUDA_CHECK (every
 * runtime call and every launch), warp reductions with a fixed butterfly
 * order (so a row's result never depends on what else is in the launch). */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

/* Records the first failure; the backend turns it into an error status. */
extern "C" int ks_cuda_fail(const char *what, cudaError_t e, const char *file, int line);

#define CUDA_CHECK(call)                                                          \
    do {                                                                          \
        cudaError_t _e = (call);                                                  \
        if (_e != cudaSuccess) ks_cuda_fail(#call, _e, __FILE__, __LINE__);       \
    } while (0)
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* 8 packed 16-bit values (one 16-byte load) -> 8 floats; the pointer's type
 * only picks the format. */
__device__ __forceinline__ void unpack8(uint4 u, const __nv_bfloat16 *, float *f) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void unpack8(uint4 u, const __half *, float *f) {
    const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 v = __half22float2(h[i]);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}
__device__ __forceinline__ void load8(const __nv_bfloat16 *p, float *f) {
    unpack8(__ldg(reinterpret_cast<const uint4 *>(p)), p, f);
}
__device__ __forceinline__ void load8(const __half *p, float *f) {
    unpack8(__ldg(reinterpret_cast<const uint4 *>(p)), p, f);
}
__device__ __forceinline__ void load8(const float *p, float *f) {
    float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}
