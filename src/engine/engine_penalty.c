/* engine_penalty.c — a request's penalties and logit_bias as the backend's
 * penalize_rows takes them: one entry per distinct token of its context
 * (every token when the repetition penalty is on, else the output's) and per
 * logit_bias id, with its output count and its last position, kept up as
 * the context grows, so a step sends them without walking the context. The
 * backend penalises the step's rows before its argmax and sampling (a
 * verify's drafts counted there, row by row); rows the host takes leave
 * unpenalised (logprobs are the model's) and are penalised here by the same
 * rule (bk_penalize_row).
 *
 * A repetition penalty over the context's last n tokens (repetition_last_n,
 * Ollama's repeat_last_n) is the same entries read through a window: row j
 * of a step reads the entries whose last position is among its context's
 * last n, and the drafts before it that are (BK_PEN_FROM). */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"

static bool rep_on(const sample_params *sp) { return sp->repetition_penalty != 1.0f && sp->repetition_penalty > 0; }

/* the entry of id, added (not in the context) when new (room for every
 * distinct token the sequence can hold was made at engine_pen_init) */
static bk_pen_ent *entry_of(seq_state *s, int32_t id) {
    if (!s->pen_at[id]) {
        s->pen_ent[s->n_pen_ent] = (bk_pen_ent){id, 0, -1, 0.0f};
        s->pen_at[id] = ++s->n_pen_ent;
    }
    return &s->pen_ent[s->pen_at[id] - 1];
}

int engine_pen_init(engine *e, seq_state *s) {
    const engine_params *p = &s->r->p;
    int V = e->m->cfg.vocab_size;
    if (!sample_penalties_on(&p->sp) && !p->n_logit_bias) return 0;
    s->pen = true;
    if (rep_on(&p->sp) && p->sp.repetition_last_n > 0 && p->sp.repetition_last_n < s->cap)
        s->pen_window = p->sp.repetition_last_n;
    s->cap_pen_ent = s->cap + p->n_logit_bias < V ? s->cap + p->n_logit_bias : V; /* ids of the context and the bias */
    s->pen_at = calloc((size_t)V, sizeof *s->pen_at);
    s->pen_ent = malloc((size_t)s->cap_pen_ent * sizeof *s->pen_ent);
    if (!s->pen_at || !s->pen_ent) return -1;
    for (int i = 0; i < p->n_logit_bias; i++) /* (ids checked by engine_submit; a repeated id's biases add) */
        entry_of(s, p->logit_bias_id[i])->bias += p->logit_bias[i];
    return 0;
}

void engine_pen_free(seq_state *s) {
    free(s->pen_at);
    free(s->pen_ent);
    s->pen_at = NULL;
    s->pen_ent = NULL;
    s->n_pen_ent = s->cap_pen_ent = s->pen_n = s->pen_window = 0;
}

void engine_pen_sync(engine *e, seq_state *s) {
    const sample_params *sp = &s->r->p.sp;
    bool all = rep_on(sp), out = sp->presence_penalty != 0.0f || sp->frequency_penalty != 0.0f;
    int V = e->m->cfg.vocab_size, n_prompt = s->r->n_prompt;
    for (; s->pen_n < s->n_ctx; s->pen_n++) {
        int32_t t = s->ctx[s->pen_n];
        bool is_out = s->pen_n >= n_prompt;
        if (t < 0 || t >= V || !(all || (out && is_out))) continue;
        bk_pen_ent *en = entry_of(s, t);
        en->n_out += is_out;
        en->last = s->pen_n;
    }
}

bk_pen_seq engine_pen_seq(const seq_state *s, int row, int n_rows, int ent) {
    const sample_params *sp = &s->r->p.sp;
    return (bk_pen_seq){row, n_rows, ent, s->n_pen_ent, rep_on(sp) ? sp->repetition_penalty : 1.0f,
                        sp->presence_penalty, sp->frequency_penalty, s->pen_window, s->n_ctx};
}

void engine_pen_row(engine *e, seq_state *s, float *row) {
    engine_pen_sync(e, s);
    bk_pen_seq ps = engine_pen_seq(s, 0, 1, 0);
    bk_penalize_row(row, e->m->cfg.vocab_size, &ps, s->pen_ent, NULL, 0);
}
