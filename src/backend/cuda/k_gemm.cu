/* k_gemm.cu — matmuls of prompt rows on the tensor cores, through cuBLASLt:
 *   out (n, rows) f32 = x (n, k) @ W^T (+ bias f32 (rows))
 * (g != NULL: x's rows are RMSNorm(x) * g first, normalised straight into
 * the staging; modes: KS_MM_ADD: out += the product, in the GEMM's epilogue
 * (beta 1); KS_MM_SWIGLU_IN: x is (n, 2k) [gate | up] and the product's
 * input is silu(gate) * up, formed while staging — the MLP's down
 * projection with no activation buffer and no separate pass.)
 * x is rounded to W's 16-bit type (bf16 or f16) into a staging buffer; the
 * product accumulates in fp32 (CUBLAS_COMPUTE_32F). In cuBLASLt's
 * column-major terms: D (rows x n, ld rows) = op_T(A: k x rows, ld k) *
 * B (k x n, ld k) (+ C = D), which is out row-major.
 *
 * Row invariance (DESIGN.md principle 2): a row's sum must not depend on
 * how many rows share the call. Each weight shape has a reference
 * algorithm, the heuristic's first for GEMM_REF_M rows, which calls of more
 * than 512 rows use (timing its other candidates picked slower ones for
 * long prompts: 0.72-0.91x prefill on the H200). That algorithm has few
 * CTAs at a few rows (Qwen3-8B: 42 us for a 19-row qkv that reads its
 * weights in 13), so calls of <= 64, <= 128, <= 256 and <= 512 rows take
 * the heuristic's first for 32, 128, 256 and 512 rows instead (an
 * algorithm chosen for 256 rows runs 268 as two tiles of 256: Qwen3-8B's
 * TTFT at 268 tokens gained 3% where 256 rows gained 1.7x) — or its next,
 * and so on — where its outputs are bitwise the reference's (checked once,
 * at the shape's first call, on the shape's own weights and hashed inputs
 * at the tier's probe and largest row counts: pick_tiers); a candidate
 * that differs anywhere (a split k, another accumulation order) is never
 * used. No timing: the choice is the
 * same on every run of one GPU and cuBLASLt, and so are the rows' bits.
 * The CUDA tests check the invariance bitwise (n = 1 .. 513 against one
 * call of 700).
 *
 * cuBLASLt is opened at run time (dlopen): the binary links only the static
 * CUDA runtime and starts where no CUDA library is installed. Without it,
 * or for f32 weights, ks_cuda_matmul_prompt takes the vector kernels for
 * those rows (the same choice for every call). */
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#if __has_include(<cublasLt.h>)
#include <cublasLt.h>
#define KS_HAVE_LT 1
#endif

__device__ __forceinline__ void store2(__nv_bfloat16 *p, float2 v) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(v.x, v.y);
}
__device__ __forceinline__ void store2(__half *p, float2 v) {
    *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(v.x, v.y);
}
__device__ __forceinline__ void store1(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store1(__half *p, float v) { *p = __float2half_rn(v); }

/* out = in rounded to T (round to nearest even), two elements per step */
template <typename T>
__global__ void k_to_16(T *__restrict__ out, const float *in, long long n) { /* in: the kernel before's output */
    pdl_start();
    long long step = (long long)gridDim.x * blockDim.x * 2;
    for (long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * 2; i < n; i += step) {
        if (i + 1 < n) store2(out + i, *reinterpret_cast<const float2 *>(in + i));
        else store1(out + i, in[i]);
    }
}

/* out (n, k) = silu(gu[:, :k]) * gu[:, k:] rounded to T; k even */
template <typename T>
__global__ void k_swiglu_to_16(T *__restrict__ out, const float *gu, int n, int k) { /* gu: the kernel before's output */
    pdl_start();
    long long cnt = (long long)n * k, step = (long long)gridDim.x * blockDim.x * 2;
    for (long long i = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * 2; i < cnt; i += step) {
        long long r = i / k, c = i % k;
        float2 g = *reinterpret_cast<const float2 *>(gu + r * 2 * k + c),
               u = *reinterpret_cast<const float2 *>(gu + r * 2 * k + k + c);
        store2(out + i, make_float2(silu_mul_f(g.x, u.x), silu_mul_f(g.y, u.y)));
    }
}

/* x (n, k) 16-bit values in [-1, 1) from a hash of the index: the tiers'
 * probe input (pick_tiers) */
template <typename T>
__global__ void k_probe_fill(T *__restrict__ x, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        store1(x + i, ks_hash_unit(i, 0));
}

/* *differs |= 1 where a and b (n words) are not bitwise equal */
__global__ void k_words_differ(const unsigned *a, const unsigned *b, long long n, unsigned *differs) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        if (a[i] != b[i]) *differs = 1;
}

