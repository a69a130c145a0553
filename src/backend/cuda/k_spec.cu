/* k_spec.cu — a greedy verify's outcome on the device, for work launched
 * behind it before the host has seen its ids (a DFlash block drafted right
 * after its verify): the drafts accepted, and the block's rows moved up by
 * them (backend op spec_shift). One warp; it writes rows the kernels after
 * it read before their programmatic wait (the step's positions and slots),
 * so it does not trigger its successor early: they start once it has ended. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

__global__ void k_spec_shift(const int32_t *ids, const int32_t *drafts, const int32_t *k, int32_t *tok, int32_t *pos,
                             int32_t *pos2, const int32_t *entry, int32_t *slots, const int32_t *table, int block_size,
                             int n) {
    pdl_wait(); /* the verify's ids (no pdl_trigger: see above) */
    int a = 0, kk = *k;
    while (a < kk && ids[a] == drafts[a]) a++;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        pos[j] += a;
        pos2[j] += a;
        int e = entry[j] + a;
        slots[j] = table[e / block_size] * block_size + e % block_size;
    }
    if (threadIdx.x == 0) tok[0] = ids[a];
}

extern "C" void ks_cuda_spec_shift(ks_stream s, const int32_t *ids, const int32_t *drafts, const int32_t *k,
                                   int32_t *tok, int32_t *pos, int32_t *pos2, const int32_t *entry, int32_t *slots,
                                   const int32_t *table, int block_size, int n) {
    if (n <= 0) return;
    ks_launch(k_spec_shift, 1, 32, 0, s, ids, drafts, k, tok, pos, pos2, entry, slots, table, block_size, n);
}
