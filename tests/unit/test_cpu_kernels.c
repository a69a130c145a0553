/* test_cpu_kernels.c — the SIMD kernels of each ISA the CPU has against the
 * scalar ones on random data. Attention (dots, exp_sum, axpys): runs of 1..16
 * positions, 1..8 query heads per key/value row, head sizes that take the
 * vector path and ones that fall back (1e-5 relative, 2e-6 absolute); exp_sum's
 * polynomial against expf over [-100, 0] (2e-6 relative); max and scale equal
 * to the scalar loops (NaNs skipped, products bitwise); silu_mul over
 * [-100, 100] against x / (1 + expf(-x)) (2e-6 relative). Matmul (bf16, f16,
 * f32 weights, through the packed layouts): 1..19 tokens x 1..69 rows (one
 * to five panels, whole and partial), row lengths of 1 to 1543; the scalar
 * kernel within 1e-5 of the sum of |x w| of the exact (double) sum, each
 * ISA bitwise the scalar kernel
 * (one FMA chain per result in every ISA), and batch invariance: each
 * (token, row) result is bitwise the one the kernel gives that token and row
 * alone. Over a bf16 cache, dots_bf16t (keys in column pairs) and
 * axpys_bf16 (value rows): every ISA bitwise its scalar loop. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "base/dtype.h"
#include "test.h"

static float frand(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return ((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static int supported(const char *isa) {
    __builtin_cpu_init();
    if (!strcmp(isa, "avx2")) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

/* relative, with an absolute floor for sums that cancel (terms are ~1 here,
 * so reordering a 128-term sum moves it by up to ~1e-6) */
static int close_to(float a, float b, float rel) { return fabsf(a - b) <= rel * fabsf(b) + 2e-6f; }

TEST(test_cpu_attention_kernels_match_scalar) {
    const cpu_kernels *isas[2] = {&cpu_kernels_avx2, &cpu_kernels_avx512};
    const cpu_kernels *ref = &cpu_kernels_scalar;
    unsigned seed = 7;
    int checked = 0;
    for (int ii = 0; ii < 2; ii++) {
        const cpu_kernels *k = isas[ii];
        if (!supported(k->isa)) {
            printf("    (%s not supported here: not checked)\n", k->isa);
            continue;
        }
        static const int hds[3] = {64, 128, 72}, grps[3] = {1, 4, 8}, ns[4] = {1, 5, 8, 16};
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 4; c++) {
                    int hd = hds[a], grp = grps[b], n = ns[c], kstride = hd * 2, ss = 40;
                    float q[8 * 128], kv[16 * 256], s1[8 * 40], s2[8 * 40], o1[8 * 128], o2[8 * 128];
                    for (int i = 0; i < grp * hd; i++) q[i] = frand(&seed);
                    for (int i = 0; i < n * kstride; i++) kv[i] = frand(&seed);
                    for (int i = 0; i < 8 * 40; i++) s1[i] = s2[i] = 0;
                    ref->dots(s1, ss, q, grp, kv, kstride, n, hd, 0.125f);
                    k->dots(s2, ss, q, grp, kv, kstride, n, hd, 0.125f);
                    for (int h = 0; h < grp; h++)
                        for (int j = 0; j < n; j++)
                            CHECK_MSG(close_to(s2[h * ss + j], s1[h * ss + j], 1e-5f),
                                      "%s dots hd %d grp %d n %d: [%d][%d] %g vs %g", k->isa, hd, grp, n, h, j,
                                      s2[h * ss + j], s1[h * ss + j]);
                    for (int i = 0; i < grp * hd; i++) o1[i] = o2[i] = frand(&seed);
                    ref->axpys(o1, s1, ss, kv, kstride, n, grp, hd);
                    k->axpys(o2, s1, ss, kv, kstride, n, grp, hd);
                    for (int i = 0; i < grp * hd; i++)
                        CHECK_MSG(close_to(o2[i], o1[i], 1e-5f), "%s axpys hd %d grp %d n %d: [%d] %g vs %g", k->isa,
                                  hd, grp, n, i, o2[i], o1[i]);
                    checked++;
                }
        for (int n = 1; n <= 70; n += 3) { /* max and scale: the scalar loops' values */
            float x[70], y[70], z[70];
            for (int i = 0; i < n; i++) x[i] = 10.0f * frand(&seed), y[i] = z[i] = x[i];
            if (n > 5) x[n / 2] = NAN; /* skipped */
            float want = cpu_kernels_scalar.max(x, n), got = k->max(x, n);
            CHECK_MSG(got == want, "%s max n %d: %g, scalar %g", k->isa, n, got, want);
            cpu_kernels_scalar.scale(y, n, 0.37f);
            k->scale(z, n, 0.37f);
            CHECK_MSG(!memcmp(y, z, (size_t)n * sizeof(float)), "%s scale n %d differs from the scalar loop", k->isa, n);
        }
        for (int n = 1; n <= 70; n += 23) { /* tails of every length class */
            float x[70], y[70], ys = 0;
            for (int i = 0; i < n; i++) x[i] = -100.0f * (i + 0.5f) / n;
            for (int i = 0; i < n; i++) y[i] = x[i];
            float sum = k->exp_sum(y, n, 0.0f);
            for (int i = 0; i < n; i++) {
                float want = expf(x[i]);
                CHECK_MSG(fabsf(y[i] - want) <= 2e-6f * want + 1e-37f, "%s exp(%g) = %g, expf %g", k->isa, x[i], y[i],
                          want);
                ys += y[i];
            }
            CHECK_MSG(close_to(sum, ys, 1e-5f), "%s exp_sum %g vs the sum of its outputs %g", k->isa, sum, ys);
        }
    }
    printf("    %d kernel cases compared with the scalar kernels\n", checked);
}

