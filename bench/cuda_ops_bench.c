/* cuda_ops_bench.c — times the CUDA backend's ops at real model shapes
 * (Qwen3-8B: hidden 4096, 32/8 heads of 128, intermediate 12288, vocab
 * 151936) and prints achieved GB/s (matmul: bytes of weights read / time) and
 * TFLOP/s for prefill-sized matmuls. Not a test: a tuning aid for the GPU
 * machine. usage: build/cuda_ops_bench [MODEL_DIR [SEQS] | --matvec | --attention POOL_TOKENS |
 * --prompt-attention | --argmax]
 * (SEQS: only the model_forward of that many sequences, 1, 4 or 16) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

#include "base/clock.h"
#include "backend/backend.h"
#include "model/model.h"
#include "decode_shapes.h"

static void sync(backend *be) {
    float x;
    static float *d;
    if (!d) d = be->ops->buf_alloc(be, 4);
    be->ops->buf_download(be, &x, d, 4);
}

/* dt = seconds a call of STMT takes: one call to warm up (workspaces,
 * first-use setup), then REPS back to back between two syncs */
#define TIME_CALLS(dt, be, reps, stmt)                \
    do {                                              \
        stmt;                                         \
        sync(be);                                     \
        double t0_ = now_s();                           \
        for (int r_ = 0; r_ < (reps); r_++) stmt;     \
        sync(be);                                     \
        (dt) = (now_s() - t0_) / (reps);                \
    } while (0)

/* Uniform pseudo-random values in [-scale/2, scale/2) (an LCG; zeros or a
 * pattern draw less power on the tensor cores than real data) */
static float rnd(uint32_t *st, float scale) {
    *st = *st * 1664525u + 1013904223u;
    return ((float)(*st >> 8) / 16777216.0f - 0.5f) * scale;
}

/* A backend weight of rows x k (k 0: a vector of rows) from host data */
static int make_weight(backend *be, bk_weight *w, dtype_t dt, int rows, int k, void *data) {
    st_tensor t;
    memset(&t, 0, sizeof t);
    t.name = "w";
    t.dtype = dt;
    t.n_dims = k ? 2 : 1;
    t.shape[0] = rows;
    t.shape[1] = k;
    t.data = data;
    const st_tensor *parts[1] = {&t};
    return be->ops->weight_init(be, w, parts, 1);
}

/* rows x k bf16 weights, random in +-0.06, on the backend */
static int random_bf16_weight(backend *be, bk_weight *w, int rows, int k, uint32_t *st) {
    uint16_t *hw = malloc((size_t)rows * k * 2);
    if (!hw) return -1;
    for (size_t i = 0; i < (size_t)rows * k; i++) {
        union { float f; uint32_t u; } c = {rnd(st, 0.125f)};
        hw[i] = (uint16_t)(c.u >> 16);
    }
    int rc = make_weight(be, w, DTYPE_BF16, rows, k, hw);
    free(hw);
    return rc;
}

/* model_forward of one decode step of S sequences (1 token each, S = 1, 4,
 * 16, or only `only` when it is one of them) after a 512-token prompt each,
 * repeated: the GPU side of batched decode without the server (CUDA graphs
 * as KESTREL_CUDA_GRAPHS says) */
