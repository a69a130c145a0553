/* test_dflash.c — tinycoder's DFlash block drafter against the reference
 * (../shared/models/tinycoder/dflash/dflash_report.json, transformers): for
 * each of the 3 prompts the first drafted block (15 tokens) after the prompt,
 * and loading refusals for drafters that do not fit the model. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/err.h"
#include "engine/engine.h"
#include "model/dflash.h"
#include "model/model.h"
#include "sample/sample.h"
#include "tok/tok.h"
#include "cold_warm.h"
#include "dflash_fixture.h"
#include "prefill_logits.h"
#include "test.h"

static void check_first_blocks(const char *device) {
    dflash_fixture f;
    if (!dflash_fixture_open(&f, device)) return;
    json_t *rep = f.rep;
    model *m = f.m;
    dflash *d = f.d;
    CHECK_EQ_INT(dflash_block_size(d), 16);
    json_t *ev = json_object_get(rep, "eval");
    int V = m->cfg.vocab_size, equal_blocks = 0;
    for (size_t e = 0; e < json_array_size(ev); e++) {
        json_t *it = json_object_get(json_array_get(ev, e), "prompt_ids");
        json_t *want = json_object_get(json_array_get(ev, e), "first_draft_block16");
        json_t *greedy = json_object_get(json_array_get(ev, e), "greedy_64");
        int n = (int)json_array_size(it);
        int32_t *ids = malloc(n * 4), *pos = malloc(n * 4), *seq = calloc(n, 4);
        for (int i = 0; i < n; i++) {
            ids[i] = (int32_t)json_integer_value(json_array_get(it, i));
            pos[i] = i;
        }
        float *logits = malloc((size_t)V * 4);
        kv_cache kv, fkv;
        CHECK(model_kv_init(m, &kv, n + 32) == 0);
        CHECK(dflash_kv_init(d, &fkv, n + 32) == 0);
        kv_seq s = {0}, fs = {0};
        kv_seq *fseqs[1] = {&fs};
        CHECK(forward_seq(m, &kv, &s, ids, n, 0, NULL, 0, false, logits) == 0);
        int32_t first = sample_argmax(logits, V);
        CHECK_EQ_INT(first, json_integer_value(json_array_get(greedy, 0)));
        /* context: every prompt position (features = rows 0..n-1 of the forward) */
        CHECK(kv_seq_reserve(&fkv, &fs, n + 16) == 0);
        CHECK(dflash_add_context(d, &fkv, n, pos, pos, seq, pos, 1, fseqs) == 0);
        int32_t drafts[15], rope0 = n, entry0 = n;
        CHECK(dflash_draft(d, &fkv, 1, fseqs, &first, &rope0, &entry0, 16, drafts) == 0);
        int agree = 0;
        for (int j = 0; j < 15; j++) agree += drafts[j] == json_integer_value(json_array_get(want, j));
        printf("    [%s] prompt %zu: first block agrees with the reference at %d of 15 positions\n", device, e, agree);
        CHECK_EQ_INT(agree, 15);
        equal_blocks += agree == 15;
        kv_seq_release(&kv, &s);
        kv_seq_release(&fkv, &fs);
        kv_cache_free(&kv);
        kv_cache_free(&fkv);
        free(ids); free(pos); free(seq); free(logits);
    }
    CHECK_EQ_INT(equal_blocks, 3);
    dflash_free(f.d);
    f.d = NULL;
    CHECK_EQ_INT(m->n_feat, 0); /* the model stops keeping features */
    dflash_fixture_close(&f);
}

TEST(test_dflash_first_blocks_match_reference) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    check_first_blocks("cpu");
}

TEST(test_cuda_dflash_first_blocks_match_reference) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    check_first_blocks("cuda");
}

/* logits (9 x V) of a 40-token prompt and then 8 tokens fed one at a time
 * through model_forward (tokens: the 8 to feed; NULL: the greedy ones,
 * written there) */
static float *decode_rows(model *m, const int32_t *ids, int n, int32_t *tokens, bool choose) {
    int V = m->cfg.vocab_size;
    float *out = malloc((size_t)9 * V * sizeof *out);
    kv_cache kv;
    kv_seq s = {0};
    CHECK(model_kv_init(m, &kv, n + 16) == 0);
    CHECK(forward_seq(m, &kv, &s, ids, n, 0, NULL, 0, false, out) == 0);
    for (int i = 0; i < 8; i++) {
        if (choose) tokens[i] = sample_argmax(out + (size_t)i * V, V);
        CHECK(forward_seq(m, &kv, &s, &tokens[i], 1, n + i, NULL, 0, false, out + (size_t)(i + 1) * V) == 0);
    }
    kv_seq_release(&kv, &s);
    kv_cache_free(&kv);
    return out;
}

