/* k_attention.cu — causal attention over the paged KV cache, GQA, as
 * flash-decoding in two passes:
 *   out[t, h] = sum_{j <= pos[t]} softmax_j(q[t,h] . K[j, h/g] * scale) V[j, h/g]
 * K/V row of position j of sequence seq[t]: slot = table[j / bs] * bs + j % bs
 * (bf16 rows of nkv * hd; hd a multiple of 8, at most 256).
 * Keys are cut in chunks of ATT_CHUNK; Z = min(KV capacity / ATT_CHUNK,
 * ATT_MAX_Z) blocks per (token, group of up to ATT_HB query heads of one KV
 * head) take chunks z, z+Z, z+2Z, ...; each K/V row is read once for the
 * group's heads (reading it once per query head made the kernel bound by
 * L1 traffic at 4x the KV size: 0.7 TB/s at 64k keys).
 * Pass 1, per block and chunk:
 *   scores — thread i scores key j0+i for each head, its row's 16-byte
 *            loads issued together before the dot products (q in shared
 *            memory); each head's chunk max and sum are reduced in a fixed
 *            order;
 *   values — warp w takes keys w, w+4, ... of the chunk, lane l holds dims
 *            l*D .. l*D+D-1 (D = HD/32: one coalesced row read per key and
 *            warp), VB keys' rows loaded at a time; the 4 warps' sums are
 *            added in warp order through shared memory;
 * and the chunk is merged into each head's running (m, l, o) online -> one
 * partial per block and head.
 * Pass 2, one block per (token, head): merges the partials in order:
 *   M = max m_z, L = sum l_z e^(m_z - M), out = sum o_z e^(m_z - M) / L.
 * A head's arithmetic is the same in any block shape and depends only on
 * the token's context length and the (fixed) KV capacity, so a token's
 * result is the same whatever else is in the launch (DESIGN.md principle 2),
 * and launch shapes are fixed for CUDA graphs. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define ATT_CHUNK 128
#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_MAX_HD 256
#define ATT_WS_BYTES (256u << 20) /* workspace cap: tokens are sliced to fit */
#define ATT_MAX_Z 128            /* blocks per (token, head group); each loops over its chunks */
#define ATT_HB 4                 /* query heads of one KV group per block */

/* D consecutive bf16 (2 D bytes, aligned) -> floats */
template <int D>
__device__ __forceinline__ void loadv(const __nv_bfloat16 *p, float *f) {
    if constexpr (D == 8) {
        unpack8(__ldg(reinterpret_cast<const uint4 *>(p)), p, f);
    } else if constexpr (D == 4) {
        uint2 u = __ldg(reinterpret_cast<const uint2 *>(p));
        f[0] = __uint_as_float(u.x << 16); f[1] = __uint_as_float(u.x & 0xffff0000u);
        f[2] = __uint_as_float(u.y << 16); f[3] = __uint_as_float(u.y & 0xffff0000u);
    } else {
        uint32_t u = __ldg(reinterpret_cast<const unsigned int *>(p));
        f[0] = __uint_as_float(u << 16); f[1] = __uint_as_float(u & 0xffff0000u);
    }
}

/* HD: 64, 128 or 256, the bound on hd that sizes the per-lane work. A block
 * serves up to ATT_HB query heads of one KV group (heads h0 .. h0+nhb-1),
 * so each K/V row is read once for all of them. */
