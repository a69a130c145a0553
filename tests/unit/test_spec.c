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
 *   model loaded, only the head drafts, and with the head off only DFlash;
 * - penalties and logit_bias (applied by the backend, drafts counted row by
 *   row): greedy text equal to a plain decode under the host's rule, and the
 *   same with speculation on and off, greedy and seeded. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "chat/chat_template.h"
#include "engine/engine.h"
#include "sample/sample.h"
#include "sample/token_mask.h"
#include "spec/pld.h"
#include "tok/tok.h"
#include "penalty_cases.h"
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

typedef struct {
    backend *be;
    model *m;
    tokenizer *tk;
    chat_template *ct;
} fx;

/* The CPU backend with a sample_rows op (as CUDA has it), so that the
 * engine hands it the rows of sampled requests with their uniforms — the
 * engine's side of sampling on the device, run without a GPU. Each row: the
 * host's distribution (sample_dist) drawn at u (sample_draw_u). */
static sampler *rows_smp;
static float *rows_copy;
static void host_sample_rows(backend *be, int32_t *out, const float *in, int cols, const bk_sample_row *rows, int n) {
    if (!rows_smp) rows_smp = sampler_new(cols), rows_copy = malloc((size_t)cols * sizeof *rows_copy);
    for (int i = 0; i < n; i++) {
        sample_params sp;
        sample_params_default(&sp);
        sp.temperature = rows[i].temperature, sp.top_k = rows[i].top_k, sp.top_p = rows[i].top_p,
        sp.min_p = rows[i].min_p;
        memcpy(rows_copy, in + (size_t)rows[i].row * cols, (size_t)cols * sizeof *rows_copy);
        const int32_t *ids;
        const float *probs;
        int k = sample_dist(rows_smp, &sp, rows_copy, &ids, &probs);
        out[rows[i].row] = sample_draw_u(ids, probs, k, rows[i].u);
    }
}
static backend_ops cpu_sampling_ops;

static int fx_open_on(fx *f, const char *device) {
    memset(f, 0, sizeof *f);
    const char *dir = test_shared_path("models/tinycoder");
    if (!dir) return 0;
    bool rows = !strcmp(device, "cpu+sample_rows");
    CHECK(backend_new(&f->be, rows ? "cpu" : device, 2) == 0);
    if (!f->be) return 0;
    if (rows) {
        cpu_sampling_ops = *f->be->ops;
        cpu_sampling_ops.sample_rows = host_sample_rows;
        f->be->ops = &cpu_sampling_ops;
    }
    CHECK(model_load(&f->m, dir, f->be) == 0);
    CHECK(tok_load(&f->tk, dir) == 0);
    CHECK(chat_template_load(&f->ct, dir) == 0);
    return f->m && f->tk && f->ct;
}

static int fx_open(fx *f) { return fx_open_on(f, "cpu"); }

static void fx_close(fx *f) {
    chat_template_free(f->ct);
    tok_free(f->tk);
    model_free(f->m);
    backend_free(f->be);
}

/* prompt ids of line i of a workload (chat ones through the template) */
static int32_t *workload_prompt(fx *f, const char *file, int line, int *n, char **reference) {
    const char *path = test_shared_path(file);
    if (!path) return NULL;
    FILE *fp = fopen(path, "r");
    if (!fp) return NULL;
    char *buf = NULL;
    size_t cap = 0;
    ssize_t len = 0;
    for (int i = 0; i <= line; i++)
        if ((len = getline(&buf, &cap, fp)) < 0) break;
    fclose(fp);
    int32_t *ids = NULL;
    if (len > 0) {
        json_t *j = json_loadb(buf, (size_t)len, 0, NULL);
        json_t *msgs = json_object_get(j, "messages");
        if (reference) {
            const char *r = json_string_value(json_object_get(j, "reference"));
            *reference = r ? strdup(r) : NULL;
        }
        if (msgs) {
            char *text = NULL;
            if (chat_template_apply(f->ct, msgs, NULL, true, NULL, &text) == 0)
                tok_encode(f->tk, text, strlen(text), false, &ids, n);
            free(text);
        } else {
            const char *p = json_string_value(json_object_get(j, "prompt"));
            if (p) tok_encode(f->tk, p, strlen(p), true, &ids, n);
        }
        json_decref(j);
    }
    free(buf);
    return ids;
}

