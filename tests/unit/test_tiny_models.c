/* test_tiny_models.c — kestrel's forward against transformers (float32) on
 * the tiny random-weight checkpoints of tests/fixtures/tiny (made by
 * tools/make_tiny_fixtures.py): Qwen3 (QK-norm, tied, bf16), Qwen2 (qkv
 * bias, f16), Llama 3 (llama3 rope scaling, old config layout, f32).
 * Tolerance: for every one of the 40 positions, max |kestrel - reference|
 * over the vocabulary <= 1e-4 x max |reference| of that row. Also run with
 * each SIMD kernel set the CPU supports. And the qwen3 fixture widened to
 * more query heads than the hidden size holds (heads x head_dim > hidden,
 * as in Qwen3-0.6B / 4B), the new heads adding exact zeros. */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "prefill_logits.h"
#include "test.h"

/* the checkpoint in dir (named `name` in messages) against its reference.json */
static double check_tiny_dir(const char *name, const char *dir, const char *device) {
    char refp[300];
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
        int32_t *ids = malloc((size_t)n * 4), *rows = malloc((size_t)n * 4);
        for (int i = 0; i < n; i++) {
            ids[i] = (int32_t)json_integer_value(json_array_get(pj, (size_t)i));
            rows[i] = i;
        }
        float *logits = malloc((size_t)n * V * sizeof *logits);
        CHECK(model_kv_init(m, &kv, 64) == 0);
        kv_seq s = {0};
        CHECK(forward_seq(m, &kv, &s, ids, n, 0, rows, n, false, logits) == 0);
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
        free(ids); free(rows); free(logits);
    }
    model_free(m);
    backend_free(be);
    json_decref(ref);
    return worst;
}

static double check_tiny(const char *name, const char *device) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/tiny/%s", name);
    return check_tiny_dir(name, dir, device);
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

/* Heads x head_dim unlike the hidden size (Qwen3-0.6B: 16 x 128 over 1024):
 * the qwen3 fixture widened from 4 to 8 query heads of 16 over its hidden
 * 64 — original heads 0, 1 of KV group 0 at 0, 1 and 2, 3 of group 1 at 4,
 * 5 (two query heads a KV head become four), the new heads' q rows and o
 * columns zero, so they add exact zeros and the logits stay transformers'
 * for the original (the sums' order moves: the same tolerance). */
static int write_widened_qwen3(const char *dst) {
    const char *src = "tests/fixtures/tiny/qwen3";
    st_set st;
    if (st_open_dir(&st, src) != 0) return -1;
    enum { HD = 16, H = 64, NH0 = 4, NH = 8 };
    static const int to[NH0] = {0, 1, 4, 5}; /* new position of original head i */
    json_t *hdr = json_object();
    size_t off = 0, cap = 0;
    unsigned char *data = NULL;
    int rc = 0;
    for (int i = 0; i < st.n_tensors && !rc; i++) {
        const st_tensor *t = &st.tensors[i];
        size_t nb = t->nbytes;
        int64_t shape[2] = {t->shape[0], t->n_dims > 1 ? t->shape[1] : 0};
        bool q = strstr(t->name, "self_attn.q_proj.weight") != NULL, o = strstr(t->name, "self_attn.o_proj.weight") != NULL;
        if (q) shape[0] = NH * HD;
        if (o) shape[1] = NH * HD;
        if (q || o) nb = (size_t)shape[0] * shape[1] * 2;
        if (off + nb > cap) {
            cap = (off + nb) * 2;
            unsigned char *d = realloc(data, cap);
            if (!d) { rc = -1; break; }
            data = d;
        }
        uint16_t *out = (uint16_t *)(data + off);
        const uint16_t *in = t->data;
        if (q) {
            memset(out, 0, nb);
            for (int h = 0; h < NH0; h++) memcpy(out + (size_t)to[h] * HD * H, in + (size_t)h * HD * H, (size_t)HD * H * 2);
        } else if (o) {
            memset(out, 0, nb);
            for (int r = 0; r < H; r++)
                for (int h = 0; h < NH0; h++)
                    memcpy(out + (size_t)r * NH * HD + to[h] * HD, in + (size_t)r * NH0 * HD + h * HD, HD * 2);
        } else {
            memcpy(out, t->data, nb);
        }
        json_t *e = json_pack("{s:s, s:[I], s:[I, I]}", "dtype", dtype_name(t->dtype), "shape", (json_int_t)shape[0],
                              "data_offsets", (json_int_t)off, (json_int_t)(off + nb));
        if (t->n_dims > 1) json_array_append_new(json_object_get(e, "shape"), json_integer(shape[1]));
        json_object_set_new(hdr, t->name, e);
        off += nb;
    }
    st_close(&st);
    char path[300], *h = rc ? NULL : json_dumps(hdr, JSON_COMPACT);
    json_decref(hdr);
    snprintf(path, sizeof path, "%s/model.safetensors", dst);
    FILE *f = h ? fopen(path, "wb") : NULL;
    if (f) {
        uint64_t hl = strlen(h);
        rc = fwrite(&hl, 8, 1, f) == 1 && fwrite(h, 1, hl, f) == hl && fwrite(data, 1, off, f) == off ? 0 : -1;
        fclose(f);
    } else {
        rc = -1;
    }
    free(h);
    free(data);
    if (rc) return rc;
    /* the config with 8 heads; the reference as it is */
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "sed 's/\"num_attention_heads\": 4/\"num_attention_heads\": 8/' %s/config.json > %s/config.json && "
             "grep -q '\"num_attention_heads\": 8' %s/config.json && cp %s/reference.json %s/",
             src, dst, dst, src, dst);
    return system(cmd) == 0 ? 0 : -1;
}

static void check_widened(const char *device) {
    char dir[] = "/tmp/ks-tiny-wide-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(write_widened_qwen3(dir) == 0);
    printf("    qwen3, 8 heads of 16 over hidden 64 [%s]: max rel err %.2e\n", device,
           check_tiny_dir("qwen3 widened", dir, device));
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

TEST(test_tiny_qwen3_wider_heads_than_hidden_match_transformers) { check_widened("cpu"); }

TEST(test_cuda_tiny_qwen3_wider_heads_than_hidden_match_transformers) {
    if (!backend_cuda_available()) SKIP("no CUDA GPU");
    check_widened("cuda");
}