static void time_forward(backend *be, const char *dir, int only) {
    model *m;
    if (model_load(&m, dir, be) != 0) {
        fprintf(stderr, "cuda_ops_bench: cannot load %s\n", dir);
        return;
    }
    enum { P = 512, S = 16 };
    kv_cache kv;
    model_kv_init(m, &kv, S * (P + 64));
    kv_seq s[S];
    kv_seq *seqs[S];
    memset(s, 0, sizeof s);
    int32_t *tok = calloc(P, 4), *pos = malloc(P * 4), *seq = calloc(P, 4), row = P - 1;
    float *logits = malloc((size_t)S * m->cfg.vocab_size * 4);
    for (int i = 0; i < S; i++) {
        seqs[i] = &s[i];
        for (int j = 0; j < P; j++) { tok[j] = 100 + i + j; pos[j] = j; }
        kv_seq_reserve(&kv, &s[i], P + 64);
        model_batch b = {.n_tokens = P, .tokens = tok, .pos = pos, .seq = seq, .n_seqs = 1, .seqs = &seqs[i],
                         .n_logits = 1, .logit_rows = &row, .n_prompt = P};
        double t0 = now_s();
        model_forward(m, &kv, &b, logits);
        if (i == 0) printf("forward prefill n=%d: %.1f ms\n", P, (now_s() - t0) * 1e3);
    }
    int ns_list[3] = {1, 4, 16};
    for (int li = 0; li < 3; li++) {
        int ns = ns_list[li];
        if (only && ns != only) continue;
        int32_t dt[S], dp[S], dsq[S], dr[S];
        for (int i = 0; i < ns; i++) { dt[i] = 7 + i; dp[i] = P; dsq[i] = i; dr[i] = i; }
        model_batch d = {.n_tokens = ns, .tokens = dt, .pos = dp, .seq = dsq, .n_seqs = ns, .seqs = seqs,
                         .n_logits = ns, .logit_rows = dr};
        for (int w = 0; w < 3; w++) model_forward(m, &kv, &d, logits);
        double t0 = now_s();
        for (int r = 0; r < 20; r++) model_forward(m, &kv, &d, logits);
        double ms = (now_s() - t0) / 20 * 1e3;
        printf("forward decode %2d sequences x 1 token: %.3f ms/step, %.0f tok/s\n", ns, ms, ns / ms * 1e3);
    }
    for (int i = 0; i < S; i++) kv_seq_release(&kv, &s[i]);
    kv_cache_free(&kv);
    model_free(m);
    free(tok); free(pos); free(seq); free(logits);
}

typedef struct {
    backend *be;
    bk_weight *w;
    float *x, *o;
    int n;
    const char *label;
} rotation_arg;

static void *rotation(void *v) {
    rotation_arg *a = v;
    enum { R = 10 };
    double t0 = now_s(), host = 0;
    for (int r = 0; r < R; r++)
        for (int si = 0; si < 4; si++) {
            double h = now_s();
            a->be->ops->matmul_prompt(a->be, a->o, a->x, NULL, 0.f, &a->w[si], NULL, r % 2 ? a->n : a->n - 333, BK_MM_PLAIN);
            host += now_s() - h;
        }
    sync(a->be);
    double dt = now_s() - t0;
    printf("gemm rotation (4 shapes, 2048 / 1715 rows, %s): %.1f us per call, host %.1f us per call\n", a->label,
           dt / (4 * R) * 1e6, host / (4 * R) * 1e6);
    return NULL;
}

/* The four prompt GEMMs of a Qwen3-8B layer in turn (as a prefill runs
 * them), 2048 rows each: host time of the calls and GPU-bound time per call
 * (a library that re-prepares a kernel whenever the shape changes shows it
 * here and not in the one-shape loop above) */
static void time_gemm_rotation(backend *be) {
    if (!be->ops->matmul_prompt) return;
    int shapes[4][2] = {{6144, 4096}, {4096, 4096}, {24576, 4096}, {4096, 12288}}, n = 2048;
    bk_weight w[4];
    float *x = be->ops->buf_alloc(be, (size_t)n * 12288 * 4), *o = be->ops->buf_alloc(be, (size_t)n * 24576 * 4);
    uint32_t st = 777u;
    for (int si = 0; si < 4; si++) {
        if (random_bf16_weight(be, &w[si], shapes[si][0], shapes[si][1], &st) != 0) return;
        be->ops->matmul_prompt(be, o, x, NULL, 0.f, &w[si], NULL, n, BK_MM_PLAIN);
    }
    sync(be);
    rotation_arg a = {be, w, x, o, n, "this thread"};
    rotation(&a);
    a.label = "a second thread"; /* as the engine's thread runs them after start-up probes on the main one */
    pthread_t th;
    if (pthread_create(&th, NULL, rotation, &a) == 0) pthread_join(th, NULL);
    for (int si = 0; si < 4; si++) be->ops->weight_release(be, &w[si]);
    be->ops->buf_free(be, x);
    be->ops->buf_free(be, o);
}

/* seconds per call of w's decode matmul over n tokens — fused (mode
 * BK_MM_PLAIN / BK_MM_SWIGLU with the input norm `norm`, as the model runs
 * qkv and gate|up) or, mode < 0, the plain matmul (TIME_CALLS: reps
 * calls after a warm-up) */
