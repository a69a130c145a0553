/* engine.c — engine thread, request queue, step scheduler, stop strings and
 * event delivery (see engine.h).
 *
 * A sequence's state is its token list ctx (prompt + generated) and n_cached,
 * the tokens whose KV is stored. Every step feeds ctx[n_cached .. n_ctx) (all
 * of it for a decode step, a chunk of it while prefilling); when the feed
 * reaches n_ctx the sequence gets logits and samples the next token. Prefill,
 * decode and recompute after preemption are therefore the same rule. When the
 * KV pool runs out, the most recently admitted sequence is preempted: its KV
 * is dropped and it waits (at the front) to be recomputed, which gives the
 * same tokens because the forward is batch-invariant and its sampler state is
 * kept. */
#include "engine/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "kv/prefix_cache.h"
#include "spec/drafter.h"
#include "spec/pld.h"

struct engine_req {
    atomic_int refs;
    atomic_int cancelled;
    int32_t *prompt;
    int n_prompt;
    engine_params p;
    char *stop_copy[ENGINE_MAX_STOP];
    int32_t *prediction;    /* owned copy of p.prediction */
    double t_submit;
    /* event queue, guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    engine_event *evs;
    int ev_head, ev_n, ev_cap;
    bool ended;             /* DONE/ERROR queued */
    struct engine_req *next;/* waiting list link (engine mutex) */
};

typedef struct {
    engine_req *r;
    kv_seq kv;
    int32_t *ctx;
    int n_ctx, cap, n_cached, n_gen;
    sampler *smp;
    sample_rng rng;
    tok_stream *ts;
    char *pend;             /* text held back while it may start a stop string */
    size_t pend_len, pend_cap;
    double t_first;
    long long admit_order;
    bool stop_hit;          /* a stop string ended it: pend is final */
    /* speculation */
    bool spec;              /* drafting on for this sequence (gates may turn it off) */
    bool pld;               /* prompt lookup among the draft sources */
    int32_t draft[ENGINE_MAX_DRAFT];
    int n_draft;            /* drafts fed in the current step */
    int n_drafted, n_accepted, n_verify;
    int n_prompt_cached;    /* prompt tokens served by the prefix cache at admission */
    const char *spec_off_by; /* NULL, or which gate / failure turned drafting off */
    /* the draft model, used when prompt lookup finds nothing */
    drafter_seq dseq;
    bool use_drafter;
    int draft_src;          /* source of the current drafts: 0 lookup/prediction, 1 drafter, 2 MTP */
    int dr_steps, dr_accepted;
    int pld_drafted, pld_accepted;
    /* the model's MTP head: entries for positions [mtp_q0, mtp_next) at dense
     * indices of mkv, built from the target's hidden states after each step;
     * drafts for the next step computed right after (recursively, depth) */
    bool use_mtp;
    kv_seq mkv;
    int mtp_q0, mtp_next;
    int32_t mtp_draft[ENGINE_MAX_DRAFT];
    int n_mtp_draft, mtp_depth, mtp_steps, mtp_drafted, mtp_accepted;
} seq_state;

struct engine {
    model *m;
    const tokenizer *tok;
    engine_config cfg;
    kv_cache kv;
    pthread_t th;
    pthread_mutex_t mu;     /* guards waiting list, stop flag */
    pthread_cond_t cv;
    engine_req *wait_head, *wait_tail;
    int n_waiting;
    bool stopping;
    /* engine-thread only */
    seq_state **active;
    int n_active;
    seq_state **preempted;  /* FIFO of sequences to recompute */
    int n_preempted;
    long long admit_counter;
    float *logits;          /* (max rows, vocab) */
    int logits_rows;
    int32_t *b_tok, *b_pos, *b_seq, *b_rows;
    int b_cap;
    float *raw;             /* vocab scratch for logprobs */
    /* stats */
    atomic_llong done, prompt_tokens, gen_tokens, preemptions;
    atomic_llong spec_drafted, spec_accepted, spec_verify, gate_prompt_off, gate_runtime_off;
    atomic_llong prefix_lookup, prefix_hit;
    atomic_int stat_cached_blocks;
    prefix_cache *pc;       /* NULL when disabled */
    drafter *dr;            /* NULL without a draft model */
    kv_cache mtp_kv;        /* the MTP head's entries (n_blocks 0: no head in use) */
    double mtp_ratio;
    atomic_llong mtp_drafted_n, mtp_accepted_n;
    int32_t *mtp_tok, *mtp_idx, *mtp_pos, *mtp_hid, *mtp_seq, *mtp_rows; /* scratch, (cap) */
    int mtp_cap;
    float *mtp_logits;      /* (max_concurrent, vocab) */
    double dr_ratio;        /* drafter forward / target decode step */
    atomic_llong dr_drafted, dr_accepted;
    double verify_ratio;    /* measured cost of a (draft_len + 1)-token step over a 1-token step */
    atomic_int stat_active;
    atomic_int stat_kv_free;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- requests and events ---------------------------------------------- */

static void req_free(engine_req *r) {
    for (int i = 0; i < r->ev_n; i++) engine_event_clear(&r->evs[(r->ev_head + i) % r->ev_cap]);
    free(r->evs);
    for (int i = 0; i < ENGINE_MAX_STOP; i++) free(r->stop_copy[i]);
    free(r->prediction);
    free(r->prompt);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

void engine_req_release(engine_req *r) {
    if (!r) return;
    atomic_store(&r->cancelled, 1);
    if (atomic_fetch_sub(&r->refs, 1) == 1) req_free(r);
}

void engine_cancel(engine_req *r) { atomic_store(&r->cancelled, 1); }

void engine_event_clear(engine_event *ev) {
    free(ev->text);
    ev->text = NULL;
    ev->len = 0;
}

/* Takes ownership of ev->text. */
static void push_event(engine_req *r, engine_event *ev) {
    pthread_mutex_lock(&r->mu);
    if (r->ended) { /* nothing after the last event */
        pthread_mutex_unlock(&r->mu);
        engine_event_clear(ev);
        return;
    }
    if (r->ev_n == r->ev_cap) {
        int cap = r->ev_cap ? r->ev_cap * 2 : 16;
        engine_event *ne = malloc((size_t)cap * sizeof *ne);
        if (!ne) { /* drop the event rather than crash; the DONE still comes */
            pthread_mutex_unlock(&r->mu);
            engine_event_clear(ev);
            return;
        }
        for (int i = 0; i < r->ev_n; i++) ne[i] = r->evs[(r->ev_head + i) % r->ev_cap];
        free(r->evs);
        r->evs = ne;
        r->ev_head = 0;
        r->ev_cap = cap;
    }
    r->evs[(r->ev_head + r->ev_n) % r->ev_cap] = *ev;
    r->ev_n++;
    if (ev->type != ENGINE_EV_TOKEN) r->ended = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

int engine_next_event(engine_req *r, engine_event *ev, int timeout_ms) {
    struct timespec dl;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) { dl.tv_sec++; dl.tv_nsec -= 1000000000L; }
    }
    pthread_mutex_lock(&r->mu);
    while (r->ev_n == 0) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&r->cv, &r->mu);
        } else if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) != 0) {
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
    }
    *ev = r->evs[r->ev_head];
    r->ev_head = (r->ev_head + 1) % r->ev_cap;
    r->ev_n--;
    pthread_mutex_unlock(&r->mu);
    return 1;
}

