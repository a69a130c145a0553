/* test_engine.c — the engine thread and scheduler on tinycoder: outputs of
 * concurrent requests equal their outputs alone (batching and preemption are
 * invisible at temperature 0), stop strings, seeded sampling is reproducible,
 * cancel returns every KV block, hostile requests are refused. */
#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend/backend.h"
#include "engine_drain.h"
#include "engine/engine.h"
#include "tok/tok.h"
#include "test.h"

typedef struct {
    backend *be;
    model *m;
    tokenizer *tk;
} fixture;

static int fx_open(fixture *f) {
    memset(f, 0, sizeof *f);
    const char *dir = test_shared_path("models/tinycoder");
    if (!dir) return 0;
    CHECK(backend_cpu_new(&f->be, 2) == 0);
    CHECK(model_load(&f->m, dir, f->be) == 0);
    CHECK(tok_load(&f->tk, dir) == 0);
    return f->m && f->tk;
}

static void fx_close(fixture *f) {
    tok_free(f->tk);
    model_free(f->m);
    backend_free(f->be);
}

typedef struct {
    int32_t toks[256];
    int n;
    char text[4096];
    size_t len;
    engine_event done;
} result;

/* an event's text appended to the result (as far as its buffer holds) */
static void keep_text(const engine_event *ev, void *arg) {
    result *res = arg;
    if (ev->len && res->len + ev->len < sizeof res->text) {
        memcpy(res->text + res->len, ev->text, ev->len);
        res->len += ev->len;
    }
}

/* r's events to its end (engine_drain) into res: its first 256 tokens, its
 * text, the ending event; r released */
static void drain(engine_req *r, result *res) {
    memset(res, 0, sizeof *res);
    int n = engine_drain(r, res->toks, 256, &res->done, keep_text, res);
    res->n = n < 256 ? n : 256;
}

static const char *prompts[] = {
    "def quicksort(arr):\n", "#include <stdio.h>\n\nint main(void) {\n",
    "import os\nimport sys\n\n\ndef main():\n    args = sys.argv[1:]\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n",
    "static int parse_header(const char *buf, size_t len, struct header *out) {\n    if (len < 8)\n",
    "for i in range(10):\n", "struct node {\n    int key;\n", "# Compute the mean of a list\ndef mean(xs):\n",
};

/* The fixture, an engine with config ec, and prompts[prompt] encoded; 0
 * when ../shared is absent (the caller SKIPs). */
static int setup(fixture *f, const engine_config *ec, engine **e, int prompt, int32_t **ids, int *n) {
    *e = NULL;
    *ids = NULL;
    if (!fx_open(f)) return 0;
    CHECK(engine_start(e, f->m, f->tk, ec) == 0);
    CHECK(tok_encode(f->tk, prompts[prompt], strlen(prompts[prompt]), true, ids, n) == 0);
    return 1;
}

/* one request start to end: submit, drain, release */
static void run_req(engine *e, const int32_t *ids, int n, const engine_params *p, result *res) {
    engine_req *r = engine_submit(e, ids, n, p);
    CHECK(r != NULL);
    if (!r) {
        memset(res, 0, sizeof *res);
        return;
    }
    drain(r, res);
}


#define N_PROMPTS 8

static engine_params greedy(int n) {
    engine_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = n;
    sample_params_default(&p.sp);
    p.sp.temperature = 0;
    return p;
}

static long long run_all(fixture *f, engine_config ec, const engine_params *p, result *out) {
    engine *e = NULL;
    CHECK(engine_start(&e, f->m, f->tk, &ec) == 0);
    if (!e) return 0;
    engine_req *reqs[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++) {
        int32_t *ids;
        int n;
        CHECK(tok_encode(f->tk, prompts[i], strlen(prompts[i]), true, &ids, &n) == 0);
        reqs[i] = engine_submit(e, ids, n, p);
        CHECK(reqs[i] != NULL);
        free(ids);
    }
    for (int i = 0; i < N_PROMPTS; i++) {
        if (reqs[i]) drain(reqs[i], &out[i]);
    }
    engine_stats st;
    engine_get_stats(e, &st);
    engine_stop(e);
    return st.preemptions;
}

