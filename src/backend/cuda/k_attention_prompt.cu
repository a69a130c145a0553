/* k_attention_prompt.cu — causal attention of prompt rows on the tensor
 * cores (flash attention, WMMA bf16 x bf16 -> fp32):
 *   out[t, h] = sum_{j <= pos[t]} softmax_j(q[t,h] . K[j, h/g] * scale) V[j, h/g]
 * One block per (tile, query head); a tile is up to 64 prompt rows of one
 * sequence at consecutive positions (bk_attn_batch.tiles). Its 4 warps own 16
 * rows each. Keys go in chunks of 64 from position 0: the chunk's K and V
 * rows are read once through the block table, rounded to bf16 into shared
 * memory and used by all 64 rows. Per warp and chunk: S = Q K^T (16 x 64) on
 * the tensor cores, scaled and masked (key > row's position), online softmax
 * per row (running max m and sum l in fp32, exp in fp32), P rounded to bf16,
 * O = O * e^(m_old - m_new) + P V with O in fp32 accumulator fragments; at
 * the end O / l.
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
#define PA_WARPS 4
#define PA_PAD 8 /* bf16 row padding (16 bytes): fewer bank conflicts, ld stays a multiple of 8 */

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> frag_bt;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> frag_b;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

/* Shared memory, in order: Q, K, V (64 x (HD + PA_PAD) bf16 each); per warp a
 * 16 x SLD fp32 scratch (scores, then the output), a 16 x (64 + PA_PAD) bf16
 * P, 16 row factors; a 16 x 16 row-index matrix. */
template <int HD>
struct pa_layout {
    static constexpr int LD = HD + PA_PAD;
    static constexpr int SLD = (HD > PA_KEYS ? HD : PA_KEYS) + 4;
    static constexpr int PLD = PA_KEYS + PA_PAD;
    static constexpr size_t q = 0;
    static constexpr size_t k = q + (size_t)PA_ROWS * LD * 2;
    static constexpr size_t v = k + (size_t)PA_KEYS * LD * 2;
    static constexpr size_t scr = v + (size_t)PA_KEYS * LD * 2;
    static constexpr size_t p = scr + (size_t)PA_WARPS * 16 * SLD * 4;
    static constexpr size_t fac = p + (size_t)PA_WARPS * 16 * PLD * 2;
    static constexpr size_t ridx = fac + (size_t)PA_WARPS * 16 * 4;
    static constexpr size_t bytes = ridx + 16 * 16 * 4;
};

/* rows (64 x HD) of f32 at src(r) -> bf16 smem (ld LD); rows >= cnt zero */
template <int HD, typename RowPtr>
__device__ __forceinline__ void load_rows_bf16(__nv_bfloat16 *dst, int cnt, RowPtr src) {
    constexpr int LD = HD + PA_PAD, C4 = HD / 4;
    for (int i = threadIdx.x; i < PA_ROWS * C4; i += PA_WARPS * 32) {
        int r = i / C4, c = (i % C4) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r < cnt) v = *reinterpret_cast<const float4 *>(src(r) + c);
        __nv_bfloat162 *d = reinterpret_cast<__nv_bfloat162 *>(dst + (size_t)r * LD + c);
        d[0] = __floats2bfloat162_rn(v.x, v.y);
        d[1] = __floats2bfloat162_rn(v.z, v.w);
    }
}

