/* matvec_sweep.cu — the tensor-core matvec's tile choices (k blocks a
 * round U, 16-row tiles a block MT, pipelined or not) timed against each
 * other and against the launcher's own rule, at the decode shapes of
 * Qwen3-1.7B, Qwen3-8B and tinycoder as the model runs them (the input norm
 * folded where mv_fold_norm folds it, gate|up as SwiGLU, o and down adding into
 * the residual), at 1 / 4 / 8 / 16 tokens. Each timing is a CUDA graph of
 * back-to-back launches (programmatic launch as in decode) over rotating
 * copies of the weights, at least 256 MB of them, so the weights come from
 * DRAM as in a decode step, not from L2; the best of 5 replays. Every
 * choice's output is checked bitwise against the first's (tiles never
 * change a row's arithmetic: a mismatch is a bug, printed as DIFFERS).
 * Choices of 4- and 16-warp blocks (w4, w16: other k splits) compare among
 * themselves.
 * Lines: "SHAPE n=N choice us GB/s" and "SHAPE n=N rule ... (the rule's TILE; best
 * choice CHOICE)", the rule's tile from matvec_rules.c's table.
 * It includes k_matmul.cu to reach its tile templates and links with
 * libkestrel.a for the rest (bench/gpu_session.sh's mvsweep stage builds
 * it with nvcc); a development tool for the H200, not part of the server.
 * usage: matvec_sweep [SHAPE-PREFIX [fold] [l2]] (e.g. "1.7b": those shapes
 * only; fold: every input norm folded into the product, where the model may
 * run it apart — the rule's line then still runs the model's way; l2: one
 * copy of the weights, read from L2 after the first replay, as a model
 * whose weights fit the 50 MB L2 reads them — tinycoder's). Environment,
 * for runs under Nsight Compute: MVSWEEP_N="1 16" the token counts (default
 * 1 4 8 16; at most 64), MVSWEEP_REPS the launches a timing graph holds (default 16, or
 * the copies of the weights where more). */
#include "backend/cuda/k_matmul.cu"

#include "bench_cuda.cuh"
#include "decode_shapes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

typedef void (*launcher)(ks_stream, float *, const float *, const __nv_bfloat16 *, const float *, int, int, int,
                         mm_epi);

/* launch_tc_v<U, MT, SW, PIPE, NORM>, or NULL where the form cannot take
 * the tile (SwiGLU pairs tiles: MT even) */
template <int U, int MT, bool SW, bool PIPE, bool NORM, int NW>
static launcher form() {
    if constexpr (SW && MT % 2) return nullptr;
    else if constexpr (SW && NW > 8) return nullptr; /* (16 warps: tiles of 1 above 16 tokens) */
    else return &launch_tc_v<U, MT, SW, PIPE, NORM, NW>;
}

struct choice {
    const char *name;
    int warps;     /* a block's warps, 4 / 8 / 16: its k split (outputs compare bitwise within one count) */
    launcher f[4]; /* by SW * 2 + NORM */
};
#define CHOICE_W(U, MT, P, W, NAME)                                                                                 \
    {                                                                                                               \
        NAME, W, {                                                                                                  \
            form<U, MT, false, P, false, W>(), form<U, MT, false, P, true, W>(), form<U, MT, true, P, false, W>(),  \
                form<U, MT, true, P, true, W>()                                                                     \
        }                                                                                                           \
    }
