/* bench_run.c — the workloads of `kestrel bench` (see bench_run.h): builds the
 * request bodies (temperature 0 unless told, fixed max_tokens, streaming with
 * stream_options.include_usage), runs one warmup request per workload that is
 * discarded, then `runs` x `n_prompts` measured requests one at a time; the
 * context ladder (prompts cut to a target token count, calibrated with the
 * server's /tokenize when it has one) and the concurrency sweep (n streams at
 * once). Every prompt gets a unique tag at its start unless cache_bust is
 * off, so a server's prefix cache cannot turn a repetition into a cache hit. */
#include "bench/bench_run.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/strbuf.h"
#include "bench/bench_http.h"
#include "bench/probe.h"

#define MAX_ERR_TEXT 300

typedef struct {
    const bench_config *cfg;
    bench_http *http;
    const char *model;
    json_t *extra;
    int tokenize_ok; /* -1 unknown, 0 no /tokenize, 1 works */
    int spec_seen;
} ctx;

/* ---- samples of one request set ---- */

typedef struct {
    double *ttft, *prefill, *decode, *e2e, *ptok, *ctok;
    int n, cap;
    long long acc, rej, ctok_spec; /* speculation counters summed over samples that reported them */
    int n_spec, rej_known;
    int errors;
    long last_status;
    char err[MAX_ERR_TEXT];
} sample_set;

static void ss_free(sample_set *s) {
    free(s->ttft);
    free(s->prefill);
    free(s->decode);
    free(s->e2e);
    free(s->ptok);
    free(s->ctok);
    memset(s, 0, sizeof *s);
}

static int ss_add(sample_set *s, const bench_sample *b) {
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 16;
        double **arrs[] = {&s->ttft, &s->prefill, &s->decode, &s->e2e, &s->ptok, &s->ctok};
        for (int i = 0; i < 6; i++) {
            double *p = realloc(*arrs[i], (size_t)nc * sizeof **arrs[i]);
            if (!p) return err_set(KS_ENOMEM, "bench: out of memory");
            *arrs[i] = p;
        }
        s->cap = nc;
    }
    s->ttft[s->n] = b->ttft * 1e3;
    s->prefill[s->n] = b->prefill_tok_s;
    s->decode[s->n] = b->decode_tok_s;
    s->e2e[s->n] = b->e2e * 1e3;
    s->ptok[s->n] = b->prompt_tokens >= 0 ? b->prompt_tokens : NAN;
    s->ctok[s->n] = b->completion_tokens >= 0 ? b->completion_tokens : NAN;
    s->n++;
    if (b->accepted_tokens >= 0) {
        s->n_spec++;
        s->acc += b->accepted_tokens;
        s->ctok_spec += b->completion_tokens > 0 ? b->completion_tokens : 0;
        if (b->rejected_tokens >= 0) {
            s->rej += b->rejected_tokens;
            s->rej_known = 1;
        }
    }
    return 0;
}

static json_t *num_or_null(double x) { return isnan(x) || isinf(x) ? json_null() : json_real(x); }

static json_t *stat_json(const double *v, int n) {
    bench_stat st = bench_stat_of(v, n);
    return json_pack("{s:o, s:o, s:o, s:i}", "median", num_or_null(st.median), "min", num_or_null(st.min), "max",
                     num_or_null(st.max), "n", st.n);
}