static void push_error(engine_req *r, const char *msg) {
    engine_event ev = {0};
    ev.type = ENGINE_EV_ERROR;
    ev.text = strdup(msg);
    ev.len = ev.text ? strlen(ev.text) : 0;
    push_event(r, &ev);
}

/* ---- submit ------------------------------------------------------------ */

engine_req *engine_submit(engine *e, const int32_t *prompt, int n_prompt, const engine_params *p) {
    int V = e->m->cfg.vocab_size;
    if (n_prompt <= 0) { err_set(KS_EINVAL, "the prompt is empty"); return NULL; }
    if (n_prompt >= e->cfg.ctx_size) {
        err_set(KS_EINVAL, "the prompt is %d tokens, the context is %d tokens (the prompt must leave room for at least one generated token)",
                n_prompt, e->cfg.ctx_size);
        return NULL;
    }
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V) {
            err_set(KS_EINVAL, "prompt token %d (id %d) is outside the vocabulary of %d", i, prompt[i], V);
            return NULL;
        }
    if (p->max_tokens <= 0) { err_set(KS_EINVAL, "max_tokens must be at least 1"); return NULL; }
    if (p->n_stop < 0 || p->n_stop > ENGINE_MAX_STOP) { err_set(KS_EINVAL, "at most %d stop strings", ENGINE_MAX_STOP); return NULL; }
    engine_req *r = calloc(1, sizeof *r);
    if (!r) { err_set(KS_ENOMEM, "out of memory"); return NULL; }
    atomic_init(&r->refs, 2);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->p = *p;
    if (r->p.top_logprobs > ENGINE_MAX_TOP_LOGPROBS) r->p.top_logprobs = ENGINE_MAX_TOP_LOGPROBS;
    r->prompt = malloc((size_t)n_prompt * sizeof *r->prompt);
    if (!r->prompt) goto oom;
    memcpy(r->prompt, prompt, (size_t)n_prompt * sizeof *r->prompt);
    r->n_prompt = n_prompt;
    int ns = 0;
    for (int i = 0; i < p->n_stop; i++) {
        if (!p->stop[i] || !p->stop[i][0]) continue; /* empty stop strings mean nothing */
        if (!(r->stop_copy[ns] = strdup(p->stop[i]))) goto oom;
        r->p.stop[ns] = r->stop_copy[ns];
        ns++;
    }
    r->p.n_stop = ns;
    r->p.prediction = NULL;
    if (p->prediction && p->n_prediction > 0) {
        for (int i = 0; i < p->n_prediction; i++)
            if (p->prediction[i] < 0 || p->prediction[i] >= V) {
                req_free(r);
                err_set(KS_EINVAL, "prediction token %d (id %d) is outside the vocabulary", i, p->prediction[i]);
                return NULL;
            }
        if (!(r->prediction = malloc((size_t)p->n_prediction * sizeof *r->prediction))) goto oom;
        memcpy(r->prediction, p->prediction, (size_t)p->n_prediction * sizeof *r->prediction);
        r->p.prediction = r->prediction;
    } else {
        r->p.n_prediction = 0;
    }
    r->t_submit = now_s();
    pthread_mutex_lock(&e->mu);
    if (e->wait_tail) e->wait_tail->next = r;
    else e->wait_head = r;
    e->wait_tail = r;
    e->n_waiting++;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return r;
oom:
    req_free(r);
    err_set(KS_ENOMEM, "out of memory");
    return NULL;
}

/* ---- sequences --------------------------------------------------------- */

/* Offers the sequence's full blocks of valid KV to the prefix cache. */
static void cache_blocks(engine *e, seq_state *s) {
    if (!e->pc) return;
    int full = s->n_cached / e->kv.block_size;
    if (full > s->kv.n_blocks) full = s->kv.n_blocks;
    if (full > 0) prefix_cache_insert(e->pc, &e->kv, s->ctx, full, s->kv.blocks);
}

static void seq_free(engine *e, seq_state *s) {
    cache_blocks(e, s);
    kv_seq_release(&e->kv, &s->kv);
    if (e->dr) drafter_seq_release(e->dr, &s->dseq);
    if (e->mtp_kv.n_blocks) kv_seq_release(&e->mtp_kv, &s->mkv);
    sampler_free(s->smp);
    tok_stream_free(s->ts);
    free(s->ctx);
    free(s->pend);
    engine_req_release(s->r);
    free(s);
}

static seq_state *seq_new(engine *e, engine_req *r) {
    seq_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->r = r;
    s->cap = r->n_prompt + (r->p.max_tokens < e->cfg.ctx_size ? r->p.max_tokens : e->cfg.ctx_size) + 1;
    s->ctx = malloc((size_t)s->cap * sizeof *s->ctx);
    s->smp = sampler_new(e->m->cfg.vocab_size);
    s->ts = tok_stream_new(e->tok, true);
    if (!s->ctx || !s->smp || !s->ts) {
        s->r = NULL;
        kv_seq_release(&e->kv, &s->kv);
        sampler_free(s->smp);
        tok_stream_free(s->ts);
        free(s->ctx);
        free(s);
        return NULL;
    }
    memcpy(s->ctx, r->prompt, (size_t)r->n_prompt * sizeof *s->ctx);
    s->n_ctx = r->n_prompt;
    sample_rng_seed(&s->rng, r->p.seed);
    /* drafting: prompt lookup when on (server default or per request), and
     * any request's own prediction (a draft source of its own) */
    s->pld = r->p.spec < 0 ? e->cfg.pld : r->p.spec > 0;
    s->use_drafter = e->dr && r->p.spec != 0;
    s->use_mtp = e->mtp_kv.n_blocks > 0 && r->p.spec != 0 && (r->p.mtp < 0 ? e->cfg.mtp : r->p.mtp > 0);
    s->mtp_q0 = -1;
    s->mtp_depth = e->cfg.mtp_depth;
    s->spec = s->pld || s->use_drafter || s->use_mtp || (r->p.spec != 0 && r->p.n_prediction > 0);
    if (s->spec && !r->p.n_prediction && r->n_prompt >= ENGINE_GATE_MIN_PROMPT &&
        pld_repetition_score(r->prompt, r->n_prompt) < e->cfg.spec_min_repetition) {
        s->spec = false; /* novel prompt: drafts would rarely be accepted */
        s->spec_off_by = "prompt gate";
        atomic_fetch_add(&e->gate_prompt_off, 1);
    }
    return s;
}

static int pend_append(seq_state *s, const char *t, size_t n) {
    if (s->pend_len + n + 1 > s->pend_cap) {
        size_t cap = s->pend_cap ? s->pend_cap * 2 : 256;
        while (cap < s->pend_len + n + 1) cap *= 2;
        char *np = realloc(s->pend, cap);
        if (!np) return -1;
        s->pend = np;
        s->pend_cap = cap;
    }
    memcpy(s->pend + s->pend_len, t, n);
    s->pend_len += n;
    s->pend[s->pend_len] = 0;
    return 0;
}

