/* layer_stream.cu — how near the memory bound a decode step's chain of
 * dependent matvecs can run, one kernel a matvec (today's decode: graphs
 * and programmatic launch) against one persistent kernel whose blocks wait
 * at a grid barrier between matvecs (a "megakernel"). Qwen3-1.7B runs 6
 * launches a layer at 52% of its bound and Qwen3-8B at 78%; the gap is per
 * kernel boundary (BENCHMARKS.md), and this tool measures what a boundary
 * costs each way before the decode path is rebuilt around one.
 *
 * A token is L layers of four bf16 matvecs, each reading the last one's
 * output (fp32, k <= 12,288):
 *   qkv (Rq x H) on h; o (H x A) on qkv[0, A); gate_up (2I x H) on o's
 *   output; down (H x I) on silu(gate) * up, added to h (the residual).
 * Attention, norms and rope read little; EXTRA (default 2) small ops a
 * layer stand in for them between qkv and o (a copy of A values, as
 * today's decode runs qk_norm_rope and the attention there: 6 launches a
 * layer). Weights are random, scaled by 1 / sqrt(k) so values stay O(1)
 * through a matvec; down's by 1 / (32 sqrt(k)) more, so the residual adds
 * move h by about 1% a layer (SwiGLU of O(1) values is smaller, and with
 * down writing h, h went to zeros over the 1.7b / 8b chains; a larger gain
 * makes h grow over the timed tokens, which never reset it).
 * One matvec: a block stages its x in shared memory (SwiGLU applied on the
 * way for down), each warp owns a contiguous range of rows, each lane
 * reads 16 bytes of a row at a time, a butterfly sums the lanes — the same
 * device function in every variant, so their h after a token must match
 * bitwise (checked: a wrong barrier shows up there; the ring variants are
 * also checked on layer 0's activations).
 * Variants, each timed over TOKENS tokens after a warm-up:
 *   launch      one kernel per matvec, the token captured as a CUDA graph
 *   launch+pdl  the same with programmatic dependent launch: each kernel
 *               lets the next start at once, and waits (griddepcontrol)
 *               before reading its x
 *   launch+pdl+l2  and before that wait, each warp asks L2 for its rows
 *               (cp.async.bulk.prefetch.L2)
 *   launch+pdl+next  launch+pdl, and each block, done with its rows, asks
 *               L2 for the start of its share of the next matvec's rows,
 *               4 / 16 MB in all (where each of the next launch's warps
 *               starts reading): the launch's tail keeps the memory busy,
 *               as the persistent kernel's prefetch does
 *   persist     one cooperative kernel for the whole token, a grid barrier
 *               (a counter and a generation word) between matvecs
 *   persist+l2  and before each barrier, each warp asks L2 for its rows of
 *               the next matvec, whose weights do not depend on the
 *               barrier (all of them, or at most 4 rows); also with 1 and 2
 *               blocks an SM instead of as many as fit (fewer arrivals at
 *               the barrier, fewer loads in flight)
 *   ring HOW [early]  one kernel a matvec, at most one block an SM, a
 *               producer warp filling a shared-memory ring with the
 *               weights (2-D tensor copies, or cp.async) while 8
 *               warps consume it; early: the producer starts before the
 *               programmatic wait, so the next launch's ring fills while
 *               this one ends (k_matvec_ring, below)
 *   persist ring HOW  the chain in one cooperative kernel, one block an SM,
 *               the producer streaming op after op into a deeper ring
 *               while the consumers wait at a grid barrier for each op's x
 *   launch+pdl+reg PRE, persist+reg PRE, persist smem  (layer_persist.cuh)
 *               the next op's first weights in registers before the wait
 *               (per launch, or persistent with a release/acquire arrival
 *               counter), or bulk-copied into shared memory a whole op
 *               ahead (persistent): all lost to kestrel's launches on an
 *               H100 (forty-eighth session)
 *   kestrel     (built with -DKS_WITH_KESTREL, linked with libkestrel.a)
 *               the same chain on kestrel's own tensor-core matvecs
 *               (ks_cuda_matmul_fused, SwiGLU in gate|up's epilogue, so
 *               down reads I values) and the same small ops, a graph;
 *               its h is not compared (other arithmetic)
 * The bound: one kernel streaming all of a token's weights (a sum). Last,
 * the boundary alone: as many ops with no work, as launches and as
 * barriers (us an op).
 * A development tool for the H200 (bench/gpu_session.sh's layerstream
 * stage builds it with nvcc); not part of the server.
 * usage: layer_stream [1.7b|8b|tiny] [TOKENS] [EXTRA] */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "backend/cuda/cuda_common.cuh" /* smem_addr */
