/* test_cuda_ops.c — every CUDA op against the CPU op on random inputs
 * (SKIP without a GPU). Tolerance: |cuda - cpu| <= 1e-5 * (1 + |cpu|) for
 * element-wise ops and <= 2e-6 * sum|a*b| for reductions (matmul, attention:
 * the two backends add in different orders). Also: a CUDA matmul row is
 * bitwise the same whatever the number of tokens in the call. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "kv_upload.h"
#include "logprob_cases.h"
#include "penalty_cases.h"
#include "sample/sample.h"
#include "sample_rows_cases.h"
#include "test.h"

static unsigned rng_state = 12345;
static float frand(void) {
    rng_state = rng_state * 1664525u + 1013904223u;
    return ((rng_state >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

typedef struct {
    backend *cpu, *gpu;
} pair;

static int open_pair(pair *p) {
    if (!backend_cuda_available()) return 0;
    CHECK(backend_cpu_new(&p->cpu, 2) == 0);
    /* the CPU reference reads host f32 caches (kv_upload rounds them to what the device holds) */
    if (p->cpu) CHECK(backend_set_kv_type(p->cpu, "f32") == 0);
    CHECK(backend_cuda_new(&p->gpu, 0) == 0);
    return p->cpu && p->gpu;
}

static void close_pair(pair *p) {
    backend_free(p->cpu);
    backend_free(p->gpu);
}

/* device copy of host floats */
static void *up(backend *be, const void *h, size_t bytes) {
    void *d = be->ops->buf_alloc(be, bytes);
    be->ops->buf_upload(be, d, h, bytes);
    return d;
}

static void down(backend *be, void *h, const void *d, size_t bytes) { CHECK(be->ops->buf_download(be, h, d, bytes) == 0); }

static st_tensor make_tensor(dtype_t dt, int64_t rows, int64_t cols, void **keep) {
    size_t n = (size_t)rows * (size_t)(cols ? cols : 1), es = dtype_size(dt);
    void *d = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
        float v = frand() * 0.5f;
        if (dt == DTYPE_BF16) ((uint16_t *)d)[i] = f32_to_bf16(v);
        else if (dt == DTYPE_F16) ((uint16_t *)d)[i] = f32_to_f16(v);
        else ((float *)d)[i] = v;
    }
    st_tensor t;
    memset(&t, 0, sizeof t);
    t.name = (char *)"test";
    t.dtype = dt;
    t.n_dims = cols ? 2 : 1;
    t.shape[0] = rows;
    t.shape[1] = cols;
    t.data = d;
    t.nbytes = n * es;
    *keep = d;
    return t;
}

static double max_rel(const float *a, const float *b, size_t n, const float *scale) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]) / (scale ? 1e-30 + scale[i] : 1.0 + fabs(b[i]));
        if (e > worst) worst = e;
    }
    return worst;
}

TEST(test_cuda_matmul_matches_cpu_and_is_batch_invariant) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    dtype_t dts[3] = {DTYPE_BF16, DTYPE_F16, DTYPE_F32};
    int ks[4] = {64, 512, 100, 1568}; /* 1568 = 49 blocks of 32: a partial last round of k blocks */
    /* 12 cases of 100 rows (a partial 16-row tile on the tensor cores), then
     * two bf16 matrices of 24616 rows: large enough for 32- and 64-row
     * blocks (which the tensor-core kernel picks by token count), with a
     * partial last block, and one of 6184 rows (32-row blocks at up to 8
     * tokens); then the shapes the launcher gives other warp counts (another
     * k split): 2040 x 4096 (16 warps, Qwen3-1.7B's down) and 24616 x 2048
     * (4, Qwen3-1.7B's lm_head); and 4104 x 4096 (Qwen3-8B's o: (1,1) up to
     * 8 tokens, the pipelined (4,2) above) */
    int big_rows[6] = {24616, 24616, 6184, 2040, 4104, 24616}, big_k[6] = {64, 512, 1568, 4096, 4096, 2048};
    for (int ci = 0; ci < 18; ci++) {
        int di = ci < 12 ? ci / 4 : 0;
        {
            int k = ci < 12 ? ks[ci % 4] : big_k[ci - 12], rows = ci < 12 ? 100 : big_rows[ci - 12], n = 17;
            void *h0, *h1, *hb;
            st_tensor t0 = make_tensor(dts[di], 40, k, &h0), t1 = make_tensor(dts[di], rows - 40, k, &h1);
            st_tensor tb = make_tensor(DTYPE_BF16, rows, 0, &hb);
            const st_tensor *parts[2] = {&t0, &t1}, *bparts[1] = {&tb};
            bk_weight wc, wg, bc, bg;
            CHECK(p.cpu->ops->weight_init(p.cpu, &wc, parts, 2) == 0);
            CHECK(p.gpu->ops->weight_init(p.gpu, &wg, parts, 2) == 0);
            CHECK(p.cpu->ops->weight_init(p.cpu, &bc, bparts, 1) == 0);
            CHECK(p.gpu->ops->weight_init(p.gpu, &bg, bparts, 1) == 0);
            float *x = malloc((size_t)n * k * 4), *oc = malloc((size_t)n * rows * 4), *og = malloc((size_t)n * rows * 4),
                  *o1 = malloc((size_t)rows * 4), *scale = malloc((size_t)n * rows * 4);
            for (int i = 0; i < n * k; i++) x[i] = frand();
            p.cpu->ops->matmul(p.cpu, oc, x, &wc, &bc, n);
            float *dx = up(p.gpu, x, (size_t)n * k * 4), *dout = p.gpu->ops->buf_alloc(p.gpu, (size_t)n * rows * 4);
            p.gpu->ops->matmul(p.gpu, dout, dx, &wg, &bg, n);
            down(p.gpu, og, dout, (size_t)n * rows * 4);
            /* scale: sum |w x| per output, from the CPU's own f32 view */
            for (int t = 0; t < n; t++)
                for (int r = 0; r < rows; r++) {
                    const st_tensor *pt = r < 40 ? &t0 : &t1;
                    int rr = r < 40 ? r : r - 40;
                    double s = 0;
                    for (int j = 0; j < k; j++) {
                        size_t idx = (size_t)rr * k + j;
                        float w = dts[di] == DTYPE_BF16 ? bf16_to_f32(((uint16_t *)pt->data)[idx])
                                  : dts[di] == DTYPE_F16 ? f16_to_f32(((uint16_t *)pt->data)[idx])
                                                         : ((float *)pt->data)[idx];
                        s += fabs(w * x[t * k + j]);
                    }
                    scale[t * rows + r] = (float)s + 1.0f;
                }
            double e = max_rel(og, oc, (size_t)n * rows, scale);
            /* bf16 with k % 32 == 0 runs on the tensor cores with x split in
             * two bf16 parts: each product off by at most 2^-17 of |w x| */
            double tol = dts[di] == DTYPE_BF16 && k % 32 == 0 ? 8e-6 : 2e-6;
            CHECK_MSG(e < tol, "matmul %s k=%d rows=%d: max rel err %g", dtype_name(dts[di]), k, rows, e);
            /* batch invariance: token 5 alone and within 12 == token 5 within
             * the batch of 17 (each a different token grouping) */
            p.gpu->ops->matmul(p.gpu, dout, dx + 5 * k, &wg, &bg, 1);
            down(p.gpu, o1, dout, (size_t)rows * 4);
            CHECK_MSG(!memcmp(o1, og + 5 * rows, (size_t)rows * 4), "matmul %s k=%d rows=%d: not batch-invariant",
                      dtype_name(dts[di]), k, rows);
            p.gpu->ops->matmul(p.gpu, dout, dx, &wg, &bg, 12);
            down(p.gpu, oc, dout, (size_t)12 * rows * 4);
            CHECK_MSG(!memcmp(oc + 5 * rows, og + 5 * rows, (size_t)rows * 4),
                      "matmul %s k=%d rows=%d: token 5 of 12 differs from token 5 of 17", dtype_name(dts[di]),
                      k, rows);
            p.gpu->ops->buf_free(p.gpu, dx);
            p.gpu->ops->buf_free(p.gpu, dout);
            p.gpu->ops->weight_release(p.gpu, &wg);
            p.gpu->ops->weight_release(p.gpu, &bg);
            p.cpu->ops->weight_release(p.cpu, &wc);
            p.cpu->ops->weight_release(p.cpu, &bc);
            free(x); free(oc); free(og); free(o1); free(scale); free(h0); free(h1); free(hb);
        }
    }
    close_pair(&p);
}

