/* k_matmul.cu — out[t, r] = sum_k x[t, k] * W[r, k] (+ bias[r]) for the
 * decode role (1 to a few dozen rows: decode, speculative verify, batched
 * decode; prompt chunks go to k_gemm.cu).
 *   W: (rows, k) bf16 / f16 / f32 row-major (the checkpoint's layout), x: (n, k) f32.
 * bf16 weights with k % 32 == 0 (every real model) run on the tensor cores
 * (k_matvec_tc): a block owns 16 rows (or 32 / 64 on large matrices: the
 * x loads shared by more rows), its 8 warps (4 or 16 for some shapes:
 * the launcher's rule, by shape) take interleaved 32-wide k blocks (a
 * split fixed by the shape alone), each lane loads 16 contiguous bytes of
 * two rows and feeds them to mma.sync m16n8k16 with k permuted identically
 * in A and B (a dot product does not care which k slot holds which pair);
 * x is split exactly into two bf16 parts, hi = bf16(x) and lo = bf16(x - hi)
 * (residual below 2^-17 |x|; above 8 tokens split once into a workspace by
 * k_split_x, else by each block), multiplied in two mmas into the same fp32
 * accumulators, 8 tokens per mma; the warps' partial sums are added in
 * warp order through shared memory. Weights are read once per 32 tokens;
 * some tiles double-buffer their weight loads across rounds (PIPE).
 * Other formats: one warp per R rows on the CUDA cores (k_matmul): lane l
 * reads the 16-byte chunks l, l+32, ... of the row, keeps one fp32
 * accumulator per token and adds w*x in chunk order; a fixed xor-butterfly
 * sums the 32 lanes; tokens in groups of TT (8, or 16 above 8 tokens).
 * Either way a token's arithmetic is the same for any n (an mma's output
 * column depends only on its own column of B): decode, speculative verify
 * and batched decode give bitwise-equal rows (DESIGN.md principle 2).
 * ks_cuda_matmul_fused: the gate|up product with SiLU(gate) * up applied
 * in the tensor-core kernel's epilogue (bitwise the two separate ops where
 * both run blocks of 8 warps); the
 * input RMSNorm (each block sums x^2 over the k blocks it reads, multiplies x by the norm's weights on the way and
 * scales its sums by 1 / rms; above 8 tokens k_norm_split_x does both once,
 * in the blocks' order; where mv_fold_norm says so by shape, a norm kernel
 * first instead) and the residual add (out += in the epilogue). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/matvec_rules.h"

#define MM_WARPS 8

/* 16 weight bytes, read-only path, asking L2 to fetch the whole 256-byte
 * sector group (the rest of the row is read right after). */
__device__ __forceinline__ uint4 ldw16(const void *p) {
    uint4 u;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
                 : "l"(p));
    return u;
}

/* One warp computes R consecutive rows (their loads interleaved, R x more
 * bytes in flight); each row's sum is formed exactly as with R = 1. */
template <typename W, int MM_TT, int R>
__global__ void __launch_bounds__(MM_WARPS * 32)
k_matmul(float *__restrict__ out, const float *x, const W *__restrict__ w,
         const float *__restrict__ bias, int n, int k, int rows) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r0 = (blockIdx.x * MM_WARPS + warp) * R;
    /* programmatic launch: wait for the kernel before; let the next one be
     * scheduled only once this warp's weight rows are read (its blocks
     * waiting earlier held SM slots the matvec's last wave needed) */
    pdl_wait();
    if (r0 >= rows) return;
    for (int t0 = 0; t0 < n; t0 += MM_TT) {
        int nt = n - t0 < MM_TT ? n - t0 : MM_TT;
        float acc[R][MM_TT];
#pragma unroll
        for (int q = 0; q < R; q++)
#pragma unroll
            for (int t = 0; t < MM_TT; t++) acc[q][t] = 0.f;
#pragma unroll 4
        for (int kk = lane * 8; kk < k; kk += 256) {
            uint4 wv[R];
#pragma unroll
            for (int q = 0; q < R; q++) {
                int r = r0 + q < rows ? r0 + q : rows - 1;
                wv[q] = ldw16(w + (size_t)r * k + kk);
            }
#pragma unroll
            for (int t = 0; t < MM_TT; t++) {
                if (t < nt) {
                    float xf[8];
                    load8(x + (size_t)(t0 + t) * k + kk, xf);
#pragma unroll
                    for (int q = 0; q < R; q++) {
                        float wf[8];
                        unpack8(wv[q], w, wf);
#pragma unroll
                        for (int i = 0; i < 8; i++) acc[q][t] = fmaf(wf[i], xf[i], acc[q][t]);
                    }
                }
            }
        }
        if (t0 == 0) pdl_trigger();
#pragma unroll
        for (int q = 0; q < R; q++) {
            int r = r0 + q;
#pragma unroll
            for (int t = 0; t < MM_TT; t++) {
                if (t < nt) {
                    float v = warp_sum(acc[q][t]);
                    if (lane == 0 && r < rows) out[(size_t)(t0 + t) * rows + r] = bias ? v + bias[r] : v;
                }
            }
        }
    }
}


