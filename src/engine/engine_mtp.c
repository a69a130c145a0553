/* engine_mtp.c — the model's MTP head as a proposer: entries for the
 * positions each target forward produced, the depth controller, drafts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "engine/engine_internal.h"

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

int engine_mtp_attach(engine *e, seq_state *s, int n_found) {
    if (!e->mtp_pc || !s->use_mtp || !s->spec || n_found < 2 || s->mkv.n_blocks) return n_found;
    int nb = n_found - 1;
    if (!prefix_cache_share(e->mtp_pc, &e->mtp_kv, &s->mkv, s->ctx, nb, 1)) return n_found;
    s->mtp_q0 = 1;
    s->mtp_next = nb * e->mtp_kv.block_size + 1;
    return nb;
}

void engine_mtp_cache(engine *e, seq_state *s) {
    if (!e->mtp_pc || !s->use_mtp || s->mtp_q0 != 1) return;
    int bs = e->mtp_kv.block_size, full = (s->mtp_next - 1) / bs;
    if (full > s->mkv.n_blocks) full = s->mkv.n_blocks;
    if (full > s->n_ctx / bs - 1) full = s->n_ctx / bs - 1; /* block i is keyed through token block i + 1 */
    if (full > 0) prefix_cache_insert(e->mtp_pc, &e->mtp_kv, s->ctx, full, s->mkv.blocks);
}

/* Drops a sequence's head entries (preemption, end). */
void engine_mtp_reset(engine *e, seq_state *s) {
    if (e->mtp_kv.n_blocks) kv_seq_release(&e->mtp_kv, &s->mkv);
    s->mtp_q0 = -1;
    s->mtp_next = 0;
    s->n_mtp_draft = 0;
}

/* Depth controller: the depth d in 1..--mtp-depth with the most expected
 * tokens per unit of cost, from this sequence's acceptance so far (chance
 * that a draft is accepted after the previous one was, prior 0.7):
 * tokens(d) = 1 + r + .. + r^d, cost(d) = verify of d drafts + d head
 * passes. 0 when no depth beats `bar` (plain decoding: 1). */
static int mtp_best_depth(const engine *e, const seq_state *s, double bar) {
    if (e->cfg.no_runtime_gates) return e->cfg.mtp_depth;
    double rate[ENGINE_MAX_DRAFT];
    engine_src_rates(s, DRAFT_SRC_MTP, rate);
    return engine_best_chain(e, rate, e->cfg.mtp_depth, e->src_ratio[DRAFT_SRC_MTP], bar, s->n_cached);
}

/* The pass's rows: sequence i's entries q_lo[i]..q_hi[i] - 1 (hidden row
 * hid0[i] + q), those of sequences with more than MODEL_PROPOSER_PROMPT_ROWS
 * first (a prompt chunk's: prompt rows, the backend's bulk path), the rest
 * after them as decode rows; last[i]: the row of i's newest entry. Returns
 * the prompt rows. */
static int lay_out_entries(engine *e, int na, const int *q_lo, const int *q_hi, const int *hid0, int *last) {
    int n = 0, n_prompt = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < na; i++) {
            if (q_hi[i] <= q_lo[i] || (q_hi[i] - q_lo[i] > MODEL_PROPOSER_PROMPT_ROWS) != (pass == 0)) continue;
            const int32_t *ctx = e->active[i]->ctx;
            int q0 = e->active[i]->mtp_q0;
            for (int q = q_lo[i]; q < q_hi[i]; q++, n++) {
                e->mtp_tok[n] = ctx[q];
                e->mtp_pos[n] = q;
                e->mtp_idx[n] = q - q0;
                e->mtp_hid[n] = hid0[i] + q;
                e->mtp_seq[n] = i;
            }
            last[i] = n - 1;
        }
        if (pass == 0) n_prompt = n;
    }
    return n_prompt;
}

/* After a target forward: enter the positions whose hidden states it just
 * produced into each sequence's head (dropping the recursive draft entries of
 * the last step), then draft the next step's tokens: the entry of the newest
 * token gives d1, and d2.. feed the head's own output back. Sequences whose
 * head falls behind (hidden states already gone, e.g. after a cached prefix)
 * restart their entries from here. Errors turn the head off for the step's
 * sequences; output never depends on it. Returns the head passes run. */
