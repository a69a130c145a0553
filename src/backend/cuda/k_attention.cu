/* k_attention.cu — decode attention over the paged KV cache, GQA, as
 * flash-decoding on the tensor cores in one launch:
 *   out[t, h] = sum_{j <= pos[t]} softmax_j(q[t,h] . K[j, h/g] * scale) V[j, h/g]
 * K/V row of position j of sequence seq[t]: slot = table[j / bs] * bs + j % bs
 * (bf16 rows of nkv * hd; hd a multiple of 8, at most 256).
 * Keys are cut in chunks of ATT_CHUNK = ATT_WARPS tiles of ATT_TILE keys;
 * Z blocks per (token, group of up to ATT_HB query heads of one KV head)
 * take chunks z, z+Z, z+2Z, ..., and warp w of a block tile w of each;
 * each K/V row is read once for the group's heads. Z = min(KV capacity /
 * ATT_CHUNK, the blocks one wave of the GPU holds / groups, ATT_MAX_Z):
 * fixed by the pool, the model and the device, never by the batch.
 * Each warp runs its own tiles through an ATT_STAGES-stage pipeline in its
 * own shared memory (cp.async: a stage is refilled as soon as its tile is
 * used, so ATT_STAGES tiles are in flight while the warp waits and
 * ATT_STAGES - 1 while it computes; no block barrier until the end; the
 * ATT_PF tiles after the first ATT_STAGES asked of L2 before the
 * programmatic wait) and, per tile, in registers with mma.sync m16n8k16
 * (bf16 x bf16 -> fp32):
 *   scores — S^T (16 x 16 keys) = A K^T, A's rows 0-7 the heads' q * scale
 *            * log2 e rounded to bf16 and rows 8-15 what that rounding left
 *            (split_pair: q to ~2^-16 relative), so a head's score is its
 *            two rows' sum; K fragments by ldmatrix;
 *   softmax — online per head in base 2 (running max m and sum l in fp32);
 *   values — O (16 x hd) += P V with P's rows split the same way (bf16 of
 *            p, then of what it left), straight from the score fragments;
 *            V fragments by ldmatrix.trans; a head's output is its two
 *            rows' sum.
 * The block's warps are merged in warp order into one partial per block
 * and head; the last block of a (token, group) to finish (an arrival
 * counter, one acquire/release atomic a block, reset by the last for the
 * next launch) merges the group's partials in z order, ATT_MERGE_BATCH at
 * a time (M the running max, rescaled once a batch):
 *   M = max m_z, L = sum l_z 2^(m_z - M), out = sum o_z 2^(m_z - M) / L.
 * A head's arithmetic depends only on the token's context length and Z, not
 * on which block merges or what else is in the launch (DESIGN.md principle
 * 2); launch shapes are fixed for CUDA graphs. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#define ATT_WARPS 4
#define ATT_THREADS (ATT_WARPS * 32)
#define ATT_TILE 16                       /* keys of a warp's tile: one mma's k */
#define ATT_CHUNK (ATT_WARPS * ATT_TILE)  /* keys of a block's chunk */
#define ATT_MAX_HD 256
#define ATT_WS_BYTES (256u << 20) /* workspace cap: tokens are sliced to fit */
#define ATT_MAX_Z 128            /* blocks per (token, head group); each loops over its chunks */
#define ATT_MERGE_BATCH 17      /* partials a thread of the merging block loads at once: Z 33 (8 KV groups on 132 SMs) in two rounds */
#define ATT_HB 8                 /* query heads of one KV group per block: the mma's rows 0-7 (and 8-15) */
#define ATT_PF 1                 /* tiles a warp asks of L2 before the programmatic wait, past its stages' (H200: 2 and 3 slower) */
#define ATT_STAGES 2             /* tiles a warp holds: ATT_STAGES - 1 in flight while one is used (3: level) */
/* The shared-memory carveout asked for the kernel (KB of a 256 KB L1,
 * asked as a percentage of the device's most, rounded up: 58% of 228 KB on
 * the H200; the driver picks a configuration it supports): the rest stays
 * L1, which the matvecs that follow on the same SMs (launched early) need
 * for their loads in flight. Left to the driver, 64-key tiles
 * took the 228 KB carveout and Qwen3-8B decode lost 9%; every kernel at the
 * largest carveout lost 22% (thirteenth session, BENCHMARKS.md); this
 * kernel asking for 228 KB (three blocks an SM) cost Qwen3-8B decode 11%
 * (twenty-first session). */
#define ATT_CARVEOUT_KB 132

