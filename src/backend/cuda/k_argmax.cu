/* k_argmax.cu — out[r] = the index of the largest value of row r of in
 * (n, cols), the lowest such index on ties, NaNs never chosen unless the
 * row's first value is NaN (then 0): sample_argmax's rule on the host
 * (best = 0; best = i where x[i] > x[best]).
 * A row is cut in slices of AM_SPAN values, one block each (grid (slices,
 * n)), so a 151,936-wide vocabulary is read by 38 SMs with all of a
 * thread's loads in flight at once, not by one block in ~150 rounds of L2
 * loads. Each value becomes one 64-bit key, (order-preserving bits of the
 * value) << 32 | ~index: the largest key is the largest value at its lowest
 * index, whatever order the keys meet in. A block's largest key goes to
 * the row's accumulator by atomicMax; the last block of the row to arrive
 * (an arrival counter, one acquire/release atomic a block, so the keys
 * before it are seen) takes the accumulator, writes the index and leaves
 * both at zero for the next launch.
 * Workspace (this file's, grown outside graph capture, every byte zero
 * between launches, so any n may lay it out): acc (n) u64, then arrived
 * (n) u32. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define AM_THREADS 256
#define AM_PER_THREAD 16
#define AM_SPAN (AM_THREADS * AM_PER_THREAD) /* values of a block's slice */

__global__ void __launch_bounds__(AM_THREADS)
k_argmax(int32_t *out, const float *in, int cols, unsigned long long *acc, unsigned int *arrived) {
    pdl_start();
    __shared__ unsigned long long wbest[AM_THREADS / 32];
    int row = blockIdx.y, t = threadIdx.x;
    const float *x = in + (size_t)row * cols;
    int base = blockIdx.x * AM_SPAN + t;
    float v[AM_PER_THREAD];
#pragma unroll
    for (int i = 0; i < AM_PER_THREAD; i++) { /* every load issued before any compare */
        int c = base + i * AM_THREADS;
        v[i] = c < cols ? x[c] : __int_as_float(0x7fc00000); /* NaN: key 0 */
    }
    unsigned long long best = 0ull;
#pragma unroll
    for (int i = 0; i < AM_PER_THREAD; i++) {
        uint32_t o = order_key(v[i]);
        unsigned long long key = (unsigned long long)o << 32 | (0xffffffffu - (uint32_t)(base + i * AM_THREADS));
        if (o && key > best) best = key; /* (a NaN is no candidate) */
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long b = __shfl_xor_sync(0xffffffffu, best, o);
        best = b > best ? b : best;
    }
    if ((t & 31) == 0) wbest[t >> 5] = best;
    __syncthreads();
    if (t != 0) return;
    for (int w = 1; w < AM_THREADS / 32; w++) best = wbest[w] > best ? wbest[w] : best;
    if (best) atomicMax(acc + row, best);
    if (arrive_acq_rel(arrived + row) != gridDim.x - 1) return; /* (releases the key, acquires the others') */
    unsigned long long k = atomicExch(acc + row, 0ull);
    arrived[row] = 0;
    float first = x[0];
    out[row] = first != first || !k ? 0 : (int32_t)(0xffffffffu - (uint32_t)(k & 0xffffffffu));
}

static ks_workspace am_ws;

extern "C" void ks_cuda_argmax(ks_stream s, int32_t *out, const float *in, int n, int cols) {
    if (n <= 0 || cols <= 0) return;
    unsigned long long *acc =
        (unsigned long long *)ks_cuda_zeroed_workspace(&am_ws, s, (size_t)n * 12, "argmax accumulators");
    if (!acc) return;
    unsigned int *arrived = (unsigned int *)(acc + n);
    dim3 grid((cols + AM_SPAN - 1) / AM_SPAN, n);
    ks_launch(k_argmax, grid, AM_THREADS, 0, s, out, in, cols, acc, arrived);
}
