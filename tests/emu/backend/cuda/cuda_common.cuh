/* tests/emu/backend/cuda/cuda_common.cuh — stands in for the CUDA backend's
 * cuda_common.cuh when a kernel file is compiled for the host
 * (tests/emu/NAME.cpp, with -Itests/emu ahead of -Isrc), so that CI, which
 * has no GPU, runs the kernel's own code. A launch runs its blocks one
 * after another (a cluster's blocks together: ks_launch_cluster); each
 * thread of a block is an OS thread; __syncthreads is a barrier of the
 * block's threads, cluster_sync one of the cluster's and a warp shuffle or ballot an exchange
 * through a slot per thread and a barrier of the warp's 32 (two sets of
 * slots, used in turn: a slot is written again only after the next
 * exchange's barrier, when every read of it is done).
 * __shared__ variables become function statics, shared by the block's
 * threads (KS_SHARED ones: one per block of a cluster, which cluster_map
 * reaches). What it cannot show: timing, races the barriers hide, the
 * device's expf (the host's differs in the last bit), launch limits.
 * Kernels must reach every __syncthreads and warp exchange with all their
 * threads (as the hardware wants too), or the emulation waits forever. */
#pragma once

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <utility>

#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef struct CUstream_st *cudaStream_t;

static thread_local uint3 threadIdx, blockIdx, blockDim, gridDim;

#define EMU_MAX_CLUSTER 16
struct emu_block {
    pthread_barrier_t bar;
    pthread_barrier_t warp_bar[32];
    uint64_t slot[2][1024];
};
static emu_block emu_blks[EMU_MAX_CLUSTER]; /* the running cluster's blocks */
static pthread_barrier_t emu_cluster_bar;
static thread_local emu_block *emu_me;      /* this thread's block */
static thread_local unsigned emu_rank;      /* its rank in the cluster */
static thread_local int emu_turn; /* which set of slots this thread's next exchange uses */

static inline void __syncthreads() { pthread_barrier_wait(&emu_me->bar); }
static inline void cluster_sync() { pthread_barrier_wait(&emu_cluster_bar); }
static inline unsigned cluster_rank() { return emu_rank; }
/* block r's copy of a KS_SHARED variable, p this block's */
template <typename T>
static inline T *cluster_map(T *p, unsigned r) { return p + ((ptrdiff_t)r - (ptrdiff_t)emu_rank); }
template <typename T>
static inline T &emu_shared() {
    static T store[EMU_MAX_CLUSTER];
    return store[emu_rank];
}
#define KS_SHARED(T, name) T &name = emu_shared<T>()
static inline int ks_cuda_cc_major() { return 9; }

/* this lane's v in, lane src's out */
template <typename T>
static inline T emu_exchange(T v, int src) {
    int w = threadIdx.x >> 5;
    uint64_t b = 0, r, *slot = emu_me->slot[emu_turn ^= 1];
    memcpy(&b, &v, sizeof v);
    slot[threadIdx.x] = b;
    pthread_barrier_wait(&emu_me->warp_bar[w]);
    r = slot[(w << 5) + src];
    T out;
    memcpy(&out, &r, sizeof out);
    return out;
}
template <typename T>
static inline T __shfl_up_sync(unsigned, T v, int o) {
    int lane = threadIdx.x & 31;
    return emu_exchange(v, lane >= o ? lane - o : lane);
}
template <typename T>
static inline T __shfl_xor_sync(unsigned, T v, int o) { return emu_exchange(v, (threadIdx.x & 31) ^ o); }
template <typename T>
static inline T __shfl_sync(unsigned, T v, int src) { return emu_exchange(v, src & 31); }
static inline unsigned __ballot_sync(unsigned, int p) {
    int w = threadIdx.x >> 5;
    uint64_t *slot = emu_me->slot[emu_turn ^= 1];
    slot[threadIdx.x] = p != 0;
    pthread_barrier_wait(&emu_me->warp_bar[w]);
    unsigned m = 0;
    for (int l = 0; l < 32; l++) m |= (unsigned)slot[(w << 5) + l] << l;
    return m;
}