/* Keeping a DFlash drafter's features leaves the target's logits alone:
 * the same prompt and tokens through model_forward before a drafter is
 * attached and after (its feature products riding on the next layer's qkv
 * launch) — bit for bit on the CPU, within the logit tolerance on a GPU. */
static void features_leave_logits(const char *device) {
    backend *be = NULL;
    model *m = NULL;
    dflash *d = NULL;
    CHECK(backend_new(&be, device, 2) == 0);
    if (be) CHECK(model_load(&m, test_shared_path("models/tinycoder"), be) == 0);
    if (!m) { backend_free(be); return; }
    int V = m->cfg.vocab_size, n = 40;
    int32_t ids[40], tokens[8];
    for (int i = 0; i < n; i++) ids[i] = 10 + (i * 397) % 8000;
    float *a = decode_rows(m, ids, n, tokens, true);
    CHECK(dflash_load(&d, test_shared_path("models/tinycoder/dflash"), m) == 0);
    CHECK(m->n_feat > 0);
    float *b = decode_rows(m, ids, n, tokens, false);
    double tol = strcmp(device, "cpu") == 0 ? 0.0 : TEST_LOGIT_TOL(be), worst = 0;
    int worst_row = -1;
    for (int r = 0; r < 9; r++)
        for (int j = 0; j < V; j++) {
            double x = a[(size_t)r * V + j], y = b[(size_t)r * V + j], e = fabs(x - y) / (1.0 + fabs(x));
            if (e > worst) worst = e, worst_row = r;
        }
    printf("    [%s] logits with features kept against without: worst relative gap %.3g (row %d of 9)\n", device, worst,
           worst_row);
    CHECK_MSG(worst <= tol, "[%s] the features changed the logits: %.3g at row %d", device, worst, worst_row);
    free(a);
    free(b);
    dflash_free(d);
    model_free(m);
    backend_free(be);
}

TEST(test_dflash_features_leave_the_logits_alone) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    features_leave_logits("cpu");
}

TEST(test_cuda_dflash_features_leave_the_logits_alone) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    features_leave_logits("cuda");
}

/* A copy of tinycoder/dflash with config.json edited by `sed`. */
static int edited_drafter(const char *dir, const char *sed_expr) {
    char cmd[2048];
    const char *src = test_shared_path("models/tinycoder/dflash");
    char *abs = realpath(src, NULL);
    snprintf(cmd, sizeof cmd,
             "rm -rf %s && mkdir -p %s && ln -s %s/model.safetensors %s/ && sed '%s' %s/config.json > %s/config.json",
             dir, dir, abs ? abs : src, dir, sed_expr, src, dir);
    free(abs);
    return system(cmd);
}

TEST(test_dflash_refuses_drafters_that_do_not_fit) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    backend *be = NULL;
    model *m = NULL;
    CHECK(backend_new(&be, "cpu", 1) == 0);
    if (be) CHECK(model_load(&m, test_shared_path("models/tinycoder"), be) == 0);
    if (!m) { backend_free(be); return; }
    char dir[] = "/tmp/ks-dflash-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    static const struct { const char *sed, *msg; } cases[] = {
        {"s/\"target_layer_ids\": \\[/\"target_layer_ids\": [9, /", "has layer 9; the model has 6 layers"},
        {"s/\"vocab_size\": 8192/\"vocab_size\": 8200/", "vocabulary (8200) differs"},
        {"s/\"hidden_size\": 512/\"hidden_size\": 256/", "hidden size 256 differs"},
        {"s/\"full_attention\"/\"sliding_attention\"/", "only full_attention layers"},
        {"s/\"DFlashDraftModel\"/\"Qwen3ForCausalLM\"/", "not a DFlash drafter"},
        {"s/\"mask_token_id\": 8187/\"mask_token_id\": 9000/", "mask_token_id"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char sub[64];
        snprintf(sub, sizeof sub, "%s/d%zu", dir, i);
        CHECK(edited_drafter(sub, cases[i].sed) == 0);
        dflash *d = NULL;
        int rc = dflash_load(&d, sub, m);
        CHECK_MSG(rc != 0 && !d, "case %zu: an unfit drafter was loaded", i);
        CHECK_MSG(strstr(err_msg(), cases[i].msg) != NULL, "case %zu: message \"%s\" lacks \"%s\"", i, err_msg(),
                  cases[i].msg);
        dflash_free(d);
        CHECK_EQ_INT(m->n_feat, 0);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    model_free(m);
    backend_free(be);
}