/* Adds the summary of s to obj. */
static void ss_summarize(const sample_set *s, json_t *obj) {
    json_object_set_new(obj, "samples", json_integer(s->n));
    json_object_set_new(obj, "ttft_ms", stat_json(s->ttft, s->n));
    json_object_set_new(obj, "prefill_tok_s", stat_json(s->prefill, s->n));
    json_object_set_new(obj, "decode_tok_s", stat_json(s->decode, s->n));
    json_object_set_new(obj, "e2e_ms", stat_json(s->e2e, s->n));
    json_object_set_new(obj, "prompt_tokens", stat_json(s->ptok, s->n));
    json_object_set_new(obj, "completion_tokens", stat_json(s->ctok, s->n));
    json_object_set_new(obj, "errors", json_integer(s->errors));
    if (s->errors) {
        json_object_set_new(obj, "last_status", json_integer(s->last_status));
        json_object_set_new(obj, "error", json_string(s->err));
    }
    if (s->n_spec) {
        json_t *sp = json_pack("{s:I, s:I}", "accepted_prediction_tokens", (json_int_t)s->acc, "completion_tokens",
                               (json_int_t)s->ctok_spec);
        json_object_set_new(sp, "rejected_prediction_tokens", s->rej_known ? json_integer(s->rej) : json_null());
        json_object_set_new(sp, "acceptance",
                            s->rej_known && s->acc + s->rej > 0 ? json_real((double)s->acc / (double)(s->acc + s->rej))
                                                                : json_null());
        json_object_set_new(sp, "accepted_per_completion_token",
                            s->ctok_spec > 0 ? json_real((double)s->acc / (double)s->ctok_spec) : json_null());
        json_object_set_new(obj, "speculation", sp);
    }
}

/* ---- requests ---- */

static int tokenize_count(ctx *c, const char *text) {
    if (c->tokenize_ok == 0) return -1;
    /* kestrel and llama-server read "content"; vLLM reads "prompt" + "model" */
    json_t *b = json_pack("{s:s, s:s, s:s}", "content", text, "prompt", text, "model", c->model);
    char *body = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    strbuf out = {0};
    long st = body ? bench_http_simple(c->http, "/tokenize", body, &out) : 0;
    free(body);
    int n = -1;
    if (st == 200 && out.s) {
        json_t *j = json_loads(out.s, 0, NULL);
        json_t *cnt = json_object_get(j, "count");
        json_t *t = json_object_get(j, "tokens");
        if (json_is_integer(cnt)) n = (int)json_integer_value(cnt);
        else if (json_is_array(t)) n = (int)json_array_size(t);
        json_decref(j);
    }
    sb_free(&out);
    c->tokenize_ok = n >= 0;
    return n;
}

static json_t *base_body(ctx *c) {
    const bench_config *cfg = c->cfg;
    json_t *b = json_pack("{s:s, s:i, s:f, s:b, s:{s:b}}", "model", c->model, "max_tokens", cfg->max_tokens,
                          "temperature", cfg->temperature, "stream", 1, "stream_options", "include_usage", 1);
    if (cfg->ignore_eos) json_object_set_new(b, "ignore_eos", json_true());
    if (c->extra) json_object_update(b, c->extra);
    return b;
}

/* A /v1/completions body: tag line (when cache busting) + prompt. */
static char *completion_body(ctx *c, const char *tag, const char *prompt) {
    json_t *b = base_body(c);
    strbuf p = {0};
    if (c->cfg->cache_bust && tag) sb_printf(&p, "# %s\n", tag);
    sb_puts(&p, prompt);
    json_object_set_new(b, "prompt", json_stringn(p.s ? p.s : "", p.len));
    sb_free(&p);
    char *s = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return s;
}

/* A /v1/chat/completions body: the tag goes in front of the first message. */
static char *chat_body(ctx *c, const char *tag, json_t *messages) {
    json_t *b = base_body(c);
    json_t *m = json_deep_copy(messages);
    json_t *m0 = json_array_get(m, 0);
    json_t *content = json_object_get(m0, "content");
    if (c->cfg->cache_bust && tag && json_is_string(content)) {
        strbuf p = {0};
        sb_printf(&p, "(%s) %s", tag, json_string_value(content));
        json_object_set_new(m0, "content", json_stringn(p.s ? p.s : "", p.len));
        sb_free(&p);
    }
    json_object_set_new(b, "messages", m);
    char *s = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return s;
}

