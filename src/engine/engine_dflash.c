/* engine_dflash.c — the DFlash block drafter as a proposer: after every
 * target forward, the positions it settled become context entries (their
 * features were captured by that forward, so no second pass), then one
 * block forward drafts the next step for every decoding sequence at once.
 * Errors turn DFlash off for the step's sequences; output never depends on
 * it (the verifier decides every token). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/engine_internal.h"

static int scratch(engine *e, int n) {
    if (n <= e->fl_cap) return 0;
    int cap = n * 2;
    int32_t **arrs[8] = {&e->fl_idx, &e->fl_pos, &e->fl_seq, &e->fl_row, &e->fl_last, &e->fl_rope0, &e->fl_entry0,
                         &e->fl_of};
    for (int i = 0; i < 8; i++) {
        int32_t *p = realloc(*arrs[i], (size_t)cap * sizeof *p);
        if (!p) return -1;
        *arrs[i] = p;
    }
    e->fl_cap = cap;
    return 0;
}

/* One DFlash pass (a context entry from the target step's features, and a
 * block) on a scratch sequence of the drafter. */
static int dflash_pass(engine *e, const probe_ctx *pc, void *arg) {
    kv_seq *fs = arg, *fseqs[1] = {fs};
    int32_t drafts[ENGINE_MAX_DRAFT], one = 1;
    dflash_ctx_rows cr = {1, pc->seq_idx, pc->seq_idx, pc->seq_idx, pc->seq_idx};
    dflash_blocks bl = {1, pc->seq_idx, pc->tok, &one, &one, e->fl_block, drafts, 0};
    return dflash_step(e->cfg.dflash, &e->fl_kv, 1, fseqs, &cr, &bl);
}

static double measure_ratio(engine *e) {
    kv_seq fs = {0};
    double r = kv_seq_reserve(&e->fl_kv, &fs, 1 + e->fl_block) == 0 ? engine_probe_cost(e, dflash_pass, &fs, 0.5)
                                                                     : 0.5;
    kv_seq_release(&e->fl_kv, &fs);
    return r;
}

/* Tokens per unit of cost of the best step with blocks of b at a pass cost
 * of ratio (the best number of its b - 1 drafts to verify, at the prior
 * acceptance, context 0). */
static double block_value(const engine *e, int b, double ratio) {
    double best = 0, prior[ENGINE_MAX_DRAFT];
    for (int d = 0; d < ENGINE_MAX_DRAFT; d++) prior[d] = SPEC_MODEL_PRIOR;
    for (int j = 1; j < b; j++) {
        double v = chain_value(e, prior, j, ratio, 0);
        best = v > best ? v : best;
    }
    return best;
}

int engine_dflash_pick_block(const engine *e, const int *blocks, const double *ratios, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (block_value(e, blocks[i], ratios[i]) > block_value(e, blocks[best], ratios[best])) best = i;
    return best;
}

/* Without --draft-block-size: the checkpoint's block and its halves down to
 * 4, each pass measured, engine_dflash_pick_block choosing. A longer block
 * drafts further ahead, but its pass costs more where rows cost (a
 * compute-bound CPU) and drafts past what a verify step can afford are
 * wasted; on the H200 block 8 beat the checkpoint's 16 on code and chat in
 * every proposer bench (BENCHMARKS.md). */
int engine_dflash_start(engine *e) {
    dflash *d = e->cfg.dflash;
    if (!d) return KS_OK;
    int b = e->cfg.dflash_block > 0 ? e->cfg.dflash_block : dflash_block_size(d);
    if (b > dflash_block_size(d)) b = dflash_block_size(d);
    if (b > ENGINE_MAX_DRAFT) b = ENGINE_MAX_DRAFT;
    if (b < 2) b = 2;
    int rc = dflash_kv_init(d, &e->fl_kv, e->cfg.kv_tokens + e->cfg.max_concurrent * b);
    if (rc) return rc;
    int blocks[4] = {b}, n = 1; /* b <= ENGINE_MAX_DRAFT (16): its halves down to 4 are at most 2 more */
    if (e->cfg.dflash_block <= 0)
        for (int h = b / 2; h >= 4 && n < 4; h /= 2) blocks[n++] = h;
    double ratios[4];
    for (int i = 0; i < n; i++) {
        e->fl_block = blocks[i];
        ratios[i] = measure_ratio(e);
    }
    int i = engine_dflash_pick_block(e, blocks, ratios, n);
    e->fl_block = blocks[i];
    e->src_ratio[DRAFT_SRC_DFLASH] = e->probe_ratio[DRAFT_SRC_DFLASH] = ratios[i];
    return KS_OK;
}

