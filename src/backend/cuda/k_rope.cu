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