static double time_matmul(backend *be, const bk_weight *w, int n, int mode, const bk_weight *norm, int reps) {
    int rows = (int)w->rows, k = (int)w->cols;
    float *x = be->ops->buf_alloc(be, (size_t)n * k * 4), *o = be->ops->buf_alloc(be, (size_t)n * rows * 4);
    double dt;
    if (mode < 0) TIME_CALLS(dt, be, reps, be->ops->matmul(be, o, x, w, NULL, n));
    else TIME_CALLS(dt, be, reps, be->ops->matmul_fused(be, o, x, norm, 1e-6f, w, NULL, n, mode));
    be->ops->buf_free(be, x);
    be->ops->buf_free(be, o);
    return dt;
}

/* Decode attention, one sequence, at several context lengths; the pool
 * holds max(ctx, capacity) tokens (a server's pool is larger than one
 * context: the work split follows the pool, blocks past the keys return) */
static void time_attention(backend *be, int capacity) {
    int nh = 32, nkv = 8, hd = 128, bs = 16;
    int ctxs[] = {512, 2048, 4096, 16384, 65536};
    for (int ci = 0; ci < 5; ci++) {
        int ctx = ctxs[ci], nb = ctx / bs;
        size_t cache = (size_t)nb * bs * nkv * hd * (size_t)be->kv_elem_bytes;
        float *kc = be->ops->buf_alloc(be, cache), *vc = be->ops->buf_alloc(be, cache);
        int32_t *tab = malloc((size_t)nb * 4);
        for (int i = 0; i < nb; i++) tab[i] = i;
        int32_t pos = ctx - 1, seq = 0, slot = ctx - 1;
        int32_t *dtab = be->ops->buf_alloc(be, (size_t)nb * 4), *dpos = be->ops->buf_alloc(be, 4),
                *dseq = be->ops->buf_alloc(be, 4), *dslot = be->ops->buf_alloc(be, 4);
        be->ops->buf_upload(be, dtab, tab, (size_t)nb * 4);
        be->ops->buf_upload(be, dpos, &pos, 4);
        be->ops->buf_upload(be, dseq, &seq, 4);
        be->ops->buf_upload(be, dslot, &slot, 4);
        int qs = (nh + 2 * nkv) * hd;
        float *q = be->ops->buf_alloc(be, (size_t)qs * 4), *o = be->ops->buf_alloc(be, (size_t)nh * hd * 4);
        bk_attn_batch ab = {1, dpos, dseq, dslot, dtab, nb, bs, ctx - 1, ctx > capacity ? ctx : capacity, 0, NULL, 0};
        double dt;
        TIME_CALLS(dt, be, 50, be->ops->attention(be, o, q, qs, kc, vc, &ab, nh, nkv, hd, 0.088f));
        printf("attention ctx=%-6d %9.1f us  %7.0f GB/s of KV (%s)%s\n", ctx, dt * 1e6, 2.0 * cache / dt / 1e9,
               be->kv_elem_bytes == 2 ? "bf16" : "f32", capacity > ctx ? ", larger pool" : "");
        void *bufs[] = {kc, vc, dtab, dpos, dseq, dslot, q, o};
        for (int i = 0; i < 8; i++) be->ops->buf_free(be, bufs[i]);
        free(tab);
    }
}

/* The greedy argmax over Qwen3's vocabulary (151,936 logits a row), 1 and
 * 16 rows (decode, a verify), launches back to back; then the argmax with
 * sampling on the device (sample_rows) under a few rules; penalties, a
 * constraint's mask and logprobs on the same rows */
