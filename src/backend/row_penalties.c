/* row_penalties.c — bk_penalize_row: penalties and logit_bias on one logits
 * row, the rule of backend.h's penalize_rows. The CPU backend's op and the
 * engine's host rows (which leave the device unpenalised) use it; the CUDA
 * kernel (k_penalize.cu) computes the same values in the same order:
 *   l = in context ? (l > 0 ? l / rep : l * rep) : l
 *   l = count > 0 ? l - (presence + frequency * count) : l
 *   l = bias != 0 ? l + bias : l
 * where a token's count is its entry's plus its occurrences among
 * fed[0..j), and it is in the context when its entry's last occurrence or
 * one of those is at BK_PEN_FROM(ps, j) or after. Built with -std=c11 (no
 * contraction): each step rounds as written. */
#include "backend/backend.h"

static float penalised(float l, bool in_ctx, int count, float bias, const bk_pen_seq *ps) {
    if (in_ctx) l = bk_repetition(l, ps->rep);
    if (count > 0) l = l - (ps->presence + ps->frequency * (float)count);
    if (bias != 0.0f) l = l + bias;
    return l;
}

void bk_penalize_row(float *row, int cols, const bk_pen_seq *ps, const bk_pen_ent *ent, const int32_t *fed, int j) {
    bool matched[BK_PEN_MAX_FED] = {false}; /* fed[i] is an entry's id */
    if (j > BK_PEN_MAX_FED) j = BK_PEN_MAX_FED;
    int from = BK_PEN_FROM(ps, j), fed_from = from - ps->n_ctx; /* fed[i] is in the window when i >= fed_from */
    for (int k = 0; k < ps->n_ent; k++) {
        const bk_pen_ent *e = &ent[ps->ent + k];
        if (e->id < 0 || e->id >= cols) continue;
        bool in = e->last >= 0 && e->last >= from;
        int count = e->n_out;
        for (int i = 0; i < j; i++)
            if (fed[i] == e->id) in |= i >= fed_from, matched[i] = true, count++;
        row[e->id] = penalised(row[e->id], in, count, e->bias, ps);
    }
    for (int i = 0; i < j; i++) { /* fed tokens no entry names: output tokens, each once */
        int t = fed[i], count = 1, first = 1;
        if (matched[i] || t < 0 || t >= cols) continue;
        for (int h = 0; h < i && first; h++) first = fed[h] != t;
        if (!first) continue;
        bool in = i >= fed_from;
        for (int h = i + 1; h < j; h++)
            if (fed[h] == t) count++, in |= h >= fed_from;
        row[t] = penalised(row[t], in, count, 0.0f, ps);
    }
}
