/* engine_constraint.c — a request's JSON constraint at the token choice.
 *
 * Every choice is the target's distribution restricted to the ids the
 * document accepts next (the end-of-sequence tokens too once it may end),
 * so verify steps stay exact. Three ways to it:
 * - a greedy choice takes the backend's argmax when the constraint allows
 *   it (the masked argmax is then the same id), and masks a fetched row only
 *   when it refuses it (engine_constrain_row);
 * - a sampled one on a backend that samples (s->dev_mask) sends each of its
 *   rows' masks with the step (engine_constraint_masks: row j's after
 *   drafts 0..j-1), applied there before the draw;
 * - otherwise its rows come to the host and are masked there.
 * Drafts the constraint refuses, and those after them, are dropped before a
 * verify (engine_cut_drafts): the target could never choose them. */
#include <math.h>
#include <string.h>

#include "engine/engine_internal.h"

bool engine_constraint_allows(engine *e, const jc_state *st, const seq_state *s, int id) {
    return (jc_can_end(st) && engine_is_eos(&s->r->p, id)) || token_mask_allows(e->tmask, st, id);
}

/* the ids st accepts into e->allowed (vocab bytes), the end-of-sequence
 * tokens too once the document may end; how many */
static int allowed_ids(engine *e, const seq_state *s, const jc_state *st) {
    const engine_params *p = &s->r->p;
    int V = e->m->cfg.vocab_size, n = token_mask_fill(e->tmask, st, e->allowed);
    bool can_end = jc_can_end(st);
    for (int i = 0; i < p->n_eos && can_end; i++)
        if (p->eos[i] >= 0 && p->eos[i] < V) n += !e->allowed[p->eos[i]], e->allowed[p->eos[i]] = 1;
    return n;
}

int engine_constrain_row(engine *e, seq_state *s, float *row, bool greedy, int argmax) {
    int V = e->m->cfg.vocab_size;
    if (greedy) {
        int id = argmax >= 0 ? argmax : sample_argmax(row, V);
        if (engine_constraint_allows(e, s->js, s, id)) return id;
    }
    if (!allowed_ids(e, s, s->js)) {
        s->js_stuck = true; /* seq_commit ends the sequence */
        return greedy ? sample_argmax(row, V) : -1;
    }
    for (int i = 0; i < V; i++)
        if (!e->allowed[i]) row[i] = -INFINITY;
    return greedy ? sample_argmax(row, V) : -1;
}

void engine_cut_drafts(engine *e, seq_state *s) {
    if (!s->js || !s->n_draft || s->draft_dev) return; /* (drafts still on the device: not known here) */
    jc_state st;
    jc_copy(&st, s->js);
    int j = 0;
    while (j < s->n_draft) {
        int d = s->draft[j];
        if (engine_is_eos(&s->r->p, d)) { /* allowed once the document may end; the answer ends with it */
            j += jc_can_end(&st);
            break;
        }
        if (!token_mask_feed(e->tmask, &st, d)) break;
        j++;
        if (jc_finished(&st)) break; /* complete: the answer ends with it */
    }
    s->n_draft = j;
}

/* bits ((V + 31) / 32 words): bit i % 32 of word i / 32 set iff a[i] != 0.
 * Eight bytes at a time: each nonzero byte to 1 (its low 7 bits carried
 * into the top one), then one multiply gathers the eight into a byte
 * (little-endian loads) — 0.024 ms for 151,936 ids against 0.19 one at a
 * time on this VM. */
static void pack_bits(const uint8_t *a, int V, uint32_t *bits) {
    int words = (V + 31) / 32, full = V / 32;
    for (int w = 0; w < full; w++) {
        uint32_t x = 0;
        for (int q = 0; q < 4; q++) {
            uint64_t v;
            memcpy(&v, a + (size_t)w * 32 + q * 8, 8);
            uint64_t t = (((v & 0x7f7f7f7f7f7f7f7full) + 0x7f7f7f7f7f7f7f7full) | v) >> 7 & 0x0101010101010101ull;
            x |= (uint32_t)((t * 0x0102040810204080ull) >> 56) << (q * 8);
        }
        bits[w] = x;
    }
    for (int w = full; w < words; w++) {
        uint32_t x = 0;
        for (int i = w * 32; i < V; i++) x |= (uint32_t)(a[i] != 0) << (i - w * 32);
        bits[w] = x;
    }
}

int engine_constraint_masks(engine *e, seq_state *s, int row0, int n_rows, int32_t *rows, uint32_t *bits) {
    int V = e->m->cfg.vocab_size, words = (V + 31) / 32, n = 0;
    jc_state st;
    jc_copy(&st, s->js);
    s->mask_stuck = -1;
    for (int j = 0; j < n_rows; j++) {
        /* (engine_cut_drafts kept only drafts the document takes) */
        if (j && !token_mask_feed(e->tmask, &st, s->draft[j - 1])) break;
        if (!allowed_ids(e, s, &st)) { /* nothing continues the document: drawn unmasked, the answer ends */
            s->mask_stuck = j;
            break;
        }
        pack_bits(e->allowed, V, bits + (size_t)n * words);
        rows[n++] = row0 + j;
    }
    return n;
}