/* A warp's shared memory: ATT_STAGES stages of a K tile then a V tile
 * (ATT_TILE rows of HD bf16 each, 16-byte piece c of row r stored at piece
 * c ^ (r % 8), so the 8 rows an ldmatrix reads fall in distinct banks
 * without padding); the block's: ATT_WARPS of them. After the loop the
 * same bytes hold the merges' scratch: the warps' partials wo (warp, head,
 * HD) and wml (warp, head, 2) floats. No padding and no static arrays: two
 * blocks of 4 warps fit the 132 KB carveout at head_dim 128. */
template <int HD>
struct att_layout {
    static constexpr size_t tile = (size_t)ATT_TILE * HD * 2;
    static constexpr size_t warp = (size_t)ATT_STAGES * 2 * tile;
    static constexpr size_t all = ATT_WARPS * warp;
    static constexpr size_t wo = 0, wml = wo + (size_t)ATT_WARPS * ATT_HB * HD * 4;
    static_assert(wml + (size_t)ATT_WARPS * ATT_HB * 2 * 4 <= all, "the warps' partials fit the tiles' bytes");
};
/* element offset of 16-byte piece c of row r in a tile */
template <int HD>
__device__ __forceinline__ int att_sw(int r, int c) {
    return r * HD + ((c ^ (r & 7)) << 3);
}

/* HD: 64, 128 or 256, the bound on hd that sizes the tiles and fragments
 * (dims past hd are zero in both). Shapes: q (n, q_stride), head h at h *
 * hd; out (n, nh, hd); the workspaces (this file's, grown outside graph
 * capture): part_o (slice, nh, Z, hd), part_ml (slice, nh, Z, 2) as (m, l)
 * in base 2, arrived (slice, groups) counters, zero between launches.
 * Fragments (m16n8): lane l holds rows l/4 and l/4 + 8, columns 2 (l % 4)
 * and 2 (l % 4) + 1 of each 8-column tile. */