TEST(test_engine_batching_and_preemption_are_invisible) {
    fixture f;
    if (!fx_open(&f)) SKIP("../shared/models/tinycoder not found");
    engine_params p = greedy(40);
    result alone[N_PROMPTS], batched[N_PROMPTS], tight[N_PROMPTS];
    engine_config one = {.max_concurrent = 1, .prefill_chunk = 512, .ctx_size = 512};
    engine_config four = {.max_concurrent = 8, .prefill_chunk = 24, .ctx_size = 512}; /* all 8 at once */
    /* a pool of 96 KV tokens for 4 sequences of up to ~70 tokens each:
     * sequences are preempted and recomputed, the rest wait in the queue */
    engine_config small = {.max_concurrent = 4, .prefill_chunk = 16, .ctx_size = 96, .kv_tokens = 96};
    run_all(&f, one, &p, alone);
    run_all(&f, four, &p, batched);
    long long pre = run_all(&f, small, &p, tight);
    CHECK_MSG(pre > 0, "expected preemptions with a 96-token KV pool, got %lld", pre);
    printf("    %lld preemptions with a 96-token KV pool\n", pre);
    for (int i = 0; i < N_PROMPTS; i++) {
        CHECK_EQ_INT(alone[i].n, 40);
        CHECK_MSG(alone[i].n == batched[i].n && !memcmp(alone[i].toks, batched[i].toks, alone[i].n * 4),
                  "prompt %d: batched output differs from alone", i);
        CHECK_MSG(alone[i].n == tight[i].n && !memcmp(alone[i].toks, tight[i].toks, alone[i].n * 4),
                  "prompt %d: output with preemption differs from alone (%d vs %d tokens)", i, tight[i].n, alone[i].n);
        CHECK(alone[i].len == batched[i].len && !memcmp(alone[i].text, batched[i].text, alone[i].len));
        CHECK_EQ_INT(alone[i].done.finish, ENGINE_FINISH_LENGTH);
    }
    fx_close(&f);
}

TEST(test_engine_stop_strings_and_text) {
    fixture f;
    engine *e;
    engine_config ec = {.max_concurrent = 2, .prefill_chunk = 64, .ctx_size = 512};
    int32_t *ids;
    int n;
    if (!setup(&f, &ec, &e, 3, &ids, &n)) SKIP("../shared/models/tinycoder not found");
    engine_params p = greedy(60);
    result full, cut;
    run_req(e, ids, n, &p, &full);
    /* the streamed text equals decoding the tokens */
    char *dec;
    size_t dl;
    CHECK(tok_decode(f.tk, full.toks, full.n, true, &dec, &dl) == 0);
    CHECK(dl == full.len && !memcmp(dec, full.text, dl));
    /* stop at a string from the middle of the output (spanning tokens) */
    CHECK(full.len > 30);
    char stop[8];
    memcpy(stop, full.text + 20, 5);
    stop[5] = 0;
    const char *first = strstr(full.text, stop);
    p.stop[0] = "never-appears-xyz";
    p.stop[1] = stop;
    p.n_stop = 2;
    run_req(e, ids, n, &p, &cut);
    CHECK_EQ_INT(cut.done.finish, ENGINE_FINISH_STOP);
    CHECK_EQ_INT(cut.len, (size_t)(first - full.text));
    CHECK(!memcmp(cut.text, full.text, cut.len));
    CHECK(cut.n < full.n);
    free(dec);
    free(ids);
    engine_stop(e);
    fx_close(&f);
}

TEST(test_engine_seeded_sampling_reproducible) {
    fixture f;
    engine *e;
    engine_config ec = {.max_concurrent = 2, .prefill_chunk = 64, .ctx_size = 256};
    int32_t *ids;
    int n;
    if (!setup(&f, &ec, &e, 0, &ids, &n)) SKIP("../shared/models/tinycoder not found");
    engine_params p = greedy(32);
    p.sp.temperature = 1.0f;
    p.sp.top_p = 0.95f;
    p.seed = 42;
    result a, b, c;
    run_req(e, ids, n, &p, &a);
    run_req(e, ids, n, &p, &b);
    p.seed = 43;
    run_req(e, ids, n, &p, &c);
    CHECK(a.n == b.n && !memcmp(a.toks, b.toks, a.n * 4));
    CHECK(a.n != c.n || memcmp(a.toks, c.toks, a.n * 4) != 0);
    free(ids);
    engine_stop(e);
    fx_close(&f);
}

