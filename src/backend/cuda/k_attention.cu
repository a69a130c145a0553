/* k_attention.cu — decode attention over the paged KV cache, GQA, as
 * flash-decoding in one launch:
 *   out[t, h] = sum_{j <= pos[t]} softmax_j(q[t,h] . K[j, h/g] * scale) V[j, h/g]
 * K/V row of position j of sequence seq[t]: slot = table[j / bs] * bs + j % bs
 * (bf16 rows of nkv * hd; hd a multiple of 8, at most 256).
 * Keys are cut in chunks of ATT_CHUNK; Z blocks per (token, group of up to
 * ATT_HB query heads of one KV head) take chunks z, z+Z, z+2Z, ...; each
 * K/V row is read once for the group's heads. Z = min(KV capacity /
 * ATT_CHUNK, the blocks one wave of the GPU holds / groups, ATT_MAX_Z): fixed
 * by the pool, the model and the device, never by the batch.
 * Per block, its chunks in an ATT_STAGES-stage pipeline: the next
 * ATT_STAGES - 1 chunks' K and V rows are being copied to shared memory with
 * cp.async (K's 16-byte pieces xor-swizzled by row) and the block-table
 * slots of the chunk after them loaded while this chunk is used:
 *   scores — KPT = ATT_THREADS / ATT_CHUNK threads take key j0+i, every
 *            KPT-th 16-byte piece of its row each, for each head (q in
 *            shared memory), and add their parts pairwise; each head's chunk
 *            max and sum are reduced in a fixed order (warp butterfly, then
 *            warps in order);
 *   values — thread i sums p_j V[j, d] over the chunk's keys in order for
 *            its dims d = i, i + ATT_THREADS;
 * and the chunk is merged into each head's running (m, l, o) online -> one
 * partial per block and head. The last block of a (token, group) to finish
 * (an arrival counter, reset by that block for the next launch) merges the
 * group's partials in z order:
 *   M = max m_z, L = sum l_z e^(m_z - M), out = sum o_z e^(m_z - M) / L.
 * A head's arithmetic depends only on the token's context length and Z, not
 * on which block merges or what else is in the launch (DESIGN.md principle
 * 2); launch shapes are fixed for CUDA graphs. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define ATT_CHUNK 32
#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_MAX_HD 256
#define ATT_WS_BYTES (256u << 20) /* workspace cap: tokens are sliced to fit */
#define ATT_MAX_Z 128            /* blocks per (token, head group); each loops over its chunks */
#define ATT_HB 4                 /* query heads of one KV group per block */
#define ATT_STAGES 2             /* chunks a block holds: ATT_STAGES - 1 in flight while one is used */
/* The shared-memory carveout asked for the kernel (KB of a 256 KB L1,
 * asked as a percentage of the device's most, rounded up: 58% of 228 KB on
 * the H200; the driver picks a configuration it supports): the rest stays
 * L1, which the matvecs that follow on the same SMs (launched early) need
 * for their loads in flight. Left to the driver, 64-key tiles
 * took the 228 KB carveout and Qwen3-8B decode lost 9%; every kernel at the
 * largest carveout lost 22%. Chunk, stages and carveout measured together
 * on the H200 (BENCHMARKS.md, thirteenth session): 32 keys, 2 stages,
 * 132 KB (3 blocks an SM at head_dim 128) was ahead of the two-kernel
 * version on every row but 16 batched sequences (-0.7%). */
#define ATT_CARVEOUT_KB 132

/* the K and V tiles of one pipeline stage (ATT_CHUNK rows of HD each), and
 * the block's dynamic shared memory: ATT_STAGES of them */
template <int HD>
struct att_stage {
    static constexpr size_t k_bytes = (size_t)ATT_CHUNK * HD * 2;
    static constexpr size_t bytes = 2 * k_bytes;
    static constexpr size_t all = ATT_STAGES * bytes;
};

/* HD: 64, 128 or 256, the bound on hd that sizes the tiles (rows of HD
 * elements in shared memory) and the per-thread dims. Shapes: q (n,
 * q_stride), head h at h * hd; out (n, nh, hd); the workspaces (this file's,
 * grown outside graph capture): part_o (slice, nh, Z, hd), part_ml (slice,
 * nh, Z, 2) as (m, l), arrived (slice, groups) counters, zero between
 * launches. */
