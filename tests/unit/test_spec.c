/* test_spec.c — speculative decoding (PLD, predicted outputs) is exact:
 * - PLD lookup and the prompt repetition score on hand-made sequences;
 * - the rejection rule on a hand-built p and a one-token q reproduces p;
 * - temperature 0: byte-identical tokens with speculation on and off for the
 *   first 20 prompts of each tinycoder workload (128 tokens), the gates
 *   forced open so drafts are really verified;
 * - temperature 1: the distribution of the first three sampled tokens with a
 *   fixed draft source (a prediction) matches plain sampling (chi-square,
 *   2,000 samples each);
 * - a prediction equal to the reference answer: identical output and at most
 *   a third of the target steps; a proposer failure mid-request falls back to
 *   plain decoding with the output unchanged;
 * - the model proposers take turns: with the MTP head, DFlash and a draft
 *   model loaded, only the head drafts, and with the head off only DFlash.
 * (Penalties, constraints and logprobs under speculation: test_row_choice.c.) */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "chat/chat_template.h"
#include "engine/engine.h"
#include "sample/sample.h"
#include "spec/pld.h"
#include "tok/tok.h"
#include "spec_fixture.h"
#include "test.h"

TEST(test_spec_pld_lookup_and_repetition_score) {
    int32_t ctx[] = {1, 2, 3, 4, 5, 6, 7, 1, 2, 3};
    int32_t out[8];
    /* last 3 tokens 1 2 3 occurred at 0: propose what followed */
    CHECK_EQ_INT(pld_propose(ctx, 10, 3, NULL, 0, 3, 4, 4, true, out), 4);
    CHECK(out[0] == 4 && out[1] == 5 && out[2] == 6 && out[3] == 7);
    /* no earlier occurrence of a 3- or 2-gram: no draft */
    int32_t novel[] = {9, 8, 7, 6, 5, 4};
    CHECK_EQ_INT(pld_propose(novel, 6, 2, NULL, 0, 3, 4, 4, true, out), 0);
    /* a prediction is searched first; at the start its prefix is proposed */
    int32_t pred[] = {40, 41, 42, 43, 44};
    CHECK_EQ_INT(pld_propose(novel, 6, 0, pred, 5, 3, 3, 3, true, out), 3);
    CHECK(out[0] == 40 && out[2] == 42);
    int32_t ctx2[] = {9, 8, 41, 42};
    CHECK_EQ_INT(pld_propose(ctx2, 4, 2, pred, 5, 3, 5, 5, true, out), 2);
    CHECK(out[0] == 43 && out[1] == 44);
    /* drafts from the sequence itself are capped separately from predictions */
    CHECK_EQ_INT(pld_propose(ctx, 10, 3, NULL, 0, 3, 4, 2, true, out), 2);
    CHECK_EQ_INT(pld_propose(novel, 6, 0, pred, 5, 3, 4, 1, true, out), 4);
    /* without prompt lookup only the prediction is a source */
    CHECK_EQ_INT(pld_propose(ctx, 10, 3, NULL, 0, 3, 4, 4, false, out), 0);
    /* the draft never runs past max_draft */
    CHECK_EQ_INT(pld_propose(ctx, 10, 3, NULL, 0, 3, 2, 2, true, out), 2);
    /* repetition score */
    CHECK_NEAR(pld_repetition_score(novel, 6), 0.0, 1e-12);
    int32_t rep[] = {1, 2, 3, 1, 2, 3, 1, 2, 3};
    CHECK_NEAR(pld_repetition_score(rep, 9), 4.0 / 7.0, 1e-12);
}

TEST(test_spec_rejection_rule_reproduces_p) {
    int32_t ids[4] = {10, 11, 12, 13};
    float p[4] = {0.5f, 0.3f, 0.15f, 0.05f};
    int drafts[3] = {11, 13, 99}; /* likely, unlikely, outside the support */
    for (int di = 0; di < 3; di++) {
        sample_rng rng;
        sample_rng_seed(&rng, 7 + di);
        int counts[4] = {0};
        int N = 200000;
        for (int i = 0; i < N; i++) {
            int t = sample_spec_accept(ids, p, 4, drafts[di], &rng);
            CHECK(t >= 10 && t <= 13);
            counts[t - 10]++;
        }
        for (int j = 0; j < 4; j++) {
            double f = (double)counts[j] / N, sd = sqrt(p[j] * (1 - p[j]) / N);
            CHECK_MSG(fabs(f - p[j]) < 5 * sd, "draft %d: token %d frequency %.4f, p %.4f", drafts[di], 10 + j, f, p[j]);
        }
    }
}

