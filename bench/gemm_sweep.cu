/* gemm_sweep.cu — which cuBLASLt algorithms serve a prompt chunk of a few
 * rows as well as one of thousands, for the prompt path's GEMMs (k_gemm.cu
 * picks one algorithm per weight shape, the heuristic's first for 4,096
 * rows, and uses it for every row count: a row's bits never depend on the
 * chunk). For each Qwen3-8B prompt GEMM shape (out (n, rows) f32 = x (n, k)
 * bf16 @ W (rows, k) bf16 ^T, as k_gemm.cu lays it out) it asks the
 * heuristic for candidates at 4,096 rows and at 64, and times each at n =
 * 19 / 64 / 256 / 2,048 rows; "inv" says whether the first 19 rows of the
 * 2,048-row product equal the 19-row product bitwise (the row invariance
 * the prompt path needs), "det" whether two runs give the same bits.
 * A development tool for the H200 (bench/gpu_session.sh's gemmsweep stage
 * builds it with nvcc and links cuBLASLt); not part of the server.
 * usage: gemm_sweep [MAX_CANDIDATES] */
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cuda.cuh"

#define LK(x)                                                                                   \
    do {                                                                                        \
        cublasStatus_t s_ = (x);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                      \
            fprintf(stderr, "%s:%d: cublasLt status %d\n", __FILE__, __LINE__, (int)s_);        \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

static const size_t WS = 32u << 20; /* k_gemm.cu's GEMM_WS_BYTES */


static cublasLtMatrixLayout_t layout(cudaDataType_t t, int r, int c) {
    cublasLtMatrixLayout_t l;
    LK(cublasLtMatrixLayoutCreate(&l, t, r, c, r));
    return l;
}

/* out (rows x n, column-major = (n, rows) row-major) = W^T-op x, one algorithm */
static cublasStatus_t run(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const cublasLtMatmulAlgo_t *a, const void *w,
                          const void *x, float *out, void *ws, int rows, int k, int n) {
    cublasLtMatrixLayout_t la = layout(CUDA_R_16BF, k, rows), lb = layout(CUDA_R_16BF, k, n),
                           lc = layout(CUDA_R_32F, rows, n);
    float alpha = 1.f, beta = 0.f;
    cublasStatus_t st = cublasLtMatmul(h, d, &alpha, w, la, x, lb, &beta, out, lc, out, lc, a, ws, WS, 0);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    return st;
}

static int heuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, int rows, int k, int m, int want,
                     cublasLtMatmulHeuristicResult_t *res) {
    cublasLtMatrixLayout_t la = layout(CUDA_R_16BF, k, rows), lb = layout(CUDA_R_16BF, k, m),
                           lc = layout(CUDA_R_32F, rows, m);
    cublasLtMatmulPreference_t pref;
    LK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t wsb = WS;
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    int got = 0;
    if (cublasLtMatmulAlgoGetHeuristic(h, d, la, lb, lc, lc, pref, want, res, &got) != CUBLAS_STATUS_SUCCESS) got = 0;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    return got;
}

static unsigned cfg(const cublasLtMatmulAlgo_t *a, cublasLtMatmulAlgoConfigAttributes_t at) {
    uint32_t v = 0;
    size_t wr = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(a, at, &v, sizeof v, &wr) != CUBLAS_STATUS_SUCCESS) return 9999;
    return v;
}

