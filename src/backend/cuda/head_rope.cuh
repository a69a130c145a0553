/* head_rope.cuh — one q or k head's RMSNorm (Qwen3's QK-norm) and rope in
 * one warp: lane l holds dims l + 32e (e < E, head_dim = 32E), so every
 * rope pair (i, i + head_dim / 2) is in one lane. The sum of squares runs in
 * k_rmsnorm_warp's order and the rotation is k_rope's (fp32 angle, precise
 * cosf / sinf). One definition for k_qk_norm_rope (k_rope.cu) and the
 * decode attention's new K rows and q heads (k_attention.cu), so a row's
 * bits do not depend on which kernel formed it. */
#pragma once

#include "backend/cuda/cuda_common.cuh"

/* the rotation of position pos for this lane's pairs (dims lane + 32e, e < E / 2) */
template <int E>
__device__ __forceinline__ void head_angles(int pos, const float *inv_freq, int lane, float (&cs)[E / 2],
                                            float (&sn)[E / 2]) {
#pragma unroll
    for (int e = 0; e < E / 2; e++) {
        float ang = (float)pos * inv_freq[lane + 32 * e];
        cs[e] = cosf(ang);
        sn[e] = sinf(ang);
    }
}

/* a rope pair (a, b) turned by the angle of (c, s) = (cos, sin): a c - b s,
 * b c + a s, with the fused multiply-adds written out, so no call site can
 * contract them differently (k_rope and k_qk_norm_rope give the same bits) */
__device__ __forceinline__ void rope_pair(float &a, float &b, float c, float s) {
    float a2 = __fmaf_rn(a, c, -__fmul_rn(b, s)), b2 = __fmaf_rn(b, c, __fmul_rn(a, s));
    a = a2;
    b = b2;
}

/* x (this lane's E dims of the head) = rope(RMSNorm(x) * w) in place; the
 * norm skipped when norm is false (w then unread). Every lane of the warp
 * takes part (the sum of squares is a warp sum). */
template <int E>
__device__ __forceinline__ void head_norm_rope(float (&x)[E], bool norm, const float (&w)[E], float eps,
                                               const float (&cs)[E / 2], const float (&sn)[E / 2]) {
    if (norm) {
        float ss = 0.f;
#pragma unroll
        for (int e = 0; e < E; e++) ss = fmaf(x[e], x[e], ss);
        ss = warp_sum(ss);
        float inv = 1.0f / sqrtf(ss / (float)(32 * E) + eps);
#pragma unroll
        for (int e = 0; e < E; e++) x[e] = w[e] * (x[e] * inv);
    }
#pragma unroll
    for (int e = 0; e < E / 2; e++) rope_pair(x[e], x[e + E / 2], cs[e], sn[e]);
}