/* the only proposer in a run: prompt lookup, the draft model
 * (tinycoder/drafter) or the model's MTP head */
typedef enum { SRC_PLD, SRC_DRAFTER, SRC_MTP, SRC_DFLASH } spec_src;

/* tinycoder's DFlash drafter when src asks for it (NULL otherwise) */
static dflash *open_dflash(spec_src src, model *m) {
    dflash *d = NULL;
    if (src == SRC_DFLASH) CHECK(dflash_load(&d, test_shared_path("models/tinycoder/dflash"), m) == 0);
    return d;
}

static void greedy_identical(const char *device, spec_src src) {
    bool with_drafter = src == SRC_DRAFTER;
    fx f;
    if (!fx_open_on(&f, device)) return;
    model *dm = NULL;
    if (with_drafter) {
        const char *ddir = test_shared_path("models/tinycoder/drafter");
        if (!ddir) {
            printf("    (drafter variant not run: models/tinycoder/drafter not found)\n");
            fx_close(&f);
            return;
        }
        CHECK(model_load(&dm, ddir, f.be) == 0);
        if (!dm) { fx_close(&f); return; }
    }
    dflash *fl = open_dflash(src, f.m);
    engine *e = NULL;
    engine_config ec = {.max_concurrent = 4, .prefill_chunk = 256, .ctx_size = 1024, .pld = src == SRC_PLD,
                        .spec_min_repetition = 0.0 /* gates open: verify drafts everywhere */,
                        .no_runtime_gates = true,
                        .drafter = dm, .drafter_len = 4, .mtp = src == SRC_MTP, .mtp_depth = 3, .dflash = fl};
    CHECK(engine_start(&e, f.m, f.tk, &ec) == 0);
    const char *files[3] = {"models/tinycoder/prompts/edit.jsonl", "models/tinycoder/prompts/chat.jsonl",
                            "models/tinycoder/prompts/completion.jsonl"};
    long long drafted = 0, accepted = 0;
    int compared = 0;
    for (int fi = 0; fi < 3; fi++)
        for (int base = 0; base < 20; base += 4) {
            engine_req *on[4] = {0}, *off[4] = {0};
            int32_t *ids[4] = {0};
            int n[4] = {0};
            for (int i = 0; i < 4; i++) {
                ids[i] = workload_prompt(&f, files[fi], base + i, &n[i], NULL);
                if (!ids[i] || n[i] + 130 > 1024) continue;
                engine_params pon = params(128, 1), poff = params(128, 0);
                pon.mtp = 1;
                on[i] = engine_submit(e, ids[i], n[i], &pon);
                off[i] = engine_submit(e, ids[i], n[i], &poff);
            }
            for (int i = 0; i < 4; i++) {
                if (!on[i]) { free(ids[i]); continue; }
                run_out a, b;
                collect(on[i], &a);
                collect(off[i], &b);
                CHECK_MSG(a.n == b.n && !memcmp(a.toks, b.toks, (size_t)a.n * 4),
                          "%s line %d: output with speculation differs (%d vs %d tokens)", files[fi], base + i, a.n, b.n);
                CHECK_EQ_INT(b.drafted, 0);
                drafted += a.drafted;
                accepted += a.accepted;
                compared++;
                free(ids[i]);
            }
        }
    engine_stats st;
    engine_get_stats(e, &st);
    printf("    %d prompts identical; %lld drafted, %lld accepted (%.0f%%); %lld DFlash blocks behind their verify\n",
           compared, drafted, accepted, drafted ? 100.0 * accepted / drafted : 0.0, st.dflash_behind_steps);
    CHECK(compared >= 50);
    CHECK(accepted > 100); /* drafts were really verified and accepted */
    engine_stop(e);
    dflash_free(fl);
    model_free(dm);
    fx_close(&f);
}

TEST(test_spec_greedy_is_byte_identical_on_workloads) {
    SKIP_WITHOUT_PROMPTS("edit.jsonl");
    greedy_identical("cpu", SRC_PLD);
}

