/* test_sample.c — the host sampler's distribution (sample_dist) against a
 * plain reference: every finite logit sorted (descending, ties by id),
 * softmax in double, top-k (renormalised), top-p, min-p, as the sampler's
 * header defines them. Rows flat and peaked, with ties, -inf and NaN, at
 * vocabulary sizes up to 151,936; the kept sets must be equal (but for the
 * one token at the top-p boundary when rounding decides it) and each
 * probability within 1e-4 relative. sample_argmax against the one-compare
 * loop it replaced. */
#include "test.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sample.h"

typedef struct {
    int n;
    int32_t *id;
    double *p;
    double cum_before_last; /* top-p: the mass before the last kept token */
} ref_dist;

static const float *g_l;
static int by_logit(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return g_l[x] > g_l[y] ? -1 : g_l[x] < g_l[y] ? 1 : x - y;
}

/* the reference on logits already divided by the temperature */
static void reference(const float *l, int V, const sample_params *p, ref_dist *r) {
    int32_t *ids = malloc((size_t)V * sizeof *ids);
    int n = 0;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++)
        if (!isnan(l[i]) && l[i] > mx) mx = l[i];
    for (int i = 0; i < V; i++)
        if (!isnan(l[i]) && l[i] != -INFINITY && l[i] >= mx - 30.0f) ids[n++] = i; /* the sampler's cut */
    g_l = l;
    qsort(ids, (size_t)n, sizeof *ids, by_logit);
    double z = 0;
    for (int i = 0; i < n; i++) z += exp((double)l[ids[i]] - mx);
    if (p->top_k > 0) {
        n = p->top_k < n ? p->top_k : n;
        z = 0;
        for (int i = 0; i < n; i++) z += exp((double)l[ids[i]] - mx);
    }
    double cum = 0, top_p = p->top_p < 1.0f ? p->top_p : 2.0, thr = p->min_p > 0 ? p->min_p / z : 0;
    r->id = malloc((size_t)(n ? n : 1) * sizeof *r->id);
    r->p = malloc((size_t)(n ? n : 1) * sizeof *r->p);
    r->n = 0;
    r->cum_before_last = 0;
    for (int i = 0; i < n; i++) {
        double pr = exp((double)l[ids[i]] - mx) / z;
        if (r->n > 0 && (cum >= top_p || pr < thr)) break;
        r->cum_before_last = cum;
        r->id[r->n] = ids[i];
        r->p[r->n++] = pr;
        cum += pr;
    }
    double tot = 0;
    for (int i = 0; i < r->n; i++) tot += r->p[i];
    for (int i = 0; i < r->n; i++) r->p[i] /= tot;
    free(ids);
}

static uint64_t rnd(uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

TEST(test_sample_dist_matches_a_full_sort) {
    const int sizes[] = { 37, 1000, 40000, 151936 };
    const float temps[] = { 0.6f, 1.0f, 1.7f };
    const int top_ks[] = { 0, 1, 20, 700 };
    const float top_ps[] = { 1.0f, 0.95f, 0.5f };
    const float min_ps[] = { 0.0f, 0.05f };
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int cases = 0, boundary = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int V = sizes[si];
        float *row = malloc((size_t)V * sizeof *row), *work = malloc((size_t)V * sizeof *work),
              *scaled = malloc((size_t)V * sizeof *scaled);
        float *probe = malloc((size_t)V * sizeof *probe);
        sampler *s = sampler_new(V);
        for (int shape = 0; shape < 4; shape++) {
            /* 0 flat (uniform in [0, 4)), 1 peaked (spread 3, a few far above),
             * 2 coarse (many ties), 3 with -inf and NaN among them */
            for (int i = 0; i < V; i++) {
                double u = (rnd(&x) >> 11) * 0x1p-53;
                row[i] = shape == 0 ? (float)(4 * u) : shape == 2 ? (float)(rnd(&x) % 9) : (float)(6 * (u - 0.5) * 3);
                if (shape == 1 && rnd(&x) % 997 == 0) row[i] += 15.0f;
                if (shape == 3 && rnd(&x) % 5 == 0) row[i] = rnd(&x) % 2 ? -INFINITY : NAN;
            }
            for (size_t ti = 0; ti < sizeof temps / sizeof temps[0]; ti++)
                for (size_t ki = 0; ki < sizeof top_ks / sizeof top_ks[0]; ki++)
                    for (size_t pi = 0; pi < sizeof top_ps / sizeof top_ps[0]; pi++)
                        for (size_t mi = 0; mi < sizeof min_ps / sizeof min_ps[0]; mi++) {
                            sample_params p;
                            sample_params_default(&p);
                            p.temperature = temps[ti];
                            p.top_k = top_ks[ki];
                            p.top_p = top_ps[pi];
                            p.min_p = min_ps[mi];
                            for (int i = 0; i < V; i++) scaled[i] = row[i] * (1.0f / p.temperature);
                            ref_dist r;
                            reference(scaled, V, &p, &r);
                            memcpy(work, row, (size_t)V * sizeof *row);
                            const int32_t *ids;
                            const float *probs;
                            int n = sample_dist(s, &p, work, &ids, &probs);
                            /* by id: the sampler's probability, -1 where not kept */
                            for (int i = 0; i < V; i++) probe[i] = -1.0f;
                            for (int i = 0; i < n; i++) probe[ids[i]] = probs[i];
                            int missing = 0, extra = n;
                            for (int i = 0; i < r.n; i++) {
                                if (probe[r.id[i]] < 0) missing++;
                                else extra--;
                            }
                            /* the last reference token at top-p's boundary may go either way */
                            bool at_edge = p.top_p < 1.0f && fabs(r.cum_before_last - p.top_p) < 1e-5;
                            bool edge_ok = at_edge && ((missing == 1 && extra == 0 && probe[r.id[r.n - 1]] < 0) ||
                                                       (missing == 0 && extra == 1));
                            boundary += edge_ok;
                            CHECK_MSG((missing == 0 && extra == 0) || edge_ok,
                                      "V %d shape %d t %.1f k %d p %.2f min_p %.2f: %d kept against %d (%d missing, %d extra)",
                                      V, shape, p.temperature, p.top_k, p.top_p, p.min_p, n, r.n, missing, extra);
                            if (!edge_ok) {
                                double worst = 0;
                                for (int i = 0; i < r.n; i++)
                                    if (probe[r.id[i]] >= 0) {
                                        double e = fabs(probe[r.id[i]] - r.p[i]) / r.p[i];
                                        worst = e > worst ? e : worst;
                                    }
                                CHECK_MSG(worst < 1e-4, "V %d shape %d t %.1f k %d p %.2f min_p %.2f: a probability off by %g",
                                          V, shape, p.temperature, p.top_k, p.top_p, p.min_p, worst);
                            }
                            free(r.id);
                            free(r.p);
                            cases++;
                        }
        }
        sampler_free(s);
        free(row);
        free(work);
        free(scaled);
        free(probe);
    }
    printf("    %d distributions checked, %d decided at top-p's edge by rounding\n", cases, boundary);
}

