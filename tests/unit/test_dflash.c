/* test_dflash.c — tinycoder's DFlash block drafter against the reference
 * (../shared/models/tinycoder/dflash/dflash_report.json, transformers): for
 * each of the 3 prompts the first drafted block (15 tokens) after the prompt,
 * and loading refusals for drafters that do not fit the model. */
#include <jansson.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "base/err.h"
#include "model/dflash.h"
#include "model/model.h"
#include "sample/sample.h"
#include "test.h"

static void check_first_blocks(const char *device) {
    json_t *rep = json_load_file(test_shared_path("models/tinycoder/dflash/dflash_report.json"), 0, NULL);
    CHECK(rep != NULL);
    backend *be = NULL;
    model *m = NULL;
    dflash *d = NULL;
    CHECK(backend_new(&be, device, 2) == 0);
    if (be) CHECK(model_load(&m, test_shared_path("models/tinycoder"), be) == 0);
    if (m) CHECK(dflash_load(&d, test_shared_path("models/tinycoder/dflash"), m) == 0);
    if (!rep || !d) {
        json_decref(rep);
        dflash_free(d);
        model_free(m);
        backend_free(be);
        return;
    }
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
        kv_seq *seqs[1] = {&s}, *fseqs[1] = {&fs};
        CHECK(kv_seq_reserve(&kv, &s, n) == 0);
        int32_t last = n - 1;
        model_batch b = {n, ids, pos, seq, 1, seqs, 1, &last};
        CHECK(model_forward(m, &kv, &b, logits) == 0);
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
    dflash_free(d);
    CHECK_EQ_INT(m->n_feat, 0); /* the model stops keeping features */
    model_free(m);
    backend_free(be);
    json_decref(rep);
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
