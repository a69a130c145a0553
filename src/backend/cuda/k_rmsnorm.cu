/* k_rmsnorm.cu — y = w * (x / sqrt(mean(x^2) + eps)) over rows of `dim`
 * floats: row (t, h) at in + t*in_stride + h*dim (h < n_heads; heads = 1 for
 * the hidden state, n_heads for Qwen3's per-head QK-norm).
 * Short rows (dim < 1024: per-head norms): one warp per row. Long rows (the
 * hidden state, dim a multiple of 4 up to 16384, 16-byte aligned): one block
 * of 256 threads per row, each thread holding its float4 chunks in
 * registers, so the row is read in one round of loads. In both, the sum of
 * squares is strided per thread, reduced by a fixed butterfly, then (blocks)
 * warps in order — the arithmetic depends only on dim, never on the batch.
 * Also the MTP head's input (ks_cuda_mtp_input): two such norms per row, of
 * an embedding row and a gathered hidden row, in one launch; and rows
 * written in 16 bits (ks_cuda_rmsnorm_16: the prompt GEMM's staged input,
 * the f32 values rounded to nearest even). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#include <type_traits>

#define RN_THREADS 256

/* The block's sum of v: a fixed butterfly per warp, then the warps in
 * order (red: RN_THREADS / 32 floats of shared memory) */
__device__ __forceinline__ float block_sum(float v, float *red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float tot = red[0];
    for (int i = 1; i < RN_THREADS / 32; i++) tot += red[i];
    return tot;
}

/* element j of a row as f32: activations (float) or a weight table's row
 * (bf16 / f16 / f32, the MTP head's embedding input) */
__device__ __forceinline__ float elem(const float *p, int j) { return p[j]; }
__device__ __forceinline__ float elem(const __nv_bfloat16 *p, int j) { return __bfloat162float(p[j]); }
__device__ __forceinline__ float elem(const __half *p, int j) { return __half2float(p[j]); }

/* an output element: f32, or rounded to 16 bits */
__device__ __forceinline__ void put(float *y, int j, float v) { y[j] = v; }
__device__ __forceinline__ void put(__nv_bfloat16 *y, int j, float v) { y[j] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void put(__half *y, int j, float v) { y[j] = __float2half_rn(v); }
/* output chunk p (elements 4p .. 4p + 3) */
__device__ __forceinline__ void put4(float *y, int p, float4 r) { reinterpret_cast<float4 *>(y)[p] = r; }
__device__ __forceinline__ void put4(__nv_bfloat16 *y, int p, float4 r) {
    __nv_bfloat162 a = __floats2bfloat162_rn(r.x, r.y), b = __floats2bfloat162_rn(r.z, r.w);
    reinterpret_cast<uint2 *>(y)[p] = make_uint2(*reinterpret_cast<uint32_t *>(&a), *reinterpret_cast<uint32_t *>(&b));
}
__device__ __forceinline__ void put4(__half *y, int p, float4 r) {
    __half2 a = __floats2half2_rn(r.x, r.y), b = __floats2half2_rn(r.z, r.w);
    reinterpret_cast<uint2 *>(y)[p] = make_uint2(*reinterpret_cast<uint32_t *>(&a), *reinterpret_cast<uint32_t *>(&b));
}

/* One warp normalizes one row x into y (y may equal x) */
template <typename T, typename O>
__device__ __forceinline__ void norm_row_warp(O *y, const T *x, const float *w, int dim, float eps, int lane) {
    float ss = 0.f;
    for (int j = lane; j < dim; j += 32) ss = fmaf(elem(x, j), elem(x, j), ss);
    ss = warp_sum(ss);
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    __syncwarp();
    for (int j = lane; j < dim; j += 32) put(y, j, w[j] * (elem(x, j) * inv));
}

template <typename O>
__global__ void k_rmsnorm_warp(O *out, int os, const float *in, int is, const float *w, int n, int nh, int dim,
                               float eps) {
    pdl_start();
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= n * nh) return;
    int t = row / nh, h = row % nh;
    norm_row_warp(out + (size_t)t * os + (size_t)h * dim, in + (size_t)t * is + (size_t)h * dim, w, dim, eps, lane);
}

/* Long rows, in float4 chunks held in registers: thread i takes chunks
 * i, i + 256, ... (at most NC of them; dim <= 1024 NC), squares their 4
 * elements in order, chunk by chunk; the weights, constants, are loaded
 * before the wait on the kernel before (programmatic launch). One round of
 * loads, one block reduction, one round of stores. */
template <int NC>
__device__ __forceinline__ void load_chunks(float4 *v, const float *p, int d4) {
    const float4 *p4 = reinterpret_cast<const float4 *>(p);
#pragma unroll
    for (int c = 0; c < NC; c++)
        if (threadIdx.x + c * RN_THREADS < d4) v[c] = p4[threadIdx.x + c * RN_THREADS];
}