/* The message of a non-200 body (OpenAI error shape or raw text). */
static void error_text(const bench_resp *r, char *out, size_t cap) {
    if (r->status == 0) {
        snprintf(out, cap, "transfer failed: %s", r->err);
        return;
    }
    if (r->stream.error.len) {
        snprintf(out, cap, "HTTP %ld, error event: %s", r->status, r->stream.error.s);
        return;
    }
    json_t *j = r->raw.s ? json_loads(r->raw.s, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    json_t *m = json_is_object(e) ? json_object_get(e, "message") : e;
    if (json_is_string(m)) snprintf(out, cap, "HTTP %ld: %s", r->status, json_string_value(m));
    else snprintf(out, cap, "HTTP %ld: %.200s", r->status, r->raw.s ? r->raw.s : "(empty body)");
    json_decref(j);
}

/* Turns a finished response into a sample, filling token counts from the
 * tokenizer when the server sent no usage. Returns 0 if it is a good sample. */
static int resp_sample(ctx *c, bench_resp *r, const char *prompt_text, bench_sample *out, sample_set *ss) {
    if (r->status != 200 || r->stream.error.len || r->stream.t_first < 0) {
        ss->errors++;
        ss->last_status = r->status;
        if (r->status == 200 && !r->stream.error.len)
            snprintf(ss->err, sizeof ss->err, "HTTP 200 but no generated text in the stream");
        else error_text(r, ss->err, sizeof ss->err);
        return -1;
    }
    if (r->stream.completion_tokens < 0) {
        int n = r->stream.text.s ? tokenize_count(c, r->stream.text.s) : -1;
        r->stream.completion_tokens = n >= 0 ? n : r->stream.n_text_events;
    }
    if (r->stream.prompt_tokens < 0 && prompt_text) r->stream.prompt_tokens = tokenize_count(c, prompt_text);
    if (r->stream.accepted_tokens >= 0) c->spec_seen = 1;
    return bench_stream_sample(&r->stream, r->t_start, r->t_end, out);
}

/* Sends one request and adds its sample to ss (errors are counted there). */
static int one_request(ctx *c, const char *path, const char *body, const char *prompt_text, sample_set *ss) {
    bench_req rq = {path, body};
    bench_resp r;
    int rc = bench_http_run(c->http, &rq, 1, &r);
    if (rc == 0) {
        bench_sample smp;
        if (resp_sample(c, &r, prompt_text, &smp, ss) == 0) rc = ss_add(ss, &smp);
    }
    bench_resp_free(&r);
    return rc;
}

/* ---- prompt sources ---- */

typedef struct {
    const char *name, *path; /* endpoint */
    int chat;
    json_t *items;           /* array of strings (completions) or of message arrays (chat) */
} workload;

static int load_jsonl(const char *file, const char *field, json_t **out) {
    FILE *f = fopen(file, "r");
    if (!f) return err_set(KS_EIO, "bench: cannot open %s", file);
    json_t *arr = json_array();
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int lineno = 0, rc = 0;
    while ((n = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (n <= 1) continue;
        json_error_t je;
        json_t *j = json_loadb(line, (size_t)n, 0, &je);
        json_t *v = json_object_get(j, field);
        if (!v || !(json_is_string(v) || json_is_array(v))) {
            rc = err_set(KS_EFORMAT, "bench: %s:%d: no \"%s\" field (%s)", file, lineno, field,
                         j ? "missing" : je.text);
            json_decref(j);
            break;
        }
        json_array_append(arr, v);
        json_decref(j);
    }
    free(line);
    fclose(f);
    if (rc == 0 && json_array_size(arr) == 0) rc = err_set(KS_EFORMAT, "bench: %s has no prompts", file);
    if (rc) json_decref(arr);
    else *out = arr;
    return rc;
}

static int read_file(const char *path, strbuf *out) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(KS_EIO, "bench: cannot open %s", path);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) sb_append(out, buf, n);
    fclose(f);
    return out->oom ? err_set(KS_ENOMEM, "bench: out of memory") : 0;
}