/* Splits pending text into what can be emitted now. Returns 1 when a stop
 * string was found (pend then holds only the text before it). *emit_len is
 * the length of the prefix of pend safe to emit. */
static int stop_scan(seq_state *s, size_t *emit_len) {
    const engine_params *p = &s->r->p;
    size_t best = s->pend_len;
    int found = 0;
    for (int i = 0; i < p->n_stop; i++) {
        const char *hit = memmem(s->pend, s->pend_len, p->stop[i], strlen(p->stop[i]));
        if (hit && (size_t)(hit - s->pend) < best) {
            best = (size_t)(hit - s->pend);
            found = 1;
        }
    }
    if (found) {
        s->pend_len = best;
        s->pend[best] = 0;
        *emit_len = best;
        return 1;
    }
    /* hold back the longest suffix that is a proper prefix of a stop string */
    size_t hold = 0;
    for (int i = 0; i < p->n_stop; i++) {
        size_t sl = strlen(p->stop[i]);
        for (size_t k = sl - 1 < s->pend_len ? sl - 1 : s->pend_len; k > hold; k--)
            if (!memcmp(s->pend + s->pend_len - k, p->stop[i], k)) { hold = k; break; }
    }
    *emit_len = s->pend_len - hold;
    return 0;
}

static char *take_pending(seq_state *s, size_t n, size_t *len) {
    char *t = malloc(n + 1);
    if (!t) { *len = 0; return NULL; }
    memcpy(t, s->pend, n);
    t[n] = 0;
    memmove(s->pend, s->pend + n, s->pend_len - n);
    s->pend_len -= n;
    *len = n;
    return t;
}

static void finish_seq(engine *e, seq_state *s, engine_finish why) {
    if (!s->stop_hit) { /* after a stop string nothing more is emitted */
        size_t len, emit;
        const char *tail = tok_stream_flush(s->ts, &len);
        if (tail && len) pend_append(s, tail, len);
        if (s->r->p.n_stop && stop_scan(s, &emit)) why = ENGINE_FINISH_STOP;
    }
    engine_event ev = {0};
    ev.type = ENGINE_EV_DONE;
    ev.text = take_pending(s, s->pend_len, &ev.len);
    ev.finish = why;
    ev.n_prompt = s->r->n_prompt;
    ev.n_gen = s->n_gen;
    ev.t_first_token = s->t_first > 0 ? s->t_first - s->r->t_submit : 0;
    ev.t_total = now_s() - s->r->t_submit;
    ev.n_drafted = s->n_drafted;
    ev.n_accepted = s->n_accepted;
    ev.n_cached = s->n_prompt_cached;
    if (e->cfg.log_requests) {
        static const char *why_s[] = {"stop", "length", "context", "cancelled"};
        double gen_s = ev.t_total - ev.t_first_token;
        fprintf(stderr,
                "kestrel: request done: prompt %d tokens (%d cached), %d generated, finish %s, ttft %.1f ms, "
                "%.1f tok/s; speculation %s: %d drafted, %d accepted (%.0f%%)%s%s\n",
                ev.n_prompt, ev.n_cached, ev.n_gen, why_s[why], ev.t_first_token * 1e3,
                ev.n_gen > 1 && gen_s > 0 ? (ev.n_gen - 1) / gen_s : 0.0,
                s->n_drafted || s->spec ? "on" : "off", ev.n_drafted, ev.n_accepted,
                ev.n_drafted ? 100.0 * ev.n_accepted / ev.n_drafted : 0.0, s->spec_off_by ? ", off by " : "",
                s->spec_off_by ? s->spec_off_by : "");
    }
    /* counters first: a client that reads /metrics right after its answer sees them */
    atomic_fetch_add(&e->done, 1);
    atomic_fetch_add(&e->prompt_tokens, s->r->n_prompt);
    atomic_fetch_add(&e->gen_tokens, s->n_gen);
    push_event(s->r, &ev);
}

static void fill_logprobs(engine *e, const float *logits, int tok, engine_event *ev, int top) {
    int V = e->m->cfg.vocab_size;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double z = 0;
    for (int i = 0; i < V; i++) z += exp((double)(logits[i] - mx));
    float lz = mx + (float)log(z);
    ev->logprob = logits[tok] - lz;
    ev->n_top = 0;
    for (int k = 0; k < top; k++) { /* k-th best by repeated scan: top <= 20 */
        int best = -1;
        for (int i = 0; i < V; i++) {
            int taken = 0;
            for (int j = 0; j < ev->n_top; j++) taken |= ev->top_ids[j] == i;
            if (!taken && (best < 0 || logits[i] > logits[best])) best = i;
        }
        if (best < 0) break;
        ev->top_ids[ev->n_top] = best;
        ev->top_logprobs[ev->n_top] = logits[best] - lz;
        ev->n_top++;
    }
}

/* Appends a chosen token: events, stop strings, limits. `raw` is the row's
 * logits before processing (for logprobs). Returns 1 when the sequence
 * finished. */
static int seq_commit(engine *e, seq_state *s, int tok, const float *raw) {
    engine_req *r = s->r;
    if (s->n_gen == 0) s->t_first = now_s();
    for (int i = 0; i < r->p.n_eos; i++)
        if (tok == r->p.eos[i]) {
            finish_seq(e, s, ENGINE_FINISH_STOP);
            return 1;
        }
    engine_event ev = {0};
    ev.type = ENGINE_EV_TOKEN;
    s->ctx[s->n_ctx++] = tok;
    s->n_gen++;
    ev.token = tok;
    if (r->p.logprobs || r->p.top_logprobs > 0) fill_logprobs(e, raw, tok, &ev, r->p.top_logprobs);
    size_t len;
    const char *t = tok_stream_push(s->ts, tok, &len);
    if (t && len) pend_append(s, t, len);
    size_t emit = s->pend_len;
    int stopped = r->p.n_stop ? stop_scan(s, &emit) : 0;
    ev.text = take_pending(s, emit, &ev.len);
    push_event(r, &ev);
    if (stopped) {
        s->stop_hit = true;
        finish_seq(e, s, ENGINE_FINISH_STOP);
        return 1;
    }
    if (s->n_gen >= r->p.max_tokens) { finish_seq(e, s, ENGINE_FINISH_LENGTH); return 1; }
    if (s->n_ctx >= e->cfg.ctx_size || s->n_ctx >= s->cap) { finish_seq(e, s, ENGINE_FINISH_CONTEXT); return 1; }
    return 0;
}

/* Chooses the token for one logits row exactly as plain decoding would: the
 * greedy token at temperature 0, else one draw from the target's
 * distribution (one uniform from the request's stream per committed token).
 * A draft d is accepted iff the chosen token equals it. All drafts here are
 * deterministic (q = 1{d}: lookup, prediction, greedy drafter, greedy MTP),
 * for which this accepts d with probability p(d) — exactly the
 * Leviathan/Chen rule's min(1, p(d)/q(d)) — and the emitted token is always
 * a sample of p. Because every committed token consumes one draw in order,
 * a seeded request gives the same text with speculation on or off. (The
 * general rule for sampled drafts is sample_spec_accept.) */