TEST(test_cpu_pack_tokens_is_cpu_pack_tokens) {
    const cpu_kernels *isas[3] = {&cpu_kernels_scalar, &cpu_kernels_avx2, &cpu_kernels_avx512};
    static const int64_t ks[5] = {1, 15, 16, 47, 512};
    unsigned seed = 13;
    int checked = 0;
    float *x = malloc(40 * 600 * sizeof(float)), *want = malloc(48 * 512 * sizeof(float)),
          *got = malloc(48 * 512 * sizeof(float));
    for (int i = 0; i < 40 * 600; i++) x[i] = frand(&seed);
    for (int ii = 0; ii < 3; ii++) {
        const cpu_kernels *k = isas[ii];
        if (ii > 0 && !supported(k->isa)) continue;
        for (int a = 0; a < 5; a++)
            for (int n = 1; n <= 40; n += 3) {
                size_t bytes = (size_t)((n + k->mm_group - 1) / k->mm_group) * k->mm_group * (size_t)ks[a] * sizeof(float);
                memset(want, 0x5a, bytes);
                memset(got, 0x5a, bytes);
                cpu_pack_tokens(want, x, 600, n, ks[a], k->mm_group);
                k->pack_tokens(got, x, 600, n, ks[a]);
                CHECK_MSG(!memcmp(want, got, bytes), "%s pack_tokens n %d k %ld differs", k->isa, n, (long)ks[a]);
                checked++;
            }
    }
    free(x), free(want), free(got);
    printf("    %d packings compared bitwise with cpu_pack_tokens\n", checked);
}

TEST(test_cpu_argmax_matches_scalar) {
    const cpu_kernels *isas[2] = {&cpu_kernels_avx2, &cpu_kernels_avx512};
    unsigned seed = 9;
    int checked = 0;
    for (int ii = 0; ii < 2; ii++) {
        const cpu_kernels *k = isas[ii];
        if (!supported(k->isa)) continue;
        for (int n = 1; n <= 300; n += 13)
            for (int variant = 0; variant < 5; variant++) {
                float x[300];
                for (int i = 0; i < n; i++) x[i] = variant == 1 ? (float)(int)(4 * frand(&seed)) : frand(&seed);
                if (variant == 2) x[(n * 3) / 4] = NAN, x[n / 2] = NAN; /* NaNs never win */
                if (variant == 3) x[0] = NAN;                         /* the scalar loop's 0 */
                if (variant == 4)                                     /* signed zeros tie */
                    for (int i = 0; i < n; i++) x[i] = i % 3 ? -0.0f : 0.0f;
                int want = cpu_kernels_scalar.argmax(x, n), got = k->argmax(x, n);
                CHECK_MSG(got == want, "%s argmax n %d variant %d: %d, scalar %d", k->isa, n, variant, got, want);
                checked++;
            }
    }
    printf("    %d argmax cases compared with the scalar loop (ties, NaNs, signed zeros)\n", checked);
}