TEST(test_spec_drafter_greedy_is_byte_identical_on_workloads) {
    if (!test_shared_path("models/tinycoder/drafter")) SKIP("../shared/models/tinycoder/drafter not found");
    SKIP_WITHOUT_PROMPTS("edit.jsonl");
    greedy_identical("cpu", SRC_DRAFTER);
}

TEST(test_spec_mtp_greedy_is_byte_identical_on_workloads) {
    SKIP_WITHOUT_PROMPTS("edit.jsonl");
    greedy_identical("cpu", SRC_MTP);
}

TEST(test_spec_dflash_greedy_is_byte_identical_on_workloads) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    SKIP_WITHOUT_PROMPTS("edit.jsonl");
    greedy_identical("cpu", SRC_DFLASH);
}

TEST(test_cuda_spec_greedy_is_byte_identical_on_workloads) {
    SKIP_WITHOUT_PROMPTS("edit.jsonl");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    greedy_identical("cuda", SRC_PLD);
    greedy_identical("cuda", SRC_DRAFTER);
    greedy_identical("cuda", SRC_MTP);
    if (test_shared_path("models/tinycoder/dflash")) greedy_identical("cuda", SRC_DFLASH);
}

/* Sampling at temperature 1 with drafts from `src` (SRC_PLD here means a
 * fixed prediction: the greedy continuation) against plain sampling, on
 * `device` (CUDA: both arms drawn on the device, backend sample_rows). */
static void sampling_matches_plain(const char *device, spec_src src, int N) {
    fx f;
    if (!fx_open_on(&f, device)) return;
    model *dm = NULL;
    if (src == SRC_DRAFTER) CHECK(model_load(&dm, test_shared_path("models/tinycoder/drafter"), f.be) == 0);
    dflash *fl = open_dflash(src, f.m);
    engine *e = NULL;
    engine_config ec = {.max_concurrent = 16, .prefill_chunk = 512, .ctx_size = 64, .pld = src == SRC_PLD,
                        .spec_min_repetition = 0.0, .no_runtime_gates = true, .drafter = dm, .drafter_len = 3, .mtp = src == SRC_MTP,
                        .mtp_depth = 2, .dflash = fl};
    CHECK(engine_start(&e, f.m, f.tk, &ec) == 0);
    const char *prompt = "def add(a, b):\n";
    int32_t *ids;
    int n;
    CHECK(tok_encode(f.tk, prompt, strlen(prompt), true, &ids, &n) == 0);
    /* a fixed draft source: the greedy continuation as a prediction */
    engine_params g = params(3, 0);
    run_out greedy;
    collect(engine_submit(e, ids, n, &g), &greedy);
    int32_t *pred = malloc(3 * sizeof *pred);
    int n_pred = greedy.n;
    memcpy(pred, greedy.toks, (size_t)n_pred * sizeof *pred);
    int V = tok_vocab_size(f.tk);
    int *c_plain[3], *c_spec[3];
    for (int pos = 0; pos < 3; pos++) {
        c_plain[pos] = calloc((size_t)V, sizeof(int));
        c_spec[pos] = calloc((size_t)V, sizeof(int));
    }
    const int B = 16;
    long long accepted = 0;
    for (int arm = 0; arm < 2; arm++)
        for (int i0 = 0; i0 < N; i0 += B) {
            engine_req *rs[B];
            for (int i = 0; i < B; i++) {
                engine_params p = params(3, arm);
                p.sp.temperature = 1.0f;
                p.sp.top_k = 0;
                p.sp.top_p = 1.0f;
                p.seed = 1000003ull * (uint64_t)(i0 + i) + 17 + (uint64_t)arm * 7919;
                p.mtp = arm;
                if (arm && src == SRC_PLD) {
                    p.prediction = pred;
                    p.n_prediction = n_pred;
                }
                rs[i] = engine_submit(e, ids, n, &p);
            }
            for (int i = 0; i < B; i++) {
                run_out o;
                collect(rs[i], &o);
                accepted += o.accepted;
                for (int pos = 0; pos < 3 && pos < o.n; pos++) (arm ? c_spec : c_plain)[pos][o.toks[pos]]++;
            }
        }
    for (int pos = 0; pos < 3; pos++) {
        int df;
        double x = chi2(c_plain[pos], c_spec[pos], V, &df);
        printf("    position %d: chi-square %.1f, df %d, critical (p=0.001) %.1f\n", pos, x, df,
               df > 0 ? chi2_crit(df) : 0.0);
        CHECK(df >= 1);
        CHECK_MSG(df < 1 || x < chi2_crit(df), "position %d: sampled distributions differ (chi2 %.1f, df %d)", pos, x, df);
        free(c_plain[pos]);
        free(c_spec[pos]);
    }
    static const char *names[] = {"prediction", "drafter", "MTP", "DFlash"};
    printf("    %s: %lld draft tokens accepted over %d sampled requests\n", names[src], accepted, N);
    CHECK(accepted > N / 20); /* the draft path was really exercised */
    CHECK(accepted < 2 * N);  /* ...and rejections happened too */
    free(ids);
    free(pred);
    engine_stop(e);
    dflash_free(fl);
    model_free(dm);
    fx_close(&f);
}