/* Prose prompts: "Continue this story" + one paragraph (blank-line separated). */
static int load_prose(const char *path, json_t **out) {
    strbuf s = {0};
    int rc = read_file(path, &s);
    if (rc) return rc;
    json_t *arr = json_array();
    const char *p = s.s ? s.s : "";
    while (*p) {
        const char *e = strstr(p, "\n\n");
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len && (p[len - 1] == '\n' || p[len - 1] == ' ')) len--;
        if (len > 80) {
            strbuf m = {0};
            sb_puts(&m, "Continue this story. Write the next few paragraphs in the same style.\n\n");
            sb_append(&m, p, len);
            json_array_append_new(arr, json_pack("[{s:s, s:s%}]", "role", "user", "content", m.s, m.len));
            sb_free(&m);
        }
        p += e ? (size_t)(e - p) + 2 : strlen(p);
    }
    sb_free(&s);
    if (json_array_size(arr) == 0) {
        json_decref(arr);
        return err_set(KS_EFORMAT, "bench: %s has no paragraphs", path);
    }
    *out = arr;
    return 0;
}

static int want(const bench_config *cfg, const char *name) {
    if (!cfg->workloads) return 1;
    size_t n = strlen(name);
    for (const char *p = cfg->workloads; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !memcmp(p, name, n)) return 1;
        p += len + (e ? 1 : 0);
    }
    return 0;
}

/* ---- the request-set workloads ---- */

static int run_workload(ctx *c, const workload *w, json_t *results) {
    const bench_config *cfg = c->cfg;
    int total = (int)json_array_size(w->items);
    int np = cfg->n_prompts < total ? cfg->n_prompts : total;
    sample_set ss = {0}, warm = {0};
    char tag[96];
    int rc = 0;
    /* prompt i of np: evenly spaced over the file, so short and long ones both appear */
    for (int r = -1; r < cfg->runs && rc == 0; r++) {
        for (int i = 0; i < np && rc == 0; i++) {
            if (r < 0 && i > 0) break; /* one warmup request */
            json_t *item = json_array_get(w->items, (size_t)((long)i * total / np));
            if (r < 0) snprintf(tag, sizeof tag, "%s warmup", w->name);
            else snprintf(tag, sizeof tag, "%s r%d p%d", w->name, r + 1, i + 1);
            char *body = w->chat ? chat_body(c, tag, item) : completion_body(c, tag, json_string_value(item));
            if (!body) {
                rc = err_set(KS_ENOMEM, "bench: out of memory");
                break;
            }
            rc = one_request(c, w->path, body, w->chat ? NULL : json_string_value(item), r < 0 ? &warm : &ss);
            free(body);
        }
        if (r < 0 && warm.errors && cfg->verbose)
            fprintf(stderr, "bench: %s: warmup failed: %s\n", w->name, warm.err);
    }
    json_t *o = json_pack("{s:s, s:s, s:i, s:i}", "name", w->name, "endpoint", w->path, "prompts", np, "runs",
                          cfg->runs);
    ss_summarize(&ss, o);
    json_array_append_new(results, o);
    if (cfg->verbose) {
        bench_stat d = bench_stat_of(ss.decode, ss.n), t = bench_stat_of(ss.ttft, ss.n);
        fprintf(stderr, "bench: %-6s ttft %.1f ms, decode %.1f tok/s (%d samples, %d errors)\n", w->name, t.median,
                d.median, ss.n, ss.errors);
    }
    ss_free(&ss);
    ss_free(&warm);
    return rc;
}

/* ---- context ladder ---- */

/* Returns a prefix of corpus holding about target tokens (calibrated with
 * /tokenize when the server has one; 3.5 chars/token otherwise). */
