/* engine.c — the engine's requests, events and thread: submit, event
 * queues, start/stop, stats (see engine.h). The scheduler is engine_sched.c,
 * sequences engine_seq.c, the MTP head engine_mtp.c, DFlash engine_dflash.c.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/engine_internal.h"

/* ---- requests and events ---------------------------------------------- */

static void req_free(engine_req *r) {
    for (int i = 0; i < r->ev_n; i++) engine_event_clear(&r->evs[(r->ev_head + i) % r->ev_cap]);
    free(r->evs);
    for (int i = 0; i < ENGINE_MAX_STOP; i++) free(r->stop_copy[i]);
    free(r->prediction);
    free(r->prompt);
    jc_free(r->p.constraint);
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

/* Takes ownership of ev->text. A token event waits for engine_wake: the
 * scheduler wakes each request once a step, after the step's launches, so
 * the wake-up (a futex call, ~13 us a token on a 2-vCPU VM) is not paid per
 * token between a verify forward and the proposers' passes that follow it.
 * DONE and ERROR wake at once. */
void engine_push_event(engine_req *r, engine_event *ev) {
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
    r->unwoken = ev->type == ENGINE_EV_TOKEN;
    if (!r->unwoken) {
        r->ended = true;
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

void engine_wake(engine_req *r) {
    pthread_mutex_lock(&r->mu);
    if (r->unwoken) pthread_cond_signal(&r->cv);
    r->unwoken = false;
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

void engine_push_error(engine_req *r, const char *msg) {
    engine_event ev = {0};
    ev.type = ENGINE_EV_ERROR;
    ev.text = strdup(msg);
    ev.len = ev.text ? strlen(ev.text) : 0;
    engine_push_event(r, &ev);
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
    if (p->n_logit_bias < 0 || p->n_logit_bias > ENGINE_MAX_LOGIT_BIAS) {
        err_set(KS_EINVAL, "at most %d logit_bias entries", ENGINE_MAX_LOGIT_BIAS);
        return NULL;
    }
    for (int i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias_id[i] < 0 || p->logit_bias_id[i] >= V) {
            err_set(KS_EINVAL, "logit_bias: token %d is outside the vocabulary (%d tokens)", p->logit_bias_id[i], V);
            return NULL;
        }
    if (p->n_stop < 0 || p->n_stop > ENGINE_MAX_STOP) { err_set(KS_EINVAL, "at most %d stop strings", ENGINE_MAX_STOP); return NULL; }
    engine_req *r = calloc(1, sizeof *r);
    if (!r) { err_set(KS_ENOMEM, "out of memory"); return NULL; }
    atomic_init(&r->refs, 2);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->p = *p;
    r->p.constraint = jc_ref(p->constraint);
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


static void *engine_main(void *v) {
    engine *e = v;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && !e->wait_head && e->n_active == 0 && e->n_preempted == 0)
            pthread_cond_wait(&e->cv, &e->mu);
        bool stop = e->stopping;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        engine_step(e);
    }
    return NULL;
}

/* Everything engine_start made once the target's KV exists (the thread,
 * mutex and condition apart): engine_stop's end and engine_start's error
 * paths. */
static void engine_release(engine *e) {
    prefix_cache_free(e->pc);
    drafter_free(e->dr);
    prefix_cache_free(e->mtp_pc); /* the proposers' caches, before their pools */
    prefix_cache_free(e->fl_pc);
    if (e->mtp_kv.n_blocks) kv_cache_free(&e->mtp_kv);
    engine_dflash_stop(e);
    free(e->mtp_ids);
    free(e->mtp_tok); free(e->mtp_idx); free(e->mtp_pos); free(e->mtp_hid); free(e->mtp_seq); free(e->mtp_rows);
    kv_cache_free(&e->kv);
    token_mask_free(e->tmask);
    free(e->allowed);
    free(e->active); free(e->preempted); free(e->raw);
    free(e->b_tok); free(e->b_pos); free(e->b_seq); free(e->b_rows); free(e->b_ids); free(e->b_sample); free(e->b_pen); free(e->b_pen_ent); free(e->row);
    free(e->b_mask_rows); free(e->b_mask_bits); free(e->b_lp_rows); free(e->b_lp);
    free(e);
}

int engine_start(engine **out, model *m, const tokenizer *tok, const engine_config *cfg) {
    engine *e = calloc(1, sizeof *e);
    if (!e) return err_set(KS_ENOMEM, "engine: out of memory");
    e->m = m;
    e->tok = tok;
    e->cfg = *cfg;
    for (int src = 0; src < DRAFT_SRC_COUNT; src++) e->src_prior[src] = engine_default_prior(src);
    if (e->cfg.max_concurrent < 1) e->cfg.max_concurrent = 1;
    if (e->cfg.prefill_chunk < 16) e->cfg.prefill_chunk = 16;
    if (e->cfg.ctx_size < 16) e->cfg.ctx_size = 16;
    if (e->cfg.kv_tokens <= 0) e->cfg.kv_tokens = e->cfg.ctx_size * e->cfg.max_concurrent;
    const char *lg = getenv("KESTREL_LOG");
    if (lg && !strcmp(lg, "debug")) e->cfg.log_requests = true;
    const char *sl = getenv("KESTREL_STEP_LOG");
    if (sl && !strcmp(sl, "1")) e->cfg.log_steps = true;
    if (e->cfg.pld_key_len < 1) e->cfg.pld_key_len = 3;
    if (e->cfg.pld_draft_len < 1) e->cfg.pld_draft_len = 5;
    if (e->cfg.pld_draft_len > ENGINE_MAX_DRAFT) e->cfg.pld_draft_len = ENGINE_MAX_DRAFT;
    if (e->cfg.spec_min_repetition < 0) e->cfg.spec_min_repetition = ENGINE_DEFAULT_MIN_REPETITION;
    int rc = model_kv_init(m, &e->kv, e->cfg.kv_tokens);
    if (rc) { free(e); return rc; }
    engine_measure_step(e);
    if (e->cfg.mtp && m->mtp) {
        if (e->cfg.mtp_depth < 1) e->cfg.mtp_depth = 3;
        if (e->cfg.mtp_depth > ENGINE_MAX_DRAFT) e->cfg.mtp_depth = ENGINE_MAX_DRAFT;
        e->mtp_ids = malloc((size_t)e->cfg.max_concurrent * e->cfg.mtp_depth * sizeof(int32_t));
        if (e->mtp_ids && model_mtp_kv_init(m, &e->mtp_kv, e->cfg.kv_tokens) == KS_OK)
            e->src_ratio[DRAFT_SRC_MTP] = e->probe_ratio[DRAFT_SRC_MTP] = engine_measure_mtp(e);
    }
    if (e->cfg.drafter) {
        if (e->cfg.drafter_len < 1) e->cfg.drafter_len = 4;
        if (e->cfg.drafter_len > ENGINE_MAX_DRAFT) e->cfg.drafter_len = ENGINE_MAX_DRAFT;
        if (drafter_new(&e->dr, e->cfg.drafter, e->cfg.kv_tokens) == KS_OK &&
            (e->drafter_catchup = engine_measure_drafter_catchup(e)) < 0) {
            drafter_free(e->dr); /* a draft model that cannot run a forward: serve without it */
            e->dr = NULL;
        }
        if (e->dr) e->src_ratio[DRAFT_SRC_DRAFTER] = e->probe_ratio[DRAFT_SRC_DRAFTER] = engine_measure_drafter(e);
    }
    if (e->cfg.dflash && (rc = engine_dflash_start(e))) {
        engine_release(e);
        return rc;
    }
    if (e->cfg.prefix_cache) {
        int maxb = e->cfg.prefix_cache_blocks > 0 ? e->cfg.prefix_cache_blocks : e->kv.n_blocks;
        e->pc = prefix_cache_new(e->kv.n_blocks, e->kv.block_size, maxb, 0);
        e->kv.pc = e->pc; /* NULL on OOM: runs without */
        if (e->fl_kv.n_blocks) { /* the DFlash drafter's context entries, evicted on demand like the target's */
            e->fl_pc = prefix_cache_new(e->fl_kv.n_blocks, e->fl_kv.block_size, e->fl_kv.n_blocks, 0);
            e->fl_kv.pc = e->fl_pc;
        }
        if (e->mtp_kv.n_blocks) { /* the MTP head's entries: block i also reads token block i + 1 */
            e->mtp_pc = prefix_cache_new(e->mtp_kv.n_blocks, e->mtp_kv.block_size, e->mtp_kv.n_blocks, 1);
            e->mtp_kv.pc = e->mtp_pc;
        }
    }
    if (e->mtp_kv.n_blocks || e->dr || e->fl_block || e->cfg.log_requests)
        fprintf(stderr, "kestrel: measured costs in decode steps: verify of %d drafts %.2f (at context 0) %.2f (at 2048), "
                "MTP head pass %.2f, draft model pass %.2f (catch-up %.4f a token), DFlash pass (block %d) %.2f; step model "
                "t(n, L) = %.1f + %.2f n + L (%.4f + %.4f n) us\n", e->cfg.pld_draft_len,
                engine_verify_cost(e, e->cfg.pld_draft_len, 0), engine_verify_cost(e, e->cfg.pld_draft_len, 2048),
                e->src_ratio[DRAFT_SRC_MTP], e->src_ratio[DRAFT_SRC_DRAFTER], e->drafter_catchup, e->fl_block,
                e->src_ratio[DRAFT_SRC_DFLASH],
                e->st_a * 1e6, e->st_b * 1e6, e->st_c * 1e6, e->st_d * 1e6);
    e->active = calloc((size_t)e->cfg.max_concurrent, sizeof *e->active);
    e->preempted = calloc((size_t)e->cfg.max_concurrent, sizeof *e->preempted);
    e->raw = malloc((size_t)m->cfg.vocab_size * sizeof(float));
    if (!e->active || !e->preempted || !e->raw) {
        engine_release(e);
        return err_set(KS_ENOMEM, "engine: out of memory");
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    atomic_store(&e->stat_kv_free, kv_free_blocks(&e->kv));
    if (pthread_create(&e->th, NULL, engine_main, e) != 0) {
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
        engine_release(e);
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
        engine_seq_finish(e, e->active[i], ENGINE_FINISH_CANCELLED);
        engine_seq_free(e, e->active[i]);
    }
    for (int i = 0; i < e->n_preempted; i++) {
        engine_seq_finish(e, e->preempted[i], ENGINE_FINISH_CANCELLED);
        engine_seq_free(e, e->preempted[i]);
    }
    for (engine_req *r = e->wait_head, *nx; r; r = nx) {
        nx = r->next;
        engine_push_error(r, "server shutting down");
        engine_req_release(r);
    }
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    engine_release(e);
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
    s->gate_retries = atomic_load(&e->gate_retries);
    s->verify_cost_ratio = engine_verify_cost(e, e->cfg.pld_draft_len, 0);
    s->prefix_lookup_tokens = atomic_load(&e->prefix_lookup);
    s->prefix_hit_tokens = atomic_load(&e->prefix_hit);
    s->prefix_cached_blocks = atomic_load(&e->stat_cached_blocks);
    for (int i = 0; i < DRAFT_SRC_COUNT; i++) {
        s->src_drafted[i] = atomic_load(&e->src_drafted_n[i]);
        s->src_accepted[i] = atomic_load(&e->src_accepted_n[i]);
        s->src_verify_steps[i] = atomic_load(&e->src_verify_n[i]);
        s->src_passes[i] = atomic_load(&e->src_passes_n[i]);
    }
    memcpy(s->src_cost_ratio, e->src_ratio, sizeof s->src_cost_ratio);
    for (int d = 0; d <= ENGINE_MAX_DRAFT; d++) s->mtp_depth_steps[d] = atomic_load(&e->mtp_depth_steps[d]);
    s->dflash_behind_steps = atomic_load(&e->fl_behind_steps);
    s->constraint_rows = atomic_load(&e->constraint_rows);
    s->constraint_masks = atomic_load(&e->constraint_masks);
    backend *be = e->m->be;
    s->has_mem = be->ops->mem_usage != NULL;
    if (s->has_mem) be->ops->mem_usage(be, &s->mem);
}