template <int HD>
__global__ void __launch_bounds__(ATT_THREADS, 4)
k_attn_chunk(float *part_o, float *part_ml, const float *q, int q_stride, const __nv_bfloat16 *kc,
             const __nv_bfloat16 *vc, const int32_t *pos, const int32_t *seq, const int32_t *tables, int max_blocks,
             int bs, int nh, int nkv, int hd, float scale, int Z, int t_base) {
    constexpr int D = HD / 32;           /* value dims per lane */
    constexpr int KB = HD / 8 < 8 ? HD / 8 : 8; /* key loads in flight per thread */
    constexpr int VB = D == 8 ? 4 : 8;   /* value rows in flight per warp (more spill) */
    constexpr int NA = (HD + ATT_THREADS - 1) / ATT_THREADS; /* output dims per thread */
    constexpr int HB = ATT_HB;
    pdl_start();
    int t = t_base + blockIdx.x, z = blockIdx.z, tid = threadIdx.x;
    int warp = tid >> 5, lane = tid & 31;
    int G = nh / nkv, nsub = (G + HB - 1) / HB;
    int g = blockIdx.y / nsub, h0 = g * G + (blockIdx.y % nsub) * HB;
    int nhb = G - (h0 - g * G) < HB ? G - (h0 - g * G) : HB;
    int n_ctx = pos[t] + 1;
    if (z * ATT_CHUNK >= n_ctx) return; /* no keys here: the merge reads only the blocks that saw keys */
    int kv_dim = nkv * hd, hd8 = hd / 8;
    const int32_t *table = tables + (size_t)seq[t] * max_blocks;
    __shared__ __align__(16) float qs[HB][HD];
    __shared__ float ps[HB][ATT_CHUNK];
    __shared__ int slots[ATT_CHUNK];
    __shared__ float red[ATT_WARPS][HB];
    __shared__ float ow[ATT_WARPS][HB][HD];
    for (int i = tid; i < HB * HD; i += ATT_THREADS) {
        int hh = i / HD, d = i % HD;
        qs[hh][d] = hh < nhb && d < hd ? q[(size_t)t * q_stride + (size_t)(h0 + hh) * hd + d] : 0.f;
    }
    float M[HB], L[HB], acc[HB][NA];
#pragma unroll
    for (int hh = 0; hh < HB; hh++) {
        M[hh] = -INFINITY;
        L[hh] = 0.f;
#pragma unroll
        for (int i = 0; i < NA; i++) acc[hh][i] = 0.f;
    }
    const bool vlane = lane * D < hd;
    /* this block takes chunks z, z + Z, z + 2Z, ... and merges them online */
    for (int j0 = z * ATT_CHUNK; j0 < n_ctx; j0 += Z * ATT_CHUNK) {
        int cnt = n_ctx - j0 < ATT_CHUNK ? n_ctx - j0 : ATT_CHUNK;
        __syncthreads(); /* qs ready / previous chunk's ps, slots and ow consumed */
        if (tid < cnt) {
            int j = j0 + tid;
            slots[tid] = table[j / bs] * bs + j % bs;
        }
        __syncthreads();
        /* scores: thread tid, key j0 + tid, every head of the block */
        float sc[HB];
#pragma unroll
        for (int hh = 0; hh < HB; hh++) sc[hh] = 0.f;
        if (tid < cnt) {
            const uint4 *k8 = reinterpret_cast<const uint4 *>(kc + (size_t)slots[tid] * kv_dim + (size_t)g * hd);
#pragma unroll
            for (int c0 = 0; c0 < HD / 8; c0 += KB) {
                uint4 kr[KB];
#pragma unroll
                for (int c = 0; c < KB; c++)
                    if (c0 + c < hd8) kr[c] = __ldg(k8 + c0 + c);
#pragma unroll
                for (int c = 0; c < KB; c++)
                    if (c0 + c < hd8) {
                        float a[8];
                        unpack8(kr[c], kc, a);
#pragma unroll
                        for (int hh = 0; hh < HB; hh++) {
                            const float4 *q4 = reinterpret_cast<const float4 *>(&qs[hh][(c0 + c) * 8]);
                            float4 x0 = q4[0], x1 = q4[1];
                            float d0 = sc[hh];
                            d0 = fmaf(a[0], x0.x, d0); d0 = fmaf(a[1], x0.y, d0);
                            d0 = fmaf(a[2], x0.z, d0); d0 = fmaf(a[3], x0.w, d0);
                            d0 = fmaf(a[4], x1.x, d0); d0 = fmaf(a[5], x1.y, d0);
                            d0 = fmaf(a[6], x1.z, d0); d0 = fmaf(a[7], x1.w, d0);
                            sc[hh] = d0;
                        }
                    }
            }
        }
        /* chunk max and sum per head, fixed order: warp butterfly, then warps in order */
        float m[HB], l[HB];
#pragma unroll
        for (int hh = 0; hh < HB; hh++) {
            sc[hh] = tid < cnt ? sc[hh] * scale : -INFINITY;
            float v = warp_max(sc[hh]);
            if (lane == 0) red[warp][hh] = v;
        }
        __syncthreads();
#pragma unroll
        for (int hh = 0; hh < HB; hh++) {
            m[hh] = red[0][hh];
            for (int w = 1; w < ATT_WARPS; w++) m[hh] = fmaxf(m[hh], red[w][hh]);
        }
        __syncthreads();
#pragma unroll
        for (int hh = 0; hh < HB; hh++) {
            float p = tid < cnt ? expf(sc[hh] - m[hh]) : 0.f;
            ps[hh][tid] = p;
            float v = warp_sum(p);
            if (lane == 0) red[warp][hh] = v;
        }
        __syncthreads(); /* red and ps complete */
#pragma unroll
        for (int hh = 0; hh < HB; hh++) {
            l[hh] = red[0][hh];
            for (int w = 1; w < ATT_WARPS; w++) l[hh] += red[w][hh];
        }
        /* values: warp w, keys w, w + 4, ... in key order */
        float o[HB][D];
#pragma unroll
        for (int hh = 0; hh < HB; hh++)
#pragma unroll
            for (int i = 0; i < D; i++) o[hh][i] = 0.f;
        const __nv_bfloat16 *vbase = vc + (size_t)g * hd + lane * D;
        for (int jb = warp; jb < cnt; jb += VB * ATT_WARPS) {
            float vf[VB][D];
#pragma unroll
            for (int u = 0; u < VB; u++) {
                int jj = jb + u * ATT_WARPS;
                if (vlane && jj < cnt) loadv<D>(vbase + (size_t)slots[jj] * kv_dim, vf[u]);
                else
#pragma unroll
                    for (int i = 0; i < D; i++) vf[u][i] = 0.f;
            }
#pragma unroll
            for (int u = 0; u < VB; u++) {
                int jj = jb + u * ATT_WARPS;
                if (jj < cnt)
#pragma unroll
                    for (int hh = 0; hh < HB; hh++) {
                        float pj = ps[hh][jj];
#pragma unroll
                        for (int i = 0; i < D; i++) o[hh][i] = fmaf(pj, vf[u][i], o[hh][i]);
                    }
            }
        }
        if (vlane)
#pragma unroll
            for (int hh = 0; hh < HB; hh++)
#pragma unroll
                for (int i = 0; i < D; i++) ow[warp][hh][lane * D + i] = o[hh][i];
        __syncthreads();
#pragma unroll
        for (int hh = 0; hh < HB; hh++) {
            float Mn = fmaxf(M[hh], m[hh]), fo = expf(M[hh] - Mn), fc = expf(m[hh] - Mn);
            L[hh] = L[hh] * fo + l[hh] * fc;
#pragma unroll
            for (int i = 0; i < NA; i++) {
                int d = tid + i * ATT_THREADS;
                if (d < hd) {
                    float sum = ow[0][hh][d];
#pragma unroll
                    for (int w = 1; w < ATT_WARPS; w++) sum += ow[w][hh][d];
                    acc[hh][i] = acc[hh][i] * fo + sum * fc;
                }
            }
            M[hh] = Mn;
        }
    }
#pragma unroll
    for (int hh = 0; hh < HB; hh++) {
        if (hh >= nhb) break;
        size_t pidx = ((size_t)blockIdx.x * nh + h0 + hh) * Z + z;
        float *po = part_o + pidx * hd;
#pragma unroll
        for (int i = 0; i < NA; i++) {
            int d = tid + i * ATT_THREADS;
            if (d < hd) po[d] = acc[hh][i];
        }
        if (tid == 0) {
            part_ml[pidx * 2] = M[hh];
            part_ml[pidx * 2 + 1] = L[hh];
        }
    }
}

