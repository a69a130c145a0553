/* engine_cost.c — what speculation costs on this machine, in decode steps:
 * the step-time model of the target (probed at start: t(n, L) = a + b n +
 * L (c + d n) for n tokens of one sequence at context L), the proposers' pass
 * costs (probed at start, then followed from every measured pass), and the
 * values built on them (expected tokens per unit of cost) that the chooser,
 * the depth controller, the pass decision and the gates use. */
#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "engine/engine_internal.h"

#define STEP_PROBE_L1 128  /* the two contexts of the step probes: both past a backend's first keys (from */
#define STEP_PROBE_L2 1024 /* no keys to some is a step of its own, not a cost per key) */

/* t(n, L) = a + b n + L (c + d n): best-of-3 timings (after a warm-up) of 1
 * and pld_draft_len + 1 tokens of one sequence at contexts L1 and L2 (its
 * prefix prefilled once, as prompt rows), fitted exactly; t_decode is a
 * 1-token step at context 0. A GPU reads a sequence's keys once for all its
 * rows (d ~ 0), a CPU once per row (c ~ 0): the bilinear form holds both.
 * With less room than L1 + 64 tokens, context costs nothing; on failure a
 * verify of pld_draft_len drafts costs 1.5 steps. */
void engine_measure_step(engine *e) {
    int k1 = e->cfg.pld_draft_len + 1, room = e->kv.n_blocks * e->kv.block_size - k1 - 1;
    int L1 = STEP_PROBE_L1, L2 = room < STEP_PROBE_L2 ? room : STEP_PROBE_L2;
    if (L2 < L1 + 64) L1 = L2 = 0;
    int n_all = L2 + k1;
    int32_t *tok = calloc((size_t)n_all, sizeof *tok), *pos = malloc((size_t)n_all * sizeof *pos);
    int32_t *seq = calloc((size_t)n_all, sizeof *seq), *rows = malloc((size_t)k1 * sizeof *rows);
    float *logits = malloc((size_t)k1 * e->m->cfg.vocab_size * sizeof(float));
    kv_seq s = {0};
    kv_seq *seqs[1] = {&s};
    double t[5] = {1e9, 1e9, 1e9, 1e9, 1e9}; /* (1, 0), (1, L1), (k1, L1), (1, L2), (k1, L2) */
    bool ok = tok && pos && seq && rows && logits && kv_seq_reserve(&e->kv, &s, n_all) == 0;
    for (int i = 0; ok && i < n_all; i++) pos[i] = i;
    for (int i = 0; ok && i < k1; i++) rows[i] = i;
    /* the context, once, as prompt rows: this also readies the prompt path (a
     * backend's GEMM library chooses its kernels and loads them on first use)
     * outside the first request. Past L1 it grows by what half a second of
     * prefill holds at the rate of the first L1 (a large model on a CPU). */
    if (ok && L2) {
        /* 16 rows first, untimed: each weight shape's first use (its GEMM
         * algorithms chosen and checked, kernels loaded) stays out of the
         * rate that sizes the rest */
        model_batch b0 = {.n_tokens = 16, .tokens = tok, .pos = pos, .seq = seq, .n_seqs = 1, .seqs = seqs,
                          .logit_rows = rows, .n_prompt = 16};
        ok = model_forward(e->m, &e->kv, &b0, logits) == 0 && model_sync(e->m) == 0;
        double t0 = now_s();
        model_batch b = {.n_tokens = L1, .tokens = tok, .pos = pos, .seq = seq, .n_seqs = 1, .seqs = seqs,
                         .logit_rows = rows, .n_prompt = L1};
        ok = model_forward(e->m, &e->kv, &b, logits) == 0 && model_sync(e->m) == 0;
        double per_token = (now_s() - t0) / L1;
        if (per_token > 0 && L1 + 0.5 / per_token < L2) L2 = L1 + (int)(0.5 / per_token);
        if (L2 < L1 + 64) L2 = L1 + 64;
        model_batch b2 = {.n_tokens = L2 - L1, .tokens = tok, .pos = pos + L1, .seq = seq, .n_seqs = 1, .seqs = seqs,
                          .logit_rows = rows, .n_prompt = L2 - L1};
        ok = ok && model_forward(e->m, &e->kv, &b2, logits) == 0;
    }
    /* the probes: (tokens, context, slot of t[]); without context probes
     * only (1, 0) and (k1, 0), the latter in the slot of (k1, L1) */
    const int probe[5][3] = {{1, 0, 0}, {1, L1, 1}, {k1, L1, 2}, {1, L2, 3}, {k1, L2, 4}};
    const int probe0[2][3] = {{1, 0, 0}, {k1, 0, 2}};
    const int(*pv)[3] = L2 ? probe : probe0, np = L2 ? 5 : 2;
    for (int rep = 0; ok && rep < 4; rep++)
        for (int v = 0; ok && v < np; v++) {
            int n = pv[v][0];
            model_batch b = {.n_tokens = n, .tokens = tok, .pos = pos + pv[v][1], .seq = seq, .n_seqs = 1, .seqs = seqs,
                             .n_logits = n, .logit_rows = rows};
            double t0 = now_s();
            ok = model_forward(e->m, &e->kv, &b, logits) == 0;
            double dt = now_s() - t0;
            if (rep > 0 && dt < t[pv[v][2]]) t[pv[v][2]] = dt;
        }
    kv_seq_release(&e->kv, &s);
    free(tok); free(pos); free(seq); free(rows); free(logits);
    e->t_decode = t[0] < 1e9 ? t[0] : 0;
    e->st_c = e->st_d = 0;
    if (!ok || t[0] >= 1e9 || t[2] >= 1e9) {
        e->st_b = 0.5 / (k1 - 1);
        e->st_a = 1.0 - e->st_b;
        return;
    }
    double p[4];
    engine_fit_step(t, k1, L1, L2, p);
    e->st_a = p[0];
    e->st_b = p[1];
    e->st_c = p[2];
    e->st_d = p[3];
}

