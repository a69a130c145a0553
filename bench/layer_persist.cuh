/* layer_persist.cuh — layer_stream.cu's preload variants (registers, and a
 * shared-memory slot an op), a part of that file (included once, after its
 * matvec, chain, load_x, stage_x, put_row, op_rows, rows_of,
 * fma_chunk, finish_row and launch_cfg, and layer_ring.cuh's mbarrier and
 * bulk-copy helpers). The question: does a persistent kernel win once each
 * warp has its next op's first weights in flight while it waits for that
 * op's x? The twenty-sixth and twenty-ninth sessions' persistent
 * kernels waited at a grid barrier (2.3 us) with nothing in flight but L2
 * prefetches, or fed a shared-memory ring too slowly; a published decode
 * "megakernel" keeps the next op's weights loading across every dependency.
 *
 * PRE 16-byte chunks a lane (a warp's first PRE x 512 bytes of its rows, in
 * warp_rows's order) are loaded into registers before the wait:
 *   launch+pdl+reg PRE  one launch a matvec (a graph, programmatic): the
 *       chunks are loaded between griddepcontrol.launch_dependents and
 *       griddepcontrol.wait
 *   persist+reg PRE     one cooperative kernel a token; a block arrives at
 *       a monotonic counter (red.release) as soon as its rows are written,
 *       then loads its next op's chunks, then waits for the counter
 *       (ld.acquire) to reach every block's arrival; no generation word,
 *       no nanosleep (the older barrier's 2.3 us)
 * Lane l sums its row's chunks l, l + 32, ... in order with warp_rows's
 * fmas, so h after a token is bitwise the launches' (checked). */
#ifndef KS_BENCH_LAYER_PERSIST_CUH
#define KS_BENCH_LAYER_PERSIST_CUH

#define PRE_N (PRE > 0 ? PRE : 1) /* the register array's length (PRE 0: none used) */

/* chunk t of a warp's rows [r0, r1): row r0 + t / cpr, 16-byte column
 * lane + 32 (t % cpr), cpr = k / 256 chunks a lane a row */
template <int PRE>
__device__ __forceinline__ void preload_rows(const matvec &m, int r0, int r1, uint4 (&pre)[PRE_N]) {
    int lane = threadIdx.x & 31, cpr = m.k / 256, n = (r1 - r0) * cpr;
#pragma unroll
    for (int t = 0; t < PRE; t++)
        if (t < n) pre[t] = __ldg(reinterpret_cast<const uint4 *>(m.w + (size_t)(r0 + t / cpr) * m.k) + lane + 32 * (t % cpr));
}

/* warp_rows with the first PRE chunks from registers, the rest streamed */
template <int PRE>
__device__ void warp_rows_pre(const matvec &m, const float *xs, int r0, int r1, const uint4 (&pre)[PRE_N]) {
    int lane = threadIdx.x & 31, cpr = m.k / 256, n = (r1 - r0) * cpr, r = r0, j = 0;
    float acc = 0.f;
#pragma unroll
    for (int t = 0; t < PRE; t++)
        if (t < n) {
            fma_chunk(pre[t], xs + (lane + 32 * j) * 8, acc);
            if (++j == cpr) {
                finish_row(m, r++, acc);
                acc = 0.f;
                j = 0;
            }
        }
    for (; r < r1; r++, j = 0) {
        const uint4 *row = reinterpret_cast<const uint4 *>(m.w + (size_t)r * m.k);
#pragma unroll 4
        for (int c = lane + 32 * j; c < m.k / 8; c += 32) fma_chunk(__ldg(row + c), xs + c * 8, acc);
        finish_row(m, r, acc);
        acc = 0.f;
    }
}