typedef struct {
    int32_t toks[256];
    int n, drafted, accepted;
} run_out;

static void collect(engine_req *r, run_out *o) {
    memset(o, 0, sizeof *o);
    engine_event ev;
    for (;;) {
        engine_next_event(r, &ev, -1);
        if (ev.type == ENGINE_EV_TOKEN && o->n < 256) o->toks[o->n++] = ev.token;
        CHECK(ev.type != ENGINE_EV_ERROR);
        if (ev.type == ENGINE_EV_DONE) {
            o->drafted = ev.n_drafted;
            o->accepted = ev.n_accepted;
        }
        int end = ev.type != ENGINE_EV_TOKEN;
        engine_event_clear(&ev);
        if (end) break;
    }
    engine_req_release(r);
}

static engine_params params(int n, int spec) {
    engine_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = n;
    sample_params_default(&p.sp);
    p.sp.temperature = 0;
    p.spec = spec;
    p.eos[0] = 8183; /* <|im_end|> */
    p.eos[1] = 8181;
    p.n_eos = 2;
    return p;
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
    if (!test_shared_path("models/tinycoder/prompts/edit.jsonl")) SKIP("../shared/models/tinycoder/prompts not found");
    greedy_identical("cpu", SRC_PLD);
}

/* tokens and their log-probabilities (5 alternatives) of one request */
typedef struct {
    int n;
    int32_t toks[128];
    float lp[128], top[128][5];
    int32_t top_id[128][5];
} lp_out;

static void collect_lp(engine_req *r, lp_out *o) {
    memset(o, 0, sizeof *o);
    engine_event ev;
    for (;;) {
        engine_next_event(r, &ev, -1);
        CHECK(ev.type != ENGINE_EV_ERROR);
        if (ev.type == ENGINE_EV_TOKEN && o->n < 128) {
            CHECK_EQ_INT(ev.n_top, 5);
            o->toks[o->n] = ev.token;
            o->lp[o->n] = ev.logprob;
            for (int k = 0; k < 5 && k < ev.n_top; k++) o->top[o->n][k] = ev.top_logprobs[k], o->top_id[o->n][k] = ev.top_ids[k];
            o->n++;
        }
        int end = ev.type != ENGINE_EV_TOKEN;
        engine_event_clear(&ev);
        if (end) break;
    }
    engine_req_release(r);
}

static bool lp_same(const lp_out *a, const lp_out *b) {
    return a->n == b->n && !memcmp(a->toks, b->toks, sizeof a->toks) && !memcmp(a->lp, b->lp, sizeof a->lp) &&
           !memcmp(a->top, b->top, sizeof a->top) && !memcmp(a->top_id, b->top_id, sizeof a->top_id);
}

/* Greedy decode of up to n tokens after ids[0..n_ids) with model_forward
 * one token at a time, each row under the plain rules: penalised by
 * penalty_cases.h's rule over the context so far (p's penalties and
 * logit_bias), then masked by constraint c when there is one (the
 * end-of-sequence tokens allowed once the document may end); the
 * log-probabilities (5 alternatives) from the row as the model computed
 * it. What the engine must give, however it gets there. */
