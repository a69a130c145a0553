/* test_engine_cost.c — the step-time fit behind every speculation decision
 * (engine_fit_step): probe times made from known t(n, L) = a + b n +
 * L (c + d n) give those parameters back, for a GPU-like step (keys read
 * once for all rows: d = 0), a CPU-like one (once per row: c = 0) and both;
 * slopes that come out negative (noise) are taken as 0; without context
 * probes the fit uses the steps at context 0. The DFlash block size chosen
 * from those costs (engine_dflash_pick_block); what the server learns from
 * finished requests; pass costs past a stall; the draft model's catch-up;
 * the gates' back-off and the proposers' turns (engine_src_off,
 * engine_src_next). */
#include <math.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "test.h"

static double step(const double p[4], int n, int L) { return p[0] + p[1] * n + L * (p[2] + p[3] * n); }

static void probes(const double p[4], int k1, int L1, int L2, double t[5]) {
    t[0] = step(p, 1, 0);
    t[1] = step(p, 1, L1);
    t[2] = step(p, k1, L1);
    t[3] = step(p, 1, L2);
    t[4] = step(p, k1, L2);
}

TEST(test_engine_step_fit_recovers_the_model) {
    const double cases[3][4] = {
        {216.5e-6, 4.83e-6, 0.0, 0.0042e-6},  /* the H200 with tinycoder: context nearly free */
        {600e-6, 70e-6, 0.0, 0.18e-6},        /* a CPU: every row reads the keys */
        {500e-6, 20e-6, 0.05e-6, 0.1e-6},     /* both */
    };
    int k1 = 6, L1 = 128, L2 = 1024;
    for (int ci = 0; ci < 3; ci++) {
        double t[5], q[4];
        probes(cases[ci], k1, L1, L2, t);
        engine_fit_step(t, k1, L1, L2, q);
        for (int j = 0; j < 4; j++)
            CHECK_MSG(fabs(q[j] - cases[ci][j]) < 1e-12, "case %d parameter %d: %g, expected %g", ci, j, q[j],
                      cases[ci][j]);
        /* the verify cost it implies at context 2048, against the model's own */
        double want = step(cases[ci], k1, 2048) / step(cases[ci], 1, 2048);
        double got = step(q, k1, 2048) / step(q, 1, 2048);
        CHECK(fabs(got - want) < 1e-9);
    }
}

TEST(test_engine_step_fit_clamps_noise) {
    /* a 1-token step slower at the short context than at the long one, and
     * the k1-token steps flat: no negative cost per key or per row */
    double t[5] = {200e-6, 230e-6, 231e-6, 220e-6, 229e-6}, q[4];
    engine_fit_step(t, 6, 128, 1024, q);
    CHECK(q[1] >= 0 && q[2] >= 0 && q[3] >= 0);
    CHECK(q[0] >= 0.05 * t[1]);
    /* no context probes: a and b from the steps at context 0, context free */
    double t0[5] = {200e-6, 0, 250e-6, 0, 0};
    engine_fit_step(t0, 6, 0, 0, q);
    CHECK(fabs(q[1] - 10e-6) < 1e-12 && fabs(q[0] - 190e-6) < 1e-12);
    CHECK(q[2] == 0 && q[3] == 0);
}

/* The DFlash block chosen without --draft-block-size, from the step model
 * and the measured pass costs: on an H200-like step (rows nearly free) the
 * block whose pass costs less wins when the passes differ (0.64 for 16 vs
 * 0.59 for 8 decode steps, as measured there), the longest when they cost
 * the same; on a CPU-like step (each row 0.34 of a step; passes 2.6 / 1.4 /
 * 0.7) the short block. */
