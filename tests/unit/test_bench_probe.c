/* test_bench_probe.c — the arithmetic of the benchmark probe (src/bench/probe.c)
 * on recorded streams with synthetic timestamps: a kestrel chat stream fed in
 * uneven pieces (an event split across two reads, CRLF line ends, a comment,
 * the role chunk that carries no text), a text_completion stream, a stream
 * without usage, an error event, a 400 JSON body, and the median/min/max. */
#include "test.h"

#include <math.h>

#include "bench/probe.h"

#define EV(json) "data: " json "\n\n"

/* role chunk (no text) at 10.05; text at 10.25 .. 10.65 (5 events); usage says
 * 100 prompt tokens, 9 completion tokens (some chunks hold two tokens). */
static const char *role = EV("{\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}");
static const char *txt1 = EV("{\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"def\"},\"finish_reason\":null}]}");
static const char *txt2 = EV("{\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" f(x)\"},\"finish_reason\":null}]}");
static const char *txt3 = "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\":\"},\"finish_reason\":null}]}\r\n\r\n";
static const char *txt4 = EV("{\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\\n  return\"},\"finish_reason\":null}]}");
static const char *txt5 = EV("{\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" x\"},\"finish_reason\":null}]}");
static const char *fin = EV("{\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}");
static const char *usage = EV("{\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":9,\"total_tokens\":109,\"completion_tokens_details\":{\"accepted_prediction_tokens\":3,\"rejected_prediction_tokens\":2}}}");

static void feed(bench_stream *s, const char *p, double t) { CHECK(bench_stream_feed(s, p, strlen(p), t) == 0); }

TEST(bench_probe_chat_stream) {
    bench_stream s;
    bench_stream_init(&s);
    double t0 = 10.0;
    feed(&s, ": keep-alive\n\n", 10.01);
    feed(&s, role, 10.05);
    feed(&s, txt1, 10.25);
    /* txt2 arrives in two reads: the event completes (and is timed) at 10.35 */
    size_t half = strlen(txt2) / 2;
    CHECK(bench_stream_feed(&s, txt2, half, 10.30) == 0);
    CHECK_EQ_INT(s.n_text_events, 1);
    CHECK(bench_stream_feed(&s, txt2 + half, strlen(txt2) - half, 10.35) == 0);
    feed(&s, txt3, 10.45);
    /* txt4 + txt5 + finish in one read at 10.65 (a burst: all three share the time) */
    char burst[1024];
    snprintf(burst, sizeof burst, "%s%s%s", txt4, txt5, fin);
    feed(&s, burst, 10.65);
    feed(&s, usage, 10.68);
    feed(&s, "data: [DONE]\n\n", 10.70);
    bench_stream_finish(&s, 10.70);

    CHECK_EQ_INT(s.n_text_events, 5);
    CHECK_EQ_INT(s.done, 1);
    CHECK_EQ_INT(s.bad_events, 0);
    CHECK_EQ_INT(s.prompt_tokens, 100);
    CHECK_EQ_INT(s.completion_tokens, 9);
    CHECK_EQ_INT(s.accepted_tokens, 3);
    CHECK_EQ_INT(s.rejected_tokens, 2);
    CHECK_EQ_STR(s.text.s, "def f(x):\n  return x");
    CHECK_NEAR(s.t_first, 10.25, 1e-12);
    CHECK_NEAR(s.t_last, 10.65, 1e-12);

    bench_sample b;
    CHECK(bench_stream_sample(&s, t0, 10.70, &b) == 0);
    CHECK_NEAR(b.ttft, 0.25, 1e-9);
    CHECK_NEAR(b.prefill_tok_s, 100 / 0.25, 1e-6);   /* 400 tok/s */
    CHECK_NEAR(b.decode_tok_s, (9 - 1) / 0.40, 1e-6); /* 20 tok/s */
    CHECK_NEAR(b.e2e, 0.70, 1e-9);
    CHECK_EQ_INT(b.completion_tokens, 9);
    CHECK_EQ_INT(b.accepted_tokens, 3);
    bench_stream_free(&s);
}

TEST(bench_probe_completion_stream) {
    /* text_completion chunks, usage in the last chunk, no blank line after the
     * final event (the server closed right after it) */
    bench_stream s;
    bench_stream_init(&s);
    feed(&s, EV("{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"    return\",\"finish_reason\":null}]}"), 2.5);
    feed(&s, EV("{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" 1\",\"finish_reason\":null}]}"), 2.6);
    feed(&s, EV("{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"\\n\",\"finish_reason\":null}]}"), 3.5);
    feed(&s, "data: {\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"stop\"}],"
             "\"usage\":{\"prompt_tokens\":2000,\"completion_tokens\":31,\"total_tokens\":2031}}\n", 3.6);
    bench_stream_finish(&s, 3.6);
    CHECK_EQ_INT(s.n_text_events, 3);
    CHECK_EQ_INT(s.done, 0);
    CHECK_EQ_INT(s.prompt_tokens, 2000);
    CHECK_EQ_INT(s.completion_tokens, 31);
    CHECK_EQ_INT(s.accepted_tokens, -1);
    bench_sample b;
    CHECK(bench_stream_sample(&s, 0.5, 3.6, &b) == 0);
    CHECK_NEAR(b.ttft, 2.0, 1e-9);
    CHECK_NEAR(b.prefill_tok_s, 1000, 1e-6);
    CHECK_NEAR(b.decode_tok_s, 30 / 1.0, 1e-6);
    CHECK_NEAR(b.e2e, 3.1, 1e-9);
    bench_stream_free(&s);
}

