/* k_mask_emu.cpp — src/backend/cuda/k_mask.cu compiled for the host through
 * tests/emu's stand-in cuda_common.cuh, with 64 threads a block (the device
 * runs 256): its launcher as emu_ks_cuda_mask_rows (test_constraint_rows.c). */
#include <stdint.h>

#include "backend/cuda/cuda_common.cuh"
#define ks_cuda_mask_rows emu_ks_cuda_mask_rows
#include "backend/cuda/cuda_ops.h"

#define MASK_THREADS 64
namespace emu {
#include "backend/cuda/k_mask.cu"
}
