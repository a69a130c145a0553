/* k_matmul.cu — out[t, r] = sum_k x[t, k] * W[r, k] (+ bias[r])
 *   W: (rows, k) bf16 / f16 / f32 row-major (the checkpoint's layout), x: (n, k) f32.
 * One warp per R output rows (R = 2 by default; loads of the rows interleaved). Lane l reads the 16-byte chunks l, l+32, ... of
 * the row (coalesced 512-byte warp loads), keeps one fp32 accumulator per
 * token and adds w*x in chunk order; a fixed xor-butterfly then sums the 32
 * lanes. Tokens are taken in groups of TT, re-reading the row (from L1/L2)
 * for each group (TT = 8 up to 8 tokens, 16 above: a verify step or a batch
 * of up to 16 reads the weights once; prompt chunks go to k_gemm.cu). A
 * token's arithmetic is the same for any n and either TT: decode,
 * speculative verify and batched decode give bitwise-equal rows (DESIGN.md
 * principle 2). Memory-bound for small n: the weights are read once per group. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#include <stdlib.h>

#define MM_WARPS 8

/* 16 weight bytes, read-only path; HINT asks L2 to fetch the whole 256-byte
 * sector group (the rest of the row is read right after). */
template <int HINT>
__device__ __forceinline__ uint4 ldw16(const void *p) {
    uint4 u;
    if (HINT)
        asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
                     : "l"(p));
    else
        u = __ldg(reinterpret_cast<const uint4 *>(p));
    return u;
}

/* One warp computes R consecutive rows (their loads interleaved, R x more
 * bytes in flight); each row's sum is formed exactly as with R = 1. */
template <typename W, int MM_TT, int R, int HINT>
__global__ void __launch_bounds__(MM_WARPS * 32)
k_matmul(float *__restrict__ out, const float *__restrict__ x, const W *__restrict__ w,
         const float *__restrict__ bias, int n, int k, int rows) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = (blockIdx.x * MM_WARPS + warp) * R;
    /* programmatic launch: wait for the kernel before; let the next one be
     * scheduled only once this warp's weight rows are read (its blocks
     * waiting earlier held SM slots the matvec's last wave needed) */
    pdl_wait();
    if (r0 >= rows) return;
    for (int t0 = 0; t0 < n; t0 += MM_TT) {
        int nt = n - t0 < MM_TT ? n - t0 : MM_TT;
        float acc[R][MM_TT];
#pragma unroll
        for (int q = 0; q < R; q++)
#pragma unroll
            for (int t = 0; t < MM_TT; t++) acc[q][t] = 0.f;
#pragma unroll 4
        for (int kk = lane * 8; kk < k; kk += 256) {
            uint4 wv[R];
#pragma unroll
            for (int q = 0; q < R; q++) {
                int r = r0 + q < rows ? r0 + q : rows - 1;
                wv[q] = ldw16<HINT>(w + (size_t)r * k + kk);
            }
#pragma unroll
            for (int t = 0; t < MM_TT; t++) {
                if (t < nt) {
                    float xf[8];
                    load8(x + (size_t)(t0 + t) * k + kk, xf);
#pragma unroll
                    for (int q = 0; q < R; q++) {
                        float wf[8];
                        unpack8(wv[q], w, wf);
#pragma unroll
                        for (int i = 0; i < 8; i++) acc[q][t] = fmaf(wf[i], xf[i], acc[q][t]);
                    }
                }
            }
        }
        if (t0 == 0) pdl_trigger();
#pragma unroll
        for (int q = 0; q < R; q++) {
            int r = r0 + q;
#pragma unroll
            for (int t = 0; t < MM_TT; t++) {
                if (t < nt) {
                    float v = warp_sum(acc[q][t]);
                    if (lane == 0 && r < rows) out[(size_t)(t0 + t) * rows + r] = bias ? v + bias[r] : v;
                }
            }
        }
    }
}

