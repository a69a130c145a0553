/* k_attention_prompt.cu — causal attention of prompt rows on the tensor
 * cores (flash attention, WMMA bf16 x bf16 -> fp32):
 *   out[t, h] = sum_{j <= pos[t]} softmax_j(q[t,h] . K[j, h/g] * scale) V[j, h/g]
 * One block per (tile, HPB query heads of one KV head); a tile is up to 64
 * prompt rows of one sequence at consecutive positions (bk_attn_batch.tiles).
 * Its 4 * HPB warps own 16 rows of one head each. Keys go in chunks of 64 from position 0: the chunk's K and V
 * rows are read once through the block table, rounded to bf16 into shared
 * memory and used by all the block's rows and heads (GQA: HPB = up to 4
 * heads share them). A warp whose rows all lie before a chunk skips it.
 * Per warp and chunk: S = Q K^T (16 x 64) on
 * the tensor cores, scaled and masked (key > row's position), online softmax
 * per row (running max m and sum l in fp32, exp in fp32), P rounded to bf16,
 * O = O * e^(m_old - m_new) + P V with O in fp32 accumulator fragments; at
 * the end O / l.
 * Keys are split in segments of PA_SEG (1024) from position 0, one block
 * per (tile, heads, segment): a block walks only its segment's chunks and
 * leaves the rows' partial (m, l, unnormalised O) in a workspace; a merge
 * kernel then combines a row's segments in order (M = max m, L = sum l
 * e^(m - M), out = sum O e^(m - M) / L). A few rows deep in a context (a
 * prompt's tail after a prefix-cache hit) so get one block per 1024 keys
 * instead of one block walking them all. Every tile takes the same
 * segments, so this changes no row's dependence on the tiling.
 * Row invariance: the key chunks are fixed by absolute position, a row's
 * scores and sums are formed from its own row only, and chunks past a row's
 * position change nothing (p = 0, factor 1), so a row's result does not
 * depend on the tiling or on the rest of the batch. It differs in the last
 * bits from the flash-decoding kernel (k_attention.cu), which generated rows
 * use; the model sends each row to one of them by its role.
 * Shapes: head_dim a multiple of 16, at most 256; otherwise the launcher
 * returns -1 and the caller uses flash-decoding for these rows. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#include <mma.h>

using namespace nvcuda;

#define PA_ROWS 64
#define PA_KEYS 64
#define PA_PAD 8 /* bf16 row padding (16 bytes): fewer bank conflicts, ld stays a multiple of 8 */
#define PA_SEG 1024 /* keys per segment (a multiple of PA_KEYS) */
#define PA_WS_BYTES (256u << 20) /* partials workspace cap: tiles are sliced to fit */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> frag_bt;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> frag_b;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* Shared memory, in order: K, V (64 x (HD + PA_PAD) bf16 each); per warp
 * its 16 Q rows (bf16, ld LD), a 16 x SLD fp32 scratch (scores, then the
 * output), a 16 x PLD bf16 P and 16 row factors; a 16 x 16 row-index matrix.
 * (Q stays in shared memory, not in registers: 512 threads leave 128
 * registers each, which the output fragments mostly take.) */
template <int HD, int HPB>
struct pa_layout {
    static constexpr int WARPS = 4 * HPB;
    static constexpr int LD = HD + PA_PAD;
    static constexpr int SLD = PA_KEYS + 4;
    static constexpr int PLD = PA_KEYS + PA_PAD;
    static constexpr size_t q_bytes = (size_t)16 * LD * 2;
    static constexpr size_t scr_bytes = (size_t)16 * SLD * 4;
    static constexpr size_t warp_bytes = q_bytes + scr_bytes + (size_t)16 * PLD * 2 + 16 * 4;
    static constexpr size_t k = 0;
    static constexpr size_t v = k + (size_t)PA_KEYS * LD * 2;
    static constexpr size_t warps = v + (size_t)PA_KEYS * LD * 2;
    static constexpr size_t ridx = warps + (size_t)WARPS * warp_bytes;
    static constexpr size_t bytes = ridx + 16 * 16 * 4;
};

