/* k_matmul.cu — out[t, r] = sum_k x[t, k] * W[r, k] (+ bias[r])
 *   W: (rows, k) bf16 / f16 / f32 row-major (the checkpoint's layout), x: (n, k) f32.
 * One warp per output row r. Lane l reads the 16-byte chunks l, l+32, ... of
 * the row (coalesced 512-byte warp loads), keeps one fp32 accumulator per
 * token and adds w*x in chunk order; a fixed xor-butterfly then sums the 32
 * lanes. Tokens are taken in groups of TT, re-reading the row (from L1/L2)
 * for each group (TT = 8 for decode-sized calls, 32 for prefill chunks, so
 * the weights are re-read n/32 times, not n/8). A token's arithmetic is the
 * same for any n and either TT: decode,
 * speculative verify and batched decode give bitwise-equal rows (DESIGN.md
 * principle 2). Memory-bound for small n: the weights are read once per group. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define MM_WARPS 8

template <typename W, int MM_TT>
__global__ void __launch_bounds__(MM_WARPS * 32)
k_matmul(float *__restrict__ out, const float *__restrict__ x, const W *__restrict__ w,
         const float *__restrict__ bias, int n, int k, int rows) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r = blockIdx.x * MM_WARPS + warp;
    if (r >= rows) return;
    const W *wr = w + (size_t)r * k;
    for (int t0 = 0; t0 < n; t0 += MM_TT) {
        int nt = n - t0 < MM_TT ? n - t0 : MM_TT;
        float acc[MM_TT];
#pragma unroll
        for (int t = 0; t < MM_TT; t++) acc[t] = 0.f;
#pragma unroll 4
        for (int kk = lane * 8; kk < k; kk += 256) {
            float wf[8];
            load8(wr + kk, wf);
#pragma unroll
            for (int t = 0; t < MM_TT; t++) {
                if (t < nt) {
                    float xf[8];
                    load8(x + (size_t)(t0 + t) * k + kk, xf);
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[t] = fmaf(wf[i], xf[i], acc[t]);
                }
            }
        }
#pragma unroll
        for (int t = 0; t < MM_TT; t++) {
            if (t < nt) {
                float v = warp_sum(acc[t]);
                if (lane == 0) out[(size_t)(t0 + t) * rows + r] = bias ? v + bias[r] : v;
            }
        }
    }
}

/* k not a multiple of 8: plain per-element loop (same structure, no vectors) */
template <typename W>
__global__ void k_matmul_scalar(float *out, const float *x, const W *w, const float *bias, int n, int k, int rows) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r = blockIdx.x * MM_WARPS + warp;
    if (r >= rows) return;
    for (int t = 0; t < n; t++) {
        float acc = 0.f;
        for (int kk = lane; kk < k; kk += 32) acc = fmaf((float)w[(size_t)r * k + kk], x[(size_t)t * k + kk], acc);
        acc = warp_sum(acc);
        if (lane == 0) out[(size_t)t * rows + r] = bias ? acc + bias[r] : acc;
    }
}

extern "C" void ks_cuda_matmul(ks_stream s, float *out, const float *x, const void *w, int wtype, const float *bias,
                               int n, int k, int rows) {
    if (n <= 0 || rows <= 0) return;
    dim3 grid((rows + MM_WARPS - 1) / MM_WARPS), block(MM_WARPS * 32);
    bool vec = k % 8 == 0;
    switch (wtype) {
    case 2:
        if (vec && n <= 8) k_matmul<__nv_bfloat16, 8><<<grid, block, 0, s>>>(out, x, (const __nv_bfloat16 *)w, bias, n, k, rows);
        else if (vec) k_matmul<__nv_bfloat16, 32><<<grid, block, 0, s>>>(out, x, (const __nv_bfloat16 *)w, bias, n, k, rows);
        else k_matmul_scalar<__nv_bfloat16><<<grid, block, 0, s>>>(out, x, (const __nv_bfloat16 *)w, bias, n, k, rows);
        break;
    case 1:
        if (vec && n <= 8) k_matmul<__half, 8><<<grid, block, 0, s>>>(out, x, (const __half *)w, bias, n, k, rows);
        else if (vec) k_matmul<__half, 32><<<grid, block, 0, s>>>(out, x, (const __half *)w, bias, n, k, rows);
        else k_matmul_scalar<__half><<<grid, block, 0, s>>>(out, x, (const __half *)w, bias, n, k, rows);
        break;
    default:
        if (vec && n <= 8) k_matmul<float, 8><<<grid, block, 0, s>>>(out, x, (const float *)w, bias, n, k, rows);
        else if (vec) k_matmul<float, 32><<<grid, block, 0, s>>>(out, x, (const float *)w, bias, n, k, rows);
        else k_matmul_scalar<float><<<grid, block, 0, s>>>(out, x, (const float *)w, bias, n, k, rows);
        break;
    }
    CUDA_CHECK_LAUNCH();
}