static int seq_choose(engine *e, seq_state *s, float *row, int d) {
    (void)d;
    const sample_params *sp = &s->r->p.sp;
    sample_apply_penalties(s->smp, sp, row, s->ctx, s->n_ctx, s->r->n_prompt);
    if (sp->temperature <= 0.0f) return sample_argmax(row, e->m->cfg.vocab_size);
    const int32_t *ids;
    const float *probs;
    int n = sample_dist(s->smp, sp, row, &ids, &probs);
    return sample_draw(ids, probs, n, -1, &s->rng);
}

/* Plain step: one row. Returns 1 when the sequence finished. */
static int seq_sample(engine *e, seq_state *s, float *logits) {
    engine_req *r = s->r;
    if (r->p.logprobs || r->p.top_logprobs > 0) memcpy(e->raw, logits, (size_t)e->m->cfg.vocab_size * sizeof(float));
    int tok = seq_choose(e, s, logits, -1);
    return seq_commit(e, s, tok, e->raw);
}

/* Cost of verifying k drafts, in plain decode steps: linear between 1 (no
 * draft) and the measured cost of a pld_draft_len + 1 token step. */
static double verify_cost(const engine *e, double k) {
    return 1.0 + (e->verify_ratio - 1.0) * k / e->cfg.pld_draft_len;
}

/* Verify step: rows for [last token, d1..dk]; accepts the drafts the target
 * agrees with, commits them and the target's own next token, drops the KV of
 * rejected positions. Returns 1 when the sequence finished. */
static int seq_verify(engine *e, seq_state *s, float *rows, int n_cached_before) {
    int V = e->m->cfg.vocab_size, k = s->n_draft, accepted = 0;
    engine_req *r = s->r;
    /* counted before committing: a commit may finish the sequence (its DONE
     * event reports these counts) */
    s->n_drafted += k;
    atomic_fetch_add(&e->spec_drafted, k);
    for (int i = 0; i <= k; i++) {
        float *row = rows + (size_t)i * V;
        if (r->p.logprobs || r->p.top_logprobs > 0) memcpy(e->raw, row, (size_t)V * sizeof(float));
        int d = i < k ? s->draft[i] : -1;
        int tok = seq_choose(e, s, row, d);
        bool hit = d >= 0 && tok == d;
        if (hit) {
            accepted++;
            s->n_accepted++;
            atomic_fetch_add(&e->spec_accepted, 1);
        }
        if (seq_commit(e, s, tok, e->raw)) return 1;
        if (!hit) break;
    }
    s->n_verify++;
    atomic_fetch_add(&e->spec_verify, 1);
    if (s->draft_src == 0) {
        s->pld_drafted += k;
        s->pld_accepted += accepted;
    } else if (s->draft_src == 2) {
        s->mtp_steps++;
        s->mtp_drafted += k;
        s->mtp_accepted += accepted;
        atomic_fetch_add(&e->mtp_drafted_n, k);
        atomic_fetch_add(&e->mtp_accepted_n, accepted);
        /* the head's gate: a step costs a verify plus one head pass per depth */
        double kbar = (double)s->mtp_drafted / s->mtp_steps; /* one head pass per draft */
        if (s->mtp_steps >= 8 && 1.0 + (double)s->mtp_accepted / s->mtp_steps < verify_cost(e, kbar) + kbar * e->mtp_ratio) {
            s->use_mtp = false;
            s->n_mtp_draft = 0;
            atomic_fetch_add(&e->gate_runtime_off, 1);
        }
    }
    if (s->draft_src == 1) {
        /* the drafter saw ctx before the step plus d1..d(k-1): keep what matched */
        int n_ctx_before = n_cached_before + 1;
        drafter_rewind(e->dr, &s->dseq, n_ctx_before + (accepted < k - 1 ? accepted : k - 1));
        s->dr_steps++;
        s->dr_accepted += accepted;
        atomic_fetch_add(&e->dr_drafted, k);
        atomic_fetch_add(&e->dr_accepted, accepted);
        /* the drafter's own gate: its step costs a verify plus k drafter forwards */
        if (s->dr_steps >= 8 && 1.0 + (double)s->dr_accepted / s->dr_steps <
                                    verify_cost(e, e->cfg.drafter_len) + e->cfg.drafter_len * e->dr_ratio) {
            s->use_drafter = false;
            atomic_fetch_add(&e->gate_runtime_off, 1);
        }
    }
    /* KV holds [.. last token, d1..dk]; keep the last token and the accepted drafts */
    s->n_cached = n_cached_before + 1 + accepted;
    kv_seq_truncate(&e->kv, &s->kv, s->n_cached);
    s->kv.n_tokens = s->n_cached;
    /* runtime gate: after 8 verify steps, stop drafting when a verify step
     * yields fewer tokens than it costs in plain decode steps (sticky) */
    if (s->n_verify >= 8) {
        double tokens_per_step = 1.0 + (double)s->n_accepted / s->n_verify;
        if (tokens_per_step < verify_cost(e, (double)s->n_drafted / s->n_verify)) {
            s->spec = false;
            s->spec_off_by = "runtime gate";
            atomic_fetch_add(&e->gate_runtime_off, 1);
        }
    }
    return 0;
}

/* ---- scheduler --------------------------------------------------------- */

static void remove_active(engine *e, int i) {
    memmove(&e->active[i], &e->active[i + 1], (size_t)(e->n_active - i - 1) * sizeof *e->active);
    e->n_active--;
}

static void preempt_last(engine *e) {
    int li = 0;
    for (int i = 1; i < e->n_active; i++)
        if (e->active[i]->admit_order > e->active[li]->admit_order) li = i;
    seq_state *s = e->active[li];
    atomic_fetch_add(&e->preemptions, 1);
    cache_blocks(e, s); /* the recompute may find its own blocks again */
    kv_seq_truncate(&e->kv, &s->kv, 0);
    if (e->dr) drafter_seq_release(e->dr, &s->dseq);
    if (e->mtp_kv.n_blocks) kv_seq_release(&e->mtp_kv, &s->mkv);
    s->mtp_q0 = -1;
    s->mtp_next = 0;
    s->n_mtp_draft = 0;
    s->n_cached = 0;
    remove_active(e, li);
    memmove(&e->preempted[1], &e->preempted[0], (size_t)e->n_preempted * sizeof *e->preempted);
    e->preempted[0] = s;
    e->n_preempted++;
}

static int blocks_for(const engine *e, int tokens) { return (tokens + e->kv.block_size - 1) / e->kv.block_size; }

/* Free blocks plus cached blocks nobody uses (evicted on demand). */
static int blocks_available(const engine *e) {
    return kv_free_blocks(&e->kv) + (e->pc ? prefix_cache_idle(e->pc, &e->kv) : 0);
}

/* A sequence without KV starts on the longest cached prefix of its tokens:
 * full blocks strictly before its last token (that one is always computed,
 * so its logits exist and shared blocks are never written). */
