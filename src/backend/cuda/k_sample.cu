/* k_sample.cu — sampling on the device (backend.h sample_rows): for each
 * listed logits row, one draw at the host's uniform u from the distribution
 * that sample.h's rules make of the row, written over the row's argmax id.
 *
 * One cluster of SP_CLUSTER blocks of SP_THREADS per entry (clusters of 1
 * below compute capability 9.0), each block a contiguous slice of the row:
 * a row is ~150k logits, and one SM alone spent ~40 us a pass on it. Every
 * pass reads the slice again (it is in L2, just written by the LM head) and
 * recomputes, for each value,
 *   x = logit * (1/T) (sample.c's multiply); a candidate iff x >= xmax - 30
 *   w = e^(x - xmax) in (0, 1]; q = floor(w 2^44) >= 1, its weight in fixed
 *     point: sums of q are integers, the same in any order, so a draw never
 *     depends on the order the threads meet in
 *   key = order_key(x): the rank order is larger key first, lower id on ties
 * with rounding-exact intrinsics (__fmul_rn, __fsub_rn: no contraction may
 * make one pass see another value than the next). xmax is the value at the
 * argmax already in out[row].
 * Top-k and top-p keep a prefix of the rank order, found by sp_select as
 * its last member (threshold key t, and r of the ties at t, lowest ids
 * first): pass 1 counts every candidate into SP_BINS1 linear bins of
 * xmax - x (values spread over many bins, so few atomics collide), then
 * three radix passes over the key bits (11, 11, 10) of the candidates in
 * the crossing bin; each pass carries the count and mass above it. A pass
 * counts the block's slice into its own histogram, then every block adds
 * the cluster's (sp_merge, through distributed shared memory) and makes the
 * same choice from the same sums. Top-k first (its mass Zk renormalises, as
 * HF does), then top-p: the shortest prefix whose mass reaches top_p Zk;
 * min-p keeps w >= min_p, also a prefix, so the kept set is the shorter one
 * (sample.c's order of rules).
 * The draw: target = floor(u Z) of the kept mass Z, and the first id whose
 * cumulative q in id order passes it — each warp sums a contiguous id range
 * of its block's slice (coalesced), the blocks' sums are exchanged, and the
 * one warp whose range holds the target walks it 32 ids at a time. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#include <string.h>

extern "C" {
#include "backend/backend.h"
}

#ifndef SP_THREADS /* (a multiple of 32, at most 1024; tests/emu runs it with fewer) */
#define SP_THREADS 1024
#endif
#ifndef SP_CLUSTER /* blocks a row (a cluster; at most 8, the portable size) */
#define SP_CLUSTER 8
#endif
#define SP_WARPS (SP_THREADS / 32)
#define SP_BINS1 1024               /* pass 1: linear bins of xmax - x over [0, SP_CUT] */
#define SP_RADIX 2048               /* radix passes: at most 11 key bits */
#define SP_CUT 30.0f                /* sample.c's SAMPLE_CUT */
#define SP_SCALE 17592186044416.0f  /* 2^44: e^-30 still weighs 1 */
#define SP_MAX_ROWS 64              /* entries per launch (kernel parameters) */
#define SP_UNROLL 8                 /* loads in flight per thread */

typedef unsigned long long u64;

struct sp_args {
    bk_sample_row r[SP_MAX_ROWS];
};

struct sp_smem {
    unsigned h1c[SP_BINS1]; /* pass 1: count and mass per bin (kept for a second select) */
    u64 h1s[SP_BINS1];
    unsigned hc[SP_RADIX];  /* the radix pass's */
    u64 hs[SP_RADIX];
    unsigned wc[SP_WARPS];  /* per-warp partials */
    u64 ws[SP_WARPS];
    int bin;                /* sp_cross's crossing bin (-1: none) */
    unsigned cnt, tot_c;    /* count and mass before it; sp_scan's totals */
    u64 sum, tot_s;
    unsigned blk_c;         /* the draw: this block's ties at t and kept mass above t */
    u64 blk_s;
};

struct sp_row {
    const float *l;
    int lo, hi; /* this block's slice of the row */
    int ncl;    /* blocks in the cluster */
    float inv_t, xm, cut;
};