static void time_argmax(backend *be) {
    int cols = 151936;
    for (int n = 1; n <= 16; n *= 16) {
        float *h = malloc((size_t)n * cols * 4), *d = be->ops->buf_alloc(be, (size_t)n * cols * 4);
        int32_t *ids = be->ops->buf_alloc(be, (size_t)n * 4);
        uint32_t st = 7;
        for (size_t i = 0; i < (size_t)n * cols; i++) h[i] = rnd(&st, 10.f);
        be->ops->buf_upload(be, d, h, (size_t)n * cols * 4);
        double dt;
        TIME_CALLS(dt, be, 200, be->ops->argmax(be, ids, d, n, cols));
        printf("argmax rows=%-2d cols=%d %9.1f us\n", n, cols, dt * 1e6);
        static const struct {
            const char *name;
            int top_k;
            float t, top_p, min_p;
        } rules[] = {{"t1", 0, 1.0f, 1.0f, 0.0f},
                     {"t0.7-top_p0.95", 0, 0.7f, 0.95f, 0.0f},
                     {"t0.8-top_k40-top_p0.9", 40, 0.8f, 0.9f, 0.0f},
                     {"t1-min_p0.05", 0, 1.0f, 1.0f, 0.05f}};
        bk_sample_row sr[16];
        for (int r = 0; r < 4 && be->ops->sample_rows; r++) {
            for (int j = 0; j < n; j++)
                sr[j] = (bk_sample_row){j, rules[r].top_k, rules[r].t, rules[r].top_p, rules[r].min_p, (j + 0.5) / n};
            TIME_CALLS(dt, be, 100, (be->ops->argmax(be, ids, d, n, cols), be->ops->sample_rows(be, ids, d, cols, sr, n)));
            printf("argmax+sample rows=%-2d cols=%d %-22s %9.1f us\n", n, cols, rules[r].name, dt * 1e6);
        }
        /* the ops on the rows before the choice and after it: penalties of a
         * 2,000-token context (a verify's n rows), a constraint's mask (every
         * other word cleared), logprobs with 20 alternatives (the rows after
         * the last call's edits: timing only) */
        enum { ENT = 2000 };
        bk_pen_ent *ent = malloc(ENT * sizeof *ent);
        int32_t tok_rows[16];
        uint32_t *bits = malloc((size_t)n * ((cols + 31) / 32) * 4);
        for (int k = 0; k < ENT; k++) ent[k] = (bk_pen_ent){k * 75, k % 3, k, k % 50 ? 0.0f : 1.0f};
        for (int j = 0; j < n; j++) tok_rows[j] = j;
        for (int w = 0; w < n * ((cols + 31) / 32); w++) bits[w] = w % 2 ? 0u : 0xffffffffu;
        bk_pen_seq ps = {0, n, 0, ENT, 1.1f, 0.5f, 0.5f, 0, ENT};
        int32_t *dtok = be->ops->buf_alloc(be, sizeof tok_rows), *drows = be->ops->buf_alloc(be, sizeof tok_rows);
        bk_pen_seq *dps = be->ops->buf_alloc(be, sizeof ps);
        bk_pen_ent *dent = be->ops->buf_alloc(be, ENT * sizeof *ent);
        uint32_t *dbits = be->ops->buf_alloc(be, (size_t)n * ((cols + 31) / 32) * 4);
        bk_logprobs *dlp = be->ops->buf_alloc(be, (size_t)n * sizeof *dlp);
        be->ops->buf_upload(be, dtok, tok_rows, sizeof tok_rows);
        be->ops->buf_upload(be, drows, tok_rows, sizeof tok_rows);
        be->ops->buf_upload(be, dps, &ps, sizeof ps);
        be->ops->buf_upload(be, dent, ent, ENT * sizeof *ent);
        be->ops->buf_upload(be, dbits, bits, (size_t)n * ((cols + 31) / 32) * 4);
        TIME_CALLS(dt, be, 100, be->ops->penalize_rows(be, d, cols, n, dtok, drows, dps, 1, dent));
        printf("penalize rows=%-2d cols=%d entries=%d %9.1f us\n", n, cols, ENT, dt * 1e6);
        TIME_CALLS(dt, be, 100, be->ops->mask_rows(be, d, cols, drows, dbits, n));
        printf("mask rows=%-2d cols=%d %9.1f us\n", n, cols, dt * 1e6);
        TIME_CALLS(dt, be, 100, be->ops->logprob_rows(be, d, cols, ids, drows, n, 20, dlp));
        printf("logprobs rows=%-2d cols=%d top=20 %9.1f us\n", n, cols, dt * 1e6);
        void *bufs[] = {dtok, drows, dps, dent, dbits, dlp};
        for (int i = 0; i < 6; i++) be->ops->buf_free(be, bufs[i]);
        free(ent);
        free(bits);
        be->ops->buf_free(be, d);
        be->ops->buf_free(be, ids);
        free(h);
    }
}