/* ---- bf16 on the tensor cores ---- */
/* warps a block (NW): 8, or 4 / 16 where the sweep found them faster (the
 * launcher's rule); a block's k split, so part of a row's arithmetic: one
 * shape always runs one count, whatever the token count */
#define TC_WARPS 8

/* hi/lo halves of 8 x values, packed in k pairs */
__device__ __forceinline__ void split8(const float *xf, uint32_t *hi, uint32_t *lo) {
#pragma unroll
    for (int i = 0; i < 4; i++) split_pair(xf[2 * i], xf[2 * i + 1], hi[i], lo[i]);
}

/* Lane (g = lane / 4, q = lane % 4) holds the 8 weights k0 + 8q .. +7 of
 * rows g and g + 8 of the block (wa, wb) and the 8 x values of token g of a
 * group at the same k. mma 1 takes weights/x 0..3 (A regs: row g pair 0-1,
 * row g+8 pair 0-1, row g pair 2-3, row g+8 pair 2-3; B regs: pair 0-1,
 * pair 2-3 — the fragment layout of m16n8k16 with slot 2q+j <-> k 8q+j and
 * slot 2q+8+j <-> k 8q+2+j), mma 2 takes 4..7. C: lane holds rows g, g+8 of
 * tokens 2q, 2q+1.
 * MT tiles of 16 rows per block share each x load and split.
 * U k blocks per warp in flight; a token group's x loads for the U blocks
 * are issued together before its mmas (on the H200 that read 3.4-3.9 TB/s
 * at n = 1 and 1.8-2.8 TB/s at n = 16 on Qwen3-8B shapes, where taking the
 * blocks one by one read 2.8-3.7 and 1.5-2.7, U = 2 3.3-4.3 and 1.9-3.1,
 * U = 8 2.1-3.8 and 1.5-2.3; BENCHMARKS.md) */
/* x split once for every block (k_split_x; PRE): the same hi / lo words as
 * split8 gives, in place of each 8 floats — (n, k) 32-bit words, 8 values'
 * 4 hi words then 4 lo words */
__global__ void k_split_x(uint32_t *__restrict__ xs, const float *x, long long n8) {
    pdl_start();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n8; i += (long long)gridDim.x * blockDim.x) {
        float xf[8];
        load8(x + i * 8, xf);
        uint32_t h[4], l[4];
        split8(xf, h, l);
        reinterpret_cast<uint4 *>(xs)[2 * i] = make_uint4(h[0], h[1], h[2], h[3]);
        reinterpret_cast<uint4 *>(xs)[2 * i + 1] = make_uint4(l[0], l[1], l[2], l[3]);
    }
}

/* What the tensor-core kernel folds around its product (ks_cuda_matmul_fused):
 * g != NULL (NORM): the input rows are RMSNorm(x) * g, taken as
 * (1 / rms(x)) * (product of x * g); xscale: each token's 1 / rms when x
 * came split (k_norm_split_x); add: out += the result (a residual add). */
struct mm_epi {
    const float *g;
    const float *xscale;
    float eps;
    int add;
    const uint32_t *xs; /* above 8 tokens: x already split (ks_cuda_rmsnorm_split), else NULL */
    /* a side product in the same launch (NORM, up to 8 tokens): blocks from
     * blocks1 on compute out2 (n, rows2) (+)= x @ w2^T, x without the norm
     * (ks_cuda_matmul_fused_side) */
    const __nv_bfloat16 *w2;
    float *out2;
    int rows2, blocks1, add2;
};

/* a lane's value summed over its quad (lanes 4i .. 4i+3): one fixed order */
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v;
}

/* 1 / rms of a k-wide row from the NW warps' partial sums of x^2 (p[w *
 * stride]), added in warp order */
template <int NW>
__device__ __forceinline__ float inv_rms_of(const float *p, int stride, int k, float eps) {
    float tot = p[0];
#pragma unroll
    for (int w = 1; w < NW; w++) tot += p[w * stride];
    return 1.0f / sqrtf(tot / (float)k + eps);
}

/* NORM above 8 tokens: one block per token splits x * g (k_split_x's words)
 * and leaves the token's 1 / rms in xscale, its sum of squares formed in
 * k_matvec_tc<NW>'s order — lane (warp w, quad lane q) adds x^2 over k
 * blocks w, w + NW, ... at k offset 8q, then quads, then warps — so a row's
 * bits are the same at any token count. */