TEST(test_cpu_silu_mul_matches_scalar) {
    const cpu_kernels *isas[2] = {&cpu_kernels_avx2, &cpu_kernels_avx512};
    unsigned seed = 3;
    int checked = 0;
    for (int ii = 0; ii < 2; ii++) {
        const cpu_kernels *k = isas[ii];
        if (!supported(k->isa)) continue;
        for (int n = 1; n <= 203; n += 29) { /* tails of every length class */
            float g[203], u[203], want[203], got[203];
            for (int i = 0; i < n; i++) g[i] = 100.0f * frand(&seed), u[i] = frand(&seed);
            g[0] = 0.0f;
            if (n > 2) g[1] = -0.0f, g[2] = 1e-3f * frand(&seed);
            cpu_kernels_scalar.silu_mul(want, g, u, n);
            k->silu_mul(got, g, u, n);
            for (int i = 0; i < n; i++)
                CHECK_MSG(fabsf(got[i] - want[i]) <= 2e-6f * fabsf(want[i]) + 1e-30f, "%s silu(%g) * %g = %g, scalar %g",
                          k->isa, g[i], u[i], got[i], want[i]);
            checked += n;
        }
    }
    printf("    %d silu_mul results compared with the scalar kernel\n", checked);
}

/* out (n, nr) = x (n, k) times w (nr rows of k, dtype dt, element size es)
 * with kernel set ks, through the backend's layouts: w packed into panels,
 * x into token groups, every panel against every group */
static void run_mm(const cpu_kernels *ks, int dt, float *out, const float *x, int n, const void *w, int64_t k,
                   int nr) {
    size_t es = dtype_size(dt);
    int panels = (nr + CPU_PANEL - 1) / CPU_PANEL, groups = (n + ks->mm_group - 1) / ks->mm_group;
    char *pw = malloc((size_t)panels * CPU_PANEL * (size_t)k * es);
    float *xg = malloc((size_t)groups * ks->mm_group * (size_t)k * sizeof(float));
    for (int p = 0; p < panels; p++) {
        const void *rows[CPU_PANEL];
        int rr = nr - p * CPU_PANEL < CPU_PANEL ? nr - p * CPU_PANEL : CPU_PANEL;
        for (int r = 0; r < rr; r++) rows[r] = (const char *)w + (size_t)(p * CPU_PANEL + r) * (size_t)k * es;
        cpu_pack_panel(pw + (size_t)p * CPU_PANEL * (size_t)k * es, rows, rr, k, es);
    }
    cpu_pack_tokens(xg, x, (int)k, n, k, ks->mm_group);
    cpu_mm_panels(ks, dt, out, nr, xg, n, pw, k, nr, 0, panels);
    free(pw), free(xg);
}

TEST(test_cpu_matmul_kernels_match_scalar) {
    const cpu_kernels *isas[3] = {&cpu_kernels_scalar, &cpu_kernels_avx2, &cpu_kernels_avx512};
    static const int dts[3] = {DTYPE_BF16, DTYPE_F16, DTYPE_F32};
    static const int64_t ks[5] = {512, 1, 47, 80, 1543};
    unsigned seed = 11;
    int checked = 0;
    for (int ii = 0; ii < 3; ii++) {
        const cpu_kernels *kk = isas[ii];
        if (ii > 0 && !supported(kk->isa)) continue;
        for (int d = 0; d < 3; d++)
            for (int a = 0; a < 5; a++) {
                int64_t k = ks[a];
                int n = 19, nr = 69, dt = dts[d];
                size_t es = dtype_size(dt);
                float *x = malloc((size_t)(n * k) * sizeof(float)), *wf = malloc((size_t)(nr * k) * sizeof(float));
                void *w = malloc((size_t)(nr * k) * es);
                for (int64_t i = 0; i < n * k; i++) x[i] = frand(&seed);
                for (int64_t i = 0; i < nr * k; i++) {
                    float v = frand(&seed);
                    if (dt == DTYPE_BF16) ((uint16_t *)w)[i] = f32_to_bf16(v), wf[i] = bf16_to_f32(((uint16_t *)w)[i]);
                    else if (dt == DTYPE_F16) ((uint16_t *)w)[i] = f32_to_f16(v), wf[i] = f16_to_f32(((uint16_t *)w)[i]);
                    else ((float *)w)[i] = wf[i] = v;
                }
                float *ref = malloc((size_t)(n * nr) * sizeof(float)), *got = malloc((size_t)(n * nr) * sizeof(float));
                float *alone = malloc((size_t)(n * nr) * sizeof(float));
                run_mm(&cpu_kernels_scalar, dt, ref, x, n, w, k, nr);
                for (int t = 0; t < n; t++)
                    for (int r = 0; r < nr; r++) {
                        double exact = 0, mag = 0;
                        for (int64_t i = 0; i < k; i++) {
                            exact += (double)x[t * k + i] * wf[r * k + i];
                            mag += fabs((double)x[t * k + i] * wf[r * k + i]);
                        }
                        float want = ref[t * nr + r];
                        CHECK_MSG(fabs(want - exact) <= 1e-5 * mag + 1e-6, "scalar %s k %ld: [%d][%d] %g vs exact %g",
                                  dtype_name(dt), (long)k, t, r, want, exact);
                        run_mm(kk, dt, &alone[t * nr + r], x + t * k, 1, (const char *)w + (size_t)(r * k) * es, k, 1);
                    }
                for (int nn = 1; nn <= n; nn += (nn < 17 ? 1 : 2)) /* every group width, then wider batches */
                    for (int rr = 1; rr <= nr; rr += (rr < 17 ? 1 : 13)) {
                        run_mm(kk, dt, got, x, nn, w, k, rr);
                        for (int t = 0; t < nn; t++)
                            for (int r = 0; r < rr; r++) {
                                float g = got[t * rr + r], want = ref[t * nr + r], one = alone[t * nr + r];
                                CHECK_MSG(!memcmp(&g, &want, sizeof g), "%s %s k %ld n %d nr %d: [%d][%d] %.9g, scalar %.9g",
                                          kk->isa, dtype_name(dt), (long)k, nn, rr, t, r, g, want);
                                CHECK_MSG(!memcmp(&one, &g, sizeof g),
                                          "%s %s k %ld: token %d row %d alone %.9g, in %d tokens x %d rows %.9g",
                                          kk->isa, dtype_name(dt), (long)k, t, r, one, nn, rr, g);
                                checked++;
                            }
                    }
                free(alone);
                free(x), free(wf), free(w), free(ref), free(got);
            }
    }
    printf("    %d matmul results compared with exact sums, the scalar kernel and the kernel alone\n", checked);
}