int engine_mtp_update(engine *e, int na, const int *feed, const int *tstart, const int *pstart, const int *done) {
    int n = 0, n_rows = 0;
    int row_of[na], q_lo[na], q_hi[na], hid0[na]; /* a sequence's entries q_lo..q_hi - 1, hidden row of q: hid0 + q */
    kv_seq *seqs[na];
    for (int i = 0; i < na; i++) {
        seq_state *s = e->active[i];
        row_of[i] = -1;
        q_lo[i] = q_hi[i] = 0;
        seqs[i] = &s->mkv;
        if (done[i] || !s->use_mtp || !feed[i]) continue;
        s->n_mtp_draft = 0;
        s->mtp_depth = mtp_best_depth(e, s, SPEC_PAY_BAR);
        if (!s->mtp_depth) { /* the head does not pay here: off for a back-off */
            engine_src_off(e, s, DRAFT_SRC_MTP);
            continue;
        }
        /* prompt lookup offers more next step than any depth (counting the
         * passes): one pass, no recursion. When lookup would be chosen
         * even over passes that cost nothing (the chooser's own
         * comparison) in a stretch of lookup steps (this one and the one
         * before verified its drafts), no pass at all — the entries fall
         * behind and restart from a later forward's positions (the head's
         * drafts then condition on fewer of its own entries, never wrong
         * output); on code the copied stretches would otherwise pay a pass
         * every step for drafts never used. Skipping on the pass-counting
         * comparison alone left the head dormant on chat, where lookup
         * often has a weak draft ready. */
        s->lookup_run = s->n_draft > 0 && s->draft_src == DRAFT_SRC_LOOKUP ? s->lookup_run + 1 : 0;
        if (s->lookup_value > 1.0 && !mtp_best_depth(e, s, s->lookup_value)) {
            double rate[ENGINE_MAX_DRAFT];
            engine_src_rates(s, DRAFT_SRC_MTP, rate);
            if (s->lookup_run >= 2 && !engine_best_chain(e, rate, e->cfg.mtp_depth, 0.0, s->lookup_value, s->n_cached))
                continue;
            s->mtp_depth = 1;
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
        q_lo[i] = s->mtp_next;
        q_hi[i] = q_end;
        hid0[i] = tstart[i] - 1 - p0;
        n += q_end - s->mtp_next;
        s->mtp_next = q_end;
    }
    if (!n) return 0;
    /* the drafting rows (the newest token's entry drafts the next one), in sequence order */
    int last[na], n_prompt = lay_out_entries(e, na, q_lo, q_hi, hid0, last);
    for (int i = 0; i < na; i++)
        if (q_hi[i] > q_lo[i] && q_hi[i] == e->active[i]->n_ctx) {
            row_of[i] = n_rows;
            e->mtp_rows[n_rows++] = last[i];
        }
    /* the chain: every drafting sequence (row j: the j-th with a row) goes
     * as deep as the deepest one chose; the passes after the first take
     * their tokens from the one before on the device, and the ids of all of
     * them come back at the end (one wait instead of one per depth) */
    int depth = 1;
    for (int i = 0; i < na; i++)
        if (row_of[i] >= 0 && e->active[i]->mtp_depth > depth) depth = e->active[i]->mtp_depth;
    model_batch b = {.n_tokens = n, .tokens = e->mtp_tok, .pos = e->mtp_idx, .seq = e->mtp_seq, .n_seqs = na,
                     .seqs = seqs, .n_logits = n_rows, .logit_rows = e->mtp_rows, .n_prompt = n_prompt};
    if (model_mtp_forward(e->m, &e->mtp_kv, &b, e->mtp_pos, e->mtp_hid, MTP_SRC_TARGET, NULL,
                          depth == 1 ? e->mtp_ids : NULL) != 0) {
        for (int i = 0; i < na; i++) e->active[i]->use_mtp = false;
        return 0;
    }
    int passes = 1;
    for (int d = 1; d < depth; d++) {
        for (int i = 0, j = 0; i < na; i++) {
            if (row_of[i] < 0) continue;
            seq_state *s = e->active[i];
            int q = s->n_ctx + d - 1;
            e->mtp_pos[j] = q;
            e->mtp_idx[j] = q - s->mtp_q0;
            e->mtp_hid[j] = d == 1 ? e->mtp_rows[row_of[i]] : j; /* the entry's row in the head's last output */
            e->mtp_seq[j] = i;
            e->mtp_rows[j] = j;
            j++;
        }
        model_batch bd = {.n_tokens = n_rows, .pos = e->mtp_idx, .seq = e->mtp_seq, .n_seqs = na, .seqs = seqs,
                          .n_logits = n_rows, .logit_rows = e->mtp_rows};
        if (model_mtp_forward(e->m, &e->mtp_kv, &bd, e->mtp_pos, e->mtp_hid, MTP_SRC_MTP, NULL,
                              d == depth - 1 ? e->mtp_ids : NULL) != 0) {
            for (int i = 0; i < na; i++) e->active[i]->use_mtp = false;
            return passes;
        }
        passes++;
    }
    /* ids: pass d's row j at d * n_rows + j */
    for (int i = 0, j = 0; i < na; i++) {
        if (row_of[i] < 0) continue;
        seq_state *s = e->active[i];
        int keep = s->mtp_depth < depth ? s->mtp_depth : depth;
        for (int d = 0; d < keep; d++) s->mtp_draft[d] = e->mtp_ids[d * n_rows + j];
        s->n_mtp_draft = keep;
        j++;
    }
    return passes;
}
