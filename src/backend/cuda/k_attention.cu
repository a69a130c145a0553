/* k_attention.cu — causal attention over the paged KV cache, GQA:
 *   out[t, h] = sum_{j <= pos[t]} softmax_j(q[t,h] . K[j, h/g] * scale) V[j, h/g]
 * K/V row of position j of sequence seq[t]: slot = table[j / bs] * bs + j % bs.
 * One block of ATT_WARPS warps per (token, query head). Warp w takes keys
 * w, w + ATT_WARPS, ...; each lane holds head_dim/32 dims, the q.k dot is a
 * butterfly warp sum, softmax is online (running max and sum) in fp32; the
 * warps' partial results are merged in warp order. The work split depends
 * only on the token's own context length, so results are batch-invariant. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define ATT_WARPS 4
#define ATT_MAX_DPL 8 /* dims per lane: head_dim <= 256 */

__global__ void __launch_bounds__(ATT_WARPS * 32)
k_attention(float *out, const float *q, int q_stride, const float *kc, const float *vc, const int32_t *pos,
            const int32_t *seq, const int32_t *tables, int max_blocks, int bs, int nh, int nkv, int hd, float scale) {
    int t = blockIdx.x, h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int g = h / (nh / nkv), kv_dim = nkv * hd, dpl = (hd + 31) / 32;
    const float *qh = q + (size_t)t * q_stride + (size_t)h * hd;
    const int32_t *table = tables + (size_t)seq[t] * max_blocks;
    int n_ctx = pos[t] + 1;
    float qv[ATT_MAX_DPL], acc[ATT_MAX_DPL];
#pragma unroll
    for (int i = 0; i < ATT_MAX_DPL; i++) {
        qv[i] = i < dpl && lane * dpl + i < hd ? qh[lane * dpl + i] : 0.f;
        acc[i] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    for (int j = warp; j < n_ctx; j += ATT_WARPS) {
        size_t slot = (size_t)table[j / bs] * bs + j % bs;
        const float *kr = kc + slot * kv_dim + (size_t)g * hd + lane * dpl;
        float d = 0.f;
#pragma unroll
        for (int i = 0; i < ATT_MAX_DPL; i++)
            if (i < dpl && lane * dpl + i < hd) d = fmaf(qv[i], kr[i], d);
        float sc = warp_sum(d) * scale;
        float mn = fmaxf(m, sc), corr = expf(m - mn), p = expf(sc - mn);
        l = l * corr + p;
        const float *vr = vc + slot * kv_dim + (size_t)g * hd + lane * dpl;
#pragma unroll
        for (int i = 0; i < ATT_MAX_DPL; i++)
            if (i < dpl && lane * dpl + i < hd) acc[i] = acc[i] * corr + p * vr[i];
        m = mn;
    }
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS];
    __shared__ float sacc[ATT_WARPS][256];
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < ATT_MAX_DPL; i++)
        if (i < dpl && lane * dpl + i < hd) sacc[warp][lane * dpl + i] = acc[i];
    __syncthreads();
    if (warp == 0) {
        float M = -INFINITY;
        for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, sm[w]);
        float L = 0.f, f[ATT_WARPS];
        for (int w = 0; w < ATT_WARPS; w++) {
            f[w] = sl[w] > 0.f ? expf(sm[w] - M) : 0.f;
            L += sl[w] * f[w];
        }
        float inv = 1.0f / L;
        float *o = out + (size_t)t * nh * hd + (size_t)h * hd;
        for (int i = 0; i < dpl && lane * dpl + i < hd; i++) {
            int d = lane * dpl + i;
            float v = 0.f;
            for (int w = 0; w < ATT_WARPS; w++) v += sacc[w][d] * f[w];
            o[d] = v * inv;
        }
    }
}

extern "C" void ks_cuda_attention(ks_stream s, float *out, const float *q, int q_stride, const float *kc,
                                  const float *vc, const int32_t *pos, const int32_t *seq, const int32_t *tables,
                                  int max_blocks, int block_size, int n, int n_heads, int n_kv_heads, int head_dim,
                                  float scale) {
    if (n <= 0) return;
    dim3 grid(n, n_heads);
    k_attention<<<grid, ATT_WARPS * 32, 0, s>>>(out, q, q_stride, kc, vc, pos, seq, tables, max_blocks, block_size,
                                                n_heads, n_kv_heads, head_dim, scale);
    CUDA_CHECK_LAUNCH();
}
