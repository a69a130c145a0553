/* k_sample_emu.cpp — src/backend/cuda/k_sample.cu compiled for the host
 * through tests/emu's stand-in cuda_common.cuh, with 64 threads a block (two
 * warps; the device runs 1,024) and clusters of 2 blocks a row (the device
 * 8): its launcher as emu_ks_cuda_sample_rows,
 * host pointers in and out (test_sample_rows_emu.c). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_common.cuh"
#define ks_cuda_sample_rows emu_ks_cuda_sample_rows
#include "backend/cuda/cuda_ops.h"
extern "C" {
#include "backend/backend.h"
}

#define SP_THREADS 64
#define SP_CLUSTER 2
namespace emu {
#include "backend/cuda/k_sample.cu"
}