TEST(test_cuda_norm_rope_elementwise_match_cpu) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    int n = 5, nh = 4, hd = 64, H = nh * hd, stride = H + 32;
    void *hw, *hn, *he;
    st_tensor tw = make_tensor(DTYPE_BF16, H, 0, &hw), tn = make_tensor(DTYPE_F32, hd, 0, &hn);
    st_tensor te = make_tensor(DTYPE_BF16, 50, H, &he);
    const st_tensor *pw[1] = {&tw}, *pn[1] = {&tn}, *pe[1] = {&te};
    bk_weight wc, wg, nc, ng, ec, eg;
    CHECK(p.cpu->ops->weight_init(p.cpu, &wc, pw, 1) == 0 && p.gpu->ops->weight_init(p.gpu, &wg, pw, 1) == 0);
    CHECK(p.cpu->ops->weight_init(p.cpu, &nc, pn, 1) == 0 && p.gpu->ops->weight_init(p.gpu, &ng, pn, 1) == 0);
    CHECK(p.cpu->ops->weight_init(p.cpu, &ec, pe, 1) == 0 && p.gpu->ops->weight_init(p.gpu, &eg, pe, 1) == 0);
    size_t nb = (size_t)n * stride * 4;
    float *x = malloc(nb), *a = malloc(nb), *b = malloc(nb);
    for (int i = 0; i < n * stride; i++) x[i] = frand() * 3;
    float *dx = up(p.gpu, x, nb), *dy = p.gpu->ops->buf_alloc(p.gpu, nb);
    /* rmsnorm over the hidden state (stride != dim) */
    memcpy(a, x, nb);
    p.cpu->ops->rmsnorm(p.cpu, a, stride, x, stride, &wc, n, 1, H, 1e-6f);
    p.gpu->ops->buf_upload(p.gpu, dy, x, nb);
    p.gpu->ops->rmsnorm(p.gpu, dy, stride, dx, stride, &wg, n, 1, H, 1e-6f);
    down(p.gpu, b, dy, nb);
    CHECK_MSG(max_rel(b, a, (size_t)n * stride, NULL) < 1e-5, "rmsnorm: %g", max_rel(b, a, (size_t)n * stride, NULL));
    /* per-head norm in place, then rope */
    memcpy(a, x, nb);
    p.cpu->ops->rmsnorm(p.cpu, a, stride, a, stride, &nc, n, nh, hd, 1e-6f);
    p.gpu->ops->buf_upload(p.gpu, dy, x, nb);
    p.gpu->ops->rmsnorm(p.gpu, dy, stride, dy, stride, &ng, n, nh, hd, 1e-6f);
    int32_t pos[5] = {0, 1, 7, 300, 4095};
    float inv[32];
    for (int i = 0; i < 32; i++) inv[i] = powf(1e6f, -(float)(2 * i) / hd);
    int32_t *dpos = up(p.gpu, pos, sizeof pos);
    float *dinv = up(p.gpu, inv, sizeof inv);
    p.cpu->ops->rope(p.cpu, a, stride, n, nh, hd, pos, inv);
    p.gpu->ops->rope(p.gpu, dy, stride, n, nh, hd, dpos, dinv);
    down(p.gpu, b, dy, nb);
    CHECK_MSG(max_rel(b, a, (size_t)n * stride, NULL) < 1e-5, "qk-norm + rope: %g", max_rel(b, a, (size_t)n * stride, NULL));
    /* silu_mul: gu (n, 2*dim) */
    int dim = 100;
    float *gu = malloc((size_t)n * 2 * dim * 4), *sa = malloc((size_t)n * dim * 4), *sb = malloc((size_t)n * dim * 4);
    for (int i = 0; i < n * 2 * dim; i++) gu[i] = frand() * 6;
    float *dgu = up(p.gpu, gu, (size_t)n * 2 * dim * 4), *ds = p.gpu->ops->buf_alloc(p.gpu, (size_t)n * dim * 4);
    p.cpu->ops->silu_mul(p.cpu, sa, gu, n, dim);
    p.gpu->ops->silu_mul(p.gpu, ds, dgu, n, dim);
    down(p.gpu, sb, ds, (size_t)n * dim * 4);
    CHECK_MSG(max_rel(sb, sa, (size_t)n * dim, NULL) < 1e-5, "silu_mul: %g", max_rel(sb, sa, (size_t)n * dim, NULL));
    /* embed + gather + add */
    int32_t ids[3] = {49, 0, 17}, rows[2] = {2, 0};
    int32_t *dids = up(p.gpu, ids, sizeof ids), *drows = up(p.gpu, rows, sizeof rows);
    float ea[3 * 256], eb[3 * 256], ga[2 * 256], gb[2 * 256];
    float *de = p.gpu->ops->buf_alloc(p.gpu, sizeof ea), *dg = p.gpu->ops->buf_alloc(p.gpu, sizeof ga);
    p.cpu->ops->embed(p.cpu, ea, &ec, ids, 3);
    p.gpu->ops->embed(p.gpu, de, &eg, dids, 3);
    p.cpu->ops->add(p.cpu, ea, ea, 3 * 256);
    p.gpu->ops->add(p.gpu, de, de, 3 * 256);
    p.cpu->ops->gather_rows(p.cpu, ga, ea, rows, 2, 256);
    p.gpu->ops->gather_rows(p.gpu, dg, de, drows, 2, 256);
    down(p.gpu, eb, de, sizeof eb);
    down(p.gpu, gb, dg, sizeof gb);
    CHECK(!memcmp(ea, eb, sizeof ea));
    CHECK(!memcmp(ga, gb, sizeof ga));
    void *bufs[] = {dx, dy, dpos, dinv, dgu, ds, dids, drows, de, dg};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) p.gpu->ops->buf_free(p.gpu, bufs[i]);
    free(x); free(a); free(b); free(gu); free(sa); free(sb); free(hw); free(hn); free(he);
    close_pair(&p);
}

TEST(test_cuda_paged_attention_matches_cpu) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    int hds[5] = {16, 64, 80, 128, 256};
    for (int hi = 0; hi < 5; hi++) {
        int nh = 8, nkv = 2, hd = hds[hi], kv_dim = nkv * hd, bs = 16, nblocks = 12;
        int n = 6; /* two sequences: 4 tokens of seq 0 at 40..43, 2 of seq 1 at 0..1 */
        int32_t pos[6] = {40, 41, 42, 43, 0, 1}, seq[6] = {0, 0, 0, 0, 1, 1};
        int32_t tables[2 * 4] = {7, 2, 9, 4, 5, 0, 0, 0};
        int32_t slots[6];
        for (int i = 0; i < n; i++) slots[i] = tables[seq[i] * 4 + pos[i] / bs] * bs + pos[i] % bs;
        size_t cache = (size_t)nblocks * bs * kv_dim;
        float *kc = malloc(cache * 4), *vc = malloc(cache * 4);
        for (size_t i = 0; i < cache; i++) { kc[i] = frand(); vc[i] = frand(); }
        int qs = (nh + 2 * nkv) * hd;
        float *q = malloc((size_t)n * qs * 4), *oa = malloc((size_t)n * nh * hd * 4), *ob = malloc((size_t)n * nh * hd * 4);
        for (int i = 0; i < n * qs; i++) q[i] = frand();
        /* store this call's k/v through kv_store on both backends */
        p.cpu->ops->kv_store(p.cpu, kc, vc, q + nh * hd, q + (nh + nkv) * hd, qs,
                             &(bk_attn_batch){n, pos, seq, slots, tables, 4, bs, 43, nblocks * bs, 0, NULL, 0}, kv_dim);
        /* the device cache in its own format (bf16: kc/vc rounded to it) */
        void *dkc = kv_upload(p.gpu, kc, cache), *dvc = kv_upload(p.gpu, vc, cache);
        float *dq = up(p.gpu, q, (size_t)n * qs * 4);
        int32_t *dpos = up(p.gpu, pos, sizeof pos), *dseq = up(p.gpu, seq, sizeof seq), *dtab = up(p.gpu, tables, sizeof tables),
                *dslots = up(p.gpu, slots, sizeof slots);
        bk_attn_batch abc = {n, pos, seq, slots, tables, 4, bs, 43, nblocks * bs, 0, NULL, 0},
                      abg = {n, dpos, dseq, dslots, dtab, 4, bs, 43, nblocks * bs, 0, NULL, 0};
        float *dout = p.gpu->ops->buf_alloc(p.gpu, (size_t)n * nh * hd * 4);
        float sc = 1.0f / sqrtf((float)hd);
        p.cpu->ops->attention(p.cpu, oa, q, qs, kc, vc, &abc, nh, nkv, hd, sc);
        p.gpu->ops->attention(p.gpu, dout, dq, qs, dkc, dvc, &abg, nh, nkv, hd, sc);
        down(p.gpu, ob, dout, (size_t)n * nh * hd * 4);
        double e = max_rel(ob, oa, (size_t)n * nh * hd, NULL);
        CHECK_MSG(e < 1e-5, "attention hd=%d: max err %g", hd, e);
        /* kv_store on the GPU wrote the same cache (in its format: the
         * stored rows rounded like the rest) */
        p.gpu->ops->buf_free(p.gpu, dkc);
        dkc = kv_upload(p.gpu, kc, cache); /* reset then store */
        float *kb = malloc(cache * 4);
        p.gpu->ops->kv_store(p.gpu, dkc, dvc, dq + nh * hd, dq + (nh + nkv) * hd, qs, &abg, kv_dim);
        kv_download(p.gpu, kb, dkc, cache);
        p.cpu->ops->kv_store(p.cpu, kc, vc, q + nh * hd, q + (nh + nkv) * hd, qs, &abc, kv_dim);
        float *kr = malloc(cache * 4); /* the CPU's cache rounded to the device format */
        memcpy(kr, kc, cache * 4);
        p.gpu->ops->buf_free(p.gpu, kv_upload(p.gpu, kr, cache));
        CHECK(!memcmp(kb, kr, cache * 4));
        free(kr);
        void *bufs[] = {dkc, dvc, dq, dpos, dseq, dtab, dslots, dout};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) p.gpu->ops->buf_free(p.gpu, bufs[i]);
        free(kc); free(vc); free(q); free(oa); free(ob); free(kb);
    }
    close_pair(&p);
}