TEST(test_sample_argmax_is_the_first_largest) {
    uint64_t x = 12345;
    float *l = malloc(4000 * sizeof *l);
    for (int t = 0; t < 3000; t++) {
        int n = 1 + (int)(rnd(&x) % 4000);
        for (int i = 0; i < n; i++) {
            int c = (int)(rnd(&x) % 10);
            l[i] = c == 0 ? -INFINITY : c == 1 ? NAN : (float)(rnd(&x) % 7); /* ties, -inf, NaN */
        }
        int best = 0; /* the rule: the first strictly larger wins; a NaN first logit stays */
        for (int i = 1; i < n; i++)
            if (l[i] > l[best]) best = i;
        CHECK_EQ_INT(sample_argmax(l, n), best);
    }
    free(l);
}

/* sample_draw (blocks of 64 skipped whole) draws each id at its probability,
 * renormalised without the excluded one, which never comes */
TEST(test_sample_draw_frequencies) {
    enum { N = 300, DRAWS = 300000 };
    int32_t ids[N];
    float probs[N];
    uint64_t x = 777;
    double tot = 0;
    for (int i = 0; i < N; i++) {
        ids[i] = 1000 + 3 * i;
        probs[i] = (float)((rnd(&x) % 1000) + 1) * (i % 50 == 0 ? 20.0f : 1.0f);
        tot += probs[i];
    }
    for (int i = 0; i < N; i++) probs[i] = (float)(probs[i] / tot);
    sample_rng rng;
    sample_rng_seed(&rng, 99);
    for (int pass = 0; pass < 2; pass++) {
        int exclude = pass ? ids[150] : -1, ix = pass ? 150 : -1;
        static int count[N];
        memset(count, 0, sizeof count);
        for (int k = 0; k < DRAWS; k++) {
            int id = sample_draw(ids, probs, N, exclude, &rng), j = (id - 1000) / 3;
            CHECK_MSG(j >= 0 && j < N && ids[j] == id, "drew %d, not among the ids", id);
            if (j >= 0 && j < N) count[j]++;
        }
        double rest = 1.0 - (ix >= 0 ? probs[ix] : 0.0);
        int off = 0;
        for (int i = 0; i < N; i++) {
            double p = i == ix ? 0.0 : probs[i] / rest, mean = p * DRAWS, sd = sqrt(mean * (1 - p)) + 1e-9;
            if (fabs(count[i] - mean) > 5 * sd + (i == ix ? 0 : 1)) off++;
        }
        CHECK_MSG(off == 0, "pass %d: %d ids drawn off their probability by more than 5 sd", pass, off);
        if (ix >= 0) CHECK_EQ_INT(count[ix], 0);
    }
}