template <int PRE>
__global__ void __launch_bounds__(THREADS) k_matvec_reg(matvec m) {
    extern __shared__ float xs[];
    int warp = threadIdx.x >> 5, g = blockIdx.x * WARPS + warp, r0, r1;
    rows_of(m.rows, g, gridDim.x * WARPS, &r0, &r1);
    uint4 pre[PRE_N];
    asm volatile("griddepcontrol.launch_dependents;");
    if (m.w) preload_rows<PRE>(m, r0, r1, pre);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (!m.w) {
        op_rows(m, xs, r0, r1);
        return;
    }
    stage_x(xs, m);
    warp_rows_pre<PRE>(m, xs, r0, r1, pre);
}

template <int PRE>
static void launch_matvec_reg(const matvec &m, int blocks, cudaStream_t s) {
    cudaLaunchAttribute at;
    cudaLaunchConfig_t cfg = launch_cfg(blocks, THREADS, (size_t)m.k * 4, s, 1, &at);
    CK(cudaLaunchKernelEx(&cfg, k_matvec_reg<PRE>, m));
}

__device__ unsigned persist_arrivals; /* grows by the grid's blocks at every op; the host passes where a token starts */

/* the chain, one cooperative launch; base: persist_arrivals when it starts */
template <int PRE>
__global__ void __launch_bounds__(THREADS) k_persist_reg(const chain *ch, unsigned base) {
    extern __shared__ float xs[];
    int warp = threadIdx.x >> 5, g = blockIdx.x * WARPS + warp, nw = gridDim.x * WARPS, held = -1;
    uint4 pre[PRE_N];
    for (int i = 0; i < ch->n; i++) {
        const matvec &m = ch->mv[i];
        int r0, r1;
        rows_of(m.rows, g, nw, &r0, &r1);
        if (m.w) {
            if (held != i) preload_rows<PRE>(m, r0, r1, pre); /* the token's first op */
            stage_x(xs, m);
            warp_rows_pre<PRE>(m, xs, r0, r1, pre);
        } else {
            op_rows(m, xs, r0, r1);
        }
        if (i + 1 == ch->n) break;
        __syncthreads(); /* the block's rows written */
        if (threadIdx.x == 0) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(&persist_arrivals) : "memory");
        int nx = i + 1; /* the next op with weights: its chunks load while the grid arrives */
        while (nx < ch->n && !ch->mv[nx].w) nx++;
        if (PRE && nx < ch->n && held != nx) {
            int q0, q1;
            rows_of(ch->mv[nx].rows, g, nw, &q0, &q1);
            preload_rows<PRE>(ch->mv[nx], q0, q1, pre);
            held = nx;
        }
        if (threadIdx.x == 0) {
            unsigned want = base + (unsigned)(i + 1) * gridDim.x, v;
            do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(&persist_arrivals) : "memory");
            while ((int)(v - want) < 0);
        }
        __syncthreads();
    }
}

/* persist smem: one cooperative kernel a token, one block of PS_WARPS warps
 * an SM. Each warp owns two shared-memory slots of wbuf bytes; weighted op
 * j of the token (its j-th op with weights) has its warp's first wbuf
 * bytes of rows copied into slot j % 2 by one bulk copy (lane 0, the
 * warp's own mbarrier). Ops 0 and 1 are asked for at the start; op j + 2
 * as soon as the warp has summed op j, before the block arrives at the
 * counter — so the memory streams the next ops' weights through every
 * barrier and x staging, one handshake an op (the twenty-ninth session's
 * ring paid one per 8 KB stage). The rest of a warp's rows stream from
 * global memory as in warp_rows. */
#define PS_WARPS 16
#define PS_THREADS (PS_WARPS * 32)