/* contexts of more chunks than a head group has blocks, so each block
 * pipelines several chunks through its stages (the second shape, 8 KV heads
 * of 128 at 15k keys: ~7 chunks a block on an H200, past the stages'
 * prefetched slots) and the last block merges the group's partials; the
 * third shape's contexts (701 / 1,001 keys) spread over 11 / 16 blocks
 * of one chunk each; the fourth's (1,088 / 1,101 keys: 17 / 18 chunks) fill
 * the merge's batch of 17 partials and pass it by one (the 15k context's 33
 * blocks on an H100 / H200 take two batches too) */
TEST(test_cuda_long_context_attention_matches_cpu) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    struct { int nh, nkv, hd, nblocks, pos0, pos1; } cf[4] = {
        {4, 1, 64, 400, 5000, 4095}, {32, 8, 128, 1000, 15000, 9001}, {16, 8, 128, 100, 1000, 700},
        {16, 8, 128, 100, 1100, 1087}};
    for (int ci = 0; ci < 4; ci++) {
        int nh = cf[ci].nh, nkv = cf[ci].nkv, hd = cf[ci].hd, kv_dim = nkv * hd, bs = 16, nblocks = cf[ci].nblocks, n = 2;
        int32_t pos[2] = {cf[ci].pos0, cf[ci].pos1}, seq[2] = {0, 0}, slots[2];
        int32_t *tables = malloc((size_t)nblocks * 4);
        for (int i = 0; i < nblocks; i++) tables[i] = (i * 37) % nblocks; /* scattered blocks (37 is prime to both) */
        for (int i = 0; i < n; i++) slots[i] = tables[pos[i] / bs] * bs + pos[i] % bs;
        size_t cache = (size_t)nblocks * bs * kv_dim;
        float *kc = malloc(cache * 4), *vc = malloc(cache * 4);
        for (size_t i = 0; i < cache; i++) { kc[i] = frand(); vc[i] = frand(); }
        int qs = (nh + 2 * nkv) * hd;
        float *q = malloc((size_t)n * qs * 4), *oa = malloc((size_t)n * nh * hd * 4), *ob = malloc((size_t)n * nh * hd * 4);
        for (int i = 0; i < n * qs; i++) q[i] = frand();
        void *dkc = kv_upload(p.gpu, kc, cache), *dvc = kv_upload(p.gpu, vc, cache);
        float *dq = up(p.gpu, q, (size_t)n * qs * 4);
        int32_t *dpos = up(p.gpu, pos, sizeof pos), *dseq = up(p.gpu, seq, sizeof seq),
                *dtab = up(p.gpu, tables, (size_t)nblocks * 4), *dslots = up(p.gpu, slots, sizeof slots);
        int max_pos = pos[0] > pos[1] ? pos[0] : pos[1];
        bk_attn_batch abc = {n, pos, seq, slots, tables, nblocks, bs, max_pos, nblocks * bs, 0, NULL, 0},
                      abg = {n, dpos, dseq, dslots, dtab, nblocks, bs, max_pos, nblocks * bs, 0, NULL, 0};
        float *dout = p.gpu->ops->buf_alloc(p.gpu, (size_t)n * nh * hd * 4);
        p.cpu->ops->attention(p.cpu, oa, q, qs, kc, vc, &abc, nh, nkv, hd, 0.125f);
        p.gpu->ops->attention(p.gpu, dout, dq, qs, dkc, dvc, &abg, nh, nkv, hd, 0.125f);
        down(p.gpu, ob, dout, (size_t)n * nh * hd * 4);
        double e = max_rel(ob, oa, (size_t)n * nh * hd, NULL);
        CHECK_MSG(e < 1e-5, "long-context attention (%d heads of %d, %d keys): max err %g", nh, hd, max_pos + 1, e);
        void *bufs[] = {dkc, dvc, dq, dpos, dseq, dtab, dslots, dout};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) p.gpu->ops->buf_free(p.gpu, bufs[i]);
        free(kc); free(vc); free(q); free(oa); free(ob); free(tables);
    }
    close_pair(&p);
}

/* qk_norm_rope gives bitwise what the separate CUDA ops give, and matches
 * the CPU's composition: head_dim 64 / 128 on the fused kernel, 80 on its
 * fallback; with and without QK-norm weights. */