/* Through the engine (DFlash the only proposer, gates open): greedy output
 * equals greedy_64 for the 3 prompts, and the drafts are really accepted
 * (tokens per verify step printed: the reference gets 2.91 at block 16). */
static void check_greedy_64(const char *device) {
    json_t *rep = json_load_file(test_shared_path("models/tinycoder/dflash/dflash_report.json"), 0, NULL);
    backend *be = NULL;
    model *m = NULL;
    tokenizer *tk = NULL;
    dflash *d = NULL;
    CHECK(backend_new(&be, device, 2) == 0);
    if (be) CHECK(model_load(&m, test_shared_path("models/tinycoder"), be) == 0);
    if (m) CHECK(tok_load(&tk, test_shared_path("models/tinycoder")) == 0);
    if (m) CHECK(dflash_load(&d, test_shared_path("models/tinycoder/dflash"), m) == 0);
    engine *e = NULL;
    engine_config ec = {.max_concurrent = 3, .prefill_chunk = 512, .ctx_size = 512, .spec_min_repetition = 0.0,
                        .no_runtime_gates = true, .dflash = d};
    if (rep && d && tk) CHECK(engine_start(&e, m, tk, &ec) == 0);
    if (e) {
        json_t *ev = json_object_get(rep, "eval");
        engine_req *rs[3] = {0};
        long long drafted = 0, accepted = 0, steps_tokens = 0;
        /* one request at a time: each step verifies one sequence's blocks,
         * which go behind their verify (engine_dflash_behind) */
        for (size_t i = 0; i < 3 && i < json_array_size(ev); i++) {
            json_t *it = json_object_get(json_array_get(ev, i), "prompt_ids");
            int np = (int)json_array_size(it);
            int32_t ids[1024];
            for (int j = 0; j < np && j < 1024; j++) ids[j] = (int32_t)json_integer_value(json_array_get(it, j));
            engine_params p;
            memset(&p, 0, sizeof p);
            p.max_tokens = 64;
            sample_params_default(&p.sp);
            p.sp.temperature = 0;
            p.spec = -1; /* the server's proposers: DFlash only */
            rs[i] = engine_submit(e, ids, np, &p);
            CHECK(rs[i] != NULL);
            if (!rs[i]) continue;
            json_t *want = json_object_get(json_array_get(ev, i), "greedy_64");
            int got[64], n = 0, equal = 1;
            engine_event x;
            for (;;) {
                CHECK(engine_next_event(rs[i], &x, -1) == 1);
                if (x.type == ENGINE_EV_TOKEN && n < 64) got[n++] = x.token;
                if (x.type == ENGINE_EV_DONE) {
                    drafted += x.n_drafted;
                    accepted += x.n_accepted;
                    steps_tokens += x.n_gen;
                }
                CHECK(x.type != ENGINE_EV_ERROR);
                int end = x.type != ENGINE_EV_TOKEN;
                engine_event_clear(&x);
                if (end) break;
            }
            engine_req_release(rs[i]);
            CHECK_EQ_INT(n, 64);
            for (int j = 0; j < n; j++) equal &= got[j] == json_integer_value(json_array_get(want, j));
            CHECK_MSG(equal, "[%s] prompt %zu: greedy output with DFlash differs from greedy_64", device, i);
        }
        engine_stats st;
        engine_get_stats(e, &st);
        printf("    [%s] greedy_64 reproduced; DFlash drafted %lld, accepted %lld; %.2f tokens per verify step; "
               "%lld blocks behind their verify\n",
               device, st.src_drafted[DRAFT_SRC_DFLASH], st.src_accepted[DRAFT_SRC_DFLASH],
               st.spec_verify_steps ? (double)(st.spec_verify_steps + st.src_accepted[DRAFT_SRC_DFLASH]) / st.spec_verify_steps : 0.0,
               st.dflash_behind_steps);
        CHECK_EQ_INT(st.src_drafted[DRAFT_SRC_DFLASH], drafted);
        CHECK(st.dflash_behind_steps > 16);
        CHECK(st.src_accepted[DRAFT_SRC_DFLASH] > 64); /* over 3 x 64 tokens: drafts really accepted */
        engine_stop(e);
    }
    dflash_free(d);
    tok_free(tk);
    model_free(m);
    backend_free(be);
    json_decref(rep);
}

