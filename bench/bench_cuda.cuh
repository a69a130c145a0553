/* bench_cuda.cuh — what the standalone CUDA bench tools (gemm_sweep.cu,
 * layer_stream.cu, matvec_sweep.cu) share: CK(call) exits with the file,
 * line and CUDA's message when a runtime call fails (a tool, not the
 * server: no recovery); k_fill writes n bf16 values in [-scale, scale)
 * from a hash of the index and a seed (the server's ks_hash_unit). */
#ifndef KS_BENCH_CUDA_CUH
#define KS_BENCH_CUDA_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_common.cuh" /* ks_hash_unit */

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));         \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

__global__ void k_fill(__nv_bfloat16 *p, size_t n, float scale, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16(ks_hash_unit((long long)i, seed) * scale);
}

#endif