static void reference_decode(fx *f, const int32_t *ids, int n_ids, const engine_params *p, const json_constraint *c,
                             int n, lp_out *o) {
    model *m = f->m;
    int V = m->cfg.vocab_size;
    memset(o, 0, sizeof *o);
    token_mask *tm = c ? token_mask_new(f->tk, V) : NULL;
    jc_state st;
    if (c) jc_start(&st, c, 0);
    kv_cache kv;
    kv_seq ks = {0};
    kv_seq *seqs[1] = {&ks};
    int32_t *ctx = malloc((size_t)(n_ids + n) * 4), *pos = malloc((size_t)(n_ids + n) * 4),
            *seq = calloc((size_t)(n_ids + n), 4);
    float *logits = malloc((size_t)V * 4), *raw = malloc((size_t)V * 4);
    uint8_t *allowed = malloc((size_t)V);
    CHECK((tm || !c) && model_kv_init(m, &kv, n_ids + n + 16) == 0);
    memcpy(ctx, ids, (size_t)n_ids * 4);
    for (int i = 0; i < n_ids + n; i++) pos[i] = i;
    int at = 0, len = n_ids;
    while ((tm || !c) && o->n < n && o->n < 128) {
        CHECK(kv_seq_reserve(&kv, &ks, len) == 0);
        int32_t last = len - at - 1;
        model_batch b = {.n_tokens = len - at, .tokens = ctx + at, .pos = pos + at, .seq = seq, .n_seqs = 1,
                         .seqs = seqs, .n_logits = 1, .logit_rows = &last};
        if (model_forward(m, &kv, &b, logits) != 0) break;
        at = len;
        memcpy(raw, logits, (size_t)V * 4);
        pen_reference(logits, V, ctx, len, n_ids, &p->sp, p->logit_bias_id, p->logit_bias, p->n_logit_bias);
        if (c) {
            int allowed_n = token_mask_fill(tm, &st, allowed);
            for (int k = 0; k < p->n_eos && jc_can_end(&st); k++)
                allowed_n += !allowed[p->eos[k]], allowed[p->eos[k]] = 1;
            if (!allowed_n) break;
            for (int i = 0; i < V; i++)
                if (!allowed[i]) logits[i] = -INFINITY;
        }
        int t = sample_argmax(logits, V);
        if (t == p->eos[0] || t == p->eos[1] || (c && !token_mask_feed(tm, &st, t))) break;
        bk_logprobs lp;
        bk_logprob_row(raw, V, t, 5, &lp);
        o->toks[o->n] = t;
        o->lp[o->n] = lp.logit - lp.lz;
        for (int k = 0; k < 5; k++) o->top[o->n][k] = lp.top[k] - lp.lz, o->top_id[o->n][k] = lp.top_id[k];
        o->n++;
        ctx[len++] = t;
        if (c && jc_finished(&st)) break;
    }
    kv_seq_release(&kv, &ks);
    kv_cache_free(&kv);
    token_mask_free(tm);
    free(ctx); free(pos); free(seq); free(logits); free(raw); free(allowed);
}

/* A JSON-constrained answer (a schema with enums, integers and free
 * strings) is the same with speculation on and off — greedy and seeded
 * sampled — while prompt lookup and the MTP head draft under the gates held
 * open: verify steps choose through the constraint as plain decoding does.
 * Each answer is a document jansson parses. A greedy answer with logprobs
 * is the same, tokens and values, as a plain decode under the rule gives
 * (the argmax taken when allowed, a row fetched when refused, logprobs from
 * the backend with the host's choice's logit fetched). On a backend that
 * samples, the sampled rows are masked there (masks sent with the step). */