#include "bench_cuda.cuh"
#ifdef KS_WITH_KESTREL /* linked with build/libkestrel.a: the "kestrel" variant */
#include "backend/cuda/cuda_ops.h"
#endif

#define WARPS 8
#define THREADS (WARPS * 32)
#define MAX_K 12288

struct matvec {
    const __nv_bfloat16 *w; /* (rows, k); NULL: a small op, y = x (rows) */
    const float *x;         /* (k), or (2k) [gate | up] where swiglu */
    float *y;               /* (rows) */
    int rows, k, swiglu; /* swiglu: down, whose y (h) takes its result added (the residual) */
    const __nv_bfloat16 *nw; /* launch+pdl+next: the next matvec's weights (nrows, nk), of whose */
    int nrows, nk, nrow_bytes; /* rows this launch's blocks ask L2 for the first nrow_bytes as they finish */
};

struct chain {
    matvec mv[6 * 40];
    int n;
};

/* a launch's configuration, programmatic (pdl) or not; at: the caller's
 * attribute, which must outlive the launch call */
static cudaLaunchConfig_t launch_cfg(int blocks, int threads, size_t smem, cudaStream_t s, int pdl,
                                     cudaLaunchAttribute *at) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    at->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at->val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    return cfg;
}

/* x into shared memory (swiglu: silu(gate) * up) by `threads` threads,
 * tid among them, six float4 loads a thread issued before their stores
 * (one at a time, each load's L2 latency was paid in turn: ~24 round trips
 * at k = 6,144). Loads bypass L1 (__ldcg): in the persistent kernel
 * another block wrote x after this SM may have cached it. */
__device__ void load_x(float *xs, const matvec &m, int tid, int threads) {
    const float4 *x4 = reinterpret_cast<const float4 *>(m.x);
    float4 *o4 = reinterpret_cast<float4 *>(xs);
    int n4 = m.k / 4;
    for (int base = tid; base < n4; base += 6 * threads) {
        float4 v[6], u[6];
#pragma unroll
        for (int j = 0; j < 6; j++) {
            int i = base + j * threads;
            if (i < n4) {
                v[j] = __ldcg(x4 + i);
                if (m.swiglu) u[j] = __ldcg(x4 + n4 + i);
            }
        }
#pragma unroll
        for (int j = 0; j < 6; j++) {
            int i = base + j * threads;
            if (i >= n4) break;
            if (m.swiglu) {
                float *g = &v[j].x, *up = &u[j].x;
#pragma unroll
                for (int c = 0; c < 4; c++) g[c] = g[c] / (1.0f + __expf(-g[c])) * up[c];
            }
            o4[i] = v[j];
        }
    }
}

__device__ void stage_x(float *xs, const matvec &m) {
    load_x(xs, m, threadIdx.x, THREADS);
    __syncthreads();
}

/* row r's result: down's added to h (the residual), the others written */
__device__ __forceinline__ void put_row(const matvec &m, int r, float v) { m.y[r] = m.swiglu ? m.y[r] + v : v; }

/* acc += the 8 weights of u . xc[0..8), in k order */
__device__ __forceinline__ void fma_chunk(uint4 u, const float *xc, float &acc) {
    const __nv_bfloat162 *p = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float2 f = __bfloat1622float2(p[j]);
        acc = fmaf(f.x, xc[2 * j], acc);
        acc = fmaf(f.y, xc[2 * j + 1], acc);
    }
}

/* a row's sum across the warp's lanes (a fixed butterfly), put by lane 0 */
__device__ __forceinline__ void finish_row(const matvec &m, int r, float acc) {
#pragma unroll
    for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) put_row(m, r, acc);
}

/* rows [r0, r1) of m.w . xs, one warp: lane l sums its 16-byte chunks l,
 * l + 32, ... in order, then a butterfly across the lanes */