__device__ __forceinline__ float sp_x(const sp_row &R, int i) { return __fmul_rn(R.l[i], R.inv_t); }
__device__ __forceinline__ float sp_w(const sp_row &R, float x) { return expf(__fsub_rn(x, R.xm)); }
__device__ __forceinline__ u64 sp_q(float w) { return (u64)(w * SP_SCALE); }
__device__ __forceinline__ int sp_bin1(const sp_row &R, float x) {
    int b = (int)(__fsub_rn(R.xm, x) * (SP_BINS1 / SP_CUT));
    return b < SP_BINS1 ? b : SP_BINS1 - 1;
}

/* inclusive scan of (c, s) over the warp's lanes */
__device__ __forceinline__ void warp_scan(unsigned &c, u64 &s) {
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        unsigned cc = __shfl_up_sync(0xffffffffu, c, o);
        u64 ss = __shfl_up_sync(0xffffffffu, s, o);
        if (lane >= o) c += cc, s += ss;
    }
}

/* (c, s) -> their exclusive prefix over the block's threads in order; the
 * block's totals -> S->tot_c, S->tot_s */
__device__ void sp_scan(sp_smem *S, unsigned &c, u64 &s) {
    int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    unsigned ci = c;
    u64 si = s;
    warp_scan(ci, si);
    __syncthreads(); /* (S->wc free) */
    if (lane == 31) S->wc[wp] = ci, S->ws[wp] = si;
    __syncthreads();
    if (wp == 0) {
        unsigned a = lane < SP_WARPS ? S->wc[lane] : 0, ai = a;
        u64 b = lane < SP_WARPS ? S->ws[lane] : 0, bi = b;
        warp_scan(ai, bi);
        if (lane < SP_WARPS) S->wc[lane] = ai - a, S->ws[lane] = bi - b;
        if (lane == 31) S->tot_c = ai, S->tot_s = bi;
    }
    __syncthreads();
    c = S->wc[wp] + ci - c, s = S->ws[wp] + si - s;
}

/* A histogram each block counted over its slice (pass 1's h1 when first,
 * else the radix pass's h; nb bins) becomes, in every block, the cluster's
 * sum; the caller has synchronised its block's counting */
__device__ void sp_merge(sp_smem *S, bool first, int nb, int ncl) {
    if (ncl == 1) return;
    enum { PER = (SP_RADIX + SP_THREADS - 1) / SP_THREADS };
    unsigned mc[PER];
    u64 ms[PER];
    cluster_sync(); /* every block's counts done */
    for (int j = 0; j < PER; j++) {
        int b = threadIdx.x + j * SP_THREADS;
        mc[j] = 0, ms[j] = 0;
        for (int r = 0; b < nb && r < ncl; r++) {
            const sp_smem *o = cluster_map(S, (unsigned)r);
            mc[j] += first ? o->h1c[b] : o->hc[b];
            ms[j] += first ? o->h1s[b] : o->hs[b];
        }
    }
    cluster_sync(); /* every block's reads done */
    unsigned *c = first ? S->h1c : S->hc;
    u64 *s = first ? S->h1s : S->hs;
    for (int j = 0; j < PER; j++) {
        int b = threadIdx.x + j * SP_THREADS;
        if (b < nb) c[b] = mc[j], s[b] = ms[j];
    }
    __syncthreads();
}

/* f(i, x) for i in [first, end) by step, SP_UNROLL loads in flight */
template <typename F>
__device__ __forceinline__ void sp_each(const sp_row &R, int first, int end, int step, F f) {
    for (int i0 = first; i0 < end; i0 += step * SP_UNROLL) {
        float v[SP_UNROLL];
#pragma unroll
        for (int j = 0; j < SP_UNROLL; j++) v[j] = i0 + j * step < end ? R.l[i0 + j * step] : 0.0f;
#pragma unroll
        for (int j = 0; j < SP_UNROLL; j++)
            if (i0 + j * step < end) f(i0 + j * step, __fmul_rn(v[j], R.inv_t));
    }
}

/* The nb bins in rank order (bin o, or nb - 1 - o when desc) below
 * (base_c, base_s) already above them: the first whose inclusive prefix
 * meets the rule (count >= K when K > 0, else mass >= T) -> S->bin, and the
 * count and mass before it -> S->cnt, S->sum. */