#define CHOICE(U, MT, P, NAME) CHOICE_W(U, MT, P, 8, NAME)
static const choice choices[] = {
    CHOICE(1, 1, false, "(1,1)"),  CHOICE(2, 1, false, "(2,1)"), CHOICE(4, 1, false, "(4,1)"),
    CHOICE(8, 1, false, "(8,1)"),  CHOICE(2, 2, false, "(2,2)"), CHOICE(4, 2, false, "(4,2)"),
    CHOICE(2, 2, true, "(2,2)p"), CHOICE(1, 4, false, "(1,4)"), CHOICE(2, 4, false, "(2,4)"),
    CHOICE(2, 1, true, "(2,1)p"),  CHOICE(4, 1, true, "(4,1)p"),  CHOICE(8, 1, true, "(8,1)p"),
    CHOICE(1, 2, true, "(1,2)p"),  CHOICE(4, 2, true, "(4,2)p"),  CHOICE(1, 4, true, "(1,4)p"),
    /* blocks of 4 warps */
    CHOICE_W(2, 4, false, 4, "(2,4)w4"), CHOICE_W(4, 2, false, 4, "(4,2)w4"), CHOICE_W(1, 4, false, 4, "(1,4)w4"),
    CHOICE_W(2, 2, true, 4, "(2,2)pw4"), CHOICE_W(2, 1, true, 4, "(2,1)pw4"), CHOICE_W(4, 1, true, 4, "(4,1)pw4"),
    CHOICE_W(8, 1, true, 4, "(8,1)pw4"),
    /* blocks of 16 warps (2 k blocks a round: 16 KB in flight a block and round) */
    CHOICE_W(1, 1, false, 16, "(1,1)w16"), CHOICE_W(2, 1, false, 16, "(2,1)w16"), CHOICE_W(1, 1, true, 16, "(1,1)pw16"),
    CHOICE_W(2, 1, true, 16, "(2,1)pw16"), CHOICE_W(4, 1, true, 16, "(4,1)pw16"), CHOICE_W(1, 2, true, 16, "(1,2)pw16"),
};
#define N_CHOICES (int)(sizeof choices / sizeof *choices)

/* one launch of f (NULL: the launcher's rule, ks_cuda_matmul_fused) on w */
static void launch_one(cudaStream_t s, launcher f, const decode_shape &sh, const __nv_bfloat16 *w, float *out, const float *x,
                       const float *g, int n) {
    mm_epi e = {sh.norm ? g : NULL, NULL, 1e-6f, sh.add, NULL, NULL, NULL, 0, 0, 0};
    if (f) f(s, out, x, w, NULL, n, sh.k, sh.rows, e);
    else
        ks_cuda_matmul_fused(s, out, x, sh.norm ? g : NULL, 1e-6f, w, 2, NULL, n, sh.k, sh.rows,
                             sh.sw ? KS_MM_SWIGLU : sh.add ? KS_MM_ADD : KS_MM_PLAIN);
}

/* us per launch: a graph of `reps` launches of f (NULL: the launcher's
 * rule, ks_cuda_matmul_fused) over the copies in turn, best of 5 replays */
static double time_it(cudaStream_t s, launcher f, const decode_shape &sh, const std::vector<__nv_bfloat16 *> &ws,
                      float *out, const float *x, const float *g, int n, int reps) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int r = 0; r < reps; r++) launch_one(s, f, sh, ws[r % ws.size()], out, x, g, n);
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float best = 1e30f;
    for (int i = 0; i < 6; i++) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(exec, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (i > 0 && ms < best) best = ms; /* the first replay warms */
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    return best * 1000.0 / reps;
}

