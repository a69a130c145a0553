/* sample_rows_cases.h — the rows and rules the device sampler is checked on
 * (test_cuda_ops.c on a GPU, test_sample_rows_emu.c through tests/emu):
 * the rules alone and together, and logits of four kinds — spread, peaked,
 * integers (ties at the top-k and top-p edges), and ten scattered top
 * logits above integer ones (the edge's ties below them, so a draw walks
 * past ties left out). */
#ifndef KS_TEST_SAMPLE_ROWS_CASES_H
#define KS_TEST_SAMPLE_ROWS_CASES_H

#include "sample/sample.h"

enum { SAMPLE_CASE_KINDS = 4, SAMPLE_CASE_RULES = 8 };

static const sample_params sample_case_rules[SAMPLE_CASE_RULES] = {
    {1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0},  {0.7f, 0, 0.95f, 0.0f, 1.0f, 0.0f, 0.0f, 0},
    {0.7f, 20, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0}, {1.0f, 40, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 0},
    {0.8f, 0, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f, 0}, {1.3f, 50, 0.8f, 0.02f, 1.0f, 0.0f, 0.0f, 0},
    {0.25f, 0, 0.5f, 0.0f, 1.0f, 0.0f, 0.0f, 0}, {1.0f, 40, 1.0f, 0.3f, 1.0f, 0.0f, 0.0f, 0},
};

/* logit i of a row of `kind`, r a uniform in [-1, 1) */
static inline float sample_case_logit(int kind, int i, float r) {
    return kind == 0   ? r * 4
           : kind == 1 ? r * 2 - (i % 97 ? 6.f : 0.f)
           : kind == 2 ? (float)(int)(r * 6)
                       : i % 300 == 90 ? 4.f : (float)(int)(r * 3);
}

#endif
