/* engine_sched.c — the step scheduler: admission (with prefix-cache hits),
 * preemption, and one step = plan the varlen batch (decode tokens, drafts,
 * prefill chunks), run the forward, sample/verify, update the MTP head. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/engine_internal.h"
#include "spec/pld.h"

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
    engine_cache_blocks(e, s); /* the recompute may find its own blocks again */
    kv_seq_truncate(&e->kv, &s->kv, 0);
    if (e->dr) drafter_seq_release(e->dr, &s->dseq);
    engine_mtp_reset(e, s);
    engine_dflash_reset(e, s);
    s->n_cached = 0;
    remove_active(e, li);
    memmove(&e->preempted[1], &e->preempted[0], (size_t)e->n_preempted * sizeof *e->preempted);
    e->preempted[0] = s;
    e->n_preempted++;
}

static int blocks_for(const engine *e, int tokens) { return (tokens + e->kv.block_size - 1) / e->kv.block_size; }

/* Free blocks plus cached blocks nobody uses (evicted on demand). */
static int blocks_available(const engine *e) {
    return kv_free_blocks(&e->kv) + (e->pc ? prefix_cache_idle(e->pc) : 0);
}

/* A sequence without KV starts on the longest cached prefix of its tokens:
 * full blocks strictly before its last token (that one is always computed,
 * so its logits exist and shared blocks are never written). */