/* The prompt attention: one sequence's causal prefill of P = 1k / 4k / 16k
 * tokens (64-row tiles), Qwen3-8B heads (32 / 8 x 128) */
static void time_prompt_attention(backend *be) {
    int nh = 32, nkv = 8, hd = 128, bs = 16;
    for (int P = 1024; P <= 16384; P *= 4) {
        int nb = P / bs, qs = (nh + 2 * nkv) * hd, nt = P / BK_PROMPT_TILE;
        size_t cache = (size_t)nb * bs * nkv * hd * (size_t)be->kv_elem_bytes;
        void *kc = be->ops->buf_alloc(be, cache), *vc = be->ops->buf_alloc(be, cache);
        int32_t *tab = malloc((size_t)nb * 4), *pos = malloc((size_t)P * 4), *tiles = malloc((size_t)nt * 8);
        for (int i = 0; i < nb; i++) tab[i] = i;
        for (int i = 0; i < P; i++) pos[i] = i;
        for (int i = 0; i < nt; i++) { tiles[2 * i] = i * BK_PROMPT_TILE; tiles[2 * i + 1] = BK_PROMPT_TILE; }
        int32_t *dtab = be->ops->buf_alloc(be, (size_t)nb * 4), *dpos = be->ops->buf_alloc(be, (size_t)P * 4),
                *dseq = be->ops->buf_alloc(be, (size_t)P * 4), *dtiles = be->ops->buf_alloc(be, (size_t)nt * 8);
        be->ops->buf_upload(be, dtab, tab, (size_t)nb * 4);
        be->ops->buf_upload(be, dpos, pos, (size_t)P * 4);
        be->ops->buf_upload(be, dtiles, tiles, (size_t)nt * 8);
        for (int i = 0; i < P; i++) pos[i] = 0;
        be->ops->buf_upload(be, dseq, pos, (size_t)P * 4);
        float *q = be->ops->buf_alloc(be, (size_t)P * qs * 4), *o = be->ops->buf_alloc(be, (size_t)P * nh * hd * 4);
        bk_attn_batch ab = {P, dpos, dseq, dpos, dtab, nb, bs, P - 1, P, P, dtiles, nt};
        double dt, flop = 4.0 * hd * nh * ((double)P * (P + 1) / 2);
        TIME_CALLS(dt, be, 5, be->ops->attention(be, o, q, qs, kc, vc, &ab, nh, nkv, hd, 0.088f));
        printf("prompt attention P=%-6d %9.1f us  %6.1f TFLOP/s (causal)\n", P, dt * 1e6, flop / dt / 1e12);
        void *bufs[] = {kc, vc, dtab, dpos, dseq, dtiles, q, o};
        for (int i = 0; i < 8; i++) be->ops->buf_free(be, bufs[i]);
        free(tab); free(pos); free(tiles);
    }
}

