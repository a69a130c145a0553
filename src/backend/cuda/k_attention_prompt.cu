/* k_attention_prompt.cu — causal attention of prompt rows on the tensor
 * cores (flash attention with mma.sync m16n8k16, bf16 x bf16 -> fp32):
 *   out[t, h] = sum_{j <= pos[t]} softmax_j(q[t,h] . K[j, h/g] * scale) V[j, h/g]
 * One block per (tile, HPB query heads of one KV head, key segment); a tile
 * is up to 64 prompt rows of one sequence at consecutive positions
 * (bk_attn_batch.tiles). Its 4 HPB / HPW warps own 16 rows of HPW heads each
 * (Qwen3-8B: 4 heads a block, 2 a warp, 8 warps; each K and V fragment a
 * warp loads serves both its heads' mma: the 4k causal prefill of 32 / 8
 * heads 933 -> 849 us against one head a warp, 2 heads a block).
 * Keys go in chunks of 64 from position 0: the chunk's K and V rows (bf16
 * in the cache) are copied through the block table into shared memory with
 * cp.async, the next chunk's copy in flight while this one is used, and
 * shared by all the block's rows and heads (GQA). Per warp and chunk, in
 * registers: S = Q K^T (16 x 64; Q rounded to bf16 once, K and Q fragments
 * by ldmatrix), masked (key > row's position; only chunks reaching past the
 * warp's first row), online softmax per row (running max m and sum l in
 * fp32, base 2: p = 2^(s scale log2(e) - m), one fma), P rounded to bf16
 * straight from the accumulators into A fragments, O = O * 2^(m_old - m_new)
 * + P V (V fragments by ldmatrix.trans) with O in fp32 accumulators.
 * Keys are split in segments, one block per (tile, heads, segment): a block
 * walks only its segment's chunks and leaves the rows' partial (m, l,
 * unnormalised O) in a workspace; a merge kernel then combines a row's
 * segments in order (M = max m, L = sum l e^(m - M), out = sum O e^(m -
 * M) / L). A few rows deep in a context (a prompt's tail after a
 * prefix-cache hit) so get several blocks instead of one walking all the
 * keys. The segments are one partition of the key axis for every row
 * (pa_seg_lo): PA_SEG (1024) keys each below 4 PA_SEG, then four to an
 * octave, [4 PA_SEG 2^k + i PA_SEG 2^k, + PA_SEG 2^k) — a row at 48k keys
 * has 18 partials, not 48, whose writes and reads had outweighed its K/V
 * reads many times over. Every tile takes the same segments, so this
 * changes no row's dependence on the tiling. The deepest segments' blocks
 * launch first (they are the longest).
 * Row invariance: the key chunks are fixed by absolute position, a row's
 * scores and sums are formed from its own row only (an mma's output element
 * depends on its own row of A), and chunks past a row's position change
 * nothing (p = 0, factor 1), so a row's result does not depend on the
 * tiling or on the rest of the batch. It differs in the last bits from the
 * flash-decoding kernel (k_attention.cu), which generated rows use; the
 * model sends each row to one of them by its role.
 * Shapes: head_dim 64, 128 or 256; otherwise the launcher returns -1 and
 * the caller uses flash-decoding for these rows. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#include <type_traits>

#define PA_ROWS 64
#define PA_KEYS 64
#define PA_PAD 8 /* bf16 row padding (16 bytes): ldmatrix rows fall in distinct banks */
#define PA_SEG 1024 /* keys of the first segments (a multiple of PA_KEYS) */
/* partials cap (in ks_prompt_ws, whose GEMM needs are 57 MiB at most):
 * tiles are sliced to fit. H200, Qwen3-8B prefill with a 64 MiB cap
 * against 256 (rows at 48k keys: 20 MiB a tile): 4k tokens 29.1k / 28.2k
 * vs 29.7k / 29.7k tok/s, 48k 9.7k vs 10.4k */
#define PA_WS_BYTES (128u << 20)