__global__ void k_attn_merge(float *out, const float *part_o, const float *part_ml, const int32_t *pos, int nh, int hd,
                             int Z, int t_base) {
    pdl_start();
    int t = t_base + blockIdx.x, h = blockIdx.y;
    int n_chunks = (pos[t] + ATT_CHUNK) / ATT_CHUNK;
    int used = n_chunks < Z ? n_chunks : Z; /* blocks that saw keys */
    size_t base = ((size_t)blockIdx.x * nh + h) * Z;
    merge_partials(out + ((size_t)t * nh + h) * hd, part_o + base * hd, part_ml + base * 2, used, hd, threadIdx.x, blockDim.x);
}

static ks_workspace att_ws;

/* Z (blocks per head group) from the KV capacity only: the work split of a token
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
    if (head_dim > ATT_MAX_HD || head_dim % 8) {
        ks_cuda_fail("attention: head_dim must be a multiple of 8, at most 256", cudaErrorInvalidValue, __FILE__,
                     __LINE__);
        return;
    }
    auto chunk = head_dim <= 64 ? k_attn_chunk<64> : head_dim <= 128 ? k_attn_chunk<128> : k_attn_chunk<256>;
    int Z = att_z(kv_capacity);
    int slice;
    float *ws = ks_partials_ws(&att_ws, s, n, (size_t)n_heads * Z, head_dim, ATT_WS_BYTES, "attention workspace", &slice);
    if (!ws) return;
    float *part_o = ws, *part_ml = ws + (size_t)slice * n_heads * Z * head_dim;
    for (int t0 = 0; t0 < n; t0 += slice) {
        int nt = n - t0 < slice ? n - t0 : slice;
        int nsub = (n_heads / n_kv_heads + ATT_HB - 1) / ATT_HB;
        ks_launch(chunk, dim3(nt, n_kv_heads * nsub, Z), ATT_THREADS, 0, s, part_o, part_ml, q, q_stride, kc, vc, pos, seq, tables,
                                                                  max_blocks, block_size, n_heads, n_kv_heads,
                                                                  head_dim, scale, Z, t0);
        CUDA_CHECK_LAUNCH();
        ks_launch(k_attn_merge, dim3(nt, n_heads), head_dim < 128 ? 32 : 128, 0, s, out, part_o, part_ml, pos, n_heads,
                                                                             head_dim, Z, t0);
        CUDA_CHECK_LAUNCH();
    }
}