__device__ void warp_rows(const matvec &m, const float *xs, int r0, int r1) {
    int lane = threadIdx.x & 31;
    for (int r = r0; r < r1; r++) {
        const uint4 *row = reinterpret_cast<const uint4 *>(m.w + (size_t)r * m.k);
        float acc = 0.f;
#pragma unroll 4
        for (int c = lane; c < m.k / 8; c += 32) fma_chunk(__ldg(row + c), xs + c * 8, acc);
        finish_row(m, r, acc);
    }
}

/* rows [r0, r1) of the op: the matvec's dot products (xs staged), or the copy */
__device__ void op_rows(const matvec &m, const float *xs, int r0, int r1) {
    if (m.w) {
        warp_rows(m, xs, r0, r1);
        return;
    }
    for (int r = r0 + (threadIdx.x & 31); r < r1; r += 32) m.y[r] = __ldcg(m.x + r);
}

/* warp g of n_warps: its contiguous rows */
__device__ __forceinline__ void rows_of(int rows, int g, int n_warps, int *r0, int *r1) {
    int per = (rows + n_warps - 1) / n_warps;
    *r0 = min(rows, g * per);
    *r1 = min(rows, *r0 + per);
}

/* bytes from p (at most cap, where not 0) asked of L2 by bulk prefetches of up to 32 KB */
__device__ __forceinline__ void prefetch_l2_bulk(const void *p, size_t bytes, size_t cap) {
    if (cap && bytes > cap) bytes = cap;
    const char *c = (const char *)p;
    for (size_t off = 0; off < bytes; off += 32768) {
        unsigned n = (unsigned)(bytes - off < 32768 ? bytes - off : 32768);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(c + off), "r"(n) : "memory");
    }
}

/* one matvec a launch; pdl: 0 none, 1 wait before x, 2 and ask L2 for the rows first */
__global__ void __launch_bounds__(THREADS) k_matvec(matvec m, int pdl) {
    extern __shared__ float xs[];
    int warp = threadIdx.x >> 5, g = blockIdx.x * WARPS + warp, r0, r1;
    rows_of(m.rows, g, gridDim.x * WARPS, &r0, &r1);
    if (pdl) {
        asm volatile("griddepcontrol.launch_dependents;");
        if (pdl == 2 && m.w && (threadIdx.x & 31) == 0 && r1 > r0)
            prefetch_l2_bulk(m.w + (size_t)r0 * m.k, (size_t)(r1 - r0) * m.k * 2, 0);
        asm volatile("griddepcontrol.wait;" ::: "memory");
    }
    if (m.w) stage_x(xs, m);
    op_rows(m, xs, r0, r1);
    if (m.nw && threadIdx.x < 32) { /* this block's share of the next matvec's rows: the start of each, while the launch's tail runs */
        int per = (m.nrows + gridDim.x - 1) / gridDim.x;
        for (int r = blockIdx.x * per + threadIdx.x; r < min(m.nrows, (blockIdx.x + 1) * per); r += 32)
            prefetch_l2_bulk(m.nw + (size_t)r * m.nk, m.nrow_bytes, 0);
    }
}

__device__ unsigned bar_count;
__device__ volatile unsigned bar_gen;

/* thread 0 of each block: arrive, and wait for the last block's arrival */
__device__ void grid_arrive_wait(unsigned n_blocks) {
    unsigned gen = bar_gen;
    __threadfence();
    if (atomicAdd(&bar_count, 1) == n_blocks - 1) {
        bar_count = 0;
        __threadfence();
        bar_gen = gen + 1;
    } else {
        while (bar_gen == gen) __nanosleep(20);
    }
    __threadfence();
}

__device__ void grid_barrier(unsigned n_blocks) {
    __syncthreads();
    if (threadIdx.x == 0) grid_arrive_wait(n_blocks);
    __syncthreads();
}

/* the whole chain, one cooperative launch; pf_rows: 0 no prefetch, -1 all
 * of a warp's next rows, else at most that many */
