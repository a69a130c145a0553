/* backend.h — the compute backend interface: a small table of function
 * pointers (ggml-backend style) that the model code is written against once.
 *
 * Memory: activations, KV and index arrays live in backend buffers
 * (buf_alloc/buf_free; host memory on the CPU backend, device memory on
 * CUDA); the model only passes those pointers to ops. Weights are bk_weight
 * handles made by weight_init from safetensors views, each backend copying
 * them once into its own format (the CPU: 16-row panels, f32 vectors; CUDA:
 * device memory), a second weight_init of the same source sharing the copy
 * (backend/weight_share.h); after loading, the views are not read again and
 * the model drops their pages (st_drop_pages); several source tensors can be fused into one weight (q|k|v, gate|up)
 * whose output rows are the parts' rows concatenated.
 *
 * Numerics (DESIGN.md principle 2): every op computes a token's row with the
 * same reduction order whatever the number of tokens in the call. */
#ifndef KS_BACKEND_H
#define KS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "io/safetensors.h"

#define BK_MAX_PARTS 4

typedef struct backend backend;

typedef struct {
    dtype_t dtype;                       /* F32, F16 or BF16 (all parts alike) */
    int64_t rows;                        /* output features (parts' rows summed) */
    int64_t cols;                        /* input features; 1-D tensors: rows=n, cols=1 */
    int n_parts;
    const void *part_data[BK_MAX_PARTS]; /* host views (borrowed from the mmap) */
    int64_t part_rows[BK_MAX_PARTS];
    void *impl;                          /* backend-owned (e.g. device copy) */
} bk_weight;

/* One row to sample on the device (sample_rows): the logits row and the
 * rules of sample_params (temperature > 0), and the uniform in [0, 1) the
 * request's generator drew for it. */
typedef struct bk_sample_row {
    int row;
    int top_k;         /* <= 0: off */
    float temperature; /* > 0 */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    double u;
} bk_sample_row;

/* One sequence's logits rows to penalise (penalize_rows), sample.h's order:
 * Hugging Face's repetition penalty on each token of its context (of its
 * last window tokens where window > 0, llama.cpp's and Ollama's
 * repeat_last_n), OpenAI's presence and frequency penalties on each token
 * of its output, then logit_bias. Its rows are row .. row + n_rows - 1;
 * row j's context is the n_ctx tokens its entries describe followed by the
 * tokens fed at rows row + 1 .. row + j (a verify's: row 0 is the last
 * context token's, row j follows draft j - 1, at position n_ctx + j - 1),
 * which are output. Row j's repetition penalty reads the positions from
 * BK_PEN_FROM(ps, j) on: an entry whose last occurrence is there, a fed
 * token i where n_ctx + i is. */
#define BK_PEN_MAX_FED 64
typedef struct bk_pen_seq {
    int row, n_rows;          /* n_rows <= BK_PEN_MAX_FED + 1 */
    int ent, n_ent;           /* its entries: ent .. ent + n_ent - 1 of the call's list, one per id */
    float rep;                /* repetition penalty (1: off): l > 0 ? l / rep : l * rep */
    float presence, frequency; /* then l - (presence + frequency * count), count > 0 times in the output */
    int window, n_ctx;        /* the repetition penalty's window (0: the whole context); the context's length */
} bk_pen_seq;
/* A token of a sequence's context, or one its logit_bias names. */
typedef struct bk_pen_ent {
    int32_t id;
    int32_t n_out; /* times in the output */
    int32_t last;  /* the context position of its last occurrence (-1: not in the context, a logit_bias id only) */
    float bias;    /* added last (0: none) */
} bk_pen_ent;
/* The first context position row j of *ps's repetition penalty reads (a
 * macro: the CUDA kernel's too). */
#define BK_PEN_FROM(ps, j) ((ps)->window > 0 ? (ps)->n_ctx + (j) - (ps)->window : 0)
/* One row's log-probabilities (logprob_rows, bk_logprob_row): the log of
 * its softmax's normaliser lz = max + log(sum e^(l - max)), a chosen id's
 * logit, and the n_top largest logits, largest first (ties: the lower id);
 * a logprob is logit - lz. */