static char *cut_to_tokens(ctx *c, const strbuf *corpus, int target, double *ratio, int *measured) {
    size_t len = 0;
    *measured = -1;
    for (int it = 0; it < 4; it++) {
        len = (size_t)(target * *ratio);
        if (len > corpus->len) len = corpus->len;
        while (len < corpus->len && ((unsigned char)corpus->s[len] & 0xC0) == 0x80) len++; /* utf-8 boundary */
        char *p = strndup(corpus->s, len);
        if (!p) return NULL;
        int n = tokenize_count(c, p);
        if (n <= 0) return p;
        *measured = n;
        if (abs(n - target) <= target / 100 + 1 || len == corpus->len) return p;
        free(p);
        *ratio = (double)len / n;
    }
    return strndup(corpus->s, len);
}

static int run_ladder(ctx *c, json_t *results) {
    const bench_config *cfg = c->cfg;
    json_t *items = NULL;
    char file[1024];
    snprintf(file, sizeof file, "%s/completion.jsonl", cfg->prompts_dir);
    int rc = load_jsonl(file, "prompt", &items);
    if (rc) return rc;
    int max_target = 0;
    for (int i = 0; i < cfg->n_ladder; i++)
        if (cfg->ladder[i] > max_target) max_target = cfg->ladder[i];
    /* the corpus: every source file of the code workload, repeated if 6 chars
     * per token of the largest target would not fit */
    strbuf corpus = {0};
    while (corpus.len < (size_t)max_target * 6 && !corpus.oom) {
        size_t before = corpus.len;
        for (size_t i = 0; i < json_array_size(items); i++) {
            sb_puts(&corpus, json_string_value(json_array_get(items, i)));
            sb_puts(&corpus, "\n\n");
        }
        if (corpus.len == before) break;
    }
    json_decref(items);
    double ratio = 3.5;
    for (int li = 0; li < cfg->n_ladder && rc == 0; li++) {
        int target = cfg->ladder[li], measured;
        char *prompt = cut_to_tokens(c, &corpus, target, &ratio, &measured);
        if (!prompt) {
            rc = err_set(KS_ENOMEM, "bench: out of memory");
            break;
        }
        sample_set ss = {0};
        char tag[64];
        for (int r = 0; r < cfg->runs && rc == 0; r++) {
            snprintf(tag, sizeof tag, "ladder %d r%d", target, r + 1);
            char *body = completion_body(c, tag, prompt);
            rc = body ? one_request(c, "/v1/completions", body, prompt, &ss) : err_set(KS_ENOMEM, "bench: oom");
            free(body);
            if (ss.errors) break; /* a rejected size (400: context too small) is recorded once */
        }
        json_t *o = json_pack("{s:i, s:i}", "target_tokens", target, "runs", cfg->runs);
        json_object_set_new(o, "tokenized_prompt_tokens", measured >= 0 ? json_integer(measured) : json_null());
        ss_summarize(&ss, o);
        json_object_set_new(o, "status", json_integer(ss.errors ? ss.last_status : 200));
        json_array_append_new(results, o);
        if (cfg->verbose) {
            if (ss.errors) fprintf(stderr, "bench: ladder %6d: %s\n", target, ss.err);
            else {
                bench_stat t = bench_stat_of(ss.ttft, ss.n), p = bench_stat_of(ss.prefill, ss.n),
                           d = bench_stat_of(ss.decode, ss.n);
                fprintf(stderr, "bench: ladder %6d: ttft %.1f ms, prefill %.0f tok/s, decode %.1f tok/s\n", target,
                        t.median, p.median, d.median);
            }
        }
        ss_free(&ss);
        free(prompt);
    }
    sb_free(&corpus);
    return rc;
}

/* ---- concurrency sweep ---- */