static void attach_prefix(engine *e, seq_state *s, bool first) {
    if (!e->pc || s->n_cached || s->kv.n_blocks) return;
    int bs = e->kv.block_size, n_full = (s->n_ctx - 1) / bs;
    if (first) atomic_fetch_add(&e->prefix_lookup, s->n_ctx);
    if (n_full <= 0) return;
    int32_t *blocks = malloc((size_t)n_full * sizeof *blocks);
    if (!blocks) return;
    int found = prefix_cache_lookup(e->pc, &e->kv, s->ctx, n_full, blocks);
    if (found > 0 && kv_seq_share(&e->kv, &s->kv, blocks, found, found * bs) == KS_OK) {
        s->n_cached = found * bs;
        if (first) {
            s->n_prompt_cached = s->n_cached;
            atomic_fetch_add(&e->prefix_hit, s->n_cached);
        }
    }
    free(blocks);
}

/* Admits preempted sequences first, then waiting requests, while there is
 * room in the batch and enough KV blocks for their uncached tokens. */
static void admit(engine *e) {
    while (e->n_active < e->cfg.max_concurrent && e->n_preempted > 0) {
        seq_state *s = e->preempted[0];
        if (blocks_for(e, s->n_ctx + 1) > blocks_available(e) && e->n_active > 0) return;
        memmove(&e->preempted[0], &e->preempted[1], (size_t)(e->n_preempted - 1) * sizeof *e->preempted);
        e->n_preempted--;
        attach_prefix(e, s, false);
        e->active[e->n_active++] = s;
    }
    pthread_mutex_lock(&e->mu);
    while (e->n_active < e->cfg.max_concurrent && e->wait_head) {
        engine_req *r = e->wait_head;
        if (!atomic_load(&r->cancelled) && blocks_for(e, r->n_prompt + 1) > blocks_available(e) && e->n_active > 0)
            break;
        e->wait_head = r->next;
        if (!e->wait_head) e->wait_tail = NULL;
        e->n_waiting--;
        r->next = NULL;
        pthread_mutex_unlock(&e->mu);
        seq_state *s = seq_new(e, r);
        if (!s) {
            push_error(r, "out of memory");
            engine_req_release(r);
        } else {
            s->admit_order = e->admit_counter++;
            attach_prefix(e, s, true);
            e->active[e->n_active++] = s;
        }
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
}

static int ensure_batch(engine *e, int n) {
    if (n <= e->b_cap) return 0;
    int cap = n * 2;
    int32_t *a = realloc(e->b_tok, (size_t)cap * 4), *b, *c, *d;
    if (!a) return -1;
    e->b_tok = a;
    if (!(b = realloc(e->b_pos, (size_t)cap * 4))) return -1;
    e->b_pos = b;
    if (!(c = realloc(e->b_seq, (size_t)cap * 4))) return -1;
    e->b_seq = c;
    if (!(d = realloc(e->b_rows, (size_t)cap * 4))) return -1;
    e->b_rows = d;
    e->b_cap = cap;
    return 0;
}

/* ---- MTP head ---------------------------------------------------------- */

static int mtp_scratch(engine *e, int n) {
    if (n <= e->mtp_cap) return 0;
    int cap = n * 2;
    int32_t **arrs[6] = {&e->mtp_tok, &e->mtp_idx, &e->mtp_pos, &e->mtp_hid, &e->mtp_seq, &e->mtp_rows};
    for (int i = 0; i < 6; i++) {
        int32_t *p = realloc(*arrs[i], (size_t)cap * sizeof *p);
        if (!p) return -1;
        *arrs[i] = p;
    }
    e->mtp_cap = cap;
    return 0;
}

/* Depth controller: the depth d in 1..--mtp-depth with the most expected
 * tokens per unit of cost, from this sequence's acceptance so far (prior
 * 0.7): tokens(d) = 1 + r + r^2 + .. + r^d, cost(d) = verify of d drafts + d
 * head passes. 0 when no depth beats plain decoding. */
static int mtp_best_depth(const engine *e, const seq_state *s) {
    double r = (s->mtp_accepted + 7.0) / (s->mtp_drafted + 10.0), best = 1.0, tok = 1.0, pr = 1.0;
    int bd = 0;
    for (int d = 1; d <= e->cfg.mtp_depth; d++) {
        tok += (pr *= r);
        double v = tok / (verify_cost(e, d) + d * e->mtp_ratio);
        if (v > best) {
            best = v;
            bd = d;
        }
    }
    return bd;
}

/* After a target forward: enter the positions whose hidden states it just
 * produced into each sequence's head (dropping the recursive draft entries of
 * the last step), then draft the next step's tokens: the entry of the newest
 * token gives d1, and d2.. feed the head's own output back. Sequences whose
 * head falls behind (hidden states already gone, e.g. after a cached prefix)
 * restart their entries from here. Errors turn the head off for the step's
 * sequences; output never depends on it. */
static void mtp_update(engine *e, int na, const int *feed, const int *tstart, const int *pstart, const int *done) {
    int V = e->m->cfg.vocab_size, n = 0, n_rows = 0;
    int row_of[na], depth_of[na];
    kv_seq *seqs[na];
    for (int i = 0; i < na; i++) {
        seq_state *s = e->active[i];
        row_of[i] = -1;
        depth_of[i] = 0;
        seqs[i] = &s->mkv;
        if (done[i] || !s->use_mtp || !feed[i]) continue;
        s->n_mtp_draft = 0;
        s->mtp_depth = mtp_best_depth(e, s);
        if (!s->mtp_depth) { /* the head does not pay here: stop keeping it */
            s->use_mtp = false;
            atomic_fetch_add(&e->gate_runtime_off, 1);
            continue;
        }
        int p0 = pstart[i], p_end = s->n_cached - 1; /* valid hidden rows: positions p0..p_end */
        if (s->mtp_q0 < 0 || s->mtp_next < p0 + 1) { /* (re)start the entries here */
            kv_seq_truncate(&e->mtp_kv, &s->mkv, 0);
            s->mtp_q0 = s->mtp_next = p0 + 1;
        }
        kv_seq_truncate(&e->mtp_kv, &s->mkv, s->mtp_next - s->mtp_q0); /* drop last step's recursion */
        int q_end = p_end + 2 < s->n_ctx ? p_end + 2 : s->n_ctx; /* entries q < q_end */
        if (q_end <= s->mtp_next) continue;
        if (kv_seq_reserve(&e->mtp_kv, &s->mkv, q_end - s->mtp_q0 + e->cfg.mtp_depth) != 0 ||
            mtp_scratch(e, n + (q_end - s->mtp_next)) != 0) {
            s->use_mtp = false;
            continue;
        }
        for (int q = s->mtp_next; q < q_end; q++, n++) {
            e->mtp_tok[n] = s->ctx[q];
            e->mtp_pos[n] = q;
            e->mtp_idx[n] = q - s->mtp_q0;
            e->mtp_hid[n] = tstart[i] + (q - 1 - p0);
            e->mtp_seq[n] = i;
        }
        s->mtp_next = q_end;
        if (q_end == s->n_ctx) { /* the newest token's entry drafts the next one */
            row_of[i] = n_rows;
            e->mtp_rows[n_rows++] = n - 1;
        }
    }
    if (!n) return;
    model_batch b = {n, e->mtp_tok, e->mtp_idx, e->mtp_seq, na, seqs, n_rows, e->mtp_rows};
    if (model_mtp_forward(e->m, &e->mtp_kv, &b, e->mtp_pos, e->mtp_hid, MTP_SRC_TARGET, e->mtp_logits) != 0) {
        for (int i = 0; i < na; i++) e->active[i]->use_mtp = false;
        return;
    }
    for (int i = 0; i < na; i++)
        if (row_of[i] >= 0) {
            seq_state *s = e->active[i];
            s->mtp_draft[0] = sample_argmax(e->mtp_logits + (size_t)row_of[i] * V, V);
            s->n_mtp_draft = depth_of[i] = 1;
            row_of[i] = e->mtp_rows[row_of[i]]; /* the entry's row in the head's output */
        }
    /* deeper drafts: one head pass per depth over every sequence still going */
    for (int d = 1; d < e->cfg.mtp_depth; d++) {
        int m = 0;
        for (int i = 0; i < na; i++) {
            seq_state *s = e->active[i];
            if (depth_of[i] != d || s->mtp_depth <= d) continue;
            int q = s->n_ctx + d - 1;
            e->mtp_tok[m] = s->mtp_draft[d - 1];
            e->mtp_pos[m] = q;
            e->mtp_idx[m] = q - s->mtp_q0;
            e->mtp_hid[m] = row_of[i];
            e->mtp_seq[m] = i;
            e->mtp_rows[m] = m;
            row_of[i] = m++;
        }
        if (!m) break;
        model_batch bd = {m, e->mtp_tok, e->mtp_idx, e->mtp_seq, na, seqs, m, e->mtp_rows};
        if (model_mtp_forward(e->m, &e->mtp_kv, &bd, e->mtp_pos, e->mtp_hid, MTP_SRC_MTP, e->mtp_logits) != 0) break;
        for (int i = 0; i < na; i++)
            if (depth_of[i] == d && e->active[i]->mtp_depth > d) {
                seq_state *s = e->active[i];
                s->mtp_draft[d] = sample_argmax(e->mtp_logits + (size_t)row_of[i] * V, V);
                s->n_mtp_draft = depth_of[i] = d + 1;
            }
    }
}

/* One scheduler step. Returns 0 when there was nothing to do. */
static int step(engine *e) {
    atomic_store(&e->stat_kv_free, kv_free_blocks(&e->kv));
    /* drop cancelled sequences */
    for (int i = 0; i < e->n_active;) {
        seq_state *s = e->active[i];
        if (atomic_load(&s->r->cancelled)) {
            finish_seq(e, s, ENGINE_FINISH_CANCELLED);
            remove_active(e, i);
            seq_free(e, s);
        } else {
            i++;
        }
    }
    admit(e);
    atomic_store(&e->stat_active, e->n_active);
    if (e->n_active == 0) {
        atomic_store(&e->stat_kv_free, kv_free_blocks(&e->kv));
        return 0;
    }
    /* plan: every decoding sequence feeds its last token (plus its drafts when
     * speculating); prefilling ones share the prefill budget */
    /* while sequences are decoding, prompts are prefilled in quarter-size
     * chunks: a long prompt then delays running streams by a bounded step */
    int na = e->n_active, decoding = 0;
    for (int i = 0; i < na; i++) decoding |= e->active[i]->n_ctx - e->active[i]->n_cached == 1;
    int budget = decoding ? e->cfg.prefill_chunk / 4 : e->cfg.prefill_chunk;
    if (budget < 16) budget = 16;
    int feed[na];
    for (int i = 0; i < na; i++) {
        seq_state *s = e->active[i];
        int want = s->n_ctx - s->n_cached;
        s->n_draft = 0;
        if (want > 1) {
            want = want < budget ? want : budget;
            if (want < 1) want = 0;
            budget -= want;
        } else if (want == 1 && s->spec) {
            int room = s->r->p.max_tokens - s->n_gen - 1; /* the bonus token counts too */
            int ctx_room = (e->cfg.ctx_size < s->cap ? e->cfg.ctx_size : s->cap) - s->n_ctx - 1;
            /* predictions are followed in long runs (15 + 1 tokens: still a
             * graph-sized verify step), lookups in the sequence in short ones */
            int k = s->r->p.n_prediction ? ENGINE_MAX_DRAFT - 1 : e->cfg.pld_draft_len;
            if (room < k) k = room;
            if (ctx_room < k) k = ctx_room;
            if (k > 0)
                s->n_draft = pld_propose(s->ctx, s->n_ctx, s->n_gen, s->r->p.prediction, s->r->p.n_prediction,
                                         e->cfg.pld_key_len, k, e->cfg.pld_draft_len, s->pld, s->draft);
            s->draft_src = 0;
            if (s->use_mtp && s->n_mtp_draft > 0 && k > 0) {
                /* expected accepted tokens, from each source's acceptance so far
                 * (priors: the head 0.7, lookup 0.5); both cost nothing now */
                double r_mtp = (s->mtp_accepted + 7.0) / (s->mtp_drafted + 10.0);
                double r_pld = (s->pld_accepted + 5.0) / (s->pld_drafted + 10.0);
                int n_mtp = s->n_mtp_draft < k ? s->n_mtp_draft : k;
                double e_mtp = 0, e_pld = 0, pm = 1, pp = 1;
                for (int j = 0; j < n_mtp; j++) e_mtp += (pm *= r_mtp);
                for (int j = 0; j < s->n_draft; j++) e_pld += (pp *= r_pld);
                if (e_mtp > e_pld && !s->r->p.n_prediction) {
                    memcpy(s->draft, s->mtp_draft, (size_t)n_mtp * sizeof *s->draft);
                    s->n_draft = n_mtp;
                    s->draft_src = 2;
                }
            }
            if (s->n_draft == 0 && s->use_drafter && k > 0) {
                int kd = e->cfg.drafter_len < k ? e->cfg.drafter_len : k;
                s->n_draft = drafter_propose(e->dr, &s->dseq, s->ctx, s->n_ctx, kd, s->draft);
                s->draft_src = 1;
                if (s->n_draft < 0) { /* the drafter failed: keep prompt lookup only */
                    s->n_draft = 0;
                    s->use_drafter = false;
                }
            }
            if (s->n_draft < 0) { /* the proposer failed: plain decoding from here on */
                s->n_draft = 0;
                s->spec = false;
                s->spec_off_by = "proposer failure";
            }
            want += s->n_draft;
        }
        feed[i] = want;
    }
    for (int i = 0; i < na; i++) {
        if (!feed[i]) continue;
        seq_state *s = e->active[i];
        while (kv_seq_reserve(&e->kv, &s->kv, s->n_cached + feed[i]) != 0) {
            if (s->n_draft) { /* no room for drafts: plain decode this step */
                feed[i] -= s->n_draft;
                s->n_draft = 0;
                continue;
            }
            if (e->n_active == 1) { /* alone and still no room: the pool is smaller than its context */
                finish_seq(e, s, ENGINE_FINISH_CONTEXT);
                remove_active(e, 0);
                seq_free(e, s);
                return 1;
            }
            preempt_last(e); /* indices shift: plan the step again */
            return 1;
        }
    }
    int n = 0, n_rows = 0;
    for (int i = 0; i < na; i++) n += feed[i];
    if (n == 0) return 1;
    if (ensure_batch(e, n) != 0) return 1;
    kv_seq *seqs[na];
    int first_row[na], rows_of[na], tstart[na], pstart[na];
    for (int i = 0, t = 0; i < na; i++) {
        seq_state *s = e->active[i];
        seqs[i] = &s->kv;
        first_row[i] = n_rows;
        rows_of[i] = 0;
        tstart[i] = t;
        pstart[i] = s->n_cached;
        for (int j = 0; j < feed[i]; j++, t++) {
            int p = s->n_cached + j;
            e->b_tok[t] = p < s->n_ctx ? s->ctx[p] : s->draft[p - s->n_ctx];
            e->b_pos[t] = p;
            e->b_seq[t] = i;
            if (s->n_draft && j >= feed[i] - 1 - s->n_draft) e->b_rows[n_rows++] = t; /* every verified position */
        }
        if (!s->n_draft && feed[i] && s->n_cached + feed[i] == s->n_ctx) e->b_rows[n_rows++] = t - 1;
        rows_of[i] = n_rows - first_row[i];
    }
    if (n_rows > e->logits_rows) {
        float *l = realloc(e->logits, (size_t)n_rows * e->m->cfg.vocab_size * sizeof(float));
        if (!l) return 1;
        e->logits = l;
        e->logits_rows = n_rows;
    }
    model_batch b = {n, e->b_tok, e->b_pos, e->b_seq, na, seqs, n_rows, e->b_rows};
    if (model_forward(e->m, &e->kv, &b, e->logits) != 0) {
        const char *msg = err_msg();
        for (int i = na - 1; i >= 0; i--) {
            push_error(e->active[i]->r, msg);
            seq_free(e, e->active[i]);
        }
        e->n_active = 0;
        return 1;
    }
    int done[na];
    memset(done, 0, sizeof done);
    for (int i = 0; i < na; i++) {
        seq_state *s = e->active[i];
        float *rows = e->logits + (size_t)first_row[i] * e->m->cfg.vocab_size;
        if (s->n_draft) {
            done[i] = seq_verify(e, s, rows, s->n_cached);
            continue;
        }
        s->n_cached += feed[i];
        s->kv.n_tokens = s->n_cached;
        if (rows_of[i]) done[i] = seq_sample(e, s, rows);
    }
    if (e->mtp_kv.n_blocks) mtp_update(e, na, feed, tstart, pstart, done);
    for (int i = na - 1; i >= 0; i--)
        if (done[i]) {
            seq_state *s = e->active[i];
            remove_active(e, i);
            seq_free(e, s);
        }
    atomic_store(&e->stat_active, e->n_active);
    atomic_store(&e->stat_kv_free, kv_free_blocks(&e->kv));
    atomic_store(&e->stat_cached_blocks, prefix_cache_size(e->pc));
    return 1;
}

/* Cost of a verify step of draft_len + 1 tokens relative to a 1-token decode
 * step on this backend and model (best of 3 after a warm-up, on a scratch
 * sequence): the runtime gate's break-even. */
static double measure_verify_ratio(engine *e) {
    int k1 = e->cfg.pld_draft_len + 1;
    kv_seq s = {0};
    if (kv_seq_reserve(&e->kv, &s, k1 + 1) != 0) return 1.5;
    int32_t tok[ENGINE_MAX_DRAFT + 1] = {0}, pos[ENGINE_MAX_DRAFT + 1], seq[ENGINE_MAX_DRAFT + 1] = {0};
    int32_t rows[ENGINE_MAX_DRAFT + 1];
    for (int i = 0; i < k1; i++) pos[i] = rows[i] = i;
    float *logits = malloc((size_t)k1 * e->m->cfg.vocab_size * sizeof(float));
    kv_seq *seqs[1] = {&s};
    double best[2] = {1e9, 1e9};
    for (int rep = 0; rep < 4 && logits; rep++)
        for (int v = 0; v < 2; v++) {
            int n = v ? k1 : 1;
            model_batch b = {n, tok, pos, seq, 1, seqs, n, rows};
            double t0 = now_s();
            if (model_forward(e->m, &e->kv, &b, logits) != 0) break;
            double dt = now_s() - t0;
            if (rep > 0 && dt < best[v]) best[v] = dt;
        }
    free(logits);
    kv_seq_release(&e->kv, &s);
    double r = best[0] < 1e9 && best[1] < 1e9 && best[0] > 0 ? best[1] / best[0] : 1.5;
    return r < 1.0 ? 1.0 : r;
}

/* One MTP head entry (a pass of one token) relative to a target decode step. */
static double measure_mtp_ratio(engine *e) {
    kv_seq s = {0}, ms = {0};
    kv_seq *seqs[1] = {&s}, *mseqs[1] = {&ms};
    int32_t tok[2] = {0, 0}, pos[2] = {0, 1}, seq[2] = {0, 0}, row = 0, q = 1, idx = 0, hid = 0;
    float *logits = malloc((size_t)e->m->cfg.vocab_size * sizeof(float));
    double t[2] = {1e9, 1e9};
    if (logits && kv_seq_reserve(&e->kv, &s, 2) == 0 && kv_seq_reserve(&e->mtp_kv, &ms, 2) == 0)
        for (int rep = 0; rep < 4; rep++) {
            model_batch b = {1, tok, pos, seq, 1, seqs, 1, &row};
            double t0 = now_s();
            if (model_forward(e->m, &e->kv, &b, logits) != 0) break;
            double t1 = now_s();
            model_batch mb = {1, tok, &idx, seq, 1, mseqs, 1, &row};
            if (model_mtp_forward(e->m, &e->mtp_kv, &mb, &q, &hid, MTP_SRC_TARGET, logits) != 0) break;
            double t2 = now_s();
            if (rep > 0) {
                if (t1 - t0 < t[0]) t[0] = t1 - t0;
                if (t2 - t1 < t[1]) t[1] = t2 - t1;
            }
        }
    free(logits);
    kv_seq_release(&e->kv, &s);
    kv_seq_release(&e->mtp_kv, &ms);
    return t[0] < 1e9 && t[1] < 1e9 && t[0] > 0 ? t[1] / t[0] : 0.3;
}

/* A drafter forward (1 token) relative to a target decode step. */
static double measure_drafter_ratio(engine *e) {
    double t[2] = {1e9, 1e9};
    model *ms[2] = {e->m, e->cfg.drafter};
    for (int v = 0; v < 2; v++) {
        kv_cache kv;
        if (model_kv_init(ms[v], &kv, 64) != 0) return 0.5;
        kv_seq s = {0};
        kv_seq *seqs[1] = {&s};
        int32_t tok = 0, pos = 0, seq = 0, row = 0;
        float *logits = malloc((size_t)ms[v]->cfg.vocab_size * sizeof(float));
        if (logits && kv_seq_reserve(&kv, &s, 1) == 0)
            for (int rep = 0; rep < 4; rep++) {
                model_batch b = {1, &tok, &pos, &seq, 1, seqs, 1, &row};
                double t0 = now_s();
                if (model_forward(ms[v], &kv, &b, logits) != 0) break;
                double dt = now_s() - t0;
                if (rep > 0 && dt < t[v]) t[v] = dt;
            }
        free(logits);
        kv_seq_release(&kv, &s);
        kv_cache_free(&kv);
    }
    return t[0] < 1e9 && t[1] < 1e9 && t[0] > 0 ? t[1] / t[0] : 0.5;
}

static void *engine_main(void *v) {
    engine *e = v;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && !e->wait_head && e->n_active == 0 && e->n_preempted == 0)
            pthread_cond_wait(&e->cv, &e->mu);
        bool stop = e->stopping;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        step(e);
    }
    return NULL;
}