#define BK_MAX_TOP 20
typedef struct bk_logprobs {
    float lz;
    int32_t id;    /* the chosen id */
    float logit;   /* its logit */
    int n_top;
    int32_t top_id[BK_MAX_TOP];
    float top[BK_MAX_TOP];
} bk_logprobs;
/* The rule on the host (row_logprobs.c): row (cols), chosen id, top <=
 * BK_MAX_TOP (and <= cols). */
void bk_logprob_row(const float *row, int cols, int id, int top, bk_logprobs *out);
/* Row j of ps penalised in place (row: that logits row, cols wide): the
 * rule penalize_rows applies, on the host (row_penalties.c); fed[0..j) the
 * tokens fed at ps's rows 1..j. */
void bk_penalize_row(float *row, int cols, const bk_pen_seq *ps, const bk_pen_ent *ent, const int32_t *fed, int j);
/* The rule's first step, a logit of a token in the context under
 * repetition penalty rep (Hugging Face's). */
static inline float bk_repetition(float l, float rep) { return l > 0 ? l / rep : l * rep; }

/* Where each token of a forward call reads its keys/values: token i of the
 * call belongs to sequence seq[i] at position pos[i] and attends to positions
 * 0..pos[i] of that sequence, found through its block table. All arrays are
 * backend buffers. */
typedef struct {
    int n_tokens;
    const int32_t *pos;          /* (n_tokens) */
    const int32_t *seq;          /* (n_tokens) row in block_tables */
    const int32_t *slots;        /* (n_tokens) KV slot written: block*block_size + pos%block_size */
    const int32_t *block_tables; /* (n_seqs, max_blocks) */
    int max_blocks;
    int block_size;
    int max_pos;                 /* max over pos[] (host-side hint for scratch sizing) */
    int kv_capacity;             /* tokens the KV pool holds (fixes the attention work split) */
    /* Prompt rows (backends with matmul_prompt): rows [0, n_prompt) are
     * prompt tokens, cut in tiles of consecutive positions of one sequence,
     * at most BK_PROMPT_TILE rows each: tiles (max_tiles, 2) = first row,
     * row count (0: unused entry). A backend may compute these rows with
     * its bulk kernels (tensor cores); each row's result is still the same
     * whatever the tiling or the rest of the batch. 0 elsewhere. */
    int n_prompt;
    const int32_t *tiles;
    int max_tiles;
} bk_attn_batch;

#define BK_PROMPT_TILE 64

/* matmul_fused's modes (PLAIN, ADD, SWIGLU) and matmul_prompt's (PLAIN,
 * ADD, SWIGLU_IN, ADD | SWIGLU_IN) */
enum { BK_MM_PLAIN = 0, BK_MM_ADD = 1, BK_MM_SWIGLU = 2, BK_MM_SWIGLU_IN = 4 };

/* Device memory a backend holds, bytes: weights; buffers (buf_alloc: the
 * KV caches, activations, logits); workspace (its ops' own scratch). The
 * CUDA context and the kernels' images are not in it. */
typedef struct {
    long long weights, buffers, workspace;
} bk_mem;