static void json_constraint_exact(const char *device) {
    fx f;
    if (!fx_open_on(&f, device)) return;
    char err[200];
    json_t *schema = json_loads("{\"type\":\"object\",\"properties\":{\"language\":{\"enum\":[\"python\",\"c\"]},"
                                "\"year\":{\"type\":\"integer\"},\"summary\":{\"type\":\"string\"}},"
                                "\"required\":[\"language\",\"year\",\"summary\"]}", 0, NULL);
    json_constraint *c = jc_compile(schema, err, sizeof err);
    CHECK_MSG(c != NULL, "%s", err);
    engine *e = NULL;
    engine_config ec = {.max_concurrent = 4, .prefill_chunk = 256, .ctx_size = 1024, .pld = true,
                        .spec_min_repetition = 0.0, .no_runtime_gates = true, .mtp = true, .mtp_depth = 3};
    CHECK(c && engine_start(&e, f.m, f.tk, &ec) == 0);
    long long drafted = 0, accepted = 0;
    int compared = 0, parsed = 0;
    for (int line = 0; e && line < 16; line++) {
        int n = 0;
        int32_t *ids = workload_prompt(&f, "models/tinycoder/prompts/chat.jsonl", line, &n, NULL);
        if (!ids || n + 130 > 1024) {
            free(ids);
            continue;
        }
        for (int sampled = 0; sampled < 2; sampled++) {
            engine_params pon = params(120, 1), poff = params(120, 0);
            pon.mtp = 1;
            pon.constraint = poff.constraint = c;
            if (sampled) {
                pon.sp.temperature = poff.sp.temperature = 0.8f;
                pon.seed = poff.seed = 1000 + (uint64_t)line;
            }
            run_out a, b;
            collect(engine_submit(e, ids, n, &pon), &a);
            collect(engine_submit(e, ids, n, &poff), &b);
            CHECK_MSG(a.n == b.n && !memcmp(a.toks, b.toks, (size_t)a.n * 4),
                      "chat line %d (%s): constrained output with speculation differs (%d vs %d tokens)", line,
                      sampled ? "sampled" : "greedy", a.n, b.n);
            if (!sampled) { /* tokens and logprobs as a plain decode under the rule gives them */
                lp_out h, want;
                engine_params plp = poff;
                plp.logprobs = 1;
                plp.top_logprobs = 5;
                collect_lp(engine_submit(e, ids, n, &plp), &h);
                reference_decode(&f, ids, n, &poff, c, 120, &want);
                CHECK_MSG(h.n == b.n && !memcmp(h.toks, b.toks, (size_t)b.n * 4),
                          "chat line %d: greedy constrained output differs with logprobs", line);
                CHECK_MSG(lp_same(&h, &want), "chat line %d: greedy constrained tokens or logprobs differ from the rule's",
                          line);
            }
            drafted += a.drafted;
            accepted += a.accepted;
            compared++;
            char *text = NULL;
            size_t tl = 0;
            if (b.n < 120 && tok_decode(f.tk, b.toks, b.n, true, &text, &tl) == 0) { /* finished, not cut by max_tokens */
                json_t *j = json_loadb(text, tl, 0, NULL);
                CHECK_MSG(json_is_object(j), "chat line %d: the constrained answer does not parse: %s", line, text);
                parsed += j != NULL;
                json_decref(j);
            }
            free(text);
        }
        free(ids);
    }
    engine_stats st = {0};
    if (e) engine_get_stats(e, &st);
    bool dev = strcmp(device, "cpu") != 0;
    printf("    %s: %d constrained answers identical with speculation on and off (%d finished and parsed); %lld drafted, "
           "%lld accepted; %lld rows fetched for a refused greedy argmax, %lld rows masked by the backend\n",
           device, compared, parsed, drafted, accepted, st.constraint_rows, st.constraint_masks);
    CHECK(st.constraint_rows > 0);
    CHECK(dev ? st.constraint_masks > 100 : st.constraint_masks == 0);
    CHECK(compared >= 20);
    CHECK(parsed >= 10);
    CHECK(accepted > 20); /* drafts were really verified under the constraint */
    if (e) engine_stop(e);
    jc_free(c);
    json_decref(schema);
    fx_close(&f);
}

TEST(test_spec_json_constraint_is_exact) {
    if (!test_shared_path("models/tinycoder/prompts/chat.jsonl")) SKIP("../shared/models/tinycoder/prompts not found");
    json_constraint_exact("cpu");
}

/* the same with the sampled rows drawn by the backend (the CPU with a
 * sample_rows op), which masks them first */
TEST(test_spec_json_constraint_is_exact_with_rows_sampled_by_the_backend) {
    if (!test_shared_path("models/tinycoder/prompts/chat.jsonl")) SKIP("../shared/models/tinycoder/prompts not found");
    json_constraint_exact("cpu+sample_rows");
}

TEST(test_cuda_spec_json_constraint_is_exact) {
    if (!test_shared_path("models/tinycoder/prompts/chat.jsonl")) SKIP("../shared/models/tinycoder/prompts not found");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    json_constraint_exact("cuda");
}


