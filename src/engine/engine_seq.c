/* engine_seq.c — one sequence inside the engine: creation, the prefix cache
 * offer, detokenized text with stop strings held back, logprobs, choosing and
 * committing tokens, and the speculative verify step. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/engine_internal.h"
#include "sample/sample.h"
#include "spec/pld.h"

/* ---- sequences --------------------------------------------------------- */

/* Offers the sequence's full blocks of valid KV to the prefix cache. */
void engine_cache_blocks(engine *e, seq_state *s) {
    if (!e->pc) return;
    int full = s->n_cached / e->kv.block_size;
    if (full > s->kv.n_blocks) full = s->kv.n_blocks;
    if (full > 0) prefix_cache_insert(e->pc, &e->kv, s->ctx, full, s->kv.blocks);
    engine_dflash_cache(e, s);
    engine_mtp_cache(e, s);
}

void engine_seq_free(engine *e, seq_state *s) {
    engine_learn_from_request(e, s);
    engine_cache_blocks(e, s);
    kv_seq_release(&e->kv, &s->kv);
    if (e->dr) drafter_seq_release(e->dr, &s->dseq);
    engine_mtp_reset(e, s);
    engine_dflash_reset(e, s);
    engine_pen_free(s);
    sampler_free(s->smp);
    tok_stream_free(s->ts);
    free(s->ctx);
    free(s->pend);
    free(s->js);
    engine_req_release(s->r);
    free(s);
}