#ifdef KS_HAVE_LT

#define GEMM_REF_M 4096
#define GEMM_WS_BYTES (32u << 20)
#define GEMM_MAX_SHAPES 64
/* row tiers: calls of <= tier_rows[t] rows take algo[t], the heuristic's
 * choice for tier_probe[t] rows; the last tier is the reference algorithm */
#define GEMM_TIERS 5
static const int tier_rows[GEMM_TIERS - 1] = {64, 128, 256, 512}, tier_probe[GEMM_TIERS - 1] = {32, 128, 256, 512};
#define GEMM_PROBE_MAX 512
#define GEMM_CANDS 8

static struct {
    int tried, ok;
    void *lib;
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtMatmulDescCreate) desc_create;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set;
    decltype(&cublasLtMatrixLayoutCreate) layout_create;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
    decltype(&cublasLtMatmul) matmul;
    cublasLtHandle_t h;
    struct {
        int rows, k, wtype, bias, ok, picked;
        cublasLtMatmulDesc_t desc;
        cublasLtMatmulAlgo_t algo[GEMM_TIERS]; /* by row tier; [GEMM_TIERS - 1] the reference */
    } shapes[GEMM_MAX_SHAPES];
    int n_shapes;
} lt;

static void *sym(const char *name) { return dlsym(lt.lib, name); }

/* Opens cuBLASLt once: the toolkit's (path baked in at build time when
 * known), then the loader's search path. */
static int lt_open(void) {
    if (lt.tried) return lt.ok;
    lt.tried = 1;
    const char *names[] = {
#ifdef KS_CUBLASLT_DIR
        KS_CUBLASLT_DIR "/libcublasLt.so.13", KS_CUBLASLT_DIR "/libcublasLt.so.12", KS_CUBLASLT_DIR "/libcublasLt.so",
#endif
        "libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lt.lib; i++) lt.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lt.lib) {
        fprintf(stderr, "kestrel: cuBLASLt not found (%s); prompt matmuls use the vector kernel\n", dlerror());
        return 0;
    }
    lt.create = (decltype(lt.create))sym("cublasLtCreate");
    lt.desc_create = (decltype(lt.desc_create))sym("cublasLtMatmulDescCreate");
    lt.desc_set = (decltype(lt.desc_set))sym("cublasLtMatmulDescSetAttribute");
    lt.layout_create = (decltype(lt.layout_create))sym("cublasLtMatrixLayoutCreate");
    lt.layout_destroy = (decltype(lt.layout_destroy))sym("cublasLtMatrixLayoutDestroy");
    lt.pref_create = (decltype(lt.pref_create))sym("cublasLtMatmulPreferenceCreate");
    lt.pref_set = (decltype(lt.pref_set))sym("cublasLtMatmulPreferenceSetAttribute");
    lt.pref_destroy = (decltype(lt.pref_destroy))sym("cublasLtMatmulPreferenceDestroy");
    lt.heuristic = (decltype(lt.heuristic))sym("cublasLtMatmulAlgoGetHeuristic");
    lt.matmul = (decltype(lt.matmul))sym("cublasLtMatmul");
    if (!lt.create || !lt.desc_create || !lt.desc_set || !lt.layout_create || !lt.layout_destroy || !lt.pref_create ||
        !lt.pref_set || !lt.pref_destroy || !lt.heuristic || !lt.matmul || lt.create(&lt.h) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "kestrel: cuBLASLt could not be initialised; prompt matmuls use the vector kernel\n");
        return 0;
    }
    lt.ok = 1;
    return 1;
}

static cudaDataType_t dt_of(int wtype) { return wtype == 2 ? CUDA_R_16BF : CUDA_R_16F; }

/* The three layouts of shape si at m rows — A the weights (k x rows, ld k),
 * B x (k x m), C = D out (rows x m, fp32) — in l[3]; 0 when one fails
 * (the made ones still go to layouts_free) */