TEST(test_spec_drafter_greedy_is_byte_identical_on_workloads) {
    if (!test_shared_path("models/tinycoder/drafter")) SKIP("../shared/models/tinycoder/drafter not found");
    if (!test_shared_path("models/tinycoder/prompts/edit.jsonl")) SKIP("../shared/models/tinycoder/prompts not found");
    greedy_identical("cpu", SRC_DRAFTER);
}

TEST(test_spec_mtp_greedy_is_byte_identical_on_workloads) {
    if (!test_shared_path("models/tinycoder/prompts/edit.jsonl")) SKIP("../shared/models/tinycoder/prompts not found");
    greedy_identical("cpu", SRC_MTP);
}

TEST(test_spec_dflash_greedy_is_byte_identical_on_workloads) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    if (!test_shared_path("models/tinycoder/prompts/edit.jsonl")) SKIP("../shared/models/tinycoder/prompts not found");
    greedy_identical("cpu", SRC_DFLASH);
}

TEST(test_cuda_spec_greedy_is_byte_identical_on_workloads) {
    if (!test_shared_path("models/tinycoder/prompts/edit.jsonl")) SKIP("../shared/models/tinycoder/prompts not found");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    greedy_identical("cuda", SRC_PLD);
    greedy_identical("cuda", SRC_DRAFTER);
    greedy_identical("cuda", SRC_MTP);
    if (test_shared_path("models/tinycoder/dflash")) greedy_identical("cuda", SRC_DFLASH);
}

/* two-sample chi-square over bins with >= 5 expected; returns statistic, *df */
static double chi2(const int *a, const int *b, int nbins, int *df) {
    double na = 0, nb = 0, x = 0;
    for (int i = 0; i < nbins; i++) { na += a[i]; nb += b[i]; }
    int used = 0;
    double ra = 0, rb = 0;
    for (int i = 0; i < nbins; i++) {
        double tot = a[i] + b[i];
        if (tot * na / (na + nb) < 5 || tot * nb / (na + nb) < 5) { ra += a[i]; rb += b[i]; continue; }
        double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
        x += (a[i] - ea) * (a[i] - ea) / ea + (b[i] - eb) * (b[i] - eb) / eb;
        used++;
    }
    double tot = ra + rb;
    if (tot > 0) { /* pooled rare bins */
        double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
        if (ea >= 5 && eb >= 5) {
            x += (ra - ea) * (ra - ea) / ea + (rb - eb) * (rb - eb) / eb;
            used++;
        }
    }
    *df = used - 1;
    return x;
}

/* chi-square critical value at p = 0.001 (Wilson-Hilferty) */
static double chi2_crit(int df) {
    double z = 3.09, h = 2.0 / (9.0 * df);
    return df * pow(1 - h + z * sqrt(h), 3);
}

/* Sampling under a constraint (JSON mode: any object) at temperature 1 with
 * its rows masked and drawn on the host ("cpu") against masked and drawn by
 * the backend ("cpu+sample_rows", masks sent with the step): each of the
 * first four tokens' distributions agrees (chi-square, p = 0.001) over
 * 1,200 answers an arm. */
