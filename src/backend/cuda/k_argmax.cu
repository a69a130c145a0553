/* k_argmax.cu — out[r] = the index of the largest value of row r of in
 * (n, cols), the lowest such index on ties (as sample_argmax on the host).
 * One block per row: each thread scans its stride keeping the first maximum
 * it meets, then a fixed-order tree picks the larger value, the lower index
 * on ties. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define AM_THREADS 256

__global__ void __launch_bounds__(AM_THREADS) k_argmax(int32_t *out, const float *in, int cols) {
    pdl_start();
    const float *x = in + (size_t)blockIdx.x * cols;
    __shared__ float bv[AM_THREADS];
    __shared__ int bi[AM_THREADS];
    int t = threadIdx.x, best = t < cols ? t : 0;
    float v = x[best];
    for (int i = t + AM_THREADS; i < cols; i += AM_THREADS)
        if (x[i] > v) {
            v = x[i];
            best = i;
        }
    bv[t] = v;
    bi[t] = best;
    __syncthreads();
    for (int h = AM_THREADS / 2; h > 0; h >>= 1) {
        if (t < h) {
            float o = bv[t + h];
            int oi = bi[t + h];
            if (o > bv[t] || (o == bv[t] && oi < bi[t])) {
                bv[t] = o;
                bi[t] = oi;
            }
        }
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = bi[0];
}

extern "C" void ks_cuda_argmax(ks_stream s, int32_t *out, const float *in, int n, int cols) {
    if (n <= 0 || cols <= 0) return;
    ks_launch(k_argmax, n, AM_THREADS, 0, s, out, in, cols);
}