TEST(test_spec_sampling_distribution_matches_plain) {
    if (!test_shared_path("models/tinycoder")) SKIP("../shared/models/tinycoder not found");
    sampling_matches_plain("cpu", SRC_PLD, 2000);
}

TEST(test_spec_mtp_and_drafter_sampling_distribution_matches_plain) {
    if (!test_shared_path("models/tinycoder/drafter")) SKIP("../shared/models/tinycoder not found");
    sampling_matches_plain("cpu", SRC_MTP, 1000);
    sampling_matches_plain("cpu", SRC_DRAFTER, 1000);
}

TEST(test_spec_dflash_sampling_distribution_matches_plain) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    sampling_matches_plain("cpu", SRC_DFLASH, 1000);
}

TEST(test_spec_prediction_and_proposer_failure) {
    fx f;
    if (!fx_open(&f)) SKIP("../shared/models/tinycoder not found");
    engine *e = NULL;
    engine_config ec = {.max_concurrent = 2, .prefill_chunk = 512, .ctx_size = 1024, .pld = true,
                        .spec_min_repetition = 0.0, .no_runtime_gates = true};
    CHECK(engine_start(&e, f.m, f.tk, &ec) == 0);
    char *ref = NULL;
    int n;
    int32_t *ids = workload_prompt(&f, "models/tinycoder/prompts/edit.jsonl", 0, &n, &ref);
    CHECK(ids && ref);
    if (ids && ref) {
        engine_params plain = params(200, 0);
        run_out base, with_pred, failing;
        collect(engine_submit(e, ids, n, &plain), &base);
        /* the plain output itself as the prediction: all of it is accepted */
        engine_params pp = params(200, 1);
        pp.prediction = base.toks;
        pp.n_prediction = base.n;
        collect(engine_submit(e, ids, n, &pp), &with_pred);
        CHECK(with_pred.n == base.n && !memcmp(with_pred.toks, base.toks, (size_t)base.n * 4));
        int steps = with_pred.n - with_pred.accepted;
        printf("    prediction: %d tokens in %d target steps (%.1fx fewer)\n", with_pred.n, steps,
               (double)with_pred.n / (steps ? steps : 1));
        CHECK(steps * 3 <= with_pred.n);
        /* the reference answer as the prediction: output unchanged */
        int32_t *rid;
        int nr;
        CHECK(tok_encode(f.tk, ref, strlen(ref), false, &rid, &nr) == 0);
        pp.prediction = rid;
        pp.n_prediction = nr;
        run_out with_ref;
        collect(engine_submit(e, ids, n, &pp), &with_ref);
        CHECK(with_ref.n == base.n && !memcmp(with_ref.toks, base.toks, (size_t)base.n * 4));
        free(rid);
        /* the proposer fails after 3 drafts: plain decoding, same output */
        pld_test_fail_after(3);
        engine_params pf = params(200, 1);
        collect(engine_submit(e, ids, n, &pf), &failing);
        pld_test_fail_after(-1);
        CHECK(failing.n == base.n && !memcmp(failing.toks, base.toks, (size_t)base.n * 4));
    }
    free(ids);
    free(ref);
    engine_stop(e);
    fx_close(&f);
}

/* a seeded request at temperature 0.8 / top-p 0.95 gives the same text
 * with speculation on and off (every committed token consumes one draw of
 * the request's stream), on `device`, drafting with lookup and the MTP head
 * (src SRC_MTP) or DFlash (SRC_DFLASH: one sequence, so its blocks go behind
 * their verify); different seeds, different texts */