template <int NW>
__global__ void k_norm_split_x(uint32_t *__restrict__ xs, float *__restrict__ xscale, const float *x,
                               const float *__restrict__ g, int k, float eps) {
    pdl_start();
    __shared__ float red[NW];
    int t = blockIdx.x, nkb = k >> 5;
    const float *xr = x + (size_t)t * k;
    if (threadIdx.x < 32) { /* warp 0: the sum of squares (its loads unrolled, the order kept); quad w
                             * stands in for the matvec's warps w, w + 8, .. */
        int q = threadIdx.x & 3;
        for (int w = threadIdx.x >> 2; w < (NW > 8 ? NW : 8); w += 8) { /* (every lane the same trips) */
            float ss = 0.f;
#pragma unroll 8
            for (int kb = w; w < NW && kb < nkb; kb += NW) {
                float xf[8];
                load8(xr + kb * 32 + q * 8, xf);
#pragma unroll
                for (int i = 0; i < 8; i++) ss = fmaf(xf[i], xf[i], ss);
            }
            ss = quad_sum(ss);
            if (q == 0 && w < NW) red[w] = ss;
        }
        __syncwarp();
        if (threadIdx.x == 0) xscale[t] = inv_rms_of<NW>(red, 1, k, eps);
        return;
    }
    /* the other warps: the split of x * g, beside it */
    uint4 *o = reinterpret_cast<uint4 *>(xs + (size_t)t * k);
    for (int i = threadIdx.x - 32; i < k / 8; i += blockDim.x - 32) {
        float xf[8], gf[8];
        load8(xr + i * 8, xf);
        load8(g + i * 8, gf);
#pragma unroll
        for (int j = 0; j < 8; j++) xf[j] = __fmul_rn(xf[j], gf[j]);
        uint32_t h[4], l[4];
        split8(xf, h, l);
        o[2 * i] = make_uint4(h[0], h[1], h[2], h[3]);
        o[2 * i + 1] = make_uint4(l[0], l[1], l[2], l[3]);
    }
}

/* PIPE: the next round's U k blocks of weights are loaded before this
 * round's mmas (double-buffered registers), so a warp's weight stream never
 * waits on its own arithmetic; the same loads and mmas in the same order. */
/* NORM's own loads and sums take registers: held to 128 (two blocks an SM,
 * as the tiles have without it; the 64-row SwiGLU tile took 150) but for
 * the (4,2) tile, whose norm weights loaded with its weights spilled at
 * 128 — it serves launch-bound shapes (tinycoder's gate|up: 96 blocks, one
 * an SM). x is no
 * __restrict__ const pointer in these kernels: that lets the compiler read
 * it on the non-coherent path, whose data must not change while the kernel
 * lives — under programmatic launch the kernel before is still writing it
 * (with the norm folded and __restrict__ x, decode and verify rows came out
 * wrong with programmatic launch on and right with it off). */