TEST(test_engine_cancel_frees_blocks_and_refuses_bad_requests) {
    fixture f;
    engine *e;
    engine_config ec = {.max_concurrent = 2, .prefill_chunk = 64, .ctx_size = 256};
    int32_t *ids;
    int n;
    if (!setup(&f, &ec, &e, 1, &ids, &n)) SKIP("../shared/models/tinycoder not found");
    engine_params p = greedy(200);
    engine_req *r = engine_submit(e, ids, n, &p);
    engine_event ev;
    engine_next_event(r, &ev, -1);
    CHECK_EQ_INT(ev.type, ENGINE_EV_TOKEN);
    engine_event_clear(&ev);
    engine_req_release(r); /* client gone mid-stream */
    engine_stats st;
    int ok = 0;
    for (int i = 0; i < 200 && !ok; i++) {
        usleep(10000);
        engine_get_stats(e, &st);
        ok = st.active == 0 && st.kv_blocks_free == st.kv_blocks_total;
    }
    CHECK_MSG(ok, "after cancel: %d active, %d of %d KV blocks free", st.active, st.kv_blocks_free, st.kv_blocks_total);
    /* refused: empty prompt, prompt >= context, ids outside the vocabulary, max_tokens 0 */
    CHECK(engine_submit(e, ids, 0, &p) == NULL);
    int32_t *big = calloc(300, 4);
    CHECK(engine_submit(e, big, 300, &p) == NULL);
    int32_t bad[2] = {5, 999999};
    CHECK(engine_submit(e, bad, 2, &p) == NULL);
    p.max_tokens = 0;
    CHECK(engine_submit(e, ids, n, &p) == NULL);
    free(big);
    free(ids);
    engine_stop(e);
    fx_close(&f);
}

/* KV exhaustion: requests whose KV does not fit wait in the queue (never an
 * error, never a truncation) and complete once blocks free up; a prompt that
 * can never fit the context is refused at submit. */
TEST(test_engine_kv_exhaustion_queues) {
    fixture f;
    if (!fx_open(&f)) SKIP("../shared/models/tinycoder not found");
    engine *e = NULL;
    /* 64 KV tokens: room for one 8-token prompt + 40 tokens at a time */
    engine_config ec = {.max_concurrent = 4, .prefill_chunk = 64, .ctx_size = 64, .kv_tokens = 64};
    CHECK(engine_start(&e, f.m, f.tk, &ec) == 0);
    int32_t *ids;
    int n;
    CHECK(tok_encode(f.tk, prompts[0], strlen(prompts[0]), true, &ids, &n) == 0);
    engine_params p = greedy(40);
    engine_req *r[3];
    for (int i = 0; i < 3; i++) r[i] = engine_submit(e, ids, n, &p);
    result out[3];
    for (int i = 0; i < 3; i++) {
        CHECK(r[i] != NULL);
        if (r[i]) drain(r[i], &out[i]);
        CHECK_EQ_INT(out[i].done.type, ENGINE_EV_DONE);
        CHECK_EQ_INT(out[i].n, 40);
        CHECK(!memcmp(out[i].toks, out[0].toks, 40 * 4));
    }
    engine_stats st;
    for (int i = 0; i < 200; i++) { /* the engine frees after the last event */
        engine_get_stats(e, &st);
        if (st.kv_blocks_free == st.kv_blocks_total) break;
        usleep(10000);
    }
    CHECK_EQ_INT(st.kv_blocks_free, st.kv_blocks_total);
    int32_t *big = calloc(64, 4);
    CHECK(engine_submit(e, big, 64, &p) == NULL); /* >= the context: refused */
    free(big);
    free(ids);
    engine_stop(e);
    fx_close(&f);
}