__device__ void sp_cross(sp_smem *S, const unsigned *hc, const u64 *hs, int nb, bool desc, unsigned base_c,
                         u64 base_s, unsigned K, double T) {
    int t = threadIdx.x, per = nb / SP_THREADS;
    unsigned pc = 0;
    u64 ps = 0;
    for (int j = 0; j < per; j++) {
        int o = t * per + j, b = desc ? nb - 1 - o : o;
        pc += hc[b], ps += hs[b];
    }
    __syncthreads(); /* (the last S->bin read) */
    if (t == 0) S->bin = -1;
    sp_scan(S, pc, ps);
    pc += base_c, ps += base_s;
    for (int j = 0; j < per; j++) {
        int o = t * per + j, b = desc ? nb - 1 - o : o;
        unsigned nc = pc + hc[b];
        u64 ns = ps + hs[b];
        bool before = K ? pc >= K : (double)ps >= T, after = K ? nc >= K : (double)ns >= T;
        if (after && !before) S->bin = b, S->cnt = pc, S->sum = ps;
        pc = nc, ps = ns;
    }
    __syncthreads();
}

/* the candidates in pass-1 bin b1 whose key bits above shift + bits are
 * pre, counted by key bits [shift, shift + bits) into S->hc / S->hs (the
 * cluster's counts) */
__device__ void sp_hist_key(sp_smem *S, const sp_row &R, int b1, int shift, int bits, uint32_t pre) {
    for (int b = threadIdx.x; b < (1 << bits); b += SP_THREADS) S->hc[b] = 0, S->hs[b] = 0;
    __syncthreads();
    sp_each(R, R.lo + threadIdx.x, R.hi, SP_THREADS, [&](int, float x) {
        if (!(x >= R.cut) || sp_bin1(R, x) != b1) return;
        uint32_t key = order_key(x);
        if (shift + bits < 32 && (key >> (shift + bits)) != pre) return;
        int d = (key >> shift) & ((1u << bits) - 1);
        atomicAdd(&S->hc[d], 1u);
        atomicAdd(&S->hs[d], sp_q(sp_w(R, x)));
    });
    __syncthreads();
    sp_merge(S, false, 1 << bits, R.ncl);
}

/* the last member of a kept prefix: key t; r of the ties at t (each of
 * mass q) are kept, after `above` values of mass `mass` */
struct sp_sel {
    uint32_t t;
    unsigned r, above;
    u64 q, mass;
    bool ok;
};

/* The shortest rank-order prefix that holds K values (K > 0) or mass T;
 * S->h1 holds pass 1 */
__device__ sp_sel sp_select(sp_smem *S, const sp_row &R, unsigned K, double T) {
    sp_sel r = {0, 0, 0, 0, 0, false};
    sp_cross(S, S->h1c, S->h1s, SP_BINS1, false, 0, 0, K, T);
    int b1 = S->bin;
    if (b1 < 0) return r; /* (the totals meet the rule: not reached) */
    unsigned c = S->cnt;
    u64 s = S->sum;
    uint32_t pre = 0;
    const int shift[3] = {21, 10, 0}, bits[3] = {11, 11, 10};
    for (int p = 0; p < 3; p++) {
        sp_hist_key(S, R, b1, shift[p], bits[p], pre);
        sp_cross(S, S->hc, S->hs, 1 << bits[p], true, c, s, K, T);
        int b = S->bin;
        if (b < 0) return r;
        pre = pre << bits[p] | (uint32_t)b;
        c = S->cnt, s = S->sum;
        if (p == 2) {
            unsigned n_eq = S->hc[b];
            r.q = S->hs[b] / n_eq; /* the ties share one x, so one q */
            if (K) r.r = K - c;
            else r.r = (unsigned)ceil((T - (double)s) / (double)r.q);
            r.r = r.r < 1 ? 1 : r.r > n_eq ? n_eq : r.r;
        }
    }
    r.t = pre, r.above = c, r.mass = s, r.ok = true;
    return r;
}

/* over ids [first, end) by step: the candidates tied at key t -> ties, the
 * mass of those above t that min-p keeps -> s */
