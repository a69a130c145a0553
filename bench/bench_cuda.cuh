/* bench_cuda.cuh — what the standalone CUDA bench tools (gemm_sweep.cu,
 * layer_stream.cu) share: CK(call) exits with the file, line and CUDA's
 * message when a runtime call fails (a tool, not the server: no recovery). */
#ifndef KS_BENCH_CUDA_CUH
#define KS_BENCH_CUDA_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));         \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

#endif
