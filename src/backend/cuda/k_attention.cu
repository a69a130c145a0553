/* k_attention.cu — causal attention over the paged KV cache, GQA, as
 * flash-decoding in two passes:
 *   out[t, h] = sum_{j <= pos[t]} softmax_j(q[t,h] . K[j, h/g] * scale) V[j, h/g]
 * K/V row of position j of sequence seq[t]: slot = table[j / bs] * bs + j % bs.
 * Keys are cut in chunks of ATT_CHUNK; Z = min(KV capacity / ATT_CHUNK,
 * ATT_MAX_Z) blocks per (token, query head) take chunks z, z+Z, z+2Z, ...
 * Pass 1, per block and chunk: thread i scores key j0+i (q in shared memory,
 * float4 loads of the key row), the chunk's max and sum are reduced in a fixed
 * order, thread d sums p_j * V[j, d] in key order, and the chunk is merged
 * into the block's running (m, l, o) online -> one partial per block.
 * Pass 2, one block per (token, head): merges the partials in order:
 *   M = max m_z, L = sum l_z e^(m_z - M), out = sum o_z e^(m_z - M) / L.
 * The split depends only on the token's context length and the (fixed) KV
 * capacity, so a token's result is the same whatever else is in the launch
 * (DESIGN.md principle 2), and launch shapes are fixed for CUDA graphs. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define ATT_CHUNK 128
#define ATT_THREADS 128
#define ATT_MAX_HD 256
#define ATT_WS_BYTES (256u << 20) /* workspace cap: tokens are sliced to fit */
#define ATT_MAX_Z 32             /* blocks per (token, head); each loops over its chunks */

__global__ void __launch_bounds__(ATT_THREADS)
k_attn_chunk(float *part_o, float *part_ml, const float *q, int q_stride, const __nv_bfloat16 *kc,
             const __nv_bfloat16 *vc,
             const int32_t *pos, const int32_t *seq, const int32_t *tables, int max_blocks, int bs, int nh, int nkv,
             int hd, float scale, int Z, int t_base) {
    pdl_start();
    int t = t_base + blockIdx.x, h = blockIdx.y, z = blockIdx.z, tid = threadIdx.x;
    int n_ctx = pos[t] + 1;
    size_t pidx = ((size_t)blockIdx.x * nh + h) * Z + z;
    int g = h / (nh / nkv), kv_dim = nkv * hd;
    const int32_t *table = tables + (size_t)seq[t] * max_blocks;
    __shared__ __align__(16) float qs[ATT_MAX_HD];
    __shared__ float ps[ATT_CHUNK];
    __shared__ int slots[ATT_CHUNK];
    __shared__ float red[ATT_THREADS / 32];
    const float *qh = q + (size_t)t * q_stride + (size_t)h * hd;
    for (int d = tid; d < hd; d += ATT_THREADS) qs[d] = qh[d];
    float M = -INFINITY, L = 0.f, acc[ATT_MAX_HD / ATT_THREADS];
#pragma unroll
    for (int i = 0; i < ATT_MAX_HD / ATT_THREADS; i++) acc[i] = 0.f;
    /* this block takes chunks z, z + Z, z + 2Z, ... and merges them online */
    for (int j0 = z * ATT_CHUNK; j0 < n_ctx; j0 += Z * ATT_CHUNK) {
        int cnt = n_ctx - j0 < ATT_CHUNK ? n_ctx - j0 : ATT_CHUNK;
        __syncthreads(); /* qs ready / previous chunk's ps and slots consumed */
        if (tid < cnt) {
            int j = j0 + tid;
            slots[tid] = table[j / bs] * bs + j % bs;
        }
        __syncthreads();
        float sc = -INFINITY;
        if (tid < cnt) {
            const __nv_bfloat16 *kr = kc + (size_t)slots[tid] * kv_dim + (size_t)g * hd;
            float d0 = 0.f;
            if ((hd & 7) == 0) { /* 8 bf16 per 16-byte load */
                const uint4 *k8 = reinterpret_cast<const uint4 *>(kr);
                for (int c = 0; c < hd / 8; c++) {
                    float a[8];
                    unpack8(__ldg(k8 + c), kr, a);
#pragma unroll
                    for (int i = 0; i < 8; i++) d0 = fmaf(a[i], qs[c * 8 + i], d0);
                }
            } else {
                for (int c = 0; c < hd; c++) d0 = fmaf(__bfloat162float(kr[c]), qs[c], d0);
            }
            sc = d0 * scale;
        }
        /* chunk max, fixed order: warp butterfly, then warps in order */
        float m = warp_max(sc);
        if ((tid & 31) == 0) red[tid >> 5] = m;
        __syncthreads();
        m = red[0];
        for (int w = 1; w < ATT_THREADS / 32; w++) m = fmaxf(m, red[w]);
        __syncthreads();
        float p = tid < cnt ? expf(sc - m) : 0.f;
        ps[tid] = p;
        float l = warp_sum(p);
        if ((tid & 31) == 0) red[tid >> 5] = l;
        __syncthreads();
        l = red[0];
        for (int w = 1; w < ATT_THREADS / 32; w++) l += red[w];
        float Mn = fmaxf(M, m), fo = expf(M - Mn), fc = expf(m - Mn);
        L = L * fo + l * fc;
#pragma unroll
        for (int i = 0; i < ATT_MAX_HD / ATT_THREADS; i++) {
            int d = tid + i * ATT_THREADS;
            if (d < hd) {
                float o = 0.f;
#pragma unroll 8
                for (int jj = 0; jj < cnt; jj++)
                    o = fmaf(ps[jj], __bfloat162float(__ldg(vc + (size_t)slots[jj] * kv_dim + (size_t)g * hd + d)), o);
                acc[i] = acc[i] * fo + o * fc;
            }
        }
        M = Mn;
    }
    float *po = part_o + pidx * hd;
#pragma unroll
    for (int i = 0; i < ATT_MAX_HD / ATT_THREADS; i++) {
        int d = tid + i * ATT_THREADS;
        if (d < hd) po[d] = acc[i];
    }
    if (tid == 0) {
        part_ml[pidx * 2] = M;
        part_ml[pidx * 2 + 1] = L;
    }
}