__device__ __forceinline__ void sp_draw_sums(const sp_row &R, int first, int end, int step, uint32_t t, float minp,
                                             unsigned &ties, u64 &s) {
    ties = 0, s = 0;
    sp_each(R, first, end, step, [&](int, float x) {
        if (!(x >= R.cut)) return;
        uint32_t key = order_key(x);
        if (key == t) ties++;
        else if (key > t) {
            float w = sp_w(R, x);
            if (w >= minp) s += sp_q(w);
        }
    });
}

/* of n ties at t after `seen` earlier ones, those among the first r */
__device__ __forceinline__ unsigned sp_kept(unsigned r, unsigned seen, unsigned n) {
    return r > seen ? min(r - seen, n) : 0;
}

/* (c, s) summed over the warp's lanes, in every lane */
__device__ __forceinline__ void warp_total(unsigned &c, u64 &s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o), s += __shfl_xor_sync(0xffffffffu, s, o);
}

/* (c, s) of each warp (the same in its lanes) -> the sums of the block's
 * warps before it (in every lane); the block's totals -> S->tot_c, tot_s */
__device__ __forceinline__ void sp_warps_before(sp_smem *S, unsigned &c, u64 &s) {
    int lane = threadIdx.x & 31;
    unsigned c0 = lane ? 0 : c;
    u64 s0 = lane ? 0 : s;
    sp_scan(S, c0, s0);
    c = __shfl_sync(0xffffffffu, c0, 0), s = __shfl_sync(0xffffffffu, s0, 0);
}