template <int NW, int G, int U, int MT, bool SW, bool PRE = false, bool PIPE = false, bool NORM = false>
__global__ void __launch_bounds__(NW * 32, NW <= 8 && NORM && !PRE && U * MT < 8 ? 2 : 1)
k_matvec_tc(float *__restrict__ out, const float *x, const __nv_bfloat16 *__restrict__ w,
            const float *__restrict__ bias, int n, int k, int rows, mm_epi ep) {
    static_assert(!NORM || PRE || G == 1, "the blocks' own x^2 sums hold one token group");
    __shared__ float red[NW][G][MT][4][32];
    __shared__ float red_ss[NORM && !PRE ? NW : 1][8], inv_rms[NORM && !PRE ? 8 : 1];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    /* the side product's blocks (NORM, no PRE): their own weights, output
     * and mode, x as it is (the norm's multiply and scale skipped: each
     * value is then what the plain kernel computes) */
    int bx = blockIdx.x, add = ep.add;
    bool side = NORM && !PRE && ep.w2 && bx >= ep.blocks1;
    if (side) {
        bx -= ep.blocks1;
        w = ep.w2;
        out = ep.out2;
        rows = ep.rows2;
        if constexpr (!SW) bias = nullptr; /* (the SwiGLU forms read none) */
        add = ep.add2;
    }
    /* SW (SwiGLU, MT even): tiles pair up, 2p the gate rows and 2p + 1 the
     * up rows of the same 16 outputs (W = [gate; up], half = rows / 2) */
    int half = rows >> 1, r0 = bx * 16 * (SW ? MT / 2 : MT);
    const __nv_bfloat16 *wa[MT], *wb[MT];
#pragma unroll
    for (int m = 0; m < MT; m++) {
        int base = SW ? (m & 1) * half + r0 + (m >> 1) * 16 : r0 + m * 16;
        int ra = min(base + g, rows - 1), rb = min(base + g + 8, rows - 1);
        wa[m] = w + (size_t)ra * k + q * 8;
        wb[m] = w + (size_t)rb * k + q * 8;
    }
    int nkb = k >> 5;
    bool waited = false;
    /* the epilogue's elements: e = threadIdx.x + i NW 32 (EN of them); element
     * e is lane e % 32's value c = (e / 32) % 4 of tile (e / 128) % MT (of
     * SwiGLU pair, MT / 2) and token group e / (MT 128); its output row and token: */
    constexpr int EN = G * (SW ? MT / 2 : MT) * 128;
    auto e_row = [&](int e) { return r0 + ((e >> 7) % (SW ? MT / 2 : MT)) * 16 + ((e & 31) >> 2) + (((e >> 5) & 3) >= 2 ? 8 : 0); };
    auto e_tok = [&](int e, int t0) { return t0 + (e / ((SW ? MT / 2 : MT) * 128)) * 8 + (e & 3) * 2 + ((e >> 5) & 1); };
    /* what the epilogue reads of the kernels before (the residual it adds
     * to, a token's 1 / rms from the split), loaded at the wait so its
     * round trip overlaps the k loop; only where a thread has one element
     * (EN <= NW 32: the loop over several, unrolled to keep them in
     * registers, cost registers and Qwen3-1.7B decode 6%, session 45), and
     * not on the folded norm's tiles (held to 128 registers, they would spill) */
    constexpr bool EARLY = !(NORM && !PRE) && EN <= NW * 32;
    float pre_res = 0.f, pre_sc = 1.f;
    auto load_early = [&](int t0) {
        if constexpr (EARLY) {
            int e = threadIdx.x;
            if (e >= EN) return;
            int r = e_row(e), tok = e_tok(e, t0);
            if constexpr (NORM && PRE) pre_sc = tok < n ? ep.xscale[tok] : 1.f;
            if constexpr (!SW) pre_res = add && tok < n && r < rows ? out[(size_t)tok * rows + r] : 0.f;
        }
    };
    /* programmatic launch: the next kernel may be scheduled once every
     * block of this one runs (the last wave), so its blocks take the SM
     * slots this one's tail leaves and load their weights there (H200, in
     * place of a trigger after the k loop: Qwen3-1.7B decode +1.7%,
     * Qwen3-8B +1%; their next rounds also prefetched into L2 before the
     * wait cost 8B 8%) */
    pdl_trigger();
    for (int t0 = 0; t0 < n; t0 += 8 * G) {
        if (waited) load_early(t0); /* (a later token group: the wait is behind) */
        float acc[G][MT][4], ss = 0.f; /* ss: NORM, this lane's sum of x^2 (token g, G = 1) */
#pragma unroll
        for (int j = 0; j < G; j++)
#pragma unroll
            for (int m = 0; m < MT; m++) acc[j][m][0] = acc[j][m][1] = acc[j][m][2] = acc[j][m][3] = 0.f;
        uint4 A[U][MT], B[U][MT], An[U][MT], Bn[U][MT];
        auto load_round = [&](uint4 (&a)[U][MT], uint4 (&b)[U][MT], int kb0) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                int kb = kb0 + u * NW;
                if (kb < nkb)
#pragma unroll
                    for (int m = 0; m < MT; m++) {
                        a[u][m] = ldw16(wa[m] + kb * 32);
                        b[u][m] = ldw16(wb[m] + kb * 32);
                    }
            }
        };
        if constexpr (PIPE) load_round(An, Bn, warp);
        for (int kb0 = warp; kb0 < nkb; kb0 += NW * U) {
            if constexpr (PIPE) {
#pragma unroll
                for (int u = 0; u < U; u++)
#pragma unroll
                    for (int m = 0; m < MT; m++) {
                        A[u][m] = An[u][m];
                        B[u][m] = Bn[u][m];
                    }
                if (kb0 + NW * U < nkb) load_round(An, Bn, kb0 + NW * U);
            } else {
                load_round(A, B, kb0);
            }
            /* NORM (one token group): the norm's weights of this round's k blocks, constants too */
            float gw[NORM && !PRE ? U : 1][8];
            if constexpr (NORM && !PRE)
#pragma unroll
                for (int u = 0; u < U; u++)
                    if (kb0 + u * NW < nkb) load8(ep.g + (kb0 + u * NW) * 32 + q * 8, gw[u]);
            /* the weights are constants: their first loads overlap the
             * kernel before (programmatic launch); x is its output */
            if (!waited) {
                pdl_wait();
                waited = true;
                load_early(t0);
            }
#pragma unroll
            for (int j = 0; j < G; j++) {
                if (t0 + j * 8 >= n) break;
                int tok = t0 + j * 8 + g;
                const float *xr = x + (size_t)(tok < n ? tok : 0) * k + q * 8;
                float xf[U][8];
                uint4 xh[U], xl[U];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    int kb = kb0 + u * NW;
                    if constexpr (PRE) {
                        if (tok < n && kb < nkb) {
                            const uint4 *p = reinterpret_cast<const uint4 *>(xr + kb * 32);
                            xh[u] = p[0];
                            xl[u] = p[1];
                        } else {
                            xh[u] = xl[u] = make_uint4(0, 0, 0, 0);
                        }
                    } else if (tok < n && kb < nkb) {
                        load8(xr + kb * 32, xf[u]);
                    } else {
#pragma unroll
                        for (int i = 0; i < 8; i++) xf[u][i] = 0.f;
                    }
                }
                if constexpr (NORM && !PRE) { /* x^2 summed before x * g (norm_split_sum's order) */
#pragma unroll
                    for (int u = 0; u < U; u++) {
                        if (kb0 + u * NW >= nkb) break;
#pragma unroll
                        for (int i = 0; i < 8; i++) {
                            ss = fmaf(xf[u][i], xf[u][i], ss);
                            if (!side) xf[u][i] = __fmul_rn(xf[u][i], gw[u][i]);
                        }
                    }
                }
#pragma unroll
                for (int u = 0; u < U; u++) {
                    if (kb0 + u * NW >= nkb) break;
                    uint32_t hi[4], lo[4];
                    if constexpr (PRE) {
                        hi[0] = xh[u].x, hi[1] = xh[u].y, hi[2] = xh[u].z, hi[3] = xh[u].w;
                        lo[0] = xl[u].x, lo[1] = xl[u].y, lo[2] = xl[u].z, lo[3] = xl[u].w;
                    } else {
                        split8(xf[u], hi, lo);
                    }
#pragma unroll
                    for (int m = 0; m < MT; m++) {
                        float *c = acc[j][m];
                        mma_bf16(c, A[u][m].x, B[u][m].x, A[u][m].y, B[u][m].y, hi[0], hi[1]);
                        mma_bf16(c, A[u][m].x, B[u][m].x, A[u][m].y, B[u][m].y, lo[0], lo[1]);
                        mma_bf16(c, A[u][m].z, B[u][m].z, A[u][m].w, B[u][m].w, hi[2], hi[3]);
                        mma_bf16(c, A[u][m].z, B[u][m].z, A[u][m].w, B[u][m].w, lo[2], lo[3]);
                    }
                }
            }
        }
        if (!waited) { /* no k block for this warp: still wait before writing out */
            pdl_wait();
            waited = true;
            load_early(t0);
        }