/* Segment z's first key (z < 4: z PA_SEG; then 4 to an octave) */
__host__ __device__ __forceinline__ int pa_seg_lo(int z) {
    if (z < 4) return z * PA_SEG;
    int k = (z - 4) >> 2, i = (z - 4) & 3;
    return (4 * PA_SEG + i * PA_SEG) << k;
}
/* the segment holding key p */
__host__ __device__ __forceinline__ int pa_seg_of(int p) {
    if (p < 4 * PA_SEG) return p / PA_SEG;
    int k = 0;
    while ((4 * PA_SEG << (k + 1)) <= p) k++;
    return 4 + 4 * k + (p - (4 * PA_SEG << k)) / (PA_SEG << k);
}

/* Shared memory, in order: K in two stages, V in two stages (64 x LD bf16
 * each), then per warp its HPW heads' 16 Q rows (bf16, 16 x LD each). */
template <int HD, int HPB, int HPW>
struct pa_layout {
    static constexpr int WARPS = 4 * HPB / HPW;
    static constexpr int LD = HD + PA_PAD;
    static constexpr size_t chunk = (size_t)PA_KEYS * LD * 2;
    static constexpr size_t k = 0;
    static constexpr size_t v = 2 * chunk;
    static constexpr size_t q = 4 * chunk;
    static constexpr size_t bytes = q + (size_t)WARPS * HPW * 16 * LD * 2;
};

/* Accumulator fragments (m16n8): lane l holds rows l/4 ("a") and l/4 + 8
 * ("b"), columns 2 (l % 4) and 2 (l % 4) + 1 of each 8-column tile. A warp
 * owns 16 rows of HPW heads: each K and V fragment it loads from shared
 * memory serves the mma of every one of its heads. Two blocks an SM where
 * the registers allow it: two heads a warp need all 255 (52 bytes spill at
 * head_dim 128), so a block of 8 such warps runs alone. */
template <int HD, int HPB, int HPW>
__global__ void __launch_bounds__(pa_layout<HD, HPB, HPW>::WARPS * 32, pa_layout<HD, HPB, HPW>::WARPS * HPW <= 8 && HD <= 128 ? 2 : 1)
k_attn_prompt(float *__restrict__ out, float *__restrict__ part_o, float *__restrict__ part_ml, const float *q,
              int q_stride, const __nv_bfloat16 *kc, const __nv_bfloat16 *vc, /* written by the kernel before: plain */
              const int32_t *__restrict__ tiles,
              const int32_t *__restrict__ pos, const int32_t *__restrict__ seq, const int32_t *__restrict__ tables,
              int max_blocks, int bs, int nh, int nkv, float scale_log2, int nseg, int t_first) {
    pdl_start();
    typedef pa_layout<HD, HPB, HPW> LY;
    constexpr int LD = LY::LD, NT = LY::WARPS * 32, NKS = HD / 16, NDT = HD / 8, NST = PA_KEYS / 8, C8 = HD / 8;
    extern __shared__ __align__(128) unsigned char smem[];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g8 = lane >> 2, t4 = lane & 3;

    int tile = t_first + blockIdx.x, z = nseg - 1 - blockIdx.z; /* the deepest segments first */
    int r0 = tiles[2 * tile], cnt = tiles[2 * tile + 1], base = tiles[2 * t_first];
    if (cnt <= 0) return;
    int h0 = blockIdx.y * HPB + (warp / 4) * HPW, rw = (warp % 4) * 16; /* heads h0 .. h0+HPW-1, tile rows rw .. rw+15 */
    int g = (blockIdx.y * HPB) / (nh / nkv), kv_dim = nkv * HD; /* HPB divides the group: one KV head */
    const int32_t *table = tables + (size_t)seq[r0] * max_blocks;
    int p_last = pos[r0 + cnt - 1];
    int j_begin = pa_seg_lo(z), j_end = min(pa_seg_lo(z + 1), p_last + 1);
    if (j_begin > p_last) return; /* the whole block: no row of the tile reaches this segment */
    int wcnt = cnt - rw < 0 ? 0 : cnt - rw > 16 ? 16 : cnt - rw; /* valid rows of this warp */
    int warp_last = wcnt > 0 ? pos[r0 + rw + wcnt - 1] : -1, warp_first = wcnt > 0 ? pos[r0 + rw] : -1;
    int pa = g8 < wcnt ? pos[r0 + rw + g8] : -1, pb = g8 + 8 < wcnt ? pos[r0 + rw + g8 + 8] : -1;

    /* K/V chunk at key j0 -> stage st (rows past j_end zero) */
    auto load_chunk = [&](int st, int j0) {
        __nv_bfloat16 *kd = (__nv_bfloat16 *)(smem + LY::k + st * LY::chunk);
        __nv_bfloat16 *vd = (__nv_bfloat16 *)(smem + LY::v + st * LY::chunk);
        for (int i = threadIdx.x; i < PA_KEYS * C8; i += NT) {
            int r = i / C8, c = (i % C8) * 8, j = j0 + r;
            bool ok = j < j_end;
            size_t off = ok ? ((size_t)table[j / bs] * bs + j % bs) * kv_dim + (size_t)g * HD + c : 0;
            cp_async16(smem_addr(kd + r * LD + c), kc + off, ok ? 16 : 0);
            cp_async16(smem_addr(vd + r * LD + c), vc + off, ok ? 16 : 0);
        }
        cp_async_commit();
    };
    load_chunk(0, j_begin);

    /* this warp's 16 Q rows of each of its heads -> bf16 in shared memory
     * (rows past wcnt zero) */
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)(smem + LY::q) + (size_t)warp * HPW * 16 * LD;
    for (int i = lane; i < HPW * 16 * (HD / 4); i += 32) {
        int hw = i / (16 * (HD / 4)), r = (i / (HD / 4)) % 16, c = (i % (HD / 4)) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r < wcnt)
            v = *reinterpret_cast<const float4 *>(q + (size_t)(r0 + rw + r) * q_stride + (size_t)(h0 + hw) * HD + c);
        uint2 u = make_uint2(pack_bf16x2(v.x, v.y), pack_bf16x2(v.z, v.w));
        *reinterpret_cast<uint2 *>(Qs + (hw * 16 + r) * LD + c) = u;
    }
    uint32_t q_addr = smem_addr(Qs + (lane % 16) * LD + (lane / 16) * 8); /* head hw: + hw 16 LD 2 bytes */

    float o[HPW][NDT][4];
