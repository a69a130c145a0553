/* k_logprobs_emu.cpp — src/backend/cuda/k_logprobs.cu compiled for the host
 * through tests/emu's stand-in cuda_common.cuh, with 64 threads a block (the
 * device runs 1,024): its launcher as emu_ks_cuda_logprob_rows
 * (test_logprob_rows.c). */
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_common.cuh"
#define ks_cuda_logprob_rows emu_ks_cuda_logprob_rows
#include "backend/cuda/cuda_ops.h"
extern "C" {
#include "backend/backend.h"
}

#define LP_THREADS 64 /* (the device runs 256) */
namespace emu {
#include "backend/cuda/k_logprobs.cu"
}