/* the same chunks out of a 16-bit row (8 bytes each), converted exactly */
template <int NC, typename T>
__device__ __forceinline__ void load_chunks(float4 *v, const T *p, int d4) {
#pragma unroll
    for (int c = 0; c < NC; c++)
        if (threadIdx.x + c * RN_THREADS < d4) {
            int j = 4 * (threadIdx.x + c * RN_THREADS);
            v[c] = make_float4(elem(p, j), elem(p, j + 1), elem(p, j + 2), elem(p, j + 3));
        }
}

/* dst = w * (v / sqrt(mean(v^2) + eps)) over the row's chunks v (wv: the
 * weights' chunks); the sum of squares in chunk order, then block_sum.
 * words != NULL: the row goes there instead, split for the tensor-core
 * matvec (chunk p is half p % 2 of 8-value group p / 2: its 2 hi words at
 * word 8 (p / 2) + 2 (p % 2), its 2 lo words 4 further) */
template <int NC, typename O>
__device__ __forceinline__ void norm_chunks(O *dst, const float4 *v, const float4 *wv, int dim, float eps,
                                            uint32_t *words = nullptr) {
    __shared__ float red[RN_THREADS / 32];
    int tid = threadIdx.x, d4 = dim / 4;
    float ss = 0.f;
#pragma unroll
    for (int c = 0; c < NC; c++)
        if (tid + c * RN_THREADS < d4) {
            ss = fmaf(v[c].x, v[c].x, ss);
            ss = fmaf(v[c].y, v[c].y, ss);
            ss = fmaf(v[c].z, v[c].z, ss);
            ss = fmaf(v[c].w, v[c].w, ss);
        }
    float tot = block_sum(ss, red);
    float inv = 1.0f / sqrtf(tot / (float)dim + eps);
#pragma unroll
    for (int c = 0; c < NC; c++) {
        int p = tid + c * RN_THREADS;
        if (p >= d4) continue;
        float4 r = make_float4(wv[c].x * (v[c].x * inv), wv[c].y * (v[c].y * inv), wv[c].z * (v[c].z * inv),
                               wv[c].w * (v[c].w * inv));
        if (!words) {
            put4(dst, p, r);
            continue;
        }
        uint2 h, l;
        split_pair(r.x, r.y, h.x, l.x);
        split_pair(r.z, r.w, h.y, l.y);
        uint32_t *g8 = words + (size_t)(p >> 1) * 8 + (p & 1) * 2;
        *reinterpret_cast<uint2 *>(g8) = h;
        *reinterpret_cast<uint2 *>(g8 + 4) = l;
    }
}

/* words != NULL (ks_cuda_rmsnorm_split; nh 1, rows of dim): the split rows instead of out */
template <int NC, typename O>
__global__ void __launch_bounds__(RN_THREADS)
k_rmsnorm_block(O *out, int os, const float *in, int is, const float *w, int nh, int dim, float eps,
                uint32_t *words) {
    pdl_trigger();
    int row = blockIdx.x, t = row / nh, h = row % nh, d4 = dim / 4;
    float4 wv[NC], v[NC];
    load_chunks<NC>(wv, w, d4);
    pdl_wait();
    load_chunks<NC>(v, in + (size_t)t * is + (size_t)h * dim, d4);
    norm_chunks<NC>(out + (size_t)t * os + (size_t)h * dim, v, wv, dim, eps,
                    words ? words + (size_t)row * dim : nullptr);
}

/* The MTP head's input: row t of out (row stride 2 dim) is
 * [rmsnorm(table[ids[t]]) * we ; rmsnorm(hid[idx[t]]) * wh]; blockIdx.y
 * picks the half. Each half goes through the arithmetic of the rmsnorm
 * kernels above, so the results equal embed / gather_rows, then rmsnorm. */
template <typename T>
__global__ void k_mtp_input_warp(float *out, const T *table, const int32_t *ids, const float *hid, const int32_t *idx,
                                 const float *we, const float *wh, int n, int dim, float eps) {
    pdl_start();
    int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (t >= n) return;
    float *y = out + (size_t)t * 2 * dim;
    if (blockIdx.y) norm_row_warp(y + dim, hid + (size_t)idx[t] * dim, wh, dim, eps, lane);
    else norm_row_warp(y, table + (size_t)ids[t] * dim, we, dim, eps, lane);
}

template <int NC, typename T>
__global__ void __launch_bounds__(RN_THREADS)
k_mtp_input_block(float *out, const T *table, const int32_t *ids, const float *hid, const int32_t *idx,
                  const float *we, const float *wh, int dim, float eps) {
    pdl_trigger();
    int t = blockIdx.x, d4 = dim / 4;
    float4 wv[NC], v[NC];
    load_chunks<NC>(wv, blockIdx.y ? wh : we, d4);
    pdl_wait();
    if (blockIdx.y) load_chunks<NC>(v, hid + (size_t)idx[t] * dim, d4);
    else load_chunks<NC>(v, table + (size_t)ids[t] * dim, d4);
    norm_chunks<NC>(out + (size_t)t * 2 * dim + (blockIdx.y ? dim : 0), v, wv, dim, eps);
}