void engine_dflash_stop(engine *e) {
    if (e->fl_kv.n_blocks) kv_cache_free(&e->fl_kv);
    int32_t *arrs[8] = {e->fl_idx, e->fl_pos, e->fl_seq, e->fl_row, e->fl_last, e->fl_rope0, e->fl_entry0, e->fl_of};
    for (int i = 0; i < 8; i++) free(arrs[i]);
    free(e->fl_host);
}

/* Without these entries a prompt served from the prefix cache drafted from
 * its uncached tail only: on the H200 a 322-token code prompt had 90 of 253
 * drafts accepted cold, 2 of 42 cached (bench/results/2026-12-01-h200-real-dflash-diag-daa4bba.txt). */
void engine_dflash_attach(engine *e, seq_state *s, int n_found) {
    if (!e->fl_pc || !s->use_dflash || !s->spec || s->fkv.n_blocks) return;
    if (prefix_cache_share(e->fl_pc, &e->fl_kv, &s->fkv, s->ctx, n_found, 1)) {
        s->fl_q0 = 0;
        s->fl_next = n_found * e->fl_kv.block_size;
    }
}

void engine_dflash_cache(engine *e, seq_state *s) {
    if (!e->fl_pc || !s->use_dflash || s->fl_q0 != 0) return;
    int full = s->fl_next / e->fl_kv.block_size;
    if (full > s->fkv.n_blocks) full = s->fkv.n_blocks;
    if (full > 0) prefix_cache_insert(e->fl_pc, &e->fl_kv, s->ctx, full, s->fkv.blocks);
}

/* Drops a sequence's entries (preemption, end): they restart with its next forward. */
void engine_dflash_reset(engine *e, seq_state *s) {
    if (e->fl_kv.n_blocks) kv_seq_release(&e->fl_kv, &s->fkv);
    s->fl_q0 = -1;
    s->fl_next = 0;
    s->n_fl_draft = 0;
    s->fl_slot = -1;
    s->fl_behind = false;
}

/* After a forward that fetched the pending pass's blocks (ids: (fl_pend,
 * fl_block) as dflash_block_ids holds them): each sequence's drafts into
 * fl_draft, and into draft where this step verified them. The pass's cost
 * is its launch and what that forward waited beyond the step model's time
 * (waited; NaN: not a measure of it, e.g. a recording or prompt rows). */
void engine_dflash_fetched(engine *e, const int32_t *ids, double waited) {
    if (e->fl_pend_t > 0 && !isnan(waited)) {
        double t = e->fl_pend_t + waited;
        engine_track_cost(e, &e->src_ratio[DRAFT_SRC_DFLASH], t > 0 ? t : 0, 1);
    }
    int B = e->fl_block;
    for (int i = 0; i < e->n_active; i++) {
        seq_state *s = e->active[i];
        if (s->fl_slot < 0) continue;
        if (s->fl_slot < e->fl_pend) memcpy(s->fl_draft, ids + (size_t)s->fl_slot * B + 1, (size_t)(B - 1) * 4);
        if (s->draft_dev) memcpy(s->draft, s->fl_draft, (size_t)s->n_draft * 4);
        s->fl_slot = -1;
    }
    e->fl_pend = 0;
}

/* Does a block pass pay for this sequence? The best number j of its B - 1
 * drafts to verify gives (1 + r + .. + r^j) tokens for a verify of j drafts
 * plus the pass itself (measured costs, in decode steps), with r the chance
 * that the next draft is accepted after the previous one was, learned per
 * request and depth (engine_src_rates). When no j beats plain decoding (bar SPEC_PAY_BAR) the drafter
 * is turned off (a back-off: SPEC_RETRY_TOKENS) (on a CPU a block pass costs more than a
 * decode step, so it rarely pays there; on a GPU it does); when none beats
 * what prompt lookup offers next step (bar: its value) only this step's
 * block is skipped. */
static bool dflash_pays(const engine *e, const seq_state *s, double bar) {
    if (e->cfg.no_runtime_gates) return true;
    double rate[ENGINE_MAX_DRAFT];
    engine_src_rates(s, DRAFT_SRC_DFLASH, rate);
    for (int j = 1; j < e->fl_block; j++)
        if (chain_value(e, rate, j, e->src_ratio[DRAFT_SRC_DFLASH], s->n_cached) > bar) return true;
    return false;
}