template <int HD>
__global__ void __launch_bounds__(ATT_THREADS)
k_attn_decode(float *out, float *part_o, float *part_ml, unsigned *arrived, const float *q, int q_stride,
              const __nv_bfloat16 *kc, const __nv_bfloat16 *vc, const int32_t *pos, const int32_t *seq,
              const int32_t *tables, int max_blocks, int bs, int nh, int nkv, int hd, float scale_log2, int Z,
              int t_base, int n_rows) {
    typedef att_layout<HD> LY;
    constexpr int C = HD / 8, NKS = HD / 16, NDT = HD / 8, HB = ATT_HB;
    extern __shared__ __align__(128) unsigned char att_smem[];
    __shared__ int last;
    /* pos, seq and the block tables come from the host's step upload, never
     * from the kernel before: they are read (and the blocks past the keys
     * leave) before the programmatic wait; q and the step's K/V rows after
     * it (older K/V rows may go before) */
    pdl_trigger();
    int t = t_base + blockIdx.x, z = blockIdx.z, tid = threadIdx.x;
    int warp = tid >> 5, lane = tid & 31, g8 = lane >> 2, t4 = lane & 3;
    int G = nh / nkv, nsub = (G + HB - 1) / HB;
    int g = blockIdx.y / nsub, h0 = g * G + (blockIdx.y % nsub) * HB;
    int nhb = G - (h0 - g * G) < HB ? G - (h0 - g * G) : HB;
    int n_ctx = pos[t] + 1;
    if (z * ATT_CHUNK >= n_ctx) return; /* no keys here: not among the blocks the merge waits for */
    int n_chunks = (n_ctx + ATT_CHUNK - 1) / ATT_CHUNK, used = n_chunks < Z ? n_chunks : Z;
    int mine = (n_chunks - z + Z - 1) / Z; /* chunks z, z + Z, ... of this block */
    int kv_dim = nkv * hd, hd8 = hd / 8;
    const int32_t *table = tables + (size_t)seq[t] * max_blocks;
    /* this warp's tile of chunk ci starts at key tile_j0(ci); lane r < 16
     * (and r + 16) holds the slot of its row r (0 past the keys) */
    auto tile_j0 = [&](int ci) { return (z + ci * Z) * ATT_CHUNK + warp * ATT_TILE; };
    auto slot_of = [&](int ci) -> int {
        int j = tile_j0(ci) + (lane & (ATT_TILE - 1));
        return ci < mine && j < n_ctx ? table[j / bs] * bs + j % bs : 0;
    };
    int slot_next = slot_of(0);
    unsigned char *wmem = att_smem + warp * LY::warp;
    /* tile ci -> stage ci % ATT_STAGES (one cp.async group; rows past the
     * keys and dims past hd zero, so they add nothing) */
    auto issue = [&](int ci, int slots) {
        __nv_bfloat16 *kt = reinterpret_cast<__nv_bfloat16 *>(wmem + (ci % ATT_STAGES) * 2 * LY::tile);
        __nv_bfloat16 *vt = kt + ATT_TILE * HD;
        int j0 = tile_j0(ci);
        if (ci < mine && j0 < n_ctx) {
#pragma unroll 4
            for (int i = lane; i < ATT_TILE * C; i += 32) {
                int r = i / C, c = i - r * C;
                int sl = __shfl_sync(0xffffffffu, slots, r);
                bool ok = j0 + r < n_ctx && c < hd8;
                size_t off = ok ? (size_t)sl * kv_dim + (size_t)g * hd + (size_t)c * 8 : 0;
                cp_async16(smem_addr(kt + att_sw<HD>(r, c)), kc + off, ok ? 16 : 0);
                cp_async16(smem_addr(vt + att_sw<HD>(r, c)), vc + off, ok ? 16 : 0);
            }
        }
        cp_async_commit(); /* an empty group past this warp's tiles: the waits count the same */
    };
    /* the first tiles, one a stage: a tile whose keys all precede the
     * pass's rows (a sequence's new rows are among its last n_rows
     * positions) holds K/V rows of earlier passes: every forward and
     * proposer pass starts with the host's step upload, a stream copy that
     * waits for every kernel before it, so no kernel still running writes
     * them — its copies start before the programmatic wait (with every
     * stage's and ATT_PF more asked of L2: Qwen3-8B after 16k tokens +0.6 /
     * +0.8% on an H100 with two, forty-seventh session; on an H200 one
     * more +0.5% over two and three -0.7%, forty-eighth) */
    int st0 = 0;
    for (; st0 < ATT_STAGES && tile_j0(st0) + ATT_TILE <= n_ctx - n_rows; st0++) {
        issue(st0, slot_next);
        slot_next = slot_of(st0 + 1);
    }
    /* the ATT_PF tiles after the stages' (their keys also the earlier
     * passes'): asked of L2 while the kernels before still run, so their
     * copies later hit L2 (long contexts; short ones have no such tiles) */
    if (st0 == ATT_STAGES)
        for (int ci = ATT_STAGES; ci < ATT_STAGES + ATT_PF && tile_j0(ci) + ATT_TILE <= n_ctx - n_rows; ci++) {
            int sl = slot_of(ci); /* lane r's row r % 16; lanes 16-31 its second half */
            if (ci < mine) {
                const char *kr = reinterpret_cast<const char *>(kc + (size_t)sl * kv_dim + (size_t)g * hd);
                const char *vr = reinterpret_cast<const char *>(vc + (size_t)sl * kv_dim + (size_t)g * hd);
                for (int b = (lane >> 4) * 128; b < hd * 2; b += 256) {
                    prefetch_l2(kr + b);
                    prefetch_l2(vr + b);
                }
            }
        }
    pdl_wait(); /* q and the new K/V rows are the kernel before's */
    for (int st = st0; st < ATT_STAGES; st++) { /* every stage full before the first tile is used */
        issue(st, slot_next);
        slot_next = slot_of(st + 1);
    }
    /* A fragments of q: row g8 the bf16 of head h0 + g8's q * scale * log2 e,
     * row g8 + 8 what that left; dims 16 kk + 2 t4 (+1) and + 8 */
    uint32_t qa[NKS][4];
    {
        const float *qh = q + (size_t)t * q_stride + (size_t)(h0 + g8) * hd;
        bool head = g8 < nhb;
#pragma unroll
        for (int kk = 0; kk < NKS; kk++) {
            int d0 = kk * 16 + t4 * 2, d1 = d0 + 8;
            float2 x0 = head && d0 < hd ? *reinterpret_cast<const float2 *>(qh + d0) : make_float2(0.f, 0.f);
            float2 x1 = head && d1 < hd ? *reinterpret_cast<const float2 *>(qh + d1) : make_float2(0.f, 0.f);
            split_pair(x0.x * scale_log2, x0.y * scale_log2, qa[kk][0], qa[kk][1]);
            split_pair(x1.x * scale_log2, x1.y * scale_log2, qa[kk][2], qa[kk][3]);
        }
    }
    float o[NDT][4];
#pragma unroll
    for (int d = 0; d < NDT; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float m = -INFINITY, l = 0.f; /* head g8's running max; this lane's share of its sum */
    for (int ci = 0; ci < mine; ci++) {
        cp_async_wait<ATT_STAGES - 1>(); /* tile ci's group done; the next ATT_STAGES - 1 in flight */
        __syncwarp(); /* every lane's copies of tile ci visible to the warp */
        int cnt = n_ctx - tile_j0(ci);
        if (cnt > 0) {
            const __nv_bfloat16 *kt = reinterpret_cast<const __nv_bfloat16 *>(wmem + (ci % ATT_STAGES) * 2 * LY::tile);
            const __nv_bfloat16 *vt = kt + ATT_TILE * HD;
            /* S^T: keys 0-7 (s[0]) and 8-15 (s[1]); rows g8 (hi) and g8 + 8 (lo) */
            float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
            int kr = (lane / 16) * 8 + (lane % 8), kc2 = (lane / 8) % 2; /* this lane's row and piece of the pair */
#pragma unroll
            for (int kk = 0; kk < NKS; kk++) {
                uint32_t b[4];
                ldsm4(b, smem_addr(kt + att_sw<HD>(kr, kk * 2 + kc2)));
                mma_bf16(s[0], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b[0], b[1]);
                mma_bf16(s[1], qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3], b[2], b[3]);
            }
            /* the head's scores of keys 8 n + 2 t4 + e, past the keys -inf; the tile's max over the quad */
            float sv[2][2], mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    sv[n][e] = n * 8 + t4 * 2 + e < cnt ? s[n][e] + s[n][2 + e] : -INFINITY;
                    mx = fmaxf(mx, sv[n][e]);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            float mn = fmaxf(m, mx), f = exp2f(m - mn); /* the tile has a key: mn is finite; f = 0 at the first */
            m = mn;
            /* P = 2^(s - m) as A fragments: rows g8 its bf16, g8 + 8 what that left */
            float p[2][2];
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) p[n][e] = exp2f(sv[n][e] - mn);
            l = l * f + ((p[0][0] + p[0][1]) + (p[1][0] + p[1][1]));
            uint32_t pa[4];
            split_pair(p[0][0], p[0][1], pa[0], pa[1]);
            split_pair(p[1][0], p[1][1], pa[2], pa[3]);
            int vr = (lane % 8) + ((lane / 8) % 2) * 8, vc2 = lane / 16;
#pragma unroll
            for (int dp = 0; dp < NDT / 2; dp++) {
                uint32_t b[4];
                ldsm4_trans(b, smem_addr(vt + att_sw<HD>(vr, dp * 2 + vc2)));
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    o[2 * dp][e] *= f;
                    o[2 * dp + 1][e] *= f;
                }
                mma_bf16(o[2 * dp], pa[0], pa[1], pa[2], pa[3], b[0], b[1]);
                mma_bf16(o[2 * dp + 1], pa[0], pa[1], pa[2], pa[3], b[2], b[3]);
            }
        }
        __syncwarp(); /* stage ci % ATT_STAGES consumed: refilled with tile ci + ATT_STAGES */
        issue(ci + ATT_STAGES, slot_next);
        slot_next = slot_of(ci + ATT_STAGES + 1);
    }
    cp_async_wait<0>();
    /* the warps' partials (a head's rows summed) into the tiles' bytes, then
     * one partial per head: the warps in order */
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    __syncthreads(); /* every warp is past its tiles */
    float *wo = reinterpret_cast<float *>(att_smem + LY::wo);                  /* (warp, head, HD) */
    float(*wml)[HB][2] = reinterpret_cast<float(*)[HB][2]>(att_smem + LY::wml); /* (warp, head, (m, l)) */
    {
        float *wr = wo + ((size_t)warp * HB + g8) * HD;
#pragma unroll
        for (int d = 0; d < NDT; d++)
            *reinterpret_cast<float2 *>(wr + d * 8 + t4 * 2) = make_float2(o[d][0] + o[d][2], o[d][1] + o[d][3]);
        if (t4 == 0) {
            wml[warp][g8][0] = m;
            wml[warp][g8][1] = l;
        }
    }
    __syncthreads();
    size_t base = ((size_t)blockIdx.x * nh + h0) * Z; /* head h0 + hh's partials: (base + hh * Z + z') */
    for (int it = tid; it < nhb * hd; it += ATT_THREADS) {
        int hh = it / hd, d = it - hh * hd;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, wml[w][hh][0]);
        float L = 0.f, O = 0.f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) {
            float e = exp2f(wml[w][hh][0] - M); /* a warp without keys: 2^-inf = 0 */
            L += wml[w][hh][1] * e;
            O += wo[((size_t)w * HB + hh) * HD + d] * e;
        }
        size_t pidx = base + (size_t)hh * Z + z;
        part_o[pidx * hd + d] = O;
        if (d == 0) {
            part_ml[pidx * 2] = M;
            part_ml[pidx * 2 + 1] = L;
        }
    }
    /* the last of the group's `used` blocks merges: the block's partials are
     * released by its arrival (after the barrier, so every thread's), and
     * the last arrival acquires everyone's (arrive_acq_rel) */
    __syncthreads();
    if (tid == 0) {
        unsigned *cnt_at = arrived + (size_t)blockIdx.x * gridDim.y + blockIdx.y;
        last = arrive_acq_rel(cnt_at) == (unsigned)used - 1;
        if (last) *cnt_at = 0; /* every block has arrived: the next launch counts from zero */
    }
    __syncthreads();
    if (!last) return;
    /* 4 consecutive dims of one head per item (a warp's items one head's at
     * head_dim 128: its (m, l) loads are one address). The partials in z
     * order, ATT_MERGE_BATCH at a time with every load of a batch in flight
     * together: the batch's max M' = max(M, m_z..), what came before scaled
     * by 2^(M - M'), each partial weighted 2^(m_z - M'); out = O / L. One
     * batch's loads cover a whole merge at contexts up to 1,088 keys (17
     * chunks), two at 2k and at 16k (Z 33) — against the two rounds for
     * the max and the sum, a barrier and a round per 8 partials of the
     * weights-first merge. */
    int q4n = hd / 4;
    for (int it = tid; it < nhb * q4n; it += ATT_THREADS) {
        int hh = it / q4n, d = (it - hh * q4n) * 4;
        const float4 *po = reinterpret_cast<const float4 *>(part_o + (base + (size_t)hh * Z) * hd + d);
        const float2 *pml = reinterpret_cast<const float2 *>(part_ml + (base + (size_t)hh * Z) * 2);
        float M = -INFINITY, L = 0.f;
        float4 s4 = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int z0 = 0; z0 < used; z0 += ATT_MERGE_BATCH) {
            float2 ml[ATT_MERGE_BATCH];
            float4 v[ATT_MERGE_BATCH];
#pragma unroll
            for (int i = 0; i < ATT_MERGE_BATCH; i++) {
                bool in = z0 + i < used; /* past the blocks with keys: weight 2^-inf = 0 */
                ml[i] = in ? __ldcg(pml + z0 + i) : make_float2(-INFINITY, 0.f);
                v[i] = in ? __ldcg(po + (size_t)(z0 + i) * q4n) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
            float Mb = M;
#pragma unroll
            for (int i = 0; i < ATT_MERGE_BATCH; i++) Mb = fmaxf(Mb, ml[i].x); /* finite: block z0 has keys */
            float f = exp2f(M - Mb); /* 0 at the first batch (M = -inf) */
            L *= f;
            s4.x *= f; s4.y *= f; s4.z *= f; s4.w *= f;
#pragma unroll
            for (int i = 0; i < ATT_MERGE_BATCH; i++) {
                float w = exp2f(ml[i].x - Mb);
                L += ml[i].y * w;
                s4.x += v[i].x * w; s4.y += v[i].y * w; s4.z += v[i].z * w; s4.w += v[i].w * w;
            }
            M = Mb;
        }
        float il = L > 0.f ? 1.0f / L : 0.f;
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
        size_t dyn = att_layout<HD>::all;
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
    unsigned *arrived = (unsigned *)ks_cuda_zeroed_workspace(&att_arrived_ws, s, (size_t)slice * groups * sizeof(unsigned),
                                                   "attention arrival counters");
    if (!arrived) return;
    float *part_o = ws, *part_ml = ws + (size_t)slice * nh * Z * hd;
    for (int t0 = 0; t0 < n; t0 += slice) {
        int nt = n - t0 < slice ? n - t0 : slice;
        ks_launch(k_attn_decode<HD>, dim3(nt, groups, Z), ATT_THREADS, att_layout<HD>::all, s, out, part_o,
                  part_ml, arrived, q, q_stride, kc, vc, pos, seq, tables, max_blocks, bs, nh, nkv, hd,
                  scale * 1.4426950408889634f /* log2 e: scores in base 2 */, Z, t0, n);
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