seq_state *engine_seq_new(engine *e, engine_req *r) {
    seq_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->r = r;
    s->cap = r->n_prompt + (r->p.max_tokens < e->cfg.ctx_size ? r->p.max_tokens : e->cfg.ctx_size) + 1;
    s->ctx = malloc((size_t)s->cap * sizeof *s->ctx);
    s->smp = sampler_new(e->m->cfg.vocab_size);
    s->ts = tok_stream_new(e->tok, true);
    if (r->p.constraint) { /* the vocabulary's table is built by the first constrained request */
        if (!e->tmask) e->tmask = token_mask_new(e->tok, e->m->cfg.vocab_size);
        if (!e->allowed) e->allowed = malloc((size_t)e->m->cfg.vocab_size);
        if (!e->row) e->row = malloc((size_t)e->m->cfg.vocab_size * sizeof *e->row);
        if (e->tmask && e->allowed && e->row && (s->js = malloc(sizeof *s->js)))
            jc_start(s->js, r->p.constraint, (r->p.constraint_think ? JC_THINK : 0) | (r->p.constraint_calls ? JC_CALLS : 0));
    }
    if (!s->ctx || !s->smp || !s->ts || (r->p.constraint && !s->js) || engine_pen_init(e, s)) {
        s->r = NULL;
        kv_seq_release(&e->kv, &s->kv);
        engine_pen_free(s);
        sampler_free(s->smp);
        tok_stream_free(s->ts);
        free(s->ctx);
        free(s->js);
        free(s);
        return NULL;
    }
    memcpy(s->ctx, r->prompt, (size_t)r->n_prompt * sizeof *s->ctx);
    s->n_ctx = r->n_prompt;
    sample_rng_seed(&s->rng, r->p.seed);
    /* sampled on the device where the backend samples (under a constraint
     * with the masks sent along) */
    bool logprobs = r->p.logprobs || r->p.top_logprobs > 0;
    s->dev_sample = r->p.sp.temperature > 0.0f && model_samples_on_device(e->m) && (!s->js || e->m->be->ops->mask_rows);
    s->dev_mask = s->dev_sample && s->js;
    /* log-probabilities from the backend wherever the backend chooses (for
     * a greedy constrained choice whose argmax was refused, the chosen
     * id's logit is fetched: choice_logprobs) */
    s->dev_logprobs = logprobs && (r->p.sp.temperature <= 0.0f || s->dev_sample);
    s->mask_stuck = -1;
    /* drafting: prompt lookup when on (server default or per request), and
     * any request's own prediction (a draft source of its own) */
    s->pld = r->p.spec < 0 ? e->cfg.pld : r->p.spec > 0;
    memcpy(s->prior, e->src_prior, sizeof s->prior);
    /* the model proposers take turns (engine_src_next): the MTP head, then
     * a DFlash drafter, then a draft model — each running one costs its
     * passes every step while only one set of drafts is verified (all
     * three at once ran 1.35x on chat on the H200 where the head with
     * lookup ran 1.95x) */
    bool can_drafter = e->dr && r->p.spec != 0;
    bool can_mtp = e->mtp_kv.n_blocks > 0 && r->p.spec != 0 && (r->p.mtp < 0 ? e->cfg.mtp : r->p.mtp > 0);
    bool can_dflash = e->fl_kv.n_blocks > 0 && r->p.spec != 0;
    s->use_mtp = can_mtp;
    s->standby[DRAFT_SRC_DFLASH] = can_dflash; /* (under a mask on the device its blocks come back: engine_dflash.c) */
    s->standby[DRAFT_SRC_DRAFTER] = can_drafter;
    s->mtp_q0 = -1;
    s->mtp_depth = e->cfg.mtp_depth;
    s->fl_q0 = -1;
    s->fl_slot = -1;
    s->spec = s->pld || can_drafter || can_mtp || can_dflash || (r->p.spec != 0 && r->p.n_prediction > 0);
    engine_src_next(e, s);
    if (s->spec && !r->p.n_prediction && r->n_prompt >= ENGINE_GATE_MIN_PROMPT &&
        pld_repetition_score(r->prompt, r->n_prompt) < e->cfg.spec_min_repetition) {
        engine_spec_off(e, s, "prompt gate"); /* novel prompt: drafts would rarely be accepted */
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
        const char *hit = s->pend_len ? memmem(s->pend, s->pend_len, p->stop[i], strlen(p->stop[i])) : NULL;
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
    if (n) memcpy(t, s->pend, n); /* (pend is NULL until some text came) */
    t[n] = 0;
    if (s->pend_len > n) memmove(s->pend, s->pend + n, s->pend_len - n);
    s->pend_len -= n;
    *len = n;
    return t;
}

void engine_seq_finish(engine *e, seq_state *s, engine_finish why) {
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
    engine_push_event(s->r, &ev);
}

bool engine_is_eos(const engine_params *p, int tok) {
    for (int i = 0; i < p->n_eos; i++)
        if (tok == p->eos[i]) return true;
    return false;
}

static float finite_or_floor(float lp) { return isfinite(lp) ? lp : -9999.0f; }

/* Appends a chosen token: events, stop strings, limits. lp: its row's
 * log-probabilities when the request wants them (the backend's, or the
 * host's of the row as the model computed it). Returns 1 when the sequence
 * finished. */
static int seq_commit(engine *e, seq_state *s, int tok, const bk_logprobs *lp) {
    engine_req *r = s->r;
    if (s->n_gen == 0) s->t_first = now_s();
    if (engine_is_eos(&r->p, tok)) {
        engine_seq_finish(e, s, ENGINE_FINISH_STOP);
        return 1;
    }
    /* a constrained choice is always a token the document accepts; none
     * could continue it (js_stuck): the answer ends here */
    if (s->js && (s->js_stuck || !token_mask_feed(e->tmask, s->js, tok))) {
        engine_seq_finish(e, s, ENGINE_FINISH_STOP);
        return 1;
    }
    engine_event ev = {0};
    ev.type = ENGINE_EV_TOKEN;
    s->ctx[s->n_ctx++] = tok;
    s->n_gen++;
    ev.token = tok;
    if (lp) { /* (a value that is not finite goes out as OpenAI's floor, -9999: JSON has no infinities) */
        ev.logprob = finite_or_floor(lp->logit - lp->lz);
        ev.n_top = lp->n_top;
        for (int k = 0; k < lp->n_top; k++) {
            ev.top_ids[k] = lp->top_id[k];
            ev.top_logprobs[k] = finite_or_floor(lp->top[k] - lp->lz);
        }
    }
    size_t len;
    const char *t = tok_stream_push(s->ts, tok, &len);
    if (t && len) pend_append(s, t, len);
    size_t emit = s->pend_len;
    int stopped = r->p.n_stop ? stop_scan(s, &emit) : 0;
    ev.text = take_pending(s, emit, &ev.len);
    engine_push_event(r, &ev);
    if (stopped) {
        s->stop_hit = true;
        engine_seq_finish(e, s, ENGINE_FINISH_STOP);
        return 1;
    }
    if (s->js && jc_finished(s->js)) { engine_seq_finish(e, s, ENGINE_FINISH_STOP); return 1; }
    if (s->n_gen >= r->p.max_tokens) { engine_seq_finish(e, s, ENGINE_FINISH_LENGTH); return 1; }
    if (s->n_ctx >= e->cfg.ctx_size || s->n_ctx >= s->cap) { engine_seq_finish(e, s, ENGINE_FINISH_CONTEXT); return 1; }
    return 0;
}

bool engine_seq_needs_logits(const seq_state *s) {
    const engine_params *p = &s->r->p;
    return ((p->logprobs || p->top_logprobs > 0) && !s->dev_logprobs) || (p->sp.temperature > 0.0f && !s->dev_sample);
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
 * general rule for sampled drafts is sample_spec_accept.)
 *
 * row NULL: id is the backend's choice (penalties and logit_bias applied
 * there): the row's argmax, or its draw at the stream's next uniform for a
 * sequence sampled on the device (taken here); for a greedy constrained
 * one, the argmax when the constraint allows it, else row i of the
 * sequence's (s->row0 + i of the step's) comes from the device, penalised,
 * for the masked argmax. A row the host holds is the model's: penalised
 * here as the backend did its copy, so id is still its argmax. */