static int run_concurrency(ctx *c, json_t *items, json_t *results) {
    const bench_config *cfg = c->cfg;
    int total = (int)json_array_size(items), rc = 0;
    for (int li = 0; li < cfg->n_conc && rc == 0; li++) {
        int n = cfg->conc[li];
        char **bodies = calloc((size_t)n, sizeof *bodies);
        bench_req *rq = calloc((size_t)n, sizeof *rq);
        bench_resp *rs = calloc((size_t)n, sizeof *rs);
        double *tot = calloc((size_t)cfg->runs, sizeof *tot), *win = calloc((size_t)cfg->runs, sizeof *win);
        const bench_stream **streams = calloc((size_t)n, sizeof *streams);
        sample_set ss = {0};
        if (!bodies || !rq || !rs || !tot || !win || !streams) rc = err_set(KS_ENOMEM, "bench: out of memory");
        for (int r = 0; r < cfg->runs && rc == 0; r++) {
            char tag[64];
            for (int i = 0; i < n; i++) {
                snprintf(tag, sizeof tag, "streams %d r%d s%d", n, r + 1, i + 1);
                const char *p = json_string_value(json_array_get(items, (size_t)((r * n + i) % total)));
                bodies[i] = completion_body(c, tag, p);
                rq[i].path = "/v1/completions";
                rq[i].body = bodies[i];
                if (!bodies[i]) rc = err_set(KS_ENOMEM, "bench: out of memory");
            }
            if (rc == 0) rc = bench_http_run(c->http, rq, n, rs);
            if (rc == 0) {
                double t0 = INFINITY, t1 = -INFINITY;
                long long toks = 0;
                int ok = 1;
                for (int i = 0; i < n; i++) {
                    streams[i] = &rs[i].stream;
                    ok &= rs[i].status == 200;
                }
                win[r] = ok ? bench_decode_window_rate(streams, n) : NAN;
                for (int i = 0; i < n; i++) {
                    bench_sample smp;
                    if (rs[i].t_start < t0) t0 = rs[i].t_start;
                    if (rs[i].t_end > t1) t1 = rs[i].t_end;
                    if (resp_sample(c, &rs[i], NULL, &smp, &ss) == 0) {
                        rc = ss_add(&ss, &smp);
                        toks += smp.completion_tokens > 0 ? smp.completion_tokens : 0;
                    }
                    bench_resp_free(&rs[i]);
                }
                tot[r] = t1 > t0 && toks > 0 ? toks / (t1 - t0) : NAN;
            }
            for (int i = 0; i < n; i++) {
                free(bodies[i]);
                bodies[i] = NULL;
            }
        }
        json_t *o = json_pack("{s:i, s:i}", "streams", n, "runs", cfg->runs);
        json_object_set_new(o, "total_tok_s", stat_json(tot, cfg->runs));
        json_object_set_new(o, "decode_window_tok_s", stat_json(win, cfg->runs));
        ss_summarize(&ss, o); /* per-stream figures: ttft_ms, decode_tok_s, ... over every stream of every run */
        json_array_append_new(results, o);
        if (cfg->verbose) {
            bench_stat t = bench_stat_of(tot, cfg->runs), d = bench_stat_of(ss.decode, ss.n),
                       w = bench_stat_of(win, cfg->runs);
            fprintf(stderr,
                    "bench: %2d streams: total %.1f tok/s, all decoding %.1f tok/s, per stream decode %.1f tok/s "
                    "(%d errors)\n",
                    n, t.median, w.median, d.median, ss.errors);
        }
        ss_free(&ss);
        free(bodies);
        free(rq);
        free(rs);
        free(tot);
        free(win);
        free(streams);
    }
    return rc;
}

/* ---- driver ---- */

static int pick_model(ctx *c, char **owned) {
    *owned = NULL;
    if (c->cfg->model) {
        c->model = c->cfg->model;
        return 0;
    }
    strbuf out = {0};
    long st = bench_http_simple(c->http, "/v1/models", NULL, &out);
    if (st == 0) {
        sb_free(&out);
        return err_set(KS_EIO, "bench: %s is not reachable (GET /v1/models failed)", c->cfg->url);
    }
    json_t *j = out.s ? json_loads(out.s, 0, NULL) : NULL;
    json_t *id = json_object_get(json_array_get(json_object_get(j, "data"), 0), "id");
    if (st == 200 && json_is_string(id)) *owned = strdup(json_string_value(id));
    json_decref(j);
    sb_free(&out);
    c->model = *owned ? *owned : "default";
    return 0;
}