static int layouts_of(int si, int m, cublasLtMatrixLayout_t l[3]) {
    int rows = lt.shapes[si].rows, k = lt.shapes[si].k;
    cudaDataType_t dt = dt_of(lt.shapes[si].wtype);
    l[0] = l[1] = l[2] = NULL;
    return lt.layout_create(&l[0], dt, k, rows, k) == CUBLAS_STATUS_SUCCESS &&
           lt.layout_create(&l[1], dt, k, m, k) == CUBLAS_STATUS_SUCCESS &&
           lt.layout_create(&l[2], CUDA_R_32F, rows, m, rows) == CUBLAS_STATUS_SUCCESS;
}

static void layouts_free(cublasLtMatrixLayout_t l[3]) {
    for (int i = 0; i < 3; i++)
        if (l[i]) lt.layout_destroy(l[i]);
}

/* cuBLASLt's first (up to) max candidates for shape si at m rows; their count */
static int heuristic_at(int si, int m, cublasLtMatmulHeuristicResult_t *res, int max) {
    cublasLtMatrixLayout_t l[3];
    cublasLtMatmulPreference_t pref = NULL;
    int ok = layouts_of(si, m, l) && lt.pref_create(&pref) == CUBLAS_STATUS_SUCCESS;
    uint64_t wsb = GEMM_WS_BYTES;
    ok = ok && lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb) == CUBLAS_STATUS_SUCCESS;
    int nres = 0;
    ok = ok && lt.heuristic(lt.h, lt.shapes[si].desc, l[0], l[1], l[2], l[2], pref, max, res, &nres) ==
                   CUBLAS_STATUS_SUCCESS;
    layouts_free(l);
    if (pref) lt.pref_destroy(pref);
    return ok ? nres : 0;
}

/* The shape's descriptor and reference algorithm (chosen for GEMM_REF_M
 * rows, every tier's until pick_tiers runs); -1 when cuBLASLt has none. */
