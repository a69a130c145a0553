/* probe.h — the measurement core of `kestrel bench`, kept free of I/O so the
 * unit test can drive it with recorded bytes and synthetic timestamps:
 *   - bench_stream: an SSE parser + accumulator for one streamed OpenAI
 *     response (chat.completion.chunk or text_completion). Feed it the bytes
 *     as they arrive, each call with the time they arrived; it records the
 *     time of the first and last event that carried generated text, the
 *     server's usage (prompt / completion tokens, speculation counters when
 *     present), an error event and [DONE].
 *   - bench_stream_sample: the arithmetic of the protocol (BENCHMARKS.md):
 *       TTFT          = t_first_token - t_request_sent
 *       prefill tok/s = prompt_tokens / TTFT
 *       decode tok/s  = (completion_tokens - 1) / (t_last_token - t_first_token)
 *       e2e           = t_last_byte - t_request_sent
 *   - bench_decode_window_rate: streams sent together, their joint decode
 *     rate over the window in which all of them are decoding (past their
 *     first token, not past their last): tokens in the window / its length,
 *     a stream's tokens spread evenly over its text events. Prefill and the
 *     ramp at either end, which the end-to-end total includes, are outside.
 *   - bench_stat_of: median / min / max of a set of samples (NaNs skipped).
 * Times are seconds on any one clock (the probe uses CLOCK_MONOTONIC). */
#ifndef KS_BENCH_PROBE_H
#define KS_BENCH_PROBE_H

#include <stddef.h>

#include "base/strbuf.h"

typedef struct {
    /* parser state (private) */
    strbuf line;  /* bytes of the current, unfinished line */
    strbuf data;  /* data: lines of the current event, joined by '\n' */
    int has_data; /* the current event has at least one data: line */
    /* what was measured */
    double t_first, t_last;   /* arrival of the first / last event with generated text; < 0 while none */
    int n_text_events;        /* events that carried generated text */
    double *ev_t;             /* (n_text_events) their arrival times (owned; NULL when out of memory) */
    int cap_ev;
    int prompt_tokens;        /* usage.prompt_tokens; -1 when the server sent no usage */
    int completion_tokens;    /* usage.completion_tokens; -1 when absent */
    int accepted_tokens;      /* usage.completion_tokens_details.accepted_prediction_tokens; -1 when absent */
    int rejected_tokens;      /* usage.completion_tokens_details.rejected_prediction_tokens; -1 when absent */
    int done;                 /* saw data: [DONE] */
    int bad_events;           /* data: payloads that were not JSON */
    strbuf text;              /* the generated text (content, reasoning, completion text) */
    strbuf error;             /* message of an {"error": ...} event, empty when none */
} bench_stream;

void bench_stream_init(bench_stream *s);
void bench_stream_free(bench_stream *s);
/* Feeds n bytes that arrived at time t. Events are dispatched when their
 * terminating blank line arrives, so an event split over two calls is
 * timestamped by the second. Returns 0, or KS_ENOMEM. */
int bench_stream_feed(bench_stream *s, const char *buf, size_t n, double t);
/* Dispatches a last event that was not followed by a blank line (a server
 * that closes the stream right after its last data: line). */
void bench_stream_finish(bench_stream *s, double t);

typedef struct {
    double ttft;          /* seconds */
    double prefill_tok_s; /* NaN when TTFT or prompt_tokens is unknown */
    double decode_tok_s;  /* NaN when fewer than 2 tokens or one text event */
    double e2e;           /* seconds */
    int prompt_tokens, completion_tokens;
    int accepted_tokens, rejected_tokens; /* -1 when the server did not report them */
} bench_sample;

/* Computes one sample from a finished stream; t_start: request sent, t_end:
 * last byte received. Token counts come from usage; where usage is missing the
 * caller may fill s->prompt_tokens / s->completion_tokens first (tokenizer
 * fallback). Returns 0, or KS_EFORMAT when no generated text arrived. */
int bench_stream_sample(const bench_stream *s, double t_start, double t_end, bench_sample *out);

/* The joint decode rate of n finished streams (see above); NaN when the
 * window is empty (a stream ended before another began decoding) or a
 * stream lost its event times. */
double bench_decode_window_rate(const bench_stream *const *s, int n);

typedef struct {
    double median, min, max;
    int n; /* samples that were not NaN */
} bench_stat;

/* Median (mean of the middle two for even n), min and max of v[0..n), NaNs
 * skipped; all NaN when no sample is left. v is not modified. */
bench_stat bench_stat_of(const double *v, int n);

#endif