TEST(test_cuda_fused_ops_equal_the_separate_ops) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    int n = 3;
    int hds[3] = {64, 128, 80};
    for (int hi = 0; hi < 3; hi++)
        for (int with_norm = 0; with_norm < 2; with_norm++) {
            int hd = hds[hi], nh = 4, nkv = 2, stride = (nh + 2 * nkv) * hd + 8;
            size_t nb = (size_t)n * stride * 4;
            void *hq, *hk;
            st_tensor tq = make_tensor(DTYPE_F32, hd, 0, &hq), tk = make_tensor(DTYPE_F32, hd, 0, &hk);
            const st_tensor *pq[1] = {&tq}, *pk[1] = {&tk};
            bk_weight qc, qg, kc, kg;
            CHECK(p.cpu->ops->weight_init(p.cpu, &qc, pq, 1) == 0 && p.gpu->ops->weight_init(p.gpu, &qg, pq, 1) == 0);
            CHECK(p.cpu->ops->weight_init(p.cpu, &kc, pk, 1) == 0 && p.gpu->ops->weight_init(p.gpu, &kg, pk, 1) == 0);
            float *x = malloc(nb), *a = malloc(nb), *b = malloc(nb), *c = malloc(nb);
            for (int i = 0; i < n * stride; i++) x[i] = frand() * 3;
            int32_t pos[3] = {0, 9, 4000};
            float inv[64];
            for (int i = 0; i < hd / 2; i++) inv[i] = powf(1e6f, -(float)(2 * i) / hd);
            int32_t *dpos = up(p.gpu, pos, sizeof pos);
            float *dinv = up(p.gpu, inv, sizeof inv), *dx = up(p.gpu, x, nb);
            if (with_norm) {
                p.gpu->ops->rmsnorm(p.gpu, dx, stride, dx, stride, &qg, n, nh, hd, 1e-6f);
                p.gpu->ops->rmsnorm(p.gpu, dx + nh * hd, stride, dx + nh * hd, stride, &kg, n, nkv, hd, 1e-6f);
            }
            p.gpu->ops->rope(p.gpu, dx, stride, n, nh + nkv, hd, dpos, dinv);
            down(p.gpu, a, dx, nb);
            p.gpu->ops->buf_upload(p.gpu, dx, x, nb);
            p.gpu->ops->qk_norm_rope(p.gpu, dx, stride, n, nh, nkv, hd, with_norm ? &qg : NULL, with_norm ? &kg : NULL,
                                     1e-6f, dpos, dinv, NULL, NULL, NULL);
            down(p.gpu, b, dx, nb);
            CHECK_MSG(!memcmp(a, b, nb), "qk_norm_rope hd %d norm %d: not the separate ops' bits", hd, with_norm);
            /* storing k and v in the cache on the way: what kv_store writes
             * from the rows above (16-row cache, tokens at slots 5, 0, 11) */
            {
                int kvd = nkv * hd;
                int32_t slots[3] = {5, 0, 11}, *dslots = up(p.gpu, slots, sizeof slots);
                bk_attn_batch ab = {n, dpos, NULL, dslots, NULL, 0, 16, 0, 16, 0, NULL, 0};
                float *z = calloc((size_t)16 * kvd, 4), *ka = malloc((size_t)16 * kvd * 4), *kb = malloc((size_t)16 * kvd * 4),
                      *va = malloc((size_t)16 * kvd * 4), *vb = malloc((size_t)16 * kvd * 4);
                void *dk1 = kv_upload(p.gpu, z, (size_t)16 * kvd), *dv1 = kv_upload(p.gpu, z, (size_t)16 * kvd),
                     *dk2 = kv_upload(p.gpu, z, (size_t)16 * kvd), *dv2 = kv_upload(p.gpu, z, (size_t)16 * kvd);
                p.gpu->ops->kv_store(p.gpu, dk1, dv1, dx + nh * hd, dx + (nh + nkv) * hd, stride, &ab, kvd);
                p.gpu->ops->buf_upload(p.gpu, dx, x, nb);
                p.gpu->ops->qk_norm_rope(p.gpu, dx, stride, n, nh, nkv, hd, with_norm ? &qg : NULL,
                                         with_norm ? &kg : NULL, 1e-6f, dpos, dinv, dk2, dv2, &ab);
                down(p.gpu, c, dx, nb);
                kv_download(p.gpu, ka, dk1, (size_t)16 * kvd);
                kv_download(p.gpu, kb, dk2, (size_t)16 * kvd);
                kv_download(p.gpu, va, dv1, (size_t)16 * kvd);
                kv_download(p.gpu, vb, dv2, (size_t)16 * kvd);
                CHECK_MSG(!memcmp(b, c, nb) && !memcmp(ka, kb, (size_t)16 * kvd * 4) &&
                              !memcmp(va, vb, (size_t)16 * kvd * 4),
                          "qk_norm_rope hd %d norm %d: the stored k/v are not kv_store's", hd, with_norm);
                CHECK(ka[5 * kvd] != 0.f || ka[5 * kvd + 1] != 0.f); /* something was stored */
                void *kvb[] = {dslots, dk1, dv1, dk2, dv2};
                for (int i = 0; i < 5; i++) p.gpu->ops->buf_free(p.gpu, kvb[i]);
                free(z); free(ka); free(kb); free(va); free(vb);
            }
            memcpy(c, x, nb);
            p.cpu->ops->qk_norm_rope(p.cpu, c, stride, n, nh, nkv, hd, with_norm ? &qc : NULL, with_norm ? &kc : NULL,
                                     1e-6f, pos, inv, NULL, NULL, NULL);
            CHECK_MSG(max_rel(b, c, (size_t)n * stride, NULL) < 1e-5, "qk_norm_rope hd %d vs cpu: %g", hd,
                      max_rel(b, c, (size_t)n * stride, NULL));
            void *bufs[] = {dpos, dinv, dx};
            for (int i = 0; i < 3; i++) p.gpu->ops->buf_free(p.gpu, bufs[i]);
            p.gpu->ops->weight_release(p.gpu, &qg);
            p.gpu->ops->weight_release(p.gpu, &kg);
            p.cpu->ops->weight_release(p.cpu, &qc);
            p.cpu->ops->weight_release(p.cpu, &kc);
            free(x); free(a); free(b); free(c); free(hq); free(hk);
        }
    close_pair(&p);
}

/* The MTP head's input op (mtp_input) gives bitwise what embed, gather_rows
 * and two rmsnorm calls give on the GPU, and matches the CPU's op: hidden
 * sizes on the warp (512) and block (2048, 1536) paths, bf16 and f32
 * embedding tables, repeated and out-of-order rows. */
TEST(test_cuda_mtp_input_equals_the_separate_ops) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    int dims[3] = {512, 2048, 1536}, n = 3, vocab = 37, hrows = 5;
    int32_t ids[3] = {36, 0, 36}, idx[3] = {4, 1, 4};
    for (int di = 0; di < 3; di++)
        for (int bf = 0; bf < 2; bf++) {
            int dim = dims[di];
            void *ht, *he, *hh;
            st_tensor tt = make_tensor(bf ? DTYPE_BF16 : DTYPE_F32, vocab, dim, &ht);
            st_tensor te = make_tensor(DTYPE_F32, dim, 0, &he), th = make_tensor(DTYPE_F32, dim, 0, &hh);
            const st_tensor *pt[1] = {&tt}, *pe[1] = {&te}, *ph[1] = {&th};
            bk_weight tc, tg, ec, eg, hc, hg;
            CHECK(p.cpu->ops->weight_init(p.cpu, &tc, pt, 1) == 0 && p.gpu->ops->weight_init(p.gpu, &tg, pt, 1) == 0);
            CHECK(p.cpu->ops->weight_init(p.cpu, &ec, pe, 1) == 0 && p.gpu->ops->weight_init(p.gpu, &eg, pe, 1) == 0);
            CHECK(p.cpu->ops->weight_init(p.cpu, &hc, ph, 1) == 0 && p.gpu->ops->weight_init(p.gpu, &hg, ph, 1) == 0);
            size_t hb = (size_t)hrows * dim * 4, ob = (size_t)n * 2 * dim * 4;
            float *hid = malloc(hb), *a = malloc(ob), *b = malloc(ob), *c = malloc(ob);
            for (int i = 0; i < hrows * dim; i++) hid[i] = frand() * 3;
            float *dhid = up(p.gpu, hid, hb), *dout = p.gpu->ops->buf_alloc(p.gpu, ob),
                  *dx = p.gpu->ops->buf_alloc(p.gpu, (size_t)n * dim * 4), *dg = p.gpu->ops->buf_alloc(p.gpu, (size_t)n * dim * 4);
            int32_t *dids = up(p.gpu, ids, sizeof ids), *didx = up(p.gpu, idx, sizeof idx);
            /* the separate ops */
            p.gpu->ops->embed(p.gpu, dx, &tg, dids, n);
            p.gpu->ops->gather_rows(p.gpu, dg, dhid, didx, n, dim);
            p.gpu->ops->rmsnorm(p.gpu, dout, 2 * dim, dx, dim, &eg, n, 1, dim, 1e-6f);
            p.gpu->ops->rmsnorm(p.gpu, dout + dim, 2 * dim, dg, dim, &hg, n, 1, dim, 1e-6f);
            down(p.gpu, a, dout, ob);
            /* the fused op */
            p.gpu->ops->mtp_input(p.gpu, dout, &tg, dids, dhid, didx, &eg, &hg, n, dim, 1e-6f);
            down(p.gpu, b, dout, ob);
            CHECK_MSG(!memcmp(a, b, ob), "mtp_input dim %d bf16 %d: not the separate ops' bits", dim, bf);
            p.cpu->ops->mtp_input(p.cpu, c, &tc, ids, hid, idx, &ec, &hc, n, dim, 1e-6f);
            CHECK_MSG(max_rel(b, c, (size_t)n * 2 * dim, NULL) < 1e-5, "mtp_input dim %d vs cpu: %g", dim,
                      max_rel(b, c, (size_t)n * 2 * dim, NULL));
            void *bufs[] = {dhid, dout, dx, dg, dids, didx};
            for (int i = 0; i < 6; i++) p.gpu->ops->buf_free(p.gpu, bufs[i]);
            bk_weight *ws[3] = {&tg, &eg, &hg}, *wc[3] = {&tc, &ec, &hc};
            for (int i = 0; i < 3; i++) {
                p.gpu->ops->weight_release(p.gpu, ws[i]);
                p.cpu->ops->weight_release(p.cpu, wc[i]);
            }
            free(hid); free(a); free(b); free(c); free(ht); free(he); free(hh);
        }
    close_pair(&p);
}