#pragma unroll
        for (int j = 0; j < G; j++)
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int c = 0; c < 4; c++) red[warp][j][m][c][lane] = acc[j][m][c];
        if constexpr (NORM && !PRE) {
            ss = quad_sum(ss);
            if (q == 0) red_ss[warp][g] = ss;
        }
        __syncthreads();
        if constexpr (NORM && !PRE) {
            if (threadIdx.x < 8) inv_rms[threadIdx.x] = inv_rms_of<NW>(&red_ss[0][threadIdx.x], 8, k, ep.eps);
            __syncthreads();
        }
        /* NORM: a token's 1 / rms (the block's own sums up to 8 tokens, the split's above) */
        auto scale_of = [&](int tok, int j8) -> float {
            if constexpr (!NORM) return 1.f;
            else if constexpr (PRE) return EARLY ? pre_sc : ep.xscale[tok];
            else return inv_rms[j8];
        };
        if constexpr (SW) { /* out (n, half) = silu(gate) * up, as k_silu_mul computes it */
            for (int e = threadIdx.x; e < EN; e += NW * 32) {
                int j = e / (MT / 2 * 128), p = (e >> 7) % (MT / 2), c = (e >> 5) & 3, l = e & 31;
                int r = e_row(e), tok = e_tok(e, t0);
                float vg = red[0][j][2 * p][c][l], vu = red[0][j][2 * p + 1][c][l];
#pragma unroll
                for (int wi = 1; wi < NW; wi++) {
                    vg += red[wi][j][2 * p][c][l];
                    vu += red[wi][j][2 * p + 1][c][l];
                }
                if constexpr (NORM)
                    if (tok < n) {
                        float sc = scale_of(tok, tok - t0 - j * 8);
                        vg = __fmul_rn(vg, sc);
                        vu = __fmul_rn(vu, sc);
                    }
                if (tok < n && r < half) out[(size_t)tok * half + r] = silu_mul_f(vg, vu);
            }
        } else {
            for (int e = threadIdx.x; e < EN; e += NW * 32) {
                int j = e / (MT * 128), m = (e >> 7) % MT, c = (e >> 5) & 3, l = e & 31;
                int r = e_row(e), tok = e_tok(e, t0);
                float v = red[0][j][m][c][l];
#pragma unroll
                for (int wi = 1; wi < NW; wi++) v += red[wi][j][m][c][l];
                if (tok < n && r < rows) {
                    if constexpr (NORM)
                        if (!side) v = __fmul_rn(v, scale_of(tok, tok - t0 - j * 8));
                    if (bias) v += bias[r];
                    size_t o = (size_t)tok * rows + r;
                    out[o] = add ? (EARLY ? pre_res : out[o]) + v : v;
                }
            }
        }
        __syncthreads();
    }
}

