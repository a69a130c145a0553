/* logprob_cases.h — rows for logprob_rows: a language model's shape (most
 * logits spread, a few far above), ties at the top and inside the top 20,
 * -inf entries (a masked row), and how a backend's result is held to the
 * host rule: the same chosen id and logit and top ids and values exactly,
 * lz within 1e-5 (its sum may be added in another order). */
#ifndef KS_TEST_LOGPROB_CASES_H
#define KS_TEST_LOGPROB_CASES_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"

static unsigned lp_rng = 2024;
static inline float lp_unit(void) {
    lp_rng = lp_rng * 1664525u + 1013904223u;
    return ((lp_rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

/* row r of a case: kind r % 4 */
static inline void lp_case_row(float *x, int cols, int r) {
    for (int i = 0; i < cols; i++) x[i] = 3.0f * lp_unit();
    for (int k = 0; k < 5; k++) x[(unsigned)(lp_unit() * 1e6f + 1e6f) % cols] = 12.0f + k;
    switch (r % 4) {
    case 1: /* ties at the top and within the top 20 */
        for (int k = 0; k < 30; k++) x[(unsigned)(lp_unit() * 1e6f + 1e6f) % cols] = 20.0f - (float)(k / 3);
        break;
    case 2: /* a masked row: most entries -inf */
        for (int i = 0; i < cols; i++)
            if (i % 7) x[i] = -INFINITY;
        break;
    case 3: /* all equal */
        for (int i = 0; i < cols; i++) x[i] = 0.5f;
        break;
    default: break;
    }
}

/* got against the host rule on row (cols) with chosen id and top */
static inline int lp_matches(const bk_logprobs *got, const float *row, int cols, int id, int top, char *why, size_t n) {
    bk_logprobs want;
    bk_logprob_row(row, cols, id, top, &want);
    if (got->id != want.id || got->logit != want.logit || got->n_top != want.n_top)
        return snprintf(why, n, "id %d/%d logit %g/%g n_top %d/%d", got->id, want.id, got->logit, want.logit,
                        got->n_top, want.n_top), 0;
    if (!(fabsf(got->lz - want.lz) <= 1e-5f * (1.0f + fabsf(want.lz))))
        return snprintf(why, n, "lz %.9g against %.9g", got->lz, want.lz), 0;
    for (int k = 0; k < want.n_top; k++)
        if (got->top_id[k] != want.top_id[k] || got->top[k] != want.top[k])
            return snprintf(why, n, "top %d: %d (%g) against %d (%g)", k, got->top_id[k], got->top[k], want.top_id[k],
                            want.top[k]), 0;
    return 1;
}

#endif
