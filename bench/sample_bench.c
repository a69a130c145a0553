/* sample_bench.c — what choosing a token on the host costs per token at a
 * vocabulary size (the path every sampled request takes: temperature,
 * top-k, top-p, min-p over one logits row), on logits shaped like a
 * language model's (a normal spread, a few tokens well above it):
 *   build/sample_bench [VOCAB] [ITERS]
 * Not a test: compare runs of one machine. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "sample/sample.h"

int main(int argc, char **argv) {
    int V = argc > 1 ? atoi(argv[1]) : 151936, iters = argc > 2 ? atoi(argv[2]) : 50;
    if (V < 16 || iters < 1) {
        fprintf(stderr, "usage: sample_bench [VOCAB >= 16] [ITERS]\n");
        return 2;
    }
    float *base = malloc((size_t)V * sizeof *base), *row = malloc((size_t)V * sizeof *row);
    sample_rng rng;
    sample_rng_seed(&rng, 7);
    for (int i = 0; i < V; i += 2) { /* Box-Muller: N(0, 2.5^2) */
        double u = sample_rng_uniform(&rng) + 1e-12, v = sample_rng_uniform(&rng);
        double r = sqrt(-2 * log(u)) * 2.5;
        base[i] = (float)(r * cos(2 * M_PI * v));
        if (i + 1 < V) base[i + 1] = (float)(r * sin(2 * M_PI * v));
    }
    for (int i = 0; i < 8; i++) base[(i * 7919) % V] += 12.0f - i; /* the likely few */
    struct { const char *name; float t, top_p, min_p; int top_k; } cfg[] = {
        { "temperature 1", 1.0f, 1.0f, 0.0f, 0 },
        { "temperature 0.7, top_p 0.95", 0.7f, 0.95f, 0.0f, 0 },
        { "temperature 0.6, top_p 0.95, top_k 20", 0.6f, 0.95f, 0.0f, 20 },
        { "temperature 0.8, min_p 0.05", 0.8f, 1.0f, 0.05f, 0 },
        { "greedy (argmax)", 0.0f, 1.0f, 0.0f, 0 },
    };
    sampler *s = sampler_new(V);
    if (!s) return 1;
    printf("vocabulary %d, %d draws each\n", V, iters);
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        sample_params p;
        sample_params_default(&p);
        p.temperature = cfg[c].t;
        p.top_p = cfg[c].top_p;
        p.min_p = cfg[c].min_p;
        p.top_k = cfg[c].top_k;
        double t = 0;
        long kept = 0;
        for (int k = 0; k < iters; k++) {
            memcpy(row, base, (size_t)V * sizeof *row);
            double t0 = now_s();
            if (p.temperature > 0) {
                const int32_t *ids;
                const float *probs;
                int n = sample_dist(s, &p, row, &ids, &probs);
                kept += n;
                sample_draw(ids, probs, n, -1, &rng);
            } else
                kept += sample_argmax(row, V) >= 0;
            t += now_s() - t0;
        }
        printf("  %-40s %8.3f ms a token  (%ld candidates kept on average)\n", cfg[c].name, t * 1e3 / iters,
               kept / iters);
    }
    sampler_free(s);
    free(base);
    free(row);
    return 0;
}
