/* probe.c — SSE parsing, per-request arithmetic and summary statistics of the
 * benchmark probe (see probe.h for the formulas). No I/O: the HTTP side lives
 * in bench_http.c. */
#include "bench/probe.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

void bench_stream_init(bench_stream *s) {
    memset(s, 0, sizeof *s);
    s->t_first = s->t_last = -1;
    s->prompt_tokens = s->completion_tokens = -1;
    s->accepted_tokens = s->rejected_tokens = -1;
}

void bench_stream_free(bench_stream *s) {
    free(s->ev_t);
    s->ev_t = NULL;
    s->cap_ev = 0;
    sb_free(&s->line);
    sb_free(&s->data);
    sb_free(&s->text);
    sb_free(&s->error);
}

static int get_int(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : -1;
}

/* Appends a non-empty string field of o to the text; returns 1 if it did. */
static int take_text(bench_stream *s, json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v) || json_string_length(v) == 0) return 0;
    sb_append(&s->text, json_string_value(v), json_string_length(v));
    return 1;
}

static void dispatch(bench_stream *s, double t) {
    const char *d = s->data.s ? s->data.s : "";
    if (!strcmp(d, "[DONE]")) {
        s->done = 1;
        return;
    }
    json_error_t je;
    json_t *j = json_loadb(d, s->data.len, 0, &je);
    if (!json_is_object(j)) {
        s->bad_events++;
        json_decref(j);
        return;
    }
    json_t *err = json_object_get(j, "error");
    if (err && !json_is_null(err)) {
        json_t *m = json_is_object(err) ? json_object_get(err, "message") : err;
        sb_clear(&s->error);
        sb_puts(&s->error, json_is_string(m) ? json_string_value(m) : "error event without a message");
    }
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        s->prompt_tokens = get_int(u, "prompt_tokens");
        s->completion_tokens = get_int(u, "completion_tokens");
        json_t *det = json_object_get(u, "completion_tokens_details");
        if (json_is_object(det)) {
            s->accepted_tokens = get_int(det, "accepted_prediction_tokens");
            s->rejected_tokens = get_int(det, "rejected_prediction_tokens");
        }
    }
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    if (json_is_object(c0)) {
        int got = 0;
        json_t *delta = json_object_get(c0, "delta");
        if (json_is_object(delta)) { /* chat.completion.chunk */
            got |= take_text(s, delta, "content");
            got |= take_text(s, delta, "reasoning_content");
            got |= take_text(s, delta, "reasoning");
            json_t *tc = json_object_get(delta, "tool_calls");
            if (json_is_array(tc) && json_array_size(tc) > 0) got = 1;
        } else { /* text_completion */
            got |= take_text(s, c0, "text");
        }
        if (got) {
            if (s->t_first < 0) s->t_first = t;
            s->t_last = t;
            if (s->n_text_events == s->cap_ev && s->cap_ev >= 0) {
                int cap = s->cap_ev ? 2 * s->cap_ev : 64;
                double *p = realloc(s->ev_t, (size_t)cap * sizeof *p);
                if (p) {
                    s->ev_t = p;
                    s->cap_ev = cap;
                } else { /* out of memory: no window rate for this stream */
                    free(s->ev_t);
                    s->ev_t = NULL;
                    s->cap_ev = -1;
                }
            }
            if (s->ev_t) s->ev_t[s->n_text_events] = t;
            s->n_text_events++;
        }
    }
    json_decref(j);
}

/* One complete line (without its terminator). */
static void on_line(bench_stream *s, const char *l, size_t n, double t) {
    if (n == 0) { /* blank line: end of event */
        if (s->has_data) dispatch(s, t);
        sb_clear(&s->data);
        s->has_data = 0;
        return;
    }
    if (l[0] == ':') return; /* comment / keep-alive */
    size_t fl = 0;
    while (fl < n && l[fl] != ':') fl++;
    if (fl != 4 || memcmp(l, "data", 4) != 0) return; /* event:, id:, retry: or a non-SSE body */
    size_t v = fl < n ? fl + 1 : n;
    if (v < n && l[v] == ' ') v++;
    if (s->has_data) sb_append(&s->data, "\n", 1);
    sb_append(&s->data, l + v, n - v);
    s->has_data = 1;
}

