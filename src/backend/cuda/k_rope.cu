/* k_rope.cu — rotary embedding in place, half-split pairs (i, i + d/2):
 *   a' = a cos - b sin, b' = b cos + a sin, angle = pos[t] * inv_freq[i]
 * (fp32 angle and precise cosf/sinf, as the CPU backend and transformers). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

__global__ void k_rope(float *x, int stride, int n, int nh, int hd, const int32_t *pos, const float *inv_freq) {
    pdl_start();
    int half = hd / 2;
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (long long)n * nh * half) return;
    int i = (int)(idx % half), h = (int)((idx / half) % nh), t = (int)(idx / ((long long)half * nh));
    float ang = (float)pos[t] * inv_freq[i];
    float c = cosf(ang), s = sinf(ang);
    float *v = x + (size_t)t * stride + (size_t)h * hd;
    float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
}

extern "C" void ks_cuda_rope(ks_stream s, float *x, int row_stride, int n, int n_heads, int head_dim,
                             const int32_t *pos, const float *inv_freq) {
    long long total = (long long)n * n_heads * (head_dim / 2);
    ks_launch(k_rope, (unsigned)((total + 255) / 256), 256, 0, s, x, row_stride, n, n_heads, head_dim, pos, inv_freq);
    CUDA_CHECK_LAUNCH();
}

/* Per-head RMSNorm (Qwen3's QK-norm; each skipped when its weights, q_w or
 * k_w, are NULL) and rope of
 * the nh + nkv q and k heads that start each qkv row, one warp per (token,
 * head) when head_dim is a multiple of 64: lane l holds dims l + 32e, so
 * every rope pair (i, i + head_dim/2) is in one lane. The sum of squares
 * runs in k_rmsnorm_warp's order and the rotation is k_rope's, so the
 * results equal rmsnorm, rmsnorm, rope; other head sizes take those three.
 * With a cache (kc non-NULL) the k heads are also stored, rounded to bf16
 * as ks_cuda_kv_store does, at row slots[t], and nkv more warps per token
 * store the v heads. */
/* a warp's head (lane l holds dims l + 32e) into a cache row, rounded to
 * bf16 as ks_cuda_kv_store does */
template <int E>
__device__ __forceinline__ void store_head(__nv_bfloat16 *dst, const float *x, int lane) {
#pragma unroll
    for (int e = 0; e < E; e++) dst[lane + 32 * e] = __float2bfloat16_rn(x[e]);
}

template <int E>
__global__ void k_qk_norm_rope(float *qkv, int stride, int n, int nh, int nkv, const float *q_w, const float *k_w,
                               float eps, const int32_t *pos, const float *inv_freq, __nv_bfloat16 *kc,
                               __nv_bfloat16 *vc, const int32_t *slots) {
    pdl_trigger();
    constexpr int HD = 32 * E;
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    int heads = nh + nkv + (kc ? nkv : 0);
    if (row >= n * heads) return;
    int t = row / heads, h = row % heads;
    /* before the programmatic wait: what the kernel before cannot have
     * written — the weights, the step's positions and slots (host uploads)
     * and so the rotation's cos / sin */
    int slot = kc ? slots[t] : 0;
    const float *w = h < nh ? q_w : k_w;
    float wv[E], cs[E / 2], sn[E / 2];
    bool rot = h < nh + nkv;
    if (rot) {
#pragma unroll
        for (int e = 0; e < E; e++) wv[e] = w ? w[lane + 32 * e] : 0.f;
#pragma unroll
        for (int e = 0; e < E / 2; e++) {
            float ang = (float)pos[t] * inv_freq[lane + 32 * e];
            cs[e] = cosf(ang);
            sn[e] = sinf(ang);
        }
    }
    pdl_wait();
    float *v = qkv + (size_t)t * stride + (size_t)h * HD;
    float x[E];
#pragma unroll
    for (int e = 0; e < E; e++) x[e] = v[lane + 32 * e];
    if (!rot) { /* a v head: stored as it is */
        store_head<E>(vc + (size_t)slot * nkv * HD + (size_t)(h - nh - nkv) * HD, x, lane);
        return;
    }
    if (w) {
        float ss = 0.f;
#pragma unroll
        for (int e = 0; e < E; e++) ss = fmaf(x[e], x[e], ss);
        ss = warp_sum(ss);
        float inv = 1.0f / sqrtf(ss / (float)HD + eps);
#pragma unroll
        for (int e = 0; e < E; e++) x[e] = wv[e] * (x[e] * inv);
    }
#pragma unroll
    for (int e = 0; e < E / 2; e++) {
        float a = x[e], b = x[e + E / 2];
        x[e] = a * cs[e] - b * sn[e];
        x[e + E / 2] = b * cs[e] + a * sn[e];
    }
#pragma unroll
    for (int e = 0; e < E; e++) v[lane + 32 * e] = x[e];
    if (kc && h >= nh) store_head<E>(kc + (size_t)slot * nkv * HD + (size_t)(h - nh) * HD, x, lane);
}

extern "C" void ks_cuda_qk_norm_rope(ks_stream s, float *qkv, int stride, int n, int nh, int nkv, int hd,
                                     const float *q_w, const float *k_w, float eps, const int32_t *pos,
                                     const float *inv_freq, void *kcv, void *vcv, const int32_t *slots) {
    __nv_bfloat16 *kc = (__nv_bfloat16 *)kcv, *vc = (__nv_bfloat16 *)vcv;
    int rows = n * (nh + nkv + (kc ? nkv : 0)), blocks = (rows + 7) / 8;
    if (n <= 0) return;
#define QKR(E) ks_launch(k_qk_norm_rope<E>, blocks, 256, 0, s, qkv, stride, n, nh, nkv, q_w, k_w, eps, pos, inv_freq, kc, vc, slots)
    if (hd == 64) QKR(2);
    else if (hd == 128) QKR(4);
    else if (hd == 256) QKR(8);
#undef QKR
    else {
        if (q_w) ks_cuda_rmsnorm(s, qkv, stride, qkv, stride, q_w, n, nh, hd, eps);
        if (k_w) ks_cuda_rmsnorm(s, qkv + (size_t)nh * hd, stride, qkv + (size_t)nh * hd, stride, k_w, n, nkv, hd, eps);
        ks_cuda_rope(s, qkv, stride, n, nh + nkv, hd, pos, inv_freq);
        if (kc)
            ks_cuda_kv_store(s, kc, vc, qkv + (size_t)nh * hd, qkv + (size_t)(nh + nkv) * hd, stride, slots, n,
                             nkv * hd);
        return;
    }
    CUDA_CHECK_LAUNCH();
}