int main(int argc, char **argv) {
    backend *be;
    if (backend_new(&be, "cuda", 0) != 0) {
        fprintf(stderr, "cuda_ops_bench: no CUDA GPU\n");
        return 1;
    }
    printf("device: %s\n", backend_describe(be));
    if (argc > 1 && !strcmp(argv[1], "--matvec")) { /* the decode matvecs only (decode_shapes.h), 1 / 4 / 16 tokens */
        for (int si = 0; si < N_DECODE_SHAPES; si++) {
            const decode_shape *sh = &decode_shapes[si];
            int rows = sh->rows, k = sh->k;
            uint32_t rs = 12345u;
            bk_weight w;
            if (random_bf16_weight(be, &w, rows, k, &rs) != 0) return 1;
            float *ones = malloc((size_t)k * 4);
            for (int i = 0; i < k; i++) ones[i] = 1.0f;
            bk_weight g;
            if (make_weight(be, &g, DTYPE_F32, k, 0, ones) != 0) return 1;
            free(ones);
            for (int n = 1; n <= 16; n *= 4)
                for (int f = 0; f < 2; f++) {
                    /* those after the input norm also as the model runs them: the norm folded or before, gate|up SwiGLU */
                    if (f && !sh->norm) continue;
                    int mode = !f ? -1 : sh->sw ? BK_MM_SWIGLU : BK_MM_PLAIN;
                    double dt = time_matmul(be, &w, n, mode, &g, 100);
                    printf("matvec %-12s%s %6dx%-5d n=%-2d %7.1f us %6.0f GB/s\n", sh->name,
                           !f ? "    " : mode == BK_MM_SWIGLU ? " nsw" : " nrm", rows, k, n, dt * 1e6,
                           (double)rows * k * 2 / dt / 1e9);
                }
            be->ops->weight_release(be, &w);
            be->ops->weight_release(be, &g);
        }
        backend_free(be);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--prompt-attention")) { /* the prompt attention only */
        time_prompt_attention(be);
        backend_free(be);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--argmax")) { /* the greedy argmax only */
        time_argmax(be);
        backend_free(be);
        return 0;
    }
    if (argc > 2 && !strcmp(argv[1], "--attention")) { /* decode attention only, a pool of argv[2] tokens */
        time_attention(be, atoi(argv[2]));
        backend_free(be);
        return 0;
    }
    time_gemm_rotation(be);
    if (argc > 1) {
        time_forward(be, argv[1], argc > 2 ? atoi(argv[2]) : 0);
        backend_free(be);
        return 0;
    }
    {
        int dim = 4096;
        float *x = be->ops->buf_alloc(be, dim * 4);
        float *hw = malloc(dim * 4);
        for (int i = 0; i < dim; i++) hw[i] = 1.0f;
        bk_weight w;
        make_weight(be, &w, DTYPE_F32, dim, 0, hw);
        free(hw);
        double dt;
        TIME_CALLS(dt, be, 100, be->ops->rmsnorm(be, x, dim, x, dim, &w, 1, 1, dim, 1e-6f));
        printf("rmsnorm dim=%d n=1: %.1f us\n", dim, dt * 1e6);
    }
    int shapes[][2] = {{6144, 4096}, {4096, 4096}, {24576, 4096}, {4096, 12288}, {151936, 4096}};
    const char *names[] = {"qkv", "o", "gate_up", "down", "lm_head"};
    int ns[] = {1, 4, 16, 512};
    for (int si = 0; si < 5; si++) {
        int rows = shapes[si][0], k = shapes[si][1];
        size_t wb = (size_t)rows * k * 2;
        uint32_t rs = 12345u;
        bk_weight w;
        if (random_bf16_weight(be, &w, rows, k, &rs) != 0) return 1;
        for (int ni = 0; ni < 4; ni++) {
            int n = ns[ni];
            double dt = time_matmul(be, &w, n, -1, NULL, n >= 512 ? 3 : 50);
            printf("matmul %-8s %6dx%-5d n=%-4d %9.1f us  %7.0f GB/s  %6.1f TFLOP/s\n", names[si], rows, k, n, dt * 1e6,
                   wb / dt / 1e9, 2.0 * rows * k * n / dt / 1e12);
        }
        /* prompt rows: the tensor-core GEMM (not lm_head: only last rows reach it) */
        int gn[] = {1024, 1715, 2048, 4096};
        for (int gi = 0; gi < 4 && si < 4 && be->ops->matmul_prompt; gi++) {
            int n = gn[gi];
            float *x = be->ops->buf_alloc(be, (size_t)n * k * 4), *o = be->ops->buf_alloc(be, (size_t)n * rows * 4);
            float *hx = malloc((size_t)n * k * 4);
            for (size_t i = 0; i < (size_t)n * k; i++) hx[i] = rnd(&rs, 1.0f);
            be->ops->buf_upload(be, x, hx, (size_t)n * k * 4);
            free(hx);
            double dt;
            TIME_CALLS(dt, be, 10, be->ops->matmul_prompt(be, o, x, NULL, 0.f, &w, NULL, n, BK_MM_PLAIN));
            printf("gemm   %-8s %6dx%-5d n=%-4d %9.1f us  %6.1f TFLOP/s\n", names[si], rows, k, n, dt * 1e6,
                   2.0 * rows * k * n / dt / 1e12);
            be->ops->buf_free(be, x);
            be->ops->buf_free(be, o);
        }
        be->ops->weight_release(be, &w);
    }
    time_attention(be, 0);
    time_prompt_attention(be);
    backend_free(be);
    return 0;
}
