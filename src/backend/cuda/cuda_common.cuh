/* cuda_common.cuh — shared helpers of the CUDA backend: CUDA_CHECK (every
 * runtime call and every launch), warp reductions with a fixed butterfly
 * order (so a row's result never depends on what else is in the launch). */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include <utility>

/* Records the first failure; the backend turns it into an error status. */
extern "C" int ks_cuda_fail(const char *what, cudaError_t e, const char *file, int line);

#define CUDA_CHECK(call)                                                          \
    do {                                                                          \
        cudaError_t _e = (call);                                                  \
        if (_e != cudaSuccess) ks_cuda_fail(#call, _e, __FILE__, __LINE__);       \
    } while (0)
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

/* A device scratch buffer that grows on demand (cuda_backend.cu). Growing
 * replaces the buffer, and a graph recorded before then would replay on the
 * freed one: every growth advances an epoch, and a graph recorded under an
 * older epoch is refused at launch (graph_launch returns 1; the model
 * records it again). Growth during graph capture is an error (the first
 * sight of a shape runs eagerly, so capture finds its buffers sized).
 * Returns NULL on failure (recorded through ks_cuda_fail). */
typedef struct {
    void *p;
    size_t bytes;
} ks_workspace;
/* Every device allocation goes through these (cuda_backend.cu), which keep
 * the bytes live by kind for /metrics (bk_mem); NULL on failure, the error
 * cleared. */
enum { KS_MEM_WEIGHTS, KS_MEM_BUFFERS, KS_MEM_WORKSPACE, KS_MEM_KINDS };
extern "C" void *ks_cuda_malloc(size_t bytes, int kind);
extern "C" void ks_cuda_free(void *p);
extern "C" void *ks_cuda_workspace(ks_workspace *w, cudaStream_t s, size_t need, const char *what);
/* The same for counters and accumulators that kernels keep at zero between
 * launches (the last block to arrive resets them): zeroed when (re)made. */
static inline void *ks_cuda_zeroed_workspace(ks_workspace *w, cudaStream_t s, size_t need, const char *what) {
    size_t had = w->bytes;
    void *p = ks_cuda_workspace(w, s, need, what);
    if (p && w->bytes != had) CUDA_CHECK(cudaMemsetAsync(p, 0, w->bytes, s));
    return p;
}
/* The prompt rows' ops share one workspace (cuda_backend.cu): the GEMM's
 * staging and cuBLASLt's scratch, the prompt attention's partials. One op
 * runs at a time on the stream and every kernel writes only after its
 * programmatic wait (the op before has finished), so the workspace is the
 * largest of their needs, not their sum. Prompt steps are never replayed
 * as graphs, so its growth never stales a recording of theirs. */
extern ks_workspace ks_prompt_ws;

/* Split attention (the decode and the prompt kernels) leaves partials per
 * item — (m, l) and an unnormalised o of hd floats for each of its splits
 * — in a workspace of at most cap bytes; items go through in slices that
 * fit, as even as the cap allows. Returns the workspace (o of every item of a slice first, then
 * their (m, l) pairs) and sets *slice; NULL on failure. */
static inline float *ks_partials_ws(ks_workspace *w, cudaStream_t s, int n_items, size_t splits_per_item, int hd,
                                    size_t cap, const char *what, int *slice) {
    size_t per_item = splits_per_item * ((size_t)hd + 2) * sizeof(float);
    int sl = (int)(cap / per_item);
    if (sl < 1) sl = 1;
    if (sl > n_items) sl = n_items;
    int passes = (n_items + sl - 1) / sl;
    sl = (n_items + passes - 1) / passes; /* even slices: 64 tiles went as 31 + 31 + 2, a last launch of half a wave */
    *slice = sl;
    return (float *)ks_cuda_workspace(w, s, per_item * (size_t)sl, what);
}

/* One output row from its n partials at po (n x hd) and pml (n x 2), in
 * order: M = max m, L = sum l e^(m - M), out = sum o e^(m - M) / L; threads
 * t, t + nthr, .. of the caller's group share the hd columns. */
__device__ __forceinline__ void merge_partials(float *out, const float *po, const float *pml, int n, int hd, int t,
                                               int nthr) {
    float M = -INFINITY;
    for (int z = 0; z < n; z++) M = fmaxf(M, pml[2 * z]);
    float L = 0.f;
    for (int z = 0; z < n; z++) L += pml[2 * z + 1] * expf(pml[2 * z] - M);
    float inv = L > 0.f ? 1.0f / L : 0.f;
    for (int d = t; d < hd; d += nthr) {
        float acc = 0.f;
        for (int z = 0; z < n; z++) acc += po[(size_t)z * hd + d] * expf(pml[2 * z] - M);
        out[d] = acc * inv;
    }
}

#include "backend/cuda/order_key.cuh"

/* Two floats rounded to bf16 in one 32-bit register, the first in the low
 * half (the lower k of an mma fragment pair). */
__device__ __forceinline__ uint32_t pack_bf16x2(float lo_k, float hi_k) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo_k, hi_k);
    return *reinterpret_cast<uint32_t *>(&h);
}