template <int HD>
__global__ void __launch_bounds__(PA_WARPS * 32)
k_attn_prompt(float *__restrict__ out, const float *__restrict__ q, int q_stride, const float *__restrict__ kc,
              const float *__restrict__ vc, const int32_t *__restrict__ tiles, const int32_t *__restrict__ pos,
              const int32_t *__restrict__ seq, const int32_t *__restrict__ tables, int max_blocks, int bs, int nh,
              int nkv, float scale) {
    pdl_start();
    typedef pa_layout<HD> LY;
    constexpr int LD = LY::LD, SLD = LY::SLD, PLD = LY::PLD, NF = HD / 16;
    extern __shared__ __align__(128) unsigned char smem[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)(smem + LY::q), *Ks = (__nv_bfloat16 *)(smem + LY::k),
                  *Vs = (__nv_bfloat16 *)(smem + LY::v);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *scr = (float *)(smem + LY::scr) + (size_t)warp * 16 * SLD;
    __nv_bfloat16 *Ps = (__nv_bfloat16 *)(smem + LY::p) + (size_t)warp * 16 * PLD;
    float *fac = (float *)(smem + LY::fac) + warp * 16;
    float *ridx = (float *)(smem + LY::ridx);

    int r0 = tiles[2 * blockIdx.x], cnt = tiles[2 * blockIdx.x + 1], h = blockIdx.y;
    if (cnt <= 0) return;
    int g = h / (nh / nkv), kv_dim = nkv * HD;
    const int32_t *table = tables + (size_t)seq[r0] * max_blocks;
    int p_last = pos[r0 + cnt - 1];

    for (int i = threadIdx.x; i < 256; i += PA_WARPS * 32) ridx[i] = (float)(i / 16);
    load_rows_bf16<HD>(Qs, cnt, [&](int r) { return q + (size_t)(r0 + r) * q_stride + (size_t)h * HD; });
    __syncthreads();
    /* which row of the warp's 16 each accumulator element holds (the
     * fragment layout is opaque: learn it from a matrix of row numbers) */
    frag_c rowof;
    wmma::load_matrix_sync(rowof, ridx, 16, wmma::mem_row_major);

    frag_c o[NF];
#pragma unroll
    for (int f = 0; f < NF; f++) wmma::fill_fragment(o[f], 0.f);
    /* lanes 2r and 2r+1 keep row r's running max and sum */
    int my_row = lane >> 1, half = lane & 1, row_abs = warp * 16 + my_row;
    bool row_ok = row_abs < cnt;
    int my_pos = row_ok ? pos[r0 + row_abs] : -1;
    float M = -INFINITY, L = 0.f;
    bool warp_live = warp * 16 < cnt;

    for (int j0 = 0; j0 <= p_last; j0 += PA_KEYS) {
        int kc_cnt = p_last + 1 - j0 < PA_KEYS ? p_last + 1 - j0 : PA_KEYS;
        __syncthreads(); /* the previous chunk's K/V are consumed */
        auto krow = [&](int r) {
            int j = j0 + r;
            return kc + ((size_t)table[j / bs] * bs + j % bs) * kv_dim + (size_t)g * HD;
        };
        auto vrow = [&](int r) {
            int j = j0 + r;
            return vc + ((size_t)table[j / bs] * bs + j % bs) * kv_dim + (size_t)g * HD;
        };
        load_rows_bf16<HD>(Ks, kc_cnt, krow);
        load_rows_bf16<HD>(Vs, kc_cnt, vrow);
        __syncthreads();
        if (!warp_live) continue;
        /* S (16 x 64) = Q_w K^T */
#pragma unroll
        for (int c = 0; c < PA_KEYS / 16; c++) {
            frag_c sc;
            wmma::fill_fragment(sc, 0.f);
#pragma unroll
            for (int kk = 0; kk < NF; kk++) {
                frag_a a;
                frag_bt b;
                wmma::load_matrix_sync(a, Qs + (size_t)(warp * 16) * LD + kk * 16, LD);
                wmma::load_matrix_sync(b, Ks + (size_t)(c * 16) * LD + kk * 16, LD);
                wmma::mma_sync(sc, a, b, sc);
            }
            wmma::store_matrix_sync(scr + c * 16, sc, SLD, wmma::mem_row_major);
        }
        __syncwarp();
        /* online softmax: lane pair (2r, 2r+1) takes row r, 32 keys each */
        float s[32], mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < 32; i++) {
            int c = half * 32 + i, j = j0 + c;
            float v = scr[my_row * SLD + c] * scale;
            if (!row_ok || j > my_pos) v = -INFINITY;
            s[i] = v;
            mx = fmaxf(mx, v);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        float Mn = fmaxf(M, mx);
        float base = Mn == -INFINITY ? 0.f : Mn; /* a row with no key yet (only rows past cnt) */
        float sum = 0.f;
#pragma unroll
        for (int i = 0; i < 32; i++) {
            float p = expf(s[i] - base);
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
#pragma unroll
        for (int fi = 0; fi < NF; fi++) {
#pragma unroll
            for (int e = 0; e < o[fi].num_elements; e++) o[fi].x[e] *= fac[(int)rowof.x[e]];
#pragma unroll
            for (int kk = 0; kk < PA_KEYS / 16; kk++) {
                frag_a a;
                frag_b b;
                wmma::load_matrix_sync(a, Ps + kk * 16, PLD);
                wmma::load_matrix_sync(b, Vs + (size_t)(kk * 16) * LD + fi * 16, LD);
                wmma::mma_sync(o[fi], a, b, o[fi]);
            }
        }
        __syncwarp(); /* Ps and fac are rewritten next chunk */
    }
    if (!warp_live) return;
    if (!half) fac[my_row] = L > 0.f ? 1.0f / L : 0.f;
    __syncwarp();
#pragma unroll
    for (int fi = 0; fi < NF; fi++) {
#pragma unroll
        for (int e = 0; e < o[fi].num_elements; e++) o[fi].x[e] *= fac[(int)rowof.x[e]];
        wmma::store_matrix_sync(scr + fi * 16, o[fi], SLD, wmma::mem_row_major);
    }
    __syncwarp();
    for (int i = lane; i < 16 * HD; i += 32) {
        int r = i / HD, d = i % HD, ra = warp * 16 + r;
        if (ra < cnt) out[((size_t)(r0 + ra) * nh + h) * HD + d] = scr[r * SLD + d];
    }
}

template <int HD>
static void launch(ks_stream s, float *out, const float *q, int q_stride, const float *kc, const float *vc,
                   const int32_t *tiles, int max_tiles, const int32_t *pos, const int32_t *seq, const int32_t *tables,
                   int max_blocks, int bs, int nh, int nkv, float scale) {
    static int attr_set;
    size_t bytes = pa_layout<HD>::bytes;
    if (!attr_set) {
        CUDA_CHECK(cudaFuncSetAttribute(k_attn_prompt<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
        attr_set = 1;
    }
    ks_launch(k_attn_prompt<HD>, dim3(max_tiles, nh), PA_WARPS * 32, bytes, s, out, q, q_stride, kc, vc, tiles, pos, seq,
                                                                       tables, max_blocks, bs, nh, nkv, scale);
    CUDA_CHECK_LAUNCH();
}

extern "C" int ks_cuda_attention_prompt(ks_stream s, float *out, const float *q, int q_stride, const float *kc,
                                        const float *vc, const int32_t *tiles, int max_tiles, const int32_t *pos,
                                        const int32_t *seq, const int32_t *tables, int max_blocks, int block_size,
                                        int n_heads, int n_kv_heads, int head_dim, float scale) {
    if (max_tiles <= 0) return 0;
    if (q_stride % 4) return -1;
    switch (head_dim) {
    case 64: launch<64>(s, out, q, q_stride, kc, vc, tiles, max_tiles, pos, seq, tables, max_blocks, block_size, n_heads, n_kv_heads, scale); return 0;
    case 128: launch<128>(s, out, q, q_stride, kc, vc, tiles, max_tiles, pos, seq, tables, max_blocks, block_size, n_heads, n_kv_heads, scale); return 0;
    case 256: launch<256>(s, out, q, q_stride, kc, vc, tiles, max_tiles, pos, seq, tables, max_blocks, block_size, n_heads, n_kv_heads, scale); return 0;
    default: return -1;
    }
}
