/* penalty_cases.h — inputs for penalize_rows and the rule they must follow.
 *
 * pen_reference: the rule over a plain context, as the host applied it before
 * the backend did (each distinct token of the context — of its last
 * repetition_last_n tokens where that is set — once for the repetition
 * penalty, the output's counts for presence / frequency, then
 * each logit_bias entry added), which the engine's entries plus a verify's
 * fed tokens must reproduce bit for bit.
 * pen_random_call: a random call of the op (sequences over a few of the
 * rows with gaps between, entries of distinct ids, some of them fed again,
 * windows over the whole context or a few tokens)
 * for the op tests: the CUDA op and the emulated kernel against the CPU op. */
#ifndef KS_TEST_PENALTY_CASES_H
#define KS_TEST_PENALTY_CASES_H

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "sample/sample.h"
#include "test.h"

static inline void pen_reference(float *row, int V, const int32_t *ctx, int n_ctx, int n_prompt, const sample_params *p,
                                 const int32_t *bias_id, const float *bias, int n_bias) {
    int *count = calloc((size_t)V, sizeof *count);
    if (p->repetition_penalty != 1.0f && p->repetition_penalty > 0) {
        int from = p->repetition_last_n > 0 && n_ctx > p->repetition_last_n ? n_ctx - p->repetition_last_n : 0;
        for (int i = from; i < n_ctx; i++) {
            int t = ctx[i];
            if (t < 0 || t >= V || count[t] < 0) continue;
            float l = row[t];
            row[t] = l > 0 ? l / p->repetition_penalty : l * p->repetition_penalty;
            count[t] = -1;
        }
        for (int i = from; i < n_ctx; i++)
            if (ctx[i] >= 0 && ctx[i] < V) count[ctx[i]] = 0;
    }
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
        for (int i = n_prompt; i < n_ctx; i++)
            if (ctx[i] >= 0 && ctx[i] < V) count[ctx[i]]++;
        for (int i = n_prompt; i < n_ctx; i++) {
            int t = ctx[i];
            if (t < 0 || t >= V || count[t] == 0) continue;
            row[t] -= p->presence_penalty + p->frequency_penalty * (float)count[t];
            count[t] = 0;
        }
    }
    for (int i = 0; i < n_bias; i++) row[bias_id[i]] += bias[i];
    free(count);
}

static unsigned pen_rng = 99;
static inline unsigned pen_next(void) {
    pen_rng = pen_rng * 1664525u + 1013904223u;
    return pen_rng >> 8;
}
static inline float pen_unit(void) { return (pen_next() & 0xffff) / 65536.0f * 2.0f - 1.0f; } /* [-1, 1) */

/* a logit: spread, some exactly 0, some large */
static inline float pen_logit(void) {
    unsigned k = pen_next() % 16;
    return k == 0 ? 0.0f : k == 1 ? 20.0f * pen_unit() : 4.0f * pen_unit();
}

typedef struct {
    int cols, n_rows, n_seqs, n_ent;
    float *logits;    /* (n_rows, cols) */
    int32_t *tokens;  /* (n_rows) the step's token rows (one a logits row here) */
    int32_t *rows;    /* (n_rows) logits row r's token row */
    bk_pen_seq seqs[8];
    bk_pen_ent *ent;
} pen_call;

/* ids drawn from a small range (repeats and matches) or the whole vocabulary */
static inline int32_t pen_id(int cols) { return (int32_t)(pen_next() % 4 ? pen_next() % 48 : pen_next() % (unsigned)cols); }

static inline void pen_random_call(pen_call *c, int cols) {
    memset(c, 0, sizeof *c);
    c->cols = cols;
    c->n_rows = 40;
    c->logits = malloc((size_t)c->n_rows * cols * sizeof *c->logits);
    c->tokens = malloc((size_t)c->n_rows * sizeof *c->tokens);
    c->rows = malloc((size_t)c->n_rows * sizeof *c->rows);
    c->ent = malloc(8 * 600 * sizeof *c->ent);
    for (long i = 0; i < (long)c->n_rows * cols; i++) c->logits[i] = pen_logit();
    for (int r = 0; r < c->n_rows; r++) {
        c->rows[r] = c->n_rows - 1 - r; /* token rows in another order than the logits rows */
        c->tokens[r] = pen_id(cols);
    }
    int row = (int)(pen_next() % 3);
    while (c->n_seqs < 8 && row < c->n_rows) {
        bk_pen_seq *s = &c->seqs[c->n_seqs++];
        int left = c->n_rows - row, n = 1 + (int)(pen_next() % 17);
        s->row = row;
        s->n_rows = n < left ? n : left;
        s->ent = c->n_ent;
        s->n_ent = (int)(pen_next() % 600);
        float reps[4] = {1.0f, 1.3f, 0.7f, 2.0f}, pres[3] = {0.0f, 0.5f, -0.25f}, freq[3] = {0.0f, 0.3f, 1.5f};
        s->rep = reps[pen_next() % 4];
        s->presence = pres[pen_next() % 3];
        s->frequency = freq[pen_next() % 3];
        int windows[5] = {0, 0, 1, 4, 24}; /* the whole context, or its last few tokens (fed ones among them) */
        s->window = windows[pen_next() % 5];
        s->n_ctx = 1 + (int)(pen_next() % 48);
        char *seen = calloc((size_t)cols, 1);
        for (int k = 0; k < s->n_ent; k++) {
            int32_t id;
            do id = pen_id(cols);
            while (seen[id]);
            seen[id] = 1;
            int kind = (int)(pen_next() % 4);
            int32_t last = kind == 0 ? -1 : (int32_t)(pen_next() % (unsigned)s->n_ctx);
            c->ent[c->n_ent++] = (bk_pen_ent){id, kind == 0 ? 0 : (int32_t)(pen_next() % 4), last,
                                              kind == 1 ? 3.0f * pen_unit() : 0.0f};
        }
        free(seen);
        row += s->n_rows + (int)(pen_next() % 3); /* gaps: rows no sequence lists */
    }
}

static inline void pen_call_free(pen_call *c) {
    free(c->logits);
    free(c->tokens);
    free(c->rows);
    free(c->ent);
}

/* The CPU op's rows for call c (the reference; the caller frees them). */
static inline float *pen_cpu_rows(backend *cpu, const pen_call *c) {
    size_t bytes = (size_t)c->n_rows * c->cols * sizeof(float);
    float *want = malloc(bytes);
    memcpy(want, c->logits, bytes);
    cpu->ops->penalize_rows(cpu, want, c->cols, c->n_rows, c->tokens, c->rows, c->seqs, c->n_seqs, c->ent);
    return want;
}

/* every row of got bit for bit the CPU op's (want); *changed counts the
 * rows the op changed */
static inline void pen_rows_check(const pen_call *c, const float *want, const float *got, const char *who, int *changed) {
    for (int r = 0; r < c->n_rows; r++) {
        size_t at = (size_t)r * c->cols;
        CHECK_MSG(!memcmp(got + at, want + at, (size_t)c->cols * 4), "%s, cols %d row %d: differs from the CPU op", who,
                  c->cols, r);
        *changed += memcmp(want + at, c->logits + at, (size_t)c->cols * 4) != 0;
    }
}

#endif