template <int DUMMY = 0>
__global__ void __launch_bounds__(PS_THREADS, 1) k_persist_smem(const chain *ch, unsigned base, int xfloats, int wbuf) {
    extern __shared__ __align__(128) unsigned char ps_smem[];
    __shared__ __align__(8) uint64_t bar[2][PS_WARPS];
    float *xs = reinterpret_cast<float *>(ps_smem);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = blockIdx.x * PS_WARPS + warp, nw = gridDim.x * PS_WARPS;
    unsigned char *slot0 = ps_smem + (size_t)xfloats * 4 + (size_t)warp * wbuf, *slot1 = slot0 + (size_t)PS_WARPS * wbuf;
    if (lane == 0) {
        mbar_init(&bar[0][warp], 1);
        mbar_init(&bar[1][warp], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    int loaded0 = 0, loaded1 = 0, phase0 = 0, phase1 = 0; /* (named apart: an indexed pair went to the stack) */
    /* op `op`'s first bytes of this warp's rows into slot s (every lane
     * knows the size; lane 0 copies) */
    auto ask = [&](int op, int s) {
        const matvec &m = ch->mv[op];
        int q0, q1;
        rows_of(m.rows, g, nw, &q0, &q1);
        size_t want = (size_t)(q1 - q0) * m.k * 2;
        int bytes = (int)(want < (size_t)wbuf ? want : (size_t)wbuf) & ~15;
        (s ? loaded1 : loaded0) = bytes;
        if (bytes && lane == 0) {
            mbar_expect_tx(&bar[s][warp], bytes);
            bulk_copy(s ? slot1 : slot0, m.w + (size_t)q0 * m.k, bytes, &bar[s][warp]);
        }
    };
    auto next_weighted = [&](int i) {
        while (i < ch->n && !ch->mv[i].w) i++;
        return i;
    };
    int w0 = next_weighted(0), w1 = w0 < ch->n ? next_weighted(w0 + 1) : ch->n, j = 0;
    if (w0 < ch->n) ask(w0, 0);
    if (w1 < ch->n) ask(w1, 1);
    for (int i = 0; i < ch->n; i++) {
        const matvec &m = ch->mv[i];
        int r0, r1;
        rows_of(m.rows, g, nw, &r0, &r1);
        if (!m.w) {
            op_rows(m, xs, r0, r1);
        } else {
            load_x(xs, m, threadIdx.x, PS_THREADS);
            __syncthreads();
            int s = j & 1, have = s ? loaded1 : loaded0;
            if (have && s) {
                mbar_wait(&bar[1][warp], phase1);
                phase1 ^= 1;
            } else if (have) {
                mbar_wait(&bar[0][warp], phase0);
                phase0 ^= 1;
            }
            const unsigned char *sl = s ? slot1 : slot0;
            for (int r = r0; r < r1; r++) {
                const uint4 *row = reinterpret_cast<const uint4 *>(m.w + (size_t)r * m.k);
                int row_off = (r - r0) * m.k * 2;
                float acc = 0.f;
                if (row_off + m.k * 2 <= have) { /* the whole row in the slot */
#pragma unroll 4
                    for (int c = lane; c < m.k / 8; c += 32)
                        fma_chunk(*reinterpret_cast<const uint4 *>(sl + row_off + c * 16), xs + c * 8, acc);
                } else if (row_off >= have) {
#pragma unroll 4
                    for (int c = lane; c < m.k / 8; c += 32) fma_chunk(__ldg(row + c), xs + c * 8, acc);
                } else {
                    for (int c = lane; c < m.k / 8; c += 32) {
                        int off = row_off + c * 16;
                        uint4 u = off < have ? *reinterpret_cast<const uint4 *>(sl + off) : __ldg(row + c);
                        fma_chunk(u, xs + c * 8, acc);
                    }
                }
                finish_row(m, r, acc);
            }
            /* the slot is read: ask for the weighted op after the next one */
            int nx = next_weighted(i + 1);
            nx = nx < ch->n ? next_weighted(nx + 1) : ch->n;
            __syncwarp();
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            if (nx < ch->n) ask(nx, s);
            else (s ? loaded1 : loaded0) = 0;
            j++;
        }
        if (i + 1 == ch->n) break;
        __syncthreads(); /* the block's rows written (and x read) */
        if (threadIdx.x == 0) {
            asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(&persist_arrivals) : "memory");
            unsigned want = base + (unsigned)(i + 1) * gridDim.x, v;
            do asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(&persist_arrivals) : "memory");
            while ((int)(v - want) < 0);
        }
        __syncthreads();
    }
}

#endif
