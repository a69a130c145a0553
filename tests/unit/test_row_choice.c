/* test_row_choice.c — how a token is chosen from a row that penalties,
 * logit_bias, a JSON constraint or logprobs touch, on the backend and on the
 * host, with speculation on and off (engine level, tinycoder):
 * - penalties and logit_bias (applied by the backend, drafts counted row by
 *   row): greedy text equal to a plain decode under the rule, the same with
 *   speculation on and off, greedy and seeded; batched sequences as alone;
 * - a JSON constraint: answers identical with speculation on and off and
 *   parsing; greedy tokens and logprobs equal to a plain constrained decode;
 *   sampling masked and drawn by the backend distributed as the host's;
 * - logprobs from the backend equal the host's, bit for bit. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/dflash.h"
#include "sample/token_mask.h"
#include "penalty_cases.h"
#include "prefill_logits.h"
#include "spec_fixture.h"
#include "test.h"

/* tokens and their log-probabilities (5 alternatives) of one request */
typedef struct {
    int n;
    int32_t toks[128];
    float lp[128], top[128][5];
    int32_t top_id[128][5];
} lp_out;

static void lp_event(const engine_event *ev, void *arg) {
    lp_out *o = arg;
    if (ev->type != ENGINE_EV_TOKEN || o->n >= 128) return;
    CHECK_EQ_INT(ev->n_top, 5);
    o->toks[o->n] = ev->token;
    o->lp[o->n] = ev->logprob;
    for (int k = 0; k < 5 && k < ev->n_top; k++) o->top[o->n][k] = ev->top_logprobs[k], o->top_id[o->n][k] = ev->top_ids[k];
    o->n++;
}

static void collect_lp(engine_req *r, lp_out *o) {
    memset(o, 0, sizeof *o);
    engine_event done;
    engine_drain(r, NULL, 0, &done, lp_event, o);
    CHECK(done.type == ENGINE_EV_DONE);
}

/* a and b the same tokens and top ids, their log-probabilities within tol
 * (0: bit for bit; a GPU sums a row's exponentials in its own order, so its
 * normalizer differs from the host's in the last bits); why says where not */
static bool lp_close(const lp_out *a, const lp_out *b, float tol, char *why, size_t nw) {
    if (a->n != b->n) return snprintf(why, nw, "%d against %d tokens", a->n, b->n), false;
    for (int i = 0; i < a->n; i++) {
        if (a->toks[i] != b->toks[i])
            return snprintf(why, nw, "token %d: %d against %d", i, a->toks[i], b->toks[i]), false;
        if (!(fabsf(a->lp[i] - b->lp[i]) <= tol))
            return snprintf(why, nw, "token %d: logprob %.9g against %.9g", i, a->lp[i], b->lp[i]), false;
        for (int k = 0; k < 5; k++)
            if (a->top_id[i][k] != b->top_id[i][k] || !(fabsf(a->top[i][k] - b->top[i][k]) <= tol))
                return snprintf(why, nw, "token %d, alternative %d: %d (%.9g) against %d (%.9g)", i, k, a->top_id[i][k],
                                a->top[i][k], b->top_id[i][k], b->top[i][k]), false;
    }
    return true;
}


/* within tol relative to the reference value (a bf16 KV cache rounds each
 * element relative to its size; tol 0: bit for bit) */
static bool near(float got, float ref, float tol) { return fabsf(got - ref) <= tol * (1.0f + fabsf(ref)); }

/* The engine's log-probabilities of token i (follow) against the
 * reference's (o; raw its row, lz the row's log-normaliser, V its width):
 * the chosen token's and each alternative's by id within tol, and the
 * last alternative not below the reference's by more than tol (no token
 * left out above it). false with why when they differ. */
static bool logprobs_agree(const lp_out *follow, const lp_out *o, int i, const float *raw, int V, float lz, float tol,
                           char *why, size_t nw) {
    if (!near(follow->lp[i], o->lp[i], tol))
        return snprintf(why, nw, "token %d: logprob %.9g against %.9g", i, follow->lp[i], o->lp[i]), false;
    for (int k = 0; k < 5; k++) {
        int32_t id = follow->top_id[i][k];
        if (!(id >= 0 && id < V && near(follow->top[i][k], raw[id] - lz, tol)))
            return snprintf(why, nw, "token %d, alternative %d: %d (%.9g) against the reference's %.9g", i, k, id,
                            follow->top[i][k], id >= 0 && id < V ? raw[id] - lz : 0.0f), false;
    }
    if (!(follow->top[i][4] >= o->top[i][4] - tol * (1.0f + fabsf(o->top[i][4]))))
        return snprintf(why, nw, "token %d: the last alternative %.9g is below the reference's %.9g", i,
                        follow->top[i][4], o->top[i][4]), false;
    return true;
}

