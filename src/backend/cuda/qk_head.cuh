/* qk_head.cuh — one attention head's input step, as a warp holds it (lane
 * l: dims l + 32e, e < E, so every rope pair (i, i + head_dim/2) is in one
 * lane): Qwen3's per-head RMSNorm (skipped when w is NULL) then rope, and
 * the store of a head into a bf16 cache row. Shared by k_qk_norm_rope
 * (k_rope.cu) and the qkv matvec that does the same step in its epilogue
 * (k_matmul.cu), so both give the same bits: the sum of squares in
 * k_rmsnorm_warp's order, the rotation k_rope's. */
#pragma once

#include "backend/cuda/cuda_common.cuh"

template <int E>
__device__ __forceinline__ void norm_rope_head(float (&x)[E], const float *w, float eps, int pos,
                                               const float *inv_freq, int lane) {
    constexpr int HD = 32 * E;
    if (w) {
        float ss = 0.f;
#pragma unroll
        for (int e = 0; e < E; e++) ss = fmaf(x[e], x[e], ss);
        ss = warp_sum(ss);
        float inv = 1.0f / sqrtf(ss / (float)HD + eps);
#pragma unroll
        for (int e = 0; e < E; e++) x[e] = w[lane + 32 * e] * (x[e] * inv);
    }
#pragma unroll
    for (int e = 0; e < E / 2; e++) {
        int i = lane + 32 * e;
        float ang = (float)pos * inv_freq[i];
        float c = cosf(ang), s = sinf(ang);
        float a = x[e], b = x[e + E / 2];
        x[e] = a * c - b * s;
        x[e + E / 2] = b * c + a * s;
    }
}

/* a warp's head into a cache row, rounded to bf16 as ks_cuda_kv_store does */
template <int E>
__device__ __forceinline__ void store_head(__nv_bfloat16 *dst, const float (&x)[E], int lane) {
#pragma unroll
    for (int e = 0; e < E; e++) dst[lane + 32 * e] = __float2bfloat16_rn(x[e]);
}
