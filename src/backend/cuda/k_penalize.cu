/* k_penalize.cu — penalties and logit_bias on the device (backend op
 * penalize_rows): the values of row_penalties.c's bk_penalize_row, each
 * step rounded as there (__f*_rn: no contraction).
 *
 * One block a logits row (rows no sequence lists are left alone). The
 * block finds its sequence, stages the tokens fed at the sequence's rows
 * before it (a verify's drafts, in shared memory), then its threads take
 * the sequence's entries (distinct ids: no two threads write one logit),
 * each counting that id among the staged tokens (in the repetition
 * penalty's window when its last position or one of those is at
 * BK_PEN_FROM or after); last, the staged tokens no entry names, each id
 * once. Entries are a few thousand at most (one per
 * distinct token of a context), read from L2 by every row of the sequence. */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

extern "C" {
#include "backend/backend.h"
}

#ifndef PEN_THREADS
#define PEN_THREADS 256
#endif

__device__ __forceinline__ float pen_value(float l, bool in_ctx, int count, float bias, const bk_pen_seq &ps) {
    if (in_ctx) l = l > 0.0f ? __fdiv_rn(l, ps.rep) : __fmul_rn(l, ps.rep);
    if (count > 0) l = __fsub_rn(l, __fadd_rn(ps.presence, __fmul_rn(ps.frequency, (float)count)));
    if (bias != 0.0f) l = __fadd_rn(l, bias);
    return l;
}

__global__ void __launch_bounds__(PEN_THREADS)
    k_penalize_rows(float *logits, int cols, const int32_t *tokens, const int32_t *rows, const bk_pen_seq *seqs,
                    int n_seqs, const bk_pen_ent *ent) {
    __shared__ int32_t fed[BK_PEN_MAX_FED];
    __shared__ int matched[BK_PEN_MAX_FED];
    __shared__ int of;
    pdl_start(); /* the logits are the kernel before's */
    int r = blockIdx.x;
    if (threadIdx.x == 0) {
        of = -1;
        for (int s = 0; s < n_seqs; s++)
            if (seqs[s].row <= r && r < seqs[s].row + seqs[s].n_rows) of = s;
    }
    __syncthreads();
    if (of < 0) return;
    const bk_pen_seq ps = seqs[of];
    int j = min(r - ps.row, BK_PEN_MAX_FED);
    for (int i = threadIdx.x; i < j; i += blockDim.x) {
        fed[i] = tokens[rows[ps.row + 1 + i]];
        matched[i] = 0;
    }
    __syncthreads();
    float *row = logits + (size_t)r * cols;
    int from = BK_PEN_FROM(&ps, j), fed_from = from - ps.n_ctx; /* fed[i] is in the window when i >= fed_from */
    for (int k = threadIdx.x; k < ps.n_ent; k += blockDim.x) {
        bk_pen_ent e = ent[ps.ent + k];
        if (e.id < 0 || e.id >= cols) continue;
        bool in = e.last >= 0 && e.last >= from;
        int count = e.n_out;
        for (int i = 0; i < j; i++)
            if (fed[i] == e.id) in |= i >= fed_from, count++, matched[i] = 1;
        row[e.id] = pen_value(row[e.id], in, count, e.bias, ps);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < j; i += blockDim.x) { /* fed tokens no entry names: output, each id once */
        int t = fed[i], count = 1;
        bool first = true;
        if (matched[i] || t < 0 || t >= cols) continue;
        for (int h = 0; h < i && first; h++) first = fed[h] != t;
        if (!first) continue;
        bool in = i >= fed_from;
        for (int h = i + 1; h < j; h++)
            if (fed[h] == t) count++, in |= h >= fed_from;
        row[t] = pen_value(row[t], in, count, 0.0f, ps);
    }
}

extern "C" void ks_cuda_penalize_rows(ks_stream s, float *logits, int cols, int n_rows, const int32_t *tokens,
                                      const int32_t *rows, const bk_pen_seq *seqs, int n_seqs, const bk_pen_ent *ent) {
    if (n_rows <= 0 || n_seqs <= 0) return;
    ks_launch(k_penalize_rows, dim3(n_rows), PEN_THREADS, 0, s, logits, cols, tokens, rows, seqs, n_seqs, ent);
}