template <int NW, int U, int MT, bool SW, bool PRE, bool PIPE, bool NORM>
static void launch_tc_grid(ks_stream s, float *out, const float *x, const __nv_bfloat16 *w, const float *bias, int n,
                           int k, int rows, mm_epi e) {
    /* above 16 tokens the reduction's shared memory caps the tiles at 2
     * (1 with 16 warps; same bytes in flight: more k blocks) */
    constexpr int MT4 = MT > (NW > 8 ? 1 : 2) ? (NW > 8 ? 1 : 2) : MT, U4 = U * MT / MT4;
    int outs = SW ? rows / 2 : rows; /* output rows, 16 per tile (a SwiGLU pair of tiles gives 16) */
    constexpr int per = SW ? 16 * MT / 2 : 16 * MT, per4 = SW ? 16 * MT4 / 2 : 16 * MT4;
    dim3 block(NW * 32), grid((outs + per - 1) / per), grid4((outs + per4 - 1) / per4);
    /* x is split by the blocks up to 8 tokens, before the call above (PRE);
     * a side product's blocks follow the product's */
    if constexpr (!PRE) {
        if (e.w2) {
            e.blocks1 = grid.x;
            grid.x += (e.rows2 + per - 1) / per;
        }
        ks_launch(k_matvec_tc<NW, 1, U, MT, SW, false, PIPE, NORM>, grid, block, 0, s, out, x, w, bias, n, k, rows, e);
    }
    else if (n <= 16)
        ks_launch(k_matvec_tc<NW, 2, U, MT, SW, true, PIPE, NORM>, grid, block, 0, s, out, x, w, bias, n, k, rows, e);
    else
        ks_launch(k_matvec_tc<NW, 4, U4, MT4, SW, true, PIPE, NORM>, grid4, block, 0, s, out, x, w, bias, n, k, rows, e);
}

/* Above 8 tokens x is split once (k_split_x) instead of by every block:
 * each block's split of 16 tokens was ~60% of its loop's instructions
 * (H200, Qwen3-8B shapes, 16 tokens: gate_up 65.7 -> 63.2 us, down 39.2 ->
 * 35.1, qkv 24.7 -> 23.9; at 1 token the extra launch cost more than the
 * split: qkv 15.9 -> 17.6 us). Same words, so the same arithmetic. With the
 * input norm (NORM), k_norm_split_x splits x * g and leaves each token's
 * 1 / rms after the words, summed as the blocks sum it up to 8 tokens. */
static ks_workspace split_ws; /* (n, k) words (+ n floats): the split x of the call in flight (one stream; a
                               * split waits for the matvec before it, programmatic launch or not) */

template <int U, int MT, bool SW = false, bool PIPE = false, bool NORM = false, int NW = TC_WARPS>
static void launch_tc_v(ks_stream s, float *out, const float *x, const __nv_bfloat16 *w, const float *bias, int n,
                        int k, int rows, mm_epi e) {
    if (n > 8 && e.xs) {
        launch_tc_grid<NW, U, MT, SW, true, PIPE, NORM>(s, out, (const float *)e.xs, w, bias, n, k, rows, e);
    } else if (n > 8) {
        uint32_t *xs = (uint32_t *)ks_cuda_workspace(&split_ws, s, (size_t)n * k * 4 + (size_t)n * 4, "matvec x split");
        if (!xs) return;
        if constexpr (NORM) {
            e.xscale = (const float *)(xs + (size_t)n * k);
            ks_launch(k_norm_split_x<NW>, n, 256, 0, s, xs, (float *)(xs + (size_t)n * k), x, e.g, k, e.eps);
        } else {
            long long n8 = (long long)n * k / 8;
            int blocks = (int)((n8 + 255) / 256);
            ks_launch(k_split_x, blocks < 1024 ? blocks : 1024, 256, 0, s, xs, x, n8);
        }
        CUDA_CHECK_LAUNCH();
        launch_tc_grid<NW, U, MT, SW, true, PIPE, NORM>(s, out, (const float *)xs, w, bias, n, k, rows, e);
    } else {
        launch_tc_grid<NW, U, MT, SW, false, PIPE, NORM>(s, out, x, w, bias, n, k, rows, e);
    }
}

/* The tile a call runs on: the first matching rule of matvec_rules.c's
 * table (the shapes the H200 was swept at, with their times). Each form
 * instantiates the tiles its table rows name (matvec_rules.h's lists).
 * SW: the SwiGLU form (W = [gate; up], out (n, rows / 2)), the same tiles
 * in gate/up pairs, so each product is the plain kernel's: it needs MT even
 * and takes two tiles where the plain form takes one. */
