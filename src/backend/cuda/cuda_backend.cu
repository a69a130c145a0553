/* cuda_backend.cu — the CUDA backend behind backend.h: device buffers,
 * weights copied to the GPU once at load (fused parts made contiguous; 1-D
 * weights converted to f32; a tensor loaded twice — the tied embedding and
 * lm_head — shares one copy), and every op launched on one stream through the
 * extern "C" launchers of k_*.cu. Errors: CUDA_CHECK records the first
 * failure; ops after it are skipped and the next sync (buf_download) reports
 * it as an error status. */
#include <atomic>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

extern "C" {
#include "backend/backend.h"
#include "backend/weight_share.h"
#include "base/err.h"
}

static __thread char fail_msg[512];
static __thread int failed;

extern "C" int ks_cuda_fail(const char *what, cudaError_t e, const char *file, int line) {
    if (!failed) {
        snprintf(fail_msg, sizeof fail_msg, "CUDA error %s (%s) at %s:%d: %s", cudaGetErrorName(e),
                 cudaGetErrorString(e), file, line, what);
        failed = 1;
    }
    return -1;
}

static unsigned ws_epoch; /* advanced by every workspace growth */

/* The allocation ledger: each live device allocation's bytes and kind (a
 * free looks its size up; allocations are few — tensors, caches,
 * activation buffers — and frees rare), and the live bytes by kind, which
 * other threads read (/metrics) without a lock. */
static struct ledger_entry {
    void *p;
    size_t bytes;
    int kind;
} *ledger;
static int ledger_n, ledger_cap;
static pthread_mutex_t ledger_mu = PTHREAD_MUTEX_INITIALIZER;
static std::atomic<long long> mem_live[KS_MEM_KINDS];

extern "C" void *ks_cuda_malloc(size_t bytes, int kind) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    pthread_mutex_lock(&ledger_mu);
    if (ledger_n == ledger_cap) {
        int cap = ledger_cap ? 2 * ledger_cap : 256;
        struct ledger_entry *l = (struct ledger_entry *)realloc(ledger, (size_t)cap * sizeof *l);
        if (l) ledger = l, ledger_cap = cap;
    }
    if (ledger_n < ledger_cap) { /* else not counted (no host memory for the entry) */
        ledger[ledger_n++] = {p, bytes, kind};
        mem_live[kind] += (long long)bytes;
    }
    pthread_mutex_unlock(&ledger_mu);
    return p;
}

extern "C" void ks_cuda_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&ledger_mu);
    for (int i = ledger_n - 1; i >= 0; i--)
        if (ledger[i].p == p) {
            mem_live[ledger[i].kind] -= (long long)ledger[i].bytes;
            ledger[i] = ledger[--ledger_n];
            break;
        }
    pthread_mutex_unlock(&ledger_mu);
    cudaFree(p);
}

ks_workspace ks_prompt_ws;

extern "C" void *ks_cuda_workspace(ks_workspace *w, cudaStream_t s, size_t need, const char *what) {
    if (need <= w->bytes) return w->p;
    cudaStreamCaptureStatus cs;
    if (cudaStreamIsCapturing(s, &cs) == cudaSuccess && cs != cudaStreamCaptureStatusNone) {
        ks_cuda_fail(what, cudaErrorStreamCaptureUnsupported, __FILE__, __LINE__);
        return NULL;
    }
    ks_cuda_free(w->p); /* synchronizes the device: no queued work reads it any more */
    w->p = NULL;
    w->bytes = 0;
    ws_epoch++;
    if (!(w->p = ks_cuda_malloc(need, KS_MEM_WORKSPACE))) {
        ks_cuda_fail(what, cudaErrorMemoryAllocation, __FILE__, __LINE__);
        return NULL;
    }
    w->bytes = need;
    return w->p;
}

typedef struct {
    cudaStream_t stream;
    cudaEvent_t downloaded; /* recorded after buf_download_start's copy */
    int device;
    weight_share shared;  /* device copies, shared by weights of the same source (a tied lm_head) */
} cuda_impl;