/* rows (nrows x HD) of f32 at src(r) -> bf16 smem (ld LD), by nthr threads
 * from thread t; rows >= cnt zero */
template <int HD, typename RowPtr>
__device__ __forceinline__ void load_rows_bf16(__nv_bfloat16 *dst, int nrows, int cnt, int t, int nthr, RowPtr src) {
    constexpr int LD = HD + PA_PAD, C4 = HD / 4;
    for (int i = t; i < nrows * C4; i += nthr) {
        int r = i / C4, c = (i % C4) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r < cnt) v = *reinterpret_cast<const float4 *>(src(r) + c);
        __nv_bfloat162 *d = reinterpret_cast<__nv_bfloat162 *>(dst + (size_t)r * LD + c);
        d[0] = __floats2bfloat162_rn(v.x, v.y);
        d[1] = __floats2bfloat162_rn(v.z, v.w);
    }
}

/* rows (nrows x HD) of bf16 at src(r) (the KV cache) -> smem (ld LD), 16
 * bytes per load; rows >= cnt zero */
template <int HD, typename RowPtr>
__device__ __forceinline__ void copy_rows_bf16(__nv_bfloat16 *dst, int nrows, int cnt, int t, int nthr, RowPtr src) {
    constexpr int LD = HD + PA_PAD, C8 = HD / 8;
    for (int i = t; i < nrows * C8; i += nthr) {
        int r = i / C8, c = (i % C8) * 8;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (r < cnt) v = __ldg(reinterpret_cast<const uint4 *>(src(r) + c));
        *reinterpret_cast<uint4 *>(dst + (size_t)r * LD + c) = v;
    }
}

template <int HD, int HPB>
__global__ void __launch_bounds__(HPB * 4 * 32)
k_attn_prompt(float *__restrict__ part_o, float *__restrict__ part_ml, const float *__restrict__ q, int q_stride,
              const __nv_bfloat16 *__restrict__ kc, const __nv_bfloat16 *__restrict__ vc,
              const int32_t *__restrict__ tiles,
              const int32_t *__restrict__ pos, const int32_t *__restrict__ seq, const int32_t *__restrict__ tables,
              int max_blocks, int bs, int nh, int nkv, float scale, int nseg, int t_first) {
    pdl_start();
    typedef pa_layout<HD, HPB> LY;
    constexpr int LD = LY::LD, SLD = LY::SLD, PLD = LY::PLD, NF = HD / 16, NT = LY::WARPS * 32;
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)(smem + LY::k), *Vs = (__nv_bfloat16 *)(smem + LY::v);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    unsigned char *wmem = smem + LY::warps + (size_t)warp * LY::warp_bytes;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)wmem;
    float *scr = (float *)(wmem + LY::q_bytes);
    __nv_bfloat16 *Ps = (__nv_bfloat16 *)(wmem + LY::q_bytes + LY::scr_bytes);
    float *fac = (float *)(wmem + LY::q_bytes + LY::scr_bytes + (size_t)16 * PLD * 2);
    float *ridx = (float *)(smem + LY::ridx);

    int tile = t_first + blockIdx.x, z = blockIdx.z;
    int r0 = tiles[2 * tile], cnt = tiles[2 * tile + 1], base = tiles[2 * t_first];
    if (cnt <= 0) return;
    int h = blockIdx.y * HPB + warp / 4, rw = (warp % 4) * 16; /* this warp: head h, tile rows rw .. rw+15 */
    int g = h / (nh / nkv), kv_dim = nkv * HD;
    const int32_t *table = tables + (size_t)seq[r0] * max_blocks;
    int p_last = pos[r0 + cnt - 1];
    int j_begin = z * PA_SEG, j_end = min(j_begin + PA_SEG, p_last + 1);
    if (j_begin > p_last) return; /* the whole block: no row of the tile reaches this segment */
    int wcnt = cnt - rw < 0 ? 0 : cnt - rw > 16 ? 16 : cnt - rw; /* valid rows of this warp */
    bool warp_live = wcnt > 0;
    int warp_last = warp_live ? pos[r0 + rw + wcnt - 1] : -1;

    for (int i = threadIdx.x; i < 256; i += NT) ridx[i] = (float)(i / 16);
    /* this warp's 16 Q rows -> bf16 */
    load_rows_bf16<HD>(Qs, 16, wcnt, lane, 32,
                       [&](int r) { return q + (size_t)(r0 + rw + r) * q_stride + (size_t)h * HD; });
    __syncthreads();
    /* which row of the warp's 16 each accumulator element holds (the
     * fragment layout is opaque: learn it from a matrix of row numbers) */
    frag_c rowof;
    wmma::load_matrix_sync(rowof, ridx, 16, wmma::mem_row_major);

    frag_c o[NF];