/* Greedy decode of up to n tokens after ids[0..n_ids) with model_forward
 * one token at a time, each row under the plain rules: penalised by
 * penalty_cases.h's rule over the context so far (p's penalties and
 * logit_bias), then masked by constraint c when there is one (the
 * end-of-sequence tokens allowed once the document may end); the
 * log-probabilities (5 alternatives) from the row as the model computed
 * it. What the engine must give, however it gets there.
 *
 * follow: instead of its own argmax the decode takes follow's tokens and
 * judges each (false, with why): allowed, its rule-adjusted logit the row's
 * largest within tol, its log-probabilities as logprobs_agree says; and
 * where follow ended before n tokens, the
 * document finished or an end-of-sequence token a greedy choice. On a GPU
 * the reference (one sequence through model_forward) and the engine (the
 * prompt in chunks through the prompt path, then decode steps) round bf16
 * differently, so near-ties may go either way and texts part there: a
 * judge that follows the engine compares them step by step. */
static bool reference_decode(fx *f, const int32_t *ids, int n_ids, const engine_params *p, const json_constraint *c,
                             int n, lp_out *o, const lp_out *follow, float tol, char *why, size_t nw) {
    model *m = f->m;
    int V = m->cfg.vocab_size;
    bool ok = true;
    memset(o, 0, sizeof *o);
    token_mask *tm = c ? token_mask_new(f->tk, V) : NULL;
    jc_state st;
    if (c) jc_start(&st, c, 0);
    kv_cache kv;
    kv_seq ks = {0};
    int32_t *ctx = malloc((size_t)(n_ids + n) * 4);
    float *logits = malloc((size_t)V * 4), *raw = malloc((size_t)V * 4);
    uint8_t *allowed = malloc((size_t)V);
    CHECK((tm || !c) && model_kv_init(m, &kv, n_ids + n + 16) == 0);
    memcpy(ctx, ids, (size_t)n_ids * 4);
    int at = 0, len = n_ids;
#define JUDGE(cond, ...) if (!(cond)) { snprintf(why, nw, __VA_ARGS__); ok = false; break; }
    while ((tm || !c) && o->n < n && o->n < 128) {
        if (follow && o->n == follow->n && (!c || jc_finished(&st))) break;
        if (forward_seq(m, &kv, &ks, ctx + at, len - at, at, NULL, 0, false, logits) != 0) break;
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
        int best = sample_argmax(logits, V), t = best;
        if (follow && o->n == follow->n) { /* the engine ended here: at an end-of-sequence token */
            bool eos = false;
            for (int k = 0; k < p->n_eos; k++) eos |= logits[p->eos[k]] > -INFINITY && near(logits[p->eos[k]], logits[best], tol);
            JUDGE(eos, "token %d: the engine ended where %d (%.9g) was the greedy choice", o->n, best, logits[best]);
            break;
        }
        if (follow) {
            t = follow->toks[o->n];
            JUDGE(t >= 0 && t < V && logits[t] > -INFINITY && near(logits[t], logits[best], tol),
                  "token %d: %d (%.9g under the rule) where %d (%.9g) is the greedy choice", o->n, t,
                  t >= 0 && t < V ? logits[t] : 0.0f, best, logits[best]);
        }
        if (t == p->eos[0] || t == p->eos[1] || (c && !token_mask_feed(tm, &st, t))) break;
        bk_logprobs lp;
        bk_logprob_row(raw, V, t, 5, &lp);
        o->toks[o->n] = t;
        o->lp[o->n] = lp.logit - lp.lz;
        for (int k = 0; k < 5; k++) o->top[o->n][k] = lp.top[k] - lp.lz, o->top_id[o->n][k] = lp.top_id[k];
        if (follow && !(ok = logprobs_agree(follow, o, o->n, raw, V, lp.lz, tol, why, nw))) break;
        o->n++;
        ctx[len++] = t;
        if (c && jc_finished(&st)) break;
    }
#undef JUDGE
    if (ok && follow && o->n != follow->n)
        snprintf(why, nw, "the reference stopped after %d of the engine's %d tokens", o->n, follow->n), ok = false;
    kv_seq_release(&kv, &ks);
    kv_cache_free(&kv);
    token_mask_free(tm);
    free(ctx); free(logits); free(raw); free(allowed);
    return ok;
}

