/* test_model.c — the Llama-family forward on the CPU backend against the
 * transformers reference for tinycoder (reference/greedy.json: top-20 logits
 * at the last prompt position and 48 greedy tokens), plus batch invariance:
 * the same logits whatever the prefill chunking (DESIGN.md principle 2). */
#include <jansson.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "tok/tok.h"
#include "model/model.h"
#include "prefill_logits.h"
#include "engine_drain.h"
#include "test.h"

static json_t *load_reference(void) {
    const char *p = test_shared_path("models/tinycoder/reference/greedy.json");
    if (!p) return NULL;
    return json_load_file(p, 0, NULL);
}

static int32_t *json_ids(json_t *a, int *n) {
    *n = (int)json_array_size(a);
    int32_t *ids = malloc((size_t)*n * sizeof *ids);
    for (int i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return ids;
}

/* Runs one request through the engine and collects its tokens. */
static int engine_collect(engine *e, const int32_t *ids, int n, const engine_params *p, int32_t *out, int cap) {
    engine_req *r = engine_submit(e, ids, n, p);
    CHECK(r != NULL);
    if (!r) return 0;
    engine_event done;
    int got = engine_drain(r, out, cap, &done, NULL, NULL);
    CHECK(done.type == ENGINE_EV_DONE);
    return got < cap ? got : cap;
}

/* kv_type: the KV cache format ("f32", "bf16"; NULL: the backend's default) */
static void check_tinycoder(const char *device, const char *kv_type) {
    json_t *ref = load_reference();
    const char *dir = test_shared_path("models/tinycoder");
    backend *be = NULL;
    model *m = NULL;
    kv_cache kv = {0};
    CHECK(backend_new(&be, device, 0) == 0);
    if (!be) { json_decref(ref); return; }
    if (kv_type) CHECK(backend_set_kv_type(be, kv_type) == 0);
    CHECK(model_load(&m, dir, be) == 0);
    if (!m) { json_decref(ref); backend_free(be); return; }
    /* tinycoder ties lm_head to the embedding table: one backend copy */
    CHECK_MSG(m->cfg.tie_word_embeddings && m->lm_head.impl == m->embed.impl,
              "[%s] the tied lm_head has its own copy of the embedding table", device);
    CHECK(model_kv_init(m, &kv, 1024) == 0);
    tokenizer *tk = NULL;
    CHECK(tok_load(&tk, dir) == 0);
    engine *eng = NULL;
    engine_config ec = {.max_concurrent = 1, .prefill_chunk = 64, .ctx_size = 1024};
    CHECK(engine_start(&eng, m, tk, &ec) == 0);
    json_t *cases = json_object_get(ref, "cases");
    size_t ci;
    json_t *c;
    int total_match = 0, total = 0;
    json_array_foreach(cases, ci, c) {
        int n, ng;
        int32_t *ids = json_ids(json_object_get(c, "prompt_ids"), &n);
        int32_t *want = json_ids(json_object_get(c, "greedy_ids"), &ng);
        float *logits = prefill_logits(m, &kv, ids, n, 512, false);
        json_t *top = json_object_get(c, "last_logits_top20");
        json_t *tids = json_object_get(top, "ids"), *tvals = json_object_get(top, "values");
        double max_err = 0;
        for (size_t i = 0; i < json_array_size(tids); i++) {
            int id = (int)json_integer_value(json_array_get(tids, i));
            double v = json_real_value(json_array_get(tvals, i));
            double e = fabs(logits[id] - v) / (fabs(v) > 1 ? fabs(v) : 1);
            if (e > max_err) max_err = e;
        }
        /* the reference is float32 transformers printed with 5 decimals */
        CHECK_MSG(max_err < TEST_LOGIT_TOL(be), "[%s, %d-byte KV] case %zu: top-20 logits max rel err %g", device,
                  be->kv_elem_bytes, ci, max_err);
        engine_params p;
        memset(&p, 0, sizeof p);
        p.max_tokens = ng;
        sample_params_default(&p.sp);
        p.sp.temperature = 0;
        int32_t *got = calloc((size_t)ng, 4);
        int n_got = engine_collect(eng, ids, n, &p, got, ng);
        int match = 0;
        while (match < ng && match < n_got && got[match] == want[match]) match++;
        total_match += match;
        total += ng;
        CHECK_MSG(match == ng, "case %zu: %d of %d greedy tokens match", ci, match, ng);
        free(got);
        free(logits);
        free(ids);
        free(want);
    }
    printf("    tinycoder greedy [%s, %d-byte KV]: %d of %d tokens match transformers\n", device, be->kv_elem_bytes,
           total_match, total);
    engine_stop(eng);
    tok_free(tk);
    kv_cache_free(&kv);
    model_free(m);
    backend_free(be);
    json_decref(ref);
}

TEST(test_model_tinycoder_matches_transformers) {
    if (!test_shared_path("models/tinycoder/reference/greedy.json"))
        SKIP("../shared/models/tinycoder/reference/greedy.json not found");
    check_tinycoder("cpu", "f32");  /* the reference's own float32 attention */
    check_tinycoder("cpu", "bf16"); /* the default cache */
}

TEST(test_cuda_tinycoder_matches_transformers) {
    if (!test_shared_path("models/tinycoder/reference/greedy.json"))
        SKIP("../shared/models/tinycoder/reference/greedy.json not found");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    check_tinycoder("cuda", NULL);
}

static void check_chunking(const char *device) {
    json_t *ref = load_reference();
    backend *be = NULL;
    model *m = NULL;
    kv_cache kv = {0};
    CHECK(backend_new(&be, device, 2) == 0);
    if (!be) { json_decref(ref); return; }
    CHECK(model_load(&m, test_shared_path("models/tinycoder"), be) == 0);
    if (!m) { json_decref(ref); backend_free(be); return; }
    CHECK(model_kv_init(m, &kv, 512) == 0);
    int n;
    int32_t *ids = json_ids(json_object_get(json_array_get(json_object_get(ref, "cases"), 1), "prompt_ids"), &n);
    float *a = prefill_logits(m, &kv, ids, n, 512, false);
    int chunks[] = {1, 3, 16, 57};
    for (int i = 0; i < 4; i++) {
        float *b = prefill_logits(m, &kv, ids, n, chunks[i], false);
        CHECK_MSG(memcmp(a, b, (size_t)m->cfg.vocab_size * 4) == 0, "chunk %d: logits differ from one-shot prefill",
                  chunks[i]);
        free(b);
    }
    free(a);
    free(ids);
    kv_cache_free(&kv);
    model_free(m);
    backend_free(be);
    json_decref(ref);
}

TEST(test_model_chunking_is_bitwise_invariant) {
    if (!test_shared_path("models/tinycoder/reference/greedy.json"))
        SKIP("../shared/models/tinycoder/reference/greedy.json not found");
    check_chunking("cpu");
}

TEST(test_cuda_chunking_is_bitwise_invariant) {
    if (!test_shared_path("models/tinycoder/reference/greedy.json"))
        SKIP("../shared/models/tinycoder/reference/greedy.json not found");
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    check_chunking("cuda");
}