/* float4 chunks per thread for the block kernels (1, 2, 4, 8 or 16), or 0
 * for the warp kernels: short rows (dim < 1024), dims not in whole float4s
 * or beyond 16 chunks, unaligned (or NULL) buffers. */
static int block_chunks(int dim, const void *a, const void *b, const void *c, const void *d) {
    if (dim < 1024 || dim % 4 || ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d) % 16 || !c || !d) return 0;
    int need = (dim / 4 + RN_THREADS - 1) / RN_THREADS;
    for (int nc = 1; nc <= 16; nc *= 2)
        if (need <= nc) return nc;
    return 0;
}

/* Calls f with std::integral_constant<int, nc> for nc in 1, 2, 4, 8, 16. */
template <class F>
static void with_chunks(int nc, F f) {
    if (nc == 1) f(std::integral_constant<int, 1>());
    else if (nc == 2) f(std::integral_constant<int, 2>());
    else if (nc == 4) f(std::integral_constant<int, 4>());
    else if (nc == 8) f(std::integral_constant<int, 8>());
    else f(std::integral_constant<int, 16>());
}

/* rows of out (O: f32 or 16-bit) = rmsnorm of in's rows */
template <typename O>
static void rmsnorm_into(ks_stream s, O *out, int out_stride, const float *in, int in_stride, const float *w, int n,
                         int n_heads, int dim, float eps) {
    int rows = n * n_heads;
    if (rows <= 0) return;
    int nc = block_chunks(dim, out, in, in_stride % 4 ? NULL : w, out_stride % 4 ? NULL : w);
    if (nc) {
        with_chunks(nc, [&](auto NC) {
            ks_launch(k_rmsnorm_block<decltype(NC)::value, O>, rows, RN_THREADS, 0, s, out, out_stride, in, in_stride,
                      w, n_heads, dim, eps, (uint32_t *)nullptr);
        });
    } else {
        int wpb = 8;
        ks_launch(k_rmsnorm_warp<O>, (rows + wpb - 1) / wpb, wpb * 32, 0, s, out, out_stride, in, in_stride, w, n,
                  n_heads, dim, eps);
    }
    CUDA_CHECK_LAUNCH();
}

extern "C" void ks_cuda_rmsnorm(ks_stream s, float *out, int out_stride, const float *in, int in_stride,
                                const float *w, int n, int n_heads, int dim, float eps) {
    rmsnorm_into(s, out, out_stride, in, in_stride, w, n, n_heads, dim, eps);
}

extern "C" void ks_cuda_rmsnorm_16(ks_stream s, void *out, int wtype, const float *in, const float *w, int n, int dim,
                                   float eps) {
    if (wtype == 2) rmsnorm_into(s, (__nv_bfloat16 *)out, dim, in, dim, w, n, 1, dim, eps);
    else rmsnorm_into(s, (__half *)out, dim, in, dim, w, n, 1, dim, eps);
}

extern "C" bool ks_cuda_rmsnorm_split(ks_stream s, uint32_t *words, const float *in, const float *w, int n, int dim,
                                      float eps) {
    int nc = block_chunks(dim, words, in, w, w);
    if (n <= 0 || !nc) return false;
    with_chunks(nc, [&](auto NC) {
        ks_launch(k_rmsnorm_block<decltype(NC)::value, float>, n, RN_THREADS, 0, s, (float *)nullptr, dim, in, dim, w, 1, dim,
                  eps, words);
    });
    CUDA_CHECK_LAUNCH();
    return true;
}

template <typename T>
static void mtp_input(ks_stream s, float *out, const T *table, const int32_t *ids, const float *hid,
                      const int32_t *idx, const float *we, const float *wh, int n, int dim, float eps) {
    int nc = block_chunks(dim, out, hid, we, wh);
    if (nc && (uintptr_t)table % 16 == 0)
        with_chunks(nc, [&](auto NC) {
            ks_launch(k_mtp_input_block<decltype(NC)::value, T>, dim3(n, 2), RN_THREADS, 0, s, out, table, ids, hid,
                      idx, we, wh, dim, eps);
        });
    else ks_launch(k_mtp_input_warp<T>, dim3((n + 7) / 8, 2), 256, 0, s, out, table, ids, hid, idx, we, wh, n, dim, eps);
}

extern "C" void ks_cuda_mtp_input(ks_stream s, float *out, const void *table, int wtype, const int32_t *ids,
                                  const float *hid, const int32_t *idx, const float *we, const float *wh, int n,
                                  int dim, float eps) {
    if (n <= 0) return;
    if (wtype == 2) mtp_input(s, out, (const __nv_bfloat16 *)table, ids, hid, idx, we, wh, n, dim, eps);
    else if (wtype == 1) mtp_input(s, out, (const __half *)table, ids, hid, idx, we, wh, n, dim, eps);
    else mtp_input(s, out, (const float *)table, ids, hid, idx, we, wh, n, dim, eps);
    CUDA_CHECK_LAUNCH();
}