#pragma unroll
    for (int f = 0; f < NF; f++) wmma::fill_fragment(o[f], 0.f);
    /* lanes 2r and 2r+1 keep row r's running max and sum */
    int my_row = lane >> 1, half = lane & 1;
    bool row_ok = my_row < wcnt;
    int my_pos = row_ok ? pos[r0 + rw + my_row] : -1;
    float M = -INFINITY, L = 0.f;

    for (int j0 = j_begin; j0 < j_end; j0 += PA_KEYS) {
        int kc_cnt = j_end - j0 < PA_KEYS ? j_end - j0 : PA_KEYS;
        __syncthreads(); /* the previous chunk's K/V are consumed */
        auto krow = [&](int r) {
            int j = j0 + r;
            return kc + ((size_t)table[j / bs] * bs + j % bs) * kv_dim + (size_t)g * HD;
        };
        auto vrow = [&](int r) {
            int j = j0 + r;
            return vc + ((size_t)table[j / bs] * bs + j % bs) * kv_dim + (size_t)g * HD;
        };
        copy_rows_bf16<HD>(Ks, PA_KEYS, kc_cnt, threadIdx.x, NT, krow);
        copy_rows_bf16<HD>(Vs, PA_KEYS, kc_cnt, threadIdx.x, NT, vrow);
        __syncthreads();
        if (j0 > warp_last) continue; /* every row of this warp is before the chunk: nothing changes */
        /* S (16 x 64) = Q_w K^T */
#pragma unroll
        for (int c = 0; c < PA_KEYS / 16; c++) {
            frag_c sc;
            wmma::fill_fragment(sc, 0.f);
#pragma unroll
            for (int kk = 0; kk < NF; kk++) {
                frag_a a;
                frag_bt b;
                wmma::load_matrix_sync(a, Qs + kk * 16, LD);
                wmma::load_matrix_sync(b, Ks + (size_t)(c * 16) * LD + kk * 16, LD);
                wmma::mma_sync(sc, a, b, sc);
            }
            wmma::store_matrix_sync(scr + c * 16, sc, SLD, wmma::mem_row_major);
        }
        __syncwarp();
        /* online softmax: lane pair (2r, 2r+1) takes row r, 32 keys each */
        float mx = -INFINITY;
        const float *srow = scr + my_row * SLD + half * 32;
        int jlim = my_pos - (j0 + half * 32); /* keys i <= jlim of this lane's 32 are visible */
#pragma unroll 8
        for (int i = 0; i < 32; i++) mx = fmaxf(mx, row_ok && i <= jlim ? srow[i] * scale : -INFINITY);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        float Mn = fmaxf(M, mx);
        float base = Mn == -INFINITY ? 0.f : Mn; /* a row with no key yet (only rows past cnt) */
        float sum = 0.f;
#pragma unroll 8
        for (int i = 0; i < 32; i++) {
            float p = row_ok && i <= jlim ? expf(srow[i] * scale - base) : 0.f;
            sum += p;
            Ps[my_row * PLD + half * 32 + i] = __float2bfloat16_rn(p);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        float f = M == -INFINITY ? 0.f : expf(M - Mn);
        L = L * f + sum;
        M = Mn;
        if (!half) fac[my_row] = f;
        __syncwarp();
        /* O = O * f(row) + P V */
        frag_a pf[PA_KEYS / 16];
#pragma unroll
        for (int kk = 0; kk < PA_KEYS / 16; kk++) wmma::load_matrix_sync(pf[kk], Ps + kk * 16, PLD);
#pragma unroll
        for (int fi = 0; fi < NF; fi++) {
#pragma unroll
            for (int e = 0; e < o[fi].num_elements; e++) o[fi].x[e] *= fac[(int)rowof.x[e]];
#pragma unroll
            for (int kk = 0; kk < PA_KEYS / 16; kk++) {
                frag_b b;
                wmma::load_matrix_sync(b, Vs + (size_t)(kk * 16) * LD + fi * 16, LD);
                wmma::mma_sync(o[fi], pf[kk], b, o[fi]);
            }
        }
        __syncwarp(); /* Ps, fac and scr are rewritten next chunk */
    }
    if (!warp_live) return;
    /* this segment's partial of each row: (m, l) and the unnormalised O */
    size_t pbase = (size_t)(r0 + rw - base) * nh + h; /* partial of row r: ((pbase + r * nh) * nseg + z) */
    if (!half && row_ok) {
        part_ml[((pbase + (size_t)my_row * nh) * nseg + z) * 2] = M;
        part_ml[((pbase + (size_t)my_row * nh) * nseg + z) * 2 + 1] = L;
    }
    /* O rows, 64 columns at a time through the scratch */
#pragma unroll
    for (int f0 = 0; f0 < NF; f0 += 4) {
#pragma unroll
        for (int fi = f0; fi < f0 + 4 && fi < NF; fi++)
            wmma::store_matrix_sync(scr + (fi - f0) * 16, o[fi], SLD, wmma::mem_row_major);
        __syncwarp();
        int wc = NF - f0 < 4 ? (NF - f0) * 16 : 64;
        for (int i = lane; i < 16 * wc; i += 32) {
            int r = i / wc, d = i % wc;
            if (r < wcnt) part_o[((pbase + (size_t)r * nh) * nseg + z) * HD + f0 * 16 + d] = scr[r * SLD + d];
        }
        __syncwarp();
    }
}