__global__ void __launch_bounds__(THREADS) k_persist(const chain *ch, int pf_rows) {
    extern __shared__ float xs[];
    int warp = threadIdx.x >> 5, g = blockIdx.x * WARPS + warp, nw = gridDim.x * WARPS;
    for (int i = 0; i < ch->n; i++) {
        const matvec &m = ch->mv[i];
        int r0, r1;
        rows_of(m.rows, g, nw, &r0, &r1);
        if (m.w) stage_x(xs, m);
        op_rows(m, xs, r0, r1);
        if (pf_rows && i + 1 < ch->n && ch->mv[i + 1].w && (threadIdx.x & 31) == 0) {
            const matvec &nx = ch->mv[i + 1];
            int q0, q1;
            rows_of(nx.rows, g, nw, &q0, &q1);
            if (q1 > q0)
                prefetch_l2_bulk(nx.w + (size_t)q0 * nx.k, (size_t)(q1 - q0) * nx.k * 2,
                            pf_rows > 0 ? (size_t)pf_rows * nx.k * 2 : 0);
        }
        grid_barrier(gridDim.x);
    }
}

#include "layer_ring.cuh"
#include "layer_persist.cuh"

/* the bound: every weight byte of the chain read once, in one launch */
__global__ void k_stream(const uint4 *p, size_t n, float *sink) {
    float acc = 0.f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 u = __ldg(p + i);
        acc += __uint_as_float(u.x) + __uint_as_float(u.y) + __uint_as_float(u.z) + __uint_as_float(u.w);
    }
    if (acc == 1.2345f) *sink = acc;
}

/* launch+pdl+next: op i of the chain asks L2, as its blocks finish, for
 * the start of every row of the next op with weights (the token's last:
 * the next token's first), cap bytes in all, in 16-byte units */
static void next_rows_to_l2(const chain &ch, int i, size_t cap, matvec *m) {
    for (int j = 1; j <= ch.n; j++) {
        const matvec &nx = ch.mv[(i + j) % ch.n];
        if (!nx.w) continue;
        size_t row = (size_t)nx.k * 2, per = cap / nx.rows / 16 * 16;
        m->nw = nx.w;
        m->nrows = nx.rows;
        m->nk = nx.k;
        m->nrow_bytes = (int)(per < 16 ? 16 : per > row ? row : per);
        return;
    }
}

static void launch_matvec(const matvec &m, int pdl, int blocks, cudaStream_t s) {
    cudaLaunchAttribute at;
    cudaLaunchConfig_t cfg = launch_cfg(blocks, THREADS, (size_t)m.k * 4, s, pdl, &at);
    CK(cudaLaunchKernelEx(&cfg, k_matvec, m, pdl));
}

