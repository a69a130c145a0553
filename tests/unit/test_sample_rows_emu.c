/* test_sample_rows_emu.c — the device sampler's own code (k_sample.cu, run
 * on the host by tests/emu with 64-thread blocks) against the host's
 * distribution (sample_dist), as test_cuda_sample_rows_draw_the_host_distribution
 * checks it on a GPU. The device draws by the inverse of the cumulative
 * distribution in id order, so each kept id owns a span of u as long as its
 * probability, where the host's distribution puts it: kept ids spread over
 * the vocabulary are drawn at 3% and 97% into their spans, and each must
 * come back (a rule applied wrong moves the spans). Rows: spread, peaked, integer logits (ties at the top-k and
 * top-p edges, lowest id first on both), and ten scattered top logits above
 * integer ones (the edge's ties below them: a draw walks past ties left
 * out); the rules alone and together; a
 * row whose largest logit is infinite keeps its argmax; an unlisted row is
 * left alone. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "sample/sample.h"
#include "test.h"

struct CUstream_st;
void emu_ks_cuda_sample_rows(struct CUstream_st *s, int32_t *out, const float *in, int cols, const bk_sample_row *rows,
                             int n);

static unsigned emu_rng = 777;
static float urand(void) {
    emu_rng = emu_rng * 1664525u + 1013904223u;
    return ((emu_rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

TEST(test_sample_rows_emulated_draws_the_host_distribution) {
    const sample_params rules[] = {
        {1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f},  {0.7f, 0, 0.95f, 0.0f, 1.0f, 0.0f, 0.0f},
        {0.7f, 20, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f}, {1.0f, 40, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f},
        {0.8f, 0, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f}, {1.3f, 50, 0.8f, 0.02f, 1.0f, 0.0f, 0.0f},
        {0.25f, 0, 0.5f, 0.0f, 1.0f, 0.0f, 0.0f}, {1.0f, 40, 1.0f, 0.3f, 1.0f, 0.0f, 0.0f},
    };
    enum { COLS = 3000, N = 32 };
    float *h = malloc((size_t)(N + 1) * COLS * 4), row[COLS];
    double p_of[COLS], start[COLS];
    int32_t got[N + 1], want[N];
    int checked = 0;
    bk_sample_row sr[N];
    sampler *smp = sampler_new(COLS);
    for (int kind = 0; kind < 4; kind++)
        for (int ri = 0; ri < (int)(sizeof rules / sizeof *rules); ri++) {
            const sample_params *sp = &rules[ri];
            for (int i = 0; i < COLS; i++)
                h[i] = kind == 0   ? urand() * 4
                       : kind == 1 ? urand() * 2 - (i % 97 ? 6.f : 0.f)
                       : kind == 2 ? (float)(int)(urand() * 6)
                                   : i % 300 == 90 ? 4.f : (float)(int)(urand() * 3);
            for (int c = 1; c <= N; c++) memcpy(h + (size_t)c * COLS, h, sizeof row);
            memcpy(row, h, sizeof row);
            const int32_t *ids;
            const float *probs;
            int n = sample_dist(smp, sp, row, &ids, &probs);
            /* the host's distribution in id order: each kept id's span of u */
            memset(p_of, 0, sizeof p_of);
            for (int k = 0; k < n; k++) p_of[ids[k]] = probs[k];
            double cum = 0;
            int n_big = 0;
            for (int i = 0; i < COLS; i++) start[i] = cum, cum += p_of[i], n_big += p_of[i] > 1e-4;
            /* up to N / 2 kept ids spread over id order, each drawn at 3% and
             * 97% into its span: the device must answer that id */
            int m = 0;
            for (int i = 0, seen = 0; i < COLS && m < N; i++) {
                if (p_of[i] <= 1e-4) continue;
                int slot = (int)((long)seen++ * (N / 2) / n_big); /* the first id of each of N / 2 slots */
                if (slot == m / 2) {
                    for (int e = 0; e < 2; e++, m++) {
                        want[m] = i;
                        sr[m] = (bk_sample_row){m, sp->top_k, sp->temperature, sp->top_p, sp->min_p,
                                                (start[i] + (e ? 0.97 : 0.03) * p_of[i]) / cum};
                    }
                }
            }
            for (int j = 0; j <= N; j++) got[j] = sample_argmax(h, COLS);
            emu_ks_cuda_sample_rows(NULL, got, h, COLS, sr, m);
            CHECK_MSG(got[N] == sample_argmax(h, COLS), "kind %d rules %d: the unlisted row lost its argmax", kind, ri);
            for (int j = 0; j < m; j++)
                CHECK_MSG(got[j] == want[j], "kind %d rules %d: u %.6f drew id %d, the host's distribution %d (of %d kept)",
                          kind, ri, sr[j].u, got[j], want[j], n);
            CHECK(m >= 2);
            checked += m;
        }
    /* an infinite largest logit: the argmax, as sample_dist's point mass */
    for (int i = 0; i < COLS; i++) h[i] = urand();
    h[1234] = INFINITY;
    got[0] = sample_argmax(h, COLS);
    sr[0] = (bk_sample_row){0, 0, 1.0f, 0.9f, 0.0f, 0.7};
    emu_ks_cuda_sample_rows(NULL, got, h, COLS, sr, 1);
    CHECK(got[0] == 1234);
    printf("    %d draws of the emulated device sampler at the host distribution's spans (32 rows and rules)\n", checked);
    sampler_free(smp);
    free(h);
}
