/* k_logprobs.cu — log-probabilities on the device (backend op
 * logprob_rows): for each row (a copy of the logits as the model computed
 * them), the normaliser lz = max + log(sum e^(l - max)), the chosen id's
 * logit, and the top largest logits, largest first, ties to the lower id —
 * row_logprobs.c's rule. One block of LP_THREADS a row: a pass for the max,
 * one for the sum (each e^(l - max) in double, as the host; the sum's order
 * differs, so lz may differ in its last bits), then one pass per top entry,
 * each the largest (value, lower id) below the one before (rows are read
 * from L2: 20 passes of a 151,936-logit row are ~12 MB of L2 reads). NaNs
 * are never picked. */
#include <math.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

extern "C" {
#include "backend/backend.h"
}

#ifndef LP_THREADS
#define LP_THREADS 1024
#endif
#define LP_WARPS (LP_THREADS / 32)

/* (v, i) ranks before (w, j): larger value, then the lower id */
__device__ __forceinline__ bool lp_before(float v, int i, float w, int j) { return v > w || (v == w && i < j); }

__global__ void __launch_bounds__(LP_THREADS)
    k_logprob_rows(const float *raw, int cols, const int32_t *ids, const int32_t *rows, int top, bk_logprobs *out) {
    __shared__ float s_v[LP_WARPS];
    __shared__ int s_i[LP_WARPS];
    __shared__ double s_z[LP_WARPS];
    pdl_start();
    const float *row = raw + (size_t)blockIdx.x * cols;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < cols; i += LP_THREADS) mx = row[i] > mx ? row[i] : mx;
    for (int o = 16; o; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, mx, o);
        mx = w > mx ? w : mx;
    }
    if (!lane) s_v[warp] = mx;
    __syncthreads();
    mx = s_v[0];
    for (int w = 1; w < LP_WARPS; w++) mx = s_v[w] > mx ? s_v[w] : mx;
    double z = 0;
    for (int i = threadIdx.x; i < cols; i += LP_THREADS) z += exp((double)__fsub_rn(row[i], mx));
    for (int o = 16; o; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
    __syncthreads(); /* (s_v read above by every thread) */
    if (!lane) s_z[warp] = z;
    __syncthreads();
    bk_logprobs *o = &out[blockIdx.x];
    if (threadIdx.x == 0) {
        double t = 0;
        for (int w = 0; w < LP_WARPS; w++) t += s_z[w];
        int id = ids[rows[blockIdx.x]];
        o->lz = mx + (float)log(t);
        o->id = id;
        o->logit = id >= 0 && id < cols ? row[id] : -INFINITY;
        o->n_top = min(min(top, cols), BK_MAX_TOP);
    }
    int n_top = min(min(top, cols), BK_MAX_TOP);
    float pv = INFINITY;
    int pi = -1;
    for (int k = 0; k < n_top; k++) {
        float bv = -INFINITY;
        int bi = -1;
        for (int i = threadIdx.x; i < cols; i += LP_THREADS) {
            float v = row[i];
            bool below = pi < 0 || lp_before(pv, pi, v, i); /* ranks after the last pick */
            if (below && v == v && (bi < 0 || lp_before(v, i, bv, bi))) bv = v, bi = i;
        }
        for (int off = 16; off; off >>= 1) {
            float w = __shfl_xor_sync(0xffffffffu, bv, off);
            int j = __shfl_xor_sync(0xffffffffu, bi, off);
            if (j >= 0 && (bi < 0 || lp_before(w, j, bv, bi))) bv = w, bi = j;
        }
        __syncthreads(); /* (the last round's picks read) */
        if (!lane) s_v[warp] = bv, s_i[warp] = bi;
        __syncthreads();
        bv = s_v[0], bi = s_i[0];
        for (int w = 1; w < LP_WARPS; w++)
            if (s_i[w] >= 0 && (bi < 0 || lp_before(s_v[w], s_i[w], bv, bi))) bv = s_v[w], bi = s_i[w];
        if (threadIdx.x == 0) o->top_id[k] = bi, o->top[k] = bv;
        pv = bv, pi = bi;
        if (bi < 0) break; /* (a row of NaNs: nothing left) */
    }
}

extern "C" void ks_cuda_logprob_rows(ks_stream s, const float *raw, int cols, const int32_t *ids, const int32_t *rows,
                                     int n, int top, bk_logprobs *out) {
    if (n <= 0) return;
    ks_launch(k_logprob_rows, dim3(n), LP_THREADS, 0, s, raw, cols, ids, rows, top, out);
}