/* one call of f (NULL: the rule) on copy 0, out cleared first; its output to host */
static void run_once(cudaStream_t s, launcher f, const decode_shape &sh, const __nv_bfloat16 *w, float *out, const float *x,
                     const float *g, int n, std::vector<float> &host) {
    int outs = sh.sw ? sh.rows / 2 : sh.rows;
    CK(cudaMemsetAsync(out, 0, (size_t)n * outs * 4, s));
    launch_one(s, f, sh, w, out, x, g, n);
    host.resize((size_t)n * outs);
    CK(cudaMemcpyAsync(host.data(), out, host.size() * 4, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : "";
    bool fold_all = false, l2 = false; /* every input norm folded, as mv_fold_norm might; one copy of the weights */
    for (int a = 2; a < argc; a++) {
        fold_all |= !strcmp(argv[a], "fold");
        l2 |= !strcmp(argv[a], "l2");
    }
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# matvec_sweep: %s, %d SMs; choice = (k blocks a round, 16-row tiles a block), p = pipelined, w4 / w16 = blocks of 4 / 16 warps (else 8)\n", prop.name,
           prop.multiProcessorCount);
    std::vector<int> ns = {1, 4, 8, 16};
    if (const char *e = getenv("MVSWEEP_N")) {
        ns.clear();
        char *end;
        for (const char *p = e; *p; p = end) {
            long v = strtol(p, &end, 10);
            if (end == p) break;
            if (v >= 1 && v <= 64) ns.push_back((int)v);
        }
    }
    int reps_env = getenv("MVSWEEP_REPS") ? atoi(getenv("MVSWEEP_REPS")) : 0;
    int max_k = 12288, max_rows = 151936;
    float *x, *g, *out;
    CK(cudaMalloc(&x, (size_t)64 * max_k * 4));
    CK(cudaMalloc(&g, (size_t)max_k * 4));
    CK(cudaMalloc(&out, (size_t)64 * max_rows * 4));
    {
        std::vector<float> hx((size_t)64 * max_k), hg(max_k);
        for (size_t i = 0; i < hx.size(); i++) hx[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
        for (int i = 0; i < max_k; i++) hg[i] = 0.5f + (float)(i % 17) / 16.0f;
        CK(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(g, hg.data(), hg.size() * 4, cudaMemcpyHostToDevice));
    }
    int failures = 0;
    for (int si = 0; si < N_DECODE_SHAPES; si++) {
        const decode_shape &sh = decode_shapes[si];
        if (strncmp(sh.name, only, strlen(only))) continue;
        bool folds = fold_all || mv_fold_norm(sh.k, sh.rows, sh.sw);
        if (sh.norm && !folds) {
            printf("# %s: the model runs its norm apart (mv_fold_norm), so the plain product is swept\n", sh.name);
        }
        decode_shape run = sh;
        run.norm = sh.norm && folds;
        /* the rule's output is comparable bitwise where both fold the norm (or there is none) */
        bool comparable = !sh.norm || (run.norm && mv_fold_norm(sh.k, sh.rows, sh.sw));
        size_t bytes = (size_t)sh.rows * sh.k * 2;
        int copies = l2 ? 1 : (int)((256u << 20) / bytes) + 1;
        if (copies > 64) copies = 64;
        std::vector<__nv_bfloat16 *> ws(copies);
        for (int c = 0; c < copies; c++) {
            CK(cudaMalloc(&ws[c], bytes));
            k_fill<<<1024, 256, 0, s>>>(ws[c], (size_t)sh.rows * sh.k, 0.05f, 77u * (c + 1));
        }
        CK(cudaStreamSynchronize(s));
        int reps = reps_env > 0 ? reps_env : copies < 16 ? 16 : copies;
        for (int n : ns) {
            std::vector<float> ref[3], got; /* the first output of each warp count (8, 4, 16) */
            int first[3] = {-1, -1, -1};
            double best_t = 1e30;
            const char *best_c = "";
            for (int c = 0; c < N_CHOICES; c++) {
                launcher f = choices[c].f[run.sw * 2 + run.norm];
                if (!f) continue;
                run_once(s, f, run, ws[0], out, x, g, n, got);
                bool same = true;
                int wi = choices[c].warps == 4 ? 1 : choices[c].warps == 16 ? 2 : 0;
                if (first[wi] < 0) {
                    ref[wi] = got;
                    first[wi] = c;
                } else {
                    same = !memcmp(ref[wi].data(), got.data(), got.size() * 4);
                    failures += !same;
                }
                double t = time_it(s, f, run, ws, out, x, g, n, reps);
                if (t < best_t) {
                    best_t = t;
                    best_c = choices[c].name;
                }
                printf("%-13s n=%-2d %-8s %8.2f us %6.0f GB/s%s\n", sh.name, n, choices[c].name, t,
                       bytes / (t * 1e-6) / 1e9, same ? "" : "  DIFFERS from the first choice of its warps");
            }
            run_once(s, NULL, sh, ws[0], out, x, g, n, got);
            bool same = false; /* the rule's output is one warp count's */
            for (int wi = 0; wi < 3; wi++)
                same |= comparable && first[wi] >= 0 && !memcmp(ref[wi].data(), got.data(), got.size() * 4);
            double t = time_it(s, NULL, sh, ws, out, x, g, n, reps);
            mv_tile rt = mv_tile_for(mv_form(sh.sw, sh.norm && mv_fold_norm(sh.k, sh.rows, sh.sw)), n, sh.k, sh.rows);
            char rname[32];
            snprintf(rname, sizeof rname, "(%d,%d)%s%s", rt.u, rt.mt, rt.pipe ? "p" : "",
                     rt.warps == 4 ? "w4" : rt.warps == 16 ? "w16" : "");
            printf("%-13s n=%-2d rule     %8.2f us %6.0f GB/s%s  (the rule's %s; best choice %s %.2f us)\n", sh.name,
                   n, t, bytes / (t * 1e-6) / 1e9, same ? "" : comparable ? "  DIFFERS" : "  (norm apart)", rname,
                   best_c, best_t);
            if (!same && comparable) failures++;
        }
        for (auto *w : ws) CK(cudaFree(w));
    }
    printf("# %d outputs differed\n", failures);
    return failures ? 1 : 0;
}