TEST(test_dflash_engine_reproduces_greedy_64) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    check_greedy_64("cpu");
}

TEST(test_cuda_dflash_engine_reproduces_greedy_64) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    check_greedy_64("cuda");
}

/* A prompt served from the prefix cache drafts from the same context as
 * the cold run: the drafter's entries for the cached blocks come with them
 * (engine_dflash_attach; cold_warm.h). Without them the drafter saw only
 * the uncached tail (on the H200 a 322-token prompt went from 90 of 253
 * drafts accepted cold to 2 of 42; here the test then fails: 31/104 vs
 * 30/111, 10/244 vs 10/245, 21/176 vs 19/183). */
TEST(test_dflash_context_survives_prefix_cache_hits) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    if (!test_shared_path("models/tinycoder/prompts/completion.jsonl")) SKIP("../shared/models/tinycoder/prompts not found");
    CHECK(cold_warm_tinycoder(true) > 16); /* the drafter really drafts on these */
}

/* Context appended step by step (a block drafted and discarded in between,
 * as the engine does) gives the same block as the whole context at once:
 * the incremental path computes what the reference computes. */
TEST(test_dflash_incremental_context_equals_fresh) {
    if (!test_shared_path("models/tinycoder/dflash")) SKIP("../shared/models/tinycoder/dflash not found");
    dflash_fixture f;
    if (!dflash_fixture_open(&f, "cpu")) return;
    json_t *rep = f.rep;
    model *m = f.m;
    dflash *d = f.d;
    json_t *it = json_object_get(json_array_get(json_object_get(rep, "eval"), 0), "prompt_ids");
    json_t *g = json_object_get(json_array_get(json_object_get(rep, "eval"), 0), "greedy_64");
    int P = (int)json_array_size(it), M = 11, V = m->cfg.vocab_size;
    int32_t ids[512], pos[512], seq[512] = {0};
    for (int i = 0; i < P + M + 1; i++) {
        ids[i] = (int32_t)json_integer_value(i < P ? json_array_get(it, i) : json_array_get(g, i - P));
        pos[i] = i;
    }
    float *logits = malloc((size_t)V * 4);
    int32_t drafts[2][15];
    for (int path = 0; path < 2; path++) {
        kv_cache kv, fkv;
        CHECK(model_kv_init(m, &kv, 512) == 0);
        CHECK(dflash_kv_init(d, &fkv, 512) == 0);
        kv_seq s = {0}, fs = {0};
        kv_seq *fseqs[1] = {&fs};
        CHECK(kv_seq_reserve(&fkv, &fs, P + M + 16) == 0);
        int32_t row = 0, rope0, last;
        if (path == 0) { /* fresh: everything in one forward */
            CHECK(forward_seq(m, &kv, &s, ids, P + M, 0, &row, 1, false, logits) == 0);
            CHECK(dflash_add_context(d, &fkv, P + M, pos, pos, seq, pos, 1, fseqs) == 0);
        } else { /* prompt, a discarded block, then the output in two verify-sized steps */
            CHECK(forward_seq(m, &kv, &s, ids, P, 0, &row, 1, false, logits) == 0);
            CHECK(dflash_add_context(d, &fkv, P, pos, pos, seq, pos, 1, fseqs) == 0);
            last = ids[P];
            rope0 = P;
            CHECK(dflash_draft(d, &fkv, 1, fseqs, &last, &rope0, &rope0, 16, drafts[1]) == 0);
            for (int from = P, step = 0; step < 2; step++) {
                int cnt = step ? P + M - from : 5;
                kv_seq_truncate(&fkv, &fs, from);
                CHECK(kv_seq_reserve(&fkv, &fs, from + cnt) == 0);
                CHECK(forward_seq(m, &kv, &s, ids + from, cnt, from, &row, 1, false, logits) == 0);
                CHECK(dflash_add_context(d, &fkv, cnt, pos + from, pos + from, seq, pos, 1, fseqs) == 0);
                from += cnt;
            }
        }
        last = ids[P + M];
        rope0 = P + M;
        CHECK(kv_seq_reserve(&fkv, &fs, P + M + 16) == 0);
        CHECK(dflash_draft(d, &fkv, 1, fseqs, &last, &rope0, &rope0, 16, drafts[path]) == 0);
        kv_seq_release(&kv, &s);
        kv_seq_release(&fkv, &fs);
        kv_cache_free(&kv);
        kv_cache_free(&fkv);
    }
    CHECK(!memcmp(drafts[0], drafts[1], sizeof drafts[0]));
    free(logits);
    dflash_fixture_close(&f);
}