/* matmul_fused's SwiGLU (no norm) gives bitwise what matmul then silu_mul give on the GPU, at
 * every tile shape its launcher picks on blocks of 8 warps (gate|up of 2 x
 * 1536 rows: 32-row pairs; 2 x 6144: pairs of 16-row tiles) at 1 / 3 / 9 /
 * 16 / 20 tokens, and on the fallback path (f16 weights); 2 x 12296 rows
 * (Qwen3-8B's size: blocks of 4 warps, 64-row tiles with a partial last
 * one, another k split than the plain product's) within 1e-4 of them (two
 * fp32 sums of 256 products in another order, multiplied: k 2^-24 = 1.5e-5
 * of the terms' size each; the H200 showed 1.9e-5); and it matches the
 * CPU's op. */
TEST(test_cuda_swiglu_matmul_equals_matmul_then_silu) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    int halves[3] = {1536, 6144, 12296}, ks[3] = {512, 256, 256}, ns[5] = {1, 3, 9, 16, 20};
    for (int ci = 0; ci < 4; ci++) {
        int half = halves[ci < 3 ? ci : 0], k = ks[ci < 3 ? ci : 0], rows = 2 * half, nmax = 20;
        dtype_t dt = ci < 3 ? DTYPE_BF16 : DTYPE_F16;
        void *hg, *hu;
        st_tensor tg = make_tensor(dt, half, k, &hg), tu = make_tensor(dt, half, k, &hu);
        const st_tensor *parts[2] = {&tg, &tu};
        bk_weight wc, wg;
        CHECK(p.cpu->ops->weight_init(p.cpu, &wc, parts, 2) == 0 && p.gpu->ops->weight_init(p.gpu, &wg, parts, 2) == 0);
        size_t xb = (size_t)nmax * k * 4, gb = (size_t)nmax * rows * 4, ab = (size_t)nmax * half * 4;
        float *x = malloc(xb), *a = malloc(ab), *b = malloc(ab), *c = malloc(ab);
        for (int i = 0; i < nmax * k; i++) x[i] = frand() * 2;
        float *dx = up(p.gpu, x, xb), *dgu = p.gpu->ops->buf_alloc(p.gpu, gb), *dact = p.gpu->ops->buf_alloc(p.gpu, ab);
        for (int ni = 0; ni < 5; ni++) {
            int n = ns[ni];
            p.gpu->ops->matmul(p.gpu, dgu, dx, &wg, NULL, n);
            p.gpu->ops->silu_mul(p.gpu, dact, dgu, n, half);
            down(p.gpu, a, dact, (size_t)n * half * 4);
            p.gpu->ops->matmul_fused(p.gpu, dact, dx, NULL, 0, &wg, NULL, n, BK_MM_SWIGLU);
            down(p.gpu, b, dact, (size_t)n * half * 4);
            /* bitwise where both run blocks of 8 warps; the large SwiGLU
             * (>= 24,576 rows) runs blocks of 4, another k split than the
             * plain product's: there within its rounding */
            if (rows < 24576)
                CHECK_MSG(!memcmp(a, b, (size_t)n * half * 4), "SwiGLU matmul %s rows %d k %d n %d: not the separate ops' bits",
                          dtype_name(dt), rows, k, n);
            else
                CHECK_MSG(max_rel(b, a, (size_t)n * half, NULL) < 1e-4, "SwiGLU matmul %s rows %d k %d n %d: %g from the separate ops",
                          dtype_name(dt), rows, k, n, max_rel(b, a, (size_t)n * half, NULL));
            p.cpu->ops->matmul_fused(p.cpu, c, x, NULL, 0, &wc, NULL, n, BK_MM_SWIGLU);
            double e = max_rel(b, c, (size_t)n * half, NULL);
            CHECK_MSG(e < 1e-3, "SwiGLU matmul %s rows %d n %d vs cpu: %g", dtype_name(dt), rows, n, e);
        }
        void *bufs[] = {dx, dgu, dact};
        for (int i = 0; i < 3; i++) p.gpu->ops->buf_free(p.gpu, bufs[i]);
        p.gpu->ops->weight_release(p.gpu, &wg);
        p.cpu->ops->weight_release(p.cpu, &wc);
        free(x); free(a); free(b); free(c); free(hg); free(hu);
    }
    close_pair(&p);
}

/* what matmul_fused stands for, as separate ops of backend be: out (n,
 * outs) = in W (+ bias), out += in W, or out = SiLU(gate) * up of y = in W
 * (y: n x rows scratch) */
static void separate_ops(backend *be, float *out, float *y, const float *in, const bk_weight *w, const bk_weight *bias,
                         int n, int outs, int mode) {
    if (mode == BK_MM_PLAIN) {
        be->ops->matmul(be, out, in, w, bias, n);
        return;
    }
    be->ops->matmul(be, y, in, w, NULL, n);
    if (mode == BK_MM_SWIGLU) be->ops->silu_mul(be, out, y, n, outs);
    else be->ops->add(be, out, y, (size_t)n * outs);
}

/* mem_usage (/metrics' device memory): a buffer and a weight count
 * exactly their bytes while they live, and nothing after they are freed;
 * the CPU backend reports none. */
TEST(test_cuda_mem_usage_counts_allocations) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    CHECK(p.cpu->ops->mem_usage == NULL);
    CHECK(p.gpu->ops->mem_usage != NULL);
    bk_mem m0, m1, m2;
    p.gpu->ops->mem_usage(p.gpu, &m0);
    void *buf = p.gpu->ops->buf_alloc(p.gpu, 3u << 20);
    CHECK(buf != NULL);
    p.gpu->ops->mem_usage(p.gpu, &m1);
    CHECK_EQ_INT((int)(m1.buffers - m0.buffers), 3 << 20);
    CHECK(m1.weights == m0.weights && m1.workspace == m0.workspace);
    void *hw;
    st_tensor tw = make_tensor(DTYPE_BF16, 1000, 512, &hw);
    const st_tensor *pw[1] = {&tw};
    bk_weight w;
    CHECK(p.gpu->ops->weight_init(p.gpu, &w, pw, 1) == 0);
    p.gpu->ops->mem_usage(p.gpu, &m2);
    CHECK_EQ_INT((int)(m2.weights - m1.weights), 1000 * 512 * 2);
    p.gpu->ops->weight_release(p.gpu, &w);
    p.gpu->ops->buf_free(p.gpu, buf);
    p.gpu->ops->mem_usage(p.gpu, &m2);
    CHECK(m2.weights == m0.weights && m2.buffers == m0.buffers);
    free(hw);
    close_pair(&p);
}

/* matmul_fused — the input RMSNorm and the residual add or SwiGLU folded
 * into the matvec — against the separate ops (GPU rmsnorm, matmul, add,
 * silu_mul: within 5e-4, the norm's scale taken after the product
 * instead of before; the CPU's: within 2e-5 of sum |w x| carried
 * through the epilogue), at the launcher's tile
 * shapes (512 rows: 16-row tiles; 6400: pipelined 32-row tiles up to 8
 * tokens; 24600: 64-row tiles above 8; gate|up of 2 x 1536 and 2 x 12296)
 * at 1 / 3 / 8 / 9 / 16 / 20 tokens — each row bitwise the row of the
 * 20-token call, though the blocks sum x^2 themselves up to 8 tokens and
 * k_norm_split_x does above — with the norm folded (k <= 2048: 4096 rows
 * and a 2 x 1536 SwiGLU at k 2048, the SwiGLU on the pipelined tile; the 2
 * x 12296 SwiGLU at k 1056) and run apart (6400 rows at k 1056), and on the
 * fallback path (f16 weights). */