/* x's exact two-part split for the tensor-core matvec: hi = bf16 of each
 * of two floats, lo = bf16 of what hi leaves (below 2^-17 |x|), each pair
 * packed as pack_bf16x2 packs it. The split words of 8 values are their 4
 * hi words, then their 4 lo words (k_matmul.cu's PRE layout). */
__device__ __forceinline__ void split_pair(float a, float b, uint32_t &hi, uint32_t &lo) {
    float ha = __bfloat162float(__float2bfloat16_rn(a)), hb = __bfloat162float(__float2bfloat16_rn(b));
    hi = pack_bf16x2(ha, hb);
    lo = pack_bf16x2(a - ha, b - hb);
}

/* c (16x8 fp32, this lane's 4) += A (16x16 bf16, row) * B (16x8 bf16, col):
 * mma.sync m16n8k16 (the matvec and the prompt attention) */
__device__ __forceinline__ void mma_bf16(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* four 8x8 bf16 matrices from shared memory (lane l gives the address of
 * row l % 8 of matrix l / 8); .trans transposes each */
__device__ __forceinline__ void ldsm4(uint32_t *r, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void ldsm4_trans(uint32_t *r, uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

/* Programmatic dependent launch (Hopper and later): every kernel is
 * launched with ks_launch, which lets it start while the kernel before it
 * in the stream is still running; each kernel opens with pdl_trigger()
 * (its own successor may be scheduled once all its blocks run) and
 * pdl_wait() (returns when the predecessor has finished and its writes are
 * visible) before touching anything the predecessor writes. Reads that no
 * kernel writes may go between the two: constants (a matmul's weights) and
 * the host's step upload (positions, slots, block tables: a stream copy,
 * which starts after every kernel before it has ended and ends before the
 * forward's first kernel starts); writes never do
 * (a kernel two back may still be reading). The launch gaps of a decode
 * step's kernels overlap that way.
 * KESTREL_CUDA_PDL=0 launches without it (the waits then return at once). */
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_start() {
    pdl_trigger();
    pdl_wait();
}

/* arrive_acq_rel(p): atomicAdd(p, 1) at device scope with release and
 * acquire semantics, for a "last block to arrive finishes the job" counter.
 * Release: this thread's writes before it, and through a __syncthreads
 * before it its block's, are visible to whoever later reads the counter's
 * new value; acquire: so are the earlier arrivals' writes to this thread
 * (and, after a __syncthreads, to its block). It replaces
 * __threadfence (a sequentially consistent fence) + atomicAdd +
 * __threadfence: the pattern needs ordering, not a total order. */
__device__ __forceinline__ unsigned arrive_acq_rel(unsigned *p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
    return old;
#else /* (no scoped atomics before Volta: the fences the pattern had) */
    __threadfence();
    unsigned old = atomicAdd(p, 1u);
    __threadfence();
    return old;
#endif
}

extern "C" int ks_cuda_pdl(void); /* cuda_backend.cu: on for compute capability >= 9.0 unless disabled */

/* Thread block clusters (compute capability 9.0): a kernel launched with
 * ks_launch_cluster runs its blocks in groups of `cluster` that barrier
 * together (cluster_sync: every thread of every block of the group, with
 * its shared-memory writes visible to the others) and read each other's
 * shared memory (cluster_map(&x, r): block r's x, for a __shared__ x; a
 * block must not exit while another may still read it — end with a
 * cluster_sync after the last such read). Built for older devices, where
 * ks_cuda_cc_major() < 9 and launches use clusters of 1, they are the
 * block's own barrier and memory. A __shared__ variable that cluster_map
 * reads is declared KS_SHARED(type, name) (tests/emu gives each block its
 * own). */
#define KS_SHARED(T, name) __shared__ T name
extern "C" int ks_cuda_cc_major(void); /* cuda_backend.cu: the device's compute capability major */
__device__ __forceinline__ unsigned cluster_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return cooperative_groups::this_cluster().block_rank();
#else
    return 0;
#endif
}
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::this_cluster().sync();
#else
    __syncthreads();
#endif
}
template <typename T>
__device__ __forceinline__ T *cluster_map(T *p, unsigned r) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return cooperative_groups::this_cluster().map_shared_rank(p, r);
#else
    (void)r;
    return p;
#endif
}

