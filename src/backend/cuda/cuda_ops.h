/* cuda_ops.h — extern "C" launchers of the CUDA kernels: plain device
 * pointers and a stream, nothing else (DESIGN.md conventions). Shapes as in
 * backend.h. Weight element types: 0 = f32, 1 = f16, 2 = bf16 (dtype_t). */
#ifndef KS_CUDA_OPS_H
#define KS_CUDA_OPS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *ks_stream;
struct bk_sample_row; /* backend.h */

/* out (n, rows) = x (n, k) @ w^T (+ bias f32 (rows)) */
void ks_cuda_matmul(ks_stream s, float *out, const float *x, const void *w, int wtype, const float *bias, int n,
                    int k, int rows);
/* The matmul with its neighbours folded in (decode rows): g (k) != NULL:
 * x's rows are RMSNorm(x) * g (eps) first; mode KS_MM_ADD: out (n, rows)
 * += the product; KS_MM_SWIGLU: out (n, rows/2) = silu(gate) * up. On the
 * tensor cores the norm is the product of x * g times 1 / rms(x), its sums
 * in an order fixed by k: a row's bits do not depend on n. */
enum { KS_MM_PLAIN = 0, KS_MM_ADD = 1, KS_MM_SWIGLU = 2, KS_MM_SWIGLU_IN = 4 };
void ks_cuda_matmul_fused(ks_stream s, float *out, const float *x, const float *g, float eps, const void *w, int wtype,
                          const float *bias, int n, int k, int rows, int mode);
/* the PLAIN product above (norm g folded) and out2 (n, rows2) (+)= x @ w2^T
 * (w2 (rows2, k2), no norm; add2: +=) in one launch where the kernel can,
 * else the two */
void ks_cuda_matmul_fused_side(ks_stream s, float *out, const float *x, const float *g, float eps, const void *w,
                               int wtype, const float *bias, int n, int k, int rows, float *out2, const void *w2,
                               int wtype2, int k2, int rows2, int add2);
void ks_cuda_rmsnorm(ks_stream s, float *out, int out_stride, const float *in, int in_stride, const float *w, int n,
                     int n_heads, int dim, float eps);
/* the same rows (n x dim, contiguous, one head) written in 16 bits (wtype 2
 * bf16, else f16), each the f32 result rounded to nearest even */
void ks_cuda_rmsnorm_16(ks_stream s, void *out, int wtype, const float *in, const float *w, int n, int dim, float eps);
/* ks_cuda_rmsnorm's rows (n x dim, contiguous) written as the tensor-core
 * matvec's split x (cuda_common.cuh split_pair: n x dim 32-bit words), the
 * same values split: false (nothing launched) where the block kernel does
 * not take dim (below 1024, above 16384, not in float4s, unaligned) */
bool ks_cuda_rmsnorm_split(ks_stream s, uint32_t *words, const float *in, const float *w, int n, int dim, float eps);
void ks_cuda_rope(ks_stream s, float *x, int row_stride, int n, int n_heads, int head_dim, const int32_t *pos,
                  const float *inv_freq);
void ks_cuda_embed(ks_stream s, float *out, const void *table, int wtype, const int32_t *ids, int n, int dim);
void ks_cuda_silu_mul(ks_stream s, float *out, const float *gu, int n, int dim);
void ks_cuda_add(ks_stream s, float *x, const float *y, long long n);
void ks_cuda_qk_norm_rope(ks_stream s, float *qkv, int stride, int n, int nh, int nkv, int hd, const float *q_w,
                          const float *k_w, float eps, const int32_t *pos, const float *inv_freq, void *kc, void *vc,
                          const int32_t *slots);
void ks_cuda_gather_rows(ks_stream s, float *out, const float *in, const int32_t *idx, int n, int dim);
/* out (n, 2 dim) = [rmsnorm(table[ids]) * we ; rmsnorm(hid[idx]) * wh] */
void ks_cuda_mtp_input(ks_stream s, float *out, const void *table, int wtype, const int32_t *ids, const float *hid,
                       const int32_t *idx, const float *we, const float *wh, int n, int dim, float eps);
void ks_cuda_argmax(ks_stream s, int32_t *out, const float *in, int n, int cols);
/* backend.h's penalize_rows (k_penalize.cu); seqs and ent device memory */
void ks_cuda_penalize_rows(ks_stream s, float *logits, int cols, int n_rows, const int32_t *tokens,
                           const int32_t *rows, const struct bk_pen_seq *seqs, int n_seqs,
                           const struct bk_pen_ent *ent);
/* backend.h's mask_rows (k_mask.cu); rows and bits device memory */
void ks_cuda_mask_rows(ks_stream s, float *logits, int cols, const int32_t *rows, const uint32_t *bits, int n);
/* backend.h's logprob_rows (k_logprobs.cu); every pointer device memory */
void ks_cuda_logprob_rows(ks_stream s, const float *raw, int cols, const int32_t *ids, const int32_t *rows, int n,
                          int top, struct bk_logprobs *out);
/* backend.h's sample_rows (k_sample.cu); rows are host memory (kernel
 * parameters), read before it returns */
void ks_cuda_sample_rows(ks_stream s, int32_t *out, const float *in, int cols, const struct bk_sample_row *rows,
                         int n);
/* backend op spec_shift (k_spec.cu) */
void ks_cuda_spec_shift(ks_stream s, const int32_t *ids, const int32_t *drafts, const int32_t *k, int32_t *tok,
                        int32_t *pos, int32_t *pos2, const int32_t *entry, int32_t *slots, const int32_t *table,
                        int block_size, int n);
/* KV caches hold bf16 (backend.kv_elem_bytes = 2) */
void ks_cuda_kv_store(ks_stream s, void *kc, void *vc, const float *k, const float *v, int src_stride,
                      const int32_t *slots, int n, int kv_dim);
void ks_cuda_attention(ks_stream s, float *out, const float *q, int q_stride, const void *kc, const void *vc,
                       const int32_t *pos, const int32_t *seq, const int32_t *tables, int max_blocks, int block_size,
                       int n, int n_heads, int n_kv_heads, int head_dim, float scale, int kv_capacity);

/* Prompt rows (k_gemm.cu, k_attention_prompt.cu). ks_cuda_matmul_prompt:
 * out (n, rows) = x (n, k) @ w^T on the tensor-core GEMM (g (k) != NULL:
 * x's rows RMSNorm(x) * g first; modes KS_MM_ADD: out += it;
 * KS_MM_SWIGLU_IN, g NULL: x is (n, 2k) [gate | up], the input silu(gate) *
 * up), or on the kernels above where cuBLASLt cannot serve it (no
 * cuBLASLt, f32 weights) — the same choice for every call of a shape.
 * ks_cuda_attention_prompt returns -1 for an unsupported head_dim and the
 * caller uses flash-decoding. */
void ks_cuda_matmul_prompt(ks_stream s, float *out, const float *x, const float *g, float eps, const void *w, int wtype,
                           const float *bias, int n, int k, int rows, int mode);
int ks_cuda_attention_prompt(ks_stream s, float *out, const float *q, int q_stride, const void *kc, const void *vc,
                             const int32_t *tiles, int max_tiles, const int32_t *pos, const int32_t *seq,
                             const int32_t *tables, int max_blocks, int block_size, int n_heads, int n_kv_heads,
                             int head_dim, float scale, int max_pos);

#ifdef __cplusplus
}
#endif

#endif