static void attach_prefix(engine *e, seq_state *s, bool first) {
    if (!e->pc || s->n_cached || s->kv.n_blocks) return;
    int bs = e->kv.block_size, n_full = (s->n_ctx - 1) / bs;
    if (first) atomic_fetch_add(&e->prefix_lookup, s->n_ctx);
    int found = prefix_cache_share(e->pc, &e->kv, &s->kv, s->ctx, n_full, 0);
    if (found > 0) {
        int keep = engine_mtp_attach(e, s, found); /* the head may need the last block recomputed */
        if (keep < found) kv_seq_truncate(&e->kv, &s->kv, keep * bs);
        s->n_cached = keep * bs;
        engine_dflash_attach(e, s, keep);
        if (first) {
            s->n_prompt_cached = s->n_cached;
            atomic_fetch_add(&e->prefix_hit, s->n_cached);
        }
    }
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
        seq_state *s = engine_seq_new(e, r);
        if (!s) {
            engine_push_error(r, "out of memory");
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

/* array p grown to cap elements (kept as it was on failure); false: out of
 * memory. (The new pointer is copied into p's own storage.) */
#define GROW(p, cap) grow_into(&(p), realloc((p), (size_t)(cap) * sizeof *(p)))
static bool grow_into(void *slot, void *np) {
    if (np) memcpy(slot, &np, sizeof np);
    return np != NULL;
}

/* the step's per-token and per-row arrays for n tokens (rows <= tokens) */
static int ensure_batch(engine *e, int n) {
    if (n <= e->b_cap) return 0;
    int cap = n * 2;
    if (!GROW(e->b_tok, cap) || !GROW(e->b_pos, cap) || !GROW(e->b_seq, cap) || !GROW(e->b_rows, cap) ||
        !GROW(e->b_ids, cap) || !GROW(e->b_sample, cap) || !GROW(e->b_pen, cap) || !GROW(e->b_lp_rows, cap) ||
        !GROW(e->b_lp, cap))
        return -1;
    e->b_cap = cap;
    return 0;
}

/* A step that could not run: every active sequence ends with msg. */
static int step_failed(engine *e, const char *msg) {
    e->fl_pend = 0;
    for (int i = e->n_active - 1; i >= 0; i--) {
        engine_push_error(e->active[i]->r, msg);
        engine_seq_free(e, e->active[i]);
    }
    e->n_active = 0;
    return 1;
}

typedef struct {
    engine *e;
    int na;
    const int *order, *first_row, *rows_of; /* engine_step's */
} edit_ctx;

/* What the backend does to the step's logits rows beyond the head, in row
 * order (prompt rows first), into b (model_dev_ids.edits: called while
 * the device runs the forward): e->b_pen / b_pen_ent (penalties and
 * logit_bias: each such sequence's entries, the backend counting a
 * verify's drafts row by row), b_mask_rows / b_mask_bits (sampled under a
 * constraint on the device: each row's mask) and b_lp_rows (log-
 * probabilities from the backend, lp_top alternatives for the widest
 * request). */
static int step_edits(void *arg, model_batch *b) {
    const edit_ctx *c = arg;
    engine *e = c->e;
    int words = (e->m->cfg.vocab_size + 31) / 32, n_pen = 0, n_ent = 0, n_mask = 0, n_lp = 0, top = 0;
    for (int o = 0; o < c->na; o++) {
        int i = c->order[o], row0 = c->first_row[i], rows = c->rows_of[i];
        seq_state *s = e->active[i];
        if (!rows) continue;
        if (s->pen) {
            engine_pen_sync(e, s);
            if (n_ent + s->n_pen_ent > e->cap_b_pen_ent) {
                int cap = (n_ent + s->n_pen_ent) * 2;
                if (!GROW(e->b_pen_ent, cap)) return err_set(KS_ENOMEM, "out of memory for the step's penalties");
                e->cap_b_pen_ent = cap;
            }
            e->b_pen[n_pen++] = engine_pen_seq(s, row0, rows, n_ent);
            if (s->n_pen_ent) memcpy(e->b_pen_ent + n_ent, s->pen_ent, (size_t)s->n_pen_ent * sizeof *s->pen_ent);
            n_ent += s->n_pen_ent;
        }
        if (s->dev_mask) {
            if (n_mask + rows > e->cap_b_mask) {
                int cap = (n_mask + rows) * 2;
                if (!GROW(e->b_mask_rows, cap) || !GROW(e->b_mask_bits, (size_t)cap * words))
                    return err_set(KS_ENOMEM, "out of memory for the step's constraint masks");
                e->cap_b_mask = cap;
            }
            n_mask += engine_constraint_masks(e, s, row0, rows, e->b_mask_rows + n_mask,
                                              e->b_mask_bits + (size_t)n_mask * words);
        }
        if (s->dev_logprobs) {
            s->lp0 = n_lp;
            for (int j = 0; j < rows; j++) e->b_lp_rows[n_lp++] = row0 + j;
            if (s->r->p.top_logprobs > top) top = s->r->p.top_logprobs;
        }
    }
    atomic_fetch_add(&e->constraint_masks, n_mask);
    b->pen = e->b_pen, b->n_pen = n_pen, b->pen_ent = e->b_pen_ent, b->n_pen_ent = n_ent;
    b->mask_rows = e->b_mask_rows, b->mask_bits = e->b_mask_bits, b->n_mask = n_mask;
    b->lp_rows = e->b_lp_rows, b->n_lp = n_lp, b->lp_top = top, b->lp = e->b_lp;
    return KS_OK;
}

/* The most drafts a decoding sequence can verify next step: predictions
 * and model drafts are followed in long runs (15 + 1 tokens: still a
 * graph-sized verify step), within max_tokens (the bonus token counts too)
 * and the context. */
static int draft_room(const engine *e, const seq_state *s) {
    int room = s->r->p.max_tokens - s->n_gen - 1;
    int ctx_room = (e->cfg.ctx_size < s->cap ? e->cfg.ctx_size : s->cap) - s->n_ctx - 1;
    int k = ENGINE_MAX_DRAFT - 1;
    if (room < k) k = room;
    if (ctx_room < k) k = ctx_room;
    return k;
}

/* Prompt lookup's (or the prediction's) drafts for the next step; lookups
 * in the sequence run in short runs (pld_draft_len). */
static int lookup_drafts(const engine *e, const seq_state *s, int k, int32_t *out) {
    int k_pld = s->r->p.n_prediction || k < e->cfg.pld_draft_len ? k : e->cfg.pld_draft_len;
    return pld_propose(s->ctx, s->n_ctx, s->n_gen, s->r->p.prediction, s->r->p.n_prediction, e->cfg.pld_key_len,
                       k_pld, e->cfg.pld_draft_len, s->pld, out);
}

/* The draft model runs one forward per draft: the chain length, up to
 * drafter_len and k, with the most expected tokens per unit of cost
 * (verify plus those forwards) at its acceptance so far; 0 when no length
 * beats plain decoding by SPEC_PAY_BAR (the drafter is then off for a back-off). */
static int drafter_chain(engine *e, seq_state *s, int k) {
    int kmax = e->cfg.drafter_len < k ? e->cfg.drafter_len : k;
    if (e->cfg.no_runtime_gates) return kmax;
    double rate[ENGINE_MAX_DRAFT];
    engine_src_rates(s, DRAFT_SRC_DRAFTER, rate);
    int n = engine_best_chain(e, rate, kmax, e->src_ratio[DRAFT_SRC_DRAFTER], SPEC_PAY_BAR, s->n_cached);
    if (!n) {
        engine_src_off(e, s, DRAFT_SRC_DRAFTER);
        return 0;
    }
    /* a catch-up first (more context than a step's tokens to take in):
     * not before it can pay; the drafter stays on and asks again next step */
    int behind = engine_drafter_behind(e, s);
    if (!behind) return n;
    double value = chain_value(e, rate, n, n * e->src_ratio[DRAFT_SRC_DRAFTER], s->n_cached);
    return engine_catchup_pays(e, value, behind, s->n_gen, s->r->p.max_tokens - s->n_gen) ? n : 0;
}

/* The draft model's kd drafts for the step into s->draft, timed: a
 * proposal that feeds it a few tokens as its per-draft cost; one with a
 * catch-up first (tokens it has yet to take in: a request's first proposal
 * feeds it the whole prompt, which is prefill, not the per-draft cost the
 * gate weighs — timed with it, it had closed the gate for every later
 * request) as the catch-up's cost a token, less the chain's passes after it
 * (hundreds of tokens timed at once: half way to each reading). A failure
 * leaves prompt lookup only. */
static void drafter_drafts(engine *e, seq_state *s, int kd) {
    int behind = engine_drafter_behind(e, s);
    double t0 = now_s();
    unsigned long g0 = model_graph_recordings(); /* (see the passes' timing in engine_step) */
    s->n_draft = drafter_propose(e->dr, &s->dseq, s->ctx, s->n_ctx, kd, s->draft);
    double dt = now_s() - t0;
    if (model_graph_recordings() == g0 && s->n_draft > 0 && e->t_decode > 0) {
        if (!behind) {
            engine_track_cost(e, &e->src_ratio[DRAFT_SRC_DRAFTER], dt, s->n_draft);
        } else {
            double rest = (s->n_draft - 1) * e->src_ratio[DRAFT_SRC_DRAFTER] * e->t_decode;
            double r = (dt > rest ? dt - rest : 0) / behind / e->t_decode;
            e->drafter_catchup += (r - e->drafter_catchup) / 2;
        }
    }
    s->draft_src = DRAFT_SRC_DRAFTER;
    if (s->n_draft > 0) atomic_fetch_add(&e->src_passes_n[DRAFT_SRC_DRAFTER], s->n_draft);
    if (s->n_draft < 0) {
        s->n_draft = 0;
        s->use_drafter = false;
    }
}

/* Among the drafts ready for this step — prompt lookup's (s->draft), the
 * MTP head's and the DFlash drafter's (both computed after the last step,
 * so their cost is already paid) — takes the source, and how many of its
 * drafts, with the most expected tokens per unit of verify cost. Each
 * source's chance that the next draft is accepted given the previous one was
 * is learned per request and depth (engine_src_rates). A precomputed source that loses 16 steps in a
 * row stops being computed (for a back-off: SPEC_RETRY_TOKENS). */
static void choose_drafts(engine *e, seq_state *s, int k) {
    int j, best_j = s->n_draft;
    int L = s->n_cached;
    double rate[ENGINE_MAX_DRAFT];
    engine_src_rates(s, DRAFT_SRC_LOOKUP, rate);
    double best = s->n_draft ? engine_best_drafts(e, rate, s->n_draft, L, &j) : 0.0;
    const int32_t *src = NULL;
    int n_mtp = s->use_mtp && s->n_mtp_draft > 0 ? (s->n_mtp_draft < k ? s->n_mtp_draft : k) : 0;
    int n_fl = s->use_dflash && s->n_fl_draft > 0 ? (s->n_fl_draft < k ? s->n_fl_draft : k) : 0;
    if (n_mtp) {
        engine_src_rates(s, DRAFT_SRC_MTP, rate);
        double v = engine_best_drafts(e, rate, n_mtp, L, &j);
        if (v > best && j > 0) {
            best = v;
            best_j = n_mtp; /* the depth controller already chose the head's length */
            src = s->mtp_draft;
            s->draft_src = DRAFT_SRC_MTP;
        }
    }
    if (n_fl) {
        engine_src_rates(s, DRAFT_SRC_DFLASH, rate);
        double v = engine_best_drafts(e, rate, n_fl, L, &j);
        if (v > best && j > 0) {
            best = v;
            best_j = j;
            src = s->fl_draft;
            s->draft_src = DRAFT_SRC_DFLASH;
        }
    }
    /* the sources not chosen are compared with the outcome afterwards */
    s->n_shadow[DRAFT_SRC_LOOKUP] = src ? s->n_draft : 0;
    if (src) memcpy(s->lookup_shadow, s->draft, (size_t)s->n_draft * sizeof *s->draft);
    s->n_shadow[DRAFT_SRC_MTP] = s->draft_src == DRAFT_SRC_MTP ? 0 : n_mtp;
    s->n_shadow[DRAFT_SRC_DFLASH] = s->draft_src == DRAFT_SRC_DFLASH ? 0 : n_fl;
    if (src) {
        memcpy(s->draft, src, (size_t)best_j * sizeof *s->draft);
        s->n_draft = best_j;
        s->draft_dev = src == s->fl_draft && s->fl_slot >= 0; /* (0s until the forward brings them) */
    }
    /* precomputed sources that keep losing stop costing passes */
    if (n_mtp && (s->mtp_lost = s->draft_src == DRAFT_SRC_MTP ? 0 : s->mtp_lost + 1) >= 16 && !e->cfg.no_runtime_gates)
        engine_src_off(e, s, DRAFT_SRC_MTP);
    if (n_fl && (s->fl_lost = s->draft_src == DRAFT_SRC_DFLASH ? 0 : s->fl_lost + 1) >= 16 && !e->cfg.no_runtime_gates)
        engine_src_off(e, s, DRAFT_SRC_DFLASH);
}

static void drop_cancelled(engine *e) {
    for (int i = 0; i < e->n_active;) {
        seq_state *s = e->active[i];
        if (atomic_load(&s->r->cancelled)) {
            engine_seq_finish(e, s, ENGINE_FINISH_CANCELLED);
            remove_active(e, i);
            engine_seq_free(e, s);
        } else {
            i++;
        }
    }
}

/* The tokens sequence s feeds this step: prompt tokens out of the shared
 * prefill budget, or its last token plus the drafts chosen for it (into
 * s->draft, s->n_draft) when it decodes and speculates. */
static int plan_feed(engine *e, seq_state *s, bool prompt, int *budget) {
    int want = s->n_ctx - s->n_cached;
    if (want > 1) {
        /* a step feeds prompt tokens or generated ones, not both (after
         * a preemption the recomputed answer follows in later steps) */
        if (prompt && want > s->r->n_prompt - s->n_cached) want = s->r->n_prompt - s->n_cached;
        want = want < *budget ? want : *budget;
        if (want < 1) want = 0;
        *budget -= want;
    } else if (want == 1 && s->spec && !prompt) {
        int k = draft_room(e, s);
        /* lookup depends only on the tokens so far: drafts found after the
         * last step for this length are still the answer */
        if (k > 0) s->n_draft = s->lookup_at == s->n_ctx ? s->n_lookup : lookup_drafts(e, s, k, s->draft);
        s->draft_src = DRAFT_SRC_LOOKUP;
        if (k > 0 && !s->r->p.n_prediction && s->n_draft >= 0) choose_drafts(e, s, k);
        int kd = s->n_draft == 0 && s->use_drafter && k > 0 ? drafter_chain(e, s, k) : 0;
        if (kd > 0) drafter_drafts(e, s, kd);
        if (s->n_draft < 0) { /* the proposer failed: plain decoding from here on */
            s->n_draft = 0;
            engine_spec_off(e, s, "proposer failure");
        }
        engine_cut_drafts(e, s);
        want += s->n_draft;
    }
    return want;
}

/* KV room for every sequence's feed: drafts are dropped first, then the
 * last admitted sequence is preempted (or a lone one finished: the pool is
 * smaller than its context). false: the step must be planned again. */
static bool reserve_feeds(engine *e, int na, int *feed) {
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
                engine_seq_finish(e, s, ENGINE_FINISH_CONTEXT);
                remove_active(e, 0);
                engine_seq_free(e, s);
                return false;
            }
            preempt_last(e); /* indices shift: plan the step again */
            return false;
        }
    }
    return true;
}