__global__ void k_attn_merge(float *out, const float *part_o, const float *part_ml, const int32_t *pos, int nh, int hd,
                             int Z, int t_base) {
    pdl_start();
    int t = t_base + blockIdx.x, h = blockIdx.y;
    int n_chunks = (pos[t] + ATT_CHUNK) / ATT_CHUNK;
    int used = n_chunks < Z ? n_chunks : Z; /* blocks that saw keys */
    size_t base = ((size_t)blockIdx.x * nh + h) * Z;
    merge_partials(out + ((size_t)t * nh + h) * hd, part_o + base * hd, part_ml + base * 2, used, hd);
}

static ks_workspace att_ws;

/* Z (blocks per head) from the KV capacity only: the work split of a token
 * never depends on the batch, and graph replays see fixed launch shapes. */
static int att_z(int kv_capacity) {
    int z = (kv_capacity + ATT_CHUNK - 1) / ATT_CHUNK;
    return z < 1 ? 1 : z > ATT_MAX_Z ? ATT_MAX_Z : z;
}

extern "C" void ks_cuda_attention(ks_stream s, float *out, const float *q, int q_stride, const void *kcv,
                                  const void *vcv, const int32_t *pos, const int32_t *seq, const int32_t *tables,
                                  int max_blocks, int block_size, int n, int n_heads, int n_kv_heads, int head_dim,
                                  float scale, int kv_capacity) {
    if (n <= 0) return;
    const __nv_bfloat16 *kc = (const __nv_bfloat16 *)kcv, *vc = (const __nv_bfloat16 *)vcv;
    if (head_dim > ATT_MAX_HD) {
        ks_cuda_fail("attention: head_dim > 256 not supported", cudaErrorInvalidValue, __FILE__, __LINE__);
        return;
    }
    int Z = att_z(kv_capacity);
    int slice;
    float *ws = ks_partials_ws(&att_ws, s, n, (size_t)n_heads * Z, head_dim, ATT_WS_BYTES, "attention workspace", &slice);
    if (!ws) return;
    float *part_o = ws, *part_ml = ws + (size_t)slice * n_heads * Z * head_dim;
    for (int t0 = 0; t0 < n; t0 += slice) {
        int nt = n - t0 < slice ? n - t0 : slice;
        ks_launch(k_attn_chunk, dim3(nt, n_heads, Z), ATT_THREADS, 0, s, part_o, part_ml, q, q_stride, kc, vc, pos, seq, tables,
                                                                  max_blocks, block_size, n_heads, n_kv_heads,
                                                                  head_dim, scale, Z, t0);
        CUDA_CHECK_LAUNCH();
        ks_launch(k_attn_merge, dim3(nt, n_heads), head_dim < 128 ? 32 : 128, 0, s, out, part_o, part_ml, pos, n_heads,
                                                                             head_dim, Z, t0);
        CUDA_CHECK_LAUNCH();
    }
}