bool engine_dflash_plan_behind(engine *e, seq_state *s) {
    int k = s->n_draft;
    if (!s->draft_dev || !k || s->draft_src != DRAFT_SRC_DFLASH || !s->use_dflash || !s->spec || s->use_mtp ||
        engine_seq_needs_logits(s) || s->js || s->dev_logprobs || s->fl_q0 < 0 || s->fl_next != s->n_cached || !dflash_pays(e, s, SPEC_PAY_BAR))
        return false;
    /* entries: the verify's k + 1 positions from n_cached, then the block
     * from one past the last accepted (at most k further) */
    kv_seq_truncate(&e->fl_kv, &s->fkv, s->fl_next - s->fl_q0); /* drop the last block's entries */
    if (kv_seq_reserve(&e->fl_kv, &s->fkv, s->n_cached + k + 1 + e->fl_block - s->fl_q0) != 0 || scratch(e, k + 1))
        return false;
    s->fl_behind = true;
    return true;
}

/* The block behind the verify of the step's one sequence (planned above):
 * context entries for all k + 1 verified positions — those past the last
 * accepted one hold the rejected drafts' features, and the block, which
 * starts one past the last accepted, overwrites them before any read — and
 * the block with none accepted, moved up on the device (dflash_blocks.behind). */
void engine_dflash_behind(void *arg) {
    engine *e = arg;
    seq_state *s = e->active[0];
    int k = s->n_draft, p0 = s->n_cached;
    for (int i = 0; i <= k; i++) {
        e->fl_idx[i] = p0 + i - s->fl_q0;
        e->fl_pos[i] = p0 + i;
        e->fl_seq[i] = 0;
        e->fl_row[i] = i;
    }
    int32_t of = 0, last = 0 /* (the verify's next token, on the device) */, rope0 = p0 + 1, entry0 = rope0 - s->fl_q0;
    kv_seq *seqs[1] = {&s->fkv};
    dflash_ctx_rows cr = {k + 1, e->fl_idx, e->fl_pos, e->fl_seq, e->fl_row};
    dflash_blocks bl = {1, &of, &last, &rope0, &entry0, e->fl_block, NULL, k};
    double t0 = now_s();
    e->fl_behind_rc = dflash_step(e->cfg.dflash, &e->fl_kv, 1, seqs, &cr, &bl);
    atomic_fetch_add(&e->src_passes_n[DRAFT_SRC_DFLASH], 1);
    e->fl_behind_t = now_s() - t0;
}

/* After a target forward (and its sampling/verification): positions
 * pstart[i] .. n_cached-1 of sequence i are settled and their features are
 * rows tstart[i].. of that forward. Sequences whose entries fall behind
 * (features already gone, e.g. after a prefix-cache hit) restart their
 * context here: drafts are then conditioned on less, never wrong. Returns
 * 1 when a block pass ran (0: context entries at most). */