/* After the forward: what prompt lookup will offer each decoding sequence
 * next step (a model proposer's pass is skipped when lookup already offers
 * more per unit of cost) */
static void lookup_ahead(engine *e, int na, const int *done) {
    for (int i = 0; i < na; i++) {
        seq_state *s = e->active[i];
        s->lookup_value = 0.0;
        if (done[i] || !s->spec || s->n_ctx != s->n_cached + 1 || (!s->use_mtp && !s->use_dflash)) continue;
        int k = draft_room(e, s);
        s->n_lookup = k > 0 ? lookup_drafts(e, s, k, s->draft) : 0; /* the next step's plan takes these */
        s->lookup_at = s->n_ctx;
        if (s->n_lookup > 0) {
            double rate[ENGINE_MAX_DRAFT];
            engine_src_rates(s, DRAFT_SRC_LOOKUP, rate);
            s->lookup_value = chain_value(e, rate, s->n_lookup, 0.0, s->n_cached);
        }
    }
}

/* The proposers' passes after the forward (the MTP head's entries and
 * drafts, DFlash's entries and blocks), timed: their cost per pass (in
 * decode steps) follows what they really take here, not only the start-up
 * probe — from decode steps only: a step with prompt rows also enters the
 * whole prompt chunk into the head / drafter context, which is prefill
 * work, not the per-step cost a draft pays; and not from passes that
 * recorded a CUDA graph: a once-per-shape cost many times the pass's,
 * which the average would carry for dozens of steps, and which can close
 * a gate (behind: this step's DFlash block went right behind the verify;
 * recorded: the forward recorded a graph). The step's tokens reach their
 * streams once the passes are on their way. */