/* A whole KV block (16 positions) takes an unrolled path in the SIMD
 * attention kernels; it must be the generic path's arithmetic: dots of 16
 * positions bitwise the dots of each position alone (positions are
 * independent), axpys over 16 bitwise axpys over 8 then the next 8 (the
 * same sums in the same order). */
TEST(test_cpu_attention_kernels_whole_block_is_the_generic_arithmetic) {
    const cpu_kernels *isas[2] = {&cpu_kernels_avx2, &cpu_kernels_avx512};
    unsigned seed = 5;
    int checked = 0;
    for (int ii = 0; ii < 2; ii++) {
        const cpu_kernels *k = isas[ii];
        if (!supported(k->isa)) continue;
        static const int hds[2] = {64, 128};
        for (int a = 0; a < 2; a++) {
            int hd = hds[a], grp = 4, ks = hd * 2, ss = 20;
            float q[4 * 128], kv[16 * 256], s16[4 * 20], s1[4 * 20], w[4 * 20], o16[4 * 128], o8[4 * 128];
            for (int i = 0; i < grp * hd; i++) q[i] = frand(&seed);
            for (int i = 0; i < 16 * ks; i++) kv[i] = frand(&seed);
            k->dots(s16, ss, q, grp, kv, ks, 16, hd, 0.125f);
            for (int j = 0; j < 16; j++) k->dots(s1 + j, ss, q, grp, kv + j * ks, ks, 1, hd, 0.125f);
            for (int h = 0; h < grp; h++)
                for (int j = 0; j < 16; j++)
                    CHECK_MSG(!memcmp(&s16[h * ss + j], &s1[h * ss + j], 4), "%s dots hd %d: [%d][%d] %.9g vs %.9g alone",
                              k->isa, hd, h, j, s16[h * ss + j], s1[h * ss + j]);
            for (int i = 0; i < grp * ss; i++) w[i] = frand(&seed);
            for (int i = 0; i < grp * hd; i++) o16[i] = o8[i] = frand(&seed);
            k->axpys(o16, w, ss, kv, ks, 16, grp, hd);
            k->axpys(o8, w, ss, kv, ks, 8, grp, hd);
            k->axpys(o8, w + 8, ss, kv + 8 * ks, ks, 8, grp, hd);
            CHECK_MSG(!memcmp(o16, o8, (size_t)grp * hd * 4), "%s axpys hd %d: 16 positions differ from 8 + 8", k->isa, hd);
            checked++;
        }
    }
    printf("    %d whole-block cases compared bitwise\n", checked);
}

/* value sums over a bf16 cache's rows: every ISA bitwise the scalar loop
 * (one fused chain per output over the positions in order) */
