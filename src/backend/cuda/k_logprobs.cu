/* k_logprobs.cu — log-probabilities on the device (backend op
 * logprob_rows): for each row (a copy of the logits as the model computed
 * them), the normaliser lz = max + log(sum e^(l - max)), the chosen id's
 * logit, and the top largest logits, largest first, ties to the lower id —
 * row_logprobs.c's rule.
 * A row is cut in slices of at least LP_SPAN values (at most LP_MAX_SLICES
 * a row), one block each, so a 151,936-logit row is read by 19 SMs, not
 * one: a slice's block finds its max, its sum of e^(l - max) (in double,
 * as the host), and its own top by one pass per entry (the largest (value,
 * lower id) below the one before) over the slice held in shared memory
 * (read from L2 once, not top + 2 times), into a partial; one thread a row then
 * merges the partials (M = max m, Z = sum z e^(m - M); the top lists by
 * their heads). The sum's order differs from the host's, so lz may differ
 * in its last bits. NaNs are never picked.
 * Workspace (this file's, grown outside graph capture): the partials, rows
 * x slices. */
#include <math.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

extern "C" {
#include "backend/backend.h"
}

#ifndef LP_THREADS
#define LP_THREADS 256
#endif
#define LP_WARPS (LP_THREADS / 32)
#define LP_SPAN 8192
#define LP_MAX_SLICES 64

typedef struct {
    float m; /* the slice's max (-inf: nothing but -inf and NaN) */
    int n;   /* entries of its top */
    double z; /* sum of e^(l - m) over the slice */
    int32_t id[BK_MAX_TOP];
    float v[BK_MAX_TOP];
} lp_part;

/* (v, i) ranks before (w, j): larger value, then the lower id */
__device__ __forceinline__ bool lp_before(float v, int i, float w, int j) { return v > w || (v == w && i < j); }

__global__ void __launch_bounds__(LP_THREADS)
    k_logprob_slices(const float *raw, int cols, int span, int slices, int top, lp_part *part) {
    __shared__ float s_v[LP_WARPS];
    __shared__ int s_i[LP_WARPS];
    __shared__ double s_z[LP_WARPS];
    __shared__ float s_row[LP_SPAN]; /* the slice, where it fits (span is LP_SPAN up to 64 x LP_SPAN logits) */
    pdl_start();
    int k = blockIdx.x / slices, sl = blockIdx.x % slices, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *row = raw + (size_t)k * cols;
    int lo = sl * span, hi = min(cols, lo + span);
    float mx = -INFINITY;
    bool held = hi - lo <= LP_SPAN;
    for (int i = lo + threadIdx.x; i < hi; i += LP_THREADS) {
        float v = row[i];
        if (held) s_row[i - lo] = v;
        mx = v > mx ? v : mx;
    }
    const float *src = held ? s_row : row + lo; /* the slice: src[i - lo] */
    for (int o = 16; o; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, mx, o);
        mx = w > mx ? w : mx;
    }
    if (!lane) s_v[warp] = mx;
    __syncthreads(); /* (s_row too) */
    mx = s_v[0];
    for (int w = 1; w < LP_WARPS; w++) mx = s_v[w] > mx ? s_v[w] : mx;
    double z = 0;
    if (mx > -INFINITY)
        for (int i = lo + threadIdx.x; i < hi; i += LP_THREADS) z += exp((double)__fsub_rn(src[i - lo], mx));
    for (int o = 16; o; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
    if (!lane) s_z[warp] = z;
    lp_part *p = &part[blockIdx.x];
    int n_top = min(min(top, hi - lo), BK_MAX_TOP), got = 0;
    float pv = INFINITY;
    int pi = -1;
    for (int r = 0; r < n_top; r++) {
        float bv = -INFINITY;
        int bi = -1;
        for (int i = lo + threadIdx.x; i < hi; i += LP_THREADS) {
            float v = src[i - lo];
            if (v == v && (pi < 0 || lp_before(pv, pi, v, i)) && (bi < 0 || lp_before(v, i, bv, bi))) bv = v, bi = i;
        }
        for (int o = 16; o; o >>= 1) {
            float w = __shfl_xor_sync(0xffffffffu, bv, o);
            int j = __shfl_xor_sync(0xffffffffu, bi, o);
            if (j >= 0 && (bi < 0 || lp_before(w, j, bv, bi))) bv = w, bi = j;
        }
        __syncthreads(); /* (the last round's picks, and mx, read by every thread) */
        if (!lane) s_v[warp] = bv, s_i[warp] = bi;
        __syncthreads();
        bv = s_v[0], bi = s_i[0];
        for (int w = 1; w < LP_WARPS; w++)
            if (s_i[w] >= 0 && (bi < 0 || lp_before(s_v[w], s_i[w], bv, bi))) bv = s_v[w], bi = s_i[w];
        if (bi < 0) break; /* (the rest are NaNs) */
        if (threadIdx.x == 0) p->id[r] = bi, p->v[r] = bv;
        got = r + 1;
        pv = bv, pi = bi;
    }
    __syncthreads(); /* (s_z written before the rounds) */
    if (threadIdx.x == 0) {
        double t = 0;
        for (int w = 0; w < LP_WARPS; w++) t += s_z[w];
        p->m = mx;
        p->z = t;
        p->n = got;
    }
}