static void seeded_identical_on_and_off(const char *device, spec_src src) {
    fx f;
    if (!fx_open_on(&f, device)) return;
    dflash *fl = open_dflash(src, f.m);
    engine *e = NULL;
    engine_config ec = {.max_concurrent = 4, .prefill_chunk = 512, .ctx_size = 1024, .pld = true,
                        .spec_min_repetition = 0.0, .no_runtime_gates = true, .mtp = src == SRC_MTP, .mtp_depth = 3,
                        .dflash = fl};
    CHECK(engine_start(&e, f.m, f.tk, &ec) == 0);
    int n;
    int32_t *ids = workload_prompt(&f, "models/tinycoder/prompts/edit.jsonl", 2, &n, NULL);
    CHECK(ids != NULL);
    long long drafted = 0;
    int distinct = 0, same = 0;
    run_out first;
    for (int seed = 1; ids && seed <= 6; seed++) {
        engine_params on = params(96, 1), off = params(96, 0);
        on.mtp = src == SRC_MTP;
        on.sp.temperature = off.sp.temperature = 0.8f;
        on.sp.top_p = off.sp.top_p = 0.95f;
        on.seed = off.seed = (uint64_t)seed;
        run_out a, b;
        collect(engine_submit(e, ids, n, &on), &a);
        collect(engine_submit(e, ids, n, &off), &b);
        bool eq = a.n == b.n && !memcmp(a.toks, b.toks, (size_t)a.n * 4);
        CHECK_MSG(eq, "%s seed %d: sampled text differs", device, seed);
        same += eq;
        if (seed == 1) first = a;
        else distinct += a.n != first.n || memcmp(a.toks, first.toks, (size_t)a.n * 4) != 0;
        drafted += a.drafted;
    }
    engine_stats st;
    engine_get_stats(e, &st);
    printf("    %s, %s: %d of 6 seeds identical with speculation on and off, %d of 5 differ from seed 1's text, %lld "
           "drafted, %lld DFlash blocks behind their verify\n",
           device, src == SRC_MTP ? "MTP" : "DFlash", same, distinct, drafted, st.dflash_behind_steps);
    CHECK(drafted > 50);
    CHECK(distinct >= 1); /* (the seeds matter: tinycoder is sure of most tokens, 2 of 5 differ on the CPU) */
    free(ids);
    engine_stop(e);
    dflash_free(fl);
    fx_close(&f);
}

TEST(test_spec_seeded_sampling_identical_on_and_off) {
    if (!test_shared_path("models/tinycoder")) SKIP("../shared/models/tinycoder not found");
    seeded_identical_on_and_off("cpu", SRC_MTP);
}

/* the same with the rows drawn by the backend (the CPU with a sample_rows
 * op): the engine's uniforms for them, one per row ahead in the stream and
 * one taken per committed token, keep the text the same with speculation on
 * and off */
TEST(test_spec_seeded_sampling_identical_with_rows_sampled_by_the_backend) {
    if (!test_shared_path("models/tinycoder")) SKIP("../shared/models/tinycoder not found");
    seeded_identical_on_and_off("cpu+sample_rows", SRC_MTP);
    if (test_shared_path("models/tinycoder/dflash")) seeded_identical_on_and_off("cpu+sample_rows", SRC_DFLASH);
}

/* ... and sampling with drafts keeps plain sampling's distribution */
TEST(test_spec_sampling_distribution_with_rows_sampled_by_the_backend) {
    if (!test_shared_path("models/tinycoder")) SKIP("../shared/models/tinycoder not found");
    sampling_matches_plain("cpu+sample_rows", SRC_PLD, 2000);
    sampling_matches_plain("cpu+sample_rows", SRC_MTP, 1000);
}

/* the same on the GPU, where the draws are made on the device */
TEST(test_cuda_spec_seeded_sampling_identical_on_and_off) {
    if (!test_shared_path("models/tinycoder")) SKIP("../shared/models/tinycoder not found");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    seeded_identical_on_and_off("cuda", SRC_MTP);
    if (test_shared_path("models/tinycoder/dflash")) seeded_identical_on_and_off("cuda", SRC_DFLASH);
}