TEST(test_cuda_matmul_fused_matches_the_separate_ops) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    struct {
        int rows, k, mode;
        dtype_t dt;
    } cf[] = {{512, 512, BK_MM_PLAIN, DTYPE_BF16},    {6400, 256, BK_MM_PLAIN, DTYPE_BF16},
              {24600, 256, BK_MM_PLAIN, DTYPE_BF16},  {512, 512, BK_MM_ADD, DTYPE_BF16},
              {6400, 256, BK_MM_ADD, DTYPE_BF16},     {3072, 512, BK_MM_SWIGLU, DTYPE_BF16},
              {24592, 256, BK_MM_SWIGLU, DTYPE_BF16}, {512, 512, BK_MM_PLAIN, DTYPE_F16},
              {512, 512, BK_MM_ADD, DTYPE_F16},       {3072, 512, BK_MM_SWIGLU, DTYPE_F16},
              {6400, 1056, BK_MM_PLAIN, DTYPE_BF16},  {24592, 1056, BK_MM_SWIGLU, DTYPE_BF16},
              {4096, 2048, BK_MM_PLAIN, DTYPE_BF16},  {3072, 2048, BK_MM_SWIGLU, DTYPE_BF16}};
    int ns[6] = {1, 3, 8, 9, 16, 20}, nmax = 20;
    const float eps = 1e-6f;
    for (size_t ci = 0; ci < sizeof cf / sizeof cf[0]; ci++) {
        int rows = cf[ci].rows, k = cf[ci].k, mode = cf[ci].mode, outs = mode == BK_MM_SWIGLU ? rows / 2 : rows;
        void *hw, *hg, *hb;
        st_tensor tw = make_tensor(cf[ci].dt, rows, k, &hw), tg = make_tensor(DTYPE_F32, k, 0, &hg),
                  tb = make_tensor(DTYPE_F32, rows, 0, &hb);
        const st_tensor *pw[1] = {&tw}, *pg[1] = {&tg}, *pb[1] = {&tb};
        bk_weight wc, wg, gc, gg, bc, bg;
        CHECK(p.cpu->ops->weight_init(p.cpu, &wc, pw, 1) == 0 && p.gpu->ops->weight_init(p.gpu, &wg, pw, 1) == 0);
        CHECK(p.cpu->ops->weight_init(p.cpu, &gc, pg, 1) == 0 && p.gpu->ops->weight_init(p.gpu, &gg, pg, 1) == 0);
        CHECK(p.cpu->ops->weight_init(p.cpu, &bc, pb, 1) == 0 && p.gpu->ops->weight_init(p.gpu, &bg, pb, 1) == 0);
        bool with_bias = mode == BK_MM_PLAIN;
        size_t xb = (size_t)nmax * k * 4, ob = (size_t)nmax * outs * 4, yb = (size_t)nmax * rows * 4;
        float *x = malloc(xb), *o0 = malloc(ob), *full = malloc(ob), *got = malloc(ob), *sep = malloc(ob),
              *cpu = malloc(ob), *xn = malloc(xb), *y = malloc(yb), *scale = malloc(ob);
        double *sabs = malloc((size_t)nmax * rows * sizeof *sabs);
        for (int i = 0; i < nmax * k; i++) x[i] = frand() * 2;
        for (int i = 0; i < nmax * outs; i++) o0[i] = frand();
        float *dx = up(p.gpu, x, xb), *dxn = p.gpu->ops->buf_alloc(p.gpu, xb), *dout = p.gpu->ops->buf_alloc(p.gpu, ob),
              *dy = p.gpu->ops->buf_alloc(p.gpu, yb);
        for (int norm = 0; norm < 2; norm++) {
            const bk_weight *g = norm ? &gg : NULL, *bias = with_bias ? &bg : NULL;
            /* the separate ops, 20 tokens, on the GPU and the CPU */
            const float *in = dx;
            if (norm) {
                p.gpu->ops->rmsnorm(p.gpu, dxn, k, dx, k, &gg, nmax, 1, k, eps);
                in = dxn;
            }
            p.gpu->ops->buf_upload(p.gpu, dout, o0, ob);
            separate_ops(p.gpu, dout, dy, in, &wg, bias, nmax, outs, mode);
            down(p.gpu, sep, dout, ob);
            memcpy(xn, x, xb);
            if (norm) p.cpu->ops->rmsnorm(p.cpu, xn, k, x, k, &gc, nmax, 1, k, eps);
            memcpy(cpu, o0, ob);
            separate_ops(p.cpu, cpu, y, xn, &wc, with_bias ? &bc : NULL, nmax, outs, mode);
            for (int ni = 5; ni >= 0; ni--) { /* 20 tokens first: the rows every smaller call must give */
                int n = ns[ni];
                size_t nb = (size_t)n * outs * 4;
                p.gpu->ops->buf_upload(p.gpu, dout, o0, ob);
                p.gpu->ops->matmul_fused(p.gpu, dout, dx, g, eps, &wg, bias, n, mode);
                down(p.gpu, ni == 5 ? full : got, dout, nb);
                if (ni < 5)
                    CHECK_MSG(!memcmp(full, got, nb), "matmul_fused %s rows %d mode %d norm %d: %d tokens not the rows of 20",
                              dtype_name(cf[ci].dt), rows, mode, norm, n);
            }
            /* each output's sensitivity to the products' rounding: sum |w x|
             * over its row (x normed as the CPU did), through SiLU(gate) * up
             * to first order (|SiLU'| <= 1.1); 1 + that is the CPU check's
             * scale (an error relative to |out| alone is unbounded where
             * gate or up crosses zero) */
            for (int t = 0; t < nmax; t++) {
                double *st = sabs + (size_t)t * rows;
                for (int r = 0; r < rows; r++) {
                    double a = 0;
                    for (int j = 0; j < k; j++) {
                        uint16_t hv = ((uint16_t *)hw)[(size_t)r * k + j];
                        a += fabs((cf[ci].dt == DTYPE_BF16 ? bf16_to_f32(hv) : f16_to_f32(hv)) * xn[(size_t)t * k + j]);
                    }
                    st[r] = a;
                }
                for (int i = 0; i < outs; i++) {
                    double sc = st[i];
                    if (mode == BK_MM_SWIGLU) {
                        float gt = y[(size_t)t * rows + i], u = y[(size_t)t * rows + outs + i];
                        sc = 1.1 * fabs(u) * st[i] + fabs(gt / (1.0 + exp(-gt))) * st[outs + i];
                    }
                    scale[(size_t)t * outs + i] = (float)(1.0 + sc);
                }
            }
            double es = max_rel(full, sep, (size_t)nmax * outs, NULL), ec = max_rel(full, cpu, (size_t)nmax * outs, scale);
            /* each path feeds the mma its own split of different values (x * g
             * vs the normed row): 2^-17 relative per input, summed over k and
             * through SiLU(gate) * up — numpy with exact sums puts the
             * difference at 4.2e-5 for the 2 x 12296 SwiGLU at k 1056, the
             * H200 showed 1.2e-4; a wrong scale or a lost k block is >= 1e-2 */
            CHECK_MSG(es < 5e-4, "matmul_fused %s rows %d mode %d norm %d vs the GPU's separate ops: %g",
                      dtype_name(cf[ci].dt), rows, mode, norm, es);
            /* the products off by at most 2^-17 of |w x| (x split in two bf16
             * parts), the norm's 1/rms and the fp32 sums: 2e-5 of the scale */
            CHECK_MSG(ec < 2e-5, "matmul_fused %s rows %d mode %d norm %d vs the CPU: %g", dtype_name(cf[ci].dt),
                      rows, mode, norm, ec);
        }
        void *bufs[] = {dx, dxn, dout, dy};
        for (int i = 0; i < 4; i++) p.gpu->ops->buf_free(p.gpu, bufs[i]);
        bk_weight *ws[] = {&wg, &gg, &bg}, *wcs[] = {&wc, &gc, &bc};
        for (int i = 0; i < 3; i++) {
            p.gpu->ops->weight_release(p.gpu, ws[i]);
            p.cpu->ops->weight_release(p.cpu, wcs[i]);
        }
        free(x); free(o0); free(full); free(got); free(sep); free(cpu); free(xn); free(y); free(scale); free(sabs);
        free(hw); free(hg); free(hb);
    }
    close_pair(&p);
}

