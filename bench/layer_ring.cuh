/* layer_ring.cuh — layer_stream.cu's ring variants, a part of that file
 * (included once, after its matvec, chain, load_x, op_rows, rows_of,
 * fma_chunk, grid_arrive_wait and launch_cfg): the weights streamed into a
 * shared-memory ring by a producer warp while 8 consumer warps sum the
 * rows, one launch a matvec (k_matvec_ring, launch_ring) or one
 * cooperative kernel a token (k_persist_ring). Measured on the H200 in the
 * twenty-ninth session (docs/benchmarks/gpu-sessions-29-33.md): slower than
 * kestrel's own matvec launches either way. */
#ifndef KS_BENCH_LAYER_RING_CUH
#define KS_BENCH_LAYER_RING_CUH

/* ring: one matvec a launch, at most one block an SM (grid-stride over
 * 16-row groups), a producer warp (warp WARPS) copying the weights (HOW,
 * below) into a ring of S stages of 16 rows x 256 columns (8 KB), with
 * mbarriers, before the programmatic wait (early) or after it: the
 * weights are constants. A block takes at most 112 KB of shared memory
 * and 113 registers a thread, so the next launch's blocks fit beside this
 * one's and fill their rings while this launch ends. The question was
 * whether that removes the ~3.4 us a launch costs today; early gained
 * 1-7% over a ring filled after the wait, but the ring's own rate (2.2-2.9
 * TB/s with tensor copies) kept it below kestrel's launches.
 * Consumer warp w sums rows 2w and 2w + 1 of each group, lane l the same
 * 16-byte chunks in the same order as warp_rows: h is bitwise launch's. */
#define RING_ROWS 16
#define RING_STAGE (RING_ROWS * 512)
#define RING_SMEM (112 * 1024)
#define RING_MAX_S 32
#define PERSIST_SMEM (220 * 1024) /* persist ring: one block an SM */

__device__ __forceinline__ void mbar_init(uint64_t *b, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t *b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, int parity) {
    asm volatile("{\n\t.reg .pred P1;\n"
                 "WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
                 "@P1 bra.uni DONE_%=;\n\t"
                 "bra.uni WAIT_%=;\n"
                 "DONE_%=:\n}" ::"r"(smem_addr(b)),
                 "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

/* HOW 1: the stage as one 2-D tensor copy (a box of 16 rows x 256 columns) */
__device__ __forceinline__ void tensor_copy(void *dst, const CUtensorMap *tm, int col, int row, uint64_t *bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(tm)), "r"(col), "r"(row), "r"(smem_addr(bar))
                 : "memory");
}

/* the stages a ring block of k columns gets within RING_SMEM (x takes 4k bytes) */
static int ring_stages(int k, int smem = RING_SMEM) {
    int s = (smem - 4 * k) / RING_STAGE;
    return s > RING_MAX_S ? RING_MAX_S : s;
}

/* HOW: how the producer copies a stage: 0 one bulk copy a row (lanes
 * 0-15), 1 one tensor copy (lane 0, map tm), 2 cp.async, 16 bytes a lane
 * a row (the stage's "full" barrier then counts the 32 lanes' arrivals).
 * The producer warp: every stage of this block's groups of m, ring stage q
 * % S for the block's q-th stage (q counts on across ops). */