/* spec sampling's distribution equals plain sampling's with the draws on the device */
TEST(test_cuda_spec_sampling_distribution_matches_plain) {
    if (!test_shared_path("models/tinycoder")) SKIP("../shared/models/tinycoder not found");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    sampling_matches_plain("cuda", SRC_PLD, 2000);
    sampling_matches_plain("cuda", SRC_MTP, 1000);
}

/* tinycoder with its draft model and DFlash drafter (every model
 * proposer); false, nothing open, when they are not there */
static bool open_all_proposers(fx *f, const char *device, model **dm, dflash **fl) {
    if (!test_shared_path("models/tinycoder/drafter") || !test_shared_path("models/tinycoder/dflash") ||
        !fx_open_on(f, device))
        return false;
    CHECK(model_load(dm, test_shared_path("models/tinycoder/drafter"), f->be) == 0);
    *fl = open_dflash(SRC_DFLASH, f->m);
    return true;
}

/* The model proposers take turns within a request: with the MTP head, a
 * DFlash drafter and a draft model all loaded (the gates held open, so
 * nothing turns itself off), a request drafts with the head only; a request
 * that turns the head off (enable_mtp false) drafts with DFlash only; the
 * draft model waits behind both. Output equals plain decoding either way. */
TEST(test_spec_model_proposers_take_turns) {
    fx f;
    model *dm = NULL;
    dflash *fl = NULL;
    if (!open_all_proposers(&f, "cpu", &dm, &fl)) SKIP("../shared/models/tinycoder (with drafter/ and dflash/) not found");
    engine *e = NULL;
    engine_config ec = {.max_concurrent = 2, .prefill_chunk = 256, .ctx_size = 1024, .pld = false,
                        .spec_min_repetition = 0.0, .no_runtime_gates = true, .drafter = dm, .drafter_len = 4,
                        .mtp = true, .mtp_depth = 3, .dflash = fl};
    CHECK(dm && fl && engine_start(&e, f.m, f.tk, &ec) == 0);
    int n = 0;
    int32_t *ids = workload_prompt(&f, "models/tinycoder/prompts/completion.jsonl", 0, &n, NULL);
    CHECK(ids != NULL);
    if (!e || !ids) goto out;
    engine_params pplain = params(96, 0), pon = params(96, 1), pnohead = params(96, 1);
    pon.mtp = -1;    /* the server default: on */
    pnohead.mtp = 0; /* enable_mtp: false */
    run_out plain, head, block;
    engine_stats s0, s1, s2;
    collect(engine_submit(e, ids, n, &pplain), &plain);
    engine_get_stats(e, &s0);
    collect(engine_submit(e, ids, n, &pon), &head);
    engine_get_stats(e, &s1);
    collect(engine_submit(e, ids, n, &pnohead), &block);
    engine_get_stats(e, &s2);
    /* drafts of each model proposer while the head ran first (s0 -> s1) and with the head off (s1 -> s2) */
#define DRAFTS(a, b, src) ((b).src_drafted[src] - (a).src_drafted[src])
    printf("    head first: MTP %lld, DFlash %lld, draft model %lld drafts; head off: MTP %lld, DFlash %lld, draft "
           "model %lld\n", DRAFTS(s0, s1, DRAFT_SRC_MTP), DRAFTS(s0, s1, DRAFT_SRC_DFLASH),
           DRAFTS(s0, s1, DRAFT_SRC_DRAFTER), DRAFTS(s1, s2, DRAFT_SRC_MTP), DRAFTS(s1, s2, DRAFT_SRC_DFLASH),
           DRAFTS(s1, s2, DRAFT_SRC_DRAFTER));
    CHECK(DRAFTS(s0, s1, DRAFT_SRC_MTP) > 0);
    CHECK_EQ_INT((int)DRAFTS(s0, s1, DRAFT_SRC_DFLASH), 0);
    CHECK_EQ_INT((int)DRAFTS(s0, s1, DRAFT_SRC_DRAFTER), 0);
    CHECK_EQ_INT((int)DRAFTS(s1, s2, DRAFT_SRC_MTP), 0);
    CHECK(DRAFTS(s1, s2, DRAFT_SRC_DFLASH) > 0);
    CHECK_EQ_INT((int)DRAFTS(s1, s2, DRAFT_SRC_DRAFTER), 0);
#undef DRAFTS
    CHECK(plain.n > 0 && head.n == plain.n && block.n == plain.n);
    CHECK(!memcmp(head.toks, plain.toks, (size_t)plain.n * 4) && !memcmp(block.toks, plain.toks, (size_t)plain.n * 4));
out:
    free(ids);
    if (e) engine_stop(e);
    dflash_free(fl);
    model_free(dm);
    fx_close(&f);
}

