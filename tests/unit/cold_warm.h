/* cold_warm.h — test helper: a model proposer's context through the prefix
 * cache. For the bench's first code prompts (completion.jsonl lines 0, 40,
 * 80), each request runs cold, then again (its prompt now in the prefix
 * cache): the warm run must come from the cache (every full block before
 * the last prompt token, less `lost` blocks the proposer has recomputed)
 * and draft and accept exactly what the cold run did (greedy drafts are a
 * function of the context), with the same text. Returns the drafts
 * accepted cold (the caller checks the proposer really drafted). */
#ifndef KS_TEST_COLD_WARM_H
#define KS_TEST_COLD_WARM_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine_drain.h"
#include "engine/engine.h"
#include "model/dflash.h"
#include "model/model.h"
#include "sample/sample.h"
#include "test.h"
#include "tok/tok.h"

static void cold_warm_run(engine *e, const int32_t *ids, int n, int32_t *out, int *n_out, engine_event *done) {
    engine_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = 48;
    sample_params_default(&p.sp);
    p.sp.temperature = 0;
    p.spec = -1; /* the engine's proposers */
    p.mtp = -1;
    engine_req *r = engine_submit(e, ids, n, &p);
    CHECK(r != NULL);
    *n_out = 0;
    memset(done, 0, sizeof *done);
    if (!r) return;
    int got = engine_drain(r, out, 48, done, NULL, NULL);
    *n_out = got < 48 ? got : 48;
    CHECK_EQ_INT(done->type, ENGINE_EV_DONE);
}

static int check_cold_warm(engine *e, const tokenizer *tk, int lost) {
    FILE *f = fopen(test_shared_path("models/tinycoder/prompts/completion.jsonl"), "r");
    CHECK(f != NULL);
    if (!f) return 0;
    static char line[65536];
    int cold_accepted = 0;
    for (int ln = 0; ln <= 80 && fgets(line, sizeof line, f); ln++) {
        if (ln % 40) continue;
        json_t *j = json_loads(line, 0, NULL);
        const char *text = json_string_value(json_object_get(j, "prompt"));
        int32_t *ids = NULL, a[48], b[48];
        int n = 0, na = 0, nb = 0;
        CHECK(text && tok_encode(tk, text, strlen(text), true, &ids, &n) == 0);
        if (n > 0 && n < 900) {
            engine_event cold, warm;
            cold_warm_run(e, ids, n, a, &na, &cold);
            cold_warm_run(e, ids, n, b, &nb, &warm);
            printf("    line %d, %d tokens: cold %d cached, %d of %d drafts accepted; warm %d cached, %d of %d\n", ln,
                   n, cold.n_cached, cold.n_accepted, cold.n_drafted, warm.n_cached, warm.n_accepted, warm.n_drafted);
            CHECK_EQ_INT(cold.n_cached, 0);
            CHECK(warm.n_cached >= ((n - 1) / 16 - lost) * 16);
            CHECK_EQ_INT(warm.n_drafted, cold.n_drafted);
            CHECK_EQ_INT(warm.n_accepted, cold.n_accepted);
            CHECK(na == nb && !memcmp(a, b, (size_t)na * sizeof *a));
            cold_accepted += cold.n_accepted;
        }
        free(ids);
        json_decref(j);
    }
    fclose(f);
    return cold_accepted;
}

/* The check on tinycoder's CPU engine with one model proposer: the DFlash
 * drafter (block 8) or the MTP head (depth 3; it recomputes one cached
 * block, lost 1). Returns the drafts accepted cold, 0 when a piece failed
 * to load (a CHECK has failed then). */
static int cold_warm_tinycoder(bool with_dflash) {
    backend *be = NULL;
    model *m = NULL;
    tokenizer *tk = NULL;
    dflash *d = NULL;
    engine *e = NULL;
    int accepted = 0;
    CHECK(backend_new(&be, "cpu", 2) == 0);
    if (be) CHECK(model_load(&m, test_shared_path("models/tinycoder"), be) == 0);
    if (m) CHECK(tok_load(&tk, test_shared_path("models/tinycoder")) == 0);
    if (m && with_dflash) CHECK(dflash_load(&d, test_shared_path("models/tinycoder/dflash"), m) == 0);
    if (m && !with_dflash) CHECK(m->mtp != NULL);
    engine_config ec = {.max_concurrent = 1, .prefill_chunk = 512, .ctx_size = 1024, .spec_min_repetition = 0.0,
                        .no_runtime_gates = true, .prefix_cache = true, .dflash = d, .dflash_block = 8,
                        .mtp = !with_dflash, .mtp_depth = 3};
    if (tk && (with_dflash ? d != NULL : m->mtp != NULL)) CHECK(engine_start(&e, m, tk, &ec) == 0);
    if (e) {
        accepted = check_cold_warm(e, tk, with_dflash ? 0 : 1);
        engine_stop(e);
    }
    dflash_free(d);
    tok_free(tk);
    model_free(m);
    backend_free(be);
    return accepted;
}

#endif