int bench_stream_feed(bench_stream *s, const char *buf, size_t n, double t) {
    size_t i = 0;
    while (i < n) {
        const char *nl = memchr(buf + i, '\n', n - i);
        if (!nl) {
            sb_append(&s->line, buf + i, n - i);
            break;
        }
        size_t seg = (size_t)(nl - (buf + i));
        const char *l;
        size_t ln;
        if (s->line.len) {
            sb_append(&s->line, buf + i, seg);
            l = s->line.s;
            ln = s->line.len;
        } else {
            l = buf + i;
            ln = seg;
        }
        if (ln && l[ln - 1] == '\r') ln--;
        on_line(s, l, ln, t);
        sb_clear(&s->line);
        i += seg + 1;
    }
    if (s->line.oom || s->data.oom || s->text.oom || s->error.oom) return err_set(KS_ENOMEM, "bench: out of memory");
    return 0;
}

void bench_stream_finish(bench_stream *s, double t) {
    if (s->line.len) {
        size_t ln = s->line.len;
        if (s->line.s[ln - 1] == '\r') ln--;
        on_line(s, s->line.s, ln, t);
        sb_clear(&s->line);
    }
    on_line(s, "", 0, t);
}

int bench_stream_sample(const bench_stream *s, double t_start, double t_end, bench_sample *out) {
    out->ttft = out->prefill_tok_s = out->decode_tok_s = out->e2e = NAN;
    out->prompt_tokens = s->prompt_tokens;
    out->completion_tokens = s->completion_tokens;
    out->accepted_tokens = s->accepted_tokens;
    out->rejected_tokens = s->rejected_tokens;
    out->e2e = t_end - t_start;
    if (s->t_first < 0) return err_set(KS_EFORMAT, "bench: the stream carried no generated text");
    out->ttft = s->t_first - t_start;
    if (s->prompt_tokens > 0 && out->ttft > 0) out->prefill_tok_s = s->prompt_tokens / out->ttft;
    double span = s->t_last - s->t_first;
    if (s->completion_tokens > 1 && span > 0) out->decode_tok_s = (s->completion_tokens - 1) / span;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

bench_stat bench_stat_of(const double *v, int n) {
    bench_stat st = {NAN, NAN, NAN, 0};
    double *w = n > 0 ? malloc((size_t)n * sizeof *w) : NULL;
    if (!w) return st;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(v[i])) w[m++] = v[i];
    if (m) {
        qsort(w, (size_t)m, sizeof *w, cmp_double);
        st.median = m % 2 ? w[m / 2] : 0.5 * (w[m / 2 - 1] + w[m / 2]);
        st.min = w[0];
        st.max = w[m - 1];
        st.n = m;
    }
    free(w);
    return st;
}

double bench_decode_window_rate(const bench_stream *const *s, int n) {
    if (n <= 0) return NAN;
    double w0 = -INFINITY, w1 = INFINITY;
    for (int i = 0; i < n; i++) {
        if (s[i]->t_first < 0 || !s[i]->ev_t) return NAN;
        if (s[i]->t_first > w0) w0 = s[i]->t_first;
        if (s[i]->t_last < w1) w1 = s[i]->t_last;
    }
    if (!(w1 > w0)) return NAN;
    double toks = 0;
    for (int i = 0; i < n; i++) {
        int in = 0;
        for (int e = 0; e < s[i]->n_text_events; e++) in += s[i]->ev_t[e] > w0 && s[i]->ev_t[e] <= w1;
        double per_event = s[i]->completion_tokens > 0 ? (double)s[i]->completion_tokens / s[i]->n_text_events : 1.0;
        toks += in * per_event;
    }
    return toks / (w1 - w0);
}