/* Auto mode as served: prompt lookup, the MTP head, a DFlash drafter and a
 * draft model, the runtime gates on — their closings and back-offs
 * (SPEC_RETRY_TOKENS: a proposer or the request's drafting starting again,
 * a draft model giving way) follow measured costs, so they vary run to run,
 * and the output must not: each request's text equals plain decoding's. A
 * ~3,000-token prompt (workload prompts one after another) with a
 * 256-token answer, where the first drafts are rarely accepted (gates
 * close early and reopen), and the workloads' prompts with 160 tokens; on
 * the CPU and, where there is one, on a GPU. */
static void auto_with_gates_identical(const char *device) {
    fx f;
    model *dm = NULL;
    dflash *fl = NULL;
    if (!open_all_proposers(&f, device, &dm, &fl)) {
        printf("    (not run: ../shared/models/tinycoder with drafter/ and dflash/ not found)\n");
        return;
    }
    engine *e = NULL;
    engine_config ec = {.max_concurrent = 4, .prefill_chunk = 512, .ctx_size = 4096, .pld = true,
                        .spec_min_repetition = 0.0, .drafter = dm, .drafter_len = 4, .mtp = true, .mtp_depth = 3,
                        .dflash = fl};
    CHECK(dm && fl && engine_start(&e, f.m, f.tk, &ec) == 0);
    const char *files[3] = {"models/tinycoder/prompts/completion.jsonl", "models/tinycoder/prompts/chat.jsonl",
                            "models/tinycoder/prompts/edit.jsonl"};
    int32_t *lng = malloc(3200 * sizeof *lng);
    int n_long = 0, compared = 0;
    long long drafted = 0;
    for (int fi = 0; fi < 3 && lng; fi++)
        for (int line = 0; line < 20 && n_long < 3000; line++) {
            int n = 0;
            int32_t *ids = workload_prompt(&f, files[fi], line, &n, NULL);
            if (ids && n_long + n <= 3200) {
                memcpy(lng + n_long, ids, (size_t)n * sizeof *ids);
                n_long += n;
            }
            free(ids);
        }
    CHECK(e && n_long >= 2000);
    if (!e || n_long < 2000) goto out;
    for (int round = 0; round < 1 + 3 * 4; round++) {
        int n = 0;
        int32_t *ids = round ? workload_prompt(&f, files[(round - 1) / 4], (round - 1) % 4, &n, NULL) : lng;
        if (!round) n = n_long;
        if (!ids) continue;
        engine_params pon = params(round ? 160 : 256, -1), poff = params(round ? 160 : 256, 0);
        pon.mtp = poff.mtp = -1;
        if (!round) pon.n_eos = poff.n_eos = 0; /* the whole 256 tokens */
        run_out a, b;
        collect(engine_submit(e, ids, n, &pon), &a);
        collect(engine_submit(e, ids, n, &poff), &b);
        CHECK_MSG(a.n == b.n && !memcmp(a.toks, b.toks, (size_t)a.n * 4),
                  "request %d (%d prompt tokens): auto's output differs from plain decoding's (%d vs %d tokens)", round,
                  n, a.n, b.n);
        CHECK_EQ_INT(b.drafted, 0);
        drafted += a.drafted;
        compared++;
        if (round) free(ids);
    }
    engine_stats st;
    engine_get_stats(e, &st);
    printf("    [%s] %d requests identical (the first with a %d-token prompt); %lld drafted; runtime gates closed %lld "
           "times, reopened %lld\n", device, compared, n_long, drafted, st.gate_runtime_off, st.gate_retries);
    CHECK_EQ_INT(compared, 13);
    CHECK(drafted > 0);
out:
    free(lng);
    if (e) engine_stop(e);
    dflash_free(fl);
    model_free(dm);
    fx_close(&f);
}

TEST(test_spec_auto_with_gates_is_byte_identical) {
    auto_with_gates_identical("cpu");
}

TEST(test_cuda_spec_auto_with_gates_is_byte_identical) {
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    auto_with_gates_identical("cuda");
}