static cuda_impl *impl_of(backend *be) { return (cuda_impl *)be->impl; }

static void *cu_alloc(backend *be, size_t bytes) {
    (void)be;
    return ks_cuda_malloc(bytes, KS_MEM_BUFFERS);
}

static void cu_free(backend *be, void *p) {
    (void)be;
    ks_cuda_free(p);
}

static void cu_mem_usage(backend *be, bk_mem *out) {
    (void)be;
    out->weights = mem_live[KS_MEM_WEIGHTS].load();
    out->buffers = mem_live[KS_MEM_BUFFERS].load();
    out->workspace = mem_live[KS_MEM_WORKSPACE].load();
}

static int cu_upload(backend *be, void *dst, const void *src, size_t bytes) {
    if (!bytes) return KS_OK;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, impl_of(be)->stream)); /* src: host or device */
    return failed ? err_set(KS_EIO, "%s", fail_msg) : KS_OK;
}

static int cu_download(backend *be, void *dst, const void *src, size_t bytes) {
    cuda_impl *im = impl_of(be);
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, im->stream));
    CUDA_CHECK(cudaStreamSynchronize(im->stream));
    return failed ? err_set(KS_EIO, "%s", fail_msg) : KS_OK;
}

static void *cu_host_alloc(backend *be, size_t bytes) {
    (void)be;
    void *p = NULL;
    return cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) == cudaSuccess ? p : NULL;
}

static void cu_host_free(backend *be, void *p) {
    (void)be;
    if (p) cudaFreeHost(p);
}

static int cu_download_start(backend *be, void *dst, const void *src, size_t bytes) {
    cuda_impl *im = impl_of(be);
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, im->stream));
    CUDA_CHECK(cudaEventRecord(im->downloaded, im->stream));
    return failed ? err_set(KS_EIO, "%s", fail_msg) : KS_OK;
}

static int cu_download_wait(backend *be) {
    CUDA_CHECK(cudaEventSynchronize(impl_of(be)->downloaded));
    return failed ? err_set(KS_EIO, "%s", fail_msg) : KS_OK;
}

static int wtype_of(dtype_t t) { return t == DTYPE_BF16 ? 2 : t == DTYPE_F16 ? 1 : 0; }