/* matmul_fused_side: the qkv product with its norm folded and a side
 * product of the same rows without it (a DFlash feature projection), in one
 * launch up to 8 tokens, else the two calls — both results bitwise the two
 * matmul_fused calls', written and added, with and without a bias on the
 * first; shapes of tinycoder (k 512: qkv 768 rows, side 512), a side wider
 * than the product, and k 2048 (the largest k whose norm folds). */
TEST(test_cuda_matmul_fused_side_equals_the_two_calls) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    if (!p.gpu->ops->matmul_fused_side) SKIP("no matmul_fused_side");
    struct { int rows, rows2, k; } cf[3] = {{768, 512, 512}, {256, 1040, 512}, {3072, 1024, 2048}};
    int ns[4] = {1, 6, 8, 12};
    const float eps = 1e-6f;
    for (int ci = 0; ci < 3; ci++) {
        int rows = cf[ci].rows, rows2 = cf[ci].rows2, k = cf[ci].k, nmax = 12;
        void *hw, *hw2, *hg, *hb;
        st_tensor tw = make_tensor(DTYPE_BF16, rows, k, &hw), tw2 = make_tensor(DTYPE_BF16, rows2, k, &hw2),
                  tg = make_tensor(DTYPE_F32, k, 0, &hg), tb = make_tensor(DTYPE_F32, rows, 0, &hb);
        const st_tensor *pw[1] = {&tw}, *pw2[1] = {&tw2}, *pg[1] = {&tg}, *pb[1] = {&tb};
        bk_weight w, w2, g, b;
        CHECK(p.gpu->ops->weight_init(p.gpu, &w, pw, 1) == 0 && p.gpu->ops->weight_init(p.gpu, &w2, pw2, 1) == 0);
        CHECK(p.gpu->ops->weight_init(p.gpu, &g, pg, 1) == 0 && p.gpu->ops->weight_init(p.gpu, &b, pb, 1) == 0);
        size_t xb = (size_t)nmax * k * 4, ob = (size_t)nmax * rows * 4, ob2 = (size_t)nmax * rows2 * 4;
        float *x = malloc(xb), *s0 = malloc(ob2), *a1 = malloc(ob), *a2 = malloc(ob2), *b1 = malloc(ob), *b2 = malloc(ob2);
        for (int i = 0; i < nmax * k; i++) x[i] = frand() * 2;
        for (int i = 0; i < nmax * rows2; i++) s0[i] = frand();
        float *dx = up(p.gpu, x, xb), *d1 = p.gpu->ops->buf_alloc(p.gpu, ob), *d2 = p.gpu->ops->buf_alloc(p.gpu, ob2);
        for (int ni = 0; ni < 4; ni++)
            for (int v = 0; v < 4; v++) {
                int n = ns[ni];
                bool add = v & 1;
                const bk_weight *bias = v & 2 ? &b : NULL;
                p.gpu->ops->buf_upload(p.gpu, d2, s0, ob2);
                p.gpu->ops->matmul_fused(p.gpu, d1, dx, &g, eps, &w, bias, n, BK_MM_PLAIN);
                p.gpu->ops->matmul_fused(p.gpu, d2, dx, NULL, 0, &w2, NULL, n, add ? BK_MM_ADD : BK_MM_PLAIN);
                down(p.gpu, a1, d1, (size_t)n * rows * 4);
                down(p.gpu, a2, d2, (size_t)n * rows2 * 4);
                p.gpu->ops->buf_upload(p.gpu, d2, s0, ob2);
                p.gpu->ops->matmul_fused_side(p.gpu, d1, dx, &g, eps, &w, bias, n, d2, &w2, add);
                down(p.gpu, b1, d1, (size_t)n * rows * 4);
                down(p.gpu, b2, d2, (size_t)n * rows2 * 4);
                CHECK_MSG(!memcmp(a1, b1, (size_t)n * rows * 4) && !memcmp(a2, b2, (size_t)n * rows2 * 4),
                          "matmul_fused_side (rows %d, side %d, k %d, %d tokens, add %d, bias %d) differs from the "
                          "two calls", rows, rows2, k, n, add, bias != NULL);
            }
        void *bufs[] = {dx, d1, d2};
        for (int i = 0; i < 3; i++) p.gpu->ops->buf_free(p.gpu, bufs[i]);
        bk_weight *ws[] = {&w, &w2, &g, &b};
        for (int i = 0; i < 4; i++) p.gpu->ops->weight_release(p.gpu, ws[i]);
        free(x); free(s0); free(a1); free(a2); free(b1); free(b2); free(hw); free(hw2); free(hg); free(hb);
    }
    close_pair(&p);
}

/* The device argmax against sample_argmax's rule (the host loop): rows
 * narrower and wider than a block's slice, the maximum repeated across
 * slices, signed zeros, NaN first and NaN elsewhere, all -inf; called twice
 * with other rows (the accumulators are reset by each launch). */
TEST(test_cuda_argmax_matches_the_host_rule) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    enum { ROWS = 8 };
    const int widths[] = {1, 7, 4096, 4097, 8192, 151936, 300001};
    int checked = 0;
    for (int wi = 0; wi < 7; wi++) {
        int cols = widths[wi];
        size_t bytes = (size_t)ROWS * cols * 4;
        float *h = malloc(bytes);
        float *d = p.gpu->ops->buf_alloc(p.gpu, bytes);
        int32_t *dout = p.gpu->ops->buf_alloc(p.gpu, ROWS * 4), got[ROWS];
        for (int round = 0; round < 2; round++) {
            for (int r = 0; r < ROWS; r++) {
                float *x = h + (size_t)r * cols;
                for (int i = 0; i < cols; i++) x[i] = frand() * 8;
                int a = (int)((unsigned)(frand() * 1e6f + 1e6f) % cols), b = cols - 1 - a / 3;
                switch ((r + round) % ROWS) {
                case 1: x[a] = x[b] = 100.f; break;                          /* a tie: the lower index */
                case 2: for (int i = 0; i < cols; i++) x[i] = i % 3 ? 0.f : -0.f; break; /* zeros tie */
                case 3: x[0] = NAN; x[a] = 100.f; break;                      /* NaN first: 0 */
                case 4: x[a] = NAN; x[b] = 50.f; break;                       /* NaN elsewhere: ignored */
                case 5: for (int i = 0; i < cols; i++) x[i] = -INFINITY; break;
                case 6: x[cols - 1] = 1e30f; break;                           /* the last value */
                case 7: x[0] = x[b] = 100.f; break;                          /* the first value */
                default: break;
                }
            }
            p.gpu->ops->buf_upload(p.gpu, d, h, bytes);
            p.gpu->ops->argmax(p.gpu, dout, d, ROWS, cols);
            CHECK(p.gpu->ops->buf_download(p.gpu, got, dout, sizeof got) == 0);
            for (int r = 0; r < ROWS; r++) {
                int want = sample_argmax(h + (size_t)r * cols, cols);
                CHECK_MSG(got[r] == want, "argmax cols %d row %d round %d: %d, host %d", cols, r, round, got[r], want);
                checked++;
            }
        }
        p.gpu->ops->buf_free(p.gpu, d);
        p.gpu->ops->buf_free(p.gpu, dout);
        free(h);
    }
    printf("    %d argmax rows compared with the host loop\n", checked);
    close_pair(&p);
}

/* The device's penalties and logit_bias (k_penalize.cu) against the CPU
 * op, bit for bit (each step rounded as the host rounds it): random calls
 * of penalty_cases.h at 3,000 and 151,936 logits, rows none lists left
 * alone. */
TEST(test_cuda_penalize_rows_equal_the_cpu_op) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    backend *g = p.gpu;
    int changed = 0;
    for (int round = 0; round < 6; round++) {
        pen_call c;
        pen_random_call(&c, round < 4 ? 3000 : 151936);
        size_t bytes = (size_t)c.n_rows * c.cols * sizeof(float);
        float *want = pen_cpu_rows(p.cpu, &c), *got = malloc(bytes), *d = up(g, c.logits, bytes);
        int32_t *dt = up(g, c.tokens, (size_t)c.n_rows * 4), *dr = up(g, c.rows, (size_t)c.n_rows * 4);
        bk_pen_seq *ds = up(g, c.seqs, (size_t)c.n_seqs * sizeof *c.seqs);
        bk_pen_ent *de = up(g, c.ent, (size_t)(c.n_ent ? c.n_ent : 1) * sizeof *c.ent);
        g->ops->penalize_rows(g, d, c.cols, c.n_rows, dt, dr, ds, c.n_seqs, de);
        down(g, got, d, bytes);
        pen_rows_check(&c, want, got, "cuda", &changed);
        void *bufs[] = {d, dt, dr, ds, de};
        for (int i = 0; i < 5; i++) g->ops->buf_free(g, bufs[i]);
        free(want);
        free(got);
        pen_call_free(&c);
    }
    printf("    6 calls equal to the CPU op, %d rows changed\n", changed);
    CHECK(changed > 60);
    close_pair(&p);
}

