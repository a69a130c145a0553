/* k_penalize_emu.cpp — src/backend/cuda/k_penalize.cu compiled for the host
 * through tests/emu's stand-in cuda_common.cuh, with 64 threads a block (the
 * device runs 256): its launcher as emu_ks_cuda_penalize_rows, host pointers
 * throughout (test_penalties.c). */
#include <stdint.h>

#include "backend/cuda/cuda_common.cuh"
#define ks_cuda_penalize_rows emu_ks_cuda_penalize_rows
#include "backend/cuda/cuda_ops.h"
extern "C" {
#include "backend/backend.h"
}

#define PEN_THREADS 64
namespace emu {
#include "backend/cuda/k_penalize.cu"
}