static int shape_of(int rows, int k, int wtype, int bias) {
    for (int i = 0; i < lt.n_shapes; i++)
        if (lt.shapes[i].rows == rows && lt.shapes[i].k == k && lt.shapes[i].wtype == wtype && lt.shapes[i].bias == bias)
            return lt.shapes[i].ok ? i : -1;
    if (lt.n_shapes == GEMM_MAX_SHAPES) return -1;
    int i = lt.n_shapes++;
    memset(&lt.shapes[i], 0, sizeof lt.shapes[i]);
    lt.shapes[i].rows = rows;
    lt.shapes[i].k = k;
    lt.shapes[i].wtype = wtype;
    lt.shapes[i].bias = bias;
    cublasLtMatmulDesc_t d = NULL;
    int ok = lt.desc_create(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    ok = ok && lt.desc_set(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS;
    ok = ok && lt.desc_set(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS;
    if (ok && bias) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = CUDA_R_32F;
        ok = lt.desc_set(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep) == CUBLAS_STATUS_SUCCESS &&
             lt.desc_set(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt) == CUBLAS_STATUS_SUCCESS;
    }
    lt.shapes[i].desc = d;
    cublasLtMatmulHeuristicResult_t res;
    if (!ok || heuristic_at(i, GEMM_REF_M, &res, 1) < 1) {
        fprintf(stderr, "kestrel: cuBLASLt has no algorithm for %d x %d; those prompt matmuls use the vector kernel\n",
                rows, k);
        return -1;
    }
    for (int t = 0; t < GEMM_TIERS; t++) lt.shapes[i].algo[t] = res.algo;
    lt.shapes[i].ok = 1;
    return i;
}

/* out (n, rows) (beta 1: +)= x16 (n, k) @ w^T with algorithm a of shape si */
static cublasStatus_t lt_matmul(int si, const cublasLtMatmulAlgo_t *a, float beta, const void *w, const void *x16,
                                float *out, int n, void *ws, ks_stream s) {
    cublasLtMatrixLayout_t l[3];
    float alpha = 1.f; /* C = D = out */
    cublasStatus_t st = CUBLAS_STATUS_NOT_INITIALIZED;
    if (layouts_of(si, n, l))
        st = lt.matmul(lt.h, lt.shapes[si].desc, &alpha, w, l[0], x16, l[1], &beta, out, l[2], out, l[2], a, ws,
                       GEMM_WS_BYTES, s);
    layouts_free(l);
    return st;
}

/* 1 where algorithm a's first n rows of shape si are bitwise ref's (x16's
 * first n rows through w; out: scratch of n rows, differs: one device word) */
static int same_rows(int si, const cublasLtMatmulAlgo_t *a, const void *w, const void *x16, const float *ref,
                     float *out, int n, void *ws, unsigned *differs, ks_stream s) {
    long long words = (long long)n * lt.shapes[si].rows;
    unsigned h = 1;
    cudaMemsetAsync(differs, 0, 4, s);
    cudaMemsetAsync(out, 0xff, (size_t)words * 4, s); /* a row it does not write differs */
    if (lt_matmul(si, a, 0.f, w, x16, out, n, ws, s) != CUBLAS_STATUS_SUCCESS) return 0;
    k_words_differ<<<256, 256, 0, s>>>((const unsigned *)ref, (const unsigned *)out, words, differs);
    return cudaMemcpyAsync(&h, differs, 4, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
           cudaStreamSynchronize(s) == cudaSuccess && h == 0;
}

/* The row tiers' algorithms of shape si (see the top of the file), on its
 * weights w (and bias: the descriptor's epilogue reads it). Scratch is
 * allocated and freed here; any failure leaves the reference in a tier.
 * Synchronizes the stream. */
static void pick_tiers(int si, const void *w, const float *bias, ks_stream s) {
    int rows = lt.shapes[si].rows, k = lt.shapes[si].k, wtype = lt.shapes[si].wtype;
    lt.shapes[si].picked = 1;
    size_t xb = ((size_t)GEMM_PROBE_MAX * k * 2 + 255) / 256 * 256, ob = (size_t)GEMM_PROBE_MAX * rows * 4;
    char *scratch = (char *)ks_cuda_malloc(xb + 2 * ob + 256 + GEMM_WS_BYTES, KS_MEM_WORKSPACE);
    if (!scratch) { /* only speed is lost */
        fprintf(stderr, "kestrel: no room for the GEMM tier check of %d x %d; its short prompt chunks use the "
                        "reference algorithm\n", rows, k);
        return;
    }
    void *x16 = scratch, *ws = scratch + xb + 2 * ob + 256;
    float *ref = (float *)(scratch + xb), *out = (float *)(scratch + xb + ob);
    unsigned *differs = (unsigned *)(scratch + xb + 2 * ob);
    if (bias) lt.desc_set(lt.shapes[si].desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    long long nx = (long long)GEMM_PROBE_MAX * k;
    if (wtype == 2) k_probe_fill<__nv_bfloat16><<<256, 256, 0, s>>>((__nv_bfloat16 *)x16, nx);
    else k_probe_fill<__half><<<256, 256, 0, s>>>((__half *)x16, nx);
    const cublasLtMatmulAlgo_t *ra = &lt.shapes[si].algo[GEMM_TIERS - 1];
    int pick[GEMM_TIERS - 1];
    for (int t = 0; t < GEMM_TIERS - 1; t++) pick[t] = -1;
    if (lt_matmul(si, ra, 0.f, w, x16, ref, GEMM_PROBE_MAX, ws, s) == CUBLAS_STATUS_SUCCESS)
        for (int t = 0; t < GEMM_TIERS - 1; t++) {
            cublasLtMatmulHeuristicResult_t res[GEMM_CANDS];
            int nc = heuristic_at(si, tier_probe[t], res, GEMM_CANDS);
            for (int c = 0; c < nc && pick[t] < 0; c++)
                if (same_rows(si, &res[c].algo, w, x16, ref, out, tier_probe[t], ws, differs, s) &&
                    same_rows(si, &res[c].algo, w, x16, ref, out, tier_rows[t], ws, differs, s)) {
                    pick[t] = c;
                    lt.shapes[si].algo[t] = res[c].algo;
                }
        }
    /* each tier's algorithm once more at a few sizes, with beta 0 and 1: a
     * kernel variant is loaded at its first launch (CUDA's lazy loading), and
     * cuBLASLt may launch another variant for the source read of beta 1 or
     * another size — outside the request that would otherwise pay for it */
    for (int t = 0; t < GEMM_TIERS; t++) { /* a tier's smallest, middle and largest row counts */
        int lo = t ? tier_rows[t - 1] + 1 : 1, hi = t < GEMM_TIERS - 1 ? tier_rows[t] : GEMM_PROBE_MAX;
        if (t == GEMM_TIERS - 1) lo = hi;
        const int sizes[3] = {lo, (lo + hi) / 2, hi};
        for (int j = 0; j < 3; j++)
            for (int beta = 0; beta < 2; beta++)
                lt_matmul(si, &lt.shapes[si].algo[t], (float)beta, w, x16, out, sizes[j], ws, s);
    }
    cudaStreamSynchronize(s);
    cudaGetLastError(); /* a candidate that failed to launch is simply not used */
    ks_cuda_free(scratch);
    if (getenv("KESTREL_CUDA_PROFILE")) {
        fprintf(stderr, "kestrel: gemm %d x %d, the heuristic's candidate per tier (-1: the reference):", rows, k);
        for (int t = 0; t < GEMM_TIERS - 1; t++)
            fprintf(stderr, " <= %d rows %d (for %d)", tier_rows[t], pick[t], tier_probe[t]);
        fprintf(stderr, "\n");
    }
}

/* the GEMM, or -1 where cuBLASLt cannot serve the shape */
static int gemm(ks_stream s, float *out, const float *x, const float *g, float eps, const void *w, int wtype,
                const float *bias, int n, int k, int rows, int mode) {
    if (wtype == 0 || k % 8 || rows % 4 || !lt_open()) return -1;
    int si = shape_of(rows, k, wtype, bias != NULL);
    if (si < 0) return -1;
    cudaStreamCaptureStatus cs;
    if (!lt.shapes[si].picked && cudaStreamIsCapturing(s, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusNone)
        pick_tiers(si, w, bias, s);
    size_t need = ((size_t)n * k * 2 + 255) / 256 * 256; /* x in 16-bit, then cuBLASLt's scratch */
    char *stage = (char *)ks_cuda_workspace(&ks_prompt_ws, s, need + GEMM_WS_BYTES, "gemm staging");
    if (!stage) return 0;
    long long cnt = (long long)n * k;
    int blocks = (int)((cnt / 2 + 255) / 256);
    if (blocks > 4096) blocks = 4096;
    bool sw = mode & KS_MM_SWIGLU_IN;
    if (g)
        ks_cuda_rmsnorm_16(s, stage, wtype, x, g, n, k, eps);
    else if (wtype == 2 && sw)
        ks_launch(k_swiglu_to_16<__nv_bfloat16>, blocks, 256, 0, s, (__nv_bfloat16 *)stage, x, n, k);
    else if (sw)
        ks_launch(k_swiglu_to_16<__half>, blocks, 256, 0, s, (__half *)stage, x, n, k);
    else if (wtype == 2)
        ks_launch(k_to_16<__nv_bfloat16>, blocks, 256, 0, s, (__nv_bfloat16 *)stage, x, cnt);
    else
        ks_launch(k_to_16<__half>, blocks, 256, 0, s, (__half *)stage, x, cnt);
    CUDA_CHECK_LAUNCH();
    if (bias && lt.desc_set(lt.shapes[si].desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias) !=
                    CUBLAS_STATUS_SUCCESS) {
        ks_cuda_fail("gemm: bias pointer", cudaErrorUnknown, __FILE__, __LINE__);
        return 0;
    }
    int t = 0;
    while (t < GEMM_TIERS - 1 && n > tier_rows[t]) t++;
    cublasStatus_t st = lt_matmul(si, &lt.shapes[si].algo[t], mode & KS_MM_ADD ? 1.f : 0.f, w, stage, out, n,
                                  stage + need, s);
    if (st != CUBLAS_STATUS_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "cublasLtMatmul status %d (%d x %d, %d rows)", (int)st, rows, k, n);
        ks_cuda_fail(what, cudaErrorUnknown, __FILE__, __LINE__);
    }
    return 0;
}

#else /* no cublasLt.h at build time */

static int gemm(ks_stream s, float *out, const float *x, const float *g, float eps, const void *w, int wtype,
                const float *bias, int n, int k, int rows, int mode) {
    (void)s; (void)out; (void)x; (void)g; (void)eps; (void)w; (void)wtype; (void)bias; (void)n; (void)k; (void)rows;
    (void)mode;
    return -1;
}

#endif

static ks_workspace act_ws; /* the vector path's silu(gate) * up rows */

extern "C" void ks_cuda_matmul_prompt(ks_stream s, float *out, const float *x, const float *g, float eps,
                                      const void *w, int wtype, const float *bias, int n, int k, int rows, int mode) {
    if (n <= 0 || gemm(s, out, x, g, eps, w, wtype, bias, n, k, rows, mode) == 0) return;
    if (mode & KS_MM_SWIGLU_IN) {
        float *act = (float *)ks_cuda_workspace(&act_ws, s, (size_t)n * k * 4, "prompt matmul input");
        if (!act) return;
        ks_cuda_silu_mul(s, act, x, n, k);
        x = act;
    }
    ks_cuda_matmul_fused(s, out, x, g, eps, w, wtype, bias, n, k, rows, mode & KS_MM_ADD);
}