/* A constraint's masks on the device (k_mask.cu) against the CPU op:
 * random words (all, none, one or all but one bit set) on 5 of 12 rows, at
 * a width that fills its last word and one that does not. */
TEST(test_cuda_mask_rows_equal_the_cpu_op) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    backend *g = p.gpu;
    const int widths[] = {3001, 151936};
    for (int wi = 0; wi < 2; wi++) {
        int cols = widths[wi], R = 12, n = 5, words = (cols + 31) / 32;
        size_t bytes = (size_t)R * cols * 4;
        float *h = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
        uint32_t *bits = malloc((size_t)n * words * 4);
        int32_t rows[5] = {0, 3, 4, 8, 11};
        for (size_t i = 0; i < (size_t)R * cols; i++) h[i] = frand() * 10;
        for (int i = 0; i < n * words; i++) {
            unsigned k = (unsigned)(frand() * 1e6f + 1e6f);
            bits[i] = k % 4 == 0 ? 0xffffffffu : k % 4 == 1 ? 0u : k % 4 == 2 ? 1u << (k % 32) : ~(1u << (k % 32));
        }
        memcpy(want, h, bytes);
        p.cpu->ops->mask_rows(p.cpu, want, cols, rows, bits, n);
        float *d = up(g, h, bytes);
        int32_t *dr = up(g, rows, sizeof rows);
        uint32_t *db = up(g, bits, (size_t)n * words * 4);
        g->ops->mask_rows(g, d, cols, dr, db, n);
        down(g, got, d, bytes);
        CHECK_MSG(!memcmp(got, want, bytes), "cols %d: the device's masked rows differ from the CPU op's", cols);
        g->ops->buf_free(g, d);
        g->ops->buf_free(g, dr);
        g->ops->buf_free(g, db);
        free(h); free(want); free(got); free(bits);
    }
    close_pair(&p);
}

/* The device's log-probabilities (k_logprobs.cu) against the host rule
 * (logprob_cases.h: ids and top values exactly, lz within 1e-5), rows of
 * every kind at 3,000 and 151,936 logits. */
TEST(test_cuda_logprob_rows_match_the_host_rule) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    backend *g = p.gpu;
    const int widths[] = {3000, 151936};
    for (int wi = 0; wi < 2; wi++) {
        int cols = widths[wi], n = 8;
        float *raw = malloc((size_t)n * cols * sizeof *raw);
        int32_t ids[8], rows[8];
        bk_logprobs got[8];
        for (int k = 0; k < n; k++) {
            lp_case_row(raw + (size_t)k * cols, cols, k);
            ids[k] = (k * 101) % cols;
            rows[k] = n - 1 - k;
        }
        float *d = up(g, raw, (size_t)n * cols * sizeof *raw);
        int32_t *di = up(g, ids, sizeof ids), *dr = up(g, rows, sizeof rows);
        bk_logprobs *dout = g->ops->buf_alloc(g, sizeof got);
        g->ops->logprob_rows(g, d, cols, di, dr, n, 20, dout);
        down(g, got, dout, sizeof got);
        for (int k = 0; k < n; k++) {
            char why[200];
            CHECK_MSG(lp_matches(&got[k], raw + (size_t)k * cols, cols, ids[rows[k]], 20, why, sizeof why),
                      "cols %d row %d: %s", cols, k, why);
        }
        void *bufs[] = {d, di, dr, dout};
        for (int i = 0; i < 4; i++) g->ops->buf_free(g, bufs[i]);
        free(raw);
    }
    close_pair(&p);
}

/* The device sampler against the host's distribution (sample_dist): N
 * copies of a row drawn at the stratified uniforms u_j = (j + 1/2) / N. An
 * inverse-CDF draw picks each id for a span of u as long as its
 * probability, so it is drawn round(N p) times, within 1, whatever order
 * the ids are walked in; an id the host keeps out is never drawn. The rows
 * and rules of sample_rows_cases.h. One more row in the call is not listed
 * and keeps its argmax; a second call draws the same ids. */
TEST(test_cuda_sample_rows_draw_the_host_distribution) {
    pair p = {0};
    if (!open_pair(&p)) SKIP("no CUDA GPU");
    const int widths[] = {1000, 151936}, copies[] = {1024, 192};
    int checked = 0;
    for (int wi = 0; wi < 2; wi++) {
        int cols = widths[wi], N = copies[wi];
        size_t bytes = (size_t)(N + 1) * cols * 4;
        float *h = malloc(bytes), *row = malloc((size_t)cols * 4);
        int *count = calloc((size_t)cols, sizeof *count);
        int32_t *got = malloc((size_t)(N + 1) * 4), *again = malloc((size_t)(N + 1) * 4);
        bk_sample_row *sr = malloc((size_t)N * sizeof *sr);
        sampler *smp = sampler_new(cols);
        float *d = p.gpu->ops->buf_alloc(p.gpu, bytes);
        int32_t *dout = p.gpu->ops->buf_alloc(p.gpu, (size_t)(N + 1) * 4);
        for (int kind = 0; kind < SAMPLE_CASE_KINDS; kind++)
            for (int ri = 0; ri < SAMPLE_CASE_RULES; ri++) {
                const sample_params *sp = &sample_case_rules[ri];
                float *x = h;
                for (int i = 0; i < cols; i++) x[i] = sample_case_logit(kind, i, frand());
                for (int c = 1; c <= N; c++) memcpy(h + (size_t)c * cols, x, (size_t)cols * 4);
                for (int j = 0; j < N; j++)
                    sr[j] = (bk_sample_row){j, sp->top_k, sp->temperature, sp->top_p, sp->min_p, (j + 0.5) / N};
                p.gpu->ops->buf_upload(p.gpu, d, h, bytes);
                for (int rep = 0; rep < 2; rep++) {
                    p.gpu->ops->argmax(p.gpu, dout, d, N + 1, cols);
                    p.gpu->ops->sample_rows(p.gpu, dout, d, cols, sr, N);
                    CHECK(p.gpu->ops->buf_download(p.gpu, rep ? again : got, dout, (size_t)(N + 1) * 4) == 0);
                }
                CHECK_MSG(!memcmp(got, again, (size_t)(N + 1) * 4), "cols %d kind %d rules %d: a second call drew other ids",
                          cols, kind, ri);
                CHECK_MSG(got[N] == sample_argmax(x, cols), "cols %d kind %d rules %d: the unlisted row lost its argmax",
                          cols, kind, ri);
                memcpy(row, x, (size_t)cols * 4);
                const int32_t *ids;
                const float *probs;
                int n = sample_dist(smp, sp, row, &ids, &probs);
                memset(count, 0, (size_t)cols * sizeof *count);
                for (int j = 0; j < N; j++) {
                    CHECK_MSG(got[j] >= 0 && got[j] < cols, "cols %d: id %d out of range", cols, got[j]);
                    if (got[j] >= 0 && got[j] < cols) count[got[j]]++;
                }
                int drawn = 0;
                for (int k = 0; k < n; k++) {
                    double want = N * (double)probs[k];
                    CHECK_MSG(fabs(count[ids[k]] - want) <= 1.05, "cols %d kind %d rules %d: id %d drawn %d times, %.2f expected",
                              cols, kind, ri, ids[k], count[ids[k]], want);
                    drawn += count[ids[k]];
                }
                CHECK_MSG(drawn == N, "cols %d kind %d rules %d: %d of %d draws outside the host's %d kept ids", cols, kind,
                          ri, N - drawn, N, n);
                checked++;
            }
        p.gpu->ops->buf_free(p.gpu, d);
        p.gpu->ops->buf_free(p.gpu, dout);
        sampler_free(smp);
        free(h), free(row), free(count), free(got), free(again), free(sr);
    }
    printf("    %d distributions drawn on the device against the host's\n", checked);
    close_pair(&p);
}