typedef struct backend_ops {
    const char *name;
    void *(*buf_alloc)(backend *be, size_t bytes);
    void (*buf_free)(backend *be, void *p);
    /* into a buffer, in stream order: src is host memory or another of the
     * backend's buffers (a copy on the device) */
    int (*buf_upload)(backend *be, void *dst, const void *src, size_t bytes);
    /* out of a buffer into host memory: waits for the work before it */
    int (*buf_download)(backend *be, void *dst, const void *src, size_t bytes);

    int (*weight_init)(backend *be, bk_weight *w, const st_tensor *const *parts, int n_parts);
    void (*weight_release)(backend *be, bk_weight *w);

    /* out (n, table.cols) = table[ids[i]] */
    void (*embed)(backend *be, float *out, const bk_weight *table, const int32_t *ids, int n);
    /* For each token t < n and head h < n_heads: RMSNorm of the dim floats at
     * in + t*in_stride + h*dim, times w (dim), into out + t*out_stride + h*dim.
     * out may equal in. */
    void (*rmsnorm)(backend *be, float *out, int out_stride, const float *in, int in_stride,
                    const bk_weight *w, int n, int n_heads, int dim, float eps);
    /* out (n, w.rows) = in (n, w.cols) @ w^T (+ bias (w.rows) when not NULL) */
    void (*matmul)(backend *be, float *out, const float *in, const bk_weight *w,
                   const bk_weight *bias, int n);
    /* Optional (NULL on the CPU, where matmul serves every row): the same
     * product for prompt rows, on the backend's bulk path (CUDA: tensor-core
     * GEMM with bf16 inputs and fp32 accumulation). A row's result does not
     * depend on n, but it may differ in the last bits from matmul's: the
     * model sends a token through one or the other by its role (prompt or
     * generated), never by the size of the call. norm != NULL: the input
     * rows are RMSNorm(in) * norm (eps) first, as matmul_fused's; mode:
     * BK_MM_PLAIN, or the flags BK_MM_ADD (out += the product: the
     * residual add) and BK_MM_SWIGLU_IN (norm NULL; in is (n, 2 * w.cols)
     * [gate | up]; the product's input is silu(gate) * up: the MLP's down
     * projection). */
    void (*matmul_prompt)(backend *be, float *out, const float *in, const bk_weight *norm, float eps,
                          const bk_weight *w, const bk_weight *bias, int n, int mode);
    /* Rotary embedding (half-split pairs i, i+head_dim/2) in place on n_heads
     * heads at x + t*row_stride; angle = pos[t] * inv_freq[i]. */
    void (*rope)(backend *be, float *x, int row_stride, int n, int n_heads, int head_dim,
                 const int32_t *pos, const float *inv_freq);
    /* Writes k and v rows (n, n_kv_heads*head_dim at row stride src_stride)
     * into the layer's cache (n_blocks, block_size, n_kv_heads, head_dim),
     * in the backend's KV format (backend.kv_elem_bytes). */
    void (*kv_store)(backend *be, void *k_cache, void *v_cache, const float *k, const float *v,
                     int src_stride, const bk_attn_batch *ab, int kv_dim);
    /* Causal attention over paged KV, GQA: out (n, n_heads*head_dim). q rows
     * at q + t*q_stride. */
    void (*attention)(backend *be, float *out, const float *q, int q_stride,
                      const void *k_cache, const void *v_cache, const bk_attn_batch *ab,
                      int n_heads, int n_kv_heads, int head_dim, float scale);
    /* out (n, dim) = silu(gu[:, :dim]) * gu[:, dim:]   (gu is (n, 2*dim)) */
    void (*silu_mul)(backend *be, float *out, const float *gu, int n, int dim);
    /* A decode rows' matmul with its neighbours: norm != NULL: the input
     * rows are RMSNorm(in) * norm (eps) first; mode BK_MM_ADD: out (n,
     * w.rows) += the product (the residual add after the o and down
     * projections); BK_MM_SWIGLU: out (n, w.rows/2) = silu(y[:, :rows/2]) *
     * y[:, rows/2:] for the product y (w = [gate; up] fused). The CPU runs
     * the separate ops (bitwise them); CUDA folds them into the matvec
     * where that pays (the norm's 1 / rms scaling the product of in * norm:
     * within rounding of the separate ops). A row's bits never depend on n.
     * Prompt rows take matmul_prompt with the norm and add apart. */
    void (*matmul_fused)(backend *be, float *out, const float *in, const bk_weight *norm, float eps,
                         const bk_weight *w, const bk_weight *bias, int n, int mode);
    /* Optional (NULL: the two calls): matmul_fused's PLAIN product, norm
     * folded as there, and beside it a product of the same input rows
     * without the norm — out2 (n, w2.rows) = in @ w2^T, or += it with add2
     * — in one launch where the backend can (a DFlash drafter's feature
     * projection beside the next layer's qkv); each result bitwise what
     * its own matmul_fused call gives. */
    void (*matmul_fused_side)(backend *be, float *out, const float *in, const bk_weight *norm, float eps,
                              const bk_weight *w, const bk_weight *bias, int n, float *out2, const bk_weight *w2,
                              bool add2);
    /* x += y, n floats */
    void (*add)(backend *be, float *x, const float *y, size_t n);
    /* The attention input path of a qkv row in one pass: per-head RMSNorm
     * of the n_heads q heads (q_norm) and n_kv_heads k heads (k_norm) that
     * start each row of qkv (row stride `stride`; each norm skipped when its
     * weights are NULL), then rope over those heads — the results equal
     * rmsnorm, rmsnorm, rope. With k_cache non-NULL it also stores each
     * row's k (as rotated) and v heads in the layer's cache, as kv_store
     * would (one pass fewer on the GPU). */
    void (*qk_norm_rope)(backend *be, float *qkv, int stride, int n, int n_heads, int n_kv_heads, int head_dim,
                         const bk_weight *q_norm, const bk_weight *k_norm, float eps, const int32_t *pos,
                         const float *inv_freq, void *k_cache, void *v_cache, const bk_attn_batch *ab);
    /* out (n, dim) = in[idx[i]] */
    void (*gather_rows)(backend *be, float *out, const float *in, const int32_t *idx, int n, int dim);
    /* The MTP head's input rows in one op: out (n, 2*dim) =
     * [RMSNorm(table[ids[t]]) * w_e ; RMSNorm(hid[idx[t]]) * w_h] — the
     * results equal embed, gather_rows and two rmsnorm calls. */
    void (*mtp_input)(backend *be, float *out, const bk_weight *table, const int32_t *ids, const float *hid,
                      const int32_t *idx, const bk_weight *w_e, const bk_weight *w_h, int n, int dim, float eps);
    /* out (n) int32 = for each row of in (n, cols) the index of its largest
     * value, the lowest such index on ties (sample_argmax's rule): greedy
     * drafts leave the device as ids, not as rows of logits */
    void (*argmax)(backend *be, int32_t *out, const float *in, int n, int cols);
    /* Penalties and logit_bias on the rows of n_seqs sequences, in place
     * (bk_pen_seq's rule, as bk_penalize_row; logits (n_rows, cols)): the
     * token fed at logits row r is tokens[rows[r]]. seqs and ent are
     * backend buffers; a sequence's entries have distinct ids. Before
     * argmax and sample_rows, which then see the penalised rows. */
    void (*penalize_rows)(backend *be, float *logits, int cols, int n_rows, const int32_t *tokens,
                          const int32_t *rows, const bk_pen_seq *seqs, int n_seqs, const bk_pen_ent *ent);
    /* A constraint's masks on n logits rows, in place: row rows[k] of logits
     * (.., cols) gets -inf at every id whose bit is 0 in bits[k] ((cols +
     * 31) / 32 words; id's bit is bit id % 32 of word id / 32). rows and
     * bits are backend buffers. After penalize_rows, before argmax. */
    void (*mask_rows)(backend *be, float *logits, int cols, const int32_t *rows, const uint32_t *bits, int n);
    /* Log-probabilities of n rows (bk_logprob_row's rule; sums and exps may
     * round otherwise than the host's): raw (n, cols) the rows as the model
     * computed them, rows (n) each one's logits row, whose chosen id is
     * ids[rows[k]] (argmax's, or sample_rows'); out (n). All backend
     * buffers. */
    void (*logprob_rows)(backend *be, const float *raw, int cols, const int32_t *ids, const int32_t *rows, int n,
                         int top, bk_logprobs *out);
    /* Optional (NULL: the engine samples on the host): sampling on the
     * device. For each of the n entries, out[row] (which holds that row's
     * argmax, from argmax above) becomes a draw from row `row` of in (.., cols)
     * at the entry's uniform u — the distribution of sample.h's rules
     * (temperature, top-k, top-p, min-p, logits below the largest by more
     * than 30 after temperature left out) over the row as it is. The draw
     * is the inverse of the cumulative distribution in id order (the host's
     * sampler walks it in descending probability: the same distribution, a
     * different id for the same u). Deterministic: the same row and u give
     * the same id whatever else is in the call. */
    void (*sample_rows)(backend *be, int32_t *out, const float *in, int cols, const bk_sample_row *rows, int n);
    /* A greedy verify's outcome for rows launched right behind it, before
     * the host has seen its ids (a DFlash block drafted after its verify):
     * a = the count of leading i < k[0] with ids[i] == drafts[i] (the
     * drafts accepted; k is a one-int buffer); then tok[0] = ids[a] (the
     * verify's own next token) and for each row j < n: pos[j] += a,
     * pos2[j] += a, slots[j] = the slot of entry entry[j] + a in table
     * (block_size entries a block). Work enqueued after it sees the
     * shifted rows. */
    void (*spec_shift)(backend *be, const int32_t *ids, const int32_t *drafts, const int32_t *k, int32_t *tok,
                       int32_t *pos, int32_t *pos2, const int32_t *entry, int32_t *slots, const int32_t *table,
                       int block_size, int n);
    /* Optional (NULL: buf_download, after the work launched behind it): a
     * download the host collects with download_wait while the work
     * enqueued after it runs on; dst from host_alloc (pinned host memory
     * on CUDA, where a copy into pageable memory would wait for it). */
    void *(*host_alloc)(backend *be, size_t bytes);
    void (*host_free)(backend *be, void *p);
    int (*buf_download_start)(backend *be, void *dst, const void *src, size_t bytes);
    int (*download_wait)(backend *be);
    /* Optional (NULL on the CPU): record the ops issued between graph_begin
     * and graph_end into a replayable graph (CUDA graphs). Replays read the
     * same buffers, so only their contents may change between launches.
     * graph_launch returns 1 without launching when the graph is stale (a
     * backend scratch buffer it reads has been replaced since it was
     * recorded): the caller frees it and records it again. */
    int (*graph_begin)(backend *be);
    void *(*graph_end)(backend *be); /* executable graph, NULL on failure */
    int (*graph_launch)(backend *be, void *graph); /* KS_OK, 1 = stale, or an error */
    void (*graph_free)(backend *be, void *graph);
    /* Optional (NULL: nothing to report, host memory): the device memory
     * the backend holds now, by kind; safe to call from any thread */
    void (*mem_usage)(backend *be, bk_mem *out);
    void (*free)(backend *be);
} backend_ops;