int bench_run_all(const bench_config *cfg, json_t **out) {
    *out = NULL;
    ctx c = {cfg, NULL, NULL, NULL, -1, 0};
    char *model_owned = NULL;
    json_t *res = NULL, *code = NULL, *edit = NULL, *chat = NULL, *prose = NULL;
    int rc;
    if (cfg->extra_json) {
        json_error_t je;
        c.extra = json_loads(cfg->extra_json, 0, &je);
        if (!json_is_object(c.extra)) {
            json_decref(c.extra);
            return err_set(KS_EINVAL, "bench: --extra-json: not a JSON object (%s)", je.text);
        }
    }
    if ((rc = bench_http_init(&c.http, cfg->url, cfg->api_key, cfg->timeout_s))) goto done;
    if ((rc = pick_model(&c, &model_owned))) goto done;
    char file[1024];
    snprintf(file, sizeof file, "%s/completion.jsonl", cfg->prompts_dir);
    if ((want(cfg, "code") || want(cfg, "concurrency")) && (rc = load_jsonl(file, "prompt", &code))) goto done;
    snprintf(file, sizeof file, "%s/edit.jsonl", cfg->prompts_dir);
    if (want(cfg, "edit") && (rc = load_jsonl(file, "messages", &edit))) goto done;
    snprintf(file, sizeof file, "%s/chat.jsonl", cfg->prompts_dir);
    if (want(cfg, "chat") && (rc = load_jsonl(file, "messages", &chat))) goto done;
    if (want(cfg, "prose") && (rc = load_prose(cfg->prose_path, &prose))) goto done;

    res = json_object();
    json_t *conf = json_pack("{s:i, s:i, s:i, s:f, s:b, s:b}", "prompts_per_workload", cfg->n_prompts, "runs",
                             cfg->runs, "max_tokens", cfg->max_tokens, "temperature", cfg->temperature, "cache_bust",
                             cfg->cache_bust, "ignore_eos", cfg->ignore_eos);
    if (c.extra) json_object_set(conf, "extra_json", c.extra);
    json_object_set_new(res, "config", conf);
    json_object_set_new(res, "url", json_string(cfg->url));
    json_object_set_new(res, "model", json_string(c.model));
    json_t *wl = json_array(), *lad = json_array(), *con = json_array();
    json_object_set_new(res, "workloads", wl);
    json_object_set_new(res, "ladder", lad);
    json_object_set_new(res, "concurrency", con);
    workload ws[] = {{"code", "/v1/completions", 0, code},
                     {"edit", "/v1/chat/completions", 1, edit},
                     {"chat", "/v1/chat/completions", 1, chat},
                     {"prose", "/v1/chat/completions", 1, prose}};
    for (int i = 0; i < 4 && rc == 0; i++)
        if (want(cfg, ws[i].name)) rc = run_workload(&c, &ws[i], wl);
    if (rc == 0 && want(cfg, "ladder")) rc = run_ladder(&c, lad);
    if (rc == 0 && want(cfg, "concurrency")) rc = run_concurrency(&c, code, con);
    json_object_set_new(res, "speculation_reported", json_boolean(c.spec_seen));
    json_object_set_new(res, "tokenize_endpoint", json_boolean(c.tokenize_ok == 1));
done:
    json_decref(code);
    json_decref(edit);
    json_decref(chat);
    json_decref(prose);
    json_decref(c.extra);
    bench_http_free(c.http);
    free(model_owned);
    if (rc) json_decref(res);
    else *out = res;
    return rc;
}