__global__ void __launch_bounds__(SP_THREADS) k_sample_rows(int32_t *out, const float *in, int cols, int ncl, sp_args a) {
    pdl_start();
    KS_SHARED(sp_smem, S);
    const unsigned rank = cluster_rank();
    const bk_sample_row e = a.r[blockIdx.x / ncl];
    const int slice = ((cols + ncl - 1) / ncl + 31) & ~31;
    sp_row R;
    R.l = in + (size_t)e.row * cols;
    R.lo = min(cols, (int)rank * slice), R.hi = min(cols, R.lo + slice);
    R.ncl = ncl;
    R.inv_t = __fdiv_rn(1.0f, e.temperature);
    R.xm = sp_x(R, out[e.row]);
    if (!isfinite(R.xm)) return; /* nothing finite, or an infinite logit: the argmax (sample.c) (every block) */
    R.cut = __fsub_rn(R.xm, SP_CUT);
    uint32_t t = 0; /* no rank rule: every candidate (their keys are > 0) */
    unsigned r = 0;
    u64 qt = 0;
    bool topk = e.top_k > 0, topp = e.top_p < 1.0f;
    if (topk || topp) {
        for (int b = threadIdx.x; b < SP_BINS1; b += SP_THREADS) S.h1c[b] = 0, S.h1s[b] = 0;
        __syncthreads();
        sp_each(R, R.lo + threadIdx.x, R.hi, SP_THREADS, [&](int, float x) {
            if (!(x >= R.cut)) return;
            int b = sp_bin1(R, x);
            atomicAdd(&S.h1c[b], 1u);
            atomicAdd(&S.h1s[b], sp_q(sp_w(R, x)));
        });
        __syncthreads();
        sp_merge(&S, true, SP_BINS1, ncl);
        unsigned n = 0;
        u64 z = 0;
        for (int b = threadIdx.x; b < SP_BINS1; b += SP_THREADS) n += S.h1c[b], z += S.h1s[b];
        sp_scan(&S, n, z);
        n = S.tot_c;
        double zk = (double)S.tot_s;
        if (topk && (unsigned)e.top_k < n) {
            sp_sel k = sp_select(&S, R, (unsigned)e.top_k, 0.0);
            if (!k.ok) return; /* (every block: the same sums) */
            t = k.t, r = k.r, qt = k.q;
            zk = (double)(k.mass + (u64)r * qt);
        }
        if (topp) {
            sp_sel p = sp_select(&S, R, 0, fmax(1.0, (double)e.top_p * zk));
            if (!p.ok) return;
            t = p.t, r = p.r, qt = p.q;
        }
    }
    float minp = e.min_p > 0.0f ? fminf(e.min_p, 1.0f) : 0.0f;
    bool ties_ok = true; /* the ties at t pass min-p (they share one weight) */
    if (r) ties_ok = sp_w(R, __uint_as_float(t & 0x80000000u ? t & 0x7fffffffu : ~t)) >= minp;
    /* each warp's contiguous id range of the slice: its ties at t and the
     * mass of the rest it keeps */
    int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    int seg = ((R.hi - R.lo + SP_WARPS - 1) / SP_WARPS + 31) & ~31;
    int wlo = min(R.hi, R.lo + wp * seg), whi = min(R.hi, wlo + seg);
    unsigned ties;
    u64 s;
    sp_draw_sums(R, wlo + lane, whi, 32, t, minp, ties, s);
    warp_total(ties, s);
    unsigned seen = ties; /* -> the block's ties before this warp */
    u64 s_before = s;
    sp_warps_before(&S, seen, s_before);
    if (threadIdx.x == 0) S.blk_c = S.tot_c, S.blk_s = S.tot_s;
    /* the blocks' sums in id order: the ties before this block, the kept
     * mass before it, the row's kept mass z */
    cluster_sync();
    unsigned tied = 0, seen_b = 0;
    u64 before = 0, z = 0;
    for (int b = 0; b < ncl; b++) {
        const sp_smem *o = cluster_map(&S, (unsigned)b);
        unsigned bc = o->blk_c, kept = ties_ok ? sp_kept(r, tied, bc) : 0;
        if (b == (int)rank) seen_b = tied, before = z;
        tied += bc, z += o->blk_s + (u64)kept * qt;
    }
    cluster_sync(); /* (no block leaves while another reads it) */
    seen += seen_b;
    unsigned kept = ties_ok ? sp_kept(r, seen, ties) : 0;
    u64 mass = s + (u64)kept * qt, acc = mass;
    unsigned zero = 0;
    sp_warps_before(&S, zero, acc);
    acc += before;
    u64 target = (u64)(e.u * (double)z);
    if (target >= z) target = z - 1;
    if (!(acc <= target && target < acc + mass)) return; /* one warp's range holds the target: it walks */
    /* each lane a contiguous part of the warp's range (~20 ids on the
     * device), counted again; the lane whose part holds the target walks it */
    int part = (whi - wlo + 31) / 32, plo = min(whi, wlo + lane * part), phi = min(whi, plo + part);
    sp_draw_sums(R, plo, phi, 1, t, minp, ties, s);
    unsigned lt = ties;
    u64 none = 0;
    warp_scan(lt, none);
    seen += lt - ties; /* the ties before this lane's part */
    kept = ties_ok ? sp_kept(r, seen, ties) : 0;
    mass = s + (u64)kept * qt;
    u64 lm = mass;
    unsigned zero2 = 0;
    warp_scan(zero2, lm);
    acc += lm - mass;
    if (!(acc <= target && target < acc + mass)) return;
    for (int i = plo; i < phi; i++) {
        float x = sp_x(R, i);
        if (!(x >= R.cut)) continue;
        uint32_t key = order_key(x);
        if (key < t || (key == t && seen++ >= r)) continue;
        float w = sp_w(R, x);
        if (w < minp) continue;
        acc += sp_q(w);
        if (acc > target) {
            out[e.row] = i;
            return;
        }
    }
}

extern "C" void ks_cuda_sample_rows(ks_stream s, int32_t *out, const float *in, int cols, const bk_sample_row *rows,
                                    int n) {
    static int ncl; /* (decided at the first call; llama.c launches this op after the forward's graph, never in a capture) */
    if (!ncl) ncl = ks_cluster_fit(k_sample_rows, SP_CLUSTER, SP_THREADS);
    for (int at = 0; at < n; at += SP_MAX_ROWS) {
        int m = n - at < SP_MAX_ROWS ? n - at : SP_MAX_ROWS;
        sp_args a;
        memcpy(a.r, rows + at, (size_t)m * sizeof *rows);
        ks_launch_cluster(k_sample_rows, dim3(m * ncl), SP_THREADS, 0, s, ncl, out, in, cols, ncl, a);
    }
}