int engine_start(engine **out, model *m, const tokenizer *tok, const engine_config *cfg) {
    engine *e = calloc(1, sizeof *e);
    if (!e) return err_set(KS_ENOMEM, "engine: out of memory");
    e->m = m;
    e->tok = tok;
    e->cfg = *cfg;
    if (e->cfg.max_concurrent < 1) e->cfg.max_concurrent = 1;
    if (e->cfg.prefill_chunk < 16) e->cfg.prefill_chunk = 16;
    if (e->cfg.ctx_size < 16) e->cfg.ctx_size = 16;
    if (e->cfg.kv_tokens <= 0) e->cfg.kv_tokens = e->cfg.ctx_size * e->cfg.max_concurrent;
    const char *lg = getenv("KESTREL_LOG");
    if (lg && !strcmp(lg, "debug")) e->cfg.log_requests = true;
    if (e->cfg.pld_key_len < 1) e->cfg.pld_key_len = 3;
    if (e->cfg.pld_draft_len < 1) e->cfg.pld_draft_len = 5;
    if (e->cfg.pld_draft_len > ENGINE_MAX_DRAFT) e->cfg.pld_draft_len = ENGINE_MAX_DRAFT;
    if (e->cfg.spec_min_repetition < 0) e->cfg.spec_min_repetition = ENGINE_DEFAULT_MIN_REPETITION;
    int rc = model_kv_init(m, &e->kv, e->cfg.kv_tokens);
    if (rc) { free(e); return rc; }
    e->verify_ratio = measure_verify_ratio(e);
    if (e->cfg.mtp && m->mtp) {
        if (e->cfg.mtp_depth < 1) e->cfg.mtp_depth = 3;
        if (e->cfg.mtp_depth > ENGINE_MAX_DRAFT) e->cfg.mtp_depth = ENGINE_MAX_DRAFT;
        e->mtp_logits = malloc((size_t)e->cfg.max_concurrent * m->cfg.vocab_size * sizeof(float));
        if (e->mtp_logits && model_mtp_kv_init(m, &e->mtp_kv, e->cfg.kv_tokens) == KS_OK)
            e->mtp_ratio = measure_mtp_ratio(e);
    }
    if (e->cfg.drafter) {
        if (e->cfg.drafter_len < 1) e->cfg.drafter_len = 4;
        if (e->cfg.drafter_len > ENGINE_MAX_DRAFT) e->cfg.drafter_len = ENGINE_MAX_DRAFT;
        if (drafter_new(&e->dr, e->cfg.drafter, e->cfg.kv_tokens) == KS_OK)
            e->dr_ratio = measure_drafter_ratio(e);
    }
    if (e->cfg.prefix_cache) {
        int maxb = e->cfg.prefix_cache_blocks > 0 ? e->cfg.prefix_cache_blocks : e->kv.n_blocks;
        e->pc = prefix_cache_new(e->kv.n_blocks, e->kv.block_size, maxb);
        e->kv.pc = e->pc; /* NULL on OOM: runs without */
    }
    e->active = calloc((size_t)e->cfg.max_concurrent, sizeof *e->active);
    e->preempted = calloc((size_t)e->cfg.max_concurrent, sizeof *e->preempted);
    e->raw = malloc((size_t)m->cfg.vocab_size * sizeof(float));
    if (!e->active || !e->preempted || !e->raw) {
        kv_cache_free(&e->kv);
        free(e->active); free(e->preempted); free(e->raw); free(e);
        return err_set(KS_ENOMEM, "engine: out of memory");
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    atomic_store(&e->stat_kv_free, kv_free_blocks(&e->kv));
    if (pthread_create(&e->th, NULL, engine_main, e) != 0) {
        kv_cache_free(&e->kv);
        free(e->active); free(e->preempted); free(e->raw); free(e);
        return err_set(KS_ENOMEM, "engine: cannot start thread");
    }
    *out = e;
    return KS_OK;
}

void engine_stop(engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->th, NULL);
    for (int i = 0; i < e->n_active; i++) {
        finish_seq(e, e->active[i], ENGINE_FINISH_CANCELLED);
        seq_free(e, e->active[i]);
    }
    for (int i = 0; i < e->n_preempted; i++) {
        finish_seq(e, e->preempted[i], ENGINE_FINISH_CANCELLED);
        seq_free(e, e->preempted[i]);
    }
    for (engine_req *r = e->wait_head, *nx; r; r = nx) {
        nx = r->next;
        push_error(r, "server shutting down");
        engine_req_release(r);
    }
    prefix_cache_free(e->pc);
    drafter_free(e->dr);
    if (e->mtp_kv.n_blocks) kv_cache_free(&e->mtp_kv);
    free(e->mtp_logits);
    free(e->mtp_tok); free(e->mtp_idx); free(e->mtp_pos); free(e->mtp_hid); free(e->mtp_seq); free(e->mtp_rows);
    kv_cache_free(&e->kv);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e->active); free(e->preempted); free(e->raw); free(e->logits);
    free(e->b_tok); free(e->b_pos); free(e->b_seq); free(e->b_rows);
    free(e);
}