template <bool SW = false, bool NORM = false>
static void launch_tc(ks_stream s, float *out, const float *x, const __nv_bfloat16 *w, const float *bias, int n,
                      int k, int rows, mm_epi e) {
    mv_tile t = mv_tile_for(mv_form(SW, NORM), n, k, rows);
#define KS_TILE_CASE(U, MT, P, W)                                                  \
    if (t.u == U && t.mt == MT && t.pipe == P && t.warps == W) {                   \
        launch_tc_v<U, MT, SW, P, NORM, W>(s, out, x, w, bias, n, k, rows, e);    \
        return;                                                                    \
    }
    if constexpr (SW && NORM) { MV_TILES_SWIGLU_NORM(KS_TILE_CASE) }
    else if constexpr (SW) { MV_TILES_SWIGLU(KS_TILE_CASE) }
    else if constexpr (NORM) { MV_TILES_NORM(KS_TILE_CASE) }
    else { MV_TILES_PLAIN(KS_TILE_CASE) }
#undef KS_TILE_CASE
    /* a tile its form does not instantiate: tests/unit/test_matvec_rules.c
     * rules this out; the form's last rule's tile, not a wrong product */
    launch_tc_v<4, SW ? 2 : 1, SW, false, NORM>(s, out, x, w, bias, n, k, rows, e);
}

/* f32 weights: two float4 per 8 elements, same chunk order */
template <int MM_TT>
__global__ void __launch_bounds__(MM_WARPS * 32)
k_matmul_f32(float *__restrict__ out, const float *x, const float *__restrict__ w,
             const float *__restrict__ bias, int n, int k, int rows) {
    pdl_start();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r = blockIdx.x * MM_WARPS + warp;
    if (r >= rows) return;
    const float *wr = w + (size_t)r * k;
    for (int t0 = 0; t0 < n; t0 += MM_TT) {
        int nt = n - t0 < MM_TT ? n - t0 : MM_TT;
        float acc[MM_TT];
#pragma unroll
        for (int t = 0; t < MM_TT; t++) acc[t] = 0.f;
#pragma unroll 4
        for (int kk = lane * 8; kk < k; kk += 256) {
            float wf[8];
            load8(wr + kk, wf);
#pragma unroll
            for (int t = 0; t < MM_TT; t++) {
                if (t < nt) {
                    float xf[8];
                    load8(x + (size_t)(t0 + t) * k + kk, xf);
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[t] = fmaf(wf[i], xf[i], acc[t]);
                }
            }
        }
#pragma unroll
        for (int t = 0; t < MM_TT; t++) {
            if (t < nt) {
                float v = warp_sum(acc[t]);
                if (lane == 0) out[(size_t)(t0 + t) * rows + r] = bias ? v + bias[r] : v;
            }
        }
    }
}

/* k not a multiple of 8: plain per-element loop (same structure, no vectors) */
template <typename W>
__global__ void k_matmul_scalar(float *out, const float *x, const W *w, const float *bias, int n, int k, int rows) {
    pdl_start();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int r = blockIdx.x * MM_WARPS + warp;
    if (r >= rows) return;
    for (int t = 0; t < n; t++) {
        float acc = 0.f;
        for (int kk = lane; kk < k; kk += 32) acc = fmaf((float)w[(size_t)r * k + kk], x[(size_t)t * k + kk], acc);
        acc = warp_sum(acc);
        if (lane == 0) out[(size_t)t * rows + r] = bias ? acc + bias[r] : acc;
    }
}

/* CUDA cores (f16 weights, k % 32 != 0): 2 rows per warp, L2 256-byte
 * hint (read 2.7-3.9 TB/s at Qwen3-8B shapes on the H200 as bf16) */
template <typename W>
static void launch_typed(ks_stream s, float *out, const float *x, const W *w, const float *bias, int n, int k,
                         int rows) {
    constexpr int R = 2;
    dim3 grid((rows + MM_WARPS * R - 1) / (MM_WARPS * R)), block(MM_WARPS * 32);
    if (n > 8) /* a verify step or a batch of up to 16: one pass over the weights */
        ks_launch(k_matmul<W, 16, R>, grid, block, 0, s, out, x, w, bias, n, k, rows);
    else
        ks_launch(k_matmul<W, 8, R>, grid, block, 0, s, out, x, w, bias, n, k, rows);
}

extern "C" void ks_cuda_matmul(ks_stream s, float *out, const float *x, const void *w, int wtype, const float *bias,
                               int n, int k, int rows) {
    if (n <= 0 || rows <= 0) return;
    dim3 grid((rows + MM_WARPS - 1) / MM_WARPS), block(MM_WARPS * 32);
    bool vec = k % 8 == 0;
    if (!vec) {
        if (wtype == 2) ks_launch(k_matmul_scalar<__nv_bfloat16>, grid, block, 0, s, out, x, (const __nv_bfloat16 *)w, bias, n, k, rows);
        else if (wtype == 1) ks_launch(k_matmul_scalar<__half>, grid, block, 0, s, out, x, (const __half *)w, bias, n, k, rows);
        else ks_launch(k_matmul_scalar<float>, grid, block, 0, s, out, x, (const float *)w, bias, n, k, rows);
    } else if (wtype == 2 && k % 32 == 0) {
        launch_tc(s, out, x, (const __nv_bfloat16 *)w, bias, n, k, rows, mm_epi{});
    } else if (wtype == 2) {
        launch_typed<__nv_bfloat16>(s, out, x, (const __nv_bfloat16 *)w, bias, n, k, rows);
    } else if (wtype == 1) {
        launch_typed<__half>(s, out, x, (const __half *)w, bias, n, k, rows);
    } else {
        ks_launch(k_matmul_f32<8>, grid, block, 0, s, out, x, (const float *)w, bias, n, k, rows);
    }
    CUDA_CHECK_LAUNCH();
}