static int cu_weight_init(backend *be, bk_weight *w, const st_tensor *const *parts, int n_parts) {
    cuda_impl *im = impl_of(be);
    memset(w, 0, sizeof *w);
    if (n_parts < 1 || n_parts > BK_MAX_PARTS) return err_set(KS_EINVAL, "weight: bad part count %d", n_parts);
    for (int i = 0; i < n_parts; i++) {
        const st_tensor *t = parts[i];
        if (t->dtype != DTYPE_F32 && t->dtype != DTYPE_F16 && t->dtype != DTYPE_BF16)
            return err_set(KS_EUNSUPPORTED, "tensor \"%s\": dtype %s not supported (F32, F16, BF16)", t->name,
                           dtype_name(t->dtype));
        if (t->n_dims != 1 && t->n_dims != 2)
            return err_set(KS_EFORMAT, "tensor \"%s\": expected 1 or 2 dims, got %d", t->name, t->n_dims);
        int64_t rows = t->shape[0], cols = t->n_dims == 2 ? t->shape[1] : 1;
        if (i == 0) {
            w->dtype = t->dtype;
            w->cols = cols;
        } else if (t->dtype != w->dtype || cols != w->cols) {
            return err_set(KS_EFORMAT, "tensor \"%s\": cannot fuse with \"%s\" (dtype/shape differ)", t->name,
                           parts[0]->name);
        }
        w->part_data[i] = t->data;
        w->part_rows[i] = rows;
        w->rows += rows;
    }
    w->n_parts = n_parts;
    if ((w->impl = weight_share_find(&im->shared, w))) {
        if (w->cols == 1) w->dtype = DTYPE_F32;
        return KS_OK;
    }
    bool one_d = w->cols == 1;
    size_t es = one_d ? 4 : dtype_size(w->dtype);
    size_t bytes = (size_t)w->rows * (size_t)w->cols * es;
    void *dev = ks_cuda_malloc(bytes, KS_MEM_WEIGHTS);
    if (!dev)
        return err_set(KS_ENOMEM, "GPU out of memory loading tensor \"%s\" (%zu bytes; %zu bytes of weights loaded so far)",
                       parts[0]->name, bytes, (size_t)mem_live[KS_MEM_WEIGHTS].load());
    size_t off = 0;
    for (int i = 0; i < n_parts; i++) {
        size_t pb = (size_t)w->part_rows[i] * (size_t)w->cols * es;
        if (one_d && w->dtype != DTYPE_F32) {
            float *tmp = (float *)malloc(pb);
            if (!tmp) {
                ks_cuda_free(dev);
                return err_set(KS_ENOMEM, "out of memory");
            }
            for (int64_t j = 0; j < w->part_rows[i]; j++) tmp[j] = dtype_elem_f32(w->dtype, w->part_data[i], j);
            CUDA_CHECK(cudaMemcpy((char *)dev + off, tmp, pb, cudaMemcpyHostToDevice));
            free(tmp);
        } else {
            CUDA_CHECK(cudaMemcpy((char *)dev + off, w->part_data[i], pb, cudaMemcpyHostToDevice));
        }
        off += pb;
    }
    if (failed) {
        ks_cuda_free(dev);
        return err_set(KS_EIO, "%s", fail_msg);
    }
    w->impl = dev;
    weight_share_add(&im->shared, w); /* keyed by the source dtype */
    if (one_d) w->dtype = DTYPE_F32;
    return KS_OK;
}

static void cu_weight_release(backend *be, bk_weight *w) {
    cuda_impl *im = impl_of(be);
    if (w->impl && weight_share_release(&im->shared, w->impl)) ks_cuda_free(w->impl);
    memset(w, 0, sizeof *w);
}

#define S impl_of(be)->stream
#define SKIP_IF_FAILED() \
    if (failed) return

/* KESTREL_CUDA_PROFILE=1 (a tuning aid; run it with KESTREL_CUDA_GRAPHS=0):
 * each op outside graph capture is bracketed by CUDA events and its GPU time
 * summed per op name; the table goes to stderr when the backend is freed. */
static struct prof_row {
    const char *name;
    double ms, host_ms; /* GPU time; host time of the launches (before the sync) */
    long calls;
} prof[32];
static int prof_state = -1;