static int seq_choose(engine *e, seq_state *s, float *row, int i, int id) {
    const sample_params *sp = &s->r->p.sp;
    bool greedy = sp->temperature <= 0.0f;
    if (!row) {
        if (s->dev_sample) sample_rng_uniform(&s->rng);
        if (s->dev_mask) { /* drawn under the row's mask; a row without one: no token continues the document */
            if (i == s->mask_stuck) s->js_stuck = true;
            return id;
        }
        if (!s->js || engine_constraint_allows(e, s->js, s, id)) return id;
        if (!e->row || model_logits_rows(e->m, s->row0 + i, 1, e->row) != 0) {
            s->js_stuck = true; /* (the device failed: the next forward reports it) */
            return id;
        }
        atomic_fetch_add(&e->constraint_rows, 1);
        return engine_constrain_row(e, s, e->row, true, -1);
    }
    if (s->pen) engine_pen_row(e, s, row);
    if (s->js) {
        int c = engine_constrain_row(e, s, row, greedy, id);
        if (greedy) return c;
    }
    if (greedy) return id >= 0 ? id : sample_argmax(row, e->m->cfg.vocab_size);
    const int32_t *ids;
    const float *probs;
    int n = sample_dist(s->smp, sp, row, &ids, &probs);
    return sample_draw(ids, probs, n, -1, &s->rng);
}

/* source src's judged drafts at every depth, and how many were accepted */
static void src_counts(const seq_state *s, int src, double *hit, double *tried) {
    *hit = *tried = 0;
    for (int d = 0; d < ENGINE_MAX_DRAFT; d++) {
        *hit += s->est_hit[src][d];
        *tried += s->est_try[src][d];
    }
}

void engine_src_rates(const seq_state *s, int src, double *rate) {
    double prior = s->prior[src], hit, tried;
    src_counts(s, src, &hit, &tried);
    double pooled = (hit + 10.0 * prior) / (tried + 10.0);
    for (int d = 0; d < ENGINE_MAX_DRAFT; d++)
        rate[d] = src != DRAFT_SRC_DFLASH ? pooled
                                          : (s->est_hit[src][d] + SPEC_DEPTH_WEIGHT * pooled) /
                                                (s->est_try[src][d] + SPEC_DEPTH_WEIGHT);
}

double engine_default_prior(int src) { return src == DRAFT_SRC_LOOKUP ? 0.5 : SPEC_MODEL_PRIOR; }