int engine_ctx_size(const engine *e) { return e->cfg.ctx_size; }

void engine_get_stats(engine *e, engine_stats *s) {
    pthread_mutex_lock(&e->mu);
    s->queued = e->n_waiting;
    pthread_mutex_unlock(&e->mu);
    s->active = atomic_load(&e->stat_active);
    s->kv_blocks_free = atomic_load(&e->stat_kv_free);
    s->kv_blocks_total = e->kv.n_blocks;
    s->requests_done = atomic_load(&e->done);
    s->prompt_tokens = atomic_load(&e->prompt_tokens);
    s->generated_tokens = atomic_load(&e->gen_tokens);
    s->preemptions = atomic_load(&e->preemptions);
    s->spec_drafted = atomic_load(&e->spec_drafted);
    s->spec_accepted = atomic_load(&e->spec_accepted);
    s->spec_verify_steps = atomic_load(&e->spec_verify);
    s->gate_prompt_off = atomic_load(&e->gate_prompt_off);
    s->gate_runtime_off = atomic_load(&e->gate_runtime_off);
    s->verify_cost_ratio = e->verify_ratio;
    s->prefix_lookup_tokens = atomic_load(&e->prefix_lookup);
    s->prefix_hit_tokens = atomic_load(&e->prefix_hit);
    s->prefix_cached_blocks = atomic_load(&e->stat_cached_blocks);
    s->drafter_drafted = atomic_load(&e->dr_drafted);
    s->drafter_accepted = atomic_load(&e->dr_accepted);
    s->drafter_cost_ratio = e->dr_ratio;
    s->mtp_drafted = atomic_load(&e->mtp_drafted_n);
    s->mtp_accepted = atomic_load(&e->mtp_accepted_n);
    s->mtp_cost_ratio = e->mtp_ratio;
}