/* A JSON-constrained answer (a schema with enums, integers and free
 * strings) is the same with speculation on and off — greedy and seeded
 * sampled — while prompt lookup and the MTP head draft under the gates held
 * open (with_dflash: the DFlash drafter alone, whose blocks come back to
 * the host for a sampled answer masked on the backend): verify steps
 * choose through the constraint as plain decoding does.
 * Each answer is a document jansson parses. A greedy answer with logprobs
 * is the same, tokens and values, as a plain decode under the rule gives
 * (the argmax taken when allowed, a row fetched when refused, logprobs from
 * the backend with the host's choice's logit fetched). On a backend that
 * samples, the sampled rows are masked there (masks sent with the step). */
static void json_constraint_exact(const char *device, bool with_dflash) {
    fx f;
    if (!fx_open_on(&f, device)) return;
    dflash *d = NULL;
    if (with_dflash) CHECK(dflash_load(&d, test_shared_path("models/tinycoder/dflash"), f.m) == 0);
    /* the CPU's choices and logprobs are the host rule's bit for bit. On a
     * GPU the reference rounds bf16 differently from the engine (see
     * reference_decode): each of the engine's steps is judged within twice
     * the relative logit tolerance (logprobs apart by up to 0.041 at -6.9
     * on an H100, session 41; near-ties of 0.003 went either way) */
    float lp_tol = strcmp(device, "cuda") == 0 ? 2.0f * (float)TEST_LOGIT_TOL(f.be) : 0.0f;
    char err[200];
    json_t *schema = json_loads("{\"type\":\"object\",\"properties\":{\"language\":{\"enum\":[\"python\",\"c\"]},"
                                "\"year\":{\"type\":\"integer\"},\"summary\":{\"type\":\"string\"}},"
                                "\"required\":[\"language\",\"year\",\"summary\"]}", 0, NULL);
    json_constraint *c = jc_compile(schema, err, sizeof err);
    CHECK_MSG(c != NULL, "%s", err);
    engine *e = NULL;
    engine_config ec = {.max_concurrent = 4, .prefill_chunk = 256, .ctx_size = 1024, .pld = !with_dflash,
                        .spec_min_repetition = 0.0, .no_runtime_gates = true, .mtp = !with_dflash, .mtp_depth = 3,
                        .dflash = d};
    CHECK(c && (d || !with_dflash) && engine_start(&e, f.m, f.tk, &ec) == 0);
    long long drafted = 0, accepted = 0, sampled_accepted = 0;
    int compared = 0, parsed = 0;
    for (int line = 0; e && line < 16; line++) {
        int n = 0;
        int32_t *ids = workload_prompt(&f, "models/tinycoder/prompts/chat.jsonl", line, &n, NULL);
        if (!ids || n + 130 > 1024) {
            free(ids);
            continue;
        }
        for (int sampled = 0; sampled < 2; sampled++) {
            engine_params pon = params(120, with_dflash ? -1 : 1), poff = params(120, 0); /* (-1: the server's: DFlash alone) */
            pon.mtp = !with_dflash;
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
                CHECK_MSG(h.n == b.n && !memcmp(h.toks, b.toks, (size_t)b.n * 4),
                          "chat line %d: greedy constrained output differs with logprobs", line);
                char why[200] = "";
                CHECK_MSG(reference_decode(&f, ids, n, &poff, c, 120, &want, &h, lp_tol, why, sizeof why),
                          "chat line %d: greedy constrained tokens or logprobs are not the rule's: %s", line, why);
                if (lp_tol == 0.0f) /* (bit for bit: the reference's own greedy text is the engine's) */
                    CHECK_MSG(lp_close(&h, &want, 0.0f, why, sizeof why), "chat line %d: %s", line, why);
            }
            drafted += a.drafted;
            accepted += a.accepted;
            sampled_accepted += sampled ? a.accepted : 0;
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
    printf("    %s%s: %d constrained answers identical with speculation on and off (%d finished and parsed); %lld drafted, "
           "%lld accepted (%lld in sampled answers); %lld rows fetched for a refused greedy argmax, %lld rows masked by "
           "the backend\n",
           device, with_dflash ? " (DFlash)" : "", compared, parsed, drafted, accepted, sampled_accepted, st.constraint_rows,
           st.constraint_masks);
    CHECK(st.constraint_rows > 0);
    CHECK(dev ? st.constraint_masks > 100 : st.constraint_masks == 0);
    CHECK(compared >= 20);
    CHECK(parsed >= 10);
    CHECK(accepted > 20); /* drafts were really verified under the constraint */
    CHECK(sampled_accepted > 10); /* sampled ones too (DFlash's blocks come back for the masks on the device) */
    CHECK(!with_dflash || st.src_accepted[DRAFT_SRC_DFLASH] == accepted); /* (DFlash's alone) */
    if (e) engine_stop(e);
    dflash_free(d);
    jc_free(c);
    json_decref(schema);
    fx_close(&f);
}

TEST(test_spec_json_constraint_is_exact) {
    SKIP_WITHOUT_PROMPTS("chat.jsonl");
    json_constraint_exact("cpu", false);
}

/* the same with the sampled rows drawn by the backend (the CPU with a
 * sample_rows op), which masks them first */
TEST(test_spec_json_constraint_is_exact_with_rows_sampled_by_the_backend) {
    SKIP_WITHOUT_PROMPTS("chat.jsonl");
    json_constraint_exact("cpu+sample_rows", false);
}

TEST(test_cuda_spec_json_constraint_is_exact) {
    SKIP_WITHOUT_PROMPTS("chat.jsonl");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    json_constraint_exact("cuda", false);
}

/* the same with the DFlash drafter (greedy answers, and sampled ones masked and drawn by the backend) */
TEST(test_spec_dflash_constrained_sampling_is_exact) {
    SKIP_WITHOUT_PROMPTS("chat.jsonl");
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("no DFlash drafter");
    json_constraint_exact("cpu+sample_rows", true);
}

TEST(test_cuda_spec_dflash_constrained_sampling_is_exact) {
    SKIP_WITHOUT_PROMPTS("chat.jsonl");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    json_constraint_exact("cuda", true);
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
    SKIP_WITHOUT_PROMPTS("chat.jsonl");
    constrained_host_vs_backend("cpu+sample_rows");
}

/* ... and the GPU's masked draws keep the host's distribution */
TEST(test_cuda_constrained_sampling_same_on_host_and_gpu) {
    SKIP_WITHOUT_PROMPTS("chat.jsonl");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    constrained_host_vs_backend("cuda");
}

/* Penalties (repetition 1.3, presence 0.4, frequency 0.3) and a logit_bias
 * on four edit prompts, whose answers repeat their prompts (prompt lookup
 * drafts them) — penalised rows whose drafts the backend counts. Greedy:
 * the engine's text with speculation off equals reference_decode's and
 * with it on (lookup, then the MTP head) the same; the penalties change
 * the text. Seeded sampling at 0.8 / top-p 0.95 with the rows drawn by the
 * backend: the same text with speculation on and off. last_n > 0: the
 * repetition penalty (then 1.6) reads only the context's last last_n tokens
 * (on the backend, as the whole context's), and the window changes some
 * texts. On the GPU the reference's check is left out: its forwards round
 * otherwise (the kernel's rule is test_cuda_penalize_rows_equal_the_cpu_op's). */
static void penalties_exact(const char *device, int last_n) {
    SKIP_WITHOUT_PROMPTS("edit.jsonl");
    fx f;
    if (!fx_open_on(&f, device)) return;
    engine *e = NULL;
    engine_config ec = {.max_concurrent = 4, .prefill_chunk = 512, .ctx_size = 1024, .pld = true,
                        .spec_min_repetition = 0.0, .no_runtime_gates = true, .mtp = true, .mtp_depth = 3};
    CHECK(engine_start(&e, f.m, f.tk, &ec) == 0);
    int compared = 0, moved = 0, sampled_same = 0, windowed = 0;
    long long drafted = 0;
    for (int line = 0; line < 4; line++) {
        int n;
        int32_t *ids = workload_prompt(&f, "models/tinycoder/prompts/edit.jsonl", line, &n, NULL);
        if (!ids || n + 80 > 1024) { free(ids); continue; }
        engine_params plain = params(64, 0), on = params(64, 1), off = params(64, 0), whole;
        engine_params *pp[2] = {&on, &off};
        for (int k = 0; k < 2; k++) {
            pp[k]->sp.repetition_penalty = last_n ? 1.6f : 1.3f;
            pp[k]->sp.repetition_last_n = last_n;
            pp[k]->sp.presence_penalty = 0.4f;
            pp[k]->sp.frequency_penalty = 0.3f;
            pp[k]->n_logit_bias = 1;
            pp[k]->logit_bias_id[0] = ids[n / 2];
            pp[k]->logit_bias[0] = -2.0f;
        }
        on.mtp = line % 2; /* lookup alone, then the head as well */
        whole = off;
        whole.sp.repetition_last_n = 0;
        run_out a, b, c, w;
        collect(engine_submit(e, ids, n, &on), &a);
        collect(engine_submit(e, ids, n, &off), &b);
        collect(engine_submit(e, ids, n, &plain), &c);
        if (strcmp(device, "cuda")) { /* (on the GPU the reference's forwards round otherwise than the engine's) */
            lp_out want;
            reference_decode(&f, ids, n, &off, NULL, 64, &want, NULL, 0.0f, NULL, 0);
            CHECK_MSG(b.n == want.n && !memcmp(b.toks, want.toks, (size_t)want.n * 4),
                      "line %d: penalised text differs from the rule's", line);
        }
        CHECK_MSG(a.n == b.n && !memcmp(a.toks, b.toks, (size_t)a.n * 4), "line %d: speculation changed the penalised text",
                  line);
        moved += c.n != b.n || memcmp(c.toks, b.toks, (size_t)b.n * 4) != 0;
        if (last_n) {
            collect(engine_submit(e, ids, n, &whole), &w);
            windowed += w.n != b.n || memcmp(w.toks, b.toks, (size_t)b.n * 4) != 0;
        }
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
    printf("    %d prompts: greedy equal to the rule and with speculation, %d changed by the penalties, %d by the "
           "window of %d; %d seeded equal; %lld drafted\n", compared, moved, windowed, last_n, sampled_same, drafted);
    CHECK_EQ_INT(compared, 4);
    CHECK(moved >= 2);
    CHECK(!last_n || windowed >= 1);
    CHECK(drafted > 50);
    engine_stop(e);
    fx_close(&f);
}

TEST(test_spec_penalties_exact) { penalties_exact("cpu+sample_rows", 0); }

TEST(test_spec_penalty_window_exact) { penalties_exact("cpu+sample_rows", 8); }

TEST(test_cuda_spec_penalty_window_exact) {
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    penalties_exact("cuda", 8);
}

/* Penalised sequences batched with each other: one decoding while the
 * next prefills in chunks (its prompt rows lead the step, so the rows of
 * the sequences come in another order than the engine's list), each with
 * its own penalties and bias — every text equal to the sequence's alone. */
TEST(test_spec_penalties_batched) {
    SKIP_WITHOUT_PROMPTS("edit.jsonl");
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
    SKIP_WITHOUT_PROMPTS("chat.jsonl");
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
            char why[160];
            if (spec) CHECK_MSG(lp_close(&g[0], &g[1], 0.0f, why, sizeof why), "line %d: greedy logprobs differ with speculation: %s",
                                line, why);
            p.sp.temperature = 0.8f;
            p.seed = 99 + (uint64_t)line;
            for (int constrained = 0; constrained < 2; constrained++) { /* (JSON mode: masked on the backend) */
                p.constraint = constrained ? json_mode : NULL;
                lp_out h, b;
                collect_lp(engine_submit(e[0], ids, n, &p), &h);
                collect_lp(engine_submit(e[1], ids, n, &p), &b);
                bool eq = lp_close(&h, &b, 0.0f, why, sizeof why);
                CHECK_MSG(eq, "line %d spec %d%s: the backend's tokens or logprobs differ from the host's: %s", line, spec,
                          constrained ? " (JSON mode)" : "", why);
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