TEST(test_cpu_axpys_bf16_match_the_loop) {
    const cpu_kernels *isas[3] = {&cpu_kernels_scalar, &cpu_kernels_avx2, &cpu_kernels_avx512};
    static const int hds[4] = {64, 128, 72, 8}, grps[3] = {1, 4, 8}, ns[4] = {1, 5, 8, 16};
    unsigned seed = 17;
    uint16_t v[16 * 256];
    float w[8 * 20], o0[8 * 128];
    for (int i = 0; i < 16 * 256; i++) v[i] = f32_to_bf16(frand(&seed));
    for (int i = 0; i < 8 * 20; i++) w[i] = frand(&seed);
    for (int i = 0; i < 8 * 128; i++) o0[i] = frand(&seed);
    int checked = 0;
    for (int ii = 0; ii < 3; ii++) {
        const cpu_kernels *k = isas[ii];
        if (ii && !supported(k->isa)) continue;
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 4; c++) {
                    int hd = hds[a], grp = grps[b], n = ns[c];
                    float want[8 * 128], got[8 * 128];
                    memcpy(want, o0, sizeof want);
                    memcpy(got, o0, sizeof got);
                    cpu_axpys_bf16_loop(want, w, 20, v, 256, n, grp, hd);
                    k->axpys_bf16(got, w, 20, v, 256, n, grp, hd);
                    CHECK_MSG(!memcmp(want, got, sizeof want), "%s axpys_bf16 hd %d grp %d n %d differs", k->isa, hd,
                              grp, n);
                    checked++;
                }
    }
    printf("    %d axpys_bf16 cases bitwise the loop\n", checked);
}

/* dots over a bf16 cache's keys in column pairs: every ISA bitwise the
 * scalar loop (two fused chains per score), whole and partial runs, blocks
 * of 16 and 32, odd head sizes (the loop itself) and a second kv head's
 * columns */
TEST(test_cpu_dots_bf16t_match_the_loop) {
    const cpu_kernels *isas[3] = {&cpu_kernels_scalar, &cpu_kernels_avx2, &cpu_kernels_avx512};
    static const int hds[4] = {64, 128, 72, 7}, grps[4] = {1, 3, 4, 8}, ns[3] = {1, 5, 16}, bss[2] = {16, 32};
    unsigned seed = 13;
    enum { KV_DIM = 2 * 128, BSMAX = 32 };
    uint16_t kt[BSMAX * KV_DIM];
    float q[8 * 128];
    for (int i = 0; i < BSMAX * KV_DIM; i++) kt[i] = f32_to_bf16(frand(&seed));
    for (int i = 0; i < 8 * 128; i++) q[i] = frand(&seed);
    int checked = 0;
    for (int ii = 0; ii < 3; ii++) {
        const cpu_kernels *k = isas[ii];
        if (ii && !supported(k->isa)) continue;
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++)
                for (int c = 0; c < 3; c++)
                    for (int d = 0; d < 2; d++)
                        for (int g = 0; g < 2; g++) {
                            int hd = hds[a], grp = grps[b], n = ns[c], bs = bss[d], c0 = g * hd, j0 = bs - 16;
                            float want[8 * 20], got[8 * 20];
                            for (int i = 0; i < 8 * 20; i++) want[i] = got[i] = -7.0f;
                            cpu_dots_bf16t_loop(want, 20, q, grp, kt + 2 * j0, c0, bs, n, hd, 0.125f);
                            k->dots_bf16t(got, 20, q, grp, kt + 2 * j0, c0, bs, n, hd, 0.125f);
                            CHECK_MSG(!memcmp(want, got, sizeof want), "%s dots_bf16t hd %d grp %d n %d bs %d c0 %d differs",
                                      k->isa, hd, grp, n, bs, c0);
                            checked++;
                        }
    }
    /* the loop itself against double sums over the layout's elements */
    float s1[4];
    cpu_dots_bf16t_loop(s1, 1, q, 4, kt, 64, 16, 1, 64, 1.0f);
    for (int h = 0; h < 4; h++) {
        double want = 0;
        for (int dd = 0; dd < 64; dd++) want += (double)q[h * 64 + dd] * bf16_to_f32(kt[cpu_kt_index(0, 64 + dd, 16)]);
        CHECK_MSG(fabs(s1[h] - want) <= 1e-5 * (fabs(want) + 1), "head %d: %g vs the exact %g", h, s1[h], want);
    }
    printf("    %d dots_bf16t cases bitwise the loop\n", checked);
}