void engine_learn_from_request(engine *e, const seq_state *s) {
    for (int src = 0; src < DRAFT_SRC_COUNT; src++) {
        double hit, tried, *p = &e->src_prior[src];
        bool pooled = src != DRAFT_SRC_DFLASH; /* DFlash's prior is each depth's: a pooled one would sink its first drafts' */
        if (src == DRAFT_SRC_LOOKUP && s->r && s->r->p.n_prediction) continue; /* a prediction's drafts: its own regime */
        src_counts(s, src, &hit, &tried);
        if (tried > 0) {
            if (pooled) *p += tried / (tried + SPEC_PRIOR_WEIGHT) * (hit / tried - *p);
        } else if (s->spec) {
            if (pooled) *p += SPEC_PRIOR_FORGET * (engine_default_prior(src) - *p);
            if (e->probe_ratio[src] > 0) e->src_ratio[src] += SPEC_COST_FORGET * (e->probe_ratio[src] - e->src_ratio[src]);
        }
    }
}

/* n drafts of source src judged, the first `accepted` of them accepted */
static void learn_depths(seq_state *s, int src, int n, int accepted) {
    for (int d = 0; d < accepted; d++) {
        s->est_try[src][d]++;
        s->est_hit[src][d]++;
    }
    if (accepted < n) s->est_try[src][accepted]++;
}

/* After a verify step whose committed tokens start at ctx[base]: the chosen
 * source's outcome, and each unchosen source's ready drafts compared with
 * what was committed (a draft that matches would have been accepted: the
 * committed token is the one plain decoding chose) — up to the committed
 * tokens, past which nothing is known. */
static void learn_sources(seq_state *s, int k, int accepted, int base) {
    learn_depths(s, s->draft_src, k, accepted);
    int committed = s->n_ctx - base;
    for (int src = 0; src < DRAFT_SRC_COUNT; src++) {
        int n = s->n_shadow[src], m = 0;
        const int32_t *d = src == DRAFT_SRC_LOOKUP ? s->lookup_shadow : src == DRAFT_SRC_MTP ? s->mtp_draft : s->fl_draft;
        if (n <= 0) continue;
        while (m < n && m < committed && d[m] == s->ctx[base + m]) m++;
        learn_depths(s, src, m < committed ? n : m, m);
        s->n_shadow[src] = 0;
    }
}

/* the log-probabilities of the choice tok at the sequence's row i when the
 * request wants them: the backend's (s->dev_logprobs: its top for the
 * step's widest request, cut to this one's), else the host's over the row
 * as the model computed it (e->raw, copied before the choice) */
static const bk_logprobs *choice_logprobs(engine *e, const seq_state *s, int i, int tok, bk_logprobs *tmp) {
    const engine_params *p = &s->r->p;
    if (!p->logprobs && p->top_logprobs <= 0) return NULL;
    if (s->dev_logprobs) {
        *tmp = e->b_lp[s->lp0 + i];
        if (tmp->n_top > p->top_logprobs) tmp->n_top = p->top_logprobs;
        if (tmp->id != tok) { /* the host chose (a constrained argmax): its logit from the row's copy */
            tmp->id = tok;
            if (model_lp_raw_logit(e->m, s->lp0 + i, tok, &tmp->logit) != 0) tmp->logit = -INFINITY; /* (the floor) */
        }
    } else {
        bk_logprob_row(e->raw, e->m->cfg.vocab_size, tok, p->top_logprobs, tmp);
    }
    return tmp;
}

/* Plain step: one row. Returns 1 when the sequence finished. */
int engine_seq_sample(engine *e, seq_state *s, float *logits, const int32_t *ids) {
    engine_req *r = s->r;
    if (logits && (r->p.logprobs || r->p.top_logprobs > 0))
        memcpy(e->raw, logits, (size_t)e->m->cfg.vocab_size * sizeof(float));
    int tok = seq_choose(e, s, logits, 0, ids[0]), base = s->n_ctx;
    bk_logprobs lp;
    int finished = seq_commit(e, s, tok, choice_logprobs(e, s, 0, tok, &lp));
    learn_sources(s, 0, 0, base); /* drafts ready but not worth verifying: still compared */
    return finished;
}

/* The runtime gates' one rule: after 8 verify steps a proposer whose steps
 * yield fewer tokens (1 + accepted per step) than they cost, in plain decode
 * steps, is turned off until its back-off has passed (SPEC_RETRY_TOKENS). */