/* One block per (tile, head): each row's segments 0 .. pos / PA_SEG merged
 * in order; out = O / L. */
__global__ void k_attn_prompt_merge(float *out, const float *part_o, const float *part_ml, const int32_t *tiles,
                                    const int32_t *pos, int nh, int hd, int nseg, int t_first) {
    pdl_start();
    int tile = t_first + blockIdx.x, h = blockIdx.y;
    int r0 = tiles[2 * tile], cnt = tiles[2 * tile + 1], base = tiles[2 * t_first];
    for (int r = r0; r < r0 + cnt; r++) {
        int used = pos[r] / PA_SEG + 1;
        size_t pi = ((size_t)(r - base) * nh + h) * nseg;
        merge_partials(out + ((size_t)r * nh + h) * hd, part_o + pi * hd, part_ml + pi * 2, used, hd);
    }
}

static ks_workspace pa_ws_buf;

template <int HD, int HPB>
static void launch(ks_stream s, float *out, const float *q, int q_stride, const void *kc, const void *vc,
                   const int32_t *tiles, int max_tiles, const int32_t *pos, const int32_t *seq, const int32_t *tables,
                   int max_blocks, int bs, int nh, int nkv, float scale, int max_pos) {
    static int attr_set;
    size_t bytes = pa_layout<HD, HPB>::bytes;
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(k_attn_prompt<HD, HPB>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
        attr_set = 1;
    }
    /* segments up to the step's deepest position (steps with prompt rows
     * are never replayed as graphs, so the shape may follow the step);
     * blocks past a tile's last position return at once */
    int nseg = max_pos / PA_SEG + 1, slice;
    float *pa_ws = ks_partials_ws(&pa_ws_buf, s, max_tiles, (size_t)PA_ROWS * nh * nseg, HD, PA_WS_BYTES,
                                  "prompt attention workspace", &slice);
    if (!pa_ws) return;
    float *part_o = pa_ws, *part_ml = pa_ws + (size_t)slice * PA_ROWS * nh * nseg * HD;
    for (int t0 = 0; t0 < max_tiles; t0 += slice) {
        int nt = max_tiles - t0 < slice ? max_tiles - t0 : slice;
        ks_launch(k_attn_prompt<HD, HPB>, dim3(nt, nh / HPB, nseg), HPB * 4 * 32, bytes, s, part_o, part_ml, q,
                  q_stride, (const __nv_bfloat16 *)kc, (const __nv_bfloat16 *)vc, tiles, pos, seq, tables, max_blocks, bs, nh, nkv, scale, nseg, t0);
        CUDA_CHECK_LAUNCH();
        ks_launch(k_attn_prompt_merge, dim3(nt, nh), HD < 128 ? 64 : 128, 0, s, out, part_o, part_ml, tiles, pos, nh,
                  HD, nseg, t0);
        CUDA_CHECK_LAUNCH();
    }
}