static bool prof_on(cudaStream_t s) {
    if (prof_state < 0) {
        const char *e = getenv("KESTREL_CUDA_PROFILE");
        prof_state = e && strcmp(e, "0") != 0;
    }
    cudaStreamCaptureStatus cs;
    return prof_state && cudaStreamIsCapturing(s, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone;
}

static double prof_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static void prof_add(const char *name, float ms, double host_ms) {
    for (int i = 0; i < 32; i++)
        if (!prof[i].name || !strcmp(prof[i].name, name)) {
            prof[i].name = name;
            prof[i].ms += ms;
            prof[i].host_ms += host_ms;
            prof[i].calls++;
            return;
        }
}

static void prof_print(void) {
    double total = 0;
    for (int i = 0; i < 32 && prof[i].name; i++) total += prof[i].ms;
    if (total <= 0) return;
    fprintf(stderr, "kestrel: CUDA op profile (GPU time, %.1f ms in all)\n", total);
    for (int i = 0; i < 32 && prof[i].name; i++)
        fprintf(stderr, "  %-18s %8ld calls %10.2f ms %5.1f%% %8.1f us/call (host %.1f us/call)\n", prof[i].name,
                prof[i].calls, prof[i].ms, 100.0 * prof[i].ms / total, 1000.0 * prof[i].ms / prof[i].calls,
                1000.0 * prof[i].host_ms / prof[i].calls);
}

#define PROF(be, name, body)                                      \
    do {                                                          \
        cudaStream_t _s = S;                                      \
        if (!prof_on(_s)) {                                       \
            body;                                                 \
            break;                                                \
        }                                                         \
        cudaEvent_t _a, _b;                                       \
        cudaEventCreate(&_a);                                     \
        cudaEventCreate(&_b);                                     \
        cudaEventRecord(_a, _s);                                  \
        double _h = prof_now_ms();                                \
        body;                                                     \
        _h = prof_now_ms() - _h;                                  \
        cudaEventRecord(_b, _s);                                  \
        cudaEventSynchronize(_b);                                 \
        float _ms = 0;                                            \
        cudaEventElapsedTime(&_ms, _a, _b);                       \
        prof_add(name, _ms, _h);                                  \
        cudaEventDestroy(_a);                                     \
        cudaEventDestroy(_b);                                     \
    } while (0)

static void cu_embed(backend *be, float *out, const bk_weight *t, const int32_t *ids, int n) {
    SKIP_IF_FAILED();
    PROF(be, "embed", ks_cuda_embed(S, out, t->impl, wtype_of(t->dtype), ids, n, (int)t->cols));
}
static void cu_rmsnorm(backend *be, float *out, int os, const float *in, int is, const bk_weight *w, int n, int nh,
                       int dim, float eps) {
    SKIP_IF_FAILED();
    PROF(be, "rmsnorm", ks_cuda_rmsnorm(S, out, os, in, is, (const float *)w->impl, n, nh, dim, eps));
}
static void cu_matmul(backend *be, float *out, const float *in, const bk_weight *w, const bk_weight *bias, int n) {
    SKIP_IF_FAILED();
    PROF(be, n == 1 ? "matmul n=1" : "matmul n>1",
         ks_cuda_matmul(S, out, in, w->impl, wtype_of(w->dtype), bias ? (const float *)bias->impl : NULL, n,
                        (int)w->cols, (int)w->rows));
}
/* prompt rows: tensor-core GEMM, or the vector kernel where it cannot */
static void cu_matmul_prompt(backend *be, float *out, const float *in, const bk_weight *norm, float eps,
                             const bk_weight *w, const bk_weight *bias, int n, int mode) {
    SKIP_IF_FAILED();
    static_assert((int)BK_MM_SWIGLU_IN == (int)KS_MM_SWIGLU_IN, "one set of modes");
    PROF(be, mode & BK_MM_SWIGLU_IN ? "gemm (prompt, swiglu in)" : mode & BK_MM_ADD ? "gemm (prompt, add)" : "gemm (prompt)",
         ks_cuda_matmul_prompt(S, out, in, norm ? (const float *)norm->impl : NULL, eps, w->impl, wtype_of(w->dtype),
                               bias ? (const float *)bias->impl : NULL, n, (int)w->cols, (int)w->rows, mode));
}
static void cu_rope(backend *be, float *x, int stride, int n, int nh, int hd, const int32_t *pos, const float *inv) {
    SKIP_IF_FAILED();
    PROF(be, "rope", ks_cuda_rope(S, x, stride, n, nh, hd, pos, inv));
}
static void cu_kv_store(backend *be, void *kc, void *vc, const float *k, const float *v, int stride,
                        const bk_attn_batch *ab, int kv_dim) {
    SKIP_IF_FAILED();
    PROF(be, "kv_store", ks_cuda_kv_store(S, kc, vc, k, v, stride, ab->slots, ab->n_tokens, kv_dim));
}
static void cu_attention(backend *be, float *out, const float *q, int qs, const void *kc, const void *vc,
                         const bk_attn_batch *ab, int nh, int nkv, int hd, float scale) {
    SKIP_IF_FAILED();
    int np = ab->n_prompt; /* prompt rows: the tensor-core kernel; the rest: flash-decoding */
    if (np > 0)
        PROF(be, "attention (prompt)",
             if (ks_cuda_attention_prompt(S, out, q, qs, kc, vc, ab->tiles, ab->max_tiles, ab->pos, ab->seq,
                                          ab->block_tables, ab->max_blocks, ab->block_size, nh, nkv, hd, scale,
                                          ab->max_pos) != 0)
                 np = 0);
    if (np < ab->n_tokens)
        PROF(be, "attention",
             ks_cuda_attention(S, out + (size_t)np * nh * hd, q + (size_t)np * qs, qs, kc, vc, ab->pos + np,
                               ab->seq + np, ab->block_tables, ab->max_blocks, ab->block_size, ab->n_tokens - np, nh,
                               nkv, hd, scale, ab->kv_capacity));
}
static void cu_matmul_fused(backend *be, float *out, const float *in, const bk_weight *norm, float eps,
                            const bk_weight *w, const bk_weight *bias, int n, int mode) {
    SKIP_IF_FAILED();
    static_assert((int)BK_MM_ADD == (int)KS_MM_ADD && (int)BK_MM_SWIGLU == (int)KS_MM_SWIGLU, "one set of modes");
    PROF(be, mode == BK_MM_SWIGLU ? "matmul_fused swiglu" : mode == BK_MM_ADD ? "matmul_fused add" : "matmul_fused",
         ks_cuda_matmul_fused(S, out, in, norm ? (const float *)norm->impl : NULL, eps, w->impl, wtype_of(w->dtype),
                              bias ? (const float *)bias->impl : NULL, n, (int)w->cols, (int)w->rows, mode));
}
static void cu_matmul_fused_side(backend *be, float *out, const float *in, const bk_weight *norm, float eps,
                                 const bk_weight *w, const bk_weight *bias, int n, float *out2, const bk_weight *w2,
                                 bool add2) {
    SKIP_IF_FAILED();
    PROF(be, "matmul_fused side",
         ks_cuda_matmul_fused_side(S, out, in, norm ? (const float *)norm->impl : NULL, eps, w->impl,
                                   wtype_of(w->dtype), bias ? (const float *)bias->impl : NULL, n, (int)w->cols,
                                   (int)w->rows, out2, w2->impl, wtype_of(w2->dtype), (int)w2->cols, (int)w2->rows, add2));
}
static void cu_silu_mul(backend *be, float *out, const float *gu, int n, int dim) {
    SKIP_IF_FAILED();
    PROF(be, "silu_mul", ks_cuda_silu_mul(S, out, gu, n, dim));
}
static void cu_add(backend *be, float *x, const float *y, size_t n) {
    SKIP_IF_FAILED();
    PROF(be, "add", ks_cuda_add(S, x, y, (long long)n));
}
static void cu_qk_norm_rope(backend *be, float *qkv, int stride, int n, int nh, int nkv, int hd, const bk_weight *qn,
                            const bk_weight *kn, float eps, const int32_t *pos, const float *inv, void *kc, void *vc,
                            const bk_attn_batch *ab) {
    SKIP_IF_FAILED();
    PROF(be, "qk_norm_rope",
         ks_cuda_qk_norm_rope(S, qkv, stride, n, nh, nkv, hd, qn ? (const float *)qn->impl : NULL,
                              kn ? (const float *)kn->impl : NULL, eps, pos, inv, kc, vc, kc ? ab->slots : NULL));
}
static void cu_gather(backend *be, float *out, const float *in, const int32_t *idx, int n, int dim) {
    SKIP_IF_FAILED();
    PROF(be, "gather", ks_cuda_gather_rows(S, out, in, idx, n, dim));
}

static void cu_mtp_input(backend *be, float *out, const bk_weight *t, const int32_t *ids, const float *hid,
                         const int32_t *idx, const bk_weight *we, const bk_weight *wh, int n, int dim, float eps) {
    SKIP_IF_FAILED();
    PROF(be, "mtp_input",
         ks_cuda_mtp_input(S, out, t->impl, wtype_of(t->dtype), ids, hid, idx, (const float *)we->impl,
                           (const float *)wh->impl, n, dim, eps));
}

static void cu_argmax(backend *be, int32_t *out, const float *in, int n, int cols) {
    SKIP_IF_FAILED();
    PROF(be, "argmax", ks_cuda_argmax(S, out, in, n, cols));
}

static void cu_penalize_rows(backend *be, float *logits, int cols, int n_rows, const int32_t *tokens,
                             const int32_t *rows, const bk_pen_seq *seqs, int n_seqs, const bk_pen_ent *ent) {
    SKIP_IF_FAILED();
    PROF(be, "penalize_rows", ks_cuda_penalize_rows(S, logits, cols, n_rows, tokens, rows, seqs, n_seqs, ent));
}

static void cu_mask_rows(backend *be, float *logits, int cols, const int32_t *rows, const uint32_t *bits, int n) {
    SKIP_IF_FAILED();
    PROF(be, "mask_rows", ks_cuda_mask_rows(S, logits, cols, rows, bits, n));
}

static void cu_logprob_rows(backend *be, const float *raw, int cols, const int32_t *ids, const int32_t *rows, int n,
                            int top, bk_logprobs *out) {
    SKIP_IF_FAILED();
    PROF(be, "logprob_rows", ks_cuda_logprob_rows(S, raw, cols, ids, rows, n, top, out));
}

static void cu_sample_rows(backend *be, int32_t *out, const float *in, int cols, const bk_sample_row *rows, int n) {
    SKIP_IF_FAILED();
    PROF(be, "sample_rows", ks_cuda_sample_rows(S, out, in, cols, rows, n));
}

static void cu_spec_shift(backend *be, const int32_t *ids, const int32_t *drafts, const int32_t *k, int32_t *tok,
                          int32_t *pos, int32_t *pos2, const int32_t *entry, int32_t *slots, const int32_t *table,
                          int block_size, int n) {
    SKIP_IF_FAILED();
    PROF(be, "spec_shift", ks_cuda_spec_shift(S, ids, drafts, k, tok, pos, pos2, entry, slots, table, block_size, n));
}

static int cu_graph_begin(backend *be) {
    SKIP_IF_FAILED() err_set(KS_EIO, "%s", fail_msg);
    CUDA_CHECK(cudaStreamBeginCapture(S, cudaStreamCaptureModeThreadLocal));
    return failed ? err_set(KS_EIO, "%s", fail_msg) : KS_OK;
}

/* an executable graph and the workspace epoch it was recorded under */
typedef struct {
    cudaGraphExec_t exec;
    unsigned epoch;
} cu_graph;

static void *cu_graph_end(backend *be) {
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    cudaError_t e = cudaStreamEndCapture(S, &g);
    if (e != cudaSuccess || failed || !g) {
        cudaGetLastError();
        if (g) cudaGraphDestroy(g);
        return NULL;
    }
    e = cudaGraphInstantiate(&ge, g, 0);
    cudaGraphDestroy(g);
    cu_graph *cg = e == cudaSuccess ? (cu_graph *)malloc(sizeof *cg) : NULL;
    if (!cg) {
        cudaGetLastError();
        if (ge) cudaGraphExecDestroy(ge);
        return NULL;
    }
    cg->exec = ge;
    cg->epoch = ws_epoch;
    return cg;
}

static int cu_graph_launch(backend *be, void *graph) {
    SKIP_IF_FAILED() err_set(KS_EIO, "%s", fail_msg);
    cu_graph *cg = (cu_graph *)graph;
    if (cg->epoch != ws_epoch) return 1; /* a workspace it reads was replaced since */
    CUDA_CHECK(cudaGraphLaunch(cg->exec, S));
    return failed ? err_set(KS_EIO, "%s", fail_msg) : KS_OK;
}

static void cu_graph_free(backend *be, void *graph) {
    (void)be;
    cu_graph *cg = (cu_graph *)graph;
    if (!cg) return;
    cudaGraphExecDestroy(cg->exec);
    free(cg);
}

static void cu_backend_free(backend *be) {
    cuda_impl *im = impl_of(be);
    prof_print();
    if (im) {
        for (int i = 0; i < im->shared.n; i++) ks_cuda_free(im->shared.e[i].impl); /* weights never released */
        weight_share_free(&im->shared);
        cudaEventDestroy(im->downloaded);
        cudaStreamDestroy(im->stream);
        free(im);
    }
    free(be);
}

static const backend_ops cuda_ops = {
    .name = "cuda",
    .buf_alloc = cu_alloc,
    .buf_free = cu_free,
    .buf_upload = cu_upload,
    .buf_download = cu_download,
    .weight_init = cu_weight_init,
    .weight_release = cu_weight_release,
    .embed = cu_embed,
    .rmsnorm = cu_rmsnorm,
    .matmul = cu_matmul,
    .matmul_prompt = cu_matmul_prompt,
    .rope = cu_rope,
    .kv_store = cu_kv_store,
    .attention = cu_attention,
    .silu_mul = cu_silu_mul,
    .matmul_fused = cu_matmul_fused,
    .matmul_fused_side = cu_matmul_fused_side,
    .add = cu_add,
    .qk_norm_rope = cu_qk_norm_rope,
    .gather_rows = cu_gather,
    .mtp_input = cu_mtp_input,
    .argmax = cu_argmax,
    .penalize_rows = cu_penalize_rows,
    .mask_rows = cu_mask_rows,
    .logprob_rows = cu_logprob_rows,
    .sample_rows = cu_sample_rows,
    .spec_shift = cu_spec_shift,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .buf_download_start = cu_download_start,
    .download_wait = cu_download_wait,
    .graph_begin = cu_graph_begin,
    .graph_end = cu_graph_end,
    .graph_launch = cu_graph_launch,
    .graph_free = cu_graph_free,
    .mem_usage = cu_mem_usage,
    .free = cu_backend_free,
};

static int pdl_state = -1, cc_major = -1; /* -1: not yet decided */

extern "C" int ks_cuda_cc_major(void) {
    if (cc_major < 0) {
        int dev = 0, major = 0;
        cudaGetDevice(&dev);
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
            cudaGetLastError();
            major = 0;
        }
        cc_major = major;
    }
    return cc_major;
}