/* ks_launch with the blocks in clusters of `cluster` along x (grid.x a
 * multiple of it; 1: ks_launch) */
template <typename... KArgs, typename... Args>
static inline void ks_launch_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                     int cluster, Args &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[2];
    int n = 0;
    if (ks_cuda_pdl()) {
        at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster > 1) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n].val.clusterDim.x = (unsigned)cluster;
        at[n].val.clusterDim.y = 1;
        at[n++].val.clusterDim.z = 1;
    }
    cfg.attrs = at;
    cfg.numAttrs = n;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

/* want when the device can run kernel in clusters of want blocks of
 * `threads` (compute capability 9.0 and the occupancy query's yes), else 1;
 * ask once, outside graph capture */
template <typename... KArgs>
static inline int ks_cluster_fit(void (*kernel)(KArgs...), int want, int threads) {
    if (want <= 1 || ks_cuda_cc_major() < 9) return 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)want);
    cfg.blockDim = dim3((unsigned)threads);
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = (unsigned)want;
    at.val.clusterDim.y = 1;
    at.val.clusterDim.z = 1;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, (const void *)kernel, &cfg) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    return n > 0 ? want : 1;
}

template <typename... KArgs, typename... Args>
static inline void ks_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                             Args &&...args) {
    ks_launch_cluster(kernel, grid, block, smem, s, 1, std::forward<Args>(args)...);
}

/* silu(g) * u, silu(g) = g / (1 + exp(-g)): every SwiGLU kernel's one expression */
__device__ __forceinline__ float silu_mul_f(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* a value in [-1, 1) from a hash of index i and a seed: the GEMM tiers'
 * probe input (k_gemm.cu) and the bench tools' weights (bench_cuda.cuh) */
__device__ __forceinline__ float ks_hash_unit(long long i, unsigned seed) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

/* 16 bytes global -> shared, asynchronously; src_bytes 0 writes zeros */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
/* the 128-byte line holding p asked of L2 (no register, no wait) */
__device__ __forceinline__ void prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* 8 packed 16-bit values (one 16-byte load) -> 8 floats; the pointer's type
 * only picks the format. */
__device__ __forceinline__ void unpack8(uint4 u, const __nv_bfloat16 *, float *f) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void unpack8(uint4 u, const __half *, float *f) {
    const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 v = __half22float2(h[i]);
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
    }
}
__device__ __forceinline__ void load8(const __nv_bfloat16 *p, float *f) {
    unpack8(__ldg(reinterpret_cast<const uint4 *>(p)), p, f);
}
__device__ __forceinline__ void load8(const __half *p, float *f) {
    unpack8(__ldg(reinterpret_cast<const uint4 *>(p)), p, f);
}
__device__ __forceinline__ void load8(const float *p, float *f) {
    float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
}