__global__ void k_logprob_merge(const float *raw, int cols, const int32_t *ids, const int32_t *rows, int slices,
                                int top, const lp_part *part, bk_logprobs *out) {
    pdl_start();
    if (threadIdx.x) return;
    int k = blockIdx.x;
    const lp_part *p = part + (size_t)k * slices;
    float M = -INFINITY;
    for (int s = 0; s < slices; s++) M = p[s].m > M ? p[s].m : M;
    double Z = 0;
    for (int s = 0; s < slices; s++)
        if (p[s].m > -INFINITY) Z += p[s].z * exp((double)p[s].m - (double)M);
    bk_logprobs *o = &out[k];
    int id = ids[rows[k]], head[LP_MAX_SLICES];
    o->lz = M + (float)log(Z);
    o->id = id;
    o->logit = id >= 0 && id < cols ? raw[(size_t)k * cols + id] : -INFINITY;
    for (int s = 0; s < slices; s++) head[s] = 0;
    int n_top = min(min(top, cols), BK_MAX_TOP), n = 0;
    for (; n < n_top; n++) { /* the best head of the slices' lists */
        int b = -1;
        for (int s = 0; s < slices; s++)
            if (head[s] < p[s].n &&
                (b < 0 || lp_before(p[s].v[head[s]], p[s].id[head[s]], p[b].v[head[b]], p[b].id[head[b]])))
                b = s;
        if (b < 0) break;
        o->top_id[n] = p[b].id[head[b]];
        o->top[n] = p[b].v[head[b]];
        head[b]++;
    }
    o->n_top = n;
}

static ks_workspace lp_ws;

extern "C" void ks_cuda_logprob_rows(ks_stream s, const float *raw, int cols, const int32_t *ids, const int32_t *rows,
                                     int n, int top, bk_logprobs *out) {
    if (n <= 0 || cols <= 0) return;
    int span = (cols + LP_MAX_SLICES - 1) / LP_MAX_SLICES;
    span = span < LP_SPAN ? LP_SPAN : span;
    int slices = (cols + span - 1) / span;
    lp_part *part = (lp_part *)ks_cuda_workspace(&lp_ws, s, (size_t)n * slices * sizeof(lp_part), "logprob partials");
    if (!part) return;
    ks_launch(k_logprob_slices, dim3(n * slices), LP_THREADS, 0, s, raw, cols, span, slices, top, part);
    ks_launch(k_logprob_merge, dim3(n), 32, 0, s, raw, cols, ids, rows, slices, top, (const lp_part *)part, out);
}