template <int HD>
__global__ void __launch_bounds__(ATT_THREADS)
k_attn_decode(float *out, float *part_o, float *part_ml, int *arrived, const float *q, int q_stride,
              const __nv_bfloat16 *kc, const __nv_bfloat16 *vc, const int32_t *pos, const int32_t *seq,
              const int32_t *tables, int max_blocks, int bs, int nh, int nkv, int hd, float scale, int Z, int t_base) {
    constexpr int C = HD / 8;                                /* 16-byte pieces a tile row holds */
    constexpr int NA = (HD + ATT_THREADS - 1) / ATT_THREADS; /* output dims per thread */
    constexpr int HB = ATT_HB;
    constexpr int KPT = ATT_THREADS / ATT_CHUNK;             /* threads per key in the scores */
    static_assert(HB == 4 && KPT * ATT_CHUNK == ATT_THREADS && KPT <= 8, "ps packs 4 heads; KPT threads a key");
    extern __shared__ __align__(16) unsigned char att_tiles[];
    __shared__ __align__(16) float qs[HB][HD];
    __shared__ __align__(16) float4 ps[ATT_CHUNK]; /* the chunk's probabilities, one lane per head */
    __shared__ int slots[ATT_STAGES][ATT_CHUNK];
    __shared__ float red[ATT_WARPS][HB];
    __shared__ float wz[HB][ATT_MAX_Z], inv_l[HB];
    __shared__ int last;
    /* pos, seq and the block tables come from the host's step upload, never
     * from the kernel before: they are read (and the blocks past the keys
     * leave) before the programmatic wait; q and the K/V rows after it */
    pdl_trigger();
    int t = t_base + blockIdx.x, z = blockIdx.z, tid = threadIdx.x;
    int warp = tid >> 5, lane = tid & 31;
    int G = nh / nkv, nsub = (G + HB - 1) / HB;
    int g = blockIdx.y / nsub, h0 = g * G + (blockIdx.y % nsub) * HB;
    int nhb = G - (h0 - g * G) < HB ? G - (h0 - g * G) : HB;
    int n_ctx = pos[t] + 1;
    if (z * ATT_CHUNK >= n_ctx) return; /* no keys here: not among the blocks the merge waits for */
    int n_chunks = (n_ctx + ATT_CHUNK - 1) / ATT_CHUNK, used = n_chunks < Z ? n_chunks : Z;
    int mine = (n_chunks - z + Z - 1) / Z; /* chunks z, z + Z, ... of this block */
    int kv_dim = nkv * hd, hd8 = hd / 8;
    const int32_t *table = tables + (size_t)seq[t] * max_blocks;
    auto slot_of = [&](int ci, int r) -> int {
        int j = (z + ci * Z) * ATT_CHUNK + r;
        return j < n_ctx ? table[j / bs] * bs + j % bs : 0;
    };
    if (tid < ATT_CHUNK)
#pragma unroll
        for (int st = 0; st < ATT_STAGES; st++)
            if (st < mine) slots[st][tid] = slot_of(st, tid);
    __syncthreads(); /* the slots */
    pdl_wait();      /* q and the new K/V rows are the kernel before's: the first chunks' copies start before q is read */
    /* chunk ci of this block's -> stage ci % ATT_STAGES (one cp.async group) */
    auto issue = [&](int ci) {
        unsigned char *st = att_tiles + (ci % ATT_STAGES) * att_stage<HD>::bytes;
        uint4 *kt = reinterpret_cast<uint4 *>(st);
        __nv_bfloat16 *vt = reinterpret_cast<__nv_bfloat16 *>(st + att_stage<HD>::k_bytes);
        int j0 = (z + ci * Z) * ATT_CHUNK, cnt = n_ctx - j0 < ATT_CHUNK ? n_ctx - j0 : ATT_CHUNK;
        for (int i = tid; i < cnt * hd8; i += ATT_THREADS) {
            int r = i / hd8, c = i - r * hd8;
            size_t off = (size_t)slots[ci % ATT_STAGES][r] * kv_dim + (size_t)g * hd + (size_t)c * 8;
            cp_async16(smem_addr(kt + r * C + (c ^ (r % (8 / KPT) * KPT))), kc + off, 16);
            cp_async16(smem_addr(vt + (size_t)r * HD + c * 8), vc + off, 16);
        }
        cp_async_commit();
    };
    float M[HB], L[HB], acc[HB][NA];
#pragma unroll
    for (int hh = 0; hh < HB; hh++) {
        M[hh] = -INFINITY;
        L[hh] = 0.f;
#pragma unroll
        for (int i = 0; i < NA; i++) acc[hh][i] = 0.f;
    }
    int key = tid / KPT, part = tid % KPT;
#pragma unroll
    for (int st = 0; st < ATT_STAGES - 1; st++) {
        if (st < mine) issue(st);
        else cp_async_commit(); /* empty groups: the waits below count the same */
    }
    for (int i = tid; i < HB * HD; i += ATT_THREADS) {
        int hh = i / HD, d = i % HD;
        qs[hh][d] = hh < nhb && d < hd ? q[(size_t)t * q_stride + (size_t)(h0 + hh) * hd + d] : 0.f;
    } /* visible after the loop's first barrier */
    for (int ci = 0; ci < mine; ci++) {
        int j0 = (z + ci * Z) * ATT_CHUNK, cnt = n_ctx - j0 < ATT_CHUNK ? n_ctx - j0 : ATT_CHUNK;
        if (ci + ATT_STAGES - 1 < mine) issue(ci + ATT_STAGES - 1);
        else cp_async_commit();
        /* the slots of chunk ci + ATT_STAGES, in flight while this chunk is used */
        int s2 = tid < ATT_CHUNK && ci + ATT_STAGES < mine ? slot_of(ci + ATT_STAGES, tid) : 0;
        cp_async_wait<ATT_STAGES - 1>();
        __syncthreads();
        const unsigned char *st = att_tiles + (ci % ATT_STAGES) * att_stage<HD>::bytes;
        const uint4 *kt = reinterpret_cast<const uint4 *>(st);
        const __nv_bfloat16 *vt = reinterpret_cast<const __nv_bfloat16 *>(st + att_stage<HD>::k_bytes);
        /* scores: key j0 + key, this thread's pieces (part, part + KPT, ..), every head */
        float sc[HB];
#pragma unroll
        for (int hh = 0; hh < HB; hh++) sc[hh] = 0.f;
        if (key < cnt) {
#pragma unroll 4
            for (int c = part; c < hd8; c += KPT) {
                float a[8];
                unpack8(kt[key * C + (c ^ (key % (8 / KPT) * KPT))], kc, a);
#pragma unroll
                for (int hh = 0; hh < HB; hh++) {
                    const float4 *q4 = reinterpret_cast<const float4 *>(&qs[hh][c * 8]);
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
        /* the parts, pairwise (a + b == b + a: every thread of a key holds the same score) */
#pragma unroll
        for (int o = 1; o < KPT; o <<= 1)
#pragma unroll
            for (int hh = 0; hh < HB; hh++) sc[hh] += __shfl_xor_sync(0xffffffffu, sc[hh], o);
        /* chunk max and sum per head, fixed order: warp butterfly, then warps in order */
        float m[HB], l[HB], p[HB];
#pragma unroll
        for (int hh = 0; hh < HB; hh++) {
            sc[hh] = key < cnt ? sc[hh] * scale : -INFINITY;
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
            p[hh] = key < cnt ? expf(sc[hh] - m[hh]) : 0.f;
            float v = warp_sum(part ? 0.f : p[hh]);
            if (lane == 0) red[warp][hh] = v;
        }
        if (!part) ps[key] = make_float4(p[0], p[1], p[2], p[3]);
        __syncthreads(); /* red and ps complete */
#pragma unroll
        for (int hh = 0; hh < HB; hh++) {
            l[hh] = red[0][hh];
            for (int w = 1; w < ATT_WARPS; w++) l[hh] += red[w][hh];
        }
        /* values: thread tid, dims tid (+ ATT_THREADS), keys in order */
        float o[HB][NA];
#pragma unroll
        for (int hh = 0; hh < HB; hh++)
#pragma unroll
            for (int i = 0; i < NA; i++) o[hh][i] = 0.f;
#pragma unroll 4
        for (int j = 0; j < cnt; j++) {
            float4 p4 = ps[j];
            const float pj[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
            for (int i = 0; i < NA; i++) {
                int d = tid + i * ATT_THREADS;
                if (d < hd) {
                    float v = __bfloat162float(vt[(size_t)j * HD + d]);
#pragma unroll
                    for (int hh = 0; hh < HB; hh++) o[hh][i] = fmaf(pj[hh], v, o[hh][i]);
                }
            }
        }
#pragma unroll
        for (int hh = 0; hh < HB; hh++) {
            float Mn = fmaxf(M[hh], m[hh]), fo = expf(M[hh] - Mn), fc = expf(m[hh] - Mn);
            L[hh] = L[hh] * fo + l[hh] * fc;
#pragma unroll
            for (int i = 0; i < NA; i++) acc[hh][i] = acc[hh][i] * fo + o[hh][i] * fc;
            M[hh] = Mn;
        }
        /* slots[ci % ATT_STAGES] went to chunk ci's copies: chunk ci + ATT_STAGES's take their place */
        if (tid < ATT_CHUNK && ci + ATT_STAGES < mine) slots[ci % ATT_STAGES][tid] = s2;
        __syncthreads(); /* this stage, ps and red consumed; the new slots visible */
    }
    size_t base = ((size_t)blockIdx.x * nh + h0) * Z; /* head h0 + hh's partials: (base + hh * Z + z') */
#pragma unroll
    for (int hh = 0; hh < HB; hh++) {
        if (hh >= nhb) break;
        size_t pidx = base + (size_t)hh * Z + z;
#pragma unroll
        for (int i = 0; i < NA; i++) {
            int d = tid + i * ATT_THREADS;
            if (d < hd) part_o[pidx * hd + d] = acc[hh][i];
        }
        if (tid == 0) {
            part_ml[pidx * 2] = M[hh];
            part_ml[pidx * 2 + 1] = L[hh];
        }
    }
    /* the last of the group's `used` blocks merges (threadFenceReduction's pattern) */
    __threadfence();
    __syncthreads();
    int *cnt_at = arrived + (size_t)blockIdx.x * gridDim.y + blockIdx.y;
    if (tid == 0) last = atomicAdd(cnt_at, 1) == used - 1;
    __syncthreads();
    if (!last) return;
    if (tid == 0) atomicExch(cnt_at, 0); /* every block has arrived: the next launch counts from zero */
    __threadfence();
    if (warp < nhb) { /* warp hh: head hh's weights e^(m_z - M) and 1 / L */
        const float *pml = part_ml + (base + (size_t)warp * Z) * 2;
        float mx = -INFINITY;
        for (int zz = lane; zz < used; zz += 32) mx = fmaxf(mx, __ldcg(pml + 2 * zz));
        mx = warp_max(mx);
        float ls = 0.f;
        for (int zz = lane; zz < used; zz += 32) {
            float e = expf(__ldcg(pml + 2 * zz) - mx);
            wz[warp][zz] = e;
            ls += __ldcg(pml + 2 * zz + 1) * e;
        }
        ls = warp_sum(ls);
        if (lane == 0) inv_l[warp] = ls > 0.f ? 1.0f / ls : 0.f;
    }
    __syncthreads();
    /* 4 consecutive dims of one head per item, the partials in z order */
    int q4n = hd / 4;
    for (int it = tid; it < nhb * q4n; it += ATT_THREADS) {
        int hh = it / q4n, d = (it - hh * q4n) * 4;
        const float4 *po = reinterpret_cast<const float4 *>(part_o + (base + (size_t)hh * Z) * hd + d);
        float4 s4 = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
        for (int zz = 0; zz < used; zz++) {
            float4 v = __ldcg(po + (size_t)zz * q4n);
            float w = wz[hh][zz];
            s4.x += v.x * w; s4.y += v.y * w; s4.z += v.z * w; s4.w += v.w * w;
        }
        float il = inv_l[hh];
        *reinterpret_cast<float4 *>(out + ((size_t)t * nh + h0 + hh) * hd + d) =
            make_float4(s4.x * il, s4.y * il, s4.z * il, s4.w * il);
    }
}

static ks_workspace att_ws, att_arrived_ws;

/* Blocks of k_attn_decode<HD> one wave of the device holds: as many as
 * the carveout asked for fits (1 KB of each block's shared memory is the
 * system's), set up once. */
template <int HD>
static int wave_blocks() {
    static int blocks;
    if (!blocks) {
        int dev = 0, sms = 0, smem_sm = 0;
        size_t dyn = att_stage<HD>::all;
        cudaFuncAttributes fa;
        CUDA_CHECK(cudaFuncSetAttribute(k_attn_decode<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
        size_t per_block = dyn + 1024 + (cudaFuncGetAttributes(&fa, k_attn_decode<HD>) == cudaSuccess ? fa.sharedSizeBytes : 0);
        size_t want = (size_t)ATT_CARVEOUT_KB << 10;
        if (want < per_block) want = per_block;
        if (smem_sm > 0 && want > (size_t)smem_sm) want = smem_sm;
        int pct = smem_sm > 0 ? (int)((want * 100 + smem_sm - 1) / smem_sm) : 100;
        if (cudaFuncSetAttribute(k_attn_decode<HD>, cudaFuncAttributePreferredSharedMemoryCarveout, pct) != cudaSuccess)
            cudaGetLastError(); /* a hint */
        int per_sm = (int)(want / per_block);
        blocks = sms * (per_sm > 0 ? per_sm : 1);
    }
    return blocks;
}

template <int HD>
static void launch_decode(ks_stream s, float *out, const float *q, int q_stride, const __nv_bfloat16 *kc,
                          const __nv_bfloat16 *vc, const int32_t *pos, const int32_t *seq, const int32_t *tables,
                          int max_blocks, int bs, int n, int nh, int nkv, int hd, float scale, int kv_capacity) {
    int nsub = (nh / nkv + ATT_HB - 1) / ATT_HB, groups = nkv * nsub;
    /* Z: chunks of the pool, at most one wave of blocks for a token */
    int Z = (kv_capacity + ATT_CHUNK - 1) / ATT_CHUNK, wave = wave_blocks<HD>() / groups;
    if (Z > wave) Z = wave;
    Z = Z < 1 ? 1 : Z > ATT_MAX_Z ? ATT_MAX_Z : Z;
    int slice;
    float *ws = ks_partials_ws(&att_ws, s, n, (size_t)nh * Z, hd, ATT_WS_BYTES, "attention workspace", &slice);
    if (!ws) return;
    /* one arrival counter per (token of a slice, head group), zero between launches */
    size_t had = att_arrived_ws.bytes;
    int *arrived = (int *)ks_cuda_workspace(&att_arrived_ws, s, (size_t)slice * groups * sizeof(int),
                                            "attention arrival counters");
    if (!arrived) return;
    if (att_arrived_ws.bytes != had) CUDA_CHECK(cudaMemsetAsync(arrived, 0, att_arrived_ws.bytes, s));
    float *part_o = ws, *part_ml = ws + (size_t)slice * nh * Z * hd;
    for (int t0 = 0; t0 < n; t0 += slice) {
        int nt = n - t0 < slice ? n - t0 : slice;
        ks_launch(k_attn_decode<HD>, dim3(nt, groups, Z), ATT_THREADS, att_stage<HD>::all, s, out, part_o,
                  part_ml, arrived, q, q_stride, kc, vc, pos, seq, tables, max_blocks, bs, nh, nkv, hd, scale, Z, t0);
        CUDA_CHECK_LAUNCH();
    }
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
    auto launch = head_dim <= 64 ? launch_decode<64> : head_dim <= 128 ? launch_decode<128> : launch_decode<256>;
    launch(s, out, q, q_stride, kc, vc, pos, seq, tables, max_blocks, block_size, n, n_heads, n_kv_heads, head_dim,
           scale, kv_capacity);
}