static void constrained_host_vs_backend(const char *other) {
    json_t *schema = json_loads("{\"type\":\"object\"}", 0, NULL);
    char err[200];
    json_constraint *c = jc_compile(schema, err, sizeof err);
    CHECK_MSG(c != NULL, "%s", err);
    const char *devs[2] = {"cpu", other};
    enum { N = 1200, B = 16, P = 4 };
    int V = 0, *count[2][P] = {{0}};
    long long masked = 0;
    for (int arm = 0; arm < 2 && c; arm++) {
        fx f;
        if (!fx_open_on(&f, devs[arm])) break;
        V = f.m->cfg.vocab_size;
        for (int p = 0; p < P; p++) count[arm][p] = calloc((size_t)V, sizeof(int));
        engine *e = NULL;
        engine_config ec = {.max_concurrent = B, .prefill_chunk = 512, .ctx_size = 1024};
        CHECK(engine_start(&e, f.m, f.tk, &ec) == 0);
        int n;
        int32_t *ids = workload_prompt(&f, "models/tinycoder/prompts/chat.jsonl", 0, &n, NULL);
        for (int i0 = 0; e && ids && i0 < N; i0 += B) {
            engine_req *rs[B];
            for (int i = 0; i < B; i++) {
                engine_params p = params(P, 0);
                p.sp.temperature = 1.0f;
                p.sp.top_k = 0;
                p.sp.top_p = 1.0f;
                p.seed = 7919ull * (uint64_t)(i0 + i) + 31 + (uint64_t)arm * 104729;
                p.constraint = c;
                rs[i] = engine_submit(e, ids, n, &p);
            }
            for (int i = 0; i < B; i++) {
                run_out o;
                collect(rs[i], &o);
                for (int p = 0; p < P && p < o.n; p++) count[arm][p][o.toks[p]]++;
            }
        }
        engine_stats st = {0};
        if (e) engine_get_stats(e, &st);
        if (arm) masked = st.constraint_masks;
        free(ids);
        if (e) engine_stop(e);
        fx_close(&f);
    }
    int tested = 0;
    for (int p = 0; p < P; p++) {
        if (!count[0][p] || !count[1][p]) continue;
        int df;
        double x = chi2(count[0][p], count[1][p], V, &df);
        printf("    %s, position %d: chi-square %.1f, df %d, critical (p=0.001) %.1f\n", other, p, x, df,
               df > 0 ? chi2_crit(df) : 0.0);
        CHECK_MSG(df < 1 || x < chi2_crit(df), "position %d: constrained sampling differs on the backend (chi2 %.1f, df %d)",
                  p, x, df);
        tested += df >= 1;
    }
    for (int a = 0; a < 2; a++)
        for (int p = 0; p < P; p++) free(count[a][p]);
    printf("    %lld rows masked by the backend\n", masked);
    CHECK(tested >= 2); /* the answers' tokens really vary */
    CHECK(masked >= N);
    jc_free(c);
    json_decref(schema);
}

TEST(test_spec_constrained_sampling_same_on_host_and_backend) {
    if (!test_shared_path("models/tinycoder/prompts/chat.jsonl")) SKIP("../shared/models/tinycoder/prompts not found");
    constrained_host_vs_backend("cpu+sample_rows");
}