#pragma unroll
    for (int hw = 0; hw < HPW; hw++)
#pragma unroll
        for (int d = 0; d < NDT; d++) o[hw][d][0] = o[hw][d][1] = o[hw][d][2] = o[hw][d][3] = 0.f;
    float m_a[HPW], m_b[HPW], l_a[HPW], l_b[HPW]; /* l: this lane's share of the row sums */
#pragma unroll
    for (int hw = 0; hw < HPW; hw++) m_a[hw] = m_b[hw] = -INFINITY, l_a[hw] = l_b[hw] = 0.f;

    int nchunks = (j_end - j_begin + PA_KEYS - 1) / PA_KEYS;
    for (int ci = 0; ci < nchunks; ci++) {
        int j0 = j_begin + ci * PA_KEYS;
        if (ci + 1 < nchunks) {
            load_chunk((ci + 1) & 1, j0 + PA_KEYS);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* chunk ci (and the Q rows) visible to every warp */
        if (j0 <= warp_last) {
            const __nv_bfloat16 *Ks = (const __nv_bfloat16 *)(smem + LY::k + (ci & 1) * LY::chunk);
            const __nv_bfloat16 *Vs = (const __nv_bfloat16 *)(smem + LY::v + (ci & 1) * LY::chunk);
            /* S (16 x 64 a head) = Q K^T */
            float sc[HPW][NST][4];
#pragma unroll
            for (int hw = 0; hw < HPW; hw++)
#pragma unroll
                for (int n = 0; n < NST; n++) sc[hw][n][0] = sc[hw][n][1] = sc[hw][n][2] = sc[hw][n][3] = 0.f;
            uint32_t k_addr = smem_addr(Ks + ((lane / 16) * 8 + (lane % 8)) * LD + ((lane / 8) % 2) * 8);
#pragma unroll
            for (int kk = 0; kk < NKS; kk++) {
                uint32_t a[HPW][4];
#pragma unroll
                for (int hw = 0; hw < HPW; hw++) ldsm4(a[hw], q_addr + (hw * 16 * LD) * 2 + kk * 32);
#pragma unroll
                for (int np = 0; np < NST / 2; np++) {
                    uint32_t b[4];
                    ldsm4(b, k_addr + (np * 16 * LD + kk * 16) * 2);
#pragma unroll
                    for (int hw = 0; hw < HPW; hw++) {
                        mma_bf16(sc[hw][2 * np], a[hw][0], a[hw][1], a[hw][2], a[hw][3], b[0], b[1]);
                        mma_bf16(sc[hw][2 * np + 1], a[hw][0], a[hw][1], a[hw][2], a[hw][3], b[2], b[3]);
                    }
                }
            }
            /* the mask where the chunk reaches past the warp's first row
             * (its rows' positions ascend), the chunk's raw row maxima over
             * the lane quad, then scaled (base 2; scale > 0 keeps the max) */
            if (j0 + PA_KEYS - 1 > warp_first)
#pragma unroll
                for (int n = 0; n < NST; n++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        int j = j0 + n * 8 + t4 * 2 + e;
#pragma unroll
                        for (int hw = 0; hw < HPW; hw++) {
                            if (j > pa) sc[hw][n][e] = -INFINITY;
                            if (j > pb) sc[hw][n][2 + e] = -INFINITY;
                        }
                    }
            /* P = 2^(s - m) -> bf16 A fragments (keys 16 kk .. 16 kk + 15) */
            uint32_t pf[HPW][NST / 2][4];
#pragma unroll
            for (int hw = 0; hw < HPW; hw++) {
                float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
                for (int n = 0; n < NST; n++) {
                    mx_a = fmaxf(mx_a, fmaxf(sc[hw][n][0], sc[hw][n][1]));
                    mx_b = fmaxf(mx_b, fmaxf(sc[hw][n][2], sc[hw][n][3]));
                }
                mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
                mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
                mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
                mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
                float mn_a = fmaxf(m_a[hw], mx_a * scale_log2), mn_b = fmaxf(m_b[hw], mx_b * scale_log2);
                float base_a = mn_a == -INFINITY ? 0.f : mn_a, base_b = mn_b == -INFINITY ? 0.f : mn_b;
                float f_a = m_a[hw] == -INFINITY ? 0.f : exp2f(m_a[hw] - mn_a);
                float f_b = m_b[hw] == -INFINITY ? 0.f : exp2f(m_b[hw] - mn_b);
                m_a[hw] = mn_a;
                m_b[hw] = mn_b;
                float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
                for (int n = 0; n < NST; n++) {
                    float p0 = exp2f(fmaf(sc[hw][n][0], scale_log2, -base_a));
                    float p1 = exp2f(fmaf(sc[hw][n][1], scale_log2, -base_a));
                    float p2 = exp2f(fmaf(sc[hw][n][2], scale_log2, -base_b));
                    float p3 = exp2f(fmaf(sc[hw][n][3], scale_log2, -base_b));
                    sum_a += p0 + p1;
                    sum_b += p2 + p3;
                    pf[hw][n / 2][(n % 2) * 2] = pack_bf16x2(p0, p1);
                    pf[hw][n / 2][(n % 2) * 2 + 1] = pack_bf16x2(p2, p3);
                }
                l_a[hw] = l_a[hw] * f_a + sum_a;
                l_b[hw] = l_b[hw] * f_b + sum_b;
                /* O = O * f + P V */
#pragma unroll
                for (int d = 0; d < NDT; d++) {
                    o[hw][d][0] *= f_a;
                    o[hw][d][1] *= f_a;
                    o[hw][d][2] *= f_b;
                    o[hw][d][3] *= f_b;
                }
            }
            uint32_t v_addr = smem_addr(Vs + ((lane % 8) + ((lane / 8) % 2) * 8) * LD + (lane / 16) * 8);
#pragma unroll
            for (int kk = 0; kk < PA_KEYS / 16; kk++)
#pragma unroll
                for (int dp = 0; dp < NDT / 2; dp++) {
                    uint32_t b[4];
                    ldsm4_trans(b, v_addr + (kk * 16 * LD + dp * 16) * 2);
#pragma unroll
                    for (int hw = 0; hw < HPW; hw++) {
                        mma_bf16(o[hw][2 * dp], pf[hw][kk][0], pf[hw][kk][1], pf[hw][kk][2], pf[hw][kk][3], b[0], b[1]);
                        mma_bf16(o[hw][2 * dp + 1], pf[hw][kk][0], pf[hw][kk][1], pf[hw][kk][2], pf[hw][kk][3], b[2],
                                 b[3]);
                    }
                }
        }
        __syncthreads(); /* stage ci & 1 is refilled next iteration */
    }
    if (wcnt <= 0) return;
    /* a row within the first segment is complete: out = O / l, bitwise what
     * the merge of its one partial gives (e^0 = 1), and the merge skips it;
     * deeper rows leave this segment's partial: (m, l) and the unnormalised
     * O, m back to the natural base for the merge */
    bool ok_a = g8 < wcnt && pa >= j_begin, ok_b = g8 + 8 < wcnt && pb >= j_begin; /* the row reaches this segment */
    bool fin_a = ok_a && pa < PA_SEG, fin_b = ok_b && pb < PA_SEG; /* (then z = 0) */
    const float ln2 = 0.69314718055994531f;
#pragma unroll
    for (int hw = 0; hw < HPW; hw++) {
        int h = h0 + hw;
        float la = l_a[hw], lb = l_b[hw];
        la += __shfl_xor_sync(0xffffffffu, la, 1);
        la += __shfl_xor_sync(0xffffffffu, la, 2);
        lb += __shfl_xor_sync(0xffffffffu, lb, 1);
        lb += __shfl_xor_sync(0xffffffffu, lb, 2);
        float inv_a = la > 0.f ? 1.0f / la : 0.f, inv_b = lb > 0.f ? 1.0f / lb : 0.f;
        size_t pbase = (size_t)(r0 + rw - base) * nh + h; /* partial of row r: ((pbase + r * nh) * nseg + z) */
        size_t ia = (pbase + (size_t)g8 * nh) * nseg + z, ib = (pbase + (size_t)(g8 + 8) * nh) * nseg + z;
        float *oa = out + ((size_t)(r0 + rw + g8) * nh + h) * HD, *ob = oa + (size_t)8 * nh * HD;
        if (t4 == 0) {
            if (ok_a && !fin_a) {
                part_ml[ia * 2] = m_a[hw] == -INFINITY ? -INFINITY : m_a[hw] * ln2;
                part_ml[ia * 2 + 1] = la;
            }
            if (ok_b && !fin_b) {
                part_ml[ib * 2] = m_b[hw] == -INFINITY ? -INFINITY : m_b[hw] * ln2;
                part_ml[ib * 2 + 1] = lb;
            }
        }
#pragma unroll
        for (int d = 0; d < NDT; d++) {
            int col = d * 8 + t4 * 2;
            if (fin_a) *reinterpret_cast<float2 *>(oa + col) = make_float2(o[hw][d][0] * inv_a, o[hw][d][1] * inv_a);
            else if (ok_a) *reinterpret_cast<float2 *>(part_o + ia * HD + col) = make_float2(o[hw][d][0], o[hw][d][1]);
            if (fin_b) *reinterpret_cast<float2 *>(ob + col) = make_float2(o[hw][d][2] * inv_b, o[hw][d][3] * inv_b);
            else if (ok_b) *reinterpret_cast<float2 *>(part_o + ib * HD + col) = make_float2(o[hw][d][2], o[hw][d][3]);
        }
    }
}

