/* test_logprob_rows.c — log-probabilities as the backend computes them
 * (logprob_rows): the CPU op is the host rule (bk_logprob_row, checked
 * here against a plain sort on its ties and ranks), and k_logprobs.cu's own
 * code (tests/emu, 64-thread blocks) matches it (logprob_cases.h): chosen
 * id and logit, top ids and values exactly, lz within 1e-5. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "logprob_cases.h"
#include "test.h"

struct CUstream_st;
void emu_ks_cuda_logprob_rows(struct CUstream_st *s, const float *raw, int cols, const int32_t *ids,
                              const int32_t *rows, int n, int top, bk_logprobs *out);

static const float *sort_row;
static int by_rank(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    float x = sort_row[i], y = sort_row[j];
    return x > y ? -1 : x < y ? 1 : i - j;
}

TEST(test_logprob_rule_matches_a_sort) {
    enum { COLS = 3000 };
    float *x = malloc(COLS * sizeof *x);
    int *ord = malloc(COLS * sizeof *ord), checked = 0;
    for (int r = 0; r < 8; r++) {
        lp_case_row(x, COLS, r);
        for (int i = 0; i < COLS; i++) ord[i] = i;
        sort_row = x;
        qsort(ord, COLS, sizeof *ord, by_rank);
        bk_logprobs lp;
        bk_logprob_row(x, COLS, 17, 20, &lp);
        double z = 0;
        for (int i = 0; i < COLS; i++) z += exp((double)x[i] - (double)x[ord[0]]);
        CHECK_MSG(fabs(lp.lz - (x[ord[0]] + log(z))) < 1e-5, "row %d: lz %g", r, lp.lz);
        CHECK_EQ_INT(lp.n_top, 20);
        for (int k = 0; k < 20; k++) CHECK_MSG(lp.top_id[k] == ord[k], "row %d top %d: %d, sorted %d", r, k, lp.top_id[k], ord[k]);
        CHECK(lp.id == 17 && lp.logit == x[17]);
        checked++;
    }
    CHECK_EQ_INT(checked, 8);
    free(x);
    free(ord);
}

TEST(test_logprob_rows_emulated_match_the_cpu_op) {
    backend *be = NULL;
    CHECK(backend_cpu_new(&be, 1) == 0);
    const int widths[] = {3000, 151936, 7};
    int rows_checked = 0;
    for (int wi = 0; wi < 3; wi++) {
        int cols = widths[wi], n = 4, R = 6;
        float *raw = malloc((size_t)n * cols * sizeof *raw);
        int32_t ids[6], rows[4] = {5, 0, 3, 2};
        bk_logprobs a[4], b[4];
        for (int k = 0; k < n; k++) lp_case_row(raw + (size_t)k * cols, cols, k);
        for (int r = 0; r < R; r++) ids[r] = (r * 37) % cols;
        int top = wi == 2 ? 20 : 20 - wi * 7; /* (more than the row holds at 7 columns) */
        be->ops->logprob_rows(be, raw, cols, ids, rows, n, top, a);
        emu_ks_cuda_logprob_rows(NULL, raw, cols, ids, rows, n, top, b);
        for (int k = 0; k < n; k++) {
            char why[200];
            CHECK_MSG(lp_matches(&a[k], raw + (size_t)k * cols, cols, ids[rows[k]], top, why, sizeof why),
                      "cpu, cols %d row %d: %s", cols, k, why);
            CHECK_MSG(lp_matches(&b[k], raw + (size_t)k * cols, cols, ids[rows[k]], top, why, sizeof why),
                      "emulated, cols %d row %d: %s", cols, k, why);
            rows_checked++;
        }
        free(raw);
    }
    printf("    %d rows: the CPU op and the emulated kernel equal the host rule\n", rows_checked);
    backend_free(be);
}