/* ... and the GPU's masked draws keep the host's distribution */
TEST(test_cuda_constrained_sampling_same_on_host_and_gpu) {
    if (!test_shared_path("models/tinycoder/prompts/chat.jsonl")) SKIP("../shared/models/tinycoder/prompts not found");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    constrained_host_vs_backend("cuda");
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

/* Penalties (repetition 1.3, presence 0.4, frequency 0.3) and a logit_bias
 * on four edit prompts, whose answers repeat their prompts (prompt lookup
 * drafts them) — penalised rows whose drafts the backend counts. Greedy:
 * the engine's text with speculation off equals reference_decode's and
 * with it on (lookup, then the MTP head) the same; the penalties change
 * the text. Seeded sampling at 0.8 / top-p 0.95 with the rows drawn by the
 * backend: the same text with speculation on and off. */
TEST(test_spec_penalties_exact) {
    if (!test_shared_path("models/tinycoder/prompts/edit.jsonl")) SKIP("../shared/models/tinycoder/prompts not found");
    fx f;
    if (!fx_open_on(&f, "cpu+sample_rows")) return;
    engine *e = NULL;
    engine_config ec = {.max_concurrent = 4, .prefill_chunk = 512, .ctx_size = 1024, .pld = true,
                        .spec_min_repetition = 0.0, .no_runtime_gates = true, .mtp = true, .mtp_depth = 3};
    CHECK(engine_start(&e, f.m, f.tk, &ec) == 0);
    int compared = 0, moved = 0, sampled_same = 0;
    long long drafted = 0;
    for (int line = 0; line < 4; line++) {
        int n;
        int32_t *ids = workload_prompt(&f, "models/tinycoder/prompts/edit.jsonl", line, &n, NULL);
        if (!ids || n + 80 > 1024) { free(ids); continue; }
        engine_params plain = params(64, 0), on = params(64, 1), off = params(64, 0);
        engine_params *pp[2] = {&on, &off};
        for (int k = 0; k < 2; k++) {
            pp[k]->sp.repetition_penalty = 1.3f;
            pp[k]->sp.presence_penalty = 0.4f;
            pp[k]->sp.frequency_penalty = 0.3f;
            pp[k]->n_logit_bias = 1;
            pp[k]->logit_bias_id[0] = ids[n / 2];
            pp[k]->logit_bias[0] = -2.0f;
        }
        on.mtp = line % 2; /* lookup alone, then the head as well */
        run_out a, b, c;
        collect(engine_submit(e, ids, n, &on), &a);
        collect(engine_submit(e, ids, n, &off), &b);
        collect(engine_submit(e, ids, n, &plain), &c);
        lp_out want;
        reference_decode(&f, ids, n, &off, NULL, 64, &want);
        CHECK_MSG(b.n == want.n && !memcmp(b.toks, want.toks, (size_t)want.n * 4),
                  "line %d: penalised text differs from the rule's", line);
        CHECK_MSG(a.n == b.n && !memcmp(a.toks, b.toks, (size_t)a.n * 4), "line %d: speculation changed the penalised text",
                  line);
        moved += c.n != b.n || memcmp(c.toks, b.toks, (size_t)b.n * 4) != 0;
        drafted += a.drafted;
        compared++;
        for (int k = 0; k < 2; k++) pp[k]->sp.temperature = 0.8f, pp[k]->sp.top_p = 0.95f, pp[k]->seed = 7 + line;
        collect(engine_submit(e, ids, n, &on), &a);
        collect(engine_submit(e, ids, n, &off), &b);
        bool same = a.n == b.n && !memcmp(a.toks, b.toks, (size_t)a.n * 4);
        CHECK_MSG(same, "line %d: seeded penalised text differs with speculation", line);
        sampled_same += same;
        drafted += a.drafted;
        free(ids);
    }
    printf("    %d prompts: greedy equal to the rule and with speculation, %d changed by the penalties; %d seeded "
           "equal; %lld drafted\n", compared, moved, sampled_same, drafted);
    CHECK_EQ_INT(compared, 4);
    CHECK(moved >= 2);
    CHECK(drafted > 50);
    engine_stop(e);
    fx_close(&f);
}

/* Penalised sequences batched with each other: one decoding while the
 * next prefills in chunks (its prompt rows lead the step, so the rows of
 * the sequences come in another order than the engine's list), each with
 * its own penalties and bias — every text equal to the sequence's alone. */
TEST(test_spec_penalties_batched) {
    if (!test_shared_path("models/tinycoder/prompts/edit.jsonl")) SKIP("../shared/models/tinycoder/prompts not found");
    fx f;
    if (!fx_open_on(&f, "cpu")) return;
    engine *e = NULL;
    engine_config ec = {.max_concurrent = 4, .prefill_chunk = 64, .ctx_size = 1024, .pld = true,
                        .spec_min_repetition = 0.0, .no_runtime_gates = true};
    CHECK(engine_start(&e, f.m, f.tk, &ec) == 0);
    int32_t *ids[3];
    int n[3];
    engine_params p[3];
    run_out alone[3], both[3];
    engine_req *r[3];
    for (int i = 0; i < 3; i++) {
        ids[i] = workload_prompt(&f, "models/tinycoder/prompts/edit.jsonl", 4 + i, &n[i], NULL);
        CHECK(ids[i] != NULL);
        if (!ids[i]) return;
        p[i] = params(48, i != 1);
        p[i].sp.repetition_penalty = 1.1f + 0.2f * i;
        p[i].sp.frequency_penalty = 0.5f * i;
        p[i].n_logit_bias = i;
        if (i) p[i].logit_bias_id[0] = ids[i][n[i] / 3], p[i].logit_bias[0] = 1.5f;
        collect(engine_submit(e, ids[i], n[i], &p[i]), &alone[i]);
    }
    for (int i = 0; i < 3; i++) r[i] = engine_submit(e, ids[i], n[i], &p[i]);
    for (int i = 0; i < 3; i++) {
        collect(r[i], &both[i]);
        CHECK_MSG(both[i].n == alone[i].n && !memcmp(both[i].toks, alone[i].toks, (size_t)alone[i].n * 4),
                  "request %d: batched text differs from its text alone", i);
        free(ids[i]);
    }
    printf("    3 penalised requests batched (prompts of %d, %d, %d tokens in chunks of 64): each text as alone\n",
           n[0], n[1], n[2]);
    engine_stop(e);
    fx_close(&f);
}

/* Log-probabilities from the backend (logprob_rows, over each row as the
 * model computed it) against the host's (rows brought to the host): seeded
 * sampling at 0.8 with logprobs and 5 alternatives on the CPU (the host
 * samples, and computes them from its rows) and on the CPU with a
 * sample_rows op (drawn by the backend, logprobs from it) — the same
 * tokens and the same values, bit for bit, with speculation (MTP) on and
 * off, free and in JSON mode (masked on the host / on the backend); greedy
 * on the backend's path with speculation on and off too. */
TEST(test_spec_logprobs_from_the_backend_equal_the_hosts) {
    if (!test_shared_path("models/tinycoder/prompts/chat.jsonl")) SKIP("../shared/models/tinycoder/prompts not found");
    fx f[2];
    engine *e[2] = {0};
    const char *devs[2] = {"cpu", "cpu+sample_rows"};
    for (int d = 0; d < 2; d++) {
        if (!fx_open_on(&f[d], devs[d])) return;
        engine_config ec = {.max_concurrent = 4, .prefill_chunk = 512, .ctx_size = 1024, .pld = true,
                            .spec_min_repetition = 0.0, .no_runtime_gates = true, .mtp = true, .mtp_depth = 3};
        CHECK(engine_start(&e[d], f[d].m, f[d].tk, &ec) == 0);
    }
    int same = 0, compared = 0;
    long long accepted = 0;
    json_t *schema = json_loads("{\"type\":\"object\"}", 0, NULL);
    char err[200];
    json_constraint *json_mode = jc_compile(schema, err, sizeof err);
    CHECK_MSG(json_mode != NULL, "%s", err);
    for (int line = 0; e[0] && e[1] && json_mode && line < 3; line++) {
        int n;
        int32_t *ids = workload_prompt(&f[0], "models/tinycoder/prompts/chat.jsonl", line, &n, NULL);
        if (!ids) continue;
        for (int spec = 0; spec < 2; spec++) {
            engine_params p = params(48, spec);
            p.mtp = spec;
            p.logprobs = true;
            p.top_logprobs = 5;
            lp_out g[2];
            collect_lp(engine_submit(e[1], ids, n, &p), &g[spec]);
            if (spec) CHECK_MSG(lp_same(&g[0], &g[1]), "line %d: greedy logprobs differ with speculation", line);
            p.sp.temperature = 0.8f;
            p.seed = 99 + (uint64_t)line;
            for (int constrained = 0; constrained < 2; constrained++) { /* (JSON mode: masked on the backend) */
                p.constraint = constrained ? json_mode : NULL;
                lp_out h, b;
                collect_lp(engine_submit(e[0], ids, n, &p), &h);
                collect_lp(engine_submit(e[1], ids, n, &p), &b);
                bool eq = lp_same(&h, &b);
                CHECK_MSG(eq, "line %d spec %d%s: the backend's tokens or logprobs differ from the host's", line, spec,
                          constrained ? " (JSON mode)" : "");
                same += eq;
                compared++;
            }
        }
        free(ids);
    }
    engine_stats st = {0};
    if (e[1]) engine_get_stats(e[1], &st);
    accepted = st.spec_accepted;
    printf("    %d of %d seeded answers with logprobs the same from the backend as from the host; %lld drafts accepted\n",
           same, compared, accepted);
    CHECK_EQ_INT(compared, 12);
    CHECK(accepted > 20);
    jc_free(json_mode);
    json_decref(schema);
    for (int d = 0; d < 2; d++) {
        if (e[d]) engine_stop(e[d]);
        fx_close(&f[d]);
    }
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