TEST(test_engine_dflash_block_choice_follows_the_costs) {
    engine gpu = {.st_a = 208.6e-6, .st_b = 4.54e-6}, cpu = {.st_a = 600e-6, .st_b = 204e-6};
    int blocks[3] = {16, 8, 4};
    double measured[3] = {0.64, 0.59, 0.57}, same[3] = {0.6, 0.6, 0.6}, cpu_passes[3] = {2.6, 1.4, 0.7};
    CHECK_EQ_INT(blocks[engine_dflash_pick_block(&gpu, blocks, measured, 3)], 8);
    CHECK_EQ_INT(blocks[engine_dflash_pick_block(&gpu, blocks, same, 3)], 16);
    CHECK_EQ_INT(blocks[engine_dflash_pick_block(&cpu, blocks, cpu_passes, 3)], 4);
    CHECK_EQ_INT(blocks[engine_dflash_pick_block(&gpu, blocks, measured, 1)], 16); /* one candidate: a given size */
}

/* How many drafts to verify, from the acceptance by depth
 * (engine_src_rates): a request whose first three drafts were accepted ~80%
 * of the time after the ones before and its fourth 5 times in 51 (a block
 * drafter's later drafts, as tinycoder's DFlash drafter shows) verifies 4 of
 * 7 on an H200-like step, where one rate pooled over the depths (0.67)
 * would verify all 7 — each costing ~2% of a step for what the pooled rate
 * overstates. Without any outcome every depth is the prior; sources other
 * than DFlash keep the pooled rate at every depth. */
TEST(test_engine_drafts_follow_acceptance_by_depth) {
    engine gpu = {.st_a = 208.6e-6, .st_b = 4.54e-6};
    static seq_state s;
    double rate[ENGINE_MAX_DRAFT], pooled[ENGINE_MAX_DRAFT];
    for (int src = 0; src < DRAFT_SRC_COUNT; src++) s.prior[src] = engine_default_prior(src);
    engine_src_rates(&s, DRAFT_SRC_DFLASH, rate);
    for (int d = 0; d < ENGINE_MAX_DRAFT; d++) CHECK(fabs(rate[d] - SPEC_MODEL_PRIOR) < 1e-12);
    engine_src_rates(&s, DRAFT_SRC_LOOKUP, rate);
    CHECK(fabs(rate[3] - 0.5) < 1e-12);
    const int tries[5] = {100, 80, 64, 51, 5}, hits[5] = {80, 64, 51, 5, 0};
    for (int d = 0; d < 5; d++) {
        s.est_try[DRAFT_SRC_DFLASH][d] = tries[d];
        s.est_hit[DRAFT_SRC_DFLASH][d] = hits[d];
    }
    engine_src_rates(&s, DRAFT_SRC_DFLASH, rate);
    double p = (200.0 + 10 * SPEC_MODEL_PRIOR) / (300.0 + 10);
    CHECK(fabs(rate[3] - (5 + SPEC_DEPTH_WEIGHT * p) / (51 + SPEC_DEPTH_WEIGHT)) < 1e-12);
    CHECK(fabs(rate[6] - p) < 1e-12); /* a depth never judged: the pooled rate */
    for (int d = 0; d < ENGINE_MAX_DRAFT; d++) pooled[d] = p;
    int j_depth, j_pooled;
    engine_best_drafts(&gpu, rate, 7, 0, &j_depth);
    engine_best_drafts(&gpu, pooled, 7, 0, &j_pooled);
    CHECK_EQ_INT(j_depth, 4);
    CHECK_EQ_INT(j_pooled, 7);
    /* other sources keep one rate for all depths: the pooled one */
    memcpy(s.est_try[DRAFT_SRC_MTP], s.est_try[DRAFT_SRC_DFLASH], sizeof s.est_try[0]);
    memcpy(s.est_hit[DRAFT_SRC_MTP], s.est_hit[DRAFT_SRC_DFLASH], sizeof s.est_hit[0]);
    engine_src_rates(&s, DRAFT_SRC_MTP, rate);
    for (int d = 0; d < ENGINE_MAX_DRAFT; d++) CHECK(fabs(rate[d] - p) < 1e-12);
}