static bool gate_says_off(const engine *e, int steps, int accepted, double cost) {
    return !e->cfg.no_runtime_gates && steps >= 8 && 1.0 + (double)accepted / steps < cost;
}

/* What one of src's verify steps costs, in decode steps at context L: the
 * verify of its drafts (on average so far) plus its passes — one DFlash
 * block, one MTP head pass or one draft-model forward per draft. */
static double source_step_cost(const engine *e, const seq_state *s, int src, int L) {
    double kbar = (double)s->src_drafted[src] / s->src_steps[src];
    double passes = src == DRAFT_SRC_DFLASH ? 1 : kbar;
    return engine_verify_cost(e, kbar, L) + engine_pass_cost(e, passes * e->src_ratio[src], L);
}

/* the next back-off of a gate that closed at n_gen: SPEC_RETRY_TOKENS, then twice the last */
static void retry_later(int *at, int *gap, int n_gen) {
    *gap = *gap ? 2 * *gap : SPEC_RETRY_TOKENS;
    *at = n_gen + *gap;
}

static bool retry_due(const seq_state *s, int src) {
    return s->retry_at[src] && s->n_gen >= s->retry_at[src];
}

/* src starts drafting for this request, judged afresh */
static void src_start(engine *e, seq_state *s, int src) {
    s->standby[src] = false;
    s->retry_at[src] = 0;
    s->src_steps[src] = s->src_drafted[src] = s->src_accepted[src] = 0;
    memset(s->est_try[src], 0, sizeof s->est_try[src]);
    memset(s->est_hit[src], 0, sizeof s->est_hit[src]);
    if (src == DRAFT_SRC_MTP) {
        s->use_mtp = true; /* its entries restart from the next forward's positions (engine_mtp_update) */
        s->mtp_depth = e->cfg.mtp_depth;
        s->n_mtp_draft = s->mtp_lost = 0;
    } else if (src == DRAFT_SRC_DFLASH) {
        s->use_dflash = true;
        s->fl_q0 = -1; /* its context starts with that forward */
        s->n_fl_draft = s->fl_lost = s->fl_idle = 0;
    } else if (src == DRAFT_SRC_DRAFTER) {
        s->use_drafter = true;
    }
}

void engine_src_next(engine *e, seq_state *s) {
    if (!s->spec && s->spec_retry_at && s->n_gen >= s->spec_retry_at) { /* the request-wide gate's trial */
        s->spec = true;
        s->spec_off_by = NULL;
        s->spec_retry_at = 0;
        s->gate_verify = s->gate_drafted = s->gate_accepted = 0;
        atomic_fetch_add(&e->gate_retries, 1);
    }
    if (!s->spec || s->use_mtp || s->use_dflash) return;
    static const int turns[3] = {DRAFT_SRC_MTP, DRAFT_SRC_DFLASH, DRAFT_SRC_DRAFTER};
    int next = -1;
    for (int i = 0; i < 3 && next < 0; i++)
        if (s->standby[turns[i]] || retry_due(s, turns[i])) next = turns[i];
    if (s->use_drafter) {
        /* a draft model that has yet to take in its context (its catch-up
         * waits until it can pay) gives way to an earlier source */
        if (next < 0 || next == DRAFT_SRC_DRAFTER || !engine_drafter_behind(e, s)) return;
        s->use_drafter = false;
        s->standby[DRAFT_SRC_DRAFTER] = true;
    }
    if (next < 0) return;
    if (retry_due(s, next)) atomic_fetch_add(&e->gate_retries, 1);
    src_start(e, s, next);
}

/* src stops costing passes for this request */
static void src_stop(engine *e, seq_state *s, int src) {
    if (src == DRAFT_SRC_DFLASH) {
        s->use_dflash = false;
        engine_dflash_reset(e, s);
    } else if (src == DRAFT_SRC_MTP) {
        s->use_mtp = false;
        s->n_mtp_draft = 0;
    } else if (src == DRAFT_SRC_DRAFTER) {
        s->use_drafter = false;
    }
}

void engine_src_off(engine *e, seq_state *s, int src) {
    src_stop(e, s, src);
    retry_later(&s->retry_at[src], &s->retry_gap[src], s->n_gen);
    atomic_fetch_add(&e->gate_runtime_off, 1);
}

