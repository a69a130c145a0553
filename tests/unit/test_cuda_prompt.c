/* test_cuda_prompt.c — the CUDA prompt-row path (tensor-core GEMM through
 * cuBLASLt, tensor-core flash attention) against the CPU ops, and its row
 * invariance: a row's result is bitwise the same whatever the number of rows
 * in the call or the tiling (SKIP without a GPU).
 * The matmul in each of its modes (plain, residual add, SwiGLU input) and
 * weight types (bf16 and f16 on the GEMM, f32 on the vector fallback).
 * Tolerances (bf16 inputs, fp32 accumulation): matmul |gpu - cpu| <= 8e-3 *
 * sum|w x| per output; attention |gpu - cpu| <= 2e-2 (outputs are averages
 * of values in [-1, 1]). */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "kv_upload.h"
#include "test.h"

static unsigned rng = 777;
static float frnd(void) {
    rng = rng * 1664525u + 1013904223u;
    return ((rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

static void *dev_copy(backend *be, const void *h, size_t bytes) {
    void *d = be->ops->buf_alloc(be, bytes);
    be->ops->buf_upload(be, d, h, bytes);
    return d;
}

static void dev_read(backend *be, void *h, const void *d, size_t bytes) {
    CHECK(be->ops->buf_download(be, h, d, bytes) == 0);
}

/* One case of the prompt matmul in one mode against the CPU: ADD starts
 * from a random out, SWIGLU_IN takes (n, 2k) [gate | up] rows, a norm (nc /
 * ng, else NULL) normalises the input rows first; then the first 1 / 7 /
 * 64 / 65 / 129 / 268 / 513 rows alone, bitwise (k_gemm.cu's row tiers:
 * <= 64, <= 128, <= 256, <= 512 and more rows may each take another
 * algorithm). */
static void check_prompt_matmul(backend *cpu, backend *gpu, const bk_weight *wc, const bk_weight *wg,
                                const bk_weight *bc, const bk_weight *bg, const bk_weight *nc, const bk_weight *ng,
                                const float *wf, int rows, int k, int mode) {
    int n = 700, kin = mode & BK_MM_SWIGLU_IN ? 2 * k : k;
    float *x = malloc((size_t)n * kin * 4), *act = malloc((size_t)n * k * 4), *base = malloc((size_t)n * rows * 4),
          *oc = malloc((size_t)n * rows * 4), *og = malloc((size_t)n * rows * 4), *os = malloc((size_t)n * rows * 4);
    for (size_t i = 0; i < (size_t)n * kin; i++) x[i] = frnd() * (mode & BK_MM_SWIGLU_IN ? 3.0f : 1.0f);
    for (size_t i = 0; i < (size_t)n * rows; i++) base[i] = mode & BK_MM_ADD ? frnd() * 4.0f : 0.0f;
    if (mode & BK_MM_SWIGLU_IN) cpu->ops->silu_mul(cpu, act, x, n, k);
    else if (nc) cpu->ops->rmsnorm(cpu, act, k, x, k, nc, n, 1, k, 1e-6f);
    else memcpy(act, x, (size_t)n * k * 4);
    cpu->ops->matmul(cpu, oc, act, wc, bc, n);
    for (size_t i = 0; i < (size_t)n * rows; i++) oc[i] += base[i];
    float *dx = dev_copy(gpu, x, (size_t)n * kin * 4), *dout = dev_copy(gpu, base, (size_t)n * rows * 4);
    gpu->ops->matmul_prompt(gpu, dout, dx, ng, 1e-6f, wg, bg, n, mode);
    dev_read(gpu, og, dout, (size_t)n * rows * 4);
    double worst = 0;
    for (int t = 0; t < n; t++)
        for (int r = 0; r < rows; r++) {
            double sum = 1.0;
            for (int j = 0; j < k; j++) sum += fabs((double)wf[(size_t)r * k + j] * act[(size_t)t * k + j]);
            double e = fabs((double)og[(size_t)t * rows + r] - oc[(size_t)t * rows + r]) / sum;
            if (e > worst) worst = e;
        }
    CHECK_MSG(worst < 8e-3, "prompt gemm %dx%d mode %d%s: max err %g of sum|wx|", rows, k, mode, nc ? " normed" : "",
              worst);
    int ns[] = {1, 7, 64, 65, 129, 268, 513};
    for (int i = 0; i < (int)(sizeof ns / sizeof *ns); i++) {
        gpu->ops->buf_upload(gpu, dout, base, (size_t)ns[i] * rows * 4);
        gpu->ops->matmul_prompt(gpu, dout, dx, ng, 1e-6f, wg, bg, ns[i], mode);
        dev_read(gpu, os, dout, (size_t)ns[i] * rows * 4);
        CHECK_MSG(!memcmp(os, og, (size_t)ns[i] * rows * 4),
                  "prompt gemm %dx%d mode %d%s: %d rows differ from the same rows of 700", rows, k, mode,
                  nc ? " normed" : "", ns[i]);
    }
    gpu->ops->buf_free(gpu, dx);
    gpu->ops->buf_free(gpu, dout);
    free(x); free(act); free(base); free(oc); free(og); free(os);
}

TEST(test_cuda_prompt_gemm_matches_cpu_and_is_row_invariant) {
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    backend *cpu = NULL, *gpu = NULL;
    CHECK(backend_cpu_new(&cpu, 2) == 0);
    CHECK(backend_cuda_new(&gpu, 0) == 0);
    CHECK_MSG(gpu->ops->matmul_prompt != NULL, "the CUDA backend has no prompt matmul");
    struct { dtype_t dt; int rows, k; bool bias; } cases[] = {
        {DTYPE_BF16, 1024, 2048, false}, {DTYPE_F16, 256, 512, false}, {DTYPE_BF16, 384, 512, true},
        {DTYPE_F32, 128, 256, false}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int rows = cases[ci].rows, k = cases[ci].k, wb = cases[ci].dt == DTYPE_F32 ? 4 : 2;
        void *wh = malloc((size_t)rows * k * wb);
        float *bh = malloc((size_t)rows * 4), *wf = malloc((size_t)rows * k * 4), *gh = malloc((size_t)k * 4);
        for (size_t i = 0; i < (size_t)rows * k; i++) {
            float v = frnd() * 0.5f;
            if (cases[ci].dt == DTYPE_F32) wf[i] = ((float *)wh)[i] = v;
            else if (cases[ci].dt == DTYPE_BF16) wf[i] = bf16_to_f32(((uint16_t *)wh)[i] = f32_to_bf16(v));
            else wf[i] = f16_to_f32(((uint16_t *)wh)[i] = f32_to_f16(v));
        }
        for (int i = 0; i < rows; i++) bh[i] = frnd();
        for (int i = 0; i < k; i++) gh[i] = 1.0f + 0.5f * frnd();
        st_tensor tw = {.name = (char *)"w", .dtype = cases[ci].dt, .n_dims = 2, .shape = {rows, k}, .data = wh,
                        .nbytes = (size_t)rows * k * wb};
        st_tensor tb = {.name = (char *)"b", .dtype = DTYPE_F32, .n_dims = 1, .shape = {rows}, .data = bh,
                        .nbytes = (size_t)rows * 4};
        st_tensor tg = {.name = (char *)"g", .dtype = DTYPE_F32, .n_dims = 1, .shape = {k}, .data = gh,
                        .nbytes = (size_t)k * 4};
        const st_tensor *pw[1] = {&tw}, *pb[1] = {&tb}, *pg[1] = {&tg};
        bk_weight wc, wg, bc, bg, gc, gg;
        CHECK(cpu->ops->weight_init(cpu, &gc, pg, 1) == 0);
        CHECK(gpu->ops->weight_init(gpu, &gg, pg, 1) == 0);
        CHECK(cpu->ops->weight_init(cpu, &wc, pw, 1) == 0);
        CHECK(gpu->ops->weight_init(gpu, &wg, pw, 1) == 0);
        CHECK(cpu->ops->weight_init(cpu, &bc, pb, 1) == 0);
        CHECK(gpu->ops->weight_init(gpu, &bg, pb, 1) == 0);
        const bk_weight *bcp = cases[ci].bias ? &bc : NULL, *bgp = cases[ci].bias ? &bg : NULL;
        /* the model's uses: normed (qkv, gate|up), ADD (o), ADD | SWIGLU_IN
         * (down); plain, SWIGLU_IN alone and a normed ADD too */
        int modes[4] = {BK_MM_PLAIN, BK_MM_ADD, BK_MM_SWIGLU_IN, BK_MM_ADD | BK_MM_SWIGLU_IN};
        for (int mi = 0; mi < 4; mi++)
            check_prompt_matmul(cpu, gpu, &wc, &wg, bcp, bgp, NULL, NULL, wf, rows, k, modes[mi]);
        for (int mi = 0; mi < 2; mi++)
            check_prompt_matmul(cpu, gpu, &wc, &wg, bcp, bgp, &gc, &gg, wf, rows, k, modes[mi]);
        gpu->ops->weight_release(gpu, &gg);
        cpu->ops->weight_release(cpu, &gc);
        gpu->ops->weight_release(gpu, &wg);
        gpu->ops->weight_release(gpu, &bg);
        cpu->ops->weight_release(cpu, &wc);
        cpu->ops->weight_release(cpu, &bc);
        free(wh); free(bh); free(wf); free(gh);
    }
    backend_free(cpu);
    backend_free(gpu);
}

/* tiles of <= BK_PROMPT_TILE consecutive rows (one sequence here) */
static int cut_tiles(int32_t *tiles, int n_rows, int first_len) {
    int nt = 0;
    for (int r = 0; r < n_rows;) {
        int len = nt == 0 && first_len ? first_len : BK_PROMPT_TILE;
        if (len > n_rows - r) len = n_rows - r;
        tiles[2 * nt] = r;
        tiles[2 * nt + 1] = len;
        nt++;
        r += len;
    }
    return nt;
}

TEST(test_cuda_prompt_attention_matches_cpu_and_is_tiling_invariant) {
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    backend *cpu = NULL, *gpu = NULL;
    CHECK(backend_cpu_new(&cpu, 2) == 0);
    if (cpu) CHECK(backend_set_kv_type(cpu, "f32") == 0); /* the reference reads host f32 caches */
    CHECK(backend_cuda_new(&gpu, 0) == 0);
    /* (query heads, KV heads, head_dim): each head_dim at a group of 4 (4
     * heads a block, 2 a warp below 256), then groups of 2 (2 a block, 2 a
     * warp: Qwen3-1.7B) and 3 (one head a block and a warp) */
    int shapes[5][3] = {{8, 2, 64}, {8, 2, 128}, {8, 2, 256}, {8, 4, 128}, {6, 2, 128}};
    for (int si = 0; si < 5; si++) {
        /* 2300 rows: three 1024-key segments of the prompt kernel */
        int nh = shapes[si][0], nkv = shapes[si][1], hd = shapes[si][2], kv_dim = nkv * hd, bs = 16, L = 2300,
            nblocks = 150;
        int max_blocks = (L + bs - 1) / bs + 1;
        int32_t *tables = malloc((size_t)2 * max_blocks * 4);
        for (int i = 0; i < 2 * max_blocks; i++) tables[i] = (i * 7 + 3) % nblocks; /* scattered, seqs share none needed */
        size_t cache = (size_t)nblocks * bs * kv_dim;
        float *kc = malloc(cache * 4), *vc = malloc(cache * 4);
        for (size_t i = 0; i < cache; i++) { kc[i] = frnd(); vc[i] = frnd(); }
        /* rows: L prompt rows of seq 0 at positions 0..L-1 (k/v already in the cache) */
        int qs = nh * hd;
        int32_t *pos = malloc((size_t)(L + 1) * 4), *seq = calloc((size_t)L + 1, 4), *slots = calloc((size_t)L + 1, 4);
        for (int i = 0; i < L; i++) pos[i] = i;
        float *q = malloc((size_t)(L + 1) * qs * 4), *oc = malloc((size_t)L * qs * 4), *og = malloc((size_t)L * qs * 4),
              *o2 = malloc((size_t)L * qs * 4);
        for (size_t i = 0; i < (size_t)(L + 1) * qs; i++) q[i] = frnd();
        float sc = 1.0f / sqrtf((float)hd);
        bk_attn_batch abc = {L, pos, seq, slots, tables, max_blocks, bs, L - 1, nblocks * bs, 0, NULL, 0};
        void *dkc = kv_upload(gpu, kc, cache), *dvc = kv_upload(gpu, vc, cache); /* kc, vc: as the device holds them */
        cpu->ops->attention(cpu, oc, q, qs, kc, vc, &abc, nh, nkv, hd, sc);
        float *dq = dev_copy(gpu, q, (size_t)(L + 1) * qs * 4);
        int32_t *dpos = dev_copy(gpu, pos, (size_t)(L + 1) * 4), *dseq = dev_copy(gpu, seq, (size_t)(L + 1) * 4),
                *dtab = dev_copy(gpu, tables, (size_t)2 * max_blocks * 4), *dslots = dev_copy(gpu, slots, (size_t)(L + 1) * 4);
        int32_t tiles[256];
        int nt = cut_tiles(tiles, L, 0);
        int32_t *dtiles = dev_copy(gpu, tiles, (size_t)nt * 8);
        float *dout = gpu->ops->buf_alloc(gpu, (size_t)(L + 1) * qs * 4);
        bk_attn_batch abg = {L, dpos, dseq, dslots, dtab, max_blocks, bs, L - 1, nblocks * bs, L, dtiles, nt};
        gpu->ops->attention(gpu, dout, dq, qs, dkc, dvc, &abg, nh, nkv, hd, sc);
        dev_read(gpu, og, dout, (size_t)L * qs * 4);
        double worst = 0;
        for (size_t i = 0; i < (size_t)L * qs; i++) {
            double e = fabs((double)og[i] - oc[i]);
            if (e > worst) worst = e;
        }
        CHECK_MSG(worst < 2e-2, "prompt attention %d/%d heads, hd=%d: max abs err %g", nh, nkv, hd, worst);
        /* the same rows in two calls (137 rows cut 37 + 64 + 36, then 163
         * rows) and the tiles padded with unused entries: bitwise equal */
        int split = 137;
        int32_t t2[256];
        int nt2 = cut_tiles(t2, split, 37);
        t2[2 * nt2] = t2[2 * nt2 + 1] = 0; /* an unused entry */
        int32_t *dt2 = dev_copy(gpu, t2, (size_t)(nt2 + 1) * 8);
        bk_attn_batch ab1 = {split, dpos, dseq, dslots, dtab, max_blocks, bs, split - 1, nblocks * bs, split, dt2, nt2 + 1};
        gpu->ops->attention(gpu, dout, dq, qs, dkc, dvc, &ab1, nh, nkv, hd, sc);
        dev_read(gpu, o2, dout, (size_t)split * qs * 4);
        int32_t t3[256];
        int nt3 = cut_tiles(t3, L - split, 0);
        int32_t *dt3 = dev_copy(gpu, t3, (size_t)nt3 * 8);
        bk_attn_batch ab2 = {L - split, dpos + split, dseq, dslots, dtab, max_blocks, bs, L - 1, nblocks * bs,
                             L - split, dt3, nt3};
        gpu->ops->attention(gpu, dout, dq + (size_t)split * qs, qs, dkc, dvc, &ab2, nh, nkv, hd, sc);
        dev_read(gpu, o2 + (size_t)split * qs, dout, (size_t)(L - split) * qs * 4);
        CHECK_MSG(!memcmp(o2, og, (size_t)L * qs * 4), "prompt attention %d/%d heads, hd=%d: rows differ with another tiling", nh, nkv, hd);
        /* the prompt's last 16 rows alone (the tail after a prefix-cache
         * hit: one short tile deep in the context): bitwise the same rows */
        int32_t t4[2] = {0, 16};
        int32_t *dt4 = dev_copy(gpu, t4, 8);
        bk_attn_batch ab4 = {16, dpos + (L - 16), dseq, dslots, dtab, max_blocks, bs, L - 1, nblocks * bs, 16, dt4, 1};
        gpu->ops->attention(gpu, dout, dq + (size_t)(L - 16) * qs, qs, dkc, dvc, &ab4, nh, nkv, hd, sc);
        dev_read(gpu, o2, dout, (size_t)16 * qs * 4);
        CHECK_MSG(!memcmp(o2, og + (size_t)(L - 16) * qs, (size_t)16 * qs * 4),
                  "prompt attention %d/%d heads, hd=%d: the last 16 rows alone differ", nh, nkv, hd);
        gpu->ops->buf_free(gpu, dt4);
        /* a prompt row next to a generated row: the generated row (flash-
         * decoding) is bitwise what it is alone */
        int32_t mpos[2] = {5, 200}, mseq[2] = {0, 0}, mt[4] = {0, 1, 0, 0};
        float *qm = malloc((size_t)2 * qs * 4);
        memcpy(qm, q + (size_t)5 * qs, (size_t)qs * 4);
        memcpy(qm + qs, q + (size_t)200 * qs, (size_t)qs * 4);
        float *dqm = dev_copy(gpu, qm, (size_t)2 * qs * 4);
        int32_t *dmpos = dev_copy(gpu, mpos, 8), *dmseq = dev_copy(gpu, mseq, 8), *dmt = dev_copy(gpu, mt, 16);
        bk_attn_batch abm = {2, dmpos, dmseq, dslots, dtab, max_blocks, bs, 200, nblocks * bs, 1, dmt, 2};
        bk_attn_batch aba = {1, dmpos + 1, dmseq, dslots, dtab, max_blocks, bs, 200, nblocks * bs, 0, NULL, 0};
        float *om = malloc((size_t)2 * qs * 4), *oa = malloc((size_t)qs * 4);
        gpu->ops->attention(gpu, dout, dqm, qs, dkc, dvc, &abm, nh, nkv, hd, sc);
        dev_read(gpu, om, dout, (size_t)2 * qs * 4);
        gpu->ops->attention(gpu, dout, dqm + qs, qs, dkc, dvc, &aba, nh, nkv, hd, sc);
        dev_read(gpu, oa, dout, (size_t)qs * 4);
        CHECK_MSG(!memcmp(om + qs, oa, (size_t)qs * 4), "attention %d/%d heads, hd=%d: a generated row changed next to a prompt row", nh, nkv, hd);
        /* and the prompt row at position 5 equals row 5 of the full run */
        CHECK_MSG(!memcmp(om, og + (size_t)5 * qs, (size_t)qs * 4), "prompt attention %d/%d heads, hd=%d: lone row differs", nh, nkv, hd);
        void *bufs[] = {dkc, dvc, dq, dpos, dseq, dtab, dslots, dtiles, dout, dt2, dt3, dmpos, dmseq, dmt, dqm};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gpu->ops->buf_free(gpu, bufs[i]);
        free(tables); free(kc); free(vc); free(pos); free(seq); free(slots); free(q); free(oc); free(og); free(o2); free(qm); free(om); free(oa);
    }
    backend_free(cpu);
    backend_free(gpu);
}

/* Rows deep in a context, where the segments grow (4 to an octave past
 * 4096 keys): windows of rows across the 4096 and 8192 boundaries and at
 * 17k keys against the CPU, then each window alone, cut into other tiles:
 * bitwise the same rows. */
TEST(test_cuda_prompt_attention_deep_segments) {
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    backend *cpu = NULL, *gpu = NULL;
    CHECK(backend_cpu_new(&cpu, 2) == 0);
    if (cpu) CHECK(backend_set_kv_type(cpu, "f32") == 0);
    CHECK(backend_cuda_new(&gpu, 0) == 0);
    int nh = 8, nkv = 2, hd = 128, kv_dim = nkv * hd, bs = 16, L = 17000, nblocks = L / bs + 8;
    int max_blocks = (L + bs - 1) / bs + 1;
    int win[3][2] = {{4090, 70}, {8150, 100}, {16930, 70}}, n = 240; /* first position, rows */
    int32_t *tables = malloc((size_t)max_blocks * 4);
    for (int i = 0; i < max_blocks; i++) tables[i] = (i * 7 + 3) % nblocks;
    size_t cache = (size_t)nblocks * bs * kv_dim;
    float *kc = malloc(cache * 4), *vc = malloc(cache * 4);
    for (size_t i = 0; i < cache; i++) { kc[i] = frnd(); vc[i] = frnd(); }
    int qs = nh * hd;
    int32_t *pos = malloc((size_t)n * 4), *seq = calloc((size_t)n, 4), *slots = calloc((size_t)n, 4);
    for (int w = 0, r = 0; w < 3; w++)
        for (int i = 0; i < win[w][1]; i++) pos[r++] = win[w][0] + i;
    float *q = malloc((size_t)n * qs * 4), *oc = malloc((size_t)n * qs * 4), *og = malloc((size_t)n * qs * 4),
          *o2 = malloc((size_t)n * qs * 4);
    for (size_t i = 0; i < (size_t)n * qs; i++) q[i] = frnd();
    float sc = 1.0f / sqrtf((float)hd);
    bk_attn_batch abc = {n, pos, seq, slots, tables, max_blocks, bs, L - 1, nblocks * bs, 0, NULL, 0};
    cpu->ops->attention(cpu, oc, q, qs, kc, vc, &abc, nh, nkv, hd, sc);
    void *dkc = kv_upload(gpu, kc, cache), *dvc = kv_upload(gpu, vc, cache);
    float *dq = dev_copy(gpu, q, (size_t)n * qs * 4), *dout = gpu->ops->buf_alloc(gpu, (size_t)n * qs * 4);
    int32_t *dpos = dev_copy(gpu, pos, (size_t)n * 4), *dseq = dev_copy(gpu, seq, (size_t)n * 4),
            *dtab = dev_copy(gpu, tables, (size_t)max_blocks * 4), *dslots = dev_copy(gpu, slots, (size_t)n * 4);
    int32_t tiles[64];
    int nt = 0;
    for (int w = 0, r = 0; w < 3; r += win[w][1], w++) { /* each window's tiles, at its rows */
        int k = cut_tiles(tiles + 2 * nt, win[w][1], 0);
        for (int t = nt; t < nt + k; t++) tiles[2 * t] += r;
        nt += k;
    }
    int32_t *dtiles = dev_copy(gpu, tiles, (size_t)nt * 8);
    bk_attn_batch abg = {n, dpos, dseq, dslots, dtab, max_blocks, bs, L - 1, nblocks * bs, n, dtiles, nt};
    gpu->ops->attention(gpu, dout, dq, qs, dkc, dvc, &abg, nh, nkv, hd, sc);
    dev_read(gpu, og, dout, (size_t)n * qs * 4);
    double worst = 0;
    for (size_t i = 0; i < (size_t)n * qs; i++)
        if (fabs((double)og[i] - oc[i]) > worst) worst = fabs((double)og[i] - oc[i]);
    CHECK_MSG(worst < 2e-2, "deep prompt attention: max abs err %g", worst);
    for (int w = 0, r = 0; w < 3; r += win[w][1], w++) {
        int32_t t2[16];
        int nt2 = cut_tiles(t2, win[w][1], 23);
        int32_t *dt2 = dev_copy(gpu, t2, (size_t)nt2 * 8);
        int mp = win[w][0] + win[w][1] - 1;
        bk_attn_batch ab1 = {win[w][1], dpos + r, dseq, dslots, dtab, max_blocks, bs, mp, nblocks * bs, win[w][1], dt2, nt2};
        gpu->ops->attention(gpu, dout, dq + (size_t)r * qs, qs, dkc, dvc, &ab1, nh, nkv, hd, sc);
        dev_read(gpu, o2, dout, (size_t)win[w][1] * qs * 4);
        CHECK_MSG(!memcmp(o2, og + (size_t)r * qs, (size_t)win[w][1] * qs * 4),
                  "deep prompt attention: the rows from %d differ alone, retiled", win[w][0]);
        gpu->ops->buf_free(gpu, dt2);
    }
    void *bufs[] = {dkc, dvc, dq, dpos, dseq, dtab, dslots, dtiles, dout};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gpu->ops->buf_free(gpu, bufs[i]);
    free(tables); free(kc); free(vc); free(pos); free(seq); free(slots); free(q); free(oc); free(og); free(o2);
    backend_free(cpu);
    backend_free(gpu);
}