/* The fit itself: t = the probes' times (1, 0), (1, L1), (k1, L1), (1, L2),
 * (k1, L2); L2 = 0: no context probes (t[2] is then (k1, 0)). Out: a, b, c,
 * d of t(n, L) = a + b n + L (c + d n), negative slopes taken as 0 and a at
 * least 5% of a step. */
void engine_fit_step(const double t[5], int k1, int L1, int L2, double out[4]) {
    double c = 0, d = 0, t1 = L2 ? t[1] : t[0], tk = t[2];
    if (L2) {
        double s1 = (t[3] - t[1]) / (L2 - L1), sk = (t[4] - t[2]) / (L2 - L1); /* c + d, c + d k1 */
        d = (sk - s1) / (k1 - 1);
        if (d < 0) d = 0;
        c = s1 - d;
        if (c < 0) c = 0;
    }
    double b = (tk - t1) / (k1 - 1) - d * L1; /* t(k1, L1) - t(1, L1) = (k1 - 1)(b + d L1) */
    if (b < 0) b = 0;
    double a = t1 - b - (c + d) * L1;
    if (a < 0.05 * t1) a = 0.05 * t1;
    out[0] = a;
    out[1] = b;
    out[2] = c;
    out[3] = d;
}

double engine_step_time(const engine *e, double n, int L) {
    return e->st_a + n * e->st_b + L * (e->st_c + n * e->st_d);
}

double engine_verify_cost(const engine *e, double k, int L) {
    return engine_step_time(e, k + 1, L) / engine_step_time(e, 1, L);
}

double engine_pass_cost(const engine *e, double ratio, int L) {
    return ratio * engine_step_time(e, 1, 0) / engine_step_time(e, 1, L);
}

void engine_track_cost(engine *e, double *ratio, double dt, int passes) {
    if (passes <= 0 || e->t_decode <= 0) return;
    double r = dt / passes / e->t_decode;
    if (*ratio > 0 && r > 2 * *ratio) r = 2 * *ratio; /* a stall, not the pass: one sample moves it 1/8 at most */
    *ratio += (r - *ratio) / 8.0;
}

double chain_value(const engine *e, const double *rate, int n, double pass_ratio, int L) {
    double tok = 1.0, pr = 1.0;
    for (int j = 0; j < n; j++) tok += (pr *= rate[j]);
    return tok / (engine_verify_cost(e, n, L) + engine_pass_cost(e, pass_ratio, L));
}

int engine_best_chain(const engine *e, const double *rate, int n_max, double pass_ratio, double bar, int L) {
    int best_n = 0;
    for (int n = 1; n <= n_max; n++) {
        double v = chain_value(e, rate, n, n * pass_ratio, L);
        if (v > bar) {
            bar = v;
            best_n = n;
        }
    }
    return best_n;
}

double engine_best_drafts(const engine *e, const double *rate, int n, int L, int *best_j) {
    double tok = 1.0, pr = 1.0, best = 1.0;
    *best_j = 0;
    for (int j = 1; j <= n; j++) {
        tok += (pr *= rate[j - 1]);
        double v = tok / engine_verify_cost(e, j, L);
        if (v > best || (e->cfg.no_runtime_gates && j == n)) {
            best = v;
            *best_j = j;
        }
    }
    return best;
}

/* Start-up cost probes (see engine_internal.h): a 1-token target step at
 * position 0 of a scratch sequence, then the pass, alternated; best of 3
 * after a warm-up. The scratch sequence holds ENGINE_MAX_DRAFT + 1 tokens,
 * for passes that are target steps themselves. */