int main(int argc, char **argv) {
    const char *model = argc > 1 ? argv[1] : "1.7b";
    int tokens = argc > 2 ? atoi(argv[2]) : 100, extra = argc > 3 ? atoi(argv[3]) : 2;
    if (extra < 0 || extra > 2) extra = 2;
    int H, A, Rq, I, L;
    if (!strcmp(model, "8b")) H = 4096, A = 4096, Rq = 6144, I = 12288, L = 36;
    else if (!strcmp(model, "tiny")) H = 512, A = 512, Rq = 768, I = 1536, L = 6;
    else H = 2048, A = 2048, Rq = 4096, I = 6144, L = 28;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    CK(cudaFuncSetAttribute(k_matvec, cudaFuncAttributeMaxDynamicSharedMemorySize, MAX_K * 4));
    CK(cudaFuncSetAttribute(k_persist, cudaFuncAttributeMaxDynamicSharedMemorySize, MAX_K * 4));
    /* a ring kernel's shared memory: smem bytes, the carveout's most */
    auto ring_attrs = [](const void *f, int smem) {
        CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        CK(cudaFuncSetAttribute(f, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
    };
    ring_attrs((const void *)k_matvec_ring<0>, RING_SMEM);
    ring_attrs((const void *)k_matvec_ring<1>, RING_SMEM);
    ring_attrs((const void *)k_matvec_ring<2>, RING_SMEM);
    size_t per_layer = (size_t)Rq * H + (size_t)H * A + (size_t)2 * I * H + (size_t)H * I, total = per_layer * L;
    __nv_bfloat16 *W;
    CK(cudaMalloc(&W, total * 2));
    float *act;
    size_t act_n = (size_t)H + Rq + H + 2 * I + 2 * A;
    CK(cudaMalloc(&act, act_n * 4 * 2));
    float *h = act, *qkv = h + H, *o = qkv + Rq, *gu = o + H, *att1 = gu + 2 * I, *att2 = att1 + A, *sink = act + act_n;
    chain hc; /* (4 + extra) ops a layer, at most 6 x 36 */
    hc.n = 0;
    __nv_bfloat16 *p = W;
    auto copy = [&](int rows, const float *x, float *y) { hc.mv[hc.n++] = {NULL, x, y, rows, 0, 0, NULL, 0, 0, 0}; };
    auto add = [&](int rows, int k, const float *x, float *y, int sw) {
        k_fill<<<1024, 256>>>(p, (size_t)rows * k, sqrtf(3.0f / k) / (sw ? 32.f : 1.f), 77u + hc.n);
        hc.mv[hc.n++] = {p, x, y, rows, k, sw, NULL, 0, 0, 0};
        p += (size_t)rows * k;
    };
    for (int l = 0; l < L; l++) {
        add(Rq, H, h, qkv, 0);
        if (extra > 0) copy(A, qkv, att1);
        if (extra > 1) copy(A, att1, att2);
        add(H, A, extra == 0 ? qkv : extra == 1 ? att1 : att2, o, 0);
        add(2 * I, H, o, gu, 0);
        add(H, I, gu, h, 1);
    }
    CK(cudaDeviceSynchronize()); /* the fills ran on the default stream; the tokens run on s */
    chain *dch;
    CK(cudaMalloc(&dch, sizeof hc));
    CK(cudaMemcpy(dch, &hc, sizeof hc, cudaMemcpyHostToDevice));
    float *h0 = (float *)malloc(H * 4), *href = (float *)malloc(H * 4), *hout = (float *)malloc(H * 4);
    for (int i = 0; i < H; i++) h0[i] = sinf(0.37f * i);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    int per_sm = 0;
    /* the persistent kernel's x staging: the chain's widest k (Qwen3-1.7B's
     * 6,144: 24 KB, 8 blocks an SM as the launches get; Qwen3-8B's 12,288:
     * 48 KB, 4) */
    size_t psmem = 0;
    for (int i = 0; i < hc.n; i++) psmem = (size_t)hc.mv[i].k * 4 > psmem ? (size_t)hc.mv[i].k * 4 : psmem;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_persist, THREADS, psmem));
    int pblocks = per_sm * prop.multiProcessorCount;
    printf("# layer_stream %s: %d layers of %d ops, %.3f GB of weights a token; %s, %d SMs, persistent grid %d blocks "
           "(%d an SM)\n", model, L, 4 + extra, total * 2 / 1e9, prop.name, prop.multiProcessorCount, pblocks, per_sm);

    /* GPU time of one run(), us: the mean of TOKENS after 3 */
    auto time_us = [&](auto &&run) {
        for (int t = 0; t < 3; t++) run();
        CK(cudaEventRecord(e0, s));
        for (int t = 0; t < tokens; t++) run();
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        return 1e3 * ms / tokens;
    };
    /* what record() launches on s, as a graph */
    auto capture = [&](auto &&record) {
        cudaGraph_t gr;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        record();
        CK(cudaStreamEndCapture(s, &gr));
        CK(cudaGraphInstantiate(&ge, gr, 0));
        CK(cudaGraphDestroy(gr));
        return ge;
    };
    /* the chain in dch as one cooperative launch of grid blocks */
    auto persist = [&](int grid, int pf) {
        void *args[] = {(void *)&dch, (void *)&pf};
        CK(cudaLaunchCooperativeKernel((void *)k_persist, grid, THREADS, args, psmem, s));
    };
    double bound_us = 0;
    auto report = [&](const char *name, double us, const char *tail) {
        printf("%-24s %9.1f us a token  %7.0f GB/s  %5.1f%% of the bound  %s\n", name, us, total * 2 / (us * 1e3),
               100.0 * bound_us / us, tail);
    };
    /* run() once from h0 on s, then bytes of dev (what it left) into host */
    auto from_h0 = [&](auto &&run, void *host, const void *dev, size_t bytes) {
        CK(cudaMemcpyAsync(h, h0, H * 4, cudaMemcpyHostToDevice, s));
        run();
        CK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
    };
    auto h_check = [&] { return memcmp(href, hout, H * 4) ? "h DIFFERS from launch" : "h bitwise as launch"; };

    /* the bound */
    size_t n16 = total * 2 / 16;
    bound_us = time_us([&] { k_stream<<<prop.multiProcessorCount * 8, 512, 0, s>>>((const uint4 *)W, n16, sink); });
    report("stream (bound)", bound_us, "");

    const char *names[] = {"launch", "launch+pdl", "launch+pdl+l2", "launch+pdl+next 4MB", "launch+pdl+next 16MB",
                           "persist", "persist+l2", "persist+l2 (4 rows)", "persist+l2", "persist+l2"};
    for (int v = 0; v < 10; v++) {
        cudaGraphExec_t ge = NULL;
        if (v < 5)
            ge = capture([&] {
                for (int i = 0; i < hc.n; i++) {
                    matvec m = hc.mv[i];
                    if (v >= 3) next_rows_to_l2(hc, i, (size_t)(v == 3 ? 4 : 16) << 20, &m);
                    launch_matvec(m, v == 0 ? 0 : v == 2 ? 2 : 1, (m.rows + WARPS * 2 - 1) / (WARPS * 2), s);
                }
            });
        /* the last two persistent variants: 1 and (where more fit) 2 blocks an SM */
        int pf = v == 5 ? 0 : v == 7 ? 4 : -1, sms = prop.multiProcessorCount;
        int grid = v == 8 ? sms : v == 9 && per_sm > 2 ? 2 * sms : pblocks;
        auto token = [&] {
            if (ge) CK(cudaGraphLaunch(ge, s));
            else persist(grid, pf);
        };
        /* one token from h0: its h must be the first variant's, bitwise */
        from_h0(token, hout, h, H * 4);
        if (v == 0) memcpy(href, hout, H * 4);
        char name[64];
        snprintf(name, sizeof name, ge ? "%s" : "%s, %d an SM", names[v], grid / sms);
        report(name, time_us(token), h_check());
        if (ge) CK(cudaGraphExecDestroy(ge));
    }
    /* the register-preload variants (layer_persist.cuh): PRE chunks a lane
     * of the next op's weights loaded before its wait */
    auto graph_reg = [&](auto launch_one) {
        return capture([&] {
            for (int i = 0; i < hc.n; i++) launch_one(hc.mv[i], (hc.mv[i].rows + WARPS * 2 - 1) / (WARPS * 2));
        });
    };
    cudaGraphExec_t rg8 = graph_reg([&](const matvec &m, int b) { launch_matvec_reg<8>(m, b, s); });
    cudaGraphExec_t rg16 = graph_reg([&](const matvec &m, int b) { launch_matvec_reg<16>(m, b, s); });
    for (cudaGraphExec_t ge : {rg8, rg16}) {
        auto token = [&] { CK(cudaGraphLaunch(ge, s)); };
        from_h0(token, hout, h, H * 4);
        report(ge == rg8 ? "launch+pdl+reg 8" : "launch+pdl+reg 16", time_us(token), h_check());
        CK(cudaGraphExecDestroy(ge));
    }
    unsigned arrivals = 0; /* persist_arrivals as the launches leave it (it starts at 0) */
    auto persist_reg = [&](const void *f, int grid) {
        void *args[] = {(void *)&dch, (void *)&arrivals};
        CK(cudaLaunchCooperativeKernel(f, grid, THREADS, args, psmem, s));
        arrivals += (unsigned)(hc.n - 1) * grid;
    };
    {
        const void *fs[] = {(const void *)k_persist_reg<0>, (const void *)k_persist_reg<8>, (const void *)k_persist_reg<16>};
        const int pres[] = {0, 8, 16};
        for (int v = 0; v < 6; v++) {
            const void *f = fs[v % 3];
            int fit = 0, sms = prop.multiProcessorCount;
            CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, MAX_K * 4));
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, f, THREADS, psmem));
            int grid = v < 3 ? fit * sms : sms;
            auto token = [&] { persist_reg(f, grid); };
            from_h0(token, hout, h, H * 4);
            char name[64];
            snprintf(name, sizeof name, "persist+reg %d, %d an SM", pres[v % 3], grid / sms);
            report(name, time_us(token), h_check());
        }
    }
    /* persist smem (layer_persist.cuh): one block of PS_WARPS warps an SM,
     * the slots taking what shared memory x leaves */
    {
        const void *f = (const void *)k_persist_smem<0>;
        int most = 0, sms = prop.multiProcessorCount;
        CK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
        int xfloats = (int)(psmem / 4), wbuf = ((most - (int)psmem - 1024) / (2 * PS_WARPS)) & ~511;
        size_t smem = psmem + (size_t)2 * PS_WARPS * wbuf;
        CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        auto token = [&] {
            void *args[] = {(void *)&dch, (void *)&arrivals, (void *)&xfloats, (void *)&wbuf};
            CK(cudaLaunchCooperativeKernel(f, sms, PS_THREADS, args, smem, s));
            arrivals += (unsigned)(hc.n - 1) * sms;
        };
        from_h0(token, hout, h, H * 4);
        char name[64];
        snprintf(name, sizeof name, "persist smem (%d B a warp a slot)", wbuf);
        report(name, time_us(token), h_check());
    }
    /* h after a token from h0: the residual adds moved it (else the "h
     * bitwise" lines would hold for a chain that skipped its layers) */
    int moved = 0;
    for (int i = 0; i < H; i++) moved += href[i] != h0[i];
    printf("# per layer: %d launches (launch variants) or barriers (persist); h[0..3] %g %g %g %g, %d of %d values "
           "moved by the token's layers%s\n", 4 + extra, href[0], href[1], href[2], href[3], moved, H,
           moved < H / 2 ? " — too few: the \"h bitwise\" lines check little" : "");

    /* the ring launches: early (the producer streams before the wait) and not;
     * their arithmetic is also checked on layer 0 alone, every activation
     * against the plain launches' */
    int per_layer_ops = 4 + extra;
    std::vector<float> act_ref(act_n), act_got(act_n);
    static const char *hows[] = {"row", "tensor", "cp.async"};
    for (int ring = 0; ring < 4; ring++) { /* plain, then the ring's three HOWs */
        auto layer0 = [&] {
            for (int i = 0; i < per_layer_ops; i++) {
                const matvec &m = hc.mv[i];
                if (ring && m.w) launch_ring(m, 1, ring - 1, prop.multiProcessorCount, s);
                else launch_matvec(m, 0, (m.rows + WARPS * 2 - 1) / (WARPS * 2), s);
            }
        };
        from_h0(layer0, ring ? act_got.data() : act_ref.data(), act, act_n * 4);
        if (ring)
            printf("# ring (%s copies), layer 0: every activation %s the plain launches' (h[0..1] %g %g)\n",
                   hows[ring - 1], memcmp(act_ref.data(), act_got.data(), act_n * 4) ? "DIFFERS from" : "bitwise as",
                   act_got[0], act_got[1]);
    }
    for (int v = 0; v < 4; v++) { /* tensor and cp.async copies (row copies were slower), early and not */
        int how = 1 + (v >> 1), early = !(v & 1);
        cudaGraphExec_t rg = capture([&] {
            for (int i = 0; i < hc.n; i++) {
                const matvec &m = hc.mv[i];
                if (m.w) launch_ring(m, early, how, prop.multiProcessorCount, s);
                else launch_matvec(m, 1, (m.rows + WARPS * 2 - 1) / (WARPS * 2), s);
            }
        });
        auto token = [&] { CK(cudaGraphLaunch(rg, s)); };
        from_h0(token, hout, h, H * 4);
        char name[64];
        snprintf(name, sizeof name, "ring %s%s (S %d..%d)", hows[how], early ? " early" : "", ring_stages(I),
                 ring_stages(H));
        report(name, time_us(token), h_check());
        CK(cudaGraphExecDestroy(rg));
    }

    /* persist ring: one cooperative kernel a token, one block an SM, the
     * ring as deep as PERSIST_SMEM allows; layer 0 alone checked first */
    {
        int maxk = 0, sms = prop.multiProcessorCount;
        for (int i = 0; i < hc.n; i++) maxk = hc.mv[i].k > maxk ? hc.mv[i].k : maxk;
        int S = ring_stages(maxk, PERSIST_SMEM);
        size_t smem = (size_t)S * RING_STAGE + (size_t)maxk * 4;
        std::vector<CUtensorMap> maps(hc.n);
        for (int i = 0; i < hc.n; i++)
            if (hc.mv[i].w) maps[i] = weight_map(hc.mv[i]);
        CUtensorMap *dmaps;
        CK(cudaMalloc(&dmaps, maps.size() * sizeof(CUtensorMap)));
        CK(cudaMemcpy(dmaps, maps.data(), maps.size() * sizeof(CUtensorMap), cudaMemcpyHostToDevice));
        chain l0 = hc;
        l0.n = per_layer_ops;
        chain *dl0;
        CK(cudaMalloc(&dl0, sizeof l0));
        CK(cudaMemcpy(dl0, &l0, sizeof l0, cudaMemcpyHostToDevice));
        for (int how = 1; how <= 2; how++) {
            const void *f = how == 1 ? (const void *)k_persist_ring<1> : (const void *)k_persist_ring<2>;
            ring_attrs(f, (int)smem);
            auto run_chain = [&](chain *c) {
                void *args[] = {(void *)&c, (void *)&dmaps, (void *)&S};
                CK(cudaLaunchCooperativeKernel(f, sms, THREADS + 32, args, smem, s));
            };
            from_h0([&] { run_chain(dl0); }, act_got.data(), act, act_n * 4);
            printf("# persist ring (%s copies), layer 0: every activation %s the plain launches'\n", hows[how],
                   memcmp(act_ref.data(), act_got.data(), act_n * 4) ? "DIFFERS from" : "bitwise as");
            from_h0([&] { run_chain(dch); }, hout, h, H * 4);
            char name[64];
            snprintf(name, sizeof name, "persist ring %s (S %d)", hows[how], S);
            report(name, time_us([&] { run_chain(dch); }), h_check());
        }
        CK(cudaFree(dl0));
        CK(cudaFree(dmaps));
    }