static void proposer_passes(engine *e, int na, const int *feed, const int *tstart, const int *pstart,
                            const int *done, int n_prompt, bool behind, bool recorded) {
    double t_pass[2] = {0, 0};
    int n_pass[2] = {0, 0};
    if (e->mtp_kv.n_blocks) {
        double t0 = now_s();
        unsigned long g0 = model_graph_recordings();
        n_pass[0] = engine_mtp_update(e, na, feed, tstart, pstart, done);
        atomic_fetch_add(&e->src_passes_n[DRAFT_SRC_MTP], n_pass[0]);
        t_pass[0] = now_s() - t0;
        if (!n_prompt && model_graph_recordings() == g0) engine_track_cost(e, &e->src_ratio[DRAFT_SRC_MTP], t_pass[0], n_pass[0]);
    }
    if (e->fl_kv.n_blocks) {
        double t0 = now_s();
        unsigned long g0 = model_graph_recordings();
        n_pass[1] = engine_dflash_update(e, na, feed, tstart, pstart, done);
        t_pass[1] = now_s() - t0;
        /* its drafts stay on the device: the next forward completes its cost
         * (brought back with the pass, for a constrained sampled sequence:
         * timed whole here) */
        bool timed = n_pass[1] && !n_prompt && model_graph_recordings() == g0;
        e->fl_pend_t = behind ? (n_pass[1] && !recorded ? e->fl_behind_t : 0.0) : timed && e->fl_pend ? t_pass[1] : 0.0;
        if (!behind && timed && !e->fl_pend) engine_track_cost(e, &e->src_ratio[DRAFT_SRC_DFLASH], t_pass[1], 1);
    }
    for (int i = 0; i < na; i++)
        if (!done[i]) engine_wake(e->active[i]->r);
    if (e->cfg.log_steps && (n_pass[0] || n_pass[1])) /* the proposers' passes after that forward */
        fprintf(stderr, "kestrel: passes: MTP %d in %.3f ms (cost now %.3f decode steps), DFlash %d in %.3f ms (%.3f)\n",
                n_pass[0], t_pass[0] * 1e3, e->src_ratio[DRAFT_SRC_MTP], n_pass[1], t_pass[1] * 1e3, e->src_ratio[DRAFT_SRC_DFLASH]);
}