struct backend {
    const backend_ops *ops;
    void *impl;
    /* Bytes per KV cache element: 2 (bf16, the default on every backend —
     * what a bf16 checkpoint's attention sees in transformers, half the bytes
     * of f32 for decode attention and the pool) or 4 (f32, the CPU only:
     * `--kv-type f32`, what the tests against transformers' float32 outputs
     * use). Fixed before any KV is allocated; the cache buffers belong to
     * this format, and only kv_store, qk_norm_rope (storing K/V) and
     * attention read or write them. */
    int kv_elem_bytes;
    /* the kv_elem_bytes values this backend's kernels serve, as bits
     * (1 << bytes): backend_set_kv_type refuses the others */
    unsigned kv_elem_choices;
};

typedef enum { BACKEND_CPU = 0, BACKEND_CUDA } backend_kind;

/* n_threads <= 0: all cores. */
int backend_cpu_new(backend **out, int n_threads);
void backend_free(backend *be);
/* The CPU backend's kernel set ("scalar", "avx2", "avx512"). */
const char *backend_cpu_isa(const backend *be);
/* CUDA (src/backend/cuda; stubs that say so when built without nvcc). */
int backend_cuda_available(void);
int backend_cuda_new(backend **out, int device);
const char *backend_cuda_name(void);
/* device: "auto" (CUDA when a GPU is present), "cpu", "cuda", "cuda:N". */
int backend_new(backend **out, const char *device, int n_threads);
/* The KV cache format, by name: "bf16" (the default) or "f32" (CPU only);
 * call before any KV cache is allocated. */
int backend_set_kv_type(backend *be, const char *type);
/* "avx512" / "NVIDIA H200" ... for logs. */
const char *backend_describe(const backend *be);

#endif