static inline unsigned atomicAdd(unsigned *a, unsigned v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }
static inline unsigned long long atomicAdd(unsigned long long *a, unsigned long long v) {
    return __atomic_fetch_add(a, v, __ATOMIC_RELAXED);
}

/* rounded as written: the .cpp is compiled with -ffp-contract=off */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __uint_as_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t __float_as_uint(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline int min(int a, int b) { return a < b ? a : b; }

static inline void pdl_start() {}

/* the backend's growing device scratch, as host memory (kept to the end) */
typedef struct {
    void *p;
    size_t bytes;
} ks_workspace;
static inline void *ks_cuda_workspace(ks_workspace *w, cudaStream_t, size_t need, const char *) {
    if (need > w->bytes) {
        free(w->p);
        w->p = malloc(need);
        w->bytes = w->p ? need : 0;
    }
    return w->p;
}

#include "backend/cuda/order_key.cuh"

template <typename F>
struct emu_job {
    F *f;
    uint3 tid, bid, bdim, gdim;
    unsigned rank;
};
template <typename F>
static void *emu_thread(void *p) {
    emu_job<F> *j = (emu_job<F> *)p;
    threadIdx = j->tid, blockIdx = j->bid, blockDim = j->bdim, gridDim = j->gdim;
    emu_me = &emu_blks[j->rank], emu_rank = j->rank;
    emu_turn = 0;
    (*j->f)();
    return NULL;
}

/* f() on every thread of every block (1-D grids and blocks), the blocks of
 * each cluster of cl at once */
template <typename F>
static void emu_run(dim3 grid, dim3 block, unsigned cl, F &f) {
    unsigned nt = block.x;
    pthread_t *th = (pthread_t *)malloc(sizeof *th * nt * cl);
    emu_job<F> *jobs = (emu_job<F> *)malloc(sizeof *jobs * nt * cl);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256 << 10);
    for (unsigned b0 = 0; th && jobs && b0 < grid.x; b0 += cl) {
        pthread_barrier_init(&emu_cluster_bar, NULL, nt * cl);
        for (unsigned k = 0; k < cl; k++) {
            pthread_barrier_init(&emu_blks[k].bar, NULL, nt);
            for (unsigned w = 0; w * 32 < nt; w++)
                pthread_barrier_init(&emu_blks[k].warp_bar[w], NULL, nt - w * 32 < 32 ? nt - w * 32 : 32);
            for (unsigned t = 0; t < nt; t++) {
                jobs[k * nt + t] = emu_job<F>{&f, {t, 0, 0}, {b0 + k, 0, 0}, {nt, 1, 1}, {grid.x, 1, 1}, k};
                pthread_create(&th[k * nt + t], &at, emu_thread<F>, &jobs[k * nt + t]);
            }
        }
        for (unsigned t = 0; t < nt * cl; t++) pthread_join(th[t], NULL);
        pthread_barrier_destroy(&emu_cluster_bar);
        for (unsigned k = 0; k < cl; k++) {
            pthread_barrier_destroy(&emu_blks[k].bar);
            for (unsigned w = 0; w * 32 < nt; w++) pthread_barrier_destroy(&emu_blks[k].warp_bar[w]);
        }
    }
    pthread_attr_destroy(&at);
    free(th);
    free(jobs);
}

template <typename... KArgs, typename... Args>
static inline void ks_launch_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                                     int cluster, Args &&...args) {
    (void)smem, (void)s;
    auto call = [&]() { kernel(args...); };
    emu_run(grid, block, (unsigned)cluster, call);
}
template <typename... KArgs>
static inline int ks_cluster_fit(void (*)(KArgs...), int want, int) { return want; }
template <typename... KArgs, typename... Args>
static inline void ks_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                             Args &&...args) {
    ks_launch_cluster(kernel, grid, block, smem, s, 1, std::forward<Args>(args)...);
}