TEST(bench_probe_no_usage_and_errors) {
    /* no usage: counts stay -1, prefill and decode are NaN until the caller
     * fills the counts (tokenizer fallback) */
    bench_stream s;
    bench_stream_init(&s);
    feed(&s, txt1, 1.0);
    feed(&s, txt5, 1.5);
    bench_sample b;
    CHECK(bench_stream_sample(&s, 0.0, 1.6, &b) == 0);
    CHECK(isnan(b.prefill_tok_s));
    CHECK(isnan(b.decode_tok_s));
    s.prompt_tokens = 50;
    s.completion_tokens = 2;
    CHECK(bench_stream_sample(&s, 0.0, 1.6, &b) == 0);
    CHECK_NEAR(b.prefill_tok_s, 50, 1e-9);
    CHECK_NEAR(b.decode_tok_s, 2, 1e-9);
    bench_stream_free(&s);

    /* one token only: no decode rate */
    bench_stream_init(&s);
    feed(&s, txt1, 1.0);
    feed(&s, EV("{\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}"), 1.1);
    CHECK(bench_stream_sample(&s, 0.0, 1.1, &b) == 0);
    CHECK(isnan(b.decode_tok_s));
    bench_stream_free(&s);

    /* an error event mid-stream */
    bench_stream_init(&s);
    feed(&s, EV("{\"error\":{\"message\":\"engine stopped\",\"type\":\"server_error\"}}") "data: [DONE]\n\n", 1.0);
    CHECK_EQ_STR(s.error.s, "engine stopped");
    CHECK_EQ_INT(s.done, 1);
    CHECK(bench_stream_sample(&s, 0.0, 1.0, &b) < 0); /* no text arrived */
    bench_stream_free(&s);

    /* a 400 JSON body (not SSE): nothing is dispatched */
    bench_stream_init(&s);
    feed(&s, "{\"error\":{\"message\":\"too long\"}}", 0.2);
    bench_stream_finish(&s, 0.2);
    CHECK_EQ_INT(s.n_text_events, 0);
    CHECK(s.t_first < 0);
    bench_stream_free(&s);

    /* data: payload that is not JSON is counted, not fatal */
    bench_stream_init(&s);
    feed(&s, "data: {oops\n\nevent: ping\ndata: [DONE]\n\n", 0.3);
    CHECK_EQ_INT(s.bad_events, 1);
    CHECK_EQ_INT(s.done, 1);
    bench_stream_free(&s);
}

TEST(bench_probe_stats) {
    double v[] = {3, 1, NAN, 2, 10};
    bench_stat st = bench_stat_of(v, 5);
    CHECK_EQ_INT(st.n, 4);
    CHECK_NEAR(st.median, 2.5, 1e-12);
    CHECK_NEAR(st.min, 1, 1e-12);
    CHECK_NEAR(st.max, 10, 1e-12);
    CHECK_NEAR(v[0], 3, 0); /* input untouched */
    double w[] = {7, 5, 9};
    st = bench_stat_of(w, 3);
    CHECK_NEAR(st.median, 7, 1e-12);
    double z[] = {NAN};
    st = bench_stat_of(z, 1);
    CHECK_EQ_INT(st.n, 0);
    CHECK(isnan(st.median));
}

/* Three streams' text events at known times (no usage: a token per event):
 * A 1.0 .. 5.0 every 0.5 s, B 2.0 .. 6.0 every 0.25 s, C 3.0 .. 4.5 every
 * 0.5 s. All three decode over (3.0, 4.5]: A 3 events, B 6, C 3 = 12 tokens
 * in 1.5 s. With usage saying twice the events, twice the rate. A stream
 * that ended before another began decoding: no window. */
TEST(bench_probe_decode_window_rate) {
    bench_stream a, b, c;
    bench_stream_init(&a);
    bench_stream_init(&b);
    bench_stream_init(&c);
    const char *ev = EV("{\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"x\",\"finish_reason\":null}]}");
    for (double t = 1.0; t <= 5.0 + 1e-9; t += 0.5) feed(&a, ev, t);
    for (double t = 2.0; t <= 6.0 + 1e-9; t += 0.25) feed(&b, ev, t);
    for (double t = 3.0; t <= 4.5 + 1e-9; t += 0.5) feed(&c, ev, t);
    const bench_stream *all[3] = {&a, &b, &c};
    CHECK_NEAR(bench_decode_window_rate(all, 3), 12 / 1.5, 1e-9);
    a.completion_tokens = 2 * a.n_text_events;
    b.completion_tokens = 2 * b.n_text_events;
    c.completion_tokens = 2 * c.n_text_events;
    CHECK_NEAR(bench_decode_window_rate(all, 3), 24 / 1.5, 1e-9);
    /* one stream alone: its own decode span */
    const bench_stream *one[1] = {&c};
    CHECK_NEAR(bench_decode_window_rate(one, 1), 2 * 3 / 1.5, 1e-9);
    bench_stream d;
    bench_stream_init(&d);
    feed(&d, ev, 5.5);
    feed(&d, ev, 7.0);
    const bench_stream *apart[2] = {&c, &d};
    CHECK(isnan(bench_decode_window_rate(apart, 2)));
    bench_stream_free(&a);
    bench_stream_free(&b);
    bench_stream_free(&c);
    bench_stream_free(&d);
}