int main(int argc, char **argv) {
    int maxc = argc > 1 ? atoi(argv[1]) : 12;
    if (maxc < 1 || maxc > 64) maxc = 12;
    struct { const char *name; int rows, k; } sh[] = {
        {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 24576, 4096}, {"down", 4096, 12288}};
    int ns[] = {19, 64, 256, 2048};
    const int NMAX = 2048;
    cublasLtHandle_t h;
    LK(cublasLtCreate(&h));
    void *ws;
    CK(cudaMalloc(&ws, WS));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (size_t si = 0; si < sizeof sh / sizeof sh[0]; si++) {
        int rows = sh[si].rows, k = sh[si].k;
        __nv_bfloat16 *w, *x;
        float *o1, *o2;
        CK(cudaMalloc(&w, (size_t)rows * k * 2));
        CK(cudaMalloc(&x, (size_t)NMAX * k * 2));
        CK(cudaMalloc(&o1, (size_t)NMAX * rows * 4));
        CK(cudaMalloc(&o2, (size_t)NMAX * rows * 4));
        k_fill<<<1024, 256>>>(w, (size_t)rows * k, 0.05f, 1u + (unsigned)si);
        k_fill<<<1024, 256>>>(x, (size_t)NMAX * k, 0.05f, 77u);
        CK(cudaDeviceSynchronize());
        cublasLtMatmulDesc_t d;
        LK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        LK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        LK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        /* candidates: the heuristic's for 4,096 rows (ref; the first is k_gemm.cu's), then for 64 */
        cublasLtMatmulHeuristicResult_t cand[128];
        char src[128];
        int idx[128], nc = 0, refm[2] = {4096, 64};
        for (int r = 0; r < 2; r++) {
            cublasLtMatmulHeuristicResult_t res[64];
            int got = heuristic(h, d, rows, k, refm[r], maxc, res);
            for (int i = 0; i < got; i++) {
                bool dup = false;
                for (int j = 0; j < nc; j++) dup |= !memcmp(&cand[j].algo, &res[i].algo, sizeof res[i].algo);
                if (!dup && nc < 128) {
                    src[nc] = r ? 's' : 'r';
                    idx[nc] = i; /* its place in that heuristic's list */
                    cand[nc++] = res[i];
                }
            }
        }
        printf("== %s: %d x %d (k), %d candidates (r: asked at 4,096 rows, s: at 64; r0 = k_gemm.cu's)\n", sh[si].name,
               rows, k, nc);
        printf("%-5s %5s %6s %6s %5s %6s %9s %9s %9s %9s %4s %4s\n", "cand", "algo", "tile", "splitK", "red", "stages",
               "n=19 us", "n=64 us", "n=256 us", "n=2048 us", "inv", "det");
        for (int c = 0; c < nc; c++) {
            const cublasLtMatmulAlgo_t *a = &cand[c].algo;
            double us[4];
            bool ok = true;
            for (int ni = 0; ni < 4 && ok; ni++) {
                int n = ns[ni];
                ok = run(h, d, a, w, x, o1, ws, rows, k, n) == CUBLAS_STATUS_SUCCESS;
                if (!ok) break;
                CK(cudaEventRecord(e0));
                int reps = n >= 2048 ? 10 : 30;
                for (int r = 0; r < reps; r++) run(h, d, a, w, x, o1, ws, rows, k, n);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                float ms = 0;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                us[ni] = ms * 1e3 / reps;
            }
            if (!ok) {
                printf("%c%-4d (not runnable)\n", src[c], idx[c]);
                cudaGetLastError();
                continue;
            }
            /* invariance: rows 0..18 of n = 2048 against n = 19; determinism: n = 64 twice */
            size_t b19 = (size_t)19 * rows * 4, b64 = (size_t)64 * rows * 4;
            char *h1 = (char *)malloc(b64), *h2 = (char *)malloc(b64);
            run(h, d, a, w, x, o1, ws, rows, k, 2048);
            run(h, d, a, w, x, o2, ws, rows, k, 19);
            CK(cudaMemcpy(h1, o1, b19, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(h2, o2, b19, cudaMemcpyDeviceToHost));
            bool inv = !memcmp(h1, h2, b19);
            run(h, d, a, w, x, o1, ws, rows, k, 64);
            run(h, d, a, w, x, o2, ws, rows, k, 64);
            CK(cudaMemcpy(h1, o1, b64, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(h2, o2, b64, cudaMemcpyDeviceToHost));
            bool det = !memcmp(h1, h2, b64);
            free(h1);
            free(h2);
            printf("%c%-4d %5u %6u %6u %5u %6u %9.1f %9.1f %9.1f %9.1f %4s %4s\n", src[c], idx[c],
                   cfg(a, CUBLASLT_ALGO_CONFIG_ID), cfg(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
                   cfg(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), cfg(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                   cfg(a, CUBLASLT_ALGO_CONFIG_STAGES_ID), us[0], us[1], us[2], us[3], inv ? "yes" : "NO",
                   det ? "yes" : "NO");
        }
        printf("   (reading the weights once at 4 TB/s: %.1f us)\n", (double)rows * k * 2 / 4e12 * 1e6);
        cublasLtMatmulDescDestroy(d);
        cudaFree(w);
        cudaFree(x);
        cudaFree(o1);
        cudaFree(o2);
    }
    cudaFree(ws);
    cublasLtDestroy(h);
    return 0;
}