/* f32 weights: two float4 per 8 elements, same chunk order */
template <int MM_TT>
__global__ void __launch_bounds__(MM_WARPS * 32)
k_matmul_f32(float *__restrict__ out, const float *__restrict__ x, const float *__restrict__ w,
             const float *__restrict__ bias, int n, int k, int rows) {
    pdl_start();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r = blockIdx.x * MM_WARPS + warp;
    if (r >= rows) return;
    const float *wr = w + (size_t)r * k;
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
    pdl_start();
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

/* KESTREL_MM_VARIANT (tuning aid): rows per warp 1/2/4 without (0, 1, 2) or
 * with (3, 4, 5) the L2 256-byte hint. Default 4 (2 rows, hint): on the H200
 * it read 2.7-3.9 TB/s at Qwen3-8B shapes where 0 read 1.3-2.1 (BENCHMARKS.md). */
static int mm_variant(void) {
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("KESTREL_MM_VARIANT");
        v = e ? atoi(e) : 4;
        if (v < 0 || v > 5) v = 4;
    }
    return v;
}

template <typename W, int R, int HINT>
static void launch_vec(ks_stream s, float *out, const float *x, const W *w, const float *bias, int n, int k, int rows) {
    int rows_per_block = MM_WARPS * R;
    dim3 grid((rows + rows_per_block - 1) / rows_per_block), block(MM_WARPS * 32);
    if (n > 8) /* a verify step or a batch of up to 16: one pass over the weights */
        ks_launch(k_matmul<W, 16, R, HINT>, grid, block, 0, s, out, x, w, bias, n, k, rows);
    else
        ks_launch(k_matmul<W, 8, R, HINT>, grid, block, 0, s, out, x, w, bias, n, k, rows);
}

template <typename W>
static void launch_typed(ks_stream s, float *out, const float *x, const W *w, const float *bias, int n, int k,
                         int rows) {
    switch (mm_variant()) {
    case 0: launch_vec<W, 1, 0>(s, out, x, w, bias, n, k, rows); break;
    case 1: launch_vec<W, 2, 0>(s, out, x, w, bias, n, k, rows); break;
    case 2: launch_vec<W, 4, 0>(s, out, x, w, bias, n, k, rows); break;
    case 3: launch_vec<W, 1, 1>(s, out, x, w, bias, n, k, rows); break;
    case 5: launch_vec<W, 4, 1>(s, out, x, w, bias, n, k, rows); break;
    default: launch_vec<W, 2, 1>(s, out, x, w, bias, n, k, rows); break;
    }
}

extern "C" void ks_cuda_matmul(ks_stream s, float *out, const float *x, const void *w, int wtype, const float *bias,
                               int n, int k, int rows) {
    if (n <= 0 || rows <= 0) return;
    dim3 grid((rows + MM_WARPS - 1) / MM_WARPS), block(MM_WARPS * 32);
    bool vec = k % 8 == 0;
    if (!vec) {
        if (wtype == 2) ks_launch(k_matmul_scalar<__nv_bfloat16>, grid, block, 0, s, out, x, (const __nv_bfloat16 *)w, bias, n, k, rows);
        else if (wtype == 1) ks_launch(k_matmul_scalar<__half>, grid, block, 0, s, out, x, (const __half *)w, bias, n, k, rows);
        else ks_launch(k_matmul_scalar<float>, grid, block, 0, s, out, x, (const float *)w, bias, n, k, rows);
    } else if (wtype == 2) {
        launch_typed<__nv_bfloat16>(s, out, x, (const __nv_bfloat16 *)w, bias, n, k, rows);
    } else if (wtype == 1) {
        launch_typed<__half>(s, out, x, (const __half *)w, bias, n, k, rows);
    } else {
        ks_launch(k_matmul_f32<8>, grid, block, 0, s, out, x, (const float *)w, bias, n, k, rows);
    }
    CUDA_CHECK_LAUNCH();
}
