/* test_penalties.c — penalties and logit_bias as the backend applies them
 * (penalize_rows). The engine's entries (engine_penalty.c, kept up as a
 * context grows) with a verify's drafts fed at the rows after the first
 * must give, on each row, what the rule over the plain context gives (the
 * repetition penalty over all of it or over its last few tokens)
 * (penalty_cases.h's pen_reference) bit for bit — through the CPU op and
 * through the host's own path (engine_pen_row) for rows it takes. The CUDA
 * kernel's own code (tests/emu) must equal the CPU op on random calls. */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "penalty_cases.h"
#include "test.h"

struct CUstream_st;
void emu_ks_cuda_penalize_rows(struct CUstream_st *s, float *logits, int cols, int n_rows, const int32_t *tokens,
                               const int32_t *rows, const bk_pen_seq *seqs, int n_seqs, const bk_pen_ent *ent);

static int rows_differ(const float *a, const float *b, int n) { return memcmp(a, b, (size_t)n * sizeof *a) != 0; }

TEST(test_penalties_from_the_context_equal_the_reference_rule) {
    enum { V = 3000, MAXC = 256 };
    backend *be = NULL;
    CHECK(backend_cpu_new(&be, 1) == 0);
    model m;
    memset(&m, 0, sizeof m);
    m.cfg.vocab_size = V;
    engine *e = calloc(1, sizeof *e);
    e->m = &m;
    float *orig = malloc((size_t)17 * V * 4), *got = malloc((size_t)17 * V * 4), *want = malloc((size_t)V * 4),
          *host = malloc((size_t)V * 4);
    int32_t ctx[MAXC], full[MAXC], tokens[17], rows[17], drafts[16];
    int rows_checked = 0, changed = 0;
    for (int c = 0; c < 300; c++) {
        engine_req req;
        memset(&req, 0, sizeof req);
        engine_params *p = &req.p;
        sample_params_default(&p->sp);
        float reps[4] = {1.0f, 1.3f, 0.7f, 0.0f}, pres[3] = {0.0f, 0.5f, -0.25f}, freq[3] = {0.0f, 0.3f, 1.5f};
        p->sp.repetition_penalty = reps[c % 4];
        p->sp.presence_penalty = pres[(c / 4) % 3];
        p->sp.frequency_penalty = freq[(c / 12) % 3];
        int windows[5] = {0, 1, 5, 30, 0}; /* repeat_last_n: the last few tokens (drafts among them), the whole context */
        p->sp.repetition_last_n = windows[(c / 36) % 5];
        p->n_logit_bias = (int)(pen_next() % 4);
        for (int i = 0; i < p->n_logit_bias; i++) {
            p->logit_bias_id[i] = (int32_t)(7 * i + pen_next() % 7); /* distinct */
            p->logit_bias[i] = 10.0f * pen_unit();
        }
        p->max_tokens = 100;
        int n_prompt = (int)(pen_next() % 80), n_gen = (int)(pen_next() % 60), k = (int)(pen_next() % 17);
        req.n_prompt = n_prompt;
        for (int i = 0; i < n_prompt + n_gen; i++) ctx[i] = pen_id(V);
        for (int i = 0; i < k; i++) drafts[i] = pen_id(V);
        seq_state s;
        memset(&s, 0, sizeof s);
        s.r = &req;
        s.ctx = full;
        s.cap = n_prompt + p->max_tokens + 1;
        memcpy(full, ctx, (size_t)n_prompt * 4);
        s.n_ctx = n_prompt;
        CHECK(engine_pen_init(e, &s) == 0);
        bool any = sample_penalties_on(&p->sp) || p->n_logit_bias;
        CHECK_EQ_INT(s.pen, any);
        if (!s.pen) continue;
        /* the output arrives in two parts, counted after each */
        int half = n_gen / 2;
        memcpy(full + n_prompt, ctx + n_prompt, (size_t)half * 4);
        s.n_ctx = n_prompt + half;
        engine_pen_sync(e, &s);
        memcpy(full + s.n_ctx, ctx + s.n_ctx, (size_t)(n_gen - half) * 4);
        s.n_ctx = n_prompt + n_gen;
        engine_pen_sync(e, &s);
        /* a verify: row 0 the last context token's, row j after draft j - 1 */
        int R = k + 1, n_ctx = n_prompt + n_gen;
        for (long i = 0; i < (long)R * V; i++) orig[i] = pen_logit();
        memcpy(got, orig, (size_t)R * V * 4);
        for (int j = 0; j < R; j++) {
            rows[j] = j;
            tokens[j] = j ? drafts[j - 1] : n_ctx ? ctx[n_ctx - 1] : 0;
        }
        bk_pen_seq ps = engine_pen_seq(&s, 0, R, 0);
        be->ops->penalize_rows(be, got, V, R, tokens, rows, &ps, 1, s.pen_ent);
        for (int j = 0; j < R; j++) {
            memcpy(want, orig + (size_t)j * V, (size_t)V * 4);
            memcpy(ctx + n_ctx, drafts, (size_t)j * 4);
            pen_reference(want, V, ctx, n_ctx + j, n_prompt, &p->sp, p->logit_bias_id, p->logit_bias, p->n_logit_bias);
            CHECK_MSG(!rows_differ(got + (size_t)j * V, want, V), "case %d row %d of %d (rep %g last %d pres %g freq %g, %d bias)",
                      c, j, R, p->sp.repetition_penalty, p->sp.repetition_last_n, p->sp.presence_penalty, p->sp.frequency_penalty,
                      p->n_logit_bias);
            changed += rows_differ(want, orig + (size_t)j * V, V);
            rows_checked++;
        }
        /* the host's path for the last row, its drafts committed */
        memcpy(full + n_ctx, drafts, (size_t)k * 4);
        s.n_ctx = n_ctx + k;
        memcpy(host, orig + (size_t)k * V, (size_t)V * 4);
        engine_pen_row(e, &s, host);
        CHECK_MSG(!rows_differ(host, got + (size_t)k * V, V), "case %d: the host's row differs from the backend's", c);
        engine_pen_free(&s);
    }
    printf("    %d rows equal to the rule over their context, %d of them changed by it\n", rows_checked, changed);
    CHECK(rows_checked > 1000);
    CHECK(changed > rows_checked / 2);
    free(orig); free(got); free(want); free(host);
    free(e);
    backend_free(be);
}

/* k_penalize.cu's own code against the CPU op: random calls (several
 * sequences, rows none lists, drafts that repeat and match entries) at
 * 3,000 and 151,936 logits, equal bit for bit */
TEST(test_penalize_rows_emulated_matches_the_cpu_op) {
    backend *be = NULL;
    CHECK(backend_cpu_new(&be, 1) == 0);
    int changed = 0;
    for (int round = 0; be && round < 6; round++) {
        pen_call c;
        pen_random_call(&c, round < 4 ? 3000 : 151936);
        float *want = pen_cpu_rows(be, &c), *got = malloc((size_t)c.n_rows * c.cols * sizeof *got);
        memcpy(got, c.logits, (size_t)c.n_rows * c.cols * sizeof *got);
        emu_ks_cuda_penalize_rows(NULL, got, c.cols, c.n_rows, c.tokens, c.rows, c.seqs, c.n_seqs, c.ent);
        pen_rows_check(&c, want, got, "emulated", &changed);
        free(want);
        free(got);
        pen_call_free(&c);
    }
    printf("    6 calls equal, %d rows changed\n", changed);
    CHECK(changed > 60);
    backend_free(be);
}