#ifdef KS_WITH_KESTREL
    cudaGraphExec_t kg = capture([&] {
        for (int i = 0; i < hc.n; i++) {
            const matvec &m = hc.mv[i];
            /* gate|up (the op before down) writes SwiGLU's I values from its
             * epilogue, which down reads plain */
            bool gu = i + 1 < hc.n && hc.mv[i + 1].swiglu;
            if (!m.w)
                launch_matvec(m, 1, (m.rows + WARPS * 2 - 1) / (WARPS * 2), s);
            else
                ks_cuda_matmul_fused(s, m.y, m.x, NULL, 0.f, m.w, 2, NULL, 1, m.k, m.rows,
                                     gu ? KS_MM_SWIGLU : m.swiglu ? KS_MM_ADD : KS_MM_PLAIN);
        }
    });
    report("kestrel", time_us([&] { CK(cudaGraphLaunch(kg, s)); }), "(h not compared: other arithmetic)");
    CK(cudaGraphExecDestroy(kg));
#endif

    /* the boundary alone: the same number of ops with no work (no rows), one
     * block an SM a launch (programmatic launch, a graph) or the persistent
     * grid's barriers */
    chain ec;
    ec.n = hc.n;
    for (int i = 0; i < ec.n; i++) ec.mv[i] = {NULL, NULL, NULL, 0, 0, 0, NULL, 0, 0, 0};
    CK(cudaMemcpy(dch, &ec, sizeof ec, cudaMemcpyHostToDevice));
    cudaGraphExec_t eg = capture([&] {
        for (int i = 0; i < ec.n; i++) launch_matvec(ec.mv[i], 1, prop.multiProcessorCount, s);
    });
    printf("%-24s %9.2f us an op (%d ops a token, no work)\n", "empty launch+pdl",
           time_us([&] { CK(cudaGraphLaunch(eg, s)); }) / ec.n, ec.n);
    printf("%-24s %9.2f us an op (%d ops a token, no work)\n", "empty persist", time_us([&] { persist(pblocks, 0); }) / ec.n,
           ec.n);
    printf("%-24s %9.2f us an op (%d ops a token, no work)\n", "empty persist+reg",
           time_us([&] { persist_reg((const void *)k_persist_reg<0>, pblocks); }) / ec.n, ec.n);
    CK(cudaGraphExecDestroy(eg));
    return 0;
}