int engine_dflash_update(engine *e, int na, const int *feed, const int *tstart, const int *pstart, const int *done) {
    dflash *d = e->cfg.dflash;
    int B = e->fl_block, n = 0, nb = 0;
    kv_seq *seqs[na];
    bool draft[na];
    for (int i = 0; i < na; i++) {
        seq_state *s = e->active[i];
        seqs[i] = &s->fkv;
        draft[i] = false;
        if (done[i] || !s->use_dflash || !feed[i]) continue;
        s->n_fl_draft = 0;
        if (!dflash_pays(e, s, SPEC_PAY_BAR)) { /* it does not pay here: off for a back-off */
            engine_src_off(e, s, DRAFT_SRC_DFLASH);
            continue;
        }
        if (s->fl_behind) { /* its entries and block went behind the verify (the only sequence) */
            s->fl_behind = false;
            if (e->fl_behind_rc) {
                s->use_dflash = false;
                engine_dflash_reset(e, s);
                return 0;
            }
            s->fl_next = s->n_cached;
            s->fl_idle = 0;
            memset(s->fl_draft, 0, (size_t)(B - 1) * sizeof *s->fl_draft); /* valid ids until they come back */
            s->n_fl_draft = B - 1;
            s->fl_slot = 0;
            e->fl_pend = 1;
            atomic_fetch_add(&e->fl_behind_steps, 1);
            return 1;
        }
        int p0 = pstart[i];
        if (s->fl_q0 < 0 || s->fl_next < p0) {
            kv_seq_truncate(&e->fl_kv, &s->fkv, 0);
            s->fl_q0 = s->fl_next = p0;
        }
        kv_seq_truncate(&e->fl_kv, &s->fkv, s->fl_next - s->fl_q0); /* drop the last block's entries */
        bool decoding = s->n_ctx == s->n_cached + 1 && dflash_pays(e, s, s->lookup_value);
        /* prompt lookup beat the block 32 steps in a row (a copy-heavy
         * answer): the context passes that keep the drafter ready cost every
         * step for blocks never drafted — off for a back-off (the MTP
         * head, cheaper to restart, covers the stretches lookup misses) */
        s->fl_idle = decoding || s->lookup_value <= 0.0 ? 0 : s->fl_idle + 1;
        if (s->fl_idle >= 32 && !e->cfg.no_runtime_gates) {
            engine_src_off(e, s, DRAFT_SRC_DFLASH);
            continue;
        }
        if (kv_seq_reserve(&e->fl_kv, &s->fkv, s->n_cached - s->fl_q0 + (decoding ? B : 0)) != 0 ||
            scratch(e, n + (s->n_cached - s->fl_next) + na) != 0) {
            s->use_dflash = false; /* no room: plain decoding or other proposers */
            engine_dflash_reset(e, s);
            continue;
        }
        for (int p = s->fl_next; p < s->n_cached; p++, n++) {
            e->fl_idx[n] = p - s->fl_q0;
            e->fl_pos[n] = p;
            e->fl_seq[n] = i;
            e->fl_row[n] = tstart[i] + (p - p0);
        }
        s->fl_next = s->n_cached;
        draft[i] = decoding;
    }
    for (int i = 0; i < na; i++)
        if (draft[i]) {
            seq_state *s = e->active[i];
            e->fl_last[nb] = s->ctx[s->n_ctx - 1];
            e->fl_rope0[nb] = s->n_cached;
            e->fl_entry0[nb] = s->n_cached - s->fl_q0;
            e->fl_of[nb++] = i;
        }
    /* the entries and the blocks in one pass; the drafts stay on the device
     * unless a sequence sampled under a constraint there drafts (each verify
     * row's mask follows the drafts before it): then the pass brings every
     * block back */
    bool fetch = false;
    for (int j = 0; j < nb; j++) fetch |= e->active[e->fl_of[j]]->dev_mask;
    int32_t *host = NULL;
    if (fetch && (size_t)nb * (B - 1) > e->fl_host_cap) {
        int32_t *h = realloc(e->fl_host, (size_t)nb * (B - 1) * 2 * sizeof *h);
        if (h) e->fl_host = h, e->fl_host_cap = (size_t)nb * (B - 1) * 2;
    }
    if (fetch && (size_t)nb * (B - 1) <= e->fl_host_cap) host = e->fl_host;
    dflash_ctx_rows cr = {n, e->fl_idx, e->fl_pos, e->fl_seq, e->fl_row};
    dflash_blocks bl = {nb, e->fl_of, e->fl_last, e->fl_rope0, e->fl_entry0, B, host, 0};
    if ((fetch && !host) || ((n || nb) && dflash_step(d, &e->fl_kv, na, seqs, &cr, &bl) != 0)) {
        for (int i = 0; i < na; i++)
            if (draft[i] || (!done[i] && e->active[i]->use_dflash && feed[i])) {
                e->active[i]->use_dflash = false;
                engine_dflash_reset(e, e->active[i]);
            }
        return 0;
    }
    if (n || nb) atomic_fetch_add(&e->src_passes_n[DRAFT_SRC_DFLASH], 1);
    if (!nb) return 0;
    for (int j = 0; j < nb; j++) {
        seq_state *s = e->active[e->fl_of[j]];
        if (host) /* here already */
            memcpy(s->fl_draft, host + (size_t)j * (B - 1), (size_t)(B - 1) * sizeof *s->fl_draft);
        else
            memset(s->fl_draft, 0, (size_t)(B - 1) * sizeof *s->fl_draft); /* valid ids until they come back */
        s->n_fl_draft = B - 1;
        s->fl_slot = host ? -1 : j;
    }
    e->fl_pend = host ? 0 : nb;
    return 1;
}