/* One block per (tile, head), a warp per row (rows w, w + PM_WARPS, ..):
 * the row's segments 0 .. pa_seg_of(pos) merged in order (merge_partials;
 * the lanes share the columns). Rows of one segment were written by the
 * attention kernel. */
#define PM_WARPS 16
__global__ void __launch_bounds__(PM_WARPS * 32)
k_attn_prompt_merge(float *out, const float *part_o, const float *part_ml, const int32_t *tiles, const int32_t *pos,
                    int nh, int hd, int nseg, int t_first) {
    pdl_start();
    int tile = t_first + blockIdx.x, h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = tiles[2 * tile], cnt = tiles[2 * tile + 1], base = tiles[2 * t_first];
    for (int r = r0 + warp; r < r0 + cnt; r += PM_WARPS) {
        int used = pa_seg_of(pos[r]) + 1;
        if (used == 1) continue;
        size_t pi = ((size_t)(r - base) * nh + h) * nseg;
        merge_partials(out + ((size_t)r * nh + h) * hd, part_o + pi * hd, part_ml + pi * 2, used, hd, lane, 32);
    }
}

template <int HD, int HPB, int HPW>
static void launch(ks_stream s, float *out, const float *q, int q_stride, const void *kc, const void *vc,
                   const int32_t *tiles, int max_tiles, const int32_t *pos, const int32_t *seq, const int32_t *tables,
                   int max_blocks, int bs, int nh, int nkv, float scale, int max_pos) {
    static int attr_set;
    size_t bytes = pa_layout<HD, HPB, HPW>::bytes;
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(k_attn_prompt<HD, HPB, HPW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
        attr_set = 1;
    }
    /* segments up to the step's deepest position (steps with prompt rows
     * are never replayed as graphs, so the shape may follow the step);
     * blocks past a tile's last position return at once */
    int nseg = pa_seg_of(max_pos) + 1, slice;
    float *pa_ws = ks_partials_ws(&ks_prompt_ws, s, max_tiles, (size_t)PA_ROWS * nh * nseg, HD, PA_WS_BYTES,
                                  "prompt attention workspace", &slice);
    if (!pa_ws) return;
    float *part_o = pa_ws, *part_ml = pa_ws + (size_t)slice * PA_ROWS * nh * nseg * HD;
    for (int t0 = 0; t0 < max_tiles; t0 += slice) {
        int nt = max_tiles - t0 < slice ? max_tiles - t0 : slice;
        ks_launch(k_attn_prompt<HD, HPB, HPW>, dim3(nt, nh / HPB, nseg), pa_layout<HD, HPB, HPW>::WARPS * 32, bytes, s, out, part_o, part_ml, q,
                  q_stride, (const __nv_bfloat16 *)kc, (const __nv_bfloat16 *)vc, tiles, pos, seq, tables, max_blocks, bs, nh, nkv, scale * 1.4426950408889634f, nseg, t0);
        CUDA_CHECK_LAUNCH();
        ks_launch(k_attn_prompt_merge, dim3(nt, nh), PM_WARPS * 32, 0, s, out, part_o, part_ml, tiles, pos, nh,
                  HD, nseg, t0);
        CUDA_CHECK_LAUNCH();
    }
}