/* The server's estimate a request starts from (engine_learn_from_request): a
 * finished request with 64 judged MTP drafts, 16 accepted (an edit, where
 * the head's drafts at the edit points are mostly wrong), moves the MTP
 * prior from 0.7 halfway to its 0.25; a source it never judged keeps its
 * prior, and so does DFlash (by depth); the next request's rates start
 * there; a speculating request that judged none of a source's drafts moves
 * its estimate back toward the default and its pass cost toward the probe. */
TEST(test_engine_prior_follows_finished_requests) {
    static engine e;
    static seq_state s, next;
    for (int src = 0; src < DRAFT_SRC_COUNT; src++) e.src_prior[src] = engine_default_prior(src);
    s.est_try[DRAFT_SRC_DFLASH][0] = 30; /* (DFlash keeps its prior) */
    s.est_try[DRAFT_SRC_MTP][0] = 40;
    s.est_hit[DRAFT_SRC_MTP][0] = 12;
    s.est_try[DRAFT_SRC_MTP][1] = 24;
    s.est_hit[DRAFT_SRC_MTP][1] = 4;
    engine_learn_from_request(&e, &s);
    CHECK(fabs(e.src_prior[DRAFT_SRC_MTP] - (0.7 + 0.5 * (0.25 - 0.7))) < 1e-12);
    CHECK(fabs(e.src_prior[DRAFT_SRC_DFLASH] - SPEC_MODEL_PRIOR) < 1e-12);
    /* a request with a prediction (OpenAI predicted outputs) drafts from it as lookup does, nearly all
     * accepted: not what lookup in the prompt will give the next requests */
    static engine_req pr;
    static seq_state ps;
    pr.p.n_prediction = 40;
    ps.r = &pr;
    ps.est_try[DRAFT_SRC_LOOKUP][0] = 60;
    ps.est_hit[DRAFT_SRC_LOOKUP][0] = 59;
    engine_learn_from_request(&e, &ps);
    CHECK(fabs(e.src_prior[DRAFT_SRC_LOOKUP] - 0.5) < 1e-12);
    memcpy(next.prior, e.src_prior, sizeof next.prior);
    double rate[ENGINE_MAX_DRAFT];
    engine_src_rates(&next, DRAFT_SRC_MTP, rate);
    CHECK(fabs(rate[0] - 0.475) < 1e-12);
    engine_learn_from_request(&e, &next); /* a request without speculation changes nothing */
    CHECK(fabs(e.src_prior[DRAFT_SRC_MTP] - 0.475) < 1e-12);
    /* one that speculated but judged no MTP draft: back toward the default, and the head's pass cost,
     * read high once (a stall) and so closing every gate since, back toward its start-up probe */
    next.spec = true;
    e.src_ratio[DRAFT_SRC_MTP] = 0.87;
    e.probe_ratio[DRAFT_SRC_MTP] = 0.33;
    e.src_ratio[DRAFT_SRC_DFLASH] = 0.3; /* DFlash not loaded (no probe): left alone */
    engine_learn_from_request(&e, &next);
    CHECK(fabs(e.src_prior[DRAFT_SRC_MTP] - (0.475 + SPEC_PRIOR_FORGET * (0.7 - 0.475))) < 1e-12);
    CHECK(fabs(e.src_prior[DRAFT_SRC_LOOKUP] - 0.5) < 1e-12);
    CHECK(fabs(e.src_ratio[DRAFT_SRC_MTP] - (0.87 + SPEC_COST_FORGET * (0.33 - 0.87))) < 1e-12);
    CHECK(fabs(e.src_ratio[DRAFT_SRC_DFLASH] - 0.3) < 1e-12);
    /* a request that ran the head keeps the cost its passes measured */
    engine_learn_from_request(&e, &s);
    CHECK(fabs(e.src_ratio[DRAFT_SRC_MTP] - (0.87 + SPEC_COST_FORGET * (0.33 - 0.87))) < 1e-12);
}

/* A pass's tracked cost follows its measured time (1/8 a sample) but a
 * sample past twice the estimate counts as twice it: a host stall of 14
 * passes' time moved the MTP head's cost from 0.33 to ~0.87 decode steps at
 * once, enough to close its gate; a real rise still comes through, at most
 * doubling the sample each time. */