template <int HOW>
__device__ void ring_produce(const matvec &m, const CUtensorMap *tm, unsigned char *ring, uint64_t *full,
                             uint64_t *empty, int S, int &q) {
    int lane = threadIdx.x & 31, nch = m.k / 256, groups = (m.rows + RING_ROWS - 1) / RING_ROWS;
    for (int grp = blockIdx.x; grp < groups; grp += gridDim.x)
        for (int c = 0; c < nch; c++, q++) {
            int s = q % S;
            if (q >= S) mbar_wait(&empty[s], (q / S - 1) & 1);
            if constexpr (HOW == 2) {
                __nv_bfloat16 *st = reinterpret_cast<__nv_bfloat16 *>(ring + (size_t)s * RING_STAGE);
#pragma unroll
                for (int i = 0; i < RING_ROWS; i++) {
                    int r = min(grp * RING_ROWS + i, m.rows - 1);
                    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(st + i * 256 + lane * 8)),
                                 "l"(m.w + (size_t)r * m.k + c * 256 + lane * 8)
                                 : "memory");
                }
                asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(&full[s])) : "memory");
                continue;
            }
            if (lane == 0) mbar_expect_tx(&full[s], RING_STAGE);
            if constexpr (HOW == 1) {
                if (lane == 0) tensor_copy(ring + (size_t)s * RING_STAGE, tm, c * 256, grp * RING_ROWS, &full[s]);
                continue;
            }
            __syncwarp();
            if (lane < RING_ROWS) {
                int r = min(grp * RING_ROWS + lane, m.rows - 1);
                bulk_copy(ring + (size_t)s * RING_STAGE + lane * 512, m.w + (size_t)r * m.k + c * 256, 512, &full[s]);
            }
        }
}

/* The 8 consumer warps: this block's groups of m from the ring, x staged
 * in xs; warp w sums rows 2w and 2w + 1 of each group, lane l the same
 * 16-byte chunks in the same order as warp_rows. */
__device__ void ring_consume(const matvec &m, const unsigned char *ring, const float *xs, uint64_t *full,
                             uint64_t *empty, int S, int &q) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nch = m.k / 256, groups = (m.rows + RING_ROWS - 1) / RING_ROWS;
    for (int grp = blockIdx.x; grp < groups; grp += gridDim.x) {
        int r = grp * RING_ROWS + 2 * warp;
        float acc[2] = {0.f, 0.f};
        for (int c = 0; c < nch; c++, q++) {
            int s = q % S;
            mbar_wait(&full[s], (q / S) & 1);
            const unsigned char *st = ring + (size_t)s * RING_STAGE + 2 * warp * 512 + lane * 16;
            uint4 u[2] = {*reinterpret_cast<const uint4 *>(st), *reinterpret_cast<const uint4 *>(st + 512)};
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[s]);
            const float *xc = xs + (c * 32 + lane) * 8;
#pragma unroll
            for (int h = 0; h < 2; h++) fma_chunk(u[h], xc, acc[h]);
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
            for (int o = 16; o; o >>= 1) acc[h] += __shfl_xor_sync(0xffffffffu, acc[h], o);
            if (lane == 0 && r + h < m.rows) put_row(m, r + h, acc[h]);
        }
    }
}