int engine_step(engine *e) {
    atomic_store(&e->stat_kv_free, kv_free_blocks(&e->kv));
    drop_cancelled(e);
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
    bool prompt_of[na]; /* the sequence feeds prompt tokens this step */
    for (int i = 0; i < na; i++) {
        seq_state *s = e->active[i];
        s->n_draft = 0;
        s->draft_dev = false;
        engine_src_next(e, s);
        prompt_of[i] = s->n_cached < s->r->n_prompt;
        feed[i] = plan_feed(e, s, prompt_of[i], &budget);
    }
    if (!reserve_feeds(e, na, feed)) return 1;
    int n = 0, n_rows = 0, n_prompt = 0, n_runs = 0;
    for (int i = 0; i < na; i++) n += feed[i];
    if (n == 0) return 1;
    /* the DFlash blocks still on the device come back with this forward's ids */
    int n_fetch = e->fl_pend * e->fl_block;
    if (ensure_batch(e, n + n_fetch) != 0) return 1;
    model_dev_run runs[na];
    kv_seq *seqs[na];
    int first_row[na], rows_of[na], tstart[na], pstart[na], order[na], n_order = 0;
    /* sequences feeding prompt tokens first: the batch's leading rows are
     * its prompt rows (model_batch.n_prompt) */
    for (int i = 0; i < na; i++)
        if (prompt_of[i]) {
            order[n_order++] = i;
            n_prompt += feed[i];
        }
    for (int i = 0; i < na; i++)
        if (!prompt_of[i]) order[n_order++] = i;
    for (int o = 0, t = 0; o < na; o++) {
        int i = order[o];
        seq_state *s = e->active[i];
        seqs[i] = &s->kv;
        first_row[i] = s->row0 = n_rows;
        rows_of[i] = 0;
        tstart[i] = t;
        pstart[i] = s->n_cached;
        if (s->draft_dev && s->n_draft) /* its drafts (the last rows) are read on the device */
            runs[n_runs++] = (model_dev_run){t + feed[i] - s->n_draft, s->fl_slot * e->fl_block + 1, s->n_draft};
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
    /* greedy steps take only each row's argmax off the device: a
     * 16-sequence step would otherwise copy and scan 16 vocabulary rows */
    bool need_rows = false, wants_rows[na];
    for (int i = 0; i < na; i++) {
        wants_rows[i] = rows_of[i] && engine_seq_needs_logits(e->active[i]);
        need_rows |= wants_rows[i];
    }
    if (need_rows && !(e->logits = model_host_logits(e->m, n_rows))) return 1;
    /* rows sampled on the device: row j of a sequence at the j-th uniform
     * ahead in its stream (seq_choose takes one per committed token) */
    int n_sample = 0;
    for (int i = 0; i < na; i++) {
        seq_state *s = e->active[i];
        if (!rows_of[i] || !s->dev_sample) continue;
        const sample_params *sp = &s->r->p.sp;
        sample_rng ahead = s->rng;
        for (int j = 0; j < rows_of[i]; j++)
            e->b_sample[n_sample++] = (bk_sample_row){first_row[i] + j, sp->top_k, sp->temperature, sp->top_p,
                                                      sp->min_p, sample_rng_uniform(&ahead)};
    }
    /* a drafter's features only for steps that feed one of its sequences */
    bool features = false;
    for (int i = 0; i < na; i++) features |= feed[i] && e->active[i]->use_dflash;
    model_batch b = {.n_tokens = n, .tokens = e->b_tok, .pos = e->b_pos, .seq = e->b_seq, .n_seqs = na, .seqs = seqs,
                     .n_logits = n_rows, .logit_rows = e->b_rows, .n_prompt = n_prompt, .argmax = e->b_ids,
                     .no_features = !features, .sample = e->b_sample, .n_sample = n_sample};
    /* one sequence verifying DFlash drafts: its next block goes right behind the verify */
    bool behind = na == 1 && !n_prompt && e->fl_kv.n_blocks && engine_dflash_plan_behind(e, e->active[0]);
    /* the row edits are filled while the device runs the forward */
    edit_ctx ec = {e, na, order, first_row, rows_of};
    model_dev_ids dev = {.ids = n_fetch ? dflash_block_ids(e->cfg.dflash) : NULL, .n_runs = n_runs, .runs = runs,
                         .n_fetch = n_fetch, .behind = behind ? engine_dflash_behind : NULL, .behind_arg = e,
                         .edits = step_edits, .edits_arg = &ec};
    double t_fwd = now_s();
    unsigned long g_fwd = model_graph_recordings();
    int fwd_rc = model_forward_dev(e->m, &e->kv, &b, need_rows ? e->logits : NULL, &dev);
    /* (what it waited beyond the step model — one sequence, the model is
     * per sequence — less a block launched behind it, timed on its own) */
    bool recorded = model_graph_recordings() != g_fwd;
    if (!fwd_rc && n_fetch)
        engine_dflash_fetched(e, e->b_ids + n_rows,
                              !n_prompt && na == 1 && !recorded ? now_s() - t_fwd -
                                                                      engine_step_time(e, n, e->active[0]->n_cached) -
                                                                      (behind ? e->fl_behind_t : 0.0)
                                                                : NAN);
    if (e->cfg.log_steps) { /* one line per forward, timed to its end (diagnostics) */
        if (!fwd_rc) model_sync(e->m);
        int ctx_max = 0;
        for (int i = 0; i < na; i++) ctx_max = e->active[i]->n_cached > ctx_max ? e->active[i]->n_cached : ctx_max;
        fprintf(stderr, "kestrel: step %d rows (%d prompt) of %d sequences, context <= %d: %.2f ms (started at %.6f s)\n",
                n, n_prompt, na, ctx_max, (now_s() - t_fwd) * 1e3, t_fwd);
    }
    if (fwd_rc != 0) return step_failed(e, err_msg());
    int done[na];
    memset(done, 0, sizeof done);
    for (int i = 0; i < na; i++) {
        seq_state *s = e->active[i];
        float *rows = wants_rows[i] ? e->logits + (size_t)first_row[i] * e->m->cfg.vocab_size : NULL;
        const int32_t *ids = e->b_ids + first_row[i];
        if (s->n_draft) {
            done[i] = engine_seq_verify(e, s, rows, ids, s->n_cached);
            continue;
        }
        s->n_cached += feed[i];
        s->kv.n_tokens = s->n_cached;
        if (rows_of[i]) done[i] = engine_seq_sample(e, s, rows, ids);
    }
    lookup_ahead(e, na, done);
    proposer_passes(e, na, feed, tstart, pstart, done, n_prompt, behind, recorded);
    for (int i = na - 1; i >= 0; i--)
        if (done[i]) {
            seq_state *s = e->active[i];
            remove_active(e, i);
            engine_seq_free(e, s);
        }
    atomic_store(&e->stat_active, e->n_active);
    atomic_store(&e->stat_kv_free, kv_free_blocks(&e->kv));
    atomic_store(&e->stat_cached_blocks, prefix_cache_size(e->pc));
    return 1;
}