/* src waits on standby: first in turn when drafting comes back, its own
 * back-off untouched */
static void src_standby(engine *e, seq_state *s, int src) {
    src_stop(e, s, src);
    s->standby[src] = true;
}

void engine_spec_off(engine *e, seq_state *s, const char *why) {
    s->spec = false;
    s->spec_off_by = why;
    if (s->use_mtp) src_standby(e, s, DRAFT_SRC_MTP);
    if (s->use_dflash) src_standby(e, s, DRAFT_SRC_DFLASH);
}

/* Verify step: rows for [last token, d1..dk]; accepts the drafts the target
 * agrees with, commits them and the target's own next token, drops the KV of
 * rejected positions. Returns 1 when the sequence finished. */
int engine_seq_verify(engine *e, seq_state *s, float *rows, const int32_t *ids, int n_cached_before) {
    int V = e->m->cfg.vocab_size, k = s->n_draft, accepted = 0, L = n_cached_before;
    engine_req *r = s->r;
    /* counted before committing: a commit may finish the sequence (its DONE
     * event reports these counts) */
    s->n_drafted += k;
    atomic_fetch_add(&e->spec_drafted, k);
    atomic_fetch_add(&e->spec_verify, 1);
    int src = s->draft_src;
    atomic_fetch_add(&e->src_drafted_n[src], k);
    atomic_fetch_add(&e->src_verify_n[src], 1);
    int finished = 0, base = s->n_ctx;
    for (int i = 0; i <= k && !finished; i++) {
        float *row = rows ? rows + (size_t)i * V : NULL;
        if (row && (r->p.logprobs || r->p.top_logprobs > 0)) memcpy(e->raw, row, (size_t)V * sizeof(float));
        int d = i < k ? s->draft[i] : -1;
        int tok = seq_choose(e, s, row, i, ids[i]);
        bool hit = d >= 0 && tok == d;
        if (hit) {
            accepted++;
            s->n_accepted++;
            atomic_fetch_add(&e->spec_accepted, 1);
            atomic_fetch_add(&e->src_accepted_n[src], 1);
        }
        bk_logprobs lp;
        finished = seq_commit(e, s, tok, choice_logprobs(e, s, i, tok, &lp));
        if (!hit) break;
    }
    /* the per-source statistics below are kept even when the step finished
     * the sequence (the shared counters were updated before any commit: a
     * client reading /metrics right after its answer sees them) */
    s->n_verify++;
    s->gate_verify++;
    s->gate_drafted += k;
    s->gate_accepted += accepted;
    learn_sources(s, k, accepted, base);
    s->src_steps[src]++;
    s->src_drafted[src] += k;
    s->src_accepted[src] += accepted;
    if (src == DRAFT_SRC_MTP) atomic_fetch_add(&e->mtp_depth_steps[k], 1);
    if (src == DRAFT_SRC_DRAFTER) /* it saw ctx before the step plus d1..d(k-1): keep what matched */
        drafter_rewind(e->dr, &s->dseq, n_cached_before + 1 + (accepted < k - 1 ? accepted : k - 1));
    /* a model proposer's own gate: its steps cost a verify plus its passes */
    if (src != DRAFT_SRC_LOOKUP &&
        gate_says_off(e, s->src_steps[src], s->src_accepted[src], source_step_cost(e, s, src, L)))
        engine_src_off(e, s, src);
    if (finished) return 1;
    /* KV holds [.. last token, d1..dk]; keep the last token and the accepted drafts */
    s->n_cached = n_cached_before + 1 + accepted;
    kv_seq_truncate(&e->kv, &s->kv, s->n_cached);
    s->kv.n_tokens = s->n_cached;
    /* the gate over all of this request's drafting since it last started */
    if (s->gate_verify && gate_says_off(e, s->gate_verify, s->gate_accepted,
                                        engine_verify_cost(e, (double)s->gate_drafted / s->gate_verify, L))) {
        engine_spec_off(e, s, "runtime gate");
        retry_later(&s->spec_retry_at, &s->spec_retry_gap, s->n_gen);
        atomic_fetch_add(&e->gate_runtime_off, 1);
    }
    return 0;
}

