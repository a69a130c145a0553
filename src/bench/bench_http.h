/* bench_http.h — the HTTP side of the benchmark probe (libcurl): sends a
 * batch of streaming POSTs at once on one curl multi handle (n = 1 for the
 * sequential workloads, n = 4/16/64 for the concurrency sweep), timestamps
 * every chunk of bytes as it arrives (CLOCK_MONOTONIC) and feeds it to a
 * bench_stream; plus plain GET/POST for /health, /v1/models, /tokenize. */
#ifndef KS_BENCH_HTTP_H
#define KS_BENCH_HTTP_H

#include "base/strbuf.h"
#include "bench/probe.h"

typedef struct bench_http bench_http;

typedef struct {
    const char *path; /* e.g. "/v1/chat/completions"; borrowed */
    const char *body; /* JSON request body; borrowed */
} bench_req;

typedef struct {
    long status;         /* HTTP status; 0 when the transfer failed (see err) */
    double t_start;      /* request handed to curl */
    double t_end;        /* last byte received (t_start when none) */
    bench_stream stream; /* the parsed SSE stream */
    strbuf raw;          /* the first 4 KiB of the body (error messages) */
    char err[256];       /* curl's message when the transfer failed */
} bench_resp;

/* Seconds on CLOCK_MONOTONIC. */
double bench_now(void);

/* base_url: "http://127.0.0.1:8080" (a trailing '/' or "/v1" is accepted);
 * api_key may be NULL; timeout_s bounds each request. */
int bench_http_init(bench_http **h, const char *base_url, const char *api_key, long timeout_s);
void bench_http_free(bench_http *h);
/* Sends req[0..n) at once, waits for all of them; initializes resp[0..n)
 * (free each with bench_resp_free). Returns 0, or a negative status when
 * curl itself could not be driven (per-request failures are in resp). */
int bench_http_run(bench_http *h, const bench_req *req, int n, bench_resp *resp);
void bench_resp_free(bench_resp *r);
/* A plain request (body NULL: GET). Returns the HTTP status (0: transfer
 * failed) and fills out with the body. */
long bench_http_simple(bench_http *h, const char *path, const char *body, strbuf *out);

#endif