/* the ring's barriers: full (the producer's copies landed), empty (the 8 consumer warps are done) */
__device__ void ring_init(uint64_t *full, uint64_t *empty, int S, int full_count) {
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(&full[s], full_count);
            mbar_init(&empty[s], WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
}

template <int HOW>
__global__ void __launch_bounds__(THREADS + 32, 2)
k_matvec_ring(matvec m, const __grid_constant__ CUtensorMap tm, int S, int early) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t full[RING_MAX_S], empty[RING_MAX_S];
    float *xs = reinterpret_cast<float *>(smem + (size_t)S * RING_STAGE);
    int q = 0;
    ring_init(full, empty, S, HOW == 2 ? 32 : 1);
    asm volatile("griddepcontrol.launch_dependents;");
    if (threadIdx.x >> 5 == WARPS) { /* the producer */
        if (!early) asm volatile("griddepcontrol.wait;" ::: "memory");
        ring_produce<HOW>(m, &tm, smem, full, empty, S, q);
        if (HOW == 2) asm volatile("cp.async.wait_all;" ::: "memory"); /* (its copies land before the warp leaves) */
        return;
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    load_x(xs, m, threadIdx.x, THREADS); /* among the consumers */
    asm volatile("bar.sync 1, %0;" ::"n"(THREADS) : "memory");
    ring_consume(m, smem, xs, full, empty, S, q);
}

/* persist ring: the whole chain in one cooperative kernel, one block an
 * SM; the producer streams every op's weights into the ring without
 * stopping at the ops' boundaries (they are constants), so the memory
 * stays busy while the consumers wait at the grid barrier for the op's x.
 * maps: op i's tensor map (HOW 1), in global memory. */
__device__ void consumer_barrier(unsigned n_blocks) { /* grid_barrier among the consumers (the producer has left) */
    asm volatile("bar.sync 1, %0;" ::"n"(THREADS) : "memory");
    if (threadIdx.x == 0) grid_arrive_wait(n_blocks);
    asm volatile("bar.sync 1, %0;" ::"n"(THREADS) : "memory");
}

template <int HOW>
__global__ void __launch_bounds__(THREADS + 32, 1) k_persist_ring(const chain *ch, const CUtensorMap *maps, int S) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t full[RING_MAX_S], empty[RING_MAX_S];
    float *xs = reinterpret_cast<float *>(smem + (size_t)S * RING_STAGE);
    int q = 0;
    ring_init(full, empty, S, HOW == 2 ? 32 : 1);
    if (threadIdx.x >> 5 == WARPS) {
        for (int i = 0; i < ch->n; i++)
            if (ch->mv[i].w) ring_produce<HOW>(ch->mv[i], maps + i, smem, full, empty, S, q);
        if (HOW == 2) asm volatile("cp.async.wait_all;" ::: "memory");
        return;
    }
    int g = blockIdx.x * WARPS + (threadIdx.x >> 5), nw = gridDim.x * WARPS;
    for (int i = 0; i < ch->n; i++) {
        const matvec &m = ch->mv[i];
        if (m.w) {
            load_x(xs, m, threadIdx.x, THREADS);
            asm volatile("bar.sync 1, %0;" ::"n"(THREADS) : "memory");
            ring_consume(m, smem, xs, full, empty, S, q);
        } else {
            int r0, r1;
            rows_of(m.rows, g, nw, &r0, &r1);
            op_rows(m, xs, r0, r1);
        }
        consumer_barrier(gridDim.x);
    }
}

/* a weight's tensor map for the TMAP ring: (rows, k) bf16, boxes of 16 rows x 256 columns */
static CUtensorMap weight_map(const matvec &m) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode;
    if (!encode) {
        cudaDriverEntryPointQueryResult q;
        CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess) {
            fprintf(stderr, "cuTensorMapEncodeTiled: not found\n");
            exit(1);
        }
    }
    CUtensorMap tm;
    cuuint64_t dims[2] = {(cuuint64_t)m.k, (cuuint64_t)m.rows}, strides[1] = {(cuuint64_t)m.k * 2};
    cuuint32_t box[2] = {256, RING_ROWS}, es[2] = {1, 1};
    if (encode(&tm, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)m.w, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) !=
        CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled failed (%d x %d)\n", m.rows, m.k);
        exit(1);
    }
    return tm;
}

/* how: k_matvec_ring's HOW */
static void launch_ring(const matvec &m, int early, int how, int sms, cudaStream_t s) {
    int groups = (m.rows + RING_ROWS - 1) / RING_ROWS, S = ring_stages(m.k);
    cudaLaunchAttribute at;
    cudaLaunchConfig_t cfg =
        launch_cfg(groups < sms ? groups : sms, THREADS + 32, (size_t)S * RING_STAGE + (size_t)m.k * 4, s, 1, &at);
    CUtensorMap tm;
    if (how == 1) tm = weight_map(m);
    else memset(&tm, 0, sizeof tm);
    if (how == 0) CK(cudaLaunchKernelEx(&cfg, k_matvec_ring<0>, m, tm, S, early));
    else if (how == 1) CK(cudaLaunchKernelEx(&cfg, k_matvec_ring<1>, m, tm, S, early));
    else CK(cudaLaunchKernelEx(&cfg, k_matvec_ring<2>, m, tm, S, early));
}

#endif