double engine_probe_cost(engine *e, probe_fn pass, void *arg, double fallback) {
    kv_seq s = {0};
    kv_seq *seqs[1] = {&s};
    int32_t tok[ENGINE_MAX_DRAFT + 1] = {0}, pos[ENGINE_MAX_DRAFT + 1], seq[ENGINE_MAX_DRAFT + 1] = {0};
    for (int i = 0; i <= ENGINE_MAX_DRAFT; i++) pos[i] = i;
    float *logits = malloc((size_t)(ENGINE_MAX_DRAFT + 1) * e->m->cfg.vocab_size * sizeof(float));
    double t[2] = {1e9, 1e9};
    probe_ctx pc = {&s, logits, tok, pos, seq};
    if (logits && kv_seq_reserve(&e->kv, &s, ENGINE_MAX_DRAFT + 1) == 0)
        for (int rep = 0; rep < 4; rep++) {
            int32_t row0 = 0;
            model_batch b = {.n_tokens = 1, .tokens = tok, .pos = pos, .seq = seq, .n_seqs = 1, .seqs = seqs,
                             .n_logits = 1, .logit_rows = &row0};
            double t0 = now_s();
            if (model_forward(e->m, &e->kv, &b, logits) != 0) break;
            double t1 = now_s();
            if (pass(e, &pc, arg) != 0) break;
            double t2 = now_s();
            if (rep > 0) {
                if (t1 - t0 < t[0]) t[0] = t1 - t0;
                if (t2 - t1 < t[1]) t[1] = t2 - t1;
            }
        }
    free(logits);
    kv_seq_release(&e->kv, &s);
    return t[0] < 1e9 && t[1] < 1e9 && t[0] > 0 ? t[1] / t[0] : fallback;
}

/* One MTP head entry (one token) after the target step. */
static int mtp_pass(engine *e, const probe_ctx *pc, void *arg) {
    kv_seq *ms = arg, *mseqs[1] = {ms};
    int32_t idx = 0, q = 1, hid = 0, row = 0;
    model_batch mb = {.n_tokens = 1, .tokens = pc->tok, .pos = &idx, .seq = pc->seq_idx, .n_seqs = 1, .seqs = mseqs,
                      .n_logits = 1, .logit_rows = &row};
    int32_t id;
    return model_mtp_forward(e->m, &e->mtp_kv, &mb, &q, &hid, MTP_SRC_TARGET, NULL, &id);
}

/* A draft-model forward of one token (its own scratch cache). */
typedef struct {
    kv_cache kv;
    kv_seq s;
} drafter_probe;

static int drafter_pass(engine *e, const probe_ctx *pc, void *arg) {
    drafter_probe *d = arg;
    kv_seq *seqs[1] = {&d->s};
    int32_t row = 0, id;
    model_batch b = {.n_tokens = 1, .tokens = pc->tok, .pos = pc->pos, .seq = pc->seq_idx, .n_seqs = 1, .seqs = seqs,
                     .n_logits = 1, .logit_rows = &row, .argmax = &id};
    return model_forward(e->cfg.drafter, &d->kv, &b, NULL); /* the greedy id only, as drafter.c asks */
}

double engine_measure_mtp(engine *e) {
    kv_seq ms = {0};
    double r = kv_seq_reserve(&e->mtp_kv, &ms, 2) == 0 ? engine_probe_cost(e, mtp_pass, &ms, 0.3) : 0.3;
    kv_seq_release(&e->mtp_kv, &ms);
    return r;
}

/* A catch-up of the draft model over DRAFTER_CATCHUP_PROBE tokens (its own
 * path for them: prompt rows where the backend has them), in a scratch
 * sequence of its cache; failed: the draft model could not run it. */
#define DRAFTER_CATCHUP_PROBE 256
typedef struct {
    const int32_t *ctx;
    bool failed;
} catchup_probe;

static int drafter_catchup_pass(engine *e, const probe_ctx *pc, void *arg) {
    catchup_probe *cp = arg;
    drafter_seq ds = {0};
    int32_t id;
    int r = drafter_propose(e->dr, &ds, cp->ctx, DRAFTER_CATCHUP_PROBE, 1, &id);
    drafter_seq_release(e->dr, &ds);
    if (r < 0) cp->failed = true;
    return r == 1 ? 0 : -1; /* (0: a pool too small for the probe, which then falls back) */
}

double engine_measure_drafter_catchup(engine *e) {
    static const int32_t ctx[DRAFTER_CATCHUP_PROBE]; /* the token ids do not change the cost */
    catchup_probe cp = {ctx, false};
    double r = engine_probe_cost(e, drafter_catchup_pass, &cp, 0.1 * DRAFTER_CATCHUP_PROBE) / DRAFTER_CATCHUP_PROBE;
    return cp.failed ? -1.0 : r;
}

bool engine_catchup_pays(const engine *e, double value, int behind, int n_gen, int left) {
    int est = n_gen > 1 ? n_gen : 1;
    if (est > left) est = left;
    return est * (1.0 - 1.0 / value) >= behind * e->drafter_catchup;
}

double engine_measure_drafter(engine *e) {
    drafter_probe d = {0};
    if (model_kv_init(e->cfg.drafter, &d.kv, 64) != 0) return 0.5;
    double r = kv_seq_reserve(&d.kv, &d.s, 1) == 0 ? engine_probe_cost(e, drafter_pass, &d, 0.5) : 0.5;
    kv_seq_release(&d.kv, &d.s);
    kv_cache_free(&d.kv);
    return r;
}

