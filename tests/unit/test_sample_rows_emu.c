/* test_sample_rows_emu.c — the device sampler's own code (k_sample.cu, run
 * on the host by tests/emu with 64-thread blocks) against the host's
 * distribution (sample_dist), as test_cuda_sample_rows_draw_the_host_distribution
 * checks it on a GPU. The device draws by the inverse of the cumulative
 * distribution in id order, so each kept id owns a span of u as long as its
 * probability, where the host's distribution puts it: kept ids spread over
 * the vocabulary are drawn near both ends of their spans, and each must
 * come back (a rule applied wrong moves the spans). The rows and rules of
 * sample_rows_cases.h, at 3,000 logits and (the selecting rules) at Qwen3's
 * 151,936; a row whose largest logit is infinite keeps its argmax; an
 * unlisted row is left alone. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "sample/sample.h"
#include "sample_rows_cases.h"
#include "test.h"

struct CUstream_st;
void emu_ks_cuda_sample_rows(struct CUstream_st *s, int32_t *out, const float *in, int cols, const bk_sample_row *rows,
                             int n);

static unsigned emu_rng = 777;
static float urand(void) {
    emu_rng = emu_rng * 1664525u + 1013904223u;
    return ((emu_rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

enum { N = 32 }; /* draws a case: 2 at each of up to 16 kept ids */

/* One row of `cols` logits of `kind` under rules sp: kept ids spread over
 * id order (those of probability above 4e-6), each drawn near both ends
 * of its span of the host's distribution; every draw must come back as
 * that id. Returns the draws. */
static int check_case(int cols, int kind, const sample_params *sp, sampler *smp) {
    float *h = malloc((size_t)(N + 1) * cols * 4), *row = malloc((size_t)cols * 4);
    double *p_of = calloc((size_t)cols, sizeof *p_of), *start = malloc((size_t)cols * sizeof *start);
    int32_t got[N + 1], want[N];
    bk_sample_row sr[N];
    for (int i = 0; i < cols; i++) h[i] = sample_case_logit(kind, i, urand());
    for (int c = 1; c <= N; c++) memcpy(h + (size_t)c * cols, h, (size_t)cols * 4);
    memcpy(row, h, (size_t)cols * 4);
    const int32_t *ids;
    const float *probs;
    int n = sample_dist(smp, sp, row, &ids, &probs);
    for (int k = 0; k < n; k++) p_of[ids[k]] = probs[k];
    double cum = 0;
    int n_big = 0, m = 0;
    for (int i = 0; i < cols; i++) start[i] = cum, cum += p_of[i], n_big += p_of[i] > 4e-6;
    for (int i = 0, seen = 0; i < cols && m < N; i++) {
        if (p_of[i] <= 4e-6) continue;
        int slot = (int)((long)seen++ * (N / 2) / n_big); /* the first id of each of N / 2 slots */
        if (slot != m / 2) continue;
        /* 3% in from each end, or 1e-6 of u: the two exps (the host's, the
         * device's expf) differ in the last bits, a shift of the spans that
         * grows with the kept mass of equal logits (a 1e-7 seen) */
        double in = fmax(0.03, 1e-6 / p_of[i]);
        for (int e = 0; e < 2; e++, m++) {
            want[m] = i;
            sr[m] = (bk_sample_row){m, sp->top_k, sp->temperature, sp->top_p, sp->min_p,
                                    (start[i] + (e ? 1 - in : in) * p_of[i]) / cum};
        }
    }
    int am = sample_argmax(h, cols);
    for (int j = 0; j <= N; j++) got[j] = am;
    emu_ks_cuda_sample_rows(NULL, got, h, cols, sr, m);
    CHECK_MSG(got[N] == am, "cols %d kind %d: the unlisted row lost its argmax", cols, kind);
    for (int j = 0; j < m; j++)
        CHECK_MSG(got[j] == want[j], "cols %d kind %d (t %g top_k %d top_p %g min_p %g): u %.6f drew id %d, the host's "
                  "distribution %d (of %d kept)", cols, kind, sp->temperature, sp->top_k, sp->top_p, sp->min_p, sr[j].u,
                  got[j], want[j], n);
    CHECK(m >= 2);
    free(h), free(row), free(p_of), free(start);
    return m;
}

TEST(test_sample_rows_emulated_draws_the_host_distribution) {
    const sample_params *rules = sample_case_rules;
    int draws = 0, cases = 0;
    sampler *smp = sampler_new(3000);
    for (int kind = 0; kind < SAMPLE_CASE_KINDS; kind++)
        for (int ri = 0; ri < SAMPLE_CASE_RULES; ri++, cases++) draws += check_case(3000, kind, &rules[ri], smp);
    sampler_free(smp);
    /* Qwen3's vocabulary: the rules that select (top-p; top-k with top-p) */
    smp = sampler_new(151936);
    for (int kind = 0; kind < 4; kind += 3)
        for (int ri = 1; ri <= 3; ri += 2, cases++) draws += check_case(151936, kind, &rules[ri], smp);
    sampler_free(smp);
    /* an infinite largest logit: the argmax, as sample_dist's point mass */
    enum { COLS = 3000 };
    float h[COLS];
    for (int i = 0; i < COLS; i++) h[i] = urand();
    h[1234] = INFINITY;
    int32_t got = sample_argmax(h, COLS);
    bk_sample_row sr = {0, 0, 1.0f, 0.9f, 0.0f, 0.7};
    emu_ks_cuda_sample_rows(NULL, &got, h, COLS, &sr, 1);
    CHECK(got == 1234);
    printf("    %d draws of the emulated device sampler at the host distribution's spans (%d rows and rules)\n", draws,
           cases);
}
