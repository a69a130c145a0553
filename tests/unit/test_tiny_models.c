/* test_tiny_models.c — kestrel's forward against transformers (float32) on
 * the tiny random-weight checkpoints of tests/fixtures/tiny (made by
 * tools/make_tiny_fixtures.py): Qwen3 (QK-norm, tied, bf16), Qwen2 (qkv
 * bias, f16), Llama 3 (llama3 rope scaling, old config layout, f32).
 * Tolerance: for every one of the 40 positions, max |kestrel - reference|
 * over the vocabulary <= 1e-4 x max |reference| of that row. Also run with
 * each SIMD kernel set the CPU supports. */
#include <jansson.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "model/model.h"
#include "test.h"

static double check_tiny(const char *name, const char *device) {
    char dir[256], refp[300];
    snprintf(dir, sizeof dir, "tests/fixtures/tiny/%s", name);
    snprintf(refp, sizeof refp, "%s/reference.json", dir);
    json_t *ref = json_load_file(refp, 0, NULL);
    CHECK_MSG(ref != NULL, "%s: cannot read %s", name, refp);
    if (!ref) return 1;
    backend *be = NULL;
    model *m = NULL;
    kv_cache kv = {0};
    CHECK(backend_new(&be, device, 2) == 0);
    if (!be) { json_decref(ref); return 1; }
    if (!strcmp(device, "cpu")) CHECK(backend_set_kv_type(be, "f32") == 0); /* float32 attention, as the reference */
    int rc = model_load(&m, dir, be);
    CHECK_MSG(rc == 0, "%s: model_load failed", name);
    double worst = 1;
    if (m) {
        json_t *pj = json_object_get(ref, "prompt_ids"), *lj = json_object_get(ref, "logits");
        int n = (int)json_array_size(pj), V = m->cfg.vocab_size;
        int32_t *ids = malloc((size_t)n * 4), *pos = malloc((size_t)n * 4), *seq = calloc((size_t)n, 4),
                *rows = malloc((size_t)n * 4);
        for (int i = 0; i < n; i++) {
            ids[i] = (int32_t)json_integer_value(json_array_get(pj, (size_t)i));
            pos[i] = rows[i] = i;
        }
        float *logits = malloc((size_t)n * V * sizeof *logits);
        CHECK(model_kv_init(m, &kv, 64) == 0);
        kv_seq s = {0};
        kv_seq *seqs[1] = {&s};
        CHECK(kv_seq_reserve(&kv, &s, n) == 0);
        model_batch b = {n, ids, pos, seq, 1, seqs, n, rows, 0, NULL, false};
        CHECK(model_forward(m, &kv, &b, logits) == 0);
        worst = 0;
        for (int t = 0; t < n; t++) {
            json_t *row = json_array_get(lj, (size_t)t);
            CHECK_EQ_INT(json_array_size(row), V);
            double maxref = 0, maxerr = 0;
            for (int v = 0; v < V; v++) {
                double r = json_number_value(json_array_get(row, (size_t)v));
                double e = fabs(logits[(size_t)t * V + v] - r);
                if (fabs(r) > maxref) maxref = fabs(r);
                if (e > maxerr) maxerr = e;
            }
            double rel = maxerr / (maxref > 0 ? maxref : 1);
            if (rel > worst) worst = rel;
        }
        CHECK_MSG(worst <= TEST_LOGIT_TOL(be), "%s: logits max relative error %g > %g", name, worst,
                  TEST_LOGIT_TOL(be));
        kv_seq_release(&kv, &s);
        kv_cache_free(&kv);
        free(ids); free(pos); free(seq); free(rows); free(logits);
    }
    model_free(m);
    backend_free(be);
    json_decref(ref);
    return worst;
}

static void check_all_isas(const char *name) {
    const char *isas[] = {"scalar", "avx2", "avx512"};
    const char *old = getenv("KESTREL_CPU_ISA");
    for (int i = 0; i < 3; i++) {
        setenv("KESTREL_CPU_ISA", isas[i], 1);
        double e = check_tiny(name, "cpu");
        printf("    %s [%s]: max rel err %.2e\n", name, isas[i], e);
    }
    if (old) setenv("KESTREL_CPU_ISA", old, 1);
    else unsetenv("KESTREL_CPU_ISA");
}

TEST(test_tiny_qwen3_matches_transformers) { check_all_isas("qwen3"); }

TEST(test_cuda_tiny_models_match_transformers) {
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    const char *names[3] = {"qwen3", "qwen2", "llama3"};
    for (int i = 0; i < 3; i++) printf("    %s [cuda]: max rel err %.2e\n", names[i], check_tiny(names[i], "cuda"));
}
TEST(test_tiny_qwen2_matches_transformers) { check_all_isas("qwen2"); }
TEST(test_tiny_llama3_matches_transformers) { check_all_isas("llama3"); }