/* heads per block: as many query heads of one KV head as fit (4 at most;
 * 2 at head_dim 256, for shared memory) */
template <int HD>
static void launch_hd(ks_stream s, float *out, const float *q, int q_stride, const void *kc, const void *vc,
                      const int32_t *tiles, int max_tiles, const int32_t *pos, const int32_t *seq,
                      const int32_t *tables, int max_blocks, int bs, int nh, int nkv, float scale, int max_pos) {
    int G = nh / nkv;
    if (G % 4 == 0 && HD <= 128)
        launch<HD, 4>(s, out, q, q_stride, kc, vc, tiles, max_tiles, pos, seq, tables, max_blocks, bs, nh, nkv, scale, max_pos);
    else if (G % 2 == 0)
        launch<HD, 2>(s, out, q, q_stride, kc, vc, tiles, max_tiles, pos, seq, tables, max_blocks, bs, nh, nkv, scale, max_pos);
    else
        launch<HD, 1>(s, out, q, q_stride, kc, vc, tiles, max_tiles, pos, seq, tables, max_blocks, bs, nh, nkv, scale,
                      max_pos);
}

extern "C" int ks_cuda_attention_prompt(ks_stream s, float *out, const float *q, int q_stride, const void *kc,
                                        const void *vc, const int32_t *tiles, int max_tiles, const int32_t *pos,
                                        const int32_t *seq, const int32_t *tables, int max_blocks, int block_size,
                                        int n_heads, int n_kv_heads, int head_dim, float scale, int max_pos) {
    if (max_tiles <= 0) return 0;
    if (q_stride % 4 || n_kv_heads <= 0 || n_heads % n_kv_heads) return -1;
    switch (head_dim) {
    case 64: launch_hd<64>(s, out, q, q_stride, kc, vc, tiles, max_tiles, pos, seq, tables, max_blocks, block_size, n_heads, n_kv_heads, scale, max_pos); return 0;
    case 128: launch_hd<128>(s, out, q, q_stride, kc, vc, tiles, max_tiles, pos, seq, tables, max_blocks, block_size, n_heads, n_kv_heads, scale, max_pos); return 0;
    case 256: launch_hd<256>(s, out, q, q_stride, kc, vc, tiles, max_tiles, pos, seq, tables, max_blocks, block_size, n_heads, n_kv_heads, scale, max_pos); return 0;
    default: return -1;
    }
}