TEST(test_engine_pass_cost_ignores_a_stall) {
    engine e = {.t_decode = 100e-6};
    double r = 0.33;
    engine_track_cost(&e, &r, 14 * 0.33 * 100e-6, 1);
    CHECK(fabs(r - 0.33 * (1 + 1.0 / 8)) < 1e-12);
    r = 0.33;
    engine_track_cost(&e, &r, 0.5 * 100e-6 * 3, 3); /* three passes of 0.5 steps: within twice, taken as they are */
    CHECK(fabs(r - (0.33 + (0.5 - 0.33) / 8)) < 1e-12);
    for (int i = 0; i < 40; i++) engine_track_cost(&e, &r, 1.2 * 100e-6, 1); /* a lasting rise to 1.2 is followed */
    CHECK(fabs(r - 1.2) < 0.01);
}

/* The draft model's catch-up (engine_catchup_pays): bought once the chain's
 * saving over the tokens generated so far covers it. CPU-like numbers:
 * 0.0127 decode steps a context token, a chain of value 2 (saves half a
 * step a token). After a 4,711-token prompt (~60 steps to take in) a
 * request waits until it has generated ~120 tokens — a 128-token answer
 * never pays the catch-up, which cost more than its whole decode — and a
 * request near its max_tokens never starts it; after a 50-token prompt the
 * catch-up (0.6 steps) is bought at the second token. */
TEST(test_engine_drafter_catchup_waits_until_it_can_pay) {
    engine e = {.t_decode = 1.9e-3, .drafter_catchup = 0.0127};
    double cost = 4711 * 0.0127; /* 59.8 decode steps */
    CHECK(!engine_catchup_pays(&e, 2.0, 4711, 0, 128));
    CHECK(!engine_catchup_pays(&e, 2.0, 4711, 100, 28));
    CHECK(!engine_catchup_pays(&e, 2.0, 4711, (int)(2 * cost) - 1, 1000));
    CHECK(engine_catchup_pays(&e, 2.0, 4711, (int)(2 * cost) + 1, 1000));
    CHECK(!engine_catchup_pays(&e, 2.0, 4711, 500, 20)); /* 20 tokens left: at most 10 steps saved */
    CHECK(!engine_catchup_pays(&e, 2.0, 50, 0, 1000));
    CHECK(engine_catchup_pays(&e, 2.0, 50, 2, 1000));
    /* a better chain buys sooner: value 4 saves 0.75 a step */
    CHECK(engine_catchup_pays(&e, 4.0, 4711, 80, 1000) && !engine_catchup_pays(&e, 2.0, 4711, 80, 1000));
}

/* A runtime gate's "off" is a back-off, not the rest of the request
 * (engine_src_off, engine_src_next): the MTP head turned off at token 10
 * starts again, judged afresh (its gate counts and this request's
 * acceptance of it zeroed), once the answer has grown by SPEC_RETRY_TOKENS;
 * turned off again, it waits twice as long. Meanwhile the next in turn (a
 * DFlash drafter on standby, or due) runs; a draft model still waiting to take in
 * its context gives way to the head's due retry and goes back on standby,
 * one that has taken it in keeps drafting. Each closing counts once in
 * gate_runtime_off. The request-wide gate's "off" comes back the same way;
 * the source it stopped waits on standby (engine_spec_off) and starts
 * first when drafting does, its own back-off untouched. */
