/* metrics.h — Prometheus counters and histograms for GET /metrics: requests
 * by surface and status, prompt/generated tokens, time to first token and
 * per-output-token latency, queue depth (read from the engine at scrape). */
#ifndef KS_METRICS_H
#define KS_METRICS_H

#include <stdatomic.h>

#include "engine/engine.h"

typedef enum { SURF_CHAT = 0, SURF_COMPLETIONS, SURF_RESPONSES, SURF_ANTHROPIC, SURF_OLLAMA, SURF_OTHER, SURF_COUNT } app_surface;

#define METRICS_BUCKETS 12

typedef struct {
    atomic_llong requests[SURF_COUNT][6];        /* status / 100 (0..5) */
    atomic_llong ttft[METRICS_BUCKETS + 1];      /* cumulative on render; last = +Inf */
    atomic_llong tpot[METRICS_BUCKETS + 1];
    atomic_llong ttft_us_sum, tpot_us_sum, ttft_n, tpot_n;
} metrics;

void metrics_request(metrics *m, app_surface s, int status);
/* ttft: seconds to first token; tpot: mean seconds per output token after it. */
void metrics_latency(metrics *m, double ttft, double tpot, int n_gen);
/* Prometheus text exposition (malloc'd). */
char *metrics_render(metrics *m, engine *e);

#endif
