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
    return engine_best_chain(e, engine_src_accept_rate(s, DRAFT_SRC_MTP), e->cfg.mtp_depth, e->mtp_ratio, bar,
                             s->n_cached);
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
    int row_of[na], depth_of[na];
    kv_seq *seqs[na];
    for (int i = 0; i < na; i++) {
        seq_state *s = e->active[i];
        row_of[i] = -1;
        depth_of[i] = 0;
        seqs[i] = &s->mkv;
        if (done[i] || !s->use_mtp || !feed[i]) continue;
        s->n_mtp_draft = 0;
        s->mtp_depth = mtp_best_depth(e, s, 1.0);
        if (!s->mtp_depth) { /* the head does not pay here: stop keeping it */
            s->use_mtp = false;
            atomic_fetch_add(&e->gate_runtime_off, 1);
            continue;
        }
        /* prompt lookup offers more next step: no recursive passes (the
         * entries, and the draft they give, are needed anyway) */
        if (s->lookup_value > 1.0 && !mtp_best_depth(e, s, s->lookup_value)) s->mtp_depth = 1;
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
    if (!n) return 0;
    model_batch b = {n, e->mtp_tok, e->mtp_idx, e->mtp_seq, na, seqs, n_rows, e->mtp_rows, 0, NULL, false};
    if (model_mtp_forward(e->m, &e->mtp_kv, &b, e->mtp_pos, e->mtp_hid, MTP_SRC_TARGET, NULL, e->mtp_ids) != 0) {
        for (int i = 0; i < na; i++) e->active[i]->use_mtp = false;
        return 0;
    }
    int passes = 1;
    for (int i = 0; i < na; i++)
        if (row_of[i] >= 0) {
            seq_state *s = e->active[i];
            s->mtp_draft[0] = e->mtp_ids[row_of[i]];
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
        passes++;
        model_batch bd = {m, e->mtp_tok, e->mtp_idx, e->mtp_seq, na, seqs, m, e->mtp_rows, 0, NULL, false};
        if (model_mtp_forward(e->m, &e->mtp_kv, &bd, e->mtp_pos, e->mtp_hid, MTP_SRC_MTP, NULL, e->mtp_ids) != 0) break;
        for (int i = 0; i < na; i++)
            if (depth_of[i] == d && e->active[i]->mtp_depth > d) {
                seq_state *s = e->active[i];
                s->mtp_draft[d] = e->mtp_ids[row_of[i]];
                s->n_mtp_draft = depth_of[i] = d + 1;
            }
    }
    return passes;
}