TEST(test_engine_gates_retry_after_a_back_off) {
    static engine e;
    static seq_state s;
    e.cfg.mtp_depth = 3;
    e.cfg.drafter_len = 4;
    s.spec = true;
    s.use_mtp = true;
    s.standby[DRAFT_SRC_DFLASH] = s.standby[DRAFT_SRC_DRAFTER] = true;
    s.n_gen = 10;
    s.src_steps[DRAFT_SRC_MTP] = 8;
    s.est_try[DRAFT_SRC_MTP][0] = 13;
    s.est_hit[DRAFT_SRC_MTP][0] = 3;
    engine_src_off(&e, &s, DRAFT_SRC_MTP);
    engine_src_next(&e, &s); /* DFlash's turn */
    CHECK(!s.use_mtp && s.use_dflash && !s.use_drafter);
    engine_src_off(&e, &s, DRAFT_SRC_DFLASH);
    engine_src_next(&e, &s); /* the draft model's turn; it has yet to take in 4,711 tokens */
    CHECK(!s.use_mtp && !s.use_dflash && s.use_drafter);
    s.n_ctx = 4711 + 20;
    s.n_gen = 10 + SPEC_RETRY_TOKENS - 1;
    engine_src_next(&e, &s);
    CHECK(!s.use_mtp && s.use_drafter);
    s.n_gen = 10 + SPEC_RETRY_TOKENS;
    engine_src_next(&e, &s); /* the head is due: the waiting draft model steps back */
    CHECK(s.use_mtp && !s.use_drafter && s.standby[DRAFT_SRC_DRAFTER] && !s.use_dflash);
    CHECK_EQ_INT(s.src_steps[DRAFT_SRC_MTP], 0);
    CHECK_EQ_INT(s.est_try[DRAFT_SRC_MTP][0], 0);
    CHECK_EQ_INT(s.mtp_depth, 3);
    /* off again at token 50: back at 50 + 2 x SPEC_RETRY_TOKENS. DFlash, due since token 10 + SPEC_RETRY_TOKENS,
     * comes before the draft model; off again too, the draft model runs, and once it has taken in its context
     * it keeps drafting past the head's due retry */
    s.n_gen = 50;
    engine_src_off(&e, &s, DRAFT_SRC_MTP);
    engine_src_next(&e, &s);
    CHECK(!s.use_mtp && s.use_dflash && !s.use_drafter);
    engine_src_off(&e, &s, DRAFT_SRC_DFLASH);
    engine_src_next(&e, &s);
    CHECK(!s.use_mtp && !s.use_dflash && s.use_drafter);
    s.dseq.n_cached = s.n_ctx - 1;
    s.n_gen = 50 + 2 * SPEC_RETRY_TOKENS - 1;
    engine_src_next(&e, &s);
    CHECK(!s.use_mtp && s.use_drafter);
    CHECK_EQ_INT(s.retry_at[DRAFT_SRC_MTP], 50 + 2 * SPEC_RETRY_TOKENS);
    s.n_gen++;
    engine_src_next(&e, &s);
    CHECK(!s.use_mtp && s.use_drafter);
    engine_src_off(&e, &s, DRAFT_SRC_DRAFTER); /* its own gate: the first due source in turn order starts */
    engine_src_next(&e, &s);
    CHECK(s.use_mtp && !s.use_dflash && !s.use_drafter);
    CHECK_EQ_INT((int)atomic_load(&e.gate_runtime_off), 5); /* each closing counted once */
    /* the request-wide gate: off, then on again after its back-off. The
     * running head stops its passes and waits on standby (no back-off of
     * its own, not counted), and comes back first */
    int gap = s.retry_gap[DRAFT_SRC_MTP];
    engine_spec_off(&e, &s, "runtime gate");
    s.spec_retry_at = s.n_gen + SPEC_RETRY_TOKENS;
    s.gate_verify = 8;
    CHECK(!s.spec && !s.use_mtp && s.standby[DRAFT_SRC_MTP]);
    CHECK_EQ_INT(s.retry_gap[DRAFT_SRC_MTP], gap);
    CHECK_EQ_INT((int)atomic_load(&e.gate_runtime_off), 5);
    engine_src_next(&e, &s);
    CHECK(!s.spec && !s.use_mtp);
    s.n_gen += SPEC_RETRY_TOKENS;
    engine_src_next(&e, &s);
    CHECK(s.spec && !s.spec_off_by && s.gate_verify == 0);
    CHECK(s.use_mtp && !s.standby[DRAFT_SRC_MTP] && !s.use_dflash && !s.use_drafter);
}