/* The qkv product (norm folded) and a side product of the same rows
 * without it in one launch: the side's tiles are the plain kernel's (the
 * same k blocks per warp in the same order, the same reduction), so both
 * results are bitwise the two calls'. Where the kernel cannot (the norm not
 * folded, x split above 8 tokens, other weight types, SwiGLU), the two
 * calls. */
extern "C" void ks_cuda_matmul_fused_side(ks_stream s, float *out, const float *x, const float *g, float eps,
                                          const void *w, int wtype, const float *bias, int n, int k, int rows,
                                          float *out2, const void *w2, int wtype2, int k2, int rows2, int add2) {
    if (n <= 0 || rows <= 0) return;
    if (g && wtype == 2 && wtype2 == 2 && k2 == k && k % 32 == 0 && n <= 8 && rows2 > 0 && mv_fold_norm(k, rows, false)) {
        mm_epi e = {g, NULL, eps, 0, NULL, (const __nv_bfloat16 *)w2, out2, rows2, 0, add2};
        launch_tc<false, true>(s, out, x, (const __nv_bfloat16 *)w, bias, n, k, rows, e);
        CUDA_CHECK_LAUNCH();
        return;
    }
    ks_cuda_matmul_fused(s, out, x, g, eps, w, wtype, bias, n, k, rows, KS_MM_PLAIN);
    ks_cuda_matmul_fused(s, out2, x, NULL, 0.f, w2, wtype2, NULL, n, k2, rows2, add2 ? KS_MM_ADD : KS_MM_PLAIN);
}

/* The other paths (weights not bf16 with k % 32 == 0, an unfolded norm):
 * the separate ops through two workspaces */
static ks_workspace fused_norm_ws, fused_out_ws;

extern "C" void ks_cuda_matmul_fused(ks_stream s, float *out, const float *x, const float *g, float eps, const void *w,
                                     int wtype, const float *bias, int n, int k, int rows, int mode) {
    if (n <= 0 || rows <= 0) return;
    bool sw = mode == KS_MM_SWIGLU, tc = wtype == 2 && k % 32 == 0 && (!sw || rows % 2 == 0);
    const uint32_t *xs = NULL;
    if (g && tc && !mv_fold_norm(k, rows, sw) && n > 8) { /* the norm kernel writes the split x itself: one launch */
        uint32_t *ws = (uint32_t *)ks_cuda_workspace(&split_ws, s, (size_t)n * k * 4 + (size_t)n * 4, "matvec x split");
        if (!ws) return;
        if (ks_cuda_rmsnorm_split(s, ws, x, g, n, k, eps)) {
            xs = ws;
            g = NULL;
        }
    }
    if (g && !(tc && mv_fold_norm(k, rows, sw))) {
        float *xn = (float *)ks_cuda_workspace(&fused_norm_ws, s, (size_t)n * k * 4, "matmul input norm");
        if (!xn) return;
        ks_cuda_rmsnorm(s, xn, k, x, k, g, n, 1, k, eps);
        x = xn;
        g = NULL;
    }
    if (tc) {
        mm_epi e = {g, NULL, eps, mode == KS_MM_ADD, xs};
        const __nv_bfloat16 *wb = (const __nv_bfloat16 *)w;
        if (sw && g) launch_tc<true, true>(s, out, x, wb, NULL, n, k, rows, e);
        else if (sw) launch_tc<true, false>(s, out, x, wb, NULL, n, k, rows, e);
        else if (g) launch_tc<false, true>(s, out, x, wb, bias, n, k, rows, e);
        else launch_tc<false, false>(s, out, x, wb, bias, n, k, rows, e);
        CUDA_CHECK_LAUNCH();
        return;
    }
    if (mode == KS_MM_PLAIN) {
        ks_cuda_matmul(s, out, x, w, wtype, bias, n, k, rows);
        return;
    }
    float *y = (float *)ks_cuda_workspace(&fused_out_ws, s, (size_t)n * rows * 4, "matmul output");
    if (!y) return;
    ks_cuda_matmul(s, y, x, w, wtype, bias, n, k, rows);
    if (sw) ks_cuda_silu_mul(s, out, y, n, rows / 2);
    else ks_cuda_add(s, out, y, (long long)n * rows);
}