/* heads per block (PA_HPB query heads of one KV head where the group
 * allows, else 2 or 1) and per warp (PA_HPW at head_dim <= 128; a warp of
 * 256-wide heads holds one, its O accumulators alone are 128 registers) */
#define PA_HPB 4
#define PA_HPW 2
template <int N>
using pa_int = std::integral_constant<int, N>;
template <int HD>
static void launch_hd(ks_stream s, float *out, const float *q, int q_stride, const void *kc, const void *vc,
                      const int32_t *tiles, int max_tiles, const int32_t *pos, const int32_t *seq,
                      const int32_t *tables, int max_blocks, int bs, int nh, int nkv, float scale, int max_pos) {
    auto go = [&](auto hpb, auto hpw) {
        launch<HD, decltype(hpb)::value, decltype(hpw)::value>(s, out, q, q_stride, kc, vc, tiles, max_tiles, pos, seq,
                                                               tables, max_blocks, bs, nh, nkv, scale, max_pos);
    };
    constexpr int hpw = HD <= 128 ? PA_HPW : 1;
    int group = nh / nkv;
    if (HD <= 128 && group % PA_HPB == 0) go(pa_int<HD <= 128 ? PA_HPB : 2>(), pa_int<hpw>());
    else if (group % 2 == 0) go(pa_int<2>(), pa_int<hpw>());
    else go(pa_int<1>(), pa_int<1>());
}

extern "C" int ks_cuda_attention_prompt(ks_stream s, float *out, const float *q, int q_stride, const void *kc,
                                        const void *vc, const int32_t *tiles, int max_tiles, const int32_t *pos,
                                        const int32_t *seq, const int32_t *tables, int max_blocks, int block_size,
                                        int n_heads, int n_kv_heads, int head_dim, float scale, int max_pos) {
    if (max_tiles <= 0) return 0;
    if (q_stride % 4 || n_kv_heads <= 0 || n_heads % n_kv_heads) return -1;
    auto launch = head_dim == 64 ? launch_hd<64> : head_dim == 128 ? launch_hd<128> : head_dim == 256 ? launch_hd<256> : nullptr;
    if (!launch) return -1;
    launch(s, out, q, q_stride, kc, vc, tiles, max_tiles, pos, seq, tables, max_blocks, block_size, n_heads, n_kv_heads,
           scale, max_pos);
    return 0;
}