extern "C" int ks_cuda_pdl(void) {
    if (pdl_state < 0) {
        const char *e = getenv("KESTREL_CUDA_PDL");
        pdl_state = ks_cuda_cc_major() >= 9 && !(e && !strcmp(e, "0"));
    }
    return pdl_state;
}

extern "C" int backend_cuda_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n > 0;
}

extern "C" int backend_cuda_new(backend **out, int device) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        return err_set(KS_EUNSUPPORTED, "--device cuda: no CUDA GPU available (%s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (device < 0 || device >= n) return err_set(KS_EINVAL, "--device cuda: GPU %d does not exist (%d found)", device, n);
    backend *be = (backend *)calloc(1, sizeof *be);
    cuda_impl *im = (cuda_impl *)calloc(1, sizeof *im);
    if (!be || !im) {
        free(be);
        free(im);
        return err_set(KS_ENOMEM, "out of memory");
    }
    failed = 0;
    if (cudaSetDevice(device) != cudaSuccess || cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&im->downloaded, cudaEventDisableTiming) != cudaSuccess) {
        free(be);
        free(im);
        return err_set(KS_EIO, "--device cuda: cannot initialise GPU %d", device);
    }
    im->device = device;
    be->ops = &cuda_ops;
    be->impl = im;
    be->kv_elem_bytes = 2;
    be->kv_elem_choices = 1u << 2; /* the kernels read bf16 caches */
    *out = be;
    return KS_OK;
}

extern "C" const char *backend_cuda_name(void) {
    static char name[256];
    cudaDeviceProp p;
    int dev = 0;
    cudaGetDevice(&dev);
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return "cuda";
    snprintf(name, sizeof name, "%s", p.name);
    return name;
}
