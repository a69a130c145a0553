/* bench_http.c — libcurl transport of the benchmark probe (see bench_http.h).
 * One curl multi handle per client: its connection cache keeps loopback
 * connections alive between requests, and a batch of n streams is driven by
 * one thread (curl_multi_poll wakes on every arriving chunk, so timestamps
 * are taken when the bytes reach the client, not when the batch ends). */
#include "bench/bench_http.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"

struct bench_http {
    CURLM *multi;
    char *base;
    struct curl_slist *headers;
    long timeout_s;
};

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int bench_http_init(bench_http **out, const char *base_url, const char *api_key, long timeout_s) {
    *out = NULL;
    static int curl_ready;
    if (!curl_ready) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) return err_set(KS_EIO, "bench: curl_global_init failed");
        curl_ready = 1;
    }
    bench_http *h = calloc(1, sizeof *h);
    if (!h) return err_set(KS_ENOMEM, "bench: out of memory");
    size_t n = strlen(base_url);
    while (n > 0 && base_url[n - 1] == '/') n--;
    if (n >= 3 && !memcmp(base_url + n - 3, "/v1", 3)) n -= 3;
    h->base = strndup(base_url, n);
    h->multi = curl_multi_init();
    h->timeout_s = timeout_s;
    h->headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (api_key) {
        char hdr[512];
        snprintf(hdr, sizeof hdr, "Authorization: Bearer %s", api_key);
        h->headers = curl_slist_append(h->headers, hdr);
    }
    if (!h->base || !h->multi || !h->headers) {
        bench_http_free(h);
        return err_set(KS_ENOMEM, "bench: out of memory");
    }
    *out = h;
    return 0;
}

void bench_http_free(bench_http *h) {
    if (!h) return;
    if (h->multi) curl_multi_cleanup(h->multi);
    curl_slist_free_all(h->headers);
    free(h->base);
    free(h);
}

void bench_resp_free(bench_resp *r) {
    bench_stream_free(&r->stream);
    sb_free(&r->raw);
}

static size_t on_data(char *p, size_t sz, size_t nm, void *ud) {
    bench_resp *r = ud;
    size_t n = sz * nm;
    double t = bench_now();
    r->t_end = t;
    if (r->raw.len < 4096) sb_append(&r->raw, p, n < 4096 - r->raw.len ? n : 4096 - r->raw.len);
    if (bench_stream_feed(&r->stream, p, n, t) < 0) return 0; /* aborts the transfer */
    return n;
}

static CURL *make_easy(bench_http *h, const char *path, const char *body, char *errbuf) {
    CURL *e = curl_easy_init();
    if (!e) return NULL;
    char url[2048];
    snprintf(url, sizeof url, "%s%s", h->base, path);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h->headers);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, h->timeout_s);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    if (body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    }
    return e;
}

int bench_http_run(bench_http *h, const bench_req *req, int n, bench_resp *resp) {
    CURL **easy = calloc((size_t)n, sizeof *easy);
    if (!easy) return err_set(KS_ENOMEM, "bench: out of memory");
    int rc = 0;
    for (int i = 0; i < n; i++) {
        memset(&resp[i], 0, sizeof resp[i]);
        bench_stream_init(&resp[i].stream);
        easy[i] = make_easy(h, req[i].path, req[i].body, resp[i].err);
        if (!easy[i]) {
            rc = err_set(KS_ENOMEM, "bench: curl_easy_init failed");
            goto done;
        }
        curl_easy_setopt(easy[i], CURLOPT_WRITEFUNCTION, on_data);
        curl_easy_setopt(easy[i], CURLOPT_WRITEDATA, &resp[i]);
        curl_easy_setopt(easy[i], CURLOPT_PRIVATE, &resp[i]);
    }
    for (int i = 0; i < n; i++) {
        resp[i].t_start = resp[i].t_end = bench_now();
        curl_multi_add_handle(h->multi, easy[i]);
    }
    int running = n;
    while (running > 0) {
        CURLMcode mc = curl_multi_perform(h->multi, &running);
        if (mc == CURLM_OK && running > 0) mc = curl_multi_poll(h->multi, NULL, 0, 100, NULL);
        if (mc != CURLM_OK) {
            rc = err_set(KS_EIO, "bench: curl multi: %s", curl_multi_strerror(mc));
            break;
        }
    }
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(h->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        bench_resp *r = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&r);
        if (!r) continue;
        if (m->data.result != CURLE_OK) {
            if (!r->err[0]) snprintf(r->err, sizeof r->err, "%s", curl_easy_strerror(m->data.result));
            r->status = 0;
        } else {
            curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &r->status);
        }
    }
    for (int i = 0; i < n; i++) bench_stream_finish(&resp[i].stream, resp[i].t_end);
done:
    for (int i = 0; i < n; i++) {
        if (!easy[i]) continue;
        curl_multi_remove_handle(h->multi, easy[i]);
        curl_easy_cleanup(easy[i]);
    }
    free(easy);
    return rc;
}

static size_t on_simple(char *p, size_t sz, size_t nm, void *ud) {
    sb_append(ud, p, sz * nm);
    return sz * nm;
}

long bench_http_simple(bench_http *h, const char *path, const char *body, strbuf *out) {
    char errbuf[CURL_ERROR_SIZE] = {0};
    CURL *e = make_easy(h, path, body, errbuf);
    if (!e) return 0;
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_simple);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, out);
    long status = 0;
    if (curl_easy_perform(e) == CURLE_OK) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(e);
    return status;
}
